//! What the policy's tests share: model layouts, settings, and the verdicts of one release or of
//! each release.

pub(crate) use k8s_openapi::api::core::v1::EnvVar;
pub(crate) use serde_json::json;

pub(crate) use super::*;
pub(crate) use crate::api::{HicacheHostMemoryMode, MambaRadixCacheStrategy, PrefillSpec, TransferBackend};
pub(crate) use crate::release::v0_5;

pub(crate) fn layout_at(config: serde_json::Value) -> AttentionLayout {
    layout::resolve(&config, ResolveOptions::default()).expect("test layout")
}

/// The layout of `tests/fixtures/configs/<name>.json`, as the newest release resolves it.
pub(crate) fn fixture(name: &str) -> AttentionLayout {
    let path = format!("{}/tests/fixtures/configs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    layout_at(serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
}

pub(crate) fn full() -> AttentionLayout {
    layout_at(
        json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8, "head_dim": 128}),
    )
}

pub(crate) fn hybrid_swa() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    }))
}

pub(crate) fn pure_swa() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["MiMoV2FlashForCausalLM"], "num_hidden_layers": 4, "sliding_window_size": 128,
        "head_dim": 192, "hybrid_layer_pattern": [1, 1, 1, 1]
    }))
}

pub(crate) fn ssm() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 8, "full_attention_interval": 4, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128
    }))
}

pub(crate) fn mla() -> AttentionLayout {
    layout_at(
        json!({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64}),
    )
}

pub(crate) fn dsv4() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
        "compress_ratios": [0, 4, 128, 0]
    }))
}

pub(crate) fn gemma4() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["Gemma4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 512, "head_dim": 256,
        "global_head_dim": 256, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    }))
}

pub(crate) fn kimi_linear() -> AttentionLayout {
    layout_at(json!({
        "architectures": ["KimiLinearForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "linear_attn_config": {"full_attn_layers": [4], "kda_layers": [1, 2, 3], "num_heads": 8, "head_dim": 128}
    }))
}

pub(crate) fn with(edit: impl FnOnce(&mut DisaggregationSpec)) -> DisaggregationSpec {
    let mut settings = DisaggregationSpec::default();
    edit(&mut settings);
    settings
}

pub(crate) fn host_pool(s: &mut DisaggregationSpec) {
    s.retraction_backup = Some(RetractionBackup::HostPool);
}

/// The release the tests of the rules' catalogue (docs/rules.md) run at, the one the catalogue was
/// first written against; release differences have their own tests.
pub(crate) const CATALOGUE: Release = v0_5(19);

pub(crate) fn run(settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> Verdict {
    run_at(CATALOGUE, settings, decode, layout)
}

/// The rules of a verdict's violations, in order.
pub(crate) fn rule_ids(verdict: Verdict) -> Vec<&'static str> {
    verdict.violations.iter().map(|v| v.rule).collect()
}

pub(crate) fn run_at(
    release: Release,
    settings: &DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
) -> Verdict {
    evaluate(PolicyInput::alone(settings, decode, layout, release))
}

pub(crate) fn both_modes(
    settings: DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
) -> (Verdict, Verdict) {
    let reject = run(&DisaggregationSpec { on_invalid: OnInvalid::Reject, ..settings.clone() }, decode, layout);
    let rewrite = run(&DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..settings }, decode, layout);
    (reject, rewrite)
}

pub(crate) fn ids(verdict: &Verdict) -> Vec<(&'static str, &'static str)> {
    verdict.violations.iter().map(|v| (v.rule, v.field)).collect()
}

pub(crate) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

pub(crate) const BACKUP: &str = "spec.disaggregation.retractionBackup";

pub(crate) const RADIX: &str = "spec.disaggregation.decodeRadixCache";

/// A rule whose safe rewrite sets `field` from `from` to `to`.
pub(crate) fn assert_rewritable(
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
pub(crate) fn assert_manual(
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

pub(crate) fn prefill(tp: i32) -> Option<PrefillSpec> {
    Some(PrefillSpec { tensor_parallel: tp, ..PrefillSpec::default() })
}

/// A fleet of `tp` GPUs with DP `dp` (with or without DP attention) and `args` in its extraArgs.
pub(crate) fn parallel_fleet(tp: i32, dp: i32, dp_attention: bool, args: &[&str]) -> FleetSpec {
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
pub(crate) fn violations_of(
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

/// Settings that speculate with `algorithm`, spelled as given.
pub(crate) fn speculating(algorithm: &str) -> DisaggregationSpec {
    with(|s| s.speculative_algorithm = Some(algorithm.to_string()))
}

pub(crate) fn env_fleet(name: &str, value: &str) -> FleetSpec {
    FleetSpec {
        env: vec![EnvVar { name: name.into(), value: Some(value.into()), value_from: None }],
        ..FleetSpec::default()
    }
}

pub(crate) fn at(patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout) -> Verdict {
    evaluate(PolicyInput::alone(settings, decode, layout, v0_5(patch)))
}

/// The verdict on a default decode fleet of `layout` whose speculative draft model is `draft`.
pub(crate) fn at_with_draft(
    patch: u16,
    settings: &DisaggregationSpec,
    layout: &AttentionLayout,
    draft: Option<&AttentionLayout>,
) -> Verdict {
    evaluate(PolicyInput::of(settings, layout, v0_5(patch)).with_draft(draft))
}

/// The messages of `rule` on each release 0.5.17…0.5.23 (None where it does not fire).
pub(crate) fn messages(
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
pub(crate) fn on(present: std::ops::RangeInclusive<u16>, message: &str) -> Vec<Option<String>> {
    (17..=23).map(|patch| present.contains(&patch).then(|| message.to_string())).collect()
}

pub(crate) fn concat(parts: &[Vec<Option<String>>]) -> Vec<Option<String>> {
    (0..7).map(|i| parts.iter().find_map(|p| p[i].clone())).collect()
}

/// The verdict on a server that is not a PD decode server: a prefill one, or one without PD.
pub(crate) fn evaluate_other_server(input: PolicyInput<'_>, prefill: bool) -> Verdict {
    evaluate_server(input, if prefill { ServerRole::Prefill } else { ServerRole::WithoutPd }, &SpecFields)
}
