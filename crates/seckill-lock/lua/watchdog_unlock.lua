-- watchdog_unlock.lua: give back one hold of a reentrant lock; on the last one, hand it to
-- a waiter of the caller's instance, or delete it and tell the waiters (lib/lock.lua's
-- `release`).
--
-- KEYS[1]  lock (hash: holder -> hold count)
-- KEYS[2]  the lock's release channel
-- KEYS[3]  queue (fair only)
-- KEYS[4]  waiting (fair only)
-- ARGV[1]  lease, ms (re-applied while holds remain)
-- ARGV[2]  holder id
-- ARGV[3]  'fair' or 'unfair'
-- ARGV[4]  the waiter to hand the lock to, or '' (unfair only)
-- ARGV[5]  that waiter's lease, ms
--
-- Returns: nil when the holder did not hold the lock; 0 holds remain; 1 released;
--          2 handed to ARGV[4].
if ARGV[3] == 'fair' then
  return release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], '', 0, KEYS[3], KEYS[4])
end
return release(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[4], ARGV[5])
