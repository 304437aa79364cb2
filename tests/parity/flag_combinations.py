#!/usr/bin/env python3
"""One SGLang release's refusals of flag combinations on a server's command line: an
encoder-only server under PD, DP speculative prefill coordination (an env) without single-layer
EAGLE, decode context parallelism with prefill context parallelism and its communication flags,
priority retraction, quantized communications, the DP LM head without
attention DP, an explicit TP LM-head all-to-all's asserts, DWDP's checks, the response store, KV
cache sharding and the watermark on PD servers, the watermark's speculative checks, and the
prefill_complete allocation policy's.

Usage: flag_combinations.py SGLANG_SRC < scenarios.json
  scenario: {"id", "argv", "env" (optional)}
Prints [{"id", "raised", "message"}] on stdout: the message of the first of those checks that
refuses the server, or None. Exits non-zero, naming the file, when a piece of the release's code
this needs is missing or fails on anything but a refusal.

What runs, unchanged, in the release's own order:
  - from 0.5.22, `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), whole: it turns
    `--dp-size N --enable-dp-attention` into `--attn-dp-size N`;
  - each check's `if` statement at the top level of the function that raises its message, taken
    from the syntax tree of the release's file that has it (CHECKS): the encoder hook's in every
    release; the speculative hook's coordination check from 0.5.21, after the hook's resolution
    of the algorithm's name (upper-cased, then `_resolve_speculative_algorithm_alias`, as
    cache_args.py runs it); the decode-CP hook's refusal of prefill CP from 0.5.22 and its checks
    of `--dcp-comm-backend` and `--dcp-replicate-q-proj` in every release; the DP LM head
    validation pass of arg_groups/overrides.py (its TP LM-head all-to-all asserts from 0.5.18),
    after the pass before it, `_data_parallelism_defaults`, which drops the DP LM head (and up to
    0.5.21 DP attention) where there is one DP rank; and the last validation's checks of priority
    retraction and quantized communications. Each runs with its module's own globals
    (`attn_dp_enabled_of`, `num_dp_ranks_of`, and `envs` reading the scenario's env);
  - the checks of handlers, in order, from their syntax trees (HANDLERS): DWDP's (`_handle_dwdp`
    of ServerArgs up to 0.5.18, `handle_dwdp` of arg_groups/parallel_hook.py after) up to its last
    assert, the response store's (0.5.20 on), KV cache sharding's up to its refusal of a server
    that is not a PD prefill server (0.5.22 on) and the watermark's (0.5.22 on, after the
    speculative hook's name resolution), and from 0.5.22 the PD hook's prefill_complete statement
    and the serving hook's refusal of prefill_complete without optimistic prefill: each
    function's assignments, asserts and the `if` statements that raise, return or declare a
    resolution, up to the statement run last (what the rest does applies the handler's settings,
    logs or reads the GPU);
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv, with
    ServerArgs' defaults for the fields the parser does not set (the watermark's, which a config
    file resolves).

Stood in: `resolving_view` and `resolved_view` (`self._resolved()` up to 0.5.18) read the parsed
namespace, which every name the statements read a server by (`cfg`, `view`, `self`,
`server_args`) is bound to. A check a release does not have is not run (its message is not in
any of the release's files).
"""

import ast
import glob
import os
import sys

import cache_args
import server_argv
import sglang_env

