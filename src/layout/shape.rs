//! Per-token KV sizes and per-request SSM state sizes, as SGLang's pool sizing reads them.

use crate::api::{AttentionKind, KvShape};

use super::LayoutError;
use super::config::ConfigView;

/// Bytes per element of `torch_dtype` / `dtype` (bf16 when unset, as SGLang's `auto` on
/// current checkpoints).
fn dtype_bytes(v: ConfigView<'_>) -> Result<u32, LayoutError> {
    let key = if v.has("torch_dtype") { "torch_dtype" } else { "dtype" };
    Ok(match v.string(key)?.unwrap_or("bfloat16") {
        "float32" | "float" | "fp32" => 4,
        "float8_e4m3fn" | "float8_e5m2" | "fp8" | "int8" | "uint8" => 1,
        "bfloat16" | "float16" | "half" | "bf16" | "fp16" | "auto" => 2,
        other => {
            return Err(v.error(
                key,
                format!("unknown dtype \"{other}\"; expected bfloat16, float16, float32 or float8_e4m3fn"),
            ));
        }
    })
}

fn to_u32(v: ConfigView<'_>, key: &str, value: u64) -> Result<u32, LayoutError> {
    u32::try_from(value).map_err(|_| v.error(key, format!("{value} is too large")))
}

fn field_u32(v: ConfigView<'_>, key: &str) -> Result<Option<u32>, LayoutError> {
    v.uint(key)?.map(|n| to_u32(v, key, n)).transpose()
}

/// The sizes the runtime's pools are computed from. `has_ssm` adds the recurrent state size.
pub(crate) fn kv_shape(
    v: ConfigView<'_>,
    model_type: Option<&str>,
    attention: AttentionKind,
    has_ssm: bool,
    attention_free: bool,
    warnings: &mut Vec<String>,
) -> Result<KvShape, LayoutError> {
    let dtype = dtype_bytes(v)?;
    let heads = field_u32(v, "num_attention_heads")?;
    let kv_heads = match field_u32(v, "num_key_value_heads")?.or(field_u32(v, "multi_query_group_num")?) {
        Some(n) => n,
        None => heads.unwrap_or(1),
    };
    let head_dim = match field_u32(v, "head_dim")? {
        Some(d) => d,
        None => match (v.uint("hidden_size")?, heads) {
            (Some(hidden), Some(h)) if h > 0 => to_u32(v, "hidden_size", hidden / u64::from(h))?,
            _ => {
                warnings.push(format!(
                    "neither {} nor {} with {} is set: KV head size assumed to be 128",
                    v.path("head_dim"),
                    v.path("hidden_size"),
                    v.path("num_attention_heads")
                ));
                128
            }
        },
    };
    let v_head_dim = field_u32(v, "v_head_dim")?.unwrap_or(head_dim);
    let swa_num_kv_heads = match field_u32(v, "swa_num_key_value_heads")? {
        Some(n) => n,
        None => match v.object("attention_other_setting")? {
            Some(other) => {
                let prefix = v.path("attention_other_setting.");
                let view = ConfigView { map: other, prefix: &prefix };
                field_u32(view, "num_attention_groups")?.unwrap_or(kv_heads)
            }
            None => kv_heads,
        },
    };
    let swa_head_dim = field_u32(v, "swa_head_dim")?.unwrap_or(head_dim);
    let swa_v_head_dim = field_u32(v, "swa_v_head_dim")?.unwrap_or(v_head_dim);
    let (kv_lora_rank, qk_rope_head_dim) = match attention {
        AttentionKind::Mla => {
            (Some(field_u32(v, "kv_lora_rank")?.unwrap_or(512)), Some(field_u32(v, "qk_rope_head_dim")?.unwrap_or(64)))
        }
        AttentionKind::Mha => (None, None),
    };
    let ssm_state_bytes_per_layer =
        if has_ssm { Some(ssm_state_bytes(v, model_type, dtype, attention_free, warnings)?) } else { None };
    if let (Some(rank), Some(rope)) = (kv_lora_rank, qk_rope_head_dim) {
        // An MLA layer caches one latent of kv_lora_rank + qk_rope_head_dim per token, keys and
        // values together.
        let latent = rank.saturating_add(rope);
        return Ok(KvShape {
            num_kv_heads: 1,
            head_dim: latent,
            v_head_dim: 0,
            swa_num_kv_heads: 1,
            swa_head_dim: latent,
            swa_v_head_dim: 0,
            kv_lora_rank,
            qk_rope_head_dim,
            dtype_bytes: dtype,
            ssm_state_bytes_per_layer,
        });
    }
    Ok(KvShape {
        num_kv_heads: kv_heads,
        head_dim,
        v_head_dim,
        swa_num_kv_heads,
        swa_head_dim,
        swa_v_head_dim,
        kv_lora_rank,
        qk_rope_head_dim,
        dtype_bytes: dtype,
        ssm_state_bytes_per_layer,
    })
}

