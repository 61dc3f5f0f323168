#!/usr/bin/env bash
# A partial failure stays partial, measured: start one Redis with one replica, two
# instances on `--redis-wait-replicas 1`, Nginx and five Redlock servers; run
# `seckill-bench --suite partial`, which loads confirmed sales, a second product, /readyz
# and /stats side by side with the replica up and then SIGSTOPped, lets it go again, and
# runs Redlock with five servers up and then two killed; print every row and ratio, stop.
#
#   scripts/partial-failure.sh [extra seckill-bench flags, e.g. --phase-seconds 10]
#
# BIN=path/to/seckill runs another build of the service (to compare two builds).
set -euo pipefail
cd "$(dirname "$0")/.."

export RUN_DIR=${RUN_DIR:-$PWD/run/partial}
export INSTANCES=${INSTANCES:-2}
export NGINX_PORT=${NGINX_PORT:-8080}
export REDIS_PORT=${REDIS_PORT:-6390}
export FIRST_PORT=${FIRST_PORT:-8081}
export REDIS_REPLICAS=1
export REDLOCK_SERVERS=5
export REDLOCK_PORT=${REDLOCK_PORT:-6391}
WAIT_TIMEOUT_MS=${WAIT_TIMEOUT_MS:-300}
export SECKILL_SERVE_ARGS="--redis-wait-replicas 1 --redis-wait-timeout-ms $WAIT_TIMEOUT_MS ${SECKILL_SERVE_ARGS:-}"

scripts/install-deps.sh
cargo build --release

replica_pid() { cat "$RUN_DIR/redis-replica-$((REDIS_PORT + 100)).pid" 2>/dev/null; }
finish() {
  # A replica left stopped would not hear the stop.
  pid=$(replica_pid) && kill -CONT "$pid" 2>/dev/null
  scripts/cluster.sh stop
}
trap finish EXIT
trap 'exit 130' INT TERM
SKIP_BUILD=1 scripts/cluster.sh start

redlock_down=$(cat "$RUN_DIR/redis-redlock-$((REDLOCK_PORT + 3)).pid"),$(cat "$RUN_DIR/redis-redlock-$((REDLOCK_PORT + 4)).pid")
target/release/seckill-bench --suite partial \
  --url "http://127.0.0.1:$NGINX_PORT" \
  $(scripts/cluster.sh redis-flags) \
  --with-redlock \
  --replica-pid "$(replica_pid)" \
  --redlock-down-pids "$redlock_down" \
  --json "$RUN_DIR/partial.json" \
  "$@"
