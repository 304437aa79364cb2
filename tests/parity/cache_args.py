#!/usr/bin/env python3
"""One SGLang release's own cache-flag checks on a decode server, on a scenario matrix.

Usage: cache_args.py SGLANG_SRC < scenarios.json    (a JSON list of {"id", "args", "env"
(optional)}, see run.py; the hooks' `envs` read the env)
Prints {"prefixes": [...], "results": [{"id", "error": message or null}]}, as pd_args.py does.

What runs, unchanged and in the order the release's own pipeline calls them (read from
arg_groups/pipeline.py, or ServerArgs.__post_init__ before it existed): `handle_pd_disaggregation`
(arg_groups/pd_disaggregation_hook.py), which on a decode server decides `disable_radix_cache`
(off only with decode radix cache, R12); the cache compatibility check that reads it
(`ServerArgs._handle_cache_compatibility` in 0.5.17-0.5.18, `handle_cache_compatibility` of
arg_groups/kv_cache_hook.py from 0.5.19; LMCache's exclusions, L1-L7); and the HiCache hook
(`ServerArgs._handle_hicache` / `handle_hicache` of arg_groups/hicache_hook.py; the external
cache linker's exclusions, X1-X3). The speculative hook's renaming of the algorithm runs where
the release's pipeline calls that hook (upper-cased, resolved by its
`_resolve_speculative_algorithm_alias`), not its checks; the other hooks of the real pipeline
(platform) do not run: the scenarios set none of the flags they refuse. Stand-ins as in pd_args.py: a plain
object holding the release's field defaults overlaid with the scenario, views that hand it back,
declarations that set fields on it, DP attention off, and `use_mla_backend` answering False
(run.py's manifests name the MHA Llama fixture). The object is a dataclass declaring one field,
`disaggregation_bootstrap_port` with the release's default, which the PD hook's Rust-server
check reads through the record's fields (SGLANG_RUST_SERVER on a prefill server); where that
check asks `rust_server_serves_kv_bootstrap` (0.5.23), the answer is read from the release's
source: whether `get_kv_class` (disaggregation/utils.py) gives the backend a bootstrap server
class that derives from `CommonKVBootstrapServer` (the class definitions under disaggregation/).
A scenario setting a field the release does not declare is not run: argparse refuses the flag
(`unknownFields` in its result).
"""

import ast
import dataclasses
import functools
import glob
import os
import re
import sys
import types

import server_argv
import sglang_env
from pd_args import field_defaults, raised_prefixes, resolved_name, speculative_hook_function

CACHE_HOOK = os.path.join("arg_groups", "kv_cache_hook.py")


def field_fallbacks(srt):
    """name -> the `Arg(fallback=...)` a release declares for a field (0.5.20 on), the value
    its `resolution_result` answers when nothing set the field."""
    fallbacks = {}
    for path in sorted(glob.glob(os.path.join(srt, "arg_groups", "fields", "*.py"))):
        with open(path, encoding="utf-8-sig") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            for call in (n for n in ast.walk(node.annotation) if isinstance(n, ast.Call)):
                for keyword in call.keywords:
                    if keyword.arg == "fallback":
                        try:
                            fallbacks[node.target.id] = ast.literal_eval(keyword.value)
                        except ValueError:
                            continue
    return fallbacks


def resolution_stand_ins(fallbacks):
    """(resolution_result, declare_resolution) of the stand-in context: a field's value (its
    declared fallback when unset), and declarations set on the args object."""
    def resolution_result(args, field, default=None):
        value = getattr(args, field, default)
        return fallbacks.get(field, value) if value is None else value

    def declare_resolution(args, _source, **fields):
        for name, value in fields.items():
            setattr(args, name, value)

    return resolution_result, declare_resolution


def bind_views(function, fallbacks):
    """`function` reading the stand-in context: views that hand the args object back, the
    resolution stand-ins and DP attention off."""
    resolution_result, declare_resolution = resolution_stand_ins(fallbacks)
    scope = dict(function.__globals__, resolving_view=lambda args: args, resolved_view=lambda args: args,
                 declare_resolution=declare_resolution, resolution_result=resolution_result,
                 attn_dp_enabled_of=lambda _view: False, num_dp_ranks_of=lambda _view: 1)
    return types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__,
                              function.__closure__)


@functools.lru_cache(maxsize=None)
def _tree(path):
    """The syntax tree of one source file, parsed once."""
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


@functools.lru_cache(maxsize=None)
def _module(path, name):
    """The namespace of one module run by `sglang_env.exec_subset`, run once."""
    return sglang_env.exec_subset(path, name)


