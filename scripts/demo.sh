#!/usr/bin/env bash
# The whole progression, reproduced under load through Nginx: start a local cluster (one
# durable Redis, or a Redis Cluster with REDIS=cluster; two instances; Nginx; PostgreSQL
# for the orders of record), run `seckill-bench` over every variant and the failure
# lessons, then the per-user lesson, what the orders' database costs, and a sale whose
# buyers must pay in time; print the tables and where the chart is, stop the cluster.
# Nothing is left running, even on Ctrl-C.
#
#   scripts/demo.sh [extra seckill-bench flags, e.g. --requests 5000 --concurrency 200]
#
# Ports and sizes come from the environment as in scripts/cluster.sh; the run folder
# defaults to ./run/demo, where bench.json and bench.svg are written.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUN_DIR=${RUN_DIR:-$PWD/run/demo}
export INSTANCES=${INSTANCES:-2}
export NGINX_PORT=${NGINX_PORT:-8080}
export REDIS_PORT=${REDIS_PORT:-6390}
export POSTGRES=${POSTGRES:-1}
# The setnx lesson needs faults on. (The watchdog lesson asks for its own lease, the token
# lesson's TTL, with lease_ms and renew=on: crates/seckill-lessons/src/catalogue.rs.)
export SECKILL_SERVE_ARGS="--faults ${SECKILL_SERVE_ARGS:-}"

scripts/install-deps.sh
cargo build --release

trap 'scripts/cluster.sh stop' EXIT
trap 'exit 130' INT TERM
SKIP_BUILD=1 scripts/cluster.sh start

target/release/seckill-bench --lessons \
  --url "http://127.0.0.1:$NGINX_PORT" \
  $(scripts/cluster.sh redis-flags) \
  --json "$RUN_DIR/bench.json" \
  --chart "$RUN_DIR/bench.svg" \
  "$@"

# One order per user (一人一单): 20 buyers, each clicking 10 times at once, one unit each
# allowed. naive checks then records from the application, and sells a buyer several;
# a lock and the Lua script hold the limit.
echo
echo "One order per user: 20 buyers x 10 clicks at once, per_user 1"
target/release/seckill-bench \
  --url "http://127.0.0.1:$NGINX_PORT" \
  $(scripts/cluster.sh redis-flags) \
  --variants naive,watchdog,lua \
  --users 20 --clicks 10 --per-user 1 \
  --requests 200 --concurrency 200 --stock 1000 \
  --json "$RUN_DIR/buyers.json"

if [ "$POSTGRES" = 1 ]; then
  # Orders of record: every sale's script appends its order to a Redis Stream; the
  # instances' consumers insert them into PostgreSQL. What that costs, against the same
  # sales with their orders kept in Redis only, and how fast the backlog drains.
  echo
  echo "Orders of record: lua and watchdog with the orders streamed into PostgreSQL, and without"
  target/release/seckill-bench \
    --url "http://127.0.0.1:$NGINX_PORT" \
    $(scripts/cluster.sh redis-flags) \
    --suite orders --rounds 1 \
    --json "$RUN_DIR/orders.json"
fi

# Payment or expiry: 10 units, 2 s to pay. Ten buyers reserve one each, the first five pay;
# the other five reservations expire and their units go back on sale.
echo
echo "Payment or expiry: 10 buyers reserve a unit each, 5 pay within 2 s, 5 do not"
base="http://127.0.0.1:$NGINX_PORT"
curl -fsS -X POST "$base/admin/reset" -H 'content-type: application/json' \
  -d '{"product": "101", "stock": 10, "pay_within_ms": 2000}' >/dev/null
orders=()
for user in u0 u1 u2 u3 u4 u5 u6 u7 u8 u9; do
  orders+=("$(curl -fsS -X POST "$base/deduct_stock/lua?product=101&user=$user" \
    | grep -o '"order":"[^"]*"' | cut -d'"' -f4)")
done
for order in "${orders[@]:0:5}"; do
  curl -fsS -X POST "$base/orders/$order/pay?product=101" >/dev/null
done
sleep 2.5
echo "a late payment: $(curl -sS -X POST "$base/orders/${orders[9]}/pay?product=101")"
stats=$(curl -fsS "$base/stats?product=101")
echo "remaining: $(grep -o '"remaining":[0-9]*' <<<"$stats" | head -1 | cut -d: -f2)"
echo "payment: $(grep -o '"payment":{[^}]*}' <<<"$stats")"
