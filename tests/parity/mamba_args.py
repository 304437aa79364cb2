#!/usr/bin/env python3
"""One SGLang release's own Mamba radix-cache strategy checks on a PD server, on a matrix.

Usage: mamba_args.py SGLANG_SRC < scenarios.json
  scenarios: [{"id", "config": CONFIG.json, "args": {field: value}}] (decode or prefill mode)
Prints [{"id", "error": message or null}]: what the release raises for the server's arguments.
An AssertionError without a message is reported as "AssertionError".

What runs, unchanged and in the release's order: `handle_pd_disaggregation`
(arg_groups/pd_disaggregation_hook.py), which decides `disable_radix_cache` on a decode server;
then the Mamba radix-cache handler (`ServerArgs._handle_mamba_radix_cache` with its
`_validate_mamba_*` methods in 0.5.17-0.5.18, `handle_mamba_radix_cache` of
arg_groups/model_hook.py with arg_groups/mamba_hook.py's validators from 0.5.19), which runs the
release's `_mamba_radix_cache_resolution`, `mamba_extra_buffer_of` and
`supports_mamba_cache_extra_buffer` (arg_groups/overrides.py and friends) and the release's
linear-attention model registry on the config.

Stood in, as in pd_args.py and cache_args.py: the server args are a plain object holding the
release's field defaults overlaid with the scenario; the views hand it back and declarations set
fields on it (`run_post_process_pass` applies what a pass declares); the model config is the
release's own loading of the config file (classify.py), handed out where the code asks for the
model config; the platform is an NVIDIA one (CUDA, not out of tree); and DP attention is off. The
Mamba cache chunk size is the release's own (`mamba_cache_chunk_size` of arg_groups/overrides.py,
or the ServerArgs property before 0.5.19, which checks the model's chunk size against the page
size); the FLA kernel module it imports `CHUNK_SIZE` from is not in the wheel, so that constant
is read from the release's own copy of the kernel (hardware_backend/xpu/kernels/fla/).
"""

import ast
import os
import sys
import types

import sglang_env
from classify import Release
from pd_args import field_defaults
from cache_args import _server_args_method, bind_views, field_fallbacks

FLA_KERNEL = "sglang.kernels.ops.attention.fla.chunk_delta_h"
FLA_KERNEL_COPY = os.path.join("hardware_backend", "xpu", "kernels", "fla", "chunk_delta_h.py")


def _fla_chunk_size(srt):
    """`CHUNK_SIZE` of the release's copy of the FLA chunk kernel."""
    path = os.path.join(srt, FLA_KERNEL_COPY)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["CHUNK_SIZE"]:
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path}: no CHUNK_SIZE")


_CUDA = types.SimpleNamespace(is_cuda=True, is_hip=False, is_npu=False, is_musa=False, is_xpu=False,
                              is_out_of_tree=lambda: False)


def _apply_pass(args, resolution):
    """`run_post_process_pass`: the pass's declarations set on the args object."""
    for name, value in (resolution(args) or {}).items():
        setattr(args, name, value)


def _stand_ins(module_globals, model_config):
    module_globals.update(
        resolving_view=lambda args: args, resolved_view=lambda args: args,
        model_config_of=lambda _view: model_config, get_platform=lambda: _CUDA,
        current_platform=_CUDA, run_post_process_pass=_apply_pass,
        is_cuda=lambda: True, is_musa=lambda: False, is_npu=lambda: False, is_hip=lambda: False)


def main(src, scenarios):
    release = Release(src)
    srt = os.path.join(src, "sglang", "srt")
    pd_path = os.path.join(srt, "arg_groups", "pd_disaggregation_hook.py")
    pd_handle = bind_views(sglang_env.exec_subset(
        pd_path, "sglang.srt.arg_groups.pd_disaggregation_hook")["handle_pd_disaggregation"],
        field_fallbacks(srt))
    overrides = sys.modules["sglang.srt.arg_groups.overrides"]
    hook_path = os.path.join(srt, "arg_groups", "model_hook.py")
    legacy = not os.path.exists(hook_path) or "def handle_mamba_radix_cache" not in open(
        hook_path, encoding="utf-8").read()
    if legacy:
        handler = _server_args_method(srt, "_handle_mamba_radix_cache")[0]
        validators = {name: _server_args_method(srt, name)[0]
                      for name in ("_validate_mamba_extra_buffer", "_validate_mamba_no_buffer")}
    else:
        handler = sglang_env.exec_subset(hook_path, "sglang.srt.arg_groups.model_hook")[
            "handle_mamba_radix_cache"]
        mamba_hook = sglang_env.quietly(__import__, "sglang.srt.arg_groups.mamba_hook",
                                        fromlist=["validate_mamba_extra_buffer"])
    defaults = field_defaults(srt)
    fla_chunk_size = _fla_chunk_size(srt)
    sys.modules[FLA_KERNEL] = types.SimpleNamespace(CHUNK_SIZE=fla_chunk_size)
    args_type = types.SimpleNamespace
    if legacy:
        # The args object has the ServerArgs property, with its module's FLA_CHUNK_SIZE (0.5.17
        # imports it at the top of server_args.py).
        chunk_property = _server_args_method(srt, "mamba_cache_chunk_size")[0]
        chunk_property.fget.__globals__.update(resolved_view=lambda args: args, FLA_CHUNK_SIZE=fla_chunk_size)
        args_type = type("LegacyServerArgs", (types.SimpleNamespace,), {"mamba_cache_chunk_size": chunk_property})
    results = []
    for scenario in scenarios:
        verdict, model_config = release.model_config(scenario["config"])
        if model_config is None:
            raise SystemExit(f"{scenario['config']}: the release's loader refuses it: {verdict}")
        hf_config = model_config.hf_config
        model = types.SimpleNamespace(hf_config=hf_config)
        for module_globals in (handler.__globals__, vars(overrides)):
            _stand_ins(module_globals, model)
        if not legacy:
            _stand_ins(vars(mamba_hook), model)
        args = args_type(**dict(defaults, **scenario["args"]))
        args.get_model_config = lambda model=model: model
        for name, method in ({} if not legacy else validators).items():
            setattr(args, name, types.MethodType(method, args))
        try:
            sglang_env.quietly(pd_handle, args)
            if legacy:
                sglang_env.quietly(handler, args, model_arch=hf_config.architectures[0])
            else:
                second = hf_config if "hf_config" in handler.__code__.co_varnames[:2] \
                    else hf_config.architectures[0]
                sglang_env.quietly(handler, args, second)
            error = None
        except (ValueError, AssertionError, NotImplementedError) as e:
            error = str(e) or type(e).__name__
        results.append({"id": scenario["id"], "error": error})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
