#!/usr/bin/env python3
"""One SGLang release's checks of a speculating server's parallelism: the speculative hook's
(DFLASH's and DSpark's pipeline stages SD3, SD6 and SD9, the DP attention of STANDALONE and NGRAM drafts SD7 and SD8,
of DFLASH drafts SD10-SD12 and of DSpark drafts SD13-SD16, and DFLASH's block size and draft
window DB1-DB3), then the validation hook's of
pipeline stages with speculative decoding (PP1-PP6) and of mixed chunked prefill with it (which
no server reaches: each handler turns mixed chunked prefill off where its algorithm cannot run it).

Usage: speculative_checks.py SGLANG_SRC < scenarios.json
  scenario: {"id", "algorithm", "role", "pp", "dp", "dpAttention", "dpLmHead", "attnCp", "moeA2a",
             "multiLayer", "adaptive", "env", and optionally "blockSize", "draftTokens", "windowSize"}
Prints [{"id", "raised", "message", "handler"}] on stdout: the message of the first of those
checks that refuses the server (or None), and the handler the release dispatches the algorithm
to. Exits non-zero, naming the file, when a piece of the release's code this needs is missing.

What runs, unchanged:
  - the name's resolution as the speculative hook makes it (upper-cased, then
    `_resolve_speculative_algorithm_alias` without a draft model) and
    `SpeculativeAlgorithm.from_string`;
  - from 0.5.22, `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), which turns the
    deprecated `--dp-size N --enable-dp-attention` into `--attn-dp-size N` before any hook reads
    the DP layout;
  - the algorithm's own `handle_server_args` (speculative/spec_info.py), with the speculative
    hook's `_handle_*` functions recording which one it calls;
  - in that handler, each statement of its body (from the hook's syntax tree) that holds one of
    those checks or turns mixed chunked prefill off, and the plain assignments and imports of the
    names they read, with the hook module's own globals (`attn_dp_enabled_of` from 0.5.22) and
    `envs` reading the scenario's env;
  - then, as at the end of start-up, the post-process passes `_pipeline_parallel_overlap_disable`
    and `_data_parallelism_defaults` (arg_groups/overrides.py) and the validation hook's
    `if <pp_size> > 1:` statement (from `check_server_args`'s syntax tree: its asserts up to
    0.5.20, `check_pipeline_parallel_compat` from 0.5.21) and its mixed-chunk assert, with the
    module's own globals and `envs` reading the scenario's env.

Stood in: the server is a namespace of the scenario's settings whose other fields read None;
`resolving_view` and `resolved_view` hand it back, and `declare_resolution` sets its fields;
`get_platform()` is a CUDA GPU's.
"""

import ast
import os
import sys
import types

import context_parallel
import parallel_shape
import pd_args
import server_argv
import sglang_env

HOOK = os.path.join("arg_groups", "speculative_hook.py")
HOOK_MODULE = "sglang.srt.arg_groups.speculative_hook"
CHECKS = ("DSpark pipeline parallelism requires PD prefill",
          "Currently DFLASH speculative decoding only supports pp_size",
          "Currently DSpark speculative decoding only supports pp_size",
          "standalone speculative decoding does not support dp attention",
          "ngram speculative decoding does not support dp attention",
          "DFLASH speculative decoding does not support dp",
          "DFLASH with dp attention",
          "DSpark with dp attention",
          "DFLASH requires --speculative-dflash-block-size to be positive",
          "--speculative-draft-window-size must be >= ")


class Server(types.SimpleNamespace):
    """A server's fields: the scenario's, None for any other."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


def _defined(statement):
    """The names a plain assignment or an import statement defines (none for other statements)."""
    if isinstance(statement, ast.Assign):
        return {t.id for t in statement.targets if isinstance(t, ast.Name)}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
    return set()


def _check_statements(path):
    """{handler name: compiled statements of its body that raise one of CHECKS}."""
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("_handle_")):
            continue
        wanted = [statement for statement in fn.body
                  if any(isinstance(n, ast.Raise) and any(check in ast.unparse(n) for check in CHECKS)
                         for n in ast.walk(statement))]
        # Its statements that turn mixed chunked prefill off, which the validation hook reads,
        # then the plain assignments and imports of the names those statements read
        # (`_is_npu = cfg.device...`, `algo = SpeculativeAlgorithm.from_string(...)`).
        wanted += [statement for statement in fn.body
                   if "enable_mixed_chunk" in ast.unparse(statement)
                   and not any(isinstance(n, ast.Raise) for n in ast.walk(statement))]
        while True:
            read = {n.id for statement in wanted for n in ast.walk(statement) if isinstance(n, ast.Name)}
            defining = [statement for statement in fn.body if statement not in wanted and read & _defined(statement)]
            if not defining:
                break
            wanted += defining
        wanted.sort(key=lambda statement: statement.lineno)
        if wanted:
            found[fn.name] = compile(ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[])),
                                     path, "exec")
    if not any("standalone" in ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Raise)):
        _fail(path, "the STANDALONE DP-attention check moved out of the speculative hook")
    return found


def _validation_statements(srt):
    """(file, module globals, the validation hook's `if <pp_size> > 1:` statement and its
    `if <speculative_algorithm> is not None:` one about mixed chunked prefill, compiled in source
    order)."""
    path, module, name, fn = server_argv.hook_function(srt, parallel_shape.VALIDATION_HOOKS, "validation hook")
    pipeline = [n for n in fn.body if isinstance(n, ast.If) and ast.unparse(n.test).endswith("pp_size > 1")]
    mixed = [n for n in fn.body if isinstance(n, ast.If) and ast.unparse(n.test).endswith("speculative_algorithm is not None")
             and "enable_mixed_chunk" in ast.unparse(n)]
    if len(pipeline) != 1 or len(mixed) != 1:
        _fail(path, f"{name} no longer checks pipeline parallelism and mixed chunked prefill with speculative decoding")
    module_globals = server_argv.hook_globals(path, module)
    body = sorted(pipeline + mixed, key=lambda n: n.lineno)
    return path, module_globals, compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path,
                                         "exec")


def _post_process(overrides, server, name):
    """Applies the release's post-process pass `name` (arg_groups/overrides.py) to `server`."""
    for field, value in getattr(overrides, name)(server).items():
        setattr(server, field, value)


