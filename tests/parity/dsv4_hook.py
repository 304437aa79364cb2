#!/usr/bin/env python3
"""One SGLang release's DeepSeek-V4 model hook on the speculative, HiSparse, two-batch-overlap,
parallelism and transfer settings of a server.

Usage: dsv4_hook.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "role", "algorithm", "topk", "hisparse", "twoBatchOverlap", "pp",
             "backend", "dp", "attnCp", "prefillCp", "cpStrategy", "dcp", "raggedVerify"}
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. Exits non-zero, naming the file, when a piece of the release's code this needs
is missing: a scenario is never silently skipped.

What runs, unchanged, taken from the syntax trees of the release's own files:
  - the test of the `if` that hands an architecture to `apply_deepseek_v4_defaults` (in
    `ServerArgs._handle_model_specific_adjustments` up to 0.5.18, `arg_groups/model_hook.py`
    after), with config.json's first architecture as `model_arch`;
  - that function's `if ....speculative_algorithm is not None:` statement, which asserts the
    algorithm (as given: the model-specific adjustments run before the speculative hook) and
    EAGLE's top-k (V1, V2);
  - from 0.5.21, the test of the `if` that hands the architecture to
    `validate_deepseek_v41_features`, that function's model-type gate (its first `if` testing
    `model_type`, which returns), its `unsupported = (...)` table with the loop that raises on
    the first feature in it (V3), and the `if` after them that checks a PD server that
    speculates (V4), with the release's own `read_ragged_verify_mode` reading
    SGLANG_RAGGED_VERIFY_MODE.

Stood in: `model_config_of(...).hf_config` is config.json as loaded by Python's json;
`is_unified_kv_triton()` answers False (ROCm's unified-KV mode is an environment hack, not a
setting); the server's other fields are SGLang's defaults (no SWA bounded replay, the 'auto'
attention backend resolved to 'flashmla', which it is on GPUs other than SM100).
"""

import ast
import json
import os
import sys
import types

import sglang_env

HOOK = os.path.join("arg_groups", "deepseek_v4_hook.py")
RAGGED_VERIFY_ENV = "SGLANG_RAGGED_VERIFY_MODE"
CALLERS = ("server_args.py", os.path.join("arg_groups", "model_hook.py"))


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


def _parse(path):
    with open(path, encoding="utf-8-sig") as f:
        return ast.parse(f.read(), path)


def _function(tree, name):
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _calls(statement, name):
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == name for n in ast.walk(statement))


def _caller_test(srt, callee):
    """The test of the one `if` whose own body calls `callee`, among the callers' files."""
    found = []
    for caller in CALLERS:
        path = os.path.join(srt, caller)
        if not os.path.exists(path):
            continue
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.If) and any(_calls(s, callee) for s in node.body):
                found.append((path, node.test))
    if len(found) != 1:
        _fail(srt, f"{len(found)} `if` statements call {callee}; the harness expects one")
    path, test = found[0]
    return compile(ast.Expression(test), path, "eval")


def _speculative_statement(path, tree):
    apply = _function(tree, "apply_deepseek_v4_defaults")
    if apply is None:
        _fail(path, "no apply_deepseek_v4_defaults")
    wanted = [n for n in apply.body if isinstance(n, ast.If)
              and ast.unparse(n.test).endswith("speculative_algorithm is not None")]
    if len(wanted) != 1 or not any(isinstance(n, ast.Assert) for n in ast.walk(wanted[0])):
        _fail(path, "apply_deepseek_v4_defaults no longer asserts the speculative algorithm in one `if`")
    return compile(ast.fix_missing_locations(ast.Module(body=wanted, type_ignores=[])), path, "exec")


def _v41_statements(path, tree):
    """(gate test, table, loop and the DSpark PD check) of validate_deepseek_v41_features, or None
    before 0.5.21."""
    validate = _function(tree, "validate_deepseek_v41_features")
    if validate is None:
        return None
    gate = next((n for n in validate.body if isinstance(n, ast.If) and "model_type" in ast.unparse(n.test)), None)
    if gate is None or not isinstance(gate.body[-1], ast.Return):
        _fail(path, "validate_deepseek_v41_features has no model-type gate that returns")
    at = next((i for i, n in enumerate(validate.body) if isinstance(n, ast.Assign)
               and ast.unparse(n.targets[0]) == "unsupported"), None)
    if at is None or not isinstance(validate.body[at + 1], ast.For):
        _fail(path, "validate_deepseek_v41_features has no `unsupported` table followed by its loop")
    pd = validate.body[at + 2]
    if not (isinstance(pd, ast.If) and "disaggregation_mode" in ast.unparse(pd.test)
            and "speculative_algorithm" in ast.unparse(pd.test)):
        _fail(path, "validate_deepseek_v41_features no longer checks DSpark PD after its `unsupported` table")
    table = ast.Module(body=validate.body[at:at + 3], type_ignores=[])
    return (compile(ast.Expression(gate.test), path, "eval"),
            compile(ast.fix_missing_locations(table), path, "exec"))


def main(src, scenarios):
    srt = os.path.join(src, "sglang", "srt")
    sglang_env.install(src)
    hook_path = os.path.join(srt, HOOK)
    tree = _parse(hook_path)
    speculative = _speculative_statement(hook_path, tree)
    applies_to = _caller_test(srt, "apply_deepseek_v4_defaults")
    v41 = _v41_statements(hook_path, tree)
    v41_applies_to = v41 and _caller_test(srt, "validate_deepseek_v41_features")
    results = []
    for scenario in scenarios:
        with open(scenario["config"], encoding="utf-8") as f:
            config = json.load(f)
        hf_config = types.SimpleNamespace(**config)
        model_arch = config["architectures"][0]
        cfg = types.SimpleNamespace(
            speculative_algorithm=scenario["algorithm"], speculative_eagle_topk=scenario["topk"],
            enable_hisparse=scenario["hisparse"], enable_two_batch_overlap=scenario["twoBatchOverlap"],
            pp_size=scenario["pp"], dsv4_attn_backend="flashmla", enable_encoder_swa_bounded_replay=False,
            enable_decoder_swa_bounded_replay=False, disaggregation_mode=scenario["role"],
            disaggregation_transfer_backend=scenario["backend"], dp_size=scenario["dp"],
            enable_dp_attention=scenario["dp"] > 1, attn_cp_size=scenario["attnCp"],
            enable_prefill_cp=scenario["prefillCp"], cp_strategy=scenario["cpStrategy"], dcp_size=scenario["dcp"])
        os.environ.pop(RAGGED_VERIFY_ENV, None)
        if scenario["raggedVerify"] is not None:
            os.environ[RAGGED_VERIFY_ENV] = scenario["raggedVerify"]
        namespace = {"cfg": cfg, "server_args": cfg, "self": cfg, "model_arch": model_arch,
                     "model_config_of": lambda _args: types.SimpleNamespace(hf_config=hf_config),
                     "is_unified_kv_triton": lambda: False}
        message = None
        try:
            if eval(applies_to, dict(namespace)):
                exec(speculative, dict(namespace))
            if v41 and eval(v41_applies_to, dict(namespace)):
                gate, table = v41
                if not eval(gate, dict(namespace)):
                    exec(table, dict(namespace))
        except (AssertionError, ValueError) as e:
            message = str(e)
        results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
