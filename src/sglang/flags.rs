//! The one table of SGLang server flags ↔ engine-neutral settings. [`read`] uses it to turn a
//! command line into [`ServerSettings`]; [`write`] uses it to turn settings back into flags.
//! Flags that are not in the table pass through untouched.

use crate::api::{
    DisaggregationSpec, FleetSpec, HicacheHostMemoryMode, HybridSwaMemory, MambaRadixCacheStrategy, RetractionBackup,
    TransferBackend,
};

use super::cmdline::Arg;
use super::server_cli::{ServerCli, Word};
use crate::release::{Release, v0_5};

/// `--disaggregation-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DisaggregationMode {
    /// No disaggregation (SGLang's default `null`).
    #[default]
    Null,
    /// A PD prefill server.
    Prefill,
    /// A PD decode server.
    Decode,
}

impl DisaggregationMode {
    /// The value as SGLang spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }
}

/// What one SGLang server runs with, in the policy's terms: the command line maps into the same
/// `DisaggregationSpec` and `FleetSpec` an InferenceDeployment's spec holds.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    pub mode: DisaggregationMode,
    /// `--model-path`.
    pub model_path: Option<String>,
    /// `--revision`.
    pub revision: Option<String>,
    /// `--speculative-draft-model-path`.
    pub draft_model_path: Option<String>,
    /// `--speculative-draft-model-revision`.
    pub draft_revision: Option<String>,
    pub hybrid_swa_memory: HybridSwaMemory,
    pub disaggregation: DisaggregationSpec,
    /// Parallelism, page size and the `SGLANG_*` environment (`env`).
    pub decode: FleetSpec,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            mode: DisaggregationMode::Null,
            model_path: None,
            revision: None,
            draft_model_path: None,
            draft_revision: None,
            hybrid_swa_memory: HybridSwaMemory::Auto,
            disaggregation: DisaggregationSpec::default(),
            decode: FleetSpec::default(),
        }
    }
}

/// Whether a flag takes a value or is a store-true switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Value,
    Switch,
}

/// The setting a flag stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Mode,
    ModelPath,
    Revision,
    RetractionBackup,
    TransferBackend,
    DecodeRadixCache,
    DecodeOffloadKvCache,
    HierarchicalCache,
    PriorityScheduling,
    DisablePriorityPreemption,
    DecodeContextParallel,
    SpeculativeAlgorithm,
    DraftModelPath,
    DraftRevision,
    MambaRadixCacheStrategy,
    HostPoolRatio,
    EnableUnifiedMemory,
    HicacheStorageBackend,
    TensorParallel,
    DataParallel,
    PipelineParallel,
    EnableDpAttention,
    AttentionDataParallel,
    PageSize,
    DisableHybridSwaMemory,
    KvCacheDtype,
    SwaFullTokensRatio,
    Lmcache,
    UnifiedCacheExternalLinker,
    Hisparse,
    HostReceiveThreshold,
    HostMemoryMode,
}

/// One row: SGLang's spellings, the option strings the releases declare (`server_cli.tsv`; the
/// first is canonical and is what [`write`] emits; abbreviations such as `--tp` are not
/// spellings, [`read`] resolves them through the release's parser), the kind,
/// the setting, and the spec field path the policy names in its findings.
#[derive(Debug, PartialEq, Eq)]
pub struct Flag {
    pub names: &'static [&'static str],
    pub kind: Kind,
    pub target: Target,
    pub field: &'static str,
}

impl Flag {
    /// The canonical spelling.
    pub fn name(&self) -> &'static str {
        self.names[0]
    }
}

const fn row(names: &'static [&'static str], kind: Kind, target: Target, field: &'static str) -> Flag {
    Flag { names, kind, target, field }
}

