# Process helpers of the test infrastructure's scripts (scripts/control-plane.sh, scripts/node.sh),
# and the kubeconfig each writes for its components, sourced by each. The caller defines `log`
# and `die` (with its own prefix) and STATE: its state directory, holding logs/NAME.log and
# NAME.pid for each process it starts.

# Free loopback ports, all bound at once so they are distinct.
free_ports() { # count
    python3 - "$1" <<'PY'
import socket, sys
sockets = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in sockets:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in sockets))
PY
}

# Starts a command in the background with its own log and pid file.
start() { # name command...
    local name="$1"; shift
    "$@" >"$STATE/logs/$name.log" 2>&1 &
    echo $! >"$STATE/$name.pid"
}

running() { # name
    local pid
    pid="$(cat "$STATE/$1.pid" 2>/dev/null)" || return 1
    kill -0 "$pid" 2>/dev/null
}

# SIGTERM, then SIGKILL after `seconds` (10); waits up to 5 s more for it to go.
stop_pid() { # pid [seconds]
    local pid="$1" tenths=$((${2:-10} * 10))
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "$tenths"); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}

# Stops the process `start` started as `name`, and forgets it.
stop() { # name [seconds]
    local pid
    pid="$(cat "$STATE/$1.pid" 2>/dev/null)" || return 0
    stop_pid "$pid" "${2:-10}"
    rm -f "$STATE/$1.pid"
}

# Runs `command` until it succeeds; dies with the process's log when it exits or time runs out.
wait_until() { # what seconds process command...
    local what="$1" seconds="$2" process="$3"; shift 3
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        running "$process" || die "$process exited while waiting for $what; its log: $STATE/logs/$process.log
$(tail -n 30 "$STATE/logs/$process.log")"
        [ "$SECONDS" -lt "$deadline" ] || die "$what did not happen within ${seconds}s; see $STATE/logs/
$(tail -n 30 "$STATE/logs/$process.log")"
        sleep 0.5
    done
}

# A kubeconfig for `user` on the API server at 127.0.0.1:`port`, its certificate and key inlined.
write_kubeconfig() { # file user port ca.crt user.crt user.key
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kvpilot-test
  cluster:
    server: https://127.0.0.1:$3
    certificate-authority-data: $(base64 -w0 <"$4")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$5")
    client-key-data: $(base64 -w0 <"$6")
contexts:
- name: kvpilot-test
  context: {cluster: kvpilot-test, user: $2}
current-context: kvpilot-test
EOF
}

# The -ldflags stamping KUBE_VERSION into the Kubernetes binaries as a release build does (their
# `--version`, and the version the API server reports).
kube_version_ldflags() {
    local major minor ldflags package
    major="${KUBE_VERSION#v}"; major="${major%%.*}"
    minor="${KUBE_VERSION#v*.}"; minor="${minor%%.*}"
    ldflags="-s -w"
    for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $package.gitVersion=$KUBE_VERSION -X $package.gitMajor=$major -X $package.gitMinor=$minor"
        ldflags+=" -X $package.gitTreeState=clean"
    done
    printf '%s' "$ldflags"
}
