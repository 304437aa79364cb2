#!/usr/bin/env python3
"""One SGLang release's own tree-cache choice and its checks of that choice, on a matrix of servers.

Usage: tree_cache.py SGLANG_SRC < scenarios.json
  scenarios: [{"id", "config": CONFIG.json, "radixDisabled": bool, "hostPool": bool,
  "hierarchical": bool, "bufferOnly": bool, "session": bool, "evictionPolicy": str,
  "streaming": bool, "flexkv": bool, "speculative": ALGORITHM or null, "env": {NAME: "1"},
  "hicacheSize": GB (0: sized from the ratio), "linker": bool, "multiLayerFlag": bool,
  "numSteps": int or null, "selfDrafted": bool (the server names the model as its draft model)}]
Prints [{"id", "raised", "message", "cache", "factoryRefused", "notes"}] on stdout
(`factoryRefused`: the unified cache's own refusal of host-pool retraction, R1/R2, which comes
before these checks). Exits non-zero, naming the
file, when a piece of the release's code this needs is missing or cannot run: a scenario is never
silently skipped.

The refusals: `create_tree_cache` (mem_cache/registry.py) builds the tree cache through
`default_radix_cache_factory`, whose unified cache attaches its host pools with HiCache or
host-pool retraction (`init_hicache`): the stack strategy for a DeepSeek-V4 pool refuses
`--hicache-size` (H7). It then refuses buffer-only host memory (H1, 0.5.19 on),
`--enable-session-radix-cache` (H2), `--radix-eviction-policy tlru` (H5, 0.5.21 on) and
`--enable-streaming-session` (H6, 0.5.22 on) unless the tree is a UnifiedRadixCache, and a model
with Mamba state on a tree without Mamba support (N5, 0.5.22 on). The KV cache builder then
registers the speculative draft's host backup, which refuses a sidecar draft plan on a tree that
is not a UnifiedRadixCache (N6, 0.5.19 on; the plan is made before the tree), and refuses
host-pool retraction on such a tree (R8). The plan itself refuses a sidecar draft with the
external cache linker (X4, 0.5.20-0.5.22), from 0.5.23 only one with more than one draft runner
(X5: multi-layer EAGLE builds one per draft step).

What runs, unchanged:
  - the release's `default_radix_cache_factory` and the unified-cache constructor it calls, on
    the scenario's context;
  - the checks of `create_tree_cache` after it has built the cache, taken by their syntax tree
    (every top-level `if` statement after the one that assigns `cache` whose body raises), on
    the cache the factory returned;
  - the model facts the factory reads (hybrid SWA, pure SWA, Mamba state, DSA) from the
    release's ModelConfig (classify.Release);
  - the draft plan: BaseSpecWorker._build_hicache_draft_plan (speculative/base_spec_worker.py,
    its methods as written, with _draft_model_runners and _can_pack_hicache_mtp), the
    scenario's algorithm as the release's `_resolve_speculative_algorithm_alias` resolves it (a
    self-drafted server's draft model path is the model's directory; EAGLE3 with a Gemma-4
    assistant draft is refused there, SD5), read by the release's SpeculativeAlgorithm, and the draft runner's
    ModelConfig the release's draft worker of that algorithm builds from the model's config
    (the model drafts for itself); as many draft runners as the release builds (DraftRunners:
    multi-layer EAGLE from the scenario's --enable-multi-layer-eagle or the release's
    model-override providers for the target architecture, given `--speculative-algorithm` as
    the scenario names it; the scenario's --speculative-num-steps or the release's
    `_auto_choose_speculative_params`; TpModelWorker._init_multi_layer_eagle_model_runners with
    a ModelRunner stand-in counting them), each with the draft's ModelConfig, as the worker
    gives every runner;
  - what the unified cache's `init_hicache` does that H7 reads: the release's stack strategies
    (`_STRATEGIES` of mem_cache/hybrid_cache/hybrid_pool_assembler.py; the DeepSeek-V4 one must
    come first, so it is the one chosen whenever it matches), its `matches` on the tree's
    components and a pool of the class the KV cache configurator builds for the model
    (DeepSeekV4TokenToKVPool where the release's `is_deepseek_v4` says so), and, where it matches,
    the release's `_deepseek_v4_num_host_pages`;
  - the statements of the KV cache builder after create_tree_cache (kv_cache_builder.py, the
    `if` statements calling maybe_register_hicache_draft and checking host-pool retraction),
    with the release's maybe_register_hicache_draft.

Stood in, and why:
  - the cache classes the factory imports (they build GPU pools): classes of the same names that
    keep nothing but, for UnifiedRadixCache and the classes the release derives from it
    (read from their modules' syntax trees), `enable_session_radix_cache` from the params and
    `components` keyed by the tree components, as UnifiedRadixCache.__init__ sets them, and `supports_mamba()`: whether the factory gave the
    tree the MAMBA component (`ComponentType` members stand in as their names), as
    UnifiedRadixCache answers it; the other classes answer False, as the base class does (no
    other class overrides it); any other method call answers a no-op;
  - the KV pool the strategies look at: an instance of a class named as the configurator's, with
    an SWA pool; the allocator's and pools' token counts `_deepseek_v4_num_host_pages` reads
    (numbers, which it only divides into pages) and a page size of 256, DeepSeek-V4's on CUDA.
    The other strategies' host pools are not built: H7 is the only refusal of the host-pool
    stack compared here;
  - a factory function the factory imports (`_flexkv_factory`): returns the stand-in of the
    cache class that function imports (read from its module's syntax tree);
  - the draft runner's device pool (an object of no pool class, so no draft is a fused one:
    unified memory is off), the target's and the draft runner's request pools without Mamba
    state pools (the packed plan's asserts on separate draft state are not compared), `fused_draft_host_allocator` answering None for it, and the
    sidecar assembly after the UnifiedRadixCache check (`build_hicache_draft_sidecars`: no
    sidecars); 0.5.18's legacy registration on another tree (`_register_legacy_hicache_draft`,
    which builds a host pool from GPU pools and refuses nothing) is a no-op. 0.5.17 registers
    its draft from the scheduler, not after the build: nothing of it runs;
  - the server arguments (`ctx.server_args` in 0.5.17-0.5.18, `get_memory()`/`get_disagg()`/
    `get_serving()` after): the release's field defaults (pd_args.field_defaults) with the
    scenario's hierarchical cache, host memory mode, session flag, eviction policy, streaming
    session, FlexKV, external cache linker, host pool size and retraction backup; a field the
    code reads that has no literal default is an error naming it;
  - `envs`: the scenario's SGLANG_ENABLE_UNIFIED_RADIX_TREE and
    SGLANG_EXPERIMENTAL_CPP_RADIX_TREE, every other variable unset; `use_mlx()` False;
  - the context: `disable_radix_cache` as the PD hook leaves it (a decode server without decode
    radix cache, or `--disable-radix-cache`), chunked prefill on (SGLang sizes it from the GPU),
    `full_tokens_per_layer` 0 exactly for a pure-SWA model, one TP rank.
"""

