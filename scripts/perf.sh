#!/usr/bin/env bash
# The performance targets, measured in one run: start a local cluster (one Redis, two
# instances, Nginx, five Redlock servers), run `seckill-bench --suite performance` (the
# lock-free ceiling, waiting without waste, the shards curve, latency at 200 connections,
# memory at 2,000, lock hand-off, the fair lock, the per-instance shares), print every
# ratio, stop the cluster.
#
#   scripts/perf.sh [extra seckill-bench flags, e.g. --requests 40000 --rounds 5]
#
# SUITE=ceiling (or any other suite) runs that one instead; REDIS=cluster runs on a local
# Redis Cluster, REDIS_APPENDFSYNC=off without the AOF (see scripts/cluster.sh), e.g.
#   REDIS_APPENDFSYNC=off SUITE=ceiling scripts/perf.sh
#   REDIS=cluster SUITE=progression scripts/perf.sh --variants lua,watchdog,segmented --shards 6
set -euo pipefail
cd "$(dirname "$0")/.."

export RUN_DIR=${RUN_DIR:-$PWD/run/perf}
export INSTANCES=${INSTANCES:-2}
export NGINX_PORT=${NGINX_PORT:-8080}
export REDIS_PORT=${REDIS_PORT:-6390}
export FIRST_PORT=${FIRST_PORT:-8081}
# Five Redlock servers, for the handoff suite's redlock row.
export REDLOCK_SERVERS=${REDLOCK_SERVERS:-5}

scripts/install-deps.sh
cargo build --release

trap 'scripts/cluster.sh stop' EXIT
trap 'exit 130' INT TERM
SKIP_BUILD=1 scripts/cluster.sh start

instances=""
for i in $(seq 1 "$INSTANCES"); do
  instances+="${instances:+,}http://127.0.0.1:$((FIRST_PORT + i - 1))"
done
target/release/seckill-bench --suite "${SUITE:-performance}" \
  --url "http://127.0.0.1:$NGINX_PORT" \
  $(scripts/cluster.sh redis-flags) \
  --instance-urls "$instances" \
  $([ "$REDLOCK_SERVERS" -gt 0 ] && echo --with-redlock) \
  --json "$RUN_DIR/perf.json" \
  --chart "$RUN_DIR/perf.svg" \
  "$@"
