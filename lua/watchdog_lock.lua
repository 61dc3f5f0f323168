-- watchdog_lock.lua: take (or re-enter) a reentrant lock, as Redisson's RLock does.
-- The lock is a hash, owner -> hold count, with a lease (PEXPIRE).
--
-- KEYS[1]  lock (hash)
-- ARGV[1]  lease, ms
-- ARGV[2]  owner id (a process UUID and a per-task number; never a thread id)
--
-- Returns: nil when the caller now holds the lock (first hold, or one more hold by the
--          same owner); otherwise, when a watchdog owner holds it, its remaining TTL in ms,
--          for the caller to wait (an unlock message may wake it sooner); -1 when a setnx
--          or token holder has it, whose release sends no message: the caller polls.
--
-- Every variant's lock on a product lives at the same key, so a setnx or token holder (a
-- string) holds it against a watchdog caller just as another watchdog owner does.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' or (kind == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1) then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if kind ~= 'hash' then
  return -1
end
return redis.call('PTTL', KEYS[1])