/// Every flag kvpilot reads and writes, in the order [`write`] emits them.
pub const FLAGS: &[Flag] = &[
    row(&["--model-path", "--model"], Kind::Value, Target::ModelPath, "spec.model.name"),
    row(&["--revision"], Kind::Value, Target::Revision, "spec.model.revision"),
    row(&["--disaggregation-mode"], Kind::Value, Target::Mode, "disaggregation mode"),
    row(
        &["--disaggregation-transfer-backend"],
        Kind::Value,
        Target::TransferBackend,
        "spec.disaggregation.transferBackend",
    ),
    row(&["--tensor-parallel-size", "--tp-size"], Kind::Value, Target::TensorParallel, "spec.decode.tensorParallel"),
    row(&["--data-parallel-size", "--dp-size"], Kind::Value, Target::DataParallel, "spec.decode.dataParallel"),
    row(
        &["--pipeline-parallel-size", "--pp-size"],
        Kind::Value,
        Target::PipelineParallel,
        "spec.decode.pipelineParallel",
    ),
    row(&["--enable-dp-attention"], Kind::Switch, Target::EnableDpAttention, "spec.decode.enableDpAttention"),
    // SGLang 0.5.22's spelling of `--dp-size N --enable-dp-attention`, which it deprecates.
    row(
        &["--attn-dp-size", "--attention-data-parallel-size"],
        Kind::Value,
        Target::AttentionDataParallel,
        "spec.decode.dataParallel",
    ),
    row(&["--page-size"], Kind::Value, Target::PageSize, "spec.decode.pageSize"),
    row(&["--disable-hybrid-swa-memory"], Kind::Switch, Target::DisableHybridSwaMemory, "spec.model.hybridSwaMemory"),
    row(
        &["--disaggregation-decode-retraction-backup"],
        Kind::Value,
        Target::RetractionBackup,
        "spec.disaggregation.retractionBackup",
    ),
    row(
        &["--dcp-size", "--decode-context-parallel-size"],
        Kind::Value,
        Target::DecodeContextParallel,
        "spec.disaggregation.decodeContextParallel",
    ),
    row(
        &["--disaggregation-decode-enable-radix-cache"],
        Kind::Switch,
        Target::DecodeRadixCache,
        "spec.disaggregation.decodeRadixCache",
    ),
    row(
        &["--disaggregation-decode-enable-offload-kvcache"],
        Kind::Switch,
        Target::DecodeOffloadKvCache,
        "spec.disaggregation.decodeOffloadKvCache",
    ),
    row(
        &["--enable-hierarchical-cache", "--enable-hicache"],
        Kind::Switch,
        Target::HierarchicalCache,
        "spec.disaggregation.hierarchicalCache",
    ),
    row(&["--hicache-ratio"], Kind::Value, Target::HostPoolRatio, "spec.disaggregation.hostPoolRatio"),
    row(
        &["--hicache-storage-backend"],
        Kind::Value,
        Target::HicacheStorageBackend,
        "spec.disaggregation.hicacheStorageBackend",
    ),
    row(
        &["--enable-priority-scheduling"],
        Kind::Switch,
        Target::PriorityScheduling,
        "spec.disaggregation.priorityScheduling",
    ),
    row(
        &["--disable-priority-preemption"],
        Kind::Switch,
        Target::DisablePriorityPreemption,
        "spec.disaggregation.disablePriorityPreemption",
    ),
    row(
        &["--speculative-algorithm"],
        Kind::Value,
        Target::SpeculativeAlgorithm,
        "spec.disaggregation.speculativeAlgorithm",
    ),
    row(
        &["--speculative-draft-model-path", "--speculative-draft-model"],
        Kind::Value,
        Target::DraftModelPath,
        "spec.disaggregation.speculativeDraftModel",
    ),
    row(
        &["--speculative-draft-model-revision"],
        Kind::Value,
        Target::DraftRevision,
        "spec.disaggregation.speculativeDraftModel.revision",
    ),
    row(
        &["--mamba-radix-cache-strategy"],
        Kind::Value,
        Target::MambaRadixCacheStrategy,
        "spec.disaggregation.mambaRadixCacheStrategy",
    ),
    row(
        &["--enable-unified-memory"],
        Kind::Switch,
        Target::EnableUnifiedMemory,
        "spec.disaggregation.enableUnifiedMemory",
    ),
    row(&["--kv-cache-dtype"], Kind::Value, Target::KvCacheDtype, "spec.decode.kvCacheDtype"),
    row(&["--swa-full-tokens-ratio"], Kind::Value, Target::SwaFullTokensRatio, "spec.decode.swaFullTokensRatio"),
    row(&["--enable-lmcache"], Kind::Switch, Target::Lmcache, "spec.disaggregation.lmcache"),
    row(
        &["--enable-unified-cache-external-linker"],
        Kind::Switch,
        Target::UnifiedCacheExternalLinker,
        "spec.disaggregation.unifiedCacheExternalLinker",
    ),
    row(&["--enable-hisparse"], Kind::Switch, Target::Hisparse, "spec.disaggregation.hisparse"),
    row(
        &["--disaggregation-decode-host-receive-threshold"],
        Kind::Value,
        Target::HostReceiveThreshold,
        "spec.disaggregation.decodeHostReceiveThreshold",
    ),
    row(
        &["--hicache-host-memory-mode"],
        Kind::Value,
        Target::HostMemoryMode,
        "spec.disaggregation.hicacheHostMemoryMode",
    ),
];

/// The row for a spelling, if kvpilot knows the flag.
pub fn lookup(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|flag| flag.names.contains(&name))
}

/// The row whose setting is the spec field `field` (as the policy names it).
pub fn for_field(field: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|flag| flag.field == field)
}

/// Where one table flag was written on a command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    pub flag: &'static Flag,
    /// Index of the `--name` or `--name=value` argument.
    pub name_at: usize,
    /// Index of the separate value argument, for `--name value`.
    pub value_at: Option<usize>,
    /// The flag as written, `--name` or `--name=value`, for reports.
    pub written: String,
}

/// A command line read through the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub settings: ServerSettings,
    pub occurrences: Vec<Occurrence>,
    pub warnings: Vec<String>,
}

