#!/usr/bin/env bash
# The lock crate as someone who takes it from crates.io gets it (run by scripts/test.sh;
# its tests, examples and bench run in `cargo test --all-targets`):
#   - it builds with no feature and with each feature alone;
#   - its doctests compile (the quick starts: one Redis, a Cluster, Sentinel);
#   - its docs build without a warning (a broken link fails);
#   - it packages and builds as published (`cargo publish --dry-run`).
set -euo pipefail
cd "$(dirname "$0")/.."

for features in "" cluster sentinel tls redlock rw zookeeper teaching scripting; do
  echo "seckill-lock: --no-default-features ${features:+--features $features}"
  cargo check -q -p seckill-lock --no-default-features ${features:+--features "$features"}
done
cargo test -q --doc -p seckill-lock --all-features
RUSTDOCFLAGS="-D warnings" cargo doc -q -p seckill-lock --no-deps
# --allow-dirty: a developer runs the suite on a tree with changes; CI's clone is clean.
cargo publish -q --dry-run --allow-dirty -p seckill-lock
