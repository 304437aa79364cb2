#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property and integration tests.
# README.md documents this command and .ci/run calls it, so CI and developers run the same thing.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
