//! The predicates and spec field names the rule files share: what a server runs with, as SGLang reads
//! it, and the rewrites several rules make.

use super::{RuleInput, Subject};
use crate::api::{
    AttentionKind, AttentionLayout, DisaggregationSpec, FleetSpec, HicacheHostMemoryMode, KvPool, LayerKind,
    LayoutFeature, PrefillSpec, RetractionBackup, TransferBackend,
};
use crate::policy::argv::{given, number_option, option_value};
use crate::release::{Release, v0_5};

pub(crate) const RETRACTION_BACKUP: &str = "spec.disaggregation.retractionBackup";
pub(super) const DECODE_RADIX_CACHE: &str = "spec.disaggregation.decodeRadixCache";
pub(super) const HIERARCHICAL_CACHE: &str = "spec.disaggregation.hierarchicalCache";
pub(super) const UNIFIED_MEMORY: &str = "spec.disaggregation.enableUnifiedMemory";
pub(super) const DECODE_TP: &str = "spec.decode.tensorParallel";
pub(super) const DECODE_PIPELINE: &str = "spec.decode.pipelineParallel";
pub(super) const DECODE_DP_ATTENTION: &str = "spec.decode.enableDpAttention";
pub(super) const DECODE_PAGE_SIZE: &str = "spec.decode.pageSize";
pub(super) const DECODE_OFFLOAD: &str = "spec.disaggregation.decodeOffloadKvCache";
pub(super) const DECODE_CONTEXT_PARALLEL: &str = "spec.disaggregation.decodeContextParallel";
pub(super) const DECODE_KV_CACHE_DTYPE: &str = "spec.decode.kvCacheDtype";
pub(super) const HOST_RECEIVE: &str = "spec.disaggregation.decodeHostReceiveThreshold";
pub(super) const HOST_MEMORY_MODE: &str = "spec.disaggregation.hicacheHostMemoryMode";
pub(super) const LINKER: &str = "spec.disaggregation.unifiedCacheExternalLinker";
pub(super) const SPECULATIVE_DRAFT_MODEL: &str = "spec.disaggregation.speculativeDraftModel";

/// The env var that selects the unified radix tree (0.5.19–0.5.20 need it for R13, 0.5.17–0.5.18
/// for HiCache on MiMo-V2, MV3).
pub(crate) const UNIFIED_RADIX_TREE_ENV: &str = "SGLANG_ENABLE_UNIFIED_RADIX_TREE";

/// Whether the decode retraction backup is the host pool: asked for, or forced by host receive
/// (the PD hook sets host_pool over anything but an explicit cpu_tensor, which N1 refuses).
pub(super) fn host_pool(c: &RuleInput<'_>) -> bool {
    c.settings.retraction_backup == Some(RetractionBackup::HostPool)
        || (host_receive(c) && c.settings.retraction_backup != Some(RetractionBackup::CpuTensor))
}

pub(super) fn host_receive(c: &RuleInput<'_>) -> bool {
    host_receive_on(c.settings, c.release)
}

/// Whether decode host receive is on: a threshold above 0 in 0.5.21, below 1 from 0.5.22 (each
/// release's default keeps it off; releases before 0.5.21 have no such flag).
pub(crate) fn host_receive_on(settings: &DisaggregationSpec, release: Release) -> bool {
    match settings.decode_host_receive_threshold {
        Some(threshold) if release == v0_5(21) => threshold > 0.0,
        Some(threshold) if release > v0_5(21) => threshold < 1.0,
        _ => false,
    }
}

pub(super) fn radix(c: &RuleInput<'_>) -> bool {
    c.settings.decode_radix_cache
}

pub(super) fn dcp(c: &RuleInput<'_>) -> bool {
    c.settings.decode_context_parallel > 1
}

pub(super) fn mooncake_or_nixl(c: &RuleInput<'_>) -> bool {
    matches!(c.settings.transfer_backend, TransferBackend::Mooncake | TransferBackend::Nixl)
}

