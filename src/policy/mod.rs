//! (settings, layout) → verdict. The only place the disaggregation rules live (`rules/`, one file
//! per SGLang concern, assembled by one registry); [`assess`] resolves the layout and evaluates
//! them for a service or for one server, and `sglang::verdict::assess`, which every caller decides
//! with, adds the rules of the command lines.

pub mod argv;
mod docs;
mod fields;
mod rules;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Serialize;

use k8s_openapi::api::core::v1::EnvVar;

use crate::api::DRAFT_CONFIG_FIELD;
use crate::api::{
    AttentionLayout, DisaggregationSpec, EffectiveSettings, FleetSpec, HybridSwaMemory, InferenceDeploymentSpec,
    KvPool, LayoutFeature, OnInvalid, RetractionBackup, Rewrite, SettingSource,
};
use crate::layout::{self, LayoutError, ResolveOptions};
use crate::release::{self, Release, ReleaseChoice, ReleaseError, ReleaseSource, v0_5};
use rules::{Fix, RULES, RuleInput, SERVER_ROLE_RULES, Subject};

pub use docs::{RULES_DOC_END, RULES_DOC_START, rules_markdown};
pub use fields::{FieldNames, SpecFields, render};
pub use rules::{
    CACHE_WIRING, COMMAND_LINE, ONE_WORD_COMMAND, Phase, RUST_SERVER_ENV, RuleInfo, ServerRole, pipeline_stages, pod,
    prefill_attention_tp,
};

/// The host pool fraction SGLang gives a retraction-only host pool (`BACKUP_ONLY_HICACHE_RATIO`,
/// 0.5.19 on; from 0.5.21 at least this, more when one max-length request needs more).
pub const BACKUP_ONLY_HOST_POOL_RATIO: f64 = 0.2;
/// The field of the host pool's size, as a fraction of the device pool.
const HOST_POOL_RATIO: &str = "spec.disaggregation.hostPoolRatio";
/// SGLang 0.5.18's retraction-only host pool: as large as the device pool (R9b).
pub const FIRST_RELEASE_HOST_POOL_RATIO: f64 = 1.0;
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
    pub decode: &'a FleetSpec,
    /// The resolved layout of the model.
    pub layout: &'a AttentionLayout,
    /// The resolved layout of `spec.disaggregation.speculativeDraftModel`; None when the model's
    /// own NextN/MTP layers draft (or nothing does).
    pub draft: Option<&'a AttentionLayout>,
    /// Whether the draft model's `--speculative-draft-model-path` is the model's own
    /// `--model-path` ([`draft_is_the_model`]): SGLang then drafts from the target's checkpoint,
    /// which IQuest Q1 refuses like no draft model at all.
    pub draft_is_the_model: bool,
    /// `spec.prefill`, the prefill fleet kvpilot runs with the service's settings: the rules that
    /// read flags kvpilot keeps no setting for (M2, M5, the tree cache's) read its `extraArgs`
    /// too. For a decode server the guard reads, the prefill server it is paired with, whose KV
    /// layout settings P3 compares.
    pub prefill_fleet: Option<&'a FleetSpec>,
    /// The SGLang release whose rules apply.
    pub release: Release,
}

#[cfg(test)]
impl<'a> PolicyInput<'a> {
    /// The input for a decode fleet of `layout` alone: no draft model, no prefill fleet.
    pub(crate) fn alone(
        disaggregation: &'a DisaggregationSpec,
        decode: &'a FleetSpec,
        layout: &'a AttentionLayout,
        release: Release,
    ) -> Self {
        Self { disaggregation, decode, layout, draft: None, draft_is_the_model: false, prefill_fleet: None, release }
    }

    /// [`PolicyInput::alone`] on the default decode fleet; the `with_*` methods set the rest.
    pub(crate) fn of(disaggregation: &'a DisaggregationSpec, layout: &'a AttentionLayout, release: Release) -> Self {
        static DEFAULT_FLEET: std::sync::LazyLock<FleetSpec> = std::sync::LazyLock::new(FleetSpec::default);
        Self::alone(disaggregation, &DEFAULT_FLEET, layout, release)
    }

    pub(crate) fn with_decode(self, decode: &'a FleetSpec) -> Self {
        Self { decode, ..self }
    }

