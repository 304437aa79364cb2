#!/usr/bin/env python3
"""One SGLang release's context-parallel checks on a server's command line: the model checks of
prefill and attention CP (DSA models, Nemotron-H, LongCat-Flash, DeepSeek-V3.2, MiMo-V2) and of
DSA cache layer split, the strategy prefill CP needs, and that attention CP divides TP.

Usage: context_parallel.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv", "env"}
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. Exits non-zero, naming the file, when a piece of the release's code this needs
is missing or fails on anything but a refusal.

What runs, unchanged:
  - first, where the DeepSeek-family override provider (`_deepseek_family_overrides`) is among
    the release's providers for the config's architecture: its DSA branch's prefill-CP statement
    (inside `if is_deepseek_dsa(hf_config):` and its CUDA-or-ROCm test, taken from the syntax
    tree) up to its assert that TP fits one machine, with the provider module's globals: up to
    0.5.21 it asserts that interleave (or no strategy) runs without DP, from 0.5.22 it reads the
    attention DP size through the release's `context_parallel_attn_dp_size`; the providers run
    before the model hook's branches in every release;
  - on DeepSeek-V4 (the model hook's branch that calls it), `validate_deepseek_v4_cp`
    (arg_groups/deepseek_v4_hook.py, from the syntax tree) up to its assert that TP fits one
    machine: the strategy it allows, the DP it refuses, and the CP size it declares, which the
    context-parallel hook then reads;
  - the model hook's refusal of DSA cache layer split on a model without DSA (its top-level
    statement), before the branch that calls `validate_deepseek_v4_cp`;
  - the model hook's refusal of a DSA model's prefill CP on a PD decode server and the DSA cache
    layer split's checks after it (the statements of `handle_model_specific_adjustments`, or
    `ServerArgs._handle_model_specific_adjustments` before 0.5.19, inside its
    `if is_deepseek_dsa(hf_config):` branch, from the prefill-CP one through the layer split's
    refusal of pipeline stages, taken from the syntax tree), where the config's architecture is in
    the list of the branch around it and the release's `is_deepseek_dsa` says it is a DSA model;
    the hook runs before the CP hook in every release, and its statements before those need the
    GPU;
  - the release's config loader on config.json (`classify.Release.load`) and its text config
    (`get_hf_text_config`), which the hook reads through the model config;
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv, then,
    from 0.5.22, `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), whole;
  - the hook's statements, from its first up to the one that asserts that attention CP (and the
    DP size times it) divides TP, or, under prefill CP on a model one of whose override
    providers chooses the CP size (the DeepSeek family's, which this harness does not run), up
    to the one that refuses prefill CP without a strategy: `handle_context_parallelism` (arg_groups/parallel_hook.py, 0.5.19 on) or
    `ServerArgs._handle_context_parallelism` (server_args.py, before), with the module's own
    globals: `_boundary_parallelism_overrides` (0.5.21 on), `validate_prefill_cp_platform`,
    `resolve_cp_tp_group_sharing` (0.5.22 on), the release's `is_deepseek_dsa` and, where the
    hook reads it (up to 0.5.19), `CP_V2_DEFAULT_MODEL_CLASSES` (layers/cp/utils.py, statement by
    statement), and `envs` reading the scenario's env.

Stood in: the model config is the loaded config, its text config and the release's
`is_multimodal_model` of its architectures; `resolving_view` and `resolved_view` read the parsed
namespace (`self._resolved()` up to 0.5.18), on which `declare_resolution` sets fields; `run_hook`
calls the hook; `get_platform()`
(and `is_npu()`, `is_xpu()`) is a CUDA GPU's (kvpilot's servers run on NVIDIA GPUs), so the
platform checks for HIP, NPU and MUSA pass.
"""

import ast
import inspect
import os
import logging
import sys
import types

import server_argv
import sglang_env

