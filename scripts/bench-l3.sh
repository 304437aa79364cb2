#!/usr/bin/env bash
# Side-by-side L3 benchmark through SGLang 0.5.23's own code (tests/l3/bench.py): the same host
# pool and pages through the controller's backup and transfer against the kvpilot sidecar (zero
# copy), SGLang's file backend on /dev/shm, an in-process dict backend, and a plain memcpy of the
# page regions. Prints a Markdown table; figures also in target/l3/bench.json. Not a test: it
# asserts correctness, never timings.
#   BENCH_ARGS   extra arguments for tests/l3/bench.py (e.g. "--pages 16 --layers 4")
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --release --locked --bin kvpilot
export KVPILOT_BIN="$PWD/target/release/kvpilot"
L3_RELEASES=0.5.23 L3_SETUP_ONLY=1 bash scripts/l3-contract.sh
export PYTHONPYCACHEPREFIX="$PWD/target/l3/pycache"
# shellcheck disable=SC2086
PYTHONPATH="$PWD/target/l3/src/0.5.23:$PWD/python:$PWD/tests/l3" \
    target/l3/venv/bin/python -W ignore tests/l3/bench.py --out target/l3/bench.json ${BENCH_ARGS:-}
