#!/usr/bin/env bash
# The failover lesson (seed 000's "主从架构锁失效问题", seed 004's flaw, and the cures),
# reproduced step by step with real processes, no luck needed:
#
#   a lock store of one master + one replica + three sentinels, a durable stock store
#   (1 unit), two instances (locks on the lock store) and Nginx. The replica's link is cut
#   (SIGSTOP, and CLIENT KILL TYPE replica on the master); holder 1 takes the token lock on
#   the master, which the replica never gets, and works; the master is killed (SIGKILL);
#   the replica is let go (SIGCONT) and the sentinels promote it (a real sentinel failover,
#   ~2-3 s with down-after-milliseconds 1000); holder 2 takes the same lock from it; both
#   commit.
#
# Rows, each read from /stats:
#   unprotected    the above: two holders inside, the one unit sold twice
#   wait_replicas  --lock-wait-replicas 1: holder 1's lock is not on the replica, so it is
#                  given back (503 lock_unconfirmed, Redisson's checkLockSyncedSlaves)
#   redlock        the redlock variant over 5 masters; the one holder 1 got first is killed;
#                  holder 2 cannot reach a majority while holder 1 holds the other 4
#   fenced         unprotected with fence=on: the overlap still happens, the stock refuses
#                  holder 1's older token, nothing oversold
#
# and the same lock on a ZooKeeper ensemble of three (the zookeeper variant; seed 000's
# other half: a write is acknowledged once a majority has it):
#   zookeeper_leader  holder 1 takes the lock and the leader is killed (SIGKILL) at once;
#                     the other two elect a leader that has the lock: holder 2 waits and is
#                     refused (429 lock_busy), no fencing needed
#   zookeeper_paused  holder 1's instance stops itself (fault=stop_before_commit: SIGSTOP to
#                     its whole process, as a stop-the-world GC pause) for 5 s right after
#                     its last check that it holds the lock, past its session timeout (2 s):
#                     the ensemble deletes its node, holder 2 gets the lock and sells;
#                     holder 1 wakes and commits: the unit sold twice (consensus does not
#                     fix a paused holder)
#   zookeeper_fenced  the same with fence=on: the stock refuses holder 1's older zxid
#
#   scripts/failover-lesson.sh
#
# Prints the table, writes $RUN_DIR/lesson.json (a list of rows: setting, lock_overlaps,
# oversold, sold, remaining, first, second) and leaves nothing running, even on Ctrl-C.
# Settings: RUN_DIR=./run/failover, PORT_BASE=7100 (ports PORT_BASE … PORT_BASE+14, and the
# ensemble's PORT_BASE+20 … +22, +120 … +122, +220 … +222),
# BIN=target/release/seckill, SKIP_BUILD=1 to use BIN as it is, WORK_MS=8000 (holder 1's
# work: longer than the failover).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

RUN_DIR=${RUN_DIR:-$root/run/failover}
PORT_BASE=${PORT_BASE:-7100}
BIN=${BIN:-$root/target/release/seckill}
WORK_MS=${WORK_MS:-8000}
export PATH="$PATH:/usr/sbin:/sbin"

LOCK_MASTER=$PORT_BASE LOCK_REPLICA=$((PORT_BASE + 1))
SENTINELS=($((PORT_BASE + 2)) $((PORT_BASE + 3)) $((PORT_BASE + 4)))
STOCK=$((PORT_BASE + 5))
INSTANCE_1=$((PORT_BASE + 6)) INSTANCE_2=$((PORT_BASE + 7)) NGINX=$((PORT_BASE + 8))
REDLOCK=($((PORT_BASE + 10)) $((PORT_BASE + 11)) $((PORT_BASE + 12)) $((PORT_BASE + 13)) $((PORT_BASE + 14)))
ZOOKEEPER=$((PORT_BASE + 20))
# The zookeeper_paused rows: holder 1's work, then how long its instance stops (past the
# 2 s session).
PAUSED_WORK_MS=500 STOPPED_MS=5000
MASTER_NAME=lockstore

say() { echo "failover-lesson: $*" >&2; }

if [ -z "${SKIP_BUILD:-}" ]; then
  scripts/install-deps.sh
  cargo build --release --quiet
fi

pids=()
zk_dirs=()
cleanup() { # SIGTERM first: an Nginx master takes its workers down with it
  local pid dir
  for dir in "${zk_dirs[@]}"; do scripts/zookeeper.sh stop "$dir"; done
  zk_dirs=()
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 30); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() { # port
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  say "nothing listens on :$1; see $RUN_DIR"; return 1
}

