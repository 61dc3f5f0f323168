-- idem_claim.lua: a request with an idempotency key claims the key before it is served
-- (src/idempotency.rs). The claim is a hash on the product's slot, kept for the key's TTL:
--   state     'pending' while a request serves it; 'unknown' once that request gave up
--             without knowing whether it sold (a lost answer); 'done' once it has its answer
--   request   what was asked (variant and parameters): the same key with another request
--             is refused
--   epoch     the product's reset epoch: a claim from before the last reset is forgotten
--   holder    the request serving it
--   deadline  (ms, Redis time) after which a repeat may take a pending claim over: the
--             holder died, or is far past the time its request may take
--   reserved  a split product with a per-user limit: the holder whose reservation
--             (lua/reserve.lua) this claim's request holds, '' or none for none
--   took_from the holder this claim was taken over from, if it was
--   status, outcome, order, shard, remaining, instance: the answer, once done
-- A sale under the key records its answer here in the script that takes the unit
-- (lib/critical.lua's keyed_sale) where it can: on the whole product, whose stock shares
-- this slot. Other answers are written after (idem_finish.lua).
--
-- A repeat takes over a claim that is 'unknown', or 'pending' past its deadline. On the
-- whole product that is all it takes: the sale scripts sell under the key only for the
-- claim's holder, so the old request's sale, had it not run yet, never will. On a split
-- product the caller must fence every shard first (idem_fence.lua), and is told whom it
-- took the claim from.
--
-- KEYS[1]  the claim
-- KEYS[2]  meta    (the product's: `epoch`)
-- KEYS[3]  audit   (the product's request counters: `replayed`)
-- ARGV[1]  the request
-- ARGV[2]  holder id
-- ARGV[3]  lease, ms: how long the request may take
-- ARGV[4]  the key's TTL, ms
--
-- Returns: { 'claimed', deadline } or, when it took the claim over, { 'claimed', deadline,
--          the old holder, the holder whose reservation it held ('' for none) };
--          { 'done', status, outcome, order, shard, remaining, instance } (counted as
--          replayed); { 'mismatch' }; { 'in_flight', ms until its deadline }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('HGET', KEYS[2], 'epoch') or '0'
local c = redis.call('HMGET', KEYS[1], 'state', 'request', 'epoch', 'deadline', 'holder',
  'reserved', 'status', 'outcome', 'order', 'shard', 'remaining', 'instance')
local took = nil
if c[1] and c[3] == epoch then
  if c[2] ~= ARGV[1] then
    return { 'mismatch' }
  end
  if c[1] == 'done' then
    redis.call('HINCRBY', KEYS[3], 'replayed', 1)
    return { 'done', c[7], c[8], c[9] or '', c[10] or '', c[11] or '', c[12] or '' }
  end
  if c[5] == ARGV[2] then
    -- This very request, asking again (its first answer was lost): still its own, and
    -- when that first answer took the claim over, it is told so again: it must still
    -- fence and give back what the old holder held.
    local from = redis.call('HGET', KEYS[1], 'took_from')
    if from then
      return { 'claimed', c[4], from, c[6] or '' }
    end
    return { 'claimed', c[4] }
  end
  local left = tonumber(c[4]) - now
  if c[1] == 'pending' and left > 0 then
    return { 'in_flight', left }
  end
  took = { c[5], c[6] or '' }
end
local deadline = now + tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'pending', 'request', ARGV[1], 'epoch', epoch,
  'holder', ARGV[2], 'deadline', deadline)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if took then
  -- The reservation stays noted until the new holder gives it back (`reserve.lua give`
  -- does it once): should it fail first, the next repeat finds it here.
  if took[2] ~= '' then
    redis.call('HSET', KEYS[1], 'reserved', took[2])
  end
  redis.call('HSET', KEYS[1], 'took_from', took[1])
  return { 'claimed', deadline, took[1], took[2] }
end
return { 'claimed', deadline }
