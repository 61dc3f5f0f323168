#!/usr/bin/env bash
# `lua` against the yardstick in short pairs (PERFORMANCE.md, "Every product mix against a
# plain service"), or one build against another. Where scripts/lua-ceiling.sh runs every
# mix for five seconds a row, this runs one product and 100 products only, three seconds
# a row, many pairs, in an order that turns round from pair to pair: a slow spell of the
# machine falls on both sides of a ratio, and the order cannot favour either.
#
#   scripts/lua-pairs.sh [PAIRS [BIN [BIN_B]]]     8 pairs of target/release/seckill
#   SKIP_BUILD=1 scripts/lua-pairs.sh 8 bins/seckill-c1f5948 target/release/seckill
#
# Each build runs on a cluster of its own (scripts/cluster.sh: Nginx, two instances, one
# Redis, no AOF), the yardstick (examples/plain.rs, two behind an Nginx of their own) on
# the first build's Redis. Per pair and mix: one `wrk -t2 -c100 -d3s` row each for the
# build, BIN_B (when given), the yardstick and its `kept` route. Then, per mix, the median
# of the per-pair ratios: the build ÷ the yardstick, ÷ `kept`, and BIN_B ÷ the build.
# Needs wrk. Stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=${1:-8}
A=${2:-target/release/seckill}
B=${3:-}
D=${DURATION_S:-3}
command -v wrk >/dev/null || { echo "lua-pairs: needs wrk (apt-get install wrk)" >&2; exit 2; }
if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release --bin seckill --example plain; fi

RUN=${RUN_DIR:-$PWD/run/lua-pairs}
export REDIS_APPENDFSYNC=off INSTANCES=2 SKIP_BUILD=1
# cluster NAME NGINX_PORT REDIS_PORT ACTION [BIN]
cluster() {
  RUN_DIR=$RUN/$1 NGINX_PORT=$2 FIRST_PORT=$(($2 + 1)) REDIS_PORT=$3 BIN=${5:-} \
    scripts/cluster.sh "$4" >/dev/null
}
stop_all() {
  rm -f "${results:-}"
  scripts/yardstick.sh stop "$RUN/plain"
  cluster a 8480 6494 stop
  [ -z "$B" ] || cluster b 8580 6495 stop
}
trap stop_all EXIT
trap 'exit 130' INT TERM
cluster a 8480 6494 start "$A"
[ -z "$B" ] || cluster b 8580 6495 start "$B"
scripts/yardstick.sh start "$RUN/plain" 8490 6494

for product in $(seq -f 'p%g' 0 99); do
  for port in 8480 ${B:+8580}; do
    curl -sf -X POST "http://127.0.0.1:$port/admin/reset" \
      -d "{\"product\":\"$product\",\"stock\":100000000}" >/dev/null
  done
  redis-cli -p 6494 hset "plain:{$product}:audit" epoch 1 per_user 0 >/dev/null
done
# The rows of a pair: label, port, route.
targets=("build 8480 lua")
[ -z "$B" ] || targets+=("build_b 8580 lua")
targets+=("yardstick 8490 lua" "kept 8490 kept")
rps() { wrk -t2 -c100 -d"$1" -s loadtest/spread.lua "http://127.0.0.1:$2" -- "$3" "$4" | awk '/Requests\/sec/{print $2}'; }
for mix in 1 100; do
  for t in "${targets[@]}"; do
    read -r _ port route <<<"$t"
    rps 1s "$port" "$route" "$mix" >/dev/null
  done
done

results=$(mktemp)
for pair in $(seq "$PAIRS"); do
  order=("${targets[@]}")
  if [ $((pair % 2)) = 0 ]; then
    order=()
    for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[$i]}"); done
  fi
  for mix in 1 100; do
    line="pair $pair, $mix product(s):"
    for t in "${order[@]}"; do
      read -r label port route <<<"$t"
      r=$(rps "${D}s" "$port" "$route" "$mix")
      line="$line $label $r"
      echo "$pair $mix $label $r" >>"$results"
    done
    echo "$line"
  done
done

echo
echo "medians of the per-pair ratios ($PAIRS pairs; build = $A${B:+, build_b = $B}):"
awk '
  { rps[$1, $2, $3] = $4; pairs = $1 > pairs ? $1 : pairs; seen[$3] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function show(mix, top, bottom,   p, list) {
    list = ""
    for (p = 1; p <= pairs; p++) list = list " " sprintf("%.3f", rps[p, mix, top] / rps[p, mix, bottom])
    printf "  %3s product(s): %s / %s = %.3f (pairs%s)\n", mix, top, bottom, median(list), list
  }
  END {
    for (m = 0; m < 2; m++) {
      mix = m == 0 ? 1 : 100
      show(mix, "build", "yardstick"); show(mix, "build", "kept")
      if (seen["build_b"]) show(mix, "build_b", "build")
    }
  }' "$results"
