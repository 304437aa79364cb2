#!/usr/bin/env bash
# The kvpilot image without a Docker engine or a registry: buildah assembles what the
# Dockerfile's `docker build` makes, podman (runc, vfs storage) runs it as the cluster would.
#
#   scripts/image.sh build   release binary (as the Dockerfile builds it) + a distroless-like
#                            base unpacked from Debian bookworm packages -> $KVPILOT_IMAGE
#   scripts/image.sh test    runs the image: version, operator and webhook /healthz on loopback,
#                            the cache-runtime socket on a bind mount (when the binary has it);
#                            uid 65532, read-only root filesystem
#   scripts/image.sh clean   removes the private image store
#   scripts/image.sh node-images DIR
#                            the images scripts/node.sh loads into its containerd, as archives
#                            in DIR: this one, a pause image and the stand-in SGLang image of the
#                            node tests (see "Images for the test node" below)
#
# Needs root and Debian's buildah, podman and runc (scripts/install-test-tools.sh installs them).
# Everything lives under target/image (or $KVPILOT_IMAGE_DIR): storage, containers.conf and the
# downloaded packages; nothing global is configured. `test` needs a control plane for the operator
# ($KVPILOT_CLUSTER_KUBECONFIG and $KVPILOT_CLUSTER_KUBECTL, set by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# --- The Dockerfile's run stage, replicated. tests/dockerfile.rs parses these lines and the
# --- Dockerfile and fails when the two drift apart; `test` compares the built image again.
DOCKERFILE_RUN_BASE="gcr.io/distroless/cc-debian12:nonroot"
BUILD_COMMAND="cargo build --release --locked --bin kvpilot"
BINARY_FROM="target/release/kvpilot"
BINARY_TO="/usr/local/bin/kvpilot"
IMAGE_USER="65532:65532"
IMAGE_ENTRYPOINT='["kvpilot"]'
# What that base is made of (GoogleContainerTools/distroless for debian12: the static image's
# base-files, netbase, tzdata and CA bundle; base adds libc6 and libssl3; cc adds libgcc-s1,
# libgomp1, libstdc++6 and gcc-12-base), its users and groups, and the config it sets (nonroot:
# user 65532, workdir /home/nonroot).
BASE_PACKAGES=(base-files netbase tzdata ca-certificates libc6 libssl3 libgcc-s1 libgomp1 libstdc++6 gcc-12-base)
BASE_PASSWD="root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"
BASE_GROUP="root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:"
BASE_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
BASE_WORKDIR=/home/nonroot
# ---

VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
IMAGE="${KVPILOT_IMAGE:-localhost/kvpilot/kvpilot:$VERSION}"
STATE="${KVPILOT_IMAGE_DIR:-$PWD/target/image}"

log() { echo "image.sh: $*" >&2; }
die() {
    log "FAIL: $*"
    exit 1
}

# A private containers.conf and storage.conf: vfs storage, runc, cgroupfs, no default ulimits
# (the sandboxes these tests run in refuse to raise rlimits; crun refuses their cgroups), and a
# network configuration directory of its own (buildah and podman otherwise lock files in
# /etc/cni/net.d even when no container uses a network).
configure() {
    [ "$(id -u)" = 0 ] || die "needs root (buildah and podman run rootful here)"
    for tool in buildah podman runc; do
        command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
            die "$tool is missing; run scripts/install-test-tools.sh (Debian's buildah podman runc)"
    done
    mkdir -p "$STATE/storage" "$STATE/tmp" "$STATE/networks"
    # The run root holds sockets, whose paths may not exceed 108 bytes; keep it short.
    RUNROOT="/tmp/kvpilot-image-$(printf %s "$STATE" | sha256sum | cut -c1-12)"
    mkdir -p "$RUNROOT"
    cat >"$STATE/containers.conf" <<EOF
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "none"
tmp_dir = "$RUNROOT/libpod"
[network]
network_config_dir = "$STATE/networks"
EOF
    cat >"$STATE/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$STATE/storage"
runroot = "$RUNROOT/storage"
EOF
    : >"$STATE/registries.conf"
    export CONTAINERS_CONF="$STATE/containers.conf"
    export CONTAINERS_STORAGE_CONF="$STATE/storage.conf"
    export CONTAINERS_REGISTRIES_CONF="$STATE/registries.conf"
}

