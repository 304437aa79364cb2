//! Architecture lists SGLang classifies by name (docs/layout.md), keyed by the release that
//! added each entry, and the architectures each release serves (`served_architectures.tsv`, which
//! the parity harness checks against each release's model code).

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::release::{Release, Span, v0_5};

/// One architecture of a release-keyed list and the first release that has it. The lists only
/// grow from 0.5.17 to 0.5.23 (the parity harness's `served` part checks it), so a first release is all an entry needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listed {
    pub(crate) arch: &'static str,
    pub(crate) since: Release,
}

const fn base(arch: &'static str) -> Listed {
    Listed { arch, since: v0_5(17) }
}

const fn from(patch: u16, arch: &'static str) -> Listed {
    Listed { arch, since: v0_5(patch) }
}

/// Whether `arch` is on `list` in `release`.
pub(crate) fn listed(list: &[Listed], arch: &str, release: Release) -> bool {
    list.iter().any(|entry| entry.arch == arch && entry.since <= release)
}

/// Whether `arch` is on `list` in any release (what the per-layer split, which does not change
/// between releases, goes by).
pub(crate) fn ever_listed(list: &[Listed], arch: &str) -> bool {
    list.iter().any(|entry| entry.arch == arch)
}

/// `is_hybrid_swa_model`: architectures that get a hybrid SWA memory pool (drift §5.1).
/// `LagunaForCausalLM` and `BeamForCausalLM` only when a layer actually slides. Dots3Note and
/// MuseSpark are hybrid through their config classes ([`CONFIG_CLASS_OPT_INS`]), not this list.
pub(crate) const HYBRID_SWA: &[Listed] = &[
    base("Llama4ForConditionalGeneration"),
    base("DeepseekV4ForCausalLM"),
    base("DeepseekV4ForCausalLMNextN"),
    base("DeepseekV4ForCausalLMDSpark"),
    base("GptOssForCausalLM"),
    base("MiMoV2ForCausalLM"),
    base("MiMoV2FlashForCausalLM"),
    base("MiMoV2MTP"),
    base("Step3p5ForCausalLM"),
    base("Step3p5MTP"),
    base("Step3p7ForConditionalGeneration"),
    base("Gemma4ForCausalLM"),
    base("Gemma4ForConditionalGeneration"),
    base("Gemma4UnifiedForConditionalGeneration"),
    base("LagunaForCausalLM"),
    base("MellumForCausalLM"),
    base("InklingForConditionalGeneration"),
    base("InklingForConditionalGenerationMTP"),
    base("UnlimitedOCRForCausalLM"),
    from(18, "MuseGlimmerForCausalLM"),
    from(18, "MuseGlimmerForConditionalGeneration"),
    from(19, "GraniteSWAForCausalLM"),
    from(19, "GraniteMoeSWAForCausalLM"),
    from(21, "IQuestQ1ForCausalLM"),
    from(21, "IQuestQ1MTP"),
    from(21, "DiffusionGemmaForBlockDiffusion"),
    from(22, "EmbeddingGemma2Model"),
    from(23, "BeamForCausalLM"),
];

/// Hybrid-SWA architectures that are hybrid only when some layer slides (SGLang tests the
/// window or `"sliding_attention" in layer_types`).
pub(crate) const HYBRID_SWA_IF_SLIDING: &[&str] = &["LagunaForCausalLM", "BeamForCausalLM"];

/// How a config class opts into hybrid SWA by `model_type` (the key is not in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptIn {
    /// A class attribute: always hybrid SWA.
    Always,
    /// A property: hybrid SWA when some layer slides.
    IfSliding,
}

/// Config-class opt-ins by `model_type` (drift §5.1), with the first release that has each.
pub(crate) const CONFIG_CLASS_OPT_INS: &[(&str, OptIn, Release)] = &[
    ("dots3_note", OptIn::Always, v0_5(19)),
    ("spark2_5", OptIn::IfSliding, v0_5(20)),
    ("iquest_q1", OptIn::IfSliding, v0_5(21)),
    ("muse_spark_text", OptIn::IfSliding, v0_5(23)),
];

/// The opt-in of `model_type` in `release`, if its config class has one.
pub(crate) fn config_class_opt_in(model_type: &str, release: Release) -> Option<OptIn> {
    CONFIG_CLASS_OPT_INS
        .iter()
        .find(|(name, _, since)| *name == model_type && *since <= release)
        .map(|(_, opt_in, _)| *opt_in)
}

