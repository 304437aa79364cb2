//! Physical attention per layer: which layers attend globally, within a window, keep
//! recurrent state, or neither.

use crate::api::LayerKind;

use super::LayoutError;
use super::arch;
use super::config::{ConfigView, show};

/// The per-layer kinds, and how they were read (for the unknown-architecture warning).
pub(crate) struct Physical {
    pub(crate) kinds: Vec<LayerKind>,
    pub(crate) read_from: &'static str,
}

impl Physical {
    fn new(kinds: Vec<LayerKind>, read_from: &'static str) -> Self {
        Self { kinds, read_from }
    }

    fn uniform(kind: LayerKind, n: usize, read_from: &'static str) -> Self {
        Self::new(vec![kind; n], read_from)
    }
}

/// The strings `layer_types` uses across model families.
fn layer_type_kind(name: &str) -> Option<LayerKind> {
    Some(match name {
        "full_attention" | "attention" | "full" | "global" | "global_attention" => LayerKind::Full,
        "sliding_attention" | "sliding" | "local" | "local_attention" | "chunked_attention" | "swa" => {
            LayerKind::Sliding
        }
        "linear_attention"
        | "mamba"
        | "mamba2"
        | "conv"
        | "lightning"
        | "lightning_attention"
        | "gdn"
        | "kda"
        | "ssm" => LayerKind::Ssm,
        "mlp" | "moe" | "none" => LayerKind::None,
        _ => return None,
    })
}

/// Checks that a per-layer field has exactly one entry per layer (`allow_longer` for the
/// architectures SGLang reads only the first `num_hidden_layers` entries of).
fn check_len(v: ConfigView<'_>, key: &str, len: usize, n: usize, allow_longer: bool) -> Result<(), LayoutError> {
    if len == n || (allow_longer && len > n) {
        return Ok(());
    }
    Err(v.error(key, format!("has {len} entries but num_hidden_layers is {n}; give one entry per layer")))
}

