"""SGLang's own HiCache objects on CPU, for one release on sys.path: its host KV pool (shm
allocator, pin_memory off), its storage backend factory, and a bare HiCacheController whose
storage methods (backup, hit query, transfer) run exactly as in a server.

What differs by release is construction only: 0.5.17 and 0.5.21 build host pools from the
device pool object, 0.5.23 from the device pool's buffer description; 0.5.17 has no
host-memory budget scope (the 10 GiB reserve is a module constant there).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import inspect
import os
import queue
import struct
from typing import List, Optional

import torch

from sglang.srt.managers import cache_controller
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache import memory_pool
from sglang.srt.mem_cache import utils as mem_cache_utils
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.pool_host import base as pool_host_base
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

KVPILOT_EXTRA = {
    "backend_name": "kvpilot",
    "module_path": "kvpilot_sglang.hicache",
    "class_name": "KvpilotStorage",
    "interface_v1": 1,
    "allocator": "shm",
}


def page_hash(tokens: List[int], prior: Optional[str] = None) -> str:
    """SGLang's page hash for u32 tokens (`cpp_utils/hash_binding.cpp`): SHA-256 of the prior
    page's digest and the tokens as u32 little-endian, in hex."""
    h = hashlib.sha256()
    if prior:
        h.update(bytes.fromhex(prior))
    h.update(struct.pack(f"<{len(tokens)}I", *tokens))
    return h.hexdigest()


def _python_native_hash(token_ids, prior_digest=None, page_size=None):
    """`get_native_hash` without its JIT-compiled extension (which needs g++, the Python and
    OpenSSL headers): one hash, or the chain of full pages when `page_size` is given."""
    tokens = list(token_ids)
    prior = prior_digest.hex() if prior_digest else None
    if page_size is None:
        return page_hash(tokens, prior)
    hashes = []
    for start in range(0, len(tokens) - len(tokens) % page_size, page_size):
        prior = page_hash(tokens[start : start + page_size], prior)
        hashes.append(prior)
    return hashes


mem_cache_utils.get_native_hash = _python_native_hash


@contextlib.contextmanager
def host_memory_budget(nbytes: int):
    scope = getattr(pool_host_base, "host_memory_budget_scope", None)
    if scope is not None:
        with scope(nbytes):
            yield
        return
    saved = pool_host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES
    pool_host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES = 0
    try:
        yield
    finally:
        pool_host_base.HICACHE_HOST_MEMORY_RESERVE_BYTES = saved


def build_host_pool(
    mla: bool,
    layout: str,
    page_size: int = 16,
    device_tokens: int = 256,
    host_tokens: Optional[int] = None,
    layers: int = 4,
    heads: int = 2,
    head_dim: int = 16,
    dtype=torch.bfloat16,
    allocator: str = "shm",
):
    """A real SGLang host KV pool on CPU. `host_tokens` sets its size (default: 2× device)."""
    if mla:
        device = memory_pool.MLATokenToKVPool(
            device_tokens, page_size, dtype, head_dim, head_dim // 2, layers, "cpu", False, 0, layers - 1
        )
        host_cls = MLATokenToKVPoolHost
    else:
        device = memory_pool.MHATokenToKVPool(
            device_tokens, page_size, dtype, heads, head_dim, layers, "cpu", False, start_layer=0, end_layer=layers - 1
        )
        host_cls = MHATokenToKVPoolHost
    ratio = 2.0 if host_tokens is None else host_tokens / device_tokens
    first = list(inspect.signature(host_cls.__init__).parameters)[1]
    with host_memory_budget(64 << 30):
        if first == "buffer_info":  # 0.5.23
            info = device.get_device_pool_infos()[0].buffer_info
            extra = {"device_capacity_tokens": device.size, "start_layer": 0, "end_layer": layers - 1}
            if "target_layer_num" in inspect.signature(host_cls.__init__).parameters:
                extra["target_layer_num"] = layers
            host = host_cls(info, ratio, 0, page_size, layout, pin_memory=False, device="cpu", allocator_type=allocator, **extra)
        else:
            host = host_cls(device, ratio, 0, page_size, layout, pin_memory=False, device="cpu", allocator_type=allocator)
    return host


