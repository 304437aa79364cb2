//! The rules per release: each release difference of `sglang-drift.md` §2–§4, with the exact
//! message the release prints.

use k8s_openapi::api::core::v1::EnvVar;
use serde_json::json;

use super::tests::fixture;
use super::*;
use crate::api::{HicacheHostMemoryMode, MambaRadixCacheStrategy, PrefillSpec, TransferBackend};

fn layout_at(config: serde_json::Value) -> AttentionLayout {
    layout::resolve(&config, ResolveOptions::default()).expect("test layout")
}

fn full() -> AttentionLayout {
    layout_at(
        json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8, "head_dim": 128}),
    )
}

fn hybrid_swa() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    }))
}

fn ssm() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 8, "full_attention_interval": 4, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128
    }))
}

fn mla() -> AttentionLayout {
    layout_at(
        json!({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64}),
    )
}

fn dsv4() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
        "compress_ratios": [0, 4, 128, 0]
    }))
}

fn with(edit: impl FnOnce(&mut DisaggregationSpec)) -> DisaggregationSpec {
    let mut settings = DisaggregationSpec::default();
    edit(&mut settings);
    settings
}

/// Settings that speculate with `algorithm`, spelled as given.
fn speculating(algorithm: &str) -> DisaggregationSpec {
    with(|s| s.speculative_algorithm = Some(algorithm.to_string()))
}

fn env(name: &str, value: &str) -> FleetSpec {
    FleetSpec {
        env: vec![EnvVar { name: name.into(), value: Some(value.into()), value_from: None }],
        ..FleetSpec::default()
    }
}

fn at(patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> Verdict {
    evaluate(PolicyInput::alone(settings, decode, layout, v0_5(patch)))
}

/// The verdict on a default decode fleet of `layout` whose speculative draft model is `draft`.
fn at_with_draft(
    patch: u16,
    settings: &DisaggregationSpec,
    layout: &AttentionLayout,
    draft: Option<&AttentionLayout>,
) -> Verdict {
    evaluate(PolicyInput {
        disaggregation: settings,
        decode: &FleetSpec::default(),
        layout,
        draft,
        draft_is_the_model: false,
        prefill_fleet: None,
        release: v0_5(patch),
    })
}

/// The messages of `rule` on each release 0.5.17…0.5.23 (None where it does not fire).
fn messages(
    rule: &str,
    settings: &DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
) -> Vec<Option<String>> {
    (17..=23)
        .map(|patch| {
            at(patch, settings, decode, layout).violations.into_iter().find(|v| v.rule == rule).map(|v| v.message)
        })
        .collect()
}

/// `message` on the releases in `present`, nothing on the others.
fn on(present: std::ops::RangeInclusive<u16>, message: &str) -> Vec<Option<String>> {
    (17..=23).map(|patch| present.contains(&patch).then(|| message.to_string())).collect()
}

fn concat(parts: &[Vec<Option<String>>]) -> Vec<Option<String>> {
    (0..7).map(|i| parts.iter().find_map(|p| p[i].clone())).collect()
}

#[test]
fn f1_the_retraction_flag_does_not_exist_before_0_5_18() {
    let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
    assert_eq!(
        messages("F1", &host_pool, &FleetSpec::default(), &full()),
        on(17..=17, "unrecognized arguments: --disaggregation-decode-retraction-backup host_pool")
    );
    let rewritten =
        at(17, &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..host_pool }, &FleetSpec::default(), &full());
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_eq!((rewritten.rewrites[0].from.as_str(), rewritten.rewrites[0].to.as_str()), ("host_pool", "unset"));
    assert_eq!(rewritten.settings.retraction_backup, None);
    assert_eq!(
        rewritten.effective.retraction_backup,
        RetractionBackup::CpuTensor,
        "0.5.17 always copies to CPU tensors"
    );
}

#[test]
fn f2_none_exists_from_0_5_21() {
    let none = with(|s| s.retraction_backup = Some(RetractionBackup::None));
    assert_eq!(
        messages("F2", &none, &FleetSpec::default(), &full()),
        on(
            18..=20,
            "argument --disaggregation-decode-retraction-backup: invalid choice: 'none' (choose from 'cpu_tensor', \
             'host_pool')"
        )
    );
    let rewritten =
        at(20, &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..none.clone() }, &FleetSpec::default(), &full());
    assert_eq!(rewritten.settings.retraction_backup, Some(RetractionBackup::CpuTensor));
    let valid = at(21, &none, &FleetSpec::default(), &full());
    assert_eq!((valid.outcome, valid.effective.retraction_backup), (Outcome::Valid, RetractionBackup::None));
    assert_eq!(valid.effective.host_pool_ratio, None);
    assert!(valid.warnings.iter().any(|w| w.contains("aborted with HTTP 503")), "{:?}", valid.warnings);
}

#[test]
fn r13_is_a_blanket_refusal_until_0_5_18_wants_the_env_var_until_0_5_20_and_is_gone_after() {
    let radix = with(|s| s.decode_radix_cache = true);
    let blanket =
        "--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention (SWA) models";
    assert_eq!(messages("R13", &radix, &FleetSpec::default(), &hybrid_swa()), on(17..=18, blanket));
    let off = env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "0");
    let needs_env = "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the \
                     unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).";
    assert_eq!(messages("R13", &radix, &off, &hybrid_swa()), concat(&[on(17..=18, blanket), on(19..=20, needs_env)]));
    for patch in 17..=23 {
        let added = at(patch, &radix, &FleetSpec::default(), &hybrid_swa()).effective.decode_env;
        assert_eq!(added.len(), usize::from((19..=20).contains(&patch)), "0.5.{patch}: {added:?}");
    }
}

#[test]
fn r17_and_the_dcp_chunk_cache_rules_end_with_0_5_20() {
    let radix = with(|s| s.decode_radix_cache = true);
    assert_eq!(
        messages("R17", &radix, &FleetSpec::default(), &ssm()),
        on(17..=20, "--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models")
    );
    let dcp_radix = with(|s| {
        s.decode_radix_cache = true;
        s.decode_context_parallel = 2;
    });
    let verdicts: Vec<bool> = (17..=23)
        .map(|p| at(p, &dcp_radix, &FleetSpec::default(), &mla()).violations.iter().any(|v| v.rule == "R19"))
        .collect();
    assert_eq!(verdicts, [true, true, true, true, false, false, false]);
}

#[test]
fn r15_changes_text_and_condition_in_0_5_23() {
    let radix = with(|s| s.decode_radix_cache = true);
    let old = "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV \
               (c4/c128/indexer) yet.";
    let new = "--disaggregation-decode-enable-radix-cache with DeepSeek-V4 requires the unified KV layout \
               (SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton).";
    assert_eq!(messages("R15", &radix, &FleetSpec::default(), &dsv4()), concat(&[on(19..=22, old), on(23..=23, new)]));
    let unified_kv = env("SGLANG_HACK_FLASHMLA_BACKEND", "unified_kv_triton");
    assert_eq!(messages("R15", &radix, &unified_kv, &dsv4()), on(19..=22, old));
}

#[test]
fn r18_speculative_algorithms_decode_radix_cache_allows_per_release() {
    let with_algorithm = |algorithm: &str| {
        with(|s| {
            s.decode_radix_cache = true;
            s.speculative_algorithm = Some(algorithm.into());
        })
    };
    let fires = |algorithm: &str| -> Vec<bool> {
        messages("R18c", &with_algorithm(algorithm), &FleetSpec::default(), &full())
            .iter()
            .map(Option::is_some)
            .collect()
    };
    assert_eq!(fires("EAGLE"), [true, true, true, true, true, true, false]);
    assert_eq!(fires("DSPARK"), [true, true, true, true, false, false, false]);
    assert_eq!(fires("NGRAM"), [true; 7]);
    // Up to 0.5.22 the PD hook compares the name as given; 0.5.23 the resolved, upper-cased one.
    assert_eq!(fires("dspark"), [true, true, true, true, true, true, false]);
    assert_eq!(fires("nextn"), [true, true, true, true, true, true, false]);
    let r18c = |algorithm: &str, patch: u16| {
        at(patch, &with_algorithm(algorithm), &FleetSpec::default(), &full())
            .violations
            .into_iter()
            .find(|v| v.rule == "R18c")
            .map(|v| v.message)
    };
    let message = |name: &str| {
        format!(
            "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding \
             (--speculative-algorithm {name})"
        )
    };
    assert_eq!(r18c("ngram", 22), Some(message("ngram")));
    assert_eq!(r18c("ngram", 23), Some(message("NGRAM")));
    // EAGLE with a Gemma-4 assistant draft runs as FROZEN_KV_MTP, which 0.5.23 refuses.
    let assistant: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/parity/gemma-4-assistant.json")).unwrap();
    let assistant = layout_at(assistant);
    let verdict = at_with_draft(23, &with_algorithm("EAGLE"), &full(), Some(&assistant));
    let refused = verdict.violations.into_iter().find(|v| v.rule == "R18c").map(|v| v.message);
    assert_eq!(refused, Some(message("FROZEN_KV_MTP")));
}

#[test]
fn r19_decode_dcp_backends_widen_per_release() {
    let dcp = |backend| {
        with(|s| {
            s.decode_context_parallel = 2;
            s.transfer_backend = backend;
        })
    };
    let v1 = "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'mori'.";
    let v2 = "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic \
              benchmarking, got 'mori'.";
    assert_eq!(
        messages("R19", &dcp(TransferBackend::Mori), &FleetSpec::default(), &mla()),
        concat(&[on(17..=18, v1), on(19..=21, v2)])
    );
    assert_eq!(
        messages("R19", &dcp(TransferBackend::Fake), &FleetSpec::default(), &mla()),
        on(17..=18, "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'fake'.")
    );
}

#[test]
fn t1_by_backend_and_release() {
    let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
    let mismatched = |backend| {
        with(|s| {
            s.transfer_backend = backend;
            s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
        })
    };
    let mori =
        "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size=2, decode_tp_size=4)";
    assert_eq!(messages("T1", &mismatched(TransferBackend::Mori), &decode, &hybrid_swa()), on(17..=23, mori));
    let mooncake = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.";
    for backend in [TransferBackend::Mooncake, TransferBackend::Nixl] {
        assert_eq!(messages("T1", &mismatched(backend), &decode, &hybrid_swa()), on(17..=21, mooncake));
    }
    // MXFP8 KV adds BLOCK_SCALE state, even on a model without SWA.
    let mxfp8 = FleetSpec { kv_cache_dtype: Some("mxfp8".into()), ..decode.clone() };
    let block_scale =
        "PD Disaggregation does NOT support PD different TP sizes for non-MLA BLOCK_SCALE hybrid models yet.";
    assert_eq!(messages("T1", &mismatched(TransferBackend::Mooncake), &mxfp8, &full()), on(19..=21, block_scale));
    assert_eq!(messages("T1", &mismatched(TransferBackend::Nixl), &mxfp8, &full()), on(20..=21, block_scale));
    let newest = at(23, &with(|_| {}), &decode, &hybrid_swa());
    assert!(!newest.warnings.iter().any(|w| w.contains("T1")), "mooncake has no T1 in 0.5.23: {:?}", newest.warnings);
}

#[test]
fn p1_p2_prefill_and_decode_must_agree_on_page_size_and_kv_dtype() {
    let prefill = with(|s| {
        s.prefill =
            Some(PrefillSpec { page_size: Some(64), kv_cache_dtype: Some("fp8_e4m3".into()), ..PrefillSpec::default() })
    });
    let verdict = at(23, &prefill, &FleetSpec::default(), &full());
    let found: Vec<(&str, &str, &str)> =
        verdict.violations.iter().map(|v| (v.rule, v.message.as_str(), v.phase)).collect();
    assert_eq!(
        found,
        [
            (
                "P1",
                "Page size mismatch: prefill server has page_size=64, but decode server has page_size=1. Both servers \
                 must use the same --page-size value.",
                "handshake"
            ),
            (
                "P2",
                "KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but decode server has \
                 kv_cache_dtype=auto. Both servers must use the same --kv-cache-dtype value.",
                "handshake"
            ),
        ]
    );
    let matching = FleetSpec { page_size: Some(64), kv_cache_dtype: Some("fp8_e4m3".into()), ..FleetSpec::default() };
    assert_eq!(at(17, &prefill, &matching, &full()).outcome, Outcome::Valid);
    assert_eq!(
        at(23, &with(|s| s.prefill = Some(PrefillSpec::default())), &FleetSpec::default(), &full()).outcome,
        Outcome::Valid
    );
}

#[test]
fn r19d_decode_dcp_needs_an_mla_pool() {
    let dcp = with(|s| s.decode_context_parallel = 2);
    assert_eq!(
        messages("R19d", &dcp, &FleetSpec::default(), &full()),
        on(17..=23, "PD decode DCP requires an MLA or hybrid-MLA KV pool.")
    );
    assert_eq!(at(23, &dcp, &FleetSpec::default(), &mla()).outcome, Outcome::Valid);
    assert_eq!(at(23, &dcp, &FleetSpec::default(), &dsv4()).outcome, Outcome::Valid, "DSV4 counts as MLA");
}

#[test]
fn s6_s7_s8_hold_on_every_release() {
    let offload = with(|s| s.decode_offload_kv_cache = true);
    assert_eq!(
        messages("S6", &offload, &FleetSpec::default(), &full()),
        on(
            17..=23,
            "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend \
             is provided."
        )
    );
    let hicache = with(|s| s.hierarchical_cache = true);
    assert_eq!(
        messages("S7", &hicache, &FleetSpec::default(), &full()),
        on(
            17..=23,
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be \
             used at the same time. Please use only one of them."
        )
    );
    let under_radix = with(|s| {
        s.hierarchical_cache = true;
        s.decode_radix_cache = true;
    });
    assert_eq!(messages("S7", &under_radix, &FleetSpec::default(), &full()), vec![None; 7]);
    let out_of_range = FleetSpec { swa_full_tokens_ratio: Some(1.5), ..FleetSpec::default() };
    assert_eq!(
        messages("S8", &DisaggregationSpec::default(), &out_of_range, &full()),
        on(17..=23, "--swa-full-tokens-ratio should be in range (0, 1.0].")
    );
}

#[test]
fn o1_decode_offload_needs_an_mha_or_mla_pool() {
    let offload = with(|s| {
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
    });
    for layout in [hybrid_swa(), ssm(), dsv4()] {
        assert_eq!(
            messages("O1", &offload, &FleetSpec::default(), &layout),
            on(17..=23, "Unsupported KV cache type for decode offload")
        );
    }
    for layout in [full(), mla()] {
        assert_eq!(at(23, &offload, &FleetSpec::default(), &layout).outcome, Outcome::Valid);
    }
    let unified = with(|s| {
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
        s.enable_unified_memory = true;
    });
    assert_eq!(
        messages("O1", &unified, &FleetSpec::default(), &hybrid_swa()),
        on(17..=20, "Unsupported KV cache type for decode offload"),
        "0.5.21 accepts the unified-memory hybrid-SWA pool"
    );
}

