-- A sale spread over many products, for wrk: each request a POST of
-- /deduct_stock/ROUTE?product=pI, I at random from 0 to PRODUCTS - 1 (products p0, p1, …,
-- each reset first). With PRODUCTS 1, every request is the same, sent as wrk sends a
-- request without a script.
--
--   wrk -t2 -c100 -d5s -s loadtest/spread.lua http://127.0.0.1:8080 -- lua 100
--
-- ROUTE is the variant (`lua` by default; `kept` on the yardstick, examples/plain.rs),
-- PRODUCTS 1 by default. Used by scripts/lua-ceiling.sh, lua-pairs.sh and
-- lua-redis-account.sh.
wrk.method = "POST"

local prefix, products

function init(args)
  prefix = "/deduct_stock/" .. (args[1] or "lua") .. "?product=p"
  products = tonumber(args[2] or "1")
  if products == 1 then
    wrk.path = prefix .. "0"
    request = nil
  end
end

function request()
  return wrk.format(nil, prefix .. math.random(0, products - 1))
end
