#!/usr/bin/env python3
"""One SGLang release's own classification of Hugging Face config.json files.

Usage: classify.py SGLANG_SRC CONFIG.json...   (SGLANG_SRC holds sglang/srt of one release)
Prints one JSON object per config on stdout:
  {"file", "architecture", "loaded": true, "isHybridSwa", "fullLayers", "swaLayers",
   "usesSsmState", "isMla", "isDsa", "isSwaCompress", "hasRatio2Layers", "hasLearnableSinks",
   "hiddenSize", "vocabSize", "mambaChunkSize", "dsaIndexKpool", "attentionProjectionLayout",
   "fusedQkvAttentionTp",
   "mtpDraft", "disableHybridSwaMemory",
   "draftNextnLayers", "draftArchitectureUnderDspark", "notes"}
or {"file", "loaded": false, "error"} when the release's own config loader refuses the file
(the release could not start on that checkpoint either).

What runs is the release's code, unchanged:
  - config loading: sglang.srt.utils.hf_transformers.config.get_config (SGLang's config-class
    registry, so `dots3_note`, `spark2_5`, ... get SGLang's classes and their opt-in properties);
  - the text config: get_hf_text_config;
  - the per-model overrides (Gemma-2/3 disable hybrid-SWA memory): the providers
    sglang.srt.arg_groups registers for the architecture, in collect_model_override_declarations'
    order;
  - configs/model_config.py, statement by statement (its top level needs torch): the module
    functions (is_hybrid_swa_model, get_hybrid_layer_ids, is_deepseek_dsa) and the ModelConfig
    methods _derive_model_shapes (MLA) and _derive_hybrid_model (SWA split, SWA-compress);
  - the draft an EAGLE worker builds from the file: ModelConfig._config_draft_model, then
    _derive_model_shapes, whose num_nextn_predict_layers `_can_pack_hicache_mtp` reads
    ("draftNextnLayers"), and the architecture of a DSPARK worker's draft, which it compares
    with DeepSeek-V4's DSpark head ("draftArchitectureUnderDspark"; each an {"error"} object
    where the release cannot build that draft config). The DSpark config module is the
    release's statements that run without the scheduler;
  - mem_cache/kv_cache_builder.py: uses_ssm_state (0.5.19+), or for older releases the inline
    `is_hybrid_ssm` statements of build_kv_cache, run with a stand-in worker holding the config.
"""

import ast
import inspect
import json
import os
import shutil
import sys
import tempfile
import traceback
import types

import sglang_env


class _NoServerArgs:
    """ServerArgs as override providers see it with no flags given: every field unset, and every
    method of the release's ServerArgs answering None (falsy, like an unset field)."""

    methods = frozenset()

    def __getattr__(self, name):
        if name in self.methods:
            return lambda *args, **kwargs: None
        return None


