-- deduct.lua (after lib/critical.lua): the lock-free variant. Checks the stock (and the
-- buyer's limit, and the idempotency key's claim), takes units and records their orders in
-- one atomic step, so no lock is needed. One call serves one or more deductions of one
-- product (an instance sends together the ones that arrived while its previous call was in
-- flight); each still takes exactly one unit or none.
--
-- KEYS[1]  stock   (string: units left)
-- KEYS[2]  orders  (hash: order id -> "instance variant[ user]")
-- KEYS[3]  audit   (hash of counters: `sold/<instance>/<variant>` for sales, `sold_out`
--                   for deductions that found nothing, `limit_reached` for buyers at
--                   their limit; '/' cannot occur in an instance id or a variant name)
-- KEYS[4]  meta    (the product's: `per_user`, units one buyer may have; none: no limit)
-- KEYS[5]  buyers  (hash: user -> units sold to them)
-- KEYS[6]  keys    (hash: idempotency key -> order)
-- KEYS[7]  stream  (the orders stream, written when the sale is streamed)
-- KEYS[8]  unpaid  (sorted set: order -> deadline to pay by, with a payment window)
-- KEYS[9]  void    (hash: order ids voided after their answer was lost: never sold)
-- KEYS[10..] the claims of the deductions that carry an idempotency key, in their order
-- ARGV[1]  instance id
-- ARGV[2]  variant name
-- ARGV[3..] per deduction, first come first served, four arguments: an order id, its buyer
--          ('' for none), its holder id and its idempotency key ('' for none)
--
-- An order id already sold is answered 1 and sold nothing more: a call sent again (by a
-- client library, after a dropped connection) sells nothing twice. A voided one is 'voided'.
--
-- Returns: {units in stock before this call, then per deduction 1 (sold), 0 (sold out),
--          or why it sold nothing: 'limit_reached', 'user_required', 'taken_over' or
--          'voided' (as lib/critical.lua's `sell`)}; the i-th unit sold leaves
--          `stock - i`. nil when there is no stock key (never reset, or Redis lost it: not
--          for sale).
local stock = redis.call('GET', KEYS[1])
if not stock then
  return false
end
stock = tonumber(stock)
local limit = tonumber(redis.call('HGET', KEYS[4], 'per_user') or '0')
local who = ARGV[1] .. ' ' .. ARGV[2]
local left = stock
local answers = { stock }
local orders = {}
local bought = {}
local sold, sold_out, refused = 0, 0, 0
local claims = 9
-- The sale's terms (lib/critical.lua's `terms`): read at the first sale, once per call;
-- the call's orders, streamed in one entry at the end.
local call = { lines = {} }
-- Which of the call's order ids were sold already, and whether any order id of the product
-- was ever voided: read once per call, not once per deduction.
local ids = {}
for i = 3, #ARGV, 4 do
  ids[#ids + 1] = ARGV[i]
end
local already = redis.call('HMGET', KEYS[2], unpack(ids))
local voids = redis.call('EXISTS', KEYS[9]) == 1
-- The sale of every deduction without an idempotency key: one table, not one each.
local unkeyed = { key = '', split = '0', keys = KEYS[6], shard = '0', stream = KEYS[7],
  unpaid = KEYS[8], call = call }
local n = 0
for i = 3, #ARGV, 4 do
  n = n + 1
  local order, user, holder = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local sale = unkeyed
  if ARGV[i + 3] ~= '' then
    sale = { key = ARGV[i + 3], split = '0', keys = KEYS[6], shard = '0',
      stream = KEYS[7], unpaid = KEYS[8], call = call }
    claims = claims + 1
    sale.claim = KEYS[claims]
  end
  local answer
  if already[n] then
    -- Sold by an earlier send of this same call: sold, and nothing more.
    answer = 1
  elseif voids and redis.call('HEXISTS', KEYS[9], order) == 1 then
    answer = 'voided'
  else
    if limit > 0 and user == '' then
      answer = 'user_required'
    elseif limit > 0 and left > 0 then
      if not bought[user] then
        bought[user] = tonumber(redis.call('HGET', KEYS[5], user) or '0')
      end
      if bought[user] >= limit then
        answer = 'limit_reached'
      end
    end
    if answer then
      refused = refused + (answer == 'limit_reached' and 1 or 0)
    elseif left <= 0 then
      answer = 0
      sold_out = sold_out + 1
    else
      answer = keyed(sale, KEYS[3], holder)
    end
    if not answer then
      answer = 1
      left = left - 1
      sold = sold + 1
      orders[#orders + 1] = order
      if user ~= '' then
        orders[#orders + 1] = who .. ' ' .. user
        bought[user] = (bought[user] or 0) + 1
        redis.call('HINCRBY', KEYS[5], user, 1)
      else
        orders[#orders + 1] = who
      end
      ordered(sale, KEYS[3], order, ARGV[1], ARGV[2], user)
      keyed_sale(sale, KEYS[3], order, ARGV[1], left)
    end
  end
  answers[#answers + 1] = answer
end
if sold > 0 then
  redis.call('DECRBY', KEYS[1], sold)
  redis.call('HSET', KEYS[2], unpack(orders))
  redis.call('HINCRBY', KEYS[3], 'sold/' .. ARGV[1] .. '/' .. ARGV[2], sold)
end
if #call.lines > 0 then
  stream_orders(KEYS[7], call, '0', ARGV[1], ARGV[2], table.concat(call.lines, ','))
end
if sold_out > 0 then
  redis.call('HINCRBY', KEYS[3], 'sold_out', sold_out)
end
if refused > 0 then
  redis.call('HINCRBY', KEYS[3], 'limit_reached', refused)
end
return answers