# Debian packages (the base's, or the node images'), downloaded once into $STATE/debs.
fetch_packages() { # package...
    local debs="$STATE/debs" missing=()
    mkdir -p "$debs"
    for pkg in "$@"; do
        compgen -G "$debs/${pkg}_*.deb" >/dev/null || missing+=("$pkg")
    done
    [ ${#missing[@]} = 0 ] && return
    log "downloading ${missing[*]}"
    (
        cd "$debs"
        apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >/dev/null 2>&1 || {
            apt-get update -q >/dev/null && apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >/dev/null
        }
    )
}

# The base image: the packages unpacked as distroless does (dpkg metadata in
# /var/lib/dpkg/status.d, the CA bundle concatenated from ca-certificates' certificates),
# passwd, group, nsswitch.conf, /tmp and /home/nonroot. Cached under a tag naming its packages.
build_base() {
    fetch_packages "${BASE_PACKAGES[@]}"
    local debs=() pkg
    for pkg in "${BASE_PACKAGES[@]}"; do debs+=("$(ls "$STATE/debs/${pkg}"_*.deb | head -1)"); done
    local tag
    tag="localhost/kvpilot/base:$(printf '%s\n' "${debs[@]##*/}" "$BASE_PASSWD" "$BASE_GROUP" "${BASE_ENV[@]}" |
        sha256sum | cut -c1-16)"
    BASE_IMAGE="$tag"
    if buildah inspect --type image "$tag" >/dev/null 2>&1; then return; fi
    log "assembling $tag from ${#debs[@]} Debian packages"
    local ctr root
    ctr="$(buildah from scratch)"
    root="$(buildah mount "$ctr")"
    mkdir -p "$root/var/lib/dpkg/status.d"
    for deb in "${debs[@]}"; do
        pkg="$(dpkg-deb -f "$deb" Package)"
        if [ "$pkg" = ca-certificates ]; then
            local certs
            certs="$(mktemp -d)"
            dpkg-deb -x "$deb" "$certs"
            mkdir -p "$root/etc/ssl/certs" "$root/usr/share/doc/ca-certificates"
            find "$certs/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat \
                >"$root/etc/ssl/certs/ca-certificates.crt"
            cp "$certs/usr/share/doc/ca-certificates/copyright" "$root/usr/share/doc/ca-certificates/"
            rm -rf "$certs"
        else
            dpkg-deb -x "$deb" "$root"
        fi
        dpkg-deb -f "$deb" >"$root/var/lib/dpkg/status.d/$pkg"
    done
    printf '%s\n' "$BASE_PASSWD" >"$root/etc/passwd"
    printf '%s\n' "$BASE_GROUP" >"$root/etc/group"
    printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
    install -d -m 1777 "$root/tmp"
    install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
    buildah umount "$ctr" >/dev/null
    local env_flags=()
    for e in "${BASE_ENV[@]}"; do env_flags+=(--env "$e"); done
    buildah config "${env_flags[@]}" --workingdir "$BASE_WORKDIR" --user 65532 \
        --label "org.opencontainers.image.base.name=$DOCKERFILE_RUN_BASE (replicated by scripts/image.sh)" "$ctr"
    buildah commit -q --rm "$ctr" "$tag" >/dev/null
}

build() {
    configure
    # Working containers a failed build left behind (this store is ours alone).
    buildah rm --all >/dev/null
    log "$BUILD_COMMAND"
    $BUILD_COMMAND
    build_base
    local ctr
    ctr="$(buildah from "$BASE_IMAGE")"
    # COPY in a Dockerfile: owned by root, the source's mode (0755).
    buildah copy -q --chown 0:0 "$ctr" "$BINARY_FROM" "$BINARY_TO" >/dev/null
    buildah config --user "$IMAGE_USER" --entrypoint "$IMAGE_ENTRYPOINT" "$ctr"
    buildah commit -q --rm "$ctr" "$IMAGE" >/dev/null
    # Images this one replaced keep their layers in vfs storage (a full copy each) until pruned.
    buildah rmi --prune >/dev/null 2>&1 || true
    log "built $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
}

# --- test ---------------------------------------------------------------------------------

CONTAINERS=()
WORK=""
NAMESPACE=""
cleanup() {
    local name
    for name in "${CONTAINERS[@]}"; do podman rm -f -t 2 "$name" >/dev/null 2>&1 || true; done
    if [ -n "$NAMESPACE" ]; then
        "$KUBECTL" --kubeconfig "$KVPILOT_CLUSTER_KUBECONFIG" delete namespace "$NAMESPACE" --wait=false \
            >/dev/null 2>&1 || true
    fi
    podman image umount "$IMAGE" >/dev/null 2>&1 || true
    if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
}

# How the cluster runs the image (the chart's restricted securityContext): the image's own user,
# a read-only root filesystem with a writable /tmp (the chart's emptyDir), no capabilities, no
# privilege escalation. Host networking, so the containers reach the loopback API server; every
# listener is given a 127.0.0.1 address and checked to be on loopback only.
SECURE=(--network host --read-only --read-only-tmpfs=false --tmpfs /tmp:rw,nosuid,nodev,mode=1777,size=16m
    --cap-drop ALL --security-opt no-new-privileges)

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME ARGS...: a detached container with the restricted settings.
start() {
    local name="kvpilot-image-test-$$-$1"
    shift
    CONTAINERS+=("$name")
    podman run -d --name "$name" "${SECURE[@]}" "$@" >/dev/null
}

# wait_for NAME URL [CURL ARGS...]: polls until URL answers 2xx (30 s), or fails with the logs.
wait_for() {
    local name="kvpilot-image-test-$$-$1" url="$2"
    shift 2
    for _ in $(seq 1 60); do
        if curl -fsS --max-time 2 "$@" "$url" >/dev/null 2>&1; then return; fi
        if [ "$(podman inspect --format '{{.State.Running}}' "$name")" != true ]; then break; fi
        sleep 0.5
    done
    podman logs "$name" >&2 || true
    die "$name: no answer from $url"
}

# The process of container NAME runs as 65532:65532 on a read-only root and listens on loopback only.
check_process() {
    local name="kvpilot-image-test-$$-$1" pid uid gid root_opts listeners
    pid="$(podman inspect --format '{{.State.Pid}}' "$name")"
    uid="$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
    gid="$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
    [ "$uid" = "65532 65532 65532 65532" ] || die "$name runs as uid $uid, not 65532"
    [ "$gid" = "65532 65532 65532 65532" ] || die "$name runs as gid $gid, not 65532"
    root_opts="$(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | tail -1)"
    [[ ",$root_opts," == *,ro,* ]] || die "$name: its root filesystem is mounted $root_opts, not read-only"
    listeners="$(ss -Hltnp | grep "pid=$pid," | awk '{print $4}' || true)"
    [ -n "$listeners" ] || [ "${2:-}" = no-tcp ] || die "$name listens on nothing"
    while read -r addr; do
        [ -z "$addr" ] || [[ "$addr" == 127.0.0.1:* ]] || die "$name listens on $addr, beyond loopback"
    done <<<"$listeners"
    log "ok: $name runs as 65532:65532, root filesystem read-only, listening on ${listeners//$'\n'/ }"
}

# The Dockerfile's own USER, ENTRYPOINT and copied binary, read from the Dockerfile itself.
check_image_against_dockerfile() {
    local run_stage user entrypoint dest
    run_stage="$(awk '/^FROM /{stage=""} {stage = stage $0 "\n"} END {printf "%s", stage}' Dockerfile)"
    user="$(sed -n 's/^USER //p' <<<"$run_stage" | tail -1)"
    entrypoint="$(sed -n 's/^ENTRYPOINT //p' <<<"$run_stage" | tail -1)"
    dest="$(sed -n 's/^COPY --from=build [^ ]* //p' <<<"$run_stage" | tail -1)"
    local got_user got_entrypoint
    got_user="$(podman image inspect --format '{{.Config.User}}' "$IMAGE")"
    got_entrypoint="$(podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")"
    [ "$got_user" = "$user" ] || die "the image's user is '$got_user'; the Dockerfile says USER $user"
    [ "$got_entrypoint" = "$entrypoint" ] ||
        die "the image's entrypoint is $got_entrypoint; the Dockerfile says ENTRYPOINT $entrypoint"
    case "$got_user" in 0 | 0:* | root | root:*) die "the image runs as root ($got_user)" ;; esac

    local root
    root="$(podman image mount "$IMAGE")"
    [ -x "$root$dest" ] || die "$dest (the Dockerfile's COPY destination) is not an executable file in the image"
    [ "$(stat -c %u:%a "$root$dest")" = 0:755 ] || die "$dest is $(stat -c %u:%a "$root$dest"), not root-owned 0755"
    local interp lib
    interp="$(readelf -l "$root$dest" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
    [ -e "$root$interp" ] || die "the binary's interpreter $interp is missing from the image"
    for lib in $(objdump -p "$root$dest" | awk '/NEEDED/ {print $2}'); do
        compgen -G "$root/lib/x86_64-linux-gnu/$lib" >/dev/null || compgen -G "$root/usr/lib/x86_64-linux-gnu/$lib" >/dev/null ||
            die "the binary needs $lib, which is missing from the image"
    done
    grep -qx 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' "$root/etc/passwd" ||
        die "/etc/passwd has no nonroot user 65532"
    grep -qx 'nonroot:x:65532:' "$root/etc/group" || die "/etc/group has no nonroot group 65532"
    local certs
    certs="$(grep -c 'BEGIN CERTIFICATE' "$root/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true)"
    [ "${certs:-0}" -ge 100 ] || die "/etc/ssl/certs/ca-certificates.crt holds ${certs:-no} certificates (the hub fetch needs them)"
    [ "$(stat -c %a "$root/tmp")" = 1777 ] || die "/tmp is not 1777"
    [ "$(stat -c %u:%g "$root/home/nonroot")" = 65532:65532 ] || die "/home/nonroot is not owned by 65532"
    podman image umount "$IMAGE" >/dev/null
    log "ok: user $user, entrypoint $entrypoint, $dest with its $interp and libraries, passwd, group, $certs CA certificates"
}

