//! Pool sizes from the memory budget, with SGLang's formulas (`sglang-rules.md` §3.2):
//!
//! - KV bytes per token of a layer: KV heads × (K dim + V dim) × dtype bytes (an MLA layer
//!   caches one latent). Heads are split over the attention-TP ranks of the pod, and replicated
//!   when there are fewer heads than ranks, so the pod holds ⌈heads / tp⌉ × tp of them.
//! - Hybrid SWA: full_tokens · F + r · full_tokens · S = budget (r = `swaFullTokensRatio`,
//!   default 0.8), swa_tokens = r · full_tokens. Pure SWA: all of it to SWA.
//! - SSM hybrids: the state pool gets ratio / (1 + ratio) of the budget (SGLang's
//!   `mamba_full_memory_ratio`, 0.9) as whole per-request slots; attention KV gets the rest.
//! - Host pool (retraction backup `host_pool`): `hostPoolRatio` (default 0.2) of each device
//!   pool, or `--host-memory` bytes split in proportion to the device pools.
//!
//! Token counts are aligned down to the page size.

use serde::Serialize;

use crate::api::{AttentionLayout, KvPool, LayoutFeature};
use crate::policy::attention_tp;

use super::config::Checked;

/// SGLang's default `--swa-full-tokens-ratio`.
pub const DEFAULT_SWA_FULL_TOKENS_RATIO: f64 = 0.8;
/// SGLang's default `--mamba-full-memory-ratio`.
pub const MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;

/// A paged token pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenPool {
    /// Layers whose KV the pool holds.
    pub layers: u32,
    /// Bytes one token takes across those layers.
    pub bytes_per_token: u64,
    /// Pages in the pool.
    pub pages: usize,
}

/// The SSM state pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatePool {
    /// SSM layers.
    pub layers: u32,
    /// Bytes of one request's state across those layers.
    pub bytes_per_slot: u64,
    /// State slots.
    pub slots: usize,
}

/// The host pool for retraction backups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPool {
    /// Pages of full-attention KV.
    pub full_pages: usize,
    /// Pages of sliding-window KV.
    pub swa_pages: usize,
}

/// Every pool the layout needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlan {
    /// Tokens per page.
    pub page_size: usize,
    /// Sliding window in tokens, when there is a SWA pool.
    pub window: Option<usize>,
    /// Full-attention pool.
    pub full: Option<TokenPool>,
    /// Sliding-window pool.
    pub swa: Option<TokenPool>,
    /// SSM state slots.
    pub ssm: Option<StatePool>,
    /// Host pool for `host_pool` backups.
    pub host: Option<HostPool>,
    /// Cap on host memory for `cpu_tensor` backups, if any.
    pub cpu_backup_limit: Option<u64>,
}

impl TokenPool {
    /// Tokens the pool holds.
    pub fn tokens(&self, page_size: usize) -> usize {
        self.pages * page_size
    }

    /// Bytes of one page.
    pub fn page_bytes(&self, page_size: usize) -> usize {
        (self.bytes_per_token as usize).saturating_mul(page_size)
    }
}

/// Memory the runtime is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Device memory for KV and state pools, in bytes.
    pub device: u64,
    /// Host memory for retraction backups, if set.
    pub host: Option<u64>,
}

fn pod_heads(heads: u32, tp: u32) -> u64 {
    u64::from(heads.max(1).div_ceil(tp)) * u64::from(tp)
}

/// Bytes per token per layer of full-attention and sliding layers across the pod.
fn per_layer_bytes(layout: &AttentionLayout, tp: u32) -> (u64, u64) {
    let s = &layout.kv_shape;
    let dtype = u64::from(s.dtype_bytes);
    let full = pod_heads(s.num_kv_heads, tp) * u64::from(s.head_dim + s.v_head_dim) * dtype;
    let swa = pod_heads(s.swa_num_kv_heads, tp) * u64::from(s.swa_head_dim + s.swa_v_head_dim) * dtype;
    (full, swa)
}

/// Layers in the full pool, the SWA pool and the SSM state.
pub fn layer_split(layout: &AttentionLayout) -> (u32, u32, u32) {
    let l = layout.layers;
    let parallel_attention = if layout.has(LayoutFeature::ParallelHybrid) { l.ssm } else { 0 };
    match layout.kv_pool {
        KvPool::HybridSwa | KvPool::PureSwa => (l.full_attention, l.sliding_window, 0),
        KvPool::HybridSsm => (l.full_attention + l.sliding_window + parallel_attention, 0, l.ssm),
        KvPool::Full | KvPool::Mla => (l.full_attention + l.sliding_window, 0, 0),
    }
}

fn align(tokens: f64, page_size: usize) -> usize {
    let tokens = if tokens.is_finite() && tokens > 0.0 { tokens.min(u32::MAX as f64) as usize } else { 0 };
    tokens / page_size
}