impl Parsed {
    /// The last occurrence of `flag` (the one argparse keeps).
    pub fn last(&self, flag: &Flag) -> Option<&Occurrence> {
        self.occurrences.iter().rev().find(|o| std::ptr::eq(o.flag, flag))
    }
}

/// Reads server arguments as the release's argparse (`cli`) does: `--name value` and
/// `--name=value`, every alias, unique-prefix abbreviations (`--tp`, `--mem-frac`) standing for
/// their full option, store-true switches, values starting with `-` where argparse takes them as
/// values (`-1`), nothing after `--`, the last of repeated flags winning. Problems become
/// warnings naming the flag; whether the release accepts the argv at all is `server_cli`'s to say.
pub fn read(args: &[Arg], cli: &ServerCli) -> Parsed {
    let mut settings = ServerSettings::default();
    let mut occurrences = Vec::new();
    let mut warnings = Vec::new();
    // The table row an argument names, the name as written (`--tp` of `--tp=2`) and its `=value`.
    let resolve = |text: &str| -> Option<(&'static Flag, String, Option<String>)> {
        let Word::Option { option, inline, .. } = cli.classify(text) else { return None };
        let flag = option.strings.iter().find_map(|s| lookup(s))?;
        let name = match inline {
            Some(_) => text.split_once('=').map_or(text, |(name, _)| name),
            None => text,
        };
        Some((flag, name.to_string(), inline.map(str::to_string)))
    };
    let is_value = |text: &str| text != "--" && cli.classify(text) == Word::Value;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let at = i;
        i += 1;
        if arg.text == "--" {
            break;
        }
        let Some((flag, name, inline)) = resolve(&arg.text) else { continue };
        match flag.kind {
            Kind::Switch => {
                if inline.is_some() {
                    warnings.push(format!("{}: {name} is a switch and takes no value; SGLang refuses it", arg.text));
                    continue;
                }
                apply(flag.target, "", &mut settings).unwrap_or_default();
                occurrences.push(Occurrence { flag, name_at: at, value_at: None, written: name });
            }
            Kind::Value => {
                let (value, value_at, expands) = match inline {
                    Some(value) => (value, None, arg.expands),
                    None => match args.get(i).filter(|next| is_value(&next.text)) {
                        Some(next) => {
                            i += 1;
                            (next.text.clone(), Some(at + 1), next.expands)
                        }
                        None => {
                            warnings.push(format!("{name} expects a value; SGLang refuses the command line"));
                            continue;
                        }
                    },
                };
                let written = format!("{name}={value}");
                if expands {
                    warnings.push(format!(
                        "{written}: the value is a shell or $(VAR) expansion kvpilot cannot see; this flag is not checked"
                    ));
                    // The unseen value wins over earlier ones, as argparse's last value does.
                    reset(flag.target, &mut settings);
                } else if let Err(problem) = apply(flag.target, &value, &mut settings) {
                    warnings.push(format!("{written}: {problem}; this flag is not checked"));
                }
                occurrences.push(Occurrence { flag, name_at: at, value_at, written });
            }
        }
    }
    Parsed { settings, occurrences, warnings }
}

fn positive_int(value: &str) -> Result<i32, String> {
    match value.trim().parse::<i32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, got {value:?}")),
    }
}

fn one_of<T: Copy>(value: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices.iter().find(|(name, _)| *name == value).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
        format!("expected one of {}, got {value:?}", names.join(", "))
    })
}

