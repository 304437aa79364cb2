#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, no Docker: etcd, kube-apiserver and
# kube-controller-manager of one pinned release, built from Go modules (tests/control-plane).
#
#   scripts/control-plane.sh up                 build what is missing, start, wait for /readyz
#   scripts/control-plane.sh down               stop exactly the processes `up` started, remove their data
#   scripts/control-plane.sh restart-apiserver  stop and start kube-apiserver alone (etcd keeps the data)
#   scripts/control-plane.sh build              only build the binaries
#
# Binaries: target/control-plane/bin (kubectl too). State of a run: $KVPILOT_CONTROL_PLANE_DIR
# (default target/control-plane/run): certificates, etcd data, logs, one pid file per process, and
# `env` with the ports. The admin kubeconfig (client certificate in system:masters) is
# $KVPILOT_CONTROL_PLANE_DIR/kubeconfig, also linked as target/control-plane/kubeconfig.
# Ports are free ports chosen at start, so runs with different state directories do not collide.
#
# There is no kube-proxy (nor a scheduler or kubelet: scripts/node.sh adds a node). So that a
# webhook reached through a Service works once its pods run on that node, the API server resolves
# Services to their endpoints (--enable-aggregator-routing) instead of dialling a ClusterIP
# nothing routes; it talks to kubelets with a client certificate of its own (kubectl logs);
# the PersistentVolume binder and protection controllers bind and release the claims of the node
# tests' weights volumes, the node lifecycle controller lifts the not-ready taint a kubelet
# registers its node with, and the disruption controller keeps PodDisruptionBudgets' counts,
# which the Eviction API decides by.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODULE="$ROOT/tests/control-plane"
BASE="$ROOT/target/control-plane"
BIN="$BASE/bin"
STATE="${KVPILOT_CONTROL_PLANE_DIR:-$BASE/run}"
# The release the Go module pins; stamped into the binaries as `kubectl version` and /version report it.
KUBE_VERSION=v1.37.2
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl)
SERVICE_CIDR=10.0.0.0/16