fn from_layer_types(v: ConfigView<'_>, n: usize, allow_longer: bool) -> Result<Option<Physical>, LayoutError> {
    let Some(types) = v.strings("layer_types")? else {
        return Ok(None);
    };
    check_len(v, "layer_types", types.len(), n, allow_longer)?;
    let kinds = types
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, name)| {
            layer_type_kind(name).ok_or_else(|| {
                v.error(
                    &format!("layer_types[{i}]"),
                    format!(
                        "unknown layer type \"{name}\"; expected one of full_attention, sliding_attention, \
                         linear_attention, mamba, conv, attention"
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Physical::new(kinds, "layer_types")))
}

/// Nemotron-H: `M` Mamba-2, `*` attention, `-` MLP, `E` MoE.
fn from_override_pattern(v: ConfigView<'_>, n: usize) -> Result<Option<Physical>, LayoutError> {
    let Some(pattern) = v.string("hybrid_override_pattern")? else {
        return Ok(None);
    };
    check_len(v, "hybrid_override_pattern", pattern.chars().count(), n, false)?;
    let kinds = pattern
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            'M' => Ok(LayerKind::Ssm),
            '*' => Ok(LayerKind::Full),
            '-' | 'E' => Ok(LayerKind::None),
            other => Err(v.error(
                "hybrid_override_pattern",
                format!("unknown layer symbol '{other}' at position {i}; expected M (Mamba), * (attention), - (MLP) or E (MoE)"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Physical::new(kinds, "hybrid_override_pattern")))
}

/// MiMo-V2 / opt-in hybrids: 1 = sliding, 0 = full.
fn from_hybrid_layer_pattern(v: ConfigView<'_>, n: usize) -> Result<Option<Physical>, LayoutError> {
    let Some(pattern) = v.uints("hybrid_layer_pattern")? else {
        return Ok(None);
    };
    check_len(v, "hybrid_layer_pattern", pattern.len(), n, false)?;
    let kinds = pattern
        .iter()
        .enumerate()
        .map(|(i, bit)| match bit {
            1 => Ok(LayerKind::Sliding),
            0 => Ok(LayerKind::Full),
            other => Err(v.error(
                &format!("hybrid_layer_pattern[{i}]"),
                format!("expected 0 (full attention) or 1 (sliding window), got {other}"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Physical::new(kinds, "hybrid_layer_pattern")))
}

/// MiniMax-Text-01 / M1: 0 = lightning (linear) attention, 1 = softmax attention.
fn from_attn_type_list(v: ConfigView<'_>, n: usize) -> Result<Option<Physical>, LayoutError> {
    let Some(types) = v.uints("attn_type_list")? else {
        return Ok(None);
    };
    check_len(v, "attn_type_list", types.len(), n, false)?;
    let kinds = types
        .iter()
        .enumerate()
        .map(|(i, t)| match t {
            0 => Ok(LayerKind::Ssm),
            1 => Ok(LayerKind::Full),
            other => Err(v.error(
                &format!("attn_type_list[{i}]"),
                format!("expected 0 (lightning attention) or 1 (softmax attention), got {other}"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Physical::new(kinds, "attn_type_list")))
}

/// Every `period`-th layer (1-based) is `every`, the rest `rest`.
fn periodic(n: usize, period: u64, every: LayerKind, rest: LayerKind) -> Vec<LayerKind> {
    (0..n).map(|i| if (i as u64 + 1).is_multiple_of(period) { every } else { rest }).collect()
}

fn positive(v: ConfigView<'_>, key: &str, default: u64) -> Result<u64, LayoutError> {
    match v.uint(key)? {
        Some(0) => Err(v.error(key, "must be at least 1")),
        Some(p) => Ok(p),
        None => Ok(default),
    }
}

/// Qwen3-Next / Qwen3.5: every `full_attention_interval`-th layer is gated attention, the
/// rest gated delta net.
fn from_full_attention_interval(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    let interval = positive(v, "full_attention_interval", 4)?;
    Ok(Physical::new(periodic(n, interval, LayerKind::Full, LayerKind::Ssm), "full_attention_interval"))
}

/// Gemma-3 / Cohere2: every `sliding_window_pattern`-th layer is global.
fn from_window_pattern(v: ConfigView<'_>, n: usize, default_pattern: u64) -> Result<Physical, LayoutError> {
    let pattern = positive(v, "sliding_window_pattern", default_pattern)?;
    Ok(Physical::new(periodic(n, pattern, LayerKind::Full, LayerKind::Sliding), "sliding_window_pattern"))
}

/// Qwen2: with `use_sliding_window`, layers from `max_window_layers` on use the window.
fn from_qwen2_window(v: ConfigView<'_>, n: usize, has_window: bool) -> Result<Physical, LayoutError> {
    if !(v.boolean("use_sliding_window")?.unwrap_or(false) && has_window) {
        return Ok(Physical::uniform(LayerKind::Full, n, "use_sliding_window"));
    }
    let first_windowed = v.uint("max_window_layers")?.unwrap_or(28);
    let kinds = (0..n).map(|i| if i as u64 >= first_windowed { LayerKind::Sliding } else { LayerKind::Full }).collect();
    Ok(Physical::new(kinds, "use_sliding_window"))
}

/// Jamba: layer i is attention when `i % attn_layer_period == attn_layer_offset`.
fn from_jamba(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    let period = positive(v, "attn_layer_period", 8)?;
    let offset = v.uint("attn_layer_offset")?.unwrap_or(4);
    if offset >= period {
        return Err(v.error("attn_layer_offset", format!("is {offset}, must be below attn_layer_period ({period})")));
    }
    let kinds = (0..n as u64).map(|i| if i % period == offset { LayerKind::Full } else { LayerKind::Ssm }).collect();
    Ok(Physical::new(kinds, "attn_layer_period"))
}

/// Kimi-Linear: 1-based layer numbers in `linear_attn_config.full_attn_layers` / `kda_layers`.
fn from_kimi_linear(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    let Some(linear) = v.object("linear_attn_config")? else {
        return Err(
            v.error("linear_attn_config", "is required for KimiLinearForCausalLM (full_attn_layers and kda_layers)")
        );
    };
    let sub_prefix = v.path("linear_attn_config.");
    let sub = ConfigView { map: linear, prefix: &sub_prefix };
    let mut kinds = vec![None; n];
    for (key, kind) in [("full_attn_layers", LayerKind::Full), ("kda_layers", LayerKind::Ssm)] {
        for (i, layer) in sub.uints(key)?.unwrap_or_default().into_iter().enumerate() {
            if layer == 0 || layer as usize > n {
                return Err(sub.error(
                    &format!("{key}[{i}]"),
                    format!("layer {layer} is outside 1..={n} (layer numbers are 1-based)"),
                ));
            }
            let slot = &mut kinds[layer as usize - 1];
            if slot.is_some() {
                return Err(sub.error(&format!("{key}[{i}]"), format!("layer {layer} is listed twice")));
            }
            *slot = Some(kind);
        }
    }
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            kind.ok_or_else(|| {
                sub.error("kda_layers", format!("layer {} is in neither full_attn_layers nor kda_layers", i + 1))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|kinds| Physical::new(kinds, "linear_attn_config"))
}

/// DeepSeek-V4: `compress_ratios[i] == 0` is a sliding-only layer; 4 / 128 add compressed
/// global attention.
fn from_compress_ratios(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    let Some(ratios) = v.uints("compress_ratios")? else {
        return Err(v.error("compress_ratios", "is required for DeepSeek-V4 (one compression ratio per layer)"));
    };
    check_len(v, "compress_ratios", ratios.len(), n, false)?;
    let kinds = ratios.iter().map(|r| if *r == 0 { LayerKind::Sliding } else { LayerKind::Full }).collect();
    Ok(Physical::new(kinds, "compress_ratios"))
}

fn required(found: Option<Physical>, v: ConfigView<'_>, key: &str, arch: &str) -> Result<Physical, LayoutError> {
    found.ok_or_else(|| v.error(key, format!("is required for {arch} (one entry per layer)")))
}

fn has_ssm_hints(v: ConfigView<'_>) -> bool {
    v.map.keys().any(|k| k.starts_with("mamba_") || k.starts_with("ssm_") || k == "state_size" || k == "ssm_cfg")
}

/// MiniCPM-SALA (`MiniCPMHybridConfig`): `mixer_types` (default one `minicpm4` entry) names
/// each layer's mixer through the class's aliases and repeats to cover every layer; lightning
/// layers keep a linear-attention state, the rest are full attention. The class refuses a longer
/// list, an unknown mixer, and lightning layers whose query and KV head counts differ.
fn from_minicpm_mixer_types(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    let given = v.strings("mixer_types")?.filter(|types| !types.is_empty()).unwrap_or_else(|| vec!["minicpm4"]);
    if given.len() > n {
        return Err(v.error(
            "mixer_types",
            format!("has {} entries but num_hidden_layers is {n}; give at most one mixer per layer", given.len()),
        ));
    }
    let mixers = given
        .iter()
        .enumerate()
        .map(|(i, mixer)| match *mixer {
            "minicpm4" | "minicpm" | "standard" | "attention" | "attn" => Ok(LayerKind::Full),
            "lightning" | "lightning_attn" | "lightning-attn" => Ok(LayerKind::Ssm),
            other => Err(v.error(
                &format!("mixer_types[{i}]"),
                format!("is {other:?}; SGLang's MiniCPM-SALA takes minicpm4 (or attention) and lightning layers"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let kinds: Vec<_> = mixers.iter().copied().cycle().take(n).collect();
    if kinds.contains(&LayerKind::Ssm) {
        let query = v.uint("lightning_nh")?.or(v.uint("num_attention_heads")?);
        let kv = v.uint("lightning_nkv")?.or(v.uint("num_key_value_heads")?);
        if query != kv {
            let show = |count: Option<u64>| count.map_or("unset".to_string(), |c| c.to_string());
            return Err(v.error(
                "lightning_nkv",
                format!(
                    "is {} but lightning_nh is {}: MiniCPM lightning attention needs equal query and KV head \
                     counts (its seg_la backend has no GQA)",
                    show(kv),
                    show(query)
                ),
            ));
        }
    }
    Ok(Physical::new(kinds, "mixer_types"))
}

/// IQuest Q1 (`IQuestQ1Config`): `first_layers_types`, `num_hybrid_layers_block` repeats of
/// `hybrid_layers_types_block`, then `last_layers_types`, each with the class's default; all
/// full without `use_hybrid_layers` or `use_sliding_window`. The class ignores `layer_types`.
fn from_iquest_q1(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    use LayerKind::{Full, Sliding};
    if !v.boolean("use_hybrid_layers")?.unwrap_or(true) {
        return Ok(Physical::uniform(Full, n, "use_hybrid_layers"));
    }
    let part = |key: &str, default: &[&'static str]| -> Result<Vec<(String, String)>, LayoutError> {
        let types = v.strings(key)?.unwrap_or_else(|| default.to_vec());
        Ok(types.iter().enumerate().map(|(i, t)| (format!("{key}[{i}]"), t.to_string())).collect())
    };
    let blocks = v.uint("num_hybrid_layers_block")?.unwrap_or(21);
    let block = part(
        "hybrid_layers_types_block",
        &["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"],
    )?;
    let first = part("first_layers_types", &["full_attention"])?;
    let last = part("last_layers_types", &["full_attention"; 3])?;
    let length = (block.len() as u64).saturating_mul(blocks).saturating_add((first.len() + last.len()) as u64);
    if length != n as u64 {
        return Err(v.error(
            "num_hybrid_layers_block",
            format!(
                "gives a layer pattern of {length} layers (first_layers_types, num_hybrid_layers_block × \
                 hybrid_layers_types_block, last_layers_types) but num_hidden_layers is {n}; make them add up"
            ),
        ));
    }
    let repeated = std::iter::repeat_n(block.iter(), blocks as usize).flatten();
    let kinds = first
        .iter()
        .chain(repeated)
        .chain(last.iter())
        .map(|(key, name)| match name.as_str() {
            "full_attention" => Ok(Full),
            "sliding_attention" => Ok(Sliding),
            other => Err(v.error(key, format!("is {other:?}; IQuest Q1 takes full_attention and sliding_attention"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !v.boolean("use_sliding_window")?.unwrap_or(true) {
        return Ok(Physical::uniform(Full, n, "use_sliding_window"));
    }
    Ok(Physical::new(kinds, "hybrid_layers_types_block"))
}

/// GLM-5-Next (`Glm5NextTextConfig`): 0-based `linear_attn_config.kda_layers`, else the
/// `linear_attention` entries of `layer_types`, else every fourth layer full and the rest KDA.
fn from_glm5_next(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    if let Some(linear) = v.object("linear_attn_config")? {
        let sub_prefix = v.path("linear_attn_config.");
        let sub = ConfigView { map: linear, prefix: &sub_prefix };
        let mut kinds = vec![LayerKind::Full; n];
        for (i, layer) in sub.uints("kda_layers")?.unwrap_or_default().into_iter().enumerate() {
            let slot = kinds.get_mut(layer as usize).ok_or_else(|| {
                sub.error(&format!("kda_layers[{i}]"), format!("layer {layer} is outside 0..{n} (0-based)"))
            })?;
            *slot = LayerKind::Ssm;
        }
        return Ok(Physical::new(kinds, "linear_attn_config"));
    }
    if let Some(found) = from_layer_types(v, n, false)? {
        return Ok(found);
    }
    Ok(Physical::new(periodic(n, 4, LayerKind::Full, LayerKind::Ssm), "num_hidden_layers"))
}

/// GigaChat-3.5 (`GigaChat35Config._resolve_layer_types`): `layer_types`, else the 0-based
/// `full_attention_layers` with every other layer linear, else every layer linear.
fn from_gigachat35(v: ConfigView<'_>, n: usize) -> Result<Physical, LayoutError> {
    if let Some(found) = from_layer_types(v, n, false)? {
        return Ok(found);
    }
    let mut kinds = vec![LayerKind::Ssm; n];
    for (i, layer) in v.uints("full_attention_layers")?.unwrap_or_default().into_iter().enumerate() {
        let slot = kinds.get_mut(layer as usize).ok_or_else(|| {
            v.error(&format!("full_attention_layers[{i}]"), format!("layer {layer} is outside 0..{n} (0-based)"))
        })?;
        *slot = LayerKind::Full;
    }
    Ok(Physical::new(kinds, "full_attention_layers"))
}

/// Per-layer kinds for an architecture, from the fields that architecture's family (or, for
/// the config classes SGLang defines its own split in, the text config's `model_type`) uses.
pub(crate) fn classify(
    arch: &str,
    model_type: Option<&str>,
    v: ConfigView<'_>,
    n: usize,
    has_window: bool,
) -> Result<Physical, LayoutError> {
    use LayerKind::{Full, Sliding, Ssm};
    match model_type {
        // `KimiLinearConfig` without `linear_attn_config` is plain MLA: no KDA layer.
        Some("kimi_linear") if !v.has("linear_attn_config") => return Ok(Physical::uniform(Full, n, "model_type")),
        Some("kimi_linear") => return from_kimi_linear(v, n),
        Some("glm5_next") => return from_glm5_next(v, n),
        Some("gigachat3_5") => return from_gigachat35(v, n),
        Some("minicpm_sala") => return from_minicpm_mixer_types(v, n),
        Some("iquest_q1" | "iquest_q1_mtp") => return from_iquest_q1(v, n),
        _ => {}
    }
    Ok(match arch {
        a if arch::MLA_WITH_LAYER_TYPES.contains(&a) => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => Physical::uniform(Full, n, "architecture"),
        },
        a if arch::PURE_SWA_DRAFTS.contains(&a) => Physical::uniform(Sliding, 1, "architecture"),
        a if arch::DEEPSEEK_V4.contains(&a) => from_compress_ratios(v, n)?,
        "Llama4ForConditionalGeneration" | "Llama4ForCausalLM" => {
            Physical::new(periodic(n, 4, Full, Sliding), "num_hidden_layers")
        }
        "Gemma2ForCausalLM" => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None if has_window => {
                Physical::new((0..n).map(|i| if i % 2 == 0 { Sliding } else { Full }).collect(), "num_hidden_layers")
            }
            None => Physical::uniform(Full, n, "num_hidden_layers"),
        },
        "Gemma3ForCausalLM" | "Gemma3ForConditionalGeneration" => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => from_window_pattern(v, n, 6)?,
        },
        "Cohere2ForCausalLM" => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => from_window_pattern(v, n, 4)?,
        },
        a if arch::QWEN2_WINDOW.contains(&a) => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => from_qwen2_window(v, n, has_window)?,
        },
        a if arch::WINDOW_ON_EVERY_LAYER.contains(&a) => {
            Physical::uniform(if has_window { Sliding } else { Full }, n, "sliding_window")
        }
        a if arch::DENSE.contains(&a) || (arch::ever_listed(arch::MLA, a) && a != "KimiLinearForCausalLM") => {
            Physical::uniform(Full, n, "architecture")
        }
        "PixtralForConditionalGeneration" | "DeepseekVL2ForCausalLM" => Physical::uniform(Full, n, "architecture"),
        "MiMoV2ForCausalLM" | "MiMoV2FlashForCausalLM" => {
            required(from_hybrid_layer_pattern(v, n)?, v, "hybrid_layer_pattern", arch)?
        }
        "Step3p5ForCausalLM" | "Step3p7ForConditionalGeneration" => {
            required(from_layer_types(v, n, true)?, v, "layer_types", arch)?
        }
        "GptOssForCausalLM"
        | "Gemma4ForCausalLM"
        | "Gemma4ForConditionalGeneration"
        | "Gemma4UnifiedForConditionalGeneration"
        | "LagunaForCausalLM"
        | "Gemma3nForCausalLM"
        | "Gemma3nForConditionalGeneration"
        | "Lfm2ForCausalLM"
        | "Lfm2MoeForCausalLM"
        | "Lfm2VlForConditionalGeneration" => required(from_layer_types(v, n, false)?, v, "layer_types", arch)?,
        "JambaForCausalLM" => from_jamba(v, n)?,
        "NemotronHForCausalLM" | "NemotronH_Nano_VL_V2" => {
            required(from_override_pattern(v, n)?, v, "hybrid_override_pattern", arch)?
        }
        "FalconH1ForCausalLM" | "Mamba2ForCausalLM" | "MambaForCausalLM" => Physical::uniform(Ssm, n, "architecture"),
        "GraniteMoeHybridForCausalLM" => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => Physical::uniform(Full, n, "architecture"),
        },
        "MiniMaxText01ForCausalLM" | "MiniMaxM1ForCausalLM" => {
            required(from_attn_type_list(v, n)?, v, "attn_type_list", arch)?
        }
        "KimiLinearForCausalLM" => from_kimi_linear(v, n)?,
        a if a.starts_with("Qwen3Next") || a.starts_with("Qwen3_5") => match from_layer_types(v, n, false)? {
            Some(p) => p,
            None => from_full_attention_interval(v, n)?,
        },
        _ => probe(v, n, has_window)?,
    })
}

/// Reads per-layer kinds from one optional per-layer field.
type PerLayerReader = fn(ConfigView<'_>, usize) -> Result<Option<Physical>, LayoutError>;

/// The generic probe for architectures this resolver does not know by name.
fn probe(v: ConfigView<'_>, n: usize, has_window: bool) -> Result<Physical, LayoutError> {
    use LayerKind::{Full, Sliding, Ssm};
    let per_layer_fields: [PerLayerReader; 4] =
        [|v, n| from_layer_types(v, n, false), from_override_pattern, from_hybrid_layer_pattern, from_attn_type_list];
    for read in per_layer_fields {
        if let Some(found) = read(v, n)? {
            return Ok(found);
        }
    }
    if v.has("full_attention_interval") && v.map.keys().any(|k| k.starts_with("linear_")) {
        return from_full_attention_interval(v, n);
    }
    if v.has("sliding_window_pattern") && has_window {
        return from_window_pattern(v, n, 6);
    }
    if v.has("use_sliding_window") {
        return from_qwen2_window(v, n, has_window);
    }
    if has_window {
        return Ok(Physical::uniform(Sliding, n, "sliding_window"));
    }
    if has_ssm_hints(v) {
        return Ok(Physical::uniform(Ssm, n, "mamba_*/ssm_* fields"));
    }
    Ok(Physical::uniform(Full, n, "no layer-type field"))
}

/// The window of sliding layers: SGLang's `_get_sliding_window_size` order, or Llama-4's
/// `attention_chunk_size`. A config class with a default window supplies it when config.json
/// has no window key at all (an explicit `null` stays unset, as the class keeps it).
pub(crate) fn window_size(arch: &str, v: ConfigView<'_>) -> Result<Option<u64>, LayoutError> {
    let keys: &[&str] = if arch.starts_with("Llama4") {
        &["attention_chunk_size", "sliding_window_size", "sliding_window", "window_size"]
    } else {
        &["sliding_window_size", "sliding_window", "window_size"]
    };
    if let Some(default) = arch::config_class_window_default(arch)
        && keys.iter().all(|key| !v.map.contains_key(*key))
    {
        return Ok(Some(default));
    }
    for key in keys {
        if let Some(value) = v.get(key) {
            return match v.uint(key)? {
                Some(0) => Err(v.error(key, "must be at least 1 token")),
                Some(w) => Ok(Some(w)),
                None => Err(v.error(key, format!("expected a window size in tokens, got {}", show(value)))),
            };
        }
    }
    Ok(None)
}