def storage_config(extra: dict, mla: bool, tp_rank: int = 0, tp_size: int = 1, model: str = "test-model", layout: str = "page_first") -> HiCacheStorageConfig:
    fields = dict(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=True,
        is_page_first_layout=layout == "page_first",
        model_name=model,
        extra_config=dict(extra),
    )
    accepted = inspect.signature(HiCacheStorageConfig).parameters
    return HiCacheStorageConfig(**{k: v for k, v in fields.items() if k in accepted})


def create_backend(name: str, config: HiCacheStorageConfig, host):
    """Through SGLang's own factory, then registered as the controller does."""
    backend = StorageBackendFactory.create_backend(name, config, host)
    backend.register_mem_pool_host(host)
    return backend


def controller(backend, host, zero_copy: bool) -> HiCacheController:
    """A HiCacheController without its constructor (which needs a GPU runtime): only what the
    storage methods read."""
    cc = object.__new__(HiCacheController)
    cc.storage_backend = backend
    cc.page_size = host.page_size
    cc.mem_pool_host = host
    cc.storage_host_pool = host
    cc.prefetch_sync_queue = queue.Queue()
    cc.storage_config = getattr(backend, "config", None)
    if zero_copy:
        cc.page_get_func, cc.page_set_func = cc._page_get_zero_copy, cc._page_set_zero_copy
    else:
        cc.page_get_func, cc.page_set_func = cc._generic_page_get, cc._generic_page_set
    cc.get_hash_str = mem_cache_utils.get_hash_str  # 0.5.17 reads it from the instance
    cc.has_draft = False
    return cc


def page_hashes(tokens: List[int], page_size: int) -> List[str]:
    return mem_cache_utils.get_hash_str(tokens, None, page_size=page_size)


def backup(cc: HiCacheController, host_indices: torch.Tensor, tokens: List[int]) -> int:
    """`_page_backup` as the backup thread runs it; returns the tokens it completed."""
    op = cache_controller.StorageOperation(host_indices, tokens, hash_value=page_hashes(tokens, cc.page_size))
    cc._page_backup(op)
    return op.completed_tokens


def hit_query(cc: HiCacheController, tokens: List[int]):
    """`_storage_hit_query` as the prefetch thread runs it: (hashes, hit tokens)."""
    op = cache_controller.PrefetchOperation("req", tokens)
    return op, cc._storage_hit_query(op)


def transfer(cc: HiCacheController, op, hashes: List[str], host_indices: torch.Tensor) -> int:
    """`_page_transfer` as the prefetch-IO thread runs it: pages copied into `host_indices`."""
    op.hash_value = hashes
    op.host_indices = host_indices
    pages = cc._page_transfer(op)
    # 0.5.17 returns nothing and counts on the operation instead.
    return pages if isinstance(pages, int) else op.completed_tokens // cc.page_size


def page_bytes(host, host_indices: torch.Tensor) -> List[bytes]:
    """The bytes of each page at `host_indices`, region by region, as SGLang describes them."""
    ptrs, sizes = host.get_page_buffer_meta(host_indices)
    pages = len(host_indices) // host.page_size
    per_page = len(ptrs) // pages
    return [
        b"".join(ctypes.string_at(ptrs[i * per_page + r], sizes[i * per_page + r]) for r in range(per_page))
        for i in range(pages)
    ]


def randomize(host, seed: int) -> None:
    """Fills the whole host pool with seeded random bytes."""
    flat = host.kv_buffer.view(-1).view(torch.uint8)
    generator = torch.Generator().manual_seed(seed)
    flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=generator))
