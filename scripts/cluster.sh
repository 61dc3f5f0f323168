#!/usr/bin/env bash
# A local seckill cluster on loopback: Redis (one durable server, or a Redis Cluster of 3
# masters + 3 replicas), N instances, Nginx in front — and, when asked, Redlock's servers,
# a ZooKeeper ensemble and PostgreSQL — with pid files, logs and data in one run folder.
#
#   scripts/cluster.sh start     start what is not running (idempotent; a Redis that
#                                crashed is started again on its own AOF)
#   scripts/cluster.sh stop      stop everything it started; nothing is left running
#                                (Redis data stays in the run folder, as a real one would)
#   scripts/cluster.sh clean     stop, and delete the Redis data
#   scripts/cluster.sh status    say what runs
#   scripts/cluster.sh redis-flags   print the instances' (and the bench's) Redis flags
#   scripts/cluster.sh lock-store-pids   print the bench's --zookeeper-pids,
#                                --redlock-pids and --postgres-pid for the servers that run
#                                (stores and seed003 suites)
#
# Settings, from the environment:
#   REDIS=standalone       or `cluster`: 3 masters + 3 replicas, and the instances in
#                          --redis-mode cluster
#   INSTANCES=2            how many seckill instances
#   FIRST_PORT=8081        instance i listens on FIRST_PORT+i-1
#   NGINX_PORT=8080        where clients connect
#   REDIS_PORT=6390        the standalone redis-server
#   REDIS_REPLICAS=0       standalone: that many replicas of it, from REPLICA_PORT=REDIS_PORT+100
#                          on (for --redis-wait-replicas)
#   CLUSTER_PORT=7001      the Cluster's nodes listen on CLUSTER_PORT … CLUSTER_PORT+5
#   REDIS_APPENDFSYNC=always  AOF fsync policy (always|everysec|no), or `off` for no AOF
#                          (to measure what durability costs)
#   REDLOCK_SERVERS=0      3 or 5: that many more independent redis-servers, from
#                          REDLOCK_PORT=6391 on, for the redlock variant (--redlock-urls)
#   ZOOKEEPER=0            3 or 5: a ZooKeeper ensemble of that many servers
#                          (scripts/zookeeper.sh, data in RUN_DIR/zk-*) with clients on
#                          ZOOKEEPER_PORT=2191 on, for the zookeeper variant (--zookeeper-urls)
#   NGINX_WORKERS=1        Nginx worker processes
#   RUN_DIR=./run          pid files, logs, the rendered nginx.conf
#   POSTGRES=0             1: a PostgreSQL (scripts/postgres.sh, data in RUN_DIR/postgres) on
#                          POSTGRES_PORT=6432, and the instances with --orders-db: every
#                          sale's order streamed into it, reconciled in /stats
#   SECKILL_SERVE_ARGS=""  extra flags for every instance, e.g. "--faults --lock-lease-ms 200"
#   SKIP_BUILD=1           use the binary as it is
#   BIN=target/release/seckill  the service's binary (another build, to compare two)
set -euo pipefail
cd "$(dirname "$0")/.."

INSTANCES=${INSTANCES:-2}
FIRST_PORT=${FIRST_PORT:-8081}
NGINX_PORT=${NGINX_PORT:-8080}
REDIS_PORT=${REDIS_PORT:-6390}
REDIS_REPLICAS=${REDIS_REPLICAS:-0}
REPLICA_PORT=${REPLICA_PORT:-$((REDIS_PORT + 100))}
NGINX_WORKERS=${NGINX_WORKERS:-1}
REDIS=${REDIS:-standalone}
CLUSTER_PORT=${CLUSTER_PORT:-7001}
CLUSTER_NODES=6
REDIS_APPENDFSYNC=${REDIS_APPENDFSYNC:-always}
REDLOCK_SERVERS=${REDLOCK_SERVERS:-0}
REDLOCK_PORT=${REDLOCK_PORT:-6391}
POSTGRES=${POSTGRES:-0}
ZOOKEEPER=${ZOOKEEPER:-0}
ZOOKEEPER_PORT=${ZOOKEEPER_PORT:-2191}
POSTGRES_PORT=${POSTGRES_PORT:-6432}
RUN_DIR=${RUN_DIR:-$PWD/run}
SECKILL_SERVE_ARGS=${SECKILL_SERVE_ARGS:-}
BIN=${BIN:-$PWD/target/release/seckill}
export PATH="$PATH:/usr/sbin:/sbin"

mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)

