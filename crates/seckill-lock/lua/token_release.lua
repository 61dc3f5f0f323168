-- token_release.lua: release a token lock only if the caller still holds it. The GET and
-- the DEL run as one step, so a lock that expired and passed to another holder in
-- between cannot be deleted by mistake.
--
-- KEYS[1]  lock (string: the holder's token)
-- ARGV[1]  the caller's token
--
-- Returns: 1 when the lock was the caller's and is now gone; 0 when it was not held by
--          the caller (expired, or someone else holds it).
-- (A watchdog holder's hash at the same key is somebody else's lock too.)
if redis.call('TYPE', KEYS[1]).ok == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
