//! The prefill ↔ decode transfer and handshake (`disaggregation/`): what the decode side's
//! `try_ensure_parallel_info` and rank mapping compare before the first transfer, what each KV manager
//! checks when it registers its pools, and what the prefill sender refuses while transferring.

use super::predicates::{
    DECODE_CONTEXT_PARALLEL, DECODE_KV_CACHE_DTYPE, DECODE_PAGE_SIZE, DECODE_PIPELINE, DECODE_TP,
    SPECULATIVE_ALGORITHM, SPECULATIVE_DRAFT_MODEL, attention_tp, dcp, fleets_in_scope, kv_cache_dtype, mla_like,
    mooncake_or_nixl, prefill_attention_tp, speculates, speculative_algorithm,
};
use super::{Finding, Fix, Message, PD_SERVERS, Phase, Rule, RuleInput, Subject, text, text_from, when, when_with};
use crate::api::{AttentionKind, AttentionLayout, FleetSpec, KvPool, LayoutFeature, TransferBackend};
use crate::policy::argv::option_value;
use crate::release::{Span, v0_5};

pub(super) const R19D: Rule = Rule {
    id: "R19d",
    about: "decode DCP needs an MLA pool",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.17–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    phase: Phase::Handshake,
    messages: &[text("PD decode DCP requires an MLA or hybrid-MLA KV pool.")],
    check: |c| when(dcp(c) && !mla_like(c.layout)),
    fix: Fix::Manual { hint: "set decodeContextParallel to 1: decode context parallelism needs an MLA model" },
    ..Rule::DEFAULT
};

pub(super) const R19E: Rule = Rule {
    id: "R19e",
    about: "decode DCP × prefill attention CP",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.17–0.5.23)",
    field: PREFILL_CONTEXT_PARALLEL,
    phase: Phase::Handshake,
    messages: &[text("PD decode DCP currently requires prefill attention CP=1, got {cp}.")],
    check: |c| {
        let cp = c.settings.prefill.as_ref()?.attention_context_parallel;
        when_with(dcp(c) && cp != 1, vec![("cp", cp.to_string())])
    },
    fix: Fix::Manual {
        hint: "run the prefill servers without attention context parallelism (no --attn-cp-size, no prefill CP \
               mode), or set {spec.disaggregation.decodeContextParallel} to 1",
    },
    ..Rule::DEFAULT
};

pub(super) const R19F: Rule = Rule {
    id: "R19f",
    about: "decode DCP × prefill KV cache sharding",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.23)",
    field: PREFILL_KV_SHARDING,
    span: Span::since(v0_5(23)),
    phase: Phase::Handshake,
    messages: &[text("PD decode DCP does not support a prefill with --enable-kv-cache-sharding.")],
    check: |c| when(dcp(c) && c.settings.prefill.as_ref()?.kv_cache_sharding),
    fix: Fix::Manual {
        hint: "run the prefill servers without --enable-kv-cache-sharding, or set \
               {spec.disaggregation.decodeContextParallel} to 1",
    },
    ..Rule::DEFAULT
};

pub(super) const R20: Rule = Rule {
    id: "R20",
    about: "staging buffer backend",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: DECODE_ENV,
    roles: PD_SERVERS,
    messages: &[text(
        "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got \
         '{backend}'.",
    )],
    check: |c| {
        when_with(
            c.decode.env_on("SGLANG_DISAGG_STAGING_BUFFER") && !mooncake_or_nixl(c),
            vec![("backend", c.settings.transfer_backend.as_str().into())],
        )
    },
    fix: Fix::Manual {
        hint: "remove SGLANG_DISAGG_STAGING_BUFFER from {spec.decode.env}, or set transferBackend to mooncake or nixl",
    },
    ..Rule::DEFAULT
};

pub(super) const P1: Rule = Rule {
    id: "P1",
    about: "prefill and decode page size",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.17–0.5.23)",
    field: DECODE_PAGE_SIZE,
    phase: Phase::Handshake,
    messages: &[text(
        "Page size mismatch: prefill server has page_size={prefill}, but decode server has page_size={decode}. \
         Both servers must use the same --page-size value.",
    )],
    check: |c| {
        let prefill = c.settings.prefill.as_ref()?.page_size?;
        let decode = c.decode.effective_page_size();
        (prefill != decode).then(|| Finding {
            args: vec![("prefill", prefill.to_string()), ("decode", decode.to_string())],
            detail: Some(format!("the prefill page size is {}", prefill_source(c, "pageSize", "--page-size"))),
        })
    },
    fix: Fix::Manual { hint: "set {spec.decode.pageSize} and the prefill page size to the same value" },
    ..Rule::DEFAULT
};

pub(super) const P2: Rule = Rule {
    id: "P2",
    about: "prefill and decode KV cache dtype",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.17–0.5.23)",
    field: DECODE_KV_CACHE_DTYPE,
    phase: Phase::Handshake,
    messages: &[text(
        "KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill}, but decode server has \
         kv_cache_dtype={decode}. Both servers must use the same --kv-cache-dtype value.",
    )],
    check: |c| {
        let prefill = kv_cache_dtype(c.settings.prefill.as_ref()?.kv_cache_dtype.as_deref());
        let decode = kv_cache_dtype(c.decode.kv_cache_dtype.as_deref());
        (!prefill.eq_ignore_ascii_case(decode)).then(|| Finding {
            args: vec![("prefill", prefill.to_string()), ("decode", decode.to_string())],
            detail: Some(format!(
                "the prefill KV cache dtype is {}",
                prefill_source(c, "kvCacheDtype", "--kv-cache-dtype")
            )),
        })
    },
    fix: Fix::Manual { hint: "set {spec.decode.kvCacheDtype} and the prefill KV cache dtype to the same value" },
    ..Rule::DEFAULT
};