say() { echo "cluster: $*" >&2; }

alive() { # pid file
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 1
  # A daemon killed with -9 whose parent does not reap it (PID 1 in some containers) is a
  # zombie: kill -0 still finds it, but it serves nothing.
  ! grep -qs '^State:[[:space:]]*Z' "/proc/$pid/status"
}

wait_port() { # port what
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  say "$2 did not open port $1; see $RUN_DIR"
  return 1
}

wait_redis() { # port: until it answers PONG, not LOADING (an AOF being read back)
  for _ in $(seq 1 300); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  say "redis-server on port $1 did not finish loading; see $RUN_DIR"
  return 1
}

stop_pid() { # pid file, name
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$2 did not stop on SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

render_nginx() {
  local addrs=() i
  for i in $(seq 1 "$INSTANCES"); do addrs+=("127.0.0.1:$((FIRST_PORT + i - 1))"); done
  mkdir -p "$RUN_DIR/nginx-tmp"
  scripts/nginx-config.sh "$RUN_DIR" "127.0.0.1:$NGINX_PORT" "$NGINX_WORKERS" "${addrs[@]}" >"$RUN_DIR/nginx.conf"
}

durability() {
  if [ "$REDIS_APPENDFSYNC" = off ]; then
    echo --appendonly no
  else
    echo --appendonly yes --appendfsync "$REDIS_APPENDFSYNC"
  fi
}

# One durable redis-server: AOF in $RUN_DIR/redis-data, so a restart after a crash finds
# every write it acknowledged (with appendfsync always).
start_standalone() {
  mkdir -p "$RUN_DIR/redis-data"
  if ! alive "$RUN_DIR/redis.pid"; then
    # shellcheck disable=SC2046 # durability() is a list of flags
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" $(durability) \
      --daemonize yes --pidfile "$RUN_DIR/redis.pid" --logfile "$RUN_DIR/redis.log" \
      --dir "$RUN_DIR/redis-data"
    wait_port "$REDIS_PORT" redis-server
  fi
  wait_redis "$REDIS_PORT"
  local i port
  for i in $(seq 0 $((REDIS_REPLICAS - 1))); do
    port=$((REPLICA_PORT + i))
    mkdir -p "$RUN_DIR/replica-data/$port"
    if ! alive "$RUN_DIR/redis-replica-$port.pid"; then
      # shellcheck disable=SC2046 # durability() is a list of flags
      redis-server --port "$port" --bind 127.0.0.1 --save "" $(durability) \
        --replicaof 127.0.0.1 "$REDIS_PORT" \
        --daemonize yes --pidfile "$RUN_DIR/redis-replica-$port.pid" \
        --logfile "$RUN_DIR/redis-replica-$port.log" --dir "$RUN_DIR/replica-data/$port"
      wait_port "$port" "redis-server (replica)"
    fi
    wait_redis "$port"
  done
  # A first sync starts 5 s after a replica asks, unless told otherwise: let them sync now.
  [ "$REDIS_REPLICAS" -gt 0 ] && redis-cli -p "$REDIS_PORT" config set repl-diskless-sync-delay 0 >/dev/null
  for _ in $(seq 1 300); do
    [ "$(redis-cli -p "$REDIS_PORT" info replication | grep -c 'state=online')" -ge "$REDIS_REPLICAS" ] && return 0
    sleep 0.1
  done
  say "the replicas did not come online; see $RUN_DIR/redis-replica-*.log"
  return 1
}

# A Redis Cluster of 3 masters and 3 replicas, each node with its own AOF and nodes.conf
# under $RUN_DIR/redis-cluster/PORT; created once, and rejoined from nodes.conf after.
start_cluster() {
  local port i addrs=()
  for i in $(seq 0 $((CLUSTER_NODES - 1))); do
    port=$((CLUSTER_PORT + i))
    addrs+=("127.0.0.1:$port")
    mkdir -p "$RUN_DIR/redis-cluster/$port"
    if ! alive "$RUN_DIR/redis-$port.pid"; then
      # shellcheck disable=SC2046 # durability() is a list of flags
      redis-server --port "$port" --bind 127.0.0.1 --save "" $(durability) \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --repl-diskless-sync-delay 0 \
        --daemonize yes --pidfile "$RUN_DIR/redis-$port.pid" --logfile "$RUN_DIR/redis-$port.log" \
        --dir "$RUN_DIR/redis-cluster/$port"
    fi
  done
  for i in $(seq 0 $((CLUSTER_NODES - 1))); do
    wait_port $((CLUSTER_PORT + i)) "redis-server"
    wait_redis $((CLUSTER_PORT + i))
  done
  if redis-cli -p "$CLUSTER_PORT" cluster info | grep -q '^cluster_slots_assigned:0'; then
    say "creating the Redis Cluster: ${addrs[*]}"
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$RUN_DIR/cluster-create.log"
  fi
  for _ in $(seq 1 300); do
    local ok=1
    for i in $(seq 0 $((CLUSTER_NODES - 1))); do
      redis-cli -p $((CLUSTER_PORT + i)) cluster info | grep -q '^cluster_state:ok' || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  [ "$ok" = 1 ] || { say "the Redis Cluster did not reach cluster_state:ok; see $RUN_DIR/redis-*.log"; return 1; }
}

# The --redis-mode and --redis-url the instances and the bench are given.
redis_flags() {
  local i urls=()
  case "$REDIS" in
    standalone) echo --redis-mode standalone --redis-url "redis://127.0.0.1:$REDIS_PORT" ;;
    cluster)
      for i in $(seq 0 $((CLUSTER_NODES - 1))); do urls+=("redis://127.0.0.1:$((CLUSTER_PORT + i))"); done
      echo --redis-mode cluster --redis-url "$(IFS=,; echo "${urls[*]}")"
      ;;
    *) say "REDIS must be standalone or cluster, not $REDIS"; return 2 ;;
  esac
}