def _function_node(tree, name):
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _kv_cache_hook_function(srt, name):
    """(function, node) of a function of arg_groups/kv_cache_hook.py (0.5.19 on), or of the
    ServerArgs method `_name` (0.5.17-0.5.18), compiled alone with `self` as the args object."""
    hook_path = os.path.join(srt, CACHE_HOOK)
    if os.path.exists(hook_path):
        node = _function_node(_tree(hook_path), name)
        if node is not None:
            return _module(hook_path, "sglang.srt.arg_groups.kv_cache_hook")[name], node
    return _server_args_method(srt, "_" + name)


def _server_args_class(srt):
    path = os.path.join(srt, "server_args.py")
    return next(n for n in _tree(path).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")


def _server_args_method(srt, name):
    """(function, node) of a ServerArgs method compiled alone (`self` is the args object), with
    the module-level names of server_args.py (`envs`, `logger`, ...) as its globals."""
    path = os.path.join(srt, "server_args.py")
    node = _function_node(_server_args_class(srt), name)
    if node is None:
        raise KeyError(f"{path}: ServerArgs has no method {name}")
    scope = dict(_module(path, "sglang.srt.server_args"))
    exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), scope)
    return scope[name], node


def _hicache_hook(srt):
    """(function, node, helper methods) of the release's HiCache hook. 0.5.17-0.5.18 have it as a
    ServerArgs method calling other methods (`_resolve_*`), which are bound to the args object."""
    hook_path = os.path.join(srt, "arg_groups", "hicache_hook.py")
    if os.path.exists(hook_path):
        node = _function_node(_tree(hook_path), "handle_hicache")
        return _module(hook_path, "sglang.srt.arg_groups.hicache_hook")["handle_hicache"], node, {}
    function, node = _server_args_method(srt, "_handle_hicache")
    helpers = {}
    for method in _server_args_class(srt).body:
        if isinstance(method, ast.FunctionDef) and method.name.startswith("_resolve_") \
                and not method.decorator_list:
            helpers[method.name] = _server_args_method(srt, method.name)[0]
    return function, node, helpers


# What the unified-memory hook asks of the model, for the MHA Llama fixture run.py names.
LLAMA = types.SimpleNamespace(is_hybrid_swa=False, is_hybrid_swa_compress=False)


def _pd_backends_method(srt):
    """ServerArgs._unified_memory_pd_transfer_backends (0.5.21 on); earlier releases have none
    and their hook does not call it."""
    try:
        return _server_args_method(srt, "_unified_memory_pd_transfer_backends")[0]
    except KeyError:
        return lambda _self: set()


# How each pipeline calls a step: `run_hook(handle_x, server_args)`, `handle_x(server_args)` or
# `self._handle_x()`.
_STEP_CALL = r"(?:run_hook\(\s*{name}\s*,|\b{name}\(\s*(?:server_args|self)\s*\)|self\._{name}\(\))"


def pipeline_order(srt, steps):
    """`steps` (names like handle_hicache) in the order the release's pipeline calls them."""
    pipeline = os.path.join(srt, "arg_groups", "pipeline.py")
    path = pipeline if os.path.exists(pipeline) else os.path.join(srt, "server_args.py")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    positions = {}
    for step in steps:
        match = re.search(_STEP_CALL.format(name=step), text)
        if match is None:
            raise SystemExit(f"{path}: no call of {step}")
        positions[step] = match.start()
    return sorted(steps, key=positions.get)


def speculative_name_step(srt):
    """What the release's speculative hook does to `--speculative-algorithm` before the hooks
    after it read it: upper-case it and resolve it with `_resolve_speculative_algorithm_alias`
    (NEXTN is EAGLE; no draft model here). The hook's own checks do not run."""
    alias = speculative_hook_function(srt, "_resolve_speculative_algorithm_alias")

    def resolve_name(args):
        if args.speculative_algorithm is not None:
            args.speculative_algorithm = resolved_name(alias, args.speculative_algorithm, None)

    return resolve_name


def _rust_server_serves_kv_bootstrap(srt):
    """The release's `rust_server_serves_kv_bootstrap(transfer_backend)`, answered from its
    source: the bootstrap server class `get_kv_class` maps the backend to (its `elif
    transfer_backend == TransferBackend.X:` branches) derives from CommonKVBootstrapServer."""
    bases = {}
    for path in glob.glob(os.path.join(srt, "disaggregation", "**", "*.py"), recursive=True):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]
    servers = {}
    # The last definition: the ones before it are typing overloads.
    get_kv_class = [n for n in _tree(os.path.join(srt, "disaggregation", "utils.py")).body
                    if isinstance(n, ast.FunctionDef) and n.name == "get_kv_class"][-1]
    for branch in ast.walk(get_kv_class):
        if isinstance(branch, ast.If) and ast.unparse(branch.test).startswith("transfer_backend == TransferBackend."):
            backend = ast.unparse(branch.test).rsplit(".", 1)[-1].lower()
            for mapping in ast.walk(branch):
                if isinstance(mapping, ast.Dict):
                    for key, value in zip(mapping.keys, mapping.values):
                        if key is not None and ast.unparse(key) == "KVClassType.BOOTSTRAP_SERVER":
                            servers[backend] = ast.unparse(value)
    if not servers:
        sys.exit(f"{srt}: get_kv_class maps no transfer backend to a bootstrap server class")

    def derives(name):
        return name == "CommonKVBootstrapServer" or any(derives(base) for base in bases.get(name, ()))

    return lambda transfer_backend: derives(servers.get(transfer_backend, ""))


