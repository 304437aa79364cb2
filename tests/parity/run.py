#!/usr/bin/env python3
"""The parity harness's driver (scripts/parity.sh sets it up and calls it).

For every release pinned in tests/parity/wheels/ it runs that release's own classification
(classify.py, one fresh interpreter per release) on every fixture config and compares it with
`kvpilot layout --config F --sglang-version X`; it also checks that
src/layout/served_architectures.tsv is what the releases' model code says; runs each release's
resolve_decode_retraction_backup (retraction.py) on a scenario matrix and compares its choice
with `kvpilot check --sglang-version X --output json` (effective.retractionBackup, and
effective.hostPoolRatio where the release computes it from flags alone); runs its
handle_pd_disaggregation (pd_args.py) on a decode-flag matrix and compares the message it raises
with kvpilot check's violations; and checks the
rule-message table in rule_messages.py against each release's source. Prints a line per
release, every disagreement, and a closing `N passed, N failed`; exits 1 on any failure.

The `cli` part checks that src/sglang/server_cli.tsv is what each release's own parser declares
(server_cli.py) and runs a generated corpus of argvs per release through that parser
(server_cli.py, argparse alone) and through `kvpilot check`: both must accept or refuse each,
with argparse's message.

Also runs each release's cache-flag checks (cache_args.py: the PD hook, then the cache
compatibility check) on a decode-flag matrix and compares as for the PD argument checks.

  --oracle-only   run and count only SGLang's side (no kvpilot binary needed)
The `handshake` part runs each release's prefill <-> decode handshake (handshake.py: the decode
KV manager's try_ensure_parallel_info and rank mapping) on prefill/decode server pairs and
compares the message it raises with kvpilot's handshake-phase violations.

  --only PART     run only these parts (repeatable): served, classification, retraction,
                  pd-args, cache-args, mamba-args, draft, handshake, messages, argv, cli
"""

import argparse
import collections
import glob
import itertools
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import rule_messages
import server_cli
from releases import RELEASES, release_python, version_key

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE_GLOBS = ("tests/fixtures/configs/*.json", "tests/fixtures/configs/parity/*.json")
SERVED_TSV = "src/layout/served_architectures.tsv"
SERVER_CLI_TSV = "src/sglang/server_cli.tsv"
# Configs for the retraction-backup matrix: one per KV pool kind SGLang builds (full MHA, full MHA
# by the Gemma-3 override, hybrid SWA, pure SWA on either transformers pin, MLA, SSM x2).
RETRACTION_CONFIGS = ("llama-3.1-8b-instruct", "gemma-3-1b-it", "gpt-oss-20b", "custom-pure-swa",
                      "gemma-4-pure-swa", "deepseek-v3", "qwen3-next-80b-a3b",
                      "nemotron-nano-9b-v2")


def fixture_configs():
    return sorted(p for pattern in FIXTURE_GLOBS for p in glob.glob(os.path.join(ROOT, pattern)))


def sglang_classification(src, venvs, configs):
    """The release's verdict per config file name (classify.py output)."""
    proc = subprocess.run([release_python(src, venvs), os.path.join(HERE, "classify.py"), src,
                           *configs],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"classify.py failed on {src}:\n{proc.stderr[-2000:]}")
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["file"]: r for r in results}


def supports_sglang_version(kvpilot):
    proc = subprocess.run([kvpilot, "layout", "--help"], capture_output=True, text=True,
                          check=False)
    return "--sglang-version" in proc.stdout


