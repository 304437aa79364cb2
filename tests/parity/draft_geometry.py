#!/usr/bin/env python3
"""One SGLang release's own DeepSeek-V4 draft-pool check on a PD decode server, on a matrix.

Usage: draft_geometry.py SGLANG_SRC < scenarios.json
  scenarios: [{"id", "target": CONFIG.json, "draft": CONFIG.json or null, "dcp": int}], where a
  null draft is the target's own NextN layers (the draft ModelConfig built from the target's
  config, as `--speculative-draft-model-path` naming the target's checkpoint does).
Prints [{"id", "raised", "message", "targetWindow", "draftWindow", "targetPage", "draftPage",
"notes"}] on stdout. Exits non-zero, naming the file, when a piece of the release's code this
needs is missing or cannot run: a scenario is never silently skipped.

The refusal: `setup_state_kv_args` (disaggregation/utils.py), which the decode server's KV
manager calls with the draft worker's pool, holds one statement
`if isinstance(token_to_kv_pool, DeepSeekV4TokenToKVPool) and isinstance(draft_token_to_kv_pool,
DeepSeekV4TokenToKVPool): ...` (0.5.17 also asks `not is_npu()`) raising RuntimeError when the
draft has compressed layers, a different unified-KV mode, ring geometry, SWA index mapping, or
paged SWA geometry (page size, sliding window; 0.5.23 adds the request-window / ring size).

What runs, unchanged:
  - that statement, taken from the release's setup_state_kv_args by its syntax tree;
  - the target's and the draft's ModelConfig (classify.Release.model_config: config loading,
    `_config_draft_model` for the draft, `_derive_model_shapes`, which sets `window_size` and
    `compress_ratios` for the DeepSeek-V4 architectures);
  - the server page size: the release's model-override providers for the target architecture
    (the DeepSeek-V4 provider declares page_size 256 off NPU), on a CUDA device;
  - the pool choice: the `is_dsv4_model = is_deepseek_v4(self.model_config.hf_config)` statement
    of KVCacheConfigurator._init_pools, and, in _build_dsv4_kv_pool, the `pool_cls = ...`
    assignments of its `if _is_npu:` statement (off NPU), the `if self.is_draft_worker:`
    assignment of `compression_ratios` (COMPRESS_RATIO_NEXTN_LAYER from models/deepseek_v4_nextn.py
    per draft layer, the config's ratios for the target), and the `page_size=` and
    `sliding_window=` arguments of the pool constructor call, which read the configurator's own
    `pool_page_size` / `loc_space_scale` properties and `model_config.window_size`;
  - the draft's layer count: layer_setup's `_compute_model_num_layers` and
    `_resolve_pp_layer_range`;
  - the pool's `_unified_kv`: the release's `is_unified_kv_triton` (HIP only, so False here)
    where it lies in sglang/srt (0.5.23); see unified_kv for the releases before;
  - `checkpoint_bundles_dspark_draft` (speculative/dspark_components/dspark_config.py), which
    `_config_draft_model` asks before naming DeepseekV4ForCausalLMNextN: classify.Release runs
    its module's statements that need no scheduler (whose pydantic request schemas cannot be
    built without the real packages) and puts it in sys.modules under its own name.

Stood in, and why:
  - the configurator is made with `__new__` (its constructor profiles GPU memory): it holds
    `is_draft_worker`, the ModelConfig, the layer count and, for 0.5.17's `loc_space_scale`,
    `server_args.dcp_size`; its module's `get_schedule`/`get_parallel` answer the server page
    size and `attn_dcp_size` = the scenario's dcp;
  - the model handed to the layer functions has no `num_stages`/`start_layer`/`end_layer`
    (DeepseekV4ForCausalLMNextN defines none; checked in models/deepseek_v4_nextn.py);
  - the pools: objects carrying the values above (the pool constructor stores `page_size`,
    `sliding_window` and `compression_ratios` as given); a DeepSeek-V4 pool is an instance of the
    stand-in bound to `DeepSeekV4TokenToKVPool`, any other pool is not. Both share one
    `full_to_swa_index_mapping` object (the NextN draft shares the target's allocator). 0.5.23's
    third geometry element (the target's request-window capacity, the draft's SWA ring size) is
    a runtime value, None for both on default CUDA serving (no encoder SWA-bounded replay, no
    DSpark ring): the same value for both, so it never decides the outcome here. Every
    `get_*_buf_infos` answers empty lists, so `append_state_component` is never reached;
  - `StateType` (names only), `kv_args`, `is_npu` (False: NVIDIA decode server);
  - the override providers get server args with every field unset but `device="cuda"`; where a
    provider's `from sglang.srt.server_args import ServerArgs` cannot run here (0.5.17-0.5.19:
    its pydantic request schemas need the real packages), that name is a class holding the
    release's literal field defaults (pd_args.field_defaults), and the note says so;
  - no `--enable-kv-cache-sharding` (0.5.23's shared-shard MTP pool is not built), no unified
    memory pool (refused for DeepSeek-V4 anyway).
"""

