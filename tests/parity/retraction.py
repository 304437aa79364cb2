#!/usr/bin/env python3
"""One SGLang release's own automatic retraction-backup choice on a scenario matrix.

Usage: retraction.py SGLANG_SRC < scenarios.json      (a JSON list, see run.py)
Prints a JSON list: per scenario {"id", "backend", "hicacheRatio"} or {"id", "skipped": why}.
A release with neither the resolver nor the flag anywhere in its source (0.5.17) answers
`cpu_tensor`, what its decode retraction always does.

What runs is the release's `resolve_decode_retraction_backup` (mem_cache/kv_cache_builder.py,
0.5.18 and later), unchanged, on the release's own ModelConfig for the scenario's config.json
(classify.py). What stands in, because it needs a GPU or a running server:
  - the runtime-context getters (get_disagg, get_memory, get_schedule, get_parallel,
    get_context) answer the scenario's flags, with every other flag at its default;
  - the built KV pool is an instance of a stand-in for the class SGLang builds for the layout
    the release classified: MHATokenToKVPool (full), SWAKVPool (hybrid or pure SWA, with the
    full pool empty for pure SWA), MLATokenToKVPool (MLA), HybridLinearKVPool (SSM state);
  - the platform is CUDA (is_hip False), with no MTP draft pools.
The host-pool ratio is reported only where the release computes it from flags alone (0.5.18 -
0.5.20); from 0.5.21 it also depends on the pool's size and context length, which need a GPU.
"""

import os
import sys
import types

from classify import Release
import sglang_env


class _StandInPool:
    size = 1 << 20  # tokens; any size: the ratio is not reported where it matters


class MHATokenToKVPool(_StandInPool):
    pass


class SWAKVPool(_StandInPool):
    pass


class MLATokenToKVPool(_StandInPool):
    pass


class HybridLinearKVPool(_StandInPool):
    pass


def pool_for(verdict):
    """The pool class SGLang builds for a classified layout, and its full tokens per layer."""
    if verdict["usesSsmState"]:
        return HybridLinearKVPool(), None
    if verdict["isHybridSwa"]:
        return SWAKVPool(), (0 if verdict["fullLayers"] == 0 else 4096)
    if verdict["isMla"]:
        return MLATokenToKVPool(), None
    return MHATokenToKVPool(), None


class _Context:
    def __init__(self):
        self.fields = {}

    def override(self, _source, **fields):
        self.fields.update(fields)


_MODEL_CONFIGS = {}


def model_config(release, path):
    """The release's classification of one config, once per file."""
    if path not in _MODEL_CONFIGS:
        _MODEL_CONFIGS[path] = release.model_config(path)
    return _MODEL_CONFIGS[path]


def resolve(release, scenario, resolver, reads_pool_size):
    verdict, model_config_ = model_config(release, scenario["config"])
    if model_config_ is None:
        return {"id": scenario["id"], "skipped": f"this release cannot load the config: "
                                                 f"{verdict['error']}"}
    kv_pool, full_tokens = pool_for(verdict)
    flags = scenario["flags"]
    disagg = types.SimpleNamespace(
        disaggregation_mode="decode",
        disaggregation_decode_retraction_backup=None,
        disaggregation_decode_enable_radix_cache=flags["decodeRadixCache"],
        disaggregation_decode_enable_offload_kvcache=flags["decodeOffloadKvCache"],
        # Host receive off, in each release's own sense (0.5.21: 0 is off; 0.5.22+: 1 is off).
        disaggregation_decode_host_receive_threshold=release.host_receive_off,
    )
    memory = types.SimpleNamespace(
        hicache_ratio=None, enable_hierarchical_cache=False,
        enable_unified_memory=flags["enableUnifiedMemory"],
        # A given --hicache-size keeps the 0.5.21+ ratio off the pool-size path (not reported).
        hicache_size=1 if reads_pool_size else 0,
    )
    schedule = types.SimpleNamespace(
        enable_priority_scheduling=flags["priorityScheduling"],
        disable_priority_preemption=flags["disablePriorityPreemption"],
    )
    parallel = types.SimpleNamespace(dcp_enabled=flags["decodeContextParallel"] > 1)
    context = _Context()
    allocator = types.SimpleNamespace(get_kvcache=lambda: kv_pool)
    runner = types.SimpleNamespace(
        model_config=model_config_, mtp_draft_device_pools=[],
        spec_algorithm=types.SimpleNamespace(is_dspark=lambda: False))
    worker = types.SimpleNamespace(
        is_hybrid_swa=verdict["isHybridSwa"], model_runner=runner,
        get_memory_pool=lambda: (None, allocator),
        get_tokens_per_layer_info=lambda: (full_tokens, 4096))
    scope = dict(resolver.__globals__,
                 get_disagg=lambda: disagg, get_memory=lambda: memory,
                 get_schedule=lambda: schedule, get_parallel=lambda: parallel,
                 get_context=lambda: context, is_hip=lambda: False,
                 MHATokenToKVPool=MHATokenToKVPool, SWAKVPool=SWAKVPool,
                 uses_ssm_state=release.uses_ssm_state)
    bound = types.FunctionType(resolver.__code__, scope, resolver.__name__,
                               resolver.__defaults__, resolver.__closure__)
    bound.__kwdefaults__ = resolver.__kwdefaults__
    backend = bound(tp_worker=worker)
    result = {"id": scenario["id"], "backend": backend}
    if not reads_pool_size:
        result["hicacheRatio"] = context.fields.get("hicache_ratio")
    return result


def main(src, scenarios):
    release = Release(src)
    resolver = release.kvb.get("resolve_decode_retraction_backup")
    if resolver is None:
        # Before 0.5.18 there is no resolver and no flag: retraction always copies to
        # per-request CPU tensors. Said only when the release's source has no such flag at all.
        srt = os.path.join(src, "sglang", "srt")
        has_flag = any("disaggregation_decode_retraction_backup" in open(
            os.path.join(d, f), encoding="utf-8-sig").read()
            for d, _, files in os.walk(srt) for f in files if f.endswith(".py"))
        answers = []
        for s in scenarios:
            if has_flag:
                answers.append({"id": s["id"], "skipped": "flag without a resolver"})
            elif model_config(release, s["config"])[1] is None:
                answers.append({"id": s["id"], "skipped": "this release cannot load the config"})
            else:
                answers.append({"id": s["id"], "backend": "cpu_tensor"})
        return answers
    names = set(resolver.__code__.co_names)
    reads_pool_size = "decode_retraction_max_tokens" in names
    source = open(os.path.join(src, "sglang", "srt", "mem_cache", "kv_cache_builder.py"),
                  encoding="utf-8").read()
    release.host_receive_off = 1.0 if "host_receive_threshold < 1" in source else 0.0
    return [resolve(release, s, resolver, reads_pool_size) for s in scenarios]


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
