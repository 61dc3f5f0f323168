#!/usr/bin/env bash
# Loads a running cluster (scripts/cluster.sh start) with oha or JMeter, then prints /stats.
#
#   loadtest/run.sh oha VARIANT [more oha flags]        N requests (1000) from C connections (100)
#   loadtest/run.sh jmeter VARIANT [more -J properties]  the seed's 200 threads x 5 loops
#
# Environment: N, C (oha only), HOST (127.0.0.1), PORT (8080: Nginx), PRODUCT (101), STOCK (100: reset
# before the load; RESET=0 keeps the stock as it is), PER_USER (units one buyer may have,
# set by the reset; 0: no limit), USERS (buyers named in the requests, u…: any number for
# jmeter, request n naming u<n mod USERS>; a power of ten for oha, whose --rand-regex-url
# draws u00…u99 at random for 100;
# unset: no buyer named), KEY (oha only: every request sends Idempotency-Key: $KEY, so the
# whole load is one click sent N times), KNOBS (extra query, e.g. "work_ms=5&wait_ms=2000").
#
# Exits non-zero when the tool is missing (before anything is reset), or when the load saw
# a status no deduction answers in a healthy run (a misspelt variant's 404, a 400, a 502…):
# 200, 409, 429 and 503 are results, 403 with PER_USER; 500 is one only with a fault in KNOBS.
set -euo pipefail
cd "$(dirname "$0")/.."

tool=${1:?usage: loadtest/run.sh oha|jmeter VARIANT [args]}
variant=${2:?usage: loadtest/run.sh oha|jmeter VARIANT [args]}
shift 2
HOST=${HOST:-127.0.0.1} PORT=${PORT:-8080} PRODUCT=${PRODUCT:-101} STOCK=${STOCK:-100}
base="http://$HOST:$PORT"
query="product=$PRODUCT${KNOBS:+&$KNOBS}"

case "$tool" in
  oha)
    command -v oha >/dev/null 2>&1 || {
      echo "oha is not installed: cargo install oha --locked (about 5 minutes)" >&2
      exit 127
    }
    ;;
  jmeter)
    command -v jmeter >/dev/null 2>&1 || {
      echo "jmeter is not installed: apt-get install jmeter (Debian's 2.13; loadtest/README.md says why loadtest/jmeter.sh wraps it)" >&2
      exit 127
    }
    ;;
  *)
    echo "unknown tool $tool: oha or jmeter" >&2
    exit 2
    ;;
esac

if [ "${RESET:-1}" != 0 ]; then
  curl -fsS -X POST "$base/admin/reset" \
    -d "{\"product\":\"$PRODUCT\",\"stock\":$STOCK,\"per_user\":${PER_USER:-0}}" >/dev/null
  echo "reset $PRODUCT to $STOCK units, per_user ${PER_USER:-0}" >&2
fi

mkdir -p run
out="run/loadtest-$tool-$variant.out"
case "$tool" in
  oha)
    target=("$base/deduct_stock/$variant?$query")
    if [ -n "${USERS:-}" ]; then
      digits=$(( ${#USERS} - 1 ))
      [ "$USERS" = "1$(printf '%0*d' "$digits" 0)" ] && [ "$digits" -gt 0 ] || {
        echo "oha draws users from a regex: USERS must be 10, 100, 1000, …" >&2
        exit 2
      }
      # A regex, not a URL: its '?' is escaped (oha takes dots literally by itself).
      regex="$base/deduct_stock/$variant\\?$query&user=u[0-9]{$digits}"
      target=(--rand-regex-url "$regex")
    fi
    keyed=()
    [ -n "${KEY:-}" ] && keyed=(-H "Idempotency-Key: $KEY")
    oha --no-tui -m POST -n "${N:-1000}" -c "${C:-100}" "${keyed[@]}" "$@" "${target[@]}" | tee "$out"
    # "  [200] 1000 responses" under "Status code distribution:".
    statuses=$(sed -n 's/^ *\[\([0-9][0-9][0-9]\)\] .*/\1/p' "$out")
    ;;
  jmeter)
    # KNOBS ride in the product property, after the product id: the plan appends it to the path.
    rm -f "run/jmeter-$variant.jtl"
    loadtest/jmeter.sh -n -t loadtest/seckill.jmx -Jhost="$HOST" -Jport="$PORT" \
      -Jvariant="$variant" -Jproduct="$PRODUCT${KNOBS:+&$KNOBS}" ${USERS:+-Jusers="$USERS"} \
      -l "run/jmeter-$variant.jtl" "$@" | tee "$out"
    # The results file is CSV: timeStamp,elapsed,label,responseCode,…
    statuses=$(awk -F, 'NR > 1 { print $4 }' "run/jmeter-$variant.jtl" | sort -u)
    ;;
esac

echo "--- GET /stats?product=$PRODUCT"
curl -fsS "$base/stats?product=$PRODUCT"
echo

expected="200 409 429 503"
[ "${PER_USER:-0}" != 0 ] && expected="$expected 403"
case "${KNOBS:-}" in *fault=*) expected="$expected 500" ;; esac
unexpected=""
for status in $statuses; do
  case " $expected " in *" $status "*) ;; *) unexpected="$unexpected $status" ;; esac
done
if [ -n "$unexpected" ]; then
  echo "the load saw statuses no deduction answers here:$unexpected (a misspelt variant is a 404; see $out)" >&2
  exit 1
fi
