#!/usr/bin/env bash
# Loads a running cluster (scripts/cluster.sh start) with oha or JMeter, then prints /stats.
#
#   loadtest/run.sh oha VARIANT [more oha flags]        N requests (1000) from C connections (100)
#   loadtest/run.sh jmeter VARIANT [more -J properties]  the seed's 200 threads x 5 loops
#
# Environment: N, C (oha only), HOST (127.0.0.1), PORT (8080: Nginx), PRODUCT (101), STOCK (100: reset
# before the load; RESET=0 keeps the stock as it is), KNOBS (extra query, e.g.
# "work_ms=5&wait_ms=2000").
set -euo pipefail
cd "$(dirname "$0")/.."

tool=${1:?usage: loadtest/run.sh oha|jmeter VARIANT [args]}
variant=${2:?usage: loadtest/run.sh oha|jmeter VARIANT [args]}
shift 2
HOST=${HOST:-127.0.0.1} PORT=${PORT:-8080} PRODUCT=${PRODUCT:-101} STOCK=${STOCK:-100}
base="http://$HOST:$PORT"
query="product=$PRODUCT${KNOBS:+&$KNOBS}"

if [ "${RESET:-1}" != 0 ]; then
  curl -fsS -X POST "$base/admin/reset" -d "{\"product\":\"$PRODUCT\",\"stock\":$STOCK}" >/dev/null
  echo "reset $PRODUCT to $STOCK units" >&2
fi

case "$tool" in
  oha)
    oha --no-tui -m POST -n "${N:-1000}" -c "${C:-100}" "$@" "$base/deduct_stock/$variant?$query"
    ;;
  jmeter)
    mkdir -p run
    # KNOBS ride in the product property, after the product id: the plan appends it to the path.
    loadtest/jmeter.sh -n -t loadtest/seckill.jmx -Jhost="$HOST" -Jport="$PORT" \
      -Jvariant="$variant" -Jproduct="$PRODUCT${KNOBS:+&$KNOBS}" -l "run/jmeter-$variant.jtl" "$@"
    ;;
  *)
    echo "unknown tool $tool: oha or jmeter" >&2
    exit 2
    ;;
esac

echo "--- GET /stats?product=$PRODUCT"
curl -fsS "$base/stats?product=$PRODUCT"
echo
