"""The tree cache a server builds: each release's choice and refusals (tree_cache.py) against the
guard's rules on the same command lines."""

import itertools
import os

from releases import version_key

from compare.common import ROOT, compare_first_refusal, guard_pods, kvpilot_check_json, run_release_script


TREE_CACHE_CONFIGS = ("llama-3.1-8b-instruct", "deepseek-v3", "deepseek-v3.2-exp", "gpt-oss-20b",
                      "parity/unlimited-ocr", "qwen3-next-80b-a3b")
TREE_CACHE_RULES = ("H1", "H2", "H5", "H6", "H7", "N5", "N6", "R8", "X4", "X5", "SD5")

# Flags each tree-cache scenario adds: none, each flag a check of create_tree_cache reads alone,
# FlexKV (the factory's last choice, a tree without sessions or Mamba state) alone and with the
# flags that need the unified tree.
TREE_CACHE_FLAGS = ((), ("session",), ("tlru",), ("streaming",), ("flexkv",), ("flexkv", "tlru", "streaming"))

# The speculative algorithms whose draft may back its KV up through a sidecar pool (N6), each
# with no flags and with FlexKV: EAGLE3, STANDALONE and DFLASH always, EAGLE where its draft (here
# the model itself, named as the draft model) has no NextN layers, DSPARK where it is not
# DeepSeek-V4's DSpark head.
TREE_CACHE_SPECULATIVE = (("EAGLE", "EAGLE3", "STANDALONE", "DFLASH", "DSPARK"), ((), ("flexkv",)))

# DeepSeek-V4 checkpoints without and with a bundled DSpark head (the latter loads from 0.5.21),
# whose EAGLE draft has a NextN layer and whose DSPARK draft is the head only when bundled.
TREE_CACHE_DSPARK = ((("deepseek-v4", None), ("deepseek-v4.1-dspark", "0.5.21")), ("EAGLE", "DSPARK"))

# The algorithms whose servers name the model itself as the draft model, as an EAGLE server of a
# model without NextN layers, or a DSPARK server of one that bundles no DSpark head, must
# (SGLang drafts with the model itself only where it has those layers).
SELF_DRAFTED = ("EAGLE", "NEXTN", "DSPARK")

# Gemma-4 assistant drafts, which SGLang's speculative hook runs as FROZEN_KV_MTP under EAGLE and
# NEXTN (no draft runners, so no draft plan) and refuses under EAGLE3 (SD5), with and without
# HiCache and the linker; every server names the model itself as its draft model.
TREE_CACHE_ASSISTANT_DRAFTS = (("parity/gemma-4-assistant",), ("EAGLE", "NEXTN", "EAGLE3"), ((), ("linker",)))

# EAGLE drafts whose NextN count the config class takes from a key other than
# num_nextn_predict_layers (Transformers 5.19's alias num_mtp_layers, pinned from 0.5.22: none on
# DeepSeek-V3, two on GLM-4.5) or rewrites to one layer (Dots3, whose loader runs from 0.5.19),
# with and without the linker; every server names the model itself as its draft model.
TREE_CACHE_NEXTN_COUNTS = (("parity/deepseek-v3-mtp-layers-0", "parity/glm-4.5-mtp-layers-2",
                            "parity/dots3-note-nextn-0"), ((), ("linker",)))
TREE_CACHE_NEXTN_COUNTS_SINCE = {"parity/dots3-note-nextn-0": "0.5.19"}