/// The cache options of a server that its tree cache and its draft's host backup follow.
#[derive(Debug, Clone, Copy)]
pub(super) struct CacheOptions {
    pub(super) hierarchical: bool,
    pub(super) lmcache: bool,
    /// The external cache linker (0.5.20 on).
    pub(super) linker: bool,
}

impl CacheOptions {
    /// The decode servers' (the guard's one server's): the settings.
    pub(super) fn of_settings(c: &RuleInput<'_>) -> Self {
        Self {
            hierarchical: c.settings.hierarchical_cache,
            lmcache: c.settings.lmcache,
            linker: c.settings.unified_cache_external_linker && c.release >= v0_5(20),
        }
    }

    /// A service's prefill servers': kvpilot gives them none of these settings, so only their
    /// `extraArgs` turn them on.
    pub(super) fn of_prefill(c: &RuleInput<'_>, fleet: &FleetSpec) -> Self {
        Self {
            hierarchical: given(&fleet.extra_args, HICACHE_FLAG),
            lmcache: given(&fleet.extra_args, "--enable-lmcache"),
            linker: given(&fleet.extra_args, "--enable-unified-cache-external-linker") && c.release >= v0_5(20),
        }
    }
}

/// Target architectures whose model overrides turn multi-layer EAGLE on for
/// `--speculative-algorithm EAGLE` (0.5.23: MiMo-V2, Step-3.5/3.7, GigaChat-3.5). The overrides
/// run before the speculative hook resolves the name, so they see it as given: `NEXTN` or
/// `eagle` do not turn it on.
pub(super) const MULTI_LAYER_EAGLE_ARCHITECTURES: &[&str] = &[
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
    "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration",
    "GigaChat35ForCausalLM",
    "GigaChat35ForCausalLMNextN",
];

pub(super) const SPECULATIVE_ALGORITHM: &str = "spec.disaggregation.speculativeAlgorithm";

/// The draft architectures for which SGLang's speculative hook turns EAGLE and NEXTN into
/// FROZEN_KV_MTP and refuses EAGLE3 (every release).
pub(super) const GEMMA4_ASSISTANT_DRAFTS: &[&str] =
    &["Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"];

/// Whether the speculative draft model is a Gemma-4 assistant ([`GEMMA4_ASSISTANT_DRAFTS`]).
pub(super) fn gemma4_assistant_draft(c: &RuleInput<'_>) -> bool {
    c.draft.is_some_and(|draft| GEMMA4_ASSISTANT_DRAFTS.contains(&draft.architecture.as_str()))
}

/// The speculative algorithm, upper-cased as SGLang's hook reads it.
pub(super) fn speculative_algorithm(c: &RuleInput<'_>) -> Option<String> {
    c.settings.speculative_algorithm.as_deref().map(str::to_uppercase)
}

pub(super) const DEEPSEEK_V4: &str = "DeepseekV4ForCausalLM";
pub(super) const EAGLE_TOPK: &str = "--speculative-eagle-topk";
pub(super) const EAGLE_TOPK_FIELD: &str = "spec.decode.extraArgs[--speculative-eagle-topk]";
pub(super) const TWO_BATCH_OVERLAP: &str = "--enable-two-batch-overlap";
pub(super) const HISPARSE: &str = "spec.disaggregation.hisparse";
pub(super) const RAGGED_VERIFY_ENV: &str = "SGLANG_RAGGED_VERIFY_MODE";

/// The prefill fleet a service runs with the settings both sides share; none for a server the
/// guard reads, whose paired prefill server has its own command line.
pub(super) fn service_prefill<'a>(c: &'a RuleInput<'_>) -> Option<&'a FleetSpec> {
    c.prefill_fleet.filter(|_| c.subject == Subject::Service)
}

/// The fleets of every server in scope, which all run the settings (the speculative ones among
/// them): the decode servers (the guard's one server) and a service's prefill servers.
pub(super) fn fleets_in_scope<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    std::iter::once(c.decode).chain(service_prefill(c))
}