import ast
import inspect
import os
import sys
import types

import sglang_env
from classify import Release
from draft_geometry import _CudaServerArgs
from pd_args import field_defaults, resolved_name, speculative_hook_function

REGISTRY = os.path.join("mem_cache", "registry.py")
CACHE_CLASS_ROOT = "UnifiedRadixCache"


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


class Anything:
    """Whatever the factory calls on a cache or the worker: accepted, answered with itself."""

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self


class StandInCache:
    """A cache class's instance: only what create_tree_cache's checks read."""

    unified = False

    def __init__(self, *args, **kwargs):
        params = kwargs.get("params", args[0] if args else None)
        self.mamba = False
        if self.unified:
            self.enable_session_radix_cache = params.enable_session_radix_cache
            self.mamba = "MAMBA" in tuple(params.tree_components or ())
            # UnifiedRadixCache keeps a component per tree component; the linker reads their set.
            self.components = dict.fromkeys(params.tree_components or ())

    def supports_mamba(self):
        return self.mamba

    def __getattr__(self, name):
        if name.startswith("__") or name == "enable_session_radix_cache":
            raise AttributeError(name)
        return Anything()


class Names:
    """An enum whose members are compared, not used: each member is its name."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return name


class Arguments:
    """The server arguments: field defaults, the scenario's values, and an error for the rest."""

    def __init__(self, values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        raise SystemExit(f"the tree-cache code reads the server argument {name}, which has no "
                         f"literal default here")


class Env:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class Envs:
    def __init__(self, values):
        self.values = values

    def __getattr__(self, name):
        return Env(self.values.get(name) == "1")


def _parse(path):
    with open(path, encoding="utf-8-sig") as f:
        return ast.parse(f.read(), path)


def _function(tree, name):
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _module_path(srt, module):
    base = os.path.join(os.path.dirname(srt), *module.split(".")[1:])
    return base + ".py" if os.path.exists(base + ".py") else os.path.join(base, "__init__.py")


def _derives_from_unified(srt, module, name):
    path = _module_path(srt, module)
    if not os.path.exists(path):
        return False
    definition = next((n for n in _parse(path).body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return definition is not None and any(
        ast.unparse(base).split(".")[-1] == CACHE_CLASS_ROOT for base in definition.bases)


def built_class(srt, module, name):
    """(module, class name) of the cache class a factory function imports in its body, or None."""
    path = _module_path(srt, module)
    function = _function(_parse(path), name) if os.path.exists(path) else None
    for node in ast.walk(function) if function else ():
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.endswith("Cache"):
                    return node.module, alias.name
    return None


def cache_classes(srt, tree):
    """(module, name) for every name the factory functions import from sglang.srt, with what it
    stands for: ("cache", unified) for a cache class (unified: UnifiedRadixCache or derived from
    it in its own module), ("factory", (class name, unified)) for a factory function that builds
    a cache class, ("other", None) for the rest."""
    found = {}
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang.srt."):
                for alias in node.names:
                    found[(node.module, alias.name)] = None
    for (module, name) in list(found):
        if name[0].isupper() and name.endswith(("Cache", "Cpp")):
            found[(module, name)] = ("cache", name == CACHE_CLASS_ROOT or _derives_from_unified(srt, module, name))
        elif name.endswith("_factory") and (built := built_class(srt, module, name)):
            found[(module, name)] = ("factory", (built[1], _derives_from_unified(srt, *built)))
        else:
            found[(module, name)] = ("other", None)
    return found


def install_stand_ins(classes, host_pools):
    """Stand-in modules in sys.modules for the imports inside the factory functions; the unified
    cache's init_hicache attaches `host_pools`."""
    root = type(CACHE_CLASS_ROOT, (StandInCache,), {
        "unified": True, "init_hicache": lambda self, server_args, params: host_pools.attach(params)})
    made = {}
    for (module, name), (kind, what) in classes.items():
        stand_in = sys.modules.get(module)
        if not isinstance(stand_in, types.ModuleType) or not getattr(stand_in, "__kvpilot_stand_in__", False):
            stand_in = types.ModuleType(module)
            stand_in.__kvpilot_stand_in__ = True
            sys.modules[module] = stand_in
        if name == CACHE_CLASS_ROOT:
            value = root
        elif kind == "cache":
            value = type(name, (root,) if what else (StandInCache,), {})
        elif kind == "factory":
            built = type(what[0], (root,) if what[1] else (StandInCache,), {})
            value = lambda ctx, built=built: built(params=ctx.params)  # noqa: E731
        elif name == "ComponentType":
            value = Names()
        else:
            value = Anything()  # helper functions
        setattr(stand_in, name, value)
        made[name] = value
    return made


def checks(srt, tree):
    """The compiled checks create_tree_cache makes on the cache it built: each top-level `if`
    after the statement that assigns `cache` whose body raises."""
    path = os.path.join(srt, REGISTRY)
    create = _function(tree, "create_tree_cache")
    if create is None:
        _fail(path, "no create_tree_cache")
    built = next((i for i, statement in enumerate(create.body) if any(
        isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "cache" for t in node.targets)
        for node in ast.walk(statement))), None)
    if built is None:
        _fail(path, "create_tree_cache assigns no cache")
    wanted = [s for s in create.body[built + 1:]
              if isinstance(s, ast.If) and any(isinstance(n, ast.Raise) for n in ast.walk(s))]
    if not any("enable_session_radix_cache" in ast.unparse(s.test) for s in wanted):
        _fail(path, "no enable_session_radix_cache check in create_tree_cache")
    module = ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[]))
    return compile(module, path, "exec"), len(wanted)