pub(super) const T1_MORI: Rule = Rule {
    id: "T1",
    about: "SWA state × TP mismatch (mori)",
    reproduces: "MoriKVManager._send_swa_dsa_state, srt/disaggregation/mori/conn.py (0.5.17–0.5.23)",
    field: DECODE_TP,
    backends: &[TransferBackend::Mori],
    phase: Phase::Transfer,
    messages: &[text(
        "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size={prefill_tp}, \
         decode_tp_size={decode_tp})",
    )],
    check: |c| tp_mismatch(c, swa_state(c)),
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T1: Rule = Rule {
    id: "T1",
    about: "SWA state × TP mismatch (mooncake, nixl)",
    reproduces: "MooncakeKVManager.maybe_send_extra, srt/disaggregation/mooncake/conn.py (0.5.17–0.5.21); \
                 NixlKVManager.maybe_send_extra, srt/disaggregation/nixl/conn.py (0.5.17–0.5.21)",
    field: DECODE_TP,
    span: Span::between(v0_5(17), v0_5(21)),
    backends: MOONCAKE_NIXL,
    phase: Phase::Transfer,
    messages: &[text("PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.")],
    check: |c| tp_mismatch(c, swa_state(c)),
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T1HND: Rule = Rule {
    id: "T1hnd",
    about: "HND KV cache layout on a PD server",
    reproduces: "MHATokenToKVPool.get_contiguous_buf_infos, srt/mem_cache/memory_pool.py (0.5.17–0.5.23)",
    field: DECODE_ENV,
    roles: PD_SERVERS,
    phase: Phase::PoolBuild,
    messages: &[text(
        "PD-disaggregation KV transfer assumes NHD slot-row layout; HND KV cache (SGLANG_USE_HND_KVCACHE) is \
         not supported with disagg yet.",
    )],
    // The KV manager of every PD server registers its pool's buffers at start-up, and the MHA
    // pool's `get_contiguous_buf_infos` asserts the NHD layout (0.5.17-0.5.23). A
    // unified-memory pool states its page-major layout itself; MLA, DeepSeek-V4 and MiniMax
    // sparse pools are other classes.
    check: |c| {
        let mha =
            mha_pool(c.layout) || (c.layout.kv_pool == KvPool::HybridSsm && c.layout.attention != AttentionKind::Mla);
        let hnd = fleets_in_scope(c).any(|fleet| fleet.env_on(HND_KV_CACHE_ENV));
        when(mha && !c.settings.enable_unified_memory && hnd)
    },
    fix: Fix::Manual {
        hint: "remove SGLANG_USE_HND_KVCACHE from the env of the PD servers ({spec.decode.env}, {spec.prefill.env}): \
               their KV transfer reads the NHD layout",
    },
    ..Rule::DEFAULT
};

pub(super) const T1PP: Rule = Rule {
    id: "T1pp",
    about: "SWA head slicing × prefill PP (mooncake, nixl)",
    reproduces: "CommonKVManager._get_mha_head_slice_blocks, srt/disaggregation/common/conn.py (0.5.22–0.5.23)",
    field: DECODE_TP,
    span: Span::since(v0_5(22)),
    backends: MOONCAKE_NIXL,
    phase: Phase::Transfer,
    messages: &[text(
        "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models with pipeline \
         parallelism yet.",
    )],
    // From 0.5.22 SWA state moves by head slicing when attention TP differs; the sender (the
    // prefill server) cannot pair its per-stage SWA entries with decode's layers under PP.
    check: |c| {
        let prefill_pp = c.settings.prefill.as_ref().map_or(1, |p| p.pipeline_parallel);
        tp_mismatch(c, swa_state(c) && prefill_pp > 1)
    },
    fix: Fix::Manual { hint: "set the prefill pipelineParallel to 1, or make prefill and decode attention TP equal" },
    ..Rule::DEFAULT
};

pub(super) const T1_BLOCK_SCALES: Rule = Rule {
    id: "T1",
    about: "MXFP8 block scales × TP mismatch (mooncake, nixl)",
    reproduces: "MooncakeKVManager.maybe_send_extra, srt/disaggregation/mooncake/conn.py (0.5.19–0.5.21); \
                 NixlKVManager.maybe_send_extra, srt/disaggregation/nixl/conn.py (0.5.21; before, T1nx)",
    field: DECODE_TP,
    span: Span::between(v0_5(19), v0_5(21)),
    backends: MOONCAKE_NIXL,
    phase: Phase::Transfer,
    messages: &[text(
        "PD Disaggregation does NOT support PD different TP sizes for non-MLA BLOCK_SCALE hybrid models yet.",
    )],
    changes: &[text_from(19, "mooncake only"), text_from(21, "nixl too")],
    check: |c| {
        // NIXL transfers BLOCK_SCALE state through this check from 0.5.21 (T1nx before), Mooncake
        // from 0.5.19.
        let checked = c.settings.transfer_backend == TransferBackend::Mooncake || c.release >= v0_5(21);
        tp_mismatch(c, checked && block_scale_state(c))
    },
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T1NX: Rule = Rule {
    id: "T1nx",
    about: "MXFP8 block scales over NIXL before 0.5.21",
    reproduces: "NixlKVManager.maybe_send_extra, srt/disaggregation/nixl/conn.py (0.5.19–0.5.20)",
    field: DECODE_KV_CACHE_DTYPE,
    span: Span::between(v0_5(19), v0_5(20)),
    backends: &[TransferBackend::Nixl],
    phase: Phase::Transfer,
    // `{st}` of a `(str, Enum)` member, as Python 3.11 and later format it.
    messages: &[text("PD Disaggregation via NIXL does NOT support StateType.BLOCK_SCALE hybrid models yet.")],
    // An MXFP8 MHA pool (also the full pool of an SWA one) registers BLOCK_SCALE state
    // (`setup_state_kv_args`, disaggregation/utils.py), and NIXL's sender has no branch for it
    // until 0.5.21: its last `else` refuses the first transfer, whatever either side's TP.
    check: |c| {
        let mxfp8 = kv_cache_dtype(c.decode.kv_cache_dtype.as_deref()).eq_ignore_ascii_case("mxfp8");
        when(mxfp8 && mha_pool(c.layout))
    },
    fix: Fix::Manual {
        hint: "use another {spec.decode.kvCacheDtype}, the mooncake {spec.disaggregation.transferBackend}, or \
               SGLang 0.5.21 or newer, whose NIXL sender moves MXFP8 block scales",
    },
    ..Rule::DEFAULT
};

pub(super) const T1MX: Rule = Rule {
    id: "T1mx",
    about: "MXFP8 KV × attention TP mismatch",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.22–0.5.23)",
    field: DECODE_TP,
    span: Span::since(v0_5(22)),
    phase: Phase::Handshake,
    messages: &[text(
        "PD Disaggregation does NOT support different attention TP sizes with MXFP8 KV cache: prefill \
         attn_tp_size={prefill_tp}, decode attn_tp_size={decode_tp}, state types {states}.",
    )],
    check: |c| {
        let mxfp8 = kv_cache_dtype(c.decode.kv_cache_dtype.as_deref()).eq_ignore_ascii_case("mxfp8");
        let mut finding = tp_mismatch(c, mxfp8)?;
        let states = if swa_state(c) { "['block_scale', 'block_scale_swa']" } else { "['block_scale']" };
        finding.args.push(("states", states.into()));
        Some(finding)
    },
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const P5: Rule = Rule {
    id: "P5",
    about: "MLA KV cache sharding × attention TP mismatch",
    reproduces: "CommonKVManager._resolve_rank_mapping, srt/disaggregation/common/conn.py (0.5.23)",
    field: DECODE_TP,
    span: Span::since(v0_5(23)),
    phase: Phase::Handshake,
    messages: &[text(
        "MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill={prefill_tp} \
         decode={decode_tp}",
    )],
    // The decode side maps its ranks onto sharded prefill ranks only for an MLA pool (SGLang's
    // `is_mla_backend`: MLA or DeepSeek-V4, not a hybrid-linear pool around MLA) and only
    // when prefill runs no attention CP.
    check: |c| {
        let prefill = c.settings.prefill.as_ref()?;
        let (prefill_tp, decode_tp) = attention_tps(c)?;
        when_with(
            prefill.kv_cache_sharding
                && prefill.attention_context_parallel == 1
                && mla_like(c.layout)
                && !c.layout.uses_ssm_state()
                && prefill_tp != decode_tp,
            vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
        )
    },
    fix: Fix::Manual {
        hint: "make the decode attention TP ({spec.decode.tensorParallel}) equal the prefill attention TP, or run \
               the prefill servers without --enable-kv-cache-sharding",
    },
    ..Rule::DEFAULT
};

pub(super) const P3: Rule = Rule {
    id: "P3",
    about: "DeepSeek-V4 KV layout mismatch",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.23)",
    field: DECODE_ENV,
    span: Span::since(v0_5(23)),
    phase: Phase::Handshake,
    messages: &[text(
        "KV layout mismatch: prefill server has kv_layout={prefill}, but decode server has kv_layout={decode}. \
         Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT.",
    )],
    check: |c| {
        if !c.layout.has(LayoutFeature::DeepseekV4) {
            return None;
        }
        // The prefill servers' KV cache dtype as they run it (a service's prefill fleet
        // without one runs the decode fleet's).
        let prefill_dtype = c.settings.prefill.as_ref().and_then(|p| p.kv_cache_dtype.as_deref());
        let prefill = dsv4_pd_kv_layout(c.layout, c.prefill_fleet?, prefill_dtype)?;
        let decode = dsv4_pd_kv_layout(c.layout, c.decode, c.decode.kv_cache_dtype.as_deref())?;
        when_with(prefill != decode, vec![("prefill", prefill), ("decode", decode)])
    },
    fix: Fix::Manual {
        hint: "give the prefill and decode servers the same SGLANG_DSV4_KV_LAYOUT, \
               SGLANG_DSV4_COMPRESSED_KV_LAYOUT and --dsv4-attn-backend",
    },
    ..Rule::DEFAULT
};

pub(super) const P4: Rule = Rule {
    id: "P4",
    about: "DeepSeek-V4.1 DSpark × attention TP mismatch",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.21–0.5.23)",
    field: DECODE_TP,
    span: Span::since(v0_5(21)),
    phase: Phase::Handshake,
    messages: &[
        text("DeepSeek-V4.1 DSpark PD requires the same TP size on both servers"),
        text_from(
            22,
            "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers (including prefill CP ranks for MLA)",
        ),
    ],
    changes: &[text_from(22, "a prefill whose attention TP × attention CP equals the decode attention TP passes")],
    check: dspark_tp_mismatch,
    fix: Fix::Manual {
        hint: "make the decode attention TP ({spec.decode.tensorParallel}) equal the prefill attention TP (from 0.5.22 \
               also: equal the prefill attention TP × attention CP)",
    },
    ..Rule::DEFAULT
};

pub(super) const P4B: Rule = Rule {
    id: "P4b",
    about: "DeepSeek-V4.1 DSpark on one side only",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.21–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    span: Span::since(v0_5(21)),
    phase: Phase::Handshake,
    // A server that runs DSPARK describes its DSpark transfer layout, one that does not
    // describes none, so every field of the layout differs.
    messages: &[text(
        "DeepSeek-V4.1 DSpark PD layout mismatch (compression_ratios, kv_item_lens, kv_layer_ids, \
         num_draft_tokens, state_item_lens, state_types): both servers must enable DSpark with the same block \
         size and target/draft KV layout. Upgrade both servers together.",
    )],
    check: |c| {
        let decode = speculative_algorithm(c).as_deref() == Some("DSPARK");
        when(c.layout.has(LayoutFeature::DeepseekV41) && decode != paired_prefill_dspark(c)?)
    },
    fix: Fix::Manual {
        hint: "run the decode and the prefill servers both with {spec.disaggregation.speculativeAlgorithm} DSPARK, \
               or neither",
    },
    ..Rule::DEFAULT
};

pub(super) const P6: Rule = Rule {
    id: "P6",
    about: "decode pipeline stages × prefill pipeline stages",
    reproduces: "CommonKVManager._resolve_rank_mapping, srt/disaggregation/common/conn.py (0.5.17–0.5.23)",
    field: DECODE_PIPELINE,
    phase: Phase::Handshake,
    // An assert whose message is a one-element tuple: SGLang prints it in parentheses.
    messages: &[text("Decode pp size ({decode}) should be equal to prefill pp size ({prefill}) or 1")],
    check: |c| {
        let prefill = c.settings.prefill.as_ref()?.pipeline_parallel;
        let decode = c.decode.pipeline_parallel;
        when_with(
            decode != prefill && decode != 1,
            vec![("decode", decode.to_string()), ("prefill", prefill.to_string())],
        )
    },
    fix: Fix::Manual {
        hint: "set {spec.decode.pipelineParallel} to 1 or to the prefill pipelineParallel (each decode stage pulls \
               from the prefill stage holding its layers)",
    },
    ..Rule::DEFAULT
};

pub(super) const T11_WINDOW: Rule = Rule {
    id: "T11",
    about: "DeepSeek-V4 draft window ≠ target window",
    reproduces: "setup_state_kv_args, srt/disaggregation/utils.py (0.5.17–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    roles: PD_SERVERS,
    phase: Phase::PoolBuild,
    messages: T11_MESSAGES,
    check: |c| draft_geometry_mismatch(c, |target, draft| target.1 != draft.1),
    fix: Fix::Manual {
        hint: "use a draft model whose sliding_window equals the model's, or unset speculativeDraftModel so \
               the model's own NextN layers draft",
    },
    ..Rule::DEFAULT
};

pub(super) const T11_DCP_PAGES: Rule = Rule {
    id: "T11",
    about: "DeepSeek-V4 draft pages × decode DCP",
    reproduces: "setup_state_kv_args, srt/disaggregation/utils.py (0.5.17–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    roles: PD_SERVERS,
    phase: Phase::PoolBuild,
    messages: T11_MESSAGES,
    check: |c| draft_geometry_mismatch(c, |target, draft| target.0 != draft.0),
    fix: Fix::Manual {
        hint: "set decodeContextParallel to 1 (a draft pool pages DCP's widened space, the target's does not), \
               or turn speculative decoding off",
    },
    ..Rule::DEFAULT
};

pub(super) const T4_PP: Rule = Rule {
    id: "T4",
    about: "MiniMax sparse state × prefill PP (mooncake, nixl)",
    reproduces: "MooncakeKVManager.maybe_send_extra, srt/disaggregation/mooncake/conn.py (0.5.17–0.5.23); \
                 NixlKVManager.maybe_send_extra, srt/disaggregation/nixl/conn.py (0.5.17–0.5.23)",
    field: PREFILL_PIPELINE,
    backends: MOONCAKE_NIXL,
    phase: Phase::Transfer,
    messages: T4_PP_MESSAGES,
    check: minimax_pipelined_prefill,
    fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T4_PP_MORI: Rule = Rule {
    id: "T4",
    about: "MiniMax sparse state × prefill PP (mori)",
    reproduces: "MoriKVManager._send_swa_dsa_state, srt/disaggregation/mori/conn.py (0.5.17–0.5.19)",
    field: PREFILL_PIPELINE,
    span: Span::between(v0_5(17), v0_5(19)),
    backends: &[TransferBackend::Mori],
    phase: Phase::Transfer,
    messages: T4_PP_MESSAGES,
    check: minimax_pipelined_prefill,
    fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T5_PP: Rule = Rule {
    id: "T5",
    about: "MiniMax sparse state × prefill PP (mori)",
    reproduces: "MoriKVManager._send_swa_dsa_state, srt/disaggregation/mori/conn.py (0.5.20–0.5.23)",
    field: PREFILL_PIPELINE,
    span: Span::since(v0_5(20)),
    backends: &[TransferBackend::Mori],
    phase: Phase::Transfer,
    messages: &[text(
        "MORI PD disaggregation requires PP=1 for minimax_index_k; PP>1 needs peer state_layer_ids for \
         global-layer descriptor pairing.",
    )],
    check: minimax_pipelined_prefill,
    fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T4_TP: Rule = Rule {
    id: "T4",
    about: "MiniMax sparse state × attention TP mismatch (mooncake, nixl)",
    reproduces: "MooncakeKVManager.maybe_send_extra, srt/disaggregation/mooncake/conn.py (0.5.17–0.5.22); \
                 NixlKVManager.maybe_send_extra, srt/disaggregation/nixl/conn.py (0.5.17–0.5.22)",
    field: DECODE_TP,
    span: Span::between(v0_5(17), v0_5(22)),
    backends: MOONCAKE_NIXL,
    phase: Phase::Transfer,
    messages: T4_TP_MESSAGES,
    check: minimax_tp_mismatch,
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T4_TP_MORI: Rule = Rule {
    id: "T4",
    about: "MiniMax sparse state × attention TP mismatch (mori)",
    reproduces: "MoriKVManager._send_swa_dsa_state, srt/disaggregation/mori/conn.py (0.5.17–0.5.19)",
    field: DECODE_TP,
    span: Span::between(v0_5(17), v0_5(19)),
    backends: &[TransferBackend::Mori],
    phase: Phase::Transfer,
    messages: T4_TP_MESSAGES,
    check: minimax_tp_mismatch,
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T5_TP: Rule = Rule {
    id: "T5",
    about: "MiniMax sparse state × attention TP mismatch (mori)",
    reproduces: "MoriKVManager._send_swa_dsa_state, srt/disaggregation/mori/conn.py (0.5.20–0.5.22)",
    field: DECODE_TP,
    span: Span::between(v0_5(20), v0_5(22)),
    backends: &[TransferBackend::Mori],
    phase: Phase::Transfer,
    messages: &[text("PD disagg: heterogeneous TP not supported for minimax_index_k yet.")],
    check: minimax_tp_mismatch,
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

pub(super) const T4C: Rule = Rule {
    id: "T4c",
    about: "MiniMax sparse state × attention TP mismatch (handshake)",
    reproduces: "CommonKVManager.try_ensure_parallel_info, srt/disaggregation/common/conn.py (0.5.23)",
    field: DECODE_TP,
    span: Span::since(v0_5(23)),
    backends: &[TransferBackend::Mooncake, TransferBackend::Nixl, TransferBackend::Mori],
    phase: Phase::Handshake,
    messages: &[text(
        "MiniMax sparse PD requires matching attention TP sizes: prefill={prefill_tp}, decode={decode_tp}.",
    )],
    check: minimax_tp_mismatch,
    fix: Fix::Manual { hint: TP_HINT },
    ..Rule::DEFAULT
};

const DECODE_ENV: &str = "spec.decode.env";
const PREFILL_PIPELINE: &str = "spec.disaggregation.prefill.pipelineParallel";
const PREFILL_CONTEXT_PARALLEL: &str = "spec.disaggregation.prefill.attentionContextParallel";
const PREFILL_KV_SHARDING: &str = "spec.disaggregation.prefill.kvCacheSharding";
const MOONCAKE_NIXL: &[TransferBackend] = &[TransferBackend::Mooncake, TransferBackend::Nixl];
const HND_KV_CACHE_ENV: &str = "SGLANG_USE_HND_KVCACHE";

/// The page size SGLang serves DeepSeek-V4 with on CUDA: its model override sets it whatever
/// `--page-size` says (the paged SWA pool asserts it).
const DEEPSEEK_V4_PAGE_SIZE: i32 = 256;

/// The DeepSeek-V4 SWA geometry a decode server's target and draft pools are built with, when
/// both are DeepSeek-V4 pools and a draft worker runs: `(page size, sliding window)` of each, as
/// `setup_state_kv_args` compares them. The draft's pool pages the allocator's virtual space,
/// which decode context parallelism widens by its size (`loc_space_scale`); the window is each
/// config's `sliding_window`. None where no such pair of pools is built.
fn deepseek_v4_draft_geometry(c: &RuleInput<'_>) -> Option<((i32, u64), (i32, u64))> {
    let algorithm = c.settings.speculative_algorithm.as_deref()?.trim();
    // NGRAM drafts from the prompt: no draft model and no draft KV pool.
    if !speculates(c) || algorithm.eq_ignore_ascii_case("ngram") {
        return None;
    }
    let draft = c.draft.unwrap_or(c.layout);
    if !c.layout.has(LayoutFeature::DeepseekV4) || !draft.has(LayoutFeature::DeepseekV4) {
        return None;
    }
    let target = (DEEPSEEK_V4_PAGE_SIZE, c.layout.sliding_window?);
    let draft_page = DEEPSEEK_V4_PAGE_SIZE.saturating_mul(c.settings.decode_context_parallel.max(1));
    Some((target, (draft_page, draft.sliding_window?)))
}

/// T11's finding when `differs` picks a difference of the target and draft geometry.
fn draft_geometry_mismatch(c: &RuleInput<'_>, differs: fn((i32, u64), (i32, u64)) -> bool) -> Option<Finding> {
    let (target, draft) = deepseek_v4_draft_geometry(c)?;
    // 0.5.23's third element: None for both unless a DSpark draft keeps its own SWA ring, whose
    // size (and the target's request window) is set at start-up.
    let dspark = c.settings.speculative_algorithm.as_deref().is_some_and(|a| a.trim().eq_ignore_ascii_case("dspark"));
    let (target_ring, draft_ring) =
        if dspark { ("<request window capacity>", "<draft SWA ring size>") } else { ("None", "None") };
    when_with(
        differs(target, draft),
        vec![
            ("target_page", target.0.to_string()),
            ("target_window", target.1.to_string()),
            ("draft_page", draft.0.to_string()),
            ("draft_window", draft.1.to_string()),
            ("target_ring", target_ring.into()),
            ("draft_ring", draft_ring.into()),
        ],
    )
}

/// SGLang builds a `MiniMaxSparseKVPool` (MiniMax-M3 sparse attention: not DeepSeek-V4, MLA or
/// hybrid SWA, which its pool builder picks first), whose index state moves with every transfer.
fn minimax_sparse_state(c: &RuleInput<'_>) -> bool {
    c.layout.has(LayoutFeature::MinimaxSparse) && !mla_like(c.layout) && !c.layout.is_hybrid_swa()
}

/// T4: the prefill sender's pipeline stages, when MiniMax sparse state moves and it has more than one.
fn minimax_pipelined_prefill(c: &RuleInput<'_>) -> Option<Finding> {
    let stages = c.settings.prefill.as_ref()?.pipeline_parallel;
    when(minimax_sparse_state(c) && stages > 1)
}

/// T4/T4c/T5: MiniMax sparse state with prefill and decode attention TP that differ.
fn minimax_tp_mismatch(c: &RuleInput<'_>) -> Option<Finding> {
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    when_with(
        minimax_sparse_state(c) && prefill_tp != decode_tp,
        vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
    )
}

const DSV4_KV_LAYOUT_ENV: &str = "SGLANG_DSV4_KV_LAYOUT";
const DSV4_COMPRESSED_KV_LAYOUT_ENV: &str = "SGLANG_DSV4_COMPRESSED_KV_LAYOUT";

/// ROCm's unified-KV mode (T9), whose pools describe no layout kvpilot decides.
const DSV4_UNIFIED_KV_ENV: &str = "SGLANG_HACK_FLASHMLA_BACKEND";

/// The KV layout a DeepSeek-V4 server of `fleet`, with KV cache `dtype`, describes to its PD
/// peer (0.5.23's `pd_kv_layout`: the main cache's layout, then each compression ratio's), where
/// it follows from the fleet's settings on every GPU the server starts on; None where it depends
/// on the GPU or the server does not start with these settings (an assert of SGLang's, not this
/// rule).
///
/// `select_dsv4_kv_layout` reads `SGLANG_DSV4_KV_LAYOUT` (default `v4`) and
/// `SGLANG_DSV4_COMPRESSED_KV_LAYOUT` (default `auto`) and `--dsv4-attn-backend`: `trtllm`
/// keeps uniform FP8 pages, `flashmla_mega` forces the V4.1 layout, and `auto` resolves to
/// `flashmla_mega` only for a `deepseek_v41` model with an FP8 KV cache on an SM100 GPU (unless
/// the layout variable is set to something else than auto, v41 or v41_new), so it depends on
/// the GPU there. The V4.1 layouts run only on SM100 or gfx950 GPUs, `auto` picks one there.
/// The prefill and decode servers may run on different GPUs: a layout that depends on the GPU
/// is not decided, even where the other server's settings need an SM100 GPU.
fn dsv4_pd_kv_layout(layout: &AttentionLayout, fleet: &FleetSpec, dtype: Option<&str>) -> Option<String> {
    if fleet.env_value(DSV4_UNIFIED_KV_ENV).is_some() {
        return None;
    }
    let set_mode = fleet.env_value(DSV4_KV_LAYOUT_ENV).map(str::to_lowercase);
    let mut mode = set_mode.clone().unwrap_or_else(|| "v4".into());
    let option = fleet.env_value(DSV4_COMPRESSED_KV_LAYOUT_ENV).map_or_else(|| "auto".into(), str::to_lowercase);
    let mut backend = option_value(&fleet.extra_args, "--dsv4-attn-backend").unwrap_or("auto").to_string();
    // The DeepSeek-V4 hook turns an automatic KV cache dtype into fp8_e4m3 on CUDA.
    let fp8 = matches!(kv_cache_dtype(dtype), "auto" | "fp8_e4m3");
    let v41_model = layout.model_type.as_deref() == Some("deepseek_v41");
    if backend == "auto" {
        // FlashMLA mega keeps an explicit V4.1 layout, as FlashMLA does; it turns the default
        // and `auto` into V4.1 on the SM100 GPUs it is picked on, which FlashMLA leaves V4
        // elsewhere.
        let mega_candidate =
            v41_model && fp8 && set_mode.as_deref().is_none_or(|m| matches!(m, "auto" | "v41" | "v41_new"));
        if mega_candidate {
            match (set_mode.as_deref(), option.as_str()) {
                (Some("v41" | "v41_new"), _) => {}
                // FlashMLA's default V4 cache refuses FP4 compressed caches: such a server starts
                // only where mega runs it as V4.1.
                (None, "fp4") => mode = "v41".into(),
                _ => return None,
            }
        }
        backend = "flashmla".into();
    }
    // The hook's asserts: flashmla_mega runs only DeepSeek-V4.1, trtllm only an FP8 cache.
    if (backend == "flashmla_mega" && !v41_model) || (backend == "trtllm" && !fp8) {
        return None;
    }
    if backend == "flashmla_mega" && mode != "v41_new" {
        mode = "v41".into();
    }
    if backend == "trtllm" {
        return (matches!(mode.as_str(), "auto" | "v4") && matches!(option.as_str(), "auto" | "fp8"))
            .then(|| "uniform_fp8".into());
    }
    let option = match option.as_str() {
        "auto" => None,
        "fp8" | "fp4" => Some(option.as_str()),
        _ => return None,
    };
    let (main, interleaved) = match mode.as_str() {
        "v4" => {
            // The V4 main cache pairs only with V4 caches.
            return (option != Some("fp4")).then(|| dsv4_layout_string("v4", &layout.compress_ratios, |_| "v4"));
        }
        "v41" => ("v41", false),
        "v41_new" => ("v41_new", true),
        _ => return None,
    };
    let compressed = |ratio: u32| {
        let fp4 = option == Some("fp4") || (option.is_none() && matches!(ratio, 1 | 2));
        match (fp4, interleaved) {
            (false, false) => "v41",
            (false, true) => "v41_new",
            (true, false) => "v41_fp4",
            (true, true) => "v41_fp4_new",
        }
    };
    Some(dsv4_layout_string(main, &layout.compress_ratios, compressed))
}

/// `main,c{ratio}:{layout},...` as `pd_kv_layout` writes it.
fn dsv4_layout_string(main: &str, ratios: &[u32], compressed: impl Fn(u32) -> &'static str) -> String {
    std::iter::once(main.to_string())
        .chain(ratios.iter().map(|r| format!("c{r}:{}", compressed(*r))))
        .collect::<Vec<_>>()
        .join(",")
}

/// P4: both servers describe their DeepSeek-V4.1 DSpark transfer layout (a model with
/// compression-ratio-2 layers, the DSPARK algorithm, which a service's prefill servers run too and
/// the guard takes the paired prefill servers to run), the layouts agree, and the attention TP
/// differs. Pipeline stages that differ make the layouts differ first (each side describes its
/// stage's layers and pool buffers), which kvpilot leaves to SGLang; from 0.5.22 an MLA prefill
/// whose attention CP ranks make up the decode attention TP passes.
fn dspark_tp_mismatch(c: &RuleInput<'_>) -> Option<Finding> {
    let prefill = c.settings.prefill.as_ref()?;
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    // A prefill that does not run DSPARK fails the layout comparison first (P4b).
    let dspark = c.layout.has(LayoutFeature::DeepseekV41)
        && speculative_algorithm(c)? == "DSPARK"
        && paired_prefill_dspark(c) != Some(false);
    let same_layout = prefill.pipeline_parallel == c.decode.pipeline_parallel;
    let cp = prefill.attention_context_parallel;
    let cp_ranks_align = c.release >= v0_5(22) && cp > 1 && mla_like(c.layout) && prefill_tp * cp == decode_tp;
    when(dspark && same_layout && prefill_tp != decode_tp && !cp_ranks_align)
}

/// Where the prefill servers' `field` is set, for a fix: the prefill fleet kvpilot runs
/// (`spec.prefill`), the prefill servers run elsewhere (`spec.disaggregation.prefill`), or, for
/// the guard's decode server, the command line of the prefill servers it is paired with.
fn prefill_source(c: &RuleInput<'_>, field: &str, flag: &str) -> String {
    match c.subject {
        Subject::Service if c.prefill_fleet.is_some() => format!("spec.prefill.{field}"),
        Subject::Service => format!("spec.disaggregation.prefill.{field}"),
        Subject::DecodeServer | Subject::OtherServer => format!("the prefill servers' {flag}"),
    }
}

/// Whether the prefill servers the guard pairs with a decode server run DSPARK, read from their
/// command line (upper-cased, as SGLang's speculative hook reads it); None for a service, whose
/// prefill servers run the decode side's algorithm.
fn paired_prefill_dspark(c: &RuleInput<'_>) -> Option<bool> {
    let fleet = c.prefill_fleet.filter(|_| c.subject == Subject::DecodeServer)?;
    Some(option_value(&fleet.extra_args, "--speculative-algorithm").is_some_and(|name| name.to_uppercase() == "DSPARK"))
}

fn attention_tps(c: &RuleInput<'_>) -> Option<(i32, i32)> {
    let prefill = c.settings.prefill.as_ref()?;
    Some((
        prefill_attention_tp(prefill),
        attention_tp(c.decode.tensor_parallel, c.decode.data_parallel, c.decode.enable_dp_attention),
    ))
}

/// The T1 family: a non-MLA layout whose state needs equal attention TP, and prefill and decode
/// attention TP that differ.
fn tp_mismatch(c: &RuleInput<'_>, state_present: bool) -> Option<Finding> {
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    if !state_present || mla_like(c.layout) || prefill_tp == decode_tp {
        return None;
    }
    Some(Finding {
        args: vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
        detail: Some(format!(
            "make the decode attention TP (tensorParallel{}) equal the prefill attention TP {prefill_tp}",
            if c.decode.enable_dp_attention { " ÷ dataParallel" } else { "" }
        )),
    })
}

fn swa_state(c: &RuleInput<'_>) -> bool {
    c.layout.is_hybrid_swa()
}

/// A pool of SGLang's MHA class (`MHATokenToKVPool` and its MXFP8 variant, alone or as an SWA
/// pool's full pool): not MLA, DeepSeek-V4, MiniMax sparse or a hybrid-linear (SSM) pool.
fn mha_pool(layout: &AttentionLayout) -> bool {
    match layout.kv_pool {
        KvPool::Full | KvPool::HybridSwa | KvPool::PureSwa => {
            !layout.has(LayoutFeature::DeepseekV4) && !layout.has(LayoutFeature::MinimaxSparse)
        }
        KvPool::HybridSsm | KvPool::Mla => false,
    }
}

/// MXFP8 KV adds BLOCK_SCALE state to a non-MLA pool (drift §3.4, T1mx).
fn block_scale_state(c: &RuleInput<'_>) -> bool {
    kv_cache_dtype(c.decode.kv_cache_dtype.as_deref()).eq_ignore_ascii_case("mxfp8") && !swa_state(c)
}

/// T4's text for a pipelined prefill: 0.5.21 names all MiniMax state (its dense KV moves too).
const T4_PP_MESSAGES: &[Message] = &[
    text("PD disagg: PP>1 not supported for MiniMax sparse index yet."),
    text_from(21, "PD disagg: PP>1 not supported for MiniMax state yet."),
];

const T4_TP_MESSAGES: &[Message] = &[
    text("PD disagg: heterogeneous TP not supported for MiniMax sparse index yet."),
    text_from(21, "PD disagg: heterogeneous TP not supported for MiniMax state yet."),
];

const MINIMAX_PP_HINT: &str = "set the prefill pipelineParallel to 1: MiniMax sparse state is paired by compacted layer \
                               lists, which pipeline stages split";

/// T11's text: 0.5.23 adds the request window's capacity and the draft's ring size, sized at
/// start-up, to the compared tuples.
const T11_MESSAGES: &[Message] = &[
    text(
        "DSV4 target and draft pools must share paged SWA geometry: target=({target_page}, {target_window}), \
         draft=({draft_page}, {draft_window})",
    ),
    text_from(
        23,
        "DSV4 target and draft pools must share SWA geometry: target=({target_page}, {target_window}, \
         {target_ring}), draft=({draft_page}, {draft_window}, {draft_ring})",
    ),
];

const TP_HINT: &str = "changing TP changes the GPU count, so kvpilot does not rewrite it: set {spec.decode.tensorParallel} \
                       (or dataParallel under DP attention) so prefill and decode attention TP match";

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// A DeepSeek-V4 draft checkpoint (NextN layers) with window `window`.
    fn dsv4_draft(window: u64) -> AttentionLayout {
        layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLMNextN"], "num_hidden_layers": 1, "sliding_window": window,
            "head_dim": 512, "compress_ratios": [0]
        }))
    }

    fn draft_messages(settings: &DisaggregationSpec, draft: Option<&AttentionLayout>) -> Vec<Vec<String>> {
        (17..=23)
            .map(|patch| {
                at_with_draft(patch, settings, &dsv4(), draft)
                    .violations
                    .into_iter()
                    .filter(|v| v.rule == "T11")
                    .map(|v| v.message)
                    .collect()
            })
            .collect()
    }

    fn minimax_m3() -> AttentionLayout {
        layout_at(json!({
            "architectures": ["MiniMaxM3SparseForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8,
            "head_dim": 128, "sparse_attention_config": {"sparse_attention_freq": [0, 1, 1, 1]}
        }))
    }

    fn minimax_messages(backend: TransferBackend, prefill: PrefillSpec) -> Vec<Vec<(&'static str, String)>> {
        let settings = with(|s| {
            s.transfer_backend = backend;
            s.prefill = Some(prefill);
        });
        (17..=23)
            .map(|patch| {
                let verdict = at(patch, &settings, &FleetSpec::default(), &minimax_m3());
                verdict
                    .violations
                    .into_iter()
                    .filter(|v| v.rule.starts_with("T4") || v.rule == "T5")
                    .map(|v| (v.rule, v.message))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn r20_staging_buffer_needs_mooncake_or_nixl() {
        let decode = FleetSpec { env: vec![env_var("SGLANG_DISAGG_STAGING_BUFFER", "true")], ..FleetSpec::default() };
        assert_manual(
            with(|s| s.transfer_backend = TransferBackend::Mori),
            &decode,
            &full(),
            "R20",
            "spec.decode.env",
            "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got 'mori'.",
        );
        assert_eq!(run(&with(|_| {}), &decode, &full()).outcome, Outcome::Valid, "mooncake is fine");
    }

    #[test]
    fn t1_tp_mismatch_on_non_mla_swa_models_is_never_rewritten() {
        let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
        let mori = |s: &mut DisaggregationSpec| {
            s.prefill = prefill(2);
            s.transfer_backend = TransferBackend::Mori;
        };
        assert_manual(
            with(mori),
            &decode,
            &hybrid_swa(),
            "T1",
            "spec.decode.tensorParallel",
            "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size=2, decode_tp_size=4)",
        );
        let fix = &run(&with(mori), &decode, &hybrid_swa()).violations[0].fix;
        assert!(fix.contains("prefill attention TP 2"), "{fix}");
        // Attention TP under DP attention is TP ÷ DP: 4 ÷ 2 matches prefill's 2.
        let dp_attention =
            FleetSpec { tensor_parallel: 4, data_parallel: 2, enable_dp_attention: true, ..FleetSpec::default() };
        assert_eq!(run(&with(|s| s.prefill = prefill(2)), &dp_attention, &hybrid_swa()).outcome, Outcome::Valid);
        // MLA-like pools, full pools and SSM state may differ in TP.
        for layout in [mla(), dsv4(), full(), ssm()] {
            assert_eq!(run(&with(|s| s.prefill = prefill(2)), &decode, &layout).outcome, Outcome::Valid);
        }
        // Without the prefill side, T1 cannot be checked: a warning, not a violation.
        let verdict = run(&with(|_| {}), &decode, &hybrid_swa());
        assert_eq!(verdict.outcome, Outcome::Valid);
        assert!(verdict.warnings.iter().any(|w| w.contains("T1")), "{:?}", verdict.warnings);
    }

    #[test]
    fn boolean_env_values_are_read_as_sglang_s_env_bool_reads_them() {
        let with_value = |value: &str| FleetSpec {
            env: vec![EnvVar {
                name: "SGLANG_DISAGG_STAGING_BUFFER".into(),
                value: Some(value.into()),
                value_from: None,
            }],
            ..FleetSpec::default()
        };
        // R20 reads SGLANG_DISAGG_STAGING_BUFFER: on for SGLang's true values only.
        let settings = with(|s| s.transfer_backend = crate::api::TransferBackend::Mori);
        let r20 = |value: &str| {
            run_at(v0_5(23), &settings, &with_value(value), &full()).violations.iter().any(|v| v.rule == "R20")
        };
        for on in ["1", "true", "TRUE", "yes", "Y"] {
            assert!(r20(on), "{on:?} is on for SGLang");
        }
        for off in ["0", "false", "no", "n", "on", " 1", "1 ", ""] {
            assert!(!r20(off), "{off:?} is off (or invalid, so the default) for SGLang");
        }
    }

    #[test]
    fn t1_by_backend_and_release() {
        let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
        let mismatched = |backend| {
            with(|s| {
                s.transfer_backend = backend;
                s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
            })
        };
        let mori =
            "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size=2, decode_tp_size=4)";
        assert_eq!(messages("T1", &mismatched(TransferBackend::Mori), &decode, &hybrid_swa()), on(17..=23, mori));
        let mooncake = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.";
        for backend in [TransferBackend::Mooncake, TransferBackend::Nixl] {
            assert_eq!(messages("T1", &mismatched(backend), &decode, &hybrid_swa()), on(17..=21, mooncake));
        }
        // MXFP8 KV adds BLOCK_SCALE state, even on a model without SWA.
        let mxfp8 = FleetSpec { kv_cache_dtype: Some("mxfp8".into()), ..decode.clone() };
        let block_scale =
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA BLOCK_SCALE hybrid models yet.";
        assert_eq!(messages("T1", &mismatched(TransferBackend::Mooncake), &mxfp8, &full()), on(19..=21, block_scale));
        assert_eq!(messages("T1", &mismatched(TransferBackend::Nixl), &mxfp8, &full()), on(21..=21, block_scale));
        let newest = at(23, &with(|_| {}), &decode, &hybrid_swa());
        assert!(
            !newest.warnings.iter().any(|w| w.contains("T1")),
            "mooncake has no T1 in 0.5.23: {:?}",
            newest.warnings
        );
    }

    #[test]
    fn p1_p2_prefill_and_decode_must_agree_on_page_size_and_kv_dtype() {
        let prefill = with(|s| {
            s.prefill = Some(PrefillSpec {
                page_size: Some(64),
                kv_cache_dtype: Some("fp8_e4m3".into()),
                ..PrefillSpec::default()
            })
        });
        let verdict = at(23, &prefill, &FleetSpec::default(), &full());
        let found: Vec<(&str, &str, &str)> =
            verdict.violations.iter().map(|v| (v.rule, v.message.as_str(), v.phase)).collect();
        assert_eq!(
            found,
            [
                (
                    "P1",
                    "Page size mismatch: prefill server has page_size=64, but decode server has page_size=1. Both servers \
                     must use the same --page-size value.",
                    "handshake"
                ),
                (
                    "P2",
                    "KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but decode server has \
                     kv_cache_dtype=auto. Both servers must use the same --kv-cache-dtype value.",
                    "handshake"
                ),
            ]
        );
        let matching =
            FleetSpec { page_size: Some(64), kv_cache_dtype: Some("fp8_e4m3".into()), ..FleetSpec::default() };
        assert_eq!(at(17, &prefill, &matching, &full()).outcome, Outcome::Valid);
        assert_eq!(
            at(23, &with(|s| s.prefill = Some(PrefillSpec::default())), &FleetSpec::default(), &full()).outcome,
            Outcome::Valid
        );
    }

    #[test]
    fn r19d_decode_dcp_needs_an_mla_pool() {
        let dcp = with(|s| s.decode_context_parallel = 2);
        assert_eq!(
            messages("R19d", &dcp, &FleetSpec::default(), &full()),
            on(17..=23, "PD decode DCP requires an MLA or hybrid-MLA KV pool.")
        );
        assert_eq!(at(23, &dcp, &FleetSpec::default(), &mla()).outcome, Outcome::Valid);
        assert_eq!(at(23, &dcp, &FleetSpec::default(), &dsv4()).outcome, Outcome::Valid, "DSV4 counts as MLA");
    }

    #[test]
    fn t1mx_mxfp8_kv_needs_equal_attention_tp_from_the_0_5_22_handshake() {
        let settings = with(|s| s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() }));
        let decode = FleetSpec { tensor_parallel: 4, kv_cache_dtype: Some("mxfp8".into()), ..FleetSpec::default() };
        assert_eq!(
            messages("T1mx", &settings, &decode, &full()),
            on(
                22..=23,
                "PD Disaggregation does NOT support different attention TP sizes with MXFP8 KV cache: prefill \
                 attn_tp_size=2, decode attn_tp_size=4, state types ['block_scale']."
            )
        );
        assert!(
            messages("T1mx", &settings, &decode, &hybrid_swa())[6]
                .as_deref()
                .unwrap()
                .ends_with("state types ['block_scale', 'block_scale_swa'].")
        );
        assert_eq!(messages("T1mx", &settings, &decode, &mla()), vec![None; 7], "MLA pools are exempt");
    }

    #[test]
    fn t1nx_nixl_refuses_mxfp8_block_scales_at_any_tp_before_0_5_21() {
        let nixl = with(|s| s.transfer_backend = TransferBackend::Nixl);
        let mxfp8 = FleetSpec { kv_cache_dtype: Some("mxfp8".into()), ..FleetSpec::default() };
        let refused =
            on(19..=20, "PD Disaggregation via NIXL does NOT support StateType.BLOCK_SCALE hybrid models yet.");
        // Equal TP: NIXL's sender has no branch for the state before 0.5.21.
        assert_eq!(messages("T1nx", &nixl, &mxfp8, &full()), refused);
        assert_eq!(messages("T1nx", &nixl, &mxfp8, &hybrid_swa()), refused, "an SWA pool's full pool is MXFP8 too");
        assert_eq!(messages("T1nx", &nixl, &mxfp8, &mla()), vec![None; 7], "MLA pools hold no block scales");
        assert_eq!(messages("T1nx", &nixl, &FleetSpec::default(), &full()), vec![None; 7]);
        let mooncake = with(|s| s.transfer_backend = TransferBackend::Mooncake);
        assert_eq!(messages("T1nx", &mooncake, &mxfp8, &full()), vec![None; 7], "Mooncake's sender moves them");
    }

    #[test]
    fn t1pp_swa_head_slicing_refuses_a_pipelined_prefill_from_0_5_22() {
        let prefill = |pipeline_parallel| {
            with(|s| s.prefill = Some(PrefillSpec { tensor_parallel: 2, pipeline_parallel, ..PrefillSpec::default() }))
        };
        let decode = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };
        let message = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models with pipeline parallelism yet.";
        assert_eq!(messages("T1pp", &prefill(2), &decode, &hybrid_swa()), on(22..=23, message));
        assert_eq!(
            messages("T1pp", &prefill(1), &decode, &hybrid_swa()),
            vec![None; 7],
            "head slicing works without PP"
        );
        assert_eq!(messages("T1pp", &prefill(2), &decode, &full()), vec![None; 7], "no SWA state");
        let mori = DisaggregationSpec { transfer_backend: TransferBackend::Mori, ..prefill(2) };
        assert_eq!(messages("T1pp", &mori, &decode, &hybrid_swa()), vec![None; 7], "mori keeps its own T1");
    }

    #[test]
    fn t11_a_deepseek_v4_draft_needs_the_target_window_and_pages() {
        let eagle = with(|s| s.speculative_algorithm = Some("EAGLE".into()));
        let paged = |release: u16, target: &str, draft: &str| {
            if release < 23 {
                format!("DSV4 target and draft pools must share paged SWA geometry: target=({target}), draft=({draft})")
            } else {
                format!(
                    "DSV4 target and draft pools must share SWA geometry: target=({target}, None), draft=({draft}, None)"
                )
            }
        };
        // The model's own NextN layers, or a draft with the same window: the pools match.
        for draft in [None, Some(&dsv4_draft(128))] {
            assert!(draft_messages(&eagle, draft).iter().all(Vec::is_empty));
        }
        let narrower = dsv4_draft(64);
        let expected: Vec<Vec<String>> = (17..=23).map(|r| vec![paged(r, "256, 128", "256, 64")]).collect();
        assert_eq!(draft_messages(&eagle, Some(&narrower)), expected);
        // Decode context parallelism widens the draft's pages only.
        let dcp = DisaggregationSpec { decode_context_parallel: 2, ..eagle.clone() };
        let expected: Vec<Vec<String>> = (17..=23).map(|r| vec![paged(r, "256, 128", "512, 128")]).collect();
        assert_eq!(draft_messages(&dcp, None), expected);
        let verdict = at_with_draft(22, &dcp, &dsv4(), Some(&narrower));
        let fields: Vec<_> = verdict.violations.iter().filter(|v| v.rule == "T11").map(|v| v.field).collect();
        assert_eq!(fields, ["spec.disaggregation.speculativeDraftModel", "spec.disaggregation.decodeContextParallel"]);
    }

    #[test]
    fn t11_needs_a_deepseek_v4_draft_pool_on_both_sides() {
        let narrower = dsv4_draft(64);
        // NGRAM drafts from the prompt and builds no draft pool; no algorithm, no draft.
        for algorithm in [None, Some("NGRAM"), Some("none")] {
            let settings = with(|s| s.speculative_algorithm = algorithm.map(Into::into));
            assert!(draft_messages(&settings, Some(&narrower)).iter().all(Vec::is_empty), "{algorithm:?}");
        }
        // A draft whose pool is no DeepSeek-V4 pool is not compared.
        let eagle = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
        assert!(draft_messages(&eagle, Some(&full())).iter().all(Vec::is_empty));
        assert!(
            at_with_draft(23, &eagle, &mla(), Some(&narrower)).violations.iter().all(|v| v.rule != "T11"),
            "the target is no DeepSeek-V4 model"
        );
    }

    #[test]
    fn t4_minimax_sparse_state_needs_one_prefill_stage_and_equal_attention_tp() {
        let pipelined = PrefillSpec { pipeline_parallel: 2, ..PrefillSpec::default() };
        let wider = PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() };
        let (old_pp, new_pp) = (
            "PD disagg: PP>1 not supported for MiniMax sparse index yet.",
            "PD disagg: PP>1 not supported for MiniMax state yet.",
        );
        let (old_tp, new_tp) = (
            "PD disagg: heterogeneous TP not supported for MiniMax sparse index yet.",
            "PD disagg: heterogeneous TP not supported for MiniMax state yet.",
        );
        let handshake = "MiniMax sparse PD requires matching attention TP sizes: prefill=2, decode=1.";
        let one = |rule, message: &str| vec![(rule, message.to_string())];
        for backend in [TransferBackend::Mooncake, TransferBackend::Nixl] {
            let expected: Vec<_> = (17..=23).map(|r| one("T4", if r < 21 { old_pp } else { new_pp })).collect();
            assert_eq!(minimax_messages(backend, pipelined.clone()), expected, "{backend:?}");
            let expected: Vec<_> = (17..=23)
                .map(|r| match r {
                    17..=20 => one("T4", old_tp),
                    21..=22 => one("T4", new_tp),
                    _ => one("T4c", handshake),
                })
                .collect();
            assert_eq!(minimax_messages(backend, wider.clone()), expected, "{backend:?}");
        }
        let mori_pp = "MORI PD disaggregation requires PP=1 for minimax_index_k; PP>1 needs peer state_layer_ids for \
                       global-layer descriptor pairing.";
        let expected: Vec<_> = (17..=23).map(|r| if r < 20 { one("T4", old_pp) } else { one("T5", mori_pp) }).collect();
        assert_eq!(minimax_messages(TransferBackend::Mori, pipelined), expected);
        let mori_tp = "PD disagg: heterogeneous TP not supported for minimax_index_k yet.";
        let expected: Vec<_> = (17..=23)
            .map(|r| match r {
                17..=19 => one("T4", old_tp),
                20..=22 => one("T5", mori_tp),
                _ => one("T4c", handshake),
            })
            .collect();
        assert_eq!(minimax_messages(TransferBackend::Mori, wider), expected);
        // Equal attention TP and one prefill stage: the state moves.
        assert!(minimax_messages(TransferBackend::Mooncake, PrefillSpec::default()).iter().all(Vec::is_empty));
        // Another model with the same fleets keeps no MiniMax state.
        let settings = with(|s| {
            s.prefill = Some(PrefillSpec { pipeline_parallel: 2, tensor_parallel: 2, ..PrefillSpec::default() })
        });
        assert!(at(23, &settings, &FleetSpec::default(), &full()).violations.iter().all(|v| !v.rule.starts_with("T4")));
    }

    #[test]
    fn r19e_r19f_p5_read_the_prefill_s_attention_cp_and_kv_sharding() {
        let settings = |dcp: i32, prefill: PrefillSpec| {
            with(|s| {
                s.decode_context_parallel = dcp;
                s.prefill = Some(prefill);
            })
        };
        let cp2 = PrefillSpec { tensor_parallel: 4, attention_context_parallel: 2, ..PrefillSpec::default() };
        let sharded = PrefillSpec { tensor_parallel: 2, kv_cache_sharding: true, ..PrefillSpec::default() };
        let decode_tp2 = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
        let decode_tp4 = FleetSpec { tensor_parallel: 4, ..FleetSpec::default() };

        // R19e: every release, from the prefill's attention CP, whatever the layout's pool.
        let r19e = "PD decode DCP currently requires prefill attention CP=1, got 2.";
        assert_eq!(messages("R19e", &settings(2, cp2.clone()), &decode_tp2, &mla()), on(17..=23, r19e));
        assert_eq!(messages("R19e", &settings(1, cp2.clone()), &decode_tp2, &mla()), vec![None; 7]);
        // R19f: 0.5.23's handshake.
        let r19f = "PD decode DCP does not support a prefill with --enable-kv-cache-sharding.";
        assert_eq!(messages("R19f", &settings(2, sharded.clone()), &decode_tp2, &mla()), on(23..=23, r19f));
        assert_eq!(messages("R19f", &settings(1, sharded.clone()), &decode_tp2, &mla()), vec![None; 7]);

        // P5: an MLA pool, sharded prefill without CP, unequal attention TP.
        let p5 = "MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill=2 decode=4";
        assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &mla()), on(23..=23, p5));
        assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &dsv4()), on(23..=23, p5));
        assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp2, &mla()), vec![None; 7]);
        assert_eq!(messages("P5", &settings(1, sharded.clone()), &decode_tp4, &full()), vec![None; 7]);
        let sharded_cp = PrefillSpec { attention_context_parallel: 2, ..sharded };
        assert_eq!(messages("P5", &settings(1, sharded_cp), &decode_tp4, &mla()), vec![None; 7]);
    }

    #[test]
    fn prefill_attention_cp_divides_the_prefill_attention_tp_the_transfer_rules_compare() {
        // TP 4 with attention CP 2 is attention TP 2: equal to decode's 2, so no T1 for SWA state.
        let prefill = |cp| {
            with(|s| {
                s.prefill =
                    Some(PrefillSpec { tensor_parallel: 4, attention_context_parallel: cp, ..PrefillSpec::default() })
            })
        };
        let decode = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
        let t1 = |settings: &DisaggregationSpec| {
            at(21, settings, &decode, &hybrid_swa()).violations.into_iter().filter(|v| v.rule == "T1").count()
        };
        assert_eq!(t1(&prefill(1)), 1);
        assert_eq!(t1(&prefill(2)), 0);
        assert_eq!(
            prefill_attention_tp(&PrefillSpec {
                tensor_parallel: 8,
                data_parallel: 2,
                enable_dp_attention: true,
                attention_context_parallel: 2,
                ..PrefillSpec::default()
            }),
            2
        );
    }

    #[test]
    fn p6_decode_pipeline_stages_are_one_or_the_prefill_s() {
        let prefill =
            |pipeline_parallel| with(|s| s.prefill = Some(PrefillSpec { pipeline_parallel, ..PrefillSpec::default() }));
        let decode = |pipeline_parallel| FleetSpec { pipeline_parallel, ..FleetSpec::default() };
        let p6 = "Decode pp size (2) should be equal to prefill pp size (4) or 1";
        assert_eq!(messages("P6", &prefill(4), &decode(2), &full()), on(17..=23, p6));
        assert_eq!(messages("P6", &prefill(4), &decode(1), &full()), vec![None; 7]);
        assert_eq!(messages("P6", &prefill(2), &decode(2), &full()), vec![None; 7]);
        // Without the prefill side nothing is compared.
        assert_eq!(messages("P6", &DisaggregationSpec::default(), &decode(2), &full()), vec![None; 7]);
    }

    #[test]
    fn p4_compares_attention_tp_of_deepseek_v41_dspark_servers() {
        let dsv41 = layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
            "compress_ratios": [0, 2, 4, 0]
        }));
        assert!(dsv41.has(LayoutFeature::DeepseekV41));
        let dspark = |prefill: PrefillSpec| {
            with(move |s| {
                s.speculative_algorithm = Some("dspark".into());
                s.prefill = Some(prefill);
            })
        };
        let older = "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers";
        let newer =
            "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers (including prefill CP ranks for MLA)";
        let expected = |from: u16| -> Vec<Option<String>> {
            (17..=23).map(|p| (p >= from).then(|| (if p == 21 { older } else { newer }).to_string())).collect()
        };
        let tp2 = dspark(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
        assert_eq!(messages("P4", &tp2, &FleetSpec::default(), &dsv41), expected(21));
        // No ratio-2 layers (DeepSeek-V4), another algorithm, or equal attention TP: no DSpark layout check.
        assert_eq!(messages("P4", &tp2, &FleetSpec::default(), &dsv4()), vec![None; 7]);
        let eagle = with(|s| {
            s.speculative_algorithm = Some("EAGLE".into());
            s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
        });
        assert_eq!(messages("P4", &eagle, &FleetSpec::default(), &dsv41), vec![None; 7]);
        let decode_tp2 = FleetSpec { tensor_parallel: 2, ..FleetSpec::default() };
        assert_eq!(messages("P4", &tp2, &decode_tp2, &dsv41), vec![None; 7]);
        // Prefill attention CP ranks that make up the decode attention TP pass from 0.5.22.
        let cp2 = dspark(PrefillSpec { tensor_parallel: 2, attention_context_parallel: 2, ..PrefillSpec::default() });
        assert_eq!(
            messages("P4", &cp2, &decode_tp2, &dsv41),
            (17..=23).map(|p| (p == 21).then(|| older.to_string())).collect::<Vec<_>>()
        );
        // Pipeline stages that differ make the layouts differ first, which is not decided here.
        let staged = dspark(PrefillSpec { tensor_parallel: 2, pipeline_parallel: 2, ..PrefillSpec::default() });
        assert_eq!(messages("P4", &staged, &FleetSpec::default(), &dsv41), vec![None; 7]);
    }

    #[test]
    fn p4b_refuses_a_paired_prefill_server_that_runs_dspark_where_the_decode_server_does_not() {
        let dsv41 = layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 512,
            "compress_ratios": [0, 2, 4, 0]
        }));
        let p4b = "DeepSeek-V4.1 DSpark PD layout mismatch (compression_ratios, kv_item_lens, kv_layer_ids, \
                   num_draft_tokens, state_item_lens, state_types): both servers must enable DSpark with the same block \
                   size and target/draft KV layout. Upgrade both servers together.";
        let prefill_running = |args: &[&str]| FleetSpec {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let decode_running = |algorithm: Option<&str>| {
            let algorithm = algorithm.map(str::to_string);
            with(move |s| {
                s.speculative_algorithm = algorithm;
                s.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
            })
        };
        // The guard's decode server: its paired prefill server's command line names its algorithm.
        let rules =
            |settings: &DisaggregationSpec, prefill: &FleetSpec, layout: &AttentionLayout, scope_server: bool| {
                (17..=23)
                    .map(|patch| {
                        let input = PolicyInput::of(settings, layout, v0_5(patch)).with_prefill(Some(prefill));
                        let verdict = if scope_server {
                            evaluate_server(input, ServerRole::Decode, &SpecFields)
                        } else {
                            evaluate(input)
                        };
                        // SGLang compares the layouts before the TP sizes: P4 never stands beside P4b.
                        let p4 = verdict.violations.iter().any(|v| v.rule == "P4");
                        let p4b = verdict.violations.into_iter().find(|v| v.rule == "P4b").map(|v| v.message);
                        assert!(!(p4 && p4b.is_some()), "P4 and P4b at 0.5.{patch}");
                        p4b
                    })
                    .collect::<Vec<_>>()
            };
        let dspark_prefill = prefill_running(&["--speculative-algorithm", "dspark"]);
        let plain_prefill = prefill_running(&[]);
        assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv41, true), on(21..=23, p4b));
        assert_eq!(rules(&decode_running(Some("EAGLE")), &dspark_prefill, &dsv41, true), on(21..=23, p4b));
        assert_eq!(
            rules(&decode_running(None), &prefill_running(&["--speculative-algorithm=DSPARK"]), &dsv41, true),
            on(21..=23, p4b)
        );
        // Both (P4 then compares their attention TP) or neither: no layout mismatch.
        assert_eq!(rules(&decode_running(Some("dspark")), &dspark_prefill, &dsv41, true), vec![None; 7]);
        assert_eq!(rules(&decode_running(Some("EAGLE")), &plain_prefill, &dsv41, true), vec![None; 7]);
        // No ratio-2 layers: no DSpark layout on either side.
        assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv4(), true), vec![None; 7]);
        // A service's prefill servers run the decode side's algorithm.
        assert_eq!(rules(&decode_running(Some("DSPARK")), &plain_prefill, &dsv41, false), vec![None; 7]);
        let dspark = decode_running(Some("DSPARK"));
        let input = PolicyInput::of(&dspark, &dsv41, v0_5(23)).with_prefill(Some(&dspark_prefill));
        assert!(evaluate_server(input, ServerRole::Decode, &SpecFields).violations.iter().any(|v| v.rule == "P4"));
    }

    #[test]
    fn p3_compares_the_deepseek_v4_kv_layouts_both_fleets_decide() {
        let layouts = |prefill: &FleetSpec, decode: &FleetSpec, layout: &AttentionLayout| {
            // As effective_spec describes the prefill fleet kvpilot runs.
            let side = PrefillSpec { kv_cache_dtype: prefill.kv_cache_dtype.clone(), ..PrefillSpec::default() };
            let settings = with(|s| s.prefill = Some(side));
            let input = PolicyInput::of(&settings, layout, v0_5(23)).with_decode(decode).with_prefill(Some(prefill));
            evaluate(input).violations.into_iter().filter(|v| v.rule == "P3").map(|v| v.message).collect::<Vec<_>>()
        };
        let p3 = |prefill: &str, decode: &str| {
            format!(
                "KV layout mismatch: prefill server has kv_layout={prefill}, but decode server has kv_layout={decode}. \
                 Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT."
            )
        };
        let dsv4 = dsv4();
        assert_eq!(dsv4.compress_ratios, vec![4, 128]);
        let v41 = env_fleet("SGLANG_DSV4_KV_LAYOUT", "V41");
        // The default layout is v4 on every GPU; v41 runs on the GPUs that have it.
        assert_eq!(layouts(&FleetSpec::default(), &v41, &dsv4), vec![p3("v4,c4:v4,c128:v4", "v41,c4:v41,c128:v41")]);
        assert!(layouts(&v41, &v41, &dsv4).is_empty());
        // The compressed caches of ratios 1 and 2 are FP4 under V4.1 unless asked for otherwise.
        let dsv41 = layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
            "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 0]
        }));
        let v41_new = FleetSpec {
            env: env_fleet("SGLANG_DSV4_KV_LAYOUT", "v41_new").env,
            extra_args: vec!["--dsv4-attn-backend=flashmla".into()],
            ..FleetSpec::default()
        };
        let trtllm =
            FleetSpec { extra_args: vec!["--dsv4-attn-backend".into(), "trtllm".into()], ..FleetSpec::default() };
        assert_eq!(layouts(&trtllm, &v41_new, &dsv41), vec![p3("uniform_fp8", "v41_new,c2:v41_fp4_new,c4:v41_new")]);
        // A DeepSeek-V4.1 server with the automatic backend and an FP8 cache runs V4.1 on SM100 GPUs
        // and V4 elsewhere: not decided.
        assert!(layouts(&FleetSpec::default(), &trtllm, &dsv41).is_empty());
        let bf16 = FleetSpec { kv_cache_dtype: Some("bfloat16".into()), ..FleetSpec::default() };
        assert_eq!(layouts(&bf16, &trtllm, &dsv41), vec![p3("v4,c2:v4,c4:v4", "uniform_fp8")]);
        // FP4 compressed caches with the default layout: FlashMLA's V4 cache refuses them, so such a
        // DeepSeek-V4.1 server starts only where FlashMLA mega runs it as V4.1.
        let fp4 = env_fleet("SGLANG_DSV4_COMPRESSED_KV_LAYOUT", "fp4");
        assert_eq!(layouts(&fp4, &trtllm, &dsv41), vec![p3("v41,c2:v41_fp4,c4:v41_fp4", "uniform_fp8")]);
        // Settings a server refuses at start-up (trtllm with a V4.1 layout) decide nothing here.
        let refused = FleetSpec { env: v41.env.clone(), ..trtllm.clone() };
        assert!(layouts(&refused, &FleetSpec::default(), &dsv4).is_empty());
        // Not a DeepSeek-V4 model, or no prefill fleet to compare with.
        assert!(layouts(&FleetSpec::default(), &v41, &full()).is_empty());
        assert_eq!(messages("P3", &DisaggregationSpec::default(), &v41, &dsv4), vec![None; 7]);
    }

    #[test]
    fn t1hnd_refuses_the_hnd_layout_on_the_mha_pools_of_pd_servers() {
        let hnd = env_fleet("SGLANG_USE_HND_KVCACHE", "1");
        let t1hnd = "PD-disaggregation KV transfer assumes NHD slot-row layout; HND KV cache (SGLANG_USE_HND_KVCACHE) is \
                     not supported with disagg yet.";
        let none = DisaggregationSpec::default();
        for layout in [full(), hybrid_swa(), ssm()] {
            assert_eq!(messages("T1hnd", &none, &hnd, &layout), on(17..=23, t1hnd), "{:?}", layout.kv_pool);
        }
        for layout in [mla(), dsv4()] {
            assert_eq!(messages("T1hnd", &none, &hnd, &layout), vec![None; 7], "{:?}", layout.kv_pool);
        }
        assert_eq!(messages("T1hnd", &none, &env_fleet("SGLANG_USE_HND_KVCACHE", "0"), &full()), vec![None; 7]);
        // A service's prefill fleet registers its buffers too.
        let model = full();
        let input = PolicyInput::of(&none, &model, v0_5(23)).with_prefill(Some(&hnd));
        assert!(evaluate(input).violations.iter().any(|v| v.rule == "T1hnd"));
    }
}