until_true() { # seconds, what, command...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || { say "timed out: $what"; return 1; }
    sleep 0.1
  done
}

redis() { # dir, port, extra args...
  local dir=$1 port=$2; shift 2
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always \
    --dir "$dir" --logfile "$dir/redis.log" "$@" >/dev/null &
  pids+=($!)
  wait_port "$port"
}

sentinel() { # dir, port
  mkdir -p "$1"
  cat >"$1/sentinel.conf" <<CONF
port $2
bind 127.0.0.1
dir $1
logfile $1/sentinel.log
sentinel monitor $MASTER_NAME 127.0.0.1 $LOCK_MASTER 2
sentinel down-after-milliseconds $MASTER_NAME 1000
sentinel failover-timeout $MASTER_NAME 5000
CONF
  redis-sentinel "$1/sentinel.conf" >/dev/null &
  pids+=($!)
  wait_port "$2"
}

cli() { redis-cli -h 127.0.0.1 -p "$@"; }

sentinels_know_everyone() {
  local s info
  for s in "${SENTINELS[@]}"; do
    info=$(cli "$s" sentinel master "$MASTER_NAME" 2>/dev/null) || return 1
    echo "$info" | grep -A1 -x num-slaves | tail -1 | grep -qx 1 || return 1
    echo "$info" | grep -A1 -x num-other-sentinels | tail -1 | grep -qx 2 || return 1
  done
}

replica_synced() {
  local info
  info=$(cli "$LOCK_REPLICA" info replication)
  echo "$info" | grep -q 'master_link_status:up' && echo "$info" | grep -q 'master_sync_in_progress:0'
}

promoted() {
  cli "${SENTINELS[0]}" sentinel get-master-addr-by-name "$MASTER_NAME" | tail -1 | grep -qx "$LOCK_REPLICA" &&
    cli "$LOCK_REPLICA" role | head -1 | grep -qx master
}

instances() { # row dir, extra flags...
  local dir=$1 i port; shift
  for i in 1 2; do
    port=$((PORT_BASE + 5 + i))
    "$BIN" serve --listen "127.0.0.1:$port" --instance-id "seckill-$i" \
      --redis-url "redis://127.0.0.1:$STOCK" \
      --max-work-ms 10000 --max-wait-ms 5000 --max-pause-ms 8000 "$@" >"$dir/seckill-$i.out" 2>"$dir/seckill-$i.log" &
    pids+=($!)
  done
  wait_port "$INSTANCE_1"
  wait_port "$INSTANCE_2"
  mkdir -p "$dir/nginx-tmp"
  scripts/nginx-config.sh "$dir" "127.0.0.1:$NGINX" 1 "127.0.0.1:$INSTANCE_1" "127.0.0.1:$INSTANCE_2" >"$dir/nginx.conf"
  nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" -g 'daemon off;' &
  pids+=($!)
  wait_port "$NGINX"
}

post() { # port, path -> the answer's body, then its status on the last line
  curl -s -X POST -w '\n%{http_code}' "http://127.0.0.1:$1$2"
}

outcome() { sed -n 's/.*"outcome":"\([a-z_]*\)".*/\1/p' | head -1; }

# Holder 1 is inside its critical section (the stock's audit has it), or already answered.
holder_1_inside_or_done() { # answer file
  [ -s "$1" ] || [ "$(cli "$STOCK" zcard 'seckill:{101}:inside')" -gt 0 ]
}

# Holder 2, as a client does: a 503 redis_unavailable (the instance had not yet heard of
# the new master) or lock_store_unavailable (the ensemble electing) is tried again after a
# moment, as its Retry-After says.
second_holder() { # path
  local answer
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    answer=$(post "$INSTANCE_2" "$1")
    case "$(echo "$answer" | outcome)" in redis_unavailable | lock_store_unavailable) ;; *) break ;; esac
    sleep 0.5
  done
  echo "$answer"
}
field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9]*\).*/\1/p" | head -1; }