BUILDER = os.path.join("mem_cache", "kv_cache_builder.py")
WORKER = os.path.join("speculative", "base_spec_worker.py")
WORKER_MODULE = "sglang.srt.speculative.base_spec_worker"


def _flatten(body):
    """Statements in order, the bodies of `with` blocks in place of the blocks."""
    for statement in body:
        if isinstance(statement, ast.With):
            yield from _flatten(statement.body)
        else:
            yield statement


def after_build(srt):
    """The compiled `if` statements of the KV cache builder after its create_tree_cache call
    that register the draft's host backup or check host-pool retraction, and their count."""
    path = os.path.join(srt, BUILDER)
    for function in _parse(path).body:
        if not isinstance(function, ast.FunctionDef):
            continue
        statements = list(_flatten(function.body))
        at = next((i for i, s in enumerate(statements) if "create_tree_cache(" in ast.unparse(s)), None)
        if at is None:
            continue
        wanted = [s for s in statements[at + 1:] if isinstance(s, ast.If) and (
            "maybe_register_hicache_draft" in ast.unparse(s)
            or ("host_pool" in ast.unparse(s.test) and "UnifiedRadixCache" in ast.unparse(s)))]
        module = ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[]))
        return compile(module, path, "exec"), len(wanted)
    _fail(path, "no function calls create_tree_cache")


