//! What a release's config loader (its pinned transformers config classes) does to a config
//! before SGLang classifies it: layers it rewrites, and configs it refuses outright.

use crate::api::LayerKind;
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