#[test]
fn unified_memory_rules_per_release() {
    let unified = with(|s| s.enable_unified_memory = true);
    assert_eq!(
        messages("U1", &unified, &FleetSpec::default(), &full()),
        on(17..=17, "--enable-unified-memory is not yet compatible with PD disaggregation.")
    );
    let on_nixl = with(|s| {
        s.enable_unified_memory = true;
        s.transfer_backend = TransferBackend::Nixl;
    });
    // The catalogue's "requires --disaggregation-transfer-backend mooncake and --pp-size 1." is in no
    // release: 0.5.18–0.5.20 name the backend, and PP is a check of its own from 0.5.18.
    let until_0_5_20 =
        "--enable-unified-memory with PD disaggregation supports only the mooncake transfer backend; got 'nixl'.";
    let since_0_5_21 =
        "--enable-unified-memory with PD disaggregation supports only these transfer backends: mooncake; got 'nixl'.";
    assert_eq!(
        messages("U1", &on_nixl, &FleetSpec::default(), &full()),
        concat(&[
            on(17..=17, "--enable-unified-memory is not yet compatible with PD disaggregation."),
            on(18..=20, until_0_5_20),
            on(21..=23, since_0_5_21)
        ])
    );
    let pp2 = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    assert_eq!(
        at(18, &unified, &pp2, &full()).violations[0].message,
        at(23, &unified, &pp2, &full()).violations[0].message
    );
    assert_eq!(
        at(23, &unified, &pp2, &full()).violations[0].message,
        "--enable-unified-memory with PD disaggregation does not support pipeline parallelism (whole-envelope transfer \
         has no per-layer entries to subset)."
    );
    let speculative = with(|s| {
        s.enable_unified_memory = true;
        s.speculative_algorithm = Some("DSPARK".into());
    });
    assert_eq!(
        messages("U1", &speculative, &FleetSpec::default(), &full())[4].as_deref(),
        Some(
            "--enable-unified-memory with PD disaggregation does not support speculative decoding with the Mooncake \
              transfer backend."
        )
    );
    let fires = |rule, layout: &AttentionLayout| -> Vec<bool> {
        messages(rule, &unified, &FleetSpec::default(), layout).iter().map(Option::is_some).collect()
    };
    assert_eq!(fires("U2", &ssm()), [false, true, true, false, false, false, false]);
    assert_eq!(fires("U3", &hybrid_swa()), [false, true, true, false, false, false, false]);
    let host_pool = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.enable_unified_memory = true;
            s.retraction_backup = Some(RetractionBackup::HostPool);
            edit(s);
        })
    };
    let radix = host_pool(|s| s.decode_radix_cache = true);
    assert_eq!(
        messages("U6a", &radix, &FleetSpec::default(), &full()),
        on(
            21..=21,
            "--enable-unified-memory host-pool decode retraction does not support decode radix-cache H2D/D2H transfers yet."
        )
    );
    assert_eq!(
        messages("U6b", &host_pool(|_| {}), &FleetSpec::default(), &ssm()),
        on(21..=23, "--enable-unified-memory host-pool decode retraction does not support hybrid-Mamba models.")
    );
    assert_eq!(
        messages("U6c", &host_pool(|_| {}), &FleetSpec::default(), &hybrid_swa()),
        on(
            21..=21,
            "--enable-unified-memory host-pool decode retraction does not support hybrid-SWA H2D/D2H transfers yet."
        )
    );
}

/// The unified-memory pool hook runs after the speculative hook, so it reads the algorithm
/// upper-cased and resolved: NEXTN and `eagle` are EAGLE there.
#[test]
fn the_unified_memory_pool_hook_reads_the_resolved_speculative_algorithm() {
    let unified = |algorithm: &str| {
        let algorithm = algorithm.to_string();
        with(move |s| {
            s.enable_unified_memory = true;
            s.speculative_algorithm = Some(algorithm);
        })
    };
    let u8_message = |algorithm: &str, patch: u16| {
        at(patch, &unified(algorithm), &FleetSpec::default(), &full())
            .violations
            .into_iter()
            .find(|v| v.rule == "U8")
            .map(|v| v.message)
    };
    let refused = u8_message("nextn", 20).unwrap();
    assert!(refused.ends_with("Got --speculative-algorithm='EAGLE'."), "{refused}");
    assert_eq!(u8_message("dspark", 20), None);
    assert_eq!(u8_message("nextn", 23), None);
    // EAGLE under unified memory needs a unified target: NEXTN and `eagle` are EAGLE.
    for algorithm in ["EAGLE", "NEXTN", "eagle", "eagle3"] {
        let rules = at(23, &unified(algorithm), &FleetSpec::default(), &full()).violations;
        assert!(rules.iter().any(|v| v.rule == "U13"), "{algorithm}");
    }
    let rules = at(23, &unified("ngram"), &FleetSpec::default(), &full()).violations;
    assert!(!rules.iter().any(|v| v.rule == "U13"));
}

#[test]
fn r8_on_0_5_18_needs_the_unified_tree_env_for_decode_radix_cache() {
    let settings = with(|s| {
        s.retraction_backup = Some(RetractionBackup::HostPool);
        s.decode_radix_cache = true;
    });
    let fires: Vec<bool> =
        messages("R8", &settings, &FleetSpec::default(), &full()).iter().map(Option::is_some).collect();
    assert_eq!(fires, [false, true, false, false, false, false, false]);
    let with_env = env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1");
    assert_eq!(at(18, &settings, &with_env, &full()).outcome, Outcome::Valid);
}

#[test]
fn the_automatic_backup_and_its_host_pool_follow_each_release() {
    let unset = DisaggregationSpec::default();
    let effective =
        |patch, settings: &DisaggregationSpec| at(patch, settings, &FleetSpec::default(), &full()).effective;
    assert_eq!(effective(17, &unset).retraction_backup, RetractionBackup::CpuTensor);
    assert_eq!(
        (effective(18, &unset).retraction_backup, effective(18, &unset).host_pool_ratio),
        (RetractionBackup::HostPool, Some(1.0))
    );
    assert_eq!(effective(19, &unset).host_pool_ratio, Some(0.2));
    let unified = with(|s| s.enable_unified_memory = true);
    let backups: Vec<RetractionBackup> = (18..=23).map(|p| effective(p, &unified).retraction_backup).collect();
    use RetractionBackup::{CpuTensor, HostPool};
    assert_eq!(
        backups,
        [HostPool, HostPool, CpuTensor, HostPool, HostPool, HostPool],
        "unified memory excludes host_pool on 0.5.20 only; 0.5.21+ only for hybrid SWA (parity, each wheel)"
    );
    let unified_swa: Vec<RetractionBackup> =
        (18..=23).map(|p| at(p, &unified, &FleetSpec::default(), &hybrid_swa()).effective.retraction_backup).collect();
    assert_eq!(unified_swa, [HostPool, HostPool, CpuTensor, CpuTensor, CpuTensor, CpuTensor]);
    let warned = at(21, &unset, &FleetSpec::default(), &full()).warnings;
    assert!(warned.iter().any(|w| w.contains("max(0.2, one max-length request")), "{warned:?}");
}

#[test]
fn a_release_from_the_spec_wins_over_the_image_and_the_flag() {
    let spec = |version: Option<&str>, image: Option<&str>| -> InferenceDeploymentSpec {
        serde_json::from_value(json!({
            "model": {"name": "m", "config": {"inline": {}}},
            "sglang": version.map(|v| json!({"version": v})),
            "decode": {"image": image},
        }))
        .unwrap()
    };
    let flag = release::choose(v0_5(20), ReleaseSource::Flag).unwrap();
    let chosen = |s: &InferenceDeploymentSpec| choose_release(s, &flag).map(|c| (c.release, c.source));
    assert_eq!(
        chosen(&spec(Some("0.5.18"), Some("lmsysorg/sglang:v0.5.23-cu129"))),
        Ok((v0_5(18), ReleaseSource::Spec))
    );
    assert_eq!(chosen(&spec(None, Some("lmsysorg/sglang:v0.5.22-cu129"))), Ok((v0_5(22), ReleaseSource::Image)));
    assert_eq!(
        chosen(&spec(None, Some("kvpilot/kvpilot:0.1.0"))),
        Ok((v0_5(20), ReleaseSource::Flag)),
        "0.1.0 is no SGLang release"
    );
    assert_eq!(chosen(&spec(None, None)), Ok((v0_5(20), ReleaseSource::Flag)));
    let newer = choose_release(&spec(Some("0.5.30"), None), &flag).unwrap();
    assert_eq!((newer.release, newer.approximate()), (v0_5(23), true));
    assert!(choose_release(&spec(Some("0.5.16"), None), &flag).is_err());
}

#[test]
fn u7_unified_memory_decode_offload_from_0_5_21() {
    let settings = with(|s| {
        s.enable_unified_memory = true;
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
    });
    let cases = [
        (mla(), "--enable-unified-memory decode KV offload does not support MLA models yet."),
        (ssm(), "--enable-unified-memory decode KV offload does not support hybrid-Mamba models."),
        (hybrid_swa(), "--enable-unified-memory decode KV offload does not support hybrid-SWA H2D/D2H transfers yet."),
    ];
    for (layout, message) in cases {
        assert_eq!(messages("U7", &settings, &FleetSpec::default(), &layout), on(21..=23, message));
    }
    assert_eq!(at(23, &settings, &FleetSpec::default(), &full()).outcome, Outcome::Valid);
}

#[test]
fn t1mx_mxfp8_kv_needs_equal_attention_tp_from_the_0_5_22_handshake() {
    let settings = with(|s| s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() }));
    let decode = FleetSpec { tensor_parallel: 4, kv_cache_dtype: Some("mxfp8".into()), ..FleetSpec::default() };
    assert_eq!(
        messages("T1mx", &settings, &decode, &full()),
        on(
            22..=23,
            "PD Disaggregation does NOT support different attention TP sizes with MXFP8 KV cache: prefill \
             attn_tp_size=2, decode attn_tp_size=4, state types ['block_scale']."
        )
    );
    assert!(
        messages("T1mx", &settings, &decode, &hybrid_swa())[6]
            .as_deref()
            .unwrap()
            .ends_with("state types ['block_scale', 'block_scale_swa'].")
    );
    assert_eq!(messages("T1mx", &settings, &decode, &mla()), vec![None; 7], "MLA pools are exempt");
}

#[test]
fn lmcache_is_refused_on_pd_servers_from_0_5_21_with_the_first_cause_sglang_names() {
    let with_radix = with(|s| {
        s.lmcache = true;
        s.decode_radix_cache = true;
    });
    let colocated_only = "LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only";
    assert_eq!(messages("L7", &with_radix, &FleetSpec::default(), &full()), on(21..=23, colocated_only));
    assert_eq!(messages("L3", &with_radix, &FleetSpec::default(), &full()), vec![None; 7]);
    // A decode server without decode radix cache runs with the radix cache disabled (R12).
    let without_radix = with(|s| s.lmcache = true);
    assert_eq!(
        messages("L3", &without_radix, &FleetSpec::default(), &full()),
        on(21..=23, "--enable-lmcache requires radix cache to be enabled")
    );
    let causes = [
        (
            "L1",
            with(|s| s.hierarchical_cache = true),
            "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
        ),
        (
            "L2",
            with(|s| s.unified_cache_external_linker = true),
            "--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive",
        ),
        (
            "L4",
            with(|s| s.speculative_algorithm = Some("EAGLE".into())),
            "LMCacheUnifiedRadixCache does not yet support speculative decoding",
        ),
        (
            "L6",
            with(|s| s.decode_context_parallel = 2),
            "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation",
        ),
    ];
    for (rule, base, message) in causes {
        let settings = DisaggregationSpec { lmcache: true, decode_radix_cache: true, ..base };
        assert_eq!(messages(rule, &settings, &FleetSpec::default(), &full()), on(21..=23, message), "{rule}");
    }
    // `NONE` is SGLang's spelling of no speculative algorithm.
    let none = with(|s| {
        s.lmcache = true;
        s.speculative_algorithm = Some("NONE".into());
    });
    assert_eq!(messages("L4", &none, &FleetSpec::default(), &full()), vec![None; 7]);
    // DP attention: 0.5.21 reads the flag, 0.5.22+ the attention-DP group count.
    let dp_attention = FleetSpec { enable_dp_attention: true, ..FleetSpec::default() };
    let dp_message = "LMCacheUnifiedRadixCache does not yet support DP attention";
    assert_eq!(messages("L5", &with_radix, &dp_attention, &full()), on(21..=21, dp_message));
    let two_groups = FleetSpec { tensor_parallel: 2, data_parallel: 2, ..dp_attention };
    assert_eq!(messages("L5", &with_radix, &two_groups, &full()), on(21..=23, dp_message));
    // The safe fix is LMCache off; nothing else changes.
    let rewritten =
        at(23, &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..without_radix }, &FleetSpec::default(), &full());
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_eq!(
        rewritten.rewrites.iter().map(|r| (r.rule.as_str(), r.to.as_str())).collect::<Vec<_>>(),
        [("L3", "false")]
    );
    assert!(!rewritten.settings.lmcache);
}

#[test]
fn the_external_cache_linker_exists_from_0_5_20_and_excludes_hicache_and_a_storage_backend() {
    let linker = with(|s| {
        s.unified_cache_external_linker = true;
        s.decode_radix_cache = true;
    });
    assert_eq!(
        messages("F3", &linker, &FleetSpec::default(), &full()),
        on(17..=19, "unrecognized arguments: --enable-unified-cache-external-linker")
    );
    assert_eq!(at(23, &linker, &FleetSpec::default(), &full()).outcome, Outcome::Valid);
    let with_hicache = DisaggregationSpec { hierarchical_cache: true, ..linker.clone() };
    assert_eq!(
        messages("X2", &with_hicache, &FleetSpec::default(), &full()),
        on(20..=23, "--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive.")
    );
    let with_backend = DisaggregationSpec { hicache_storage_backend: Some("file".into()), ..linker.clone() };
    assert_eq!(
        messages("X3", &with_backend, &FleetSpec::default(), &full()),
        on(20..=23, "--enable-unified-cache-external-linker does not use --hicache-storage-backend.")
    );
    let without_radix = DisaggregationSpec { decode_radix_cache: false, ..linker };
    assert_eq!(
        messages("X1", &without_radix, &FleetSpec::default(), &full()),
        on(
            23..=23,
            "--enable-unified-cache-external-linker requires the default UnifiedRadixCache with radix caching enabled."
        )
    );
}

#[test]
fn r18a_decode_radix_cache_refuses_hisparse_in_every_release() {
    let settings = with(|s| {
        s.decode_radix_cache = true;
        s.hisparse = true;
    });
    assert_eq!(
        messages("R18a", &settings, &FleetSpec::default(), &full()),
        on(17..=23, "--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse")
    );
    assert_eq!(messages("R18a", &with(|s| s.hisparse = true), &FleetSpec::default(), &full()), vec![None; 7]);
}

#[test]
fn hicache_with_dcp_is_refused_for_each_cause_the_hicache_hook_names() {
    let base = with(|s| {
        s.hierarchical_cache = true;
        s.decode_radix_cache = true;
        s.decode_context_parallel = 2;
    });
    let mla_model = mla();
    assert!(at(23, &base, &FleetSpec::default(), &mla_model).violations.iter().all(|v| !v.rule.starts_with('D')));
    assert_eq!(
        messages("D5", &base, &FleetSpec::default(), &full()),
        on(
            17..=23,
            "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives in \
             MLATokenToKVPoolHost, and the MHA host pool has none."
        )
    );
    let storage = DisaggregationSpec { hicache_storage_backend: Some("file".into()), ..base.clone() };
    assert_eq!(
        messages("D1", &storage, &FleetSpec::default(), &mla_model).iter().flatten().count(),
        6,
        "0.5.17–0.5.22"
    );
    let dspark = DisaggregationSpec { speculative_algorithm: Some("DSPARK".into()), ..base.clone() };
    let fires: Vec<bool> =
        messages("D2", &dspark, &FleetSpec::default(), &mla_model).iter().map(Option::is_some).collect();
    assert_eq!(fires, [true, false, false, false, false, false, false], "DSPARK is allowed from 0.5.18");
    let lmcache = DisaggregationSpec { lmcache: true, ..base.clone() };
    assert_eq!(
        messages("D3", &lmcache, &FleetSpec::default(), &mla_model),
        on(
            17..=23,
            "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation."
        )
    );
    let hisparse = DisaggregationSpec { hisparse: true, decode_radix_cache: false, ..base };
    assert_eq!(messages("D4", &hisparse, &FleetSpec::default(), &mla_model).iter().flatten().count(), 7);
}

