-- pay.lua (after lib/critical.lua): pay for a reserved order, on the shard that sold it.
-- Payment and expiry are both scripts on the shard's slot, so they cannot interleave: an
-- order is paid or expired, once, never both. A payment that arrives after the deadline
-- finds the order expired — and expires it here if no sweep has yet (lua/expire.lua),
-- so the answer never depends on how late the sweep runs.
--
-- KEYS[1]  unpaid   (sorted set: order -> deadline to pay by, ms)
-- KEYS[2]  settled  (hash: order -> 'paid' | 'expired')
-- KEYS[3]  stock
-- KEYS[4]  orders   (hash: order -> "instance variant[ user]")
-- KEYS[5]  buyers   (hash: user -> units sold to them here)
-- KEYS[6]  audit    (hash of counters: `paid`, `expired`; the sale's `epoch`, `streamed`)
-- KEYS[7]  stream   (the shard's orders stream, written when the sale is streamed)
-- KEYS[8]  owed     (hash: expired order -> its buyer, owed a split product's reservation)
-- ARGV[1]  the order id
-- ARGV[2]  '1' on a shard of a split product, else '0'
--
-- Returns: {1} paid now; {2} paid before (a repeated payment); {-1, buyer} expired (the
--          buyer, '' for none, is owed a split product's reservation when this call
--          expired it: noted in `owed` for the caller, or the sweep, to give back; {-1}
--          when it had expired before); {-2} the shard sold it with no payment window
--          (nothing to pay); {0} not sold here.
local k = { unpaid = KEYS[1], settled = KEYS[2], stock = KEYS[3], orders = KEYS[4],
  buyers = KEYS[5], audit = KEYS[6], stream = KEYS[7] }
if ARGV[2] == '1' then
  k.owed = KEYS[8]
end
local order = ARGV[1]
local state = redis.call('HGET', k.settled, order)
if state == 'paid' then
  return { 2 }
elseif state == 'expired' then
  return { -1 }
end
local deadline = redis.call('ZSCORE', k.unpaid, order)
if not deadline then
  if redis.call('HEXISTS', k.orders, order) == 1 then
    return { -2 }
  end
  return { 0 }
end
local now = now_ms()
if tonumber(deadline) <= now then
  return { -1, settle(k, order, 'expired', now) }
end
settle(k, order, 'paid', now)
return { 1 }