/// Sets the setting `target` from a flag value (switches pass "").
fn apply(target: Target, value: &str, s: &mut ServerSettings) -> Result<(), String> {
    let d = &mut s.disaggregation;
    match target {
        Target::Mode => {
            s.mode = one_of(
                value,
                &[
                    ("null", DisaggregationMode::Null),
                    ("prefill", DisaggregationMode::Prefill),
                    ("decode", DisaggregationMode::Decode),
                ],
            )?;
        }
        Target::ModelPath => s.model_path = Some(value.to_string()),
        Target::Revision => s.revision = Some(value.to_string()),
        Target::RetractionBackup => {
            d.retraction_backup = Some(one_of(
                value,
                &[
                    ("cpu_tensor", RetractionBackup::CpuTensor),
                    ("host_pool", RetractionBackup::HostPool),
                    ("none", RetractionBackup::None),
                ],
            )?);
        }
        Target::TransferBackend => {
            d.transfer_backend = one_of(
                value,
                &[
                    ("mooncake", TransferBackend::Mooncake),
                    ("nixl", TransferBackend::Nixl),
                    ("mori", TransferBackend::Mori),
                    ("fake", TransferBackend::Fake),
                ],
            )?;
        }
        Target::DecodeRadixCache => d.decode_radix_cache = true,
        Target::DecodeOffloadKvCache => d.decode_offload_kv_cache = true,
        Target::HierarchicalCache => d.hierarchical_cache = true,
        Target::PriorityScheduling => d.priority_scheduling = true,
        Target::DisablePriorityPreemption => d.disable_priority_preemption = true,
        Target::DecodeContextParallel => d.decode_context_parallel = positive_int(value)?,
        Target::SpeculativeAlgorithm => d.speculative_algorithm = Some(value.to_string()),
        Target::DraftModelPath => s.draft_model_path = Some(value.to_string()),
        Target::DraftRevision => s.draft_revision = Some(value.to_string()),
        Target::MambaRadixCacheStrategy => {
            d.mamba_radix_cache_strategy = Some(one_of(
                value,
                &[
                    ("no_buffer", MambaRadixCacheStrategy::NoBuffer),
                    ("extra_buffer", MambaRadixCacheStrategy::ExtraBuffer),
                    ("extra_buffer_lazy", MambaRadixCacheStrategy::ExtraBufferLazy),
                ],
            )?);
        }
        Target::HostPoolRatio => match value.trim().parse::<f64>() {
            Ok(ratio) if ratio > 0.0 && ratio.is_finite() => d.host_pool_ratio = Some(ratio),
            _ => return Err(format!("expected a number greater than 0, got {value:?}")),
        },
        Target::EnableUnifiedMemory => d.enable_unified_memory = true,
        Target::Lmcache => d.lmcache = true,
        Target::UnifiedCacheExternalLinker => d.unified_cache_external_linker = true,
        Target::Hisparse => d.hisparse = true,
        // Any number: its range is SGLang's rule N2, which the policy reports with SGLang's text.
        Target::HostReceiveThreshold => match value.trim().parse::<f64>() {
            Ok(threshold) if threshold.is_finite() => d.decode_host_receive_threshold = Some(threshold),
            _ => return Err(format!("expected a number, got {value:?}")),
        },
        Target::HostMemoryMode => {
            d.hicache_host_memory_mode = Some(one_of(
                value,
                &[("cache", HicacheHostMemoryMode::Cache), ("buffer_only", HicacheHostMemoryMode::BufferOnly)],
            )?);
        }
        Target::HicacheStorageBackend => d.hicache_storage_backend = Some(value.to_string()),
        Target::TensorParallel => s.decode.tensor_parallel = positive_int(value)?,
        Target::DataParallel => s.decode.data_parallel = positive_int(value)?,
        Target::PipelineParallel => s.decode.pipeline_parallel = positive_int(value)?,
        Target::EnableDpAttention => s.decode.enable_dp_attention = true,
        // One group is SGLang's default, no attention DP: it leaves `--dp-size`'s replicas (or the
        // deprecated `--dp-size N --enable-dp-attention`, which SGLang turns into N groups) as
        // they are.
        Target::AttentionDataParallel => {
            let groups = positive_int(value)?;
            if groups > 1 {
                s.decode.data_parallel = groups;
                s.decode.enable_dp_attention = true;
            }
        }
        Target::PageSize => s.decode.page_size = Some(positive_int(value)?),
        Target::DisableHybridSwaMemory => s.hybrid_swa_memory = HybridSwaMemory::Disabled,
        // `auto` is SGLang's default and the spec's unset.
        Target::KvCacheDtype => s.decode.kv_cache_dtype = (value != "auto").then(|| value.to_string()),
        // Any number: its range is SGLang's rule S8, which the policy reports with SGLang's text.
        Target::SwaFullTokensRatio => match value.trim().parse::<f64>() {
            Ok(ratio) if ratio.is_finite() => s.decode.swa_full_tokens_ratio = Some(ratio),
            _ => return Err(format!("expected a number, got {value:?}")),
        },
    }
    Ok(())
}

/// Puts the value-taking setting `target` back to SGLang's default.
fn reset(target: Target, s: &mut ServerSettings) {
    let defaults = ServerSettings::default();
    let (d, default) = (&mut s.disaggregation, &defaults.disaggregation);
    match target {
        Target::Mode => s.mode = defaults.mode,
        Target::ModelPath => s.model_path = None,
        Target::Revision => s.revision = None,
        Target::RetractionBackup => d.retraction_backup = default.retraction_backup,
        Target::TransferBackend => d.transfer_backend = default.transfer_backend,
        Target::DecodeContextParallel => d.decode_context_parallel = default.decode_context_parallel,
        Target::SpeculativeAlgorithm => d.speculative_algorithm = None,
        Target::DraftModelPath => s.draft_model_path = None,
        Target::DraftRevision => s.draft_revision = None,
        Target::MambaRadixCacheStrategy => d.mamba_radix_cache_strategy = None,
        Target::HostPoolRatio => d.host_pool_ratio = None,
        Target::HicacheStorageBackend => d.hicache_storage_backend = None,
        Target::HostReceiveThreshold => d.decode_host_receive_threshold = None,
        Target::HostMemoryMode => d.hicache_host_memory_mode = None,
        Target::TensorParallel => s.decode.tensor_parallel = defaults.decode.tensor_parallel,
        Target::DataParallel => s.decode.data_parallel = defaults.decode.data_parallel,
        Target::AttentionDataParallel => {
            s.decode.data_parallel = defaults.decode.data_parallel;
            s.decode.enable_dp_attention = defaults.decode.enable_dp_attention;
        }
        Target::PipelineParallel => s.decode.pipeline_parallel = defaults.decode.pipeline_parallel,
        Target::PageSize => s.decode.page_size = defaults.decode.page_size,
        Target::KvCacheDtype => s.decode.kv_cache_dtype = None,
        Target::SwaFullTokensRatio => s.decode.swa_full_tokens_ratio = None,
        // Switches take no value, so none is ever expanded.
        Target::DecodeRadixCache
        | Target::DecodeOffloadKvCache
        | Target::HierarchicalCache
        | Target::PriorityScheduling
        | Target::DisablePriorityPreemption
        | Target::EnableUnifiedMemory
        | Target::Lmcache
        | Target::UnifiedCacheExternalLinker
        | Target::Hisparse
        | Target::EnableDpAttention
        | Target::DisableHybridSwaMemory => {}
    }
}

