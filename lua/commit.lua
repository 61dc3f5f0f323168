-- commit.lua: take one unit, record the order and leave the critical section, in one
-- round trip. Used by every variant that decides in the application (all but lua).
--
-- KEYS[1]  stock   (string: units left)
-- KEYS[2]  inside  (sorted set of holders in the critical section)
-- KEYS[3]  orders  (hash: order id -> "instance variant")
-- KEYS[4]  audit   (hash of counters; `sold/<instance>/<variant>` is bumped here)
-- KEYS[5]  lock    (the watchdog lock hash, checked when ARGV[7] is set; only when the
--                   lock lives in the same store as the stock)
-- KEYS[6]  fence   (hash: `seen`, the highest fencing token that has read or written)
-- ARGV[1]  holder id
-- ARGV[2]  order id
-- ARGV[3]  instance id
-- ARGV[4]  variant name
-- ARGV[5]  'decr' to take the unit in Redis, or 'set' to write ARGV[6], a value the
--          application computed from the stock it read earlier (naive's lost update)
-- ARGV[6]  the value for 'set'
-- ARGV[7]  a fence: the owner that must still hold KEYS[5], or '' for none
-- ARGV[8]  the holder's fencing token, or '' when it presents none
--
-- Returns: the units left; -2 when the stock key is gone (a reset, or Redis lost it);
--          -3 when the fence's owner no longer holds the lock (counted as lock_lost);
--          -4 when the fencing token is older than one the stock has seen (counted as
--          fenced). On -2, -3 and -4 nothing is sold.
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -2
end
if ARGV[7] ~= '' and (redis.call('TYPE', KEYS[5]).ok ~= 'hash'
    or redis.call('HEXISTS', KEYS[5], ARGV[7]) == 0) then
  redis.call('HINCRBY', KEYS[4], 'lock_lost', 1)
  return -3
end
if ARGV[8] ~= '' then
  local token = tonumber(ARGV[8])
  local seen = tonumber(redis.call('HGET', KEYS[6], 'seen') or '0')
  if token < seen then
    redis.call('HINCRBY', KEYS[4], 'fenced', 1)
    return -4
  end
  redis.call('HSET', KEYS[6], 'seen', ARGV[8])
end
local remaining
if ARGV[5] == 'set' then
  redis.call('SET', KEYS[1], ARGV[6])
  remaining = tonumber(ARGV[6])
else
  remaining = redis.call('DECR', KEYS[1])
end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3] .. ' ' .. ARGV[4])
redis.call('HINCRBY', KEYS[4], 'sold/' .. ARGV[3] .. '/' .. ARGV[4], 1)
return remaining
