#!/usr/bin/env bash
# A real Kubernetes node for the test control plane of scripts/control-plane.sh, no Docker: a
# kubelet of the control plane's release that starts every pod it is given, with containerd,
# runc, a bridge network, fake GPUs and kube-scheduler.
#
#   scripts/node.sh up      build what is missing, start the node, wait until it is Ready with its devices
#   scripts/node.sh down    stop what `up` started and remove everything it created
#   scripts/node.sh build   only build the binaries
#
# Joins the control plane of $KVPILOT_CONTROL_PLANE_DIR (default target/control-plane/run), which
# must be up. State of a run: $KVPILOT_NODE_DIR (default target/control-plane/node): certificates,
# configs, logs, pid files, the kubelet's root directory, containerd's content; `env` names what
# the tests need (NODE_NAME, CONTAINERD_ADDRESS, KUBELET_ROOT, POD_SUBNET, ...). Sockets live
# under /run/kvpilot-node-<hash> (socket paths may not exceed 108 bytes).
#
# What runs (binaries in target/control-plane/bin, built from tests/control-plane like the
# control plane; Kubernetes v1.37.2):
#   containerd   Debian's 1.6 (it works with the 1.37 kubelet over CRI v1) with runc, from its own
#                config: root, state and socket of this run, the overlayfs snapshotter, runc with
#                cgroupfs, `restrict_oom_score_adj` (these machines refuse a negative
#                oom_score_adj, and every sandbox fails without it), network namespaces under its
#                state directory, CNI from Debian's containernetworking-plugins (bridge,
#                host-local), and the images below imported, nothing pulled.
#   network      a bridge kvpnode<N> with pods on 10.244.<N>.0/24 (N free on this machine); its
#                gateway 10.244.<N>.1 is the node's address (the kubelet serves there and on
#                127.0.0.1, nothing listens on an external interface). No masquerading, no IP
#                forwarding: pods reach each other and the host, nothing else.
#   kubelet      joined as Node kvpilot-node with its own client certificate
#                (CN=system:node:kvpilot-node, O=system:nodes) signed by the control plane's CA,
#                as a node joins; cgroupfs on the machine's hybrid cgroups (failCgroupV1: false),
#                under a cgroup root of this run; its root directory in the state directory.
#   kube-scheduler  with its own certificate; it places pods by their requests (no test binds).
#   test-device-plugin  (tests/control-plane/test-device-plugin) advertises 32 fake nvidia.com/gpu
#                and 8 rdma/rdma_shared_device_a through the kubelet's device-plugin API.
#   images       the kvpilot image, a pause image and the stand-in SGLang image, from
#                `scripts/image.sh node-images` (the kvpilot image must have been built).
#
# How pods reach the API server. kube-apiserver listens on 127.0.0.1 only, and a pod's 127.0.0.1 is
# its own. In-cluster clients (the operator, the router) use the `kubernetes` Service:
# KUBERNETES_SERVICE_HOST=10.0.0.1, port 443, which the kubelet puts in every pod. With no
# kube-proxy, nothing routes that ClusterIP, so `up` does what kube-proxy would do for that one
# Service, for this bridge only: a DNAT rule (nat PREROUTING, -i kvpnode<N>) from 10.0.0.1:443 to
# the API server's 127.0.0.1 port, with route_localnet on the bridge so the kernel delivers it.
# Pods keep the production path (service environment variables, the ServiceAccount token and CA);
# the API server is reachable from this bridge's pods and from loopback, nowhere else. (kube-proxy
# would install host-wide rules for every Service and need the API server on a non-loopback
# address.) The API server reaches the pods' webhook through the Service's endpoints
# (--enable-aggregator-routing, set by control-plane.sh).
#
# What a kubelet changes on the host, and `down` puts back: the kernel tunables every kubelet sets
# (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys/maxbytes; protectKernelDefaults would refuse to start instead), its
# iptables chains (KUBE-IPTABLES-HINT, KUBE-FIREWALL, KUBE-KUBELET-CANARY), and the
# device-plugin directory /var/lib/kubelet/device-plugins, which the kubelet hard-codes: so one
# node runs on a machine at a time (a second `up` waits for it, up to $KVPILOT_NODE_WAIT seconds,
# default 1800). `down` stops every process `up` started (and the runtime's shims and containers,
# by the pids in this run's cgroups and its socket address), tears the pods down through CRI,
# unmounts what is mounted under the state directories, removes the cgroups, the bridge, the
# network namespaces, the iptables rules, and the files it created; `up` runs it on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODULE="$ROOT/tests/control-plane"
BASE="$ROOT/target/control-plane"
BIN="$BASE/bin"
CONTROL_PLANE="${KVPILOT_CONTROL_PLANE_DIR:-$BASE/run}"
STATE="${KVPILOT_NODE_DIR:-$BASE/node}"
RUN="/run/kvpilot-node-$(printf %s "$STATE" | sha256sum | cut -c1-12)"
KUBE_VERSION=v1.37.2
BINARIES=(kubelet kube-scheduler test-device-plugin cri-sweep)
NODE_NAME=kvpilot-node
DEVICES=(nvidia.com/gpu=32 rdma/rdma_shared_device_a=8)
# The kubelet's device-plugin directory: a constant in the kubelet, not a setting.
DEVICE_PLUGINS=/var/lib/kubelet/device-plugins
# Held by the node of this machine: a directory (made atomically) naming its state directory.
CLAIM=/run/kvpilot-node.claim
SNAPSHOTTER=overlayfs
KERNEL_TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
    kernel.keys.root_maxbytes net.ipv4.ip_forward)
