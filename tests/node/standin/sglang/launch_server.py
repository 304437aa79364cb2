"""`python3 -m sglang.launch_server`: kvpilot's test stand-in for SGLang's server (NOT SGLang).

Takes the command line kvpilot renders for a prefill or decode server and does, on a real node,
what of it a pod spec can break, without a GPU or a model:

- `--model-path` naming a directory (a volume): it must exist and hold config.json, as SGLang
  reads it first;
- `--host`/`--port`: `/health` answers there, 200 only while every check below holds (the pod's
  startup, readiness and liveness probes ask it);
- `--disaggregation-mode prefill`: the bootstrap port (`--disaggregation-bootstrap-port`, 8998 by
  default) answers too;
- `--hicache-storage-backend dynamic` with kvpilot's backend in
  `--hicache-storage-backend-extra-config`: the backend is loaded as SGLang's storage backend
  factory loads a dynamic backend (`importlib.import_module(module_path)`, the class by
  `class_name`, constructed with a `HiCacheStorageConfig`, then `register_mem_pool_host`) from
  PYTHONPATH, on a host pool in a memfd as SGLang's shm allocator makes it. A worker thread then
  moves known pages through the cache sidecar over the pod's socket every few seconds as
  HiCache's backup and prefetch threads do (`batch_set_v1`, then `batch_get_v1` into other
  slots of the pool) and compares every byte; a key never written must miss. Any difference, a
  failed import or an unreachable sidecar fails `/health`.

`GET /kvpilot-standin` reports what it saw (the argv, user, devices, the connector's file and
mode, the round trips) for the node tests (tests/node_pods.rs).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import mmap
import os
import random
import socket
import sys
import tempfile
import threading
import time
import traceback
from types import SimpleNamespace
from typing import Dict, List, Optional

import torch  # the stand-in's (torch/__init__.py here), as the connector imports it
from kvpilot_standin import exit_on_sigterm, log, one, parse_argv, serve, wait_forever
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

WHO = "sglang.launch_server"
# The stand-in host pool: PAGES pages to write and PAGES slots to read them back into.
PAGES = 8
PAGE_BYTES = 64 << 10
ROUND_TRIP_EVERY = 5.0


class HostPool:
    """A host KV pool in one memfd, mapped whole, page-first: what SGLang's shm allocator gives
    its host pool, with the attributes kvpilot's connector reads. Each page is two regions (K
    and V halves), as an MHA page-first pool describes its pages."""

    def __init__(self, slots: int, page_size: int, layout: str):
        self.page_size = page_size
        self.layout = layout
        self.size = slots * page_size  # tokens
        self.dtype = "bfloat16"
        self.layer_num = 1
        self.head_num = 1
        self.head_dim = PAGE_BYTES // (2 * page_size * 2)
        self.v_head_dim = self.head_dim
        self.fd = os.memfd_create("sglang-standin-host-pool")
        os.ftruncate(self.fd, slots * PAGE_BYTES)
        self.mm = mmap.mmap(self.fd, slots * PAGE_BYTES)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.kv_buffer = torch.Tensor(self.base, slots * PAGE_BYTES)
        self.allocator = SimpleNamespace(fds=[self.fd], mm=self.mm)

    def indices(self, first_slot: int, pages: int) -> List[int]:
        """Token indices of `pages` whole pages from slot `first_slot` (what HiCache passes)."""
        return list(range(first_slot * self.page_size, (first_slot + pages) * self.page_size))

    def get_page_buffer_meta(self, indices: List[int]):
        ptrs, sizes = [], []
        half = PAGE_BYTES // 2
        for start in indices[:: self.page_size]:
            base = self.base + (start // self.page_size) * PAGE_BYTES
            ptrs += [base, base + half]
            sizes += [half, half]
        return ptrs, sizes

    def page(self, slot: int) -> memoryview:
        return memoryview(self.mm)[slot * PAGE_BYTES : (slot + 1) * PAGE_BYTES]


class HiCacheRoundTrip:
    """The connector loaded as SGLang loads a dynamic storage backend, and pages moved through it."""

    def __init__(self, extra: dict, layout: str, page_size: int, tp_rank: int, tp_size: int, model: str):
        self.extra = extra
        self.report: Dict[str, object] = {"round_trips": 0, "failures": 0, "last": None, "error": None}
        self.lock = threading.Lock()
        # As SGLang's StorageBackendFactory does for "dynamic": the module from PYTHONPATH, the
        # class by name, constructed with the storage config.
        module = importlib.import_module(extra["module_path"])
        backend_class = getattr(module, extra["class_name"])
        config = HiCacheStorageConfig(
            tp_rank=tp_rank,
            tp_size=tp_size,
            pp_rank=0,
            pp_size=1,
            is_mla_model=False,
            is_page_first_layout=layout == "page_first",
            model_name=model,
            extra_config=dict(extra),
        )
        self.backend = backend_class(config, {})
        self.pool = HostPool(2 * PAGES + 1, page_size, layout)
        self.backend.register_mem_pool_host(self.pool)
        self.report["connector_file"] = getattr(module, "__file__", None)
        self.report["mode"] = "zero-copy (memfd sent with HELLO)" if self.backend.pool_fd is not None else "copy"
        self.report["pool_bytes"] = self.backend.pool_bytes
        self.generation = 0
        # Set once the first round trip is done, ok or not: /health answers from then on.
        self.first = threading.Event()

    def once(self) -> dict:
        self.generation += 1
        seed = f"{socket.gethostname()}/{os.getpid()}/{self.generation}"
        keys = [hashlib.sha256(f"{seed}/{i}".encode()).hexdigest() for i in range(PAGES)]
        expected = [random.Random(f"{seed}/{i}").randbytes(PAGE_BYTES) for i in range(PAGES)]
        for i, data in enumerate(expected):
            self.pool.page(i)[:] = data
        for i in range(PAGES):
            self.pool.page(PAGES + i)[:] = bytes(PAGE_BYTES)
        stored = self.backend.batch_set_v1(keys, self.pool.indices(0, PAGES))
        got = self.backend.batch_get_v1(keys, self.pool.indices(PAGES, PAGES))
        never_written = hashlib.sha256(f"{seed}/never-written".encode()).hexdigest()
        phantom = self.backend.batch_get_v1([never_written], self.pool.indices(2 * PAGES, 1))
        mismatched = 0
        for i in range(PAGES):
            back = bytes(self.pool.page(PAGES + i))
            if back != expected[i]:
                mismatched += sum(a != b for a, b in zip(back, expected[i]))
        result = {
            "pages": PAGES,
            "page_bytes": PAGE_BYTES,
            "stored": sum(map(bool, stored)),
            "read_back": sum(map(bool, got)),
            "mismatched_bytes": mismatched,
            "never_written_key_missed": phantom == [False],
            "connector_failures": self.backend.failure_counts(),
        }
        result["ok"] = (
            result["stored"] == PAGES
            and result["read_back"] == PAGES
            and mismatched == 0
            and result["never_written_key_missed"]
        )
        return result

    def run(self) -> None:
        while True:
            try:
                result = self.once()
                error = None if result["ok"] else f"page round trip through the sidecar failed: {result}"
            except Exception:
                result, error = None, traceback.format_exc()
            with self.lock:
                self.report["round_trips"] += 1
                self.report["last"] = result
                self.report["error"] = error
                if error:
                    self.report["failures"] += 1
                    log(WHO, error)
            self.first.set()
            time.sleep(ROUND_TRIP_EVERY)

    def status(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.report))


def socket_accepts(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def writable(directory: str) -> bool:
    """Whether a file can be created in `directory` (and is removed again)."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def check_model_path(path: str) -> dict:
    info = {"path": path, "exists": os.path.isdir(path)}
    if info["exists"]:
        info["config_json"] = os.path.isfile(os.path.join(path, "config.json"))
        info["read_only"] = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    return info


