-- Adds what an instance counted in memory (answers from its sold-out flag, passes it
-- refused) to the product's audit, unless a reset started another sale since.
-- KEYS[1] the audit. ARGV[1] the sale's epoch, then field, count pairs.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return 0
end
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
