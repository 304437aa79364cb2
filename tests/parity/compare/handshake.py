"""The prefill <-> decode handshake: each release's decode KV manager (handshake.py) on prefill and
decode server pairs against kvpilot's handshake-phase violations."""

import itertools
import os

from compare.common import (
    ROOT, compare_first_refusal, kvpilot_check_json, kvpilot_reports, run_release_script)
from compare.retraction import manifest


HANDSHAKE_CONFIGS = ("llama-3.1-8b-instruct", "deepseek-v3", "gpt-oss-20b", "qwen3-next-80b-a3b",
                     "kimi-linear-48b-a3b", "deepseek-v4", "minimax-m3-sparse", "deepseek-v4.1-dspark")

# The DeepSeek-V4 models again under DSPARK (P4: only compression-ratio-2 layers make a DSpark
# transfer layout), each pair with equal pipeline stages: with unequal ones the two layouts
# differ first by the stage's layers and pool buffers, which kvpilot does not decide.
HANDSHAKE_DSPARK_CONFIGS = ("deepseek-v4", "deepseek-v4.1-dspark")

# What decides a DeepSeek-V4 server's KV layout (P3): its KV dtype, --dsv4-attn-backend and the
# SGLANG_DSV4_* variables; each pair of these on the prefill and decode servers, with the same
# parallelism and pages.
HANDSHAKE_DSV4_SIDES = (
    {}, {"env": {"SGLANG_DSV4_KV_LAYOUT": "v41"}}, {"env": {"SGLANG_DSV4_KV_LAYOUT": "V41_NEW"}},
    {"env": {"SGLANG_DSV4_KV_LAYOUT": "auto"}}, {"env": {"SGLANG_DSV4_KV_LAYOUT": "v4"}},
    {"backend": "flashmla", "env": {"SGLANG_DSV4_KV_LAYOUT": "v41", "SGLANG_DSV4_COMPRESSED_KV_LAYOUT": "fp8"}},
    {"env": {"SGLANG_DSV4_COMPRESSED_KV_LAYOUT": "fp4"}}, {"backend": "flashmla_mega"}, {"backend": "trtllm"},
    {"dtype": "bfloat16"})

# (tensor parallel, attention CP, KV cache sharding, pipeline stages) of the prefill servers.
HANDSHAKE_PREFILLS = ((2, 1, False, 1), (4, 2, False, 1), (2, 1, True, 1), (4, 1, True, 1),
                      (4, 2, True, 1), (2, 1, False, 2))

# (tensor parallel, decode context parallel, pipeline stages) of the decode servers.
HANDSHAKE_DECODES = ((2, 1, 1), (4, 1, 1), (2, 2, 1), (4, 2, 1), (2, 1, 2))

# (prefill page size, prefill KV dtype, decode KV dtype); decode pages are 64 tokens.
HANDSHAKE_CACHES = ((64, "auto", "auto"), (32, "auto", "auto"), (64, "fp8_e4m3", "auto"),
                    (64, "mxfp8", "mxfp8"))


def handshake_scenarios():
    """Prefill and decode servers of an MHA, an MLA, a hybrid-SWA, a hybrid-SSM, a hybrid-SSM MLA,
    the DeepSeek-V4 and a MiniMax-M3 sparse model: prefill attention CP, KV cache sharding and pipeline stages,
    decode TP, DCP and pipeline stages, and equal or different page sizes and KV dtypes; and the
    DeepSeek-V4 models under DSPARK."""
    scenarios = []
    matrix = [((config, None), prefill, decode, cache) for config, prefill, decode, cache in itertools.product(
        HANDSHAKE_CONFIGS, HANDSHAKE_PREFILLS, HANDSHAKE_DECODES, HANDSHAKE_CACHES)]
    matrix += [((config, "DSPARK"), prefill, decode, cache) for config, prefill, decode, cache in itertools.product(
        HANDSHAKE_DSPARK_CONFIGS, HANDSHAKE_PREFILLS, HANDSHAKE_DECODES, HANDSHAKE_CACHES)
        if prefill[3] == decode[2]]
    for (config, speculative), prefill, decode, cache in matrix:
        (p_tp, p_cp, sharding, p_pp), (d_tp, dcp, d_pp), (page, p_dtype, d_dtype) = prefill, decode, cache
        scenarios.append({
            "id": f"h{len(scenarios)}",
            "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"),
            "prefill": {"tp": p_tp, "cp": p_cp, "pp": p_pp, "page": page, "dtype": p_dtype,
                        "sharding": sharding},
            "decode": {"tp": d_tp, "pp": d_pp, "dcp": dcp, "page": 64, "dtype": d_dtype},
            "speculative": speculative,
        })
    for config, prefill, decode in itertools.product(HANDSHAKE_DSPARK_CONFIGS, HANDSHAKE_DSV4_SIDES,
                                                     HANDSHAKE_DSV4_SIDES):
        side = lambda settings: {"page": 64, "dtype": settings.get("dtype", "auto"), "pp": 1,  # noqa: E731
                                 "dsv4": {k: v for k, v in settings.items() if k != "dtype"}}
        scenarios.append({
            "id": f"h{len(scenarios)}",
            "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"),
            "prefill": dict(side(prefill), tp=2, cp=1, sharding=False),
            "decode": dict(side(decode), tp=2, dcp=1),
            "speculative": None, "fleets": True,
        })
    return scenarios


