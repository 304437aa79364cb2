#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property and integration tests, including the
# Helm chart (real helm + kubernetes-validate), the Argo CD health check (Lua 5.4), the
# tests/cluster_*.rs suite against a real control plane (scripts/control-plane.sh: etcd,
# kube-apiserver, kube-controller-manager on loopback, built from Go modules on first use), and
# the kvpilot image built with buildah and run with podman (scripts/image.sh), and kvpilot's pods
# started by a real kubelet (scripts/node.sh: containerd, runc, kube-scheduler, fake GPUs) on a
# control plane of their own (tests/node_pods.rs).
# README.md documents this command and .ci/run calls it, so CI and developers run the same thing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's time on stderr, for the figures in docs/testing.md ("What the suite costs").
step_started=$SECONDS
took() {
    echo "test.sh: $1 took $((SECONDS - step_started)) s ($((SECONDS / 60)) min in)" >&2
    step_started=$SECONDS
}

export KVPILOT_TOOLS="${KVPILOT_TOOLS:-$PWD/target/test-tools}"
bash scripts/install-test-tools.sh
took "installing the test tools"

cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings
took "fmt and clippy"
# The gang schedulers' own CRDs for tests/cluster_gang.rs and the examples' tests, fetched and
# generated once into target/gang-crds (2-3 minutes cold; cached), so no test waits for it.
bash scripts/gang-crds.sh >/dev/null
# The Prometheus Operator's, KEDA's and cert-manager's CRDs for tests/cluster_pods.rs and
# tests/cluster_helm.rs (about 20 MB of module zips cold; cached in target/third-party-crds).
bash scripts/third-party-crds.sh >/dev/null
took "the gang schedulers' and third-party CRDs"
# A control plane of this run's own (own ports and state directory), stopped on any exit; the
# node suite's node and control plane too, once started.
export KVPILOT_CONTROL_PLANE_DIR="$PWD/target/control-plane/test-run-$$"
NODE_CONTROL_PLANE="$PWD/target/control-plane/node-test-run-$$"
NODE_DIR="$PWD/target/control-plane/node-$$"
cleanup() {
    local status=$? rc=0
    if [ -d "$NODE_DIR" ]; then KVPILOT_NODE_DIR="$NODE_DIR" bash scripts/node.sh down || rc=1; fi
    if [ -d "$NODE_CONTROL_PLANE" ]; then KVPILOT_CONTROL_PLANE_DIR="$NODE_CONTROL_PLANE" bash scripts/control-plane.sh down || rc=1; fi
    bash scripts/control-plane.sh down || rc=1
    # A run whose node could not be removed whole fails, even when its tests passed.
    if [ "$status" = 0 ] && [ "$rc" != 0 ]; then exit 1; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
bash scripts/control-plane.sh up
export KVPILOT_CLUSTER_KUBECONFIG="$KVPILOT_CONTROL_PLANE_DIR/kubeconfig"
export KVPILOT_CLUSTER_KUBECTL="$PWD/target/control-plane/bin/kubectl"
# The cluster tests skip without a cluster; here they must run, so they fail instead.
export KVPILOT_REQUIRE_CLUSTER=1
"$KVPILOT_CLUSTER_KUBECTL" --kubeconfig "$KVPILOT_CLUSTER_KUBECONFIG" get --raw /readyz >/dev/null
took "the control plane"

cargo test --locked --no-fail-fast
took "cargo test"

# The image as the Dockerfile makes it (release build, distroless-like base from Debian packages).
bash scripts/image.sh build
took "the release build and image"

# Each supported SGLang release's own code against kvpilot, with the release binary the image
# build just made: a third of the parity run is `kvpilot check` on large documents, several times
# faster optimised (downloads are cached under target/parity).
KVPILOT_BIN="$PWD/target/release/kvpilot" bash scripts/parity.sh
took "the parity harness"

# SGLang's own HiCache code (0.5.17, 0.5.21, 0.5.23) driving the cache sidecar and its connector
# on CPU (needs target/debug/kvpilot; torch and the releases are cached under target/l3).
bash scripts/l3-contract.sh
took "the HiCache contract"

# The image run as the cluster runs it: non-root, read-only root, loopback only (docs/image.md).
bash scripts/image.sh test
took "the image test"

# kvpilot's pods on a real node: the operator from that image as the chart deploys it, its
# decode group with the cache runtime, a PD service with its router, and broken pod specs, each
# started by a real kubelet (scripts/node.sh; tests/node_pods.rs). Its own control plane, so no
# pod the cluster tests left behind is scheduled onto the node.
started=$SECONDS
bash scripts/node.sh build
echo "test.sh: the node's binaries ready in $((SECONDS - started))s" >&2
KVPILOT_CONTROL_PLANE_DIR="$NODE_CONTROL_PLANE" bash scripts/control-plane.sh up
KVPILOT_CONTROL_PLANE_DIR="$NODE_CONTROL_PLANE" KVPILOT_NODE_DIR="$NODE_DIR" bash scripts/node.sh up
echo "test.sh: the node's control plane and node up after $((SECONDS - started))s" >&2
tests_started=$SECONDS
KVPILOT_CLUSTER_KUBECONFIG="$NODE_CONTROL_PLANE/kubeconfig" KVPILOT_NODE_DIR="$NODE_DIR" KVPILOT_REQUIRE_NODE=1 \
    cargo test --locked --test node_pods -- --test-threads=3
echo "test.sh: the node tests took $((SECONDS - tests_started))s" >&2
KVPILOT_NODE_DIR="$NODE_DIR" bash scripts/node.sh down
KVPILOT_CONTROL_PLANE_DIR="$NODE_CONTROL_PLANE" bash scripts/control-plane.sh down
took "the node part"

# The end-to-end run on a real cluster only when asked for (see scripts/e2e-cluster.sh).
if [ "${KVPILOT_E2E:-0}" = 1 ]; then
    bash scripts/e2e-cluster.sh
fi
