#!/usr/bin/env bash
# The CRDs of other projects that kvpilot's chart, operator and examples create objects of, for
# the cluster tests, from their published Go modules through the Go module proxy (as
# scripts/gang-crds.sh fetches the gang schedulers'), so that the API server validates those
# objects against the real schemas:
#   Prometheus Operator  github.com/prometheus-operator/prometheus-operator v0.90.1:
#                        example/prometheus-operator-crd/monitoring.coreos.com_{podmonitors,servicemonitors}.yaml
#                        (what `kvpilot operator --pod-monitors` applies; the chart's ServiceMonitor)
#   KEDA                 github.com/kedacore/keda/v2 v2.20.2: config/crd/bases/keda.sh_scaledobjects.yaml
#                        (what examples/autoscaling/keda-scaledobject.yaml is checked against)
#   cert-manager         github.com/cert-manager/cert-manager v1.21.2:
#                        deploy/crds/cert-manager.io_{certificates,issuers}.yaml (the chart's webhook
#                        certificates with webhook.certificates.mode certManager)
#
#   scripts/third-party-crds.sh   copy what is missing into
#                                 target/third-party-crds/{prometheus-operator,keda,cert-manager}
#                                 and print target/third-party-crds
#
# Cached: a stamp of this script skips everything while it holds. A cold run downloads about
# 20 MB of module zips; a warm one returns at once.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/target/third-party-crds"

PROMETHEUS_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.90.1
PROMETHEUS_OPERATOR_SUM=h1:n/+FkLB6WpftBxJC8IEHrWXSA6uzNTocFmwU/ACkfeg=
KEDA=github.com/kedacore/keda/v2@v2.20.2
KEDA_SUM=h1:SR60v8uIcelbveS8n/1jcl8tLdBBIbHMxmdOHw8tKqA=
CERT_MANAGER=github.com/cert-manager/cert-manager@v1.21.2
CERT_MANAGER_SUM=h1:UWgoYM+KLNtRlqmoWOKjKBOBUPVHeepQ6/ac3ERJW68=

log() { echo "third-party-crds: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/pinned-module.sh
source "$ROOT/scripts/pinned-module.sh"

stamp="$(cat "$0" "$ROOT/scripts/pinned-module.sh" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$OUT"
    exit 0
fi
command -v go >/dev/null || die "go is not installed (Go 1.26 or newer)"
log "fetching the Prometheus Operator's, KEDA's and cert-manager's CRDs into $OUT"
work="$OUT.partial"
rm -rf "$work"
mkdir -p "$work/prometheus-operator" "$work/keda" "$work/cert-manager"
# Outside any module, so that no go.mod of ours decides what is downloaded.
scratch="$(mktemp -d)"
export GOFLAGS=-mod=mod
trap 'rm -rf "$scratch"' EXIT


operator="$(pinned_module_dir "$scratch" "$PROMETHEUS_OPERATOR" "$PROMETHEUS_OPERATOR_SUM")"
for kind in podmonitors servicemonitors; do
    cp "$operator/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$work/prometheus-operator/"
done
keda="$(pinned_module_dir "$scratch" "$KEDA" "$KEDA_SUM")"
cp "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$work/keda/"
cert_manager="$(pinned_module_dir "$scratch" "$CERT_MANAGER" "$CERT_MANAGER_SUM")"
for kind in certificates issuers; do
    cp "$cert_manager/deploy/crds/cert-manager.io_$kind.yaml" "$work/cert-manager/"
done
chmod -R u+w "$work"

rm -rf "$OUT"
mv "$work" "$OUT"
echo "$stamp" >"$OUT/.stamp"
log "$(find "$OUT" -name '*.yaml' | wc -l) CRDs in $OUT"
echo "$OUT"