/// Recurrent state of one request in one SSM layer: the fp32 SSM state plus the conv window.
fn ssm_state_bytes(
    v: ConfigView<'_>,
    model_type: Option<&str>,
    dtype: u32,
    attention_free: bool,
    warnings: &mut Vec<String>,
) -> Result<u64, LayoutError> {
    let dtype = u64::from(dtype);
    let first = |keys: &[&str]| v.uint_any(keys);
    // A pure Mamba-2 config names its SSM heads `num_heads` / `head_dim`; in a hybrid those are
    // attention heads.
    let (head_keys, head_dim_keys): (&[&str], &[&str]) = if attention_free {
        (&["mamba_num_heads", "mamba_n_heads", "num_heads"], &["mamba_head_dim", "mamba_d_head", "head_dim"])
    } else {
        (&["mamba_num_heads", "mamba_n_heads"], &["mamba_head_dim", "mamba_d_head"])
    };
    // Mamba-2 (Nemotron-H, Falcon-H1, Granite-4.0-H, Mamba-2).
    if let (Some(heads), Some(head_dim)) = (first(head_keys)?, first(head_dim_keys)?) {
        let state = first(&["ssm_state_size", "mamba_d_state", "state_size"])?.unwrap_or(128);
        let groups = first(&["n_groups", "mamba_n_groups"])?.unwrap_or(1);
        let conv = first(&["conv_kernel", "mamba_d_conv"])?.unwrap_or(4).saturating_sub(1);
        let inner = heads.saturating_mul(head_dim);
        let ssm = inner.saturating_mul(state).saturating_mul(4);
        let conv_bytes = inner
            .saturating_add(groups.saturating_mul(2).saturating_mul(state))
            .saturating_mul(conv)
            .saturating_mul(dtype);
        return Ok(ssm.saturating_add(conv_bytes));
    }
    // Gated delta net (Qwen3-Next, Qwen3.5; GigaChat-3.5 with its config class's defaults).
    let gdn_default = |key: &str, default: u64| -> Result<Option<u64>, LayoutError> {
        Ok(v.uint(key)?.or((model_type == Some("gigachat3_5")).then_some(default)))
    };
    if let (Some(k_heads), Some(v_heads), Some(k_dim), Some(v_dim)) = (
        gdn_default("linear_num_key_heads", 8)?,
        gdn_default("linear_num_value_heads", 16)?,
        gdn_default("linear_key_head_dim", 128)?,
        gdn_default("linear_value_head_dim", 128)?,
    ) {
        let conv = v.uint("linear_conv_kernel_dim")?.unwrap_or(4).saturating_sub(1);
        let ssm = v_heads.saturating_mul(k_dim).saturating_mul(v_dim).saturating_mul(4);
        let conv_dim = k_heads.saturating_mul(k_dim).saturating_mul(2).saturating_add(v_heads.saturating_mul(v_dim));
        return Ok(ssm.saturating_add(conv_dim.saturating_mul(conv).saturating_mul(dtype)));
    }
    // Kimi-Linear KDA: a head_dim × head_dim delta-rule state per head, plus short convs on q, k, v.
    if let Some(linear) = v.object("linear_attn_config")? {
        let prefix = v.path("linear_attn_config.");
        let sub = ConfigView { map: linear, prefix: &prefix };
        if let (Some(heads), Some(head_dim)) = (sub.uint("num_heads")?, sub.uint("head_dim")?) {
            let conv = sub.uint("short_conv_kernel_size")?.unwrap_or(4);
            return Ok(kda_state_bytes(heads, head_dim, conv, dtype));
        }
    }
    // GLM-5-Next without linear_attn_config: its config class builds one from these fields.
    if model_type == Some("glm5_next") {
        let heads = v.uint("linear_num_heads")?.unwrap_or(64);
        let head_dim = v.uint("linear_head_dim")?.unwrap_or(128);
        let conv = v.uint("linear_conv_kernel_dim")?.unwrap_or(4);
        return Ok(kda_state_bytes(heads, head_dim, conv, dtype));
    }
    // MiniCPM-SALA lightning attention: an fp32 head_dim × head_dim state per KV head
    // (`lightning_nkv`, `lightning_head_dim`, defaulting to the attention's), no conv.
    if model_type == Some("minicpm_sala") {
        let heads = v.uint("lightning_nkv")?.or(v.uint("num_key_value_heads")?).unwrap_or(8);
        let attention_head_dim = match (v.uint("head_dim")?, v.uint("hidden_size")?, v.uint("num_attention_heads")?) {
            (Some(dim), _, _) => dim,
            (None, Some(hidden), Some(heads)) if heads > 0 => hidden / heads,
            _ => 128,
        };
        let head_dim = v.uint("lightning_head_dim")?.unwrap_or(attention_head_dim);
        return Ok(heads.saturating_mul(head_dim).saturating_mul(head_dim).saturating_mul(4));
    }
    // MiniMax lightning attention: an fp32 head_dim × head_dim state per head, no conv.
    if v.has("attn_type_list")
        && let (Some(heads), Some(head_dim)) = (v.uint("num_attention_heads")?, v.uint("head_dim")?)
    {
        return Ok(heads.saturating_mul(head_dim).saturating_mul(head_dim).saturating_mul(4));
    }
    // Mamba-1 (Jamba, Mamba): d_inner = expand × hidden_size, an fp32 d_inner × d_state state.
    let hidden = v.uint_any(&["hidden_size", "d_model"])?;
    let expand = v.uint_any(&["mamba_expand", "expand"])?;
    let state = first(&["mamba_d_state", "state_size", "ssm_state_size"])?;
    let conv = first(&["mamba_d_conv", "conv_kernel"])?;
    if hidden.is_none() || expand.is_none() || state.is_none() {
        warnings.push(format!(
            "SSM state size estimated with Mamba defaults: {} has no Mamba-2, gated-delta-net, KDA or Mamba-1 state fields",
            if v.prefix.is_empty() { "config.json".to_string() } else { v.prefix.trim_end_matches('.').to_string() }
        ));
    }
    let inner = hidden.unwrap_or(4096).saturating_mul(expand.unwrap_or(2));
    let ssm = inner.saturating_mul(state.unwrap_or(16)).saturating_mul(4);
    Ok(ssm.saturating_add(inner.saturating_mul(conv.unwrap_or(4).saturating_sub(1)).saturating_mul(dtype)))
}

/// A KDA layer's state per request: an fp32 head_dim × head_dim delta-rule state per head, plus
/// short convs (kernel `conv`, keeping `conv - 1` steps) on q, k and v.
fn kda_state_bytes(heads: u64, head_dim: u64, conv: u64, dtype: u64) -> u64 {
    let state = heads.saturating_mul(head_dim).saturating_mul(head_dim).saturating_mul(4);
    let conv_bytes =
        heads.saturating_mul(head_dim).saturating_mul(3).saturating_mul(conv.saturating_sub(1)).saturating_mul(dtype);
    state.saturating_add(conv_bytes)
}
