//! `config.json` → [`AttentionLayout`], the way SGLang classifies a model
//! (docs/layout.md). Pure: no I/O, never panics, and every error names the field.

mod arch;
mod config;
mod loader;
mod physical;
mod shape;
#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::api::{AttentionKind, AttentionLayout, KvPool, LayerCounts, LayerKind, LayoutFeature};
use crate::release::{Release, v0_5};
use arch::{ChunkSize, OptIn, listed};
use config::ConfigView;

/// More layers than any real model has; a larger count is refused before anything is
/// allocated for it.
pub const MAX_LAYERS: u64 = 10_000;

/// Switches that change the pool SGLang builds without changing the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolveOptions {
    /// SGLang's `--disable-hybrid-swa-memory` (`spec.model.hybridSwaMemory: Disabled`).
    pub disable_hybrid_swa_memory: bool,
    /// The SGLang release whose classification lists apply.
    pub release: Release,
}

impl Default for ResolveOptions {
    /// Hybrid SWA memory as SGLang decides it, classified as the newest known release does.
    fn default() -> Self {
        Self { disable_hybrid_swa_memory: false, release: Release::newest_known() }
    }
}

/// Input that cannot be a model config, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct LayoutError {
    /// Dotted path of the field in config.json (`$` for the document itself).
    pub field: String,
    /// What is wrong and what would fix it.
    pub message: String,
}

/// Keys under which multimodal configs nest the language model's config.
const NESTED_TEXT_CONFIG: &[&str] = &["text_config", "llm_config", "language_config"];

/// Resolves a model's attention layout from its Hugging Face `config.json`.
pub fn resolve(config: &Value, options: ResolveOptions) -> Result<AttentionLayout, LayoutError> {
    if let Value::Object(map) = config
        && let Some((built, draft)) = loader::iquest_q1_mtp(ConfigView { map, prefix: "" }, options.release)?
    {
        let mut layout = resolve_built(&built, options)?;
        layout.mtp_draft = Some(draft);
        return Ok(layout);
    }
    resolve_built(config, options)
}

