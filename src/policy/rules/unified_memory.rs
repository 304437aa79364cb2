//! Unified memory (`--enable-unified-memory`): the unified-memory pool hook
//! (`arg_groups/kv_cache_hook.py`, `handle_unified_memory_pool`) and the KV cache builder's unified pool
//! (`mem_cache/kv_cache_builder.py`).

use super::predicates::{
    DECODE_OFFLOAD, RETRACTION_BACKUP, UNIFIED_MEMORY, dcp, fleets_in_scope, host_pool, offload_off, radix,
    resolved_speculative_algorithm, to_cpu_tensor, unified_memory_off, unified_memory_on,
};
use super::{EVERY_SERVER, Fix, PD_SERVERS, Phase, Rule, RuleInput, text, text_from, when, when_with};
use crate::api::{AttentionKind, LayoutFeature, TransferBackend};
use crate::release::{Span, v0_5};

pub(super) const U6A: Rule = Rule {
    id: "U6a",
    about: "unified memory host_pool × decode radix",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21)",
    field: RETRACTION_BACKUP,
    span: Span::between(v0_5(21), v0_5(21)),
    messages: &[text(
        "--enable-unified-memory host-pool decode retraction does not support decode radix-cache H2D/D2H \
         transfers yet.",
    )],
    check: |c| when(host_pool(c) && unified_memory_on(c) && radix(c)),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeRadixCache off" },
    ..Rule::DEFAULT
};

pub(super) const U6B: Rule = Rule {
    id: "U6b",
    about: "unified memory host_pool × hybrid Mamba",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(21)),
    messages: &[text("--enable-unified-memory host-pool decode retraction does not support hybrid-Mamba models.")],
    check: |c| when(host_pool(c) && unified_memory_on(c) && c.layout.uses_ssm_state()),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    ..Rule::DEFAULT
};

pub(super) const U6C: Rule = Rule {
    id: "U6c",
    about: "unified memory host_pool × hybrid SWA",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21)",
    field: RETRACTION_BACKUP,
    span: Span::between(v0_5(21), v0_5(21)),
    messages: &[text(
        "--enable-unified-memory host-pool decode retraction does not support hybrid-SWA H2D/D2H transfers yet.",
    )],
    check: |c| when(host_pool(c) && unified_memory_on(c) && c.layout.is_hybrid_swa()),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    ..Rule::DEFAULT
};

