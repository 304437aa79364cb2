"""Speculative decoding: the draft model's geometry, the algorithm names and the parallelism a
speculative server may use, each release's checks against kvpilot's."""

import itertools
import json
import os

from compare.common import (
    ROOT, check_with_guard, kvpilot_reports, role_argv, run_release_script, settings_argv)
from compare.retraction import manifest


DRAFT_TARGETS = ("deepseek-v4", "llama-3.1-8b-instruct")
DRAFTS = (None, "deepseek-v4-nextn", "deepseek-v4-nextn-window-64", "llama-3.1-8b-instruct")


def draft_scenarios():
    """A PD decode server with EAGLE speculative decoding: a DeepSeek-V4 target with its own
    NextN layers, a NextN checkpoint of the same or another window, or a Llama draft, under
    decode context parallelism 1, 2 and 4; and a Llama target, whose pool is no DeepSeek-V4 pool."""
    scenarios = []
    for target, draft, dcp in itertools.product(DRAFT_TARGETS, DRAFTS, (1, 2, 4)):
        if target != "deepseek-v4" and (draft is None or dcp == 4):
            continue
        scenarios.append({
            "id": f"d{len(scenarios)}",
            "target": os.path.join(ROOT, "tests/fixtures/configs", f"{target}.json"),
            "draft": draft and os.path.join(ROOT, "tests/fixtures/configs", f"{draft}.json"),
            "dcp": dcp,
        })
    return scenarios


def draft_manifest(scenario):
    document = manifest({"id": scenario["id"], "config": scenario["target"], "flags": {
        "decodeRadixCache": False, "decodeOffloadKvCache": False,
        "decodeContextParallel": scenario["dcp"], "priorityScheduling": False,
        "disablePriorityPreemption": False, "enableUnifiedMemory": False}})
    disaggregation = document["spec"]["disaggregation"]
    disaggregation["speculativeAlgorithm"] = "EAGLE"
    if scenario["draft"]:
        with open(scenario["draft"], encoding="utf-8") as f:
            disaggregation["speculativeDraftModel"] = {
                "name": f"parity/{os.path.basename(scenario['draft'])}",
                "config": {"inline": json.load(f)}}
    return document


def check_draft_geometry(kvpilot, src, venvs, version, compare):
    """SGLang's DeepSeek-V4 draft-pool check (T7-T11, draft_geometry.py) against kvpilot's T11 on
    the same servers. Returns (passed, failed, summary)."""
    scenarios = draft_scenarios()
    theirs = {r["id"]: r for r in run_release_script("draft_geometry.py", src, venvs, scenarios)}
    refusing = sum(theirs[s["id"]]["raised"] for s in scenarios)
    summary = f"draft geometry scenarios {len(scenarios)} (refused by SGLang {refusing})"
    if not compare:
        return len(scenarios), 0, summary
    reports = kvpilot_reports(kvpilot, [draft_manifest(s) for s in scenarios], version)
    agreements = failed = 0
    for scenario in scenarios:
        ours = [v["message"] for v in reports.get(scenario["id"], {}).get("violations", [])
                if v["rule"].startswith("T")]
        message = theirs[scenario["id"]]["message"]
        if (message in ours) if message else not ours:
            agreements += 1
            continue
        failed += 1
        draft = os.path.basename(scenario["draft"] or "(own NextN layers)")
        print(f"  {version} draft {os.path.basename(scenario['target'])} + {draft} dcp "
              f"{scenario['dcp']}: SGLang {message!r}, kvpilot {ours}")
    return agreements, failed, summary + f", agreements {agreements}"


# The speculative hook's checks of a server's parallelism (SD6-SD8): each algorithm spelling on PD
# decode, PD prefill and servers without PD, with pipeline stages, DP and DP attention.
SPECULATIVE_PARALLEL_ALGORITHMS = ("EAGLE", "nextn", "EAGLE3", "STANDALONE", "standalone", "NGRAM", "ngram",
                                   "DSPARK", "dspark", "DFLASH")