#[test]
fn decode_host_receive_forces_host_pool_and_no_shipped_backend_can_receive_into_host_memory() {
    let threshold = |t: f64| with(|s| s.decode_host_receive_threshold = Some(t));
    // The flag is 0.5.21's; its off value moved from 0 to 1 in 0.5.22.
    assert_eq!(
        messages("F4", &threshold(0.5), &FleetSpec::default(), &full()),
        on(17..=20, "unrecognized arguments: --disaggregation-decode-host-receive-threshold 0.5")
    );
    let no_receive = "Transfer backend does not support decode host KV destinations";
    assert_eq!(messages("N7", &threshold(0.5), &FleetSpec::default(), &full()), on(21..=23, no_receive));
    assert_eq!(messages("N7", &threshold(0.0), &FleetSpec::default(), &full()), on(22..=23, no_receive));
    assert_eq!(messages("N7", &threshold(1.0), &FleetSpec::default(), &full()), on(21..=21, no_receive));
    assert_eq!(
        messages("N2", &threshold(1.5), &FleetSpec::default(), &full()),
        on(21..=23, "--disaggregation-decode-host-receive-threshold must be between 0 and 1")
    );
    // Host receive makes host_pool the backup, so the host-pool rules see it (R1 on an SSM model).
    let verdict = at(23, &threshold(0.5), &FleetSpec::default(), &full());
    assert_eq!(verdict.effective.retraction_backup, RetractionBackup::HostPool);
    assert!(at(23, &threshold(0.5), &FleetSpec::default(), &ssm()).violations.iter().any(|v| v.rule == "R1"));
    let cpu_tensor = DisaggregationSpec { retraction_backup: Some(RetractionBackup::CpuTensor), ..threshold(0.5) };
    assert_eq!(
        messages("N1", &cpu_tensor, &FleetSpec::default(), &full()),
        on(21..=23, "Decode host KV buffering requires host_pool retraction")
    );
    let hisparse = DisaggregationSpec { hisparse: true, ..threshold(0.5) };
    assert_eq!(
        messages("N3", &hisparse, &FleetSpec::default(), &full()),
        on(21..=23, "Decode host receive does not yet support HiSparse or role switching")
    );
    // Mooncake storage switches the host pool to page_first; 0.5.23 keeps layer_first under DCP.
    let mooncake = DisaggregationSpec {
        hicache_storage_backend: Some("mooncake".into()),
        decode_context_parallel: 2,
        ..threshold(0.5)
    };
    assert_eq!(messages("N4", &mooncake, &FleetSpec::default(), &mla()).iter().flatten().count(), 2, "0.5.21–0.5.22");
    // Rewrite turns host receive off first, so the backup stays the automatic choice.
    let rewritten =
        at(23, &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..threshold(0.5) }, &FleetSpec::default(), &ssm());
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_eq!(rewritten.settings.decode_host_receive_threshold, None);
    assert_eq!(rewritten.settings.retraction_backup, None);
    assert_eq!(rewritten.rewrites.iter().map(|r| r.rule.as_str()).collect::<Vec<_>>(), ["N7"]);
}

#[test]
fn the_unified_memory_pool_hook_refuses_what_its_pool_cannot_translate() {
    let unified = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.enable_unified_memory = true;
            edit(s);
        })
    };
    let dcp = unified(|s| s.decode_context_parallel = 2);
    let fires = |rule, settings: &DisaggregationSpec, layout: &AttentionLayout| -> Vec<bool> {
        messages(rule, settings, &FleetSpec::default(), layout).iter().map(Option::is_some).collect()
    };
    // DCP: refused outright until 0.5.19; from 0.5.20 for non-MLA or hybrid-SWA models, and under PD always.
    assert_eq!(fires("U4", &dcp, &full()), [true; 7]);
    assert_eq!(fires("U4", &dcp, &mla()), [true, true, true, false, false, false, false]);
    assert_eq!(fires("U4c", &dcp, &mla()), [false, false, false, true, true, true, true]);
    let ngram = unified(|s| s.speculative_algorithm = Some("NGRAM".into()));
    let messages_u8 = messages("U8", &ngram, &FleetSpec::default(), &full());
    assert_eq!(
        messages_u8[0].as_deref(),
        Some("--enable-unified-memory is not yet compatible with speculative decoding.")
    );
    assert!(
        messages_u8[1]
            .as_deref()
            .unwrap()
            .contains("virtual/dense loc translation. Got --speculative-algorithm='NGRAM'.")
    );
    assert!(messages_u8[6].as_deref().unwrap().starts_with(
        "--enable-unified-memory only supports --speculative-algorithm DSPARK, DFLASH, EAGLE and EAGLE3;"
    ));
    let eagle = unified(|s| s.speculative_algorithm = Some("EAGLE".into()));
    assert_eq!(fires("U8", &eagle, &full()), [true, true, true, true, true, false, false]);
    assert_eq!(fires("U13", &eagle, &full()), [false, false, false, false, false, true, true]);
    assert_eq!(fires("U13", &eagle, &hybrid_swa()), [false; 7], "a hybrid-SWA target carries the fused draft");
    let eagle_hicache = unified(|s| {
        s.speculative_algorithm = Some("EAGLE".into());
        s.hierarchical_cache = true;
    });
    assert_eq!(fires("U15", &eagle_hicache, &hybrid_swa()), [false, false, false, false, false, true, true]);
    // HiCache stops conflicting with unified memory in 0.5.21; LMCache does not.
    assert_eq!(
        fires("U10", &unified(|s| s.hierarchical_cache = true), &full()),
        [true, true, true, true, false, false, false]
    );
    assert_eq!(fires("U10", &unified(|s| s.lmcache = true), &full()), [true; 7]);
    assert_eq!(
        fires("U11", &unified(|s| s.unified_cache_external_linker = true), &full()),
        [false, false, false, false, false, true, true]
    );
    assert_eq!(fires("U9", &unified(|s| s.hisparse = true), &full()), [false, true, true, true, true, true, true]);
    let offload = unified(|s| {
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("dynamic".into());
    });
    assert_eq!(
        messages("U12", &offload, &FleetSpec::default(), &full()),
        on(
            21..=23,
            "--enable-unified-memory with decode KV offload currently supports --hicache-storage-backend=file only."
        )
    );
}

#[test]
fn t1pp_swa_head_slicing_refuses_a_pipelined_prefill_from_0_5_22() {
    let prefill = |pipeline_parallel| {
        with(|s| s.prefill = Some(PrefillSpec { tensor_parallel: 2, pipeline_parallel, ..PrefillSpec::default() }))
    };
    let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
    let message = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models with pipeline parallelism yet.";
    assert_eq!(messages("T1pp", &prefill(2), &decode, &hybrid_swa()), on(22..=23, message));
    assert_eq!(messages("T1pp", &prefill(1), &decode, &hybrid_swa()), vec![None; 7], "head slicing works without PP");
    assert_eq!(messages("T1pp", &prefill(2), &decode, &full()), vec![None; 7], "no SWA state");
    let mori = DisaggregationSpec { transfer_backend: TransferBackend::Mori, ..prefill(2) };
    assert_eq!(messages("T1pp", &mori, &decode, &hybrid_swa()), vec![None; 7], "mori keeps its own T1");
}

#[test]
fn buffer_only_host_memory_is_for_servers_that_are_not_pd_decode_servers() {
    let buffer_only = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.hicache_host_memory_mode = Some(crate::api::HicacheHostMemoryMode::BufferOnly);
            edit(s);
        })
    };
    assert_eq!(
        messages("F5", &buffer_only(|_| {}), &FleetSpec::default(), &full()),
        on(17..=18, "unrecognized arguments: --hicache-host-memory-mode buffer_only")
    );
    let decode_refusal = "--hicache-host-memory-mode buffer_only is not supported on decode instances: the decode-side \
         prefetch and offload paths bypass the buffer-mode pipeline, fetching without its prefix context and never \
         consuming its staged holds. Prefill instances share the standard scheduler path and are supported.";
    // The HiCache hook checks it on a decode server whose host pool it builds: automatic or host_pool backup.
    assert_eq!(messages("H4", &buffer_only(|_| {}), &FleetSpec::default(), &full()), on(19..=23, decode_refusal));
    let cpu_tensor = buffer_only(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
    assert_eq!(messages("H4", &cpu_tensor, &FleetSpec::default(), &full()), vec![None; 7]);
    assert_eq!(messages("H3", &buffer_only(|_| {}), &FleetSpec::default(), &full()).iter().flatten().count(), 5);
    let with_backend = buffer_only(|s| s.hicache_storage_backend = Some("file".into()));
    assert_eq!(messages("H3", &with_backend, &FleetSpec::default(), &full()), vec![None; 7]);
    assert_eq!(
        messages("L8", &buffer_only(|s| s.lmcache = true), &FleetSpec::default(), &full()),
        on(21..=23, "--hicache-host-memory-mode=buffer_only is a HiCache-only mode")
    );
    let l3_dcp = buffer_only(|s| {
        s.hierarchical_cache = true;
        s.decode_radix_cache = true;
        s.decode_context_parallel = 2;
        s.hicache_storage_backend = Some("file".into());
    });
    assert_eq!(
        messages("D6", &l3_dcp, &FleetSpec::default(), &mla()),
        on(23..=23, "HiCache L3 with DCP does not support buffer_only host memory.")
    );
    let rewritten = at(
        23,
        &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..buffer_only(|_| {}) },
        &FleetSpec::default(),
        &full(),
    );
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_eq!(rewritten.settings.hicache_host_memory_mode, None);
}

/// A DeepSeek-V4 draft checkpoint (NextN layers) with window `window`.
fn dsv4_draft(window: u64) -> AttentionLayout {
    layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLMNextN"], "num_hidden_layers": 1, "sliding_window": window,
        "head_dim": 512, "compress_ratios": [0]
    }))
}

fn draft_messages(settings: &DisaggregationSpec, draft: Option<&AttentionLayout>) -> Vec<Vec<String>> {
    (17..=23)
        .map(|patch| {
            at_with_draft(patch, settings, &dsv4(), draft)
                .violations
                .into_iter()
                .filter(|v| v.rule == "T11")
                .map(|v| v.message)
                .collect()
        })
        .collect()
}

#[test]
fn t11_a_deepseek_v4_draft_needs_the_target_window_and_pages() {
    let eagle = with(|s| s.speculative_algorithm = Some("EAGLE".into()));
    let paged = |release: u16, target: &str, draft: &str| {
        if release < 23 {
            format!("DSV4 target and draft pools must share paged SWA geometry: target=({target}), draft=({draft})")
        } else {
            format!(
                "DSV4 target and draft pools must share SWA geometry: target=({target}, None), draft=({draft}, None)"
            )
        }
    };
    // The model's own NextN layers, or a draft with the same window: the pools match.
    for draft in [None, Some(&dsv4_draft(128))] {
        assert!(draft_messages(&eagle, draft).iter().all(Vec::is_empty));
    }
    let narrower = dsv4_draft(64);
    let expected: Vec<Vec<String>> = (17..=23).map(|r| vec![paged(r, "256, 128", "256, 64")]).collect();
    assert_eq!(draft_messages(&eagle, Some(&narrower)), expected);
    // Decode context parallelism widens the draft's pages only.
    let dcp = DisaggregationSpec { decode_context_parallel: 2, ..eagle.clone() };
    let expected: Vec<Vec<String>> = (17..=23).map(|r| vec![paged(r, "256, 128", "512, 128")]).collect();
    assert_eq!(draft_messages(&dcp, None), expected);
    let verdict = at_with_draft(22, &dcp, &dsv4(), Some(&narrower));
    let fields: Vec<_> = verdict.violations.iter().filter(|v| v.rule == "T11").map(|v| v.field).collect();
    assert_eq!(fields, ["spec.disaggregation.speculativeDraftModel", "spec.disaggregation.decodeContextParallel"]);
}

#[test]
fn t11_needs_a_deepseek_v4_draft_pool_on_both_sides() {
    let narrower = dsv4_draft(64);
    // NGRAM drafts from the prompt and builds no draft pool; no algorithm, no draft.
    for algorithm in [None, Some("NGRAM"), Some("none")] {
        let settings = with(|s| s.speculative_algorithm = algorithm.map(Into::into));
        assert!(draft_messages(&settings, Some(&narrower)).iter().all(Vec::is_empty), "{algorithm:?}");
    }
    // A draft whose pool is no DeepSeek-V4 pool is not compared.
    let eagle = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
    assert!(draft_messages(&eagle, Some(&full())).iter().all(Vec::is_empty));
    assert!(
        at_with_draft(23, &eagle, &mla(), Some(&narrower)).violations.iter().all(|v| v.rule != "T11"),
        "the target is no DeepSeek-V4 model"
    );
}

fn minimax_m3() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["MiniMaxM3SparseForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8,
        "head_dim": 128, "sparse_attention_config": {"sparse_attention_freq": [0, 1, 1, 1]}
    }))
}

fn minimax_messages(backend: TransferBackend, prefill: PrefillSpec) -> Vec<Vec<(&'static str, String)>> {
    let settings = with(|s| {
        s.transfer_backend = backend;
        s.prefill = Some(prefill);
    });
    (17..=23)
        .map(|patch| {
            let verdict = at(patch, &settings, &FleetSpec::default(), &minimax_m3());
            verdict
                .violations
                .into_iter()
                .filter(|v| v.rule.starts_with("T4") || v.rule == "T5")
                .map(|v| (v.rule, v.message))
                .collect()
        })
        .collect()
}

#[test]
fn t4_minimax_sparse_state_needs_one_prefill_stage_and_equal_attention_tp() {
    let pipelined = PrefillSpec { pipeline_parallel: 2, ..PrefillSpec::default() };
    let wider = PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() };
    let (old_pp, new_pp) = (
        "PD disagg: PP>1 not supported for MiniMax sparse index yet.",
        "PD disagg: PP>1 not supported for MiniMax state yet.",
    );
    let (old_tp, new_tp) = (
        "PD disagg: heterogeneous TP not supported for MiniMax sparse index yet.",
        "PD disagg: heterogeneous TP not supported for MiniMax state yet.",
    );
    let handshake = "MiniMax sparse PD requires matching attention TP sizes: prefill=2, decode=1.";
    let one = |rule, message: &str| vec![(rule, message.to_string())];
    for backend in [TransferBackend::Mooncake, TransferBackend::Nixl] {
        let expected: Vec<_> = (17..=23).map(|r| one("T4", if r < 21 { old_pp } else { new_pp })).collect();
        assert_eq!(minimax_messages(backend, pipelined.clone()), expected, "{backend:?}");
        let expected: Vec<_> = (17..=23)
            .map(|r| match r {
                17..=20 => one("T4", old_tp),
                21..=22 => one("T4", new_tp),
                _ => one("T4c", handshake),
            })
            .collect();
        assert_eq!(minimax_messages(backend, wider.clone()), expected, "{backend:?}");
    }
    let mori_pp = "MORI PD disaggregation requires PP=1 for minimax_index_k; PP>1 needs peer state_layer_ids for \
                   global-layer descriptor pairing.";
    let expected: Vec<_> = (17..=23).map(|r| if r < 20 { one("T4", old_pp) } else { one("T5", mori_pp) }).collect();
    assert_eq!(minimax_messages(TransferBackend::Mori, pipelined), expected);
    let mori_tp = "PD disagg: heterogeneous TP not supported for minimax_index_k yet.";
    let expected: Vec<_> = (17..=23)
        .map(|r| match r {
            17..=19 => one("T4", old_tp),
            20..=22 => one("T5", mori_tp),
            _ => one("T4c", handshake),
        })
        .collect();
    assert_eq!(minimax_messages(TransferBackend::Mori, wider), expected);
    // Equal attention TP and one prefill stage: the state moves.
    assert!(minimax_messages(TransferBackend::Mooncake, PrefillSpec::default()).iter().all(Vec::is_empty));
    // Another model with the same fleets keeps no MiniMax state.
    let settings =
        with(|s| s.prefill = Some(PrefillSpec { pipeline_parallel: 2, tensor_parallel: 2, ..PrefillSpec::default() }));
    assert!(at(23, &settings, &FleetSpec::default(), &full()).violations.iter().all(|v| !v.rule.starts_with("T4")));
}

