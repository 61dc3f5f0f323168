#!/usr/bin/env bash
# A local seckill cluster on loopback: one redis-server, N instances, Nginx in front, with
# pid files and logs in one run folder.
#
#   scripts/cluster.sh start     start what is not running (idempotent)
#   scripts/cluster.sh stop      stop everything it started; nothing is left running
#   scripts/cluster.sh status    say what runs
#
# Settings, from the environment:
#   INSTANCES=2            how many seckill instances
#   FIRST_PORT=8081        instance i listens on FIRST_PORT+i-1
#   NGINX_PORT=8080        where clients connect
#   REDIS_PORT=6390        the cluster's own redis-server
#   NGINX_WORKERS=1        Nginx worker processes
#   RUN_DIR=./run          pid files, logs, the rendered nginx.conf
#   SECKILL_SERVE_ARGS=""  extra flags for every instance, e.g. "--faults --lock-lease-ms 200"
#   SKIP_BUILD=1           use target/release/seckill as it is
set -euo pipefail
cd "$(dirname "$0")/.."

INSTANCES=${INSTANCES:-2}
FIRST_PORT=${FIRST_PORT:-8081}
NGINX_PORT=${NGINX_PORT:-8080}
REDIS_PORT=${REDIS_PORT:-6390}
NGINX_WORKERS=${NGINX_WORKERS:-1}
RUN_DIR=${RUN_DIR:-$PWD/run}
SECKILL_SERVE_ARGS=${SECKILL_SERVE_ARGS:-}
BIN=$PWD/target/release/seckill
export PATH="$PATH:/usr/sbin:/sbin"

mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)

say() { echo "cluster: $*" >&2; }

alive() { # pid file
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_port() { # port what
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  say "$2 did not open port $1; see $RUN_DIR"
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

start() {
  scripts/install-deps.sh
  if [ -z "${SKIP_BUILD:-}" ]; then cargo build --release --quiet; fi
  ulimit -n 65536 2>/dev/null || true

  if ! alive "$RUN_DIR/redis.pid"; then
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
      --daemonize yes --pidfile "$RUN_DIR/redis.pid" --logfile "$RUN_DIR/redis.log" --dir "$RUN_DIR"
    wait_port "$REDIS_PORT" redis-server
  fi

  local i port
  for i in $(seq 1 "$INSTANCES"); do
    port=$((FIRST_PORT + i - 1))
    if ! alive "$RUN_DIR/seckill-$i.pid"; then
      # shellcheck disable=SC2086 # SECKILL_SERVE_ARGS is a list of flags
      nohup "$BIN" serve --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$REDIS_PORT" \
        --instance-id "seckill-$i" $SECKILL_SERVE_ARGS >"$RUN_DIR/seckill-$i.log" 2>&1 &
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
  say "up: nginx http://127.0.0.1:$NGINX_PORT -> $INSTANCES instances from :$FIRST_PORT, redis :$REDIS_PORT; logs in $RUN_DIR"
}

stop() {
  stop_pid "$RUN_DIR/nginx.pid" nginx
  local pidfile
  for pidfile in "$RUN_DIR"/seckill-*.pid; do
    [ -e "$pidfile" ] && stop_pid "$pidfile" "$(basename "$pidfile" .pid)"
  done
  stop_pid "$RUN_DIR/redis.pid" redis-server
  say "stopped"
}

status() {
  local pidfile
  for pidfile in "$RUN_DIR"/redis.pid "$RUN_DIR"/seckill-*.pid "$RUN_DIR"/nginx.pid; do
    [ -e "$pidfile" ] || continue
    if alive "$pidfile"; then echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
    else echo "$(basename "$pidfile" .pid): not running (stale pid file)"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