/// The PD servers in scope as (fleet, is a prefill server, `--dcp-size`): the decode servers
/// (the guard's one server: a decode server, or a prefill one outside a service), and a
/// service's prefill servers, whose DCP only their `extraArgs` set.
pub(super) fn pd_servers<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool, i32)> {
    let own = (c.decode, c.subject == Subject::OtherServer, c.settings.decode_context_parallel);
    let prefill = service_prefill(c).map(|fleet| (fleet, true, dcp_of(&fleet.extra_args)));
    std::iter::once(own).chain(prefill)
}

pub(super) const PREFILL_CP: &str = "--enable-prefill-cp";

/// A server's `--dcp-size` among its arguments (a service's prefill servers: kvpilot writes none).
pub(super) fn dcp_of(args: &[String]) -> i32 {
    option_value(args, "--dcp-size").and_then(|v| v.trim().parse().ok()).unwrap_or(1)
}

/// The attention context-parallel size among a server's arguments as given (`--attn-cp-size`, or
/// its older spelling); None when the value is not a number, 1 when unset.
pub(super) fn attention_cp_size(args: &[String]) -> Option<i64> {
    ["--attn-cp-size", "--attention-context-parallel-size"]
        .iter()
        .find_map(|option| option_value(args, option))
        .map_or(Some(1), |size| size.trim().parse::<i64>().ok())
}

/// Whether a fleet's servers run DP attention as the MiniCPM and IQuest Q1 override providers
/// read it: the flag as given up to 0.5.21, where they test `enable_dp_attention`, and from 0.5.22
/// `attn_dp_enabled_of`, which [`runs_dp_attention`] reads.
pub(super) fn provider_dp_attention(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    if c.release <= v0_5(21) { fleet.enable_dp_attention } else { runs_dp_attention(c, fleet) }
}

pub(super) const ATTENTION_BACKENDS: [&str; 3] =
    ["--attention-backend", "--prefill-attention-backend", "--decode-attention-backend"];

pub(super) const NUM_STEPS: &str = "--speculative-num-steps";
pub(super) const CP_STRATEGY: &str = "--cp-strategy";
pub(super) const CP_STRATEGY_FIELD: &str = "spec.decode.extraArgs[--cp-strategy]";
pub(super) const ATTENTION_CP_FIELD: &str = "spec.decode.extraArgs[--attn-cp-size]";
pub(super) const DATA_PARALLEL_FIELD: &str = "spec.decode.dataParallel";

/// A server's attention DP size: its DP size under DP attention, else 1 (replicas do not split
/// attention).
pub(super) fn attention_dp_size(fleet: &FleetSpec) -> i64 {
    if fleet.enable_dp_attention { i64::from(fleet.data_parallel.max(1)) } else { 1 }
}

pub(super) const MIMO_V2: &[&str] = &["MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"];

/// The fleets in scope whose servers run prefill context parallelism (`--enable-prefill-cp`).
pub(super) fn prefill_cp_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, PREFILL_CP))
}

/// Whether a fleet's servers run attention context parallelism (`--attn-cp-size` above 1).
pub(super) fn runs_attention_cp(fleet: &FleetSpec) -> bool {
    attention_cp_size(&fleet.extra_args).is_some_and(|size| size > 1)
}

/// Whether a fleet's servers run DP attention as the speculative hook reads it: the flag as given
/// up to 0.5.21; from 0.5.22 the deprecated `--dp-size N --enable-dp-attention` becomes
/// `--attn-dp-size N`, and attention DP runs with more than one group.
pub(super) fn runs_dp_attention(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    fleet.enable_dp_attention && (c.release < v0_5(22) || fleet.data_parallel > 1)
}

/// A server's `--speculative-eagle-topk`, None when unset (as in SGLang) or not a number.
pub(super) fn eagle_topk(args: &[String]) -> Option<i64> {
    number_option(args, &[EAGLE_TOPK])
}

/// Whether a server's `--speculative-eagle-topk` is 1 (unset is None in SGLang, not 1).
pub(super) fn eagle_topk_is_one(args: &[String]) -> bool {
    eagle_topk(args) == Some(1)
}

