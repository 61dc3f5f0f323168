#!/usr/bin/env bash
# The lua path against the HTTP path (PERFORMANCE.md, "The lua path at the HTTP path's
# speed"), with wrk, builds in turns. For each build in turn, both instances run it behind
# one Nginx, and `wrk -t2 -c100 -d5s` drives: GET /healthz, GET /readyz, lua on one product,
# lua with batch=off, lua spread at random over 10 products and over 100. Each of the
# mixes (one product, 10, 100, and /healthz) is followed at once by the same mix on the
# yardstick (crates/seckill/examples/plain.rs: axum, one redis-rs connection, one EVALSHA a
# request), two of it behind a second Nginx on the same Redis, and on its `kept` route: the
# yardstick with what seckill's deduct.lua keeps for a deduction without a buyer or a key
# (the sale's terms read, the order id looked up, the sale counted in an audit hash).
# Per row: req/s; CPU per request of the instances, Redis and Nginx (utime + stime from
# /proc/<pid>/stat); Redis commands per request (INFO commandstats, the scripts' own
# included). Then the ratios, median of the rounds, per build.
#
#   scripts/lua-ceiling.sh [ROUNDS [BIN...]]    3 rounds of target/release/seckill
#   scripts/lua-ceiling.sh 3 /tmp/before/target/release/seckill target/release/seckill
#   REDIS_APPENDFSYNC=always scripts/lua-ceiling.sh 2
#
# Needs wrk (`apt-get install wrk`). Starts its own cluster in run/lua-ceiling, without the
# AOF unless REDIS_APPENDFSYNC says otherwise, and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-3}
shift || true
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(target/release/seckill)
command -v wrk >/dev/null || { echo "lua-ceiling: needs wrk (apt-get install wrk)" >&2; exit 2; }

export RUN_DIR=${RUN_DIR:-$PWD/run/lua-ceiling}
export REDIS_APPENDFSYNC=${REDIS_APPENDFSYNC:-off}
export INSTANCES=2 NGINX_PORT=${NGINX_PORT:-8080} FIRST_PORT=${FIRST_PORT:-8081}
export REDIS_PORT=${REDIS_PORT:-6390}
PLAIN_NGINX=$((NGINX_PORT + 10))
PLAIN_DIR=$RUN_DIR/plain
D=${DURATION_S:-5}

if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release --bin seckill --example plain; fi
stop_all() {
  scripts/yardstick.sh stop "$PLAIN_DIR"
  scripts/cluster.sh stop
}
trap stop_all EXIT
trap 'exit 130' INT TERM
BIN=${BINS[0]} SKIP_BUILD=1 scripts/cluster.sh start
scripts/yardstick.sh start "$PLAIN_DIR" "$PLAIN_NGINX" "$REDIS_PORT"

scripts=$(mktemp -d)
printf 'wrk.method = "GET"\n' >"$scripts/get.lua"
printf 'wrk.method = "POST"\n' >"$scripts/post.lua"

ticks() { local t=0 p f; for p in "$@"; do read -r -a f <"/proc/$p/stat"; t=$((t + f[13] + f[14])); done; echo "$t"; }
redis_pid=$(cat "$RUN_DIR/redis.pid")
nginx_pids=$(pgrep -f "nginx: worker" | tr '\n' ' ')
hz=$(getconf CLK_TCK)

# row LABEL URL SCRIPT PID...: one wrk run, one line. SCRIPT is get.lua, post.lua, or
# spread:ROUTE:N (loadtest/spread.lua: ROUTE over products p0..p(N-1) at random).
row() {
  local label=$1 url=$2 script=$3 route n
  local wrk_script=$scripts/$script spread=()
  if [[ $script == spread:* ]]; then
    IFS=: read -r _ route n <<<"$script"
    wrk_script=loadtest/spread.lua spread=(-- "$route" "$n")
  fi
  shift 3
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  local a r n out b r2 n2 q rps cmds
  a=$(ticks "$@") r=$(ticks "$redis_pid") n=$(ticks $nginx_pids)
  out=$(wrk -t2 -c100 -d"${D}s" -s "$wrk_script" "$url" "${spread[@]}")
  b=$(ticks "$@") r2=$(ticks "$redis_pid") n2=$(ticks $nginx_pids)
  q=$(awk '/requests in/{print $1}' <<<"$out")
  rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
  if grep -q Non-2xx <<<"$out"; then echo "lua-ceiling: $label: answers other than 2xx" >&2; fi
  cmds=$(redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[:=,]' '/^cmdstat/ && !/config/{n+=$3} END{print n+0}')
  awk -v l="$label" -v rps="$rps" -v q="$q" -v c=$((b - a)) -v rc=$((r2 - r)) -v nc=$((n2 - n)) -v cm="$cmds" -v hz="$hz" 'BEGIN{
    us = 1e6 / hz / q
    printf "%-34s %8.0f req/s  cpu us/req: instances %5.1f  redis %5.1f  nginx %5.1f  redis cmds/req %.2f\n", l, rps, c*us, rc*us, nc*us, cm/q }'
}

