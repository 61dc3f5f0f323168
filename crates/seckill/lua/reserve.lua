-- reserve.lua: a split product's per-user limit. A buyer's units are counted on the
-- product's slot, while the stock they come from is on a shard's slot, elsewhere on a
-- Redis Cluster: so the unit is reserved here first (within the limit), then taken from a
-- shard, and the reservation given back when no shard sold one. An instance that dies
-- between the two leaves a reservation without an order: the buyer may buy one unit
-- fewer, never one more (`/stats` shows it as `reserved_unsold`).
--
-- KEYS[1]  meta      (the product's: `per_user`)
-- KEYS[2]  reserved  (hash: user -> units reserved)
-- ARGV[1]  the buyer, or ''
-- ARGV[2]  'take' (reserve one unit) or 'give' (give one back)
--
-- Returns: 1 reserved (or given back); 0 the product has no limit (nothing to reserve);
--          -5 the buyer has their limit; -6 a limited product and no buyer.
if ARGV[2] == 'give' then
  if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') > 0 then
    redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
  end
  return 1
end
local limit = tonumber(redis.call('HGET', KEYS[1], 'per_user') or '0')
if limit <= 0 then
  return 0
end
if ARGV[1] == '' then
  return -6
end
if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= limit then
  return -5
end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1
