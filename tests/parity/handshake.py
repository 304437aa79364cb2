#!/usr/bin/env python3
"""One SGLang release's own prefill <-> decode handshake, on a matrix of prefill and decode servers.

Usage: handshake.py SGLANG_SRC < scenarios.json
  scenarios: [{"id", "config": CONFIG.json, "prefill": {"tp", "cp", "pp", "page", "dtype",
  "sharding", "dsv4": DSV4}, "decode": {"tp", "pp", "dcp", "page", "dtype", "dsv4": DSV4},
  "speculative": ALGORITHM or null, "prefillSpeculative": ALGORITHM or null (optional: the
  prefill server's, where it differs from the decode server's)}]
  DSV4 (optional): {"backend": --dsv4-attn-backend, "env": {SGLANG_DSV4_*: value}}
Prints [{"id", "raised", "message", "prefillAttnTp", "decodeAttnTp", "gpus", "gpuDependent",
"startRefused", "notes"}] on stdout: where the DeepSeek-V4 KV layouts depend on the GPU (0.5.23),
the handshake runs once per pair of GPU kinds (prefill/decode) both servers start on (`gpus`:
pair -> message);
`gpuDependent` when their answers differ (message null), `startRefused` when no pair starts. Exits
non-zero, naming the file, when a piece of the release's code this needs is missing or cannot
run: a scenario is never silently skipped.

The refusals: a decode server's KV manager asks each prefill server's bootstrap server for its
parallel info before the first transfer (`CommonKVManager.try_ensure_parallel_info`,
disaggregation/common/conn.py) and raises on a page size or KV dtype mismatch (P1, P2), decode
context parallelism without an MLA pool, against prefill attention CP or KV cache sharding (R19d,
R19e, R19f), MXFP8 block scales across attention TP sizes (T1mx), MiniMax sparse state across
attention TP sizes (T4c), DeepSeek-V4 KV layouts that differ (P3), DeepSeek-V4.1 DSpark
layouts that differ (P4b: DSPARK on one side only) and DSpark servers across attention TP sizes
(P4); its `_resolve_rank_mapping` then asserts equal attention TP for a
sharded MLA prefill (P5) and decode pipeline stages of 1 or the prefill's (P6).

What runs, unchanged:
  - `CommonKVManager.try_ensure_parallel_info` and `_resolve_rank_mapping` of the release, with
    the release's `PrefillServerInfo` dataclass building the info from the bootstrap answer;
  - both servers' attention TP from the release's `compute_dp_attention_world_info`
    (layers/dp_attention.py): TP divided by attention DP and attention CP;
  - both servers' DSpark transfer layout from the release's `get_dsv41_spec_layout`
    (disaggregation/utils.py, 0.5.21 on; None before), which describes one only for a pool with
    compression-ratio-2 layers (the model's `compress_ratios`, which the DeepSeek-V4 pool takes)
    under the DSPARK algorithm (the scenario's, on both servers unless the prefill server's is
    given apart);
  - the model facts the pool class follows from (attention architecture, Mamba state, hybrid
    SWA, DeepSeek-V4, MiniMax sparse) from the release's ModelConfig (classify.Release).

Stood in, and why:
  - the manager is made with `__new__` (its constructor registers with a bootstrap server and
    binds transfer engines): it holds the decode server's values. Any other attribute the
    release's code reads is an error naming it;
  - `requests.get` answers the prefill server's info as its bootstrap server serves it (the
    fields `PrefillServerInfo` declares; `enable_kv_cache_sharding` only where it declares it:
    0.5.22's prefill accepts the flag, but its bootstrap answer does not carry it);
  - `is_mla_backend` (the decode pool is `MLATokenToKVPool` or `DeepSeekV4TokenToKVPool`): an MLA
    model without Mamba state, or DeepSeek-V4; `is_hybrid_mla_backend` (a hybrid-linear pool
    around an MLA pool): an MLA model with Mamba state;
  - `kv_args.state_types` (built by setup_state_kv_args from the pools): BLOCK_SCALE (and
    BLOCK_SCALE_SWA for hybrid SWA) under `--kv-cache-dtype mxfp8` off MLA where the release's
    StateType has them (0.5.19 on), SWA for hybrid SWA,
    MAMBA for Mamba state, MINIMAX_INDEX_K for a MiniMax sparse model (the release's
    `is_minimax_sparse`, where its StateType has it);
  - both servers' `kv_cache_dtype_str` is the `--kv-cache-dtype` value (the model runner's
    resolved dtype string is the flag's unless a quantization config resolves `auto`);
  - each DeepSeek-V4 server's KV layout (0.5.23, where disaggregation/utils.py has
    get_pd_kv_layout; None before and for other models) on each GPU kind of GPUS, each server
    on its own: the release's
    `_deepseek_v4_kv_cache_dtype` (arg_groups/overrides.py) and `_default_dsv4_attention_backend`
    (arg_groups/deepseek_v4_hook.py) resolve the KV dtype and an automatic attention backend, the
    hook's asserts on the backend (the `if` statements of apply_deepseek_v4_defaults testing it)
    and `select_dsv4_kv_layout` decide whether the server starts there, and the pool's
    `pd_kv_layout` (mem_cache/deepseek_v4_memory_pool.py, with the `uniform_fp8` statements of its
    constructor) describes the layout, with KVLayout from the wheel's kernels package; the
    scenario's SGLANG_DSV4_* variables are set in the process environment, which the release's
    `envs` reads. Stood in: the GPU (CUDA, capability 10 for sm100 and 9 for sm90, as
    `is_sm100_supported` and `torch.cuda` answer), the pool's other state (not the ROCm unified-KV
    mode; its compression ratios are the model's `compress_ratios`), the server arguments the
    backend choice reads (device cuda, the side's mode, KV dtype and backend, no HiSparse, no
    context parallelism);
  - what the DSpark layout describes besides the compression ratios and the algorithm: two SWA
    states (the target's and the DSpark draft's ring), four draft tokens, the layer ids of the
    pipeline stage (even split) and fixed buffer sizes on both sides (the pools' buffers, which
    follow the page size, KV dtype and stage, all compared before or beside it), so two servers
    with the same stages describe the same layout;
  - no DP attention, decode attention CP 1 (the decode side rejects any other in the same
    function), engine rank 0.
"""

