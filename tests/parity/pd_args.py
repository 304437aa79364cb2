#!/usr/bin/env python3
"""One SGLang release's own PD argument checks (`handle_pd_disaggregation`) on a scenario matrix.

Usage: pd_args.py SGLANG_SRC < scenarios.json    (a JSON list, see run.py)
Prints {"prefixes": [...], "results": [{"id", "error": message or null}]}: `error` is what the
release raises for the decode server's arguments; `prefixes` are the fixed leading texts of
every ValueError/assert message the function can raise (read from its syntax tree), which lets
the caller tell whether kvpilot reports one of these rules where the release raises nothing.

What runs is the release's arg_groups/pd_disaggregation_hook.py, unchanged, then what the
speculative hook, which the pipeline calls after it, does first: upper-case the algorithm and
resolve it with the release's `_resolve_speculative_algorithm_alias` (given the scenario's draft
config in a directory of its own as the draft model path; it refuses EAGLE3 with a Gemma-4
assistant draft, SD5), and, where that hook checks decode radix cache against the algorithm
itself (0.5.23: R18c moved there), that `if` statement of handle_speculative_decoding (taken from
its syntax tree). What stands in:
the server args are a plain object holding the release's own field defaults (the annotated
defaults of ServerArgs and arg_groups/fields/*.py, read with ast) overlaid with the scenario;
`resolving_view`/`resolved_view` hand that object back, `declare_resolution` sets fields on it
(what the real context does once resolution is applied), and DP attention is off.
"""

import ast
import glob
import os
import shutil
import sys
import tempfile
import types

import sglang_env


def field_defaults(srt):
    """name -> default for every literal-valued annotated field of the release's ServerArgs."""
    files = [os.path.join(srt, "server_args.py")] + sorted(
        glob.glob(os.path.join(srt, "arg_groups", "fields", "*.py")))
    defaults = {}
    for path in files:
        with open(path, encoding="utf-8-sig") as f:
            tree = ast.parse(f.read(), path)
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for node in cls.body:
                if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                        and node.value is not None):
                    try:
                        defaults.setdefault(node.target.id, ast.literal_eval(node.value))
                    except ValueError:
                        continue
    return defaults


def _message_prefix(node):
    """The fixed text a raised message starts with ('' when it starts with an interpolation)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        prefix = ""
        for part in node.values:
            if not isinstance(part, ast.Constant):
                break
            prefix += part.value
        return prefix
    if isinstance(node, ast.BinOp):
        return _message_prefix(node.left)
    return ""


def raised_prefixes(function_node):
    prefixes = set()
    for node in ast.walk(function_node):
        message = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            message = node.exc.args[0]
        elif isinstance(node, ast.Assert) and node.msg is not None:
            message = node.msg
        if message is not None and len(_message_prefix(message)) >= 20:
            prefixes.add(_message_prefix(message))
    return sorted(prefixes)


SPECULATIVE_HOOK = os.path.join("arg_groups", "speculative_hook.py")


def speculative_hook_function(srt, name):
    """The function `name` of the release's arg_groups/speculative_hook.py, with the module's
    namespace as its globals; exits naming the file where the release does not define it."""
    path = os.path.join(srt, SPECULATIVE_HOOK)
    function = sglang_env.exec_subset(path, "sglang.srt.arg_groups.speculative_hook").get(name)
    if function is None:
        sys.exit(f"{path}: {name} did not define")
    return function


def speculative_radix_check(srt):
    """(code or None, globals, raised prefixes): the `if` statements of the release's
    handle_speculative_decoding that read decode radix cache and raise (None where it has none),
    and the hook module's namespace, which holds `_resolve_speculative_algorithm_alias`."""
    path = os.path.join(srt, SPECULATIVE_HOOK)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    hook = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "handle_speculative_decoding")
    checks = [n for n in hook.body if isinstance(n, ast.If)
              and "disaggregation_decode_enable_radix_cache" in ast.unparse(n.test)
              and any(isinstance(inner, ast.Raise) for inner in ast.walk(n))]
    scope = speculative_hook_function(srt, "_resolve_speculative_algorithm_alias").__globals__
    code = compile(ast.Module(body=checks, type_ignores=[]), path, "exec") if checks else None
    return code, scope, [p for check in checks for p in raised_prefixes(check)]


def resolved_name(alias, algorithm, draft_config):
    """The release's alias resolution of the upper-cased name, with `draft_config` (a config.json
    path or None) in a directory of its own as the draft model path."""
    if draft_config is None:
        return alias(algorithm.upper(), None)
    model_dir = tempfile.mkdtemp(prefix="kvpilot-parity-")
    try:
        shutil.copy(draft_config, os.path.join(model_dir, "config.json"))
        return sglang_env.quietly(alias, algorithm.upper(), model_dir)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def main(src, scenarios):
    sglang_env.install(src)
    srt = os.path.join(src, "sglang", "srt")
    path = os.path.join(srt, "arg_groups", "pd_disaggregation_hook.py")
    hook = sglang_env.exec_subset(path, "sglang.srt.arg_groups.pd_disaggregation_hook")
    handle = hook["handle_pd_disaggregation"]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    prefixes = raised_prefixes(next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                                    and n.name == "handle_pd_disaggregation"))
    radix_check, hook_scope, radix_prefixes = speculative_radix_check(srt)
    prefixes = sorted(set(prefixes) | set(radix_prefixes))
    defaults = field_defaults(srt)

    def declare_resolution(args, _source, **fields):
        for name, value in fields.items():
            setattr(args, name, value)

    scope = dict(handle.__globals__, resolving_view=lambda args: args,
                 resolved_view=lambda args: args, declare_resolution=declare_resolution,
                 attn_dp_enabled_of=lambda _view: False, num_dp_ranks_of=lambda _view: 1)
    bound = types.FunctionType(handle.__code__, scope, handle.__name__, handle.__defaults__,
                               handle.__closure__)
    results = []
    for scenario in scenarios:
        args = types.SimpleNamespace(**dict(defaults, **scenario["args"]))
        try:
            sglang_env.quietly(bound, args)
            if args.speculative_algorithm is not None:
                args.speculative_algorithm = resolved_name(
                    hook_scope["_resolve_speculative_algorithm_alias"], args.speculative_algorithm,
                    scenario.get("draftConfig"))
                if radix_check is not None:
                    exec(radix_check, dict(hook_scope, cfg=args))
            error = None
        except (ValueError, AssertionError) as e:
            error = str(e)
        results.append({"id": scenario["id"], "error": error})
    return {"prefixes": prefixes, "results": results}


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