/// How SGLang's config classes set `mamba_chunk_size`, by the root config's `model_type`, with
/// the first release whose class does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkSize {
    /// A property or constant: config.json cannot change it.
    Fixed(u64),
    /// The first of `keys` config.json sets, else the class default.
    Keyed { keys: &'static [&'static str], default: u64 },
}

const CONFIG_CLASS_CHUNK_SIZES: &[(&str, ChunkSize, Release)] = &[
    // configs/nemotron_h.py: `_resolve_mamba_chunk_size` takes the legacy `chunk_size` too.
    ("nemotron_h", ChunkSize::Keyed { keys: &["mamba_chunk_size", "chunk_size"], default: 256 }, v0_5(17)),
    ("falcon_h1", ChunkSize::Keyed { keys: &["mamba_chunk_size"], default: 256 }, v0_5(17)),
    ("granitemoehybrid", ChunkSize::Keyed { keys: &["mamba_chunk_size"], default: 256 }, v0_5(17)),
    // LFM2 and ZAYA do not chunk; Inkling floors at 64.
    ("lfm2", ChunkSize::Fixed(1), v0_5(17)),
    ("lfm2_moe", ChunkSize::Fixed(1), v0_5(17)),
    ("lfm2_vl", ChunkSize::Fixed(1), v0_5(17)),
    ("zaya", ChunkSize::Fixed(1), v0_5(17)),
    ("inkling_model", ChunkSize::Fixed(64), v0_5(17)),
    ("inkling_mm_model", ChunkSize::Fixed(64), v0_5(17)),
    // configs/mamba.py (0.5.20 on): Mamba-1 has no chunk; a constant sizes its cache chunks.
    ("mamba", ChunkSize::Fixed(256), v0_5(20)),
    ("falcon_mamba", ChunkSize::Fixed(256), v0_5(20)),
    // configs/mamba2.py (0.5.20 on): an alias of transformers' `chunk_size` (256 by default).
    ("mamba2", ChunkSize::Keyed { keys: &["chunk_size"], default: 256 }, v0_5(20)),
];

/// How `model_type`'s config class sets `mamba_chunk_size` in `release`, where it does.
pub(crate) fn config_class_chunk_size(model_type: &str, release: Release) -> Option<ChunkSize> {
    CONFIG_CLASS_CHUNK_SIZES
        .iter()
        .find(|(name, _, since)| *name == model_type && *since <= release)
        .map(|(_, chunk, _)| *chunk)
}

/// (hidden size, vocabulary size) defaults of SGLang's config classes by `model_type`
/// (`configs/iquest_q1.py`: 3072 and 160000, which its MTP draft class inherits).
const CONFIG_CLASS_SIZES: &[(&str, (u64, u64))] = &[("iquest_q1", (3072, 160_000)), ("iquest_q1_mtp", (3072, 160_000))];

/// The (hidden size, vocabulary size) defaults of `model_type`'s config class, where known.
pub(crate) fn config_class_sizes(model_type: &str) -> Option<(u64, u64)> {
    CONFIG_CLASS_SIZES.iter().find(|(name, _)| *name == model_type).map(|(_, sizes)| *sizes)
}

/// Window defaults of SGLang's config classes, applied when config.json has no window key
/// (`configs/laguna.py`: `sliding_window: int = 512`, every release; `configs/iquest_q1.py`:
/// `sliding_window: int = 4096`, 0.5.21 on, the first release that serves it).
const CONFIG_CLASS_WINDOW_DEFAULTS: &[(&str, u64)] = &[("LagunaForCausalLM", 512), ("IQuestQ1ForCausalLM", 4096)];

/// The window `arch`'s config class sets when config.json names none.
pub(crate) fn config_class_window_default(arch: &str) -> Option<u64> {
    CONFIG_CLASS_WINDOW_DEFAULTS.iter().find(|(name, _)| *name == arch).map(|(_, window)| *window)
}

/// Architectures whose `sliding_attention` layers attend globally when the window is unset
/// (`"sliding_window": null`): SGLang builds an ordinary pool for them (`is_hybrid_swa_model`
/// tests the window).
pub(crate) const WINDOWLESS_SLIDING_IS_FULL: &[&str] = &["LagunaForCausalLM"];

/// Architectures whose hybrid SWA memory SGLang forces off (`gemma2_gemma3.py` override).
pub(crate) const HYBRID_SWA_FORCED_OFF: &[&str] = &[
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Gemma3nForCausalLM",
    "Gemma3nForConditionalGeneration",
];

