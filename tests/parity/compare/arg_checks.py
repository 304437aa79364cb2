"""The PD and cache argument checks: each release's handle_pd_disaggregation (pd_args.py) and
cache checks (cache_args.py) on decode-flag matrices against `kvpilot check`'s violations."""

import collections
import itertools
import json
import os

from releases import RELEASES

from compare.common import ROOT, kvpilot_reports, run_release_script
from compare.retraction import manifest


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
