#!/usr/bin/env python3
"""One SGLang release's checks of a server's data-parallel shape on its command line: attention DP
must divide TP, replicas and attention DP do not combine, the nodes split TP × PP, and
data-parallel replicas stay on one node.

Usage: parallel_shape.py SGLANG_SRC < scenarios.json
  scenario: {"id", "argv"}
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. A bare `assert`, whose AssertionError carries no text, refuses as the traceback
ends: `AssertionError (assert cfg.tp_size % cfg.attn_dp_size == 0)`. Exits non-zero,
naming the file, when a piece of the release's code this needs is missing or fails on anything but
a refusal.

What runs, unchanged, in the release's own order:
  - from 0.5.22, `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), whole: it turns
    `--dp-size N --enable-dp-attention` into `--attn-dp-size N`;
  - the data-parallel hook, `handle_data_parallelism` (arg_groups/parallel_hook.py, 0.5.19 on) or
    `ServerArgs._handle_data_parallelism` (server_args.py, before), taken from its syntax tree:
    its top-level checks that raise before the DP-attention branch (0.5.22 on: a non-positive
    attention DP size, replicas combined with attention DP), then that branch's test with the
    assert in it that attention DP divides TP;
  - the validation hook's check that the nodes split TP × PP (unless the server joins elastic EP)
    and its assert that data-parallel replicas run on one node, taken from `check_server_args`
    (arg_groups/validation_hook.py, 0.5.19 on, or `ServerArgs`'s before);
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv.

Stood in: `resolving_view` and `resolved_view` (`self._resolved()` up to 0.5.18) read the parsed
namespace, on which `declare_resolution` sets fields. Left out: the hook's statements between
those checks (logging, the chunked-prefill and conservativeness adjustments, and the
`_data_parallelism_defaults` pass, which only turns DP attention off where the DP size is 1, where
no check here can fail).
"""

import ast
import os
import sys
import traceback

import server_argv
import sglang_env

SERVER_ARGS = ("server_args.py", "sglang.srt.server_args", "ServerArgs")
DATA_PARALLEL_HOOKS = ((os.path.join("arg_groups", "parallel_hook.py"), "sglang.srt.arg_groups.parallel_hook", None,
                        "handle_data_parallelism"), (*SERVER_ARGS, "_handle_data_parallelism"))
# The validation hook: `check_server_args` (arg_groups/validation_hook.py, 0.5.19 on, or
# ServerArgs's before), which runs last.
VALIDATION_HOOKS = ((os.path.join("arg_groups", "validation_hook.py"), "sglang.srt.arg_groups.validation_hook", None,
                     "check_server_args"), (*SERVER_ARGS, "check_server_args"))


def _is_attention_dp_divides_tp(node):
    """`assert <tp_size> % <attention DP size> == 0`, the check the DP-attention branch makes."""
    return isinstance(node, ast.Assert) and node.msg is None and "tp_size %" in ast.unparse(node.test) \
        and "dp_size == 0" in ast.unparse(node.test)


def _data_parallel_checks(srt):
    """(file, module, the hook's checks as one compiled module) of the release: the top-level
    `if` statements that raise before the DP-attention branch, then that branch's test around its
    divisibility assert alone."""
    path, module, _name, fn = server_argv.hook_function(srt, DATA_PARALLEL_HOOKS, "data-parallel hook")
    checks = []
    for statement in fn.body:
        if not isinstance(statement, ast.If):
            continue
        divides = next((n for n in statement.body if _is_attention_dp_divides_tp(n)), None)
        if divides is not None:
            checks.append(ast.If(test=statement.test, body=[divides], orelse=[]))
            break
        if any(isinstance(n, ast.Raise) for n in statement.body):
            checks.append(statement)
    else:
        raise SystemExit(f"{path}: {fn.name} no longer asserts that attention DP divides TP")
    body = ast.Module(body=checks, type_ignores=[])
    return path, module, compile(ast.fix_missing_locations(body), path, "exec")


def _node_checks(srt):
    """(file, module, the validation hook's node checks, compiled): its statement checking that the
    nodes split TP × PP (an `if` around the assert from 0.5.17 on), then its assert that replicas
    stay on one node."""
    path, module, _name, fn = server_argv.hook_function(srt, VALIDATION_HOOKS, "validation hook")
    split = next((n for n in fn.body if "number of nodes" in ast.unparse(n)), None)
    replicas = next((n for n in fn.body if isinstance(n, ast.Assert) and "nnodes" in ast.unparse(n.test)
                     and "dp_size > 1" in ast.unparse(n.test)), None)
    if split is None or replicas is None:
        raise SystemExit(f"{path}: {fn.name} no longer checks the nodes against TP and the replicas")
    body = ast.Module(body=[split, replicas], type_ignores=[])
    return path, module, compile(ast.fix_missing_locations(body), path, "exec")


def _bare_assert(error, path):
    """The bare `assert` in `path` that raised `error`, as SGLang's traceback ends: the exception
    and the statement (its AssertionError carries no text)."""
    line = next(frame.lineno for frame in reversed(traceback.extract_tb(error.__traceback__))
                if frame.filename == path)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    statement = next(ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Assert) and n.lineno == line)
    return f"AssertionError ({statement})"


def main(src, scenarios):
    srt, _release, parser = server_argv.release_parts(src)
    steps = []
    deprecated = server_argv.deprecated_dp_attention(srt)
    if deprecated is not None:
        steps.append((deprecated.__code__.co_filename, deprecated))
    for path, module, code in (_data_parallel_checks(srt), _node_checks(srt)):
        module_globals = server_argv.hook_globals(path, module)
        steps.append((path, lambda server, code=code, module_globals=module_globals: exec(
            code, dict(module_globals, **server_argv.VIEWS, cfg=server, server_args=server, self=server))))

    results = []
    for scenario in scenarios:
        server = parser.parse_args(scenario["argv"])
        server._resolved = lambda server=server: server
        message = None
        for path, step in steps:
            error = server_argv.refusal(path, scenario, lambda step=step: step(server))
            if error is not None:
                message = str(error) or _bare_assert(error, path)
                break
        results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
