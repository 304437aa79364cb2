"""`KvpilotStorage`: SGLang's HiCache L3 storage backend, backed by the kvpilot cache sidecar.

Loaded by SGLang itself:

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvpilot",
        "module_path": "kvpilot_sglang.hicache", "class_name": "KvpilotStorage",
        "interface_v1": 1, "allocator": "shm", "socket": "/run/kvpilot/cache.sock"}'

With `"allocator": "shm"` the host pool lives in a memfd; the backend sends that fd to the
sidecar once per connection, and each `batch_set_v1` / `batch_get_v1` is one frame of keys and
pool offsets: the sidecar copies between the pool and its store and answers when it is done with
host memory. Without shm (or without `interface_v1`) the same calls move bytes over the socket.

Nothing on the data path raises (SGLang 0.5.17's storage threads die on an exception): a missing
or dead sidecar means misses and failed writes, logged and counted, and a reconnect at most once
per `retry_interval` seconds.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from array import array
from typing import Any, List, Optional

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from .wire import Session, SidecarError, leading_hits

logger = logging.getLogger(__name__)

DEFAULT_SOCKET = "/run/kvpilot/cache.sock"
# Layouts whose pages SGLang describes as whole-page regions (`get_page_buffer_meta`).
ZERO_COPY_LAYOUTS = ("page_first", "page_first_direct")


def _view(ptr: int, nbytes: int) -> memoryview:
    """A writable byte view of host memory SGLang owns (a pool slot or a tensor)."""
    return memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")


def _tensor_view(tensor: torch.Tensor) -> memoryview:
    return _view(tensor.data_ptr(), tensor.numel() * tensor.element_size())


def namespace_for(config: HiCacheStorageConfig, host_pool: Any, page_form: str) -> bytes:
    """What every key is folded into: pages of two models, dtypes, layouts, page sizes,
    geometries or rank shards never share a key. MHA pages are per attention-TP rank; MLA pages
    are the same on every rank, so the TP rank is left out and the ranks share them."""
    mla = bool(config.is_mla_model)
    parts = [
        "kvpilot-l3-v1",
        f"model={config.model_name or ''}",
        f"dtype={getattr(host_pool, 'dtype', '')}",
        f"layout={getattr(host_pool, 'layout', '')}",
        f"page={getattr(host_pool, 'page_size', '')}",
        f"layers={getattr(host_pool, 'layer_num', '')}",
        f"form={page_form}",
    ]
    if mla:
        parts.append(f"mla=kv_dim:{getattr(host_pool, 'kv_cache_dim', '')}")
        dcp_size = getattr(config, "dcp_size", 1) or 1
        if dcp_size > 1:
            parts.append(f"dcp={getattr(config, 'dcp_rank', 0)}/{dcp_size}")
    else:
        parts.append(
            f"mha=heads:{getattr(host_pool, 'head_num', '')},head_dim:{getattr(host_pool, 'head_dim', '')},"
            f"v_head_dim:{getattr(host_pool, 'v_head_dim', getattr(host_pool, 'head_dim', ''))}"
        )
        parts.append(f"tp={config.tp_rank}/{config.tp_size}")
    parts.append(f"pp={config.pp_rank}/{config.pp_size}")
    parts.append(f"cp={getattr(config, 'attn_cp_rank', 0)}/{getattr(config, 'attn_cp_size', 1)}")
    return "|".join(parts).encode()


def is_storage_writer(config: HiCacheStorageConfig) -> bool:
    """SGLang's rule (0.5.23 `HiCacheStorageConfig.is_storage_writer`; rank 0 for MLA before)."""
    rule = getattr(type(config), "is_storage_writer", None)
    if rule is not None:
        return bool(config.is_storage_writer)
    return not config.is_mla_model or config.tp_rank == 0


