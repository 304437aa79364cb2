"""Model-specific hooks: DeepSeek-V4, the model and family overrides, IQuest MTP, MiMo-V2,
language-model-only and the DSA KV cache, each release's code against the guard's rules."""

import itertools
import os

from releases import version_key

from compare.common import ROOT, check_with_guard, fixture, role_argv, settings_argv


# DeepSeek-V4's model hook (V1-V3) on DeepSeek-V4, DeepSeek-V4.1 (its loader runs from 0.5.21)
# and, as the control, DeepSeek-V3 servers, decode and prefill: the algorithm as given, EAGLE's
# top-k unset, 1 or 2, and HiSparse, two-batch overlap and pipeline stages on or off.
DSV4_HOOK_CONFIGS = (("deepseek-v4", None), ("deepseek-v4.1-dspark", "0.5.21"), ("deepseek-v3", None))
DSV4_HOOK_ALGORITHMS = (None, "EAGLE", "eagle", "NEXTN", "nextn", "DSPARK", "dspark", "EAGLE3", "NGRAM", "STANDALONE")

# DeepSeek-V4.1 DSpark PD servers (V4, 0.5.21 on): each transfer backend kvpilot knows, data
# parallelism with DP attention or none, attention CP, prefill CP with each strategy, DCP, and
# SGLANG_RAGGED_VERIFY_MODE unset, static or compact.
DSV4_PD_SETTINGS = (("mooncake", "nixl", "mori"), (1, 2), (1, 2), (False, True), (None, "interleave", "zigzag"),
                    (1, 2), (None, "static", "compact"))
DSV4_PD_SINCE = "0.5.21"
DSV4_SERVER_DEFAULTS = {"backend": "mooncake", "dp": 1, "attnCp": 1, "prefillCp": False, "cpStrategy": None,
                        "dcp": 1, "raggedVerify": None}


def dsv4_hook_scenarios(version):
    scenarios = []
    for (config, since), role, algorithm, topk, hisparse, overlap, pp in itertools.product(
            DSV4_HOOK_CONFIGS, ("decode", "prefill"), DSV4_HOOK_ALGORITHMS, (None, 1, 2), (False, True),
            (False, True), (1, 2)):
        if since is not None and version_key(version) < version_key(since):
            continue
        scenarios.append(dict(DSV4_SERVER_DEFAULTS,
                              config=os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"), role=role,
                              algorithm=algorithm, topk=topk, hisparse=hisparse, twoBatchOverlap=overlap, pp=pp))
    if version_key(version) >= version_key(DSV4_PD_SINCE):
        for role, (backend, dp, attn_cp, prefill_cp, strategy, dcp, ragged) in itertools.product(
                ("decode", "prefill"), itertools.product(*DSV4_PD_SETTINGS)):
            scenarios.append({"config": os.path.join(ROOT, "tests/fixtures/configs", "deepseek-v4.1-dspark.json"),
                              "role": role, "algorithm": "DSPARK", "topk": None, "hisparse": False,
                              "twoBatchOverlap": False, "pp": 1, "backend": backend, "dp": dp, "attnCp": attn_cp,
                              "prefillCp": prefill_cp, "cpStrategy": strategy, "dcp": dcp, "raggedVerify": ragged})
    return [dict(scenario, id=f"v{i}") for i, scenario in enumerate(scenarios)]


