#!/usr/bin/env bash
# Where Redis's time goes under the 100-product mix (PERFORMANCE.md, "Every product mix
# against a plain service"): `lua` on seckill, and the yardstick's `lua` and `kept`, each on
# a Redis of its own, so that `INFO commandstats` counts one service's commands.
#
#   scripts/lua-redis-account.sh [ROUNDS [BIN]]    2 rounds of target/release/seckill
#
# Per round and row, one `wrk -t2 -c100 -d5s` over products p0..p99 at random, then per
# request: the rate, Redis's CPU (its process's ticks), the `EVALSHA` calls, the script's
# time, the commands it ran (each command's own time, as Redis counts it), and the rest:
# the Lua around them (its arguments, each `redis.call`'s conversions, the script's own
# code). Needs wrk; stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-2}
BIN=${2:-target/release/seckill}
command -v wrk >/dev/null || { echo "lua-redis-account: needs wrk (apt-get install wrk)" >&2; exit 2; }
if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release --bin seckill --example plain; fi

RUN=${RUN_DIR:-$PWD/run/lua-redis-account}
PLAIN_REDIS=6497
mkdir -p "$RUN"
cluster() {
  RUN_DIR=$RUN/seckill NGINX_PORT=8680 FIRST_PORT=8681 REDIS_PORT=6496 REDIS_APPENDFSYNC=off \
    INSTANCES=2 SKIP_BUILD=1 BIN="$BIN" scripts/cluster.sh "$1" >/dev/null
}
stop_all() {
  scripts/yardstick.sh stop "$RUN/plain"
  redis-cli -p $PLAIN_REDIS shutdown nosave >/dev/null 2>&1 || true
  cluster stop
}
trap stop_all EXIT
trap 'exit 130' INT TERM
cluster start
redis-server --port $PLAIN_REDIS --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --logfile "$RUN/plain-redis.log" --pidfile "$RUN/plain-redis.pid"
scripts/yardstick.sh start "$RUN/plain" 8690 $PLAIN_REDIS

for product in $(seq -f 'p%g' 0 99); do
  curl -sf -X POST "http://127.0.0.1:8680/admin/reset" \
    -d "{\"product\":\"$product\",\"stock\":100000000}" >/dev/null
  redis-cli -p $PLAIN_REDIS set "seckill:{$product}:stock" 100000000 >/dev/null
  redis-cli -p $PLAIN_REDIS hset "plain:{$product}:audit" epoch 1 per_user 0 >/dev/null
done
ticks() { local f; read -r -a f <"/proc/$1/stat"; echo $((f[13] + f[14])); }
redis_pid() { redis-cli -p "$1" info server | tr -d '\r' | awk -F: '/^process_id/{print $2}'; }
printf '%-16s %8s %10s %9s %10s %10s %10s\n' row 'req/s' 'Redis µs' 'EVALSHA' 'script µs' \
  'commands' 'Lua µs'
for round in $(seq "$ROUNDS"); do
  for row in "seckill 8680 6496 lua" "yardstick 8690 $PLAIN_REDIS lua" \
    "kept 8690 $PLAIN_REDIS kept"; do
    read -r label port redis route <<<"$row"
    wrk -t2 -c100 -d1s -s loadtest/spread.lua "http://127.0.0.1:$port" -- "$route" 100 >/dev/null
    redis-cli -p "$redis" config resetstat >/dev/null
    pid=$(redis_pid "$redis")
    before=$(ticks "$pid")
    requests=$(wrk -t2 -c100 -d5s -s loadtest/spread.lua "http://127.0.0.1:$port" -- "$route" 100 |
      awk '/requests in/{print $1}')
    after=$(ticks "$pid")
    redis-cli -p "$redis" info commandstats | tr -d '\r' | awk -F'[:=,]' \
      -v label="round $round $label" -v q="$requests" -v cpu=$((after - before)) \
      -v hz="$(getconf CLK_TCK)" '
      /^cmdstat_evalsha:/ { calls = $3; script = $5; next }
      /^cmdstat_(config|info|ping|smembers)/ { next }
      /^cmdstat_/ { commands += $5 }
      END {
        printf "%-16s %8.0f %10.2f %9.3f %10.2f %10.2f %10.2f\n", label, q / 5,
          cpu * 1e6 / hz / q, calls / q, script / q, commands / q, (script - commands) / q
      }'
  done
done
