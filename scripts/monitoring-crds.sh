#!/usr/bin/env bash
# The CRDs of the projects kvpilot's metrics and autoscaling examples rely on, for the cluster
# tests, from their published Go modules through the Go module proxy (as scripts/gang-crds.sh
# fetches the gang schedulers'):
#   Prometheus Operator  github.com/prometheus-operator/prometheus-operator v0.90.1:
#                        example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml
#                        (what `kvpilot operator --pod-monitors` applies)
#   KEDA                 github.com/kedacore/keda/v2 v2.20.2: config/crd/bases/keda.sh_scaledobjects.yaml
#                        (what examples/autoscaling/keda-scaledobject.yaml is checked against)
#
#   scripts/monitoring-crds.sh    copy what is missing into target/monitoring-crds/{prometheus-operator,keda}
#                                 and print target/monitoring-crds
#
# Cached: a stamp of this script skips everything while it holds. A cold run downloads about
# 7 MB of module zips; a warm one returns at once.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/target/monitoring-crds"

PROMETHEUS_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.90.1
PROMETHEUS_OPERATOR_SUM=h1:n/+FkLB6WpftBxJC8IEHrWXSA6uzNTocFmwU/ACkfeg=
KEDA=github.com/kedacore/keda/v2@v2.20.2
KEDA_SUM=h1:SR60v8uIcelbveS8n/1jcl8tLdBBIbHMxmdOHw8tKqA=

log() { echo "monitoring-crds: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/pinned-module.sh
source "$ROOT/scripts/pinned-module.sh"

stamp="$(cat "$0" "$ROOT/scripts/pinned-module.sh" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$OUT"
    exit 0
fi
command -v go >/dev/null || die "go is not installed (Go 1.26 or newer)"
log "fetching the Prometheus Operator's PodMonitor CRD and KEDA's ScaledObject CRD into $OUT"
work="$OUT.partial"
rm -rf "$work"
mkdir -p "$work/prometheus-operator" "$work/keda"
# Outside any module, so that no go.mod of ours decides what is downloaded.
scratch="$(mktemp -d)"
export GOFLAGS=-mod=mod
trap 'rm -rf "$scratch"' EXIT


operator="$(pinned_module_dir "$scratch" "$PROMETHEUS_OPERATOR" "$PROMETHEUS_OPERATOR_SUM")"
cp "$operator/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml" "$work/prometheus-operator/"
keda="$(pinned_module_dir "$scratch" "$KEDA" "$KEDA_SUM")"
cp "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$work/keda/"
chmod -R u+w "$work"

rm -rf "$OUT"
mv "$work" "$OUT"
echo "$stamp" >"$OUT/.stamp"
log "$(find "$OUT" -name '*.yaml' | wc -l) CRDs in $OUT"
echo "$OUT"