HOOKS = (
    (os.path.join("arg_groups", "parallel_hook.py"), "sglang.srt.arg_groups.parallel_hook", None,
     "handle_context_parallelism"),
    ("server_args.py", "sglang.srt.server_args", "ServerArgs", "_handle_context_parallelism"),
)
MODEL_HOOKS = (
    (os.path.join("arg_groups", "model_hook.py"), "sglang.srt.arg_groups.model_hook", None,
     "handle_model_specific_adjustments"),
    ("server_args.py", "sglang.srt.server_args", "ServerArgs", "_handle_model_specific_adjustments"),
)
LAST_CHECK = "--cp-strategy must be set when --enable-prefill-cp is enabled."
DIVIDES_CHECK = "tp_size must be divisible by attn_cp_size"
DSA_DECODE_CP = "CP is only supported for prefill when PD disaggregation"
LAYER_SPLIT_PP = "--enable-dsa-cache-layer-split is not supported with"
LAYER_SPLIT_WITHOUT_DSA = "--enable-dsa-cache-layer-split is only supported for DSA"
CP_UTILS = os.path.join("layers", "cp", "utils.py")
FAMILY_PROVIDER = "_deepseek_family_overrides"
SINGLE_MACHINE = "Context parallel only supports single machine"
DSV4_HOOK = os.path.join("arg_groups", "deepseek_v4_hook.py")
DSV4_CP = "validate_deepseek_v4_cp"


class CudaPlatform:
    """A CUDA GPU's platform as `get_platform()` describes it: `is_cuda`, and no other `is_*`."""

    def __getattr__(self, name):
        if name.startswith("is_"):
            return name == "is_cuda"
        raise AttributeError(name)


def _hook_statements(srt):
    """(the hook's file, its module name, the source of its statements up to DIVIDES_CHECK, and
    those statements compiled: up to LAST_CHECK, and up to DIVIDES_CHECK) of the release."""
    path, module, _name, fn = server_argv.hook_function(srt, HOOKS, "context-parallel hook")
    strategy = server_argv.statements_through(path, fn, LAST_CHECK, "refuses prefill CP without a strategy")
    divides = server_argv.statements_through(path, fn, DIVIDES_CHECK, "asserts that attention CP divides TP")
    compiled = [compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path, "exec")
                for body in (strategy, divides)]
    return path, module, ast.unparse(ast.Module(body=divides, type_ignores=[])), *compiled


def _family_resolves_cp(release, arch):
    """Whether one of the release's model override providers for `arch` chooses the attention CP
    size (the DeepSeek family's, under prefill CP), which the divisibility asserts then read."""
    _base, providers = release.override_providers(arch)
    return any("attn_cp_size" in inspect.getsource(fn) for fn in providers)


def _family_prefill_cp(provider):
    """The DeepSeek-family provider's DSA prefill-CP statement (nested in its DSA and platform
    tests) through its assert that TP fits one machine, compiled."""
    path = inspect.getsourcefile(provider)
    tree = ast.parse(inspect.getsource(provider), path)
    for dsa in ast.walk(tree):
        if not (isinstance(dsa, ast.If) and ast.unparse(dsa.test) == "is_deepseek_dsa(hf_config)"):
            continue
        for platform in (n for n in dsa.body if isinstance(n, ast.If)):
            block = next((n for n in platform.body if isinstance(n, ast.If)
                          and ast.unparse(n.test).endswith("enable_prefill_cp")), None)
            if block is None:
                continue
            at = next((i for i, n in enumerate(block.body) if SINGLE_MACHINE in ast.unparse(n)), None)
            if at is None:
                break
            nested = ast.If(test=dsa.test, orelse=[], body=[ast.If(test=platform.test, orelse=[], body=[
                ast.If(test=block.test, body=block.body[:at + 1], orelse=[])])])
            return compile(ast.fix_missing_locations(ast.Module(body=[nested], type_ignores=[])), path, "exec")
    raise SystemExit(f"{path}: {FAMILY_PROVIDER} no longer asserts, under a DSA model's prefill CP, "
                     "that TP fits one machine")


