-- force_unlock.lua: delete a lock whoever holds it, and tell its waiters. Works on every
-- lock kind (setnx and token strings, watchdog hashes): the operator's way out of the
-- setnx deadlock.
--
-- KEYS[1]  lock
-- KEYS[2]  the lock's release channel
-- ARGV[1]  the message to publish
--
-- Returns: 1 when a lock was deleted; 0 when there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', KEYS[2], ARGV[1])
  return 1
end
return 0
