//! Every SGLang check (`sglang-rules.md` §1.4, §2) that can be decided from an
//! `InferenceDeployment` spec and its resolved layout, one named item each, with SGLang's exact
//! message. The order of [`RULES`] is the order findings are reported in.

use crate::api::AttentionLayout;
use crate::api::{
    AttentionKind, DecodeSpec, DisaggregationSpec, KvPool, LayerKind, LayoutFeature, MambaRadixCacheStrategy,
    RetractionBackup, TransferBackend,
};

/// What a rule sees: the settings as they stand (maybe already partly rewritten), the decode
/// fleet and the layout.
pub(crate) struct Context<'a> {
    pub(crate) settings: &'a DisaggregationSpec,
    pub(crate) decode: &'a DecodeSpec,
    pub(crate) layout: &'a AttentionLayout,
}

/// How a violation can be fixed.
pub(crate) enum Fix {
    /// A safe change of one setting; `apply` makes it and returns `(from, to)` as displayed.
    Rewrite { apply: fn(&mut DisaggregationSpec) -> (String, String), hint: &'static str },
    /// No safe change exists; the user must change what `hint` says.
    Manual { hint: &'static str },
}

/// One rule: its id in `sglang-rules.md`, the field it is about, and its check, which returns
/// SGLang's message and, where useful, detail for the fix text.
pub(crate) struct Rule {
    pub(crate) id: &'static str,
    pub(crate) field: &'static str,
    pub(crate) check: fn(&Context<'_>) -> Option<Finding>,
    pub(crate) fix: Fix,
}

/// A failed check.
pub(crate) struct Finding {
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
}

impl Finding {
    fn new(message: impl Into<String>) -> Option<Self> {
        Some(Self { message: message.into(), detail: None })
    }
}

/// The finding with `message` when `violated`.
fn when(violated: bool, message: impl Into<String>) -> Option<Finding> {
    if violated { Finding::new(message) } else { None }
}

pub(crate) const RETRACTION_BACKUP: &str = "spec.disaggregation.retractionBackup";
const DECODE_RADIX_CACHE: &str = "spec.disaggregation.decodeRadixCache";
const HIERARCHICAL_CACHE: &str = "spec.disaggregation.hierarchicalCache";
const TRANSFER_BACKEND: &str = "spec.disaggregation.transferBackend";
const MAMBA_STRATEGY: &str = "spec.disaggregation.mambaRadixCacheStrategy";
const UNIFIED_MEMORY: &str = "spec.disaggregation.enableUnifiedMemory";
const DECODE_TP: &str = "spec.decode.tensorParallel";
const DECODE_PAGE_SIZE: &str = "spec.decode.pageSize";
const DECODE_ENV: &str = "spec.decode.env";

fn host_pool(c: &Context<'_>) -> bool {
    c.settings.retraction_backup == Some(RetractionBackup::HostPool)
}

fn radix(c: &Context<'_>) -> bool {
    c.settings.decode_radix_cache
}

fn dcp(c: &Context<'_>) -> bool {
    c.settings.decode_context_parallel > 1
}

fn mooncake_or_nixl(c: &Context<'_>) -> bool {
    matches!(c.settings.transfer_backend, TransferBackend::Mooncake | TransferBackend::Nixl)
}

fn env_truthy(decode: &DecodeSpec, name: &str) -> bool {
    decode
        .env_value(name)
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

fn to_cpu_tensor(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.retraction_backup.map_or("unset", RetractionBackup::as_str).to_string();
    s.retraction_backup = Some(RetractionBackup::CpuTensor);
    (from, RetractionBackup::CpuTensor.as_str().to_string())
}

fn radix_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.decode_radix_cache = false;
    ("true".into(), "false".into())
}

fn hierarchical_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.hierarchical_cache = false;
    ("true".into(), "false".into())
}

fn unified_memory_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.enable_unified_memory = false;
    ("true".into(), "false".into())
}

fn to_extra_buffer(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.mamba_radix_cache_strategy.map_or("unset", MambaRadixCacheStrategy::as_str).to_string();
    s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer);
    (from, MambaRadixCacheStrategy::ExtraBuffer.as_str().to_string())
}

/// Attention TP: TP ÷ DP under DP attention, else TP.
pub fn attention_tp(tensor_parallel: i32, data_parallel: i32, dp_attention: bool) -> i32 {
    if dp_attention && data_parallel > 0 { tensor_parallel / data_parallel } else { tensor_parallel }
}

/// Layer ranges `[start, end)` of each pipeline stage, split as SGLang's `get_pp_indices`
/// does: evenly, with the remainder going one layer each to the stages before the last.
pub fn pipeline_stages(layers: usize, stages: usize) -> Vec<(usize, usize)> {
    let stages = stages.clamp(1, layers.max(1));
    let mut sizes = vec![layers / stages; stages];
    for i in 0..layers % stages {
        sizes[stages - 2 - i] += 1;
    }
    let mut start = 0;
    sizes
        .into_iter()
        .map(|size| {
            let range = (start, start + size);
            start += size;
            range
        })
        .collect()
}