def _server_args_methods(srt):
    with open(os.path.join(srt, "server_args.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return frozenset(fn.name for cls in tree.body if isinstance(cls, ast.ClassDef)
                     and cls.name == "ServerArgs" for fn in cls.body
                     if isinstance(fn, ast.FunctionDef))


class _StandInWorker:
    """The `tp_worker.model_runner.model_config` path build_kv_cache reads the config from."""

    def __init__(self, model_config):
        self.model_runner = self
        self.model_config = model_config


DSPARK_CONFIG = ("speculative", "dspark_components", "dspark_config.py")


class Release:
    def __init__(self, src):
        self._loaded = {}
        sglang_env.install(src)
        srt = os.path.join(src, "sglang", "srt")
        _NoServerArgs.methods = _server_args_methods(srt)
        quiet = sglang_env.quietly
        self.get_config = quiet(__import__, "sglang.srt.utils.hf_transformers.config",
                                fromlist=["get_config"]).get_config
        self.get_hf_text_config = quiet(__import__, "sglang.srt.utils.hf_transformers.common",
                                        fromlist=["get_hf_text_config"]).get_hf_text_config
        self.overrides = quiet(__import__, "sglang.srt.arg_groups.overrides",
                               fromlist=["_invoke_provider"])
        self.mc = sglang_env.exec_subset(os.path.join(srt, "configs", "model_config.py"),
                                         "sglang.srt.configs.model_config", ("ModelConfig",))
        kvb_path = os.path.join(srt, "mem_cache", "kv_cache_builder.py")
        self.kvb = sglang_env.exec_subset(kvb_path, "sglang.srt.mem_cache.kv_cache_builder")
        self.uses_ssm_state = self.kvb.get("uses_ssm_state") or self._inline_ssm_test(kvb_path)
        for name in ("is_hybrid_swa_model", "is_deepseek_dsa", "AttentionArch", "ModelConfig"):
            if name not in self.mc:
                raise SystemExit(f"{src}: model_config.py did not define {name}")
        self._stand_in_dspark_config(srt)

    @staticmethod
    def _stand_in_dspark_config(srt):
        """_config_draft_model imports checkpoint_bundles_dspark_draft from the DSpark config
        module, whose top level imports the scheduler (its request schemas cannot be built
        here): the module is the release's own statements that run without it."""
        name = "sglang.srt.speculative.dspark_components.dspark_config"
        path = os.path.join(srt, *DSPARK_CONFIG)
        if not os.path.exists(path):
            return
        module = sglang_env.module_from_subset(path, name)
        if not hasattr(module, "checkpoint_bundles_dspark_draft"):
            raise SystemExit(f"{path}: checkpoint_bundles_dspark_draft did not define")
        sys.modules[name] = module

    def _inline_ssm_test(self, kvb_path):
        """0.5.17/0.5.18 compute `is_hybrid_ssm` inside build_kv_cache: run those statements."""
        with open(kvb_path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        build = next(n for n in tree.body
                     if isinstance(n, ast.FunctionDef) and n.name == "build_kv_cache")
        wanted = {"_spec", "_registry_needs_mamba", "is_hybrid_ssm"}
        body = [s for s in build.body if isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in wanted for t in s.targets)]
        if not body or not any(t.id == "is_hybrid_ssm" for t in body[-1].targets):
            raise SystemExit(f"{kvb_path}: no is_hybrid_ssm assignment in build_kv_cache")
        code = compile(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])),
                       kvb_path, "exec")

        def uses_ssm_state(model_config):
            scope = dict(self.kvb, tp_worker=_StandInWorker(model_config),
                         model_config=model_config)
            exec(code, scope)
            return scope["is_hybrid_ssm"]

        return uses_ssm_state

    def expose_model_config(self):
        """Makes `sglang.srt.configs.model_config` the release's module as loaded here, for code
        that imports its functions (`is_deepseek_dsa`, ...) at call time."""
        module = types.ModuleType("sglang.srt.configs.model_config")
        vars(module).update(self.mc)
        sys.modules["sglang.srt.configs.model_config"] = module

    def override_providers(self, arch):
        """(the module of the override registry, the providers for `arch` in the order
        collect_model_override_declarations calls them: exact-keyed, then predicate ones)."""
        base = getattr(self.overrides, "model_override_base", self.overrides)
        providers = list(base._MODEL_OVERRIDE_FNS.get(arch, ()))
        providers += [fn for predicate, fn in base._PREDICATE_OVERRIDE_FNS if predicate(arch)]
        return base, providers

    def _disables_hybrid_swa_memory(self, arch, hf_config, notes):
        """The release's per-model override declarations for `arch`, as
        collect_model_override_declarations applies them (constant entry, then exact-keyed
        providers, then predicate providers; the last writer wins). Providers are called one by
        one: some build a whole ModelConfig from a checkpoint path, which cannot run here, and
        that is harmless only for a provider that never declares disable_hybrid_swa_memory."""
        base, providers = self.override_providers(arch)
        disable = bool(base.MODEL_OVERRIDES.get(arch, {}).get("disable_hybrid_swa_memory", False))
        for fn in providers:
            try:
                declared = sglang_env.quietly(base._invoke_provider, fn, _NoServerArgs(), hf_config)
            except Exception as e:
                if "disable_hybrid_swa_memory" in inspect.getsource(fn):
                    raise RuntimeError(f"override {fn.__qualname__} cannot run here: {e}") from e
                notes.append(f"override {fn.__qualname__} skipped (declares no SWA memory): "
                             f"{type(e).__name__}")
                continue
            if declared and "disable_hybrid_swa_memory" in declared:
                disable = bool(declared["disable_hybrid_swa_memory"])
                notes.append(f"{fn.__qualname__}: disable_hybrid_swa_memory={disable}")
        return disable

    def fused_qkv_attention_tp(self, hf_config):
        """The release's `get_mimo_v2_fused_qkv_expected_tp_size` where the config fuses its QKV
        projection weights (`fused_qkv`); None otherwise, or where it refuses the config for a
        missing `num_key_value_heads`."""
        if getattr(hf_config, "attention_projection_layout", None) != "fused_qkv":
            return None
        try:
            return self.mc["get_mimo_v2_fused_qkv_expected_tp_size"](hf_config)
        except ValueError:
            return None

    def loaded(self, path):
        """`load(path)` once per path, for callers that only read the config (the override
        providers, the hooks' checks)."""
        if path not in self._loaded:
            self._loaded[path] = self.load(path)
        return self._loaded[path]

    def load(self, path):
        model_dir = tempfile.mkdtemp(prefix="kvpilot-parity-")
        try:
            shutil.copy(path, os.path.join(model_dir, "config.json"))
            return sglang_env.quietly(self.get_config, model_dir, trust_remote_code=False)
        finally:
            shutil.rmtree(model_dir, ignore_errors=True)

    def classify(self, path):
        """The release's verdict on one config (see the module doc)."""
        verdict = self.model_config(path)[0]
        if verdict["loaded"]:
            verdict["draftNextnLayers"] = self.draft_fact(
                path, "EAGLE", lambda mc: mc.num_nextn_predict_layers)
            verdict["draftArchitectureUnderDspark"] = self.draft_fact(
                path, "DSPARK", lambda mc: mc.hf_config.architectures[0])
        return verdict

    def draft_fact(self, path, algorithm, fact):
        """`fact` of the draft ModelConfig an `algorithm` worker builds from `path`, or
        {"error": ...} where the release cannot build it."""
        try:
            draft_verdict, mc = self.model_config(path, draft=True, algorithm=algorithm)
        except Exception as e:  # a draft rewrite needing code this harness cannot load
            return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        if mc is None:
            return {"error": draft_verdict.get("error")}
        return fact(mc)

    def model_config(self, path, draft=False, algorithm="EAGLE"):
        """(verdict, the release's ModelConfig with shapes and hybrid split derived, or None).

        `draft`: the ModelConfig a speculative draft worker of `algorithm` builds from `path`
        (is_draft_model): the release's own `_config_draft_model` runs before the shapes are
        derived, as ModelConfig.__init__ orders them, so e.g. DeepseekV4ForCausalLM becomes its
        NextN architecture under EAGLE and its DSpark head under DSPARK when it bundles one."""
        name = os.path.basename(path)
        try:
            hf_config = self.load(path)
        except Exception as e:
            first_line = (str(e).splitlines() or [""])[0][:200]
            return {"file": name, "loaded": False,
                    "error": f"{type(e).__name__}: {first_line}"}, None
        notes = []
        archs = list(getattr(hf_config, "architectures", None) or [])
        if not archs:
            return {"file": name, "loaded": False, "error": "config has no architectures"}, None
        disable = self._disables_hybrid_swa_memory(archs[0], hf_config, notes)

        mc = self.mc["ModelConfig"].__new__(self.mc["ModelConfig"])
        # What ModelConfig.__init__ has set by the time it derives shapes, for a target model
        # served with default flags.
        for attr, value in {
            "model_path": os.path.dirname(os.path.abspath(path)), "revision": None,
            "quantization": None, "is_draft_model": draft,
            "speculative_algorithm": algorithm if draft else None,
            "is_draft_quantization_explicit": False, "model_impl": "auto",
            "sampling_defaults": "model", "quantize_and_serve": False,
            "is_multi_layer_eagle": False, "disable_hybrid_swa_memory": disable,
            "model_override_args": {}, "hf_generation_config": None, "hf_config": hf_config,
            "hf_text_config": self.get_hf_text_config(hf_config),
            # Releases before 0.5.21 set these only for hybrid models.
            "swa_attention_layer_ids": None, "full_attention_layer_ids": None,
        }.items():
            setattr(mc, attr, value)
        if draft:
            sglang_env.quietly(mc._config_draft_model)
        try:
            sglang_env.quietly(mc._derive_model_shapes)
        except Exception as e:  # e.g. 0.5.17 on a pure Mamba2 config: no attention heads
            return {"file": name, "loaded": False,
                    "error": f"ModelConfig._derive_model_shapes: {type(e).__name__}: {e}"}, None
        sglang_env.quietly(mc._derive_hybrid_model)
        full = mc.full_attention_layer_ids
        swa = mc.swa_attention_layer_ids
        return {
            "file": name, "architecture": archs[0], "loaded": True,
            "isHybridSwa": bool(mc.is_hybrid_swa),
            "fullLayers": None if full is None else len(full),
            "swaLayers": None if swa is None else len(swa),
            "usesSsmState": bool(self.uses_ssm_state(mc)),
            "isMla": mc.attention_arch == self.mc["AttentionArch"].MLA,
            "isDsa": bool(self.mc["is_deepseek_dsa"](hf_config)),
            "isSwaCompress": bool(getattr(mc, "is_hybrid_swa_compress", False)),
            # The DeepSeek-V4 pool takes ModelConfig.compress_ratios; ratio 2 makes a DSpark
            # transfer layout (P4).
            "hasRatio2Layers": 2 in (getattr(mc, "compress_ratios", None) or []),
            # Learnable attention sinks, as the DSA KV cache dtype check reads them (DT2).
            "hasLearnableSinks": bool(getattr(hf_config, "learnable_sink", False)),
            # The sizes and MTP draft facts IQuest Q1's MTP draft checks compare (IQ11, IQ12, IQ16).
            "hiddenSize": getattr(mc.hf_text_config, "hidden_size", None),
            "vocabSize": getattr(mc.hf_text_config, "vocab_size", None),
            # What the extra-buffer Mamba cache checks the page size against (M6).
            "mambaChunkSize": getattr(hf_config, "mamba_chunk_size", None),
            # A DSA model's pooled index keys, which its provider checks against DCP (K6; the
            # helper exists from 0.5.20).
            "dsaIndexKpool": (self.mc["get_dsa_index_kpool"](hf_config) if "get_dsa_index_kpool" in self.mc
                              and self.mc["is_deepseek_dsa"](hf_config) else None),
            # MiMo-V2's fused QKV weights and the attention TP they are interleaved for (MV1, MV2).
            "attentionProjectionLayout": getattr(hf_config, "attention_projection_layout", None),
            "fusedQkvAttentionTp": self.fused_qkv_attention_tp(hf_config),
            "mtpDraft": ({"targetLayers": hf_config.num_target_layers, "draftSlots": hf_config.num_draft_slots}
                         if hasattr(hf_config, "num_draft_slots") else None),
            "disableHybridSwaMemory": disable,
            "notes": notes,
        }, mc


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    release = Release(argv[1])
    for path in argv[2:]:
        try:
            result = release.classify(path)
        except Exception as e:  # the harness failed to run the release's code on this file
            result = {"file": os.path.basename(path), "harnessError": f"{type(e).__name__}: {e}"}
            if os.environ.get("PARITY_DEBUG"):
                traceback.print_exc()
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