def _stand_in_module(name, **values):
    module = types.ModuleType(name)
    module.__kvpilot_stand_in__ = True
    module.__dict__.update(values)
    sys.modules[name] = module
    return module


ASSEMBLER = os.path.join("mem_cache", "hybrid_cache", "hybrid_pool_assembler.py")
DSV4_POOL_MODULE = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
DSV4_POOL = "DeepSeekV4TokenToKVPool"


class HostPoolRefusal(Exception):
    """The host-pool stack's refusal, raised through the factory (which it ends)."""


class HostPools:
    """The host-pool stack the unified cache's init_hicache attaches: the release's strategy
    choice for the model's KV pool and, for DeepSeek-V4's, its host page count."""

    def __init__(self, srt, release):
        path = os.path.join(srt, ASSEMBLER)
        self.namespace = sglang_env.exec_subset(path, "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler")
        strategies = self.namespace.get("_STRATEGIES")
        if not strategies or type(strategies[0]).__name__ != "_DeepSeekV4Strategy":
            _fail(path, "_STRATEGIES does not start with _DeepSeekV4Strategy")
        self.strategy = strategies[0]
        self.host_pages = self.namespace.get("_deepseek_v4_num_host_pages")
        if self.host_pages is None:
            _fail(path, "_deepseek_v4_num_host_pages did not define")
        self.namespace["ComponentType"] = Names()
        self.pool_class = type(DSV4_POOL, (), {})
        _stand_in_module(DSV4_POOL_MODULE, **{DSV4_POOL: self.pool_class})
        self.is_deepseek_v4 = release.mc["is_deepseek_v4"]
        self.scenario = None

    def prepare(self, model_config, arguments):
        """The pool the configurator builds for the model, and the scenario's arguments."""
        pool_class = self.pool_class if self.is_deepseek_v4(model_config.hf_config) else type("KVPool", (), {})
        self.scenario = (pool_class(), arguments)
        self.scenario[0].__dict__.update(size=65536, swa_size=8192, swa_page_size=256, swa_kv_pool=object())

    def attach(self, params):
        kvcache, arguments = self.scenario
        if not self.strategy.matches(kvcache, set(params.tree_components or ())):
            return
        # An unset ratio is resolved by the memory hook before the pools are built; it only
        # scales the page counts, which are not compared.
        memory = Arguments(dict(vars(arguments), hicache_ratio=arguments.hicache_ratio or 2.0))
        self.namespace.update(get_memory=lambda: memory)
        wanted = inspect.signature(self.host_pages).parameters
        given = dict(params=types.SimpleNamespace(token_to_kv_pool_allocator=types.SimpleNamespace(size_full=65536)),
                     server_args=memory, kvcache=kvcache, page_size=256, swa_page_size=256)
        try:
            self.host_pages(**{name: value for name, value in given.items() if name in wanted})
        except ValueError as e:
            raise HostPoolRefusal(str(e)) from e


TP_WORKER = os.path.join("managers", "tp_worker.py")
MODEL_RUNNER_MODULE = "sglang.srt.model_executor.model_runner"


class _SpeculativeServerArgs(_CudaServerArgs):
    """Server args as the override providers see them on an NVIDIA server given only
    `--speculative-algorithm` (the model overrides run before the speculative hook resolves the
    name, so they see it as given)."""

    def __init__(self, algorithm):
        self.speculative_algorithm = algorithm


