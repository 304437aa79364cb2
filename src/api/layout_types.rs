//! The resolved attention layout of a model: what `kvpilot layout` prints and
//! `status.layout` holds. Produced by `crate::layout`, read by `policy` and the runtime.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A model's attention layout, in two views: the physical attention of each layer, and the KV
/// pool SGLang builds for it (they differ on purpose: Mistral-7B-v0.1 is all-sliding
/// physically but gets a full pool).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AttentionLayout {
    /// `architectures[0]` of the config.
    pub architecture: String,
    /// `model_type` of the config, if present.
    pub model_type: Option<String>,
    /// `model_type` of the text config (`text_config`, `llm_config`, …) where it differs from
    /// `modelType`: what SGLang's checks that read `hf_text_config.model_type` see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_model_type: Option<String>,
    /// Layer counts by physical kind.
    pub layers: LayerCounts,
    /// Physical kind of each layer, one entry per layer.
    pub layer_kinds: Vec<LayerKind>,
    /// Window of the sliding layers in tokens; null when no layer uses a window.
    pub sliding_window: Option<u64>,
    /// How full-attention KV is stored: `mha` (MHA/GQA heads) or `mla` (a latent).
    pub attention: AttentionKind,
    /// The KV pool the runtime builds, exactly as SGLang decides it.
    pub kv_pool: KvPool,
    /// Facts beyond the pool kind that some rules need.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<LayoutFeature>,
    /// Per-token and per-request sizes the runtime sizes its pools from.
    pub kv_shape: KvShape,
    /// DeepSeek-V4: the distinct compression ratios of its compressed layers, ascending (the
    /// pool keeps one cache per ratio, whose layout PD peers compare).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compress_ratios: Vec<u32>,
    /// The hidden size (`hidden_size`, or its config class's default), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_size: Option<u64>,
    /// The vocabulary size (`vocab_size`, or its config class's default), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<u64>,
    /// The `mamba_chunk_size` SGLang's extra-buffer Mamba cache reads off the config (config.json's,
    /// or its config class's); None where the class has none, and SGLang takes 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_chunk_size: Option<u64>,
    /// A DSA model's pooled index keys (`index_kpool`: index keys per pooled group), as SGLang's
    /// `get_dsa_index_kpool` reads the config (1 where unset), from 0.5.20; None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsa_index_kpool: Option<u64>,
    /// `attention_projection_layout` as config.json sets it (MiMo-V2 checkpoints: `fused_qkv` or
    /// `split` QKV projection weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_projection_layout: Option<String>,
    /// Where the QKV projection weights are fused (`fused_qkv`): the attention TP they are
    /// interleaved for, `num_key_value_heads` of the config or else of its `text_config`, as
    /// SGLang's `get_mimo_v2_fused_qkv_expected_tp_size` reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_qkv_attention_tp: Option<u64>,
    /// An MTP draft checkpoint's own facts (IQuest Q1's `iquest_q1_mtp`), which SGLang compares
    /// with the target's when it drafts for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_draft: Option<MtpDraft>,
    /// What was assumed where the config did not say.
    pub warnings: Vec<String>,
}

/// What an MTP draft checkpoint says about the model it drafts for.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MtpDraft {
    /// The target's layer count it was trained for (`num_target_layers`).
    pub target_layers: u64,
    /// The draft steps the checkpoint has slots for (`num_draft_slots`).
    pub draft_slots: u64,
}

impl AttentionLayout {
    /// Whether the layout has the given feature.
    pub fn has(&self, feature: LayoutFeature) -> bool {
        self.features.contains(&feature)
    }

    /// The text config's `model_type` (the config's own where it has no separate text config).
    pub fn text_model_type(&self) -> Option<&str> {
        self.text_model_type.as_deref().or(self.model_type.as_deref())
    }

    /// SGLang's `is_hybrid_swa`: the pool has a sliding-window component.
    pub fn is_hybrid_swa(&self) -> bool {
        matches!(self.kv_pool, KvPool::HybridSwa | KvPool::PureSwa)
    }

    /// SGLang's `uses_ssm_state`.
    pub fn uses_ssm_state(&self) -> bool {
        self.kv_pool == KvPool::HybridSsm
    }
}

/// Layer counts by physical kind; layers of kind `none` are the rest of `total`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LayerCounts {
    /// All layers (`num_hidden_layers`).
    pub total: u32,
    /// Layers with global attention.
    pub full_attention: u32,
    /// Layers attending within a window (sliding or chunked local attention).
    pub sliding_window: u32,
    /// Layers keeping recurrent state (Mamba, gated delta net, linear, lightning).
    pub ssm: u32,
}

