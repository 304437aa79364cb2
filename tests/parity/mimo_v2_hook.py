#!/usr/bin/env python3
"""One SGLang release's MiMo-V2 checks in its model hook (fused QKV weights, HiCache), on a
server's command line and env.

Usage: mimo_v2_hook.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv", "env"}
Prints [{"id", "raised", "message"}] on stdout: the message of the check's refusal, or None.
Exits non-zero, naming the file, when a piece of the release's code this needs is missing or
fails on anything but a refusal.

What runs, unchanged, in the release's own order:
  - from 0.5.22, `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py), whole: it turns
    `--dp-size N --enable-dp-attention` into `--attn-dp-size N`;
  - the `if` of the model hook's MiMo-V2 branch that tests `model_arch == "MiMoV2ForCausalLM"
    and not ....encoder_only`, with everything in it, taken from the syntax tree of the hook
    (`handle_model_specific_adjustments` of arg_groups/model_hook.py from 0.5.19,
    `ServerArgs._handle_model_specific_adjustments` before), on `model_arch` and `hf_config` of
    the config as the release's own loader loads it: it calls the release's
    `get_mimo_v2_fused_qkv_expected_tp_size` (configs/model_config.py, which refuses a projection
    layout it does not know) and, where the release has it, `derive_attn_tp_size`;
  - then, where the branch has one (up to 0.5.18), its `if ....enable_hierarchical_cache:`
    statement under the branch's own test of `model_arch`, with `envs` reading the scenario's
    env (HiCache needs SGLANG_ENABLE_UNIFIED_RADIX_TREE);
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv.

Stood in: `resolving_view` and `resolved_view` (`self._resolved()` up to 0.5.18) read the parsed
namespace. Where the release's transformers has no config class for the model type (MiMo-V2's
`mimo_v2_flash` before transformers 5.19, which those releases load with the checkpoint's own
remote code), the config is transformers' `PretrainedConfig` of the file, which holds the keys the
check reads as config.json sets them. The rest of the hook does not run: its other branches test
other architectures.
"""

import ast
import os
import sys

import server_argv
import sglang_env

MODEL_HOOKS = ((os.path.join("arg_groups", "model_hook.py"), "sglang.srt.arg_groups.model_hook", None,
                "handle_model_specific_adjustments"),
               ("server_args.py", "sglang.srt.server_args", "ServerArgs", "_handle_model_specific_adjustments"))
EXPECTED_TP = "get_mimo_v2_fused_qkv_expected_tp_size"


def _mimo_v2_checks(srt):
    """(file, module, the MiMo-V2 branch's fused-QKV `if` and, where the release has it, its
    HiCache `if` under the branch's test, compiled) of the release's model hook."""
    path, module, _name, fn = server_argv.hook_function(srt, MODEL_HOOKS, "model hook")
    branch = next((n for n in ast.walk(fn) if isinstance(n, ast.If) and "'MiMoV2ForCausalLM'" in ast.unparse(n.test)
                   and any(isinstance(m, ast.If) and "encoder_only" in ast.unparse(m.test) for m in n.body)), None)
    check = branch and next(m for m in branch.body if isinstance(m, ast.If) and "encoder_only" in ast.unparse(m.test))
    if check is None or EXPECTED_TP not in ast.unparse(check):
        raise SystemExit(f"{path}: {fn.name} no longer checks MiMoV2ForCausalLM's fused QKV weights")
    hicache = [m for m in branch.body if isinstance(m, ast.If) and ast.unparse(m.test).endswith("enable_hierarchical_cache")]
    body = [check] + ([ast.If(test=branch.test, body=hicache, orelse=[])] if hicache else [])
    return path, module, compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])), path, "exec")


def _config(release, path):
    """The config as the release's loader loads it, or, where its transformers does not know the
    model type, as `PretrainedConfig` reads the file (see the module doc)."""
    try:
        return release.loaded(path)
    except ValueError as e:
        if "does not recognize this architecture" not in str(e):
            raise
        from transformers import PretrainedConfig
        return PretrainedConfig.from_json_file(path)


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    deprecated = server_argv.deprecated_dp_attention(srt)
    path, module, code = _mimo_v2_checks(srt)
    module_globals = dict(server_argv.hook_globals(path, module), **server_argv.VIEWS)
    # The hook imports the function from configs/model_config.py inside its body: the release's own.
    module_globals[EXPECTED_TP] = release.mc[EXPECTED_TP]
    results = []
    for scenario in scenarios:
        hf_config = _config(release, scenario["config"])
        server = parser.parse_args(scenario["argv"])
        server._resolved = lambda server=server: server

        def run(server=server, hf_config=hf_config):
            if deprecated is not None:
                deprecated(server)
            exec(code, dict(module_globals, cfg=server, server_args=server, self=server, hf_config=hf_config,
                            model_arch=hf_config.architectures[0]))

        results.append(server_argv.refusal_result(path, scenario, run))
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