def _dsv4_cp_validation(srt):
    """(the test of the model hook's `if` that calls validate_deepseek_v4_cp, and that function
    through its assert that TP fits one machine, annotations dropped), compiled."""
    path, _module, name, hook = server_argv.hook_function(srt, MODEL_HOOKS, "model hook")
    callers = [n.test for n in ast.walk(hook) if isinstance(n, ast.If) and any(
        isinstance(c, ast.Call) and ast.unparse(c.func) == DSV4_CP for s in n.body for c in ast.walk(s))]
    if len(callers) != 1:
        raise SystemExit(f"{path}: {len(callers)} `if` statements in {name} call {DSV4_CP}; the harness expects one")
    applies = compile(ast.Expression(callers[0]), path, "eval")
    hook_path = os.path.join(srt, DSV4_HOOK)
    with open(hook_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), hook_path)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == DSV4_CP), None)
    if fn is None:
        raise SystemExit(f"{hook_path}: no {DSV4_CP}")
    fn.body = server_argv.statements_through(hook_path, fn, SINGLE_MACHINE, "asserts that TP fits one machine")
    sglang_env.drop_annotations(fn)
    return applies, compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), hook_path, "exec")


def model_hook_dsa_branches(srt):
    """(the model hook's file and name, then (the architectures of each of its DeepSeek-family
    branches, each `if is_deepseek_dsa(hf_config):` statement inside it)) of the release."""
    path, _module, name, fn = server_argv.hook_function(srt, MODEL_HOOKS, "model hook")
    branches = []
    for family in ast.walk(fn):
        if not (isinstance(family, ast.If) and isinstance(family.test, ast.Compare)
                and ast.unparse(family.test.left) == "model_arch"
                and isinstance(family.test.comparators[0], (ast.List, ast.Tuple))):
            continue
        archs = {c.value for c in family.test.comparators[0].elts if isinstance(c, ast.Constant)}
        branches += [(archs, dsa) for dsa in ast.walk(family)
                     if isinstance(dsa, ast.If) and ast.unparse(dsa.test) == "is_deepseek_dsa(hf_config)"]
    return (path, name), branches


def _dsa_prefill_cp_check(srt):
    """(the architectures of the model hook's DeepSeek-family branch, its DSA branch's statements
    from the one refusing prefill CP on a PD decode server through the DSA cache layer split's
    last check, which refuses pipeline stages, compiled) of the release."""
    (path, name), branches = model_hook_dsa_branches(srt)
    for archs, dsa in branches:
        first = next((i for i, n in enumerate(dsa.body) if DSA_DECODE_CP in ast.unparse(n)), None)
        if first is None:
            continue
        last = next((i for i, n in enumerate(dsa.body) if LAYER_SPLIT_PP in ast.unparse(n)), None)
        if last is None or last < first:
            raise SystemExit(f"{path}: {name} no longer checks DSA cache layer split after DSA prefill CP")
        body = ast.Module(body=dsa.body[first:last + 1], type_ignores=[])
        return archs, compile(ast.fix_missing_locations(body), path, "exec")
    raise SystemExit(f"{path}: {name} no longer refuses a DSA model's prefill CP on a decode server")


