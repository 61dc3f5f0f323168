-- deduct.lua: the lock-free variant. Checks the stock, takes units and records their
-- orders in one atomic step, so no lock is needed. One call serves one or more deductions
-- of one product (an instance sends together the ones that arrived while its previous call
-- was in flight); each still takes exactly one unit or none.
--
-- KEYS[1]  stock   (string: units left)
-- KEYS[2]  orders  (hash: order id -> "instance variant")
-- KEYS[3]  audit   (hash of counters: `sold/<instance>/<variant>` for sales, `sold_out`
--                   for deductions that found nothing; '/' cannot occur in an instance id
--                   or a variant name)
-- ARGV[1]  instance id
-- ARGV[2]  variant name
-- ARGV[3..] order ids, one per deduction, first come first served
--
-- Returns: {units in stock before this call, units sold}: the first `sold` order ids were
--          sold, the i-th of them leaving `stock - i`, the rest found the product sold out;
--          nil when there is no stock key (never reset, or Redis lost it: not for sale).
local stock = redis.call('GET', KEYS[1])
if not stock then
  return false
end
stock = tonumber(stock)
local wanted = #ARGV - 2
local sold = math.max(0, math.min(stock, wanted))
if sold > 0 then
  redis.call('DECRBY', KEYS[1], sold)
  local who = ARGV[1] .. ' ' .. ARGV[2]
  local orders = {}
  for i = 1, sold do
    orders[2 * i - 1] = ARGV[i + 2]
    orders[2 * i] = who
  end
  redis.call('HSET', KEYS[2], unpack(orders))
  redis.call('HINCRBY', KEYS[3], 'sold/' .. ARGV[1] .. '/' .. ARGV[2], sold)
end
if sold < wanted then
  redis.call('HINCRBY', KEYS[3], 'sold_out', wanted - sold)
end
return {stock, sold}
