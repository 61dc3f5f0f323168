-- rw.lua: a reentrant read-write lock with writer preference (src/rw.rs).
--
-- KEYS[1] reads    hash: reader -> hold count
-- KEYS[2] readers  sorted set: reader -> the time (ms) its lease runs out
-- KEYS[3] writer   hash: the writer -> hold count; its TTL is the writer's lease
-- KEYS[4] intent   the writer first in line (TTL ARGV[4])
-- ARGV[1] op: read, write, renew_read, renew_write, unread, unwrite, give_up
-- ARGV[2] holder
-- ARGV[3] lease, ms
-- ARGV[4] how long a waiting writer's intent lasts, ms
--
-- Returns 1 when done (taken, renewed, released), 0 when not (held by others; not held).

local reads, readers, writer, intent = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, holder, lease, intent_ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Readers whose lease ran out (they died) no longer count.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', readers, '-inf', now)) do
  redis.call('HDEL', reads, gone)
end
redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)

-- The writer's hold, if another holder has it.
local function other_writer()
  local w = redis.call('HKEYS', writer)
  return #w > 0 and w[1] ~= holder
end

-- Puts this writer in line, unless another writer is first.
local function in_line()
  local first = redis.call('GET', intent)
  if not first or first == holder then
    redis.call('SET', intent, holder, 'PX', intent_ttl)
  end
end

if op == 'read' then
  if other_writer() then
    return 0
  end
  -- A writer in line goes first, unless this holder reads already (reentrant) or writes.
  local first = redis.call('GET', intent)
  if first and first ~= holder and redis.call('HEXISTS', reads, holder) == 0
      and redis.call('HEXISTS', writer, holder) == 0 then
    return 0
  end
  redis.call('HINCRBY', reads, holder, 1)
  redis.call('ZADD', readers, now + lease, holder)
  return 1
elseif op == 'write' then
  if other_writer() then
    in_line()
    return 0
  end
  for _, reader in ipairs(redis.call('ZRANGE', readers, 0, 1)) do
    if reader ~= holder then
      in_line()
      return 0
    end
  end
  local first = redis.call('GET', intent)
  if first and first ~= holder then
    return 0
  end
  redis.call('HINCRBY', writer, holder, 1)
  redis.call('PEXPIRE', writer, lease)
  if first then
    redis.call('DEL', intent)
  end
  return 1
elseif op == 'renew_read' then
  if redis.call('HEXISTS', reads, holder) == 0 then
    return 0
  end
  redis.call('ZADD', readers, now + lease, holder)
  return 1
elseif op == 'renew_write' then
  if redis.call('HEXISTS', writer, holder) == 0 then
    return 0
  end
  redis.call('PEXPIRE', writer, lease)
  return 1
elseif op == 'unread' then
  if redis.call('HEXISTS', reads, holder) == 0 then
    return 0
  end
  if redis.call('HINCRBY', reads, holder, -1) <= 0 then
    redis.call('HDEL', reads, holder)
    redis.call('ZREM', readers, holder)
  end
  return 1
elseif op == 'unwrite' then
  if redis.call('HEXISTS', writer, holder) == 0 then
    return 0
  end
  if redis.call('HINCRBY', writer, holder, -1) <= 0 then
    redis.call('DEL', writer)
  end
  return 1
elseif op == 'give_up' then
  if redis.call('GET', intent) == holder then
    redis.call('DEL', intent)
  end
  return 1
end
return redis.error_reply('rw.lua: unknown op ' .. tostring(op))
