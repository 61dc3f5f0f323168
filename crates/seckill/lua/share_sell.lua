-- share_sell.lua (after lib/critical.lua): record a sale from a share an instance holds.
-- The instance took the unit from its share under its local lock; Redis keeps the share's
-- count too, so that a dead instance's unsold units can go back to the pool, and records
-- the order before the sale is answered 200. Each sale renews the share's lease.
--
-- KEYS[1]  shares  (hash: share id -> units of it not yet sold)
-- KEYS[2]  leases  (sorted set: share id -> time (ms) its lease runs out)
-- KEYS[3]  orders  (hash: order id -> "instance variant")
-- KEYS[4]  audit   (hash of counters; `sold/<instance>/<variant>` is bumped here)
-- KEYS[5]  meta    (the product's: `per_user`)
-- KEYS[6]  buyers  (hash: user -> units sold to them)
-- KEYS[7]  the idempotency key's claim (the product's slot)
-- KEYS[8]  keys    (hash: idempotency key -> order)
-- KEYS[9]  stream  (the orders stream, written when the sale is streamed)
-- KEYS[10] unpaid  (sorted set: order -> deadline to pay by, with a payment window)
-- KEYS[11] void    (hash: order ids voided after their answer was lost)
-- ARGV[1]  share id
-- ARGV[2]  lease, ms
-- ARGV[3]  order id
-- ARGV[4]  instance id
-- ARGV[5]  variant name
-- ARGV[6]  the buyer, or ''
-- ARGV[7]  the request's holder id
-- ARGV[8]  the idempotency key, or ''
--
-- Returns: the units left in the share (also when the order id was sold already: a call
--          sent again sells nothing twice); or, when nothing is sold, why: 'share_gone' (the
--          share is gone: its lease ran out and its units went back to the pool, or a
--          reset), 'limit_reached', 'user_required', 'taken_over' or 'voided' (as
--          lib/critical.lua's `sell`).
local left = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then
  return math.max(left, 0)
end
if redis.call('HEXISTS', KEYS[11], ARGV[3]) == 1 then
  return 'voided'
end
if left <= 0 then
  return 'share_gone'
end
local refused = over_limit(KEYS[5], KEYS[6], ARGV[6])
if refused then
  return refused
end
local sale = { claim = KEYS[7], keys = KEYS[8], key = ARGV[8], split = '0', shard = '0',
  stream = KEYS[9], unpaid = KEYS[10], call = {} }
local taken_over = keyed(sale, KEYS[4], ARGV[7])
if taken_over then
  return taken_over
end
left = left - 1
if left > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], left)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
  redis.call('HINCRBY', KEYS[6], ARGV[6], 1)
else
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. ' ' .. ARGV[5])
end
redis.call('HINCRBY', KEYS[4], 'sold/' .. ARGV[4] .. '/' .. ARGV[5], 1)
ordered(sale, KEYS[4], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
keyed_sale(sale, KEYS[4], ARGV[3], ARGV[4], left)
return left
