-- fenced_lock.lua: take (or re-enter) a watchdog lock as watchdog_lock.lua does, and with
-- every take a fencing token, as Redisson's RFencedLock issues one: the lock's token
-- counter, incremented in the same step, which never expires. A holder presents it where
-- its work lands; whoever checks keeps the highest seen and refuses anything lower, so a
-- holder that lost the lock without knowing (paused past its lease) cannot write after the
-- next one did.
--
-- KEYS[1..4] as watchdog_lock.lua
-- KEYS[5]    the lock's token counter
-- ARGV       as watchdog_lock.lua
--
-- Returns: {0, token} when the caller now holds the lock; otherwise {1, how long it may
--          sleep, ms}, as watchdog_lock.lua.
local wait = take_any(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  ARGV[5])
if wait then
  return {1, wait}
end
return {0, redis.call('INCR', KEYS[5])}