    pub(crate) fn with_draft(self, draft: Option<&'a AttentionLayout>) -> Self {
        Self { draft, ..self }
    }

    pub(crate) fn with_draft_is_the_model(self, draft_is_the_model: bool) -> Self {
        Self { draft_is_the_model, ..self }
    }

    pub(crate) fn with_prefill(self, prefill_fleet: Option<&'a FleetSpec>) -> Self {
        Self { prefill_fleet, ..self }
    }
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
    /// Rule id as docs/rules.md lists it (`R2`, `T1`, `P1`, …).
    pub rule: &'static str,
    /// Field path the rule is about.
    pub field: &'static str,
    /// SGLang's exact message, as the release prints it.
    pub message: String,
    /// What to change.
    pub fix: String,
    /// Where SGLang raises it: args, pool build, handshake or transfer.
    pub phase: &'static str,
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

/// Checks the decode-side settings of a PD service against the layout and decides valid /
/// rewritten / rejected: the decode servers and the prefill servers that run with them (kvpilot
/// gives both the settings the two sides share, such as the Mamba strategy).
pub fn evaluate(input: PolicyInput<'_>) -> Verdict {
    evaluate_on(input, Subject::Service, ServerRole::Decode, &SpecFields)
}

/// [`evaluate`] for one server on its own (the guard's view of a command line) in `role`. A PD
/// decode server is checked against every rule. Another server is checked against the rules
/// SGLang applies to its role (each rule's `roles`), with nothing rewritten: each finding there
/// asks for a flag to be dropped or changed by hand, and the warnings, about the decode side's
/// pool and pairing, are not its. Its texts name the spec fields as `names` says.
pub fn evaluate_server(input: PolicyInput<'_>, role: ServerRole, names: &dyn FieldNames) -> Verdict {
    if role == ServerRole::Decode {
        return evaluate_on(input, Subject::DecodeServer, role, names);
    }
    let settings = DisaggregationSpec { on_invalid: OnInvalid::Reject, ..input.disaggregation.clone() };
    let mut verdict =
        evaluate_on(PolicyInput { disaggregation: &settings, ..input }, Subject::OtherServer, role, names);
    verdict.warnings.clear();
    verdict
}

/// The rules SGLang checks on a server of `role`, in report order: those of its role first.
fn rules_for(role: ServerRole) -> impl Iterator<Item = &'static rules::Rule> {
    SERVER_ROLE_RULES.iter().chain(RULES).filter(move |rule| rule.roles.contains(&role))
}

fn evaluate_on(input: PolicyInput<'_>, subject: Subject, role: ServerRole, names: &dyn FieldNames) -> Verdict {
    let mut settings = input.disaggregation.clone();
    let mut rewrites: Vec<Rewrite> = Vec::new();
    let violations = match input.disaggregation.on_invalid {
        OnInvalid::Reject => findings(&settings, input, subject, role, names),
        OnInvalid::Rewrite => {
            for _ in 0..MAX_PASSES {
                let mut changed = false;
                for rule in rules_for(role) {
                    let Fix::Rewrite { apply, .. } = rule.fix else {
                        continue;
                    };
                    let Some(finding) = rule.evaluate(&rule_input(&settings, input, subject)) else { continue };
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
                            message: rule.message(input.release, &finding),
                        }),
                    }
                }
                if !changed {
                    break;
                }
            }
            findings(&settings, input, subject, role, names)
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
    let warnings = warnings(&settings, input, &effective, outcome == Outcome::Rejected, subject, names);
    Verdict { outcome, violations, rewrites, settings, effective, warnings }
}

/// What the rules see of `input` with the settings as they stand.
fn rule_input<'a>(settings: &'a DisaggregationSpec, input: PolicyInput<'a>, subject: Subject) -> RuleInput<'a> {
    RuleInput {
        settings,
        decode: input.decode,
        layout: input.layout,
        draft: input.draft,
        draft_is_the_model: input.draft_is_the_model,
        prefill_fleet: input.prefill_fleet,
        release: input.release,
        subject,
    }
}

