#!/usr/bin/env bash
# The gang schedulers' own CRDs, for the cluster tests of spec.scheduling.gang, from their
# published Go modules through the Go module proxy (no release manifests are reachable here):
#   Kueue             sigs.k8s.io/kueue v0.17.0: config/components/crd/bases/ (11 CRDs)
#   scheduler-plugins sigs.k8s.io/scheduler-plugins v0.34.7: config/crd/bases/scheduling.x-k8s.io_podgroups.yaml
#   Volcano           volcano.sh/apis v1.13.0 (the proxy refuses volcano.sh/volcano): its
#                     pkg/apis/scheduling/v1beta1 types (PodGroup, Queue) turned into CRDs by
#                     controller-gen v0.20.1, as Volcano's own build does (tests/gang-crds pins both)
#
#   scripts/gang-crds.sh    generate what is missing into target/gang-crds/{kueue,scheduler-plugins,volcano}
#                           and print target/gang-crds
#
# Cached: a stamp of the pins and of tests/gang-crds/go.{mod,sum} skips everything while it holds.
# A cold run downloads about 60 MB of modules and builds controller-gen (2-3 minutes on 2 cores);
# a warm one returns at once.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODULE="$ROOT/tests/gang-crds"
OUT="$ROOT/target/gang-crds"

KUEUE=sigs.k8s.io/kueue@v0.17.0
KUEUE_SUM=h1:7hzb38M4eKGzYW+CFv2s1L+swzzacUCHOCXxZmAV90I=
SCHEDULER_PLUGINS=sigs.k8s.io/scheduler-plugins@v0.34.7
SCHEDULER_PLUGINS_SUM=h1:GENSA4rKpCKBrPvNSo2AV2QHU7j3a6LT14kNlHhXfeg=
VOLCANO_TYPES=volcano.sh/apis/pkg/apis/scheduling/v1beta1

log() { echo "gang-crds: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/pinned-module.sh
source "$ROOT/scripts/pinned-module.sh"

stamp="$(cat "$0" "$ROOT/scripts/pinned-module.sh" "$MODULE/go.mod" "$MODULE/go.sum" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$OUT"
    exit 0
fi
command -v go >/dev/null || die "go is not installed (Go 1.26 or newer)"
log "fetching Kueue's, scheduler-plugins' and Volcano's CRDs into $OUT (a cold run takes 2-3 minutes)"
work="$OUT.partial"
rm -rf "$work"
mkdir -p "$work/kueue" "$work/scheduler-plugins" "$work/volcano" "$work/bin"


kueue="$(pinned_module_dir "$MODULE" "$KUEUE" "$KUEUE_SUM")"
cp "$kueue"/config/components/crd/bases/*.yaml "$work/kueue/"
plugins="$(pinned_module_dir "$MODULE" "$SCHEDULER_PLUGINS" "$SCHEDULER_PLUGINS_SUM")"
cp "$plugins/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" "$work/scheduler-plugins/"
chmod -R u+w "$work"

(cd "$MODULE" && go build -trimpath -o "$work/bin/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen) ||
    die "building controller-gen failed"
(cd "$MODULE" && "$work/bin/controller-gen" crd:crdVersions=v1 paths="$VOLCANO_TYPES" output:crd:dir="$work/volcano") ||
    die "controller-gen could not make Volcano's CRDs"
[ -f "$work/volcano/scheduling.volcano.sh_podgroups.yaml" ] || die "controller-gen made no Volcano PodGroup CRD"
rm -rf "$work/bin"

rm -rf "$OUT"
mv "$work" "$OUT"
echo "$stamp" >"$OUT/.stamp"
log "$(find "$OUT" -name '*.yaml' | wc -l) CRDs in $OUT"
echo "$OUT"