SPECULATIVE_PARALLEL_RULES = ("SD3", "SD6", "SD7", "SD8", "SD9", "SD10", "SD11", "SD12", "SD13", "SD14", "SD15", "SD16",
                              "PP1", "PP2", "PP3", "PP4", "PP5", "PP6", "DB1", "DB2", "DB3")

# DFLASH's block size, draft tokens and draft window (DB1-DB3) on each role, unset or given
# (the window only where the block is given: SGLang reads it from the draft's config.json
# otherwise): (block size, draft tokens, window).
DFLASH_SIZES = tuple((size, tokens, window) for size, tokens, window in itertools.product(
    (None, 0, 4, 8), (None, 4, 8), (None, 4, 8)) if window is None or size is not None or tokens is not None)

# With pipeline stages, the validation hook's checks also read multi-layer EAGLE, adaptive
# speculative decoding and SGLANG_ENABLE_PP_SPEC: each combination.
SPECULATIVE_PIPELINE_VARIANTS = tuple(itertools.product((False, True), (False, True),
                                                        ({}, {"SGLANG_ENABLE_PP_SPEC": "1"})))

# With DP attention, the DFLASH and DSPARK handlers also read the DP LM head, attention CP and
# SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION: each combination.
SPECULATIVE_DP_ATTENTION_ALGORITHMS = ("DFLASH", "DSPARK", "dspark")
SPECULATIVE_DP_ATTENTION_VARIANTS = tuple(itertools.product(
    (False, True), (1, 2), ({}, {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"})))

# With the DP LM head and one pipeline stage, DSPARK's handler also reads the MoE all-to-all
# backend and SGLANG_RAGGED_VERIFY_MODE: each backend every release's parser takes, by ragged mode.
SPECULATIVE_DSPARK_MOE = tuple(itertools.product((None, "deepep", "megamoe", "mori"),
                                                 ({}, {"SGLANG_RAGGED_VERIFY_MODE": "compact"})))


def speculative_parallel_scenarios():
    scenarios = []
    for algorithm, role, pp, dp, dp_attention in itertools.product(
            SPECULATIVE_PARALLEL_ALGORITHMS, ("decode", "prefill", "null"), (1, 2), (1, 2), (False, True)):
        pipeline = SPECULATIVE_PIPELINE_VARIANTS if pp != 1 else ((False, False, {}),)
        attention = SPECULATIVE_DP_ATTENTION_VARIANTS \
            if dp_attention and algorithm in SPECULATIVE_DP_ATTENTION_ALGORITHMS else ((False, 1, {}),)
        for (multi_layer, adaptive, pp_env), (lm_head, attn_cp, dp_env) in itertools.product(pipeline, attention):
            moe = SPECULATIVE_DSPARK_MOE if lm_head and pp == 1 and algorithm.upper() == "DSPARK" else ((None, {}),)
            # Mixed chunked prefill, which the validation hook checks last, on the plain servers.
            mixed = (False, True) if pp == 1 and not lm_head and attn_cp == 1 and not dp_env else (False,)
            for (moe_a2a, ragged_env), mixed_chunk in itertools.product(moe, mixed):
                scenarios.append({
                    "id": f"p{len(scenarios)}",
                    "config": os.path.join(ROOT, "tests/fixtures/configs/llama-3.1-8b-instruct.json"),
                    "algorithm": algorithm, "role": role, "pp": pp, "dp": dp, "dpAttention": dp_attention,
                    "dpLmHead": lm_head, "attnCp": attn_cp, "moeA2a": moe_a2a, "mixedChunk": mixed_chunk,
                    "multiLayer": multi_layer, "adaptive": adaptive, "env": dict(pp_env, **dp_env, **ragged_env),
                    "blockSize": None, "draftTokens": None, "windowSize": None})
    for algorithm, role, (size, tokens, window) in itertools.product(("DFLASH", "EAGLE"), ("decode", "prefill", "null"),
                                                                     DFLASH_SIZES):
        scenarios.append({
            "id": f"p{len(scenarios)}", "config": os.path.join(ROOT, "tests/fixtures/configs/llama-3.1-8b-instruct.json"),
            "algorithm": algorithm, "role": role, "pp": 1, "dp": 1, "dpAttention": False, "dpLmHead": False,
            "attnCp": 1, "moeA2a": None, "mixedChunk": False, "multiLayer": False, "adaptive": False, "env": {},
            "blockSize": size, "draftTokens": tokens, "windowSize": window})
    return scenarios


SPECULATIVE_PARALLEL_OPTIONS = (("pp", "--pp-size", 1), ("dp", "--dp-size", 1),
                                ("dpAttention", "--enable-dp-attention", False),
                                ("multiLayer", "--enable-multi-layer-eagle", False),
                                ("adaptive", "--speculative-adaptive", False), ("dpLmHead", "--enable-dp-lm-head", False),
                                ("attnCp", "--attn-cp-size", 1), ("moeA2a", "--moe-a2a-backend", None),
                                ("mixedChunk", "--enable-mixed-chunk", False),
                                ("blockSize", "--speculative-dflash-block-size", None),
                                ("draftTokens", "--speculative-num-draft-tokens", None),
                                ("windowSize", "--speculative-draft-window-size", None))


def speculative_parallel_argv(scenario):
    return ["--model-path", "/models/m", "--speculative-algorithm", scenario["algorithm"],
            *role_argv(scenario["role"]), *settings_argv(scenario, SPECULATIVE_PARALLEL_OPTIONS)]


def check_speculative_parallel(kvpilot, src, venvs, version, compare):
    """The speculative hook's parallelism checks and the validation hook's pipeline checks
    (speculative_checks.py) against the guard's SD3, SD6-SD16 and PP1-PP6."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "speculative parallelism", "scenarios": speculative_parallel_scenarios(),
        "script": "speculative_checks.py", "argv": speculative_parallel_argv, "env": lambda s: s["env"],
        "rules": SPECULATIVE_PARALLEL_RULES})


SPECULATIVE_NAMES = ("EAGLE", "eagle", "Eagle3", "NEXTN", "nextn", "STANDALONE", "ngram", "DFLASH",
                     "dspark", "FROZEN_KV_MTP", "UNO", "uno", "NONE", "none", "FOO", "MTP", "EAGLE-3",
                     "medusa", "lookahead", " EAGLE", "EAGLE ")


def speculative_manifest(index, name):
    document = manifest({"id": f"s{index}", "config": os.path.join(
        ROOT, "tests/fixtures/configs/llama-3.1-8b-instruct.json"), "flags": {
        "decodeRadixCache": False, "decodeOffloadKvCache": False, "decodeContextParallel": 1,
        "priorityScheduling": False, "disablePriorityPreemption": False,
        "enableUnifiedMemory": False}})
    document["spec"]["disaggregation"]["speculativeAlgorithm"] = name
    return document


def check_speculative_names(kvpilot, src, venvs, version, compare):
    """The release's reading of --speculative-algorithm names (speculative_names.py) against
    kvpilot's SD1. Returns (passed, failed, summary)."""
    theirs = run_release_script("speculative_names.py", src, venvs, list(SPECULATIVE_NAMES))
    refused = sum(answer["raised"] for answer in theirs)
    summary = f"speculative algorithm names {len(theirs)} (unknown to SGLang {refused}"
    if not compare:
        return len(theirs), 0, summary + ")"
    manifests = [speculative_manifest(i, name) for i, name in enumerate(SPECULATIVE_NAMES)]
    reports = kvpilot_reports(kvpilot, manifests, version)
    agreements = failed = 0
    for index, answer in enumerate(theirs):
        ours = [v["message"] for v in reports.get(f"s{index}", {}).get("violations", [])
                if v["rule"] == "SD1"]
        if ours == ([answer["message"]] if answer["raised"] else []):
            agreements += 1
            continue
        failed += 1
        print(f"  {version} speculative algorithm {answer['name']!r}: SGLang {answer['message']!r}, "
              f"kvpilot {ours}")
    return agreements, failed, summary + f"), agreements {agreements}"
