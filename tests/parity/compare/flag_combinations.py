"""Flags a release refuses together: each release's checks (flag_combinations.py) against the
guard's rules."""

import itertools
import os

from releases import version_key

from compare.common import ROOT, check_with_guard, role_argv


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
