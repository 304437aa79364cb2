#!/usr/bin/env bash
# The L3 contract test (issue #19): each supported SGLang release's own HiCache code drives the
# kvpilot connector (python/kvpilot_sglang) and sidecar (kvpilot cache-runtime) on CPU: its host
# KV pool with the shm allocator, its StorageBackendFactory ("dynamic"), its controller's backup,
# hit query and transfer (tests/l3/test_contract.py). Release wheels are pinned by hash
# (tests/parity/wheels/), the Python environment too (tests/l3/requirements.txt, torch from
# PyPI); both are cached under target/l3/. The last line is "N passed, N failed".
#   KVPILOT_BIN   the sidecar binary (default target/debug/kvpilot, which cargo test builds)
#   L3_PYTHON     a CPython 3.11 to build the venv with (default python3)
#   L3_RELEASES   the releases to run (default: 0.5.17 0.5.21 0.5.23)
#   L3_SETUP_ONLY =1: fetch and build the environment, run nothing (scripts/bench-l3.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

l3_dir="$PWD/target/l3"
python="${L3_PYTHON:-python3}"
export KVPILOT_BIN="${KVPILOT_BIN:-$PWD/target/debug/kvpilot}"
# Bytecode caches go under target/, never into the source tree.
export PYTHONPYCACHEPREFIX="$l3_dir/pycache"
releases="${L3_RELEASES:-0.5.17 0.5.21 0.5.23}"
mkdir -p "$l3_dir/wheels" "$l3_dir/src"

if [ ! -x "$KVPILOT_BIN" ]; then
    echo "l3-contract: $KVPILOT_BIN is missing; run cargo build first"
    exit 1
fi

# The whole sglang package of each release (its mem_cache imports sglang.kernels and more), once
# per pinned hash.
for version in $releases; do
    pin="tests/parity/wheels/sglang-$version.txt"
    hash="$(grep -o 'sha256:[0-9a-f]*' "$pin")"
    marker="$l3_dir/src/$version/.unpacked"
    if [ "$(cat "$marker" 2>/dev/null)" = "$hash" ]; then
        continue
    fi
    echo "l3-contract: fetching SGLang $version"
    "$python" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
        --implementation cp --python-version 3.11 --platform manylinux_2_34_x86_64 \
        -r "$pin" -d "$l3_dir/wheels"
    rm -rf "$l3_dir/src/$version"
    "$python" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [n for n in wheel.namelist() if n.startswith("sglang/")])' \
        "$l3_dir"/wheels/sglang-"$version"-*.whl "$l3_dir/src/$version"
    echo "$hash" > "$marker"
    rm -f "$l3_dir"/wheels/sglang-"$version"-*.whl  # the unpacked source is the cache
done

venv="$l3_dir/venv"
requirements_hash="$(sha256sum tests/l3/requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$requirements_hash" ]; then
    echo "l3-contract: building $venv (torch and SGLang's import-time modules; a few GB, once)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
        -r tests/l3/requirements.txt
    echo "$requirements_hash" > "$venv/.installed"
fi
if [ "${L3_SETUP_ONLY:-0}" = 1 ]; then
    exit 0
fi

passed=0
failed=0
for version in $releases; do
    echo "l3-contract: SGLang $version"
    log="$l3_dir/contract-$version.log"
    status=0
    PYTHONPATH="$l3_dir/src/$version:$PWD/python:$PWD/tests/l3" \
        "$venv/bin/python" -W ignore -m unittest -v tests/l3/test_contract.py >"$log" 2>&1 || status=$?
    ran="$(grep -o '^Ran [0-9]* test' "$log" | grep -o '[0-9]*' || echo 0)"
    bad="$(grep -cE '^(FAIL|ERROR):' "$log" || true)"
    grep -E ' \.\.\. ' "$log" | sed "s/^/  $version: /"
    if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
        bad=1  # the run itself failed (an import, the interpreter)
        tail -30 "$log"
    elif [ "$bad" -gt 0 ]; then
        sed -n '/^======/,$p' "$log"
    fi
    passed=$((passed + ran - (bad < ran ? bad : ran)))
    failed=$((failed + bad))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