def handshake_manifest(scenario):
    document = manifest({"id": scenario["id"], "config": scenario["config"], "flags": {
        "decodeRadixCache": False, "decodeOffloadKvCache": False,
        "decodeContextParallel": scenario["decode"]["dcp"], "priorityScheduling": False,
        "disablePriorityPreemption": False, "enableUnifiedMemory": False}})
    prefill, decode = scenario["prefill"], scenario["decode"]
    if scenario.get("fleets"):
        # kvpilot runs the prefill fleet: the layout rules read both fleets' env and extraArgs.
        del document["spec"]["disaggregation"]["prefill"]
        document["spec"]["prefill"] = dict(
            fleet_settings(prefill), replicas=1, tensorParallel=prefill["tp"],
            pipelineParallel=prefill["pp"], pageSize=prefill["page"], kvCacheDtype=prefill["dtype"])
        document["spec"]["decode"].update(fleet_settings(decode))
    else:
        document["spec"]["disaggregation"]["prefill"] = {
            "tensorParallel": prefill["tp"], "attentionContextParallel": prefill["cp"],
            "kvCacheSharding": prefill["sharding"], "pipelineParallel": prefill["pp"],
            "pageSize": prefill["page"], "kvCacheDtype": prefill["dtype"]}
    document["spec"]["decode"].update(tensorParallel=decode["tp"], pipelineParallel=decode["pp"],
                                      pageSize=decode["page"], kvCacheDtype=decode["dtype"])
    if scenario["speculative"]:
        document["spec"]["disaggregation"]["speculativeAlgorithm"] = scenario["speculative"]
    return document


# SGLang's P3 message, which depends on the GPUs where an automatic layout does.
P3_PREFIX = "KV layout mismatch:"


def fleet_settings(side):
    """The env and extraArgs of a fleet that set its DeepSeek-V4 KV layout."""
    settings = side.get("dsv4") or {}
    fleet = {"env": [{"name": k, "value": v} for k, v in settings.get("env", {}).items()]}
    if "backend" in settings:
        fleet["extraArgs"] = ["--dsv4-attn-backend", settings["backend"]]
    return fleet


# The speculative algorithms of a decode server and the prefill server it pairs with, which the
# guard reads from each one's command line (a service's prefill servers run the decode side's):
# DSPARK on one side only makes the DeepSeek-V4.1 DSpark layouts differ (P4b).
HANDSHAKE_PAIR_ALGORITHMS = (None, "DSPARK", "EAGLE")

# (prefill TP, decode TP): equal, and different, which P4 refuses where both run DSPARK.
HANDSHAKE_PAIR_TPS = ((2, 2), (2, 4))


def handshake_pair_scenarios():
    """Prefill and decode servers of the DeepSeek-V4 models, each with its own speculative
    algorithm, for the guard."""
    scenarios = []
    for config, prefill_algorithm, decode_algorithm, (p_tp, d_tp) in itertools.product(
            HANDSHAKE_DSPARK_CONFIGS, HANDSHAKE_PAIR_ALGORITHMS, HANDSHAKE_PAIR_ALGORITHMS, HANDSHAKE_PAIR_TPS):
        scenarios.append({
            "id": f"g{len(scenarios)}",
            "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"),
            "prefill": {"tp": p_tp, "cp": 1, "pp": 1, "page": 64, "dtype": "auto", "sharding": False},
            "decode": {"tp": d_tp, "pp": 1, "dcp": 1, "page": 64, "dtype": "auto"},
            "speculative": decode_algorithm, "prefillSpeculative": prefill_algorithm,
        })
    return scenarios


def handshake_pair_pod(version, scenario, config_map):
    """One Pod running the scenario's prefill and decode servers, which the guard pairs, in a
    namespace of its own."""
    def container(role, side, algorithm):
        args = ["--model-path", "/models/m", "--disaggregation-mode", role,
                "--disaggregation-transfer-backend", "mooncake", "--tp-size", str(side["tp"]),
                "--page-size", str(side["page"])]
        if algorithm:
            args += ["--speculative-algorithm", algorithm]
        return {"name": role, "image": f"lmsysorg/sglang:v{version}",
                "command": ["python3", "-m", "sglang.launch_server"], "args": args}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "servers", "namespace": scenario["id"],
                         "annotations": {"kvpilot.dev/model-config": f"configmap/{config_map}"}},
            "spec": {"containers": [container("prefill", scenario["prefill"], scenario["prefillSpeculative"]),
                                    container("decode", scenario["decode"], scenario["speculative"])]}}