import ast
import dataclasses
import inspect
import itertools
import os
import sys
import types

import sglang_env
from classify import Release

CONN = os.path.join("disaggregation", "common", "conn.py")
BASE_CONN = os.path.join("disaggregation", "base", "conn.py")
DP_ATTENTION = os.path.join("layers", "dp_attention.py")


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


class Logger:
    """The module's logger: the handshake logs, it does not decide by logging."""

    def __getattr__(self, _name):
        return lambda *args, **kwargs: None


class DecodeManager:
    """Stand-in attributes of the decode server's CommonKVManager; methods are the release's."""

    ATTRIBUTES = ("prefill_info_table", "kv_args", "kv_cache_dtype_str", "attn_tp_size",
                  "attn_cp_size", "attn_cp_rank", "dcp_size", "is_mla_backend",
                  "is_hybrid_mla_backend", "kv_layout", "dsv41_spec_layout",
                  "enable_all_cp_ranks_for_transfer", "pp_size", "pp_rank")

    def __getattr__(self, name):
        raise AttributeError(f"the handshake reads CommonKVManager.{name}, which this harness does "
                             f"not stand in")


def manager_class(srt):
    """A class holding the release's try_ensure_parallel_info and _resolve_rank_mapping."""
    path = os.path.join(srt, CONN)
    name = "sglang.srt.disaggregation.common.conn"
    # The dataclass decorator looks its class's module up in sys.modules.
    sys.modules.setdefault(name, types.ModuleType(name))
    namespace = sglang_env.exec_subset(path, name, ("CommonKVManager",))
    manager = namespace.get("CommonKVManager")
    info = namespace.get("PrefillServerInfo")
    if manager is None or info is None or not dataclasses.is_dataclass(info):
        _fail(path, "CommonKVManager or the PrefillServerInfo dataclass did not define")
    methods = {}
    for name in ("try_ensure_parallel_info", "_resolve_rank_mapping"):
        method = getattr(manager, name, None)
        if method is None:
            _fail(path, f"no CommonKVManager.{name}")
        methods[name] = method
    return namespace, type("ReleaseDecodeManager", (DecodeManager,), methods), info


def state_types(srt):
    """The release's StateType enum (0.5.20 on), or names standing for it before."""
    path = os.path.join(srt, BASE_CONN)
    found = sglang_env.exec_subset(path, "sglang.srt.disaggregation.base.conn").get("StateType")
    if found is not None:
        return found, None
    return (types.SimpleNamespace(SWA="swa", MAMBA="mamba", BLOCK_SCALE="block_scale",
                                  BLOCK_SCALE_SWA="block_scale_swa", MINIMAX_INDEX_K="minimax_index_k"),
            "StateType stood in by names (base/conn.py defines none)")