KUBELET_CHAINS=("mangle KUBE-IPTABLES-HINT" "mangle KUBE-KUBELET-CANARY" "nat KUBE-KUBELET-CANARY"
    "filter KUBE-KUBELET-CANARY" "filter KUBE-FIREWALL")
API_SERVICE_IP=10.0.0.1

log() { echo "node: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/processes.sh
. "$ROOT/scripts/lib/processes.sh"

# --- build -----------------------------------------------------------------------------------

# Same module, flags and stamp as scripts/control-plane.sh; Go's build cache shares the work.
build() {
    command -v go >/dev/null || die "go is not installed (Go 1.26 or newer builds tests/control-plane)"
    local ldflags fingerprint missing=0 binary
    ldflags="$(kube_version_ldflags)"
    fingerprint="$(cat "$MODULE/go.mod" "$MODULE/go.sum" "$MODULE"/test-device-plugin/*.go "$MODULE"/cri-sweep/*.go \
        <(echo "$ldflags") | sha256sum | cut -d' ' -f1)"
    for binary in "${BINARIES[@]}"; do [ -x "$BIN/$binary" ] || missing=1; done
    if [ "$missing" = 0 ] && [ "$(cat "$BIN/.node-fingerprint" 2>/dev/null)" = "$fingerprint" ]; then
        return
    fi
    log "building ${BINARIES[*]} ($KUBE_VERSION) into $BIN"
    mkdir -p "$BIN"
    local started=$SECONDS
    (cd "$MODULE" && go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$BIN/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler ./test-device-plugin ./cri-sweep) ||
        die "building the node failed"
    echo "$fingerprint" >"$BIN/.node-fingerprint"
    log "built in $((SECONDS - started))s"
}

# --- helpers ---------------------------------------------------------------------------------

certificate() { # name subject
    openssl req -new -nodes -newkey rsa:2048 -keyout "$STATE/pki/$1.key" -subj "$2" -out "$STATE/pki/$1.csr" 2>/dev/null
    openssl x509 -req -in "$STATE/pki/$1.csr" -CA "$CP_PKI/ca.crt" -CAkey "$CP_PKI/ca.key" -CAcreateserial \
        -CAserial "$STATE/pki/ca.srl" -days 30 \
        -extfile <(printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') \
        -out "$STATE/pki/$1.crt" 2>/dev/null
    rm "$STATE/pki/$1.csr"
}

kubeconfig() { # file user
    write_kubeconfig "$1" "$2" "$API_PORT" "$CP_PKI/ca.crt" "$STATE/pki/$2.crt" "$STATE/pki/$2.key"
}

kubectl_admin() { "$BIN/kubectl" --kubeconfig "$CONTROL_PLANE/kubeconfig" "$@"; }
ctr_node() { ctr --address "$RUN/containerd.sock" --namespace k8s.io "$@"; }

# The cgroup hierarchies (v1 controllers and the v2 one of the hybrid layout).
hierarchies() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts; }

# A free 10.244.N.0/24 and bridge name: nothing on this machine routes it yet.
pick_subnet() {
    local n
    for n in $(seq 1 254); do
        if [ -z "$(ip -4 route show "10.244.$n.0/24" 2>/dev/null)" ] && ! ip link show "kvpnode$n" >/dev/null 2>&1 &&
            [ -z "$(ip -4 addr show to "10.244.$n.0/24" 2>/dev/null)" ]; then
            echo "$n"
            return
        fi
    done
    die "no free 10.244.N.0/24 for the node's pods"
}

# --- the machine-wide claim --------------------------------------------------------------------

# One node per machine: the kubelet's device-plugin directory is fixed. The claim names the
# state directory of the node holding it; it is stale once that directory is gone.
claim_machine() {
    local waited=0 limit="${KVPILOT_NODE_WAIT:-1800}" holder
    while ! mkdir "$CLAIM" 2>/dev/null; do
        holder="$(cat "$CLAIM/state" 2>/dev/null || true)"
        if [ -n "$holder" ] && [ ! -d "$holder" ]; then
            log "removing the stale claim of $holder (its state directory is gone)"
            rm -rf "$CLAIM"
            continue
        fi
        [ "$waited" -lt "$limit" ] ||
            die "another node (${holder:-starting}) holds this machine; if it is stale: KVPILOT_NODE_DIR=$holder $0 down"
        [ $((waited % 60)) = 0 ] && log "waiting for the node of ${holder:-another run} to go down (one kubelet per machine)"
        sleep 5
        waited=$((waited + 5))
    done
    echo "$STATE" >"$CLAIM/state"
}

# --- up ----------------------------------------------------------------------------------------

write_containerd_config() {
    cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$SNAPSHOTTER"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "$RUN/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
    max_conf_num = 1
EOF
    mkdir -p "$STATE/cni"
    cat >"$STATE/cni/10-$BRIDGE.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$NODE_IP"}]
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
    cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $CP_PKI/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$RUN/containerd.sock
