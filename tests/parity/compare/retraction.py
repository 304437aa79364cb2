"""The retraction-backup matrix: each release's resolve_decode_retraction_backup (retraction.py)
against `kvpilot check`'s effective retractionBackup and hostPoolRatio."""

import itertools
import json
import os

from compare.common import ROOT, run_release_script


# Configs for the retraction-backup matrix: one per KV pool kind SGLang builds (full MHA, full MHA
# by the Gemma-3 override, hybrid SWA, pure SWA on either transformers pin, MLA, SSM x2).
RETRACTION_CONFIGS = ("llama-3.1-8b-instruct", "gemma-3-1b-it", "gpt-oss-20b", "custom-pure-swa",
                      "gemma-4-pure-swa", "deepseek-v3", "qwen3-next-80b-a3b",
                      "nemotron-nano-9b-v2")


def retraction_scenarios():
    """Each RETRACTION_CONFIGS config x the flags resolve_decode_retraction_backup reads."""
    scenarios = []
    flag_values = itertools.product(
        (False, True), (False, True), (1, 2),
        ((False, False), (True, False), (True, True)), (False, True))
    for name, (radix, offload, dcp, (priority, no_preempt), unified) in itertools.product(
            RETRACTION_CONFIGS, list(flag_values)):
        scenarios.append({
            "id": f"r{len(scenarios)}",
            "config": os.path.join(ROOT, "tests/fixtures/configs", f"{name}.json"),
            "flags": {"decodeRadixCache": radix, "decodeOffloadKvCache": offload,
                      "decodeContextParallel": dcp, "priorityScheduling": priority,
                      "disablePriorityPreemption": no_preempt, "enableUnifiedMemory": unified},
        })
    return scenarios


def sglang_retraction(src, venvs, scenarios):
    return {r["id"]: r for r in run_release_script("retraction.py", src, venvs, scenarios)}


def manifest(scenario):
    """An InferenceDeployment equivalent to one retraction scenario (decode side, backup unset)."""
    with open(scenario["config"], encoding="utf-8") as f:
        # Python's json, like SGLang's loader; the manifest is written back as strict JSON.
        config = json.load(f)
    flags = scenario["flags"]
    return {
        "apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": scenario["id"], "namespace": "parity"},
        "spec": {
            "model": {"name": f"parity/{os.path.basename(scenario['config'])}",
                      "config": {"inline": config}},
            "disaggregation": {
                "transferBackend": "mooncake", "prefill": {"tensorParallel": 1},
                "decodeRadixCache": flags["decodeRadixCache"],
                "decodeOffloadKvCache": flags["decodeOffloadKvCache"],
                "decodeContextParallel": flags["decodeContextParallel"],
                "priorityScheduling": flags["priorityScheduling"],
                "disablePriorityPreemption": flags["disablePriorityPreemption"],
                "enableUnifiedMemory": flags["enableUnifiedMemory"],
            },
            "decode": {"replicas": 1, "tensorParallel": 1},
        },
    }
