#!/usr/bin/env python3
"""One SGLang release's speculative-hook checks of a server's parallelism: DSpark's pipeline
stages (SD6) and the DP attention of STANDALONE and NGRAM drafts (SD7, SD8).

Usage: speculative_checks.py SGLANG_SRC < scenarios.json
  scenario: {"id", "algorithm", "role", "pp", "dp", "dpAttention"}
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
    the three checks, with the hook module's own globals (`attn_dp_enabled_of` from 0.5.22).

Stood in: the server is a namespace of the scenario's settings whose other fields read None;
`resolving_view` and `resolved_view` hand it back, and `declare_resolution` sets its fields.
"""

import ast
import json
import os
import sys
import types

import pd_args
import sglang_env

HOOK = os.path.join("arg_groups", "speculative_hook.py")
PARALLEL_HOOK = os.path.join("arg_groups", "parallel_hook.py")
HOOK_MODULE = "sglang.srt.arg_groups.speculative_hook"
CHECKS = ("DSpark pipeline parallelism requires PD prefill",
          "standalone speculative decoding does not support dp attention",
          "ngram speculative decoding does not support dp attention")


class Server(types.SimpleNamespace):
    """A server's fields: the scenario's, None for any other."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


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
        if wanted:
            found[fn.name] = compile(ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[])),
                                     path, "exec")
    if not any("standalone" in ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Raise)):
        _fail(path, "the STANDALONE DP-attention check moved out of the speculative hook")
    return found


def _declare(server, _source, **fields):
    for name, value in fields.items():
        setattr(server, name, value)


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    src = argv[1]
    scenarios = json.load(sys.stdin)
    srt = os.path.join(src, "sglang", "srt")
    sglang_env.install(src)
    hook_path = os.path.join(srt, HOOK)
    resolve_alias = pd_args.speculative_hook_function(srt, "_resolve_speculative_algorithm_alias")
    hook = resolve_alias.__globals__
    checks = _check_statements(hook_path)
    handlers = sorted(name for name in hook if name.startswith("_handle_"))
    parallel_path = os.path.join(srt, PARALLEL_HOOK)
    deprecated_dp = None
    if os.path.exists(parallel_path):
        parallel = sglang_env.exec_subset(parallel_path, "sglang.srt.arg_groups.parallel_hook")
        deprecated_dp = parallel.get("handle_deprecated_dp_attention")
        if deprecated_dp is not None:
            deprecated_dp.__globals__.update(resolving_view=lambda view: view, declare_resolution=_declare)
    spec_info = sglang_env.quietly(__import__, "sglang.srt.speculative.spec_info",
                                   fromlist=["SpeculativeAlgorithm"])
    stand_ins = {"resolving_view": lambda view: view, "resolved_view": lambda view: view,
                 "declare_resolution": _declare}
    results = []
    for scenario in scenarios:
        resolved = pd_args.resolved_name(resolve_alias, scenario["algorithm"], None)
        algorithm = spec_info.SpeculativeAlgorithm.from_string(resolved)
        server = Server(speculative_algorithm=resolved, disaggregation_mode=scenario["role"],
                        pp_size=scenario["pp"], dp_size=scenario["dp"],
                        enable_dp_attention=scenario["dpAttention"], attn_dp_size=1, attn_cp_size=1,
                        device="cuda")
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
        for handler in called:
            if handler in checks:
                namespace = dict(hook, **stand_ins, cfg=server, server_args=server, view=server, self=server)
                try:
                    exec(checks[handler], namespace)
                except ValueError as e:
                    message = str(e)
        results.append({"id": scenario["id"], "raised": message is not None, "message": message,
                        "handler": called[0] if called else None})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
