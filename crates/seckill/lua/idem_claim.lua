-- idem_claim.lua: a request with an idempotency key claims the key before it is served
-- (src/idempotency.rs). The claim is a hash on the product's slot, kept for the key's TTL:
--   state     'pending' while a request serves it, 'done' once it has its answer
--   request   what was asked (variant and parameters): the same key with another request
--             is refused
--   epoch     the product's reset epoch: a claim from before the last reset is forgotten
--   holder    the request serving it
--   deadline  (ms, Redis time) after which a repeat may take a pending claim over: the
--             holder died, or is far past the time its request may take
--   status, outcome, order, shard, remaining, instance: the answer, once done
-- A sale under the key records its answer here in the script that takes the unit
-- (lib/critical.lua's keyed_sale); an answer that sold nothing is written after
-- (idem_finish.lua).
--
-- KEYS[1]  the claim
-- KEYS[2]  meta    (the product's: `epoch`, `shards`)
-- KEYS[3]  audit   (the product's request counters: `replayed`)
-- ARGV[1]  the request
-- ARGV[2]  holder id
-- ARGV[3]  lease, ms: how long the request may take
-- ARGV[4]  the key's TTL, ms
-- ARGV[5]  'take' (an expired claim is taken over) or 'ask' (on a split product an expired
--          claim is answered 'expired', so that the caller looks for a sale under the key
--          in every shard first)
--
-- Returns: { 'claimed', deadline }, { 'done', status, outcome, order, shard, remaining,
--          instance } (counted as replayed), { 'mismatch' }, { 'in_flight', ms until its
--          deadline } or { 'expired', holder }.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('HGET', KEYS[2], 'epoch') or '0'
local c = redis.call('HMGET', KEYS[1], 'state', 'request', 'epoch', 'deadline', 'holder',
  'status', 'outcome', 'order', 'shard', 'remaining', 'instance')
if c[1] and c[3] == epoch then
  if c[2] ~= ARGV[1] then
    return { 'mismatch' }
  end
  if c[1] == 'done' then
    redis.call('HINCRBY', KEYS[3], 'replayed', 1)
    return { 'done', c[6], c[7], c[8] or '', c[9] or '', c[10] or '', c[11] or '' }
  end
  local left = tonumber(c[4]) - now
  if left > 0 then
    return { 'in_flight', left }
  end
  if ARGV[5] ~= 'take' and tonumber(redis.call('HGET', KEYS[2], 'shards') or '1') > 1 then
    return { 'expired', c[5] }
  end
end
local deadline = now + tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'pending', 'request', ARGV[1], 'epoch', epoch,
  'holder', ARGV[2], 'deadline', deadline)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return { 'claimed', deadline }
