"""A server's cache flags: the cache checks on prefill servers and servers without PD, the Mamba
radix-cache strategy and HiSparse, each release's code against kvpilot's."""

import collections
import itertools
import os

from releases import version_key

from compare.arg_checks import PD_ARGS_CONFIG, cache_args_prefixes, compare_reports, sglang_cache_args
from compare.common import (
    ROOT, check_with_guard, guard_pods, kvpilot_check_json, role_argv, run_release_script)


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