log() { echo "control-plane: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/processes.sh
. "$ROOT/scripts/lib/processes.sh"

# Rebuilds when the module, its checksums or the version stamp changed; Go's build cache keeps
# a rebuild incremental.
build() {
    command -v go >/dev/null || die "go is not installed (Go 1.26 or newer builds tests/control-plane)"
    local ldflags fingerprint
    ldflags="$(kube_version_ldflags)"
    fingerprint="$(cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE/etcd/main.go" <(echo "$ldflags") | sha256sum | cut -d' ' -f1)"
    local missing=0
    for binary in "${BINARIES[@]}"; do [ -x "$BIN/$binary" ] || missing=1; done
    if [ "$missing" = 0 ] && [ "$(cat "$BIN/.fingerprint" 2>/dev/null)" = "$fingerprint" ]; then
        return
    fi
    log "building ${BINARIES[*]} ($KUBE_VERSION) into $BIN; a cold build takes 15-30 minutes on 2 cores"
    mkdir -p "$BIN"
    (cd "$MODULE" && go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$BIN/" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kubectl ./etcd) || die "building the control plane failed"
    echo "$fingerprint" >"$BIN/.fingerprint"
}

certificate() { # name subject [extensions]
    local name="$1" subject="$2" extensions="${3:-}"
    openssl req -new -nodes -newkey rsa:2048 -keyout "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 30 \
        -extfile <(printf 'basicConstraints=CA:FALSE\n%s\n' "$extensions") -out "$PKI/$name.crt" 2>/dev/null
    rm "$PKI/$name.csr"
}

pki() {
    PKI="$STATE/pki"
    mkdir -p "$PKI"
    openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$PKI/ca.key" -subj "/CN=kvpilot-test-ca" -days 30 \
        -out "$PKI/ca.crt" 2>/dev/null
    certificate apiserver "/CN=kube-apiserver" "keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    certificate admin "/O=system:masters/CN=kvpilot-admin" "keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    certificate controller-manager "/CN=system:kube-controller-manager" "keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    # The API server's identity towards kubelets (logs, exec) when scripts/node.sh joins one.
    certificate apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    openssl genrsa -out "$PKI/service-account.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/service-account.key" -pubout -out "$PKI/service-account.pub" 2>/dev/null
}

kubeconfig() { # file user
    write_kubeconfig "$1" "$2" "$API_PORT" "$PKI/ca.crt" "$PKI/$2.crt" "$PKI/$2.key"
}

admin_curl() { # path
    curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$API_PORT$1"
}

start_apiserver() {
    start kube-apiserver "$BIN/kube-apiserver" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$PKI/service-account.pub" \
        --service-account-signing-key-file="$PKI/service-account.key" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --endpoint-reconciler-type=none \
        --enable-aggregator-routing=true \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types=InternalIP \
        --profiling=false \
        --cert-dir="$STATE/apiserver-certs"
    wait_until "kube-apiserver /readyz" 120 kube-apiserver admin_curl /readyz
}

load_state() {
    [ -f "$STATE/env" ] || die "no control plane in $STATE (run: $0 up)"
    # shellcheck source=/dev/null
    . "$STATE/env"
    PKI="$STATE/pki"
}

up() {
    build
    if [ -f "$STATE/env" ]; then
        load_state
        if running etcd && running kube-apiserver && running kube-controller-manager && admin_curl /readyz >/dev/null; then
            log "already up: export KUBECONFIG=$STATE/kubeconfig"
            return
        fi
        die "$STATE holds a control plane that is not fully running; run: $0 down"
    fi
    mkdir -p "$STATE/logs"
    local ports
    read -r -a ports <<<"$(free_ports 4)"
    ETCD_PORT="${ports[0]}" ETCD_PEER_PORT="${ports[1]}" API_PORT="${ports[2]}" CONTROLLER_MANAGER_PORT="${ports[3]}"
    cat >"$STATE/env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
CONTROLLER_MANAGER_PORT=$CONTROLLER_MANAGER_PORT
KUBECONFIG=$STATE/kubeconfig
EOF
    # From here on a failure (or an interrupt) stops what was started.
    trap 'log "start-up failed; stopping what was started"; down' EXIT
    trap 'exit 130' INT TERM
    pki
    kubeconfig "$STATE/kubeconfig" admin
    kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager

    start etcd "$BIN/etcd" --name=kvpilot-test --data-dir="$STATE/etcd" \
        --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster="kvpilot-test=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync --log-level=warn
    wait_until "etcd health" 60 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

    start_apiserver

    start kube-controller-manager "$BIN/kube-controller-manager" \
        --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" \
        --kubeconfig="$STATE/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
        --cert-dir="$STATE/controller-manager-certs" \
        --leader-elect=false --use-service-account-credentials \
        --controllers=namespace-controller,garbage-collector-controller,endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller,deployment-controller,replicaset-controller,disruption-controller,persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,node-lifecycle-controller \
        --service-account-private-key-file="$PKI/service-account.key" --root-ca-file="$PKI/ca.crt" \
        --service-cluster-ip-range="$SERVICE_CIDR"
    wait_until "kube-controller-manager /healthz" 60 kube-controller-manager \
        curl -sfk "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz"
    # Namespaces get their "default" ServiceAccount from the controller manager: wait for it once.
    wait_until "the default ServiceAccount" 60 kube-controller-manager \
        admin_curl /api/v1/namespaces/default/serviceaccounts/default
    trap - EXIT INT TERM

    if [ "$STATE" = "$BASE/run" ]; then ln -sfn run/kubeconfig "$BASE/kubeconfig"; fi
    log "up: Kubernetes $KUBE_VERSION at https://127.0.0.1:$API_PORT"
    log "export KUBECONFIG=$STATE/kubeconfig"
}

down() {
    trap - EXIT
    [ -d "$STATE" ] || return 0
    for process in kube-controller-manager kube-apiserver etcd; do stop "$process"; done
    rm -rf "$STATE"
    if [ "$STATE" = "$BASE/run" ]; then rm -f "$BASE/kubeconfig"; fi
    log "down"
}

restart_apiserver() {
    load_state
    stop kube-apiserver
    start_apiserver
    log "kube-apiserver restarted at https://127.0.0.1:$API_PORT"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    restart-apiserver) restart_apiserver ;;
    build) build ;;
    *) echo "usage: $0 up|down|restart-apiserver|build" >&2; exit 2 ;;
esac
