-- idem_finish.lua: the holder of an idempotency key's claim (lua/idem_claim.lua) gives it
-- its answer, gives it up, or says it does not know. Nothing happens unless `holder` still
-- holds the claim (a repeat may have taken it over).
--
-- KEYS[1]  the claim
-- KEYS[2]  the holder's reservation (lua/reserve.lua): with an answer that sold, the
--          reservation was used, and its record goes (any key of the slot where none)
-- ARGV[1]  holder id (with 'forget': the order id the answer names)
-- ARGV[2]  'done' (the answer follows), 'release' (nothing was sold, for sure, and the
--          answer is worth no replay — lock busy, an error before the sale: a repeat is
--          served anew; a claim that was taken over is marked 'unknown' instead, so that
--          the repeat takes it over and fences anew), 'unknown' (the sale's answer was lost and could not be looked up:
--          a repeat takes the claim over at once, and finds out) or 'forget' (by anyone: the
--          answer's sale is known not to have survived a failover, and its id was voided:
--          the claim goes, unless it has another answer by now, and a repeat is served anew)
-- ARGV[3..8] with 'done': status, outcome, order, shard, remaining, instance ('' where none)
--
-- Returns: 1 when the claim was ours (with 'forget': when it was forgotten), else 0.
if ARGV[2] == 'forget' then
  local f = redis.call('HMGET', KEYS[1], 'state', 'order')
  if f[1] == 'done' and f[2] == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
local c = redis.call('HMGET', KEYS[1], 'holder', 'state')
if c[1] ~= ARGV[1] then
  return 0
end
if ARGV[2] == 'release' then
  if c[2] ~= 'done' then
    if redis.call('HEXISTS', KEYS[1], 'took_from') == 1 then
      -- Taken over: its holder fenced the key's shards (a split product's, a cart's
      -- lines) for itself alone. A fresh claim would meet those fences and be refused on
      -- every one of them for the key's TTL; so the claim is left for the next repeat to
      -- take over at once, fencing them anew for itself.
      redis.call('HSET', KEYS[1], 'state', 'unknown')
    else
      redis.call('DEL', KEYS[1])
    end
  end
  return 1
end
if ARGV[2] == 'unknown' then
  if c[2] == 'pending' then
    redis.call('HSET', KEYS[1], 'state', 'unknown')
  end
  return 1
end
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[3], 'outcome', ARGV[4],
  'order', ARGV[5], 'shard', ARGV[6], 'remaining', ARGV[7], 'instance', ARGV[8])
if ARGV[5] ~= '' then
  redis.call('DEL', KEYS[2])
end
return 1
