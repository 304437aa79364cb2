//! What a release's config loader (its pinned transformers config classes) does to a config
//! before SGLang classifies it: layers it rewrites, and configs it refuses outright.

use serde_json::{Value, json};

use crate::api::{LayerKind, MtpDraft};
use crate::release::{Release, Transformers, v0_5};

use super::LayoutError;
use super::config::ConfigView;

/// Architectures whose text config is transformers' `Gemma4TextConfig`.
const GEMMA4: &[&str] =
    &["Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration"];

/// `Gemma4TextConfig` defaults for the fields its per-layer overrides compare.
const GEMMA4_HEAD_DIM: u64 = 256;
const GEMMA4_GLOBAL_HEAD_DIM: u64 = 512;
const GEMMA4_KV_HEADS: u64 = 4;

/// `Gemma4TextConfig.__post_init__` (transformers 5.12.1 and 5.19.0): a last layer that is not
/// `full_attention` is forced to it, with a warning.
pub(crate) fn force_gemma4_last_layer_full(
    arch: &str,
    v: ConfigView<'_>,
    kinds: &mut [LayerKind],
    warnings: &mut Vec<String>,
) {
    if !GEMMA4.contains(&arch) {
        return;
    }
    if let Some(last) = kinds.last_mut()
        && *last != LayerKind::Full
    {
        *last = LayerKind::Full;
        warnings.push(format!(
            "{}: transformers' Gemma4TextConfig forces the last layer to full_attention, as SGLang loads it",
            v.path("layer_types")
        ));
    }
}

/// Refuses a config the release's loader cannot load. transformers 5.19.0 gives Gemma-4's
/// full-attention layers their own `head_dim` (`global_head_dim`, 512 unless set) and, with
/// `attention_k_eq_v`, their own KV heads; when these differ from the global values, reading
/// the global attribute raises `AmbiguousGlobalPerLayerAttributeError`, and SGLang's
/// `get_config` reads every text-config attribute off the top-level config. A multimodal
/// config (text config nested) is not affected: its top level has no per-layer attributes.
pub(crate) fn check_loads(arch: &str, v: ConfigView<'_>, nested: bool, release: Release) -> Result<(), LayoutError> {
    check_hy_v4_sinks(v, release)?;
    if !GEMMA4.contains(&arch) || nested || release.transformers() < Transformers::V5_19_0 {
        return Ok(());
    }
    let refused = |field: &str, what: String| {
        v.error(
            field,
            format!(
                "SGLang {release}'s loader (transformers {}) refuses this config: {what}, so the global value is \
                 ambiguous (AmbiguousGlobalPerLayerAttributeError); use SGLang 0.5.21 or earlier, or make the values \
                 equal",
                release.transformers().as_str()
            ),
        )
    };
    if let Some(per_layer) = v.object("per_layer_config")? {
        return check_stated_overrides(v, per_layer, refused);
    }
    let head_dim = v.uint("head_dim")?.unwrap_or(GEMMA4_HEAD_DIM);
    let global_head_dim = v.uint("global_head_dim")?.unwrap_or(GEMMA4_GLOBAL_HEAD_DIM);
    if head_dim != global_head_dim {
        return Err(refused(
            "global_head_dim",
            format!(
                "full-attention layers get head_dim {global_head_dim} (global_head_dim) but head_dim is {head_dim}"
            ),
        ));
    }
    if v.boolean("attention_k_eq_v")?.unwrap_or(false)
        && let Some(global_kv_heads) = v.uint("num_global_key_value_heads")?
    {
        let kv_heads = v.uint("num_key_value_heads")?.unwrap_or(GEMMA4_KV_HEADS);
        if kv_heads != global_kv_heads {
            return Err(refused(
                "num_global_key_value_heads",
                format!(
                    "full-attention layers get {global_kv_heads} KV heads (num_global_key_value_heads) but \
                     num_key_value_heads is {kv_heads}"
                ),
            ));
        }
    }
    Ok(())
}

/// SGLang's `HYV4Config` (0.5.20 on) refuses a config whose learnable attention sinks are off.
fn check_hy_v4_sinks(v: ConfigView<'_>, release: Release) -> Result<(), LayoutError> {
    if release >= v0_5(20) && v.string("model_type")? == Some("hy_v4") && v.truthy("learnable_sink") == Some(false) {
        return Err(v.error(
            "learnable_sink",
            format!(
                "SGLang {release}'s HYV4 config class refuses this config (\"HYV4 requires learnable attention sinks\"); \
                 set it to true or drop it"
            ),
        ));
    }
    Ok(())
}

/// A checkpoint that states `per_layer_config` itself: transformers keeps it as given, and any
/// override differing from its global value makes that attribute ambiguous.
fn check_stated_overrides(
    v: ConfigView<'_>,
    per_layer: &serde_json::Map<String, serde_json::Value>,
    refused: impl Fn(&str, String) -> LayoutError,
) -> Result<(), LayoutError> {
    let prefix = v.path("per_layer_config.");
    for (layer, overrides) in per_layer {
        let Some(overrides) = overrides.as_object() else {
            return Err(v.error(&format!("per_layer_config.{layer}"), "expected an object of per-layer attributes"));
        };
        let layer_view = ConfigView { map: overrides, prefix: &prefix };
        for (key, default) in [("head_dim", GEMMA4_HEAD_DIM), ("num_key_value_heads", GEMMA4_KV_HEADS)] {
            let field = format!("{layer}.{key}");
            let Some(value) = layer_view.map.get(key) else { continue };
            let stated = value.as_u64().ok_or_else(|| layer_view.error(&field, "expected a non-negative integer"))?;
            let global = v.uint(key)?.unwrap_or(default);
            if stated != global {
                return Err(refused(
                    &format!("per_layer_config.{field}"),
                    format!("layer {layer} states {key} {stated} but the global {key} is {global}"),
                ));
            }
        }
    }
    Ok(())
}