/// `is_hybrid_swa_compress` (R16), drift §5.2.
pub(crate) const SWA_COMPRESS: &[Listed] = &[
    base("MiMoV2ForCausalLM"),
    base("MiMoV2FlashForCausalLM"),
    base("MiMoV2MTP"),
    base("Gemma4ForCausalLM"),
    base("Gemma4ForConditionalGeneration"),
    base("Gemma4UnifiedForConditionalGeneration"),
    base("InklingForConditionalGeneration"),
    base("InklingForConditionalGenerationMTP"),
    from(21, "DiffusionGemmaForBlockDiffusion"),
    from(22, "EmbeddingGemma2Model"),
];

/// `is_minimax_sparse` (configs/model_config.py, 0.5.17-0.5.23): the architectures whose KV
/// pool is SGLang's `MiniMaxSparseKVPool`.
pub(crate) const MINIMAX_SPARSE: &[&str] = &["MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"];

/// `is_deepseek_v4_arch`.
pub(crate) const DEEPSEEK_V4: &[&str] =
    &["DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"];

/// Draft (MTP) workers hard-coded to one sliding layer and no full layer.
pub(crate) const PURE_SWA_DRAFTS: &[&str] = &["MiMoV2MTP", "Step3p5MTP"];

/// `attention_arch = MLA` by architecture (§3.4). Pixtral and DeepseekVL2 are conditional and
/// handled in `super::mla`.
/// Additions per release: drift §5.5.
pub(crate) const MLA: &[Listed] = &[
    base("DeepseekV2ForCausalLM"),
    base("DeepseekV3ForCausalLM"),
    base("DeepseekV32ForCausalLM"),
    base("DeepseekV3ForCausalLMNextN"),
    base("Glm4MoeLiteForCausalLM"),
    base("Glm4MoeLiteForCausalLMNextN"),
    base("GlmMoeDsaForCausalLM"),
    base("DotsVLMForCausalLM"),
    base("MistralLarge3ForCausalLM"),
    base("MistralLarge3EagleForCausalLM"),
    base("KimiK25ForConditionalGeneration"),
    base("Eagle3DeepseekV2ForCausalLM"),
    base("MiniCPM3ForCausalLM"),
    base("KimiVLForConditionalGeneration"),
    base("KimiLinearForCausalLM"),
    base("BailingMoeV2_5ForCausalLM"),
    base("SarvamMLAForCausalLM"),
    base("KimiK3ForConditionalGeneration"),
    base("GlmMoeDsaForCausalLMNextN"),
    base("LongcatFlashForCausalLM"),
    base("LongcatFlashForCausalLMNextN"),
    base("MistralLarge3ForCausalLMEagle"),
    from(19, "BailingMoeV3ForCausalLM"),
    from(19, "Dots3NoteForCausalLM"),
    from(19, "Dots3NoteForCausalLMNextN"),
    from(19, "KimiK3LinearForCausalLM"),
    from(20, "Glm5NextForConditionalGeneration"),
    from(20, "Glm5NextForConditionalGenerationNextN"),
    from(20, "HYV4ForCausalLM"),
    from(20, "HYV4ForCausalLMNextN"),
    from(21, "BailingMoeV3VLForConditionalGeneration"),
    from(21, "GigaChat35ForCausalLM"),
    from(21, "GigaChat35ForCausalLMNextN"),
];

