-- watchdog_unlock.lua: give back one hold of a reentrant lock; on the last one, delete it
-- and tell waiters on the lock's channel.
--
-- KEYS[1]  lock (hash: owner -> hold count)
-- KEYS[2]  the lock's release channel
-- ARGV[1]  the message to publish
-- ARGV[2]  lease, ms (re-applied while holds remain)
-- ARGV[3]  owner id
--
-- Returns: nil when the owner did not hold the lock (it expired, or was taken from it);
--          0 when the owner still holds it (holds remain); 1 when it is released.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local holds = redis.call('HINCRBY', KEYS[1], ARGV[3], -1)
if holds > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 1