# The redlock variant's independent masters: plain durable servers, no replicas.
start_redlock() {
  local i port urls=()
  for i in $(seq 0 $((REDLOCK_SERVERS - 1))); do
    port=$((REDLOCK_PORT + i))
    urls+=("redis://127.0.0.1:$port")
    mkdir -p "$RUN_DIR/redlock-data/$port"
    if ! alive "$RUN_DIR/redis-redlock-$port.pid"; then
      # shellcheck disable=SC2046 # durability() is a list of flags
      redis-server --port "$port" --bind 127.0.0.1 --save "" $(durability) \
        --daemonize yes --pidfile "$RUN_DIR/redis-redlock-$port.pid" \
        --logfile "$RUN_DIR/redis-redlock-$port.log" --dir "$RUN_DIR/redlock-data/$port"
    fi
  done
  for i in $(seq 0 $((REDLOCK_SERVERS - 1))); do
    wait_port $((REDLOCK_PORT + i)) redis-server
    wait_redis $((REDLOCK_PORT + i))
  done
  REDLOCK_FLAGS="--redlock-urls $(IFS=,; echo "${urls[*]}")"
}

start() {
  scripts/install-deps.sh
  if [ -z "${SKIP_BUILD:-}" ]; then cargo build --release --quiet; fi
  ulimit -n 65536 2>/dev/null || true

  local redis_flags
  redis_flags=$(redis_flags)
  case "$REDIS" in
    standalone) start_standalone ;;
    cluster) start_cluster ;;
  esac
  REDLOCK_FLAGS=""
  case "$REDLOCK_SERVERS" in
    0) ;;
    3 | 5) start_redlock ;;
    *) say "REDLOCK_SERVERS must be 0, 3 or 5, not $REDLOCK_SERVERS"; return 2 ;;
  esac

  ZOOKEEPER_FLAGS=""
  case "$ZOOKEEPER" in
    0) ;;
    3 | 5)
      ZOOKEEPER_FLAGS="--zookeeper-urls $(scripts/zookeeper.sh start "$RUN_DIR" "$ZOOKEEPER_PORT" "$ZOOKEEPER")"
      say "zookeeper: $ZOOKEEPER_FLAGS"
      ;;
    *) say "ZOOKEEPER must be 0, 3 or 5, not $ZOOKEEPER"; return 2 ;;
  esac

  ORDERS_FLAGS=""
  if [ "$POSTGRES" = 1 ]; then
    ORDERS_FLAGS="--orders-db $(scripts/postgres.sh start "$RUN_DIR/postgres" "$POSTGRES_PORT")"
    say "postgres: $ORDERS_FLAGS"
  fi

  local i port
  local flags
  for i in $(seq 1 "$INSTANCES"); do
    port=$((FIRST_PORT + i - 1))
    flags="serve --listen 127.0.0.1:$port $redis_flags $REDLOCK_FLAGS $ZOOKEEPER_FLAGS $ORDERS_FLAGS --instance-id seckill-$i $SECKILL_SERVE_ARGS"
    # An instance started with other flags (SECKILL_SERVE_ARGS changed) would leave the
    # cluster mixed: restart it with these.
    if alive "$RUN_DIR/seckill-$i.pid" && [ "$(cat "$RUN_DIR/seckill-$i.flags" 2>/dev/null)" != "$flags" ]; then
      say "seckill-$i runs with other flags ($(cat "$RUN_DIR/seckill-$i.flags" 2>/dev/null || echo unknown)); restarting it with: $flags"
      stop_pid "$RUN_DIR/seckill-$i.pid" "seckill-$i"
    fi
    if ! alive "$RUN_DIR/seckill-$i.pid"; then
      echo "$flags" >"$RUN_DIR/seckill-$i.flags"
      # shellcheck disable=SC2086 # the flags are a list
      nohup "$BIN" $flags >"$RUN_DIR/seckill-$i.log" 2>&1 &
      echo $! >"$RUN_DIR/seckill-$i.pid"
    fi
  done
  for i in $(seq 1 "$INSTANCES"); do wait_port $((FIRST_PORT + i - 1)) "seckill-$i"; done

  render_nginx
  if alive "$RUN_DIR/nginx.pid"; then
    nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -e "$RUN_DIR/nginx-error.log" -s reload
  else
    nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -e "$RUN_DIR/nginx-error.log"
  fi
  wait_port "$NGINX_PORT" nginx
  say "up: nginx http://127.0.0.1:$NGINX_PORT -> $INSTANCES instances from :$FIRST_PORT, $redis_flags; logs in $RUN_DIR"
}

