//! Every rule in Reject and Rewrite mode, with SGLang's exact messages.

use k8s_openapi::api::core::v1::EnvVar;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::api::{HicacheHostMemoryMode, MambaRadixCacheStrategy, PrefillSpec, TransferBackend};
use crate::release::v0_5;

fn layout(config: serde_json::Value) -> AttentionLayout {
    layout::resolve(&config, ResolveOptions::default()).expect("test layout")
}

/// The layout of `tests/fixtures/configs/<name>.json`, as the newest release resolves it.
pub(super) fn fixture(name: &str) -> AttentionLayout {
    let path = format!("{}/tests/fixtures/configs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    layout(serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
}

fn full() -> AttentionLayout {
    layout(
        json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8, "head_dim": 128}),
    )
}

fn hybrid_swa() -> AttentionLayout {
    layout(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    }))
}

fn pure_swa() -> AttentionLayout {
    layout(json!({
        "architectures": ["MiMoV2FlashForCausalLM"], "num_hidden_layers": 4, "sliding_window_size": 128,
        "head_dim": 192, "hybrid_layer_pattern": [1, 1, 1, 1]
    }))
}

fn ssm() -> AttentionLayout {
    layout(json!({
        "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 8, "full_attention_interval": 4, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128
    }))
}

fn mla() -> AttentionLayout {
    layout(
        json!({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64}),
    )
}

fn dsv4() -> AttentionLayout {
    layout(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
        "compress_ratios": [0, 4, 128, 0]
    }))
}