def main() -> None:
    started_ns = time.time_ns()
    exit_on_sigterm(WHO)
    argv = sys.argv[1:]
    flags = parse_argv(argv)
    model_path = one(flags, "--model-path")
    if model_path is None:
        raise SystemExit("--model-path is required")
    host, port = one(flags, "--host", "127.0.0.1"), int(one(flags, "--port", "30000"))
    mode = one(flags, "--disaggregation-mode", "null")
    tp = int(one(flags, "--tensor-parallel-size") or one(flags, "--tp-size") or "1")
    nnodes, node_rank = int(one(flags, "--nnodes", "1")), int(one(flags, "--node-rank", "0"))
    log(WHO, f"started as uid {os.getuid()}: {' '.join(argv)}")

    report: Dict[str, object] = {
        "stand_in": "kvpilot test stand-in for sglang.launch_server (not SGLang)",
        "argv": argv,
        "started_ns": started_ns,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "hostname": socket.gethostname(),
        "mode": mode,
        "tp_size": tp,
        "nnodes": nnodes,
        "node_rank": node_rank,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NVIDIA_", "KVPILOT_TEST_", "PYTHONPATH"))},
        # Where it can write, as SGLang's caches would: HOME (the hub's, Triton's, FlashInfer's),
        # /tmp (torch's compile cache) and the root filesystem.
        "writable": {path: writable(path) for path in ("/", os.environ.get("HOME", "/root"), "/tmp")},
    }
    problems: List[str] = []
    extra = json.loads(one(flags, "--hicache-storage-backend-extra-config", "{}"))
    kvpilot_cache = one(flags, "--hicache-storage-backend") == "dynamic" and extra.get("backend_name") == "kvpilot"
    if kvpilot_cache:
        # The sidecar must be serving before the server starts (a native sidecar with a startup
        # probe): the first thing looked at.
        socket_path = extra.get("socket", "/run/kvpilot/cache.sock")
        report["socket"] = {"path": socket_path, "accepted_at_start": socket_accepts(socket_path)}
    cache: Optional[HiCacheRoundTrip] = None
    # Set when the start-up checks are done; /health waits for them (a little) rather than fail
    # the first probe, which comes as soon as the container runs.
    checked = threading.Event()

    def status():
        now = dict(report)
        now["problems"] = list(problems)
        if cache is not None:
            now["hicache"] = cache.status()
            if now["hicache"]["last"] is None or now["hicache"]["error"]:
                now["problems"].append(now["hicache"]["error"] or "no page round trip yet")
        return now

    def health():
        deadline = time.monotonic() + 4  # within the probes' 5 s timeout
        checked.wait(4)
        if cache is not None:
            cache.first.wait(max(0.0, deadline - time.monotonic()))
        now = status()
        return (503 if now["problems"] else 200), {"problems": now["problems"]}

    def die():
        # What a fatal error does to SGLang's server: the process exits non-zero. After the
        # answer is written, so the test knows the request arrived.
        log(WHO, "asked to die: exiting with code 1")
        threading.Timer(0.2, os._exit, (1,)).start()
        return 200, {"exiting": 1}

    routes = {"/health": health, "/health_generate": health, "/kvpilot-standin": lambda: (200, status()),
              "/kvpilot-standin/die": die}
    if mode == "prefill":
        bootstrap = int(one(flags, "--disaggregation-bootstrap-port", "8998"))
        report["bootstrap_port"] = bootstrap
        if bootstrap != port:
            serve(WHO + " bootstrap", host, bootstrap, {"/health": lambda: (200, {}), "/route": lambda: (200, {})})
    serve(WHO, host, port, routes)

    if model_path.startswith("/"):
        report["model"] = check_model_path(model_path)
        if not report["model"].get("config_json"):
            problems.append(f"--model-path {model_path}: no config.json there")
    if kvpilot_cache:
        try:
            cache = HiCacheRoundTrip(
                extra,
                one(flags, "--hicache-mem-layout", "layer_first"),
                int(one(flags, "--page-size", "1")),
                node_rank * tp // nnodes,
                tp,
                one(flags, "--served-model-name") or model_path,
            )
            threading.Thread(target=cache.run, name="hicache-round-trip", daemon=True).start()
        except Exception:
            problems.append("loading the HiCache storage backend failed:\n" + traceback.format_exc())
            log(WHO, problems[-1])
    checked.set()
    wait_forever()


if __name__ == "__main__":
    main()
