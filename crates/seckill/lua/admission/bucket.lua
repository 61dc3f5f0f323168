-- A buyer's token bucket (Redisson's RRateLimiter per client, as a bucket): `burst`
-- tokens at most, refilled at `rate` a second; a deduction takes one. Redis's clock, so
-- every instance counts the same time. A refusal is counted in the product's audit here,
-- in the step that decides it.
-- KEYS[1] the bucket, KEYS[2] the product's audit. ARGV[1] rate a second, ARGV[2] burst.
-- Answer: 0 when a token was taken; else the ms until the next one.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(held[1]), tonumber(held[2])
if not tokens or not at or at > now then
  tokens, at = burst, now
end
tokens = math.min(burst, tokens + (now - at) * rate / 1000)
local ttl = math.ceil(burst * 1000 / rate) + 1000
if tokens < 1 then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('HINCRBY', KEYS[2], 'admission/rate_limited', 1)
  return math.max(1, math.ceil((1 - tokens) * 1000 / rate))
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'at', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
