-- watchdog_lock.lua: take (or re-enter) a reentrant lock, as Redisson's RLock does, or its
-- fair form, as RedissonFairLock does (lib/lock.lua's `take` and `take_fair`).
--
-- KEYS[1]  lock (hash: holder -> hold count)
-- KEYS[2]  the lock's release channel (fair only)
-- KEYS[3]  queue (fair only)
-- KEYS[4]  waiting (fair only)
-- ARGV[1]  lease, ms
-- ARGV[2]  holder id (a process UUID and a per-task number; never a thread id)
-- ARGV[3]  'fair' or 'unfair'
-- ARGV[4]  a fair waiter's patience, ms: it leaves the queue unless it tries again by then
-- ARGV[5]  'first' when the caller's handle holds the lock no times yet, else 'again'
--
-- Returns: nil when the caller now holds the lock; otherwise how long it may sleep, ms
--          (the holder's TTL; -1 for a setnx or token holder, whose release says nothing).
if ARGV[5] == 'first' and redis.call('TYPE', KEYS[1]).ok == 'hash'
    and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  -- Already the caller's, though its handle holds nothing: a holder handed it over, and the
  -- answer was lost on its way back (a timeout), so the caller was told to try again. It
  -- is one hold, not a second one, or its release would leave the lock held.
  redis.call('HSET', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
if ARGV[3] == 'fair' then
  return take_fair(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], tonumber(ARGV[4]))
end
return take(KEYS[1], ARGV[1], ARGV[2])
