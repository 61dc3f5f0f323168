#!/usr/bin/env bash
# The whole test suite: unit tests and the integration tests, which start real
# redis-server (and nginx) processes on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
export PATH="$PATH:/usr/sbin"
cargo test --all-targets "$@"
