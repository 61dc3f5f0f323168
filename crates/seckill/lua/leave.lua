-- leave.lua: a lock holder leaves its critical section without selling (lib/critical.lua):
-- the stock was out, or it found its lock gone before committing (counted as lock_lost).
--
-- KEYS[1]  inside
-- KEYS[2]  audit
-- KEYS[3]  trace   (the shard's timeline)
-- ARGV[1]  holder id
-- ARGV[2]  'sold_out' or 'lock_lost'
-- ARGV[3]  what the holder says of itself on the timeline, or '' (not on it)
--
-- Returns: 1.
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == 'lock_lost' then
  redis.call('HINCRBY', KEYS[2], 'lock_lost', 1)
end
if ARGV[3] ~= '' then
  traced({ key = KEYS[3], note = ARGV[3] }, 'leave', ARGV[1], 'r', ARGV[2])
end
return 1
