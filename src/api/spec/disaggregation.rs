//! `spec.disaggregation`: the disaggregation and retraction settings the rules check against the
//! model's layout, and the prefill servers kvpilot does not run.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DraftModelSpec;

/// Where a retracted request's KV cache is kept until it is restored.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetractionBackup {
    /// Per-request host-memory buffers (works for every KV pool).
    #[serde(rename = "cpu_tensor")]
    CpuTensor,
    /// A reserved host pool beside the device pool (needs a full-attention MHA or hybrid-SWA pool).
    #[serde(rename = "host_pool")]
    HostPool,
    /// No backup: a retracted request is aborted with HTTP 503 for the client to retry (SGLang
    /// 0.5.21 and later).
    #[serde(rename = "none")]
    None,
}

impl RetractionBackup {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CpuTensor => "cpu_tensor",
            Self::HostPool => "host_pool",
            Self::None => "none",
        }
    }
}

/// What HiCache's host memory is (`--hicache-host-memory-mode`, SGLang 0.5.19 and later).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HicacheHostMemoryMode {
    /// A persistent cache tier (SGLang's default).
    #[serde(rename = "cache")]
    Cache,
    /// A transient staging buffer between the GPU and the storage backend, which holds all cached
    /// data; SGLang refuses it on decode servers.
    #[serde(rename = "buffer_only")]
    BufferOnly,
}

impl HicacheHostMemoryMode {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::BufferOnly => "buffer_only",
        }
    }
}

/// What kvpilot does with settings the model's layout cannot run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnInvalid {
    /// Refuse the resource and say why.
    #[default]
    Reject,
    /// Fix the settings that have a safe fix, record each fix in status and events, and refuse
    /// only what has none.
    Rewrite,
}

/// The KV transfer engine between prefill and decode.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransferBackend {
    /// Mooncake transfer engine.
    #[default]
    Mooncake,
    /// NVIDIA NIXL.
    Nixl,
    /// AMD MORI.
    Mori,
    /// No transfer (decode-only testing).
    Fake,
}

impl TransferBackend {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::Nixl => "nixl",
            Self::Mori => "mori",
            Self::Fake => "fake",
        }
    }
}

/// How the Mamba radix cache keeps SSM state for prefix reuse.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MambaRadixCacheStrategy {
    /// No extra state buffer.
    #[serde(rename = "no_buffer")]
    NoBuffer,
    /// An extra state buffer tracked at fixed intervals.
    #[serde(rename = "extra_buffer")]
    ExtraBuffer,
    /// The lazy variant of extra_buffer (not supported under PD disaggregation).
    #[serde(rename = "extra_buffer_lazy")]
    ExtraBufferLazy,
}

impl MambaRadixCacheStrategy {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoBuffer => "no_buffer",
            Self::ExtraBuffer => "extra_buffer",
            Self::ExtraBufferLazy => "extra_buffer_lazy",
        }
    }
}

/// Disaggregation and retraction settings of the decode side.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "DisaggregationSpec::default", rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.speculativeDraftModel) || has(self.speculativeAlgorithm)").message(
    "spec.disaggregation.speculativeDraftModel drafts for speculative decoding: set spec.disaggregation.speculativeAlgorithm too, or remove it"
))]
pub struct DisaggregationSpec {
    /// Where retracted requests keep their KV cache: `cpu_tensor`, `host_pool`, `none` (SGLang
    /// 0.5.21 and later: no backup, retracted requests are aborted), or unset for the runtime's
    /// automatic choice (host_pool when the release, the layout and the settings allow it). SGLang
    /// before 0.5.18 has no such setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retraction_backup: Option<RetractionBackup>,
    /// `Reject` (default) refuses invalid settings; `Rewrite` fixes those with a safe fix.
    pub on_invalid: OnInvalid,
    /// KV transfer backend shared with the prefill side.
    pub transfer_backend: TransferBackend,
    /// Prefill servers kvpilot does not run, as far as the transfer rules (T1, P1, P2) need
    /// them. With spec.prefill (a fleet kvpilot runs) this is taken from there instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<PrefillSpec>,
    /// Port of the prefill servers' bootstrap server (`--disaggregation-bootstrap-port`), which
    /// decode servers reach to set up each transfer; the router learns it from the prefill pods'
    /// `sglang.ai/bootstrap-port` annotation.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.disaggregation.bootstrapPort must be between 1 and 65535"))]
    pub bootstrap_port: i32,
    /// Keep a radix prefix cache on decode (`--disaggregation-decode-enable-radix-cache`).
    pub decode_radix_cache: bool,
    /// Offload decode KV to a HiCache storage backend (`--disaggregation-decode-enable-offload-kvcache`).
    pub decode_offload_kv_cache: bool,
    /// Hierarchical (HiCache) device + host cache on decode (`--enable-hierarchical-cache`).
    pub hierarchical_cache: bool,
    /// Priority scheduling (`--enable-priority-scheduling`).
    pub priority_scheduling: bool,
    /// Turn off priority preemption (`--disable-priority-preemption`).
    pub disable_priority_preemption: bool,
    /// Decode context-parallel size (`--dcp-size`).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.decodeContextParallel must be at least 1"))]
    pub decode_context_parallel: i32,
    /// Speculative decoding algorithm (`--speculative-algorithm`, for example `EAGLE` or `NEXTN`),
    /// if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<String>,
    /// The draft model of speculative decoding (`--speculative-draft-model-path`). Unset: the
    /// model's own NextN/MTP layers draft (SGLang loads the draft from the target's checkpoint).
    /// Its config.json is resolved like the model's, so the rules comparing the target's pools
    /// with the draft's (T11) can be checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative_draft_model: Option<DraftModelSpec>,
    /// Mamba radix cache strategy for SSM-hybrid models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mamba_radix_cache_strategy: Option<MambaRadixCacheStrategy>,
    /// Host pool size as a fraction of the device pool (SGLang's `--hicache-ratio`); defaults
    /// to 0.2 for a retraction-only host pool and 2.0 when hierarchical cache shares it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0").message("spec.disaggregation.hostPoolRatio must be greater than 0"))]
    pub host_pool_ratio: Option<f64>,
    /// Unified device memory pool (`--enable-unified-memory`).
    pub enable_unified_memory: bool,
    /// HiCache storage backend of the decode servers (`--hicache-storage-backend`: `file`,
    /// `mooncake`, `dynamic`, …); decode offload needs one. Set by kvpilot to its cache runtime
    /// (`dynamic`) when spec.cache is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.disaggregation.hicacheStorageBackend must not be empty"))]
    pub hicache_storage_backend: Option<String>,
    /// LMCache as the radix cache's offload tier (`--enable-lmcache`). SGLang 0.5.21 and later
    /// run it only without PD disaggregation (rule L7), so a PD server refuses it there.
    pub lmcache: bool,
    /// The unified cache's direct L3 linker (`--enable-unified-cache-external-linker`, SGLang
    /// 0.5.20 and later); it replaces HiCache's storage backend.
    pub unified_cache_external_linker: bool,
    /// Hierarchical sparse attention (`--enable-hisparse`).
    pub hisparse: bool,
    /// Device token usage at which decode receives incoming KV into the retraction host pool
    /// (`--disaggregation-decode-host-receive-threshold`, SGLang 0.5.21 and later, in [0, 1]).
    /// Unset: the release's default, host receive off (0.5.21: on above 0; later: on below 1).
    /// No transfer backend SGLang ships supports it yet (rule N7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_host_receive_threshold: Option<f64>,
    /// HiCache host memory as a cache tier or a staging buffer (`--hicache-host-memory-mode`,
    /// SGLang 0.5.19 and later); unset: the release's default, `cache`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hicache_host_memory_mode: Option<HicacheHostMemoryMode>,
}