def dsv4_hook_argv(scenario):
    argv = ["--model-path", "/models/m", "--disaggregation-mode", scenario["role"],
            "--disaggregation-transfer-backend", scenario["backend"]]
    if scenario["dp"] != 1:
        argv += ["--dp-size", str(scenario["dp"]), "--enable-dp-attention"]
    if scenario["attnCp"] != 1:
        argv += ["--attn-cp-size", str(scenario["attnCp"])]
    if scenario["prefillCp"]:
        argv.append("--enable-prefill-cp")
    if scenario["cpStrategy"]:
        argv += ["--cp-strategy", scenario["cpStrategy"]]
    if scenario["dcp"] != 1:
        argv += ["--dcp-size", str(scenario["dcp"])]
    if scenario["algorithm"]:
        argv += ["--speculative-algorithm", scenario["algorithm"]]
    if scenario["topk"] is not None:
        argv += ["--speculative-eagle-topk", str(scenario["topk"])]
    if scenario["hisparse"]:
        argv.append("--enable-hisparse")
    if scenario["twoBatchOverlap"]:
        argv.append("--enable-two-batch-overlap")
    if scenario["pp"] != 1:
        argv += ["--pp-size", str(scenario["pp"])]
    return argv


def dsv4_hook_env(scenario):
    return {"SGLANG_RAGGED_VERIFY_MODE": scenario["raggedVerify"]} if scenario["raggedVerify"] else {}


def check_dsv4_hook(kvpilot, src, venvs, version, compare):
    """DeepSeek-V4's model hook (dsv4_hook.py) against the guard's V1-V4."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "DeepSeek-V4 hook", "scenarios": dsv4_hook_scenarios(version), "script": "dsv4_hook.py",
        "argv": dsv4_hook_argv, "env": dsv4_hook_env, "rules": ("V1", "V2", "V3", "V4")})


# The DeepSeek family's model override provider (K1-K6): DSA models (DeepSeek-V3.2, GLM-5, and
# DeepSeek-V3.2 with pooled index keys, index_kpool 2), HYV4 (its loader runs from 0.5.20) and, as
# controls, DeepSeek-V3 (MLA without DSA) and Llama; PD
# decode, PD prefill and servers without PD, with DCP, prefill CP, HiCache, HiSparse and EAGLE's
# top-k unset, 1 or 2.
MODEL_OVERRIDE_CONFIGS = (("deepseek-v3.2-exp", None), ("glm-5", None), ("parity/hy-v4", "0.5.20"),
                          ("deepseek-v3", None), ("llama-3.1-8b-instruct", None),
                          ("parity/deepseek-v3.2-index-kpool-2", None))
MODEL_OVERRIDE_RULES = ("K1", "K2", "K3", "K4", "K5", "K6")


def model_override_scenarios(version):
    scenarios = []
    for (config, since), role, dcp, prefill_cp, hicache, hisparse, topk in itertools.product(
            MODEL_OVERRIDE_CONFIGS, ("decode", "prefill", "null"), (1, 2), (False, True), (False, True),
            (False, True), (None, 1, 2)):
        if since is None or version_key(version) >= version_key(since):
            scenarios.append({"id": f"o{len(scenarios)}", "config": os.path.join(
                ROOT, "tests/fixtures/configs", f"{config}.json"), "role": role, "dcp": dcp,
                "prefillCp": prefill_cp, "hicache": hicache, "hisparse": hisparse, "topk": topk})
    return scenarios


MODEL_OVERRIDE_OPTIONS = (("dcp", "--dcp-size", 1), ("prefillCp", "--enable-prefill-cp", False),
                          ("hicache", "--enable-hierarchical-cache", False), ("hisparse", "--enable-hisparse", False),
                          ("topk", "--speculative-eagle-topk", None))


def model_override_argv(scenario):
    return ["--model-path", "/models/m", *role_argv(scenario["role"]),
            *settings_argv(scenario, MODEL_OVERRIDE_OPTIONS)]


def check_model_overrides(kvpilot, src, venvs, version, compare):
    """The DeepSeek family's override provider (deepseek_overrides.py) against the guard's K1-K5."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "model override", "scenarios": model_override_scenarios(version),
        "script": "deepseek_overrides.py", "argv": model_override_argv, "rules": MODEL_OVERRIDE_RULES})