class KvpilotStorage(HiCacheStorage):
    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.config = storage_config
        self.socket_path = str(extra.get("socket", DEFAULT_SOCKET))
        self.timeout = float(extra.get("timeout", 60.0))
        self.retry_interval = float(extra.get("retry_interval", 1.0))
        self.page_form = "regions" if extra.get("interface_v1") else "flat"
        self.writer = is_storage_writer(storage_config)
        self.mem_pool_host = None
        self.namespace: Optional[bytes] = None
        self.pool_fd: Optional[int] = None
        self.pool_bytes = 0
        self.pool_base = 0
        self.page_bytes = 0
        self._local = threading.local()
        self._sessions: List[Session] = []
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self._down = False
        self._counts = {"errors": 0, "unavailable": 0}
        self._prefetch_pgs: List[int] = []
        self._backup_pgs: List[int] = []
        self._prefetch_bandwidth: List[float] = []
        self._backup_bandwidth: List[float] = []

    # -- registration --------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self.namespace = namespace_for(self.config, mem_pool_host, self.page_form)
        self.pool_fd, self.pool_bytes, why = self._shared_pool(mem_pool_host)
        if self.pool_fd is None:
            logger.info("kvpilot L3: copy mode (bytes over the socket): %s", why)
        self.pool_base = mem_pool_host.kv_buffer.data_ptr() if self.pool_fd is not None else 0
        buffer = getattr(mem_pool_host, "kv_buffer", None)
        tokens = max(1, int(getattr(mem_pool_host, "size", 0) or 0))
        self.page_bytes = (
            buffer.numel() * buffer.element_size() // tokens * mem_pool_host.page_size
            if isinstance(buffer, torch.Tensor)
            else 0
        )
        # Connect now so a misconfiguration shows at start-up; a sidecar that is not up yet is
        # retried on the first data call.
        self._session()

    @staticmethod
    def _shared_pool(host):
        """(fd, bytes, reason): the pool's memfd when the sidecar can map the whole pool."""
        fd = getattr(host, "fd", None)
        if fd is None:
            return None, 0, 'the host pool is not shared memory (set "allocator": "shm")'
        if len(getattr(getattr(host, "allocator", None), "fds", [fd])) != 1:
            return None, 0, "the host pool spans several memfds"
        if getattr(host, "layout", None) not in ZERO_COPY_LAYOUTS:
            return None, 0, f"layout {getattr(host, 'layout', None)!r} is not one of {ZERO_COPY_LAYOUTS}"
        buffer = getattr(host, "kv_buffer", None)
        if not isinstance(buffer, torch.Tensor):
            return None, 0, "the host pool has no single kv_buffer"
        size = os.fstat(fd).st_size
        mm = getattr(getattr(host, "allocator", None), "mm", None)
        if mm is not None and ctypes.addressof(ctypes.c_char.from_buffer(mm)) != buffer.data_ptr():
            return None, 0, "kv_buffer does not start at the memfd's first byte"
        if buffer.numel() * buffer.element_size() > size:
            return None, 0, "kv_buffer is larger than its memfd"
        return fd, size, ""

    # -- connections ---------------------------------------------------------------------------

    def _session(self) -> Optional[Session]:
        """This thread's connection, opening it when the sidecar may be back."""
        session = getattr(self._local, "session", None)
        if session is not None or self.namespace is None:
            return session
        if time.monotonic() < self._retry_at:
            self._counts["unavailable"] += 1
            return None
        try:
            session = Session(self.socket_path, self.namespace, self.pool_fd, self.pool_bytes, self.timeout)
        except (OSError, SidecarError) as e:
            self._failed(f"cannot reach the kvpilot cache sidecar at {self.socket_path}: {e}")
            return None
        if self._down:
            logger.info("kvpilot L3: sidecar at %s reachable again", self.socket_path)
            self._down = False
        self._local.session = session
        with self._lock:
            self._sessions.append(session)
        return session

    def _failed(self, message: str) -> None:
        self._counts["errors"] += 1
        self._retry_at = time.monotonic() + self.retry_interval
        if not self._down:
            logger.warning("kvpilot L3: %s; serving misses until it answers", message)
            self._down = True
        session = getattr(self._local, "session", None)
        if session is not None:
            self._local.session = None
            with self._lock:
                if session in self._sessions:
                    self._sessions.remove(session)
            session.close()

    def _call(self, what: str, fn, default):
        """Runs `fn(session)`; any failure is logged, counted and answered with `default`."""
        session = self._session()
        if session is None:
            return default
        try:
            return fn(session)
        except Exception as e:  # never raise on SGLang's data path
            self._failed(f"{what} failed: {e!r}")
            return default

    def _keys(self, keys: List[str]) -> List[bytes]:
        return [key.encode() for key in keys]

    # -- zero-copy path (interface_v1) ---------------------------------------------------------

    def _regions(self, host_indices):
        """(regions per page, offsets into the pool, lengths) of the pages at `host_indices`."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        pages = len(host_indices) // self.mem_pool_host.page_size
        per_page = len(ptrs) // pages if pages else 0
        return per_page, ptrs, sizes

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info=None) -> List[bool]:
        if not keys:
            return []
        if not self.writer:
            return [True] * len(keys)
        started = time.perf_counter()

        def send(session: Session):
            per_page, ptrs, sizes = self._regions(host_indices)
            if self.pool_fd is not None:
                base = self.pool_base
                return session.set(self._keys(keys), per_page, array("Q", [p - base for p in ptrs]), array("Q", sizes))
            values = [[_view(ptrs[i * per_page + r], sizes[i * per_page + r]) for r in range(per_page)] for i in range(len(keys))]
            return session.put_bytes(self._keys(keys), values)

        stored = self._call("batch_set_v1", send, None)
        if stored is None:
            return [False] * len(keys)
        self._record(self._backup_pgs, self._backup_bandwidth, stored, started)
        return [bool(b) for b in stored]

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info=None) -> List[bool]:
        if not keys:
            return []
        started = time.perf_counter()

        def fetch(session: Session):
            per_page, ptrs, sizes = self._regions(host_indices)
            if self.pool_fd is not None:
                base = self.pool_base
                return session.get(self._keys(keys), per_page, array("Q", [p - base for p in ptrs]), array("Q", sizes))
            targets = [[_view(ptrs[i * per_page + r], sizes[i * per_page + r]) for r in range(per_page)] for i in range(len(keys))]
            return bytes(session.get_bytes(self._keys(keys), targets))

        copied = self._call("batch_get_v1", fetch, None)
        if copied is None:
            return [False] * len(keys)
        self._record(self._prefetch_pgs, self._prefetch_bandwidth, copied, started)
        return [bool(b) for b in copied]

    def _record(self, pages_log, bandwidth_log, done, started) -> None:
        """Pages moved and GB/s, drained by `get_stats` into SGLang's StorageMetrics."""
        pages = sum(1 for b in done if b)
        elapsed = time.perf_counter() - started
        pages_log.append(pages)
        if pages and elapsed > 0:
            bandwidth_log.append(pages * self.page_bytes / elapsed / 1e9)

    # -- existence -----------------------------------------------------------------------------

    def batch_exists(self, keys: List[str], extra_info=None) -> int:
        if not keys:
            return 0
        present = self._call("batch_exists", lambda s: s.exists(self._keys(keys)), None)
        return 0 if present is None else leading_hits(present)

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- generic path (flat page tensors, bytes over the socket) -------------------------------

    def batch_set(self, keys: List[str], values: Optional[Any] = None, target_locations=None, target_sizes=None) -> bool:
        if not keys:
            return True
        if not self.writer:
            return True
        if values is None or len(values) != len(keys):
            return False
        tensors = [v.contiguous() for v in values]
        stored = self._call(
            "batch_set",
            lambda s: s.put_bytes(self._keys(keys), [[_tensor_view(t)] for t in tensors]),
            None,
        )
        if stored is None:
            return False
        self._backup_pgs.append(sum(stored))
        return all(stored)

    def set(self, key: str, value: Optional[Any] = None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value] if value is not None else None)

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None, target_sizes=None) -> List[Optional[torch.Tensor]]:
        if not keys:
            return []
        if target_locations is None:
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        targets = list(target_locations)
        filled = self._call(
            "batch_get",
            lambda s: s.get_bytes(self._keys(keys), [[_tensor_view(t)] for t in targets]),
            None,
        )
        if filled is None:
            return [None] * len(keys)
        self._prefetch_pgs.append(sum(filled))
        return [t if ok else None for t, ok in zip(targets, filled)]

    def get(self, key: str, target_location: Optional[Any] = None, target_sizes=None) -> Optional[torch.Tensor]:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    # -- management ----------------------------------------------------------------------------

    def clear(self) -> None:
        self._call("clear", lambda s: s.clear(), None)

    def get_stats(self):
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:
            return None
        metrics = StorageMetrics()
        for target, source in (
            (metrics.prefetch_pgs, self._prefetch_pgs),
            (metrics.backup_pgs, self._backup_pgs),
            (metrics.prefetch_bandwidth, self._prefetch_bandwidth),
            (metrics.backup_bandwidth, self._backup_bandwidth),
        ):
            target.extend(source)
            source.clear()
        return metrics

    def failure_counts(self) -> dict:
        """Calls answered without the sidecar: `errors` (a call failed), `unavailable` (skipped
        while waiting to reconnect)."""
        return dict(self._counts)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()