def kvpilot_layout(kvpilot, config, version):
    proc = subprocess.run([kvpilot, "layout", "--config", config, "--sglang-version", version],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None, proc.stderr.strip() or f"exit code {proc.returncode}"
    try:
        return json.loads(proc.stdout), None
    except json.JSONDecodeError as e:
        return None, f"output is not JSON: {e}"


def kvpilot_facts(layout):
    """kvpilot's layout JSON (src/api/layout_types.rs) in the oracle's terms."""
    pool = layout["kvPool"]
    features = set(layout.get("features", []))
    return {
        "isHybridSwa": pool in ("hybrid-swa", "pure-swa"),
        "usesSsmState": pool == "hybrid-ssm",
        "isMla": layout["attention"] == "mla",
        "isDsa": "dsa" in features,
        "isSwaCompress": "swa-compress" in features,
        "hasRatio2Layers": "deepseek-v4.1" in features,
        "noNextnLayers": "no-nextn-layers" in features,
        "dsparkHead": "dspark-head" in features,
        "hasLearnableSinks": "learnable-attention-sinks" in features,
        "hiddenSize": layout.get("hiddenSize"),
        "vocabSize": layout.get("vocabSize"),
        "mtpDraft": layout.get("mtpDraft"),
        "mambaChunkSize": layout.get("mambaChunkSize"),
        "dsaIndexKpool": layout.get("dsaIndexKpool"),
        "attentionProjectionLayout": layout.get("attentionProjectionLayout"),
        "fusedQkvAttentionTp": layout.get("fusedQkvAttentionTp"),
        "fullLayers": layout["layers"]["fullAttention"],
        "swaLayers": layout["layers"]["slidingWindow"],
    }


# How kvpilot says a release has no model code for an architecture (issue #14 item 6:
# "SGLang 0.5.23 has no model for JambaForCausalLM"), in `warnings` of its layout.
NO_MODEL_WARNING = "has no model for"


def served_architectures():
    """architecture -> (first, last or None), from the TSV the harness keeps current."""
    served = {}
    with open(os.path.join(ROOT, SERVED_TSV), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, first, last = line.rstrip("\n").split("\t")
            served[name] = (first, None if last == "-" else last)
    return served


def is_served(served, architecture, version):
    if architecture not in served:
        return False
    first, last = served[architecture]
    return version_key(first) <= version_key(version) and (
        last is None or version_key(version) <= version_key(last))


def disagreements(sglang, layout, served):
    """(fact, SGLang's value, kvpilot's value) for each fact the two sides state differently.
    Layer counts are SGLang's pool split, so they are compared only where SGLang splits (hybrid
    SWA with per-layer ids; DeepSeek-V4's compressed pool has none). `servedBySglang` is whether
    the release has model code for the architecture its config loader settles on (SGLang's
    config classes rename some, e.g. Olmo3ForCausalLM to Olmo2ForCausalLM); kvpilot must warn
    exactly when it has none."""
    ours = dict(kvpilot_facts(layout), servedBySglang=not any(
        NO_MODEL_WARNING in w for w in layout.get("warnings", [])))
    theirs = dict(sglang, servedBySglang=served)
    facts = ["isHybridSwa", "usesSsmState", "isMla", "isDsa", "isSwaCompress", "hasRatio2Layers",
             "hasLearnableSinks", "servedBySglang"]
    if sglang["isHybridSwa"] and sglang["fullLayers"] is not None:
        facts += ["fullLayers", "swaLayers"]
    # The sizes where kvpilot states them (it leaves those of config classes it does not know
    # to the release), the MTP draft facts, the Mamba chunk size, DSA's pooled index keys and the
    # QKV projection layout always.
    facts += [f for f in ("hiddenSize", "vocabSize") if ours[f] is not None] + [
        "mtpDraft", "mambaChunkSize", "dsaIndexKpool", "attentionProjectionLayout", "fusedQkvAttentionTp"]
    differences = [(f, theirs[f], ours[f]) for f in facts if theirs[f] != ours[f]]
    # N6 and X4 fire for an EAGLE draft kvpilot names the feature for. kvpilot leaves the count
    # to SGLang only for config classes that may supply one config.json does not name
    # (src/layout/arch.rs, NEXTN_DEFAULTING_MODEL_TYPES); no fixture is such a draft without
    # NextN layers, so the comparison is exact.
    lacks = eagle_draft_lacks_nextn(sglang)
    if lacks is not None and lacks != ours["noNextnLayers"]:
        differences.append(("noNextnLayers", lacks, ours["noNextnLayers"]))
    head = dspark_draft_is_the_head(sglang)
    if head is not None and head != ours["dsparkHead"]:
        differences.append(("dsparkHead", head, ours["dsparkHead"]))
    return differences


DSPARK_HEAD = "DeepseekV4ForCausalLMDSpark"


def dspark_draft_is_the_head(sglang):
    """Whether the DSPARK draft the release builds from the config is DeepSeek-V4's DSpark head,
    which `_can_pack_hicache_mtp` packs; None where the release could not build it."""
    architecture = sglang.get("draftArchitectureUnderDspark")
    return None if architecture is None or isinstance(architecture, dict) else architecture == DSPARK_HEAD


def eagle_draft_lacks_nextn(sglang):
    """Whether the EAGLE draft the release builds from the config has no NextN layers; None
    where the release could not build it."""
    layers = sglang.get("draftNextnLayers")
    return None if isinstance(layers, dict) else not layers


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


def run_release_script(script, src, venvs, scenarios):
    """Runs one of this directory's scripts on a release's sources with the scenarios on
    stdin, in that release's venv, and returns its JSON answer."""
    proc = subprocess.run([release_python(src, venvs), os.path.join(HERE, script), src],
                          input=json.dumps(scenarios), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed on {src}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


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


def kvpilot_check_json(kvpilot, documents, version=None):
    """`kvpilot check --output json` on the documents (one multi-document file), at `version`
    when given (else the release each image names)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n---\n".join(json.dumps(d) for d in documents))
        path = f.name
    release = ["--sglang-version", version] if version else []
    try:
        proc = subprocess.run([kvpilot, "check", "-f", path, *release, "--output", "json", "--offline"],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(path)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kvpilot check printed no JSON (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[:500]}") from None


def kvpilot_reports(kvpilot, manifests, version):
    """kvpilot check's report per manifest name (all manifests in one multi-document file)."""
    return {r["name"].split("/")[-1]: r for r in kvpilot_check_json(kvpilot, manifests, version)}


PD_ARGS_CONFIG = "llama-3.1-8b-instruct"


def pd_args_scenarios():
    """Decode-server flags handle_pd_disaggregation reads that an InferenceDeployment states.
    Hierarchical cache is left out: from 0.5.21 its DCP check moved to the HiCache hook, so this
    hook alone accepting it would not mean the release does."""
    scenarios = []
    for backend, radix, dcp in itertools.product(
            ("mooncake", "nixl", "mori", "fake"), (False, True), (1, 2)):
        scenarios.append({"id": f"p{len(scenarios)}", "args": {
            "disaggregation_mode": "decode", "disaggregation_transfer_backend": backend,
            "disaggregation_decode_enable_radix_cache": radix, "dcp_size": dcp}})
    # Decode radix cache against each speculative algorithm, named as SGLang spells it and not
    # (R18c: the PD hook compares the name as given up to 0.5.22, the speculative hook the
    # resolved one from 0.5.23).
    for radix, algorithm in itertools.product((False, True), PD_ARGS_SPECULATIVE):
        scenarios.append({"id": f"p{len(scenarios)}", "args": {
            "disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
            "disaggregation_decode_enable_radix_cache": radix, "dcp_size": 1,
            "speculative_algorithm": algorithm}})
    # A Gemma-4 assistant draft: EAGLE and NEXTN run as FROZEN_KV_MTP, EAGLE3 is refused (SD5).
    for radix, algorithm in itertools.product((False, True), ("EAGLE", "nextn", "EAGLE3")):
        scenarios.append({"id": f"p{len(scenarios)}", "args": {
            "disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
            "disaggregation_decode_enable_radix_cache": radix, "dcp_size": 1,
            "speculative_algorithm": algorithm}, "draftConfig": os.path.join(
                ROOT, "tests/fixtures/configs", f"{PD_ARGS_ASSISTANT_DRAFT}.json")})
    return scenarios


PD_ARGS_ASSISTANT_DRAFT = "parity/gemma-4-assistant"


PD_ARGS_SPECULATIVE = ("EAGLE", "eagle", "NEXTN", "nextn", "EAGLE3", "DSPARK", "dspark", "NGRAM", "STANDALONE")


def pd_args_manifest(scenario):
    args = scenario["args"]
    document = manifest({"id": scenario["id"], "config": os.path.join(
        ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json"), "flags": {
        "decodeRadixCache": args["disaggregation_decode_enable_radix_cache"],
        "decodeOffloadKvCache": False, "decodeContextParallel": args["dcp_size"],
        "priorityScheduling": False, "disablePriorityPreemption": False,
        "enableUnifiedMemory": False}})
    disaggregation = document["spec"]["disaggregation"]
    disaggregation["transferBackend"] = args["disaggregation_transfer_backend"]
    if args.get("speculative_algorithm"):
        disaggregation["speculativeAlgorithm"] = args["speculative_algorithm"]
    if scenario.get("draftConfig"):
        with open(scenario["draftConfig"], encoding="utf-8") as f:
            disaggregation["speculativeDraftModel"] = {"name": f"parity/{os.path.basename(scenario['draftConfig'])}",
                                                       "config": {"inline": json.load(f)}}
    return document


def cache_args_scenarios():
    """Decode-server flags the cache hooks read that an InferenceDeployment states: hierarchical
    cache and decode radix cache (S7 through the chunk cache decode forces), decode offload and a
    storage backend (S6), host_pool (S4), DCP (R19 in the PD hook, which runs first), the SWA
    full-tokens ratio (S8); then LMCache (L1-L7), the external cache linker (X1-X3, F3), HiSparse
    (R18a) and speculative decoding against HiCache with DCP (D1-D5); then decode host receive
    (N1-N4, F4); buffer-only host memory (H3, H4, L8, D6, F5); then unified memory against what its
    pool hook refuses."""
    scenarios = []
    for hierarchical, radix, offload, backend, host_pool, dcp in itertools.product(
            (False, True), (False, True), (False, True), (None, "file"), (False, True), (1, 2)):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_hierarchical_cache": hierarchical,
                "disaggregation_decode_enable_radix_cache": radix,
                "disaggregation_decode_enable_offload_kvcache": offload,
                "hicache_storage_backend": backend, "dcp_size": dcp}
        if host_pool:
            args["disaggregation_decode_retraction_backup"] = "host_pool"
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # S8 on both sides of (0, 1], with and without HiCache (Step-3.5's reset is a model
    # override this harness does not run: unit tests cover it).
    for ratio, hierarchical in itertools.product((-0.5, 0.0, 0.01, 0.5, 1.0, 1.01, 4.0),
                                                 (False, True)):
        scenarios.append({"id": f"c{len(scenarios)}", "args": {
            "disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
            "enable_hierarchical_cache": hierarchical,
            "disaggregation_decode_enable_radix_cache": hierarchical,
            "disaggregation_decode_enable_offload_kvcache": False,
            "hicache_storage_backend": None, "dcp_size": 1, "swa_full_tokens_ratio": ratio}})
    for lmcache, linker, hisparse, hierarchical, radix, backend, speculative, dcp in itertools.product(
            (False, True), (False, True), (False, True), (False, True), (False, True), (None, "file"),
            (None, "EAGLE", "DSPARK", "dspark"), (1, 2)):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_hierarchical_cache": hierarchical,
                "disaggregation_decode_enable_radix_cache": radix,
                "disaggregation_decode_enable_offload_kvcache": False,
                "hicache_storage_backend": backend, "dcp_size": dcp, "enable_lmcache": lmcache,
                "enable_hisparse": hisparse, "speculative_algorithm": speculative}
        # Only when on: releases before 0.5.20 have no such flag (F3).
        if linker:
            args["enable_unified_cache_external_linker"] = True
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # Decode host receive (0.5.21+; F4 before): its range (N2), HiSparse (N3), the backup it
    # forces (N1, and S2/S4 through host_pool) and the host layout a storage backend picks (N4).
    for threshold, backup, hisparse, backend, offload, dcp in itertools.product(
            (-0.5, 0, 0.5, 1), (None, "cpu_tensor", "host_pool"), (False, True), (None, "mooncake"),
            (False, True), (1, 2)):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_hierarchical_cache": False, "disaggregation_decode_enable_radix_cache": False,
                "disaggregation_decode_enable_offload_kvcache": offload,
                "hicache_storage_backend": backend, "dcp_size": dcp, "enable_hisparse": hisparse,
                "disaggregation_decode_host_receive_threshold": threshold}
        if backup is not None:
            args["disaggregation_decode_retraction_backup"] = backup
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # Buffer-only HiCache host memory (0.5.19+; F5 before): a storage backend (H3), not on decode
    # (H4), not with LMCache (L8), and HiCache L3 with DCP (D6, 0.5.23).
    for hierarchical, radix, backend, dcp, lmcache, backup, offload in itertools.product(
            (False, True), (False, True), (None, "file"), (1, 2), (False, True), (None, "cpu_tensor"),
            (False, True)):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_hierarchical_cache": hierarchical,
                "disaggregation_decode_enable_radix_cache": radix,
                "disaggregation_decode_enable_offload_kvcache": offload,
                "hicache_storage_backend": backend, "dcp_size": dcp, "enable_lmcache": lmcache,
                "hicache_host_memory_mode": "buffer_only"}
        if backup is not None:
            args["disaggregation_decode_retraction_backup"] = backup
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # Unified memory (U1, U6, U7 and the pool hook's other exclusions) with what it refuses.
    for transfer, speculative, hisparse, (offload, backend), backup, lmcache, linker, dcp in itertools.product(
            ("mooncake", "nixl"), (None, "EAGLE", "NGRAM"), (False, True),
            ((False, None), (True, "file"), (True, "mooncake")), (None, "host_pool"), (False, True),
            (False, True), (1, 2)):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": transfer,
                "enable_unified_memory": True, "enable_hierarchical_cache": False,
                "disaggregation_decode_enable_radix_cache": False,
                "disaggregation_decode_enable_offload_kvcache": offload,
                "hicache_storage_backend": backend, "dcp_size": dcp, "enable_hisparse": hisparse,
                "speculative_algorithm": speculative, "enable_lmcache": lmcache}
        if backup is not None:
            args["disaggregation_decode_retraction_backup"] = backup
        if linker:
            args["enable_unified_cache_external_linker"] = True
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # The pool hook reads the algorithm as the speculative hook, which runs before it, resolved it.
    for speculative, backup in itertools.product(UNIFIED_SPECULATIVE_NAMES, (None, "host_pool")):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_unified_memory": True, "enable_hierarchical_cache": False,
                "disaggregation_decode_enable_radix_cache": False,
                "disaggregation_decode_enable_offload_kvcache": False,
                "hicache_storage_backend": None, "dcp_size": 1, "speculative_algorithm": speculative}
        if backup is not None:
            args["disaggregation_decode_retraction_backup"] = backup
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # Buffer-only host memory with the write-back policy, refused after the storage backend check
    # and before the decode one (H8, 0.5.19-0.5.21; 0.5.22 resolves it to write-through).
    for hierarchical, backend, policy in itertools.product((False, True), (None, "file"),
                                                           ("write_back", "write_through")):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
                "enable_hierarchical_cache": hierarchical, "disaggregation_decode_enable_radix_cache": False,
                "disaggregation_decode_enable_offload_kvcache": False, "hicache_storage_backend": backend,
                "dcp_size": 1, "hicache_host_memory_mode": "buffer_only", "hicache_write_policy": policy}
        scenarios.append({"id": f"c{len(scenarios)}", "args": args})
    # Unified memory under PD needs lazy compaction (U16): SGLANG_DISABLE_LAZY_COMPACTION in the
    # decode env, on, off or unset.
    for transfer, speculative, env in itertools.product(
            ("mooncake", "nixl"), (None, "EAGLE"), ({}, {"SGLANG_DISABLE_LAZY_COMPACTION": "1"},
                                                    {"SGLANG_DISABLE_LAZY_COMPACTION": "0"})):
        args = {"disaggregation_mode": "decode", "disaggregation_transfer_backend": transfer,
                "enable_unified_memory": True, "enable_hierarchical_cache": False,
                "disaggregation_decode_enable_radix_cache": False,
                "disaggregation_decode_enable_offload_kvcache": False,
                "hicache_storage_backend": None, "dcp_size": 1, "speculative_algorithm": speculative}
        scenarios.append({"id": f"c{len(scenarios)}", "args": args, "env": env})
    return scenarios