import ast
import builtins
import inspect
import os
import sys
import types

import sglang_env
from classify import Release, _NoServerArgs
from pd_args import field_defaults

UTILS = os.path.join("disaggregation", "utils.py")
CONFIGURATOR = os.path.join("mem_cache", "kv_cache_configurator.py")
LAYER_SETUP = os.path.join("model_executor", "model_runner_components", "layer_setup.py")
NEXTN = os.path.join("models", "deepseek_v4_nextn.py")
DSV4_POOL = os.path.join("mem_cache", "deepseek_v4_memory_pool.py")


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


def _parse(path):
    if not os.path.exists(path):
        _fail(path, "missing")
    with open(path, encoding="utf-8-sig") as f:
        return ast.parse(f.read(), path)


def _def(body, name):
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                 and n.name == name), None)


def _code(path, statements):
    module = ast.fix_missing_locations(ast.Module(body=statements, type_ignores=[]))
    return compile(module, path, "exec")


def dsv4_draft_statement(srt):
    """The compiled `if ... isinstance(draft_token_to_kv_pool, DeepSeekV4TokenToKVPool)` statement
    of setup_state_kv_args, and the names its test reads."""
    path = os.path.join(srt, UTILS)
    function = _def(_parse(path).body, "setup_state_kv_args")
    if function is None:
        _fail(path, "no setup_state_kv_args")
    found = [s for s in function.body if isinstance(s, ast.If)
             and "DeepSeekV4TokenToKVPool" in ast.unparse(s.test)
             and "draft_token_to_kv_pool" in ast.unparse(s.test)]
    if len(found) != 1:
        _fail(path, f"expected one DeepSeek-V4 draft statement in setup_state_kv_args, "
                    f"found {len(found)}")
    names = sorted({n.id for n in ast.walk(found[0].test) if isinstance(n, ast.Name)})
    return _code(path, found), names


def _only(statement, keep):
    """`statement` (an If) with each branch reduced to the statements `keep` accepts."""
    def branch(body):
        kept = [s for s in body if keep(s)]
        return kept or [ast.Pass()]
    return ast.If(test=statement.test, body=branch(statement.body),
                  orelse=branch(statement.orelse) if statement.orelse else [])


def _assigns(statement, name):
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in statement.targets)