def _layer_split_without_dsa(srt):
    """The model hook's top-level statement refusing DSA cache layer split on a model without DSA,
    compiled."""
    path, _module, name, fn = server_argv.hook_function(srt, MODEL_HOOKS, "model hook")
    checks = [n for n in fn.body if isinstance(n, ast.If) and LAYER_SPLIT_WITHOUT_DSA in ast.unparse(n)]
    if len(checks) != 1:
        raise SystemExit(f"{path}: {name} refuses DSA cache layer split without DSA in {len(checks)} statements")
    return compile(ast.fix_missing_locations(ast.Module(body=checks, type_ignores=[])), path, "exec")


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)

    release.expose_model_config()
    is_multimodal = release.mc.get("is_multimodal_model")
    if is_multimodal is None:
        raise SystemExit(f"{srt}: configs/model_config.py did not define is_multimodal_model")

    path, module, source, through_strategy, through_divides = _hook_statements(srt)
    deprecated = server_argv.deprecated_dp_attention(srt)
    dsa_family, dsa_check = _dsa_prefill_cp_check(srt)
    layer_split_without_dsa = _layer_split_without_dsa(srt)
    is_deepseek_dsa = release.mc["is_deepseek_dsa"]
    dsv4_applies, dsv4_code = _dsv4_cp_validation(srt)
    base, _providers = release.override_providers("DeepseekV4ForCausalLM")
    dsv4_globals = dict(server_argv.VIEWS, get_platform=CudaPlatform, is_npu=lambda: False,
                        logger=logging.getLogger("dsv4"),
                        context_parallel_attn_dp_size=getattr(base, "context_parallel_attn_dp_size", None))
    exec(dsv4_code, dsv4_globals)
    family_blocks = {}
    if "CP_V2_DEFAULT_MODEL_CLASSES" in source:
        # The CP-v2 defaults (up to 0.5.19): the layers package is stubbed, so the constant comes
        # from the release's module, statement by statement.
        cp_utils = sglang_env.module_from_subset(os.path.join(srt, CP_UTILS), "sglang.srt.layers.cp.utils")
        if not isinstance(getattr(cp_utils, "CP_V2_DEFAULT_MODEL_CLASSES", None), frozenset):
            raise SystemExit(f"{os.path.join(srt, CP_UTILS)}: CP_V2_DEFAULT_MODEL_CLASSES did not define")
        sys.modules["sglang.srt.layers.cp.utils"] = cp_utils
    hook_globals = server_argv.hook_globals(path, module)
    identity = dict(server_argv.VIEWS, get_platform=CudaPlatform)
    sharing = hook_globals.get("resolve_cp_tp_group_sharing")
    if sharing is not None:
        sharing.__globals__.update(identity)
    platform_check = hook_globals.get("validate_prefill_cp_platform")
    if platform_check is not None:
        platform_check.__globals__.update(identity)

    results = []
    for scenario in scenarios:
        hf_config = release.loaded(scenario["config"])
        model_config = types.SimpleNamespace(
            hf_config=hf_config, hf_text_config=release.get_hf_text_config(hf_config),
            is_multimodal=bool(is_multimodal(hf_config.architectures)))
        server = parser.parse_args(scenario["argv"])
        server.get_model_config = lambda model_config=model_config: model_config
        server._resolved = lambda server=server: server
        namespace = dict(hook_globals, **identity, cfg=server, server_args=server, self=server, hf_config=hf_config,
                         is_deepseek_dsa=is_deepseek_dsa,
                         model_config_of=lambda _args, model_config=model_config: model_config,
                         run_hook=lambda hook, args: hook(args))
        # Where the family's override chooses the CP size under prefill CP, the asserts would read
        # a size this harness does not resolve: the hook runs up to the strategy check there.
        statements = through_strategy if server.enable_prefill_cp and _family_resolves_cp(
            release, hf_config.architectures[0]) else through_divides

        arch = hf_config.architectures[0]
        provider = next((fn for fn in release.override_providers(arch)[1] if fn.__name__ == FAMILY_PROVIDER), None)
        if provider is not None and arch not in family_blocks:
            family_blocks[arch] = _family_prefill_cp(provider)
        family = provider and dict(provider.__globals__, cfg=server, server_args=server, hf_config=hf_config,
                                   overrides={}, is_deepseek_dsa=is_deepseek_dsa, get_platform=CudaPlatform,
                                   is_npu=lambda: False, is_xpu=lambda: False)
        dsv4 = eval(dsv4_applies, {"model_arch": arch})

        def run(namespace=namespace, statements=statements, server=server, family=family, dsv4=dsv4,
                family_block=family_blocks.get(arch), model_config=model_config,
                dsa=arch in dsa_family and is_deepseek_dsa(hf_config)):
            if deprecated is not None:
                deprecated(server)
            if family:
                exec(family_block, family)
            exec(layer_split_without_dsa, namespace)
            if dsv4:
                dsv4_globals["model_config_of"] = lambda _args, config=model_config: config
                dsv4_globals[DSV4_CP](server)
            if dsa:
                exec(dsa_check, namespace)
            exec(statements, namespace)

        results.append(server_argv.refusal_result(path, scenario, run))
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
