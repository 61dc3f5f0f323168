-- deduct.lua (after lib/critical.lua): the lock-free variant. Checks the stock (and the
-- buyer's limit, and the idempotency key's claim), takes units and records their orders in
-- one atomic step, so no lock is needed. One call serves one or more deductions of one or
-- more products (an instance sends together the ones that arrived while its previous call
-- was in flight; on a Redis Cluster, of one product only, every key of a call on one slot),
-- product by product, a line each; each deduction still takes exactly one unit or none.
--
-- Per line, its keys, then its arguments (KEYS[1..] and ARGV[3..] below count from the
-- line's first):
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
-- ARGV[1]  instance id (the call's, once)
-- ARGV[2]  variant name (the call's, once)
-- ARGV[3]  the line's number of deductions, n
-- ARGV[4..] per deduction, first come first served, four arguments: an order id, its buyer
--          ('' for none), its holder id and its idempotency key ('' for none)
--
-- An order id already sold is answered 1 and sold nothing more: a call sent again (by a
-- client library, after a dropped connection) sells nothing twice. A voided one is 'voided'.
--
-- The steps are lib/critical.lua's (`unsold`, `over_limit`, `keyed`, `record`,
-- `keyed_sale`), batch-aware: what they write is collected and written once (`flush`). A
-- sale after `/admin/close` is counted (`sold_after_close`), as under a lock.
--
-- Returns: per line, {units in stock before this call, then per deduction 1 (sold), 0
--          (sold out), or why it sold nothing: 'limit_reached', 'user_required',
--          'taken_over' or 'voided' (as lib/critical.lua's `sell`)}; the i-th unit sold
--          leaves `stock - i`. {} when there is no stock key (never reset, or Redis lost
--          it: not for sale); 'line failed: <error>' when the line raised an error.
local instance, variant = ARGV[1], ARGV[2]

-- How many keys the line whose count of deductions is ARGV[a] takes: its nine, and a
-- claim for each deduction that carries an idempotency key.
local function keys_of(a)
  local taken = 9
  for i = a + 1, a + 4 * tonumber(ARGV[a]), 4 do
    if ARGV[i + 3] ~= '' then
      taken = taken + 1
    end
  end
  return taken
end

-- One line: the product whose keys start after KEYS[k] and whose count of deductions is
-- ARGV[a], its deductions after it. Returns its answers.
local function line(k, a)
  local n = tonumber(ARGV[a])
  local K = {}
  for i = 1, 9 do
    K[i] = KEYS[k + i]
  end
  local stock = redis.call('GET', K[1])
  if not stock then
    return {}
  end
  stock = tonumber(stock)
  local left = stock
  local answers = { stock }
  local sold_out, refused = 0, 0
  local claims = k + 9
  -- The line's sales, written once at the end (lib/critical.lua's `batch`); the sale's
  -- terms (`terms`) read at the first sale, and its orders streamed in one entry at the end.
  local call = { lines = {} }
  local batch = { bought = {}, sold = 0, orders = {}, closed = 0 }
  local limit = per_user(K[4], batch)
  -- Which of the line's order ids were sold already, and whether any order id of the
  -- product was ever voided: read once per line, not once per deduction.
  local ids = {}
  for i = a + 1, a + 4 * n, 4 do
    ids[#ids + 1] = ARGV[i]
  end
  local already = redis.call('HMGET', K[2], unpack(ids))
  local void = redis.call('EXISTS', K[9]) == 1 and K[9] or nil
  -- The sale of every deduction without an idempotency key: one table, not one each.
  local unkeyed = { key = '', split = '0', keys = K[6], shard = '0', stream = K[7],
    unpaid = K[8], call = call }
  local j = 0
  for i = a + 1, a + 4 * n, 4 do
    j = j + 1
    local order, user, holder = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local sale = unkeyed
    if ARGV[i + 3] ~= '' then
      sale = { key = ARGV[i + 3], split = '0', keys = K[6], shard = '0',
        stream = K[7], unpaid = K[8], call = call }
      claims = claims + 1
      sale.claim = KEYS[claims]
    end
    -- Sold by an earlier send of this same call: sold, and nothing more.
    local answer = unsold(K[1], K[2], void, order, already[j] ~= false)
    if answer then
      answer = answer == 'voided' and answer or 1
    else
      -- A buyer is refused at their limit only while there is stock to refuse them: once
      -- it is gone, every buyer is sold out alike.
      if limit > 0 and (user == '' or left > 0) then
        answer = over_limit(K[4], K[5], user, batch)
      end
      if answer then
        refused = refused + (answer == 'limit_reached' and 1 or 0)
      elseif left <= 0 then
        answer = 0
        sold_out = sold_out + 1
      else
        answer = keyed(sale, K[3], holder)
      end
      if not answer then
        answer = 1
        left = left - 1
        record(K[2], K[5], K[3], order, instance, variant, user, sale, batch)
        keyed_sale(sale, K[3], order, instance, left)
      end
    end
    answers[#answers + 1] = answer
  end
  flush(batch, K[1], K[2], K[3], instance, variant)
  if #call.lines > 0 then
    stream_orders(K[7], call, '0', instance, variant, table.concat(call.lines, ','))
  end
  if sold_out > 0 then
    redis.call('HINCRBY', K[3], 'sold_out', sold_out)
  end
  if refused > 0 then
    redis.call('HINCRBY', K[3], 'limit_reached', refused)
  end
  return answers
end

-- A line that fails (a key of another type, a stock that is not a number) fails alone:
-- the lines before it have sold, and the lines after it still sell; its deductions are
-- answered with the error, as a call of their own would have been.
local replies = {}
local k, a = 0, 3
while a <= #ARGV do
  local ok, answers = pcall(line, k, a)
  if not ok then
    answers = 'line failed: ' .. (type(answers) == 'table' and answers.err or tostring(answers))
  end
  replies[#replies + 1] = answers
  k = k + keys_of(a)
  a = a + 1 + 4 * tonumber(ARGV[a])
end
return replies