fn gemma4() -> AttentionLayout {
    layout(json!({
        "architectures": ["Gemma4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 512, "head_dim": 256,
        "global_head_dim": 256, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    }))
}

fn kimi_linear() -> AttentionLayout {
    layout(json!({
        "architectures": ["KimiLinearForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "linear_attn_config": {"full_attn_layers": [4], "kda_layers": [1, 2, 3], "num_heads": 8, "head_dim": 128}
    }))
}

fn with(edit: impl FnOnce(&mut DisaggregationSpec)) -> DisaggregationSpec {
    let mut settings = DisaggregationSpec::default();
    edit(&mut settings);
    settings
}

fn host_pool(s: &mut DisaggregationSpec) {
    s.retraction_backup = Some(RetractionBackup::HostPool);
}

/// The release the catalogue (`sglang-rules.md`) describes best (drift §0.1): the tests of the
/// catalogue's rules run at it; release differences have their own tests.
const CATALOGUE: Release = v0_5(19);

fn run(settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> Verdict {
    run_at(CATALOGUE, settings, decode, layout)
}

/// The rules of a verdict's violations, in order.
fn rule_ids(verdict: Verdict) -> Vec<&'static str> {
    verdict.violations.iter().map(|v| v.rule).collect()
}

fn run_at(release: Release, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> Verdict {
    evaluate(PolicyInput::alone(settings, decode, layout, release))
}

fn both_modes(settings: DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> (Verdict, Verdict) {
    let reject = run(&DisaggregationSpec { on_invalid: OnInvalid::Reject, ..settings.clone() }, decode, layout);
    let rewrite = run(&DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..settings }, decode, layout);
    (reject, rewrite)
}

fn ids(verdict: &Verdict) -> Vec<(&'static str, &'static str)> {
    verdict.violations.iter().map(|v| (v.rule, v.field)).collect()
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn unified_radix_tree() -> FleetSpec {
    FleetSpec { env: vec![env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1")], ..FleetSpec::default() }
}

const BACKUP: &str = "spec.disaggregation.retractionBackup";
const RADIX: &str = "spec.disaggregation.decodeRadixCache";

/// A rule whose safe rewrite sets `field` from `from` to `to`.
fn assert_rewritable(
    settings: DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
    rule: &str,
    field: &str,
    message: &str,
    (from, to): (&str, &str),
) {
    let (reject, rewrite) = both_modes(settings, decode, layout);
    assert_eq!(reject.outcome, Outcome::Rejected, "{rule}: {reject:?}");
    let violation = reject.violations.iter().find(|v| v.rule == rule && v.field == field).unwrap_or_else(|| {
        panic!("{rule} {field} not among {:?}", ids(&reject));
    });
    assert_eq!(violation.message, message, "{rule}");
    assert!(violation.fix.contains("onInvalid: Rewrite"), "{rule}: {}", violation.fix);
    assert_eq!(rewrite.outcome, Outcome::Rewritten, "{rule}: {rewrite:?}");
    assert!(rewrite.violations.is_empty(), "{rule}: {:?}", rewrite.violations);
    let change = rewrite.rewrites.iter().find(|r| r.field == field).expect("rewrite recorded");
    assert_eq!((change.rule.as_str(), change.from.as_str(), change.to.as_str()), (rule, from, to));
}

/// A rule with no safe rewrite: rejected in both modes.
fn assert_manual(
    settings: DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
    rule: &str,
    field: &str,
    message: &str,
) {
    let (reject, rewrite) = both_modes(settings, decode, layout);
    for verdict in [&reject, &rewrite] {
        assert_eq!(verdict.outcome, Outcome::Rejected, "{rule}: {verdict:?}");
        let violation = verdict.violations.iter().find(|v| v.rule == rule && v.field == field).unwrap_or_else(|| {
            panic!("{rule} {field} not among {:?}", ids(verdict));
        });
        assert_eq!(violation.message, message, "{rule}");
        assert!(!violation.fix.contains("onInvalid: Rewrite"), "{rule}: {}", violation.fix);
    }
}

#[test]
fn r1_host_pool_with_ssm() {
    assert_rewritable(
        with(host_pool),
        &FleetSpec::default(),
        &ssm(),
        "R1",
        BACKUP,
        "Host-pool retraction does not support Mamba models.",
        ("host_pool", "cpu_tensor"),
    );
}

#[test]
fn r2_host_pool_with_pure_swa() {
    assert_rewritable(
        with(host_pool),
        &FleetSpec::default(),
        &pure_swa(),
        "R2",
        BACKUP,
        "Host-pool retraction does not support pure-SWA models.",
        ("host_pool", "cpu_tensor"),
    );
}

#[test]
fn r2_pipeline_stage_without_full_layer() {
    let layout = layout(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 64,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    }));
    let pp2 = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
    let verdict = run(&with(host_pool), &pp2, &layout);
    assert_eq!(ids(&verdict), vec![("R2", BACKUP)]);
    assert!(verdict.violations[0].fix.starts_with("pipeline stage 0 (layers 0..2)"), "{}", verdict.violations[0].fix);
    assert_eq!(run(&with(host_pool), &FleetSpec::default(), &layout).outcome, Outcome::Valid, "PP=1 has full layers");
    assert_eq!(automatic_retraction_backup(&with(|_| {}), &pp2, &layout, CATALOGUE), RetractionBackup::CpuTensor);
}

#[test]
fn r8_host_pool_with_decode_radix_cache_on_pure_swa() {
    let settings = with(|s| {
        host_pool(s);
        s.decode_radix_cache = true;
    });
    let (reject, rewrite) = both_modes(settings, &FleetSpec::default(), &pure_swa());
    // R13 does not fire: kvpilot adds SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 on 0.5.19.
    assert_eq!(ids(&reject), vec![("R8", BACKUP), ("R16", RADIX)]);
    assert_eq!(
        reject.violations[0].message,
        "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached."
    );
    assert_eq!(rewrite.outcome, Outcome::Rewritten);
    let rewrites: Vec<_> = rewrite.rewrites.iter().map(|r| (r.rule.as_str(), r.field.as_str())).collect();
    assert_eq!(rewrites, vec![("R8", BACKUP), ("R16", RADIX)]);
}

#[test]
fn r9_host_pool_with_mla_and_deepseek_v4() {
    for layout in [mla(), dsv4()] {
        assert_rewritable(
            with(host_pool),
            &FleetSpec::default(),
            &layout,
            "R9",
            BACKUP,
            "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
            ("host_pool", "cpu_tensor"),
        );
    }
}

#[test]
fn s2_s3_s4_server_argument_checks() {
    let decode = FleetSpec::default();
    assert_rewritable(
        with(|s| {
            host_pool(s);
            s.decode_context_parallel = 2;
        }),
        &decode,
        // DCP needs an MLA pool (R19d); host_pool on MLA is R9, fixed by the same rewrite.
        &mla(),
        "S2",
        BACKUP,
        "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
        ("host_pool", "cpu_tensor"),
    );
    assert_rewritable(
        with(|s| {
            host_pool(s);
            s.priority_scheduling = true;
        }),
        &decode,
        &full(),
        "S3",
        BACKUP,
        "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption when priority \
         scheduling is enabled.",
        ("host_pool", "cpu_tensor"),
    );
    let preemption_off = with(|s| {
        host_pool(s);
        s.priority_scheduling = true;
        s.disable_priority_preemption = true;
    });
    assert_eq!(run(&preemption_off, &decode, &full()).outcome, Outcome::Valid);
    assert_rewritable(
        with(|s| {
            host_pool(s);
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("file".into());
        }),
        &decode,
        &full(),
        "S4",
        BACKUP,
        "The arguments disaggregation-decode-enable-offload-kvcache and disaggregation-decode-retraction-backup=host_pool \
         are mutually exclusive: both build a decode host pool.",
        ("host_pool", "cpu_tensor"),
    );
}

const OFFLOAD: &str = "spec.disaggregation.decodeOffloadKvCache";
const HIERARCHICAL: &str = "spec.disaggregation.hierarchicalCache";

#[test]
fn s6_decode_offload_needs_a_storage_backend() {
    let decode = FleetSpec::default();
    assert_rewritable(
        with(|s| s.decode_offload_kv_cache = true),
        &decode,
        &full(),
        "S6",
        OFFLOAD,
        "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend is \
         provided.",
        ("true", "false"),
    );
    let with_backend = with(|s| {
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
    });
    assert_eq!(run(&with_backend, &decode, &full()).outcome, Outcome::Valid);
    let backend_alone = with(|s| s.hicache_storage_backend = Some("file".into()));
    assert_eq!(run(&backend_alone, &decode, &full()).outcome, Outcome::Valid, "a backend without offload is fine");
}

#[test]
fn s7_hierarchical_cache_needs_the_decode_radix_cache() {
    let decode = FleetSpec::default();
    assert_rewritable(
        with(|s| s.hierarchical_cache = true),
        &decode,
        &full(),
        "S7",
        HIERARCHICAL,
        "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be used at \
         the same time. Please use only one of them.",
        ("true", "false"),
    );
    let under_radix = with(|s| {
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
    });
    let verdict = run(&under_radix, &decode, &full());
    assert_eq!(verdict.outcome, Outcome::Valid, "{:?}", verdict.violations);
    assert!(verdict.violations.iter().all(|v| v.rule != "S7"));
}

/// On a server that is not a PD decode server, HiCache, LMCache and the external cache linker sit
/// under the server's own radix cache, which `--disable-radix-cache` turns off (S7, L3, X1);
/// before, the guard left them to SGLang there.
#[test]
fn s7_l3_x1_read_the_own_radix_cache_of_a_server_without_pd_decode() {
    let rules = |settings: &DisaggregationSpec, args: &[&str], prefill: bool| {
        let server = FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
        let verdict = role::evaluate_non_decode(PolicyInput::alone(settings, &server, &full(), v0_5(23)), prefill);
        verdict.violations.iter().map(|v| v.rule).filter(|rule| ["S7", "L3", "X1"].contains(rule)).collect::<Vec<_>>()
    };
    let hierarchical = with(|s| s.hierarchical_cache = true);
    let lmcache = with(|s| s.lmcache = true);
    let linker = with(|s| s.unified_cache_external_linker = true);
    for prefill in [false, true] {
        for (settings, rule) in [(&hierarchical, "S7"), (&lmcache, "L3"), (&linker, "X1")] {
            assert!(rules(settings, &[], prefill).is_empty(), "{rule} with the radix cache, prefill {prefill}");
            assert_eq!(rules(settings, &["--disable-radix-cache"], prefill), [rule], "prefill {prefill}");
        }
    }
    // A decode server's radix cache is decode radix cache's, whatever its arguments say.
    let decode = FleetSpec { extra_args: vec!["--disable-radix-cache".into()], ..FleetSpec::default() };
    let under_radix = with(|s| {
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
    });
    assert!(run(&under_radix, &decode, &full()).violations.iter().all(|v| v.rule != "S7"));
}

#[test]
fn s8_the_swa_full_tokens_ratio_is_above_0_and_at_most_1() {
    let ratio = |value: f64| FleetSpec { swa_full_tokens_ratio: Some(value), ..FleetSpec::default() };
    let message = "--swa-full-tokens-ratio should be in range (0, 1.0].";
    for value in [0.0, -0.5, 1.01, 4.0] {
        assert_manual(
            DisaggregationSpec::default(),
            &ratio(value),
            &hybrid_swa(),
            "S8",
            "spec.decode.swaFullTokensRatio",
            message,
        );
    }
    for value in [0.01, 0.5, 1.0] {
        assert_eq!(
            run(&DisaggregationSpec::default(), &ratio(value), &hybrid_swa()).outcome,
            Outcome::Valid,
            "{value}"
        );
    }
    // SGLang range-checks the resolved value, for every model (a full pool ignores it).
    assert_eq!(
        ids(&run(&DisaggregationSpec::default(), &ratio(2.0), &full())),
        [("S8", "spec.decode.swaFullTokensRatio")]
    );
    assert_eq!(run(&DisaggregationSpec::default(), &FleetSpec::default(), &hybrid_swa()).outcome, Outcome::Valid);
}

#[test]
fn s8_step_3_5_with_hierarchical_cache_resets_the_ratio_before_the_check() {
    let step = layout(serde_json::from_str(include_str!("../../tests/fixtures/configs/step-3.5-flash.json")).unwrap());
    assert_eq!(step.architecture, "Step3p5ForCausalLM");
    let decode = FleetSpec { swa_full_tokens_ratio: Some(3.0), ..FleetSpec::default() };
    let rules = |settings: &DisaggregationSpec| -> Vec<&str> {
        run(settings, &decode, &step).violations.iter().map(|v| v.rule).collect()
    };
    assert!(rules(&DisaggregationSpec::default()).contains(&"S8"));
    let hicache = with(|s| {
        s.decode_radix_cache = true;
        s.hierarchical_cache = true;
    });
    assert!(!rules(&hicache).contains(&"S8"), "{:?}", rules(&hicache));
}

#[test]
fn r13_to_r17_decode_radix_cache_by_layout() {
    let radix = || with(|s| s.decode_radix_cache = true);
    // 0.5.19–0.5.20: kvpilot sets the env var the release needs; a spec that sets it false is R13.
    let added = run(&radix(), &FleetSpec::default(), &hybrid_swa());
    assert_eq!(added.outcome, Outcome::Valid);
    assert_eq!(added.effective.decode_env, vec![env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1")]);
    let turned_off = FleetSpec { env: vec![env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "0")], ..FleetSpec::default() };
    assert_rewritable(
        radix(),
        &turned_off,
        &hybrid_swa(),
        "R13",
        RADIX,
        "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the unified \
         radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).",
        ("true", "false"),
    );
    assert_eq!(run(&radix(), &unified_radix_tree(), &hybrid_swa()).outcome, Outcome::Valid);
    assert_rewritable(
        with(|s| {
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        }),
        &unified_radix_tree(),
        &hybrid_swa(),
        "R14",
        RADIX,
        "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently supports only \
         device-resident cache and is incompatible with --enable-hierarchical-cache.",
        ("true", "false"),
    );
    assert_rewritable(
        radix(),
        &unified_radix_tree(),
        &dsv4(),
        "R15",
        RADIX,
        "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV (c4/c128/indexer) yet.",
        ("true", "false"),
    );
    assert_rewritable(
        radix(),
        &unified_radix_tree(),
        &gemma4(),
        "R16",
        RADIX,
        "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) yet.",
        ("true", "false"),
    );
    assert_rewritable(
        radix(),
        &FleetSpec::default(),
        &ssm(),
        "R17",
        RADIX,
        "--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models",
        ("true", "false"),
    );
    assert_eq!(run(&radix(), &FleetSpec::default(), &full()).outcome, Outcome::Valid);
}

#[test]
fn r18_decode_radix_cache_with_fake_backend_or_speculation() {
    assert_rewritable(
        with(|s| {
            s.decode_radix_cache = true;
            s.transfer_backend = TransferBackend::Fake;
        }),
        &FleetSpec::default(),
        &full(),
        "R18b",
        RADIX,
        "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake",
        ("true", "false"),
    );
    assert_rewritable(
        with(|s| {
            s.decode_radix_cache = true;
            s.speculative_algorithm = Some("EAGLE".into());
        }),
        &FleetSpec::default(),
        &full(),
        "R18c",
        RADIX,
        "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding (--speculative-algorithm EAGLE)",
        ("true", "false"),
    );
}

#[test]
fn r19_decode_context_parallel() {
    let dcp = |edit: fn(&mut DisaggregationSpec)| {
        with(|s| {
            s.decode_context_parallel = 2;
            edit(s);
        })
    };
    assert_manual(
        dcp(|s| s.transfer_backend = TransferBackend::Mori),
        &FleetSpec::default(),
        &full(),
        "R19",
        "spec.disaggregation.transferBackend",
        "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic benchmarking, \
         got 'mori'.",
    );
    assert_rewritable(
        dcp(|s| s.decode_radix_cache = true),
        &FleetSpec::default(),
        &mla(),
        "R19",
        RADIX,
        "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported.",
        ("true", "false"),
    );
    assert_rewritable(
        dcp(|s| {
            // HiCache sits under the decode radix cache (S7); both are refused with DCP.
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        }),
        &FleetSpec::default(),
        &mla(),
        "R19",
        "spec.disaggregation.hierarchicalCache",
        "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.",
        ("true", "false"),
    );
}

#[test]
fn r20_staging_buffer_needs_mooncake_or_nixl() {
    let decode = FleetSpec { env: vec![env("SGLANG_DISAGG_STAGING_BUFFER", "true")], ..FleetSpec::default() };
    assert_manual(
        with(|s| s.transfer_backend = TransferBackend::Mori),
        &decode,
        &full(),
        "R20",
        "spec.decode.env",
        "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got 'mori'.",
    );
    assert_eq!(run(&with(|_| {}), &decode, &full()).outcome, Outcome::Valid, "mooncake is fine");
}

fn prefill(tp: i32) -> Option<PrefillSpec> {
    Some(PrefillSpec { tensor_parallel: tp, ..PrefillSpec::default() })
}

#[test]
fn t1_tp_mismatch_on_non_mla_swa_models_is_never_rewritten() {
    let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
    let mori = |s: &mut DisaggregationSpec| {
        s.prefill = prefill(2);
        s.transfer_backend = TransferBackend::Mori;
    };
    assert_manual(
        with(mori),
        &decode,
        &hybrid_swa(),
        "T1",
        "spec.decode.tensorParallel",
        "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size=2, decode_tp_size=4)",
    );
    let fix = &run(&with(mori), &decode, &hybrid_swa()).violations[0].fix;
    assert!(fix.contains("prefill attention TP 2"), "{fix}");
    // Attention TP under DP attention is TP ÷ DP: 4 ÷ 2 matches prefill's 2.
    let dp_attention =
        FleetSpec { tensor_parallel: 4, data_parallel: 2, enable_dp_attention: true, ..FleetSpec::default() };
    assert_eq!(run(&with(|s| s.prefill = prefill(2)), &dp_attention, &hybrid_swa()).outcome, Outcome::Valid);
    // MLA-like pools, full pools and SSM state may differ in TP.
    for layout in [mla(), dsv4(), full(), ssm()] {
        assert_eq!(run(&with(|s| s.prefill = prefill(2)), &decode, &layout).outcome, Outcome::Valid);
    }
    // Without the prefill side, T1 cannot be checked: a warning, not a violation.
    let verdict = run(&with(|_| {}), &decode, &hybrid_swa());
    assert_eq!(verdict.outcome, Outcome::Valid);
    assert!(verdict.warnings.iter().any(|w| w.contains("T1")), "{:?}", verdict.warnings);
}

/// SGLang resolves and validates the Mamba radix-cache strategy only where the server keeps a radix
/// cache (`_mamba_radix_cache_resolution` returns early on `disable_radix_cache`): a decode server
/// on its own, only with decode radix cache; a service, always, since its prefill servers keep
/// theirs and run with its strategy. Before, kvpilot refused M1 and M3 on every decode server and
/// M1 on models without Mamba state.
#[test]
fn m1_to_m5_mamba_strategies_where_the_radix_cache_runs() {
    let strategy = |strategy, radix| {
        with(move |s| {
            s.mamba_radix_cache_strategy = Some(strategy);
            s.decode_radix_cache = radix;
        })
    };
    let rules_on =
        |service: bool, patch, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
            let input = PolicyInput::alone(settings, decode, layout, v0_5(patch));
            let verdict = if service { evaluate(input) } else { evaluate_decode_server(input) };
            verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
        };
    let lazy = "extra_buffer_lazy unsupported under PD disaggregation; use --mamba-radix-cache-strategy extra_buffer.";
    let decode = FleetSpec::default();
    let overlap_off = vec!["--disable-overlap-schedule".to_string()];
    let paged = FleetSpec { page_size: Some(16), extra_args: overlap_off.clone(), ..FleetSpec::default() };
    let no_buffer = "no_buffer only supports page_size=1.";
    for radix in [false, true] {
        let lazy_settings = strategy(MambaRadixCacheStrategy::ExtraBufferLazy, radix);
        assert_eq!(rules_on(true, 21, &lazy_settings, &decode, &ssm()), [("M1", lazy.to_string())]);
        let alone = rules_on(false, 21, &lazy_settings, &decode, &ssm());
        assert_eq!(alone, if radix { vec![("M1", lazy.to_string())] } else { vec![] }, "decode radix cache {radix}");
        let no_buffer_settings = strategy(MambaRadixCacheStrategy::NoBuffer, radix);
        assert_eq!(rules_on(true, 21, &no_buffer_settings, &paged, &ssm()), [("M3", no_buffer.to_string())]);
        let alone = rules_on(false, 21, &no_buffer_settings, &paged, &ssm());
        assert_eq!(
            alone,
            if radix { vec![("M3", no_buffer.to_string())] } else { vec![] },
            "decode radix cache {radix}"
        );
    }
    // no_buffer needs the overlap schedule off, which SGLang's automatic strategy does itself (M5).
    let overlap = "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.";
    let no_buffer_settings = strategy(MambaRadixCacheStrategy::NoBuffer, true);
    assert_eq!(rules_on(false, 21, &no_buffer_settings, &decode, &ssm()), [("M5", overlap.to_string())]);
    let without_overlap = FleetSpec { extra_args: overlap_off, ..FleetSpec::default() };
    assert!(rules_on(false, 21, &no_buffer_settings, &without_overlap, &ssm()).is_empty());
    // The Mamba track interval (256, or --mamba-track-interval in extraArgs) must be a multiple of the
    // page size under extra_buffer, which is also SGLang's automatic choice (M2, a bare assert).
    let m2 = "AssertionError (assert view.mamba_track_interval % view.page_size == 0): --mamba-track-interval 256 \
              is not a multiple of --page-size 192";
    let pages_192 = FleetSpec { page_size: Some(192), ..FleetSpec::default() };
    for chosen in [None, Some(MambaRadixCacheStrategy::ExtraBuffer)] {
        let settings = with(|s| s.mamba_radix_cache_strategy = chosen);
        assert_eq!(rules_on(true, 23, &settings, &pages_192, &ssm()), [("M2", m2.to_string())], "{chosen:?}");
        assert!(rules_on(false, 23, &settings, &pages_192, &ssm()).is_empty(), "no radix cache on this decode server");
    }
    let interval_384 =
        FleetSpec { extra_args: vec!["--mamba-track-interval".into(), "384".into()], ..pages_192.clone() };
    assert!(rules_on(true, 23, &DisaggregationSpec::default(), &interval_384, &ssm()).is_empty());
    assert!(rules_on(true, 23, &DisaggregationSpec::default(), &pages_192, &full()).is_empty(), "no Mamba state");
    // The model's chunk size (64 where its config class has none) and the page size must divide one
    // another (M6): 48 divides the interval 96 but not 64.
    let m6 = "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size=64, \
              page_size=48";
    let interval_96 = FleetSpec {
        page_size: Some(48),
        extra_args: vec!["--mamba-track-interval".into(), "96".into()],
        ..FleetSpec::default()
    };
    assert_eq!(rules_on(true, 23, &DisaggregationSpec::default(), &interval_96, &ssm()), [("M6", m6.to_string())]);
    // An extra-buffer strategy on a model without Mamba state: refused from 0.5.21, ignored before.
    let extra = strategy(MambaRadixCacheStrategy::ExtraBuffer, false);
    let m4 = "--mamba-radix-cache-strategy extra_buffer needs mamba state, got LlamaForCausalLM.";
    assert_eq!(rules_on(true, 21, &extra, &decode, &full()), [("M4", m4.to_string())]);
    assert!(rules_on(true, 20, &extra, &decode, &full()).is_empty());
    assert!(rules_on(false, 23, &extra, &decode, &full()).is_empty(), "a decode server without its radix cache");
    let lazy_llama = strategy(MambaRadixCacheStrategy::ExtraBufferLazy, false);
    assert!(rules_on(true, 20, &lazy_llama, &decode, &full()).is_empty(), "M1 is about Mamba state");
    let rewritten = run_at(v0_5(23), &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..extra }, &decode, &full());
    assert_eq!(rewritten.outcome, Outcome::Rewritten);
    assert_eq!((rewritten.rewrites[0].from.as_str(), rewritten.rewrites[0].to.as_str()), ("extra_buffer", "unset"));
}

/// A prefill server, or one without PD, given `--disable-radix-cache` keeps no radix cache, so
/// SGLang resolves no Mamba strategy on it (`_mamba_radix_cache_resolution` returns early); a PD
/// decode server's radix cache is decided by decode radix cache alone (the PD hook sets it over a
/// given flag). Before, kvpilot reported the Mamba page-size rules on such a prefill server.
#[test]
fn mamba_rules_skip_servers_given_disable_radix_cache() {
    let no_buffer = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer));
    let ssm = ssm();
    let page_size = |extra: &[&str]| FleetSpec {
        page_size: Some(16),
        extra_args: ["--disable-overlap-schedule"].iter().chain(extra).map(|a| a.to_string()).collect(),
        ..FleetSpec::default()
    };
    let prefill = |fleet: &FleetSpec| {
        rule_ids(role::evaluate_non_decode(PolicyInput::alone(&no_buffer, fleet, &ssm, v0_5(23)), true))
    };
    assert_eq!(prefill(&page_size(&[])), ["M3"]);
    assert!(prefill(&page_size(&["--disable-radix-cache"])).is_empty());
    // A service without decode radix cache whose prefill fleet turns its radix cache off.
    let service = |prefill_args: &[&str]| {
        let prefill_fleet = page_size(prefill_args);
        let decode = page_size(&[]);
        let input = PolicyInput {
            prefill_fleet: Some(&prefill_fleet),
            ..PolicyInput::alone(&no_buffer, &decode, &ssm, v0_5(23))
        };
        rule_ids(evaluate(input))
    };
    assert_eq!(service(&[]), ["M3"]);
    assert!(service(&["--disable-radix-cache"]).is_empty());
    // On a decode server with decode radix cache the flag changes nothing.
    let radix = with(|s| {
        s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer);
        s.decode_radix_cache = true;
    });
    let decode = page_size(&["--disable-radix-cache"]);
    assert_eq!(rule_ids(evaluate_decode_server(PolicyInput::alone(&radix, &decode, &ssm, v0_5(23)))), ["M3"]);
}

