//! Architecture lists SGLang classifies by name (`sglang-rules.md` §3). Kept as data so that a
//! versioned rule profile can swap them.

/// `is_hybrid_swa_model`: architectures that get a hybrid SWA memory pool (§3.1).
pub(crate) const HYBRID_SWA: &[&str] = &[
    "Llama4ForConditionalGeneration",
    "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMNextN",
    "GptOssForCausalLM",
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
    "MiMoV2MTP",
    "Step3p5ForCausalLM",
    "Step3p5MTP",
    "Step3p7ForConditionalGeneration",
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration",
    "LagunaForCausalLM",
];

/// Architectures whose hybrid SWA memory SGLang forces off (`gemma2_gemma3.py` override).
pub(crate) const HYBRID_SWA_FORCED_OFF: &[&str] = &[
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Gemma3nForCausalLM",
    "Gemma3nForConditionalGeneration",
];

/// `is_hybrid_swa_compress` (R16).
pub(crate) const SWA_COMPRESS: &[&str] = &[
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
    "MiMoV2MTP",
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration",
];

/// `is_deepseek_v4_arch`.
pub(crate) const DEEPSEEK_V4: &[&str] =
    &["DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"];

/// Draft (MTP) workers hard-coded to one sliding layer and no full layer.
pub(crate) const PURE_SWA_DRAFTS: &[&str] = &["MiMoV2MTP", "Step3p5MTP"];

/// `attention_arch = MLA` by architecture (§3.4). Pixtral and DeepseekVL2 are conditional and
/// handled in `super::mla`.
pub(crate) const MLA: &[&str] = &[
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLMNextN",
    "Glm4MoeLiteForCausalLM",
    "Glm4MoeLiteForCausalLMNextN",
    "GlmMoeDsaForCausalLM",
    "DotsVLMForCausalLM",
    "MistralLarge3ForCausalLM",
    "MistralLarge3EagleForCausalLM",
    "KimiK25ForConditionalGeneration",
    "Eagle3DeepseekV2ForCausalLM",
    "MiniCPM3ForCausalLM",
    "KimiVLForConditionalGeneration",
    "KimiLinearForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "SarvamMLAForCausalLM",
];

/// Architectures SGLang may run DSA on, when `index_topk` is set (`is_deepseek_dsa`).
pub(crate) const DSA_CAPABLE: &[&str] = &[
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLMNextN",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
];

/// Architectures whose every layer is plain global attention, whatever window fields they carry
/// (GLM-4.5's and Llama's configs have none in effect).
pub(crate) const DENSE: &[&str] =
    &["LlamaForCausalLM", "Glm4MoeForCausalLM", "MiniMaxM2ForCausalLM", "Step3VLForConditionalGeneration"];

/// Architectures that apply `sliding_window`, when set, to every layer.
pub(crate) const WINDOW_ON_EVERY_LAYER: &[&str] =
    &["MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM", "Starcoder2ForCausalLM"];

/// Qwen2-style `use_sliding_window` + `max_window_layers` (Qwen3 keeps the same fields).
pub(crate) const QWEN2_WINDOW: &[&str] = &[
    "Qwen2ForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
];

/// Architectures whose recurrent-state layers SGLang's `uses_ssm_state` recognises by config
/// class (§3.3), plus the ones the reference leaves unverified (Jamba, MiniMax-Text-01,
/// Mamba-2), which are treated as SSM as it advises.
pub(crate) const SSM: &[&str] = &[
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "FalconH1ForCausalLM",
    "NemotronHForCausalLM",
    "NemotronH_Nano_VL_V2",
    "Lfm2ForCausalLM",
    "Lfm2MoeForCausalLM",
    "Lfm2VlForConditionalGeneration",
    "KimiLinearForCausalLM",
    "JambaForCausalLM",
    "MiniMaxText01ForCausalLM",
    "MiniMaxM1ForCausalLM",
    "Mamba2ForCausalLM",
    "MambaForCausalLM",
];

/// Every architecture this resolver knows by name; anything else gets the generic probe and a
/// warning.
pub(crate) fn is_known(arch: &str) -> bool {
    [HYBRID_SWA, HYBRID_SWA_FORCED_OFF, MLA, DSA_CAPABLE, DENSE, WINDOW_ON_EVERY_LAYER, QWEN2_WINDOW, SSM]
        .iter()
        .any(|list| list.contains(&arch))
        || matches!(
            arch,
            "Cohere2ForCausalLM" | "GraniteMoeHybridForCausalLM" | "Llama4ForCausalLM" | "DeepseekVL2ForCausalLM"
        )
        // Gated-delta-net variants, classified by prefix in `physical::classify` too.
        || arch.starts_with("Qwen3Next")
        || arch.starts_with("Qwen3_5")
}
