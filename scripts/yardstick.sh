#!/usr/bin/env bash
# The yardstick of the lua measurements (crates/seckill/examples/plain.rs): two of it on
# loopback behind an Nginx of their own, on a Redis that already runs. Used by
# scripts/lua-ceiling.sh and scripts/lua-pairs.sh; needs `cargo build --release --example
# plain` first.
#
#   scripts/yardstick.sh start DIR NGINX_PORT REDIS_PORT   instances on NGINX_PORT+1, +2;
#                                                          pid files and logs in DIR
#   scripts/yardstick.sh stop DIR                          stop what start started
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 start DIR NGINX_PORT REDIS_PORT | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1 dir=$2
case $action in
  start)
    [ $# = 4 ] || usage
    nginx_port=$3 redis_port=$4
    mkdir -p "$dir/nginx-tmp"
    for i in 1 2; do
      nohup target/release/examples/plain "127.0.0.1:$((nginx_port + i))" \
        "redis://127.0.0.1:$redis_port" >"$dir/plain-$i.log" 2>&1 &
      echo $! >"$dir/plain-$i.pid"
    done
    scripts/nginx-config.sh "$dir" "127.0.0.1:$nginx_port" 1 \
      "127.0.0.1:$((nginx_port + 1))" "127.0.0.1:$((nginx_port + 2))" >"$dir/nginx.conf"
    nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log"
    for i in 1 2; do
      tries=0
      until curl -sf "http://127.0.0.1:$((nginx_port + i))/healthz" >/dev/null; do
        tries=$((tries + 1))
        [ $tries -lt 100 ] || { echo "yardstick: plain-$i did not start (see $dir/plain-$i.log)" >&2; exit 1; }
        sleep 0.1
      done
    done
    ;;
  stop)
    for pid in "$dir"/plain-*.pid; do
      [ -f "$pid" ] || continue
      kill "$(cat "$pid")" 2>/dev/null || true
      rm -f "$pid"
    done
    if [ -f "$dir/nginx.pid" ]; then nginx -p "$dir" -c "$dir/nginx.conf" -s stop 2>/dev/null || true; fi
    ;;
  *) usage ;;
esac
