-- idem_finish.lua: the holder of an idempotency key's claim (lua/idem_claim.lua) gives it
-- its answer, or gives it up. Nothing happens unless `holder` still holds the claim (a
-- repeat may have taken an expired one over).
--
-- KEYS[1]  the claim
-- ARGV[1]  holder id
-- ARGV[2]  'done' (the answer follows) or 'release' (nothing was sold and the answer is
--          worth no replay — lock busy, lock lost, an error: a repeat is served anew)
-- ARGV[3..8] status, outcome, order, shard, remaining, instance ('' where none)
--
-- Returns: 1 when the claim was ours, else 0.
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then
  return 0
end
if ARGV[2] == 'release' then
  if redis.call('HGET', KEYS[1], 'state') == 'pending' then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[3], 'outcome', ARGV[4],
  'order', ARGV[5], 'shard', ARGV[6], 'remaining', ARGV[7], 'instance', ARGV[8])
return 1
