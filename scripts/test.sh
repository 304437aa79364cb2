#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property and integration tests, including the
# Helm chart (real helm + kubernetes-validate) and the Argo CD health check (Lua 5.4).
# README.md documents this command and .ci/run calls it, so CI and developers run the same thing.
set -euo pipefail
cd "$(dirname "$0")/.."

export KVPILOT_TOOLS="${KVPILOT_TOOLS:-$PWD/target/test-tools}"
bash scripts/install-test-tools.sh

cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked

# Each supported SGLang release's own code against `kvpilot layout` (needs target/debug/kvpilot,
# which cargo test has built; downloads are cached under target/parity).
bash scripts/parity.sh

# The end-to-end run on a real cluster only when asked for (see scripts/e2e-cluster.sh).
if [ "${KVPILOT_E2E:-0}" = 1 ]; then
    bash scripts/e2e-cluster.sh
fi
