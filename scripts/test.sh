#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property and integration tests, including the
# Helm chart (real helm + kubernetes-validate), the Argo CD health check (Lua 5.4), the
# tests/cluster_*.rs suite against a real control plane (scripts/control-plane.sh: etcd,
# kube-apiserver, kube-controller-manager on loopback, built from Go modules on first use), and
# the kvpilot image built with buildah and run with podman (scripts/image.sh).
# README.md documents this command and .ci/run calls it, so CI and developers run the same thing.
set -euo pipefail
cd "$(dirname "$0")/.."

export KVPILOT_TOOLS="${KVPILOT_TOOLS:-$PWD/target/test-tools}"
bash scripts/install-test-tools.sh

cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
# The gang schedulers' own CRDs for tests/cluster_gang.rs and the examples' tests, fetched and
# generated once into target/gang-crds (2-3 minutes cold; cached), so no test waits for it.
bash scripts/gang-crds.sh >/dev/null
# A control plane of this run's own (own ports and state directory), stopped on any exit.
export KVPILOT_CONTROL_PLANE_DIR="$PWD/target/control-plane/test-run-$$"
trap 'bash scripts/control-plane.sh down' EXIT
trap 'exit 130' INT TERM
bash scripts/control-plane.sh up
export KVPILOT_CLUSTER_KUBECONFIG="$KVPILOT_CONTROL_PLANE_DIR/kubeconfig"
export KVPILOT_CLUSTER_KUBECTL="$PWD/target/control-plane/bin/kubectl"
# The cluster tests skip without a cluster; here they must run, so they fail instead.
export KVPILOT_REQUIRE_CLUSTER=1
"$KVPILOT_CLUSTER_KUBECTL" --kubeconfig "$KVPILOT_CLUSTER_KUBECONFIG" get --raw /readyz >/dev/null

cargo test --locked

# Each supported SGLang release's own code against `kvpilot layout` (needs target/debug/kvpilot,
# which cargo test has built; downloads are cached under target/parity).
bash scripts/parity.sh

# SGLang's own HiCache code (0.5.17, 0.5.21, 0.5.23) driving the cache sidecar and its connector
# on CPU (needs target/debug/kvpilot; torch and the releases are cached under target/l3).
bash scripts/l3-contract.sh

# The image as the Dockerfile makes it (release build, distroless-like base from Debian packages),
# run as the cluster runs it: non-root, read-only root, loopback only (see docs/image.md).
bash scripts/image.sh build
bash scripts/image.sh test

# The end-to-end run on a real cluster only when asked for (see scripts/e2e-cluster.sh).
if [ "${KVPILOT_E2E:-0}" = 1 ]; then
    bash scripts/e2e-cluster.sh
fi