#[test]
fn u1_to_u3_unified_memory() {
    let unified = |backend| {
        with(move |s| {
            s.enable_unified_memory = true;
            s.transfer_backend = backend;
        })
    };
    let field = "spec.disaggregation.enableUnifiedMemory";
    let verdict = run(&unified(TransferBackend::Nixl), &FleetSpec::default(), &kimi_linear());
    assert_eq!(ids(&verdict), vec![("U1", field)]);
    let verdict = run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &ssm());
    assert_eq!(ids(&verdict), vec![("U2", field)]);
    assert!(verdict.violations[0].message.starts_with(
        "--enable-unified-memory with PD disaggregation currently supports only MLA hybrid-Mamba models (e.g. kimi-linear)"
    ));
    let verdict = run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &hybrid_swa());
    assert_eq!(ids(&verdict), vec![("U3", field)]);
    assert_eq!(
        run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &kimi_linear()).outcome,
        Outcome::Valid,
        "MLA hybrid-Mamba on mooncake is the supported case"
    );
    let rewritten = run(
        &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..unified(TransferBackend::Mooncake) },
        &FleetSpec::default(),
        &ssm(),
    );
    assert_eq!((rewritten.outcome, rewritten.effective.enable_unified_memory), (Outcome::Rewritten, false));
}

#[test]
fn automatic_backup_follows_sglang() {
    let decode = FleetSpec::default();
    let unset = with(|_| {});
    for (layout, expected) in [
        (full(), RetractionBackup::HostPool),
        (hybrid_swa(), RetractionBackup::HostPool),
        (pure_swa(), RetractionBackup::CpuTensor),
        (ssm(), RetractionBackup::CpuTensor),
        (mla(), RetractionBackup::CpuTensor),
        (dsv4(), RetractionBackup::CpuTensor),
    ] {
        let verdict = run(&unset, &decode, &layout);
        assert_eq!(verdict.outcome, Outcome::Valid);
        assert_eq!(verdict.effective.retraction_backup, expected, "{:?}", layout.kv_pool);
        assert_eq!(verdict.effective.retraction_backup_source, SettingSource::Auto);
    }
    assert_eq!(run(&unset, &decode, &full()).effective.host_pool_ratio, Some(BACKUP_ONLY_HOST_POOL_RATIO));
    let hicache = run(&with(|s| s.hierarchical_cache = true), &decode, &full()).effective;
    assert_eq!((hicache.retraction_backup, hicache.host_pool_ratio), (RetractionBackup::HostPool, Some(2.0)));
    for edit in [
        (|s: &mut DisaggregationSpec| s.decode_radix_cache = true) as fn(&mut DisaggregationSpec),
        |s| s.decode_offload_kv_cache = true,
        |s| s.priority_scheduling = true,
        |s| s.decode_context_parallel = 2,
        |s| s.enable_unified_memory = true,
    ] {
        // Unified memory excludes host_pool from 0.5.20 on.
        let verdict = run_at(v0_5(20), &with(edit), &decode, &full());
        assert_eq!(verdict.effective.retraction_backup, RetractionBackup::CpuTensor, "{:?}", verdict.settings);
        assert_eq!(verdict.effective.host_pool_ratio, None);
    }
    let cpu = run(&with(|s| s.host_pool_ratio = Some(0.5)), &decode, &ssm());
    assert!(cpu.warnings.iter().any(|w| w.contains("hostPoolRatio has no effect")), "{:?}", cpu.warnings);
    let offload = with(|s| {
        s.host_pool_ratio = Some(0.5);
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
    });
    let sized = run(&offload, &decode, &full());
    assert!(!sized.warnings.iter().any(|w| w.contains("hostPoolRatio")), "decode offload's pool: {:?}", sized.warnings);
}

#[test]
fn violations_are_reported_in_rule_order_and_deterministically() {
    let settings = with(|s| {
        host_pool(s);
        s.decode_context_parallel = 2;
        s.priority_scheduling = true;
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
        s.decode_radix_cache = true;
        s.transfer_backend = TransferBackend::Fake;
        s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBufferLazy);
    });
    let first = run(&settings, &FleetSpec::default(), &ssm());
    let rules: Vec<_> = first.violations.iter().map(|v| v.rule).collect();
    // 0.5.19 lets DCP use the fake backend; DCP needs an MLA pool (R19d), decode offload an MHA or MLA one (O1).
    assert_eq!(rules, vec!["S2", "S3", "S4", "R1", "R17", "R18b", "R19", "R19d", "O1", "M1"]);
    for _ in 0..10 {
        assert_eq!(run(&settings, &FleetSpec::default(), &ssm()), first);
    }
    let rewrite =
        run(&DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..settings }, &FleetSpec::default(), &ssm());
    // DCP on an SSM model (R19d) has no safe rewrite, so Rewrite mode still rejects.
    assert_eq!(rewrite.outcome, Outcome::Rejected);
    assert_eq!(ids(&rewrite), vec![("R19d", "spec.disaggregation.decodeContextParallel")]);
    let fields: Vec<_> = rewrite.rewrites.iter().map(|r| (r.rule.as_str(), r.field.as_str())).collect();
    assert_eq!(
        fields,
        vec![
            ("S2", BACKUP),
            ("R17", RADIX),
            ("O1", "spec.disaggregation.decodeOffloadKvCache"),
            ("M1", "spec.disaggregation.mambaRadixCacheStrategy")
        ],
        "one rewrite per field, by the first rule that needed it (M1 for the prefill servers, which keep \
         their radix cache)"
    );
}