imageServiceEndpoint: unix://$RUN/containerd.sock
# These machines' cgroups are hybrid (v1 controllers, v2 at /sys/fs/cgroup/unified).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: $STATE/pod-logs
# The disk is the build machine's: never evict the tests' pods or collect the imported images.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
EOF
}

up() {
    build
    [ -f "$CONTROL_PLANE/env" ] || die "no control plane in $CONTROL_PLANE (run: scripts/control-plane.sh up)"
    # shellcheck source=/dev/null
    . "$CONTROL_PLANE/env"
    CP_PKI="$CONTROL_PLANE/pki"
    [ "$(id -u)" = 0 ] || die "needs root (containerd, the kubelet and the bridge)"
    for tool in containerd containerd-shim-runc-v2 ctr /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local iptables; do
        command -v "$tool" >/dev/null || die "$tool is missing; run scripts/install-test-tools.sh"
    done
    if [ -f "$STATE/env" ]; then
        # shellcheck source=/dev/null
        . "$STATE/env"
        if running kubelet && running containerd && kubectl_admin get node "$NODE_NAME" >/dev/null 2>&1; then
            log "already up: node $NODE_NAME"
            return
        fi
        die "$STATE holds a node that is not fully running; run: $0 down"
    fi
    claim_machine
    # From here on a failure (or an interrupt) removes what was made.
    trap 'log "start-up failed; removing what was started"; down' EXIT
    trap 'exit 130' INT TERM
    mkdir -p "$STATE/logs" "$STATE/pki" "$STATE/pod-logs" "$RUN"

    local n ports
    n="$(pick_subnet)"
    read -r -a ports <<<"$(free_ports 3)"
    BRIDGE="kvpnode$n" POD_SUBNET="10.244.$n.0/24" NODE_IP="10.244.$n.1" CGROUP_ROOT="/kvpilot-node-$n"
    KUBELET_PORT="${ports[0]}" KUBELET_HEALTHZ_PORT="${ports[1]}" SCHEDULER_PORT="${ports[2]}"
    # What is there before, so `down` removes only what this run made.
    local tunables="" tunable
    for tunable in "${KERNEL_TUNABLES[@]}"; do tunables+="$tunable=$(sysctl -n "$tunable") "; done
    local chains_before=""
    for chain in "${KUBELET_CHAINS[@]}"; do
        read -r table name <<<"$chain"
        iptables -t "$table" -S "$name" >/dev/null 2>&1 && chains_before+="$table/$name "
    done
    local created=""
    for dir in /var/lib/kubelet "$DEVICE_PLUGINS" /var/log/containers /run/containerd /var/lib/cni; do
        [ -e "$dir" ] || created+="$dir "
    done
    cat >"$STATE/env" <<EOF
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
POD_SUBNET=$POD_SUBNET
BRIDGE=$BRIDGE
CGROUP_ROOT=$CGROUP_ROOT
KUBELET_ROOT=$STATE/kubelet
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
CONTAINERD_ADDRESS=$RUN/containerd.sock
CONTAINERD_STATE=$RUN/containerd
RUN_DIR=$RUN
API_PORT=$API_PORT
CONTROL_PLANE=$CONTROL_PLANE
TUNABLES_BEFORE="$tunables"
CHAINS_BEFORE="$chains_before"
CREATED="$created"
EOF

    # Images: the kvpilot image must exist; the pause and stand-in images are built if missing.
    bash "$ROOT/scripts/image.sh" node-images "$STATE/images"
    # shellcheck source=/dev/null
    . "$STATE/images/images.env"
    echo "KVPILOT_IMAGE=$KVPILOT_IMAGE STANDIN_IMAGE=$STANDIN_IMAGE PAUSE_IMAGE=$PAUSE_IMAGE" | tr ' ' '\n' >>"$STATE/env"

    # The network: the bridge with the node's address, and the kubernetes Service's address
    # delivered to the API server on loopback (see the header).
    ip link add "$BRIDGE" type bridge
    ip addr add "$NODE_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
    iptables -t nat -A PREROUTING -i "$BRIDGE" -d "$API_SERVICE_IP/32" -p tcp --dport 443 \
        -m comment --comment "kvpilot test node $BRIDGE: the kubernetes Service" \
        -j DNAT --to-destination "127.0.0.1:$API_PORT"

    # The cgroup root of this node's pods, in every hierarchy (the kubelet checks it exists).
    local hierarchy
    for hierarchy in $(hierarchies); do
        mkdir -p "$hierarchy$CGROUP_ROOT"
        if [ -f "$hierarchy/cpuset.cpus" ]; then
            cat "$hierarchy/cpuset.cpus" >"$hierarchy$CGROUP_ROOT/cpuset.cpus"
            cat "$hierarchy/cpuset.mems" >"$hierarchy$CGROUP_ROOT/cpuset.mems"
        fi
    done

    write_containerd_config
    start containerd containerd --config "$STATE/containerd.toml"
    wait_until "containerd" 60 containerd ctr_node version
    local archive
    for archive in kvpilot pause standin; do
        ctr_node images import --snapshotter "$SNAPSHOTTER" "$STATE/images/$archive.tar" >/dev/null ||
            die "importing $archive.tar into containerd failed"
    done
    rm -rf "$STATE/images"/*.tar

    certificate node "/O=system:nodes/CN=system:node:$NODE_NAME"
    certificate scheduler "/CN=system:kube-scheduler"
    kubeconfig "$STATE/kubelet.kubeconfig" node
    kubeconfig "$STATE/scheduler.kubeconfig" scheduler
    write_kubelet_config
    start kubelet "$BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
        --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet-pki" --hostname-override="$NODE_NAME" \
        --node-ip="$NODE_IP" --v=1
    start scheduler "$BIN/kube-scheduler" --kubeconfig="$STATE/scheduler.kubeconfig" \
        --authentication-kubeconfig="$STATE/scheduler.kubeconfig" --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$STATE/scheduler-certs" --leader-elect=false
    wait_until "the kubelet's socket for device plugins" 120 kubelet test -S "$DEVICE_PLUGINS/kubelet.sock"
    start device-plugin "$BIN/test-device-plugin" --dir "$DEVICE_PLUGINS" "${DEVICES[@]}"

    wait_until "node $NODE_NAME Ready" 180 kubelet node_ready
    wait_until "the node's fake devices" 60 device-plugin node_has_devices
    wait_until "kube-scheduler /healthz" 60 scheduler curl -sfk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
    trap - EXIT INT TERM
    log "up: node $NODE_NAME at $NODE_IP (pods on $POD_SUBNET), ${DEVICES[*]}; state in $STATE"
}

# Ready, and schedulable: the node lifecycle controller has lifted the not-ready taint.
node_ready() {
    [ "$(kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}/{.spec.taints}')" = True/ ]
}

node_has_devices() {
    kubectl_admin get node "$NODE_NAME" -o json | python3 -c '
import json, sys
allocatable = json.load(sys.stdin)["status"].get("allocatable", {})
sys.exit(any(allocatable.get(r) != n for r, n in (d.split("=") for d in sys.argv[1:])))' "${DEVICES[@]}"
}

# --- down --------------------------------------------------------------------------------------

# Mount points under a directory, deepest first.
mounts_under() {
    awk -v dir="$1" '{ gsub(/\\040/, " ", $5); if ($5 == dir || index($5, dir "/") == 1) print $5 }' /proc/self/mountinfo |
        awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

# Pids in this node's cgroups (its pods' processes).
pids_in_cgroups() {
    local hierarchy
    [ -n "${CGROUP_ROOT:-}" ] || return 0
    for hierarchy in $(hierarchies); do
        [ -d "$hierarchy$CGROUP_ROOT" ] && find "$hierarchy$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null
    done | sort -un
}

# Pids of this runtime's shims: processes started with this run's containerd address.
shim_pids() {
    local cmdline
    for cmdline in /proc/[0-9]*/cmdline; do
        tr '\0' ' ' 2>/dev/null <"$cmdline" | grep -qF -- "-address $RUN/containerd.sock " || continue
        cmdline="${cmdline#/proc/}"
        echo "${cmdline%/cmdline}"
    done
}