/// The layout of a config as its config class builds it (an MTP checkpoint's after
/// [`loader::iquest_q1_mtp`]).
fn resolve_built(config: &Value, options: ResolveOptions) -> Result<AttentionLayout, LayoutError> {
    let Value::Object(root) = config else {
        return Err(LayoutError { field: "$".into(), message: "a model config.json must be a JSON object".into() });
    };
    let root = ConfigView { map: root, prefix: "" };
    let mut warnings = Vec::new();

    let mut nested = None;
    for key in NESTED_TEXT_CONFIG {
        if let Some(map) = root.object(key)? {
            nested = Some((map, format!("{key}.")));
            break;
        }
    }
    let (text_map, text_prefix) = nested.unwrap_or((root.map, String::new()));
    let text = ConfigView { map: text_map, prefix: &text_prefix };

    let architecture = match root.strings("architectures")?.or(text.strings("architectures")?) {
        Some(list) => list.first().map(|a| a.to_string()).unwrap_or_default(),
        None => String::new(),
    };
    let arch = architecture.as_str();
    let release = options.release;
    let served = arch::served(arch, release);
    let known = arch::has_rule(arch) || served;
    if arch.is_empty() {
        warnings.push("no architectures[0]: layers classified from the config's generic fields".to_string());
    } else if !served {
        warnings.push(format!(
            "SGLang {release} has no model for {arch}: it would refuse the model or fall back to the Transformers \
             backend with a full-attention pool"
        ));
    }

    let n = match text.uint_any(&["num_hidden_layers", "n_layer", "num_layers"])? {
        None => {
            return Err(text.error("num_hidden_layers", "is required: the number of transformer layers"));
        }
        Some(0) => return Err(text.error("num_hidden_layers", "must be at least 1")),
        Some(n) if n > MAX_LAYERS => {
            return Err(text.error("num_hidden_layers", format!("is {n}; no model has more than {MAX_LAYERS} layers")));
        }
        Some(n) => n as usize,
    };

    loader::check_loads(arch, text, !text_prefix.is_empty(), release)?;
    let window = physical::window_size(arch, text)?;
    let text_model_type = text.string("model_type")?.or(root.string("model_type")?);
    let physical = physical::classify(arch, text_model_type, text, n, window.is_some())?;
    if !arch::has_rule(arch) && !arch.is_empty() {
        warnings.push(format!(
            "{arch} has no per-architecture rule in kvpilot: layer kinds read from {}",
            if physical.read_from.contains(' ') {
                physical.read_from.to_string()
            } else {
                text.path(physical.read_from)
            }
        ));
    }
    let mut kinds = physical.kinds;
    loader::force_gemma4_last_layer_full(arch, text, &mut kinds, &mut warnings);
    if window.is_none() && arch::WINDOWLESS_SLIDING_IS_FULL.contains(&arch) && kinds.contains(&LayerKind::Sliding) {
        warnings.push(format!(
            "{} is null: SGLang builds an ordinary pool for {arch} and its sliding_attention layers have no window",
            text.path("sliding_window")
        ));
        for kind in kinds.iter_mut().filter(|kind| **kind == LayerKind::Sliding) {
            *kind = LayerKind::Full;
        }
    }
    let layers = count(&kinds);

    let sliding_window = match (layers.sliding_window, window) {
        (0, _) => None,
        (_, Some(w)) => Some(w),
        (sliding, None) => {
            return Err(text.error(
                "sliding_window",
                format!("{sliding} layers use a sliding window but no window size is set; set sliding_window (tokens)"),
            ));
        }
    };

    let mla = is_mla(arch, text, known, release, &mut warnings)?;
    let attention = if mla { AttentionKind::Mla } else { AttentionKind::Mha };
    // An SSM family the release has no code for is not SSM in that release's sense (drift §5.4).
    let unrecognised_ssm = arch::SSM_UNRECOGNISED.contains(&arch);
    let ssm_config_class = text_model_type.is_some_and(|t| arch::ssm_config_class(t, release));
    let ssm = ssm_config_class
        || (layers.ssm > 0
            && !unrecognised_ssm
            && (!arch::ever_listed(arch::SSM, arch) || listed(arch::SSM, arch, release)));
    if ssm_config_class && layers.ssm == 0 {
        warnings.push(format!(
            "SGLang {release} keeps SSM state for every {} model, though this config has no recurrent layer",
            text_model_type.unwrap_or_default()
        ));
    }
    if layers.ssm > 0 && unrecognised_ssm {
        warnings.push(format!(
            "SGLang {release} does not recognise {arch}'s {} recurrent layers (uses_ssm_state is false):              it keeps no SSM state for them",
            layers.ssm
        ));
    }
    if ssm && !known {
        warnings.push(format!(
            "unknown architecture {arch}: treated as an SSM hybrid because {} layers keep recurrent state",
            layers.ssm
        ));
    }

    let model_type = root.string("model_type")?.or(text.string("model_type")?).map(str::to_string);
    let slides = layers.sliding_window > 0;
    let class_opt_in = text
        .string("model_type")?
        .or(model_type.as_deref())
        .and_then(|t| arch::config_class_opt_in(t, release))
        .is_some_and(|o| o == OptIn::Always || slides);
    let opt_in = text.boolean("is_hybrid_swa")?.unwrap_or(false) || class_opt_in;
    let forced_off = arch::HYBRID_SWA_FORCED_OFF.contains(&arch);
    let allow_listed =
        listed(arch::HYBRID_SWA, arch, release) && (slides || !arch::HYBRID_SWA_IF_SLIDING.contains(&arch));
    if opt_in && forced_off {
        warnings.push(format!("{arch}: is_hybrid_swa is ignored, SGLang forces hybrid SWA memory off for it"));
    }
    if opt_in && !class_opt_in && !forced_off && !allow_listed && physical.read_from != "hybrid_layer_pattern" {
        warnings.push(format!(
            "is_hybrid_swa opt-in without {}: SWA/full split taken from {}",
            text.path("hybrid_layer_pattern"),
            physical.read_from
        ));
    }
    let hybrid_swa = (allow_listed || opt_in) && !forced_off && !options.disable_hybrid_swa_memory;

    // Hybrid SWA is decided apart from MLA: an MLA model with sliding layers (Dots3Note) gets a
    // hybrid-SWA pool of MLA sub-pools.
    let kv_pool = if ssm {
        KvPool::HybridSsm
    } else if hybrid_swa {
        if layers.full_attention > 0 { KvPool::HybridSwa } else { KvPool::PureSwa }
    } else if mla {
        KvPool::Mla
    } else {
        KvPool::Full
    };

    let mut features = features(arch, text, release)?;
    let model_types = [root.string("model_type")?, text.string("model_type")?];
    if eagle_draft_has_no_nextn_layers(arch, text, !text_prefix.is_empty(), model_types, release)? {
        features.push(LayoutFeature::NoNextnLayers);
    }
    if dspark_draft_is_the_dspark_head(arch, root) {
        features.push(LayoutFeature::DsparkHead);
    }
    // `MiniCPMHybridConfig.has_minicpm_sparse_attention`: a sparse config and a minicpm4 layer.
    if text_model_type == Some("minicpm_sala") && text.object("sparse_config")?.is_some() && layers.full_attention > 0 {
        features.push(LayoutFeature::MinicpmSparseAttention);
    }
    // HunYuan V4's config class (registered from 0.5.20) turns learnable sinks on by default.
    let class_sinks = root.string("model_type")? == Some("hy_v4") && release >= v0_5(20);
    if root.truthy("learnable_sink").unwrap_or(class_sinks) {
        features.push(LayoutFeature::LearnableAttentionSinks);
    }
    features.sort();
    let compress_ratios = if arch::DEEPSEEK_V4.contains(&arch) { compress_ratios(text)? } else { Vec::new() };
    let kv_shape = shape::kv_shape(
        text,
        text_model_type,
        attention,
        ssm,
        layers.full_attention + layers.sliding_window == 0,
        &mut warnings,
    )?;

    let text_model_type = text_model_type.filter(|t| model_type.as_deref() != Some(*t)).map(str::to_string);
    let mamba_chunk_size = mamba_chunk_size(root, release)?;
    let dsa = features.contains(&LayoutFeature::Dsa) && release >= v0_5(20);
    let dsa_index_kpool = if dsa { Some(root.uint("index_kpool")?.unwrap_or(1)) } else { None };
    let attention_projection_layout = root.string("attention_projection_layout")?.map(str::to_string);
    let fused_qkv_attention_tp = fused_qkv_attention_tp(root, attention_projection_layout.as_deref(), &mut warnings)?;
    let (hidden_size, vocab_size) = model_sizes(text, text_model_type.as_deref().or(model_type.as_deref()))?;
    Ok(AttentionLayout {
        architecture,
        model_type,
        text_model_type,
        layers,
        layer_kinds: kinds,
        sliding_window,
        attention,
        kv_pool,
        features,
        kv_shape,
        compress_ratios,
        hidden_size,
        vocab_size,
        mamba_chunk_size,
        dsa_index_kpool,
        attention_projection_layout,
        fused_qkv_attention_tp,
        mtp_draft: None,
        warnings,
    })
}

