#!/usr/bin/env python3
"""One SGLang release's reading of `--speculative-algorithm`, on a list of names.

Usage: speculative_names.py SGLANG_SRC < names.json
  names: ["EAGLE", "nextn", ...]
Prints [{"name", "raised", "message", "algorithm"}] on stdout. Exits non-zero, naming the file,
when a piece of the release's code this needs is missing: a name is never silently skipped.

What runs, unchanged: the speculative hook's upper-casing of the name (its
`handle_speculative_decoding` is checked to hold `speculative_algorithm...upper()`), its
`_resolve_speculative_algorithm_alias` (NEXTN and EAGLE become EAGLE; with no draft model no
config is read), and `SpeculativeAlgorithm.from_string` (speculative/spec_info.py: the enum
members, the reserved aliases, plugin registrations), which raises `Unknown speculative
algorithm name: ...` (rule SD1).

Stood in: nothing but the absent draft model (the Gemma-4 assistant promotion reads a draft's
config and is not in the list).
"""

import ast
import os
import sys

import sglang_env

HOOK = os.path.join("arg_groups", "speculative_hook.py")


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


def main(src, names):
    srt = os.path.join(src, "sglang", "srt")
    sglang_env.install(src)
    hook_path = os.path.join(srt, HOOK)
    with open(hook_path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), hook_path)
    handle = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                   and n.name == "handle_speculative_decoding"), None)
    if handle is None or not any(
            isinstance(n, ast.Call) and ast.unparse(n.func).endswith("speculative_algorithm.upper")
            for n in ast.walk(handle)):
        _fail(hook_path, "handle_speculative_decoding no longer upper-cases speculative_algorithm")
    hook = sglang_env.exec_subset(hook_path, "sglang.srt.arg_groups.speculative_hook")
    resolve_alias = hook.get("_resolve_speculative_algorithm_alias")
    if resolve_alias is None:
        _fail(hook_path, "_resolve_speculative_algorithm_alias did not define")
    spec_info = sglang_env.quietly(__import__, "sglang.srt.speculative.spec_info",
                                   fromlist=["SpeculativeAlgorithm"])
    results = []
    for name in names:
        try:
            resolved = resolve_alias(name.upper(), None)
            algorithm = spec_info.SpeculativeAlgorithm.from_string(resolved)
            results.append({"name": name, "raised": False, "message": None,
                            "algorithm": getattr(algorithm, "name", str(algorithm))})
        except ValueError as e:
            results.append({"name": name, "raised": True, "message": str(e), "algorithm": None})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