pub(super) const U7_MLA: Rule = Rule {
    id: "U7",
    about: "unified memory decode offload × MLA",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: DECODE_OFFLOAD,
    span: Span::since(v0_5(21)),
    messages: &[text("--enable-unified-memory decode KV offload does not support MLA models yet.")],
    check: |c| when(unified_offload(c) && c.layout.attention == AttentionKind::Mla),
    fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

pub(super) const U7_MAMBA: Rule = Rule {
    id: "U7",
    about: "unified memory decode offload × hybrid Mamba",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: DECODE_OFFLOAD,
    span: Span::since(v0_5(21)),
    messages: &[text("--enable-unified-memory decode KV offload does not support hybrid-Mamba models.")],
    check: |c| when(unified_offload(c) && c.layout.uses_ssm_state()),
    fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

pub(super) const U7_SWA: Rule = Rule {
    id: "U7",
    about: "unified memory decode offload × hybrid SWA",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: DECODE_OFFLOAD,
    span: Span::since(v0_5(21)),
    messages: &[text("--enable-unified-memory decode KV offload does not support hybrid-SWA H2D/D2H transfers yet.")],
    check: |c| when(unified_offload(c) && c.layout.is_hybrid_swa()),
    fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

pub(super) const U1: Rule = Rule {
    id: "U1",
    about: "unified memory under PD",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.17–0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: UNIFIED_MEMORY,
    roles: PD_SERVERS,
    messages: &[
        text("--enable-unified-memory is not yet compatible with PD disaggregation."),
        text_from(
            18,
            "--enable-unified-memory with PD disaggregation supports only the mooncake transfer backend; got \
             '{backend}'.",
        ),
        text_from(
            21,
            "--enable-unified-memory with PD disaggregation supports only these transfer backends: mooncake; got \
             '{backend}'.",
        ),
    ],
    changes: &[
        text_from(17, "any unified memory under PD"),
        text_from(18, "off mooncake (PP is a rule of its own, and from 0.5.21 speculative decoding)"),
    ],
    check: |c| {
        let backend = c.settings.transfer_backend;
        let refused = c.release < v0_5(18) || backend != TransferBackend::Mooncake;
        when_with(unified_memory_on(c) && refused, vec![("backend", backend.as_str().into())])
    },
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

pub(super) const U1_PP: Rule = Rule {
    id: "U1",
    about: "unified memory under PD × PP",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(18)),
    roles: PD_SERVERS,
    messages: &[text(
        "--enable-unified-memory with PD disaggregation does not support pipeline parallelism (whole-envelope \
         transfer has no per-layer entries to subset).",
    )],
    check: |c| when(unified_memory_on(c) && c.decode.pipeline_parallel > 1),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off, or set pipelineParallel to 1" },
    ..Rule::DEFAULT
};

pub(super) const U1_SPECULATIVE: Rule = Rule {
    id: "U1",
    about: "unified memory under PD × speculative decoding",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(21)),
    roles: PD_SERVERS,
    backends: &[TransferBackend::Mooncake],
    messages: &[text(
        "--enable-unified-memory with PD disaggregation does not support speculative decoding with the Mooncake \
         transfer backend.",
    )],
    check: |c| when(unified_memory_on(c) && c.settings.speculative_algorithm.is_some()),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off, or drop speculativeAlgorithm" },
    ..Rule::DEFAULT
};

pub(super) const U4: Rule = Rule {
    id: "U4",
    about: "unified memory × DCP",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.17–0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19)",
    field: UNIFIED_MEMORY,
    span: Span::between(v0_5(17), v0_5(19)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-memory is not yet compatible with decode context parallelism (--dcp-size > 1): the pool \
         has no DCP-aware masked write path (UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is None), \
         so a DCP run would boot and then fail on the first KV write.",
    )],
    check: |c| when(unified_memory_on(c) && dcp(c)),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const U4_MLA: Rule = Rule {
    id: "U4",
    about: "unified memory × DCP needs an MLA model",
    reproduces: "_validate_unified_memory_dcp, srt/arg_groups/kv_cache_hook.py (0.5.20–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-memory with decode context parallelism (--dcp-size > 1) supports MLA models only (e.g. \
         kimi-linear): the MHA unified pool has no DCP-aware masked write path \
         (UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is None).",
    )],
    check: |c| when(unified_memory_on(c) && dcp(c) && c.layout.attention != AttentionKind::Mla),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const U4_SWA: Rule = Rule {
    id: "U4",
    about: "unified memory × DCP × hybrid SWA",
    reproduces: "_validate_unified_memory_dcp, srt/arg_groups/kv_cache_hook.py (0.5.20–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-memory with decode context parallelism (--dcp-size > 1) does not support hybrid \
         sliding-window models: UnifiedSWATokenToKVPoolAllocator does not widen its virtual id space, and the \
         full->swa mapping is not DCP-sharded.",
    )],
    check: |c| when(unified_memory_on(c) && dcp(c) && c.layout.is_hybrid_swa()),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const U16: Rule = Rule {
    id: "U16",
    about: "unified memory under PD without lazy compaction",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: "spec.decode.env[SGLANG_DISABLE_LAZY_COMPACTION]",
    span: Span::since(v0_5(18)),
    roles: PD_SERVERS,
    messages: &[text(
        "--enable-unified-memory with PD disaggregation requires lazy compaction; unset \
         SGLANG_DISABLE_LAZY_COMPACTION.",
    )],
    check: |c| when(unified_memory_on(c) && fleets_in_scope(c).any(|fleet| fleet.env_on(LAZY_COMPACTION_OFF_ENV))),
    fix: Fix::Manual { hint: "remove SGLANG_DISABLE_LAZY_COMPACTION from the fleets' env (or set it to 0)" },
    ..Rule::DEFAULT
};