/// How a setting is written: not at all (SGLang's default), as a bare switch, or with a value.
enum Written {
    Default,
    Switch,
    Value(String),
}

fn switch(on: bool) -> Written {
    if on { Written::Switch } else { Written::Default }
}

fn value<T: PartialEq + ToString>(current: T, default: T) -> Written {
    if current == default { Written::Default } else { Written::Value(current.to_string()) }
}

fn optional(current: Option<&str>) -> Written {
    current.map_or(Written::Default, |v| Written::Value(v.to_string()))
}

/// The inverse of [`apply`]: how `target` is written for settings `s` at `release`.
fn written(target: Target, s: &ServerSettings, release: Release) -> Written {
    // From 0.5.22 attention DP is `--attn-dp-size N`; the old pair is deprecated there.
    let attention_dp = s.decode.enable_dp_attention && release >= v0_5(22);
    let d = &s.disaggregation;
    let defaults = DisaggregationSpec::default();
    match target {
        Target::Mode => value(s.mode.as_str(), DisaggregationMode::Null.as_str()),
        Target::ModelPath => optional(s.model_path.as_deref()),
        Target::Revision => optional(s.revision.as_deref()),
        Target::RetractionBackup => optional(d.retraction_backup.map(RetractionBackup::as_str)),
        Target::TransferBackend => value(d.transfer_backend.as_str(), defaults.transfer_backend.as_str()),
        Target::DecodeRadixCache => switch(d.decode_radix_cache),
        Target::DecodeOffloadKvCache => switch(d.decode_offload_kv_cache),
        Target::HierarchicalCache => switch(d.hierarchical_cache),
        Target::PriorityScheduling => switch(d.priority_scheduling),
        Target::DisablePriorityPreemption => switch(d.disable_priority_preemption),
        Target::DecodeContextParallel => value(d.decode_context_parallel, 1),
        Target::SpeculativeAlgorithm => optional(d.speculative_algorithm.as_deref()),
        Target::DraftModelPath => optional(s.draft_model_path.as_deref()),
        Target::DraftRevision => optional(s.draft_revision.as_deref()),
        Target::MambaRadixCacheStrategy => optional(d.mamba_radix_cache_strategy.map(MambaRadixCacheStrategy::as_str)),
        Target::HostPoolRatio => d.host_pool_ratio.map_or(Written::Default, |r| Written::Value(r.to_string())),
        Target::EnableUnifiedMemory => switch(d.enable_unified_memory),
        Target::Lmcache => switch(d.lmcache),
        Target::UnifiedCacheExternalLinker => switch(d.unified_cache_external_linker),
        Target::Hisparse => switch(d.hisparse),
        Target::HostReceiveThreshold => {
            d.decode_host_receive_threshold.map_or(Written::Default, |t| Written::Value(t.to_string()))
        }
        Target::HostMemoryMode => optional(d.hicache_host_memory_mode.map(HicacheHostMemoryMode::as_str)),
        Target::HicacheStorageBackend => optional(d.hicache_storage_backend.as_deref()),
        Target::TensorParallel => value(s.decode.tensor_parallel, 1),
        Target::DataParallel if attention_dp => Written::Default,
        Target::DataParallel => value(s.decode.data_parallel, 1),
        Target::PipelineParallel => value(s.decode.pipeline_parallel, 1),
        Target::EnableDpAttention => switch(s.decode.enable_dp_attention && !attention_dp),
        Target::AttentionDataParallel if attention_dp => value(s.decode.data_parallel, 1),
        Target::AttentionDataParallel => Written::Default,
        Target::PageSize => value(s.decode.effective_page_size(), 1),
        Target::DisableHybridSwaMemory => switch(s.hybrid_swa_memory == HybridSwaMemory::Disabled),
        Target::KvCacheDtype => optional(s.decode.kv_cache_dtype.as_deref()),
        Target::SwaFullTokensRatio => {
            s.decode.swa_full_tokens_ratio.map_or(Written::Default, |r| Written::Value(r.to_string()))
        }
    }
}