class Configurator:
    """The release's KVCacheConfigurator, as far as the DeepSeek-V4 pool's arguments go."""

    def __init__(self, srt, release):
        path = os.path.join(srt, CONFIGURATOR)
        self.path = path
        cls_node = _def(_parse(path).body, "KVCacheConfigurator")
        if cls_node is None:
            _fail(path, "no KVCacheConfigurator")
        self.ns = sglang_env.exec_subset(path, "sglang.srt.mem_cache.kv_cache_configurator",
                                         ("KVCacheConfigurator",))
        self.cls = self.ns["KVCacheConfigurator"]
        for prop in ("pool_page_size", "loc_space_scale"):
            if not isinstance(getattr(self.cls, prop, None), property):
                _fail(path, f"KVCacheConfigurator has no {prop} property")
        # The pool choice reads is_deepseek_v4 from configs/model_config.py; the configurator's
        # own import of it may not have run here (its top level needs torch).
        self.ns.setdefault("is_deepseek_v4", release.mc.get("is_deepseek_v4"))
        if self.ns["is_deepseek_v4"] is None:
            _fail(path, "is_deepseek_v4 is not available")

        init_pools = _def(cls_node.body, "_init_pools")
        choice = [s for s in ast.walk(init_pools or cls_node) if _assigns(s, "is_dsv4_model")]
        if init_pools is None or not choice:
            _fail(path, "no `is_dsv4_model = ...` in KVCacheConfigurator._init_pools")
        self.choice = _code(path, choice[:1])

        build = _def(cls_node.body, "_build_dsv4_kv_pool")
        if build is None:
            _fail(path, "no KVCacheConfigurator._build_dsv4_kv_pool")
        ratios = [s for s in build.body if isinstance(s, ast.If)
                  and ast.unparse(s.test) == "self.is_draft_worker"
                  and any(_assigns(b, "compression_ratios") for b in s.body)]
        pool_cls = [s for s in build.body if isinstance(s, ast.If)
                    and ast.unparse(s.test) == "_is_npu"
                    and any(_assigns(b, "pool_cls") for b in s.body + s.orelse)]
        calls = [n for n in ast.walk(build) if isinstance(n, ast.Call)
                 and {"page_size", "sliding_window"} <= {k.arg for k in n.keywords}]
        if len(ratios) != 1 or len(pool_cls) != 1 or len(calls) != 1:
            _fail(path, "_build_dsv4_kv_pool: expected one `if self.is_draft_worker:` "
                        "compression_ratios statement, one `if _is_npu:` pool_cls statement and "
                        f"one pool call (found {len(ratios)}, {len(pool_cls)}, {len(calls)})")
        self.ratios = _code(path, [_only(ratios[0], lambda s: isinstance(s, ast.ImportFrom)
                                         or _assigns(s, "compression_ratios"))])
        self.pool_cls = _code(path, [_only(pool_cls[0], lambda s: _assigns(s, "pool_cls"))])
        if ast.unparse(calls[0].func) != "pool_cls":
            _fail(path, f"the pool is built by {ast.unparse(calls[0].func)}, not pool_cls")
        keywords = {k.arg: k.value for k in calls[0].keywords}
        self.arguments = {name: compile(ast.Expression(keywords[name]), path, "eval")
                          for name in ("page_size", "sliding_window")}

    def instance(self, model_config, is_draft_worker, layers, server_page, dcp):
        self.ns["get_schedule"] = lambda: types.SimpleNamespace(page_size=server_page)
        self.ns["get_parallel"] = lambda: types.SimpleNamespace(attn_dcp_size=dcp)
        inst = self.cls.__new__(self.cls)
        inst.is_draft_worker = is_draft_worker
        inst.model_config = model_config
        inst.layer_info = types.SimpleNamespace(num_effective_layers=layers, start_layer=0,
                                                end_layer=layers)
        inst.server_args = types.SimpleNamespace(dcp_size=dcp)  # 0.5.17's loc_space_scale
        return inst

    def pool(self, inst, dsv4_class):
        """(is a DeepSeek-V4 pool, its constructor arguments or None)."""
        scope = dict(self.ns, self=inst)
        exec(self.choice, scope)
        if not scope["is_dsv4_model"]:
            return False, None
        scope.update(_is_npu=False, DeepSeekV4TokenToKVPool=dsv4_class)
        exec(self.pool_cls, scope)
        exec(self.ratios, scope)
        arguments = {name: eval(code, scope) for name, code in self.arguments.items()}
        arguments["compression_ratios"] = scope["compression_ratios"]
        return scope["pool_cls"] is dsv4_class, arguments


class _CudaServerArgs(_NoServerArgs):
    """Server args as the override providers see them on an NVIDIA server with no flags."""

    device = "cuda"