/// The first pipeline stage of a hybrid-SWA model that holds no full-attention layer: that rank
/// builds a pure-SWA pool (§3.1, PP note).
pub(crate) fn stage_without_full_layer(layout: &AttentionLayout, stages: i32) -> Option<(usize, usize, usize)> {
    if layout.kv_pool != KvPool::HybridSwa || stages <= 1 {
        return None;
    }
    pipeline_stages(layout.layer_kinds.len(), stages as usize)
        .into_iter()
        .enumerate()
        .find(|(_, (start, end))| !layout.layer_kinds[*start..*end].contains(&LayerKind::Full))
        .map(|(stage, (start, end))| (stage, start, end))
}

fn mla_like(layout: &AttentionLayout) -> bool {
    layout.attention == AttentionKind::Mla || layout.has(LayoutFeature::DeepseekV4)
}

/// The rules, in report order.
pub(crate) const RULES: &[Rule] = &[
    Rule {
        id: "S2",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(
                host_pool(c) && dcp(c),
                "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
            )
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set decodeContextParallel to 1" },
    },
    Rule {
        id: "S3",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(
                host_pool(c) && c.settings.priority_scheduling && !c.settings.disable_priority_preemption,
                "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption \
                         when priority scheduling is enabled.",
            )
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set disablePriorityPreemption: true" },
    },
    Rule {
        id: "S4",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(
                host_pool(c) && c.settings.decode_offload_kv_cache,
                "The arguments disaggregation-decode-enable-offload-kvcache and \
                         disaggregation-decode-retraction-backup=host_pool are mutually exclusive: both build a decode \
                         host pool.",
            )
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeOffloadKvCache off" },
    },
    Rule {
        id: "R1",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(host_pool(c) && c.layout.uses_ssm_state(), "Host-pool retraction does not support Mamba models.")
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R2",
        field: RETRACTION_BACKUP,
        check: |c| {
            if !host_pool(c) || radix(c) {
                return None;
            }
            if c.layout.kv_pool == KvPool::PureSwa {
                return Finding::new("Host-pool retraction does not support pure-SWA models.");
            }
            stage_without_full_layer(c.layout, c.decode.pipeline_parallel).map(|(stage, start, end)| Finding {
                message: "Host-pool retraction does not support pure-SWA models.".into(),
                detail: Some(format!(
                    "pipeline stage {stage} (layers {start}..{end}) of pipelineParallel={} holds no full-attention layer, so \
                     that rank is pure SWA",
                    c.decode.pipeline_parallel
                )),
            })
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R8",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(
                host_pool(c) && radix(c) && c.layout.kv_pool == KvPool::PureSwa,
                "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.",
            )
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeRadixCache off" },
    },
    Rule {
        id: "R9",
        field: RETRACTION_BACKUP,
        check: |c| {
            when(
                host_pool(c) && !c.layout.uses_ssm_state() && mla_like(c.layout),
                "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
            )
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R13",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.layout.is_hybrid_swa() && !env_truthy(c.decode, "SGLANG_ENABLE_UNIFIED_RADIX_TREE"),
                "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires \
                         the unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).",
            )
        },
        fix: Fix::Rewrite {
            apply: radix_off,
            hint: "turn decodeRadixCache off, or add SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 to spec.decode.env",
        },
    },
    Rule {
        id: "R14",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.layout.is_hybrid_swa() && c.settings.hierarchical_cache,
                "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently \
                         supports only device-resident cache and is incompatible with --enable-hierarchical-cache.",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache or hierarchicalCache off" },
    },
    Rule {
        id: "R15",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::DeepseekV4),
                "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV \
                         (c4/c128/indexer) yet.",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off" },
    },
    Rule {
        id: "R16",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::SwaCompress),
                "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / \
                         MiMo-V2) yet.",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off" },
    },
    Rule {
        id: "R17",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.layout.uses_ssm_state(),
                "--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off" },
    },
    Rule {
        id: "R18",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                radix(c) && c.settings.transfer_backend == TransferBackend::Fake,
                "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or use a real transfer backend" },
    },
    Rule {
        id: "R18",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            let algorithm = c.settings.speculative_algorithm.as_deref().filter(|_| radix(c))?;
            Finding::new(format!(
                "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding \
                 (--speculative-algorithm {algorithm})"
            ))
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or drop speculativeAlgorithm" },
    },
    Rule {
        id: "R19",
        field: TRANSFER_BACKEND,
        check: |c| {
            when(
                dcp(c) && !mooncake_or_nixl(c),
                format!(
                    "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got '{}'.",
                    c.settings.transfer_backend.as_str()
                ),
            )
        },
        fix: Fix::Manual { hint: "set transferBackend to mooncake or nixl, or decodeContextParallel to 1" },
    },
    Rule {
        id: "R19",
        field: DECODE_RADIX_CACHE,
        check: |c| {
            when(
                dcp(c) && radix(c),
                "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not \
                         supported.",
            )
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or set decodeContextParallel to 1" },
    },
    Rule {
        id: "R19",
        field: HIERARCHICAL_CACHE,
        check: |c| {
            when(
                dcp(c) && c.settings.hierarchical_cache,
                "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.",
            )
        },
        fix: Fix::Rewrite {
            apply: hierarchical_off,
            hint: "turn hierarchicalCache off, or set decodeContextParallel to 1",
        },
    },
    Rule {
        id: "R20",
        field: DECODE_ENV,
        check: |c| {
            when(
                env_truthy(c.decode, "SGLANG_DISAGG_STAGING_BUFFER") && !mooncake_or_nixl(c),
                format!(
                    "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got \
                         '{}'.",
                    c.settings.transfer_backend.as_str()
                ),
            )
        },
        fix: Fix::Manual {
            hint: "remove SGLANG_DISAGG_STAGING_BUFFER from spec.decode.env, or set transferBackend to mooncake or nixl",
        },
    },
    Rule {
        id: "T1",
        field: DECODE_TP,
        check: |c| {
            let prefill = c.settings.prefill.as_ref()?;
            if !c.layout.is_hybrid_swa() || mla_like(c.layout) {
                return None;
            }
            let prefill_tp = attention_tp(prefill.tensor_parallel, prefill.data_parallel, prefill.enable_dp_attention);
            let decode_tp =
                attention_tp(c.decode.tensor_parallel, c.decode.data_parallel, c.decode.enable_dp_attention);
            (prefill_tp != decode_tp).then(|| Finding {
                message: format!(
                    "PD state transfer does not support TP-mismatched non-MLA SWA models \
                         (prefill_tp_size={prefill_tp}, decode_tp_size={decode_tp})"
                ),
                detail: Some(format!(
                    "make the decode attention TP (tensorParallel{}) equal the prefill attention TP {prefill_tp}",
                    if c.decode.enable_dp_attention { " ÷ dataParallel" } else { "" }
                )),
            })
        },
        fix: Fix::Manual {
            hint: "changing TP changes the GPU count, so kvpilot does not rewrite it: set spec.decode.tensorParallel \
                   (or dataParallel under DP attention) so prefill and decode attention TP match",
        },
    },
    Rule {
        id: "M1",
        field: MAMBA_STRATEGY,
        check: |c| {
            when(
                c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::ExtraBufferLazy),
                "extra_buffer_lazy unsupported under PD disaggregation; use --mamba-radix-cache-strategy extra_buffer.",
            )
        },
        fix: Fix::Rewrite { apply: to_extra_buffer, hint: "use extra_buffer" },
    },
    Rule {
        id: "M3",
        field: DECODE_PAGE_SIZE,
        check: |c| {
            when(
                c.layout.uses_ssm_state()
                    && c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::NoBuffer)
                    && c.decode.page_size != 1,
                "no_buffer only supports page_size=1.",
            )
        },
        fix: Fix::Manual { hint: "set spec.decode.pageSize to 1, or mambaRadixCacheStrategy to extra_buffer" },
    },
    Rule {
        id: "U1",
        field: UNIFIED_MEMORY,
        check: |c| {
            when(
                c.settings.enable_unified_memory
                    && (c.settings.transfer_backend != TransferBackend::Mooncake || c.decode.pipeline_parallel > 1),
                "--enable-unified-memory with PD disaggregation requires --disaggregation-transfer-backend mooncake \
                         and --pp-size 1.",
            )
        },
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
    Rule {
        id: "U2",
        field: UNIFIED_MEMORY,
        check: |c| {
            when(
                c.settings.enable_unified_memory
                    && c.layout.uses_ssm_state()
                    && c.layout.attention != AttentionKind::Mla,
                "--enable-unified-memory with PD disaggregation currently supports only MLA hybrid-Mamba models \
                         (e.g. kimi-linear)",
            )
        },
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
    Rule {
        id: "U3",
        field: UNIFIED_MEMORY,
        check: |c| {
            when(
                c.settings.enable_unified_memory
                    && c.layout.is_hybrid_swa()
                    && !c.layout.has(LayoutFeature::DeepseekV4),
                "--enable-unified-memory with PD disaggregation does not support hybrid-SWA models yet (no \
                         whole-envelope transfer scheme for the SWA sub-pool).",
            )
        },
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
];