stop() {
  stop_pid "$RUN_DIR/nginx.pid" nginx
  local pidfile
  for pidfile in "$RUN_DIR"/seckill-*.pid; do
    [ -e "$pidfile" ] && stop_pid "$pidfile" "$(basename "$pidfile" .pid)"
  done
  for pidfile in "$RUN_DIR"/redis.pid "$RUN_DIR"/redis-*.pid; do
    [ -e "$pidfile" ] && stop_pid "$pidfile" "$(basename "$pidfile" .pid)"
  done
  if [ -d "$RUN_DIR/postgres" ]; then
    scripts/postgres.sh stop "$RUN_DIR/postgres"
  fi
  scripts/zookeeper.sh stop "$RUN_DIR"
  say "stopped"
}

clean() {
  stop
  [ -d "$RUN_DIR/postgres" ] && scripts/postgres.sh clean "$RUN_DIR/postgres"
  scripts/zookeeper.sh clean "$RUN_DIR"
  rm -rf "$RUN_DIR/redis-data" "$RUN_DIR/replica-data" "$RUN_DIR/redis-cluster" "$RUN_DIR/redlock-data"
  say "Redis, PostgreSQL and ZooKeeper data deleted"
}

status() {
  local pidfile
  for pidfile in "$RUN_DIR"/redis.pid "$RUN_DIR"/redis-*.pid "$RUN_DIR"/seckill-*.pid "$RUN_DIR"/nginx.pid; do
    [ -e "$pidfile" ] || continue
    if alive "$pidfile"; then echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
    else echo "$(basename "$pidfile" .pid): not running (stale pid file)"; fi
  done
  scripts/zookeeper.sh status "$RUN_DIR"
}

# The pids of the lock servers of their own that run, as the bench's flags.
lock_store_pids() {
  local home pidfile zk=() redlock=()
  for home in "$RUN_DIR"/zk-*; do
    [ -f "$home/pid" ] && kill -0 "$(cat "$home/pid")" 2>/dev/null && zk+=("$(cat "$home/pid")")
  done
  for pidfile in "$RUN_DIR"/redis-redlock-*.pid; do
    alive "$pidfile" && redlock+=("$(cat "$pidfile")")
  done
  [ ${#zk[@]} -gt 0 ] && echo -n "--zookeeper-pids $(IFS=,; echo "${zk[*]}") "
  [ ${#redlock[@]} -gt 0 ] && echo -n "--redlock-pids $(IFS=,; echo "${redlock[*]}") "
  if [ -f "$RUN_DIR/postgres/postmaster.pid" ]; then
    echo -n "--postgres-pid $(head -1 "$RUN_DIR/postgres/postmaster.pid")"
  fi
  echo
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  clean) clean ;;
  status) status ;;
  redis-flags) redis_flags ;;
  lock-store-pids) lock_store_pids ;;
  *) echo "usage: $0 start|stop|clean|status|redis-flags|lock-store-pids" >&2; exit 2 ;;
esac
