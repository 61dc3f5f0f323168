-- share_take.lua: an instance takes a share of the stock (seed 000's end: split the
-- stock into shares, each server holds one and sells it under its own local lock, and
-- takes the next when it runs out). Shares whose lease ran out — their instance died, or
-- sold nothing for a lease — give their unsold units back to the pool first.
--
-- KEYS[1]  stock   (string: the pool, units no instance holds in a share)
-- KEYS[2]  shares  (hash: share id -> units of it not yet sold)
-- KEYS[3]  leases  (sorted set: share id -> time (ms) its lease runs out)
-- KEYS[4]  meta    (hash: `initial`)
-- KEYS[5]  audit   (hash of counters; `reclaimed` counts units given back to the pool)
-- ARGV[1]  the new share's id
-- ARGV[2]  units to take; 0 for a tenth of the initial stock (the seed's ten shares)
-- ARGV[3]  lease, ms: the share goes back to the pool unless a sale renews it by then
--
-- Returns: { units taken, units held in other instances' shares }; { false, 0 } when
--          there is no stock key (never reset, or Redis lost it).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  local units = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  if units > 0 then
    redis.call('INCRBY', KEYS[1], units)
    redis.call('HINCRBY', KEYS[5], 'reclaimed', units)
  end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
local pool = redis.call('GET', KEYS[1])
if not pool then
  return { false, 0 }
end
pool = tonumber(pool)
local size = tonumber(ARGV[2])
if size <= 0 then
  size = math.ceil(tonumber(redis.call('HGET', KEYS[4], 'initial') or '0') / 10)
end
local take = math.max(0, math.min(size, pool))
if take > 0 then
  redis.call('DECRBY', KEYS[1], take)
  redis.call('HSET', KEYS[2], ARGV[1], take)
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
  return { take, 0 }
end
local others = 0
for _, units in ipairs(redis.call('HVALS', KEYS[2])) do
  others = others + tonumber(units)
end
return { 0, others }
