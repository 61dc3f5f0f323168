-- expire.lua (after lib/critical.lua): expire a shard's reservations whose time to pay
-- has run out, oldest first, at most ARGV[1] of them: each goes back to the shard's stock
-- and frees its buyer's slot, once (lib/critical.lua's `settle`). Any instance may run
-- it at any time; two running it at once expire each order once, since each call removes
-- what it expires from `unpaid` in the same step.
--
-- KEYS[1..7] as lua/pay.lua's: unpaid, settled, stock, orders, buyers, audit, stream
-- ARGV[1]  the most orders to expire in this call
--
-- Returns: the buyer of each order expired ('' for none), in order; empty when none was
--          due. Nothing is expired while the shard has no stock key (a reset in progress
--          clears the reservations with it).
local k = { unpaid = KEYS[1], settled = KEYS[2], stock = KEYS[3], orders = KEYS[4],
  buyers = KEYS[5], audit = KEYS[6], stream = KEYS[7] }
if redis.call('EXISTS', k.stock) == 0 then
  return {}
end
local now = now_ms()
local due = redis.call('ZRANGE', k.unpaid, '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
local buyers = {}
for i, order in ipairs(due) do
  buyers[i] = settle(k, order, 'expired', now)
end
return buyers
