"""Context parallelism and the parallel shape (TP, DP, attention DP): each release's checks
against the guard's rules."""

import itertools
import os

from releases import version_key

from compare.common import ROOT, check_with_guard, role_argv


# The DeepSeek-family provider's DSA prefill-CP asserts (CP9, CP10), DeepSeek-V4's CP validation
# (CP10-CP13), the model hook's DSA prefill-CP check (CP6) and the context-parallel hook (CP1-CP5)
# on PD decode, PD prefill and servers without PD, with and without prefill CP, each strategy and
# attention CP (with TP, replicas and attention DP for the divisibility asserts, CP7 and CP8, and
# the DP the DeepSeek asserts refuse; TP 16 under prefill CP, beyond one machine): Nemotron-H (its
# own config and the one a VL model nests), LongCat-Flash, the DSA models DeepSeek-V3.2 and GLM-5,
# DeepSeek-V3 (MLA without DSA), DeepSeek-V4, MiMo-V2 (its loader runs from 0.5.22) with and
# without SGLANG_ENABLE_CP_V2=0, and Llama as the control.
CONTEXT_PARALLEL_CONFIGS = (("llama-3.1-8b-instruct", None, ({},)), ("nemotron-nano-9b-v2", None, ({},)),
                            ("nemotron-nano-vl-v2", None, ({},)), ("parity/longcat-flash", None, ({},)),
                            ("deepseek-v3.2-exp", None, ({},)), ("glm-5", None, ({},)), ("deepseek-v3", None, ({},)),
                            ("deepseek-v4", None, ({},)),
                            ("mimo-v2-flash", "0.5.22", ({}, {"SGLANG_ENABLE_CP_V2": "0"})))
CONTEXT_PARALLEL_RULES = ("CP1", "CP2", "CP3", "CP4", "CP5", "CP6", "CP7", "CP8", "CP9", "CP10", "CP11", "CP12",
                          "CP13", "LS0", "LS1", "LS2", "LS3", "LS4", "LS5")

# DSA cache layer split (LS0-LS5) at TP 4 on the DSA models, DeepSeek-V3, DeepSeek-V4 and Llama:
# each role, prefill CP off or with each strategy, Mooncake or NIXL, pipeline stages or none.
LAYER_SPLIT_CONFIGS = ("deepseek-v3.2-exp", "glm-5", "deepseek-v3", "deepseek-v4", "llama-3.1-8b-instruct")


def context_parallel_shapes(version, prefill_cp):
    """(TP, DP flags) for a server with attention or prefill CP: TP 1 (the default), 2, 4 or 6,
    and 16 under prefill CP; without DP, with replicas, and with attention DP in each release's
    spelling (the divisibility asserts, and the DP the DeepSeek family's prefill CP refuses)."""
    data_parallel = [[], ["--dp-size", "2"], ["--dp-size", "2", "--enable-dp-attention"]]
    if version_key(version) >= version_key("0.5.22"):
        data_parallel.append(["--attn-dp-size", "2"])
    sizes = (1, 2, 4, 6, 16) if prefill_cp else (1, 2, 4, 6)
    return [(tp, dp) for tp in sizes for dp in data_parallel if not dp or tp > 1]


