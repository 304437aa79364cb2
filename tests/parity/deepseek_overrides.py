#!/usr/bin/env python3
"""One SGLang release's DeepSeek-family model override provider on a server's context-parallel,
cache and speculative settings.

Usage: deepseek_overrides.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "role", "dcp", "prefillCp", "hicache", "hisparse", "topk"}
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. Exits non-zero, naming the file, when a piece of the release's code this needs
is missing: a scenario is never silently skipped.

What runs, unchanged: the release's config loader on config.json (`classify.Release.load`) and
its model-override registry (`classify.Release.override_providers`). Where
`_deepseek_family_overrides` (arg_groups/model_overrides/deepseek_v2.py) is among the config
architecture's providers, its statements up to the first declaration it makes (taken from its
syntax tree, without its imports: the HYV4 context-parallel checks, K4 and K5), then, where its
`if is_deepseek_dsa(hf_config):` statement calls `_dsa_dcp_overrides` (0.5.22 on), that function
itself on a DSA model, with the release's own `is_deepseek_dsa` (K1-K3), and then, where that
statement has one (0.5.22 on), its `if` on ROCm's preshuffle paged-MQA path, whose CUDA branch
refuses pooled index keys with DCP (K6), with the release's own `get_dsa_index_kpool`.

Stood in: the server's fields are a plain namespace of the scenario's settings (`dcp_size`,
`enable_prefill_cp`, `enable_hierarchical_cache`, `enable_hisparse`, `speculative_eagle_topk`,
`disaggregation_mode`), read where the provider reads its resolving view; DCP's communication
backend is left unset; `get_platform()` is a CUDA GPU's (kvpilot's servers run on NVIDIA GPUs).
"""

import ast
import os
import sys
import types

import classify
import context_parallel
import sglang_env

PROVIDERS = os.path.join("arg_groups", "model_overrides", "deepseek_v2.py")
PROVIDER = "_deepseek_family_overrides"


def _fail(path, what):
    raise SystemExit(f"{path}: {what}")


def _provider_parts(path):
    """(the provider's statements before its first declaration, whether it hands DSA models to
    _dsa_dcp_overrides)."""
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    provider = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == PROVIDER), None)
    if provider is None:
        _fail(path, f"no {PROVIDER}")
    at = next((i for i, n in enumerate(provider.body) if isinstance(n, ast.AnnAssign)
               and ast.unparse(n.target) == "overrides"), None)
    if at is None:
        _fail(path, f"{PROVIDER} no longer starts its declarations with `overrides: Dict[...] = {{}}`")
    # Before 0.5.20 nothing is checked there. Its imports (model_config's DSA helpers, which pull
    # in the server) are not needed by these statements.
    leading = [n for n in provider.body[:at] if not isinstance(n, (ast.Expr, ast.Import, ast.ImportFrom))]
    dsa_dcp = any(isinstance(n, ast.If) and ast.unparse(n.test) == "is_deepseek_dsa(hf_config)"
                  and any(isinstance(m, ast.Call) and ast.unparse(m.func).endswith("_dsa_dcp_overrides")
                          for m in ast.walk(n)) for n in ast.walk(provider))
    code = compile(ast.fix_missing_locations(ast.Module(body=leading, type_ignores=[])), path, "exec")
    kpool = [n for n in ast.walk(provider) if isinstance(n, ast.If)
             and "aiter_can_use_preshuffle_paged_mqa()" in ast.unparse(n.test)
             and any("index_kpool" in ast.unparse(m) for m in n.orelse)]
    kpool_code = kpool and compile(ast.fix_missing_locations(ast.Module(body=kpool[:1], type_ignores=[])), path, "exec")
    return code, dsa_dcp, kpool_code


def main(src, scenarios):
    release = classify.Release(src)
    path = os.path.join(src, "sglang", "srt", PROVIDERS)
    has_provider = os.path.exists(path)
    if has_provider:
        leading, dsa_dcp, kpool = _provider_parts(path)
        module = sys.modules.get("sglang.srt.arg_groups.model_overrides.deepseek_v2") or __import__(
            "sglang.srt.arg_groups.model_overrides.deepseek_v2", fromlist=[PROVIDER])
        if dsa_dcp and not hasattr(module, "_dsa_dcp_overrides"):
            _fail(path, "_dsa_dcp_overrides did not define")
    results = []
    for scenario in scenarios:
        hf_config = release.loaded(scenario["config"])
        arch = hf_config.architectures[0]
        cfg = types.SimpleNamespace(
            dcp_size=scenario["dcp"], enable_prefill_cp=scenario["prefillCp"],
            enable_hierarchical_cache=scenario["hicache"], enable_hisparse=scenario["hisparse"],
            speculative_eagle_topk=scenario["topk"], disaggregation_mode=scenario["role"],
            dcp_comm_backend=None, dcp_replicate_q_proj=None, dsa_prefill_backend=None, dsa_decode_backend=None)
        message = None
        providers = release.override_providers(arch)[1] if has_provider else []
        if any(getattr(fn, "__name__", "") == PROVIDER for fn in providers):
            try:
                exec(leading, dict(vars(module), cfg=cfg, server_args=cfg, hf_config=hf_config))
                if dsa_dcp and release.mc["is_deepseek_dsa"](hf_config):
                    module._dsa_dcp_overrides(cfg)
                    if kpool:
                        exec(kpool, dict(vars(module), cfg=cfg, hf_config=hf_config, overrides={},
                                         get_platform=context_parallel.CudaPlatform, aiter_can_use_preshuffle_paged_mqa=lambda: True,
                                         get_dsa_index_kpool=release.mc["get_dsa_index_kpool"]))
            except ValueError as e:
                message = str(e)
        results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