pub(super) const U4C: Rule = Rule {
    id: "U4c",
    about: "unified memory × DCP under PD",
    reproduces: "_validate_unified_memory_dcp, srt/arg_groups/kv_cache_hook.py (0.5.20–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(20)),
    roles: PD_SERVERS,
    messages: &[text(
        "--enable-unified-memory with decode context parallelism (--dcp-size > 1) does not support PD \
         disaggregation: the transfer ships whole page envelopes, which under DCP hold only this rank's shard of \
         each widened page. Rejected here rather than at the first KV transfer, where \
         translate_kv_indices_for_transfer would abort a server that had already booted.",
    )],
    check: |c| when(unified_memory_on(c) && dcp(c)),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const U8: Rule = Rule {
    id: "U8",
    about: "unified memory × speculative algorithm",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.17–0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: UNIFIED_MEMORY,
    roles: EVERY_SERVER,
    messages: &[
        text("--enable-unified-memory is not yet compatible with speculative decoding."),
        text_from(
            18,
            "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); other speculative \
             algorithms are not yet audited for the unified pool's virtual/dense loc translation. Got \
             --speculative-algorithm='{algorithm}'.",
        ),
        text_from(
            19,
            "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); other speculative \
             algorithms are not yet audited for the unified pool's virtual/kernel-facing loc translation. Got \
             --speculative-algorithm='{algorithm}'.",
        ),
        text_from(
            22,
            "--enable-unified-memory only supports --speculative-algorithm DSPARK, DFLASH, EAGLE and EAGLE3; other \
             speculative algorithms are not yet audited for the unified pool's virtual-to-physical loc \
             translation. Got --speculative-algorithm='{algorithm}'.",
        ),
    ],
    changes: &[
        text_from(17, "any algorithm"),
        text_from(18, "DSPARK allowed"),
        text_from(22, "DSPARK, DFLASH, EAGLE and EAGLE3 allowed"),
    ],
    check: |c| {
        // The pool hook runs after the speculative hook: it reads the resolved name.
        let algorithm = resolved_speculative_algorithm(c).filter(|_| unified_memory_on(c))?;
        let allowed: &[&str] = match c.release {
            r if r < v0_5(18) => &[],
            r if r < v0_5(22) => &["DSPARK"],
            _ => &["DSPARK", "DFLASH", "EAGLE", "EAGLE3"],
        };
        when_with(!allowed.contains(&algorithm.as_str()), vec![("algorithm", algorithm)])
    },
    fix: Fix::Rewrite {
        apply: unified_memory_off,
        hint: "turn enableUnifiedMemory off, or change speculativeAlgorithm",
    },
    ..Rule::DEFAULT
};

pub(super) const U9: Rule = Rule {
    id: "U9",
    about: "unified memory under PD × HiSparse",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(18)),
    roles: PD_SERVERS,
    messages: &[text(
        "--enable-unified-memory with PD disaggregation is not compatible with --enable-hisparse: the decode-side \
         HiSparse prealloc path ships host/C4 rows straight from the allocator, bypassing the virtual->physical \
         translation the unified pool needs.",
    )],
    check: |c| when(unified_memory_on(c) && c.settings.hisparse),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off, or turn hisparse off" },
    ..Rule::DEFAULT
};

pub(super) const U10: Rule = Rule {
    id: "U10",
    about: "unified memory × host-tiered KV cache",
    reproduces: "ServerArgs._handle_unified_memory_pool, srt/server_args.py (0.5.17–0.5.18); \
                 handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: UNIFIED_MEMORY,
    roles: EVERY_SERVER,
    messages: &[
        text(
            "--enable-unified-memory is not yet compatible with hierarchical / host-tiered KV cache \
             (--enable-hierarchical-cache / --enable-lmcache): the unified-memory-pool init wires up no host pools, \
             and its device mamba / full-attention slots are VIRTUAL — the host-offload path does not translate \
             them to physical.",
        ),
        text_from(
            21,
            "--enable-unified-memory is not yet compatible with --enable-lmcache: the LMCache offload path indexes \
             the device buffers with the ids it is handed, and under the unified pool those are VIRTUAL.",
        ),
    ],
    changes: &[text_from(17, "HiCache or LMCache"), text_from(21, "LMCache only")],
    check: |c| {
        let hicache = c.settings.hierarchical_cache && c.release < v0_5(21);
        when(unified_memory_on(c) && (c.settings.lmcache || hicache))
    },
    fix: Fix::Rewrite {
        apply: unified_memory_off,
        hint: "turn enableUnifiedMemory off, or turn lmcache (before SGLang 0.5.21 also hierarchicalCache) off",
    },
    ..Rule::DEFAULT
};