/// `getattr(hf_config, "mamba_chunk_size", None)` on the root config as the release's class
/// builds it: the class's own way where it has one, else the key config.json sets.
fn mamba_chunk_size(root: ConfigView<'_>, release: Release) -> Result<Option<u64>, LayoutError> {
    match root.string("model_type")?.and_then(|t| arch::config_class_chunk_size(t, release)) {
        Some(ChunkSize::Fixed(size)) => Ok(Some(size)),
        Some(ChunkSize::Keyed { keys, default }) => Ok(Some(root.uint_any(keys)?.unwrap_or(default))),
        None => root.uint("mamba_chunk_size"),
    }
}

/// SGLang's `get_mimo_v2_fused_qkv_expected_tp_size`: where the QKV projection weights are fused,
/// the config's `num_key_value_heads`, else its `text_config`'s.
fn fused_qkv_attention_tp(
    root: ConfigView<'_>,
    projection_layout: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Option<u64>, LayoutError> {
    if projection_layout != Some("fused_qkv") {
        return Ok(None);
    }
    let heads = match root.uint("num_key_value_heads")? {
        Some(heads) => Some(heads),
        None => match root.object("text_config")? {
            Some(map) => ConfigView { map, prefix: "text_config." }.uint("num_key_value_heads")?,
            None => None,
        },
    };
    if heads.is_none() {
        warnings.push(
            "attention_projection_layout is fused_qkv without num_key_value_heads: SGLang refuses a MiMoV2ForCausalLM \
             server unless its config class supplies the count, so kvpilot cannot check the attention TP"
                .to_string(),
        );
    }
    Ok(heads)
}

/// The hidden and vocabulary sizes: config.json's, else the config class's defaults where
/// kvpilot knows them.
fn model_sizes(v: ConfigView<'_>, model_type: Option<&str>) -> Result<(Option<u64>, Option<u64>), LayoutError> {
    let defaults = model_type.and_then(arch::config_class_sizes);
    Ok((
        v.uint("hidden_size")?.or(defaults.map(|(hidden, _)| hidden)),
        v.uint("vocab_size")?.or(defaults.map(|(_, vocab)| vocab)),
    ))
}

/// Whether the draft an EAGLE worker builds from this config has no NextN layers
/// (`ModelConfig.num_nextn_predict_layers` after the release's `_config_draft_model`), so its KV
/// backs up through a sidecar pool rather than packing into the target's (N6, X4). False where
/// that cannot be told from config.json: a config class that supplies the count when the key is
/// absent.
fn eagle_draft_has_no_nextn_layers(
    arch: &str,
    text: ConfigView<'_>,
    nested: bool,
    model_types: [Option<&str>; 2],
    release: Release,
) -> Result<bool, LayoutError> {
    let [_, text_model_type] = model_types;
    let draft_rewritten = text_model_type.is_some_and(|model_type| {
        arch::NEXTN_DRAFT_MODEL_TYPES.iter().any(|(entry, since)| *entry == model_type && *since <= release)
    });
    if draft_rewritten
        || listed(arch::NEXTN_DRAFT_ON_TEXT_CONFIG, arch, release)
        || (!nested && listed(arch::NEXTN_DRAFT_ON_TOP_CONFIG, arch, release))
    {
        return Ok(false);
    }
    let aliased = release >= arch::NEXTN_ALIASED_SINCE
        && text_model_type.is_some_and(|model_type| arch::NEXTN_ALIASED_MODEL_TYPES.contains(&model_type));
    if aliased {
        return Ok(text.uint_any(&["num_nextn_predict_layers", "num_mtp_layers"])?.unwrap_or(1) == 0);
    }
    if let Some(layers) = text.uint("num_nextn_predict_layers")? {
        return Ok(layers == 0);
    }
    Ok(!model_types.into_iter().flatten().any(|model_type| arch::nextn_defaulting_model_type(model_type, release)))
}

/// Whether the draft a DSPARK worker builds from this config is DeepSeek-V4's DSpark head: the
/// config names it, or `_config_draft_model` makes a DeepSeek-V4 checkpoint one because it
/// bundles a DSpark head (`checkpoint_bundles_dspark_draft`: a `dspark_*` key on the top-level
/// config), in every release.
fn dspark_draft_is_the_dspark_head(arch: &str, root: ConfigView<'_>) -> bool {
    const BUNDLE_KEYS: &[&str] =
        &["dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids"];
    arch == "DeepseekV4ForCausalLMDSpark"
        || (arch == "DeepseekV4ForCausalLM" && BUNDLE_KEYS.iter().any(|key| root.has(key)))
}

/// The distinct non-zero `compress_ratios`, ascending.
fn compress_ratios(v: ConfigView<'_>) -> Result<Vec<u32>, LayoutError> {
    let mut ratios = v
        .uints("compress_ratios")?
        .unwrap_or_default()
        .into_iter()
        .filter(|ratio| *ratio != 0)
        .map(|ratio| {
            u32::try_from(ratio)
                .map_err(|_| v.error("compress_ratios", format!("has {ratio}, which is no compression ratio")))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    ratios.sort_unstable();
    ratios.dedup();
    Ok(ratios)
}

fn count(kinds: &[LayerKind]) -> LayerCounts {
    let of = |kind| kinds.iter().filter(|k| **k == kind).count() as u32;
    LayerCounts {
        total: kinds.len() as u32,
        full_attention: of(LayerKind::Full),
        sliding_window: of(LayerKind::Sliding),
        ssm: of(LayerKind::Ssm),
    }
}

/// SGLang's `attention_arch == MLA`, by architecture (§3.4); an unknown architecture with a
/// positive `kv_lora_rank` is assumed MLA, with a warning.
fn is_mla(
    arch: &str,
    v: ConfigView<'_>,
    known: bool,
    release: Release,
    warnings: &mut Vec<String>,
) -> Result<bool, LayoutError> {
    let rank = v.uint("kv_lora_rank")?.unwrap_or(0);
    Ok(match arch {
        a if listed(arch::MLA, a, release) => true,
        "PixtralForConditionalGeneration" => rank > 0,
        "DeepseekVL2ForCausalLM" => v.boolean("use_mla")?.unwrap_or(false),
        _ if !known && rank > 0 => {
            warnings
                .push(format!("unknown architecture {arch}: assumed MLA because {} is {rank}", v.path("kv_lora_rank")));
            true
        }
        _ => false,
    })
}

fn features(arch: &str, v: ConfigView<'_>, release: Release) -> Result<Vec<LayoutFeature>, LayoutError> {
    let mut features = Vec::new();
    let sinks = arch == "GptOssForCausalLM"
        || (arch.starts_with("MiMoV2")
            && (v.boolean("add_swa_attention_sink_bias")?.unwrap_or(false)
                || v.boolean("add_full_attention_sink_bias")?.unwrap_or(false)));
    if sinks {
        features.push(LayoutFeature::AttentionSinks);
    }
    if listed(arch::DSA_CAPABLE, arch, release) && v.has("index_topk") {
        features.push(LayoutFeature::Dsa);
    }
    if arch::DEEPSEEK_V4.contains(&arch) {
        features.push(LayoutFeature::DeepseekV4);
        if v.uints("compress_ratios")?.is_some_and(|ratios| ratios.contains(&2)) {
            features.push(LayoutFeature::DeepseekV41);
        }
    }
    if listed(arch::SWA_COMPRESS, arch, release) {
        features.push(LayoutFeature::SwaCompress);
    }
    if arch == "FalconH1ForCausalLM" {
        features.push(LayoutFeature::ParallelHybrid);
    }
    if arch::MINIMAX_SPARSE.contains(&arch) {
        features.push(LayoutFeature::MinimaxSparse);
    }
    features.sort();
    Ok(features)
}