#[test]
fn r19e_r19f_p5_read_the_prefill_s_attention_cp_and_kv_sharding() {
    let settings = |dcp: i32, prefill: PrefillSpec| {
        with(|s| {
            s.decode_context_parallel = dcp;
            s.prefill = Some(prefill);
        })
    };
    let cp2 = PrefillSpec { tensor_parallel: 4, attention_context_parallel: 2, ..PrefillSpec::default() };
    let sharded = PrefillSpec { tensor_parallel: 2, kv_cache_sharding: true, ..PrefillSpec::default() };
    let decode_tp2 = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
    let decode_tp4 = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };

    // R19e: every release, from the prefill's attention CP, whatever the layout's pool.
    let r19e = "PD decode DCP currently requires prefill attention CP=1, got 2.";
    assert_eq!(messages("R19e", &settings(2, cp2.clone()), &decode_tp2, &mla()), on(17..=23, r19e));
    assert_eq!(messages("R19e", &settings(1, cp2.clone()), &decode_tp2, &mla()), vec![None; 7]);
    // R19f: 0.5.23's handshake.
    let r19f = "PD decode DCP does not support a prefill with --enable-kv-cache-sharding.";
    assert_eq!(messages("R19f", &settings(2, sharded.clone()), &decode_tp2, &mla()), on(23..=23, r19f));
    assert_eq!(messages("R19f", &settings(1, sharded.clone()), &decode_tp2, &mla()), vec![None; 7]);

    // P5: an MLA pool, sharded prefill without CP, unequal attention TP.
    let p5 = "MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill=2 decode=4";
    assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &mla()), on(23..=23, p5));
    assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &dsv4()), on(23..=23, p5));
    assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp2, &mla()), vec![None; 7]);
    assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &full()), vec![None; 7]);
    let sharded_cp = PrefillSpec { attention_context_parallel: 2, ..sharded };
    assert_eq!(messages("P5", &settings(1, sharded_cp), &decode_tp4, &mla()), vec![None; 7]);
}

#[test]
fn prefill_attention_cp_divides_the_prefill_attention_tp_the_transfer_rules_compare() {
    // TP 4 with attention CP 2 is attention TP 2: equal to decode's 2, so no T1 for SWA state.
    let prefill = |cp| {
        with(|s| {
            s.prefill =
                Some(PrefillSpec { tensor_parallel: 4, attention_context_parallel: cp, ..PrefillSpec::default() })
        })
    };
    let decode = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
    let t1 = |settings: &DisaggregationSpec| {
        at(21, settings, &decode, &hybrid_swa()).violations.into_iter().filter(|v| v.rule == "T1").count()
    };
    assert_eq!(t1(&prefill(1)), 1);
    assert_eq!(t1(&prefill(2)), 0);
    assert_eq!(
        prefill_attention_tp(&PrefillSpec {
            tensor_parallel: 8,
            data_parallel: 2,
            enable_dp_attention: true,
            attention_context_parallel: 2,
            ..PrefillSpec::default()
        }),
        2
    );
}

#[test]
fn p6_decode_pipeline_stages_are_one_or_the_prefill_s() {
    let prefill =
        |pipeline_parallel| with(|s| s.prefill = Some(PrefillSpec { pipeline_parallel, ..PrefillSpec::default() }));
    let decode = |pipeline_parallel| FleetSpec { pipeline_parallel, ..FleetSpec::default() };
    let p6 = "Decode pp size (2) should be equal to prefill pp size (4) or 1";
    assert_eq!(messages("P6", &prefill(4), &decode(2), &full()), on(17..=23, p6));
    assert_eq!(messages("P6", &prefill(4), &decode(1), &full()), vec![None; 7]);
    assert_eq!(messages("P6", &prefill(2), &decode(2), &full()), vec![None; 7]);
    // Without the prefill side nothing is compared.
    assert_eq!(messages("P6", &DisaggregationSpec::default(), &decode(2), &full()), vec![None; 7]);
}

#[test]
fn r12_says_which_settings_a_decode_server_without_radix_cache_ignores() {
    let strategy = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer));
    let eviction =
        FleetSpec { extra_args: vec!["--radix-eviction-policy".into(), "lfu".into()], ..FleetSpec::default() };
    let r12 = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout, patch, server: bool| {
        let input = PolicyInput {
            disaggregation: settings,
            decode,
            layout,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: None,
            release: v0_5(patch),
        };
        let verdict = if server { evaluate_decode_server(input) } else { evaluate(input) };
        verdict.warnings.into_iter().filter(|w| w.starts_with("R12")).collect::<Vec<_>>()
    };
    let found = r12(&strategy, &FleetSpec::default(), &ssm(), 21, true);
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("logs \"KV cache is forced as chunk cache for decode server\""), "{found:?}");
    assert!(found[0].contains("so the Mamba radix cache strategy extra_buffer does nothing there"), "{found:?}");
    let found = r12(&strategy, &eviction, &ssm(), 22, false);
    assert!(found[0].contains("logs \"Radix cache is disabled for decode server\""), "{found:?}");
    assert!(
        found[0].contains("extra_buffer (the prefill servers use it) and --radix-eviction-policy does nothing"),
        "{found:?}"
    );
    // With decode radix cache, or nothing radix-specific set, nothing is said.
    let radix = with(|s| {
        s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer);
        s.decode_radix_cache = true;
    });
    assert!(r12(&radix, &eviction, &ssm(), 23, true).is_empty());
    assert!(r12(&DisaggregationSpec::default(), &FleetSpec::default(), &ssm(), 23, true).is_empty());
    // A strategy on a model without Mamba state is M4's business, not R12's.
    assert!(r12(&strategy, &FleetSpec::default(), &full(), 20, true).is_empty());
}

#[test]
fn h1_h2_follow_the_tree_cache_each_release_builds() {
    let session = FleetSpec { extra_args: vec!["--enable-session-radix-cache".into()], ..FleetSpec::default() };
    let h2 = |patch: u16, cache: &str| {
        if patch < 19 {
            format!(
                "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Set \
                 SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 (or remove --enable-session-radix-cache)."
            )
        } else {
            format!(
                "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or \
                 the option that selected another tree cache for this model."
            )
        }
    };
    let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
    // A decode server without decode radix cache: a chunk cache up to 0.5.21, the unified tree after.
    let expected: Vec<Option<String>> = (17..=23).map(|p| (p <= 21).then(|| h2(p, "ChunkCache"))).collect();
    assert_eq!(messages("H2", &cpu, &session, &full()), expected);
    // With decode radix cache: 0.5.17-0.5.18 build the plain RadixCache for a dense model.
    let radix = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.decode_radix_cache = true;
    });
    let expected: Vec<Option<String>> = (17..=23).map(|p| (p <= 18).then(|| h2(p, "RadixCache"))).collect();
    assert_eq!(messages("H2", &radix, &session, &full()), expected);
    let unified_env = FleetSpec { env: env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1").env, ..session.clone() };
    assert_eq!(messages("H2", &radix, &unified_env, &full()), vec![None; 7]);
    // No flag, nothing to say.
    assert_eq!(messages("H2", &cpu, &FleetSpec::default(), &full()), vec![None; 7]);

    // H1: HiCache with buffer-only host memory on a pure-SWA model's PureSWARadixCache (0.5.19 on).
    let pure =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/custom-pure-swa.json")).unwrap());
    assert_eq!(pure.kv_pool, KvPool::PureSwa);
    let buffer_only = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
        s.hicache_host_memory_mode = Some(HicacheHostMemoryMode::BufferOnly);
    });
    let h1 = "--hicache-host-memory-mode buffer_only is only implemented for the unified radix tree; this model \
              selected PureSWARadixCache.";
    assert_eq!(messages("H1", &buffer_only, &FleetSpec::default(), &pure), on(19..=23, h1));
    assert_eq!(messages("H1", &buffer_only, &FleetSpec::default(), &full()), vec![None; 7]);
}

#[test]
fn h5_h6_n5_follow_the_tree_cache_flexkv_and_pure_swa_included() {
    let args =
        |args: &[&str]| FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
    let tlru = |cache: &str| {
        format!(
            "--radix-eviction-policy tlru requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or the \
             option that selected another tree cache for this model."
        )
    };
    let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
    let radix = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.decode_radix_cache = true;
    });
    // T-LRU (0.5.21 on): 0.5.21's decode servers without decode radix cache build a chunk cache;
    // the option is read in both spellings, the last occurrence winning.
    let expected: Vec<Option<String>> = (17..=23).map(|p| (p == 21).then(|| tlru("ChunkCache"))).collect();
    assert_eq!(messages("H5", &cpu, &args(&["--radix-eviction-policy", "tlru"]), &full()), expected);
    assert_eq!(messages("H5", &cpu, &args(&["--radix-eviction-policy=tlru"]), &full()), expected);
    assert_eq!(
        messages("H5", &cpu, &args(&["--radix-eviction-policy=tlru", "--radix-eviction-policy", "lru"]), &full()),
        vec![None; 7]
    );
    // FlexKV replaces the default tree in every release.
    let flexkv_tlru = args(&["--enable-flexkv", "--radix-eviction-policy", "tlru"]);
    assert_eq!(messages("H5", &radix, &flexkv_tlru, &full()), on(21..=23, &tlru("FlexKVRadixCache")));
    assert_eq!(messages("H5", &radix, &args(&["--radix-eviction-policy", "tlru"]), &full()), vec![None; 7]);

    // Streaming sessions (0.5.22 on): a pure-SWA model's PureSWARadixCache refuses them.
    let pure =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/custom-pure-swa.json")).unwrap());
    let streaming = args(&["--enable-streaming-session"]);
    let h6 = "--enable-streaming-session is not verified with PureSWARadixCache; streaming sessions run on \
              UnifiedRadixCache. Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.";
    assert_eq!(messages("H6", &cpu, &streaming, &pure), on(22..=23, h6));
    assert_eq!(messages("H6", &cpu, &streaming, &full()), vec![None; 7]);

    // Mamba state (0.5.22 on) lives only in the unified tree, which FlexKV replaces.
    let n5 = "Models with mamba state are not verified with FlexKVRadixCache; mamba state lives in UnifiedRadixCache. \
              Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.";
    let flexkv = args(&["--enable-flexkv"]);
    assert_eq!(messages("N5", &radix, &flexkv, &ssm()), on(22..=23, n5));
    assert_eq!(messages("N5", &radix, &flexkv, &full()), vec![None; 7]);
    // Without decode radix cache the decode server's radix cache is disabled, which builds the
    // unified tree before FlexKV is considered.
    assert_eq!(messages("N5", &cpu, &flexkv, &ssm()), vec![None; 7]);
    // A service's prefill servers keep their radix cache, so FlexKV there is refused.
    let input = PolicyInput {
        disaggregation: &cpu,
        decode: &FleetSpec::default(),
        layout: &ssm(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&flexkv),
        release: v0_5(23),
    };
    assert!(evaluate(input).violations.iter().any(|v| v.rule == "N5" && v.message == n5));
}

#[test]
fn h7_refuses_a_sized_deepseek_v4_host_pool_where_the_unified_tree_attaches_one() {
    let h7 = "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.";
    let args =
        |args: &[&str]| FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
    let sized = args(&["--hicache-size", "8"]);
    // Host-pool retraction (0.5.18 on) attaches the host pools on the unified tree it builds.
    let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
    assert_eq!(messages("H7", &host_pool, &sized, &dsv4()), on(18..=23, h7));
    assert_eq!(messages("H7", &host_pool, &args(&["--hicache-size=8"]), &dsv4()), on(18..=23, h7));
    // 0 is SGLang's "size from the ratio"; the last occurrence wins.
    assert_eq!(messages("H7", &host_pool, &args(&["--hicache-size", "0"]), &dsv4()), vec![None; 7]);
    assert_eq!(messages("H7", &host_pool, &args(&["--hicache-size=8", "--hicache-size", "0"]), &dsv4()), vec![None; 7]);
    assert_eq!(messages("H7", &host_pool, &FleetSpec::default(), &dsv4()), vec![None; 7]);
    // Other models' host pools take a size.
    assert_eq!(messages("H7", &host_pool, &sized, &full()), vec![None; 7]);
    assert_eq!(messages("H7", &host_pool, &sized, &mla()), vec![None; 7]);
    // HiCache on the decode radix tree, in every release; without HiCache or host-pool
    // retraction no host pool is attached.
    let hicache = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
    });
    assert_eq!(messages("H7", &hicache, &sized, &dsv4()), on(17..=23, h7));
    let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
    assert_eq!(messages("H7", &cpu, &sized, &dsv4()), vec![None; 7]);
    // A service's prefill servers with HiCache and a size in their own extraArgs.
    let prefill = args(&["--enable-hierarchical-cache", "--hicache-size", "8"]);
    let input = PolicyInput {
        disaggregation: &cpu,
        decode: &FleetSpec::default(),
        layout: &dsv4(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&prefill),
        release: v0_5(23),
    };
    assert!(evaluate(input).violations.iter().any(|v| v.rule == "H7" && v.message == h7));
}

#[test]
fn x4_refuses_the_external_linker_with_a_sidecar_draft_up_to_0_5_22() {
    let x4 = "The external linker only supports packed draft KV caches.";
    let linker = |algorithm: &str| {
        let algorithm = algorithm.to_string();
        with(move |s| {
            s.unified_cache_external_linker = true;
            s.speculative_algorithm = Some(algorithm);
        })
    };
    for algorithm in ["EAGLE3", "standalone", "DFLASH"] {
        assert_eq!(messages("X4", &linker(algorithm), &FleetSpec::default(), &full()), on(20..=22, x4), "{algorithm}");
    }
    // NextN EAGLE packs into the target's pools; NGRAM has no draft model.
    for algorithm in ["EAGLE", "NGRAM"] {
        assert_eq!(messages("X4", &linker(algorithm), &FleetSpec::default(), &full()), vec![None; 7], "{algorithm}");
    }
    let no_linker = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
    assert_eq!(messages("X4", &no_linker, &FleetSpec::default(), &full()), vec![None; 7]);
    // A service's prefill servers with the linker in their own extraArgs plan their draft too.
    let prefill =
        FleetSpec { extra_args: vec!["--enable-unified-cache-external-linker".into()], ..FleetSpec::default() };
    let input = PolicyInput {
        disaggregation: &no_linker,
        decode: &FleetSpec::default(),
        layout: &full(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&prefill),
        release: v0_5(22),
    };
    assert!(evaluate(input).violations.iter().any(|v| v.rule == "X4" && v.message == x4));
}

/// SGLang's speculative hook runs EAGLE and NEXTN with a Gemma-4 assistant draft as FROZEN_KV_MTP,
/// whose worker has no draft runners to back up, and refuses EAGLE3 with it, in every release.
#[test]
fn a_gemma4_assistant_draft_runs_as_frozen_kv_mtp_and_refuses_eagle3() {
    let assistant: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/parity/gemma-4-assistant.json")).unwrap();
    let assistant = layout_at(assistant);
    assert!(assistant.has(LayoutFeature::NoNextnLayers));
    let settings = |algorithm: &str| {
        let algorithm = algorithm.to_string();
        with(move |s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.hierarchical_cache = true;
            s.unified_cache_external_linker = true;
            s.speculative_algorithm = Some(algorithm);
        })
    };
    let rules = |algorithm: &str, draft: &AttentionLayout, patch: u16| {
        let violations = at_with_draft(patch, &settings(algorithm), &full(), Some(draft)).violations;
        let mut rules: Vec<_> =
            violations.into_iter().map(|v| v.rule).filter(|r| ["N6", "X4", "X5", "SD5"].contains(r)).collect();
        rules.sort_unstable();
        rules
    };
    for patch in 17..=23 {
        for algorithm in ["EAGLE", "nextn"] {
            assert!(rules(algorithm, &assistant, patch).is_empty(), "{algorithm} 0.5.{patch}");
        }
        assert!(rules("EAGLE3", &assistant, patch).contains(&"SD5"), "0.5.{patch}");
    }
    // A Llama draft without NextN layers backs up through a sidecar under the same settings.
    assert_eq!(rules("EAGLE", &full(), 21), ["N6", "X4"]);
    let sd5 = at_with_draft(23, &settings("eagle3"), &full(), Some(&assistant))
        .violations
        .into_iter()
        .find(|v| v.rule == "SD5")
        .unwrap();
    assert_eq!(
        sd5.message,
        "Gemma4AssistantForCausalLM draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not supported \
         for this draft architecture."
    );
}