# Other families' model override providers (MC1-MC3, E1, QX1, QX2, IQ1-IQ8) on PD decode, PD
# prefill and servers without PD, each from the first release whose loader takes its config:
# MiniCPM-SALA with and without lightning layers under DP attention, HiCache, each kind of
# attention backend and SGLANG_MINICPM_FORCE_DENSE; ERNIE 4.5 VL MoE under DP attention;
# Qwen4-Exp over MORI or Mooncake with pipeline stages and unified memory; IQuest Q1 with each
# attention backend, speculative algorithm and draft backend, and with context parallelism,
# EAGLE's top-k, multi-layer EAGLE, DP attention and pipeline stages; Nemotron-H with expert
# remapping, MoE runners and all-to-all backends; Llama as the control.
FAMILY_OVERRIDE_RULES = ("MC1", "MC2", "MC3", "E1", "QX1", "QX2", "IQ1", "IQ2", "IQ3", "IQ4", "IQ5", "IQ6",
                         "IQ7", "IQ8", "NH1", "NH2")
FAMILY_ROLES = ("decode", "prefill", "null")
FAMILY_DP_ATTENTION = ((), ("--enable-dp-attention",), ("--enable-dp-attention", "--dp-size", "2"))
FAMILY_MATRICES = (
    (("parity/minicpm-sala", "parity/minicpm-sala-sparse"), "0.5.19", "mooncake", (
        FAMILY_DP_ATTENTION, ((), ("--enable-hierarchical-cache",)),
        ((), ("--attention-backend", "minicpm_flashattn"), ("--attention-backend", "fa3"),
         ("--prefill-attention-backend", "minicpm_flashinfer"))),
     ({}, {"SGLANG_MINICPM_FORCE_DENSE": "1"})),
    (("parity/ernie-4.5-vl-moe",), None, "mooncake", (FAMILY_DP_ATTENTION,), ({},)),
    (("parity/qwen4-exp",), "0.5.20", ("mooncake", "mori"), (
        ((), ("--pp-size", "2")), ((), ("--enable-unified-memory",))), ({},)),
    (("parity/iquest-q1",), "0.5.21", "mooncake", (
        ((), ("--attention-backend", "fa3"), ("--decode-attention-backend", "triton")),
        ((), ("--speculative-algorithm", "EAGLE"), ("--speculative-algorithm", "nextn"),
         ("--speculative-algorithm", "STANDALONE")),
        ((), ("--speculative-draft-attention-backend", "triton"))), ({},)),
    (("parity/iquest-q1",), "0.5.21", "mooncake", (
        ((), ("--dcp-size", "2"), ("--attn-cp-size", "2"), ("--enable-prefill-cp",)),
        ((), ("--speculative-eagle-topk", "1"), ("--speculative-eagle-topk", "2")),
        ((), ("--enable-multi-layer-eagle",)), FAMILY_DP_ATTENTION, ((), ("--pp-size", "2"))), ({},)),
    (("nemotron-nano-9b-v2",), None, "mooncake", (
        ((), ("--enable-eplb",), ("--ep-num-redundant-experts", "1"), ("--init-expert-location", "/expert-map.json")),
        ((), ("--moe-runner-backend", "flashinfer_trtllm"), ("--moe-runner-backend", "flashinfer_cutedsl"),
         ("--moe-runner-backend", "flashinfer_trtllm_routed")),
        ((), ("--moe-a2a-backend", "deepep"))), ({},)),
    (("llama-3.1-8b-instruct",), None, "mooncake", (
        FAMILY_DP_ATTENTION, ((), ("--enable-hierarchical-cache",)), ((), ("--pp-size", "2")),
        ((), ("--enable-eplb", "--moe-runner-backend", "flashinfer_trtllm"))), ({},)),
)


