#!/usr/bin/env bash
# Opt-in end-to-end run on a real cluster. Not part of CI: its machines have no Kubernetes API
# server and no Docker engine. Run it yourself, or set KVPILOT_E2E=1 for scripts/test.sh to.
#
#   KVPILOT_E2E_CLUSTER=kind     (default) create or reuse the kind cluster "kvpilot-e2e"
#   KVPILOT_E2E_CLUSTER=current  use the current kubeconfig context as it is
#   KVPILOT_E2E_IMAGE            image to build and install (default kvpilot/kvpilot:e2e);
#                                with "current" it must be pullable by the cluster's nodes
#
# Needs docker, kubectl, helm, go (and kind for the default). It builds the image, installs the CRD
# and the gang schedulers' CRDs (scripts/gang-crds.sh: examples/deepseek-v3-tp16-volcano.yaml asks
# for Volcano, which is refused where its API is not served) with server-side apply and the chart
# with its defaults (self-signed webhook certificates), then
# checks what a user would: the webhook refuses the rejected example at `kubectl apply` with
# SGLang's message, the other examples resolve their layout and get decode pods, a headless
# Service and a ConfigMap with the SGLang flags. Decode pods request nvidia.com/gpu, so on a cluster without
# GPUs they stay Pending; the script reports that instead of waiting for Ready.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KVPILOT_E2E_CLUSTER:-kind}"
IMAGE="${KVPILOT_E2E_IMAGE:-kvpilot/kvpilot:e2e}"
NAMESPACE=kvpilot-system

need() { command -v "$1" >/dev/null || { echo "e2e: $1 is required" >&2; exit 2; }; }
fail() { echo "e2e: FAILED: $*" >&2; exit 1; }
need docker; need kubectl; need helm; need go

echo "== building $IMAGE"
docker build -t "$IMAGE" .

if [ "$CLUSTER" = kind ]; then
    need kind
    kind get clusters | grep -qx kvpilot-e2e || kind create cluster --name kvpilot-e2e --wait 120s
    kubectl config use-context kind-kvpilot-e2e
    kind load docker-image "$IMAGE" --name kvpilot-e2e
fi

echo "== installing the CRD and the chart"
kubectl apply --server-side -f crds/
kubectl apply --server-side -R -f "$(bash scripts/gang-crds.sh)"
helm upgrade --install kvpilot charts/kvpilot --namespace "$NAMESPACE" --create-namespace \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --wait --timeout 5m

echo "== waiting for kvpilot to set the webhook caBundle"
for _ in $(seq 90); do
    bundle="$(kubectl get validatingwebhookconfiguration kvpilot -o jsonpath='{.webhooks[0].clientConfig.caBundle}')"
    [ -n "$bundle" ] && break
    sleep 2
done
[ -n "$bundle" ] || fail "the webhook caBundle was never set"

echo "== the rejected example is refused at apply time"
kubectl create namespace models --dry-run=client -o yaml | kubectl apply -f - >/dev/null
if kubectl apply -f examples/deepseek-v3-mla-rejected.yaml 2>/tmp/kvpilot-e2e-refusal; then
    fail "examples/deepseek-v3-mla-rejected.yaml was admitted"
fi
grep -q "R9" /tmp/kvpilot-e2e-refusal || fail "the refusal does not name rule R9: $(cat /tmp/kvpilot-e2e-refusal)"
grep -q "requires an MHA or hybrid-SWA HiCache host stack" /tmp/kvpilot-e2e-refusal \
    || fail "the refusal does not carry SGLang's message"

echo "== the other examples are admitted, resolved and given decode objects"
for example in examples/*.yaml; do
    [ "$example" = examples/deepseek-v3-mla-rejected.yaml ] || kubectl apply -f "$example"
done
# Every admitted example's namespace/name (tests/gitops.rs keeps this list equal to examples/).
ADMITTED="default/deepseek-v3-tp16 default/deepseek-v3-volcano default/deepseek-v4-mtp default/gemma-3-1b default/gpt-oss-20b default/llama-3-1-8b default/mimo-pure-swa models/qwen3-next"
for target in $ADMITTED; do
    namespace="${target%/*}"; name="${target#*/}"
    kubectl get infd -n "$namespace" "$name" >/dev/null || fail "$target was not created"
    kubectl wait -n "$namespace" "infd/$name" --for=condition=ModelResolved --timeout=2m
    kubectl wait -n "$namespace" "infd/$name" --for=condition=SettingsValid --timeout=2m
    kubectl get -n "$namespace" "configmap/$name-sglang" "service/$name-decode" >/dev/null \
        || fail "$target has no SGLang-flags ConfigMap or decode Service"
    pods="$(kubectl get pods -n "$namespace" -l "app.kubernetes.io/instance=$name" -o name | wc -l)"
    [ "$pods" -gt 0 ] || fail "$target has no decode pods"
done
kubectl get infd -A -o wide
kubectl get pods -A -l app.kubernetes.io/managed-by=kvpilot
echo "== e2e passed (decode pods without GPUs stay Pending; Ready needs GPU nodes)"