/// The SGLang flags for `settings` at `release`: every setting that differs from SGLang's
/// default, with canonical names, `--name value` form, in table order.
pub fn write(settings: &ServerSettings, release: Release) -> Vec<String> {
    let mut args = Vec::new();
    for flag in FLAGS {
        match written(flag.target, settings, release) {
            Written::Default => {}
            Written::Switch => args.push(flag.name().to_string()),
            Written::Value(value) => args.extend([flag.name().to_string(), value]),
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::release::{KNOWN, Release};
    use crate::sglang::cmdline::ArgList;
    use crate::sglang::cmdline::ArgSite;
    use crate::sglang::server_cli;

    fn args(items: &[&str]) -> Vec<Arg> {
        items
            .iter()
            .enumerate()
            .map(|(index, text)| Arg {
                text: text.to_string(),
                site: ArgSite::Item { list: ArgList::Args, index },
                expands: text.contains('$'),
            })
            .collect()
    }

    fn read_newest(args: &[Arg]) -> Parsed {
        read(args, server_cli::for_release(Release::newest_known()))
    }

    #[test]
    fn the_spellings_are_what_sglang_declares() {
        for &release in KNOWN {
            let cli = server_cli::for_release(release);
            for flag in FLAGS {
                let declared: Vec<_> = flag
                    .names
                    .iter()
                    .filter_map(|name| match cli.classify(name) {
                        Word::Option { option, abbreviated: false, .. } => Some(option),
                        _ => None,
                    })
                    .collect();
                // Rows for options a release does not have yet (the retraction backup before 0.5.18).
                let Some(option) = declared.first() else {
                    assert!(release < Release::newest_known(), "SGLang {release} has no {}", flag.name());
                    continue;
                };
                assert!(declared.iter().all(|o| o == option), "{release}: {:?} are not one option", flag.names);
                // Every string SGLang declares for the option is a spelling of the row.
                assert!(option.strings.iter().all(|s| flag.names.contains(s)), "{release}: {:?}", option.strings);
            }
        }
    }

    #[test]
    fn abbreviations_are_read_as_the_release_reads_them() {
        let line = args(&["--tp", "2", "--dp", "2", "--disaggregation-m", "decode", "--hicache-r=-1", "--pp", "2"]);
        let newest = read_newest(&line);
        let s = &newest.settings;
        assert_eq!((s.decode.tensor_parallel, s.decode.data_parallel, s.mode), (2, 2, DisaggregationMode::Decode));
        assert_eq!(newest.last(lookup("--tp-size").unwrap()).unwrap().written, "--tp=2");
        assert!(newest.warnings.iter().any(|w| w.starts_with("--hicache-r=-1: expected a number greater than 0")));
        // 0.5.23 has --pp-max-micro-batch-size and --pp-async-batch-depth: `--pp` is ambiguous there
        // (server_cli reports it) and stands for no setting.
        assert_eq!(s.decode.pipeline_parallel, 1);
        // A value starting with `-` that argparse takes as one.
        let negative = read_newest(&args(&["--swa-full-tokens-ratio", "-0.5"]));
        assert_eq!(negative.settings.decode.swa_full_tokens_ratio, Some(-0.5));
    }

    #[test]
    fn kv_cache_dtype_and_the_none_backup_read_and_write_back() {
        let parsed =
            read_newest(&args(&["--kv-cache-dtype", "fp8_e4m3", "--disaggregation-decode-retraction-backup=none"]));
        assert_eq!(parsed.warnings, Vec::<String>::new());
        assert_eq!(parsed.settings.decode.kv_cache_dtype.as_deref(), Some("fp8_e4m3"));
        assert_eq!(parsed.settings.disaggregation.retraction_backup, Some(RetractionBackup::None));
        let written = write(&parsed.settings, Release::newest_known());
        assert!(written.windows(2).any(|w| w == ["--kv-cache-dtype", "fp8_e4m3"]), "{written:?}");
        assert!(written.windows(2).any(|w| w == ["--disaggregation-decode-retraction-backup", "none"]), "{written:?}");
        // `auto` is SGLang's default: the same as not setting it.
        let auto = read_newest(&args(&["--kv-cache-dtype", "auto"]));
        assert_eq!(auto.settings.decode.kv_cache_dtype, None);
        assert!(write(&auto.settings, Release::newest_known()).is_empty());
    }

    #[test]
    fn every_spelling_and_form_is_read() {
        let parsed = read_newest(&args(&[
            "--model-path",
            "openai/gpt-oss-20b",
            "--tp=4",
            "--dp-size",
            "2",
            "--pipeline-parallel-size",
            "2",
            "--enable-dp-attention",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup=host_pool",
            "--unknown-flag",
            "value",
            "--page-size",
            "16",
            "--disable-hybrid-swa-memory",
            "--kv-cache-dtype",
            "fp8_e4m3",
            "--disaggregation-transfer-backend",
            "nixl",
            "--dcp-size",
            "2",
        ]));
        assert_eq!(parsed.warnings, Vec::<String>::new());
        let s = &parsed.settings;
        assert_eq!(s.model_path.as_deref(), Some("openai/gpt-oss-20b"));
        assert_eq!((s.decode.tensor_parallel, s.decode.data_parallel, s.decode.pipeline_parallel), (4, 2, 2));
        assert!(s.decode.enable_dp_attention);
        assert_eq!(s.mode, DisaggregationMode::Decode);
        assert_eq!(s.disaggregation.retraction_backup, Some(RetractionBackup::HostPool));
        assert_eq!(s.decode.page_size, Some(16));
        assert_eq!(s.hybrid_swa_memory, HybridSwaMemory::Disabled);
        assert_eq!(s.disaggregation.transfer_backend, TransferBackend::Nixl);
        assert_eq!(s.disaggregation.decode_context_parallel, 2);
        let occurrence = parsed.last(lookup("--tp-size").unwrap()).unwrap();
        assert_eq!((occurrence.name_at, occurrence.value_at, occurrence.written.as_str()), (2, None, "--tp=4"));
        let occurrence = parsed.last(lookup("--dp-size").unwrap()).unwrap();
        assert_eq!((occurrence.name_at, occurrence.value_at), (3, Some(4)));
    }

    #[test]
    fn the_last_of_repeated_flags_wins() {
        let parsed = read_newest(&args(&[
            "--disaggregation-decode-retraction-backup",
            "host_pool",
            "--disaggregation-decode-retraction-backup=cpu_tensor",
        ]));
        assert_eq!(parsed.settings.disaggregation.retraction_backup, Some(RetractionBackup::CpuTensor));
        assert_eq!(parsed.last(lookup("--disaggregation-decode-retraction-backup").unwrap()).unwrap().name_at, 2);
    }

    #[test]
    fn bad_values_are_warnings_naming_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["--tp-size", "zero"], "--tp-size=zero: expected a whole number of at least 1"),
            (&["--tp", "0"], "--tp=0: expected a whole number"),
            (&["--disaggregation-decode-retraction-backup", "disk"], "expected one of cpu_tensor, host_pool"),
            (&["--hicache-ratio", "-1"], "--hicache-ratio=-1: expected a number greater than 0"),
            (&["--page-size"], "--page-size expects a value"),
            (&["--page-size", "--tp", "2"], "--page-size expects a value"),
            (&["--enable-dp-attention=true"], "is a switch and takes no value"),
            (&["--disaggregation-mode", "$MODE"], "--disaggregation-mode=$MODE: the value is a shell"),
        ];
        for (line, expected) in cases {
            let parsed = read_newest(&args(line));
            assert!(parsed.warnings.iter().any(|w| w.contains(expected)), "{line:?}: {:?}", parsed.warnings);
        }
        assert_eq!(read_newest(&args(&["--page-size", "--tp", "2"])).settings.decode.tensor_parallel, 2);
        // An unseen last value wins over a seen earlier one.
        let unseen = read_newest(&args(&[
            "--disaggregation-decode-retraction-backup=host_pool",
            "--disaggregation-decode-retraction-backup",
            "$BACKUP",
        ]));
        assert_eq!(unseen.settings.disaggregation.retraction_backup, None);
    }

    #[test]
    fn every_table_row_maps_to_a_distinct_setting() {
        for (i, a) in FLAGS.iter().enumerate() {
            for b in &FLAGS[i + 1..] {
                assert_ne!(a.target, b.target, "{} and {}", a.name(), b.name());
                assert!(a.names.iter().all(|n| !b.names.contains(n)), "{} and {}", a.name(), b.name());
            }
        }
    }

    fn settings() -> impl Strategy<Value = ServerSettings> {
        let modes = prop_oneof![
            Just(DisaggregationMode::Null),
            Just(DisaggregationMode::Prefill),
            Just(DisaggregationMode::Decode)
        ];
        let backups =
            prop::option::of(prop_oneof![Just(RetractionBackup::CpuTensor), Just(RetractionBackup::HostPool)]);
        let transfer = prop_oneof![
            Just(TransferBackend::Mooncake),
            Just(TransferBackend::Nixl),
            Just(TransferBackend::Mori),
            Just(TransferBackend::Fake)
        ];
        let mamba = prop::option::of(prop_oneof![
            Just(MambaRadixCacheStrategy::NoBuffer),
            Just(MambaRadixCacheStrategy::ExtraBuffer),
            Just(MambaRadixCacheStrategy::ExtraBufferLazy)
        ]);
        (
            (modes, prop::option::of("[a-z]{1,8}/[a-z0-9.-]{1,12}"), prop::option::of("[a-f0-9]{7}"), any::<bool>()),
            (backups, transfer, prop::array::uniform8(any::<bool>()), 1..8i32, mamba),
            (prop::option::of("EAGLE|NEXTN"), prop::option::of(1u32..40), 1..16i32, 1..8i32, 1..4i32, 1..64i32),
            (prop::option::of("file|mooncake|dynamic|hf3fs"), prop::option::of(-4i32..24)),
        )
            .prop_map(
                |(
                    (mode, model, revision, no_hybrid),
                    (backup, transfer, b, dcp, mamba),
                    (spec, ratio, tp, dp, pp, page),
                    (storage, swa_ratio),
                )| {
                    let mut s = ServerSettings { mode, model_path: model, revision, ..ServerSettings::default() };
                    if no_hybrid {
                        s.hybrid_swa_memory = HybridSwaMemory::Disabled;
                    }
                    let d = &mut s.disaggregation;
                    d.retraction_backup = backup;
                    d.transfer_backend = transfer;
                    d.decode_radix_cache = b[0];
                    d.decode_offload_kv_cache = b[1];
                    d.hierarchical_cache = b[2];
                    d.priority_scheduling = b[3];
                    d.disable_priority_preemption = b[4];
                    d.enable_unified_memory = b[5];
                    d.decode_context_parallel = dcp;
                    d.mamba_radix_cache_strategy = mamba;
                    d.speculative_algorithm = spec;
                    d.host_pool_ratio = ratio.map(|r| f64::from(r) / 10.0);
                    d.hicache_storage_backend = storage;
                    s.decode.swa_full_tokens_ratio = swa_ratio.map(|r| f64::from(r) / 16.0);
                    s.decode.tensor_parallel = tp;
                    s.decode.data_parallel = dp;
                    s.decode.pipeline_parallel = pp;
                    s.decode.page_size = (page != 1).then_some(page);
                    s.decode.enable_dp_attention = b[6];
                    s
                },
            )
    }

    proptest! {
        #[test]
        fn settings_to_flags_to_settings_round_trips(settings in settings()) {
            let flags = write(&settings, Release::newest_known());
            let texts: Vec<&str> = flags.iter().map(String::as_str).collect();
            let parsed = read_newest(&args(&texts));
            prop_assert_eq!(parsed.warnings, Vec::<String>::new());
            // From 0.5.22 one attention-DP group is no attention DP: `--attn-dp-size 1` is the default.
            let mut expected = settings;
            expected.decode.enable_dp_attention &= expected.decode.data_parallel > 1;
            prop_assert_eq!(parsed.settings, expected);
        }

        #[test]
        fn reading_never_panics(line in prop::collection::vec("(--[a-z-]{1,40}(=\\PC{0,6})?|\\PC{0,8})", 0..12)) {
            let texts: Vec<&str> = line.iter().map(String::as_str).collect();
            let _ = read_newest(&args(&texts));
        }
    }

    #[test]
    fn flags_to_settings_to_flags_round_trips() {
        let line = [
            "--model-path",
            "MiniMaxAI/MiniMax-M2",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-transfer-backend",
            "nixl",
            "--tensor-parallel-size",
            "8",
            "--attn-dp-size",
            "2",
            "--disaggregation-decode-retraction-backup",
            "cpu_tensor",
            "--disaggregation-decode-enable-radix-cache",
            "--hicache-ratio",
            "0.5",
        ];
        assert_eq!(write(&read_newest(&args(&line)).settings, Release::newest_known()), line);
    }

    #[test]
    fn attention_dp_is_written_in_each_releases_spelling() {
        let settings = read_newest(&args(&["--tensor-parallel-size", "8", "--attn-dp-size", "4"])).settings;
        assert_eq!((settings.decode.data_parallel, settings.decode.enable_dp_attention), (4, true));
        // 0.5.22 deprecates `--dp-size N --enable-dp-attention` for `--attn-dp-size N`.
        assert_eq!(write(&settings, v0_5(22)), ["--tensor-parallel-size", "8", "--attn-dp-size", "4"]);
        assert_eq!(
            write(&settings, v0_5(21)),
            ["--tensor-parallel-size", "8", "--data-parallel-size", "4", "--enable-dp-attention"]
        );
        let old = crate::sglang::server_cli::for_release(v0_5(21));
        let read_old = read(&args(&["--tensor-parallel-size", "8", "--dp-size", "4", "--enable-dp-attention"]), old);
        assert_eq!(read_old.settings, settings);
    }

    #[test]
    fn one_attention_dp_group_leaves_the_replicas() {
        // SGLang's default `--attn-dp-size 1` names no attention DP; `--dp-size 2` stays two
        // replicas, and the deprecated pair stays two attention-DP groups, in either order.
        for line in [["--dp-size", "2", "--attn-dp-size", "1"].as_slice(), &["--attn-dp-size", "1", "--dp-size", "2"]] {
            let settings = read_newest(&args(line)).settings;
            assert_eq!((settings.decode.data_parallel, settings.decode.enable_dp_attention), (2, false), "{line:?}");
        }
        let deprecated =
            read_newest(&args(&["--dp-size", "2", "--enable-dp-attention", "--attn-dp-size", "1"])).settings;
        assert_eq!((deprecated.decode.data_parallel, deprecated.decode.enable_dp_attention), (2, true));
    }
}