check_version() {
    local out
    out="$(podman run --rm "${SECURE[@]}" "$IMAGE" version)" || die "'$IMAGE version' failed"
    [ "$out" = "kvpilot $VERSION" ] || die "'$IMAGE version' printed '$out', not 'kvpilot $VERSION'"
    log "ok: $out"
}

# The operator against the test control plane, with the embedded webhook in the chart's default
# mode (self-signed: it keeps its certificate in a Secret and writes it under /tmp).
check_operator() {
    [ -n "${KVPILOT_CLUSTER_KUBECONFIG:-}" ] ||
        die "the operator check needs a control plane: KVPILOT_CLUSTER_KUBECONFIG (scripts/control-plane.sh up)"
    NAMESPACE="kvpilot-image-test-$$"
    "$KUBECTL" --kubeconfig "$KVPILOT_CLUSTER_KUBECONFIG" create namespace "$NAMESPACE" >/dev/null
    local metrics health webhook
    metrics="$(free_port)" health="$(free_port)" webhook="$(free_port)"
    start operator -v "$KVPILOT_CLUSTER_KUBECONFIG:/etc/kvpilot/kubeconfig:ro" -e KUBECONFIG=/etc/kvpilot/kubeconfig \
        -e POD_NAMESPACE="$NAMESPACE" "$IMAGE" operator --namespace "$NAMESPACE" \
        --metrics-addr "127.0.0.1:$metrics" --health-addr "127.0.0.1:$health" --webhook-addr "127.0.0.1:$webhook" \
        --webhook-certs self-signed --webhook-secret kvpilot-webhook-tls --webhook-service kvpilot-webhook \
        --tls-cert /tmp/kvpilot-tls/tls.crt --tls-key /tmp/kvpilot-tls/tls.key
    wait_for operator "http://127.0.0.1:$health/healthz"
    wait_for operator "http://127.0.0.1:$health/readyz"
    wait_for operator "http://127.0.0.1:$metrics/metrics"
    # The webhook serves the certificate the operator wrote, signed by the CA in its Secret.
    local ca="$WORK/operator-ca.crt"
    "$KUBECTL" --kubeconfig "$KVPILOT_CLUSTER_KUBECONFIG" -n "$NAMESPACE" get secret kvpilot-webhook-tls \
        -o jsonpath='{.data.ca\.crt}' | base64 -d >"$ca"
    wait_for operator "https://kvpilot-webhook.$NAMESPACE.svc:$webhook/healthz" --cacert "$ca" \
        --resolve "kvpilot-webhook.$NAMESPACE.svc:$webhook:127.0.0.1"
    check_process operator
    log "ok: operator /healthz /readyz /metrics, webhook /healthz with its self-signed certificate"
}

