-- resolve.lua: what became of a sale whose answer was lost. A command that timed out, or
-- whose connection dropped, may have run, or may still run: it can sit unread in a paused
-- Redis's socket and run when Redis goes on. So its order id is looked for on its shard, and
-- when the order is not there the id is voided, so that the sale never runs after this
-- (lib/critical.lua's `unsold`, deduct.lua's line). Either way the answer is final: what
-- the caller gives back after it (a buyer's reservation, an idempotency key's claim, a
-- lock) cannot undo a sale.
--
-- KEYS[1]  stock
-- KEYS[2]  inside  (the holder leaves the critical section: it will not commit now)
-- KEYS[3]  orders  (hash: order id -> "instance variant[ user]")
-- KEYS[4]  void    (hash: order id -> 1)
-- KEYS[5]  audit   (counts `voided`: deduct.lua looks in the void hash only when it is set)
-- ARGV[1]  the holder
-- ARGV[2]  the order id
--
-- Returns: { 1 when the order was sold, 0 when it was not (and now never will be), the
--          units left (false without a stock key, or with one that is not a string) }.
--
-- A key of another type (written by hand: what failed the sale's script, as often as not)
-- does not fail the look-up where the answer is known all the same: a stock that is not a
-- string has no units to tell, an orders key that is not a hash holds no order, and an
-- audit that is not a hash need not count the void (deduct.lua, the one script that looks
-- in the void hash only when the audit counts a void, reads its terms there before it
-- writes, and fails; the others always look). Only a void key of another type fails the
-- look-up: then the sale cannot be kept from running after, and the caller knows nothing.
redis.pcall('ZREM', KEYS[2], ARGV[1])
local stock = redis.pcall('GET', KEYS[1])
if type(stock) == 'table' then
  stock = false
end
if redis.pcall('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return { 1, stock }
end
-- Counted once per id; an id already in the void hash (voided by an older version, which
-- did not count it) is marked all the same: in the void hash means marked in the audit.
if redis.call('HSET', KEYS[4], ARGV[2], 1) == 1 then
  redis.pcall('HINCRBY', KEYS[5], 'voided', 1)
else
  redis.pcall('HSETNX', KEYS[5], 'voided', 1)
end
return { 0, stock }
