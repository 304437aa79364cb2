"""Side-by-side L3 benchmark through SGLang's own code (scripts/bench-l3.sh runs it).

One SGLang host pool (MHA, shm allocator, page_first) and the same pages go through the
controller's `_page_backup` (set) and `_page_transfer` (get) against:
  - kvpilot: the connector and the sidecar, zero copy through the memfd;
  - file: SGLang's own HiCacheFile on tmpfs (/dev/shm), its generic path;
  - dict: an in-process Python v1 backend holding page copies in a dict (`DictStorage`);
and a plain memcpy of the same page regions into a preallocated buffer, the floor. Also
`batch_exists` of 128 keys (p50/p99) and the SGLang process's CPU seconds per GB moved.

Prints a Markdown table and writes the figures as JSON (--out). Timings are reported, never
asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

import sglang_harness as h
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
from sidecar import Sidecar


class DictStorage(HiCacheStorage):
    """The in-process baseline: a v1 backend that copies each page's regions into a tensor
    kept in a dict (what a backend with no process boundary costs)."""

    def __init__(self, storage_config, kwargs=None):
        self.pages = {}

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        per_page = len(ptrs) // len(keys)
        for i, key in enumerate(keys):
            regions = range(i * per_page, (i + 1) * per_page)
            page = torch.empty(sum(sizes[r] for r in regions), dtype=torch.uint8)
            at = page.data_ptr()
            for r in regions:
                ctypes.memmove(at, ptrs[r], sizes[r])
                at += sizes[r]
            self.pages[key] = page
        return [True] * len(keys)

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        per_page = len(ptrs) // len(keys)
        done = []
        for i, key in enumerate(keys):
            page = self.pages.get(key)
            if page is None:
                done.append(False)
                continue
            at = page.data_ptr()
            for r in range(i * per_page, (i + 1) * per_page):
                ctypes.memmove(ptrs[r], at, sizes[r])
                at += sizes[r]
            done.append(True)
        return done

    def batch_exists(self, keys, extra_info=None):
        for i, key in enumerate(keys):
            if key not in self.pages:
                return i
        return len(keys)

    def exists(self, key):
        return key in self.pages

    def get(self, key, target_location=None, target_sizes=None):
        raise NotImplementedError

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        raise NotImplementedError

    def set(self, key, value=None, target_location=None, target_sizes=None):
        raise NotImplementedError

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        raise NotImplementedError

    def clear(self):
        self.pages.clear()


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def memcpy_floor(host, src, dst, rounds: int) -> dict:
    """The same page regions copied into a preallocated, touched buffer (set) and from it into
    other pool pages (get); one warm-up round first."""
    ptrs, sizes = host.get_page_buffer_meta(src)
    dst_ptrs, _ = host.get_page_buffer_meta(dst)
    total = sum(sizes)
    buffer = torch.ones(total, dtype=torch.uint8)
    set_times, get_times = [], []
    for _ in range(rounds + 1):
        started = time.perf_counter()
        at = buffer.data_ptr()
        for ptr, size in zip(ptrs, sizes):
            ctypes.memmove(at, ptr, size)
            at += size
        set_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        at = buffer.data_ptr()
        for ptr, size in zip(dst_ptrs, sizes):
            ctypes.memmove(ptr, at, size)
            at += size
        get_times.append(time.perf_counter() - started)
    return {
        "bytes": total,
        "set_gbps": gbps(total, statistics.median(set_times[1:])),
        "get_gbps": gbps(total, statistics.median(get_times[1:])),
    }


def run_backend(name: str, backend, host, src, dst, zero_copy: bool, rounds: int, exists_calls: int, sidecar=None) -> dict:
    cc = h.controller(backend, host, zero_copy=zero_copy)
    page_tokens = len(src)
    pages = page_tokens // host.page_size
    nbytes = sum(host.get_page_buffer_meta(src)[1])
    set_times, get_times, set_cpu, get_cpu, exists_times = [], [], [], [], []
    sidecar_cpu = 0.0
    for round_ in range(rounds):
        ids = [(round_ * 1_000_003 + i) % 150_000 for i in range(page_tokens)]
        cpu, sc = time.process_time(), sidecar_cpu_seconds(sidecar)
        started = time.perf_counter()
        done = h.backup(cc, src, ids)
        set_times.append(time.perf_counter() - started)
        set_cpu.append(time.process_time() - cpu)
        assert done == page_tokens, f"{name}: backup stored {done} of {page_tokens} tokens"
        op, (hashes, hit) = h.hit_query(cc, ids)
        assert hit == page_tokens, f"{name}: hit query found {hit} of {page_tokens} tokens"
        cpu = time.process_time()
        started = time.perf_counter()
        got = h.transfer(cc, op, hashes, dst)
        get_times.append(time.perf_counter() - started)
        get_cpu.append(time.process_time() - cpu)
        sidecar_cpu += sidecar_cpu_seconds(sidecar) - sc
        assert got == pages, f"{name}: transfer copied {got} of {pages} pages"
        if round_ == 0:
            assert h.page_bytes(host, dst[: host.page_size * 2]) == h.page_bytes(host, src[: host.page_size * 2])
        keys = hashes[:128]
        for _ in range(exists_calls // rounds):
            started = time.perf_counter()
            backend.batch_exists(keys)
            exists_times.append(time.perf_counter() - started)
        backend.clear()
    exists_times.sort()
    moved_gb = nbytes * rounds / 1e9
    return {
        "set_gbps": gbps(nbytes, statistics.median(set_times)),
        "get_gbps": gbps(nbytes, statistics.median(get_times)),
        "exists128_p50_us": exists_times[len(exists_times) // 2] * 1e6,
        "exists128_p99_us": exists_times[int(len(exists_times) * 0.99)] * 1e6,
        "sglang_cpu_s_per_gb": (sum(set_cpu) + sum(get_cpu)) / (2 * moved_gb),
        "sidecar_cpu_s_per_gb": sidecar_cpu / (2 * moved_gb) if sidecar else None,
    }


def sidecar_cpu_seconds(sidecar) -> float:
    if sidecar is None or sidecar.process is None:
        return 0.0
    with open(f"/proc/{sidecar.process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=128, help="pages per batch (SGLang's maximum is 128)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--exists-calls", type=int, default=500)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import sglang

    pages, P = args.pages, args.page_size
    host = h.build_host_pool(
        False, "page_first", page_size=P, device_tokens=pages * P, host_tokens=2 * pages * P,
        layers=args.layers, heads=args.heads, head_dim=args.head_dim,
    )
    h.randomize(host, 1)
    src, dst = host.alloc(pages * P), host.alloc(pages * P)
    page_bytes = sum(host.get_page_buffer_meta(src[:P])[1])
    results = {
        "sglang": getattr(sglang, "__version__", "?"),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "page_bytes": page_bytes,
        "pages_per_batch": pages,
        "rounds": args.rounds,
    }
    results["memcpy"] = memcpy_floor(host, src, dst, args.rounds)

    sidecar = Sidecar(capacity=f"{page_bytes * pages * 2}").start()
    try:
        config = h.storage_config({**h.KVPILOT_EXTRA, "socket": sidecar.socket}, False, model="bench")
        backend = h.create_backend("dynamic", config, host)
        results["kvpilot"] = run_backend("kvpilot", backend, host, src, dst, True, args.rounds, args.exists_calls, sidecar)
        backend.close()
    finally:
        sidecar.close()

    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="kvpilot-bench-file-") as shm_dir:
        config = h.storage_config({"file_storage_path": shm_dir}, False, model="bench")
        backend = h.create_backend("file", config, host)
        results["file"] = run_backend("file", backend, host, src, dst, False, args.rounds, args.exists_calls)

    extra = {"backend_name": "dict", "module_path": "bench", "class_name": "DictStorage", "interface_v1": 1}
    backend = h.create_backend("dynamic", h.storage_config(extra, False, model="bench"), host)
    results["dict"] = run_backend("dict", backend, host, src, dst, True, args.rounds, args.exists_calls)

    floor_set, floor_get = results["memcpy"]["set_gbps"], results["memcpy"]["get_gbps"]
    lines = [
        f"SGLang {results['sglang']}, torch {results['torch']}, {results['cores']} cores; MHA page_first, "
        f"{page_bytes / 2**20:.0f} MiB pages, {pages}-page batches, median of {args.rounds}",
        "",
        "| path | set GB/s | get GB/s | set / memcpy | get / memcpy | batch_exists(128) p50 / p99 µs | SGLang CPU s/GB |",
        "|---|---|---|---|---|---|---|",
        f"| memcpy of the page regions | {floor_set:.2f} | {floor_get:.2f} | 1.00 | 1.00 | – | – |",
    ]
    for name in ("kvpilot", "file", "dict"):
        r = results[name]
        lines.append(
            f"| {name} | {r['set_gbps']:.2f} | {r['get_gbps']:.2f} | {r['set_gbps'] / floor_set:.2f} | {r['get_gbps'] / floor_get:.2f} | "
            f"{r['exists128_p50_us']:.0f} / {r['exists128_p99_us']:.0f} | {r['sglang_cpu_s_per_gb']:.3f} |"
        )
    k, f = results["kvpilot"], results["file"]
    lines.append("")
    lines.append(
        f"kvpilot vs file: set {k['set_gbps'] / f['set_gbps']:.1f}×, get {k['get_gbps'] / f['get_gbps']:.1f}×; "
        f"kvpilot's SGLang CPU vs dict's: {k['sglang_cpu_s_per_gb'] / results['dict']['sglang_cpu_s_per_gb']:.3f}×; "
        f"sidecar CPU {k['sidecar_cpu_s_per_gb']:.3f} s/GB"
    )
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