def server_page_size(release, srt, hf_config, notes):
    """The page size the release's override providers declare for the target architecture
    (the last writer wins, as in collect_model_override_declarations); the field default if none
    does."""
    arch = hf_config.architectures[0]
    base, providers = release.override_providers(arch)
    page = base.MODEL_OVERRIDES.get(arch, {}).get("page_size", field_defaults(srt).get("page_size"))
    for fn in providers:
        if "page_size" not in inspect.getsource(fn):
            continue
        try:
            declared = sglang_env.quietly(base._invoke_provider, fn, _CudaServerArgs(), hf_config)
        except Exception as e:
            # 0.5.17-0.5.19's provider compares with `ServerArgs.swa_full_tokens_ratio`, whose
            # module cannot be built here: it gets a class holding the release's field defaults.
            saved = sys.modules.get("sglang.srt.server_args")
            stand_in = types.ModuleType("sglang.srt.server_args")
            stand_in.ServerArgs = type("ServerArgs", (), field_defaults(srt))
            sys.modules["sglang.srt.server_args"] = stand_in
            try:
                declared = sglang_env.quietly(base._invoke_provider, fn, _CudaServerArgs(),
                                              hf_config)
            except Exception as again:
                raise SystemExit(f"override {fn.__qualname__} cannot run here: "
                                 f"{type(again).__name__}: {again}") from again
            finally:
                if saved is None:
                    sys.modules.pop("sglang.srt.server_args", None)
                else:
                    sys.modules["sglang.srt.server_args"] = saved
            notes.append(f"{fn.__qualname__} ran with a ServerArgs class of field defaults "
                         f"({type(e).__name__} importing the real one)")
        if declared and "page_size" in declared:
            page = declared["page_size"]
            notes.append(f"{fn.__qualname__}: page_size={page}")
    if page is None:
        # Left unset, overrides.py's _page_size_default gives 1 (64 only for a ROCm KV layout).
        page = 1
        notes.append("page_size unset: 1, _page_size_default's value off ROCm")
    return page


def unified_kv(srt):
    """(the pool's `_unified_kv`, a note): the release's `is_unified_kv_triton()`, found through
    the pool module's import of it. 0.5.17-0.5.22 import it from sglang/kernels, which is not
    among the unpacked sources (sglang/srt only): there it is stood in as False, the answer off
    ROCm (the unified-KV Triton path is HIP-only in every release), and the note says so."""
    path = os.path.join(srt, DSV4_POOL)
    imports = [n for n in ast.walk(_parse(path)) if isinstance(n, ast.ImportFrom)
               and any(a.name == "is_unified_kv_triton" for a in n.names)]
    if not imports:
        _fail(path, "no import of is_unified_kv_triton")
    module = imports[0].module
    gate = os.path.join(os.path.dirname(os.path.dirname(srt)), *module.split(".")) + ".py"
    if not module.startswith("sglang.srt.") or not os.path.exists(gate):
        return False, f"_unified_kv stood in as False: {module} is not in the unpacked sources"
    function = sglang_env.exec_subset(gate, module).get("is_unified_kv_triton")
    if function is None:
        _fail(gate, "is_unified_kv_triton did not define")
    value = bool(getattr(function, "__wrapped__", function)())
    return value, f"_unified_kv={value} ({module}.is_unified_kv_triton)"