def _validate_pipeline(overrides, server, pipeline, module_globals, scenario, path):
    """The validation hook's pipeline checks on `server` after the passes before them: the
    message of the first that refuses it, or None."""
    for name in ("_pipeline_parallel_overlap_disable", "_data_parallelism_defaults"):
        _post_process(overrides, server, name)
    try:
        exec(pipeline, dict(module_globals, cfg=server, server_args=server, self=server))
    except AssertionError as e:
        return str(e)
    except Exception as e:
        _fail(path, f"the pipeline checks failed on {scenario['id']}: {type(e).__name__}: {e}")
    return None


def main(src, scenarios):
    srt = os.path.join(src, "sglang", "srt")
    sglang_env.install(src)
    hook_path = os.path.join(srt, HOOK)
    resolve_alias = pd_args.speculative_hook_function(srt, "_resolve_speculative_algorithm_alias")
    hook = resolve_alias.__globals__
    checks = _check_statements(hook_path)
    handlers = sorted(name for name in hook if name.startswith("_handle_"))
    deprecated_dp = server_argv.deprecated_dp_attention(srt)
    pipeline_path, pipeline_globals, pipeline = _validation_statements(srt)
    pipeline_globals.update(server_argv.VIEWS, get_platform=context_parallel.CudaPlatform)
    overrides = sglang_env.quietly(__import__, "sglang.srt.arg_groups.overrides", fromlist=["overrides"])
    spec_info = sglang_env.quietly(__import__, "sglang.srt.speculative.spec_info",
                                   fromlist=["SpeculativeAlgorithm"])
    results = []
    for scenario in scenarios:
        resolved = pd_args.resolved_name(resolve_alias, scenario["algorithm"], None)
        algorithm = spec_info.SpeculativeAlgorithm.from_string(resolved)
        server = Server(speculative_algorithm=resolved, disaggregation_mode=scenario["role"],
                        pp_size=scenario["pp"], dp_size=scenario["dp"],
                        enable_dp_attention=scenario["dpAttention"], attn_dp_size=1, attn_cp_size=1,
                        device="cuda", enable_multi_layer_eagle=scenario["multiLayer"],
                        speculative_adaptive=scenario["adaptive"], disable_overlap_schedule=False,
                        enable_dp_lm_head=scenario["dpLmHead"], moe_a2a_backend=scenario["moeA2a"] or "none",
                        enable_mixed_chunk=scenario["mixedChunk"])
        if scenario["attnCp"] != 1:
            server.attn_cp_size = scenario["attnCp"]
        for field, key in (("speculative_dflash_block_size", "blockSize"),
                           ("speculative_num_draft_tokens", "draftTokens"),
                           ("speculative_draft_window_size", "windowSize")):
            if scenario.get(key) is not None:
                setattr(server, field, scenario[key])
        if deprecated_dp is not None:
            deprecated_dp(server)
        called = []
        recorder = types.ModuleType(HOOK_MODULE)
        for name in handlers:
            setattr(recorder, name, lambda _args, name=name: called.append(name))
        real = sys.modules.get(HOOK_MODULE)
        sys.modules[HOOK_MODULE] = recorder
        try:
            algorithm.handle_server_args(server)
        finally:
            if real is None:
                del sys.modules[HOOK_MODULE]
            else:
                sys.modules[HOOK_MODULE] = real
        message = None
        with server_argv.environment(scenario["env"]):
            for handler in called:
                if handler in checks:
                    namespace = dict(hook, **server_argv.VIEWS, cfg=server, server_args=server, view=server,
                                     self=server)
                    try:
                        exec(checks[handler], namespace)
                    except ValueError as e:
                        message = str(e)
            if message is None:
                message = _validate_pipeline(overrides, server, pipeline, pipeline_globals, scenario, pipeline_path)
        results.append({"id": scenario["id"], "raised": message is not None, "message": message,
                        "handler": called[0] if called else None})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
