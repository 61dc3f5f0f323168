#!/usr/bin/env bash
# The whole progression, reproduced under load through Nginx: start a local cluster (one
# durable Redis, or a Redis Cluster with REDIS=cluster; two instances; Nginx), run
# `seckill-bench` over every variant and the failure lessons, then the per-user lesson,
# print the tables and where the chart is, stop the cluster. Nothing is left
# running, even on Ctrl-C.
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
# The lessons need faults on; the watchdog lesson needs the lease to match the token
# lesson's TTL (200 ms, in crates/seckill/src/lessons/catalogue.rs), so both run on the
# same terms.
export SECKILL_SERVE_ARGS="--faults --lock-lease-ms 200 ${SECKILL_SERVE_ARGS:-}"

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
