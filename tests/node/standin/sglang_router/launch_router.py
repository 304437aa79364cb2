"""`python3 -m sglang_router.launch_router`: kvpilot's test stand-in for the SGLang router (NOT
sglang-router).

With `--pd-disaggregation --service-discovery`, as kvpilot runs the router, it finds the servers
as the real router's service discovery does: it lists the pods of `--service-discovery-namespace`
matching `--prefill-selector` and `--decode-selector` through the Kubernetes API, in-cluster
(KUBERNETES_SERVICE_HOST/PORT, the pod's ServiceAccount token and CA), every two seconds. A
running pod is a healthy worker when `/health` on its IP at `--service-discovery-port` answers
200; a prefill worker also needs its bootstrap port (the `sglang.ai/bootstrap-port` annotation)
to answer. `/readiness` answers 200 once there is a healthy prefill and a healthy decode worker
(the real router's rule), `/liveness` and `/health` while it runs; `--prometheus-host/-port`
serves `/metrics`. `GET /kvpilot-standin` reports the workers it found and any API error. It
routes no requests.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse
from typing import Dict, List

from kvpilot_standin import exit_on_sigterm, log, one, parse_argv, serve, wait_forever

WHO = "sglang_router.launch_router"
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def http_ok(host: str, port: int, path: str) -> bool:
    try:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        conn.request("GET", path)
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


class Discovery:
    def __init__(self, namespace: str, port: int, selectors: Dict[str, str]):
        self.namespace = namespace
        self.port = port
        self.selectors = selectors
        self.lock = threading.Lock()
        self.workers: Dict[str, List[dict]] = {role: [] for role in selectors}
        self.error = None
        self.polls = 0
        self.api = (os.environ["KUBERNETES_SERVICE_HOST"], int(os.environ["KUBERNETES_SERVICE_PORT"]))
        self.tls = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")

    def pods(self, selector: str) -> List[dict]:
        # The token is re-read each time: the kubelet rotates projected tokens.
        with open(f"{ACCOUNT}/token") as f:
            token = f.read().strip()
        conn = http.client.HTTPSConnection(*self.api, context=self.tls, timeout=5)
        path = f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={urllib.parse.quote(selector)}"
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        body = response.read()
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return json.loads(body)["items"]

    def poll(self) -> None:
        found: Dict[str, List[dict]] = {}
        for role, selector in self.selectors.items():
            workers = []
            for pod in self.pods(selector):
                ip = pod.get("status", {}).get("podIP")
                running = pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
                worker = {"pod": pod["metadata"]["name"], "ip": ip, "running": running}
                worker["healthy"] = bool(running and ip and http_ok(ip, self.port, "/health"))
                if role == "prefill":
                    bootstrap = pod["metadata"].get("annotations", {}).get("sglang.ai/bootstrap-port")
                    worker["bootstrap_port"] = bootstrap
                    worker["bootstrap_ok"] = bool(worker["healthy"] and bootstrap and http_ok(ip, int(bootstrap), "/health"))
                    worker["healthy"] = worker["bootstrap_ok"]
                workers.append(worker)
            found[role] = workers
        with self.lock:
            self.workers = found
            self.error = None
            self.polls += 1

    def run(self) -> None:
        while True:
            try:
                self.poll()
            except Exception as e:  # reported, and retried: the API may be restarting
                with self.lock:
                    self.error = repr(e)
                log(WHO, f"service discovery: {e!r}")
            time.sleep(2)

    def ready(self) -> bool:
        with self.lock:
            return all(any(w["healthy"] for w in self.workers.get(role, [])) for role in ("prefill", "decode"))

    def status(self) -> dict:
        with self.lock:
            return {"workers": json.loads(json.dumps(self.workers)), "error": self.error, "polls": self.polls}


def main() -> None:
    exit_on_sigterm(WHO)
    argv = sys.argv[1:]
    flags = parse_argv(argv)
    log(WHO, f"started as uid {os.getuid()}: {' '.join(argv)}")
    if "--pd-disaggregation" not in flags or "--service-discovery" not in flags:
        raise SystemExit("the stand-in router only does what kvpilot runs: --pd-disaggregation --service-discovery")
    discovery = Discovery(
        one(flags, "--service-discovery-namespace"),
        int(one(flags, "--service-discovery-port", "80")),
        {role: ",".join(flags[f"--{role}-selector"]) for role in ("prefill", "decode")},
    )
    threading.Thread(target=discovery.run, name="service-discovery", daemon=True).start()

    def report():
        return 200, {
            "stand_in": "kvpilot test stand-in for sglang_router.launch_router (not sglang-router)",
            "argv": argv,
            "uid": os.getuid(),
            "policy": one(flags, "--policy"),
            "selectors": discovery.selectors,
            **discovery.status(),
        }

    host = one(flags, "--host", "127.0.0.1")
    serve(
        WHO,
        host,
        int(one(flags, "--port", "30000")),
        {
            "/readiness": lambda: (200, {}) if discovery.ready() else (503, {"error": "no healthy prefill and decode worker"}),
            "/liveness": lambda: (200, {}),
            "/health": lambda: (200, {}),
            "/kvpilot-standin": report,
        },
    )
    prometheus = one(flags, "--prometheus-port")
    if prometheus:
        serve(WHO + " metrics", one(flags, "--prometheus-host", host), int(prometheus), {"/metrics": lambda: (200, {})})
    wait_forever()


if __name__ == "__main__":
    main()
