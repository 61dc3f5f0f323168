-- idem_fence.lua: a request that took over the claim of an idempotency key on a split
-- product (lua/idem_claim.lua) looks at one shard before it sells: either the request it
-- took over sold here under the key (its answer was lost), or the shard is fenced, so that
-- only the new holder may sell here under the key from now on (lib/critical.lua's
-- `keyed`). Once every shard is looked at, the old request can sell nowhere, and what the
-- new one found is the whole truth.
--
-- KEYS[1]  keys    (hash: idempotency key -> "<the order sold under it here> <until ms>")
-- KEYS[2]  the key's fence on this shard (a string: "<epoch> <holder>")
-- KEYS[3]  audit   (the shard's: `epoch`)
-- ARGV[1]  the idempotency key
-- ARGV[2]  the holder that now serves it
-- ARGV[3]  how long the fence stands, ms (the key's TTL)
--
-- Returns: the order sold under the key here, or false (none: the shard is fenced).
-- The record is "<order> <until ms>" (lib/critical.lua's `key_record`): past its time, a
-- sale of an earlier use of the key, which is not this request's.
local record = redis.call('HGET', KEYS[1], ARGV[1])
if record then
  local order, until_ms = string.match(record, '^(%S+) (%d+)$')
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not order then
    return record
  end
  if tonumber(until_ms) > now then
    return order
  end
end
local epoch = redis.call('HGET', KEYS[3], 'epoch') or '0'
redis.call('SET', KEYS[2], epoch .. ' ' .. ARGV[2], 'PX', ARGV[3])
return false
