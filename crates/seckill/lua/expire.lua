-- expire.lua (after lib/critical.lua): expire a shard's reservations whose time to pay
-- has run out, oldest first, at most ARGV[1] of them: each goes back to the shard's stock
-- and frees its buyer's slot, once (lib/critical.lua's `settle`). Any instance may run
-- it at any time; two running it at once expire each order once, since each call removes
-- what it expires from `unpaid` in the same step. On a shard of a split product the
-- buyers are owed their reservations on the product's slot: the call answers every order
-- still owed (this call's, and any an earlier caller did not give back), for the caller
-- to give back, once per order, and then strike from `owed`.
--
-- KEYS[1..8] as lua/pay.lua's: unpaid, settled, stock, orders, buyers, audit, stream, owed
-- ARGV[1]  the most orders to expire in this call
-- ARGV[2]  '1' on a shard of a split product, else '0'
--
-- Returns: { how many orders this call expired, then each owed order and its buyer }.
-- Nothing is expired while the shard has no stock key (a reset in progress clears the
-- reservations with it).
local k = { unpaid = KEYS[1], settled = KEYS[2], stock = KEYS[3], orders = KEYS[4],
  buyers = KEYS[5], audit = KEYS[6], stream = KEYS[7] }
if ARGV[2] == '1' then
  k.owed = KEYS[8]
end
if redis.call('EXISTS', k.stock) == 0 then
  return { 0 }
end
local now = now_ms()
local due = redis.call('ZRANGE', k.unpaid, '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, order in ipairs(due) do
  settle(k, order, 'expired', now)
end
local answer = { #due }
if k.owed then
  for _, field in ipairs(redis.call('HGETALL', k.owed)) do
    answer[#answer + 1] = field
  end
end
return answer
