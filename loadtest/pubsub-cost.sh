#!/usr/bin/env bash
# What one watchdog unlock's wake-up message costs on a Redis Cluster: Redis CPU summed
# over every node, and the messages on the cluster bus, for N unlock-shaped script calls
# (EVAL on the lock's own slot) that publish with PUBLISH (every node hears it) or with
# SPUBLISH (only the slot's shard hears it), each with one subscriber listening, against a
# script that publishes nothing.
#
#   REDIS=cluster scripts/cluster.sh start
#   loadtest/pubsub-cost.sh [N=100000]
#
# Settings: CLUSTER_PORT=7001 (the first node, as in scripts/cluster.sh), CLIENTS=20.
set -euo pipefail
N=${1:-100000}
CLUSTER_PORT=${CLUSTER_PORT:-7001}
CLIENTS=${CLIENTS:-20}
CHANNEL='seckill:{101}:lock:released'

ports=$(redis-cli -p "$CLUSTER_PORT" cluster nodes | awk '{split($2, a, "@"); n=split(a[1], b, ":"); print b[n]}' | sort -n)
slot=$(redis-cli -p "$CLUSTER_PORT" cluster keyslot "$CHANNEL")
owner=$(redis-cli -p "$CLUSTER_PORT" cluster nodes | awk -v slot="$slot" '
  $3 ~ /master/ { for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1];
    if (slot >= r[1] && slot <= r[2]) { split($2, a, "@"); n = split(a[1], b, ":"); print b[n] } } }')
[ -n "$owner" ] || { echo "no master owns slot $slot; is the Cluster up?" >&2; exit 1; }

cpu_total() { # seconds of CPU over every node
  local total=0 p v
  for p in $ports; do
    v=$(redis-cli -p "$p" info cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { print s }')
    total=$(echo "$total + $v" | bc -l)
  done
  echo "$total"
}

bus_publish() { # PUBLISH messages sent over the cluster bus, summed over nodes
  local total=0 p v
  for p in $ports; do
    v=$(redis-cli -p "$p" cluster info | awk -F: '/^cluster_stats_messages_publish(shard)?_sent:/ { s += $2 } END { print s + 0 }')
    total=$((total + v))
  done
  echo "$total"
}

run() { # label, script
  local before after bus_before bus_after
  bus_before=$(bus_publish)
  before=$(cpu_total)
  redis-benchmark -p "$owner" -n "$N" -c "$CLIENTS" -q EVAL "$2" 1 "$CHANNEL" >/dev/null
  after=$(cpu_total)
  bus_after=$(bus_publish)
  printf '%-34s %8.2f us CPU per unlock (all nodes)  %6.2f bus messages per unlock\n' "$1" \
    "$(echo "($after - $before) * 1000000 / $N" | bc -l)" "$(echo "($bus_after - $bus_before) / $N" | bc -l)"
}

echo "cluster nodes: $(echo $ports | tr '\n' ' '); $CHANNEL on slot $slot, master :$owner; $N calls"
run "no message" "return 1"

# One pattern subscriber on another node, as an instance has.
other=$(echo "$ports" | grep -vx "$owner" | head -1)
redis-cli -p "$other" psubscribe 'seckill:*:lock:released' >/dev/null &
sub=$!
sleep 0.3
run "PUBLISH (psubscribe on :$other)" "redis.call('PUBLISH', KEYS[1], 'released') return 1"
kill "$sub"

redis-cli -p "$owner" ssubscribe "$CHANNEL" >/dev/null &
sub=$!
sleep 0.3
run "SPUBLISH (ssubscribe on :$owner)" "redis.call('SPUBLISH', KEYS[1], 'released') return 1"
kill "$sub"