# (DSPARK and DFLASH go on to check attention backends, which follow the GPU.)
UNIFIED_SPECULATIVE_NAMES = ("nextn", "NEXTN", "eagle", "eagle3", "ngram")


def cache_args_manifest(scenario):
    args = scenario["args"]
    document = manifest({"id": scenario["id"], "config": os.path.join(
        ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json"), "flags": {
        "decodeRadixCache": args["disaggregation_decode_enable_radix_cache"],
        "decodeOffloadKvCache": args["disaggregation_decode_enable_offload_kvcache"],
        "decodeContextParallel": args["dcp_size"], "priorityScheduling": False,
        "disablePriorityPreemption": False, "enableUnifiedMemory": False}})
    disaggregation = document["spec"]["disaggregation"]
    disaggregation["hierarchicalCache"] = args["enable_hierarchical_cache"]
    if args["hicache_storage_backend"] is not None:
        disaggregation["hicacheStorageBackend"] = args["hicache_storage_backend"]
    if "disaggregation_decode_retraction_backup" in args:
        disaggregation["retractionBackup"] = args["disaggregation_decode_retraction_backup"]
    if "swa_full_tokens_ratio" in args:
        document["spec"]["decode"]["swaFullTokensRatio"] = args["swa_full_tokens_ratio"]
    if args.get("speculative_algorithm") is not None:
        disaggregation["speculativeAlgorithm"] = args["speculative_algorithm"]
    disaggregation["lmcache"] = args.get("enable_lmcache", False)
    disaggregation["unifiedCacheExternalLinker"] = args.get("enable_unified_cache_external_linker", False)
    disaggregation["hisparse"] = args.get("enable_hisparse", False)
    disaggregation["enableUnifiedMemory"] = args.get("enable_unified_memory", False)
    disaggregation["transferBackend"] = args["disaggregation_transfer_backend"]
    if "hicache_host_memory_mode" in args:
        disaggregation["hicacheHostMemoryMode"] = args["hicache_host_memory_mode"]
    if "disaggregation_decode_host_receive_threshold" in args:
        disaggregation["decodeHostReceiveThreshold"] = args["disaggregation_decode_host_receive_threshold"]
    if scenario.get("env"):
        document["spec"]["decode"]["env"] = [{"name": k, "value": v} for k, v in scenario["env"].items()]
    if "hicache_write_policy" in args:
        decode = document["spec"]["decode"]
        decode["extraArgs"] = decode.get("extraArgs", []) + ["--hicache-write-policy", args["hicache_write_policy"]]
    return document


# argparse's refusal of flags the release's parser does not have: SGLang's flag is its field name
# with dashes, and argparse lists a value-taking flag's value among the unrecognized arguments.
UNRECOGNIZED = "unrecognized arguments: "


def unrecognized(scenario_args, fields):
    words = []
    for field in fields:
        value = scenario_args[field]
        words.append("--" + field.replace("_", "-"))
        if value is not True:
            words.append(str(value))
    return UNRECOGNIZED + " ".join(words)


# Each release's cache-check messages (cache_args.py's prefixes), by its source directory.
_CACHE_PREFIXES = {}


def sglang_cache_args(src, venvs, scenarios):
    answer = run_release_script("cache_args.py", src, venvs, scenarios)
    _CACHE_PREFIXES[src] = answer["prefixes"]
    args = {s["id"]: s["args"] for s in scenarios}
    errors = {}
    for result in answer["results"]:
        unknown = result.get("unknownFields")
        errors[result["id"]] = (unrecognized(args[result["id"]], unknown) if unknown
                                else result["error"])
    return answer["prefixes"] + [UNRECOGNIZED], errors


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


def compare_first_refusal(scenarios, theirs, reports, compared_rule, describe):
    """SGLang raises one message per scenario (the first check that fails), kvpilot reports every
    violation: they agree when SGLang's message is among kvpilot's violations that
    `compared_rule` selects, or when neither has one. Prints each disagreement (`describe` names
    the scenario) and returns (agreements, disagreements, SGLang's refusals counted by kvpilot's
    rule id as text)."""
    agreements = failed = 0
    by_rule = collections.Counter()
    for scenario in scenarios:
        ours = {v["message"]: v["rule"] for v in reports.get(scenario["id"], {}).get("violations", [])
                if compared_rule(v)}
        answer = theirs[scenario["id"]]
        message = answer["message"]
        if (message in ours) if message else not ours:
            agreements += 1
            if message:
                by_rule[ours[message]] += 1
            continue
        failed += 1
        cache = f" ({answer['cache']})" if answer.get("cache") else ""
        print(f"  {describe(scenario)}: SGLang {message!r}{cache}, kvpilot {sorted(ours)}")
    rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()))
    return agreements, failed, rules


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


def role_argv(role):
    """The flags of a PD server of `role` (decode or prefill, over Mooncake); none for "null", a
    server without PD."""
    return [] if role == "null" else ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]


def settings_argv(scenario, options):
    """The flags of a scenario's settings, for each (key, flag, unset) of `options`: none where
    the setting is `unset`, the flag alone where it is True, else the flag and the value."""
    argv = []
    for key, flag, unset in options:
        value = scenario[key]
        if value != unset:
            argv += [flag] if value is True else [flag, str(value)]
    return argv


def guard_pods(version, scenarios, argv_of, env_of=lambda _: {}, draft_of=lambda _: None):
    """One Pod per scenario running `argv_of(scenario)` with the env `env_of(scenario)`, its config
    inline through a ConfigMap, and the draft model's config `draft_of(scenario)` (a fixture path,
    or None for none) the same way, for `kvpilot check`."""
    documents, config_maps = [], {}

    def config_map(path):
        name = os.path.basename(path).removesuffix(".json")
        if name not in config_maps:
            with open(path, encoding="utf-8") as f:
                config_maps[name] = {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": "parity"},
                                     "data": {"config.json": f.read()}}
        return f"configmap/{name}"

    for scenario in scenarios:
        env = [{"name": k, "value": v} for k, v in env_of(scenario).items()]
        annotations = {"kvpilot.dev/model-config": config_map(scenario["config"])}
        if draft_of(scenario) is not None:
            annotations["kvpilot.dev/draft-model-config"] = config_map(draft_of(scenario))
        documents.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": scenario["id"], "namespace": "parity", "annotations": annotations},
            "spec": {"containers": [{"name": "sglang", "image": f"lmsysorg/sglang:v{version}",
                                     "command": ["python3", "-m", "sglang.launch_server"],
                                     "args": argv_of(scenario), "env": env}]}})
    return list(config_maps.values()) + documents


def check_with_guard(kvpilot, src, venvs, version, compare, part):
    """One release's script on a part's scenarios against the guard's `part["rules"]` on the same
    servers' command lines (`part`: label, scenarios, script, argv, env, and draft: the draft
    model's config of a scenario). Returns (passed, failed, summary)."""
    scenarios = part["scenarios"]
    env_of = part.get("env", lambda _: {})
    theirs = {r["id"]: r for r in run_release_script(part["script"], src, venvs, scenarios)}
    summary = (f"{part['label']} scenarios {len(scenarios)} (refused by SGLang "
               f"{sum(r['raised'] for r in theirs.values())}")
    if not compare:
        return len(scenarios), 0, summary + ")"
    pods = guard_pods(version, scenarios, part["argv"], env_of, part.get("draft", lambda _: None))
    reports = {r["name"].split("/")[-1]: r for r in kvpilot_check_json(kvpilot, pods)}
    agreements, failed, rules = compare_first_refusal(
        scenarios, theirs, reports, lambda v: v["rule"] in part["rules"],
        lambda s: (f"{version} {part['label']} {os.path.basename(s['config'])} {' '.join(part['argv'](s)[2:])} "
                   f"env {env_of(s)}"))
    return agreements, failed, summary + f"; by rule: {rules}), agreements {agreements}"


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