class DraftRunners:
    """How many draft runners the release's speculative worker builds for a server.

    Multi-layer EAGLE (the worker spec_info picks for an `is_eagle()` algorithm with
    enable_multi_layer_eagle) builds one per draft step: the release's own
    TpModelWorker._init_multi_layer_eagle_model_runners runs with a stand-in ModelRunner class.
    enable_multi_layer_eagle is the scenario's flag or what the release's model-override
    providers for the target architecture declare; the step count is the scenario's or the
    release's `_auto_choose_speculative_params` for the target architecture."""

    def __init__(self, srt, release):
        self.srt = srt
        self.release = release
        self.worker_class = None
        self.auto_params = None

    def count(self, scenario, algorithm, notes):
        if not algorithm.is_eagle() or not self.multi_layer(scenario, notes):
            return 1
        arch = self.release.loaded(scenario["config"]).architectures[0]
        steps = scenario.get("numSteps")
        if steps is None:
            steps = self.auto_steps(scenario["speculative"], arch)
        return len(self.built_runners(steps))

    def multi_layer(self, scenario, notes):
        if scenario.get("multiLayerFlag"):
            return True
        hf_config = self.release.loaded(scenario["config"])
        arch = hf_config.architectures[0]
        base, providers = self.release.override_providers(arch)
        enabled = bool(base.MODEL_OVERRIDES.get(arch, {}).get("enable_multi_layer_eagle", False))
        for fn in providers:
            if "enable_multi_layer_eagle" not in inspect.getsource(fn):
                continue
            try:
                declared = sglang_env.quietly(base._invoke_provider, fn,
                                              _SpeculativeServerArgs(scenario["speculative"]), hf_config)
            except Exception as e:
                raise SystemExit(f"override {fn.__qualname__} cannot run here: {type(e).__name__}: {e}") from e
            if declared and "enable_multi_layer_eagle" in declared:
                enabled = bool(declared["enable_multi_layer_eagle"])
                notes.add(f"{fn.__qualname__}: enable_multi_layer_eagle={enabled} under {scenario['speculative']}")
        return enabled

    def auto_steps(self, algorithm, arch):
        if self.auto_params is None:
            self.auto_params = speculative_hook_function(self.srt, "_auto_choose_speculative_params")
            self.auto_params.__globals__["resolving_view"] = lambda args: args
        steps, _topk, _draft_tokens = self.auto_params(types.SimpleNamespace(speculative_algorithm=algorithm), arch)
        return steps

    def built_runners(self, steps):
        path = os.path.join(self.srt, TP_WORKER)
        if self.worker_class is None:
            namespace = sglang_env.exec_subset(path, "sglang.srt.managers.tp_worker",
                                               keep_classes=("TpModelWorker",))
            self.worker_class = namespace.get("TpModelWorker")
            if self.worker_class is None or not hasattr(self.worker_class, "_init_multi_layer_eagle_model_runners"):
                _fail(path, "TpModelWorker._init_multi_layer_eagle_model_runners did not define")
            namespace.update(get_spec=lambda: self.spec, get_schedule=lambda: types.SimpleNamespace(
                mem_fraction_static=0.8))
        self.spec = types.SimpleNamespace(speculative_num_steps=steps)
        # What the method hands each ModelRunner (the worker's config, ports, pools) does not
        # change the count: any attribute it reads but the list and the first runner is None.
        worker_class = type("Worker", (self.worker_class,), {"__getattr__": lambda worker, name: None})
        worker = worker_class.__new__(worker_class)
        worker.__dict__.update(model_runner_list=[], _model_runner=object())
        saved = sys.modules.get(MODEL_RUNNER_MODULE)
        _stand_in_module(MODEL_RUNNER_MODULE, ModelRunner=lambda **kwargs: object())
        try:
            worker._init_multi_layer_eagle_model_runners()
        finally:
            if saved is None:
                sys.modules.pop(MODEL_RUNNER_MODULE, None)
            else:
                sys.modules[MODEL_RUNNER_MODULE] = saved
        return worker.model_runner_list