# --hicache-size (GB) on a DeepSeek-V4 model, whose host-pool stack refuses it (H7), with and
# without FlexKV's tree, and on models whose stacks take it.
# The external cache linker (0.5.20 on), which plans the draft's backup by itself and refuses a
# sidecar draft (X4), with each sidecar algorithm and without one.
TREE_CACHE_LINKER = (("llama-3.1-8b-instruct", "deepseek-v3", "deepseek-v4.1-dspark"),
                     ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH", "DSPARK", None))
LINKER_SINCE = "0.5.20"

# Multi-layer EAGLE with the linker, which builds a draft runner per step (0.5.23 takes one
# sidecar draft pool, X5): the flag given or not, the step count SGLang's or given, on Llama and
# on the models whose overrides turn multi-layer EAGLE on for `EAGLE` as given (not for NEXTN or
# `eagle`); the algorithms whose worker may be multi-layer (EAGLE, EAGLE3) and one never is.
TREE_CACHE_MULTI_LAYER = (("llama-3.1-8b-instruct", "mimo-v2-flash", "step-3.5-flash", "parity/gigachat3.5"),
                          ("EAGLE", "NEXTN", "eagle", "EAGLE3", "STANDALONE"), (False, True), (None, 1, 2))

# The first release whose pinned Transformers loads each of those configs (the classification
# part counts the others as refused by SGLang's loader).
TREE_CACHE_MULTI_LAYER_SINCE = {"mimo-v2-flash": "0.5.22", "parity/gigachat3.5": "0.5.21"}
TREE_CACHE_HOST_POOL_SIZES = ((("deepseek-v4",), ((), ("flexkv",)), (0, 8)),
                              (("llama-3.1-8b-instruct", "gpt-oss-20b", "deepseek-v3.2-exp"), ((),), (8,)))


def tree_cache_scenarios():
    """PD decode servers with and without decode radix cache and with each retraction backup, and
    prefill servers, of an MHA, an MLA, a DSA, a hybrid-SWA, a pure-SWA and a hybrid-SSM model,
    with HiCache off, on, or on with buffer-only host memory, each set of TREE_CACHE_FLAGS, and
    neither, the unified-tree or the C++-tree environment variable; and the same servers with
    each speculative algorithm of TREE_CACHE_SPECULATIVE; the same servers with the host pool
    sizes of TREE_CACHE_HOST_POOL_SIZES; with the external cache linker of TREE_CACHE_LINKER, and
    with multi-layer EAGLE of TREE_CACHE_MULTI_LAYER (without HiCache, which the linker
    excludes); Gemma-4 assistant drafts of TREE_CACHE_ASSISTANT_DRAFTS; EAGLE drafts of
    TREE_CACHE_NEXTN_COUNTS; and DeepSeek-V4 checkpoints without and with a DSpark head under
    TREE_CACHE_DSPARK's algorithms."""
    servers = [("decode", radix, backup) for radix in (False, True)
               for backup in (None, "cpu_tensor", "host_pool")] + [("prefill", None, None)]
    hicache = (("off", False, False), ("cache", True, False), ("buffer_only", True, True))
    envs = ({}, {"SGLANG_ENABLE_UNIFIED_RADIX_TREE": "1"}, {"SGLANG_EXPERIMENTAL_CPP_RADIX_TREE": "1"})
    algorithms, speculative_flags = TREE_CACHE_SPECULATIVE
    matrix = [itertools.product(TREE_CACHE_CONFIGS, servers, hicache, TREE_CACHE_FLAGS, envs, (None,), (0,)),
              itertools.product(TREE_CACHE_CONFIGS, servers, hicache, speculative_flags, envs, algorithms, (0,))]
    matrix += [itertools.product(configs, servers, hicache, flags, envs, (None,), sizes)
               for configs, flags, sizes in TREE_CACHE_HOST_POOL_SIZES]
    linker_configs, linker_algorithms = TREE_CACHE_LINKER
    matrix.append(itertools.product(linker_configs, servers, hicache, (("linker",),), ({},), linker_algorithms, (0,)))
    dspark_configs, dspark_algorithms = TREE_CACHE_DSPARK
    matrix.append(itertools.product([config for config, _ in dspark_configs], servers, hicache, speculative_flags,
                                    envs, dspark_algorithms, (0,)))
    since = dict(dspark_configs, **TREE_CACHE_MULTI_LAYER_SINCE, **TREE_CACHE_NEXTN_COUNTS_SINCE)
    multi_layer_configs, multi_layer_algorithms, multi_layer_flags, multi_layer_steps = TREE_CACHE_MULTI_LAYER
    matrix.append(itertools.product(multi_layer_configs, servers, hicache[:1], (("linker",),), ({},),
                                    multi_layer_algorithms, (0,), multi_layer_flags, multi_layer_steps))
    assistant_configs, assistant_algorithms, assistant_flags = TREE_CACHE_ASSISTANT_DRAFTS
    matrix.append(itertools.product(assistant_configs, servers, hicache, assistant_flags, ({},),
                                    assistant_algorithms, (0,)))
    nextn_count_configs, nextn_count_flags = TREE_CACHE_NEXTN_COUNTS
    matrix.append(itertools.product(nextn_count_configs, servers, hicache, nextn_count_flags, ({},), ("EAGLE",), (0,)))
    scenarios = []
    for config, server, (mode, hierarchical, buffer_only), flags, env, speculative, size, *draft_steps \
            in itertools.chain(*matrix):
        role, radix, backup = server
        multi_layer, steps = draft_steps or (False, None)
        scenarios.append({
            "id": f"t{len(scenarios)}",
            "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"),
            "role": role, "radix": radix, "backup": backup, "mode": mode,
            "hierarchical": hierarchical, "bufferOnly": buffer_only, "session": "session" in flags,
            "evictionPolicy": "tlru" if "tlru" in flags else "lru", "streaming": "streaming" in flags,
            "flexkv": "flexkv" in flags, "speculative": speculative, "env": env, "hicacheSize": size,
            "linker": "linker" in flags, "since": since.get(config), "multiLayerFlag": multi_layer,
            "numSteps": steps,
            "selfDrafted": (speculative or "").upper() in SELF_DRAFTED or config in assistant_configs,
        })
    return scenarios


