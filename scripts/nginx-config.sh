#!/usr/bin/env bash
# Prints the local cluster's Nginx config: nginx/nginx.conf.template with its placeholders
# filled in. scripts/cluster.sh and the tests both render it here, so there is one copy.
#
#   scripts/nginx-config.sh RUN_DIR LISTEN WORKERS INSTANCE_ADDR...
#   scripts/nginx-config.sh ./run 127.0.0.1:8080 1 127.0.0.1:8081 127.0.0.1:8082
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 4 ] || { echo "usage: $0 RUN_DIR LISTEN WORKERS INSTANCE_ADDR..." >&2; exit 2; }
run_dir=$1 listen=$2 workers=$3
shift 3

servers=""
for addr in "$@"; do
  # Three failed connects in 2 s take an instance out for 2 s; one slow connect in a burst
  # does not. A dead instance refuses at once, so it is out after three requests.
  servers+="        server $addr max_fails=3 fail_timeout=2s;"$'\n'
done
config=$(<"$root/nginx/nginx.conf.template")
config=${config//@RUN_DIR@/$run_dir}
config=${config//@LISTEN@/$listen}
config=${config//@WORKERS@/$workers}
config=${config//@LOCATIONS@/$root/nginx/locations.conf}
config=${config//@UPSTREAM_SERVERS@/${servers%$'\n'}}
printf '%s\n' "$config"