fn findings(
    settings: &DisaggregationSpec,
    input: PolicyInput<'_>,
    subject: Subject,
    role: ServerRole,
    names: &dyn FieldNames,
) -> Vec<Violation> {
    let rule_input = rule_input(settings, input, subject);
    rules_for(role)
        .filter_map(|rule| {
            let finding = rule.evaluate(&rule_input)?;
            let hint = render(rule.fix.hint(), names);
            let hint = match rule.fix {
                Fix::Rewrite { .. } => format!("{hint}; or set onInvalid: Rewrite to let kvpilot rewrite it"),
                Fix::Manual { .. } => hint,
            };
            let message = rule.message(input.release, &finding);
            let fix = match finding.detail {
                Some(detail) => format!("{detail}; {hint}"),
                None => hint,
            };
            Some(Violation { rule: rule.id, field: rule.field, message, fix, phase: rule.phase.as_str() })
        })
        .collect()
}

/// Whether `--enable-unified-memory` keeps the automatic choice off host_pool: 0.5.20 refuses
/// host_pool under unified memory outright; 0.5.21+ only for a hybrid-SWA pool
/// (`unified_hybrid_swa` in `resolve_decode_retraction_backup`) or with MTP draft pools, which
/// U1 already refuses (unified memory with speculative decoding); 0.5.18–0.5.19 ignore it.
fn unified_memory_blocks_host_pool(settings: &DisaggregationSpec, layout: &AttentionLayout, release: Release) -> bool {
    settings.enable_unified_memory
        && match release {
            r if r < v0_5(20) => false,
            r if r == v0_5(20) => true,
            _ => layout.is_hybrid_swa(),
        }
}