/// The speculative algorithm as SGLang's speculative hook resolves it: upper-cased, NEXTN as
/// EAGLE, and EAGLE or NEXTN with a Gemma-4 assistant draft as FROZEN_KV_MTP.
pub(super) fn resolved_speculative_algorithm(c: &RuleInput<'_>) -> Option<String> {
    let algorithm = speculative_algorithm(c)?;
    Some(match algorithm.as_str() {
        "EAGLE" | "NEXTN" if gemma4_assistant_draft(c) => "FROZEN_KV_MTP".to_string(),
        "NEXTN" => "EAGLE".to_string(),
        _ => algorithm,
    })
}

/// Whether a server keeps its radix cache: a PD decode server only with decode radix cache (the
/// PD hook decides it, over a given `--disable-radix-cache`), any other server unless
/// `--disable-radix-cache`.
pub(super) fn keeps_radix_cache(c: &RuleInput<'_>, fleet: &FleetSpec, decode: bool) -> bool {
    if decode { radix(c) } else { !given(&fleet.extra_args, "--disable-radix-cache") }
}

/// Whether the server the verdict is about keeps its radix cache ([`keeps_radix_cache`]): a
/// service's decode servers and the guard's decode server by decode radix cache, the guard's
/// other server by its own arguments.
pub(super) fn own_radix_cache(c: &RuleInput<'_>) -> bool {
    keeps_radix_cache(c, c.decode, c.subject != Subject::OtherServer)
}

pub(super) const ENCODER_ONLY: &str = "--encoder-only";
pub(super) const DP_LM_HEAD: &str = "--enable-dp-lm-head";
pub(super) const DP_LM_HEAD_FIELD: &str = "spec.decode.extraArgs[--enable-dp-lm-head]";
pub(super) const MOE_A2A: &str = "--moe-a2a-backend";

/// A server's MoE all-to-all backend as given (`none`, SGLang's default, when unset).
pub(super) fn moe_a2a_backend(args: &[String]) -> &str {
    option_value(args, MOE_A2A).unwrap_or("none")
}

/// Whether a fleet's servers run multi-layer EAGLE as the validation hook reads it:
/// `--enable-multi-layer-eagle`, or `EAGLE` as given on an architecture whose model overrides turn
/// it on.
pub(super) fn multi_layer_eagle(c: &RuleInput<'_>, args: &[String]) -> bool {
    given(args, "--enable-multi-layer-eagle")
        || (c.settings.speculative_algorithm.as_deref() == Some("EAGLE")
            && MULTI_LAYER_EAGLE_ARCHITECTURES.contains(&c.layout.architecture.as_str()))
}

/// The pipeline stages of every server that runs the speculative settings: the decode servers,
/// and a service's prefill fleet.
pub(super) fn speculating_pipeline_stages(c: &RuleInput<'_>) -> i32 {
    fleets_in_scope(c).map(|fleet| fleet.pipeline_parallel).max().unwrap_or(1)
}

pub(super) const HICACHE_FLAG: &str = "--enable-hierarchical-cache";

/// The fleets in scope that run HiCache: the decode servers with `hierarchicalCache`, and a
/// service's prefill servers given `--enable-hierarchical-cache` in their `extraArgs`.
pub(super) fn hicache_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let decode = c.settings.hierarchical_cache.then_some(c.decode);
    decode.into_iter().chain(service_prefill(c).filter(|fleet| given(&fleet.extra_args, HICACHE_FLAG)))
}

/// The env var that runs a server on SGLang's Rust server (its prefill serves the KV bootstrap
/// registry on the API port).
pub const RUST_SERVER_ENV: &str = "SGLANG_RUST_SERVER";

pub(super) fn buffer_only(c: &RuleInput<'_>) -> bool {
    c.settings.hicache_host_memory_mode == Some(HicacheHostMemoryMode::BufferOnly)
}

