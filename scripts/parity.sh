#!/usr/bin/env bash
# Parity harness (issue #14 item 7): runs each supported SGLang release's own code (and the SGLang
# router's parser on the rendered router command lines) and compares
# it with kvpilot: its classification of every fixture config with `kvpilot layout
# --sglang-version`, its automatic retraction-backup choice and its PD argument checks with
# `kvpilot check --sglang-version --output json`; it also checks a rule-message table against each
# release's source and that src/layout/served_architectures.tsv and src/sglang/server_cli.tsv are
# current (the latter with an argv corpus through each release's parser and kvpilot check). Release wheels and
# torch-free Python venvs are fetched from PyPI, pinned by hash (tests/parity/wheels/,
# tests/parity/requirements-*.txt), and cached under target/parity/. Exits non-zero on any
# disagreement; the last line is "N passed, N failed".
#   KVPILOT_BIN     the binary to compare (default target/debug/kvpilot)
#   PARITY_PYTHON   the Python that builds the venvs (default python3; 3.10 or newer)
#   PARITY_JOBS     releases checked side by side (default: one per core)
set -euo pipefail
cd "$(dirname "$0")/.."

parity_dir="$PWD/target/parity"
kvpilot_bin="${KVPILOT_BIN:-$PWD/target/debug/kvpilot}"
python="${PARITY_PYTHON:-python3}"
# Bytecode caches go under target/, never into the source tree.
export PYTHONPYCACHEPREFIX="$parity_dir/pycache"
mkdir -p "$parity_dir/wheels" "$parity_dir/src"

# The harness's own parsers first (standard library only).
if ! unit_tests="$("$python" -m unittest discover -s tests/parity -p 'test_*.py' 2>&1)"; then
    echo "$unit_tests"
    echo "parity: the harness's own unit tests failed"
    exit 1
fi

# A wheel is fetched and unpacked once; the marker holds its hash and the unpacker's, so a changed
# pin or a change of what is unpacked refetches.
unpacker="$(sha256sum tests/parity/unpack_wheel.py | cut -d' ' -f1)"
for pin in tests/parity/wheels/sglang-*.txt; do
    version="$(basename "$pin" .txt)"
    version="${version#sglang-}"
    hash="$(grep -o 'sha256:[0-9a-f]*' "$pin") unpacked by $unpacker"
    marker="$parity_dir/src/$version/.unpacked"
    if [ "$(cat "$marker" 2>/dev/null)" = "$hash" ] && [ -f "$parity_dir/src/$version/transformers.pin" ]; then
        continue
    fi
    echo "parity: fetching SGLang $version"
    # The wheels are CPython 3.11 manylinux builds; only their Python source is used, so the
    # fetch names that platform whatever the local interpreter is.
    "$python" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
        --implementation cp --python-version 3.11 --platform manylinux_2_34_x86_64 \
        -r "$pin" -d "$parity_dir/wheels"
    rm -rf "$parity_dir/src/$version"
    "$python" tests/parity/unpack_wheel.py "$parity_dir"/wheels/sglang-"$version"-*.whl "$parity_dir/src/$version"
    echo "$hash" > "$marker"
    rm -f "$parity_dir"/wheels/sglang-"$version"-*.whl  # the unpacked source is the cache
done

# One venv per transformers version the releases pin (each release runs on its own pin).
for requirements in tests/parity/requirements-transformers-*.txt; do
    pin="$(basename "$requirements" .txt)"
    venv="$parity_dir/venv-${pin#requirements-transformers-}"
    requirements_hash="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [ "$(cat "$venv/.installed" 2>/dev/null)" = "$requirements_hash" ]; then
        continue
    fi
    echo "parity: building $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
        -r "$requirements"
    echo "$requirements_hash" > "$venv/.installed"
done

# The router's own packages (sglang-router and smg with their dependencies), for router_argv.py.
router_venv="$parity_dir/venv-router"
router_hash="$(sha256sum tests/parity/requirements-router.txt | cut -d' ' -f1)"
if [ "$(cat "$router_venv/.installed" 2>/dev/null)" != "$router_hash" ]; then
    echo "parity: building $router_venv"
    rm -rf "$router_venv"
    "$python" -m venv "$router_venv"
    "$router_venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
        --only-binary=:all: -r tests/parity/requirements-router.txt
    echo "$router_hash" > "$router_venv/.installed"
fi

exec "$python" tests/parity/run.py --src "$parity_dir/src" --venvs "$parity_dir" --kvpilot "$kvpilot_bin" \
    ${PARITY_JOBS:+--jobs "$PARITY_JOBS"}
