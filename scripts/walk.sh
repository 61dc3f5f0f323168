#!/usr/bin/env bash
# One request's walk through the code, from a real trace: the files a reader opens following
# `POST /deduct_stock/VARIANT?product=101` (no idempotency key, no user), in order, and how
# many (scripts/walk.py says how the trace is made and the counting rule).
#
#   scripts/walk.sh [--binary PATH] [--variant token|lua ...] [--all-calls]
#                   [--check docs/src/layout.md] [--keep-traces DIR]
#
#   --binary PATH     a debug build with symbols (default target/debug/seckill); it is
#                     copied first, as it may be rebuilt meanwhile. Nothing is built here.
#   --variant NAME    repeatable (default: token, then lua)
#   --all-calls       every workspace fn, not only the async ones (the steps)
#   --check FILE      compare with FILE's `<!-- walk VARIANT -->` blocks; exit 1 with a
#                     diff when they differ
#   --keep-traces DIR keep the traces, to print them again without a run:
#                     python3 scripts/walk.py DIR/token.trace [--all-calls] [--check FILE]
#   QUIET_S=2         (environment) seconds the idle service is traced before the request
#
# What it does: copies the binary to a temp dir, starts a throwaway redis-server (no
# persistence) and `seckill serve` on free loopback ports, resets product 101, sends one
# warm-up request per variant (lazy initialisation is not traced), then per variant:
# attaches gdb in batch mode with scripts/walk_record.py (a breakpoint on every workspace fn,
# each recording its hit and going on), lets the idle service run QUIET_S seconds (what
# runs without any request is seen, and filtered out), sends the traced request, waits
# for its answer, stops the service with SIGINT (which gdb keeps: the service goes on),
# and lets gdb write the trace and detach. Then prints the walks. Everything it started
# is killed on exit; every wait has a deadline. Needs gdb, nm, addr2line, redis-server,
# redis-cli, curl, python3.
# shellcheck disable=SC2317 # cleanup and the conditions run through trap and wait_for
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=$root/target/debug/seckill
variants=()
analyse=(--notes)
keep=
QUIET_S=${QUIET_S:-2} # above the longest idle period (the watchdog subscription's 1 s heartbeat)

usage() {
  sed -n '6,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while (($#)); do
  case $1 in
  --binary) binary=${2:?--binary takes a path}; shift 2 ;;
  --variant) variants+=("${2:?--variant takes a name}"); shift 2 ;;
  --all-calls) analyse+=(--all-calls); shift ;;
  --check) analyse+=(--check "${2:?--check takes a file}"); shift 2 ;;
  --keep-traces) keep=${2:?--keep-traces takes a directory}; shift 2 ;;
  -h | --help) usage ;;
  *) echo "walk.sh: unknown argument $1" >&2; usage ;;
  esac