rows=()
row() { # setting, first answer file, second answer
  local stats first second
  stats=$(curl -s "http://127.0.0.1:$NGINX/stats")
  echo "$stats" >"$RUN_DIR/$1/stats.json"
  first=$(outcome <"$2")
  second=$(echo "$3" | outcome)
  rows+=("$(printf '{"setting": "%s", "lock_overlaps": %s, "oversold": %s, "sold": %s, "remaining": %s, "first": "%s", "second": "%s"}' \
    "$1" "$(echo "$stats" | field lock_overlaps)" "$(echo "$stats" | field oversold)" \
    "$(echo "$stats" | field sold)" "$(echo "$stats" | field remaining)" "$first" "$second")")
  say "$1: first holder $first, second holder $second; $(echo "$stats" | grep -o '"lock_overlaps":[0-9]*'), $(echo "$stats" | grep -o '"oversold":[0-9]*'), $(echo "$stats" | grep -o '"sold":[0-9]*')"
}

# One row on a sentinel-watched lock store: the replica cut off, holder 1 takes the lock,
# the master dies, the replica is promoted, holder 2 takes the lock again.
master_replica_row() { # setting, fence (on|off), extra instance flags...
  local setting=$1 fence=$2 dir="$RUN_DIR/$1" s replica_pid first_pid second; shift 2
  rm -rf "$dir"; mkdir -p "$dir"
  redis "$dir/lock-master" "$LOCK_MASTER"
  local master_pid=${pids[-1]}
  redis "$dir/lock-replica" "$LOCK_REPLICA" --replicaof 127.0.0.1 "$LOCK_MASTER" --repl-diskless-sync-delay 0
  replica_pid=${pids[-1]}
  until_true 20 "the replica syncs" replica_synced
  for s in 0 1 2; do sentinel "$dir/sentinel-$s" "${SENTINELS[$s]}"; done
  until_true 30 "the sentinels learn the replica and each other" sentinels_know_everyone
  redis "$dir/stock" "$STOCK"
  instances "$dir" --lock-redis-mode sentinel --lock-redis-sentinel-master "$MASTER_NAME" \
    --lock-redis-url "redis://127.0.0.1:${SENTINELS[0]},redis://127.0.0.1:${SENTINELS[1]},redis://127.0.0.1:${SENTINELS[2]}" "$@"
  curl -sf -X POST "http://127.0.0.1:$NGINX/admin/reset" -d '{"product":"101","stock":1}' >/dev/null

  # Cut the replica off before the lock exists, so it never gets it.
  kill -STOP "$replica_pid"
  cli "$LOCK_MASTER" client kill type replica >/dev/null
  post "$INSTANCE_1" "/deduct_stock/token?work_ms=$WORK_MS&ttl_ms=60000&fence=$fence" >"$dir/first" &
  first_pid=$!
  until_true 10 "holder 1 gets inside (or answers)" holder_1_inside_or_done "$dir/first"
  kill -KILL "$master_pid"
  kill -CONT "$replica_pid"
  until_true 30 "the sentinels promote the replica" promoted
  second=$(second_holder "/deduct_stock/token?wait_ms=5000&fence=$fence")
  wait "$first_pid"
  row "$setting" "$dir/first" "$second"
  cleanup
}

redlock_row() {
  local dir="$RUN_DIR/redlock" i urls=() first_pid second port killed=""
  rm -rf "$dir"; mkdir -p "$dir"
  for i in 0 1 2 3 4; do
    redis "$dir/redlock-$i" "${REDLOCK[$i]}"
    urls+=("redis://127.0.0.1:${REDLOCK[$i]}")
  done
  redis "$dir/stock" "$STOCK"
  instances "$dir" --redlock-urls "$(IFS=,; echo "${urls[*]}")"
  curl -sf -X POST "http://127.0.0.1:$NGINX/admin/reset" -d '{"product":"101","stock":1}' >/dev/null
  post "$INSTANCE_1" "/deduct_stock/redlock?work_ms=$WORK_MS&ttl_ms=60000" >"$dir/first" &
  first_pid=$!
  until_true 10 "holder 1 gets inside (or answers)" holder_1_inside_or_done "$dir/first"
  # Kill the first server that granted it (SIGKILL: what it held is gone).
  for i in 0 1 2 3 4; do
    if [ "$(cli "${REDLOCK[$i]}" exists 'seckill:{101}:lock')" = 1 ]; then
      port=${REDLOCK[$i]}
      kill -KILL "${pids[$i]}"
      killed=$port
      break
    fi
  done
  [ -n "$killed" ] || { say "no redlock server held the lock"; return 1; }
  second=$(second_holder "/deduct_stock/redlock?wait_ms=3000")
  wait "$first_pid"
  row redlock "$dir/first" "$second"
  cleanup
}

