#!/usr/bin/env python3
"""One SGLang release's model override providers for MiniCPM, ERNIE 4.5 VL MoE, Qwen4-Exp,
IQuest Q1 and Nemotron-H on a server's command line.

Usage: family_overrides.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv", "env"}
Prints [{"id", "raised", "message", "providers"}] on stdout: the message of the first provider
check that refuses the server (or None), and the providers that ran. Exits non-zero, naming the
provider, when one fails on anything but a refusal: a scenario is never silently skipped.

What runs, unchanged:
  - the release's config loader on config.json (`classify.Release.load`), whose first
    architecture SGLang's model hook hands to the override registry;
  - the release's argument parser (`ServerArgs.add_cli_args`, as server_argv.py builds it) on the
    scenario's argv, which gives every field its parsed or default value;
  - `handle_deprecated_dp_attention` (arg_groups/parallel_hook.py) where the release's
    resolution pipeline (arg_groups/pipeline.py) runs it before any handler reads the DP layout
    (0.5.22 on);
  - each provider the registry gives the architecture (`classify.Release.override_providers`)
    whose module is one of FAMILIES, whole, through the registry's `_invoke_provider`, with the
    scenario's env in `os.environ` (SGLang's `envs` read it when asked).

Stood in: `resolving_view` reads the parsed namespace, on which `declare_resolution` sets the
fields the deprecated-DP handler declares. Qwen4-Exp's provider sizes its embedding offload from
the model's dtype after its checks, which needs the whole ModelConfig: the namespace sets
`ple_offload_embedding` False, as `--ple-offload-embedding` unset on a machine without CUDA
would resolve. The providers' `model_config_of` is the loaded config, its text config and the
parsed `--quantization` (the fixtures carry no quantization config), and `get_platform()` is a
Hopper GPU's (CUDA, compute capability 9.0): the platform picks backends, never a refusal
checked here.
"""

import contextlib
import io
import sys
import types

import server_argv
import sglang_env

FAMILIES = ("minicpm", "ernie45_vl", "qwen4_exp", "iquest_q1", "nemotron_h")
PACKAGE = "sglang.srt.arg_groups.model_overrides."


class HopperPlatform:
    """A Hopper GPU's platform as `get_platform()` describes it."""

    device_capability = (9, 0)

    def __getattr__(self, name):
        if name.startswith("is_"):
            return name in ("is_cuda", "is_sm90")
        raise AttributeError(name)


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    deprecated_dp = server_argv.deprecated_dp_attention(srt)
    results = []
    for scenario in scenarios:
        hf_config = release.loaded(scenario["config"])
        arch = hf_config.architectures[0]
        with contextlib.redirect_stderr(io.StringIO()):
            server = parser.parse_args(scenario["argv"])
        server.ple_offload_embedding = False
        if deprecated_dp is not None:
            deprecated_dp(server)
        base, providers = release.override_providers(arch)
        ours = [fn for fn in providers if fn.__module__ in {PACKAGE + family for family in FAMILIES}]
        model_config = types.SimpleNamespace(
            hf_config=hf_config, hf_text_config=release.get_hf_text_config(hf_config),
            quantization=server.quantization)
        for fn in ours:
            fn.__globals__.update(model_config_of=lambda _args, model_config=model_config: model_config,
                                  get_platform=HopperPlatform)
        message = None
        with server_argv.environment(scenario["env"]):
            for fn in ours:
                try:
                    sglang_env.quietly(base._invoke_provider, fn, server, hf_config)
                except ValueError as e:
                    message = str(e)
                    break
                except Exception as e:
                    raise SystemExit(f"{fn.__module__}.{fn.__qualname__} failed on {scenario['id']} "
                                     f"({' '.join(scenario['argv'])}): {type(e).__name__}: {e}") from e
        results.append({"id": scenario["id"], "raised": message is not None, "message": message,
                        "providers": [fn.__qualname__ for fn in ours]})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