def _server_args_record(defaults):
    """A dataclass declaring `disaggregation_bootstrap_port` with the release's default, whose
    instances hold every other field as a plain attribute (see the module doc)."""
    return dataclasses.make_dataclass("ServerArgs", [(
        "disaggregation_bootstrap_port", int,
        dataclasses.field(default=defaults.get("disaggregation_bootstrap_port")))])


def main(src, scenarios):
    sglang_env.install(src)
    srt = os.path.join(src, "sglang", "srt")
    pd_path = os.path.join(srt, "arg_groups", "pd_disaggregation_hook.py")
    pd_handle = sglang_env.exec_subset(pd_path, "sglang.srt.arg_groups.pd_disaggregation_hook")[
        "handle_pd_disaggregation"]
    cache_handle, cache_node = _kv_cache_hook_function(srt, "handle_cache_compatibility")
    unified_handle, unified_node = _kv_cache_hook_function(srt, "handle_unified_memory_pool")
    hicache_handle, hicache_node, hicache_helpers = _hicache_hook(srt)
    # The PD hook's module and the HiCache hook's (0.5.19 on) hold the functions they call (the
    # Rust server's bootstrap port check, the host memory mode's validation): their messages count.
    hicache_path = os.path.join(srt, "arg_groups", "hicache_hook.py")
    hicache_messages = _tree(hicache_path) if os.path.exists(hicache_path) else hicache_node
    prefixes = (raised_prefixes(_tree(pd_path)) + raised_prefixes(cache_node) + raised_prefixes(unified_node)
                + raised_prefixes(hicache_messages))
    defaults = field_defaults(srt)
    fallbacks = field_fallbacks(srt)
    resolution_result, declare_resolution = resolution_stand_ins(fallbacks)

    # The hook modules' own helpers (`resolve_*`, `_validate_unified_memory_dcp`) read the same
    # views, and the Llama fixture's model facts.
    for module in (hicache_handle.__globals__, unified_handle.__globals__):
        module.update(resolving_view=lambda args: args, resolved_view=lambda args: args,
                      declare_resolution=declare_resolution, resolution_result=resolution_result,
                      use_mla_backend=lambda _args: False, model_config_of=lambda _args: LLAMA,
                      mambaish_config=lambda _config: None)
    bound = {name: bind_views(function, fallbacks) for name, function in (
        ("handle_pd_disaggregation", pd_handle), ("handle_cache_compatibility", cache_handle),
        ("handle_unified_memory_pool", unified_handle), ("handle_hicache", hicache_handle))}
    bound["handle_speculative_decoding"] = speculative_name_step(srt)
    steps = [bound[name] for name in pipeline_order(srt, list(bound))]
    pd_backends = _pd_backends_method(srt)
    service_path = os.path.join(srt, "managers", "disagg_service.py")
    if os.path.exists(service_path) and _function_node(_tree(service_path), "rust_server_serves_kv_bootstrap"):
        # The hook imports it inside its Rust-server check; the module itself needs the GPU stack.
        disagg_service = types.ModuleType("sglang.srt.managers.disagg_service")
        disagg_service.rust_server_serves_kv_bootstrap = _rust_server_serves_kv_bootstrap(srt)
        sys.modules[disagg_service.__name__] = disagg_service
    record = _server_args_record(defaults)
    results = []
    for scenario in scenarios:
        unknown = sorted(name for name in scenario["args"] if name not in defaults)
        if unknown:
            results.append({"id": scenario["id"], "error": None, "unknownFields": unknown})
            continue
        args = record()
        vars(args).update(dict(defaults, **scenario["args"]))
        # 0.5.17-0.5.18's methods read the resolved ratio through self._resolved() and call
        # their `_resolve_*` helpers on self.
        args._resolved = lambda args=args: args
        args.use_mla_backend = lambda: False
        args._unified_memory_pd_transfer_backends = types.MethodType(pd_backends, args)
        for name, helper in hicache_helpers.items():
            setattr(args, name, types.MethodType(helper, args))
        try:
            with server_argv.environment(scenario.get("env", {})):
                for step in steps:
                    sglang_env.quietly(step, args)
            error = None
        except (ValueError, AssertionError, NotImplementedError) as e:
            error = str(e)
        results.append({"id": scenario["id"], "error": error})
    return {"prefixes": prefixes, "results": results}


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
