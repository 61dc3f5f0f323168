#!/usr/bin/env bash
# The whole test suite:
#   1. cargo test: unit tests, and integration tests that start real redis-server, seckill
#      and nginx processes on free loopback ports;
#   2. the test that needs a network namespace (root only): Nginx refusing /admin to a
#      client that is not loopback;
#   3. scripts/fuzz-api.sh: schemathesis fuzzing the API from its OpenAPI description
#      (SKIP_FUZZ=1 leaves it out).
# Installs redis-server, redis-tools, redis-sentinel, nginx, openssl and iproute2 from
# Debian's packages when missing, and (best effort) chromium and chromium-driver for the
# page's browser test, which skips, saying so, without them.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/install-deps.sh browser
export PATH="$PATH:/usr/sbin:/sbin"

cargo test --all-targets "$@"

if [ "$(id -u)" -eq 0 ]; then
  cargo test --test security -- --ignored
else
  echo "not root: skipping tests/security.rs's network-namespace test (nginx_refuses_admin_to_non_loopback_clients)" >&2
fi

if [ -z "${SKIP_FUZZ:-}" ]; then
  scripts/fuzz-api.sh
fi