/// Architectures SGLang may run DSA on, when `index_topk` is set (`is_deepseek_dsa`).
pub(crate) const DSA_CAPABLE: &[Listed] = &[
    base("DeepseekV3ForCausalLM"),
    base("DeepseekV32ForCausalLM"),
    base("DeepseekV3ForCausalLMNextN"),
    base("MistralLarge3ForCausalLM"),
    base("PixtralForConditionalGeneration"),
    base("GlmMoeDsaForCausalLM"),
    base("GlmMoeDsaForCausalLMNextN"),
    base("LongcatFlashForCausalLM"),
    base("LongcatFlashForCausalLMNextN"),
    from(19, "Dots3NoteForCausalLM"),
    from(19, "Dots3NoteForCausalLMNextN"),
    from(20, "Glm5NextForConditionalGeneration"),
    from(20, "Glm5NextForConditionalGenerationNextN"),
    from(20, "HYV4ForCausalLM"),
    from(20, "HYV4ForCausalLMNextN"),
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
/// class (§3.3), plus the ones the reference leaves unverified (MiniMax-Text-01, Mamba-2),
/// which are treated as SSM as it advises.
pub(crate) const SSM: &[Listed] = &[
    base("Qwen3NextForCausalLM"),
    base("Qwen3_5ForConditionalGeneration"),
    base("Qwen3_5MoeForConditionalGeneration"),
    base("Qwen3_5ForCausalLM"),
    base("Qwen3_5MoeForCausalLM"),
    base("FalconH1ForCausalLM"),
    base("NemotronHForCausalLM"),
    base("NemotronH_Nano_VL_V2"),
    base("Lfm2ForCausalLM"),
    base("Lfm2MoeForCausalLM"),
    base("Lfm2VlForConditionalGeneration"),
    base("KimiLinearForCausalLM"),
    base("MiniMaxText01ForCausalLM"),
    base("MiniMaxM1ForCausalLM"),
    from(20, "Mamba2ForCausalLM"),
    from(20, "MambaForCausalLM"),
    from(20, "FalconMambaForCausalLM"),
    from(19, "MiniCPMSALAForCausalLM"),
];

/// Config classes (by text-config `model_type`) whose models SGLang's `uses_ssm_state` counts as
/// keeping recurrent state whatever their layer split (`configs/hybrid_arch.py`:
/// `kimi_linear_config`, `glm5_next_config`, and the linear-attention registry entry of
/// `configs/gigachat35.py`), with the first release that has each. All three are MLA models.
pub(crate) const SSM_CONFIG_CLASSES: &[(&str, Release)] =
    &[("kimi_linear", v0_5(17)), ("glm5_next", v0_5(20)), ("gigachat3_5", v0_5(21))];

/// Whether `release` keeps SSM state for every model of config class `model_type`.
pub(crate) fn ssm_config_class(model_type: &str, release: Release) -> bool {
    SSM_CONFIG_CLASSES.iter().any(|(name, since)| *name == model_type && *since <= release)
}

/// MLA architectures whose config class declares per-layer `layer_types` (sliding and full),
/// so their MLA pool can be hybrid SWA (`configs/dots3_note.py`).
pub(crate) const MLA_WITH_LAYER_TYPES: &[&str] = &["Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN"];

/// Architectures with recurrent layers that no release's `uses_ssm_state` recognises: Jamba has
/// no SGLang model and its transformers config class matches none of SGLang's SSM config tests,
/// so SGLang builds no SSM state for it (parity, 0.5.17–0.5.23).
pub(crate) const SSM_UNRECOGNISED: &[&str] = &["JambaForCausalLM"];

/// Whether kvpilot's resolver has a rule for `arch` by name; anything else gets the generic
/// probe.
pub(crate) fn has_rule(arch: &str) -> bool {
    [HYBRID_SWA, MLA, DSA_CAPABLE, SSM].iter().any(|list| ever_listed(list, arch))
        || [HYBRID_SWA_FORCED_OFF, DENSE, WINDOW_ON_EVERY_LAYER, QWEN2_WINDOW, SSM_UNRECOGNISED].iter().any(|list| list.contains(&arch))
        || matches!(
            arch,
            "Cohere2ForCausalLM" | "GraniteMoeHybridForCausalLM" | "Llama4ForCausalLM" | "DeepseekVL2ForCausalLM"
        )
        // Gated-delta-net variants, classified by prefix in `physical::classify` too.
        || arch.starts_with("Qwen3Next")
        || arch.starts_with("Qwen3_5")
}

/// The architectures each release has model code for (the entry classes of `sglang/srt/models/`),
/// generated by the parity harness from the release wheels.
const SERVED_TSV: &str = include_str!("served_architectures.tsv");

/// One line of [`SERVED_TSV`]: `Arch<TAB>FIRST<TAB>LAST`, LAST `-` while still served.
fn served_line(line: &str) -> Option<(&str, Span)> {
    let mut fields = line.split('\t');
    let arch = fields.next().filter(|a| !a.is_empty())?;
    let first = fields.next()?.parse().ok()?;
    let last = match fields.next()? {
        "-" => None,
        last => Some(last.parse().ok()?),
    };
    fields.next().is_none().then_some((arch, Span { first, last }))
}

static SERVED: LazyLock<HashMap<&'static str, Span>> = LazyLock::new(|| {
    SERVED_TSV
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(served_line)
        .collect()
});

/// Whether `release` has model code for `arch`.
pub(crate) fn served(arch: &str, release: Release) -> bool {
    SERVED.get(arch).is_some_and(|span| span.contains(release))
}