/// From 0.5.23 the linker takes one sidecar draft pool: multi-layer EAGLE, which builds a draft
/// runner per step, is refused with more than one step.
#[test]
fn x5_refuses_the_external_linker_with_a_multi_layer_sidecar_draft_from_0_5_23() {
    let x5 = "The external linker supports one non-packed draft KV pool.";
    let linker = |algorithm: &str| {
        let algorithm = algorithm.to_string();
        with(move |s| {
            s.unified_cache_external_linker = true;
            s.speculative_algorithm = Some(algorithm);
        })
    };
    let fleet =
        |args: &[&str]| FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
    let multi_layer = fleet(&["--enable-multi-layer-eagle"]);
    // SGLang's own step count (5 for Llama) or the one given.
    assert_eq!(messages("X5", &linker("EAGLE3"), &multi_layer, &full()), on(23..=23, x5));
    let two = fleet(&["--enable-multi-layer-eagle", "--speculative-num-steps=2"]);
    assert_eq!(messages("X5", &linker("EAGLE3"), &two, &full()), on(23..=23, x5));
    let one = fleet(&["--enable-multi-layer-eagle", "--speculative-num-steps", "1"]);
    assert_eq!(messages("X5", &linker("EAGLE3"), &one, &full()), vec![None; 7]);
    // Single-layer EAGLE3 builds one runner; STANDALONE and DFLASH are never multi-layer.
    assert_eq!(messages("X5", &linker("EAGLE3"), &FleetSpec::default(), &full()), vec![None; 7]);
    for algorithm in ["STANDALONE", "DFLASH"] {
        assert_eq!(messages("X5", &linker(algorithm), &multi_layer, &full()), vec![None; 7], "{algorithm}");
    }
    // MiMo-V2's overrides turn multi-layer EAGLE on for EAGLE as given, before NEXTN or a lower-case
    // name is resolved; the model's own NextN layers pack, a draft without them does not.
    let mimo: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/mimo-v2-flash.json")).unwrap();
    let mimo = layout_at(mimo);
    let x5_rules = |algorithm: &str, draft: Option<&AttentionLayout>| {
        at_with_draft(23, &linker(algorithm), &mimo, draft).violations.into_iter().filter(|v| v.rule == "X5").count()
    };
    assert_eq!(x5_rules("EAGLE", Some(&full())), 1);
    assert_eq!(x5_rules("NEXTN", Some(&full())), 0);
    assert_eq!(x5_rules("eagle", Some(&full())), 0);
    assert_eq!(x5_rules("EAGLE", None), 0);
    let finding = at_with_draft(23, &linker("EAGLE"), &mimo, Some(&full()))
        .violations
        .into_iter()
        .find(|v| v.rule == "X5")
        .unwrap();
    assert!(finding.fix.contains("multi-layer EAGLE builds 3 draft runners, one per draft step"), "{}", finding.fix);
    // A service's prefill servers with the linker and multi-layer EAGLE in their own extraArgs.
    let prefill = fleet(&["--enable-unified-cache-external-linker", "--enable-multi-layer-eagle"]);
    let eagle3 = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
    let input = PolicyInput {
        disaggregation: &eagle3,
        decode: &FleetSpec::default(),
        layout: &full(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&prefill),
        release: v0_5(23),
    };
    assert!(evaluate(input).violations.iter().any(|v| v.rule == "X5" && v.message == x5));
}

#[test]
fn n6_refuses_a_sidecar_draft_where_the_tree_is_not_unified() {
    let n6 = "HiCache draft pools require UnifiedRadixCache.";
    let hicache = |algorithm: &str| {
        let algorithm = algorithm.to_string();
        with(move |s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.hierarchical_cache = true;
            s.speculative_algorithm = Some(algorithm);
        })
    };
    // A decode server without decode radix cache builds a chunk cache up to 0.5.21.
    for algorithm in ["EAGLE3", "standalone", "DFLASH"] {
        assert_eq!(messages("N6", &hicache(algorithm), &FleetSpec::default(), &full()), on(19..=21, n6), "{algorithm}");
    }
    // NextN EAGLE packs into the target's pools; NGRAM has no draft model.
    for algorithm in ["EAGLE", "NGRAM"] {
        assert_eq!(messages("N6", &hicache(algorithm), &FleetSpec::default(), &full()), vec![None; 7], "{algorithm}");
    }
    // Without HiCache or host-pool retraction no draft backup is planned.
    let plain = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.speculative_algorithm = Some("EAGLE3".into());
    });
    assert_eq!(messages("N6", &plain, &FleetSpec::default(), &full()), vec![None; 7]);
    // FlexKV's tree on a server with decode radix cache, in every release that plans.
    let radix = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
        s.speculative_algorithm = Some("EAGLE3".into());
    });
    let flexkv = FleetSpec { extra_args: vec!["--enable-flexkv".into()], ..FleetSpec::default() };
    assert_eq!(messages("N6", &radix, &flexkv, &full()), on(19..=23, n6));
    assert_eq!(messages("N6", &radix, &FleetSpec::default(), &full()), vec![None; 7]);
    // A service's prefill servers run without HiCache (kvpilot gives it to the decode side), so
    // they plan a draft backup only when their extraArgs turn it on.
    let prefill_n6 = |prefill: &FleetSpec| {
        let input = PolicyInput {
            disaggregation: &radix,
            decode: &FleetSpec::default(),
            layout: &full(),
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: Some(prefill),
            release: v0_5(23),
        };
        evaluate(input).violations.iter().any(|v| v.rule == "N6")
    };
    assert!(!prefill_n6(&flexkv));
    let hicache_flexkv = FleetSpec {
        extra_args: vec!["--enable-flexkv".into(), "--enable-hierarchical-cache".into()],
        ..FleetSpec::default()
    };
    assert!(prefill_n6(&hicache_flexkv));
}

/// An EAGLE draft model without NextN layers, or a DSPARK draft that is not DeepSeek-V4's DSpark
/// head, backs up through a sidecar pool as EAGLE3's does; the others pack, and without a draft
/// model SGLang drafts with what the model itself carries.
#[test]
fn n6_and_x4_take_an_eagle_draft_without_nextn_layers_as_a_sidecar() {
    let eagle = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.hierarchical_cache = true;
        s.speculative_algorithm = Some("EAGLE".into());
    });
    let rules = |settings: &DisaggregationSpec, draft: Option<&AttentionLayout>, patch: u16| {
        let violations = at_with_draft(patch, settings, &full(), draft).violations;
        violations.into_iter().map(|v| v.rule).filter(|r| *r == "N6" || *r == "X4").collect::<Vec<_>>()
    };
    // A Llama draft resolves with no NextN layers; the same config with one NextN layer packs.
    let head = full();
    assert!(head.has(LayoutFeature::NoNextnLayers));
    let mtp = layout_at(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4,
                               "num_key_value_heads": 8, "head_dim": 128, "num_nextn_predict_layers": 1}));
    assert_eq!(rules(&eagle, Some(&head), 21), ["N6"]);
    let n6 = at_with_draft(21, &eagle, &full(), Some(&head)).violations.into_iter().find(|v| v.rule == "N6").unwrap();
    assert!(
        n6.fix.starts_with(
            "the draft backs its KV up through a HiCache sidecar pool (the EAGLE draft model has no NextN layers), \
             and the tree cache is a ChunkCache; "
        ),
        "{}",
        n6.fix
    );
    assert!(rules(&eagle, Some(&head), 18).is_empty(), "no draft plan before 0.5.19");
    assert!(rules(&eagle, Some(&mtp), 21).is_empty(), "a draft with NextN layers packs");
    assert!(rules(&eagle, None, 21).is_empty(), "the model's own NextN layers pack");
    let nextn = with(|s| {
        s.unified_cache_external_linker = true;
        s.speculative_algorithm = Some("nextn".into());
    });
    assert_eq!(rules(&nextn, Some(&head), 22), ["X4"]);
    assert!(rules(&nextn, Some(&mtp), 22).is_empty());
    // A DSPARK draft packs only as DeepSeek-V4's DSpark head, which a V4.1 checkpoint bundles.
    let dspark = with(|s| {
        s.retraction_backup = Some(RetractionBackup::CpuTensor);
        s.hierarchical_cache = true;
        s.speculative_algorithm = Some("DSPARK".into());
    });
    let bundled: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/deepseek-v4.1-dspark.json")).unwrap();
    let dspark_head = layout_at(bundled);
    assert!(dspark_head.has(LayoutFeature::DsparkHead));
    assert!(rules(&dspark, Some(&dspark_head), 21).is_empty());
    assert_eq!(rules(&dspark, Some(&mtp), 21), ["N6"]);
    assert!(rules(&dspark, None, 21).is_empty(), "the checkpoint's own head");
}

#[test]
fn r8_follows_the_tree_host_pool_retraction_meets() {
    let r8 = "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.";
    let radix_host_pool = with(|s| {
        s.retraction_backup = Some(RetractionBackup::HostPool);
        s.decode_radix_cache = true;
    });
    // 0.5.18 builds the plain RadixCache for a dense model, the unified tree for a hybrid-SWA one.
    assert_eq!(messages("R8", &radix_host_pool, &FleetSpec::default(), &full()), on(18..=18, r8));
    assert_eq!(messages("R8", &radix_host_pool, &FleetSpec::default(), &hybrid_swa()), vec![None; 7]);
    // The C++ tree (to 0.5.20) and FlexKV's are not unified.
    let cpp = env("SGLANG_EXPERIMENTAL_CPP_RADIX_TREE", "1");
    assert_eq!(messages("R8", &radix_host_pool, &cpp, &full()), on(18..=20, r8));
    let flexkv = FleetSpec { extra_args: vec!["--enable-flexkv".into()], ..FleetSpec::default() };
    assert_eq!(messages("R8", &radix_host_pool, &flexkv, &full()), on(18..=23, r8));
    // Without decode radix cache host-pool retraction builds the unified tree.
    let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
    assert_eq!(messages("R8", &host_pool, &flexkv, &full()), vec![None; 7]);
}

#[test]
fn p4_compares_attention_tp_of_deepseek_v41_dspark_servers() {
    let dsv41 = layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
        "compress_ratios": [0, 2, 4, 0]
    }));
    assert!(dsv41.has(LayoutFeature::DeepseekV41));
    let dspark = |prefill: PrefillSpec| {
        with(move |s| {
            s.speculative_algorithm = Some("dspark".into());
            s.prefill = Some(prefill);
        })
    };
    let older = "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers";
    let newer =
        "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers (including prefill CP ranks for MLA)";
    let expected = |from: u16| -> Vec<Option<String>> {
        (17..=23).map(|p| (p >= from).then(|| (if p == 21 { older } else { newer }).to_string())).collect()
    };
    let tp2 = dspark(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
    assert_eq!(messages("P4", &tp2, &FleetSpec::default(), &dsv41), expected(21));
    // No ratio-2 layers (DeepSeek-V4), another algorithm, or equal attention TP: no DSpark layout check.
    assert_eq!(messages("P4", &tp2, &FleetSpec::default(), &dsv4()), vec![None; 7]);
    let eagle = with(|s| {
        s.speculative_algorithm = Some("EAGLE".into());
        s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
    });
    assert_eq!(messages("P4", &eagle, &FleetSpec::default(), &dsv41), vec![None; 7]);
    let decode_tp2 = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
    assert_eq!(messages("P4", &tp2, &decode_tp2, &dsv41), vec![None; 7]);
    // Prefill attention CP ranks that make up the decode attention TP pass from 0.5.22.
    let cp2 = dspark(PrefillSpec { tensor_parallel: 2, attention_context_parallel: 2, ..PrefillSpec::default() });
    assert_eq!(
        messages("P4", &cp2, &decode_tp2, &dsv41),
        (17..=23).map(|p| (p == 21).then(|| older.to_string())).collect::<Vec<_>>()
    );
    // Pipeline stages that differ make the layouts differ first, which is not decided here.
    let staged = dspark(PrefillSpec { tensor_parallel: 2, pipeline_parallel: 2, ..PrefillSpec::default() });
    assert_eq!(messages("P4", &staged, &FleetSpec::default(), &dsv41), vec![None; 7]);
}

#[test]
fn p4b_refuses_a_paired_prefill_server_that_runs_dspark_where_the_decode_server_does_not() {
    let dsv41 = layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
        "compress_ratios": [0, 2, 4, 0]
    }));
    let p4b = "DeepSeek-V4.1 DSpark PD layout mismatch (compression_ratios, kv_item_lens, kv_layer_ids, \
               num_draft_tokens, state_item_lens, state_types): both servers must enable DSpark with the same block \
               size and target/draft KV layout. Upgrade both servers together.";
    let prefill_running =
        |args: &[&str]| FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
    let decode_running = |algorithm: Option<&str>| {
        let algorithm = algorithm.map(str::to_string);
        with(move |s| {
            s.speculative_algorithm = algorithm;
            s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
        })
    };
    // The guard's decode server: its paired prefill server's command line names its algorithm.
    let rules = |settings: &DisaggregationSpec, prefill: &FleetSpec, layout: &AttentionLayout, scope_server: bool| {
        (17..=23)
            .map(|patch| {
                let input = PolicyInput {
                    disaggregation: settings,
                    decode: &FleetSpec::default(),
                    layout,
                    draft: None,
                    draft_is_the_model: false,
                    prefill_fleet: Some(prefill),
                    release: v0_5(patch),
                };
                let verdict = if scope_server { evaluate_decode_server(input) } else { evaluate(input) };
                // SGLang compares the layouts before the TP sizes: P4 never stands beside P4b.
                let p4 = verdict.violations.iter().any(|v| v.rule == "P4");
                let p4b = verdict.violations.into_iter().find(|v| v.rule == "P4b").map(|v| v.message);
                assert!(!(p4 && p4b.is_some()), "P4 and P4b at 0.5.{patch}");
                p4b
            })
            .collect::<Vec<_>>()
    };
    let dspark_prefill = prefill_running(&["--speculative-algorithm", "dspark"]);
    let plain_prefill = prefill_running(&[]);
    assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv41, true), on(21..=23, p4b));
    assert_eq!(rules(&decode_running(Some("EAGLE")), &dspark_prefill, &dsv41, true), on(21..=23, p4b));
    assert_eq!(
        rules(&decode_running(None), &prefill_running(&["--speculative-algorithm=DSPARK"]), &dsv41, true),
        on(21..=23, p4b)
    );
    // Both (P4 then compares their attention TP) or neither: no layout mismatch.
    assert_eq!(rules(&decode_running(Some("dspark")), &dspark_prefill, &dsv41, true), vec![None; 7]);
    assert_eq!(rules(&decode_running(Some("EAGLE")), &plain_prefill, &dsv41, true), vec![None; 7]);
    // No ratio-2 layers: no DSpark layout on either side.
    assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv4(), true), vec![None; 7]);
    // A service's prefill servers run the decode side's algorithm.
    assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv41, false), vec![None; 7]);
    let input = PolicyInput {
        disaggregation: &decode_running(Some("DSPARK")),
        decode: &FleetSpec::default(),
        layout: &dsv41,
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&dspark_prefill),
        release: v0_5(23),
    };
    assert!(evaluate_decode_server(input).violations.iter().any(|v| v.rule == "P4"));
}

