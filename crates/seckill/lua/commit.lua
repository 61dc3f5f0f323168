-- commit.lua: take one unit, record the order and leave the critical section, in one
-- round trip (lib/critical.lua's `commit`). Used by every variant that decides in the
-- application (all but lua) when it does not give a watchdog lock back in the same trip.
--
-- KEYS[1]  stock
-- KEYS[2]  inside
-- KEYS[3]  orders
-- KEYS[4]  audit
-- KEYS[5]  lock    (the watchdog lock hash, checked when ARGV[7] is set)
-- KEYS[6]  fence
-- KEYS[7]  buyers
-- KEYS[8]  meta    (the product's, when the shard is the whole product)
-- KEYS[9]  the idempotency key's claim on this slot (its fence with ARGV split '1')
-- KEYS[10] keys    (hash: idempotency key -> order)
-- KEYS[11] stream  (the shard's orders stream, written when the sale is streamed)
-- KEYS[12] unpaid  (sorted set: order -> deadline to pay by, with a payment window)
-- KEYS[13] trace   (the shard's timeline)
-- KEYS[14] void    (hash: order ids voided after their answer was lost)
-- ARGV[1]  holder id
-- ARGV[2]  order id
-- ARGV[3]  instance id
-- ARGV[4]  variant name
-- ARGV[5]  'decr', 'set' (write ARGV[6]) or 'leave'
-- ARGV[6]  the value for 'set'
-- ARGV[7]  a holder that must still hold KEYS[5] (a watchdog lock hash), or ''
-- ARGV[8]  the holder's fencing token, or ''
-- ARGV[9]  the buyer, or ''
-- ARGV[10] 'check' (the per-user limit, here) or 'record' (checked by the application)
-- ARGV[11] the idempotency key, or ''
-- ARGV[12] '1' where the claim gets its answer after the sale (a split product's shard, a
--          cart's line), else '0'
-- ARGV[13] this shard's index
-- ARGV[14] what the holder says of itself on the timeline, or '' (not on it)
-- ARGV[15] the sale's epoch the holder's entry read (enter.lua), or '' (not checked)
--
-- Returns: the units left, or why nothing was sold ('gone', 'lock_lost', 'fenced',
--          'limit_reached', 'user_required', 'taken_over', 'voided': lib/critical.lua's
--          `sell`).
return commit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[1],
  ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10],
  { claim = KEYS[9], keys = KEYS[10], key = ARGV[11], split = ARGV[12], shard = ARGV[13],
    stream = KEYS[11], unpaid = KEYS[12], void = KEYS[14], call = {}, epoch = ARGV[15],
    trace = { key = KEYS[13], note = ARGV[14] } })
