-- lib/critical.lua: entering and leaving a critical section, with the audit around it, as
-- Lua functions. Not a script by itself: src/scripts/mod.rs puts it in front of each script
-- in lua/ that uses it, so every step is written once.
--
-- The keys of one shard, all on one slot:
--   stock   string: units left
--   inside  sorted set: holder id -> the time (ms) it must have left by; a holder that dies
--           inside stops counting as inside after that
--   orders  hash: order id -> "instance variant"
--   audit   hash of counters: `sold/<instance>/<variant>`, `lock_overlaps`, `lock_lost`,
--           `fenced`, `voided` (order ids lua/resolve.lua voided); and the sale's terms,
--           written by its reset (`terms` below)
--   fence   hash: `issued`, the last fencing token handed out, and `seen`, the highest one
--           that has read or written the stock
--   buyers  hash: user -> units sold to them here, written with each order
--   meta    the product's meta hash (`per_user`: units one user may buy, 0 or none for no
--           limit) when the shard is the whole product; a key that does not exist for a
--           shard of a split product, whose limit is checked before (lua/reserve.lua)
--   keys    hash: idempotency key -> "<the order sold under it here> <until ms>", which
--           counts for the key's TTL (`key_record`)
--   claim   an idempotency key's claim (lua/idem_claim.lua) on this slot: the key's one
--           claim when the shard is the whole product. Where the claim gets its answer
--           after the sale instead (`sale.split`: a shard of a split product, whose claim is
--           on the product's slot, or a cart's line), the key's fence (`:idem-fence:<key>`),
--           once a request that took the claim over fenced the shard (lua/idem_fence.lua):
--           "<epoch> <holder>", the one holder that may sell under the key here from then on
--   void    hash: order id -> 1 for the sales whose answer was lost and that were found
--           not to have run (lua/resolve.lua): a sale under such an id never runs after
--   stream  the shard's orders stream, for the orders' database: each sale appends its
--           order when the reset said it is streamed (audit `streamed`: an instance with
--           --orders-db created the stream)
--   unpaid  sorted set: order id -> the time (ms) it must be paid by, when the reset gave
--           the sale a payment window (audit `pay_within_ms`): a sale is then a
--           reservation until paid or expired (lua/pay.lua, lua/expire.lua)
--   settled hash: order id -> `paid` or `expired`, once one of them happened
--   trace   stream: the shard's timeline (`GET /trace`), while a reset with `trace` set
--           the audit's `trace` field: who entered and left the critical section, when
--           (the entry's id is Redis time), capped at TRACE_CAP entries
-- A holder's timeline travels in a table `trace` = { key = the shard's trace stream,
-- note = what the holder says of itself, as the service writes it ("i=<instance>
-- v=<variant> w=<ms waited> ..."), '' when the product is not traced }.
-- A sale's extras travel in one table, `sale`: { shard = this shard's index, stream,
-- unpaid, void, the request's idempotency key ('' for none) with its claim (or fence) and
-- keys, and `split` ('1' where the claim gets its answer after the sale: a shard of a split
-- product, a cart's line), and `call`, a table every sale of one script call shares (what
-- `terms` read; deduct.lua, whose lines are of several products, clears it for each) }.
-- A fencing token is '' when the holder presents none.
-- A script that sells several deductions of one product in one call (deduct.lua) passes a
-- `batch` = { limit = the product's per-user limit (set from `terms` before the first
-- sale, or read by `per_user`), bought = user -> units (read once each; only with a
-- limit), sold = units sold so far, orders = the HSET arguments collected, closed = the
-- sale was closed }: the steps below then collect what they would write, and `flush`
-- writes it once. A script that sells one unit passes no batch.

-- The time in Redis, ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- When this script began (Redis time, ms): the time of every sale it makes. Read first: a
-- script runs whole, and nothing else runs in between, but a Redis stopped in the middle
-- of one (SIGSTOP, a frozen VM, a process preempted and then stopped) finishes it when it
-- wakes, and a time read later would be the wake-up's, not the moment its checks saw.
local STARTED_MS = now_ms()