class DraftPlanner:
    """The release's BaseSpecWorker._build_hicache_draft_plan on a worker whose draft runner
    serves the scenario's model; None where the release has no plan (0.5.17)."""

    def __init__(self, srt, release):
        path = os.path.join(srt, WORKER)
        # dataclasses look the defining module up while HiCacheDraftPlan is made; the builder
        # then imports HiCacheDraftMode from it, the same enum the plan is made of.
        module = _stand_in_module(WORKER_MODULE)
        self.namespace = sglang_env.exec_subset(path, WORKER_MODULE, keep_classes=("BaseSpecWorker",))
        module.__dict__.update(self.namespace)
        _stand_in_module("sglang.srt.mem_cache.unified_draft_pool", fused_draft_host_allocator=lambda pool: None)
        _stand_in_module("sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler",
                         build_hicache_draft_sidecars=lambda **kwargs: ((), ()),
                         validate_fused_hicache_draft=Anything())
        self.worker_class = self.namespace.get("BaseSpecWorker")
        if self.worker_class is None:
            _fail(path, "BaseSpecWorker did not define")
        self.planned = hasattr(self.worker_class, "_build_hicache_draft_plan")
        self.release = release
        self.algorithms = sglang_env.quietly(__import__, "sglang.srt.speculative.spec_info",
                                             fromlist=["SpeculativeAlgorithm"]).SpeculativeAlgorithm
        self.draft_configs = {}
        self.draft_runners = DraftRunners(srt, release)
        self.notes = set()
        self.srt = srt
        self.resolve_alias = None

    def resolved_name(self, scenario):
        """The release's `_resolve_speculative_algorithm_alias` on the upper-cased name (as its
        speculative hook calls it), with the model's own directory as the draft model path where
        the server names the model itself as its draft: EAGLE and NEXTN become FROZEN_KV_MTP for a
        Gemma-4 assistant draft, whose EAGLE3 it refuses."""
        if self.resolve_alias is None:
            self.resolve_alias = speculative_hook_function(self.srt, "_resolve_speculative_algorithm_alias")
        draft = scenario["config"] if scenario.get("selfDrafted") else None
        return resolved_name(self.resolve_alias, scenario["speculative"], draft)

    def plan(self, scenario, arguments):
        if not scenario.get("speculative"):
            return None
        # The speculative hook resolves the name at start-up, before any plan (and in 0.5.17).
        algorithm = self.algorithms.from_string(self.resolved_name(scenario))
        if not self.planned:
            return None
        # The draft worker builds its ModelConfig under the resolved name (NEXTN is EAGLE).
        key = (scenario["config"], algorithm.name)
        if key not in self.draft_configs:
            verdict, mc = self.release.model_config(key[0], draft=True, algorithm=key[1])
            if mc is None:
                raise SystemExit(f"{scenario['id']}: the release's draft ModelConfig did not build: "
                                 f"{verdict.get('error')}")
            self.draft_configs[key] = mc
        runner = types.SimpleNamespace(model_config=self.draft_configs[key], token_to_kv_pool=object(),
                                       req_to_token_pool=types.SimpleNamespace(mamba_pool=None))
        runners = [runner] * self.draft_runners.count(scenario, algorithm, self.notes)
        # target_worker and draft_worker are abstract properties the concrete workers implement.
        worker = type("Worker", (self.worker_class,), {"target_worker": None, "draft_worker": None})()
        worker.target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
            spec_algorithm=algorithm, req_to_token_pool=types.SimpleNamespace(mamba_pool=None)))
        worker.draft_worker = types.SimpleNamespace(draft_runners=runners, model_runner=runner)
        self.namespace.update(get_memory=lambda: arguments, get_disagg=lambda: arguments)
        return sglang_env.quietly(worker._build_hicache_draft_plan)