pub(super) const U11: Rule = Rule {
    id: "U11",
    about: "unified memory × external cache linker",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.22–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-memory does not support --enable-unified-cache-external-linker: direct L3 transfers do \
         not preserve unified page-envelope indices and compaction lifetimes. Use --enable-hierarchical-cache for \
         supported L2/L3 transfers.",
    )],
    check: |c| when(unified_memory_on(c) && c.settings.unified_cache_external_linker),
    fix: Fix::Rewrite {
        apply: unified_memory_off,
        hint: "turn enableUnifiedMemory off, or turn unifiedCacheExternalLinker off",
    },
    ..Rule::DEFAULT
};

pub(super) const U12: Rule = Rule {
    id: "U12",
    about: "unified memory decode offload needs file storage",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(21)),
    messages: &[text(
        "--enable-unified-memory with decode KV offload currently supports --hicache-storage-backend=file only.",
    )],
    check: |c| when(unified_offload(c) && c.settings.hicache_storage_backend.as_deref() != Some("file")),
    fix: Fix::Rewrite {
        apply: unified_memory_off,
        hint: "turn enableUnifiedMemory off, or use hicacheStorageBackend file ({spec.cache} sets dynamic)",
    },
    ..Rule::DEFAULT
};

pub(super) const U13: Rule = Rule {
    id: "U13",
    about: "unified memory EAGLE needs a unified target",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.22–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[
        text(
            "--enable-unified-memory + EAGLE/EAGLE3 requires a unified target (hybrid-SWA or a mamba hybrid): the \
             draft's KV lives fused inside the full-attention page envelope.",
        ),
        text_from(
            23,
            "--enable-unified-memory + EAGLE/EAGLE3 requires a unified target (hybrid-SWA or a mamba hybrid): the \
             draft's KV lives fused inside the target's sub-pool entries.",
        ),
    ],
    check: |c| when(unified_eagle(c) && !c.layout.is_hybrid_swa() && !c.layout.uses_ssm_state()),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    ..Rule::DEFAULT
};

pub(super) const U14: Rule = Rule {
    id: "U14",
    about: "unified memory EAGLE × host_pool",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.22–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(22)),
    messages: &[text(
        "--enable-unified-memory + EAGLE/EAGLE3 does not support --disaggregation-decode-retraction-backup=host_pool: \
         the backup builds the draft's host pool off the draft's own device pool, which a fused EAGLE draft does \
         not have.",
    )],
    check: |c| when(unified_eagle(c) && host_pool(c)),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    ..Rule::DEFAULT
};

pub(super) const U15: Rule = Rule {
    id: "U15",
    about: "unified memory EAGLE × HiCache",
    reproduces: "handle_unified_memory_pool, srt/arg_groups/kv_cache_hook.py (0.5.22–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-memory + EAGLE/EAGLE3 does not support --enable-hierarchical-cache: HiCache keeps the \
         draft on a private pool, and would pack an MTP head's KV into the target's page-envelope host pool, which \
         refuses per-layer draft loads.",
    )],
    check: |c| when(unified_eagle(c) && c.settings.hierarchical_cache),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    ..Rule::DEFAULT
};

