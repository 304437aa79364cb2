"""What kvpilot's test stand-ins for SGLang's server and router share (not SGLang): reading a
command line the way argparse would hand it over, a small JSON HTTP server, and a prompt exit on
SIGTERM (a container's first process gets no default signal handling, and the kubelet's stop
would otherwise wait out the grace period)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Tuple


def log(who: str, message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [{who}, a kvpilot test stand-in] {message}", file=sys.stderr, flush=True)


def parse_argv(argv: List[str]) -> Dict[str, List[str]]:
    """`--flag value...` and `--flag=value` into {flag: [values]}; a flag given twice keeps the
    last, as argparse does. Values are the tokens up to the next `--flag`."""
    flags: Dict[str, List[str]] = {}
    current: Optional[str] = None
    for token in argv:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            flags[name] = [value] if eq else []
            current = None if eq else name
        elif current is not None:
            flags[current].append(token)
        else:
            raise SystemExit(f"unexpected argument {token!r}")
    return flags


def one(flags: Dict[str, List[str]], name: str, default: Optional[str] = None) -> Optional[str]:
    values = flags.get(name)
    if values is None:
        return default
    if len(values) != 1:
        raise SystemExit(f"{name} takes one value, got {values!r}")
    return values[0]


Route = Callable[[], Tuple[int, object]]


def serve(who: str, host: str, port: int, routes: Dict[str, Route]) -> ThreadingHTTPServer:
    """Serves `routes` (path -> () -> (status, JSON body)) on host:port in a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            route = routes.get(self.path.split("?", 1)[0])
            status, body = route() if route else (404, {"error": f"no route {self.path}"})
            data = (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # probes every few seconds: quiet
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    log(who, f"serving {sorted(routes)} on {host}:{port}")
    return server


def exit_on_sigterm(who: str) -> None:
    def stop(signum, _frame) -> None:
        log(who, f"signal {signum}: exiting")
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def wait_forever() -> None:
    while True:
        time.sleep(3600)
