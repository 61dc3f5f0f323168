-- enter.lua: a lock holder enters its critical section and reads the stock
-- (lib/critical.lua's `enter`).
--
-- KEYS[1]  stock
-- KEYS[2]  inside
-- KEYS[3]  audit
-- KEYS[4]  fence
-- KEYS[5]  trace   (the shard's timeline)
-- ARGV[1]  holder id
-- ARGV[2]  how long the holder may stay inside, ms (its work plus a margin)
-- ARGV[3]  the holder's fencing token, or ''
-- ARGV[4]  what the holder says of itself on the timeline, if the product is traced
--
-- Returns: { stock or false, 1 when another holder was inside (an overlap) else 0, 1 when
--          the product is traced (the holder is on its timeline) else 0 }.
return enter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3],
  { key = KEYS[5], note = ARGV[4] })