#[test]
fn p3_compares_the_deepseek_v4_kv_layouts_both_fleets_decide() {
    let layouts = |prefill: &FleetSpec, decode: &FleetSpec, layout: &AttentionLayout| {
        // As effective_spec describes the prefill fleet kvpilot runs.
        let side = PrefillSpec { kv_cache_dtype: prefill.kv_cache_dtype.clone(), ..PrefillSpec::default() };
        let settings = with(|s| s.prefill = Some(side));
        let input = PolicyInput {
            disaggregation: &settings,
            decode,
            layout,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: Some(prefill),
            release: v0_5(23),
        };
        evaluate(input).violations.into_iter().filter(|v| v.rule == "P3").map(|v| v.message).collect::<Vec<_>>()
    };
    let p3 = |prefill: &str, decode: &str| {
        format!(
            "KV layout mismatch: prefill server has kv_layout={prefill}, but decode server has kv_layout={decode}. \
             Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT."
        )
    };
    let dsv4 = dsv4();
    assert_eq!(dsv4.compress_ratios, vec![4, 128]);
    let v41 = env("SGLANG_DSV4_KV_LAYOUT", "V41");
    // The default layout is v4 on every GPU; v41 runs on the GPUs that have it.
    assert_eq!(layouts(&FleetSpec::default(), &v41, &dsv4), vec![p3("v4,c4:v4,c128:v4", "v41,c4:v41,c128:v41")]);
    assert!(layouts(&v41, &v41, &dsv4).is_empty());
    // The compressed caches of ratios 1 and 2 are FP4 under V4.1 unless asked for otherwise.
    let dsv41 = layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
        "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 0]
    }));
    let v41_new = FleetSpec {
        env: env("SGLANG_DSV4_KV_LAYOUT", "v41_new").env,
        extra_args: vec!["--dsv4-attn-backend=flashmla".into()],
        ..FleetSpec::default()
    };
    let trtllm = FleetSpec { extra_args: vec!["--dsv4-attn-backend".into(), "trtllm".into()], ..FleetSpec::default() };
    assert_eq!(layouts(&trtllm, &v41_new, &dsv41), vec![p3("uniform_fp8", "v41_new,c2:v41_fp4_new,c4:v41_new")]);
    // A DeepSeek-V4.1 server with the automatic backend and an FP8 cache runs V4.1 on SM100 GPUs
    // and V4 elsewhere: not decided.
    assert!(layouts(&FleetSpec::default(), &trtllm, &dsv41).is_empty());
    let bf16 = FleetSpec { kv_cache_dtype: Some("bfloat16".into()), ..FleetSpec::default() };
    assert_eq!(layouts(&bf16, &trtllm, &dsv41), vec![p3("v4,c2:v4,c4:v4", "uniform_fp8")]);
    // FP4 compressed caches with the default layout: FlashMLA's V4 cache refuses them, so such a
    // DeepSeek-V4.1 server starts only where FlashMLA mega runs it as V4.1.
    let fp4 = env("SGLANG_DSV4_COMPRESSED_KV_LAYOUT", "fp4");
    assert_eq!(layouts(&fp4, &trtllm, &dsv41), vec![p3("v41,c2:v41_fp4,c4:v41_fp4", "uniform_fp8")]);
    // Settings a server refuses at start-up (trtllm with a V4.1 layout) decide nothing here.
    let refused = FleetSpec { env: v41.env.clone(), ..trtllm.clone() };
    assert!(layouts(&refused, &FleetSpec::default(), &dsv4).is_empty());
    // Not a DeepSeek-V4 model, or no prefill fleet to compare with.
    assert!(layouts(&FleetSpec::default(), &v41, &full()).is_empty());
    assert_eq!(messages("P3", &DisaggregationSpec::default(), &v41, &dsv4), vec![None; 7]);
}

#[test]
fn t1hnd_refuses_the_hnd_layout_on_the_mha_pools_of_pd_servers() {
    let hnd = env("SGLANG_USE_HND_KVCACHE", "1");
    let t1hnd = "PD-disaggregation KV transfer assumes NHD slot-row layout; HND KV cache (SGLANG_USE_HND_KVCACHE) is \
                 not supported with disagg yet.";
    let none = DisaggregationSpec::default();
    for layout in [full(), hybrid_swa(), ssm()] {
        assert_eq!(messages("T1hnd", &none, &hnd, &layout), on(17..=23, t1hnd), "{:?}", layout.kv_pool);
    }
    for layout in [mla(), dsv4()] {
        assert_eq!(messages("T1hnd", &none, &hnd, &layout), vec![None; 7], "{:?}", layout.kv_pool);
    }
    assert_eq!(messages("T1hnd", &none, &env("SGLANG_USE_HND_KVCACHE", "0"), &full()), vec![None; 7]);
    // A service's prefill fleet registers its buffers too.
    let input = PolicyInput {
        disaggregation: &none,
        decode: &FleetSpec::default(),
        layout: &full(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&hnd),
        release: v0_5(23),
    };
    assert!(evaluate(input).violations.iter().any(|v| v.rule == "T1hnd"));
}

#[test]
fn h2_reads_a_service_s_prefill_fleet_with_its_own_env() {
    let session = FleetSpec { extra_args: vec!["--enable-session-radix-cache".into()], ..FleetSpec::default() };
    let unified = FleetSpec { env: env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1").env, ..session.clone() };
    let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
    let h2_on = |prefill: &FleetSpec, patch| {
        let input = PolicyInput {
            disaggregation: &cpu,
            decode: &FleetSpec::default(),
            layout: &full(),
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: Some(prefill),
            release: v0_5(patch),
        };
        evaluate(input).violations.into_iter().filter(|v| v.rule == "H2").map(|v| v.message).collect::<Vec<_>>()
    };
    // 0.5.17's prefill servers build the plain RadixCache for a dense model, unless their env asks
    // for the unified tree; from 0.5.19 they build the unified tree.
    assert_eq!(h2_on(&session, 17).len(), 1);
    assert!(h2_on(&session, 17)[0].contains("tree_cache is RadixCache"));
    assert!(h2_on(&unified, 17).is_empty());
    assert!(h2_on(&session, 19).is_empty());
}

#[test]
fn sd1_to_sd4_read_the_speculative_algorithm_as_the_hook_does() {
    let algorithm = |name: &str| with(|s| s.speculative_algorithm = Some(name.into()));
    let sd1 = |name: &str| format!("Unknown speculative algorithm name: {name}");
    assert_eq!(messages("SD1", &algorithm("eagle3"), &FleetSpec::default(), &full()), vec![None; 7]);
    assert_eq!(messages("SD1", &algorithm("nextn"), &FleetSpec::default(), &full()), vec![None; 7]);
    assert_eq!(messages("SD1", &algorithm("uno"), &FleetSpec::default(), &full()), on(17..=19, &sd1("UNO")));
    assert_eq!(messages("SD1", &algorithm("medusa"), &FleetSpec::default(), &full()), on(17..=23, &sd1("MEDUSA")));

    let dflash = algorithm("dflash");
    let sd2 = "DFLASH speculative decoding requires setting --speculative-draft-model-path.";
    assert_eq!(messages("SD2", &dflash, &FleetSpec::default(), &full()), on(17..=23, sd2));
    let draft = crate::api::DraftModelSpec {
        name: "acme/dflash".into(),
        revision: None,
        path: None,
        config: crate::api::ModelConfigSource::default(),
    };
    let with_draft = DisaggregationSpec { speculative_draft_model: Some(draft.clone()), ..dflash.clone() };
    assert_eq!(messages("SD2", &with_draft, &FleetSpec::default(), &full()), vec![None; 7]);
    let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    let sd3 = "Currently DFLASH speculative decoding only supports pp_size == 1.";
    assert_eq!(messages("SD3", &with_draft, &stages, &full()), on(17..=23, sd3));
    let uno = DisaggregationSpec { speculative_draft_model: Some(draft), ..algorithm("UNO") };
    let sd4 = "UNO reuses the target model and does not accept --speculative-draft-model-path.";
    assert_eq!(messages("SD4", &uno, &FleetSpec::default(), &full()), on(20..=23, sd4));
}

/// DeepSeek-V4's model hook runs before the speculative hook: it takes EAGLE and DSPARK only as
/// written (V1), EAGLE only with `--speculative-eagle-topk 1` on every server that speculates
/// (V2), and from 0.5.21 refuses DeepSeek-V4.1 with another algorithm, HiSparse, two-batch
/// overlap or pipeline stages (V3).
#[test]
fn deepseek_v4_s_model_hook_reads_the_algorithm_as_given_and_eagle_s_top_k() {
    let v1 = "Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM";
    let v2 = "Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM";
    let top_k =
        |k: &str| FleetSpec { extra_args: vec!["--speculative-eagle-topk".into(), k.into()], ..FleetSpec::default() };
    let fired = |verdict: Verdict| {
        verdict.violations.into_iter().filter(|v| v.rule.starts_with('V')).map(|v| v.message).collect::<Vec<_>>()
    };
    for patch in 17..=23 {
        for algorithm in ["nextn", "NEXTN", "eagle", "dspark", "EAGLE3"] {
            assert_eq!(
                fired(at(patch, &speculating(algorithm), &top_k("1"), &dsv4())),
                [v1],
                "{algorithm} 0.5.{patch}"
            );
        }
        assert!(fired(at(patch, &speculating("DSPARK"), &FleetSpec::default(), &dsv4())).is_empty());
        assert!(fired(at(patch, &speculating("EAGLE"), &top_k("1"), &dsv4())).is_empty());
        assert_eq!(fired(at(patch, &speculating("EAGLE"), &FleetSpec::default(), &dsv4())), [v2], "unset is not 1");
        assert_eq!(fired(at(patch, &speculating("EAGLE"), &top_k("2"), &dsv4())), [v2]);
        assert!(fired(at(patch, &speculating("nextn"), &FleetSpec::default(), &mla())).is_empty(), "DeepSeek-V3");
    }
    // A service's prefill servers run the same algorithm and need the top-k too.
    let prefill = FleetSpec::default();
    let service = evaluate(PolicyInput {
        disaggregation: &speculating("EAGLE"),
        decode: &top_k("1"),
        layout: &dsv4(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: Some(&prefill),
        release: v0_5(23),
    });
    assert_eq!(fired(service), [v2]);

    let v41 = layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
        "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 128]
    }));
    let v3 = |feature: &str| format!("DeepSeek-V4.1 does not support {feature} yet; disable it to serve this model.");
    assert!(fired(at(20, &speculating("EAGLE"), &top_k("1"), &v41)).is_empty(), "0.5.20 has no V4.1 check");
    assert_eq!(fired(at(21, &speculating("EAGLE"), &top_k("1"), &v41)), [v3("speculative decoding other than DSpark")]);
    assert!(
        !fired(at(21, &speculating("dspark"), &top_k("1"), &v41))
            .contains(&v3("speculative decoding other than DSpark"))
    );
    let hisparse = with(|s| s.hisparse = true);
    assert!(fired(at(22, &hisparse, &FleetSpec::default(), &v41)).contains(&v3("HiSparse")));
    let overlap = FleetSpec { extra_args: vec!["--enable-two-batch-overlap".into()], ..FleetSpec::default() };
    assert_eq!(fired(at(23, &DisaggregationSpec::default(), &overlap, &v41)), [v3("two-batch overlap")]);
    let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    assert_eq!(fired(at(23, &DisaggregationSpec::default(), &stages, &v41)), [v3("pipeline parallelism")]);
    assert!(fired(at(23, &DisaggregationSpec::default(), &stages, &dsv4())).is_empty(), "DeepSeek-V4 runs PP");
}

/// DeepSeek-V4.1 DSpark under PD (0.5.21 on) needs static ragged verify, Mooncake (0.5.22 on: or
/// NIXL), no DCP and no attention CP; 0.5.21 refuses DP too, 0.5.22 lets a prefill server run
/// prefill CP with the interleave strategy (V4).
#[test]
fn deepseek_v41_dspark_pd_needs_mooncake_or_nixl_and_no_context_parallelism() {
    let v41 = layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
        "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 128]
    }));
    let dspark = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.speculative_algorithm = Some("DSPARK".into());
            edit(s);
        })
    };
    let v4 = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec| {
        at(patch, settings, decode, &v41).violations.into_iter().any(|v| v.rule == "V4")
    };
    let plain = FleetSpec::default();
    for patch in 21..=23 {
        assert!(!v4(patch, &dspark(|_| ()), &plain), "0.5.{patch}");
        assert!(v4(patch, &dspark(|s| s.transfer_backend = TransferBackend::Mori), &plain));
        assert!(v4(patch, &dspark(|s| s.decode_context_parallel = 2), &plain));
        assert!(v4(patch, &dspark(|_| ()), &env("SGLANG_RAGGED_VERIFY_MODE", "compact")));
        assert!(!v4(patch, &dspark(|_| ()), &env("SGLANG_RAGGED_VERIFY_MODE", "static")));
        let cp = FleetSpec { extra_args: vec!["--attn-cp-size".into(), "2".into()], ..FleetSpec::default() };
        assert!(v4(patch, &dspark(|_| ()), &cp), "decode attention CP");
    }
    let nixl = dspark(|s| s.transfer_backend = TransferBackend::Nixl);
    assert!(v4(21, &nixl, &plain) && !v4(22, &nixl, &plain));
    let dp = FleetSpec { data_parallel: 2, enable_dp_attention: true, ..FleetSpec::default() };
    assert!(v4(21, &dspark(|_| ()), &dp) && !v4(22, &dspark(|_| ()), &dp));
    assert!(!v4(20, &dspark(|s| s.transfer_backend = TransferBackend::Mori), &plain), "0.5.20 has no V4.1 check");
    assert!(!v4(23, &with(|s| s.transfer_backend = TransferBackend::Mori), &plain), "without speculative decoding");

    // A service's prefill servers: prefill CP with the interleave strategy passes from 0.5.22.
    let service = |patch: u16, prefill_args: &[&str]| {
        let prefill =
            FleetSpec { extra_args: prefill_args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
        evaluate(PolicyInput {
            disaggregation: &dspark(|_| ()),
            decode: &plain,
            layout: &v41,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: Some(&prefill),
            release: v0_5(patch),
        })
        .violations
        .into_iter()
        .any(|v| v.rule == "V4")
    };
    let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave", "--attn-cp-size", "2"];
    assert!(!service(22, &interleave));
    assert!(service(21, &interleave));
    assert!(service(22, &["--enable-prefill-cp", "--cp-strategy", "zigzag"]));
    assert!(service(23, &["--dcp-size", "2"]));
}

/// The DeepSeek family's model overrides: from 0.5.20 HYV4 refuses DCP and prefill CP (K4, K5);
/// from 0.5.22 a DSA model with DCP refuses HiSparse and HiCache (K1), PD disaggregation (K2)
/// and an EAGLE top-k other than 1 (K3).
#[test]
fn dsa_decode_context_parallelism_runs_without_pd_from_0_5_22() {
    let dsa = layout_at(json!({
        "architectures": ["DeepseekV32ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "index_topk": 2048
    }));
    assert!(dsa.has(LayoutFeature::Dsa));
    let dcp = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.decode_context_parallel = 2;
            edit(s);
        })
    };
    let fired = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
        let mut rules: Vec<_> = at(patch, settings, decode, layout)
            .violations
            .into_iter()
            .map(|v| v.rule)
            .filter(|r| r.starts_with('K'))
            .collect();
        rules.sort_unstable();
        rules
    };
    let plain = FleetSpec::default();
    assert!(fired(21, &dcp(|_| ()), &plain, &dsa).is_empty(), "0.5.21 runs DSA DCP under PD");
    assert_eq!(fired(22, &dcp(|_| ()), &plain, &dsa), ["K2"]);
    assert_eq!(fired(23, &dcp(|s| s.hierarchical_cache = true), &plain, &dsa), ["K1", "K2"]);
    let top_k_2 = FleetSpec { extra_args: vec!["--speculative-eagle-topk".into(), "2".into()], ..FleetSpec::default() };
    assert_eq!(fired(23, &dcp(|_| ()), &top_k_2, &dsa), ["K2", "K3"]);
    assert!(fired(23, &DisaggregationSpec::default(), &top_k_2, &dsa).is_empty(), "without DCP");
    assert!(fired(23, &dcp(|_| ()), &plain, &mla()).is_empty(), "DeepSeek-V3 has no DSA");

    // A server without PD runs DSA DCP (K2 is a PD server's rule).
    let input = PolicyInput {
        disaggregation: &dcp(|_| ()),
        decode: &plain,
        layout: &dsa,
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: None,
        release: v0_5(23),
    };
    let colocated: Vec<_> =
        super::role::evaluate_non_decode(input, false).violations.into_iter().map(|v| v.rule).collect();
    assert!(!colocated.contains(&"K2"), "{colocated:?}");

    let hyv4 = layout_at(json!({
        "architectures": ["HYV4ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64
    }));
    assert!(fired(19, &dcp(|_| ()), &plain, &hyv4).is_empty());
    let k4 = at(20, &dcp(|_| ()), &plain, &hyv4).violations.into_iter().find(|v| v.rule == "K4").unwrap();
    assert!(k4.message.ends_with("Got architecture='HYV4ForCausalLM' and dcp_size=2."), "{}", k4.message);
    let prefill_cp = FleetSpec { extra_args: vec!["--enable-prefill-cp".into()], ..FleetSpec::default() };
    assert_eq!(fired(23, &DisaggregationSpec::default(), &prefill_cp, &hyv4), ["K5"]);
}

