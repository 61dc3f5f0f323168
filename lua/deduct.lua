-- deduct.lua: the lock-free variant. Checks the stock, takes one unit and records the
-- order in one atomic step, so no lock is needed.
--
-- KEYS[1]  stock   (string: units left)
-- KEYS[2]  orders  (hash: order id -> "instance variant")
-- KEYS[3]  audit   (hash of counters: `sold/<instance>/<variant>` on a sale, `sold_out`
--                   on a 409; '/' cannot occur in an instance id or a variant name)
-- ARGV[1]  order id
-- ARGV[2]  instance id
-- ARGV[3]  variant name
--
-- Returns: the units left after this deduction (>= 0); -1 when sold out;
--          -2 when there is no stock key (never reset, or Redis lost it: not for sale).
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -2
end
if tonumber(stock) <= 0 then
  redis.call('HINCRBY', KEYS[3], 'sold_out', 1)
  return -1
end
local remaining = redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
redis.call('HINCRBY', KEYS[3], 'sold/' .. ARGV[2] .. '/' .. ARGV[3], 1)
return remaining