/// The keys `IQuestQ1MTPConfig.__init__` takes as its own parameters; every other key of the
/// checkpoint's config.json overlays the target's config.
const IQUEST_MTP_PARAMETERS: &[&str] = &[
    "target_config",
    "num_draft_slots",
    "num_target_layers",
    "sliding_window",
    "swa_rope_theta",
    "fp32_residual_connection",
];
/// `IQuestQ1MTPConfig`'s defaults: draft slots, draft window, and the target's layers when
/// neither the checkpoint nor its `target_config` says.
const IQUEST_MTP_DRAFT_SLOTS: u64 = 7;
const IQUEST_MTP_WINDOW: u64 = 512;
const IQUEST_TARGET_LAYERS: u64 = 88;

/// `IQuestQ1MTPConfig` (`configs/iquest_q1.py`, 0.5.21 on), the class of an IQuest Q1 MTP draft
/// checkpoint (`model_type: iquest_q1_mtp`): its target's config (`target_config`, less the
/// target's identity) overlaid with the checkpoint's own keys, made one IQuest Q1 layer that
/// slides over `sliding_window` (512 unless set; null or 0: a full layer). Returns that config
/// and the draft's own facts, None for any other config; refuses what the class refuses, naming
/// the checkpoint's field.
pub(crate) fn iquest_q1_mtp(v: ConfigView<'_>, release: Release) -> Result<Option<(Value, MtpDraft)>, LayoutError> {
    if release < v0_5(21) || v.string("model_type")? != Some("iquest_q1_mtp") {
        return Ok(None);
    }
    if v.map.contains_key("num_hidden_layers") && v.uint("num_hidden_layers")? != Some(1) {
        return Err(v.error(
            "num_hidden_layers",
            "must be 1 or absent: an IQuest Q1 MTP checkpoint has one physical draft layer (\"MTP supports one \
             physical draft layer.\")",
        ));
    }
    let draft_slots = v.uint("num_draft_slots")?.unwrap_or(IQUEST_MTP_DRAFT_SLOTS);
    if draft_slots < 1 {
        return Err(v.error("num_draft_slots", "must be at least 1 (\"num_draft_slots must be positive.\")"));
    }
    let window = if v.map.contains_key("sliding_window") { v.uint("sliding_window")? } else { Some(IQUEST_MTP_WINDOW) };
    let window = window.filter(|w| *w > 0);
    let theta = v.truthy("swa_rope_theta").unwrap_or(true);
    if window.is_some() && !theta {
        return Err(v.error(
            "swa_rope_theta",
            "must be set and non-zero for a sliding draft layer (\"A positive draft window requires \
             swa_rope_theta.\"); set it, or sliding_window to null for a full-attention draft layer",
        ));
    }
    let target = v.object("target_config")?.cloned().unwrap_or_default();
    let target_view = ConfigView { map: &target, prefix: "target_config." };
    let target_layers = match v.uint("num_target_layers")? {
        Some(layers) => layers,
        None => target_view.uint("num_hidden_layers")?.unwrap_or(IQUEST_TARGET_LAYERS),
    };
    if target_layers < 1 {
        return Err(v.error("num_target_layers", "must be at least 1 (\"num_target_layers must be positive.\")"));
    }
    if let Some(stated) = target_view.uint("num_hidden_layers")?
        && stated != target_layers
    {
        return Err(v.error(
            "num_target_layers",
            format!(
                "is {target_layers} but target_config.num_hidden_layers is {stated} (\"num_target_layers must \
                 match target_config.\"); make them equal"
            ),
        ));
    }
    let mut config = target;
    for key in ["model_type", "architectures", "auto_map", "_name_or_path"] {
        config.remove(key);
    }
    config.extend(
        v.map
            .iter()
            .filter(|(key, _)| !IQUEST_MTP_PARAMETERS.contains(&key.as_str()))
            .map(|(k, x)| (k.clone(), x.clone())),
    );
    let kind = if window.is_some() { "sliding_attention" } else { "full_attention" };
    config.extend([
        ("model_type".to_string(), json!("iquest_q1_mtp")),
        ("architectures".to_string(), json!(["IQuestQ1MTP"])),
        ("num_hidden_layers".to_string(), json!(1)),
        ("use_hybrid_layers".to_string(), json!(true)),
        ("use_sliding_window".to_string(), json!(window.is_some())),
        ("sliding_window".to_string(), json!(window)),
        ("first_layers_types".to_string(), json!([kind])),
        ("hybrid_layers_types_block".to_string(), json!([])),
        ("num_hybrid_layers_block".to_string(), json!(0)),
        ("last_layers_types".to_string(), json!([])),
    ]);
    Ok(Some((Value::Object(config), MtpDraft { target_layers, draft_slots })))
}
