-- force_unlock.lua: delete a lock whoever holds it, and tell its waiters (a fair lock's
-- head by name). Works on every lock kind (setnx and token strings, watchdog hashes): the
-- operator's way out of the setnx deadlock.
--
-- KEYS[1]  lock
-- KEYS[2]  the lock's release channel
-- KEYS[3]  queue
-- KEYS[4]  waiting
--
-- Returns: 1 when a lock was deleted; 0 when there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  announce(KEYS[2], KEYS[3], KEYS[4])
  return 1
end
return 0