def family_override_scenarios(version):
    scenarios = []
    for configs, since, backends, flag_sets, envs in FAMILY_MATRICES:
        if since is not None and version_key(version) < version_key(since):
            continue
        backends = backends if isinstance(backends, tuple) else (backends,)
        for config, role, backend, flags, env in itertools.product(
                configs, FAMILY_ROLES, backends, itertools.product(*flag_sets), envs):
            if role == "null" and backend != backends[0]:
                continue
            argv = ["--model-path", "/models/m"]
            if role != "null":
                argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", backend]
            scenarios.append({"id": f"f{len(scenarios)}", "config": os.path.join(
                ROOT, "tests/fixtures/configs", f"{config}.json"), "argv": argv + [a for f in flags for a in f],
                "env": env})
    return scenarios


def check_family_overrides(kvpilot, src, venvs, version, compare):
    """MiniCPM's, ERNIE 4.5 VL MoE's, Qwen4-Exp's, IQuest Q1's and Nemotron-H's override providers
    (family_overrides.py) against the guard's MC1-MC3, E1, QX1, QX2, IQ1-IQ8, NH1 and NH2."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "family override", "scenarios": family_override_scenarios(version),
        "script": "family_overrides.py", "argv": lambda s: s["argv"], "env": lambda s: s["env"],
        "rules": FAMILY_OVERRIDE_RULES})


# IQuest Q1's override provider and the speculative hook's MTP draft checks (IQ1-IQ16; the hook
# and the model's loader from 0.5.21) on PD decode servers and servers without PD: EAGLE, nextn
# and STANDALONE; no draft model, the model's own path, and a draft model at another path that is
# an MTP checkpoint (sliding, full attention, trained for another layer count or hidden size),
# the model itself, or
# Llama; the steps, EAGLE's top-k and the verify width unset, matching or not; a token map or
# none. Llama drafting with the MTP checkpoint is the control.
IQUEST_MTP_SINCE = "0.5.21"
IQUEST_MTP_DRAFTS = (None, "self", "parity/iquest-q1-mtp", "parity/iquest-q1-mtp-full-attention",
                     "parity/iquest-q1-mtp-other-target", "parity/iquest-q1-mtp-other-width", "parity/iquest-q1",
                     "llama-3.1-8b-instruct")
IQUEST_MTP_FLAGS = (((), ("--speculative-num-steps", "0"), ("--speculative-num-steps", "2")),
                    ((), ("--speculative-eagle-topk", "0"), ("--speculative-eagle-topk", "2")),
                    ((), ("--speculative-num-draft-tokens", "3"), ("--speculative-num-draft-tokens", "8")),
                    ((), ("--speculative-token-map", "/maps/tokens.pt")))
IQUEST_MTP_RULES = ("IQ1", "IQ2", "IQ3", "IQ4", "IQ5", "IQ6", "IQ7", "IQ8", "IQ9", "IQ10", "IQ11", "IQ12", "IQ13",
                    "IQ14", "IQ15", "IQ16")


def iquest_mtp_scenarios(version):
    if version_key(version) < version_key(IQUEST_MTP_SINCE):
        return []
    scenarios = []
    matrix = itertools.product(("parity/iquest-q1",), ("decode", "null"), ("EAGLE", "nextn", "STANDALONE"),
                               IQUEST_MTP_DRAFTS, itertools.product(*IQUEST_MTP_FLAGS))
    control = itertools.product(("llama-3.1-8b-instruct",), ("decode",), ("EAGLE",),
                                ("parity/iquest-q1-mtp",), (((), (), (), ()),))
    for config, role, algorithm, draft, flags in itertools.chain(matrix, control):
        argv = ["--model-path", "/models/m", "--speculative-algorithm", algorithm]
        argv += role_argv(role)
        if draft == "self":
            argv += ["--speculative-draft-model-path", "/models/m"]
        elif draft is not None:
            argv += ["--speculative-draft-model-path", "/models/draft"]
        scenarios.append({"id": f"q{len(scenarios)}", "config": fixture(config),
                          "draftConfig": None if draft in (None, "self") else fixture(draft),
                          "argv": argv + [a for f in flags for a in f]})
    return scenarios


def check_iquest_mtp(kvpilot, src, venvs, version, compare):
    """IQuest Q1's override provider and the speculative hook's MTP draft checks (iquest_mtp.py)
    against the guard's IQ1-IQ16, with each draft model's config.json given to both."""
    if version_key(version) < version_key(IQUEST_MTP_SINCE):
        return 0, 0, f"IQuest MTP scenarios 0 (IQuest Q1 loads from {IQUEST_MTP_SINCE})"
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "IQuest MTP", "scenarios": iquest_mtp_scenarios(version),
        "script": "iquest_mtp.py", "argv": lambda s: s["argv"], "draft": lambda s: s["draftConfig"],
        "rules": IQUEST_MTP_RULES})


# The model hook's MiMo-V2 fused-QKV check (MV1, MV2) on MiMoV2ForCausalLM with fused (for 4 and 2
# KV heads), split and unknown QKV projection layouts, and as controls MiMo-V2-Flash (not checked) and Llama; PD decode,
# PD prefill and no PD; TP 1 to 8, replicas and attention DP in each release's spellings, attention
# CP, and `--encoder-only`, which skips the check; then its HiCache check (MV3, up to 0.5.18) on
# every config and role at TP 4, with HiCache, with SGLANG_ENABLE_UNIFIED_RADIX_TREE set to 1 or
# 0, and without.
MIMO_V2_CONFIGS = ("parity/mimo-v2-fused-qkv", "parity/mimo-v2-fused-qkv-2-kv-heads", "parity/mimo-v2-split-qkv",
                   "parity/mimo-v2-packed-qkv", "mimo-v2-flash", "llama-3.1-8b-instruct")
MIMO_V2_RULES = ("MV1", "MV2", "MV3")
UNIFIED_RADIX_TREE_ENVS = ({}, {"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1"}, {"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "0"})


def mimo_v2_scenarios(version):
    # (flags, attention DP size): replicas, the deprecated pair and, from 0.5.22, --attn-dp-size.
    data_parallel = [([], 1), (["--dp-size", "2"], 1), (["--dp-size", "2", "--enable-dp-attention"], 2)]
    if version_key(version) >= version_key("0.5.22"):
        data_parallel.append((["--attn-dp-size", "2"], 2))
    scenarios = []
    for config, role, tp, (dp_argv, attention_dp), cp, encoder_only in itertools.product(
            MIMO_V2_CONFIGS, ("decode", "prefill", "null"), (1, 2, 4, 8), data_parallel, (1, 2), (False, True)):
        # SGLang divides TP by both (a ZeroDivisionError where nothing is left, as DP1 and the CP
        # hook refuse first).
        if tp // attention_dp // cp == 0:
            continue
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", str(tp), *dp_argv]
        argv += ["--attn-cp-size", str(cp)] if cp > 1 else []
        argv += ["--encoder-only"] if encoder_only else []
        scenarios.append({"id": f"v{len(scenarios)}", "argv": argv, "env": {},
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json")})
    for config, role, hicache, env in itertools.product(
            MIMO_V2_CONFIGS, ("decode", "prefill", "null"), (False, True), UNIFIED_RADIX_TREE_ENVS):
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", "4"]
        argv += ["--enable-hierarchical-cache"] if hicache else []
        scenarios.append({"id": f"v{len(scenarios)}", "argv": argv, "env": env,
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json")})
    return scenarios


def check_mimo_v2_hook(kvpilot, src, venvs, version, compare):
    """The model hook's MiMo-V2 fused-QKV and HiCache checks (mimo_v2_hook.py) against the guard's
    MV1-MV3."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "MiMo-V2 hook", "scenarios": mimo_v2_scenarios(version), "script": "mimo_v2_hook.py",
        "argv": lambda s: s["argv"], "env": lambda s: s["env"], "rules": MIMO_V2_RULES})