/// Architectures whose draft config `ModelConfig._config_draft_model` gives one NextN layer on
/// the language model's own config (`hf_text_config`, or `hf_config` after making it the text
/// config), which an EAGLE draft worker then reads.
pub(crate) const NEXTN_DRAFT_ON_TEXT_CONFIG: &[Listed] = &[
    from(18, "Qwen3_5ForConditionalGeneration"),
    from(18, "Qwen3_5MoeForConditionalGeneration"),
    from(18, "Qwen3_5ForCausalLM"),
    from(18, "Qwen3_5MoeForCausalLM"),
    from(18, "InternS2PreviewForConditionalGeneration"),
    from(18, "InternS2MobiusForConditionalGeneration"),
    from(20, "Glm5NextForConditionalGeneration"),
    from(20, "Qwen4ExpForConditionalGeneration"),
    from(20, "NemotronH_Omni_Reasoning_V3"),
];

/// Architectures whose draft config gets one NextN layer on the top-level config
/// (`hf_config`), which is the language model's config only when nothing is nested under
/// `text_config` (0.5.17 sets Qwen3.5's there alone).
pub(crate) const NEXTN_DRAFT_ON_TOP_CONFIG: &[Listed] = &[
    base("DeepseekV4ForCausalLM"),
    from(18, "MiMoV2ForCausalLM"),
    from(18, "MiMoV2FlashForCausalLM"),
    base("Qwen3NextForCausalLM"),
    base("Qwen3MoeForCausalLM"),
    base("Qwen3_5ForConditionalGeneration"),
    base("Qwen3_5MoeForConditionalGeneration"),
    base("Qwen3_5ForCausalLM"),
    base("Qwen3_5MoeForCausalLM"),
    base("InternS2PreviewForConditionalGeneration"),
    base("ExaoneMoEForCausalLM"),
    from(22, "ExaoneMoeForCausalLM"),
    base("NemotronHForCausalLM"),
    base("NemotronHPuzzleForCausalLM"),
    base("HYV3ForCausalLM"),
    from(20, "HYV4ForCausalLM"),
];

/// Model types whose config class may supply a non-zero `num_nextn_predict_layers` when
/// config.json leaves it out, and the first release that has such a class: without the key,
/// kvpilot cannot tell how many NextN layers the release loads. Classes that default it to 0
/// (Bailing-hybrid, Kimi-Linear, Nemotron-H, GigaChat-3.5) or read none (Step-3.5, Step-3.7,
/// whose text config is SGLang's Step-3.5 class in every release, and IQuest Q1, whose class keeps
/// its own `num_mtp_layers`) are not listed: without the key
/// their drafts have none. Neither are the classes of [`NEXTN_ALIASED_MODEL_TYPES`] and
/// [`NEXTN_DRAFT_MODEL_TYPES`], which decide the count. A `*` entry is a prefix (the family's
/// text, vision and MTP configs).
pub(crate) const NEXTN_DEFAULTING_MODEL_TYPES: &[(&str, Release)] = &[
    ("bailing_moe_v3_vl", v0_5(17)),
    ("deepseek_v4*", v0_5(17)),
    ("glm5_next*", v0_5(17)),
    ("hy_v4", v0_5(17)),
    ("inkling*", v0_5(17)),
    ("longcat_flash", v0_5(17)),
    ("minimax_m3_vl", v0_5(17)),
    ("qwen3_5_moe_text", v0_5(17)),
];

/// Text-config model types whose class, from the release that pins Transformers 5.19.0 (0.5.22),
/// reads the NextN count under `num_nextn_predict_layers` or its alias `num_mtp_layers` and
/// defaults it to 1 (SGLang's `deepseek_v32` and `kimi_k2` classes extend DeepSeek-V3's). Earlier
/// releases' classes read the first key only, with no default.
pub(crate) const NEXTN_ALIASED_MODEL_TYPES: &[&str] = &["deepseek_v3", "deepseek_v32", "glm4_moe", "kimi_k2"];
pub(crate) const NEXTN_ALIASED_SINCE: Release = v0_5(22);

/// Text-config model types whose draft config SGLang rewrites to one NextN layer, whatever
/// config.json says (`_config_draft_model` calls Dots3's `configure_draft_model`), and the first
/// release that does.
pub(crate) const NEXTN_DRAFT_MODEL_TYPES: &[(&str, Release)] = &[("dots3_note", v0_5(19))];

/// Whether config classes of `model_type` may supply NextN layers config.json does not name in
/// `release`.
pub(crate) fn nextn_defaulting_model_type(model_type: &str, release: Release) -> bool {
    NEXTN_DEFAULTING_MODEL_TYPES.iter().any(|(entry, since)| {
        *since <= release
            && match entry.strip_suffix('*') {
                Some(prefix) => model_type.starts_with(prefix),
                None => model_type == *entry,
            }
    })
}