def attention_width(srt):
    """The release's attention-TP width, as compute_dp_attention_world_info computes it."""
    path = os.path.join(srt, DP_ATTENTION)
    function = sglang_env.exec_subset(path, "sglang.srt.layers.dp_attention").get(
        "compute_dp_attention_world_info")
    if function is None:
        _fail(path, "compute_dp_attention_world_info did not define")
    parameters = inspect.signature(function).parameters

    def width(tp, cp):
        if "enable_dp_attention" in parameters:
            answer = function(enable_dp_attention=False, tp_rank=0, tp_size=tp, dp_size=1,
                              attn_cp_size=cp)
        else:
            answer = function(tp_rank=0, tp_size=tp, attn_dp_size=1, attn_cp_size=cp)
        return answer[1]

    return width


def handshake_names(srt, namespace):
    """The global names the two methods read, so an unbound new one fails loudly."""
    path = os.path.join(srt, CONN)
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    manager = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CommonKVManager")
    names = set()
    for function in manager.body:
        if isinstance(function, ast.FunctionDef) and function.name in (
                "try_ensure_parallel_info", "_resolve_rank_mapping"):
            local = {a.arg for a in function.args.args}
            local |= {t.id for n in ast.walk(function) if isinstance(n, (ast.Assign, ast.AnnAssign))
                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                      if isinstance(t, ast.Name)}
            local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            local |= {h.name for h in ast.walk(function) if isinstance(h, ast.ExceptHandler) and h.name}
            names |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Load) and n.id not in local}
    import builtins
    return sorted(n for n in names if n not in namespace and not hasattr(builtins, n))


UTILS = os.path.join("disaggregation", "utils.py")


def dspark_layout(srt, states):
    """A function (compress ratios, algorithm, pipeline stages) -> the release's DSpark transfer
    layout of such a server, or None where the release has no get_dsv41_spec_layout."""
    path = os.path.join(srt, UTILS)
    namespace = sglang_env.exec_subset(path, "sglang.srt.disaggregation.utils")
    describe = namespace.get("get_dsv41_spec_layout")
    if describe is None:
        return None
    # Its StateType import must answer the enum the state lists are made of.
    module = types.ModuleType("sglang.srt.disaggregation.base.conn")
    module.StateType = states
    sys.modules[module.__name__] = module

    def layout(ratios, algorithm, stages):
        namespace["get_spec"] = lambda: types.SimpleNamespace(
            speculative_algorithm=algorithm, speculative_num_draft_tokens=4)
        layers = len(ratios or []) // max(stages, 1)
        kv_args = types.SimpleNamespace(
            mla_compression_ratios=ratios, state_types=[states.SWA, states.SWA],
            kv_layer_ids=list(range(layers)), kv_item_lens=[656] * layers,
            state_item_lens=[[584], [584]])
        return describe(kv_args)

    return layout


DSV4_POOL = os.path.join("mem_cache", "deepseek_v4_memory_pool.py")
DSV4_HOOK = os.path.join("arg_groups", "deepseek_v4_hook.py")
OVERRIDES = os.path.join("arg_groups", "overrides.py")
KV_LAYOUT = os.path.join("kernels", "ops", "attention", "dsv4", "kv_layout.py")
KV_LAYOUT_MODULE = "sglang.kernels.ops.attention.dsv4.kv_layout"
# The GPU kinds a DeepSeek-V4 layout can depend on: SM100/SM103, which has the V4.1 layouts,
# FlashMLA mega and TRT-LLM attention, and an older CUDA GPU.
GPUS = {"sm100": 10, "sm90": 9}


class StartRefused(Exception):
    """The server does not start with these settings on this GPU."""