def tree_cache_argv(scenario):
    argv = ["--model-path", "/models/m", "--disaggregation-mode", scenario["role"],
            "--disaggregation-transfer-backend", "mooncake"]
    if scenario["radix"]:
        argv.append("--disaggregation-decode-enable-radix-cache")
    if scenario["backup"]:
        argv += ["--disaggregation-decode-retraction-backup", scenario["backup"]]
    if scenario["hierarchical"]:
        argv += ["--enable-hierarchical-cache", "--hicache-host-memory-mode", scenario["mode"]]
    if scenario["session"]:
        argv.append("--enable-session-radix-cache")
    if scenario["evictionPolicy"] != "lru":
        argv += ["--radix-eviction-policy", scenario["evictionPolicy"]]
    if scenario["streaming"]:
        argv.append("--enable-streaming-session")
    if scenario["flexkv"]:
        argv.append("--enable-flexkv")
    if scenario["speculative"]:
        argv += ["--speculative-algorithm", scenario["speculative"]]
    if scenario["selfDrafted"]:
        argv += ["--speculative-draft-model-path", "/models/m"]
    if scenario["multiLayerFlag"]:
        argv.append("--enable-multi-layer-eagle")
    if scenario["numSteps"] is not None:
        argv += ["--speculative-num-steps", str(scenario["numSteps"])]
    if scenario["hicacheSize"]:
        argv += ["--hicache-size", str(scenario["hicacheSize"])]
    if scenario["linker"]:
        argv.append("--enable-unified-cache-external-linker")
    return argv


def tree_cache_pods(version, scenarios):
    """One Pod per scenario for `kvpilot check`, naming the model itself as the draft model's
    config where the scenario drafts with it."""
    return guard_pods(version, scenarios, tree_cache_argv, lambda s: s["env"],
                      lambda s: s["config"] if s["selfDrafted"] else None)


def check_tree_cache(kvpilot, src, venvs, version, compare):
    """SGLang's tree-cache choice, its checks of it and the builder's after it (tree_cache.py)
    against the guard's H1, H2, H5, H6, H7, N5, N6, R8, X4, X5 and SD5 on the same servers' command lines
    (the linker's scenarios from the release that has it). Returns
    (passed, failed, summary)."""
    scenarios = [s for s in tree_cache_scenarios()
                 if (not s["linker"] or version_key(version) >= version_key(LINKER_SINCE))
                 and (s["since"] is None or version_key(version) >= version_key(s["since"]))]
    stand_in = [dict(s, radixDisabled=s["role"] == "decode" and not s["radix"],
                     hostPool=s["role"] == "decode" and s["backup"] == "host_pool") for s in scenarios]
    # The automatic backup is host_pool where SGLang's resolution picks it (the retraction part
    # checks kvpilot's choice): the harness takes kvpilot's effective backup for it.
    theirs = {}
    reports = {}
    if compare:
        for report in kvpilot_check_json(kvpilot, tree_cache_pods(version, scenarios)):
            reports[report["name"].split("/")[-1]] = report
        for scenario in stand_in:
            effective = (reports.get(scenario["id"], {}).get("effective") or {}).get("retractionBackup")
            if scenario["role"] == "decode" and scenario["backup"] is None and not scenario["radix"]:
                scenario["hostPool"] = effective == "host_pool"
    theirs = {r["id"]: r for r in run_release_script("tree_cache.py", src, venvs, stand_in)}
    compared = [s for s in scenarios if not theirs[s["id"]]["factoryRefused"]]
    refusing = sum(theirs[s["id"]]["raised"] for s in compared)
    summary = (f"tree cache scenarios {len(scenarios)} (the unified cache refuses host-pool "
               f"retraction first in {len(scenarios) - len(compared)}; refused by SGLang {refusing}")
    if not compare:
        return len(compared), 0, summary + ")"
    agreements, failed, rules = compare_first_refusal(
        compared, theirs, reports, lambda v: v["rule"] in TREE_CACHE_RULES,
        lambda s: (f"{version} tree cache {os.path.basename(s['config'])} "
                   f"{' '.join(tree_cache_argv(s)[4:])} env {s['env']}"))
    return agreements, failed, summary + f"; by rule: {rules}), agreements {agreements}"
