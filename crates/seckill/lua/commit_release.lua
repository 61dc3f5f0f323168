-- commit_release.lua: a watchdog holder leaves its critical section (selling a unit or
-- not) and gives its lock back, in one round trip; when it hands the lock to a waiter of
-- its own instance, that waiter enters in the same trip, so it can start its work the
-- moment the answer arrives. The lock and the stock share one hash tag (one slot).
--
-- KEYS[1]  stock
-- KEYS[2]  inside
-- KEYS[3]  orders
-- KEYS[4]  audit
-- KEYS[5]  lock
-- KEYS[6]  fence
-- KEYS[7]  the lock's release channel
-- KEYS[8]  queue (fair only)
-- KEYS[9]  waiting (fair only)
-- KEYS[10] buyers
-- KEYS[11] meta    (the product's, when the shard is the whole product)
-- KEYS[12] the idempotency key's claim on this slot (its fence with ARGV split '1')
-- KEYS[13] keys    (hash: idempotency key -> order)
-- KEYS[14] stream  (the shard's orders stream, written when the sale is streamed)
-- KEYS[15] unpaid  (sorted set: order -> deadline to pay by, with a payment window)
-- KEYS[16] trace   (the shard's timeline)
-- KEYS[17] void    (hash: order ids voided after their answer was lost)
-- ARGV[1]  holder id (in the lock and in the audit)
-- ARGV[2]  order id
-- ARGV[3]  instance id
-- ARGV[4]  variant name
-- ARGV[5]  'decr' or 'leave'
-- ARGV[6]  lease, ms
-- ARGV[7]  'fair' or 'unfair'
-- ARGV[8]  the waiter to hand the lock to, or '' (unfair only)
-- ARGV[9]  that waiter's lease, ms
-- ARGV[10] how long that waiter may stay inside, ms
-- ARGV[11] the buyer, or ''
-- ARGV[12] the idempotency key, or ''
-- ARGV[13] '1' where the claim gets its answer after the sale (a split product's shard, a
--          cart's line), else '0'
-- ARGV[14] this shard's index
-- ARGV[15] what the holder says of itself on the timeline, or '' (not on it)
-- ARGV[16] what the waiter handed the lock says of itself there (it is let in here)
--
-- Returns: { units left, or why nothing was sold ('gone', 'lock_lost', … as
--          lib/critical.lua's `sell`), the release's answer
--          (as watchdog_unlock.lua; false when not held), and when the lock was handed on,
--          the new holder's stock (or false), overlap and whether it is on the timeline }.
local left = commit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[10], KEYS[11],
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], '', ARGV[1], '', ARGV[11], 'check',
  { claim = KEYS[12], keys = KEYS[13], key = ARGV[12], split = ARGV[13], shard = ARGV[14],
    stream = KEYS[14], unpaid = KEYS[15], void = KEYS[17], call = {},
    trace = { key = KEYS[16], note = ARGV[15] } })
if left == 'lock_lost' then
  return { left, false }
end
local released
if ARGV[7] == 'fair' then
  released = release(KEYS[5], KEYS[7], ARGV[6], ARGV[1], '', 0, KEYS[8], KEYS[9])
else
  released = release(KEYS[5], KEYS[7], ARGV[6], ARGV[1], ARGV[8], ARGV[9])
end
if released == 2 then
  -- On the timeline when its predecessor was: a hand-off.
  local trace = nil
  if ARGV[15] ~= '' then
    trace = { key = KEYS[16], note = ARGV[16] }
  end
  local entered = enter(KEYS[1], KEYS[2], KEYS[4], KEYS[6], ARGV[8], ARGV[10], '', trace)
  return { left, released, entered[1], entered[2], entered[3] }
end
return { left, released or false }