class Dsv4Layouts:
    """Each DeepSeek-V4 server's KV layout description as its release makes it, per GPU kind;
    `enabled` is False for a release whose PD peers compare none (before 0.5.23)."""

    def __init__(self, srt, utils):
        self.enabled = "get_pd_kv_layout" in utils
        if not self.enabled:
            return
        src = os.path.dirname(os.path.dirname(srt))
        layout_path = os.path.join(src, "sglang", KV_LAYOUT)
        if not os.path.exists(layout_path):
            _fail(layout_path, "missing: unpack_wheel.py extracts it with sglang/srt")
        module = types.ModuleType(KV_LAYOUT_MODULE)
        sys.modules[KV_LAYOUT_MODULE] = module
        module.__dict__.update(sglang_env.exec_subset(layout_path, KV_LAYOUT_MODULE))
        pool_path = os.path.join(srt, DSV4_POOL)
        self.pool = sglang_env.exec_subset(pool_path, "sglang.srt.mem_cache.deepseek_v4_memory_pool",
                                           ("DeepSeekV4TokenToKVPool",))
        self.pool_class = self.pool.get("DeepSeekV4TokenToKVPool")
        for name in ("select_dsv4_kv_layout", "resolve_compressed_kv_layout", "envs"):
            if name not in self.pool:
                _fail(pool_path, f"{name} did not define")
        if self.pool_class is None or not hasattr(self.pool_class, "pd_kv_layout"):
            _fail(pool_path, "DeepSeekV4TokenToKVPool.pd_kv_layout did not define")
        self.pool["KVLayout"] = module.KVLayout
        self.pool["_is_hip"] = False
        self.uniform = self._constructor_statements(pool_path)
        hook_path = os.path.join(srt, DSV4_HOOK)
        self.hook = sglang_env.exec_subset(hook_path, "sglang.srt.arg_groups.deepseek_v4_hook")
        if "_default_dsv4_attention_backend" not in self.hook:
            _fail(hook_path, "_default_dsv4_attention_backend did not define")
        self.backend_asserts = self._backend_asserts(hook_path)
        overrides_path = os.path.join(srt, OVERRIDES)
        self.kv_dtype = sglang_env.exec_subset(
            overrides_path, "sglang.srt.arg_groups.overrides").get("_deepseek_v4_kv_cache_dtype")
        if self.kv_dtype is None:
            _fail(overrides_path, "_deepseek_v4_kv_cache_dtype did not define")
        self.common = __import__("sglang.srt.utils.common", fromlist=["is_sm100_supported"])

    def _constructor_statements(self, path):
        """The constructor's `self.uniform_fp8 = ...` and the `if self.uniform_fp8:` after it."""
        tree = ast.parse(open(path, encoding="utf-8-sig").read(), path)
        pool = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DeepSeekV4TokenToKVPool")
        init = next(n for n in pool.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        body = init.body
        at = next((i for i, n in enumerate(body) if isinstance(n, ast.Assign)
                   and ast.unparse(n.targets[0]) == "self.uniform_fp8"), None)
        if at is None:
            _fail(path, "DeepSeekV4TokenToKVPool.__init__ sets no self.uniform_fp8")
        wanted = [body[at]] + [n for n in body[at + 1:at + 2]
                               if isinstance(n, ast.If) and ast.unparse(n.test) == "self.uniform_fp8"]
        return compile(ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[])), path, "exec")

    def _backend_asserts(self, path):
        """The `if cfg.dsv4_attn_backend == ...` statements of apply_deepseek_v4_defaults that
        assert what the backend needs."""
        tree = ast.parse(open(path, encoding="utf-8-sig").read(), path)
        apply = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                      and n.name == "apply_deepseek_v4_defaults"), None)
        if apply is None:
            _fail(path, "no apply_deepseek_v4_defaults")
        wanted = [n for n in apply.body if isinstance(n, ast.If)
                  and ast.unparse(n.test).startswith("cfg.dsv4_attn_backend ==")
                  and any(isinstance(m, ast.Assert) for m in ast.walk(n))]
        if not wanted:
            _fail(path, "apply_deepseek_v4_defaults asserts nothing of the backend")
        return compile(ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[])), path, "exec")

    def layout(self, mc, side, mode, gpu):
        """The layout string a server describes to its peer, or StartRefused."""
        settings = side.get("dsv4") or {}
        names = [n for n in os.environ if n.startswith("SGLANG_DSV4_")]
        for name in names:
            del os.environ[name]
        os.environ.update(settings.get("env", {}))
        self.common.is_sm100_supported = lambda *args, **kwargs: GPUS[gpu] == 10
        cfg = types.SimpleNamespace(
            device="cuda", kv_cache_dtype=side["dtype"], disaggregation_mode=mode,
            dsv4_attn_backend=settings.get("backend", "auto"), enable_hisparse=False, attn_cp_size=1,
            dcp_size=1, enable_prefill_cp=False, attn_dp_size=1, tp_size=side["tp"])
        model = types.SimpleNamespace(hf_config=mc.hf_config)
        for namespace in (self.hook, self.kv_dtype.__globals__):
            namespace.update(resolving_view=lambda view: view, model_config_of=lambda view: model)
        try:
            cfg.kv_cache_dtype = self.kv_dtype(cfg).get("kv_cache_dtype", cfg.kv_cache_dtype)
            if cfg.dsv4_attn_backend == "auto":
                cfg.dsv4_attn_backend = self.hook["_default_dsv4_attention_backend"](cfg)
            exec(self.backend_asserts, dict(self.hook, cfg=cfg, server_args=cfg))
            kernel = types.SimpleNamespace(dsv4_attn_backend=cfg.dsv4_attn_backend)
            self.pool.update(
                get_exec=lambda: types.SimpleNamespace(kernel=kernel),
                torch=types.SimpleNamespace(
                    cuda=types.SimpleNamespace(is_available=lambda: True,
                                               get_device_capability=lambda *a: (GPUS[gpu], 0)),
                    version=types.SimpleNamespace(cuda="12.9")))
            kv_layout, option = self.pool["select_dsv4_kv_layout"]()
            pool = self.pool_class.__new__(self.pool_class)
            pool.__dict__.update(kv_layout=kv_layout, compressed_kv_layout_option=option,
                                 compression_ratios=list(mc.compress_ratios), _unified_kv=False)
            exec(self.uniform, dict(self.pool, self=pool))
            return pool.pd_kv_layout()
        except (AssertionError, ValueError) as e:
            raise StartRefused(str(e)) from e