# The standalone webhook with a mounted certificate (the chart's cert-manager mode).
check_webhook() {
    local tls="$WORK/tls" port
    mkdir -p "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$tls/tls.key" -out "$tls/tls.crt" 2>/dev/null
    # As a Secret volume with fsGroup 65532 mounts it.
    chown 0:65532 "$tls/tls.key" "$tls/tls.crt"
    chmod 0640 "$tls/tls.key" "$tls/tls.crt"
    port="$(free_port)"
    start webhook -v "$tls:/etc/kvpilot/tls:ro" "$IMAGE" webhook --addr "127.0.0.1:$port"
    wait_for webhook "https://127.0.0.1:$port/healthz" --cacert "$tls/tls.crt"
    check_process webhook
    log "ok: webhook /healthz with a mounted certificate"
}

# The cache-runtime sidecar and the init container's connector copy, against the interface
#   kvpilot cache-runtime --socket PATH --capacity BYTES [--metrics-addr ADDR]
#       (a Unix socket for the SGLang connector; /healthz on ADDR)
#   kvpilot install-connector DEST_DIR
#       (writes the embedded Python package kvpilot_sglang/ into DEST_DIR)
# Runs only when `kvpilot --help` lists install-connector (the binary before that has neither).
check_cache_runtime_and_connector() {
    if ! podman run --rm "${SECURE[@]}" "$IMAGE" --help | grep -qE '^ +install-connector( |$)'; then
        log "skip: this kvpilot has no install-connector; the cache-runtime socket and connector checks need it"
        return
    fi
    # The socket directory, shared with the SGLang container as /run/kvpilot in the pod.
    local run="$WORK/run-kvpilot" metrics
    install -d -m 0770 -o 65532 -g 65532 "$run"
    metrics="$(free_port)"
    start cache-runtime -v "$run:/run/kvpilot" "$IMAGE" cache-runtime --socket /run/kvpilot/cache.sock \
        --capacity 67108864 --metrics-addr "127.0.0.1:$metrics"
    wait_for cache-runtime "http://127.0.0.1:$metrics/healthz"
    for _ in $(seq 1 20); do [ -S "$run/cache.sock" ] && break || sleep 0.5; done
    [ -S "$run/cache.sock" ] || die "no socket at /run/kvpilot/cache.sock (the bind mount shows: $(ls -A "$run"))"
    [ "$(stat -c %u "$run/cache.sock")" = 65532 ] || die "the socket is owned by $(stat -c %u "$run/cache.sock"), not 65532"
    # A client outside the container connects; a second one that sends garbage and hangs up
    # leaves the sidecar serving.
    python3 - "$run/cache.sock" <<'EOF' || die "a client outside the container cannot use the socket"
import socket, sys
path = sys.argv[1]
a = socket.socket(socket.AF_UNIX); a.settimeout(5); a.connect(path)
b = socket.socket(socket.AF_UNIX); b.settimeout(5); b.connect(path)
b.sendall(b"\xff" * 64); b.close()
c = socket.socket(socket.AF_UNIX); c.settimeout(5); c.connect(path)
a.close(); c.close()
EOF
    sleep 1
    wait_for cache-runtime "http://127.0.0.1:$metrics/healthz"
    check_process cache-runtime
    log "ok: cache-runtime serves /run/kvpilot/cache.sock on the bind mount to a client outside"

    # The init container: writes the package into the pod's emptyDir, read-only root.
    local dest="$WORK/connector"
    install -d -m 0770 -o 65532 -g 65532 "$dest"
    podman run --rm "${SECURE[@]}" -v "$dest:/opt/kvpilot-py" "$IMAGE" install-connector /opt/kvpilot-py ||
        die "install-connector failed"
    for f in __init__.py hicache.py; do
        [ -f "$dest/kvpilot_sglang/$f" ] || die "install-connector wrote no kvpilot_sglang/$f"
    done
    [ "$(stat -c %u "$dest/kvpilot_sglang/hicache.py")" = 65532 ] || die "the connector files are not written by 65532"
    # Each installed file is the repository's own (an embedded copy that went stale fails).
    local file rel
    while IFS= read -r file; do
        rel="${file#"$dest/"}"
        [ -f "python/$rel" ] || die "install-connector wrote $rel, which python/ does not have"
        cmp -s "python/$rel" "$file" || die "install-connector wrote a $rel that differs from python/$rel"
    done < <(find "$dest/kvpilot_sglang" -type f -not -path '*/__pycache__/*')
    python3 -c 'import sys; [compile(open(f).read(), f, "exec") for f in sys.argv[1:]]' "$dest"/kvpilot_sglang/*.py ||
        die "the installed connector is not valid Python"
    log "ok: install-connector wrote kvpilot_sglang/ ($(find "$dest/kvpilot_sglang" -name '*.py' | wc -l) Python files)"
}

test_image() {
    configure
    KUBECTL="${KVPILOT_CLUSTER_KUBECTL:-kubectl}"
    podman image exists "$IMAGE" || die "no image $IMAGE; run scripts/image.sh build first"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    WORK="$(mktemp -d)"
    chmod 0755 "$WORK"
    check_image_against_dockerfile
    check_version
    check_webhook
    check_operator
    check_cache_runtime_and_connector
    log "all checks passed for $IMAGE"
}

clean() {
    configure
    podman rm -a -f >/dev/null 2>&1 || true
    buildah rm --all >/dev/null 2>&1 || true
    buildah rmi --all -f >/dev/null 2>&1 || true
    rm -rf "$STATE" "$RUNROOT"
}

# --- Images for the test node (scripts/node.sh) ----------------------------------------------
# Neither is kvpilot's. The node's pod sandboxes need a pause image, and nothing can be pulled;
# the node tests run kvpilot's pods with the servers' and router's image pointed at a stand-in
# (tests/node/standin: `python3 -m sglang.launch_server` and `sglang_router.launch_router` are
# test programs, not SGLang), built like the kvpilot image from Debian 12 packages.
PAUSE_IMAGE="localhost/kvpilot-test/pause:busybox"
PAUSE_PACKAGES=(busybox-static)
STANDIN_IMAGE="localhost/kvpilot-test/sglang-standin:stand-in"
STANDIN_SOURCE=tests/node/standin
# A minimal Python 3: the interpreter, its standard library (http.server, json, ctypes, mmap,
# ssl) and the shared libraries those modules load; the python3 link.
STANDIN_PACKAGES=(libc6 libssl3 zlib1g libexpat1 libffi8 libpython3.11-minimal python3.11-minimal
    libpython3.11-stdlib python3-minimal)
FINGERPRINT_LABEL=dev.kvpilot.test.fingerprint

# The files of the named packages, downloaded into $STATE/debs, and their fingerprint.
debs_of() { # package...
    local pkg
    for pkg in "$@"; do ls "$STATE/debs/${pkg}"_*.deb | head -1; done
}

# Whether IMAGE exists and was built from FINGERPRINT.
built_from() { # image fingerprint
    [ "$(buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$FINGERPRINT_LABEL\"}}" "$1" 2>/dev/null)" = "$2" ]
}

# A sandbox ("pause") image: Debian's static busybox, sleeping until it is told to stop, as the
# pause binary does, as user 65535 like the upstream pause image.
build_pause() {
    fetch_packages "${PAUSE_PACKAGES[@]}"
    local deb fingerprint
    deb="$(debs_of "${PAUSE_PACKAGES[@]}")"
    fingerprint="$(basename "$deb" | sha256sum | cut -c1-16)"
    if built_from "$PAUSE_IMAGE" "$fingerprint"; then return; fi
    log "assembling $PAUSE_IMAGE from $(basename "$deb")"
    local ctr root unpacked
    ctr="$(buildah from scratch)"
    root="$(buildah mount "$ctr")"
    unpacked="$(mktemp -d)"
    dpkg-deb -x "$deb" "$unpacked"
    install -D -m 0755 "$unpacked/bin/busybox" "$root/bin/busybox"
    rm -rf "$unpacked"
    buildah umount "$ctr" >/dev/null
    buildah config --user 65535:65535 --label "$FINGERPRINT_LABEL=$fingerprint" \
        --entrypoint '["/bin/busybox", "sh", "-c", "trap \"exit 0\" TERM INT; while :; do /bin/busybox sleep 3600 & wait $!; done"]' \
        "$ctr"
    buildah commit -q --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
}

# The stand-in SGLang image: Debian's minimal Python 3 with the stand-in's modules in
# /usr/local/lib/python3.11/dist-packages. It runs as root, as SGLang's image does.
build_standin() {
    fetch_packages "${STANDIN_PACKAGES[@]}"
    local debs=() fingerprint
    mapfile -t debs < <(debs_of "${STANDIN_PACKAGES[@]}")
    fingerprint="$( (printf '%s\n' "${debs[@]##*/}"; find "$STANDIN_SOURCE" -name '*.py' | LC_ALL=C sort | xargs sha256sum) |
        sha256sum | cut -c1-16)"
    if built_from "$STANDIN_IMAGE" "$fingerprint"; then return; fi
    log "assembling $STANDIN_IMAGE from ${#debs[@]} Debian packages and $STANDIN_SOURCE"
    local ctr root deb site
    ctr="$(buildah from scratch)"
    root="$(buildah mount "$ctr")"
    for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root"; done
    site="$root/usr/local/lib/python3.11/dist-packages"
    mkdir -p "$site"
    (cd "$STANDIN_SOURCE" && find . -name '*.py' | while read -r file; do install -D -m 0644 "$file" "$site/$file"; done)
    printf 'root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
    install -d -m 1777 "$root/tmp"
    install -d -m 0700 "$root/root"
    buildah umount "$ctr" >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --workingdir / \
        --label "$FINGERPRINT_LABEL=$fingerprint" \
        --label "org.opencontainers.image.description=kvpilot test stand-in for SGLang's server and router (not SGLang)" \
        "$ctr"
    buildah commit -q --rm "$ctr" "$STANDIN_IMAGE" >/dev/null
}