def main(src, scenarios):
    srt = os.path.join(src, "sglang", "srt")
    release = Release(src)
    path = os.path.join(srt, REGISTRY)
    tree = _parse(path)
    classes = cache_classes(srt, tree)
    namespace = sglang_env.exec_subset(path, "sglang.srt.mem_cache.registry")
    factory = namespace.get("default_radix_cache_factory")
    if factory is None:
        _fail(path, "default_radix_cache_factory did not define")
    code, statements = checks(srt, tree)
    planner = DraftPlanner(srt, release)
    host_pools = HostPools(srt, release)
    builder = sglang_env.exec_subset(os.path.join(srt, BUILDER), "sglang.srt.mem_cache.kv_cache_builder")
    if "_register_legacy_hicache_draft" in builder:
        builder["_register_legacy_hicache_draft"] = lambda **kwargs: None
    built, built_statements = after_build(srt)
    if built_statements and "maybe_register_hicache_draft" not in builder:
        _fail(os.path.join(srt, BUILDER), "maybe_register_hicache_draft did not define")
    notes = [f"{statements} check statement(s) of create_tree_cache, {built_statements} of the builder "
             f"after it"]
    defaults = field_defaults(srt)
    classified = {}
    model_configs = {}
    results = []
    for scenario in scenarios:
        config = scenario["config"]
        if config not in classified:
            verdict, mc = release.model_config(config)
            if mc is None:
                raise SystemExit(f"{scenario['id']}: the release's ModelConfig did not build: "
                                 f"{verdict.get('error')}")
            classified[config], model_configs[config] = verdict, mc
        verdict = classified[config]
        made = install_stand_ins(classes, host_pools)
        arguments = Arguments(dict(
            defaults, enable_hierarchical_cache=scenario["hierarchical"],
            hicache_host_memory_mode="buffer_only" if scenario["bufferOnly"] else "cache",
            enable_session_radix_cache=scenario["session"],
            radix_eviction_policy=scenario["evictionPolicy"],
            enable_streaming_session=scenario["streaming"],
            disaggregation_decode_retraction_backup="host_pool" if scenario["hostPool"] else "cpu_tensor",
            enable_lmcache=False, enable_flexkv=scenario["flexkv"], flexkv_config_file=None,
            enable_unified_cache_external_linker=scenario.get("linker", False), radix_cache_backend=None,
            hicache_size=scenario.get("hicacheSize", 0)))
        host_pools.prepare(model_configs[config], arguments)
        namespace.update(made)
        namespace.update(
            get_memory=lambda: arguments, get_disagg=lambda: arguments, get_serving=lambda: arguments,
            envs=Envs(scenario["env"]),
            use_mlx=lambda: False, logger=Anything())
        params = types.SimpleNamespace(
            enable_session_radix_cache=scenario["session"], req_to_token_pool=object(),
            tree_components=None, component_registry_override=None,
            token_to_kv_pool_allocator=Anything())
        pure = verdict["isHybridSwa"] and verdict["fullLayers"] == 0
        ctx = types.SimpleNamespace(
            server_args=arguments, params=params, is_hybrid_swa=verdict["isHybridSwa"],
            full_tokens_per_layer=0 if pure else 1024, is_hybrid_ssm=verdict["usesSsmState"],
            is_dsa=verdict["isDsa"], enable_hierarchical_cache=scenario["hierarchical"],
            disable_radix_cache=scenario["radixDisabled"], effective_chunked_prefill_size=8192,
            tp_worker=Anything(), model_config=Anything(), tp_size=1, tp_rank=0, tp_group=None)
        try:
            plan = planner.plan(scenario, arguments)
        except (ValueError, NotImplementedError) as e:
            results.append({"id": scenario["id"], "raised": True, "message": str(e), "cache": None,
                            "factoryRefused": None, "notes": notes})
            continue
        try:
            cache = sglang_env.quietly(factory, ctx)
        except HostPoolRefusal as e:
            results.append({"id": scenario["id"], "raised": True, "message": str(e), "cache": CACHE_CLASS_ROOT,
                            "factoryRefused": None, "notes": notes})
            continue
        except ValueError as e:
            # The unified constructor's own refusals (host-pool retraction of SSM or pure-SWA
            # models, R1/R2) come before the checks compared here.
            results.append({"id": scenario["id"], "raised": False, "message": None,
                            "cache": None, "factoryRefused": str(e), "notes": []})
            continue
        scope = dict(namespace, cache=cache, ctx=ctx)
        after = dict(builder, tree_cache=cache, hicache_draft_plan=plan, server_args=arguments, page_size=1,
                     enable_hierarchical_cache=scenario["hierarchical"], UnifiedRadixCache=made[CACHE_CLASS_ROOT],
                     retraction_backup=arguments.disaggregation_decode_retraction_backup, logger=Anything())
        try:
            exec(code, scope)
            exec(built, after)
            raised, message = False, None
        except (ValueError, NotImplementedError) as e:
            raised, message = True, str(e)
        results.append({"id": scenario["id"], "raised": raised, "message": message,
                        "cache": type(cache).__name__, "factoryRefused": None, "notes": notes})
    # The override providers' declarations, shared by every result as the other notes are.
    notes.extend(sorted(planner.notes))
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