# The language-model-only handler (LO1, LO2; the flag from 0.5.18) on PD decode, PD prefill and
# servers without PD of DeepSeek-V4 (listed from 0.5.22), DeepSeek-V4.1 (its loader runs from
# 0.5.21; exempt from the PD check from 0.5.22) and Llama, with and without the flag.
LANGUAGE_MODEL_ONLY_CONFIGS = (("deepseek-v4", None), ("deepseek-v4.1-dspark", "0.5.21"), ("llama-3.1-8b-instruct", None))
LANGUAGE_MODEL_ONLY_RULES = ("LO1", "LO2")


def language_model_only_scenarios(version):
    scenarios = []
    for (config, since), role, flag in itertools.product(
            LANGUAGE_MODEL_ONLY_CONFIGS, ("decode", "prefill", "null"), (False, True)):
        if since is not None and version_key(version) < version_key(since):
            continue
        argv = ["--model-path", "/models/m", *role_argv(role)] + (["--language-model-only"] if flag else [])
        scenarios.append({"id": f"o{len(scenarios)}", "argv": argv,
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json")})
    return scenarios


def check_language_model_only(kvpilot, src, venvs, version, compare):
    """The language-model-only handler (language_model_only.py) against the guard's LO1 and LO2;
    0.5.17 has no such flag."""
    if version_key(version) < version_key("0.5.18"):
        return 0, 0, "language-model-only: no such flag"
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "language-model-only", "scenarios": language_model_only_scenarios(version),
        "script": "language_model_only.py", "argv": lambda s: s["argv"], "rules": LANGUAGE_MODEL_ONLY_RULES})


