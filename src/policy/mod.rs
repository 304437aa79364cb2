//! (settings, layout) → verdict. The only place the disaggregation rules live; the CLI, the
//! webhook, the controller and the cache runtime all call [`evaluate`].

mod role;
mod rules;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Serialize;

use crate::api::{
    AttentionLayout, DecodeSpec, DisaggregationSpec, EffectiveSettings, HybridSwaMemory, InferenceDeploymentSpec,
    KvPool, LayoutFeature, OnInvalid, RetractionBackup, Rewrite, SettingSource,
};
use crate::layout::{self, LayoutError, ResolveOptions};
use rules::{Context, Fix, RULES};

pub use role::evaluate_non_decode;
pub use rules::{attention_tp, pipeline_stages};

/// The host pool fraction SGLang gives a retraction-only host pool (`BACKUP_ONLY_HICACHE_RATIO`).
pub const BACKUP_ONLY_HOST_POOL_RATIO: f64 = 0.2;
/// The host pool fraction when hierarchical cache shares the host pool (`--hicache-ratio` default).
pub const HIERARCHICAL_HOST_POOL_RATIO: f64 = 2.0;

/// A Rewrite-mode fixed point is reached in at most one pass per rewritable field, plus one to
/// confirm; this bounds the loop whatever the rules do.
const MAX_PASSES: usize = 8;

/// What the policy is asked about.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// `spec.disaggregation`.
    pub disaggregation: &'a DisaggregationSpec,
    /// `spec.decode`.
    pub decode: &'a DecodeSpec,
    /// The resolved layout of the model.
    pub layout: &'a AttentionLayout,
}

/// The three possible verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The settings run as written.
    Valid,
    /// Some settings were rewritten (Rewrite mode) and the result is valid.
    Rewritten,
    /// At least one violation has no rewrite, or the resource asked for Reject.
    Rejected,
}

impl Outcome {
    /// The verdict as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Valid => "valid",
            Self::Rewritten => "rewritten",
            Self::Rejected => "rejected",
        }
    }
}

/// A setting the layout cannot run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Rule id of `sglang-rules.md` (`R2`, `T1`, …).
    pub rule: &'static str,
    /// Field path the rule is about.
    pub field: &'static str,
    /// SGLang's exact message.
    pub message: String,
    /// What to change.
    pub fix: String,
}

impl fmt::Display for Violation {
    /// `RULE field: message (fix: …)`, the form the webhook and conditions use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {} (fix: {})", self.rule, self.field, self.message, self.fix)
    }
}

/// The policy's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// valid, rewritten or rejected.
    pub outcome: Outcome,
    /// Violations left standing (every violation in Reject mode).
    pub violations: Vec<Violation>,
    /// Rewrites made (Rewrite mode), in the order they were made.
    pub rewrites: Vec<Rewrite>,
    /// The disaggregation settings after rewrites.
    #[serde(skip)]
    pub settings: DisaggregationSpec,
    /// The settings the runtime runs with, automatic choices resolved.
    pub effective: EffectiveSettings,
    /// Things worth knowing that are not violations.
    pub warnings: Vec<String>,
}

/// Checks the settings against the layout and decides valid / rewritten / rejected.
pub fn evaluate(input: PolicyInput<'_>) -> Verdict {
    let mut settings = input.disaggregation.clone();
    let mut rewrites: Vec<Rewrite> = Vec::new();
    let violations = match input.disaggregation.on_invalid {
        OnInvalid::Reject => findings(&settings, input),
        OnInvalid::Rewrite => {
            for _ in 0..MAX_PASSES {
                let mut changed = false;
                for rule in RULES {
                    let Fix::Rewrite { apply, .. } = rule.fix else {
                        continue;
                    };
                    let context = Context { settings: &settings, decode: input.decode, layout: input.layout };
                    let Some(finding) = (rule.check)(&context) else { continue };
                    let (from, to) = apply(&mut settings);
                    changed = true;
                    match rewrites.iter_mut().find(|r| r.field == rule.field) {
                        // A second rule fixed by the same field keeps the first rule's record and
                        // the original value.
                        Some(existing) => existing.to = to,
                        None => rewrites.push(Rewrite {
                            rule: rule.id.into(),
                            field: rule.field.into(),
                            from,
                            to,
                            message: finding.message,
                        }),
                    }
                }
                if !changed {
                    break;
                }
            }
            findings(&settings, input)
        }
    };
    let outcome = if !violations.is_empty() {
        Outcome::Rejected
    } else if rewrites.is_empty() {
        Outcome::Valid
    } else {
        Outcome::Rewritten
    };
    let source = if rewrites.iter().any(|r| r.field == rules::RETRACTION_BACKUP) {
        SettingSource::Rewritten
    } else if settings.retraction_backup.is_some() {
        SettingSource::Spec
    } else {
        SettingSource::Auto
    };
    let effective = effective_settings(&settings, input, source);
    let warnings = warnings(&settings, input, &effective);
    Verdict { outcome, violations, rewrites, settings, effective, warnings }
}

