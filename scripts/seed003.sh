#!/usr/bin/env bash
# Seed 003's table of lock schemes, measured whole, by one command: a cluster of its own
# (durable Redis, two instances with --faults behind Nginx, PostgreSQL, a ZooKeeper
# ensemble of three and three Redlock servers, in run/seed003), then
# `seckill-bench --suite seed003`: each scheme at 200 waiters on one lock with no work and
# with 2 ms, the stock in a PostgreSQL row beside lua, the stores' CPU per unit, and the
# seed's four conditions probed — the first instance SIGKILLed with a holder of every
# scheme inside (started again after), a stranger's release through each lock's API, each
# store paused for two seconds under load. Stops everything it started.
#
#   scripts/seed003.sh [extra seckill-bench flags, e.g. --requests 1000 --json run/seed003.json]
#
# Takes about five minutes (the dead-holder probe waits up to 45 s for the locks that
# never free). SKIP_BUILD=1 uses the binaries as they are.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUN_DIR=${RUN_DIR:-$PWD/run/seed003}
export INSTANCES=2 NGINX_PORT=${NGINX_PORT:-8180} FIRST_PORT=${FIRST_PORT:-8181}
export REDIS_PORT=${REDIS_PORT:-6490} REDLOCK_PORT=${REDLOCK_PORT:-6491}
export POSTGRES=1 POSTGRES_PORT=${POSTGRES_PORT:-6532}
export ZOOKEEPER=3 ZOOKEEPER_PORT=${ZOOKEEPER_PORT:-2291} REDLOCK_SERVERS=3
export SECKILL_SERVE_ARGS="--faults"

if [ "${SKIP_BUILD:-0}" != 1 ]; then cargo build --release --bin seckill --bin seckill-bench; fi
trap 'scripts/cluster.sh stop' EXIT
trap 'exit 130' INT TERM
SKIP_BUILD=1 scripts/cluster.sh start

urls="http://127.0.0.1:$FIRST_PORT,http://127.0.0.1:$((FIRST_PORT + 1))"
pids="$RUN_DIR/seckill-1.pid,$RUN_DIR/seckill-2.pid"
flags1=$(cat "$RUN_DIR/seckill-1.flags")
pg_url=$(sed -n 's/.*--orders-db \([^ ]*\).*/\1/p' <<<"$flags1")
zk_urls=$(sed -n 's/.*--zookeeper-urls \([^ ]*\).*/\1/p' <<<"$flags1")
redlock_urls=$(sed -n 's/.*--redlock-urls \([^ ]*\).*/\1/p' <<<"$flags1")
# shellcheck disable=SC2046 # the flags are lists
target/release/seckill-bench --suite seed003 --url "http://127.0.0.1:$NGINX_PORT" \
  $(scripts/cluster.sh redis-flags) $(scripts/cluster.sh lock-store-pids) \
  --instance-urls "$urls" --instance-pid-files "$pids" \
  --pg-url "$pg_url" --zookeeper-urls "$zk_urls" --redlock-urls "$redlock_urls" \
  --restart-command "SKIP_BUILD=1 scripts/cluster.sh start >/dev/null" "$@"