class PoolStandIn:
    """A pool as setup_state_kv_args reads it: fixed attributes, empty buffer infos."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)

    def __getattr__(self, name):
        if name.startswith("get_") and name.endswith("_buf_infos"):
            return lambda *args, **kwargs: ([], [], [])
        raise AttributeError(name)


class DeepSeekV4PoolStandIn(PoolStandIn):
    """Bound to the name DeepSeekV4TokenToKVPool."""


class OtherPoolStandIn(PoolStandIn):
    """Any pool the configurator builds for a non-DeepSeek-V4 model."""


def main(src, scenarios):
    srt = os.path.join(src, "sglang", "srt")
    release = Release(src)
    statement, test_names = dsv4_draft_statement(srt)
    configurator = Configurator(srt, release)
    layer_ns = sglang_env.exec_subset(os.path.join(srt, LAYER_SETUP),
                                      "sglang.srt.model_executor.model_runner_components.layer_setup")
    for name in ("_compute_model_num_layers", "_resolve_pp_layer_range"):
        if name not in layer_ns:
            _fail(os.path.join(srt, LAYER_SETUP), f"{name} did not define")
    nextn_path = os.path.join(srt, NEXTN)
    nextn = sglang_env.module_from_subset(nextn_path, "sglang.srt.models.deepseek_v4_nextn")
    if not hasattr(nextn, "COMPRESS_RATIO_NEXTN_LAYER"):
        _fail(nextn_path, "no COMPRESS_RATIO_NEXTN_LAYER")
    with open(nextn_path, encoding="utf-8") as f:
        if any(attr in f.read() for attr in ("num_stages", "start_layer", "end_layer")):
            _fail(nextn_path, "the NextN model now sets its own layer range; the stand-in "
                              "model must carry it")
    sys.modules["sglang.srt.models.deepseek_v4_nextn"] = nextn
    unified, unified_note = unified_kv(srt)

    results = []
    for scenario in scenarios:
        notes = [unified_note]
        target_verdict, target_mc = release.model_config(scenario["target"])
        draft_path = scenario["draft"] or scenario["target"]
        draft_verdict, draft_mc = release.model_config(draft_path, draft=True)
        for role, verdict, mc in (("target", target_verdict, target_mc),
                                  ("draft", draft_verdict, draft_mc)):
            if mc is None:
                raise SystemExit(f"{scenario['id']}: the release's ModelConfig for the {role} "
                                 f"did not build: {verdict.get('error')}")
        notes.append(f"draft architecture {draft_mc.hf_config.architectures[0]}")
        page = server_page_size(release, srt, target_mc.hf_config, notes)
        dcp = scenario["dcp"]
        draft_layers = layer_ns["_resolve_pp_layer_range"](
            model=object(), model_num_layers=layer_ns["_compute_model_num_layers"](
                model=object(), model_config=draft_mc, is_draft_worker=True))
        draft_layers = draft_layers.end_layer - draft_layers.start_layer
        mapping = object()  # the NextN draft shares the target's allocator
        pools, geometry = {}, {}
        for role, mc, is_draft, layers in (("target", target_mc, False, None),
                                           ("draft", draft_mc, True, draft_layers)):
            inst = configurator.instance(mc, is_draft, layers, page, dcp)
            is_dsv4, arguments = configurator.pool(inst, DeepSeekV4PoolStandIn)
            geometry[role] = (inst.pool_page_size, getattr(mc, "window_size", None))
            if not is_dsv4:
                notes.append(f"{role} pool is not DeepSeekV4TokenToKVPool")
                pools[role] = OtherPoolStandIn()
                continue
            geometry[role] = (arguments["page_size"], arguments["sliding_window"])
            pools[role] = DeepSeekV4PoolStandIn(
                page_size=arguments["page_size"], sliding_window=arguments["sliding_window"],
                compression_ratios=arguments["compression_ratios"], _unified_kv=unified,
                full_to_swa_index_mapping=mapping, request_window=None, swa_req_ring_size=None)
            if is_draft:
                notes.append(f"draft pool: {layers} layer(s), compression_ratios "
                             f"{arguments['compression_ratios']}")
        appended = []
        scope = {
            "token_to_kv_pool": pools["target"], "draft_token_to_kv_pool": pools["draft"],
            "DeepSeekV4TokenToKVPool": DeepSeekV4PoolStandIn,
            "StateType": types.SimpleNamespace(SWA="SWA", SWA_RING="SWA_RING",
                                               REQUEST_ROW="REQUEST_ROW", MAMBA="MAMBA"),
            "append_state_component": lambda *args: appended.append(args[1]),
            "kv_args": types.SimpleNamespace(state_types=[]), "is_npu": lambda: False,
        }
        unbound = [n for n in test_names if n not in scope and not hasattr(builtins, n)]
        if unbound:
            raise SystemExit(f"{os.path.join(srt, UTILS)}: the DeepSeek-V4 draft statement "
                             f"reads {unbound}, which this harness does not bind")
        try:
            exec(statement, scope)
            raised, message = False, None
        except RuntimeError as e:
            raised, message = True, str(e)
        results.append({
            "id": scenario["id"], "raised": raised, "message": message,
            "targetWindow": geometry["target"][1], "draftWindow": geometry["draft"][1],
            "targetPage": geometry["target"][0], "draftPage": geometry["draft"][0],
            "notes": notes,
        })
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