restart() {
  local i
  for i in 1 2; do kill "$(cat "$RUN_DIR/seckill-$i.pid")" 2>/dev/null || true; done
  sleep 0.7
  for i in 1 2; do
    # shellcheck disable=SC2046 # the flags file is a list of flags
    nohup "$1" $(cat "$RUN_DIR/seckill-$i.flags") >"$RUN_DIR/seckill-$i.log" 2>&1 &
    echo $! >"$RUN_DIR/seckill-$i.pid"
  done
  for i in 1 2; do
    until curl -sf "http://127.0.0.1:$((FIRST_PORT + i - 1))/healthz" >/dev/null; do sleep 0.1; done
  done
  local product
  for product in 101 $(seq -f 'p%g' 0 99); do
    curl -sf -X POST "http://127.0.0.1:$NGINX_PORT/admin/reset" -d "{\"product\":\"$product\",\"stock\":100000000}" >/dev/null
  done
}

results=$RUN_DIR/lua-ceiling.txt
: >"$results"
base=http://127.0.0.1:$NGINX_PORT
plain=http://127.0.0.1:$PLAIN_NGINX
plain_pids="$(cat "$PLAIN_DIR/plain-1.pid") $(cat "$PLAIN_DIR/plain-2.pid")"
for product in 101 $(seq -f 'p%g' 0 99); do
  redis-cli -p "$REDIS_PORT" hset "plain:{$product}:audit" epoch 1 per_user 0 >/dev/null
done
for round in $(seq "$ROUNDS"); do
  for b in "${BINS[@]}"; do
    restart "$b"
    pids="$(cat "$RUN_DIR/seckill-1.pid") $(cat "$RUN_DIR/seckill-2.pid")"
    wrk -t2 -c100 -d1s "$base/healthz" >/dev/null
    # Each mix's rows back to back, the build's then the yardstick's (labelled after the
    # build it ran beside): a ratio is of rows seconds apart, so a slow spell of the
    # machine falls on both of them.
    y="yardstick@$b"
    # shellcheck disable=SC2086 # pids and plain_pids are lists
    {
      row "$b | healthz" "$base/healthz" get.lua $pids
      row "$y | healthz" "$plain/healthz" get.lua $plain_pids
      row "$b | readyz" "$base/readyz" get.lua $pids
      row "$b | lua" "$base/deduct_stock/lua?product=101" post.lua $pids
      row "$y | lua" "$plain/deduct_stock/lua?product=101" post.lua $plain_pids
      row "$y | kept" "$plain/deduct_stock/kept?product=101" post.lua $plain_pids
      row "$b | lua batch=off" "$base/deduct_stock/lua?product=101&batch=off" post.lua $pids
      row "$b | lua over 10 products" "$base" spread:lua:10 $pids
      row "$y | lua over 10 products" "$plain" spread:lua:10 $plain_pids
      row "$y | kept over 10 products" "$plain" spread:kept:10 $plain_pids
      row "$b | lua over 100 products" "$base" spread:lua:100 $pids
      row "$y | lua over 100 products" "$plain" spread:lua:100 $plain_pids
      row "$y | kept over 100 products" "$plain" spread:kept:100 $plain_pids
    } | tee -a "$results"
  done
  echo "round $round done" >&2
done
rm -r "$scripts"

echo
echo "ratios (median of $ROUNDS rounds; each round's ratio is of rows of that round):"
awk -F' [|] ' '
  { split($2, f, /  +/); name = f[1]; rps = f[2] + 0; round[$1, name] = round[$1, name] " " rps; builds[$1] = 1 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function ratios(b, top, bottom, b2,   x, y, n, i, list) {
    n = split(round[b, top], x, " "); split(round[b2 == "" ? b : b2, bottom], y, " ")
    list = ""
    for (i = 1; i <= n; i++) list = list " " sprintf("%.2f", x[i] / y[i])
    return list
  }
  END {
    for (b in builds) {
      if (b ~ /^yardstick@/) continue
      for (k = 0; k < 5; k++) {
        top = k == 0 ? "lua" : k == 1 ? "lua" : k == 2 ? "lua batch=off" : k == 3 ? "lua over 10 products" : "lua over 100 products"
        bottom = k == 1 ? "readyz" : "healthz"
        list = ratios(b, top, bottom)
        printf "  %s: %s / %s = %.2f (rounds%s)\n", b, top, bottom, median(list), list
      }
      for (k = 0; k < 3; k++) {
        mix = k == 0 ? "lua" : k == 1 ? "lua over 10 products" : "lua over 100 products"
        list = ratios(b, mix, mix, "yardstick@" b)
        printf "  %s: %s / the yardstick'"'"'s = %.2f (rounds%s)\n", b, mix, median(list), list
        kept = k == 0 ? "kept" : k == 1 ? "kept over 10 products" : "kept over 100 products"
        list = ratios(b, mix, kept, "yardstick@" b)
        printf "  %s: %s / the yardstick'"'"'s %s = %.2f (rounds%s)\n", b, mix, kept, median(list), list
      }
    }
    for (b in builds) {
      if (b !~ /^yardstick@/) continue
      list = ratios(b, "lua", "healthz")
      printf "  %s: lua / healthz = %.2f (rounds%s)\n", b, median(list), list
    }
  }' "$results"
