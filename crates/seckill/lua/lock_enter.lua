-- lock_enter.lua: take a watchdog lock (fair or not) and, when it is taken, enter the
-- critical section and read the stock, in one round trip. The lock and the stock share
-- one hash tag, so both live on one slot.
--
-- KEYS[1]  lock
-- KEYS[2]  the lock's release channel
-- KEYS[3]  queue (fair only)
-- KEYS[4]  waiting (fair only)
-- KEYS[5]  stock
-- KEYS[6]  inside
-- KEYS[7]  audit
-- KEYS[8]  fence
-- KEYS[9]  trace   (the shard's timeline)
-- ARGV[1]  lease, ms
-- ARGV[2]  holder id, in the lock and in the audit
-- ARGV[3]  'fair' or 'unfair'
-- ARGV[4]  a fair waiter's patience, ms
-- ARGV[5]  how long the holder may stay inside, ms
-- ARGV[6]  what the holder says of itself on the timeline, if the product is traced
--
-- Returns: { 1, stock or false, overlap, traced } when the lock is now the caller's and it
--          has entered; { 0, ms to sleep, 0, 0 } when it is held (as watchdog_lock.lua).
local wait
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  -- Already the caller's: a holder handed it over and let it in, and the answer was lost on
  -- its way back (a timeout). It is one hold, not a second one.
  wait = nil
elseif ARGV[3] == 'fair' then
  wait = take_fair(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], tonumber(ARGV[4]))
else
  wait = take(KEYS[1], ARGV[1], ARGV[2])
end
if wait then
  return { 0, wait, 0, 0 }
end
local entered = enter(KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[2], ARGV[5], '',
  { key = KEYS[9], note = ARGV[6] })
return { 1, entered[1], entered[2], entered[3] }
