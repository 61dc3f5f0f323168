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
--                   their limit; '/' cannot occur in an instance id or a variant name;
--                   and the sale's terms, read once a line: lib/critical.lua's `terms`)
-- KEYS[4]  meta    (the product's: `per_user`, units one buyer may have; none: no limit;
--                   read only when the audit has no `per_user`, a sale reset before the
--                   reset wrote it there)
-- KEYS[5]  buyers  (hash: user -> units sold to them)
-- KEYS[6]  keys    (hash: idempotency key -> order)
-- KEYS[7]  stream  (the orders stream, written when the sale is streamed)
-- KEYS[8]  unpaid  (sorted set: order -> deadline to pay by, with a payment window)
-- KEYS[9]  void    (hash: order ids voided after their answer was lost: never sold;
--                   looked in only when the audit counts one, `voided`)
-- KEYS[10..] the claims of the deductions that carry an idempotency key, in their order
-- ARGV[1]  instance id (the call's, once)
-- ARGV[2]  variant name (the call's, once)
-- ARGV[3]  the line's number of deductions, n
-- ARGV[4..] per deduction, first come first served, four arguments: an order id, its buyer
--          ('' for none), its holder id (read only with a key: '' without one) and its
--          idempotency key ('' for none)
--
-- An order id already sold is answered 1 and sold nothing more: a call sent again (by a
-- client library, after a dropped connection) sells nothing twice. A voided one is 'voided'.
--
-- The steps are lib/critical.lua's (`over_limit`, `keyed`, `record`, `keyed_sale`),
-- batch-aware: a line checks every deduction first and writes nothing until it is done;
-- then the units and the orders, and after them what follows a sale (`flush`, the keyed
-- sales, the stream). A sale after `/admin/close` is counted (`sold_after_close`), as
-- under a lock.
--
-- Returns: per line, {units in stock before this call, then per deduction 1 (sold), 0
--          (sold out), or why it sold nothing: 'limit_reached', 'user_required',
--          'taken_over' or 'voided' (as lib/critical.lua's `sell`)}; the i-th unit sold
--          leaves `stock - i`. {} when there is no stock key (never reset, or Redis lost
--          it: not for sale); 'line failed: <error>' when the line raised an error.
local instance, variant = ARGV[1], ARGV[2]
-- An order's value and the audit's count of the call's sales, made once a call. (A count of
-- one is passed to Redis as '1': a Lua number is written out with printf at every call.)
local sold_by, sold_count = instance .. ' ' .. variant, 'sold/' .. instance .. '/' .. variant

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

-- Made once a call, and set anew for each line where a line's product differs (its keys,
-- its terms: `terms` reads them again once `epoch` is cleared, and leaves `per_user` and
-- `lines` alone, so the line clears them too): a sale spread over many products pays for a
-- line per product, so a line makes few tables.
local call = { lines = nil, epoch = nil, streaming = nil, pay_within = nil, closed = nil,
  per_user = nil, voided = nil, now = nil }
local sale = { key = '', split = '0', keys = nil, shard = '0', stream = nil, unpaid = nil,
  call = call, claim = nil }

-- A stock DECRBY takes: a whole number as Redis writes one (no sign but '-', no leading
-- zero; at most 18 characters, well inside a 64-bit integer). Checked before the line
-- writes anything, so that a stock written by hand fails the line (and nothing is answered
-- from it) before a buyer's count, a key's sale or a sold-out count is written.
local function whole(stock)
  return stock == '0' or (#stock <= 18 and string.match(stock, '^%-?[1-9]%d*$') ~= nil)
end

-- Whether the deduction whose arguments follow ARGV[a] is a plain one, on a plain sale: no
-- buyer, no key; and the line's terms (read into `call`) set no buyer limit (the reset
-- wrote 0), no payment window, no stream, no close and no voided order id. Most of a sale
-- spread over many products is lines of one such deduction.
local function plain(a)
  return ARGV[a + 2] == '' and ARGV[a + 4] == '' and call.per_user == 0
    and call.pay_within <= 0 and not call.streaming and not call.closed and not call.voided
end

-- A line of one plain deduction: what the steps of `line` below come to for it, written
-- out (a line of them costs a third less without the steps' tables). Sold already (an
-- earlier send of this same call): sold, and nothing more; else, with stock, one unit
-- taken, its order recorded and counted; without, counted sold out.
--
-- With stock, the order is the first write: HSETNX both looks the id up and records it, one
-- command where a look-up and a write are two (the order id is a hash field seldom in the
-- processor's cache: under load the line's costliest command). Nothing a plain sale writes
-- comes before it, and the DECRBY after it cannot fail (the stock was checked a whole
-- number); a count that is not a number can, after the sale is made, which the look-up
-- then finds.
local function plain_sale(stock, stock_key, orders, audit, order)
  if stock <= 0 then
    if redis.call('HEXISTS', orders, order) == 1 then
      return { stock, 1 }
    end
    redis.call('HINCRBY', audit, 'sold_out', '1')
    return { stock, 0 }
  end
  if redis.call('HSETNX', orders, order, sold_by) == 0 then
    return { stock, 1 }
  end
  redis.call('DECRBY', stock_key, '1')
  redis.call('HINCRBY', audit, sold_count, '1')
  return { stock, 1 }
end

-- One line: the product whose keys start after KEYS[k] and whose count of deductions is
-- ARGV[a], its deductions after it. Returns its answers.
local function line(k, a)
  local n = tonumber(ARGV[a])
  local stock_key, orders, audit, meta = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local buyers = KEYS[k + 5]
  local stock = redis.call('GET', stock_key)
  if not stock then
    return {}
  end
  if not whole(stock) then
    error('the stock is not a whole number')
  end
  stock = tonumber(stock)
  -- The line's terms (lib/critical.lua's `terms`: the limit and the void mark with them),
  -- read once; its sales, written once at the end, the units and the orders first
  -- (`flush`), then the counts, the buyers', the unpaid entries, the keyed sales and the
  -- stream's one entry. `sale` serves every deduction of the line: its key and claim are
  -- set for each.
  call.epoch, call.per_user, call.lines = nil, nil, nil
  sale.keys, sale.stream, sale.unpaid = KEYS[k + 6], KEYS[k + 7], KEYS[k + 8]
  terms(sale, audit)
  if call.streaming then
    call.lines = {}
  end
  if n == 1 and plain(a) then
    return plain_sale(stock, stock_key, orders, audit, ARGV[a + 1])
  end
  local left = stock
  local answers = { stock }
  local sold_out, refused = 0, 0
  local claims = k + 9
  local batch = { limit = call.per_user, bought = nil, sold = 0, orders = {}, closed = 0 }
  local limit = per_user(meta, batch)
  if limit > 0 then
    batch.bought = {}
  end
  -- Which of the line's order ids were sold already: read once per line, not once per
  -- deduction. The void hash is looked in only when an order id of the product was ever
  -- voided (and no voided id was ever sold: lua/resolve.lua voids only one it did not find).
  local already
  if n == 1 then
    already = { redis.call('HEXISTS', orders, ARGV[a + 1]) == 1 }
  else
    local ids = {}
    for i = a + 1, a + 4 * n, 4 do
      ids[#ids + 1] = ARGV[i]
    end
    already = redis.call('HMGET', orders, unpack(ids))
  end
  local void = call.voided and KEYS[k + 9] or nil
  -- The keyed sales' keys, claims, orders and units left, in order (written after the
  -- orders), and by key (a key sells once).
  local keyed_sales
  local j = 0
  for i = a + 1, a + 4 * n, 4 do
    j = j + 1
    local order, user, holder, key = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    sale.key = key
    sale.claim = nil
    if key ~= '' then
      claims = claims + 1
      sale.claim = KEYS[claims]
    end
    local answer
    if already[j] ~= false then
      -- Sold by an earlier send of this same call: sold, and nothing more.
      answer = 1
    elseif void and redis.call('HEXISTS', void, order) == 1 then
      answer = 'voided'
    else
      -- A buyer is refused at their limit only while there is stock to refuse them: once
      -- it is gone, every buyer is sold out alike.
      if limit > 0 and (user == '' or left > 0) then
        answer = over_limit(meta, buyers, user, batch)
      end
      if answer then
        refused = refused + (answer == 'limit_reached' and 1 or 0)
      elseif left <= 0 then
        answer = 0
        sold_out = sold_out + 1
      else
        answer = keyed(sale, audit, holder)
        -- A key sold earlier in this line: its claim is answered only after the loop.
        if not answer and key ~= '' and keyed_sales and keyed_sales[key] then
          answer = 'taken_over'
        end
      end
      if not answer then
        answer = 1
        left = left - 1
        record(orders, buyers, audit, order, instance, variant, user, sale, batch)
        if key ~= '' then
          keyed_sales = keyed_sales or {}
          keyed_sales[#keyed_sales + 1] = { key, sale.claim, order, left }
          keyed_sales[key] = true
        end
      end
    end
    answers[#answers + 1] = answer
  end
  flush(batch, stock_key, orders, audit, instance, variant, buyers, sale.unpaid)
  if keyed_sales then
    for _, s in ipairs(keyed_sales) do
      sale.key, sale.claim = s[1], s[2]
      keyed_sale(sale, audit, s[3], instance, s[4])
    end
  end
  if call.lines and #call.lines > 0 then
    stream_orders(sale.stream, call, '0', instance, variant, table.concat(call.lines, ','))
  end
  if sold_out > 0 then
    redis.call('HINCRBY', audit, 'sold_out', sold_out)
  end
  if refused > 0 then
    redis.call('HINCRBY', audit, 'limit_reached', refused)
  end
  return answers
end

-- A line that fails (a key of another type, a stock that is not a whole number) fails alone:
-- the lines before it have sold, and the lines after it still sell. Its deductions are
-- answered with the error, and the service looks each one's order id up (lua/resolve.lua):
-- a line fails before it writes anything, or, on a write after its orders, with its sales
-- made.
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
