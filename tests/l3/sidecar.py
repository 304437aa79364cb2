"""Starts and stops a `kvpilot cache-runtime` for a test: a socket in a temporary directory,
metrics on a free loopback port, killed when the test ends (also on failure)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sidecar:
    def __init__(self, capacity: str = "1GiB", directory: str | None = None):
        self.binary = os.environ.get("KVPILOT_BIN", "target/debug/kvpilot")
        self.capacity = capacity
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="kvpilot-l3-")
        self.directory = directory or self._tmp.name
        self.socket = os.path.join(self.directory, "cache.sock")
        self.metrics_port = free_port()
        self.process: subprocess.Popen | None = None
        self.log_path = os.path.join(self.directory, "sidecar.log")

    def start(self) -> "Sidecar":
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "cache-runtime",
                "--socket",
                self.socket,
                "--capacity",
                self.capacity,
                "--metrics-addr",
                f"127.0.0.1:{self.metrics_port}",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the sidecar exited: {self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as r:
                    if r.status == 200 and os.path.exists(self.socket):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the sidecar did not become ready: {self.log()}")

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str) -> float:
        """Sum of the samples of one metric (all label sets)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        if self._tmp:
            self._tmp.cleanup()