def context_parallel_scenarios(version):
    scenarios = []
    for config, since, envs in CONTEXT_PARALLEL_CONFIGS:
        if since is not None and version_key(version) < version_key(since):
            continue
        for role, prefill_cp, strategy, attention_cp, env in itertools.product(
                ("decode", "prefill", "null"), (False, True), (None, "interleave", "zigzag"), (1, 2, 4), envs):
            shapes = context_parallel_shapes(version, prefill_cp) if attention_cp != 1 or prefill_cp else [(1, [])]
            for tp, dp in shapes:
                argv = ["--model-path", "/models/m"]
                argv += role_argv(role)
                if tp != 1:
                    argv += ["--tp", str(tp), *dp]
                if prefill_cp:
                    argv.append("--enable-prefill-cp")
                if strategy is not None:
                    argv += ["--cp-strategy", strategy]
                if attention_cp != 1:
                    argv += ["--attn-cp-size", str(attention_cp)]
                scenarios.append({"id": f"c{len(scenarios)}", "config": os.path.join(
                    ROOT, "tests/fixtures/configs", f"{config}.json"), "argv": argv, "env": env})
    for config, role, strategy, backend, pp in itertools.product(
            LAYER_SPLIT_CONFIGS, ("decode", "prefill", "null"), (None, "interleave", "zigzag"), ("mooncake", "nixl"),
            (1, 2)):
        argv = ["--model-path", "/models/m", "--disaggregation-transfer-backend", backend]
        argv += ["--disaggregation-mode", role] if role != "null" else []
        argv += ["--tp", "4", "--enable-dsa-cache-layer-split"]
        argv += ["--enable-prefill-cp", "--cp-strategy", strategy] if strategy else []
        argv += ["--pp-size", str(pp)] if pp != 1 else []
        scenarios.append({"id": f"c{len(scenarios)}", "config": os.path.join(
            ROOT, "tests/fixtures/configs", f"{config}.json"), "argv": argv, "env": {}})
    return scenarios


def check_context_parallel(kvpilot, src, venvs, version, compare):
    """The DeepSeek family's prefill-CP asserts, the model hook's DSA prefill-CP and cache layer
    split checks and the context-parallel hook's model, strategy and divisibility checks
    (context_parallel.py) against the guard's CP1-CP13 and LS0-LS5."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "context parallel", "scenarios": context_parallel_scenarios(version),
        "script": "context_parallel.py", "argv": lambda s: s["argv"], "env": lambda s: s["env"],
        "rules": CONTEXT_PARALLEL_RULES})


# The data-parallel shape (DP1-DP4) on PD decode, PD prefill and servers without PD: TP 1 to 8,
# replicas, attention DP in each release's spellings (the deprecated pair, and from 0.5.22
# --attn-dp-size, one group included, alone and beside --dp-size) and one or two nodes.
PARALLEL_SHAPE_TP = (1, 2, 3, 4, 6, 8)
PARALLEL_SHAPE_DP = ((), ("--dp-size", "2"), ("--dp-size", "3"), ("--dp-size", "4"),
                     ("--dp-size", "2", "--enable-dp-attention"), ("--dp-size", "3", "--enable-dp-attention"),
                     ("--dp-size", "4", "--enable-dp-attention"))
PARALLEL_SHAPE_ATTN_DP_SINCE = "0.5.22"
PARALLEL_SHAPE_ATTN_DP = (("--attn-dp-size", "1"), ("--attn-dp-size", "2"), ("--attn-dp-size", "3"),
                          ("--attn-dp-size", "4"), ("--dp-size", "2", "--attn-dp-size", "1"),
                          ("--attn-dp-size", "3", "--dp-size", "2"), ("--dp-size", "2", "--attn-dp-size", "4"),
                          ("--dp-size", "2", "--enable-dp-attention", "--attn-dp-size", "1"))
PARALLEL_SHAPE_RULES = ("DP1", "DP2", "DP3", "DP4")


def parallel_shape_scenarios(version):
    shapes = PARALLEL_SHAPE_DP
    if version_key(version) >= version_key(PARALLEL_SHAPE_ATTN_DP_SINCE):
        shapes += PARALLEL_SHAPE_ATTN_DP
    scenarios = []
    for role, tp, shape, nodes in itertools.product(("decode", "prefill", "null"), PARALLEL_SHAPE_TP, shapes, (1, 2)):
        argv = ["--model-path", "/models/m", "--tp-size", str(tp), *shape]
        argv += role_argv(role)
        if nodes != 1:
            argv += ["--nnodes", str(nodes)]
        scenarios.append({"id": f"s{len(scenarios)}", "argv": argv,
                          "config": os.path.join(ROOT, "tests/fixtures/configs/llama-3.1-8b-instruct.json")})
    return scenarios


def check_parallel_shape(kvpilot, src, venvs, version, compare):
    """The data-parallel hook's and the validation hook's shape checks (parallel_shape.py) against
    the guard's DP1-DP4."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "parallel shape", "scenarios": parallel_shape_scenarios(version),
        "script": "parallel_shape.py", "argv": lambda s: s["argv"], "rules": PARALLEL_SHAPE_RULES})