/// SGLang's automatic backup rule, `resolve_decode_retraction_backup` of `release` (read from
/// each release's wheel; drift §4 misstates unified memory): host_pool only on a decode server
/// with no DCP, no decode radix cache, no decode offload, no priority preemption, unified memory
/// only where the release allows it ([`unified_memory_blocks_host_pool`]), and a pool that can
/// mirror to the host (MHA, or hybrid SWA with full layers on every rank). Before 0.5.18 there
/// is no host pool.
pub fn automatic_retraction_backup(
    settings: &DisaggregationSpec,
    decode: &FleetSpec,
    layout: &AttentionLayout,
    release: Release,
) -> RetractionBackup {
    if release < v0_5(18) {
        return RetractionBackup::CpuTensor;
    }
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
        && !unified_memory_blocks_host_pool(settings, layout, release)
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
    // Host receive makes the PD hook choose host_pool over anything but an explicit cpu_tensor.
    let forced = rules::host_receive_on(settings, input.release)
        && settings.retraction_backup != Some(RetractionBackup::CpuTensor);
    let backup = match settings.retraction_backup {
        _ if forced => RetractionBackup::HostPool,
        Some(backup) => backup,
        None => automatic_retraction_backup(settings, input.decode, input.layout, input.release),
    };
    let host_pool = backup == RetractionBackup::HostPool;
    let host_pool_ratio = (host_pool || settings.hierarchical_cache).then(|| {
        settings.host_pool_ratio.unwrap_or(match (host_pool, settings.hierarchical_cache) {
            (true, _) if input.release == v0_5(18) => FIRST_RELEASE_HOST_POOL_RATIO,
            (true, false) => BACKUP_ONLY_HOST_POOL_RATIO,
            _ => HIERARCHICAL_HOST_POOL_RATIO,
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
        decode_env: required_env(settings, input),
    }
}

/// Environment the release needs on the decode pods for these settings: 0.5.19–0.5.20 build the
/// unified radix tree that decode radix cache on a hybrid-SWA model needs only when
/// `SGLANG_ENABLE_UNIFIED_RADIX_TREE=1` (R13), so kvpilot sets it unless the spec sets it.
fn required_env(settings: &DisaggregationSpec, input: PolicyInput<'_>) -> Vec<EnvVar> {
    let needs_unified_tree = (v0_5(19)..=v0_5(20)).contains(&input.release)
        && settings.decode_radix_cache
        && input.layout.is_hybrid_swa()
        && input.decode.env_value(rules::UNIFIED_RADIX_TREE_ENV).is_none();
    if needs_unified_tree {
        vec![EnvVar { name: rules::UNIFIED_RADIX_TREE_ENV.into(), value: Some("1".into()), value_from: None }]
    } else {
        Vec::new()
    }
}

/// R12: a PD decode server without decode radix cache runs with its radix cache disabled, which
/// SGLang only logs; the settings that serve a radix cache then do nothing on it.
fn decode_radix_cache_warnings(
    settings: &DisaggregationSpec,
    input: PolicyInput<'_>,
    subject: Subject,
    names: &dyn FieldNames,
) -> Vec<String> {
    if subject == Subject::OtherServer || settings.decode_radix_cache {
        return Vec::new();
    }
    let log = if input.release >= v0_5(22) {
        "Radix cache is disabled for decode server"
    } else {
        "KV cache is forced as chunk cache for decode server"
    };
    let mut ignored: Vec<String> = Vec::new();
    if let Some(strategy) = settings.mamba_radix_cache_strategy
        && input.layout.uses_ssm_state()
    {
        let where_used = match subject {
            Subject::Service => " (the prefill servers use it)",
            _ => "",
        };
        ignored.push(format!("the Mamba radix cache strategy {}{where_used}", strategy.as_str()));
    }
    for option in ["--radix-eviction-policy", "--radix-eviction-policy-config"] {
        if argv::named(&input.decode.extra_args, option) {
            ignored.push(option.to_string());
        }
    }
    if ignored.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "R12: without {} SGLang {} disables the decode servers' radix cache (it logs \"{log}\"), so {} does \
         nothing there; turn decodeRadixCache on to use it",
        names.name("spec.disaggregation.decodeRadixCache"),
        input.release,
        ignored.join(" and ")
    )]
}

fn warnings(
    settings: &DisaggregationSpec,
    input: PolicyInput<'_>,
    effective: &EffectiveSettings,
    rejected: bool,
    subject: Subject,
    names: &dyn FieldNames,
) -> Vec<String> {
    let mut warnings = decode_radix_cache_warnings(settings, input, subject, names);
    let layout = input.layout;
    let t1_applies = RULES.iter().any(|r| r.id == "T1" && r.applies(input.release, settings.transfer_backend));
    if settings.prefill.is_none() && t1_applies && layout.is_hybrid_swa() && !layout.has(LayoutFeature::DeepseekV4) {
        // A service may describe prefill servers it does not run; a server's are those paired with it.
        let unknown = match subject {
            Subject::Service => "spec.disaggregation.prefill is not set",
            _ => "the prefill servers' parallelism is not known here",
        };
        warnings.push(format!(
            "{unknown}, so rule T1 (prefill and decode attention TP must match for this hybrid-SWA model) cannot be \
             checked"
        ));
    }
    // Decode offload builds its own host pool, sized by the same ratio.
    if settings.host_pool_ratio.is_some() && effective.host_pool_ratio.is_none() && !settings.decode_offload_kv_cache {
        warnings.push(format!(
            "{} has no effect: the effective retraction backup is cpu_tensor and neither hierarchical cache nor \
             decode offload builds a host pool",
            names.name(HOST_POOL_RATIO)
        ));
    }
    if !rejected
        && effective.retraction_backup == RetractionBackup::HostPool
        && settings.host_pool_ratio.is_none()
        && !settings.hierarchical_cache
        && input.release >= v0_5(21)
    {
        warnings.push(format!(
            "SGLang {} sizes the retraction host pool at max(0.2, one max-length request / device pool) of the device \
             pool; size node memory for a full-context request, or set {}",
            input.release,
            names.name(HOST_POOL_RATIO)
        ));
    }
    if effective.retraction_backup == RetractionBackup::None {
        warnings.push(
            "retractionBackup none keeps no backup: a request retracted under decode memory pressure is aborted with \
             HTTP 503 for the client to retry"
                .to_string(),
        );
    }
    for env in &effective.decode_env {
        warnings.push(format!(
            "SGLang {} needs {}={} for these settings; kvpilot sets it on the decode pods",
            input.release,
            env.name,
            env.value.as_deref().unwrap_or_default()
        ));
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

/// The config.json files a resource's verdict depends on: the model's, and its speculative
/// draft's when the spec names a draft model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfigs {
    /// `spec.model`'s config.json.
    pub target: serde_json::Value,
    /// `spec.disaggregation.speculativeDraftModel`'s config.json.
    pub draft: Option<serde_json::Value>,
}

impl ModelConfigs {
    /// The model's config.json alone (no draft model named).
    pub fn target(target: serde_json::Value) -> Self {
        Self { target, draft: None }
    }
}

/// A layout and verdict, and the release they were decided for.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// The resolved layout.
    pub layout: AttentionLayout,
    /// The resolved layout of the speculative draft model, when the spec names one.
    pub draft_layout: Option<AttentionLayout>,
    /// The policy's verdict on it, with the command-line rules' refusals (`sglang::verdict::assess`).
    pub verdict: Verdict,
    /// The SGLang release whose classification and rules applied, and where it came from.
    pub release: ReleaseChoice,
    /// What the release's parser says of the command lines it accepts: abbreviations, deprecated
    /// options, what it could not judge (`sglang::verdict::assess`).
    pub command_line_warnings: Vec<String>,
}

/// What a verdict is about.
#[derive(Clone, Copy)]
pub enum Checked<'a> {
    /// An InferenceDeployment's PD service: its decode servers and the prefill servers kvpilot gives
    /// the settings both sides share.
    Service,
    /// One server of a workload, in its role, whose texts name the spec fields as `names` says.
    Server { role: ServerRole, names: &'a dyn FieldNames },
}

/// The SGLang release a resource is checked against ([`release::choose_for_resource`]):
/// `spec.sglang.version`, else the tag of `spec.decode.image` when it names a version, else
/// `fallback`. A version newer than any known gets the newest profile; a malformed or unknown one,
/// in the spec or the image's tag, is an error.
pub fn resource_release(
    spec: &InferenceDeploymentSpec,
    fallback: &ReleaseChoice,
) -> Result<ReleaseChoice, ReleaseError> {
    let version = spec.sglang.as_ref().and_then(|s| s.version.as_deref());
    let pinned = version.map(|version| release::choose_text(version, ReleaseSource::Spec)).transpose()?;
    release::choose_for_resource(pinned, spec.decode.image.as_deref(), fallback)
}

/// Resolves the layout of `config` as the spec asks (`hybridSwaMemory`) and the release says,
/// and evaluates the spec's settings against it for what is `checked`. A service's verdict also
/// carries the release's and the draft model's warnings; a server's reader (the guard) words the
/// release it checked as itself.
pub fn assess(
    spec: &InferenceDeploymentSpec,
    configs: &ModelConfigs,
    release: &ReleaseChoice,
    checked: Checked<'_>,
) -> Result<Assessment, LayoutError> {
    let options = ResolveOptions {
        disable_hybrid_swa_memory: spec.model.hybrid_swa_memory == HybridSwaMemory::Disabled,
        release: release.release,
    };
    let layout = layout::resolve(&configs.target, options)?;
    let draft_layout = configs.draft.as_ref().map(|draft| resolve_draft(draft, options)).transpose()?;
    let input = PolicyInput {
        disaggregation: &spec.disaggregation,
        decode: &spec.decode,
        layout: &layout,
        draft: draft_layout.as_ref(),
        draft_is_the_model: draft_is_the_model(spec),
        prefill_fleet: spec.prefill.as_deref(),
        release: release.release,
    };
    let verdict = match checked {
        Checked::Service => {
            let mut verdict = evaluate(input);
            verdict.warnings.extend(release.warning());
            if let Some(draft) = &draft_layout {
                verdict.warnings.extend(draft.warnings.iter().map(|w| format!("speculative draft model: {w}")));
            }
            verdict
        }
        Checked::Server { role, names } => evaluate_server(input, role, names),
    };
    Ok(Assessment { layout, draft_layout, verdict, release: release.clone(), command_line_warnings: Vec::new() })
}

/// Whether `spec` names a speculative draft model whose servers load it from the model's own
/// path (the same hub id, or the same directory of the weights volume).
pub fn draft_is_the_model(spec: &InferenceDeploymentSpec) -> bool {
    spec.disaggregation
        .speculative_draft_model
        .as_ref()
        .is_some_and(|draft| draft.served_path(&spec.model) == spec.model.served_path())
}

/// The draft model's layout, resolved as the target's is; an error names the draft's config.
pub fn resolve_draft(config: &serde_json::Value, options: ResolveOptions) -> Result<AttentionLayout, LayoutError> {
    layout::resolve(config, options).map_err(|e| LayoutError {
        field: format!("{DRAFT_CONFIG_FIELD}: {}", e.field),
        message: format!("the speculative draft model's config.json: {}", e.message),
    })
}