def handshake(manager, scenario):
    """The message the decode manager's handshake raises, or None."""
    try:
        if not manager.try_ensure_parallel_info("prefill:8998"):
            raise SystemExit(f"{scenario['id']}: the handshake did not take the stand-in "
                             f"bootstrap answer")
        return None
    except (RuntimeError, AssertionError) as e:
        # An assert whose message is a one-element tuple prints it in parentheses.
        argument = e.args[0] if e.args else ""
        return argument[0] if isinstance(argument, tuple) and len(argument) == 1 else str(e)


def main(src, scenarios):
    srt = os.path.join(src, "sglang", "srt")
    release = Release(src)
    is_deepseek_v4 = release.mc.get("is_deepseek_v4")
    is_minimax_sparse = release.mc.get("is_minimax_sparse")
    if is_minimax_sparse is None:
        _fail(os.path.join(srt, "configs", "model_config.py"), "is_minimax_sparse did not define")
    namespace, manager_cls, info_cls = manager_class(srt)
    states, states_note = state_types(srt)
    width = attention_width(srt)
    layout_of = dspark_layout(srt, states)
    utils = sglang_env.exec_subset(os.path.join(srt, UTILS), "sglang.srt.disaggregation.utils")
    dsv4_layouts = Dsv4Layouts(srt, utils)
    info_fields = {f.name for f in dataclasses.fields(info_cls)}
    answer = {}
    namespace["requests"] = types.SimpleNamespace(
        get=lambda url, timeout=None: types.SimpleNamespace(
            status_code=200, text="", json=lambda: dict(answer)))
    namespace["logger"] = Logger()
    namespace["StateType"] = states
    unbound = handshake_names(srt, namespace)
    if unbound:
        _fail(os.path.join(srt, CONN), f"the handshake reads {unbound}, which this harness does "
                                       f"not bind")
    classified = {}
    results = []
    for scenario in scenarios:
        notes = [states_note] if states_note else []
        config = scenario["config"]
        if config not in classified:
            verdict, mc = release.model_config(config)
            if mc is None and verdict.get("loaded") is False:
                # The release's own config loader refuses the checkpoint: no server starts.
                classified[config] = (verdict, None, None, None, None)
            elif mc is None:
                raise SystemExit(f"{scenario['id']}: the release's ModelConfig did not build: "
                                 f"{verdict.get('error')}")
            else:
                dsv4 = bool(is_deepseek_v4 and is_deepseek_v4(mc.hf_config))
                minimax = bool(is_minimax_sparse(mc.hf_config))
                ratios = list(getattr(mc, "compress_ratios", None) or []) if dsv4 else None
                classified[config] = (verdict, dsv4, minimax, ratios, mc)
        verdict, dsv4, minimax, ratios, mc = classified[config]
        if mc is None:
            results.append({"id": scenario["id"], "raised": False, "message": None, "gpus": [],
                            "gpuDependent": False, "startRefused": f"loader: {verdict.get('error')}",
                            "notes": notes})
            continue
        prefill, decode = scenario["prefill"], scenario["decode"]
        mla = verdict["isMla"]
        is_mla_backend = (mla and not verdict["usesSsmState"]) or dsv4
        is_hybrid_mla_backend = mla and verdict["usesSsmState"]
        kinds = []
        if verdict["isHybridSwa"]:
            kinds.append(states.SWA)
        if verdict["usesSsmState"]:
            kinds.append(states.MAMBA)
        if minimax and hasattr(states, "MINIMAX_INDEX_K"):
            kinds.append(states.MINIMAX_INDEX_K)
        # Releases whose StateType has no block scales (0.5.17-0.5.18) build no such state.
        if (decode["dtype"] == "mxfp8" and not is_mla_backend and not is_hybrid_mla_backend
                and hasattr(states, "BLOCK_SCALE")):
            kinds.append(states.BLOCK_SCALE)
            if verdict["isHybridSwa"]:
                kinds.append(states.BLOCK_SCALE_SWA)
        prefill_tp, decode_tp = width(prefill["tp"], prefill["cp"]), width(decode["tp"], 1)
        answer.clear()
        answer.update(attn_tp_size=prefill_tp, attn_cp_size=prefill["cp"], dp_size=1,
                      pp_size=prefill["pp"], page_size=prefill["page"],
                      kv_cache_dtype=prefill["dtype"], follow_bootstrap_room=True)
        layouts = {side: None for side in ("prefill", "decode")}
        if layout_of is not None:
            algorithms = {"decode": scenario.get("speculative"),
                          "prefill": scenario.get("prefillSpeculative", scenario.get("speculative"))}
            layouts = {side: layout_of(ratios, algorithms[side], scenario[side]["pp"]) for side in layouts}
        if "dsv41_spec_layout" in info_fields:
            answer["dsv41_spec_layout"] = layouts["prefill"]
        elif scenario.get("speculative") or scenario.get("prefillSpeculative"):
            notes.append("PrefillServerInfo carries no dsv41_spec_layout")
        if "enable_kv_cache_sharding" in info_fields:
            answer["enable_kv_cache_sharding"] = prefill["sharding"]
        elif prefill["sharding"]:
            notes.append("PrefillServerInfo carries no enable_kv_cache_sharding")
        # Where the layouts depend on the GPU, the handshake runs on each pair of GPU kinds the
        # two servers start on (the prefill and decode fleets may run on different GPUs).
        answers, refusals = {}, []
        gpus = itertools.product(GPUS, GPUS) if dsv4 and dsv4_layouts.enabled else (None,)
        for gpu in gpus:
            kv_layouts = {"prefill": None, "decode": None}
            if gpu is not None:
                try:
                    kv_layouts = {side: dsv4_layouts.layout(mc, scenario[side], side, kind)
                                  for side, kind in zip(kv_layouts, gpu)}
                except StartRefused as e:
                    refusals.append(f"{'/'.join(gpu)}: {e}")
                    continue
            if "kv_layout" in info_fields:
                answer["kv_layout"] = kv_layouts["prefill"]
            manager = manager_cls.__new__(manager_cls)
            manager.__dict__.update(
                prefill_info_table={}, kv_args=types.SimpleNamespace(
                    page_size=decode["page"], engine_rank=0, state_types=kinds),
                kv_cache_dtype_str=decode["dtype"], attn_tp_size=decode_tp, attn_cp_size=1,
                attn_cp_rank=0, dcp_size=decode["dcp"], is_mla_backend=is_mla_backend,
                is_hybrid_mla_backend=is_hybrid_mla_backend, kv_layout=kv_layouts["decode"],
                dsv41_spec_layout=layouts["decode"],
                enable_all_cp_ranks_for_transfer=False, pp_size=decode["pp"], pp_rank=0)
            answers[gpu] = handshake(manager, scenario)
        messages = set(answers.values())
        results.append({"id": scenario["id"], "raised": len(messages) == 1 and None not in messages,
                        "message": next(iter(messages)) if len(messages) == 1 else None,
                        "gpus": {"/".join(gpu): message for gpu, message in answers.items()
                                 if gpu is not None},
                        "gpuDependent": len(messages) > 1,
                        "startRefused": "; ".join(refusals) if not answers else None,
                        "prefillAttnTp": prefill_tp, "decodeAttnTp": decode_tp, "notes": notes})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
