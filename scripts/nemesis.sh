#!/usr/bin/env bash
# The nemesis (crates/seckill/tests/nemesis) run again and again, each run with a seed of
# its own, until one fails or all have passed: what a change to anything a lost answer can
# reach is checked with. Each run takes about a minute (NEMESIS_SECONDS of load, 40 by
# default on one Redis, 45 on a Cluster and 30 on one failing over, plus the servers' start
# and the checks).
#
#   scripts/nemesis.sh [--cluster | --failover] [RUNS] [FIRST_SEED]
#
# RUNS runs (20), seeds FIRST_SEED … (1), on one Redis; --cluster on a Redis Cluster of
# three masters (killed and restarted on their AOF, paused); --failover on a Cluster with a
# replica per master (a killed master's replica takes over).
#
# A failing run prints its seed; NEMESIS_SEED=<seed> cargo test -p seckill --test nemesis
# -- --nocapture <test> draws the same fault schedule again.
set -euo pipefail
cd "$(dirname "$0")/.."

test=no_sale_twice_whatever_fails
# An option, not a subcommand: without one, the nemesis on one Redis.
topology=${1:-}
case "$topology" in
  --cluster) test=no_sale_twice_on_a_cluster_whatever_fails; shift ;;
  --failover) test=no_sale_twice_on_a_failing_over_cluster; shift ;;
esac
runs=${1:-20}
first=${2:-1}
cargo test -p seckill --test nemesis --no-run --quiet
for seed in $(seq "$first" $((first + runs - 1))); do
  log=$(mktemp)
  started=$(date +%s)
  if NEMESIS_SEED=$seed cargo test --quiet -p seckill --test nemesis -- --nocapture --exact "$test" >"$log" 2>&1; then
    echo "seed $seed: passed in $(($(date +%s) - started)) s ($(grep -m1 -o '[0-9]* clicks, [0-9]* sends' "$log"))"
    rm -f "$log"
  else
    echo "seed $seed: FAILED; its output is in $log" >&2
    grep -E '^- ' "$log" | head -20 >&2 || true
    exit 1
  fi
done
echo "$test: $runs runs passed, seeds $first to $((first + runs - 1))"