# (its messages in any release, the release it first appears in, what runs before it: the
# speculative hook's name resolution, or a post-process pass of arg_groups/overrides.py): each
# check's `if` is found by its message.
SPECULATIVE_NAME = "the speculative algorithm's name"
CHECKS = ((("Cannot set --encoder-only and --disaggregation-mode prefill/decode together",), "0.5.17", ()),
          (("DP spec/prefill coordination requires single-layer EAGLE or EAGLE3",
            "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK"), "0.5.21",
           (SPECULATIVE_NAME,)),
          (("--dcp-size > 1 does not support --enable-prefill-cp.",), "0.5.22", ()),
          (("decode context-parallel attention reduction and therefore",), "0.5.17", ()),
          (("--dcp-replicate-q-proj requires --dcp-size > 1.",), "0.5.17", ()),
          (("Please enable dp attention when setting enable_dp_lm_head. ",
            "--enable-dp-lm-head requires attention DP (--attn-dp-size)."), "0.5.17", ("_data_parallelism_defaults",)),
          (("uses a TP-sharded LM head",), "0.5.18", ("_data_parallelism_defaults",)),
          (("--retraction-policy priority requires --enable-priority-scheduling",), "0.5.17", ()),
          (("Communications quantization is only used with tp_size != 1",), "0.5.17", ()),
          (("Communications quantization is only supported for NPU device",), "0.5.17", ()))
OVERRIDES = (os.path.join("arg_groups", "overrides.py"), "sglang.srt.arg_groups.overrides")
# Handlers whose checks run in order: (the message of the handler's check that ends the run, the
# message of another of its checks, to find it by where it has more than one, the release it
# first appears in, what runs before it). DWDP's, a method of ServerArgs up to 0.5.18 and a hook
# of arg_groups/parallel_hook.py after; the response store's; KV cache sharding's, as far as its
# refusal of a server that is not a PD prefill server; the watermark's, after the speculative
# hook's name resolution (it runs in check_server_args, after every hook); the PD hook's as far as
# its prefill_complete statement (which calls `_validate_prefill_complete` and turns a prefill
# server's 0 optimistic prefill attempts into 1), and the serving hook's as far as its refusal of
# prefill_complete without optimistic prefill (after its statement that turns them off).
HANDLERS = (("DWDP's prefetch event protocol does not support two-batch overlap", "DWDP requires pp_size == 1",
             "0.5.17", ()),
            ("--enable-response-store is not supported with", None, "0.5.20", ()),
            ("--enable-kv-cache-sharding is only supported on PD prefill", None, "0.5.22", ()),
            ("--enable-watermark is not supported with SGLANG_RUST_SERVER", "--enable-watermark is not supported with PD",
             "0.5.22", (SPECULATIVE_NAME,)),
            ("disaggregation_decode_allocation_policy ==", "mooncake_tcp", "0.5.22", ()),
            ("prefill_complete requires optimistic prefill", None, "0.5.22", ()))


def _module_name(srt, path):
    relative = os.path.relpath(path, os.path.dirname(os.path.dirname(srt)))
    return relative.removesuffix(".py").replace(os.sep, ".")


def _argument_sources(srt):
    """(path, text) of each file of the release's argument code: its argument hooks, then
    server_args.py."""
    for path in sorted(glob.glob(os.path.join(srt, "arg_groups", "*.py"))) + [os.path.join(srt, "server_args.py")]:
        with open(path, encoding="utf-8") as f:
            yield path, f.read()


def _guarded_check(srt, messages):
    """(file, module, the statement of the function that raises or asserts one of `messages`, at
    that function's top level, compiled), or None where no file of the release has any of them."""
    for path, text in _argument_sources(srt):
        message = next((m for m in messages if m in text), None)
        if message is None:
            continue
        tree = ast.parse(text, path)
        checks = [statement for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                  for statement in fn.body if isinstance(statement, ast.If) and any(
                      isinstance(n, (ast.Raise, ast.Assert)) and message in ast.unparse(n) for n in ast.walk(statement))]
        if len(checks) != 1:
            raise SystemExit(f"{path}: {message!r} is raised in {len(checks)} top-level `if` statements, not one")
        body = ast.Module(body=checks, type_ignores=[])
        return path, _module_name(srt, path), compile(ast.fix_missing_locations(body), path, "exec")
    return None


