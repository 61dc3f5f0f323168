-- lock_state.lua: what `/stats` shows of a lock, whichever kind holds it.
--
-- KEYS[1]  lock (a string for setnx, token and redlock; a hash holder -> holds for watchdog)
--
-- Returns: { PTTL (-2 free, -1 held with no expiry, else ms left), the holder's id or
--            false }. Holder ids start with the instance id and a '/'.
local kind = redis.call('TYPE', KEYS[1]).ok
local holder = false
if kind == 'string' then
  holder = redis.call('GET', KEYS[1])
elseif kind == 'hash' then
  holder = redis.call('HKEYS', KEYS[1])[1] or false
end
return { redis.call('PTTL', KEYS[1]), holder }
