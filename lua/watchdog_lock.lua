-- watchdog_lock.lua: take (or re-enter) a reentrant lock, as Redisson's RLock does.
-- The lock is a hash, owner -> hold count, with a lease (PEXPIRE).
--
-- KEYS[1]  lock (hash)
-- ARGV[1]  lease, ms
-- ARGV[2]  owner id (a process UUID and a per-task number; never a thread id)
--
-- Returns: nil when the caller now holds the lock (first hold, or one more hold by the
--          same owner); otherwise the lock's remaining TTL in ms, for the caller to wait.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