down() {
    trap - EXIT
    [ -f "$STATE/env" ] || { rm -rf "$STATE" "$RUN"; return 0; }
    # shellcheck source=/dev/null
    . "$STATE/env"
    local problems=()
    stop device-plugin
    stop scheduler
    stop kubelet 30
    # The pods, torn down by the runtime as the kubelet would: containers, network, netns, shm.
    if running containerd; then
        "$BIN/cri-sweep" --endpoint "unix://$RUN/containerd.sock" remove-all >>"$STATE/logs/cri-sweep.log" 2>&1 ||
            problems+=("cri-sweep could not remove every pod (see $STATE/logs/cri-sweep.log)")
    fi
    stop containerd 30
    local pid
    for pid in $(shim_pids) $(pids_in_cgroups); do stop_pid "$pid" 5; done

    local mount
    for dir in "$STATE" "$RUN"; do
        for mount in $(mounts_under "$dir"); do
            umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || problems+=("cannot unmount $mount")
        done
    done
    if [ -n "${CGROUP_ROOT:-}" ]; then
        local hierarchy
        for hierarchy in $(hierarchies); do
            [ -d "$hierarchy$CGROUP_ROOT" ] || continue
            find "$hierarchy$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null ||
                problems+=("cannot remove cgroup $hierarchy$CGROUP_ROOT")
        done
    fi
    if [ -n "${BRIDGE:-}" ]; then
        iptables -t nat -D PREROUTING -i "$BRIDGE" -d "$API_SERVICE_IP/32" -p tcp --dport 443 \
            -m comment --comment "kvpilot test node $BRIDGE: the kubernetes Service" \
            -j DNAT --to-destination "127.0.0.1:$API_PORT" 2>/dev/null || true
        ip link del "$BRIDGE" 2>/dev/null || true
        rm -f /var/lib/cni/results/"$BRIDGE"-* 2>/dev/null || true
    fi
    # The kubelet's chains that were not there before it (the jumps to KUBE-FIREWALL first).
    local chain table name ipt
    for ipt in iptables ip6tables; do
        command -v "$ipt" >/dev/null || continue
        for chain in "${KUBELET_CHAINS[@]}"; do
            read -r table name <<<"$chain"
            [[ " ${CHAINS_BEFORE:-} " == *" $table/$name "* ]] && continue
            if [ "$name" = KUBE-FIREWALL ]; then
                while "$ipt" -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
                while "$ipt" -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
            fi
            "$ipt" -t "$table" -F "$name" 2>/dev/null || true
            "$ipt" -t "$table" -X "$name" 2>/dev/null || true
        done
    done
    local tunable
    for tunable in ${TUNABLES_BEFORE:-}; do
        [ "$(sysctl -n "${tunable%%=*}")" = "${tunable#*=}" ] || sysctl -qw "$tunable" || problems+=("cannot restore $tunable")
    done
    # The files the kubelet and the device plugin leave in its fixed directory: all of it when
    # this run made the directory (it held the machine's claim meanwhile), else what they name.
    if [[ " ${CREATED:-} " == *" $DEVICE_PLUGINS "* ]]; then
        rm -rf "$DEVICE_PLUGINS"
    else
        rm -f "$DEVICE_PLUGINS/kubelet.sock" "$DEVICE_PLUGINS/kubelet_internal_checkpoint" "$DEVICE_PLUGINS"/kvpilot-test-*.sock
    fi
    if [ -d /var/log/containers ]; then
        find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true
    fi
    rm -rf "$STATE" "$RUN" 2>/dev/null || problems+=("cannot remove $STATE or $RUN")
    # The directories this run created outside its own (empty by now, unless something else
    # uses them): shim sockets, CNI results, the device-plugin directory, container log links.
    local dir
    for dir in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers; do
        [[ " ${CREATED:-} " == *" $dir "* ]] || continue
        find "$dir" -depth -type d -empty -delete 2>/dev/null || true
    done
    if [ "$(cat "$CLAIM/state" 2>/dev/null)" = "$STATE" ]; then rm -rf "$CLAIM"; fi
    if [ ${#problems[@]} -gt 0 ]; then
        printf 'node: %s\n' "${problems[@]}" >&2
        log "down, with the problems above"
        return 1
    fi
    log "down"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    build) build ;;
    *) echo "usage: $0 up|down|build" >&2; exit 2 ;;
esac