# node_images DIR: builds the pause and stand-in images and writes them, with the kvpilot image
# (`build` made it), into DIR as docker archives for `ctr images import`; DIR/images.env names
# them.
node_images() {
    local dir="${1:?usage: scripts/image.sh node-images DIR}"
    configure
    podman image exists "$IMAGE" || die "no image $IMAGE; run scripts/image.sh build first"
    build_pause
    build_standin
    mkdir -p "$dir"
    local name image
    for name in kvpilot pause standin; do
        case "$name" in kvpilot) image="$IMAGE" ;; pause) image="$PAUSE_IMAGE" ;; standin) image="$STANDIN_IMAGE" ;; esac
        rm -f "$dir/$name.tar"
        buildah push -q "$image" "docker-archive:$dir/$name.tar:$image" >/dev/null
    done
    printf 'KVPILOT_IMAGE=%s\nPAUSE_IMAGE=%s\nSTANDIN_IMAGE=%s\n' "$IMAGE" "$PAUSE_IMAGE" "$STANDIN_IMAGE" >"$dir/images.env"
    log "node images in $dir: $IMAGE $PAUSE_IMAGE $STANDIN_IMAGE"
}

case "${1:-}" in
build) build ;;
test) test_image ;;
clean) clean ;;
node-images) node_images "${2:-}" ;;
*)
    echo "usage: scripts/image.sh build|test|clean|node-images DIR" >&2
    exit 2
    ;;
esac
