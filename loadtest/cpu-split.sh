#!/usr/bin/env bash
# Where the CPU goes: drives one path of a running local cluster with oha and prints the
# CPU time (user + system, from /proc/<pid>/stat) each process spent per request: Redis,
# the Nginx workers, each instance, and oha itself. PERFORMANCE.md's table comes from it.
#
#   loadtest/cpu-split.sh PATH [REQUESTS] [METHOD]
#   loadtest/cpu-split.sh /healthz 60000 GET
#   loadtest/cpu-split.sh '/deduct_stock/lua?product=101' 60000 POST   # reset enough stock first
#
# Settings, from the environment: NGINX_PORT=8080, REDIS_PORT=6390, CONCURRENCY=100.
set -euo pipefail

path=${1:?usage: loadtest/cpu-split.sh PATH [REQUESTS] [METHOD]}
requests=${2:-60000}
method=${3:-GET}
url="http://127.0.0.1:${NGINX_PORT:-8080}$path"
command -v oha >/dev/null || { echo "needs oha: cargo install oha" >&2; exit 1; }

# name:pid for every process of the cluster.
procs=()
for pid in $(pgrep -f "redis-server.*:${REDIS_PORT:-6390}"); do procs+=("redis:$pid"); done
for pid in $(pgrep -f 'nginx: worker'); do procs+=("nginx:$pid"); done
for pid in $(pgrep -f 'seckill serve'); do procs+=("seckill:$pid"); done
[ ${#procs[@]} -gt 0 ] || { echo "no cluster processes found (scripts/cluster.sh start)" >&2; exit 1; }

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -A before
for p in "${procs[@]}"; do before[$p]=$(ticks "${p#*:}"); done

timing=$(mktemp)
trap 'rm -f "$timing"' EXIT
/usr/bin/time -f '%U %S' -o "$timing" \
  oha --no-tui -n "$requests" -c "${CONCURRENCY:-100}" -m "$method" "$url" |
  grep -E 'Requests/sec|^ *\[[0-9]{3}\] [0-9]+ responses'

# Seconds of CPU -> microseconds per request.
per_request() { awk -v s="$1" -v n="$requests" 'BEGIN { printf "%6.1f", s * 1e6 / n }'; }
tick=$(getconf CLK_TCK)
echo "CPU per request, microseconds:"
for p in "${procs[@]}"; do
  spent=$(($(ticks "${p#*:}") - before[$p]))
  printf '  %-20s %s\n' "$p" "$(per_request "$(awk -v t="$spent" -v hz="$tick" 'BEGIN { print t / hz }')")"
done
read -r user sys <"$timing"
printf '  %-20s %s\n' "oha" "$(per_request "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')")"