/// Whether a speculative algorithm is set (SGLang's `NONE` is no algorithm).
pub(super) fn speculates(c: &RuleInput<'_>) -> bool {
    c.settings.speculative_algorithm.as_deref().is_some_and(|a| !a.trim().eq_ignore_ascii_case("none"))
}

pub(super) fn unified_memory_on(c: &RuleInput<'_>) -> bool {
    c.settings.enable_unified_memory
}

/// The KV cache dtype a fleet runs with: its `--kv-cache-dtype`, `auto` when unset.
pub(crate) fn kv_cache_dtype(value: Option<&str>) -> &str {
    value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or("auto")
}

pub(super) fn offload_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.decode_offload_kv_cache = false;
    ("true".into(), "false".into())
}

pub(super) fn to_cpu_tensor(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.retraction_backup.map_or("unset", RetractionBackup::as_str).to_string();
    s.retraction_backup = Some(RetractionBackup::CpuTensor);
    (from, RetractionBackup::CpuTensor.as_str().to_string())
}

pub(super) fn radix_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.decode_radix_cache = false;
    ("true".into(), "false".into())
}

pub(super) fn hierarchical_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.hierarchical_cache = false;
    ("true".into(), "false".into())
}

pub(super) fn host_receive_off(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.decode_host_receive_threshold.map_or_else(|| "unset".to_string(), |t| t.to_string());
    s.decode_host_receive_threshold = None;
    (from, "unset".into())
}

pub(super) fn host_memory_mode_unset(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.hicache_host_memory_mode.map_or("unset", HicacheHostMemoryMode::as_str).to_string();
    s.hicache_host_memory_mode = None;
    (from, "unset".into())
}

pub(super) fn linker_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.unified_cache_external_linker = false;
    ("true".into(), "false".into())
}

pub(super) fn unified_memory_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.enable_unified_memory = false;
    ("true".into(), "false".into())
}

/// Attention TP: TP ÷ DP under DP attention, else TP.
pub(crate) fn attention_tp(tensor_parallel: i32, data_parallel: i32, dp_attention: bool) -> i32 {
    if dp_attention && data_parallel > 0 { tensor_parallel / data_parallel } else { tensor_parallel }
}

/// The prefill servers' attention TP: what is left of TP after attention DP and attention CP
/// (SGLang's `derive_attn_tp_size`, `tp // attn_dp // attn_cp`).
pub fn prefill_attention_tp(prefill: &PrefillSpec) -> i32 {
    attention_tp(prefill.tensor_parallel, prefill.data_parallel, prefill.enable_dp_attention)
        / prefill.attention_context_parallel.max(1)
}

/// Layer ranges `[start, end)` of each pipeline stage, split as SGLang's `get_pp_indices`
/// does: evenly, with the remainder going one layer each to the stages before the last.
pub fn pipeline_stages(layers: usize, stages: usize) -> Vec<(usize, usize)> {
    let stages = stages.clamp(1, layers.max(1));
    let mut sizes = vec![layers / stages; stages];
    for i in 0..layers % stages {
        sizes[stages - 2 - i] += 1;
    }
    let mut start = 0;
    sizes
        .into_iter()
        .map(|size| {
            let range = (start, start + size);
            start += size;
            range
        })
        .collect()
}

/// The first pipeline stage of a hybrid-SWA model that holds no full-attention layer: that rank
/// builds a pure-SWA pool (§3.1, PP note).
pub(crate) fn stage_without_full_layer(layout: &AttentionLayout, stages: i32) -> Option<(usize, usize, usize)> {
    if layout.kv_pool != KvPool::HybridSwa || stages <= 1 {
        return None;
    }
    pipeline_stages(layout.layer_kinds.len(), stages as usize)
        .into_iter()
        .enumerate()
        .find(|(_, (start, end))| !layout.layer_kinds[*start..*end].contains(&LayerKind::Full))
        .map(|(stage, (start, end))| (stage, start, end))
}

pub(super) fn mla_like(layout: &AttentionLayout) -> bool {
    layout.attention == AttentionKind::Mla || layout.has(LayoutFeature::DeepseekV4)
}
