#!/usr/bin/env python3
"""One SGLang release's HiSparse checks of the model and the radix cache on a server's command line.

Usage: hisparse.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv"}
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. Exits non-zero, naming the file, when a piece of the release's code this needs is
missing or fails on anything but a refusal.

What runs, unchanged, in the release's order:
  - `handle_pd_disaggregation` (arg_groups/pd_disaggregation_hook.py), whole: on a PD decode
    server it turns the radix cache off unless decode radix cache is on, which it refuses with
    HiSparse;
  - `validate_hisparse` (arg_groups/hisparse_hook.py), the HiSparse validation pass, from its
    first statement to its radix-cache assert (taken from its syntax tree): the model's
    architecture, by the release's own `is_deepseek_dsa`, `is_deepseek_v4` and (0.5.21 on)
    `is_minimax_sparse`, then the radix cache;
  - the release's config loader on config.json (`classify.Release.load`) and its argument parser
    (as server_argv.py builds it) on the scenario's argv.

Stood in: the views read the parsed namespace, on which declarations set fields; the model config
is the loaded config (`model_config_of`, and `get_model_config` in 0.5.17); the platform is a CUDA
GPU's; the PD hook sees no attention DP.
"""

import ast
import contextlib
import io
import os
import sys
import types

import context_parallel
import server_argv
import sglang_env

PD_HOOK = (os.path.join("arg_groups", "pd_disaggregation_hook.py"), "sglang.srt.arg_groups.pd_disaggregation_hook",
           None, "handle_pd_disaggregation")
HISPARSE_HOOK = (os.path.join("arg_groups", "hisparse_hook.py"), "sglang.srt.arg_groups.hisparse_hook", None,
                 "validate_hisparse")
RADIX_CHECK = "requires --disable-radix-cache"


def _validation(srt):
    """(file, module globals, `validate_hisparse`'s statements up to its radix-cache assert as a
    function `check(server_args)`, compiled)."""
    path, module, _name, fn = server_argv.hook_function(srt, (HISPARSE_HOOK,), "HiSparse validation")
    statements = server_argv.statements_through(path, fn, RADIX_CHECK,
                                                "asserts that HiSparse runs without a radix cache")
    # The statements as a function of their own (they return early without HiSparse).
    parameters = ast.arguments(posonlyargs=[], args=[ast.arg(arg=a.arg) for a in fn.args.args], kwonlyargs=[],
                               kw_defaults=[], defaults=[])
    check = ast.FunctionDef(name="check", args=parameters, body=statements, decorator_list=[],
                            returns=None, type_params=[])
    body = ast.Module(body=[ast.copy_location(check, fn)], type_ignores=[])
    return path, server_argv.hook_globals(path, module), compile(ast.fix_missing_locations(body), path, "exec")


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    release.expose_model_config()
    pd_path, pd_module, _name, _fn = server_argv.hook_function(srt, (PD_HOOK,), "PD hook")
    pd_handle = server_argv.hook_globals(pd_path, pd_module)["handle_pd_disaggregation"]
    pd_scope = dict(pd_handle.__globals__, **server_argv.VIEWS, attn_dp_enabled_of=lambda _view: False,
                    num_dp_ranks_of=lambda _view: 1)
    pd_bound = types.FunctionType(pd_handle.__code__, pd_scope, pd_handle.__name__, pd_handle.__defaults__,
                                  pd_handle.__closure__)
    path, hook_globals, validation = _validation(srt)

    results = []
    for scenario in scenarios:
        hf_config = release.loaded(scenario["config"])
        model_config = types.SimpleNamespace(hf_config=hf_config)
        with contextlib.redirect_stderr(io.StringIO()):
            server = parser.parse_args(scenario["argv"])
        server.get_model_config = lambda model_config=model_config: model_config
        namespace = dict(hook_globals, **server_argv.VIEWS,
                         model_config_of=lambda _args, model_config=model_config: model_config,
                         get_platform=context_parallel.CudaPlatform, _is_hip=lambda: False)

        exec(validation, namespace)

        def run(server=server, check=namespace["check"]):
            pd_bound(server)
            check(server)

        results.append(server_argv.refusal_result(path, scenario, run))
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
