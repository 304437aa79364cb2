"""kvpilot's test stand-in (not SGLang) for `sglang.srt.mem_cache.hicache_storage`: the base
class and configuration a HiCache storage backend is written against, with the fields and
methods kvpilot's connector uses (the same names as SGLang 0.5.23's). The connector subclasses
`HiCacheStorage` exactly as it does inside SGLang."""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    enable_storage_metrics: bool = False
    extra_config: Optional[dict] = field(default=None)


class HiCacheStorage(ABC):
    """What SGLang's HiCache controller calls on a storage backend; the backend overrides them."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
