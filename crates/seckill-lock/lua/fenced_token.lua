-- fenced_token.lua: the fencing token of a fenced lock handed over by a holder of this
-- instance (whose release issues none), issued only while the new holder still holds the
-- lock. A new holder delayed past its lease before this runs — another may have taken the
-- lock, with a token of its own — gets none, rather than a higher token for a lock it no
-- longer holds.
--
-- KEYS[1]  lock (hash: holder -> hold count)
-- KEYS[2]  the lock's token counter
-- ARGV[1]  holder id
--
-- Returns: the token; nil when the holder does not hold the lock.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('INCR', KEYS[2])
end
return false