# The model hook's DSA KV cache dtype checks (DT1, DT2) on PD decode, PD prefill and servers
# without PD, with each KV cache dtype every release's parser takes, unset, and with DSA backends
# given: the DSA models DeepSeek-V3.2 (also with learnable sinks) and GLM-5, HunYuan V4 (its loader
# runs from 0.5.20, and its config class always has learnable sinks), and DeepSeek-V3 (MLA without
# DSA) and Llama as the controls.
DSA_KV_CACHE_CONFIGS = (("deepseek-v3.2-exp", None), ("parity/deepseek-v3.2-learnable-sink", None), ("glm-5", None),
                        ("parity/hy-v4", "0.5.20"), ("deepseek-v3", None), ("llama-3.1-8b-instruct", None))
DSA_KV_CACHE_DTYPES = (None, "auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4", "fp4_mx_block16")
DSA_KV_CACHE_RULES = ("DT1", "DT2")


def dsa_kv_cache_scenarios(version):
    scenarios = []
    for (config, since), role, dtype, backends in itertools.product(
            DSA_KV_CACHE_CONFIGS, ("decode", "prefill", "null"), DSA_KV_CACHE_DTYPES, (False, True)):
        if since is not None and version_key(version) < version_key(since):
            continue
        argv = ["--model-path", "/models/m"]
        argv += role_argv(role)
        if dtype is not None:
            argv += ["--kv-cache-dtype", dtype]
        if backends:
            argv += ["--dsa-prefill-backend", "flashmla_sparse", "--dsa-decode-backend", "flashmla_kv"]
        scenarios.append({"id": f"k{len(scenarios)}", "config": os.path.join(
            ROOT, "tests/fixtures/configs", f"{config}.json"), "argv": argv})
    return scenarios


def check_dsa_kv_cache(kvpilot, src, venvs, version, compare):
    """The model hook's DSA KV cache dtype checks (dsa_kv_cache.py) against the guard's DT1 and
    DT2."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "DSA KV cache", "scenarios": dsa_kv_cache_scenarios(version),
        "script": "dsa_kv_cache.py", "argv": lambda s: s["argv"], "rules": DSA_KV_CACHE_RULES})
