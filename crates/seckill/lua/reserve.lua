-- reserve.lua: a split product's per-user limit. A buyer's units are counted on the
-- product's slot, while the stock they come from is on a shard's slot, elsewhere on a
-- Redis Cluster: so the unit is reserved here first (within the limit), then taken from a
-- shard. A reservation is a record of its own, named by the request's holder id, so that
-- it is given back at most once, by whoever learns first that no shard sold it: the
-- request itself, the task that looks up a sale whose answer was lost, or a repeat of the
-- request that took its idempotency key over. A sale whose answer was lost is never
-- guessed unsold: the buyer may buy one unit fewer (`/stats` `reserved_unsold`) until it
-- is looked up, never one more.
--
-- KEYS[1]  meta         (the product's: `per_user`, `epoch`)
-- KEYS[2]  reserved     (hash: user -> units reserved, sold ones included)
-- KEYS[3]  reservation  (the holder's record, "<epoch> <buyer>", while the unit is
--                        reserved: a record from before the last reset gives nothing back)
-- KEYS[4]  the request's idempotency key's claim, which notes the reservation (with
--          'take'; any key of the slot when the request has no key)
-- ARGV[1]  'take' (reserve one unit), 'give' (give the holder's reservation back) or
--          'return' (an expired order's unit back to its buyer: KEYS[3] is then the
--          order's mark, which lets it happen once; it has no expiry until the caller
--          struck the order from its shard's `owed` and gave the mark one)
-- ARGV[2]  with 'take' and 'return': the buyer, or ''
-- ARGV[3]  with 'take': the holder id
-- ARGV[4]  with 'take': how long the record is kept, ms
--
-- Returns: 1 reserved (or given back); 0 the product has no limit (nothing to reserve), or
--          nothing to give back (given back already, or never reserved); 'limit_reached'
--          the buyer has their limit; 'user_required' a limited product and no buyer. A give leaves a mark for 10
--          minutes, so that a take of the same holder arriving late reserves nothing.
local epoch = redis.call('HGET', KEYS[1], 'epoch') or '0'
if ARGV[1] == 'give' then
  -- What is left of the record is a mark that it was given back: a take that arrives
  -- after its give (its answer had been lost, and it was still on its way) reserves
  -- nothing.
  local record = redis.call('GET', KEYS[3])
  redis.call('SET', KEYS[3], '-', 'PX', 600000)
  if not record or record == '-' then
    return 0
  end
  local at, user = string.match(record, '^(%S+) (.*)$')
  if at ~= epoch then
    return 0
  end
  if tonumber(redis.call('HGET', KEYS[2], user) or '0') > 0 then
    redis.call('HINCRBY', KEYS[2], user, -1)
  end
  return 1
end
if ARGV[1] == 'return' then
  -- The mark stands until the shard's note of the debt is struck (the caller then gives
  -- it 10 minutes): were it to expire while the note stands, the next sweep would give
  -- the unit back again.
  if not redis.call('SET', KEYS[3], epoch, 'NX') then
    return 0
  end
  if tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') > 0 then
    redis.call('HINCRBY', KEYS[2], ARGV[2], -1)
  end
  return 1
end
local limit = tonumber(redis.call('HGET', KEYS[1], 'per_user') or '0')
if limit <= 0 then
  return 0
end
local user = ARGV[2]
if user == '' then
  return 'user_required'
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- This very request, asking again (its first answer was lost), or after it gave up.
  return 1
end
if tonumber(redis.call('HGET', KEYS[2], user) or '0') >= limit then
  return 'limit_reached'
end
redis.call('HINCRBY', KEYS[2], user, 1)
redis.call('SET', KEYS[3], epoch .. ' ' .. user, 'PX', ARGV[4])
if redis.call('HGET', KEYS[4], 'holder') == ARGV[3] then
  redis.call('HSET', KEYS[4], 'reserved', ARGV[3])
end
return 1
