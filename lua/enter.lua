-- enter.lua: a lock holder enters its critical section and reads the stock.
-- The audit counts an overlap when someone else is still inside: the lock failed.
--
-- KEYS[1]  stock   (string: units left)
-- KEYS[2]  inside  (sorted set: holder id -> time it must have left by, ms)
-- KEYS[3]  audit   (hash of counters; `lock_overlaps` is bumped here)
-- KEYS[4]  fence   (hash: `seen`, the highest fencing token that has read or written)
-- ARGV[1]  holder id
-- ARGV[2]  how long the holder may stay inside, ms (its work plus a margin); a holder
--          that dies inside stops counting as inside after that
-- ARGV[3]  the holder's fencing token, or '' when it presents none; the stock
--          remembers the highest token that has read it
--
-- Returns: { stock or nil, 1 when another holder was inside (an overlap) else 0 }.
--          With no stock key the holder does not enter.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return { false, 0 }
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local overlap = 0
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('HINCRBY', KEYS[3], 'lock_overlaps', 1)
  overlap = 1
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
if ARGV[3] ~= '' then
  local seen = tonumber(redis.call('HGET', KEYS[4], 'seen') or '0')
  if tonumber(ARGV[3]) > seen then
    redis.call('HSET', KEYS[4], 'seen', ARGV[3])
  end
end
return { stock, overlap }