/// The speculative hook's parallelism checks: DSPARK runs pipeline stages on PD prefill servers
/// only (SD6, 0.5.21 on); STANDALONE and NGRAM drafts refuse DP attention (SD7, SD8), which from
/// 0.5.22 needs more than one attention-DP group.
#[test]
fn the_speculative_hook_refuses_dspark_stages_on_decode_and_dp_attention_for_standalone_and_ngram() {
    let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
        let mut rules: Vec<_> = at(patch, &speculating(algorithm), decode, &full())
            .violations
            .into_iter()
            .map(|v| v.rule)
            .filter(|r| ["SD6", "SD7", "SD8"].contains(r))
            .collect();
        rules.sort_unstable();
        rules
    };
    let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    assert!(fired(20, "dspark", &stages).is_empty());
    assert_eq!(fired(21, "dspark", &stages), ["SD6"]);
    assert!(fired(23, "EAGLE", &stages).is_empty());
    let dp_attention =
        |groups: i32| FleetSpec { data_parallel: groups, enable_dp_attention: true, ..FleetSpec::default() };
    for patch in 17..=23 {
        assert_eq!(fired(patch, "standalone", &dp_attention(2)), ["SD7"], "0.5.{patch}");
        assert_eq!(fired(patch, "ngram", &dp_attention(2)), ["SD8"], "0.5.{patch}");
        assert!(fired(patch, "EAGLE", &dp_attention(2)).is_empty());
    }
    assert_eq!(fired(21, "NGRAM", &dp_attention(1)), ["SD8"], "the flag alone up to 0.5.21");
    assert!(fired(22, "NGRAM", &dp_attention(1)).is_empty(), "one attention-DP group from 0.5.22");

    // A PD prefill server runs DSPARK's pipeline stages; one without PD does not.
    let input = PolicyInput {
        disaggregation: &speculating("DSPARK"),
        decode: &stages,
        layout: &full(),
        draft: None,
        draft_is_the_model: false,
        prefill_fleet: None,
        release: v0_5(23),
    };
    let rules = |prefill| {
        super::role::evaluate_non_decode(input, prefill).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
    };
    assert!(!rules(true).contains(&"SD6"));
    assert!(rules(false).contains(&"SD6"));
}

/// Other families' model override providers: MiniCPM (0.5.19 on) refuses DP attention on every
/// MiniCPM model (MC1), HiCache on MiniCPM-SALA's hybrid attention (MC2), and PD on its sparse
/// attention backend (MC3); Qwen4-Exp (0.5.20 on) refuses unified memory (QX2, rewritten); IQuest
/// Q1 (0.5.21 on) its own limits.
#[test]
fn other_families_override_providers_refuse_their_settings() {
    let fired = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
        at(patch, settings, decode, layout).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
    };
    let minicpm = layout_at(json!({
        "architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "num_hidden_layers": 4,
        "hidden_size": 1024, "num_attention_heads": 16
    }));
    // TP 2, which both DP sizes divide (DP1).
    let dp_attention = |groups: i32| FleetSpec {
        tensor_parallel: 2,
        data_parallel: groups,
        enable_dp_attention: true,
        ..FleetSpec::default()
    };
    let plain = DisaggregationSpec::default();
    assert!(fired(18, &plain, &dp_attention(2), &minicpm).is_empty(), "no MiniCPM provider before 0.5.19");
    assert_eq!(fired(19, &plain, &dp_attention(2), &minicpm), ["MC1"]);
    assert_eq!(fired(21, &plain, &dp_attention(1), &minicpm), ["MC1"], "the flag alone up to 0.5.21");
    assert!(fired(22, &plain, &dp_attention(1), &minicpm).is_empty(), "one attention-DP group from 0.5.22");
    let hicache = with(|s| s.hierarchical_cache = true);
    assert!(!fired(23, &hicache, &FleetSpec::default(), &minicpm).contains(&"MC2"), "dense MiniCPM takes HiCache");

    let sala =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/parity/minicpm-sala.json")).unwrap());
    assert!(fired(23, &hicache, &FleetSpec::default(), &sala).contains(&"MC2"));
    // Under PD the provider picks its sparse backend unless told to run dense attention.
    assert!(fired(19, &plain, &FleetSpec::default(), &sala).contains(&"MC3"));
    let dense = env("SGLANG_MINICPM_FORCE_DENSE", "yes");
    assert!(!fired(23, &plain, &dense, &sala).contains(&"MC3"));
    let fa3 = FleetSpec { extra_args: vec!["--attention-backend".into(), "fa3".into()], ..FleetSpec::default() };
    assert!(!fired(23, &plain, &fa3, &sala).contains(&"MC3"));
    let sparse_prefill = FleetSpec {
        extra_args: vec![
            "--attention-backend=fa3".into(),
            "--prefill-attention-backend".into(),
            "minicpm_flashinfer".into(),
        ],
        ..FleetSpec::default()
    };
    assert!(fired(23, &plain, &sparse_prefill, &sala).contains(&"MC3"));

    let qwen4 =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/parity/qwen4-exp.json")).unwrap());
    let unified = with(|s| s.enable_unified_memory = true);
    assert!(!fired(19, &unified, &FleetSpec::default(), &qwen4).contains(&"QX2"));
    let verdict = at(
        20,
        &with(|s| {
            s.enable_unified_memory = true;
            s.on_invalid = OnInvalid::Rewrite;
        }),
        &FleetSpec::default(),
        &qwen4,
    );
    assert!(verdict.rewrites.iter().any(|r| r.rule == "QX2"), "{verdict:?}");

    let iquest =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/parity/iquest-q1.json")).unwrap());
    let args = |words: &[&str]| FleetSpec {
        extra_args: words.iter().map(|w| w.to_string()).collect(),
        ..FleetSpec::default()
    };
    assert!(fired(20, &plain, &args(&["--attention-backend", "triton"]), &iquest).is_empty());
    assert_eq!(fired(21, &plain, &args(&["--decode-attention-backend", "triton"]), &iquest), ["IQ1"]);
    assert!(fired(21, &plain, &args(&["--attention-backend", "fa3"]), &iquest).is_empty());
    // Two GPUs, so that attention CP divides TP (CP7).
    let cp2 = FleetSpec { tensor_parallel: 2, ..args(&["--attn-cp-size", "2"]) };
    assert_eq!(fired(23, &plain, &cp2, &iquest), ["IQ4"]);
    assert_eq!(fired(23, &plain, &args(&["--speculative-eagle-topk", "2"]), &iquest), ["IQ5"]);
    let standalone = with(|s| s.speculative_algorithm = Some("standalone".into()));
    assert!(fired(23, &standalone, &FleetSpec::default(), &iquest).contains(&"IQ2"));

    // Nemotron-H (0.5.23): expert remapping needs a runner that takes it.
    let nemotron =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/nemotron-nano-9b-v2.json")).unwrap());
    let trtllm = args(&["--ep-num-redundant-experts", "2", "--moe-runner-backend", "flashinfer_trtllm"]);
    assert!(fired(22, &plain, &trtllm, &nemotron).is_empty());
    assert_eq!(fired(23, &plain, &trtllm, &nemotron), ["NH1"]);
    let cutedsl = args(&["--enable-eplb", "--moe-runner-backend", "flashinfer_cutedsl"]);
    assert_eq!(fired(23, &plain, &cutedsl, &nemotron), ["NH2"]);
    let with_a2a =
        args(&["--enable-eplb", "--moe-runner-backend", "flashinfer_cutedsl", "--moe-a2a-backend", "deepep"]);
    assert!(fired(23, &plain, &with_a2a, &nemotron).is_empty());
}

/// The context-parallel hook: prefill CP needs a strategy (CP1, every release); Nemotron-H,
/// read by its text config's model type, refuses attention CP (CP2, 0.5.21 on); MiMo-V2's prefill
/// CP needs zigzag (CP5), up to 0.5.19 only under CP-v2, which the hook turns on for MiMo-V2
/// unless `SGLANG_ENABLE_CP_V2` says otherwise.
#[test]
fn the_context_parallel_hook_checks_strategies_and_models() {
    let fired = |patch: u16, decode: &FleetSpec, layout: &AttentionLayout| {
        let verdict = at(patch, &DisaggregationSpec::default(), decode, layout);
        verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
    };
    let args = |words: &[&str], env: &[(&str, &str)]| FleetSpec {
        extra_args: words.iter().map(|w| w.to_string()).collect(),
        env: env
            .iter()
            .map(|(name, value)| EnvVar { name: name.to_string(), value: Some(value.to_string()), value_from: None })
            .collect(),
        ..FleetSpec::default()
    };
    let rules = |found: Vec<(&'static str, String)>| found.into_iter().map(|(rule, _)| rule).collect::<Vec<_>>();
    assert_eq!(rules(fired(17, &args(&["--enable-prefill-cp"], &[]), &full())), ["CP1"]);
    assert!(fired(17, &args(&["--enable-prefill-cp", "--cp-strategy", "zigzag"], &[]), &full()).is_empty());

    let nemotron_vl =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/nemotron-nano-vl-v2.json")).unwrap());
    assert_eq!(nemotron_vl.text_model_type(), Some("nemotron_h"));
    // Two GPUs, so that attention CP divides TP (CP7).
    let cp2 = FleetSpec { tensor_parallel: 2, ..args(&["--attn-cp-size", "2"], &[]) };
    assert!(fired(20, &cp2, &nemotron_vl).is_empty());
    assert_eq!(rules(fired(21, &cp2, &nemotron_vl)), ["CP2"]);

    let mimo =
        layout_at(serde_json::from_str(include_str!("../../tests/fixtures/configs/mimo-v2-flash.json")).unwrap());
    let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave"];
    let old = fired(19, &args(&interleave, &[]), &mimo);
    assert_eq!(
        old.iter().map(|(rule, message)| (*rule, message.as_str())).collect::<Vec<_>>(),
        [("CP5", "MiMo V2 CP-v2 only supports --cp-strategy zigzag.")]
    );
    assert!(fired(19, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "0")]), &mimo).is_empty(), "CP-v2 off");
    assert_eq!(rules(fired(19, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "yes")]), &mimo)), ["CP5"]);
    assert_eq!(
        rules(fired(20, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "0")]), &mimo)),
        ["CP5"],
        "always from 0.5.20"
    );
}

/// The model hook's DSA branch on a GPU: a DSA model runs a bfloat16 or fp8_e4m3 KV cache only
/// (DT1, every release), and one with learnable attention sinks a bfloat16 one only (DT2, 0.5.20
/// on; HunYuan V4's config class turns the sinks on by default and refuses them off). `auto` is
/// always allowed: SGLang
/// picks an allowed dtype from the GPU.
#[test]
fn dsa_models_refuse_other_kv_cache_dtypes_and_learnable_sinks_need_bfloat16() {
    let fired = |patch: u16, dtype: Option<&str>, layout: &AttentionLayout| {
        let decode = FleetSpec { kv_cache_dtype: dtype.map(str::to_string), ..FleetSpec::default() };
        let verdict = at(patch, &DisaggregationSpec::default(), &decode, layout);
        verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
    };
    let dsa = fixture("deepseek-v3.2-exp");
    for dtype in [None, Some("auto"), Some("bf16"), Some("bfloat16"), Some("fp8_e4m3")] {
        assert!(fired(17, dtype, &dsa).is_empty(), "{dtype:?}");
    }
    let refused = [("DT1", "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype".to_string())];
    assert_eq!(fired(17, Some("fp8_e5m2"), &dsa), refused);
    assert_eq!(fired(23, Some("mxfp8"), &dsa), refused);
    assert!(fired(23, Some("fp8_e5m2"), &mla()).is_empty(), "MLA without a DSA indexer");

    let hyv4 = fixture("parity/hy-v4");
    assert!(hyv4.has(LayoutFeature::LearnableAttentionSinks), "the config class's default");
    assert_eq!(
        fired(20, Some("fp8_e4m3"), &hyv4),
        [(
            "DT2",
            "Learnable DSA attention sinks require a bfloat16 KV cache; got kv_cache_dtype=fp8_e4m3.".to_string()
        )]
    );
    assert_eq!(fired(23, Some("fp8_e5m2"), &hyv4).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["DT2", "DT1"]);
    assert!(fired(23, Some("bf16"), &hyv4).is_empty());
    let sinks = fixture("parity/deepseek-v3.2-learnable-sink");
    assert!(sinks.has(LayoutFeature::LearnableAttentionSinks));
    assert!(fired(19, Some("fp8_e4m3"), &sinks).is_empty(), "no sink check before 0.5.20");
    assert_eq!(fired(20, Some("fp8_e4m3"), &sinks).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["DT2"]);
}

/// IQuest Q1's MTP draft checks in the speculative hook (0.5.21 on): an EAGLE or NEXTN draft
/// needs a draft model of its own (IQ9), an MTP checkpoint (IQ10) trained for the model (IQ11,
/// IQ12), no token map (IQ13), at least one step (IQ14), a top-k of 1 (IQ15) and a verify width
/// of the steps plus one, the steps defaulting to the checkpoint's draft slots (IQ16).
#[test]
fn iquest_q1_drafts_with_an_mtp_checkpoint_trained_for_it() {
    let target = fixture("parity/iquest-q1");
    let mtp = fixture("parity/iquest-q1-mtp");
    let eagle = |draft_named: bool| {
        with(|s| {
            s.speculative_algorithm = Some("nextn".into());
            s.speculative_draft_model = draft_named.then(|| crate::api::DraftModelSpec {
                name: "iquest/q1-mtp".into(),
                revision: None,
                path: None,
                config: crate::api::ModelConfigSource::default(),
            });
        })
    };
    let fired =
        |patch: u16, settings: &DisaggregationSpec, draft: Option<&AttentionLayout>, args: &[&str], own: bool| {
            let decode = FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
            let verdict = evaluate(PolicyInput {
                disaggregation: settings,
                decode: &decode,
                layout: &target,
                draft,
                draft_is_the_model: own,
                prefill_fleet: None,
                release: v0_5(patch),
            });
            verdict.violations.into_iter().map(|v| v.rule).filter(|rule| rule.starts_with("IQ")).collect::<Vec<_>>()
        };
    assert!(fired(20, &eagle(false), None, &[], false).is_empty(), "before 0.5.21");
    assert_eq!(fired(21, &eagle(false), None, &[], false), ["IQ9"]);
    assert_eq!(fired(23, &eagle(true), Some(&target), &[], true), ["IQ9"], "the model's own path");
    assert!(fired(23, &eagle(true), Some(&mtp), &[], false).is_empty());
    assert!(fired(23, &eagle(true), None, &[], false).is_empty(), "a draft config not read decides nothing");
    assert_eq!(fired(23, &eagle(true), Some(&target), &[], false), ["IQ10"]);
    assert_eq!(fired(23, &eagle(true), Some(&fixture("parity/iquest-q1-mtp-other-width")), &[], false), ["IQ11"]);
    assert_eq!(fired(23, &eagle(true), Some(&fixture("parity/iquest-q1-mtp-other-target")), &[], false), ["IQ12"]);
    let with_mtp = |args: &[&str]| fired(23, &eagle(true), Some(&mtp), args, false);
    assert_eq!(with_mtp(&["--speculative-token-map", "/maps/t.pt"]), ["IQ13"]);
    assert_eq!(with_mtp(&["--speculative-num-steps", "0"]), ["IQ14"]);
    assert_eq!(with_mtp(&["--speculative-eagle-topk", "0"]), ["IQ15"]);
    assert_eq!(with_mtp(&["--speculative-eagle-topk", "2"]), ["IQ5"], "the provider refuses it first");
    assert!(with_mtp(&["--speculative-num-draft-tokens", "8"]).is_empty(), "7 draft slots and one");
    assert_eq!(with_mtp(&["--speculative-num-draft-tokens", "3"]), ["IQ16"]);
    assert!(with_mtp(&["--speculative-num-steps", "2", "--speculative-num-draft-tokens", "3"]).is_empty());
    let standalone = with(|s| s.speculative_algorithm = Some("STANDALONE".into()));
    assert_eq!(fired(23, &standalone, None, &[], false), ["IQ2"], "the provider refuses it first");
}

