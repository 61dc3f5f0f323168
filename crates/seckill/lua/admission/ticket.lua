-- A buyer's place in a product's waiting room: the number of its first arrival, so that
-- asking again (a reload, a retry after a lost answer) keeps the place, and a buyer holds
-- one place however often it asks.
-- KEYS[1] the room's counter, KEYS[2] hash buyer -> number. ARGV[1] the buyer.
-- Answer: {number, 1 when taken now, 0 when the buyer had it}.
local had = redis.call('HGET', KEYS[2], ARGV[1])
if had then
  return {tonumber(had), 0}
end
local number = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], number)
return {number, 1}