pub(super) const U2: Rule = Rule {
    id: "U2",
    about: "unified memory × MHA Mamba",
    reproduces: "KVCacheConfigurator._init_pools, srt/mem_cache/kv_cache_configurator.py (0.5.18–0.5.19)",
    field: UNIFIED_MEMORY,
    span: Span::between(v0_5(18), v0_5(19)),
    roles: PD_SERVERS,
    phase: Phase::PoolBuild,
    messages: &[text(
        "--enable-unified-memory with PD disaggregation currently supports only MLA hybrid-Mamba models (e.g. \
         kimi-linear)",
    )],
    check: |c| when(unified_memory_on(c) && c.layout.uses_ssm_state() && c.layout.attention != AttentionKind::Mla),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

pub(super) const U3: Rule = Rule {
    id: "U3",
    about: "unified memory × hybrid SWA",
    reproduces: "KVCacheConfigurator._init_pools, srt/mem_cache/kv_cache_configurator.py (0.5.18–0.5.19)",
    field: UNIFIED_MEMORY,
    span: Span::between(v0_5(18), v0_5(19)),
    roles: PD_SERVERS,
    phase: Phase::PoolBuild,
    messages: &[text(
        "--enable-unified-memory with PD disaggregation does not support hybrid-SWA models yet (no whole-envelope \
         transfer scheme for the SWA sub-pool).",
    )],
    check: |c| when(unified_memory_on(c) && c.layout.is_hybrid_swa() && !c.layout.has(LayoutFeature::DeepseekV4)),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

const UNIFIED_DCP_HINT: &str = "turn enableUnifiedMemory off, or set decodeContextParallel to 1";
const UNIFIED_EAGLE_HINT: &str = "turn enableUnifiedMemory off, or use another speculativeAlgorithm";
const LAZY_COMPACTION_OFF_ENV: &str = "SGLANG_DISABLE_LAZY_COMPACTION";

/// Unified memory with EAGLE or EAGLE3, as the unified-memory pool hook reads the name: after
/// the speculative hook has resolved it (so NEXTN and `eagle` are EAGLE).
fn unified_eagle(c: &RuleInput<'_>) -> bool {
    unified_memory_on(c) && matches!(resolved_speculative_algorithm(c).as_deref(), Some("EAGLE" | "EAGLE3"))
}

fn unified_offload(c: &RuleInput<'_>) -> bool {
    unified_memory_on(c) && c.settings.decode_offload_kv_cache
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn u1_to_u3_unified_memory() {
        let unified = |backend| {
            with(move |s| {
                s.enable_unified_memory = true;
                s.transfer_backend = backend;
            })
        };
        let field = "spec.disaggregation.enableUnifiedMemory";
        let verdict = run(&unified(TransferBackend::Nixl), &FleetSpec::default(), &kimi_linear());
        assert_eq!(ids(&verdict), vec![("U1", field)]);
        let verdict = run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &ssm());
        assert_eq!(ids(&verdict), vec![("U2", field)]);
        assert!(verdict.violations[0].message.starts_with(
            "--enable-unified-memory with PD disaggregation currently supports only MLA hybrid-Mamba models (e.g. kimi-linear)"
        ));
        let verdict = run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &hybrid_swa());
        assert_eq!(ids(&verdict), vec![("U3", field)]);
        assert_eq!(
            run(&unified(TransferBackend::Mooncake), &FleetSpec::default(), &kimi_linear()).outcome,
            Outcome::Valid,
            "MLA hybrid-Mamba on mooncake is the supported case"
        );
        let rewritten = run(
            &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..unified(TransferBackend::Mooncake) },
            &FleetSpec::default(),
            &ssm(),
        );
        assert_eq!((rewritten.outcome, rewritten.effective.enable_unified_memory), (Outcome::Rewritten, false));
    }

    /// Unified memory under PD needs lazy compaction: SGLANG_DISABLE_LAZY_COMPACTION in a fleet's env
    /// is refused from 0.5.18 (U16), a falsy value is not.
    #[test]
    fn u16_unified_memory_under_pd_needs_lazy_compaction() {
        let unified = with(|s| s.enable_unified_memory = true);
        let with_env = |value: &str| FleetSpec {
            env: vec![EnvVar {
                name: "SGLANG_DISABLE_LAZY_COMPACTION".into(),
                value: Some(value.into()),
                value_from: None,
            }],
            ..FleetSpec::default()
        };
        let fired = |fleet: &FleetSpec, patch| {
            run_at(v0_5(patch), &unified, fleet, &full()).violations.iter().any(|v| v.rule == "U16")
        };
        assert!(fired(&with_env("1"), 18) && fired(&with_env("true"), 23));
        assert!(!fired(&with_env("1"), 17) && !fired(&with_env("0"), 23) && !fired(&FleetSpec::default(), 23));
        let plain = with_env("1");
        assert!(
            !run_at(v0_5(23), &DisaggregationSpec::default(), &plain, &full())
                .violations
                .iter()
                .any(|v| v.rule == "U16")
        );
    }

    #[test]
    fn unified_memory_rules_per_release() {
        let unified = with(|s| s.enable_unified_memory = true);
        assert_eq!(
            messages("U1", &unified, &FleetSpec::default(), &full()),
            on(17..=17, "--enable-unified-memory is not yet compatible with PD disaggregation.")
        );
        let on_nixl = with(|s| {
            s.enable_unified_memory = true;
            s.transfer_backend = TransferBackend::Nixl;
        });
        // The catalogue's "requires --disaggregation-transfer-backend mooncake and --pp-size 1." is in no
        // release: 0.5.18–0.5.20 name the backend, and PP is a check of its own from 0.5.18.
        let until_0_5_20 =
            "--enable-unified-memory with PD disaggregation supports only the mooncake transfer backend; got 'nixl'.";
        let since_0_5_21 = "--enable-unified-memory with PD disaggregation supports only these transfer backends: mooncake; got 'nixl'.";
        assert_eq!(
            messages("U1", &on_nixl, &FleetSpec::default(), &full()),
            concat(&[
                on(17..=17, "--enable-unified-memory is not yet compatible with PD disaggregation."),
                on(18..=20, until_0_5_20),
                on(21..=23, since_0_5_21)
            ])
        );
        let pp2 = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        assert_eq!(
            at(18, &unified, &pp2, &full()).violations[0].message,
            at(23, &unified, &pp2, &full()).violations[0].message
        );
        assert_eq!(
            at(23, &unified, &pp2, &full()).violations[0].message,
            "--enable-unified-memory with PD disaggregation does not support pipeline parallelism (whole-envelope transfer \
             has no per-layer entries to subset)."
        );
        let speculative = with(|s| {
            s.enable_unified_memory = true;
            s.speculative_algorithm = Some("DSPARK".into());
        });
        assert_eq!(
            messages("U1", &speculative, &FleetSpec::default(), &full())[4].as_deref(),
            Some(
                "--enable-unified-memory with PD disaggregation does not support speculative decoding with the Mooncake \
                  transfer backend."
            )
        );
        let fires = |rule, layout: &AttentionLayout| -> Vec<bool> {
            messages(rule, &unified, &FleetSpec::default(), layout).iter().map(Option::is_some).collect()
        };
        assert_eq!(fires("U2", &ssm()), [false, true, true, false, false, false, false]);
        assert_eq!(fires("U3", &hybrid_swa()), [false, true, true, false, false, false, false]);
        let host_pool = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.enable_unified_memory = true;
                s.retraction_backup = Some(RetractionBackup::HostPool);
                edit(s);
            })
        };
        let radix = host_pool(|s| s.decode_radix_cache = true);
        assert_eq!(
            messages("U6a", &radix, &FleetSpec::default(), &full()),
            on(
                21..=21,
                "--enable-unified-memory host-pool decode retraction does not support decode radix-cache H2D/D2H transfers yet."
            )
        );
        assert_eq!(
            messages("U6b", &host_pool(|_| {}), &FleetSpec::default(), &ssm()),
            on(21..=23, "--enable-unified-memory host-pool decode retraction does not support hybrid-Mamba models.")
        );
        assert_eq!(
            messages("U6c", &host_pool(|_| {}), &FleetSpec::default(), &hybrid_swa()),
            on(
                21..=21,
                "--enable-unified-memory host-pool decode retraction does not support hybrid-SWA H2D/D2H transfers yet."
            )
        );
    }

    /// The unified-memory pool hook runs after the speculative hook, so it reads the algorithm
    /// upper-cased and resolved: NEXTN and `eagle` are EAGLE there.
    #[test]
    fn the_unified_memory_pool_hook_reads_the_resolved_speculative_algorithm() {
        let unified = |algorithm: &str| {
            let algorithm = algorithm.to_string();
            with(move |s| {
                s.enable_unified_memory = true;
                s.speculative_algorithm = Some(algorithm);
            })
        };
        let u8_message = |algorithm: &str, patch: u16| {
            at(patch, &unified(algorithm), &FleetSpec::default(), &full())
                .violations
                .into_iter()
                .find(|v| v.rule == "U8")
                .map(|v| v.message)
        };
        let refused = u8_message("nextn", 20).unwrap();
        assert!(refused.ends_with("Got --speculative-algorithm='EAGLE'."), "{refused}");
        assert_eq!(u8_message("dspark", 20), None);
        assert_eq!(u8_message("nextn", 23), None);
        // EAGLE under unified memory needs a unified target: NEXTN and `eagle` are EAGLE.
        for algorithm in ["EAGLE", "NEXTN", "eagle", "eagle3"] {
            let rules = at(23, &unified(algorithm), &FleetSpec::default(), &full()).violations;
            assert!(rules.iter().any(|v| v.rule == "U13"), "{algorithm}");
        }
        let rules = at(23, &unified("ngram"), &FleetSpec::default(), &full()).violations;
        assert!(!rules.iter().any(|v| v.rule == "U13"));
    }

    #[test]
    fn u7_unified_memory_decode_offload_from_0_5_21() {
        let settings = with(|s| {
            s.enable_unified_memory = true;
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("file".into());
        });
        let cases = [
            (mla(), "--enable-unified-memory decode KV offload does not support MLA models yet."),
            (ssm(), "--enable-unified-memory decode KV offload does not support hybrid-Mamba models."),
            (
                hybrid_swa(),
                "--enable-unified-memory decode KV offload does not support hybrid-SWA H2D/D2H transfers yet.",
            ),
        ];
        for (layout, message) in cases {
            assert_eq!(messages("U7", &settings, &FleetSpec::default(), &layout), on(21..=23, message));
        }
        assert_eq!(at(23, &settings, &FleetSpec::default(), &full()).outcome, Outcome::Valid);
    }

    #[test]
    fn the_unified_memory_pool_hook_refuses_what_its_pool_cannot_translate() {
        let unified = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.enable_unified_memory = true;
                edit(s);
            })
        };
        let dcp = unified(|s| s.decode_context_parallel = 2);
        let fires = |rule, settings: &DisaggregationSpec, layout: &AttentionLayout| -> Vec<bool> {
            messages(rule, settings, &FleetSpec::default(), layout).iter().map(Option::is_some).collect()
        };
        // DCP: refused outright until 0.5.19; from 0.5.20 for non-MLA or hybrid-SWA models, and under PD always.
        assert_eq!(fires("U4", &dcp, &full()), [true; 7]);
        assert_eq!(fires("U4", &dcp, &mla()), [true, true, true, false, false, false, false]);
        assert_eq!(fires("U4c", &dcp, &mla()), [false, false, false, true, true, true, true]);
        let ngram = unified(|s| s.speculative_algorithm = Some("NGRAM".into()));
        let messages_u8 = messages("U8", &ngram, &FleetSpec::default(), &full());
        assert_eq!(
            messages_u8[0].as_deref(),
            Some("--enable-unified-memory is not yet compatible with speculative decoding.")
        );
        assert!(
            messages_u8[1]
                .as_deref()
                .unwrap()
                .contains("virtual/dense loc translation. Got --speculative-algorithm='NGRAM'.")
        );
        assert!(messages_u8[6].as_deref().unwrap().starts_with(
            "--enable-unified-memory only supports --speculative-algorithm DSPARK, DFLASH, EAGLE and EAGLE3;"
        ));
        let eagle = unified(|s| s.speculative_algorithm = Some("EAGLE".into()));
        assert_eq!(fires("U8", &eagle, &full()), [true, true, true, true, true, false, false]);
        assert_eq!(fires("U13", &eagle, &full()), [false, false, false, false, false, true, true]);
        assert_eq!(fires("U13", &eagle, &hybrid_swa()), [false; 7], "a hybrid-SWA target carries the fused draft");
        let eagle_hicache = unified(|s| {
            s.speculative_algorithm = Some("EAGLE".into());
            s.hierarchical_cache = true;
        });
        assert_eq!(fires("U15", &eagle_hicache, &hybrid_swa()), [false, false, false, false, false, true, true]);
        let eagle_host_pool = unified(|s| {
            s.speculative_algorithm = Some("EAGLE".into());
            s.retraction_backup = Some(RetractionBackup::HostPool);
        });
        assert_eq!(fires("U14", &eagle_host_pool, &hybrid_swa()), [false, false, false, false, false, true, true]);
        // HiCache stops conflicting with unified memory in 0.5.21; LMCache does not.
        assert_eq!(
            fires("U10", &unified(|s| s.hierarchical_cache = true), &full()),
            [true, true, true, true, false, false, false]
        );
        assert_eq!(fires("U10", &unified(|s| s.lmcache = true), &full()), [true; 7]);
        assert_eq!(
            fires("U11", &unified(|s| s.unified_cache_external_linker = true), &full()),
            [false, false, false, false, false, true, true]
        );
        assert_eq!(fires("U9", &unified(|s| s.hisparse = true), &full()), [false, true, true, true, true, true, true]);
        let offload = unified(|s| {
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("dynamic".into());
        });
        assert_eq!(
            messages("U12", &offload, &FleetSpec::default(), &full()),
            on(
                21..=23,
                "--enable-unified-memory with decode KV offload currently supports --hicache-storage-backend=file only."
            )
        );
    }
}