#[test]
fn violation_display_is_rule_field_message() {
    let verdict = run(&with(host_pool), &FleetSpec::default(), &pure_swa());
    assert_eq!(
        verdict.violations[0].to_string(),
        "R2 spec.disaggregation.retractionBackup: Host-pool retraction does not support pure-SWA models. (fix: use \
         cpu_tensor or leave retractionBackup unset; or set onInvalid: Rewrite to let kvpilot rewrite it)"
    );
}

fn any_layout() -> impl Strategy<Value = AttentionLayout> {
    prop::sample::select(vec![full(), hybrid_swa(), pure_swa(), ssm(), mla(), dsv4(), gemma4(), kimi_linear()])
}

prop_compose! {
    fn any_settings()(
        backup in prop::option::of(prop::sample::select(vec![RetractionBackup::CpuTensor, RetractionBackup::HostPool, RetractionBackup::None])),
        rewrite in any::<bool>(),
        backend in prop::sample::select(vec![TransferBackend::Mooncake, TransferBackend::Nixl, TransferBackend::Mori, TransferBackend::Fake]),
        flags in prop::array::uniform10(any::<bool>()),
        dcp in 1..4i32,
        strategy in prop::option::of(prop::sample::select(vec![
            MambaRadixCacheStrategy::NoBuffer, MambaRadixCacheStrategy::ExtraBuffer, MambaRadixCacheStrategy::ExtraBufferLazy])),
        prefill_tp in prop::option::of(1..9i32),
        prefill_page in prop::option::of(1..3i32),
        prefill_dtype in prop::option::of(prop::sample::select(vec!["auto", "fp8_e4m3", "mxfp8"])),
        speculative in any::<bool>(),
        storage_backend in prop::option::of(prop::sample::select(vec!["file", "dynamic", "mooncake"])),
        host_receive in prop::option::of(prop::sample::select(vec![-0.5, 0.0, 0.5, 1.0])),
        buffer_only in any::<bool>(),
    ) -> DisaggregationSpec {
        DisaggregationSpec {
            retraction_backup: backup,
            on_invalid: if rewrite { OnInvalid::Rewrite } else { OnInvalid::Reject },
            transfer_backend: backend,
            prefill: prefill_tp.map(|tp| PrefillSpec {
                tensor_parallel: tp,
                page_size: prefill_page,
                kv_cache_dtype: prefill_dtype.map(str::to_string),
                ..PrefillSpec::default()
            }),
            bootstrap_port: 8998,
            decode_radix_cache: flags[0],
            decode_offload_kv_cache: flags[1],
            hierarchical_cache: flags[2],
            priority_scheduling: flags[3],
            disable_priority_preemption: flags[4],
            decode_context_parallel: dcp,
            speculative_algorithm: speculative.then(|| "EAGLE".to_string()),
            speculative_draft_model: None,
            mamba_radix_cache_strategy: strategy,
            host_pool_ratio: None,
            enable_unified_memory: flags[5],
            hicache_storage_backend: storage_backend.map(str::to_string),
            lmcache: flags[6],
            unified_cache_external_linker: flags[7],
            hisparse: flags[8] && flags[9],
            decode_host_receive_threshold: host_receive,
            hicache_host_memory_mode: buffer_only.then_some(crate::api::HicacheHostMemoryMode::BufferOnly),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// What Rewrite mode produces is valid as written; Reject mode rejects exactly when
    /// something is violated.
    #[test]
    fn rewritten_settings_are_valid_as_written(
        settings in any_settings(), layout in any_layout(), tp in 1..9i32, pp in 1..3i32, page in 1..3i32,
        unified_tree in prop::option::of(any::<bool>()), dtype in prop::option::of(prop::sample::select(vec!["auto", "mxfp8"])),
        release in prop::sample::select(crate::release::KNOWN.to_vec()),
    ) {
        let decode = FleetSpec {
            tensor_parallel: tp, pipeline_parallel: pp, page_size: Some(page),
            env: unified_tree.map(|on| vec![env("SGLANG_ENABLE_UNIFIED_RADIX_TREE", if on { "1" } else { "0" })]).unwrap_or_default(),
            kv_cache_dtype: dtype.map(str::to_string),
            ..FleetSpec::default()
        };
        let run = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| run_at(release, settings, decode, layout);
        let verdict = run(&settings, &decode, &layout);
        prop_assert_eq!(verdict.outcome == Outcome::Rejected, !verdict.violations.is_empty());
        if settings.on_invalid == OnInvalid::Reject {
            prop_assert!(verdict.rewrites.is_empty());
        }
        if verdict.outcome != Outcome::Rejected {
            let again = run(&DisaggregationSpec { on_invalid: OnInvalid::Reject, ..verdict.settings.clone() }, &decode, &layout);
            prop_assert_eq!(again.outcome, Outcome::Valid, "{:?}", again.violations);
            let same_source = EffectiveSettings { retraction_backup_source: again.effective.retraction_backup_source, ..verdict.effective.clone() };
            prop_assert_eq!(again.effective, same_source);
        }
        if verdict.outcome != Outcome::Rejected {
            // Never a value the release does not have.
            prop_assert!(release >= v0_5(18) || verdict.settings.retraction_backup.is_none());
            prop_assert!(release >= v0_5(21) || verdict.effective.retraction_backup != RetractionBackup::None);
        }
        if verdict.effective.retraction_backup == RetractionBackup::HostPool && verdict.outcome != Outcome::Rejected {
            prop_assert!(matches!(layout.kv_pool, KvPool::Full | KvPool::HybridSwa));
            prop_assert!(!layout.has(LayoutFeature::DeepseekV4));
        }
    }
}

#[test]
fn m2_and_m5_read_the_extra_args_of_every_fleet_that_keeps_a_radix_cache() {
    let qwen_next = layout::resolve(
        &json!({
            "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 8, "full_attention_interval": 4,
            "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128
        }),
        ResolveOptions::default(),
    )
    .unwrap();
    let overlap_off = FleetSpec { extra_args: vec!["--disable-overlap-schedule".into()], ..FleetSpec::default() };
    let overlap_on = FleetSpec::default();
    let no_buffer = |radix| {
        with(|s| {
            s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::NoBuffer);
            s.decode_radix_cache = radix;
        })
    };
    let rules = |settings: &DisaggregationSpec, decode: &FleetSpec, prefill: Option<&FleetSpec>| {
        let input = PolicyInput {
            disaggregation: settings,
            decode,
            layout: &qwen_next,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: prefill,
            release: v0_5(23),
        };
        evaluate(input).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
    };
    // The prefill fleet keeps its radix cache: its own extraArgs decide M5 there.
    assert_eq!(rules(&no_buffer(false), &overlap_off, Some(&overlap_on)), ["M5"]);
    assert!(rules(&no_buffer(false), &overlap_on, Some(&overlap_off)).is_empty(), "decode keeps no radix cache");
    assert_eq!(rules(&no_buffer(true), &overlap_on, Some(&overlap_off)), ["M5"], "decode keeps one now");
    assert!(rules(&no_buffer(true), &overlap_off, Some(&overlap_off)).is_empty());
    // Prefill servers run elsewhere: the decode fleet's arguments stand in for theirs.
    assert_eq!(rules(&no_buffer(false), &overlap_on, None), ["M5"]);

    // M2: each fleet's page size against its own track interval.
    let paged = |page_size, interval: Option<&str>| FleetSpec {
        page_size: Some(page_size),
        extra_args: interval.map(|i| vec!["--mamba-track-interval".into(), i.into()]).unwrap_or_default(),
        ..FleetSpec::default()
    };
    let auto = DisaggregationSpec::default();
    assert!(rules(&auto, &paged(192, None), Some(&paged(192, Some("384")))).is_empty(), "decode keeps no radix cache");
    assert_eq!(rules(&auto, &paged(192, Some("384")), Some(&paged(192, None))), ["M2"]);
    let radix = with(|s| s.decode_radix_cache = true);
    assert_eq!(rules(&radix, &paged(192, None), Some(&paged(192, Some("384")))), ["M2"]);
    assert!(rules(&radix, &paged(192, Some("384")), Some(&paged(192, Some("384")))).is_empty());
}

#[test]
fn boolean_env_values_are_read_as_sglang_s_env_bool_reads_them() {
    let with_value = |value: &str| FleetSpec {
        env: vec![EnvVar { name: "SGLANG_DISAGG_STAGING_BUFFER".into(), value: Some(value.into()), value_from: None }],
        ..FleetSpec::default()
    };
    // R20 reads SGLANG_DISAGG_STAGING_BUFFER: on for SGLang's true values only.
    let settings = with(|s| s.transfer_backend = crate::api::TransferBackend::Mori);
    let r20 = |value: &str| {
        run_at(v0_5(23), &settings, &with_value(value), &full()).violations.iter().any(|v| v.rule == "R20")
    };
    for on in ["1", "true", "TRUE", "yes", "Y"] {
        assert!(r20(on), "{on:?} is on for SGLang");
    }
    for off in ["0", "false", "no", "n", "on", " 1", "1 ", ""] {
        assert!(!r20(off), "{off:?} is off (or invalid, so the default) for SGLang");
    }
}

#[test]
fn a_draft_model_is_the_model_where_its_servers_load_it_from_the_same_path() {
    let spec = |model: serde_json::Value, draft: serde_json::Value| -> InferenceDeploymentSpec {
        serde_json::from_value(json!({
            "model": model,
            "disaggregation": {"speculativeDraftModel": draft},
            "decode": {}
        }))
        .unwrap()
    };
    let hub = json!({"name": "iquest/q1", "config": {"inline": {}}});
    let volume = json!({"name": "iquest/q1", "config": {"inline": {}}, "source": {"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}, "path": "q1/"}}});
    let same_hub = spec(hub.clone(), json!({"name": "iquest/q1", "config": {"inline": {}}}));
    assert!(draft_is_the_model(&same_hub));
    assert!(!draft_is_the_model(&spec(hub, json!({"name": "iquest/q1-mtp", "config": {"inline": {}}}))));
    let same_directory = json!({"name": "draft", "path": "q1", "config": {"inline": {}}});
    assert!(draft_is_the_model(&spec(volume.clone(), same_directory)), "/models/q1 both");
    let other_directory = json!({"name": "iquest/q1", "path": "q1-mtp", "config": {"inline": {}}});
    assert!(!draft_is_the_model(&spec(volume, other_directory)));
    let mut none = same_hub;
    none.disaggregation.speculative_draft_model = None;
    assert!(!draft_is_the_model(&none), "no draft model named");
}

/// The extra-buffer strategy runs only on the architectures SGLang lists for it, on the triton
/// linear-attention backend: set on another it is refused (M7), and unset SGLang picks no_buffer
/// there, which takes pages of one token only (M3). Its cache chunks are the model's chunk size,
/// which the page size must divide or be a multiple of (M6).
#[test]
fn m3_m6_m7_follow_where_sglang_runs_the_extra_buffer_and_the_model_s_chunk_size() {
    let lfm2 = fixture("parity/lfm2-1.2b");
    let nemotron = fixture("nemotron-nano-9b-v2");
    let legacy_chunk = fixture("parity/nemotron-h-legacy-chunk-size");
    assert_eq!(
        (nemotron.mamba_chunk_size, legacy_chunk.mamba_chunk_size, lfm2.mamba_chunk_size),
        (Some(256), Some(96), Some(1))
    );
    let rules = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
        run_at(v0_5(23), settings, decode, layout)
            .violations
            .into_iter()
            .map(|v| (v.rule, v.message))
            .collect::<Vec<_>>()
    };
    let extra = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer));
    let auto = DisaggregationSpec::default();
    let one_token = FleetSpec::default();
    assert_eq!(
        rules(&extra, &one_token, &lfm2),
        [("M7", "extra_buffer is not supported for Lfm2ForCausalLM; use no_buffer.".to_string())]
    );
    assert!(rules(&auto, &one_token, &lfm2).is_empty(), "unset: no_buffer, with the overlap schedule turned off");
    let paged = |page: i32, args: &[&str]| FleetSpec {
        page_size: Some(page),
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..FleetSpec::default()
    };
    assert_eq!(rules(&auto, &paged(16, &[]), &lfm2), [("M3", "no_buffer only supports page_size=1.".to_string())]);
    assert!(rules(&auto, &paged(16, &[]), &nemotron).is_empty(), "extra_buffer where it is supported");
    let triton_off = paged(1, &["--linear-attn-backend", "cutedsl"]);
    assert_eq!(rules(&extra, &triton_off, &nemotron).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["M7"]);
    let chunk = |size: u64, page: i32| {
        format!(
            "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size={size}, page_size={page}"
        )
    };
    let interval_96 = paged(48, &["--mamba-track-interval", "96"]);
    assert_eq!(rules(&auto, &interval_96, &nemotron), [("M6", chunk(256, 48))]);
    assert!(rules(&auto, &interval_96, &legacy_chunk).is_empty(), "96 is a multiple of 48");
    assert_eq!(rules(&auto, &paged(128, &[]), &legacy_chunk), [("M6", chunk(96, 128))]);
}

/// A fleet of `tp` GPUs with DP `dp` (with or without DP attention) and `args` in its extraArgs.
fn parallel_fleet(tp: i32, dp: i32, dp_attention: bool, args: &[&str]) -> FleetSpec {
    FleetSpec {
        tensor_parallel: tp,
        data_parallel: dp,
        enable_dp_attention: dp_attention,
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..FleetSpec::default()
    }
}

/// The violations (rule, message) of the `rules` named, for a service of the default settings at
/// 0.5.`patch`.
fn violations_of(
    rules: &[&str],
    layout: &AttentionLayout,
    fleet: &FleetSpec,
    patch: u16,
) -> Vec<(&'static str, String)> {
    run_at(v0_5(patch), &DisaggregationSpec::default(), fleet, layout)
        .violations
        .into_iter()
        .filter(|v| rules.contains(&v.rule))
        .map(|v| (v.rule, v.message))
        .collect()
}

/// MiMoV2ForCausalLM's model hook refuses a QKV projection layout it does not know (MV1: `split`
/// only from 0.5.22) and, for fused QKV weights, an effective attention TP (TP ÷ attention DP ÷
/// attention CP) that does not divide the KV head count they are interleaved for (MV2), on every
/// server but an encoder-only one; the Flash architecture is not checked.
#[test]
fn mv1_mv2_mimo_v2_fused_qkv_weights_fix_the_attention_tp() {
    let rules =
        |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| violations_of(&["MV1", "MV2"], layout, fleet, patch);
    let fused = fixture("parity/mimo-v2-fused-qkv");
    let tp8 = parallel_fleet(8, 1, false, &[]);
    assert_eq!(
        rules(&fused, &tp8, 23),
        [(
            "MV2",
            "MiMoV2ForCausalLM requires effective attention TP size 4 because its fused qkv_proj weights are \
             TP=4-interleaved; got 8 (tp_size=8, attn_dp_size=1, attn_cp_size=1). Set --tp, --attn-dp-size, and \
             --attention-context-parallel-size so the effective attention TP size is 4."
                .to_string()
        )]
    );
    let replicas = parallel_fleet(8, 2, false, &[]);
    assert!(
        rules(&fused, &replicas, 21)[0].1.contains("(tp_size=8, dp_size=2, enable_dp_attention=False, attn_cp_size=1)")
    );
    for fits in [
        parallel_fleet(4, 1, false, &[]),
        parallel_fleet(8, 2, true, &[]),
        parallel_fleet(8, 1, false, &["--attn-cp-size", "2"]),
    ] {
        assert!(rules(&fused, &fits, 23).is_empty(), "{fits:?}");
    }
    assert!(rules(&fused, &parallel_fleet(8, 1, false, &["--encoder-only"]), 23).is_empty());
    let unknown =
        "MiMoV2 hf_config has unsupported attention_projection_layout='split'; expected 'fused_qkv' or unset.";
    let split = fixture("parity/mimo-v2-split-qkv");
    assert_eq!(rules(&split, &tp8, 21), [("MV1", unknown.to_string())]);
    assert!(rules(&split, &tp8, 22).is_empty());
    let packed = fixture("parity/mimo-v2-packed-qkv");
    assert_eq!(rules(&packed, &tp8, 23)[0].0, "MV1");
    let mut flash = fused.clone();
    flash.architecture = "MiMoV2FlashForCausalLM".into();
    assert!(rules(&flash, &tp8, 23).is_empty());
}

/// From 0.5.22 the DeepSeek family's provider refuses DCP on a DSA model that pools its index
/// keys (K6: `index_kpool` above 1, on CUDA), after DSA DCP's own checks (K1-K3; under PD, K2
/// refuses first). kvpilot called such servers without PD valid.
#[test]
fn k6_dsa_pooled_index_keys_refuse_decode_context_parallelism() {
    let pooled = fixture("parity/deepseek-v3.2-index-kpool-2");
    assert_eq!(pooled.dsa_index_kpool, Some(2));
    assert_eq!(fixture("deepseek-v3.2-exp").dsa_index_kpool, Some(1));
    assert_eq!(full().dsa_index_kpool, None);
    let dcp = with(|s| s.decode_context_parallel = 2);
    let alone = |layout: &AttentionLayout, settings: &DisaggregationSpec, patch: u16| {
        let decode = FleetSpec::default();
        let input = PolicyInput::alone(settings, &decode, layout, v0_5(patch));
        role::evaluate_non_decode(input, false).violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
    };
    assert_eq!(
        alone(&pooled, &dcp, 22),
        [(
            "K6",
            "--dcp-size > 1 is not supported for DSA with index_kpool=2: a pooled index key spans positions owned \
             by different DCP ranks."
                .to_string()
        )]
    );
    assert!(alone(&pooled, &dcp, 21).is_empty(), "0.5.22 on");
    assert!(alone(&pooled, &DisaggregationSpec::default(), 23).is_empty(), "no DCP");
    assert!(alone(&fixture("deepseek-v3.2-exp"), &dcp, 23).is_empty(), "one key per group");
    let service = rule_ids(run_at(v0_5(23), &dcp, &FleetSpec::default(), &pooled));
    assert_eq!(service.iter().filter(|r| r.starts_with('K')).collect::<Vec<_>>(), [&"K2", &"K6"], "K2 first");
}

/// A prefill server that SGLang's Rust server runs serves the KV bootstrap registry on its API
/// port, so a bootstrap port of its own, other than SGLang's default, is refused (BP1, every
/// release): a service's prefill servers with SGLANG_RUST_SERVER in their env, and the guard's
/// prefill server with its own `--port` and `--disaggregation-bootstrap-port`.
#[test]
fn bp1_rust_server_prefill_serves_the_bootstrap_registry_on_its_api_port() {
    let rust_server = |value: &str| FleetSpec {
        env: vec![EnvVar { name: "SGLANG_RUST_SERVER".into(), value: Some(value.into()), ..Default::default() }],
        ..FleetSpec::default()
    };
    let (decode, llama, defaults) = (FleetSpec::default(), full(), DisaggregationSpec::default());
    let service = |settings: &DisaggregationSpec, prefill: &FleetSpec| {
        let input =
            PolicyInput { prefill_fleet: Some(prefill), ..PolicyInput::alone(settings, &decode, &llama, v0_5(23)) };
        evaluate(input).violations.into_iter().filter(|v| v.rule == "BP1").map(|v| v.message).collect::<Vec<_>>()
    };
    let port_9000 = with(|s| s.bootstrap_port = 9000);
    assert_eq!(
        service(&port_9000, &rust_server("1")),
        ["SGLANG_RUST_SERVER serves the PD KV bootstrap registry on the api port itself; \
          --disaggregation-bootstrap-port 9000 conflicts with --port 30000. Drop --disaggregation-bootstrap-port \
          (decode nodes and the PD router must then target the prefill api port)."]
    );
    assert!(service(&port_9000, &rust_server("0")).is_empty());
    assert!(service(&defaults, &rust_server("true")).is_empty(), "8998 moves to the API port");
    let same_port = with(|s| s.bootstrap_port = 30000);
    assert!(service(&same_port, &rust_server("1")).is_empty(), "the bootstrap port is the API port");
    assert!(run_at(v0_5(23), &port_9000, &rust_server("1"), &full()).violations.iter().all(|v| v.rule != "BP1"));

    let mut guard = rust_server("1");
    guard.extra_args = ["--port", "31000", "--disaggregation-bootstrap-port", "31000"].map(String::from).to_vec();
    let alone = |fleet: &FleetSpec, prefill: bool| {
        rule_ids(role::evaluate_non_decode(PolicyInput::alone(&defaults, fleet, &llama, v0_5(17)), prefill))
    };
    assert!(alone(&guard, true).is_empty());
    guard.extra_args[3] = "9000".into();
    assert_eq!(alone(&guard, true), ["BP1"]);
    assert!(alone(&guard, false).is_empty(), "no PD: the PD hook checks prefill servers only");
}

/// Buffer-only host memory on a prefill server or one without PD is checked with HiCache only:
/// it needs a storage backend (H3) and, 0.5.19-0.5.21, not the write-back policy (H8, also on a
/// decode server, before H4). kvpilot used to call such prefill servers valid.
#[test]
fn h3_h8_buffer_only_host_memory_on_every_server() {
    let buffer_only = |hierarchical: bool, backend: Option<&str>| {
        with(|s| {
            s.hierarchical_cache = hierarchical;
            s.hicache_host_memory_mode = Some(HicacheHostMemoryMode::BufferOnly);
            s.hicache_storage_backend = backend.map(str::to_string);
        })
    };
    let llama = full();
    let alone = |settings: &DisaggregationSpec, fleet: &FleetSpec, patch: u16| {
        rule_ids(role::evaluate_non_decode(PolicyInput::alone(settings, fleet, &llama, v0_5(patch)), true))
    };
    let plain = FleetSpec::default();
    assert_eq!(alone(&buffer_only(true, None), &plain, 21), ["H3"]);
    assert!(alone(&buffer_only(false, None), &plain, 21).is_empty(), "checked with HiCache only");
    assert!(alone(&buffer_only(true, None), &plain, 18).iter().all(|rule| *rule != "H3"), "0.5.19 on");
    let write_back = parallel_fleet(1, 1, false, &["--hicache-write-policy", "write_back"]);
    assert_eq!(alone(&buffer_only(true, Some("file")), &write_back, 21), ["H8"]);
    assert!(alone(&buffer_only(true, Some("file")), &write_back, 22).is_empty(), "resolved to write-through");
    assert!(alone(&buffer_only(true, Some("file")), &plain, 21).is_empty());
    let decode = run_at(v0_5(20), &buffer_only(true, Some("file")), &write_back, &full());
    assert_eq!(rule_ids(decode).into_iter().filter(|r| r.starts_with('H')).collect::<Vec<_>>(), ["H8", "H4"]);
}

/// Up to 0.5.18 the model hook's MiMo-V2 branch (both architectures) refuses HiCache on a server
/// whose env does not turn on the unified radix tree (MV3): the decode servers with
/// `hierarchicalCache`, and a service's prefill servers given `--enable-hierarchical-cache`.
#[test]
fn mv3_mimo_v2_hicache_needs_the_unified_radix_tree() {
    let flash = fixture("mimo-v2-flash");
    let hicache = with(|s| s.hierarchical_cache = true);
    let rules = |settings: &DisaggregationSpec, fleet: &FleetSpec, layout: &AttentionLayout, patch: u16| {
        run_at(v0_5(patch), settings, fleet, layout).violations.iter().any(|v| v.rule == "MV3")
    };
    let plain = FleetSpec::default();
    assert!(rules(&hicache, &plain, &flash, 17) && rules(&hicache, &plain, &flash, 18));
    assert!(!rules(&hicache, &plain, &flash, 19), "the check is gone from 0.5.19");
    assert!(!rules(&DisaggregationSpec::default(), &plain, &flash, 18), "no HiCache");
    assert!(!rules(&hicache, &plain, &full(), 18), "not MiMo-V2");
    let unified = FleetSpec {
        env: vec![EnvVar {
            name: "SGLANG_ENABLE_UNIFIED_RADIX_TREE".into(),
            value: Some("1".into()),
            ..Default::default()
        }],
        ..FleetSpec::default()
    };
    assert!(!rules(&hicache, &unified, &flash, 18));

    let prefill = parallel_fleet(1, 1, false, &["--enable-hierarchical-cache"]);
    let defaults = DisaggregationSpec::default();
    let input =
        PolicyInput { prefill_fleet: Some(&prefill), ..PolicyInput::alone(&defaults, &unified, &flash, v0_5(18)) };
    let verdict = evaluate(input);
    assert!(verdict.violations.iter().any(|v| v.rule == "MV3"), "the prefill servers run HiCache without the env");
}

/// The context-parallel hook asserts that attention CP divides TP (CP7), then that the DP size
/// times it does (CP8: `--dp-size` up to 0.5.21, the attention DP size from 0.5.22). Under prefill
/// CP the DeepSeek family's overrides choose the CP size of an MLA model, and kvpilot leaves the
/// asserts to SGLang there. Before, kvpilot called `--attn-cp-size 2` on one GPU valid.
#[test]
fn cp7_cp8_attention_cp_divides_tp() {
    let rules =
        |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| violations_of(&["CP7", "CP8"], layout, fleet, patch);
    let cp2 = ["--attn-cp-size", "2"];
    let cp7 = ("CP7", "tp_size must be divisible by attn_cp_size".to_string());
    assert_eq!(rules(&full(), &parallel_fleet(1, 1, false, &cp2), 23), std::slice::from_ref(&cp7));
    assert!(rules(&full(), &parallel_fleet(2, 1, false, &cp2), 23).is_empty());
    // Two replicas count up to 0.5.21; from 0.5.22 only attention DP does.
    let replicas = parallel_fleet(2, 2, false, &cp2);
    assert_eq!(
        rules(&full(), &replicas, 21),
        [("CP8", "tp_size must be divisible by dp_size * attn_cp_size".to_string())]
    );
    assert!(rules(&full(), &replicas, 22).is_empty());
    assert_eq!(
        rules(&full(), &parallel_fleet(2, 2, true, &cp2), 22),
        [("CP8", "tp_size must be divisible by attn_dp_size * attn_cp_size".to_string())]
    );
    let prefill_cp = ["--attn-cp-size", "2", "--enable-prefill-cp", "--cp-strategy", "interleave"];
    assert!(rules(&mla(), &parallel_fleet(1, 1, false, &prefill_cp), 23).is_empty(), "the family chooses the CP size");
    assert_eq!(rules(&full(), &parallel_fleet(1, 1, false, &prefill_cp), 23), [cp7]);
}

/// The DeepSeek family's prefill-CP asserts, which kvpilot called valid before: a DSA model's
/// interleave (or unset) strategy without DP up to 0.5.21 (CP9), DeepSeek-V4's strategy (CP11: up
/// to 0.5.20 interleave only, then a strategy at all; CP12: zigzag needs an NPU from 0.5.21) and
/// DP (CP13), and one machine's TP for both (CP10), in that order.
#[test]
fn cp9_to_cp13_deepseek_prefill_cp() {
    let all = ["CP9", "CP10", "CP11", "CP12", "CP13"];
    let rules = |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| {
        violations_of(&all, layout, fleet, patch).into_iter().map(|(rule, _)| rule).collect::<Vec<_>>()
    };
    let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave"];
    let zigzag = ["--enable-prefill-cp", "--cp-strategy", "zigzag"];
    let dsa = fixture("deepseek-v3.2-exp");
    assert!(rules(&dsa, &parallel_fleet(8, 1, false, &interleave), 23).is_empty());
    assert_eq!(rules(&dsa, &parallel_fleet(8, 2, true, &interleave), 21), ["CP9"]);
    assert!(rules(&dsa, &parallel_fleet(8, 2, true, &interleave), 22).is_empty(), "attention DP from 0.5.22");
    assert!(rules(&dsa, &parallel_fleet(8, 2, false, &zigzag), 21).is_empty(), "zigzag runs with DP");
    assert_eq!(rules(&dsa, &parallel_fleet(16, 2, false, &["--enable-prefill-cp"]), 17), ["CP9", "CP10"]);
    assert!(rules(&dsa, &parallel_fleet(16, 1, false, &[]), 23).is_empty(), "no prefill CP");
    assert!(rules(&full(), &parallel_fleet(16, 2, false, &interleave), 23).is_empty(), "not a DeepSeek model");

    let v4 = fixture("deepseek-v4");
    let message = |fleet: &FleetSpec, patch: u16| violations_of(&all, &v4, fleet, patch)[0].1.clone();
    assert!(rules(&v4, &parallel_fleet(8, 1, false, &interleave), 23).is_empty());
    let unset = parallel_fleet(8, 1, false, &["--enable-prefill-cp"]);
    assert_eq!(message(&unset, 20), "DeepSeekV4 only supports interleave CP strategy, got None");
    assert_eq!(message(&unset, 21), "DeepSeekV4 only supports interleave/zigzag CP strategy, got None");
    let zigzag_v4 = parallel_fleet(8, 1, false, &zigzag);
    assert_eq!(message(&zigzag_v4, 20), "DeepSeekV4 only supports interleave CP strategy, got zigzag");
    assert_eq!(rules(&v4, &zigzag_v4, 21), ["CP12"]);
    assert!(message(&zigzag_v4, 22).ends_with("CUDA/HIP backends reindex with interleave order."));
    assert_eq!(rules(&v4, &parallel_fleet(16, 2, true, &interleave), 23), ["CP13", "CP10"]);
    assert_eq!(rules(&v4, &parallel_fleet(4, 2, false, &interleave), 17), ["CP13"]);
}

/// Flag combinations SGLang refuses on the servers they reach: an encoder-only server under PD
/// (EN1, every release; a server without PD may be encoder-only), decode CP with prefill CP (DC1,
/// 0.5.22 on) and the DP LM head on data-parallel replicas without attention DP (LH1).
#[test]
fn en1_dc1_lh1_flag_combinations() {
    let all = ["EN1", "DC1", "LH1"];
    let encoder_only = parallel_fleet(2, 1, false, &["--encoder-only"]);
    assert_eq!(violations_of(&all, &full(), &encoder_only, 17)[0].0, "EN1");
    let alone = |fleet: &FleetSpec, prefill: bool| {
        let verdict = role::evaluate_non_decode(
            PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
            prefill,
        );
        verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    assert_eq!(alone(&encoder_only, true), ["EN1"]);
    assert!(alone(&encoder_only, false).is_empty(), "no PD");

    let dcp = with(|s| s.decode_context_parallel = 2);
    let prefill_cp = parallel_fleet(2, 1, false, &["--enable-prefill-cp", "--cp-strategy", "interleave"]);
    let rules = |patch| run_at(v0_5(patch), &dcp, &prefill_cp, &full()).violations.iter().any(|v| v.rule == "DC1");
    assert!(!rules(21) && rules(22));

    let lm_head = |dp, dp_attention| parallel_fleet(2, dp, dp_attention, &["--enable-dp-lm-head"]);
    assert_eq!(
        violations_of(&all, &full(), &lm_head(2, false), 22),
        [("LH1", "--enable-dp-lm-head requires attention DP (--attn-dp-size).".to_string())]
    );
    assert_eq!(
        violations_of(&all, &full(), &lm_head(2, false), 21),
        [("LH1", "Please enable dp attention when setting enable_dp_lm_head. ".to_string())]
    );
    assert!(violations_of(&all, &full(), &lm_head(2, true), 22).is_empty());
    // With one DP rank SGLang drops the DP LM head instead.
    assert!(violations_of(&all, &full(), &lm_head(1, false), 22).is_empty());
}

/// DWDP (`--dwdp-size` above 1, every release): its handler wants the size equal to TP (WD1), no
/// PD decode server (WD2: a service's prefill servers and servers without PD may run it), and no
/// EPLB, speculative decoding, pipeline stages or two-batch overlap (WD3-WD6).
#[test]
fn wd_dwdp_checks() {
    let all = ["WD1", "WD2", "WD3", "WD4", "WD5", "WD6"];
    let dwdp = |tp, args: &[&str]| parallel_fleet(tp, 1, false, &[&["--dwdp-size", "4"], args].concat());
    let plain = parallel_fleet(4, 1, false, &[]);
    let llama = full();
    let service = |settings: &DisaggregationSpec, decode: &FleetSpec, prefill: &FleetSpec| {
        let input =
            PolicyInput { prefill_fleet: Some(prefill), ..PolicyInput::alone(settings, decode, &llama, v0_5(17)) };
        evaluate(input).violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    let defaults = DisaggregationSpec::default();
    assert!(service(&defaults, &plain, &dwdp(4, &[])).is_empty(), "DWDP on the prefill servers");
    assert_eq!(service(&defaults, &dwdp(4, &[]), &plain), ["WD2"]);
    assert_eq!(service(&defaults, &plain, &dwdp(4, &["--enable-eplb"])), ["WD3"]);
    assert_eq!(service(&defaults, &plain, &dwdp(4, &["--enable-two-batch-overlap"])), ["WD6"]);
    let staged = FleetSpec { pipeline_parallel: 2, ..dwdp(4, &[]) };
    assert_eq!(service(&defaults, &plain, &staged), ["WD5"]);
    let speculative = with(|s| s.speculative_algorithm = Some("nextn".into()));
    assert_eq!(service(&speculative, &plain, &dwdp(4, &[])), ["WD4"]);
    assert!(service(&defaults, &plain, &parallel_fleet(4, 1, false, &["--dwdp-size", "1"])).is_empty(), "off");
    assert_eq!(
        violations_of(&all, &full(), &dwdp(2, &[]), 23),
        [
            ("WD1", "dwdp_size (4) must equal tp_size (2)".to_string()),
            ("WD2", "DWDP requires --disaggregation-mode null or prefill".to_string())
        ]
    );

    let alone = |fleet: &FleetSpec, prefill: bool| {
        let verdict = role::evaluate_non_decode(
            PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
            prefill,
        );
        verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    assert!(alone(&dwdp(4, &[]), true).is_empty() && alone(&dwdp(4, &[]), false).is_empty());
    assert_eq!(alone(&dwdp(2, &["--enable-eplb"]), false), ["WD1", "WD3"]);
}

/// Flags SGLang refuses by the server's role: the response store under PD (RS1, 0.5.20 on), KV
/// cache sharding off a PD prefill server (KS1, 0.5.22 on), and the watermark (0.5.22 on) under PD
/// (WM1), with a speculative algorithm other than NGRAM, EAGLE and EAGLE3 as resolved (WM2), with
/// pipeline stages that speculate (WM3) and on the Rust server (WM4).
#[test]
fn rs1_ks1_wm_flags_by_role() {
    let all = ["RS1", "KS1", "WM1", "WM2", "WM3", "WM4"];
    let fleet = |args: &[&str]| parallel_fleet(1, 1, false, args);
    let alone = |settings: &DisaggregationSpec, fleet: &FleetSpec, prefill: bool, patch| {
        let verdict = role::evaluate_non_decode(PolicyInput::alone(settings, fleet, &full(), v0_5(patch)), prefill);
        verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    let defaults = DisaggregationSpec::default();
    let store = fleet(&["--enable-response-store"]);
    assert_eq!(violations_of(&all, &full(), &store, 20)[0].0, "RS1");
    assert!(violations_of(&all, &full(), &store, 19).is_empty(), "no such flag");
    assert_eq!(alone(&defaults, &store, true, 23), ["RS1"]);
    assert!(alone(&defaults, &store, false, 23).is_empty(), "no PD");

    let sharded = fleet(&["--enable-kv-cache-sharding"]);
    assert_eq!(violations_of(&all, &full(), &sharded, 22)[0].0, "KS1");
    assert!(alone(&defaults, &sharded, true, 22).is_empty(), "a PD prefill server shards");
    assert_eq!(alone(&defaults, &sharded, false, 22), ["KS1"]);

    let watermark = fleet(&["--enable-watermark"]);
    assert_eq!(violations_of(&all, &full(), &watermark, 22)[0].0, "WM1");
    assert!(alone(&defaults, &watermark, false, 23).is_empty());
    let speculating = |algorithm: &str| with(|s| s.speculative_algorithm = Some(algorithm.into()));
    assert!(alone(&speculating("nextn"), &watermark, false, 23).is_empty(), "NEXTN is EAGLE");
    let dflash = run_at(v0_5(23), &speculating("DFLASH"), &watermark, &full());
    assert!(dflash.violations.iter().any(|v| v.rule == "WM2"
        && v.message == "--enable-watermark supports speculative algorithms NGRAM, EAGLE, and EAGLE3, got 'DFLASH'"));
    let staged = FleetSpec { pipeline_parallel: 2, ..watermark.clone() };
    assert_eq!(alone(&speculating("NGRAM"), &staged, false, 23), ["WM3"]);
    assert!(alone(&defaults, &staged, false, 23).is_empty(), "no speculative decoding");
    let rust_server = FleetSpec {
        env: vec![EnvVar { name: "SGLANG_RUST_SERVER".into(), value: Some("1".into()), value_from: None }],
        ..watermark.clone()
    };
    assert_eq!(alone(&defaults, &rust_server, false, 22), ["WM4"]);
    assert!(alone(&defaults, &rust_server, false, 21).is_empty(), "no such flag");
}

/// From 0.5.22 `--disaggregation-decode-allocation-policy prefill_complete` lists what it does not
/// support yet on each server that gives it (PC1 on PD servers, PC2 without PD, in one message
/// joined as SGLang joins it), and refuses a prefill server whose optimistic prefill attempts stay
/// negative (PC3).
#[test]
fn pc_prefill_complete_allocation() {
    let all = ["PC1", "PC2", "PC3"];
    let policy = ["--disaggregation-decode-allocation-policy", "prefill_complete"];
    let fleet = |tp, args: &[&str]| parallel_fleet(tp, 1, false, &[&policy[..], args].concat());
    let prefix = "--disaggregation-decode-allocation-policy prefill_complete does not yet support ";
    assert!(violations_of(&all, &full(), &fleet(1, &[]), 23).is_empty());
    assert!(violations_of(&all, &full(), &fleet(2, &[]), 21).is_empty(), "no such flag");
    let radix = with(|s| s.decode_radix_cache = true);
    let verdict = run_at(v0_5(22), &radix, &fleet(2, &["--enable-pdmux"]), &full());
    let messages: Vec<_> = verdict.violations.iter().filter(|v| v.rule == "PC1").map(|v| v.message.clone()).collect();
    assert_eq!(
        messages,
        [format!(
            "{prefix}attention tensor parallelism greater than one, PD multiplexing or decoupled speculation, decode \
             radix cache or decode HiCache"
        )]
    );

    let alone = |fleet: &FleetSpec, prefill: bool| {
        let verdict = role::evaluate_non_decode(
            PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
            prefill,
        );
        verdict
            .violations
            .iter()
            .map(|v| (v.rule, v.message.clone()))
            .filter(|(rule, _)| all.contains(rule))
            .collect::<Vec<_>>()
    };
    assert!(alone(&fleet(1, &[]), true).is_empty());
    assert_eq!(alone(&fleet(1, &[]), false), [("PC2", format!("{prefix}aggregated serving"))]);
    let hicache = fleet(1, &["--enable-hierarchical-cache"]);
    let settings = with(|s| s.hierarchical_cache = true);
    let prefill_hicache = role::evaluate_non_decode(PolicyInput::alone(&settings, &hicache, &full(), v0_5(23)), true);
    assert!(
        prefill_hicache
            .violations
            .iter()
            .any(|v| v.rule == "PC1" && v.message == format!("{prefix}prefill HiCache other than L2 write_back"))
    );
    let write_back = fleet(1, &["--hicache-write-policy", "write_back"]);
    let prefill_write_back =
        role::evaluate_non_decode(PolicyInput::alone(&settings, &write_back, &full(), v0_5(23)), true);
    assert!(!prefill_write_back.violations.iter().any(|v| v.rule == "PC1"));
    assert_eq!(
        alone(&fleet(1, &["--optimistic-prefill-attempts", "-1"]), true),
        [(
            "PC3",
            "prefill_complete requires optimistic prefill, but the resolved model/cache configuration disabled it."
                .to_string()
        )]
    );
    assert!(alone(&fleet(1, &["--optimistic-prefill-attempts", "0"]), true).is_empty(), "turned into 1");
}

/// The decode-CP hook's checks of its communication flags (DF1-DF3, every release), priority
/// retraction without priority scheduling (RP1) and quantized communications off an NPU (QC1,
/// QC2).
#[test]
fn df_rp_qc_flag_checks() {
    let all = ["DF1", "DF2", "DF3", "RP1", "QC1", "QC2"];
    let fired = |settings: &DisaggregationSpec, tp, args: &[&str], patch| {
        let verdict = run_at(v0_5(patch), settings, &parallel_fleet(tp, 1, false, args), &full());
        verdict.violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    let defaults = DisaggregationSpec::default();
    let dcp = with(|s| s.decode_context_parallel = 2);
    assert_eq!(fired(&defaults, 2, &["--dcp-comm-backend", "a2a"], 17), ["DF1"]);
    assert!(fired(&dcp, 2, &["--dcp-comm-backend", "a2a"], 17).is_empty());
    assert!(fired(&defaults, 2, &["--dcp-comm-backend", "ag_rs"], 23).is_empty());
    assert_eq!(fired(&defaults, 2, &["--dcp-replicate-q-proj"], 23), ["DF2"]);
    // The parser's default backend is ag_rs up to 0.5.19; from 0.5.20 DCP resolves an all-to-all one.
    assert_eq!(fired(&dcp, 2, &["--dcp-replicate-q-proj"], 19), ["DF3"]);
    assert!(fired(&dcp, 2, &["--dcp-replicate-q-proj"], 20).is_empty());
    assert_eq!(fired(&dcp, 2, &["--dcp-replicate-q-proj", "--dcp-comm-backend", "ag_rs"], 23), ["DF3"]);
    let message = run_at(v0_5(23), &defaults, &parallel_fleet(2, 1, false, &["--dcp-comm-backend", "fi_a2a"]), &full())
        .violations
        .into_iter()
        .find(|v| v.rule == "DF1")
        .map(|v| v.message);
    assert_eq!(
        message.as_deref(),
        Some(
            "--dcp-comm-backend fi_a2a only affects the decode context-parallel attention reduction and therefore \
             requires --dcp-size / --decode-context-parallel-size > 1, but got dcp_size=1."
        )
    );

    assert_eq!(fired(&defaults, 1, &["--retraction-policy", "priority"], 17), ["RP1"]);
    assert!(fired(&defaults, 1, &["--retraction-policy", "priority", "--enable-priority-scheduling"], 17).is_empty());
    assert!(fired(&defaults, 1, &["--retraction-policy", "length"], 17).is_empty());

    assert_eq!(fired(&defaults, 1, &["--enable-quant-communications"], 23), ["QC1"]);
    assert_eq!(fired(&defaults, 2, &["--enable-quant-communications"], 23), ["QC2"]);
    assert!(fired(&defaults, 2, &["--enable-quant-communications", "--device", "npu"], 23).is_empty());
}

/// DSA cache layer split (every release): refused on a model without DSA (LS0), on a PD decode
/// server (LS1) and a server without PD (LS2), and on a DSA model's prefill server without
/// interleaved prefill CP (LS3, in 0.5.20's words from then), off Mooncake (LS4) and with pipeline
/// stages (LS5).
#[test]
fn ls_dsa_cache_layer_split() {
    let all = ["LS0", "LS1", "LS2", "LS3", "LS4", "LS5"];
    let split = ["--enable-dsa-cache-layer-split"];
    let interleaved = [&split[..], &["--enable-prefill-cp", "--cp-strategy", "interleave"]].concat();
    let dsa = fixture("deepseek-v3.2-exp");
    let plain = parallel_fleet(4, 1, false, &[]);
    let service =
        |settings: &DisaggregationSpec, layout: &AttentionLayout, decode: &FleetSpec, prefill: &FleetSpec, patch| {
            let input = PolicyInput {
                prefill_fleet: Some(prefill),
                ..PolicyInput::alone(settings, decode, layout, v0_5(patch))
            };
            evaluate(input).violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
    let defaults = DisaggregationSpec::default();
    assert!(service(&defaults, &dsa, &plain, &parallel_fleet(4, 1, false, &interleaved), 23).is_empty());
    assert_eq!(service(&defaults, &full(), &plain, &parallel_fleet(4, 1, false, &interleaved), 17), ["LS0"]);
    assert_eq!(service(&defaults, &dsa, &parallel_fleet(4, 1, false, &interleaved), &plain, 23), ["LS1"]);
    assert_eq!(service(&defaults, &dsa, &plain, &parallel_fleet(4, 1, false, &split), 23), ["LS3"]);
    let zigzag =
        parallel_fleet(4, 1, false, &[&split[..], &["--enable-prefill-cp", "--cp-strategy", "zigzag"]].concat());
    assert_eq!(service(&defaults, &dsa, &plain, &zigzag, 23), ["LS3"]);
    let nixl = with(|s| s.transfer_backend = TransferBackend::Nixl);
    assert_eq!(service(&nixl, &dsa, &plain, &parallel_fleet(4, 1, false, &interleaved), 23), ["LS4"]);
    let staged = FleetSpec { pipeline_parallel: 2, ..parallel_fleet(4, 1, false, &interleaved) };
    assert_eq!(service(&defaults, &dsa, &plain, &staged, 23), ["LS5"]);
    let message = |patch| {
        let input = PolicyInput {
            prefill_fleet: Some(&parallel_fleet(4, 1, false, &split)),
            ..PolicyInput::alone(&defaults, &plain, &dsa, v0_5(patch))
        };
        evaluate(input).violations.into_iter().find(|v| v.rule == "LS3").map(|v| v.message)
    };
    assert!(message(19).is_some_and(|m| m.ends_with("--nsa-prefill-cp-mode round-robin-split).")));
    assert_eq!(
        message(20).as_deref(),
        Some("--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave.")
    );

    let alone = |fleet: &FleetSpec, prefill: bool| {
        let verdict = role::evaluate_non_decode(PolicyInput::alone(&defaults, fleet, &dsa, v0_5(23)), prefill);
        verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    let interleaved_fleet = parallel_fleet(4, 1, false, &interleaved);
    assert!(alone(&interleaved_fleet, true).is_empty());
    assert_eq!(alone(&interleaved_fleet, false), ["LS2"]);
}

/// From 0.5.21 `--enable-linker-mla-dedup` needs the external cache linker on its Mooncake backend
/// (LD1), on every server that gives it.
#[test]
fn ld1_linker_mla_dedup_needs_the_mooncake_linker() {
    let fired = |linker: bool, args: &[&str], patch| {
        let settings = with(|s| s.unified_cache_external_linker = linker);
        let verdict = run_at(v0_5(patch), &settings, &parallel_fleet(1, 1, false, args), &full());
        verdict.violations.iter().any(|v| v.rule == "LD1")
    };
    let dedup = "--enable-linker-mla-dedup";
    assert!(fired(false, &[dedup], 21));
    assert!(!fired(false, &[dedup], 20), "no such flag");
    assert!(!fired(true, &[dedup], 23));
    assert!(!fired(true, &[dedup, "--unified-cache-external-linker-backend", "mooncake"], 23));
    assert!(fired(true, &[dedup, "--unified-cache-external-linker-backend", "mori"], 23));
    assert!(!fired(false, &[], 23));

    let alone = |args: &[&str]| {
        let fleet = parallel_fleet(1, 1, false, args);
        let verdict = role::evaluate_non_decode(
            PolicyInput::alone(&DisaggregationSpec::default(), &fleet, &full(), v0_5(23)),
            true,
        );
        verdict.violations.iter().any(|v| v.rule == "LD1")
    };
    assert!(alone(&[dedup]), "a prefill server without the linker");
}

/// The DFLASH handler's sizes (every release): a block size that is not positive (DB1), draft
/// tokens other than the block size (DB2) and a draft window narrower than the block as given
/// (DB3); other algorithms are not checked.
#[test]
fn db_dflash_block_size() {
    let fired = |algorithm: &str, args: &[&str]| {
        let settings = with(|s| s.speculative_algorithm = Some(algorithm.into()));
        let verdict = run_at(v0_5(23), &settings, &parallel_fleet(1, 1, false, args), &full());
        verdict
            .violations
            .into_iter()
            .filter(|v| v.rule.starts_with("DB"))
            .map(|v| (v.rule, v.message))
            .collect::<Vec<_>>()
    };
    let block = "--speculative-dflash-block-size";
    let tokens = "--speculative-num-draft-tokens";
    let window = "--speculative-draft-window-size";
    assert_eq!(
        fired("DFLASH", &[block, "0"]),
        [("DB1", "DFLASH requires --speculative-dflash-block-size to be positive, got 0.".to_string())]
    );
    assert_eq!(fired("DFLASH", &[block, "8", tokens, "4"])[0].0, "DB2");
    assert!(fired("DFLASH", &[block, "8", tokens, "8", window, "8"]).is_empty());
    assert_eq!(
        fired("DFLASH", &[tokens, "8", window, "4"]),
        [(
            "DB3",
            "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). window_size=4, \
             block_size=8."
                .to_string()
        )]
    );
    assert!(fired("DFLASH", &[window, "4"]).is_empty(), "the block comes from the draft's config");
    assert!(fired("EAGLE", &[block, "0", tokens, "4", window, "2"]).is_empty());
}

/// From 0.5.21 SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION asks for single-layer EAGLE or EAGLE3
/// (DSPARK too from 0.5.22), as the speculative hook resolved the algorithm, on every server that
/// sets it, speculating or not (SD17).
#[test]
fn sd17_dp_speculative_prefill_coordination_needs_single_layer_eagle() {
    let coordinated = |args: &[&str]| FleetSpec {
        env: vec![EnvVar {
            name: "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION".into(),
            value: Some("1".into()),
            value_from: None,
        }],
        ..parallel_fleet(1, 1, false, args)
    };
    let fired = |algorithm: Option<&str>, fleet: &FleetSpec, patch| {
        let settings = with(|s| s.speculative_algorithm = algorithm.map(str::to_string));
        run_at(v0_5(patch), &settings, fleet, &full()).violations.iter().any(|v| v.rule == "SD17")
    };
    let plain = coordinated(&[]);
    assert!(fired(None, &plain, 21), "no speculative decoding");
    assert!(!fired(Some("nextn"), &plain, 21), "NEXTN is EAGLE");
    assert!(fired(Some("EAGLE"), &coordinated(&["--enable-multi-layer-eagle"]), 23));
    assert!(fired(Some("DSPARK"), &plain, 21) && !fired(Some("DSPARK"), &plain, 22));
    assert!(!fired(None, &plain, 20));
    assert!(!fired(None, &parallel_fleet(1, 1, false, &[]), 23), "the env unset");
}

/// Unified memory under PD needs lazy compaction: SGLANG_DISABLE_LAZY_COMPACTION in a fleet's env
/// is refused from 0.5.18 (U16), a falsy value is not.
#[test]
fn u16_unified_memory_under_pd_needs_lazy_compaction() {
    let unified = with(|s| s.enable_unified_memory = true);
    let with_env = |value: &str| FleetSpec {
        env: vec![EnvVar {
            name: "SGLANG_DISABLE_LAZY_COMPACTION".into(),
            value: Some(value.into()),
            value_from: None,
        }],
        ..FleetSpec::default()
    };
    let fired = |fleet: &FleetSpec, patch| {
        run_at(v0_5(patch), &unified, fleet, &full()).violations.iter().any(|v| v.rule == "U16")
    };
    assert!(fired(&with_env("1"), 18) && fired(&with_env("true"), 23));
    assert!(!fired(&with_env("1"), 17) && !fired(&with_env("0"), 23) && !fired(&FleetSpec::default(), 23));
    let plain = with_env("1");
    assert!(
        !run_at(v0_5(23), &DisaggregationSpec::default(), &plain, &full()).violations.iter().any(|v| v.rule == "U16")
    );
}

/// `--language-model-only` (0.5.18 on) runs without PD (LO1; DeepSeek-V4.1's text-only workers
/// use the PD path from 0.5.22) and only for the architectures the release lists (LO2, with
/// Python's list in its message).
#[test]
fn lo1_lo2_language_model_only() {
    let flag = parallel_fleet(1, 1, false, &["--language-model-only"]);
    let dsv41 = fixture("deepseek-v4.1-dspark");
    assert_eq!(violations_of(&["LO1", "LO2"], &dsv41, &flag, 22), []);
    let v21 = violations_of(&["LO1", "LO2"], &dsv41, &flag, 21);
    assert_eq!(v21.iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["LO1", "LO2"]);
    assert_eq!(
        v21[1].1,
        "--language-model-only does not support ['DeepseekV4ForCausalLM']. Supported: \
         ['MuseGlimmerForConditionalGeneration', 'Cosmos3ForConditionalGeneration', 'Cosmos3EdgeForConditionalGeneration']."
    );
    assert!(violations_of(&["LO1", "LO2"], &full(), &flag, 17).is_empty(), "no such flag before 0.5.18");
    assert!(violations_of(&["LO1", "LO2"], &full(), &FleetSpec::default(), 23).is_empty());
}

/// An explicit `--enable-tp-lm-head-all-to-all` (0.5.18 on) needs DP attention (LH2), no DP LM
/// head (LH3), TP equal to the DP size (LH4: `--dp-size` up to 0.5.21, the attention DP size
/// from 0.5.22) and no attention CP (LH5), checked in that order.
#[test]
fn lh2_to_lh5_tp_lm_head_all_to_all() {
    let rules = ["LH2", "LH3", "LH4", "LH5"];
    let fired = |tp, dp, dp_attention, args: &[&str], patch| {
        let mut args = args.to_vec();
        args.push("--enable-tp-lm-head-all-to-all");
        violations_of(&rules, &full(), &parallel_fleet(tp, dp, dp_attention, &args), patch)
    };
    assert_eq!(fired(2, 2, false, &[], 18)[0].0, "LH2", "replicas are not DP attention");
    assert_eq!(
        fired(2, 2, false, &[], 22)[0].1,
        "--enable-tp-lm-head-all-to-all requires attention DP (--attn-dp-size)."
    );
    assert_eq!(fired(2, 2, true, &["--enable-dp-lm-head"], 23)[0].0, "LH3");
    assert_eq!(
        fired(4, 2, true, &[], 21),
        [(
            "LH4",
            "--enable-tp-lm-head-all-to-all currently requires tp_size == dp_size, got tp_size=4, dp_size=2."
                .to_string()
        )]
    );
    assert_eq!(fired(2, 2, true, &["--attn-cp-size", "2"], 23)[0].0, "LH5");
    assert!(fired(2, 2, true, &[], 23).is_empty());
    assert!(fired(2, 2, false, &[], 17).is_empty(), "no such flag before 0.5.18");
}
