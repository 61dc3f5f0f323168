-- lib/lock.lua: the watchdog lock (Redisson's RLock), its fair queue and its hand-off, as
-- Lua functions. Not a script by itself: src/scripts.rs puts it in front of each script in
-- lua/ that uses it, so every step is written once.
--
-- A lock is a hash, holder -> hold count, with a lease (PEXPIRE). Every variant's lock on a
-- product lives at the same key, so a setnx or token holder (a string) holds it against a
-- watchdog caller just as another watchdog holder does.
--
-- A fair lock adds two keys on the lock's slot: `queue`, a list of waiting holders, oldest
-- first, and `waiting`, a sorted set holder -> the time (ms) after which a waiter that has
-- not tried again counts as gone and leaves the queue (it died, or gave up silently).

-- Redis's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- One more hold for `holder`, on a lock that is free (kind 'none') or already its own.
local function hold(lock, lease, holder)
  redis.call('HINCRBY', lock, holder, 1)
  redis.call('PEXPIRE', lock, lease)
end

-- How long a caller that found `lock` held may sleep before trying again, ms: the holder's
-- TTL (an unlock message may wake it sooner), or -1 when a setnx or token holder (a
-- string, whose release sends no message) has it.
local function held_for(lock, kind)
  if kind ~= 'hash' then
    return -1
  end
  return redis.call('PTTL', lock)
end

-- Takes (or re-enters) `lock` for `holder`. Returns nil when the holder now holds it;
-- otherwise how long to sleep (`held_for`).
local function take(lock, lease, holder)
  local kind = redis.call('TYPE', lock).ok
  if kind == 'none' or (kind == 'hash' and redis.call('HEXISTS', lock, holder) == 1) then
    hold(lock, lease, holder)
    return nil
  end
  return held_for(lock, kind)
end

-- Drops the waiters whose time ran out from a fair lock's queue. Returns how many.
local function purge(queue, waiting, now)
  local gone = redis.call('ZRANGEBYSCORE', waiting, '-inf', now)
  for _, holder in ipairs(gone) do
    redis.call('LREM', queue, 1, holder)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', waiting, '-inf', now)
  end
  return #gone
end

-- The fair take: a free lock goes to the queue's head, or to anyone when nobody queues;
-- anyone else joins the queue's end (once) and stays in it for `patience` ms from each try.
-- Returns as `take`. When the purge made somebody else the head of a free lock, the head
-- is told by name on `channel`, since nobody's release will tell it.
local function take_fair(lock, channel, queue, waiting, lease, holder, patience)
  local now = now_ms()
  local purged = purge(queue, waiting, now)
  local kind = redis.call('TYPE', lock).ok
  if kind == 'hash' and redis.call('HEXISTS', lock, holder) == 1 then
    hold(lock, lease, holder)
    return nil
  end
  local head = redis.call('LINDEX', queue, 0)
  if kind == 'none' and (not head or head == holder) then
    hold(lock, lease, holder)
    if head then
      redis.call('LPOP', queue)
      redis.call('ZREM', waiting, holder)
    end
    return nil
  end
  if not redis.call('ZSCORE', waiting, holder) then
    redis.call('RPUSH', queue, holder)
  end
  redis.call('ZADD', waiting, now + patience, holder)
  if kind == 'none' then
    if purged > 0 and head then
      redis.call('PUBLISH', channel, head)
    end
    return patience
  end
  return held_for(lock, kind)
end

-- Takes (or re-enters) `lock` as watchdog_lock.lua does (see there), fair or not. Returns
-- as `take`.
local function take_any(lock, channel, queue, waiting, lease, holder, mode, patience, first)
  if first == 'first' and redis.call('TYPE', lock).ok == 'hash'
      and redis.call('HEXISTS', lock, holder) == 1 then
    -- Already the caller's, though its handle holds nothing: a holder handed it over, and
    -- the answer was lost on its way back (a timeout), so the caller was told to try
    -- again. It is one hold, not a second one, or its release would leave the lock held.
    redis.call('HSET', lock, holder, 1)
    redis.call('PEXPIRE', lock, lease)
    return nil
  end
  if mode == 'fair' then
    return take_fair(lock, channel, queue, waiting, lease, holder, tonumber(patience))
  end
  return take(lock, lease, holder)
end


-- Who a release tells: the fair queue's head by name, or anyone ('released').
local function announce(channel, queue, waiting)
  if queue then
    purge(queue, waiting, now_ms())
    local head = redis.call('LINDEX', queue, 0)
    if head then
      redis.call('PUBLISH', channel, head)
      return
    end
  end
  redis.call('PUBLISH', channel, 'released')
end

-- Gives back one of `holder`'s holds. On the last one the lock goes to `successor` when one
-- is named (a waiter of the caller's own instance, with its own lease; nobody is told), or
-- is deleted and its waiters are told (`queue`/`waiting` given: the lock is fair).
-- Returns nil when the holder did not hold the lock (it expired, or was taken from it);
-- 0 when holds remain; 1 when released; 2 when handed to `successor`.
local function release(lock, channel, lease, holder, successor, successor_lease, queue, waiting)
  if redis.call('TYPE', lock).ok ~= 'hash' or redis.call('HEXISTS', lock, holder) == 0 then
    return nil
  end
  local holds = redis.call('HINCRBY', lock, holder, -1)
  if holds > 0 then
    redis.call('PEXPIRE', lock, lease)
    return 0
  end
  redis.call('DEL', lock)
  if successor and successor ~= '' then
    redis.call('HSET', lock, successor, 1)
    redis.call('PEXPIRE', lock, successor_lease)
    return 2
  end
  announce(channel, queue, waiting)
  return 1
end

-- A fair waiter that gives up leaves the queue; if that leaves a free lock to a new head,
-- the head is told. Returns 1 when the holder was queued.
local function leave_queue(lock, channel, queue, waiting, holder)
  local queued = redis.call('LREM', queue, 1, holder)
  redis.call('ZREM', waiting, holder)
  if queued > 0 and redis.call('EXISTS', lock) == 0 then
    local head = redis.call('LINDEX', queue, 0)
    if head then
      redis.call('PUBLISH', channel, head)
    end
  end
  return queued
end
