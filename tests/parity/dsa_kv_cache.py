#!/usr/bin/env python3
"""One SGLang release's DSA KV cache dtype checks on a server's command line.

Usage: dsa_kv_cache.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv"}
Prints [{"id", "raised", "message"}] on stdout: the message the checks refuse the server with,
or None. Exits non-zero, naming the file, when a piece of the release's code this needs is
missing, fails on anything but a refusal, or refuses differently on two GPU generations (kvpilot
decides these checks without knowing the GPU): a scenario is never silently skipped.

What runs, unchanged:
  - the release's config loader on config.json (`classify.Release.load`) and its
    `is_deepseek_dsa`;
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv;
  - `_dsa_kv_cache_dtype_default` (arg_groups/overrides.py), whole, where the model hook
    (`handle_model_specific_adjustments`, or `ServerArgs._handle_model_specific_adjustments` before
    0.5.19) calls it: in its DeepSeek-family branch (whose architecture list is taken from the
    hook's syntax tree), for a DSA model, on a CUDA or ROCm GPU. It runs once as on a Hopper GPU
    (compute capability 9.0) and once as on a Blackwell one (10.0): `auto` resolves differently
    there, and both answers must agree.

Stood in: the model config is the loaded config (`model_config_of`, and `get_model_config` up to
0.5.19); `get_platform()` (`is_npu()` and `is_xpu()` before 0.5.20) is a CUDA GPU's, where
kvpilot's servers run; `torch.cuda.get_device_capability` answers the GPU generation.
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

OVERRIDES = os.path.join("arg_groups", "overrides.py")
CHECK = "_dsa_kv_cache_dtype_default"
# The model hook calls it through this method up to 0.5.18.
LEGACY_CALL = "_set_default_dsa_kv_cache_dtype"
GPUS = ((9, 0), (10, 0))


def _hook_family(srt):
    """The architectures of the model hook's DeepSeek-family branch whose DSA branch calls the
    check."""
    (path, name), branches = context_parallel.model_hook_dsa_branches(srt)
    for archs, dsa in branches:
        if any(word in ast.unparse(dsa) for word in (CHECK, LEGACY_CALL)):
            return archs
    raise SystemExit(f"{path}: {name} no longer calls {CHECK} in its DSA branch")


def _torch_cuda():
    """The stood-in `torch.cuda` the check imports (sglang_env answers torch with an inert
    package)."""
    for name in ("torch", "torch.cuda"):
        if name not in sys.modules:
            module = sglang_env.InertModule(name)
            sglang_env._InertLoader().exec_module(module)
            sys.modules[name] = module
    sys.modules["torch"].cuda = sys.modules["torch.cuda"]
    return sys.modules["torch.cuda"]


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    family = _hook_family(srt)
    # The check imports is_deepseek_dsa from here; the release's own, as classify loaded it.
    release.expose_model_config()
    path = os.path.join(srt, OVERRIDES)
    module = __import__("sglang.srt.arg_groups.overrides", fromlist=[CHECK])
    check = getattr(module, CHECK, None)
    if check is None:
        raise SystemExit(f"{path}: {CHECK} did not define")
    cuda = _torch_cuda()
    is_deepseek_dsa = release.mc["is_deepseek_dsa"]
    results = []
    for scenario in scenarios:
        hf_config = release.loaded(scenario["config"])
        model_config = types.SimpleNamespace(hf_config=hf_config,
                                             hf_text_config=release.get_hf_text_config(hf_config))
        with contextlib.redirect_stderr(io.StringIO()):
            server = parser.parse_args(scenario["argv"])
        server.get_model_config = lambda model_config=model_config: model_config
        check.__globals__.update(model_config_of=lambda _view, model_config=model_config: model_config,
                                 get_platform=context_parallel.CudaPlatform, is_npu=lambda: False,
                                 is_xpu=lambda: False)
        answers = set()
        for capability in GPUS:
            cuda.get_device_capability = lambda *_a, capability=capability, **_k: capability
            message = None
            if hf_config.architectures[0] in family and is_deepseek_dsa(hf_config):
                try:
                    sglang_env.quietly(check, server)
                except (ValueError, AssertionError) as e:
                    message = str(e)
                except Exception as e:
                    raise SystemExit(f"{path}: {CHECK} failed on {scenario['id']} "
                                     f"({' '.join(scenario['argv'])}): {type(e).__name__}: {e}") from e
            answers.add(message)
        if len(answers) != 1:
            raise SystemExit(f"{path}: {CHECK} answers {sorted(map(str, answers))} on {scenario['id']} "
                             f"({' '.join(scenario['argv'])}) on GPUs {GPUS}: the GPU decides it")
        message = answers.pop()
        results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
