#!/usr/bin/env bash
# A ZooKeeper ensemble on loopback (Debian's zookeeper 3.8 on its JRE), for the zookeeper
# variant: N servers, each with its data, its config and its log under DIR/zk-<i>, short
# ticks (200 ms) so that an election takes a second or two and a session can be as short
# as one second.
#
#   scripts/zookeeper.sh start DIR [FIRST_PORT] [N]   start what is not running; prints the
#                                     instances' --zookeeper-urls value (host:port,…)
#   scripts/zookeeper.sh stop DIR     stop every server (the data stays)
#   scripts/zookeeper.sh clean DIR    stop, and delete the data
#   scripts/zookeeper.sh status DIR   each server's mode: leader, follower, or down
#
# Server i (1 … N, N = 3 by default, odd) serves clients on FIRST_PORT+i-1 (2191 by
# default), talks to the leader on FIRST_PORT+100+i-1 and votes on FIRST_PORT+200+i-1.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "zookeeper: $*" >&2; }

# The server's classpath: Debian's jar (its manifest names its dependencies) and, where
# Debian has it, slf4j's simple logger, so the servers log to their log files.
classpath() {
  local cp=/usr/share/java/zookeeper.jar
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  echo "$cp"
}

# Whether the server on port $1 answers `srvr` with a mode (it is part of a quorum).
mode() {
  local answer
  answer=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && echo srvr >&3 && timeout 2 cat <&3) 2>/dev/null) || true
  echo "$answer" | sed -n 's/^Mode: //p'
}

alive() { # pid file
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null || return 1
  # A server killed with -9 whose parent does not reap it (PID 1 in some containers) is a
  # zombie: kill -0 still finds it, but it serves nothing, and must be started again.
  ! grep -qs '^State:[[:space:]]*Z' "/proc/$pid/status"
}

start() { # dir first_port n
  local dir=$1 first=$2 n=$3 i servers="" hosts=()
  [ -f /usr/share/java/zookeeper.jar ] || { say "no /usr/share/java/zookeeper.jar: run scripts/install-deps.sh"; return 1; }
  for i in $(seq 1 "$n"); do
    servers+="server.$i=127.0.0.1:$((first + 100 + i - 1)):$((first + 200 + i - 1))"$'\n'
    hosts+=("127.0.0.1:$((first + i - 1))")
  done
  for i in $(seq 1 "$n"); do
    local home="$dir/zk-$i"
    mkdir -p "$home/data"
    echo "$i" >"$home/data/myid"
    cat >"$home/zoo.cfg" <<CFG
tickTime=200
initLimit=10
syncLimit=5
dataDir=$home/data
clientPort=$((first + i - 1))
clientPortAddress=127.0.0.1
minSessionTimeout=1000
maxSessionTimeout=60000
4lw.commands.whitelist=srvr,mntr,ruok
admin.enableServer=false
$servers
CFG
    if ! alive "$home/pid"; then
      # setsid: a server outlives the shell that started it, as a daemon does.
      setsid java -Xms64m -Xmx256m -XX:+UseSerialGC -cp "$(classpath)" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$home/zoo.cfg" >"$home/zookeeper.log" 2>&1 </dev/null &
      echo $! >"$home/pid"
    fi
  done
  for _ in $(seq 1 300); do
    local serving=0
    for i in $(seq 1 "$n"); do [ -n "$(mode $((first + i - 1)))" ] && serving=$((serving + 1)); done
    if [ "$serving" -eq "$n" ]; then
      (IFS=,; echo "${hosts[*]}")
      return 0
    fi
    sleep 0.1
  done
  say "the ensemble did not form within 30 s; see $dir/zk-*/zookeeper.log"
  return 1
}

stop() { # dir
  local home pid
  for home in "$1"/zk-*; do
    [ -f "$home/pid" ] || continue
    pid=$(cat "$home/pid")
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$home/pid"
  done
}

status() { # dir
  local home port
  for home in "$1"/zk-*; do
    [ -f "$home/zoo.cfg" ] || continue
    port=$(sed -n 's/^clientPort=//p' "$home/zoo.cfg")
    echo "$(basename "$home") :$port $(mode "$port" | grep . || echo down)"
  done
}

case "${1:-}" in
  start) start "${2:?DIR}" "${3:-2191}" "${4:-3}" ;;
  stop) stop "${2:?DIR}" ;;
  clean) stop "${2:?DIR}"; rm -rf "${2:?DIR}"/zk-* ;;
  status) status "${2:?DIR}" ;;
  *) echo "usage: $0 start DIR [FIRST_PORT] [N] | stop DIR | clean DIR | status DIR" >&2; exit 2 ;;
esac