/// Physical attention of one layer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum LayerKind {
    /// Global attention.
    Full,
    /// Attention within a window (sliding window or chunked local attention).
    Sliding,
    /// Recurrent state (Mamba, gated delta net, linear or lightning attention).
    Ssm,
    /// Neither attention nor state (for example Nemotron-H MLP-only layers).
    None,
}

/// How full-attention KV is stored.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKind {
    /// Per-head keys and values (MHA, GQA, MQA).
    Mha,
    /// A compressed latent (multi-head latent attention).
    Mla,
}

/// The KV pool SGLang builds for the model.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum KvPool {
    /// One MHA/GQA pool for every layer.
    Full,
    /// A full-attention pool plus a sliding-window pool (at least one full layer).
    HybridSwa,
    /// A sliding-window pool only: the model keeps no full-attention tokens.
    PureSwa,
    /// Attention KV plus recurrent SSM state per request.
    HybridSsm,
    /// An MLA (or DSA) latent pool.
    Mla,
}

impl KvPool {
    /// The value as printed in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::HybridSwa => "hybrid-swa",
            Self::PureSwa => "pure-swa",
            Self::HybridSsm => "hybrid-ssm",
            Self::Mla => "mla",
        }
    }
}

/// Layout facts some rules depend on beyond the pool kind.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutFeature {
    /// GPT-OSS / MiMo-V2 attention sinks.
    AttentionSinks,
    /// DeepSeek sparse attention indexer (`index_topk`).
    Dsa,
    /// DeepSeek-V4 compressed KV pool (SGLang treats it as MLA for transfers).
    DeepseekV4,
    /// DeepSeek-V4.1: a DeepSeek-V4 model with compression-ratio-2 layers (`compress_ratios`),
    /// whose DSpark transfer layout PD peers compare (SGLang 0.5.21 and later).
    #[serde(rename = "deepseek-v4.1")]
    DeepseekV41,
    /// SGLang's SWA-compress architectures (Gemma-4, MiMo-V2).
    SwaCompress,
    /// Every SSM layer also runs attention in parallel (Falcon-H1), so SSM layers hold full KV too.
    ParallelHybrid,
    /// MiniMax-M3 sparse attention (SGLang's `is_minimax_sparse`): a MiniMax sparse KV pool whose
    /// index (and, from 0.5.21, dense KV) state moves with every PD transfer.
    MinimaxSparse,
    /// An EAGLE draft SGLang builds from this config has no NextN layers
    /// (`num_nextn_predict_layers` after the release's draft-config rewrites), so its KV backs up
    /// through a sidecar pool rather than with the target's (rules N6 and X4). Absent where the
    /// config has NextN layers or its config class may supply them.
    NoNextnLayers,
    /// A DSPARK draft SGLang builds from this config is DeepSeek-V4's DSpark head
    /// (`DeepseekV4ForCausalLMDSpark`: the config is one, or a DeepSeek-V4 checkpoint bundling
    /// one under `dspark_*` keys), whose KV packs with the target's; any other DSPARK draft backs
    /// up through a sidecar pool (rules N6 and X4).
    DsparkHead,
    /// MiniCPM-SALA's sparse attention (SGLang's `has_minicpm_sparse_attention`: a
    /// `sparse_config` and some minicpm4 layer), which SGLang runs without HiCache and, on its
    /// sparse attention backends, without PD disaggregation (rules MC2, MC3).
    MinicpmSparseAttention,
    /// Learnable attention sinks (`learnable_sink`, which HunYuan V4's config class turns on by
    /// default from 0.5.20): SGLang runs such a DSA model with a bfloat16 KV cache only (rule
    /// DT2).
    LearnableAttentionSinks,
}

/// Sizes the runtime's pools are computed from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KvShape {
    /// KV heads of full-attention layers.
    pub num_kv_heads: u32,
    /// Key head dimension.
    pub head_dim: u32,
    /// Value head dimension.
    pub v_head_dim: u32,
    /// KV heads of sliding layers.
    pub swa_num_kv_heads: u32,
    /// Key head dimension of sliding layers.
    pub swa_head_dim: u32,
    /// Value head dimension of sliding layers.
    pub swa_v_head_dim: u32,
    /// MLA latent rank (`kv_lora_rank`), when the attention is MLA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_lora_rank: Option<u32>,
    /// MLA rotary head dimension (`qk_rope_head_dim`), when the attention is MLA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_rope_head_dim: Option<u32>,
    /// Bytes per KV element (from `torch_dtype`).
    pub dtype_bytes: u32,
    /// Recurrent state bytes per request per SSM layer (conv + SSM state), when the model has SSM layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_state_bytes_per_layer: Option<u64>,
}