def fixture(name):
    return os.path.join(ROOT, "tests/fixtures/configs", f"{name}.json")


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


# HiSparse (HS1, HS2, and the PD hook's R18a) on PD decode, PD prefill and servers without PD:
# DSA models (DeepSeek-V3.2, GLM-5), DeepSeek-V4, MiniMax-M3 sparse, and DeepSeek-V3 (MLA without
# DSA) and Llama as models without sparse attention; with --disable-radix-cache or not, decode
# radix cache or not, and HiSparse off as the control.
HISPARSE_CONFIGS = ("deepseek-v3.2-exp", "glm-5", "deepseek-v4", "minimax-m3-sparse", "deepseek-v3",
                    "llama-3.1-8b-instruct")
HISPARSE_RULES = ("HS1", "HS2", "R18a")


def hisparse_scenarios():
    scenarios = []
    for config, role, hisparse, no_radix, decode_radix in itertools.product(
            HISPARSE_CONFIGS, ("decode", "prefill", "null"), (True, False), (False, True), (False, True)):
        if decode_radix and role != "decode":
            continue
        argv = ["--model-path", "/models/m", *role_argv(role)]
        argv += ["--enable-hisparse"] * hisparse + ["--disable-radix-cache"] * no_radix
        argv += ["--disaggregation-decode-enable-radix-cache"] * decode_radix
        scenarios.append({"id": f"h{len(scenarios)}", "argv": argv,
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json")})
    return scenarios


def check_hisparse(kvpilot, src, venvs, version, compare):
    """The PD hook and HiSparse's validation pass (hisparse.py) against the guard's HS1, HS2 and
    R18a."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "HiSparse", "scenarios": hisparse_scenarios(), "script": "hisparse.py",
        "argv": lambda s: s["argv"], "rules": HISPARSE_RULES})


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


# Flag combinations the encoder, decode-CP and DP LM head checks refuse (EN1, DC1, LH1): PD decode,
# PD prefill and no PD; --encoder-only; --dcp-size 2; prefill CP; the DP LM head; TP 2 without DP,
# with replicas and with attention DP in each release's spellings.
FLAG_COMBINATION_RULES = ("EN1", "DC1", "LH1", "LH2", "LH3", "LH4", "LH5", "SD17", "WD1", "WD2", "WD3", "WD4", "WD5",
                          "WD6", "RS1", "KS1", "WM1", "WM2", "WM3", "WM4", "PC1", "PC2", "PC3", "DF1", "DF2", "DF3",
                          "RP1", "QC1", "QC2")
# DWDP (WD1-WD6) on each role at TP 2 and 4, with --dwdp-size unset, 1 (off), 2 and 4, alone and
# with each thing its handler refuses: EPLB, speculative decoding (as given, in two spellings),
# pipeline stages and two-batch overlap.
ROLE_FLAGS = (("--enable-response-store", "0.5.20"), ("--enable-kv-cache-sharding", "0.5.22"))
# prefill_complete allocation (PC1-PC3, 0.5.22 on), unset, early and prefill_complete, on each
# role at TP 1 with Mooncake, alone and with each thing `_validate_prefill_complete` lists (two
# at once too), prefill HiCache in each write policy, with a storage backend, and optimistic
# prefill attempts: (flags, env).
PREFILL_COMPLETE_WITH = (
    ((), {}), (("--disaggregation-transfer-backend", "nixl"), {}), (("--pp-size", "2"), {}),
    (("--tp", "2", "--attn-cp-size", "2"), {}), (("--dcp-size", "2"), {}), (("--tp", "2"), {}),
    (("--tp", "2", "--dp-size", "2", "--enable-dp-attention"), {}), (("--tp", "2", "--attn-dp-size", "2"), {}),
    (("--enable-pdmux",), {}), (("--decoupled-spec-role", "drafter"), {}), (("--decoupled-spec-role", "null"), {}),
    (("--enable-pd-role-switch",), {}), (("--language-only",), {}), (("--encoder-only",), {}),
    (("--enable-hisparse",), {}), (("--disaggregation-decode-host-receive-threshold", "0.5"), {}),
    (("--disaggregation-decode-host-receive-threshold", "1"), {}), (("--disaggregation-decode-enable-radix-cache",), {}),
    (("--enable-hierarchical-cache",), {}), (("--enable-hierarchical-cache", "--hicache-write-policy", "write_back"), {}),
    (("--enable-hierarchical-cache", "--hicache-write-policy", "write_back", "--hicache-storage-backend", "file"), {}),
    ((), {"SGLANG_DISAGG_STAGING_BUFFER": "1"}), ((), {"SGLANG_RUST_SERVER": "1"}),
    (("--optimistic-prefill-attempts", "-1"), {}), (("--optimistic-prefill-attempts", "0"), {}),
    (("--optimistic-prefill-attempts", "2"), {}), (("--enable-hisparse", "--enable-pdmux", "--pp-size", "2"), {}),
)
DWDP_SIZES = (None, 1, 2, 4)
DWDP_WITH = ((), ("--enable-eplb",), ("--speculative-algorithm", "EAGLE"), ("--speculative-algorithm", "nextn"),
             ("--pp-size", "2"), ("--enable-two-batch-overlap",))


def flag_combination_scenarios(version):
    """Llama servers, each an argv and an env."""
    scenarios = []

    def add(argv, env=None):
        scenarios.append({"id": f"f{len(scenarios)}", "argv": argv, "env": env or {},
                          "config": os.path.join(ROOT, "tests/fixtures/configs/llama-3.1-8b-instruct.json")})

    data_parallel = [[], ["--dp-size", "2"], ["--dp-size", "2", "--enable-dp-attention"]]
    if version_key(version) >= version_key("0.5.22"):
        data_parallel.append(["--attn-dp-size", "2"])
    for role, encoder_only, dcp, prefill_cp, lm_head, dp in itertools.product(
            ("decode", "prefill", "null"), (False, True), (False, True), (False, True), (False, True), data_parallel):
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", "2", *dp]
        argv += ["--encoder-only"] if encoder_only else []
        argv += ["--dcp-size", "2"] if dcp else []
        argv += ["--enable-prefill-cp", "--cp-strategy", "interleave"] if prefill_cp else []
        argv += ["--enable-dp-lm-head"] if lm_head else []
        add(argv)
    # An explicit TP LM-head all-to-all (LH2-LH5, the flag from 0.5.18): TP 2 or 4, DP 2 as replicas
    # or attention DP, with the DP LM head or attention CP.
    if version_key(version) >= version_key("0.5.18"):
        for role, tp, dp, lm_head, cp in itertools.product(
                ("decode", "prefill", "null"), (2, 4), data_parallel, (False, True), (1, 2)):
            argv = ["--model-path", "/models/m", *role_argv(role), "--tp", str(tp), *dp,
                    "--enable-tp-lm-head-all-to-all"]
            argv += ["--enable-dp-lm-head"] if lm_head else []
            argv += ["--attn-cp-size", str(cp)] if cp != 1 else []
            add(argv)
    # DP speculative prefill coordination (SD17), on or off by its env, with each algorithm (or
    # none), in the spellings the speculative hook resolves, and multi-layer EAGLE.
    for role, algorithm, multi_layer, env in itertools.product(
            ("decode", "prefill", "null"), (None, "EAGLE", "nextn", "EAGLE3", "DSPARK", "DFLASH", "NGRAM", "STANDALONE"),
            (False, True), ({}, {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"},
                            {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "0"})):
        argv = ["--model-path", "/models/m", *role_argv(role)]
        argv += ["--speculative-algorithm", algorithm] if algorithm else []
        argv += ["--enable-multi-layer-eagle"] if multi_layer else []
        add(argv, env)
    for role, tp, size, with_flags in itertools.product(("decode", "prefill", "null"), (2, 4), DWDP_SIZES, DWDP_WITH):
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", str(tp), *with_flags]
        argv += ["--dwdp-size", str(size)] if size is not None else []
        add(argv)
    # The decode-CP hook's communication flags (DF1-DF3) at TP 2, DCP 1 or 2, each backend or none,
    # with the replicated Q projection or not; from 0.5.20 the backend an unset one resolves to
    # with DCP follows the GPU (kvpilot takes a CUDA GPU's), so that case is left out.
    for role, dcp, backend, replicate in itertools.product(
            ("decode", "prefill", "null"), (1, 2), (None, "ag_rs", "a2a", "fi_a2a"), (False, True)):
        if dcp > 1 and backend is None and replicate and version_key(version) >= version_key("0.5.20"):
            continue
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", "2"]
        argv += ["--dcp-size", str(dcp)] if dcp > 1 else []
        argv += ["--dcp-comm-backend", backend] if backend else []
        argv += ["--dcp-replicate-q-proj"] if replicate else []
        add(argv)
    # Priority retraction (RP1) and quantized communications (QC1, QC2).
    for role, policy, priority in itertools.product(("decode", "prefill", "null"), (None, "length", "priority"),
                                                    (False, True)):
        argv = ["--model-path", "/models/m", *role_argv(role)]
        argv += ["--retraction-policy", policy] if policy else []
        argv += ["--enable-priority-scheduling"] if priority else []
        add(argv)
    for role, tp, quantized, device in itertools.product(("decode", "prefill", "null"), (1, 2), (False, True),
                                                         (None, "cuda", "npu")):
        argv = ["--model-path", "/models/m", *role_argv(role), "--tp", str(tp)]
        argv += ["--enable-quant-communications"] if quantized else []
        argv += ["--device", device] if device else []
        add(argv)
    # Flags refused by role (RS1, KS1): the response store (0.5.20 on) and KV cache sharding (0.5.22
    # on), on or off.
    for role, (flag, since) in itertools.product(("decode", "prefill", "null"), ROLE_FLAGS):
        if version_key(version) < version_key(since):
            continue
        for given in (False, True):
            argv = ["--model-path", "/models/m", *role_argv(role)] + [flag] * given
            add(argv)
    # The watermark (WM1-WM4, 0.5.22 on) on or off, with each algorithm or none as given, pipeline
    # stages and SGLANG_RUST_SERVER, on the CUDA device SGLang has resolved by its check.
    if version_key(version) >= version_key("0.5.22"):
        for role, watermark, algorithm, pp, env in itertools.product(
                ("decode", "prefill", "null"), (False, True),
                (None, "EAGLE", "nextn", "EAGLE3", "NGRAM", "DFLASH", "STANDALONE", "DSPARK"), (1, 2),
                ({}, {"SGLANG_RUST_SERVER": "1"})):
            argv = ["--model-path", "/models/m", *role_argv(role), "--device", "cuda"]
            argv += ["--enable-watermark"] if watermark else []
            argv += ["--speculative-algorithm", algorithm] if algorithm else []
            argv += ["--pp-size", str(pp)] if pp != 1 else []
            add(argv, env)
        for role, policy, (with_flags, env) in itertools.product(
                ("decode", "prefill", "null"), (None, "early", "prefill_complete"), PREFILL_COMPLETE_WITH):
            if "--disaggregation-decode-enable-radix-cache" in with_flags and role != "decode":
                continue
            argv = ["--model-path", "/models/m", *role_argv(role), *with_flags]
            argv += ["--disaggregation-decode-allocation-policy", policy] if policy else []
            add(argv, env)
    return scenarios


def check_flag_combinations(kvpilot, src, venvs, version, compare):
    """The checks of flag combinations (flag_combinations.py) against the guard's rules of
    FLAG_COMBINATION_RULES."""
    return check_with_guard(kvpilot, src, venvs, version, compare, {
        "label": "flag combinations", "scenarios": flag_combination_scenarios(version),
        "script": "flag_combinations.py", "argv": lambda s: s["argv"], "env": lambda s: s["env"],
        "rules": FLAG_COMBINATION_RULES})


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


MAMBA_CONFIGS = ("qwen3-next-80b-a3b", "nemotron-nano-9b-v2", "falcon-h1-7b", "granite-4.0-h-small",
                 "kimi-linear-48b-a3b", "qwen3.5-27b", "parity/nemotron-h-legacy-chunk-size", "parity/lfm2-1.2b",
                 "llama-3.1-8b-instruct")
MAMBA_RULES = ("M1", "M2", "M3", "M4", "M5", "M6", "M7")


def mamba_scenarios():
    """A PD decode server with and without decode radix cache, and a prefill server, on the
    hybrid-SSM fixtures (chunk sizes 64, 256, 96 and 1) and one model without Mamba state, with
    each strategy (or none), page size 1, 16, 48 or 128 (48 does not divide the default Mamba
    track interval, 256; extra_buffer also with 96; 128 and 48 do not divide a chunk size of 96 and
    256), and for no_buffer the overlap schedule on or off. A prefill server and a decode server
    with decode radix cache also run given `--disable-radix-cache` (the PD hook decides a decode
    server's radix cache over it)."""
    scenarios = []
    for config, mode, radix, disabled, strategy, page, overlap_off, interval in itertools.product(
            MAMBA_CONFIGS, ("decode", "prefill"), (False, True), (False, True),
            (None, "no_buffer", "extra_buffer", "extra_buffer_lazy"), (1, 16, 48, 128), (False, True), (None, 96)):
        if ((mode == "prefill" and radix) or (mode == "decode" and disabled and not radix)
                or (overlap_off and strategy != "no_buffer")
                or (interval and (strategy != "extra_buffer" or page != 48))):
            continue
        args = {"disaggregation_mode": mode, "page_size": page}
        if overlap_off:
            args["disable_overlap_schedule"] = True
        if interval:
            args["mamba_track_interval"] = interval
        if radix:
            args["disaggregation_decode_enable_radix_cache"] = True
        if disabled:
            args["disable_radix_cache"] = True
        if strategy:
            args["mamba_radix_cache_strategy"] = strategy
        scenarios.append({"id": f"m{len(scenarios)}",
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{config}.json"),
                          "args": args})
    return scenarios


def mamba_argv(scenario):
    args = scenario["args"]
    argv = ["--model-path", "/models/m", "--disaggregation-mode", args["disaggregation_mode"],
            "--page-size", str(args["page_size"])]
    if args.get("disaggregation_decode_enable_radix_cache"):
        argv.append("--disaggregation-decode-enable-radix-cache")
    if args.get("disable_radix_cache"):
        argv.append("--disable-radix-cache")
    if "mamba_radix_cache_strategy" in args:
        argv += ["--mamba-radix-cache-strategy", args["mamba_radix_cache_strategy"]]
    if args.get("disable_overlap_schedule"):
        argv.append("--disable-overlap-schedule")
    if "mamba_track_interval" in args:
        argv += ["--mamba-track-interval", str(args["mamba_track_interval"])]
    return argv


def check_mamba_args(kvpilot, src, venvs, version, compare):
    """SGLang's own Mamba radix-cache handling (mamba_args.py) against the guard's M1-M6 on the
    same server command lines. Returns (passed, failed, summary)."""
    scenarios = mamba_scenarios()
    theirs = {r["id"]: r["error"] for r in run_release_script("mamba_args.py", src, venvs, scenarios)}
    refusing = sum(theirs[s["id"]] is not None for s in scenarios)
    summary = f"mamba args scenarios {len(scenarios)} (refused by SGLang {refusing})"
    if not compare:
        return len(scenarios), 0, summary
    reports = {r["name"].split("/")[-1]: r
               for r in kvpilot_check_json(kvpilot, guard_pods(version, scenarios, mamba_argv))}
    agreements = failed = 0
    by_rule = collections.Counter()
    for scenario in scenarios:
        violations = reports.get(scenario["id"], {}).get("violations", [])
        error = theirs[scenario["id"]]
        ours = [v for v in violations if v["rule"] in MAMBA_RULES]
        # A bare `assert` says only "AssertionError"; kvpilot's message names the assertion.
        same = [v for v in violations if v["message"] == error
                or (error == "AssertionError" and v["message"].startswith("AssertionError ("))]
        if same if error else not ours:
            agreements += 1
            by_rule.update(v["rule"] for v in same)
            continue
        failed += 1
        print(f"  {version} mamba {os.path.basename(scenario['config'])} {mamba_argv(scenario)[2:]}: "
              f"SGLang {error!r}, kvpilot {[(v['rule'], v['message']) for v in violations]}")
    rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()))
    return agreements, failed, summary + f" (by rule: {rules}), agreements {agreements}"


SERVER_CACHE_RULES = ("S7", "L3", "X1", "H3", "H8", "BP1", "LD1")
LINKER_MLA_DEDUP_SINCE = "0.5.21"


def server_cache_args_scenarios(version):
    """Servers that are not PD decode servers (PD prefill, no PD) with HiCache, LMCache or the
    external cache linker, each with and without `--disable-radix-cache`, with a storage backend
    or none, and with buffer-only host memory and the write-back policy or without: S7, L3 and X1
    read the server's own radix cache there, where a decode server's follows decode radix cache
    (the `cache args` scenarios), and H3 and H8 check a HiCache server's host memory mode. Then
    the Rust server's bootstrap port (BP1), and the linker's MLA deduplication on every role
    (LD1)."""
    scenarios = []
    for mode, hierarchical, lmcache, linker, disabled, backend, (memory, policy) in itertools.product(
            ("prefill", "null"), (False, True), (False, True), (False, True), (False, True), (None, "file"),
            ((None, None), ("buffer_only", None), ("buffer_only", "write_back"), (None, "write_back"))):
        args = {"disaggregation_mode": mode, "enable_hierarchical_cache": hierarchical,
                "enable_lmcache": lmcache, "enable_unified_cache_external_linker": linker,
                "disable_radix_cache": disabled, "hicache_storage_backend": backend,
                "hicache_host_memory_mode": memory, "hicache_write_policy": policy}
        if mode == "prefill":
            args["disaggregation_transfer_backend"] = "mooncake"
        if hierarchical:
            # The host pool's size, which an earlier hook defaults and this harness does not run.
            args["hicache_ratio"] = 2.0
        # Only what is set: a flag the release lacks is refused by its parser (F3, F-rules).
        args = {name: value for name, value in args.items() if value not in (False, None, "null")}
        scenarios.append({"id": f"sc{len(scenarios)}", "args": args,
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json")})
    # A prefill server run by SGLang's Rust server serves the KV bootstrap registry on its API
    # port (BP1): API and bootstrap ports as given or left at their defaults, SGLANG_RUST_SERVER
    # on, off or unset, each transfer backend.
    for mode, backend, env, (port, bootstrap) in itertools.product(
            ("prefill", "null"), ("mooncake", "nixl", "mori"), RUST_SERVER_ENVS,
            ((None, None), (None, 9000), (31000, 31000), (31000, None), (31000, 9000), (None, 30000))):
        args = {"disaggregation_mode": mode, "disaggregation_transfer_backend": backend, "port": port,
                "disaggregation_bootstrap_port": bootstrap}
        args = {name: value for name, value in args.items() if value not in (None, "null")}
        scenarios.append({"id": f"sc{len(scenarios)}", "args": args, "env": env,
                          "config": os.path.join(ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json")})
    # The linker's MLA deduplication (LD1, 0.5.21 on) on every role, with the linker or without, on
    # each of its backends or the default.
    if version_key(version) >= version_key(LINKER_MLA_DEDUP_SINCE):
        for mode, linker, backend in itertools.product(("decode", "prefill", "null"), (False, True),
                                                       (None, "mooncake", "mori")):
            args = {"disaggregation_mode": mode, "enable_unified_cache_external_linker": linker,
                    "unified_cache_external_linker_backend": backend, "enable_linker_mla_dedup": True}
            if mode != "null":
                args["disaggregation_transfer_backend"] = "mooncake"
            args = {name: value for name, value in args.items() if value not in (False, None, "null")}
            scenarios.append({"id": f"sc{len(scenarios)}", "args": args,
                              "config": os.path.join(ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json")})
    return scenarios


RUST_SERVER_ENVS = ({}, {"SGLANG_RUST_SERVER": "1"}, {"SGLANG_RUST_SERVER": "0"})


def flags_argv(scenario):
    """The server argv of a scenario's fields: SGLang's flag is the field name with dashes."""
    argv = ["--model-path", "/models/m"]
    for field, value in scenario["args"].items():
        argv.append("--" + field.replace("_", "-"))
        if value is not True:
            argv.append(str(value))
    return argv


def cache_args_prefixes(src, venvs):
    """The messages the cache checks (cache_args.py) can raise in any release, as the `cache
    args` part counts them: kvpilot must not report another release's wording where this one
    accepts. Each release's come from its last run of the script (on no scenarios where it has
    not run yet)."""
    root = os.path.dirname(src)
    prefixes = set()
    for release in RELEASES:
        release_src = os.path.join(root, release.version)
        if release_src not in _CACHE_PREFIXES:
            sglang_cache_args(release_src, venvs, [])
        prefixes.update(_CACHE_PREFIXES[release_src])
    return prefixes


def check_server_cache_args(kvpilot, src, venvs, version, compare):
    """The release's cache checks (cache_args.py) on prefill servers and servers without PD
    against the guard's verdict on the same command lines. Returns (passed, failed, summary)."""
    scenarios = server_cache_args_scenarios(version)
    _, theirs = sglang_cache_args(src, venvs, scenarios)
    prefixes = cache_args_prefixes(src, venvs)
    refusing = sum(theirs[s["id"]] is not None for s in scenarios)
    summary = f"server cache args scenarios {len(scenarios)} (refused by SGLang {refusing}"
    if not compare:
        return len(scenarios), 0, summary + ")"
    reports = {r["name"].split("/")[-1]: r
               for r in kvpilot_check_json(kvpilot, guard_pods(version, scenarios, flags_argv,
                                                               lambda s: s.get("env", {})))}
    agreements, failed, by_rule = compare_reports(
        version, scenarios, reports, theirs, prefixes, lambda s: "server cache args " + " ".join(flags_argv(s)[2:]))
    rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()) if rule in SERVER_CACHE_RULES)
    return agreements, failed, summary + f"; by rule: {rules}), agreements {agreements}"


def compare_arg_checks(kvpilot, version, scenarios, manifest_of, raised, prefixes, label):
    """compare_reports on kvpilot check's reports of the scenarios' manifests."""
    reports = kvpilot_reports(kvpilot, [manifest_of(s) for s in scenarios], version)
    return compare_reports(version, scenarios, reports, raised, prefixes, lambda s: f"{label} {s['args']}")


def compare_reports(version, scenarios, reports, raised, prefixes, describe):
    """(agreements, disagreements, refusals by rule) of kvpilot's reports (by scenario id) with one
    argument check of the release; a refusal counts under the rule whose kvpilot message is the
    one SGLang raised. Prints each disagreement, `describe` naming its scenario."""
    agreements = disagreeing = 0
    by_rule = collections.Counter()
    for scenario in scenarios:
        report = reports.get(scenario["id"], {})
        why = pd_args_disagreement(raised[scenario["id"]], prefixes, report)
        if why is None:
            agreements += 1
            by_rule.update(v["rule"] for v in report.get("violations", [])
                           if v["message"] == raised[scenario["id"]])
        else:
            disagreeing += 1
            print(f"  {version} {describe(scenario)}: {why}")
    return agreements, disagreeing, by_rule


def sglang_pd_args(src, venvs, scenarios):
    answer = run_release_script("pd_args.py", src, venvs, scenarios)
    return answer["prefixes"], {r["id"]: r["error"] for r in answer["results"]}


def pd_args_disagreement(error, prefixes, report):
    """Why kvpilot's verdict differs from the release's argument check, or None.
    The release stops at its first error, so kvpilot must report that exact message; where the
    release raises nothing, kvpilot must report none of the messages that check can raise."""
    messages = [v["message"] for v in report.get("violations", [])]
    if error is not None and error.startswith(UNRECOGNIZED) and error not in messages:
        # argparse names every unknown flag in one message; kvpilot names each in its own.
        flags = [f"{UNRECOGNIZED}--{part.strip()}" for part in error[len(UNRECOGNIZED):].split("--") if part.strip()]
        missing = [f for f in flags if f not in messages]
        return f"SGLang raises {error!r}; kvpilot lacks {missing}: {messages}" if missing else None
    if error is not None:
        return None if error in messages else f"SGLang raises {error!r}; kvpilot: {messages}"
    # The check speaks for argument-phase refusals only (a tree cache built later may refuse).
    extra = [v["message"] for v in report.get("violations", [])
             if v.get("phase") == "args" and any(v["message"].startswith(p) for p in prefixes)]
    return f"SGLang accepts; kvpilot reports {extra}" if extra else None


def rendered_items(kvpilot, path, version):
    """The objects `kvpilot render -o json` gives for one example at `version`; rejected examples
    render none."""
    proc = subprocess.run([kvpilot, "render", "-o", "json", "--offline", "--sglang-version", version, "-f", path],
                          capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"kvpilot render {path} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return json.loads(proc.stdout)["items"]


def rendered_argvs(kvpilot, version):
    """The SGLang argv of every server pod (prefill and decode) `kvpilot render` gives for the
    examples, at `version`: [{"id": "example.yaml pod-name", "example", "argv", "annotations"}]."""
    cases = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        for item in rendered_items(kvpilot, path, version):
            if item["kind"] != "Pod":
                continue
            container = item["spec"]["containers"][0]
            if container["command"] != ["python3", "-m", "sglang.launch_server"]:
                raise RuntimeError(f"{path}: {item['metadata']['name']} does not run sglang.launch_server")
            cases.append({"id": f"{os.path.basename(path)} {item['metadata']['name']}",
                          "example": os.path.basename(path), "argv": container["args"],
                          "annotations": item["metadata"].get("annotations", {})})
    return cases


def pairing_disagreements(cases, results):
    """What SGLang parsed for an example's prefill and decode servers that cannot pair: another
    transfer backend, page size or KV dtype, or a bootstrap port other than the one the prefill
    pod's annotation gives the router."""
    problems = []
    by_example = {}
    for case, result in zip(cases, results):
        if result.get("parsed"):
            by_example.setdefault(case["example"], []).append((case, result["parsed"]))
    for example, servers in by_example.items():
        prefill = [(c, p) for c, p in servers if p["disaggregation_mode"] == "prefill"]
        decode = [p for _, p in servers if p["disaggregation_mode"] == "decode"]
        for case, parsed in prefill:
            annotated = case["annotations"].get("sglang.ai/bootstrap-port")
            if str(parsed["disaggregation_bootstrap_port"]) != annotated:
                problems.append(f"{case['id']}: bootstrap port {parsed['disaggregation_bootstrap_port']}, "
                                f"annotation {annotated}")
            for other in decode:
                for field in ("disaggregation_transfer_backend", "page_size", "kv_cache_dtype"):
                    if parsed[field] != other[field]:
                        problems.append(f"{case['id']}: {field} {parsed[field]!r}, decode {other[field]!r}")
    return problems, sum(1 for servers in by_example.values()
                         if any(p["disaggregation_mode"] == "prefill" for _, p in servers))


def check_rendered_argvs(kvpilot, src, venvs, version):
    """Each rendered decode argv through the release's own parser and post-parse checks.
    Returns (passed, failed, summary)."""
    cases = rendered_argvs(kvpilot, version)
    # A control: the parser must refuse what it does not know, or its acceptance means nothing.
    control = {"id": "control", "argv": cases[0]["argv"] + ["--no-such-sglang-flag"]} if cases else None
    answer = run_release_script("server_argv.py", src, venvs, cases + ([control] if control else []))
    passed = failed = post_ran = 0
    if control:
        refused = answer["results"].pop()["error"] or ""
        if "unrecognized arguments: --no-such-sglang-flag" not in refused:
            failed += 1
            print(f"  {version} argv control: the parser accepted an unknown flag ({refused!r})")
    for case, result in zip(cases, answer["results"]):
        post = result["postInit"] or {}
        if result["error"] is not None:
            failed += 1
            print(f"  {version} {case['id']}: SGLang's parser refuses the rendered argv: {result['error']}")
        elif "error" in post:
            failed += 1
            print(f"  {version} {case['id']}: ServerArgs refuses the rendered argv: {post['error']}")
        else:
            passed += 1
            post_ran += "ok" in post
    problems, paired = pairing_disagreements(cases, answer["results"])
    for problem in problems:
        failed += 1
        print(f"  {version} prefill/decode pairing {problem}")
    summary = (f"server argv {len(cases)}: accepted by the parser {len(cases) - sum(r['error'] is not None for r in answer['results'])}"
               f", post-parse checks ran to the end {post_ran} (the rest stop at missing hardware)"
               f"; examples with prefill and decode paired as SGLang parsed them {paired - len(problems)} of {paired}")
    passed += paired if not problems else 0
    return passed, failed, summary


def check_router_argvs(kvpilot, venvs, version):
    """Each rendered router argv through sglang-router 0.3.2's and smg 1.13.0's own
    parse_router_args, with a control; the selectors it parsed select exactly the rank-0 pods of
    their fleet among the rendered pods. Returns (passed, failed, summary)."""
    python = os.path.join(venvs, "venv-router", "bin", "python")
    cases, pods = [], {}
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        items = rendered_items(kvpilot, path, version)
        pods[os.path.basename(path)] = [i["metadata"] for i in items if i["kind"] == "Pod"]
        for item in items:
            if item["kind"] != "Deployment":
                continue
            container = item["spec"]["template"]["spec"]["containers"][0]
            for package in ("sglang_router", "smg"):
                cases.append({"id": f"{os.path.basename(path)} {package}", "package": package,
                              "example": os.path.basename(path), "argv": container["args"]})
    if not cases:
        return 0, 1, "router argv: no example renders a router"
    controls = [{"id": f"control {c['package']}", "package": c["package"], "argv": c["argv"] + ["--no-such-router-flag"]}
                for c in cases[:2]]
    proc = subprocess.run([python, os.path.join(HERE, "router_argv.py")], input=json.dumps(cases + controls),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"router_argv.py failed:\n{proc.stderr[-2000:]}")
    results = json.loads(proc.stdout)["results"]
    passed = failed = 0
    for control in results[len(cases):]:
        if "unrecognized arguments: --no-such-router-flag" not in (control["error"] or ""):
            failed += 1
            print(f"  router {control['id']}: the parser accepted an unknown flag ({control['error']!r})")
    for case, result in zip(cases, results):
        args = result["args"]
        if result["error"] is not None:
            failed += 1
            print(f"  router {case['id']}: the router's parser refuses the rendered argv: {result['error']}")
            continue
        wrong = [f for f in ("pd_disaggregation", "service_discovery") if args.get(f) is not True]
        for fleet, key in (("prefill", "prefill_selector"), ("decode", "decode_selector")):
            selector = args.get(key) or {}
            selected = sorted(m["name"] for m in pods[case["example"]]
                              if selector and all(m["labels"].get(k) == v for k, v in selector.items()))
            expected = sorted(m["name"] for m in pods[case["example"]]
                              if m["labels"].get("app.kubernetes.io/name") == f"kvpilot-{fleet}"
                              and m["labels"].get("kvpilot.dev/rank") == "0")
            if not expected or selected != expected:
                wrong.append(f"{key} selects {selected}, the {fleet} fleet's rank-0 pods are {expected}")
        if wrong:
            failed += 1
            print(f"  router {case['id']}: {wrong}")
        else:
            passed += 1
    summary = f"router argv {len(cases)} (sglang-router 0.3.2, smg 1.13.0): accepted with the right selectors {passed}"
    return passed, failed, summary


def server_cli_manifest(version, cases):
    """One Pod per argv, running the release's image, with the model config in a ConfigMap."""
    with open(os.path.join(ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json"), encoding="utf-8") as f:
        config = f.read()
    documents = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "model", "namespace": "parity"},
                  "data": {"config.json": config}}]
    for case in cases:
        documents.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "argv-" + case["id"].replace(".", "-"), "namespace": "parity",
                         "annotations": {"kvpilot.dev/model-config": "configmap/model"}},
            "spec": {"containers": [{"name": "sglang", "image": f"lmsysorg/sglang:v{version}",
                                     "command": ["python3", "-m", "sglang.launch_server"],
                                     "args": case["argv"]}]},
        })
    return documents


def kvpilot_argv_verdicts(kvpilot, version, cases):
    """case id -> kvpilot's CLI finding message (None: accepted), from one `kvpilot check`."""
    verdicts = {}
    for report in kvpilot_check_json(kvpilot, server_cli_manifest(version, cases)):
        messages = [v["message"] for v in report.get("violations", []) if v["rule"] == "CLI"]
        verdicts[report["name"].split("/")[-1].removeprefix("argv-")] = messages[0] if messages else None
    return verdicts


def same_refusal(theirs, ours, rows):
    """Whether kvpilot's message is SGLang's. Choices held in a set are listed in an order that
    changes with every interpreter: for those options the list is compared as a set."""
    if theirs == ours or theirs is None or ours is None:
        return theirs == ours
    head, _, listed = theirs.removesuffix(")").partition(" (choose from ")
    our_head, _, our_listed = ours.removesuffix(")").partition(" (choose from ")
    option = head.removeprefix("argument ").split(":")[0].split("/")[0]
    unordered = any(r[4].startswith("~") and option in r[0].split(" ") for r in rows)
    return unordered and head == our_head and sorted(listed.split(", ")) == sorted(our_listed.split(", "))


def check_server_cli(kvpilot, src, venvs, compare):
    """The table is current, and every release's own parser and kvpilot agree on accept/refuse
    and on argparse's message for a generated corpus of argvs. Returns (passed, failed)."""
    with server_cli.ReleaseParsers(src, venvs) as parsers:
        rows = parsers.rows
        corpora = {version: server_cli.corpus(rows, version) for version in rows}
        answers = parsers.judge(corpora)
    passed = failed = 0
    text = server_cli.render(rows)
    with open(os.path.join(ROOT, SERVER_CLI_TSV), encoding="utf-8") as f:
        if f.read() == text:
            passed += 1
            print(f"server command line: {SERVER_CLI_TSV} is current")
        else:
            failed += 1
            print(f"server command line: {SERVER_CLI_TSV} is stale; regenerate with `python3 "
                  f"tests/parity/server_cli.py generate {src} {venvs} {SERVER_CLI_TSV}`")
    if compare:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            verdicts = dict(zip(rows, pool.map(
                lambda version: kvpilot_argv_verdicts(kvpilot, version, corpora[version]), rows)))
    for version in rows:
        cases = corpora[version]
        theirs = {r["id"]: r["error"] for r in answers[version]}
        harness = [c for c in cases if (theirs[c["id"]] or "").startswith("harness:")]
        for case in harness:
            failed += 1
            print(f"  {version} argv {case['argv']}: the harness could not run the parser: {theirs[case['id']]}")
        refused = sum(theirs[c["id"]] is not None for c in cases)
        summary = f"SGLang {version}: argv corpus {len(cases)}, refused by SGLang's parser {refused}"
        if compare:
            ours = verdicts[version]
            agreements = 0
            for case in cases:
                key = case["id"].replace(".", "-")
                if case in harness:
                    continue
                if key not in ours:
                    failed += 1
                    print(f"  {version} {case['subject']} {case['argv']}: kvpilot reported no verdict")
                elif not same_refusal(theirs[case["id"]], ours[key], rows[version]):
                    failed += 1
                    print(f"  {version} {case['subject']} {case['argv']}: SGLang {theirs[case['id']]!r}, "
                          f"kvpilot {ours[key]!r}")
                else:
                    agreements += 1
            passed += agreements
            summary += f", agreements with kvpilot {agreements}"
        else:
            passed += len(cases) - len(harness)
        print(summary)
    return passed, failed


def check_served_architectures(src):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "served_architectures.py"),
                           "check", src, os.path.join(ROOT, SERVED_TSV)],
                          capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode == 0


PARTS = ("served", "classification", "retraction", "pd-args", "cache-args", "mamba-args", "draft", "handshake",
         "tree-cache", "speculative", "speculative-parallel", "dsv4-hook", "model-overrides", "family-overrides",
         "context-parallel", "dsa-kv-cache", "iquest-mtp", "parallel-shape", "hisparse", "mimo-v2-hook",
         "flag-combinations", "language-model-only", "messages", "argv", "cli")


# The parts that run one release's code on their own scenarios and compare with kvpilot, each
# returning (passed, failed, summary), in the order their summaries are printed.
PER_RELEASE_CHECKS = (("cache-args", check_server_cache_args), ("mamba-args", check_mamba_args), ("draft", check_draft_geometry),
                      ("speculative", check_speculative_names),
                      ("speculative-parallel", check_speculative_parallel), ("dsv4-hook", check_dsv4_hook),
                      ("model-overrides", check_model_overrides),
                      ("family-overrides", check_family_overrides),
                      ("context-parallel", check_context_parallel),
                      ("dsa-kv-cache", check_dsa_kv_cache),
                      ("iquest-mtp", check_iquest_mtp),
                      ("parallel-shape", check_parallel_shape),
                      ("hisparse", check_hisparse),
                      ("mimo-v2-hook", check_mimo_v2_hook),
                      ("flag-combinations", check_flag_combinations),
                      ("language-model-only", check_language_model_only),
                      ("tree-cache", check_tree_cache),
                      ("handshake", check_handshake))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="folder holding <version>/sglang/srt")
    parser.add_argument("--venvs", required=True, help="folder holding venv-<transformers pin>")
    parser.add_argument("--kvpilot", help="the kvpilot binary to compare")
    parser.add_argument("--oracle-only", action="store_true")
    parser.add_argument("--only", action="append", choices=PARTS,
                        help="run only this part (repeatable); every part by default")
    args = parser.parse_args()
    parts = set(args.only or PARTS)

    passed = failed = 0
    if "served" in parts:
        if check_served_architectures(args.src):
            passed += 1
        else:
            failed += 1

    compare = not args.oracle_only
    if compare and (not args.kvpilot or not os.access(args.kvpilot, os.X_OK)):
        print(f"parity: no kvpilot binary at {args.kvpilot!r}; build it (cargo build) or set "
              "KVPILOT_BIN")
        compare, failed = False, failed + 1
    elif compare and not supports_sglang_version(args.kvpilot):
        print(f"parity: {args.kvpilot} has no `layout --sglang-version`; the comparison needs "
              "the release profiles of issue #14 (items 1-2). Only SGLang's side ran.")
        compare, failed = False, failed + 1

    if "cli" in parts:
        cli_passed, cli_failed = check_server_cli(args.kvpilot, args.src, args.venvs, compare)
        passed, failed = passed + cli_passed, failed + cli_failed

    configs = fixture_configs()
    served = served_architectures()
    # Any release's wording counts: kvpilot must not raise an older or newer variant of a
    # message where this release accepts.
    arg_checks = []
    if "pd-args" in parts:
        arg_checks.append(("PD args", pd_args_scenarios(), pd_args_manifest, sglang_pd_args))
    if "cache-args" in parts:
        arg_checks.append(("cache args", cache_args_scenarios(), cache_args_manifest,
                           sglang_cache_args))
    raised_by_check = []
    for label, scenarios, manifest_of, run_check in arg_checks:
        raised, prefixes = {}, set()
        for release in RELEASES:
            release_prefixes, raised[release.version] = run_check(
                os.path.join(args.src, release.version), args.venvs, scenarios)
            prefixes.update(release_prefixes)
        raised_by_check.append((label, scenarios, manifest_of, raised, prefixes))
    for release in RELEASES:
        version = release.version
        summary = ""
        if "classification" in parts:
            verdicts = sglang_classification(os.path.join(args.src, version), args.venvs, configs)
            loaded = refused = refused_by_both = harness_errors = agreements = disagreeing = 0
            nextn_decided, dspark_heads = {False: 0, True: 0}, 0
            for config in configs:
                name = os.path.basename(config)
                verdict = verdicts.get(name, {"harnessError": "no output from classify.py"})
                if "harnessError" in verdict:
                    harness_errors += 1
                    print(f"  {version} {name}: the harness could not run SGLang's code: "
                          f"{verdict['harnessError']}")
                    continue
                if not verdict["loaded"]:
                    # SGLang itself cannot load this config: nothing to compare. Counted, not
                    # judged: most refusals are architectures the release has no config class
                    # for, where kvpilot warns instead of refusing; the count shows the loader
                    # refusals kvpilot models (Gemma-4 on transformers 5.19.0).
                    refused += 1
                    if compare and kvpilot_layout(args.kvpilot, config, version)[1] is not None:
                        refused_by_both += 1
                    continue
                loaded += 1
                if not compare:
                    continue
                layout, error = kvpilot_layout(args.kvpilot, config, version)
                if error is not None:
                    disagreeing += 1
                    print(f"  {version} {name}: SGLang classifies it, kvpilot fails: {error}")
                    continue
                differences = disagreements(
                    verdict, layout, is_served(served, verdict["architecture"], version))
                if differences:
                    disagreeing += 1
                    diff = ", ".join(f"{fact} SGLang={s} kvpilot={k}" for fact, s, k in differences)
                    print(f"  {version} {name}: {diff}")
                else:
                    agreements += 1
                    lacks = eagle_draft_lacks_nextn(verdict)
                    if lacks is not None:
                        nextn_decided[lacks] += 1
                    dspark_heads += dspark_draft_is_the_head(verdict) is True
            summary += (f"; configs {len(configs)}: classified by SGLang {loaded}, "
                        f"refused by SGLang's loader {refused}")
            if compare:
                summary += f" (refused by kvpilot too {refused_by_both})"
            summary += f", harness errors {harness_errors}"
            if compare:
                summary += (f"; compared {loaded}, agreements {agreements} (EAGLE drafts with NextN "
                            f"layers {nextn_decided[False]}, without {nextn_decided[True]}; DSPARK drafts "
                            f"that are the DSpark head "
                            f"{dspark_heads})")
            failed += harness_errors + disagreeing
            passed += agreements if compare else loaded
        if "retraction" in parts:
            scenarios = retraction_scenarios()
            resolved = sglang_retraction(os.path.join(args.src, version), args.venvs, scenarios)
            runnable = [s for s in scenarios if "backend" in resolved[s["id"]]]
            scenario_agreements = 0
            if compare and runnable:
                reports = kvpilot_reports(args.kvpilot, [manifest(s) for s in runnable], version)
                for scenario in runnable:
                    ours = reports.get(scenario["id"], {}).get("effective") or {}
                    theirs = resolved[scenario["id"]]
                    differences = [("retractionBackup", theirs["backend"],
                                    ours.get("retractionBackup"))]
                    # The ratio sizes the host pool, which exists only with host_pool.
                    if theirs.get("hicacheRatio") is not None and theirs["backend"] == "host_pool":
                        differences.append(("hostPoolRatio", theirs["hicacheRatio"],
                                            ours.get("hostPoolRatio")))
                    differences = [d for d in differences if d[1] != d[2]]
                    if differences:
                        failed += 1
                        flags = ", ".join(f"{k}={v}" for k, v in scenario["flags"].items())
                        diff = ", ".join(f"{f} SGLang={s} kvpilot={k}" for f, s, k in differences)
                        print(f"  {version} retraction {os.path.basename(scenario['config'])} "
                              f"[{flags}]: {diff}")
                    else:
                        scenario_agreements += 1
            summary += (f"; retraction scenarios {len(scenarios)}: run by SGLang {len(runnable)}")
            if compare:
                summary += f", agreements {scenario_agreements}"
            passed += scenario_agreements if compare else len(runnable)
        for part, check in PER_RELEASE_CHECKS:
            if part in parts:
                part_passed, part_failed, part_summary = check(
                    args.kvpilot, os.path.join(args.src, version), args.venvs, version, compare)
                passed, failed = passed + part_passed, failed + part_failed
                summary += f"; {part_summary}"
        for label, scenarios, manifest_of, raised, prefixes in raised_by_check:
            summary += f"; {label} scenarios {len(scenarios)} run by SGLang"
            if compare:
                agreements, disagreeing, by_rule = compare_arg_checks(
                    args.kvpilot, version, scenarios, manifest_of, raised[version], prefixes,
                    label)
                refusing = sum(raised[version][s["id"]] is not None for s in scenarios)
                rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()))
                summary += f" (refused {refusing}; by rule: {rules}), agreements {agreements}"
                passed, failed = passed + agreements, failed + disagreeing
            else:
                passed += len(scenarios)
        if "messages" in parts:
            messages_ok, message_failures = rule_messages.check(
                os.path.join(args.src, version), version)
            for failure in message_failures:
                print(f"  {version} rule message {failure}")
            summary += (f"; rule messages (static table) {messages_ok + len(message_failures)}, "
                        f"as the table says {messages_ok}")
            failed += len(message_failures)
            passed += messages_ok
        if compare and "argv" in parts:
            argv_passed, argv_failed, argv_summary = check_rendered_argvs(
                args.kvpilot, os.path.join(args.src, version), args.venvs, version)
            passed, failed = passed + argv_passed, failed + argv_failed
            summary += f"; {argv_summary}"
        print(f"SGLang {version}: {summary.removeprefix('; ')}")

    if compare:
        router_passed, router_failed, router_summary = check_router_argvs(args.kvpilot, args.venvs, RELEASES[-1].version)
        print(router_summary)
        passed, failed = passed + router_passed, failed + router_failed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
