-- watchdog_renew.lua: the watchdog's tick. Extends the lease only if the holder still
-- holds the lock, so a late renewal can never extend somebody else's lock.
--
-- KEYS[1]  lock (hash: holder -> hold count)
-- ARGV[1]  lease, ms
-- ARGV[2]  holder id
--
-- Returns: 1 when renewed; 0 when the holder no longer holds the lock (it is lost).
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