def gpu_independent(theirs, scenarios):
    """SGLang's answers with, where an answer depends on the GPUs the two servers run on (a KV
    layout mismatch on some pairs of GPUs), the message the other pairs raise, which the GPU
    does not change: kvpilot does not decide P3 there (it must report none)."""
    theirs = dict(theirs)
    for scenario in scenarios:
        answer = theirs[scenario["id"]]
        if answer["gpuDependent"]:
            decided = {m for m in answer["gpus"].values() if not (m or "").startswith(P3_PREFIX)}
            message = decided.pop() if len(decided) == 1 else None if not decided else "(GPU-dependent)"
            theirs[scenario["id"]] = dict(answer, message=message)
    return theirs


def reported_p3_where_gpu_dependent(theirs, scenarios, reports):
    """The scenarios whose KV layouts depend on the GPUs and for which kvpilot reports P3."""
    return [s for s in scenarios if theirs[s["id"]]["gpuDependent"] and any(
        v["rule"] == "P3" for v in reports.get(s["id"], {}).get("violations", []))]


def check_handshake_pairs(kvpilot, src, venvs, version, compare):
    """The handshake of servers with different speculative algorithms (handshake.py) against the
    guard's handshake-phase findings on the decode server of a Pod running both. Returns
    (passed, failed, summary)."""
    scenarios = handshake_pair_scenarios()
    theirs = {r["id"]: r for r in run_release_script("handshake.py", src, venvs, scenarios)}
    started = [s for s in scenarios if not theirs[s["id"]]["startRefused"]]
    summary = (f"guard pairs {len(scenarios)} (servers that do not start {len(scenarios) - len(started)}; "
               f"refused by SGLang {sum(theirs[s['id']]['raised'] for s in started)}, on some GPUs only "
               f"{sum(theirs[s['id']]['gpuDependent'] for s in started)}")
    if not compare:
        return len(started), 0, summary + ")"
    # `kvpilot check` pairs the servers of one model across a namespace: a namespace per Pod.
    documents = []
    for scenario in started:
        with open(scenario["config"], encoding="utf-8") as f:
            documents.append({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "model", "namespace": scenario["id"]},
                              "data": {"config.json": f.read()}})
        documents.append(handshake_pair_pod(version, scenario, "model"))
    reports = {report["namespace"]: report
               for report in kvpilot_check_json(kvpilot, documents) if report.get("container") == "decode"}
    theirs = gpu_independent(theirs, started)
    undecided = reported_p3_where_gpu_dependent(theirs, started, reports)
    describe = (lambda s: f"{version} guard pair {os.path.basename(s['config'])} prefill {s['prefill']} "
                          f"{s['prefillSpeculative']} decode {s['decode']} {s['speculative']}")
    for scenario in undecided:
        print(f"  {describe(scenario)}: the KV layouts depend on the GPUs, kvpilot reports P3")
    agreements, failed, rules = compare_first_refusal(
        [s for s in started if s not in undecided], theirs, reports, lambda v: v["phase"] == "handshake", describe)
    return agreements, failed + len(undecided), summary + f"; by rule: {rules}), agreements {agreements}"


def check_handshake(kvpilot, src, venvs, version, compare):
    """SGLang's prefill <-> decode handshake (handshake.py) against kvpilot's handshake-phase
    rules on the same servers. Returns (passed, failed, summary)."""
    scenarios = handshake_scenarios()
    theirs = {r["id"]: r for r in run_release_script("handshake.py", src, venvs, scenarios)}
    started = [s for s in scenarios if not theirs[s["id"]]["startRefused"]]
    refusing = sum(theirs[s["id"]]["raised"] for s in started)
    gpu_dependent = sum(theirs[s["id"]]["gpuDependent"] for s in started)
    summary = (f"handshake scenarios {len(scenarios)} (servers that do not start {len(scenarios) - len(started)}; "
               f"refused by SGLang {refusing}, on some GPUs only {gpu_dependent}")
    if not compare:
        pairs, _, pair_summary = check_handshake_pairs(kvpilot, src, venvs, version, compare)
        return len(started) + pairs, 0, summary + f"); {pair_summary}"
    theirs = gpu_independent(theirs, started)
    reports = kvpilot_reports(kvpilot, [handshake_manifest(s) for s in started], version)
    undecided = reported_p3_where_gpu_dependent(theirs, started, reports)
    for scenario in undecided:
        print(f"  {version} handshake {os.path.basename(scenario['config'])} {scenario['prefill']} "
              f"{scenario['decode']}: the KV layouts depend on the GPUs, kvpilot reports P3")
    agreements, failed, rules = compare_first_refusal(
        [s for s in started if s not in undecided], theirs, reports, lambda v: v["phase"] == "handshake",
        lambda s: (f"{version} handshake {os.path.basename(s['config'])} prefill {s['prefill']} "
                   f"decode {s['decode']} speculative {s['speculative']}"))
    failed += len(undecided)
    pair_agreements, pair_failed, pair_summary = check_handshake_pairs(kvpilot, src, venvs, version, compare)
    return (agreements + pair_agreements, failed + pair_failed,
            summary + f"; by rule: {rules}), agreements {agreements}; {pair_summary}")