fn findings(settings: &DisaggregationSpec, input: PolicyInput<'_>) -> Vec<Violation> {
    let context = Context { settings, decode: input.decode, layout: input.layout };
    RULES
        .iter()
        .filter_map(|rule| {
            let finding = (rule.check)(&context)?;
            let hint = match rule.fix {
                Fix::Rewrite { hint, .. } => {
                    format!("{hint}; or set onInvalid: Rewrite to let kvpilot rewrite it")
                }
                Fix::Manual { hint } => hint.to_string(),
            };
            let fix = match finding.detail {
                Some(detail) => format!("{detail}; {hint}"),
                None => hint,
            };
            Some(Violation { rule: rule.id, field: rule.field, message: finding.message, fix })
        })
        .collect()
}

/// SGLang's automatic backup rule (§1.2): host_pool only on a decode server with no DCP, no
/// decode radix cache, no decode offload, no priority preemption, no unified memory, and a pool
/// that can mirror to the host (MHA, or hybrid SWA with full layers on every rank).
pub fn automatic_retraction_backup(
    settings: &DisaggregationSpec,
    decode: &DecodeSpec,
    layout: &AttentionLayout,
) -> RetractionBackup {
    let supports_host_pool = match layout.kv_pool {
        KvPool::Full => true,
        KvPool::HybridSwa => {
            !layout.has(LayoutFeature::DeepseekV4)
                && rules::stage_without_full_layer(layout, decode.pipeline_parallel).is_none()
        }
        KvPool::PureSwa | KvPool::HybridSsm | KvPool::Mla => false,
    };
    let priority_preemption = settings.priority_scheduling && !settings.disable_priority_preemption;
    if settings.decode_context_parallel <= 1
        && !settings.decode_radix_cache
        && !settings.decode_offload_kv_cache
        && !priority_preemption
        && !settings.enable_unified_memory
        && supports_host_pool
    {
        RetractionBackup::HostPool
    } else {
        RetractionBackup::CpuTensor
    }
}

fn effective_settings(
    settings: &DisaggregationSpec,
    input: PolicyInput<'_>,
    source: SettingSource,
) -> EffectiveSettings {
    let backup =
        settings.retraction_backup.unwrap_or_else(|| automatic_retraction_backup(settings, input.decode, input.layout));
    let host_pool = backup == RetractionBackup::HostPool;
    let host_pool_ratio = (host_pool || settings.hierarchical_cache).then(|| {
        settings.host_pool_ratio.unwrap_or(if host_pool && !settings.hierarchical_cache {
            BACKUP_ONLY_HOST_POOL_RATIO
        } else {
            HIERARCHICAL_HOST_POOL_RATIO
        })
    });
    EffectiveSettings {
        retraction_backup: backup,
        retraction_backup_source: source,
        transfer_backend: settings.transfer_backend,
        decode_radix_cache: settings.decode_radix_cache,
        decode_offload_kv_cache: settings.decode_offload_kv_cache,
        hierarchical_cache: settings.hierarchical_cache,
        priority_scheduling: settings.priority_scheduling,
        disable_priority_preemption: settings.disable_priority_preemption,
        decode_context_parallel: settings.decode_context_parallel,
        speculative_algorithm: settings.speculative_algorithm.clone(),
        mamba_radix_cache_strategy: settings.mamba_radix_cache_strategy,
        host_pool_ratio,
        enable_unified_memory: settings.enable_unified_memory,
    }
}

fn warnings(settings: &DisaggregationSpec, input: PolicyInput<'_>, effective: &EffectiveSettings) -> Vec<String> {
    let mut warnings = Vec::new();
    let layout = input.layout;
    if settings.prefill.is_none() && layout.is_hybrid_swa() && !layout.has(LayoutFeature::DeepseekV4) {
        warnings.push(
            "spec.disaggregation.prefill is not set, so rule T1 (prefill and decode attention TP must match for this \
             hybrid-SWA model) cannot be checked"
                .to_string(),
        );
    }
    if settings.host_pool_ratio.is_some() && effective.host_pool_ratio.is_none() {
        warnings.push(
            "spec.disaggregation.hostPoolRatio has no effect: the effective retraction backup is cpu_tensor and \
             hierarchical cache is off"
                .to_string(),
        );
    }
    if settings.decode_radix_cache && input.decode.enable_dp_attention {
        warnings.push(
            "decode radix cache with DP attention is experimental in SGLang: it needs prefix-aware DP rank routing for \
             cache hits"
                .to_string(),
        );
    }
    warnings
}

/// A resource's layout and verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// The resolved layout.
    pub layout: AttentionLayout,
    /// The policy's verdict on it.
    pub verdict: Verdict,
}

/// Resolves the layout of `config` as the spec asks (`hybridSwaMemory`) and evaluates the
/// spec's settings against it: the one pipeline every entry point runs.
pub fn assess(spec: &InferenceDeploymentSpec, config: &serde_json::Value) -> Result<Assessment, LayoutError> {
    let options =
        ResolveOptions { disable_hybrid_swa_memory: spec.model.hybrid_swa_memory == HybridSwaMemory::Disabled };
    let layout = layout::resolve(config, options)?;
    let verdict = evaluate(PolicyInput { disaggregation: &spec.disaggregation, decode: &spec.decode, layout: &layout });
    Ok(Assessment { layout, verdict })
}