-- The terms of this shard's sale, as its reset wrote them in the audit hash: its epoch,
-- whether its orders are streamed, its payment window (ms, 0 for none), the buyer's limit
-- (`per_user`: nil when the reset did not write it there — an older version's — and the
-- product's meta says); whether `/admin/close` closed it since (`closed_at`), and whether
-- an order id of it was ever voided (`voided`, counted by lua/resolve.lua). Read once per
-- call (while `call.epoch` is nil; `per_user` is left alone when the audit has none): the
-- sales of one call share `sale.call`.
local function terms(sale, audit)
  local call = sale.call
  if call.epoch == nil then
    local t = redis.call('HMGET', audit, 'epoch', 'streamed', 'pay_within_ms', 'closed_at',
      'per_user', 'voided', 'key_ttl_ms')
    call.epoch = t[1] or '0'
    call.streaming = t[2] == '1'
    call.pay_within = tonumber(t[3] or '0')
    call.closed = t[4] ~= false
    if t[5] then
      call.per_user = tonumber(t[5])
    end
    call.voided = t[6] ~= false
    call.key_ttl = tonumber(t[7] or '0')
  end
  return call
end

-- The order a shard's `keys` record of an idempotency key names, while it still counts:
-- the record is "<order> <until ms>", kept for the key's TTL (`key_ttl_ms` in the sale's
-- terms); past it, a reuse of the key is a new request (nil). A record without a time (a
-- sale of an older version) counts until the next reset.
local function key_record(record)
  if not record then
    return nil
  end
  local order, until_ms = string.match(record, '^(%S+) (%d+)$')
  if not order then
    return record
  end
  if tonumber(until_ms) <= STARTED_MS then
    return nil
  end
  return order
end

-- Whether a sale under idempotency key `sale.key` ('' for none) may go on. Where the claim
-- lives on this slot (the whole product), only while it is still `holder`'s pending claim
-- of this sale (its epoch):
-- a repeat that took the claim over sells instead, never both. On a shard of a split
-- product, only while nothing was sold under the key here and no other holder fenced the
-- shard for this sale (lua/idem_fence.lua): a repeat that takes the claim over fences every
-- shard before it sells, so the late sale of the request it took over cannot run after it
-- looked. `audit` is the shard's (its epoch). Returns nil when it may, else 'taken_over'.
local function keyed(sale, audit, holder)
  if sale.key == '' then
    return nil
  end
  if sale.split == '1' then
    if key_record(redis.call('HGET', sale.keys, sale.key)) then
      return 'taken_over'
    end
    local fence = redis.call('GET', sale.claim)
    if fence then
      local epoch, by = string.match(fence, '^(%S+) (.+)$')
      if epoch == terms(sale, audit).epoch and by ~= holder then
        return 'taken_over'
      end
    end
    return nil
  end
  -- A claim of the sale before a reset is another sale's: the request that holds it
  -- outlived the reset, and a repeat will claim the key afresh in this one.
  local c = redis.call('HMGET', sale.claim, 'state', 'holder', 'epoch')
  if c[1] == 'pending' and c[2] == holder and c[3] == terms(sale, audit).epoch then
    return nil
  end
  return 'taken_over'
end

