#!/usr/bin/env bash
# The whole test suite:
#   0. what builds nothing: the modules' imports, the code's shape, the book's links, and
#      scripts/k8s-check.sh (the Kubernetes overlays rendered and validated offline);
#   1. cargo test: every crate's unit tests, and the integration tests, one binary per
#      what they start (crates/seckill/tests: contract — nothing, in-process; one_redis —
#      one Redis, instances, Nginx; topology — a Redis Cluster, sentinels; browser —
#      Chromium; crates/seckill-lock/tests — the locks against a real Redis;
#      crates/seckill-check/tests — a Python service the checker judges), each server
#      on a loopback port of its own;
#   2. scripts/lock-crate.sh: the lock crate with no feature and each feature alone, its
#      doctests, its docs (no warning) and `cargo publish --dry-run`; scripts/walk.sh
#      --check: docs/src/layout.md's walk of one deduction is the traced path;
#   3. scripts/docs-commands.py --run: every shell block of the docs checked against the
#      scripts, the binaries' flags and the routes, and the blocks that start a cluster run
#      as written on the debug build (SKIP_DOCS=1 leaves it out);
#   4. the test that needs a network namespace (root only): Nginx refusing /admin to a
#      client that is not loopback;
#   5. scripts/fuzz-api.sh: schemathesis fuzzing the API from its OpenAPI description
#      (SKIP_FUZZ=1 leaves it out).
# SLOW=1 runs all of it with one core kept busy: a CPU hog (one busy shell loop) started
# beside the suite and killed when the script exits, however it exits — a machine slower
# than this one. No test's verdict is a time or a speed, so it passes all the same.
# Installs redis-server, redis-tools, redis-sentinel, nginx, postgresql (the orders
# tests start their own server), openssl, iproute2, gdb and binutils from Debian's packages when missing, and (best effort) chromium and chromium-driver for the
# page's browser test, which skips, saying so, without them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${SLOW:-}" ]; then
  sh -c 'while :; do :; done' &
  hog=$!
  trap 'kill "$hog" 2>/dev/null || true' EXIT
  echo "SLOW=1: one core kept busy by pid $hog for the whole suite" >&2
fi

scripts/install-deps.sh
scripts/install-deps.sh browser
export PATH="$PATH:/usr/sbin:/sbin"

# Every crate's modules import one way: no circle among them (scripts/imports.py prints the
# graph).
out=$(python3 scripts/imports.py --all --max-cycle 1) || { echo "$out"; exit 1; }
# The code's shape: a type's inherent impls in at most two files, no function over 80
# lines, an outcome's name spelled once (scripts/shape.py says which and where).
out=$(python3 scripts/shape.py --fail) || { echo "$out"; exit 1; }
# The book: every link and image stays inside docs/src and lands, every page is in
# SUMMARY.md (the instance serves the same pages under /book/, checked by a unit test).
python3 scripts/book-links.py
# The Kubernetes manifests: every overlay renders and passes kubernetes-validate --strict,
# which must refuse a misspelled field (no cluster needed).
scripts/k8s-check.sh

cargo test --all-targets "$@"

# The lock crate: every feature alone, its doctests, its docs, its package.
scripts/lock-crate.sh

# docs/src/layout.md's walk of one token and one lua deduction, file by file, is the
# path the debug build (which cargo test built) really takes, traced under gdb — which
# attaches to the service: root, or a kernel that lets a user trace their own processes.
if [ "$(id -u)" -eq 0 ] || [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)" = 0 ]; then
  scripts/walk.sh --check docs/src/layout.md
else
  echo "not root and ptrace_scope > 0: skipping scripts/walk.sh --check (gdb cannot attach)" >&2
fi

if [ -z "${SKIP_DOCS:-}" ]; then
  # cargo test builds target/debug/seckill (the tests start it), not the bench the docs run.
  cargo build -p seckill-bench
  python3 scripts/docs-commands.py --run
fi

if [ "$(id -u)" -eq 0 ]; then
  cargo test -p seckill --test one_redis -- --ignored security::nginx_refuses_admin_to_non_loopback_clients
else
  echo "not root: skipping the network-namespace test (one_redis security::nginx_refuses_admin_to_non_loopback_clients)" >&2
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  scripts/fuzz-api.sh
fi