/// The data-parallel shape, on every server: attention DP divides TP (DP1, SGLang's bare assert
/// as its traceback ends, per release), data-parallel replicas stay on one node (DP2; DP
/// attention may span nodes), from 0.5.22 replicas and attention DP do not combine (DP3), and
/// the nodes split the TP × PP ranks (DP4).
#[test]
fn the_data_parallel_shape_divides_tp_and_keeps_replicas_on_one_node() {
    let fired = |patch: u16, decode: &FleetSpec| {
        let verdict = at(patch, &DisaggregationSpec::default(), decode, &full());
        verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
    };
    let fleet = |tp: i32, dp: i32, dp_attention: bool, nodes: i32| FleetSpec {
        tensor_parallel: tp,
        data_parallel: dp,
        enable_dp_attention: dp_attention,
        nodes_per_replica: nodes,
        ..FleetSpec::default()
    };
    for (patch, text) in [
        (17, "AssertionError (assert self.tp_size % self.dp_size == 0)"),
        (19, "AssertionError (assert cfg.tp_size % cfg.dp_size == 0)"),
        (22, "AssertionError (assert cfg.tp_size % cfg.attn_dp_size == 0)"),
    ] {
        assert_eq!(fired(patch, &fleet(4, 3, true, 1)), [("DP1", text.to_string())]);
        assert_eq!(fired(patch, &fleet(2, 4, true, 1)), [("DP1", text.to_string())], "more groups than TP ranks");
    }
    assert!(fired(23, &fleet(8, 4, true, 2)).is_empty(), "attention DP across two nodes");
    assert!(fired(23, &fleet(4, 3, false, 1)).is_empty(), "three replicas of TP 4 on one node");
    assert_eq!(
        fired(21, &fleet(4, 2, false, 2)),
        [("DP2", "multi-node data parallel is not supported unless dp attention!".to_string())]
    );
    let replicas_on_nodes = FleetSpec { extra_args: vec!["--nnodes".into(), "2".into()], ..fleet(4, 2, false, 1) };
    assert_eq!(fired(22, &replicas_on_nodes).into_iter().map(|(rule, _)| rule).collect::<Vec<_>>(), ["DP2"]);

    // TP × PP ranks that do not split over the guard's nodes (DP4; a service's pods are K2's).
    let on_nodes = |tp: i32, pp: i32, words: &[&str]| FleetSpec {
        pipeline_parallel: pp,
        extra_args: words.iter().map(|w| w.to_string()).collect(),
        ..fleet(tp, 1, false, 1)
    };
    let server = |patch: u16, fleet: &FleetSpec| {
        let (settings, layout) = (DisaggregationSpec::default(), full());
        let input = PolicyInput::alone(&settings, fleet, &layout, v0_5(patch));
        super::role::evaluate_non_decode(input, false).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
    };
    assert_eq!(server(17, &on_nodes(3, 1, &["--nnodes", "2"])), ["DP4"]);
    assert!(server(23, &on_nodes(3, 2, &["--nnodes", "2"])).is_empty(), "six ranks on two nodes");
    assert!(server(23, &on_nodes(3, 1, &["--nnodes", "2", "--ep-join-mode", "scale"])).is_empty(), "an EP joiner");
    assert!(server(23, &on_nodes(3, 1, &["--nnodes", "0"])).is_empty(), "no nodes: the parser's to refuse");
    assert!(!fired(23, &FleetSpec { nodes_per_replica: 2, ..fleet(3, 1, false, 1) }).iter().any(|(r, _)| *r == "DP4"));

    let both = FleetSpec {
        extra_args: vec!["--dp-size=2".into(), "--attn-dp-size".into(), "4".into()],
        ..fleet(8, 4, true, 1)
    };
    assert!(fired(21, &both).is_empty(), "no --attn-dp-size before 0.5.22 (its parser refuses it)");
    assert_eq!(
        fired(22, &both),
        [(
            "DP3",
            "--dp-size 2 with --attn-dp-size 4: data-parallel replicas combined with attention data parallelism are \
             not supported."
                .to_string()
        )]
    );
}

/// The validation hook's pipeline checks: up to 0.5.20 pipeline stages refuse every speculative
/// algorithm (PP1); from 0.5.21 they run EAGLE without multi-layer EAGLE (NEXTN included) on PD
/// prefill servers only (PP2) and DSPARK as SD6 says, and SGLANG_ENABLE_PP_SPEC moves EAGLE's
/// stages to servers without PD (PP4; there PP5 and PP6), refusing DSPARK (PP3).
#[test]
fn pipeline_stages_run_eagle_on_pd_prefill_servers_only() {
    let pp_rules = |violations: Vec<Violation>| {
        let mut rules: Vec<_> = violations.into_iter().map(|v| v.rule).filter(|r| r.starts_with("PP")).collect();
        rules.sort_unstable();
        rules
    };
    let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
        pp_rules(at(patch, &speculating(algorithm), decode, &full()).violations)
    };
    let on_server = |patch: u16, algorithm: &str, server: &FleetSpec, prefill: bool| {
        let (settings, layout) = (speculating(algorithm), full());
        let input = PolicyInput::alone(&settings, server, &layout, v0_5(patch));
        pp_rules(super::role::evaluate_non_decode(input, prefill).violations)
    };
    let stages = |args: &[&str], pp_spec: bool| FleetSpec {
        pipeline_parallel: 2,
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        env: if pp_spec { env("SGLANG_ENABLE_PP_SPEC", "1").env } else { Vec::new() },
        ..FleetSpec::default()
    };
    let plain = stages(&[], false);
    for algorithm in ["EAGLE", "NEXTN", "EAGLE3", "STANDALONE", "NGRAM"] {
        assert_eq!(fired(20, algorithm, &plain), ["PP1"], "{algorithm}");
        assert_eq!(on_server(20, algorithm, &plain, true), ["PP1"], "{algorithm} on a prefill server");
    }
    assert!(fired(20, "EAGLE", &FleetSpec::default()).is_empty(), "one stage");
    assert_eq!(
        at(20, &speculating("EAGLE"), &plain, &full()).violations.iter().find(|v| v.rule == "PP1").unwrap().message,
        "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"
    );

    assert_eq!(fired(21, "EAGLE3", &plain), ["PP1"]);
    assert_eq!(fired(21, "EAGLE", &stages(&["--enable-multi-layer-eagle"], false)), ["PP1"]);
    for algorithm in ["EAGLE", "nextn"] {
        assert_eq!(fired(21, algorithm, &plain), ["PP2"], "{algorithm} on a decode server");
        assert!(on_server(23, algorithm, &plain, true).is_empty(), "{algorithm} on a prefill server");
        assert_eq!(on_server(23, algorithm, &plain, false), ["PP2"], "{algorithm} without PD");
    }
    assert!(fired(21, "DSPARK", &plain).is_empty(), "SD6 refuses it on a decode server");

    let pp_spec = stages(&[], true);
    assert_eq!(fired(22, "EAGLE", &pp_spec), ["PP4"]);
    assert_eq!(on_server(22, "EAGLE", &pp_spec, true), ["PP4"]);
    assert_eq!(on_server(22, "DSPARK", &pp_spec, true), ["PP3"]);
    assert!(on_server(22, "EAGLE", &pp_spec, false).is_empty(), "the env's own place");
    assert_eq!(on_server(22, "EAGLE", &stages(&["--speculative-adaptive"], true), false), ["PP5"]);
    let dp_attention = FleetSpec { tensor_parallel: 2, data_parallel: 2, enable_dp_attention: true, ..pp_spec };
    assert_eq!(on_server(22, "EAGLE", &dp_attention, false), ["PP6"]);
}

/// The DFLASH and DSPARK handlers' checks of DP attention and pipeline stages: DSPARK ran one
/// stage only up to 0.5.20 (SD9); DFLASH refused DP attention up to 0.5.22 and from 0.5.23 needs
/// the DP LM head, no attention CP and no DP speculative prefill coordination (SD10-SD12); DSPARK
/// with DP attention needs the DP LM head, no attention CP, an all-to-all backend it takes and,
/// with one, static ragged verification (SD13-SD16), from 0.5.18 only with more than one DP group.
#[test]
fn dflash_and_dspark_with_dp_attention_need_the_dp_lm_head() {
    let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
        at(patch, &speculating(algorithm), decode, &full())
            .violations
            .into_iter()
            .filter(|v| ["SD9", "SD10", "SD11", "SD12", "SD13", "SD14", "SD15", "SD16", "PP1"].contains(&v.rule))
            .map(|v| (v.rule, v.message))
            .collect::<Vec<_>>()
    };
    let rules = |found: Vec<(&'static str, String)>| found.into_iter().map(|(rule, _)| rule).collect::<Vec<_>>();
    let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    assert_eq!(rules(fired(20, "DSPARK", &stages)), ["SD9"], "the handler's own check, not the validation's");
    assert!(rules(fired(21, "DSPARK", &stages)).is_empty(), "SD6 from 0.5.21");

    let dp_attention = |groups: i32, args: &[&str]| FleetSpec {
        tensor_parallel: 2,
        data_parallel: groups,
        enable_dp_attention: true,
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..FleetSpec::default()
    };
    let text = |found: Vec<(&'static str, String)>| found.into_iter().map(|(_, message)| message).collect::<Vec<_>>();
    assert_eq!(
        text(fired(19, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head"]))),
        ["Currently DFLASH speculative decoding does not support dp attention."]
    );
    assert_eq!(
        text(fired(22, "DFLASH", &dp_attention(2, &[]))),
        ["Currently DFLASH speculative decoding does not support dp attention on non-NPU devices."]
    );
    assert_eq!(rules(fired(23, "DFLASH", &dp_attention(2, &[]))), ["SD10"]);
    assert!(fired(23, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head"])).is_empty());
    assert_eq!(rules(fired(23, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head", "--attn-cp-size", "2"]))), ["SD11"]);
    let coordinated = FleetSpec {
        env: env("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "true").env,
        ..dp_attention(2, &["--enable-dp-lm-head"])
    };
    assert_eq!(rules(fired(23, "DFLASH", &coordinated)), ["SD12"]);

    assert_eq!(rules(fired(17, "DSPARK", &dp_attention(1, &[]))), ["SD13"], "the flag alone in 0.5.17");
    assert!(fired(18, "DSPARK", &dp_attention(1, &[])).is_empty(), "one DP group from 0.5.18");
    assert_eq!(rules(fired(23, "dspark", &dp_attention(2, &[]))), ["SD13"]);
    assert_eq!(
        text(fired(23, "DSPARK", &dp_attention(2, &["--enable-dp-lm-head", "--attn-cp-size=2"]))),
        ["DSpark with dp attention does not support context parallel (attn_cp_size=2)."]
    );

    // Its MoE all-to-all backends, per release, and the ragged verification they need.
    let mori = dp_attention(2, &["--enable-dp-lm-head", "--moe-a2a-backend", "mori"]);
    assert_eq!(
        text(fired(20, "DSPARK", &mori)),
        ["DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE) or 'megamoe', got 'mori'."]
    );
    assert!(fired(21, "DSPARK", &mori).is_empty());
    let compact = |fleet: FleetSpec| FleetSpec { env: env("SGLANG_RAGGED_VERIFY_MODE", "compact").env, ..fleet };
    assert_eq!(
        text(fired(21, "DSPARK", &compact(mori.clone()))),
        ["DSpark with dp attention + moe_a2a_backend='mori' requires SGLANG_RAGGED_VERIFY_MODE=static."]
    );
    assert!(fired(22, "DSPARK", &compact(dp_attention(2, &["--enable-dp-lm-head"]))).is_empty(), "the built-in MoE");
    let coordinated_dspark = FleetSpec {
        env: [("SGLANG_RAGGED_VERIFY_MODE", "compact"), ("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "1")]
            .map(|(name, value)| EnvVar { name: name.into(), value: Some(value.into()), value_from: None })
            .to_vec(),
        ..dp_attention(2, &["--enable-dp-lm-head"])
    };
    assert_eq!(rules(fired(22, "DSPARK", &coordinated_dspark)), ["SD16"]);
    assert_eq!(
        rules(fired(17, "DSPARK", &dp_attention(2, &["--enable-dp-lm-head", "--moe-a2a-backend=megamoe"]))),
        ["SD15"]
    );
}

/// HiSparse's validation pass: a DSA or DeepSeek-V4 model only (MiniMax-M3 sparse too from
/// 0.5.21, HS1), and no radix cache: a PD decode server has none unless decode radix cache (which
/// the PD hook refuses first, R18a), other servers need --disable-radix-cache (HS2).
#[test]
fn hisparse_needs_sparse_attention_and_no_radix_cache() {
    let hisparse = with(|s| s.hisparse = true);
    let fired = |patch: u16, settings: &DisaggregationSpec, layout: &AttentionLayout| {
        at(patch, settings, &FleetSpec::default(), layout)
            .violations
            .into_iter()
            .map(|v| v.rule)
            .filter(|r| ["HS1", "HS2", "R18a"].contains(r))
            .collect::<Vec<_>>()
    };
    let dsa = fixture("deepseek-v3.2-exp");
    let m3 = fixture("minimax-m3-sparse");
    assert_eq!(fired(23, &hisparse, &full()), ["HS1"]);
    assert_eq!(fired(23, &hisparse, &mla()), ["HS1"], "MLA without DSA");
    assert!(fired(23, &hisparse, &dsa).is_empty());
    assert!(fired(23, &hisparse, &dsv4()).is_empty());
    assert_eq!(fired(20, &hisparse, &m3), ["HS1"]);
    assert!(fired(21, &hisparse, &m3).is_empty());
    let radix = with(|s| {
        s.hisparse = true;
        s.decode_radix_cache = true;
    });
    let mut both = fired(23, &radix, &dsa);
    both.sort_unstable();
    assert_eq!(both, ["HS2", "R18a"]);

    // A prefill server keeps its radix cache unless told otherwise.
    let server = |args: &[&str]| {
        let fleet = FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
        let input = PolicyInput::alone(&hisparse, &fleet, &dsa, v0_5(23));
        let rules = super::role::evaluate_non_decode(input, true).violations.into_iter().map(|v| v.rule);
        rules.filter(|r| r.starts_with("HS")).collect::<Vec<_>>()
    };
    assert_eq!(server(&[]), ["HS2"]);
    assert!(server(&["--disable-radix-cache"]).is_empty());
}
