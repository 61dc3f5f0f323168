-- token_extend.lua: extend a string lock (a token lock; Redlock's, on one of its servers),
-- only if it is still the caller's, so a late extension can never lengthen somebody else's
-- lock.
--
-- KEYS[1]  lock (string: the holder's token)
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL, ms
--
-- Returns: 1 when extended; 0 when the lock is not the caller's on this server.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