impl Default for DisaggregationSpec {
    /// Also the schema default the API server applies when the block is missing.
    fn default() -> Self {
        Self {
            retraction_backup: None,
            on_invalid: OnInvalid::default(),
            transfer_backend: TransferBackend::default(),
            prefill: None,
            bootstrap_port: 8998,
            decode_radix_cache: false,
            decode_offload_kv_cache: false,
            hierarchical_cache: false,
            priority_scheduling: false,
            disable_priority_preemption: false,
            decode_context_parallel: 1,
            speculative_algorithm: None,
            speculative_draft_model: None,
            mamba_radix_cache_strategy: None,
            host_pool_ratio: None,
            enable_unified_memory: false,
            hicache_storage_backend: None,
            lmcache: false,
            unified_cache_external_linker: false,
            hisparse: false,
            decode_host_receive_threshold: None,
            hicache_host_memory_mode: None,
        }
    }
}

/// The prefill fleet's parallelism, as far as the transfer rules need it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "PrefillSpec::default", rename_all = "camelCase")]
pub struct PrefillSpec {
    /// Prefill tensor-parallel size.
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.tensorParallel must be at least 1"))]
    pub tensor_parallel: i32,
    /// Prefill data-parallel size.
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.dataParallel must be at least 1"))]
    pub data_parallel: i32,
    /// Whether prefill uses DP attention (attention TP = TP / DP).
    pub enable_dp_attention: bool,
    /// Prefill pipeline-parallel size (SWA head slicing refuses more than 1, T1pp).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.pipelineParallel must be at least 1"))]
    pub pipeline_parallel: i32,
    /// Prefill tokens per KV page (`--page-size`); must equal spec.decode.pageSize. Unset: not
    /// checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.pageSize must be at least 1"))]
    pub page_size: Option<i32>,
    /// Prefill KV cache dtype (`--kv-cache-dtype`, `auto` by default); must equal
    /// spec.decode.kvCacheDtype. Unset: not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("spec.disaggregation.prefill.kvCacheDtype must not be empty"))]
    pub kv_cache_dtype: Option<String>,
    /// Prefill attention context-parallel size as the prefill servers resolve it (`--attn-cp-size`;
    /// DeepSeek's prefill context-parallel modes set it to TP ÷ attention DP). It divides the
    /// prefill attention TP the transfer rules compare; decode context parallelism needs 1 (R19e).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.attentionContextParallel must be at least 1"))]
    pub attention_context_parallel: i32,
    /// The prefill servers shard their KV cache across attention TP (`--enable-kv-cache-sharding`,
    /// SGLang 0.5.22 and later): decode context parallelism refuses such a prefill (R19f), and an
    /// MLA model's decode attention TP must then equal the prefill's (P5).
    pub kv_cache_sharding: bool,
}

impl Default for PrefillSpec {
    fn default() -> Self {
        Self {
            tensor_parallel: 1,
            data_parallel: 1,
            enable_dp_attention: false,
            pipeline_parallel: 1,
            page_size: None,
            kv_cache_dtype: None,
            attention_context_parallel: 1,
            kv_cache_sharding: false,
        }
    }
}