# The lock on a ZooKeeper ensemble of three; the stock store as before.
zookeeper_start() { # dir
  local hosts
  zk_dirs+=("$1")
  hosts=$(scripts/zookeeper.sh start "$1" "$ZOOKEEPER" 3)
  redis "$1/stock" "$STOCK"
  instances "$1" --zookeeper-urls "$hosts" --zookeeper-session-ms 2000 --faults
  curl -sf -X POST "http://127.0.0.1:$NGINX/admin/reset" -d '{"product":"101","stock":1}' >/dev/null
}

zookeeper_leader_row() {
  local dir="$RUN_DIR/zookeeper_leader" first_pid second leader
  rm -rf "$dir"; mkdir -p "$dir"
  zookeeper_start "$dir"
  post "$INSTANCE_1" "/deduct_stock/zookeeper?work_ms=$WORK_MS" >"$dir/first" &
  first_pid=$!
  until_true 10 "holder 1 gets inside (or answers)" holder_1_inside_or_done "$dir/first"
  leader=$(scripts/zookeeper.sh status "$dir" | awk '$3 == "leader" { print $1 }')
  [ -n "$leader" ] || { say "no zookeeper server leads"; return 1; }
  kill -KILL "$(cat "$dir/$leader/pid")"
  say "killed the leader, $leader"
  second=$(second_holder "/deduct_stock/zookeeper?wait_ms=5000")
  wait "$first_pid"
  row zookeeper_leader "$dir/first" "$second"
  cleanup
}

zookeeper_paused_row() { # setting, fence (on|off)
  local setting=$1 fence=$2 dir="$RUN_DIR/$1" first_pid second
  rm -rf "$dir"; mkdir -p "$dir"
  zookeeper_start "$dir"
  post "$INSTANCE_1" "/deduct_stock/zookeeper?work_ms=$PAUSED_WORK_MS&fault=stop_before_commit&pause_ms=$STOPPED_MS&fence=$fence" >"$dir/first" &
  first_pid=$!
  until_true 10 "holder 1 gets inside" holder_1_inside_or_done "$dir/first"
  second=$(second_holder "/deduct_stock/zookeeper?wait_ms=5000&fence=$fence")
  wait "$first_pid"
  row "$setting" "$dir/first" "$second"
  cleanup
}

rm -rf "$RUN_DIR"
mkdir -p "$RUN_DIR"
say "unprotected: the master grants the lock and dies before its replica has it"
master_replica_row unprotected off
say "wait_replicas: the same, with --lock-wait-replicas 1"
master_replica_row wait_replicas off --lock-wait-replicas 1 --redis-wait-timeout-ms 500
say "redlock: 5 masters, the first that granted the lock killed"
redlock_row
say "fenced: unprotected with fence=on"
master_replica_row fenced on
say "zookeeper_leader: the ensemble's leader killed right after it granted the lock"
zookeeper_leader_row
say "zookeeper_paused: the holder's instance frozen past its session timeout"
zookeeper_paused_row zookeeper_paused off
say "zookeeper_fenced: the same with fence=on"
zookeeper_paused_row zookeeper_fenced on

{
  echo "["
  for i in "${!rows[@]}"; do
    [ "$i" -gt 0 ] && echo ","
    printf '  %s' "${rows[$i]}"
  done
  echo
  echo "]"
} >"$RUN_DIR/lesson.json"

printf '\n%-17s %9s %9s %5s %10s  %-17s %s\n' setting overlaps oversold sold remaining "holder 1" "holder 2"
printf '%-17s %9s %9s %5s %10s  %-17s %s\n' ----------------- --------- --------- ----- ---------- ----------------- ----------------
for r in "${rows[@]}"; do
  printf '%-17s %9s %9s %5s %10s  %-17s %s\n' \
    "$(echo "$r" | sed -n 's/.*"setting": "\([a-z_]*\)".*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"lock_overlaps": \([0-9-]*\).*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"oversold": \([0-9-]*\).*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"sold": \([0-9-]*\).*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"remaining": \([0-9-]*\).*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"first": "\([a-z_]*\)".*/\1/p')" \
    "$(echo "$r" | sed -n 's/.*"second": "\([a-z_]*\)".*/\1/p')"
done
echo "results: $RUN_DIR/lesson.json"