-- After `keyed` let the sale go on: records it under idempotency key `sale.key` ('' for
-- none): the key -> `order` in the shard's `keys` (a second sale under one key here is
-- counted, `keys_sold_twice`: the claims failed) and, where the claim lives on this slot,
-- the sale as its answer — in the script that takes the unit, so no crash can separate
-- the two. A split product's claim, on the product's slot, gets its answer after the
-- sale, from the request (or, when that answer is lost, from a repeat's fences).
local function keyed_sale(sale, audit, order, instance, remaining)
  if sale.key == '' then
    return
  end
  if key_record(redis.call('HGET', sale.keys, sale.key)) then
    redis.call('HINCRBY', audit, 'keys_sold_twice', 1)
  else
    local ttl = terms(sale, audit).key_ttl
    local record = order
    if ttl > 0 then
      record = order .. ' ' .. (STARTED_MS + ttl)
    end
    redis.call('HSET', sale.keys, sale.key, record)
  end
  if sale.split ~= '1' then
    redis.call('HSET', sale.claim, 'state', 'done', 'status', 200, 'outcome', 'deducted',
      'order', order, 'shard', sale.shard, 'remaining', remaining, 'instance', instance)
  end
end

-- Whether order id `order` may still be sold here: nil when it may; the units left when it
-- already was (a command sent again — by a client library after a dropped connection —
-- sells nothing twice); 'voided' when its answer was lost and lua/resolve.lua voided it.
-- `void` is nil when the product has no voided order at all. (deduct.lua checks the same
-- in its line, a line's ids at once.)
local function unsold(stock, orders, void, order)
  if redis.call('HEXISTS', orders, order) == 1 then
    return tonumber(redis.call('GET', stock))
  end
  if void and redis.call('HEXISTS', void, order) == 1 then
    return 'voided'
  end
  return nil
end

-- The timeline's length: a lesson's whole run, at most.
local TRACE_CAP = 5000

-- Appends `event` ('enter' or 'leave') of `holder` to the shard's timeline, with what it
-- says of itself and `extra` (the overlap, the outcome).
local function traced(trace, event, holder, extra_name, extra)
  redis.call('XADD', trace.key, 'MAXLEN', '~', TRACE_CAP, '*', 'e', event, 'h', holder,
    extra_name, extra, 'n', trace.note)
end

-- A holder enters and reads the stock. The audit counts an overlap when somebody else is
-- still inside: the lock failed. (A holder already inside — let in by a hand-off whose
-- answer was lost — is not somebody else.) The stock remembers the highest token that has read it.
-- With `trace` (see the top), while the product is traced, the entry goes on its timeline:
-- the one read this costs a product that is not traced.
-- Returns { stock, 1 on an overlap else 0, 1 when traced else 0, the sale's epoch (the
-- audit's: a commit that presents it sells only in the sale it entered, not in one a reset
-- started since) }; { false, 0, 0, false } without a stock key (the holder does not enter).
local function enter(stock, inside, audit, fence, holder, stay, token, trace)
  local units = redis.call('GET', stock)
  if not units then
    return { false, 0, 0, false }
  end
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', inside, '-inf', now)
  local overlap = 0
  local others = redis.call('ZCARD', inside)
  if redis.call('ZSCORE', inside, holder) then
    others = others - 1
  end
  if others > 0 then
    redis.call('HINCRBY', audit, 'lock_overlaps', 1)
    overlap = 1
  end
  redis.call('ZADD', inside, now + tonumber(stay), holder)
  if token ~= '' then
    local seen = tonumber(redis.call('HGET', fence, 'seen') or '0')
    if tonumber(token) > seen then
      redis.call('HSET', fence, 'seen', token)
    end
  end
  local on_timeline = 0
  if trace and redis.call('HGET', audit, 'trace') == '1' then
    on_timeline = 1
    traced(trace, 'enter', holder, 'o', overlap)
  end
  return { units, overlap, on_timeline, redis.call('HGET', audit, 'epoch') or '0' }
end

-- The product's per-user limit (0: none), from its meta; a batch reads it once, unless it
-- already has it (deduct.lua sets it from the terms, where the reset writes it too).
local function per_user(meta, batch)
  if batch then
    if batch.limit == nil then
      batch.limit = tonumber(redis.call('HGET', meta, 'per_user') or '0')
    end
    return batch.limit
  end
  return tonumber(redis.call('HGET', meta, 'per_user') or '0')
end

-- Units sold to `user` here; a batch reads each buyer's once and counts its own sales.
local function bought(buyers, user, batch)
  if batch then
    if batch.bought[user] == nil then
      batch.bought[user] = tonumber(redis.call('HGET', buyers, user) or '0')
    end
    return batch.bought[user]
  end
  return tonumber(redis.call('HGET', buyers, user) or '0')
end

-- Whether `user` may buy one more unit here: nil when they may; 'user_required' when the
-- product limits each buyer and the request named none; 'limit_reached' when the user has
-- bought their limit.
local function over_limit(meta, buyers, user, batch)
  local limit = per_user(meta, batch)
  if limit <= 0 then
    return nil
  end
  if user == '' then
    return 'user_required'
  end
  if bought(buyers, user, batch) >= limit then
    return 'limit_reached'
  end
  return nil
end

-- Appends orders to the shard's orders stream, for the database: one entry for the orders
-- `lines` ("<order id> <buyer>" each, the buyer '' for none, comma-separated) of one call,
-- with the sale's epoch, the shard, who sold them, when (Redis time, ms) and the deadline
-- to pay by ('' for none).
local function stream_orders(stream, call, shard, instance, variant, lines)
  local pay_by = ''
  if call.pay_within > 0 then
    pay_by = call.now + call.pay_within
  end
  redis.call('XADD', stream, '*', 'orders', lines, 'epoch', call.epoch, 'shard', shard,
    'instance', instance, 'variant', variant, 'at', call.now, 'pay_by', pay_by)
end

-- What follows every sale's order: with a payment window, the order is a reservation
-- until paid or expired (`unpaid`, scored by its deadline); when streamed, it goes to the
-- shard's orders stream — at once, or, when the script collects its call's orders
-- (`sale.call.lines`, a list), in the one entry it appends at its end.
-- With a batch, the unpaid entry waits for `flush`, after the order.
local function ordered(sale, audit, order, instance, variant, user, batch)
  local call = terms(sale, audit)
  if call.pay_within <= 0 and not call.streaming then
    return
  end
  if call.now == nil then
    call.now = STARTED_MS
  end
  if call.pay_within > 0 then
    if batch then
      batch.unpaid = batch.unpaid or {}
      batch.unpaid[#batch.unpaid + 1] = call.now + call.pay_within
      batch.unpaid[#batch.unpaid + 1] = order
    else
      redis.call('ZADD', sale.unpaid, call.now + call.pay_within, order)
    end
  end
  if call.streaming then
    local line = order .. ' ' .. user
    if call.lines then
      call.lines[#call.lines + 1] = line
    else
      stream_orders(sale.stream, call, sale.shard, instance, variant, line)
    end
  end
end

-- Settles reserved order `order` of a shard (`k`: its unpaid, settled, stock, orders,
-- buyers, audit and stream keys, and `owed` on a shard of a split product) as `outcome`,
-- 'paid' or 'expired', at `now` (ms). The caller has checked it is still unpaid: this runs
-- once per order. An expired order's unit goes back to the shard's stock and its buyer's
-- slot is freed here, where the shard counts them; a split product's reservation, on the
-- product's slot, is owed back to the buyer: noted in `owed` (order -> buyer) until the
-- caller or a sweep has given it back, so that a lost answer loses nothing.
-- Returns the order's buyer ('' for none).
local function settle(k, order, outcome, now)
  redis.call('ZREM', k.unpaid, order)
  redis.call('HSET', k.settled, order, outcome)
  redis.call('HINCRBY', k.audit, outcome, '1')
  local who = redis.call('HGET', k.orders, order) or ''
  local user = string.match(who, '^%S+ %S+ (%S+)$') or ''
  if outcome == 'expired' then
    redis.call('INCR', k.stock)
    if user ~= '' and tonumber(redis.call('HGET', k.buyers, user) or '0') > 0 then
      redis.call('HINCRBY', k.buyers, user, -1)
    end
    if k.owed and user ~= '' then
      redis.call('HSET', k.owed, order, user)
    end
  end
  local t = redis.call('HMGET', k.audit, 'epoch', 'streamed')
  if t[2] == '1' then
    redis.call('XADD', k.stream, '*', 'settled', outcome, 'order', order,
      'epoch', t[1] or '0', 'at', now)
  end
  return user
end

-- Records the order of one unit sold to `user` ('' for nobody named). With a batch, every
-- write waits for `flush`: the order, the sales count, the buyer's count, the unpaid entry.
local function record(orders, buyers, audit, order, instance, variant, user, sale, batch)
  local who = instance .. ' ' .. variant
  if user ~= '' then
    who = who .. ' ' .. user
    if batch then
      -- A batch with a limit counts the buyer's units for its next check (read before
      -- the increment, when not read yet); without a limit nothing checks them.
      if per_user(nil, batch) > 0 then
        batch.bought[user] = bought(buyers, user, batch) + 1
      end
      batch.buyers = batch.buyers or {}
      batch.buyers[user] = (batch.buyers[user] or 0) + 1
    else
      redis.call('HINCRBY', buyers, user, '1')
    end
  end
  if batch then
    batch.orders[#batch.orders + 1] = order
    batch.orders[#batch.orders + 1] = who
    batch.sold = batch.sold + 1
  else
    redis.call('HSET', orders, order, who)
    redis.call('HINCRBY', audit, 'sold/' .. instance .. '/' .. variant, '1')
  end
  ordered(sale, audit, order, instance, variant, user, batch)
  -- A sale after `/admin/close` marked the product closed: it checked "open" before.
  if terms(sale, audit).closed then
    if batch then
      batch.closed = batch.closed + 1
    else
      redis.call('HINCRBY', audit, 'sold_after_close', '1')
    end
  end
end

-- A batch's sales written at once, the units taken from the stock and the orders first:
-- then the counters, the buyers' counts (to `buyers`) and the unpaid entries (to
-- `unpaid`). Nothing is written before the batch's checks are all done, so a check that
-- fails (a key of another type, written by hand) fails the line before it wrote anything;
-- and nothing that follows a sale is written without its order, so a write that fails
-- after leaves a sale the look-up finds (src/variants/lost.rs). Returns nothing; the
-- caller answers each deduction.
local function flush(batch, stock, orders, audit, instance, variant, buyers, unpaid)
  if batch.sold > 0 then
    redis.call('DECRBY', stock, batch.sold)
    redis.call('HSET', orders, unpack(batch.orders))
    redis.call('HINCRBY', audit, 'sold/' .. instance .. '/' .. variant, batch.sold)
  end
  if batch.buyers then
    for user, units in pairs(batch.buyers) do
      redis.call('HINCRBY', buyers, user, units)
    end
  end
  if batch.unpaid then
    redis.call('ZADD', unpaid, unpack(batch.unpaid))
  end
  if batch.closed > 0 then
    redis.call('HINCRBY', audit, 'sold_after_close', batch.closed)
  end
end

-- The holder leaves: `take` is 'decr' (take one unit in Redis), 'set' (write `value`, a
-- stock the application computed from what it read earlier: naive's lost update) or
-- 'leave' (sell nothing). `lock_holder`, when not '', is a holder that must still hold the
-- watchdog lock hash `lock` (only when the lock lives beside the stock).
-- `user` is the buyer ('' for none); `limit` is 'check' (refuse a user at the product's
-- per-user limit, here, inside the critical section) or 'record' (the application checked:
-- naive's check-then-act). `sale` carries the sale's extras (the shard's index and
-- stream, the idempotency key: see the top of this file).
-- Returns the units left, a number (also when order id `order` was sold already: nothing
-- is sold twice under one id; below 0 when a broken lock let two holders sell the last
-- unit), or, when nothing is sold, why, by name (src/scripts/replies.rs's `Refusal`): 'gone' (the
-- stock key is gone: a reset, or Redis lost it), 'lock_lost' (that holder no longer holds
-- the lock; counted), 'fenced' (the token is older than one the stock has seen; counted),
-- 'limit_reached' (the user has bought their limit), 'user_required' (the product has a
-- limit and no user was named), 'taken_over' (another request now serves the idempotency
-- key), 'voided' (the order id's answer was lost, and lua/resolve.lua found it had not
-- run), 'reset' (the holder entered the sale before a reset: `sale.epoch`, the epoch its
-- entry read, is not the shard's now).
local function sell(stock, inside, orders, audit, lock, fence, buyers, meta, holder, order,
                    instance, variant, take, value, lock_holder, token, user, limit, sale)
  redis.call('ZREM', inside, holder)
  if redis.call('EXISTS', stock) == 0 then
    return 'gone'
  end
  if take == 'leave' then
    return tonumber(redis.call('GET', stock))
  end
  local settled = unsold(stock, orders, sale.void, order)
  if settled then
    return settled
  end
  local taken_over = keyed(sale, audit, holder)
  if taken_over then
    return taken_over
  end
  -- A holder that entered the sale before a reset sells nothing in the one after: the
  -- reset gave its lock up (wherever the lock lives, which the commit may not see).
  if sale.epoch and sale.epoch ~= '' and sale.epoch ~= terms(sale, audit).epoch then
    return 'reset'
  end
  if lock_holder ~= '' and (redis.call('TYPE', lock).ok ~= 'hash'
      or redis.call('HEXISTS', lock, lock_holder) == 0) then
    redis.call('HINCRBY', audit, 'lock_lost', 1)
    return 'lock_lost'
  end
  if token ~= '' then
    local seen = tonumber(redis.call('HGET', fence, 'seen') or '0')
    if tonumber(token) < seen then
      redis.call('HINCRBY', audit, 'fenced', 1)
      return 'fenced'
    end
    redis.call('HSET', fence, 'seen', token)
  end
  if limit == 'check' then
    local refused = over_limit(meta, buyers, user)
    if refused then
      return refused
    end
  end
  local remaining
  if take == 'set' then
    redis.call('SET', stock, value)
    remaining = tonumber(value)
  else
    remaining = redis.call('DECR', stock)
  end
  record(orders, buyers, audit, order, instance, variant, user, sale)
  keyed_sale(sale, audit, order, instance, remaining)
  return remaining
end

-- `sell`, and, when the holder is on the timeline (`sale.trace` with a note), its leaving:
-- 'deducted', 'sold_out' or why it sold nothing.
local function commit(stock, inside, orders, audit, lock, fence, buyers, meta, holder, order,
                      instance, variant, take, value, lock_holder, token, user, limit, sale)
  local left = sell(stock, inside, orders, audit, lock, fence, buyers, meta, holder, order,
    instance, variant, take, value, lock_holder, token, user, limit, sale)
  if sale.trace and sale.trace.note ~= '' then
    local outcome = left
    if type(left) ~= 'string' then
      outcome = take == 'leave' and 'sold_out' or 'deducted'
    end
    traced(sale.trace, 'leave', holder, 'r', outcome)
  end
  return left
end