done
((${#variants[@]})) || variants=(token lua)
for v in "${variants[@]}"; do
  [[ $v =~ ^[a-z_]+$ ]] || { echo "walk.sh: not a variant name: $v" >&2; exit 2; }
done
for tool in gdb nm addr2line redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || { echo "walk.sh: $tool is missing" >&2; exit 2; }
done
if [[ ! -x $binary ]]; then
  echo "walk.sh: no binary at $binary (a debug build: cargo build -p seckill)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/seckill-walk.XXXXXX")
redis_pid='' service_pid='' gdb_pid=''
cleanup() {
  local rc=$? pid
  for pid in "$gdb_pid" "$service_pid" "$redis_pid"; do
    if [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do
    if ((SECONDS >= deadline)); then
      echo "walk.sh: gave up waiting for $what" >&2
      return 1
    fi
    sleep 0.1
  done
}
gone() { ! kill -0 "$1" 2>/dev/null; }
ready_or_gone() { [[ -e $1 ]] || gone "$2"; }
alive() { kill -0 "$1" 2>/dev/null; }
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
clock() { python3 -c 'import time; print("%.2f" % time.monotonic())'; }
since() { python3 -c "print('%.1f' % ($(clock) - $1))"; }

started=$(clock)
bin=$work/seckill
cp -p "$binary" "$bin" # -p: its time, to tell sources changed since it was built

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
wait_for 10 "redis-server on :$redis_port" redis-cli -p "$redis_port" ping >/dev/null 2>&1

# 5 s for a Redis command (the request's bound above six of them): under gdb every thread
# stops at every hit, and an answer may come late; the path taken is the same.
"$bin" serve --listen 127.0.0.1:0 --redis-url "redis://127.0.0.1:$redis_port" \
  --instance-id walk --redis-timeout-ms 5000 --request-timeout-ms 60000 \
  >"$work/service.out" 2>"$work/service.err" &
service_pid=$!
listening_or_gone() { grep -qs '^listening on ' "$work/service.out" || gone "$service_pid"; }
if ! wait_for 30 "seckill serve to listen" listening_or_gone || gone "$service_pid"; then
  head -n 5 "$work/service.err" >&2
  exit 1
fi
url=http://$(sed -n 's/^listening on //p' "$work/service.out" | head -n 1)

curl -sSf --max-time 10 -X POST "$url/admin/reset" -d '{"product":"101","stock":100}' >/dev/null
for v in "${variants[@]}"; do
  curl -sSf --max-time 10 -X POST "$url/deduct_stock/$v?product=101" -o /dev/null ||
    { echo "walk.sh: the warm-up request of $v failed" >&2; exit 1; }
done
echo "walk.sh: service up and warmed in $(since "$started") s ($url)" >&2

traces=()
for v in "${variants[@]}"; do
  t0=$(clock)
  trace=$work/$v.trace ready=$work/$v.ready
  WALK_TRACE=$trace WALK_READY=$ready WALK_VARIANT=$v WALK_BINARY=$bin WALK_ROOT=$root \
    gdb -nx -batch -p "$service_pid" -ex "source $root/scripts/walk_record.py" \
    >"$work/$v.gdb.log" 2>&1 &
  gdb_pid=$!
  if ! wait_for 300 "gdb's breakpoints" ready_or_gone "$ready" "$gdb_pid" || gone "$gdb_pid"; then
    tail -n 20 "$work/$v.gdb.log" >&2
    exit 1
  fi
  t1=$(clock)
  sleep "$QUIET_S"
  code=$(curl -sS --max-time 60 -o "$work/$v.answer" -w '%{http_code}' \
    -X POST "$url/deduct_stock/$v?product=101") || code=000
  t2=$(clock)
  sleep 0.5 # what the request set going on other tasks finishes
  kill -INT "$service_pid"
  wait_for 120 "gdb to write the trace and detach" gone "$gdb_pid" || exit 1
  wait "$gdb_pid" || true
  gdb_pid=
  grep -q '^E ' "$trace" || { tail -n 20 "$work/$v.gdb.log" >&2; exit 1; }
  alive "$service_pid" || { echo "walk.sh: the service stopped" >&2; exit 1; }
  ready_s=$(python3 -c "print('%.1f' % ($t1 - $t0))")
  answer_s=$(python3 -c "print('%.1f' % ($t2 - $t1 - $QUIET_S))")
  echo "walk.sh: $v traced in $(since "$t0") s: gdb ready in $ready_s s, the request" \
    "answered $code in $answer_s s: $(head -c 300 "$work/$v.answer")" >&2
  [[ $code == 200 ]] || { echo "walk.sh: the traced request was not answered 200" >&2; exit 1; }
  traces+=("$trace")
done

if [[ -n $keep ]]; then
  mkdir -p "$keep"
  cp "${traces[@]}" "$keep/"
fi
status=0
python3 "$root/scripts/walk.py" "${analyse[@]}" "${traces[@]}" || status=$?
echo "walk.sh: done in $(since "$started") s" >&2
exit "$status"