/// Sizes every pool from the budget.
pub fn plan(checked: &Checked, budget: Budget) -> Result<PoolPlan, String> {
    let layout = &checked.config.layout;
    let decode = &checked.config.decode;
    let page_size = decode.page_size.max(1) as usize;
    let tp = attention_tp(decode.tensor_parallel, decode.data_parallel, decode.enable_dp_attention).max(1) as u32;
    let (full_layers, swa_layers, ssm_layers) = layer_split(layout);
    let (full_per_layer, swa_per_layer) = per_layer_bytes(layout, tp);
    let full_per_token = full_per_layer * u64::from(full_layers);
    let swa_per_token = swa_per_layer * u64::from(swa_layers);
    if budget.device == 0 {
        return Err("--device-memory must be greater than 0".into());
    }
    let device = budget.device as f64;

    let ssm = if ssm_layers > 0 {
        let per_layer = layout.kv_shape.ssm_state_bytes_per_layer.unwrap_or(0);
        let bytes_per_slot = per_layer.saturating_mul(u64::from(ssm_layers));
        let share = if full_layers + swa_layers == 0 {
            device
        } else {
            device * MAMBA_FULL_MEMORY_RATIO / (1.0 + MAMBA_FULL_MEMORY_RATIO)
        };
        let slots = (share / bytes_per_slot.max(1) as f64) as usize;
        if slots == 0 {
            return Err(format!(
                "--device-memory {} bytes leaves {share:.0} bytes for SSM state, less than one request's state \
                 ({bytes_per_slot} bytes); give the runtime more device memory",
                budget.device
            ));
        }
        Some(StatePool { layers: ssm_layers, bytes_per_slot, slots })
    } else {
        None
    };
    let kv_budget = if ssm.is_some() && full_layers + swa_layers > 0 {
        device / (1.0 + MAMBA_FULL_MEMORY_RATIO)
    } else if ssm.is_some() {
        0.0
    } else {
        device
    };

    let ratio = decode.swa_full_tokens_ratio.unwrap_or(DEFAULT_SWA_FULL_TOKENS_RATIO);
    let (full_pages, swa_pages) = match (full_layers > 0, swa_layers > 0) {
        (true, true) => {
            let cell = full_per_token as f64 + ratio * swa_per_token as f64;
            let full_tokens = kv_budget / cell;
            (align(full_tokens, page_size), align(ratio * full_tokens, page_size))
        }
        (false, true) => (0, align(kv_budget / swa_per_token as f64, page_size)),
        (true, false) => (align(kv_budget / full_per_token as f64, page_size), 0),
        (false, false) => (0, 0),
    };
    let full = (full_layers > 0).then_some(TokenPool {
        layers: full_layers,
        bytes_per_token: full_per_token,
        pages: full_pages,
    });
    let swa =
        (swa_layers > 0).then_some(TokenPool { layers: swa_layers, bytes_per_token: swa_per_token, pages: swa_pages });
    for (name, pool) in [("full-attention", full), ("sliding-window", swa)] {
        if let Some(pool) = pool
            && pool.pages == 0
        {
            return Err(format!(
                "--device-memory {} bytes holds no page of the {name} pool ({} bytes per page of {page_size} tokens); \
                 give the runtime more device memory",
                budget.device,
                pool.page_bytes(page_size)
            ));
        }
    }

    let host = checked.host_pool().then(|| {
        let full_bytes = full.map_or(0, |p| p.pages * p.page_bytes(page_size)) as f64;
        let swa_bytes = swa.map_or(0, |p| p.pages * p.page_bytes(page_size)) as f64;
        match budget.host {
            Some(host) => {
                let total = (full_bytes + swa_bytes).max(1.0);
                let pages_of = |pool: Option<TokenPool>, share: f64| {
                    pool.map_or(0, |p| (host as f64 * share / total / p.page_bytes(page_size).max(1) as f64) as usize)
                };
                HostPool { full_pages: pages_of(full, full_bytes), swa_pages: pages_of(swa, swa_bytes) }
            }
            None => {
                let ratio = checked.effective.host_pool_ratio.unwrap_or(crate::policy::BACKUP_ONLY_HOST_POOL_RATIO);
                let scale = |pages: usize| (pages as f64 * ratio) as usize;
                HostPool {
                    full_pages: full.map_or(0, |p| scale(p.pages)),
                    swa_pages: swa.map_or(0, |p| scale(p.pages)),
                }
            }
        }
    });
    Ok(PoolPlan {
        page_size,
        window: (swa_layers > 0).then(|| layout.sliding_window.unwrap_or(0) as usize),
        full,
        swa,
        ssm,
        host,
        cpu_backup_limit: if checked.host_pool() { None } else { budget.host },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runtime::config::RuntimeConfig;

    const GIB: u64 = 1 << 30;

    fn checked(fixture: &str, disaggregation: serde_json::Value, decode: serde_json::Value) -> Checked {
        let path = format!("{}/tests/fixtures/layouts/{fixture}.json", env!("CARGO_MANIFEST_DIR"));
        let layout: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let text =
            json!({"model": {"name": fixture}, "layout": layout, "disaggregation": disaggregation, "decode": decode});
        RuntimeConfig::parse(&text.to_string(), fixture).unwrap().check().unwrap()
    }

    fn sized(fixture: &str, disaggregation: serde_json::Value, decode: serde_json::Value, budget: Budget) -> PoolPlan {
        plan(&checked(fixture, disaggregation, decode), budget).unwrap()
    }

    const ONE_GIB: Budget = Budget { device: GIB, host: None };

    // Expected figures are computed by hand from the formulas in the module comment.

    #[test]
    fn a_full_attention_pool_takes_the_whole_budget() {
        // 32 layers × 8 heads × (128 + 128) × 2 bytes = 131072 bytes per token.
        let plan = sized("llama-3.1-8b-instruct", json!({}), json!({"pageSize": 16}), ONE_GIB);
        let full = plan.full.unwrap();
        assert_eq!((full.bytes_per_token, full.pages, full.tokens(16)), (131_072, 512, 8192));
        assert!(plan.swa.is_none() && plan.ssm.is_none());
        // The automatic backup for an MHA pool is host_pool, sized at 0.2 of the device pool.
        assert_eq!(plan.host, Some(HostPool { full_pages: 102, swa_pages: 0 }));
    }

    #[test]
    fn kv_heads_are_replicated_when_tensor_parallel_exceeds_them() {
        let tp4 = sized("llama-3.1-8b-instruct", json!({}), json!({"tensorParallel": 4}), ONE_GIB);
        assert_eq!(tp4.full.unwrap().bytes_per_token, 131_072);
        let tp16 = sized("llama-3.1-8b-instruct", json!({}), json!({"tensorParallel": 16}), ONE_GIB);
        assert_eq!(tp16.full.unwrap().pages, 4096, "8 KV heads on 16 ranks hold 16 copies' worth");
        // An MLA latent is replicated on every attention rank.
        let mla = sized("deepseek-v3", json!({}), json!({"tensorParallel": 8}), ONE_GIB);
        assert_eq!(mla.full.unwrap().pages, 1909);
    }

    #[test]
    fn hybrid_swa_splits_the_budget_with_the_swa_full_tokens_ratio() {
        let plan = sized("gpt-oss-20b", json!({}), json!({}), ONE_GIB);
        assert_eq!(plan.full.unwrap().pages, 24_272);
        assert_eq!(plan.swa.unwrap().pages, 19_418);
        assert_eq!(plan.window, Some(128));
        let ratio = sized("gpt-oss-20b", json!({}), json!({"swaFullTokensRatio": 1.0}), ONE_GIB);
        assert_eq!(ratio.full.unwrap().pages, ratio.swa.unwrap().pages);
        // An explicit host budget is split in proportion to the device pools.
        let host = sized("gpt-oss-20b", json!({}), json!({}), Budget { device: GIB, host: Some(64 << 20) });
        assert_eq!(host.host, Some(HostPool { full_pages: 1517, swa_pages: 1213 }));
    }

    #[test]
    fn pure_swa_gives_everything_to_the_window_pool() {
        let plan = sized("custom-pure-swa", json!({"retractionBackup": "cpu_tensor"}), json!({}), ONE_GIB);
        assert!(plan.full.is_none());
        assert_eq!(plan.swa.unwrap().pages, 26_214);
        assert_eq!(plan.host, None, "cpu_tensor has no host pool");
    }

    #[test]
    fn ssm_hybrids_reserve_state_slots_first() {
        let plan = sized("qwen3-next-80b-a3b", json!({}), json!({}), ONE_GIB);
        let ssm = plan.ssm.unwrap();
        assert_eq!((ssm.layers, ssm.bytes_per_slot, ssm.slots), (36, 36 * 2_146_304, 6));
        assert_eq!(plan.full.unwrap().pages, 22_995);
        assert_eq!(plan.host, None, "SSM models get cpu_tensor");
    }

    #[test]
    fn a_budget_too_small_for_one_page_says_how_much_is_needed() {
        let error = plan(
            &checked("llama-3.1-8b-instruct", json!({}), json!({"pageSize": 64})),
            Budget { device: 1 << 20, host: None },
        )
        .unwrap_err();
        assert!(error.contains("8388608 bytes per page"), "{error}");
        let error = plan(&checked("qwen3-next-80b-a3b", json!({}), json!({})), Budget { device: 1 << 20, host: None })
            .unwrap_err();
        assert!(error.contains("less than one request's state"), "{error}");
    }
}