def _handler_checks(srt, last, other):
    """(file, module, the function that holds `last` (and `other`) in top-level statements,
    compiled with its checks up to the statement that holds `last`, which it ends with: its
    assignments, asserts and `if` statements that raise, return or declare a resolution (the rest
    applies the handler's settings, logs, or reads the GPU), its name), or None where no file of
    the release has `last`."""
    for path, text in _argument_sources(srt):
        if last not in text:
            continue

        def has(statement, message):
            return message in ast.unparse(statement)

        functions = [fn for fn in ast.walk(ast.parse(text, path)) if isinstance(fn, ast.FunctionDef)
                     and any(has(statement, last) for statement in fn.body)
                     and (other is None or any(has(statement, other) for statement in fn.body))]
        if len(functions) != 1:
            raise SystemExit(f"{path}: {last!r} is checked at the top level of {len(functions)} functions, not one")
        function = functions[0]
        end = next(i for i, statement in enumerate(function.body) if has(statement, last))
        function.body = [statement for statement in function.body[:end] if isinstance(statement, (
            ast.Assign, ast.Assert)) or (isinstance(statement, ast.If) and any(
                isinstance(node, (ast.Raise, ast.Return)) or "declare_resolution(" in ast.unparse(node)
                for node in ast.walk(statement)))] + [function.body[end]]
        function.decorator_list = []
        # Its annotations may name what only type checkers import.
        sglang_env.drop_annotations(function)
        body = ast.Module(body=[function], type_ignores=[])
        return path, _module_name(srt, path), compile(ast.fix_missing_locations(body), path, "exec"), function.name
    return None


def main(src, scenarios):
    srt, _release, parser = server_argv.release_parts(src)
    version = _version_key(os.path.basename(os.path.dirname(os.path.dirname(srt))))
    steps = []
    deprecated = server_argv.deprecated_dp_attention(srt)
    if deprecated is not None:
        steps.append((deprecated.__code__.co_filename, deprecated))
    overrides_path = os.path.join(srt, OVERRIDES[0])
    overrides = server_argv.hook_globals(overrides_path, OVERRIDES[1])
    for messages, since, passes in CHECKS:
        found = _guarded_check(srt, messages)
        if found is None:
            if version >= _version_key(since):
                raise SystemExit(f"{srt}: no file raises {messages[-1]!r}")
            continue
        for name in passes:
            if name == SPECULATIVE_NAME:
                steps.append((overrides_path, cache_args.speculative_name_step(srt)))
                continue
            if name not in overrides:
                raise SystemExit(f"{overrides_path}: {name} did not define")
            steps.append((overrides_path, lambda server, apply=overrides[name]: _declare(server, apply(server))))
        path, module, code = found
        module_globals = server_argv.hook_globals(path, module)
        steps.append((path, lambda server, code=code, module_globals=module_globals: exec(
            code, dict(module_globals, **server_argv.VIEWS, cfg=server, view=server, server_args=server,
                       self=server))))

    for last, other, since, passes in HANDLERS:
        found = _handler_checks(srt, last, other)
        if found is None:
            if version >= _version_key(since):
                raise SystemExit(f"{srt}: no file raises {last!r}")
            continue
        if passes:
            steps.append((overrides_path, cache_args.speculative_name_step(srt)))
        path, module, code, name = found
        module_globals = server_argv.hook_globals(path, module)
        # The functions the handler calls (`_validate_prefill_complete`) read the views too.
        module_globals.update(server_argv.VIEWS)
        handler = dict(module_globals)
        exec(code, handler)
        steps.append((path, handler[name]))

    defaults = server_argv.field_defaults()
    results = []
    for scenario in scenarios:
        server = parser.parse_args(scenario["argv"])
        for name, value in defaults.items():
            if not hasattr(server, name):
                setattr(server, name, value)
        server._resolved = lambda server=server: server
        message = None
        with server_argv.environment(scenario.get("env", {})):
            for path, step in steps:
                error = server_argv.refusal(path, scenario, lambda step=step: step(server))
                if error is not None:
                    message = str(error)
                    break
        results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    return results


def _declare(server, fields):
    """A post-process pass's declarations, set on the parsed namespace."""
    for name, value in fields.items():
        setattr(server, name, value)


def _version_key(version):
    return tuple(int(part) for part in version.split("."))


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
