//! The decode retraction backup (`--disaggregation-decode-retraction-backup`) and decode offload: the PD
//! hook's and the KV cache hook's checks of the flags (`arg_groups/pd_disaggregation_hook.py`,
//! `arg_groups/kv_cache_hook.py`), the host pool the tree cache mirrors a model's pool into
//! (`mem_cache/registry.py`), the offload manager's pool types
//! (`disaggregation/decode_kvcache_offload_manager.py`) and priority retraction (`arg_groups/validation_hook.py`).

use super::predicates::{
    DECODE_OFFLOAD, RETRACTION_BACKUP, dcp, fleets_in_scope, host_pool, mla_like, offload_off, radix,
    stage_without_full_layer, to_cpu_tensor, unified_memory_on,
};
use super::{EVERY_SERVER, Finding, Fix, Phase, Rule, text, text_from, when};
use crate::api::{KvPool, LayoutFeature};
use crate::policy::argv::{given, option_value};
use crate::release::{Span, v0_5};

pub(super) const S2: Rule = Rule {
    id: "S2",
    about: "host_pool × DCP",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    messages: &[text("--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.")],
    check: |c| when(host_pool(c) && dcp(c)),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set decodeContextParallel to 1" },
    ..Rule::DEFAULT
};

pub(super) const S3: Rule = Rule {
    id: "S3",
    about: "host_pool × priority preemption",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    messages: &[text(
        "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption when \
         priority scheduling is enabled.",
    )],
    check: |c| when(host_pool(c) && c.settings.priority_scheduling && !c.settings.disable_priority_preemption),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set disablePriorityPreemption: true" },
    ..Rule::DEFAULT
};

pub(super) const S4: Rule = Rule {
    id: "S4",
    about: "host_pool × decode offload",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    messages: &[text(
        "The arguments disaggregation-decode-enable-offload-kvcache and \
         disaggregation-decode-retraction-backup=host_pool are mutually exclusive: both build a decode host pool.",
    )],
    check: |c| when(host_pool(c) && c.settings.decode_offload_kv_cache),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeOffloadKvCache off" },
    ..Rule::DEFAULT
};

pub(super) const S6: Rule = Rule {
    id: "S6",
    about: "decode offload without a storage backend",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: DECODE_OFFLOAD,
    messages: &[text(
        "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend \
         is provided.",
    )],
    check: |c| when(c.settings.decode_offload_kv_cache && c.settings.hicache_storage_backend.is_none()),
    fix: Fix::Rewrite {
        apply: offload_off,
        hint: "set {spec.disaggregation.hicacheStorageBackend} (or {spec.cache}, kvpilot's own store), or turn \
               decodeOffloadKvCache off",
    },
    ..Rule::DEFAULT
};

pub(super) const RP1: Rule = Rule {
    id: "RP1",
    about: "priority retraction without priority scheduling",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.23)",
    field: "spec.decode.extraArgs[--retraction-policy]",
    roles: EVERY_SERVER,
    messages: &[text("--retraction-policy priority requires --enable-priority-scheduling")],
    check: |c| {
        when(fleets_in_scope(c).any(|fleet| {
            option_value(&fleet.extra_args, "--retraction-policy") == Some("priority")
                && !given(&fleet.extra_args, "--enable-priority-scheduling")
        }))
    },
    fix: Fix::Manual {
        hint: "add --enable-priority-scheduling to extraArgs next to --retraction-policy priority, or drop the \
               latter (the default, length, retracts by output and input length)",
    },
    ..Rule::DEFAULT
};

pub(super) const R1: Rule = Rule {
    id: "R1",
    about: "host_pool × Mamba",
    reproduces: "_create_unified_radix_cache, srt/mem_cache/registry.py (0.5.18–0.5.20); \
                 create_unified_radix_cache, srt/mem_cache/registry.py (0.5.21–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    phase: Phase::PoolBuild,
    messages: &[text("Host-pool retraction does not support Mamba models.")],
    check: |c| when(host_pool(c) && c.layout.uses_ssm_state()),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    ..Rule::DEFAULT
};

pub(super) const R2: Rule = Rule {
    id: "R2",
    about: "host_pool × pure SWA",
    reproduces: "_create_unified_radix_cache, srt/mem_cache/registry.py (0.5.18–0.5.20); \
                 create_unified_radix_cache, srt/mem_cache/registry.py (0.5.21–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    phase: Phase::PoolBuild,
    messages: &[text("Host-pool retraction does not support pure-SWA models.")],
    check: |c| {
        if !host_pool(c) || radix(c) {
            return None;
        }
        if c.layout.kv_pool == KvPool::PureSwa {
            return Finding::new();
        }
        stage_without_full_layer(c.layout, c.decode.pipeline_parallel).map(|(stage, start, end)| Finding {
            args: Vec::new(),
            detail: Some(format!(
                "pipeline stage {stage} (layers {start}..{end}) of pipelineParallel={} holds no full-attention layer, so \
                 that rank is pure SWA",
                c.decode.pipeline_parallel
            )),
        })
    },
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    ..Rule::DEFAULT
};

pub(super) const R9: Rule = Rule {
    id: "R9",
    about: "host_pool needs an MHA or hybrid-SWA host stack",
    reproduces: "UnifiedRadixCache.validate_retraction_host_capacity, srt/mem_cache/unified_radix_cache.py \
                 (0.5.18–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    phase: Phase::PoolBuild,
    messages: &[text(
        "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
    )],
    check: |c| when(host_pool(c) && !c.layout.uses_ssm_state() && mla_like(c.layout)),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    ..Rule::DEFAULT
};

pub(super) const O1: Rule = Rule {
    id: "O1",
    about: "decode offload needs an MHA or MLA pool",
    reproduces: "DecodeKVCacheOffloadManager.__init__, srt/disaggregation/decode_kvcache_offload_manager.py \
                 (0.5.17–0.5.23)",
    field: DECODE_OFFLOAD,
    phase: Phase::PoolBuild,
    messages: &[text("Unsupported KV cache type for decode offload")],
    changes: &[text_from(21, "the unified-memory hybrid-SWA pool is accepted")],
    check: |c| {
        let pool_supported = match c.layout.kv_pool {
            KvPool::Full | KvPool::Mla => true,
            // 0.5.21 accepts the unified-memory hybrid-SWA pool (UnifiedSWAKVPool).
            KvPool::HybridSwa | KvPool::PureSwa => {
                c.release >= v0_5(21) && unified_memory_on(c) && !c.layout.has(LayoutFeature::DeepseekV4)
            }
            KvPool::HybridSsm => false,
        };
        when(c.settings.decode_offload_kv_cache && !pool_supported)
    },
    fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache off" },
    ..Rule::DEFAULT
};

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    const OFFLOAD: &str = "spec.disaggregation.decodeOffloadKvCache";

    #[test]
    fn r1_host_pool_with_ssm() {
        assert_rewritable(
            with(host_pool),
            &FleetSpec::default(),
            &ssm(),
            "R1",
            BACKUP,
            "Host-pool retraction does not support Mamba models.",
            ("host_pool", "cpu_tensor"),
        );
    }

    #[test]
    fn r2_host_pool_with_pure_swa() {
        assert_rewritable(
            with(host_pool),
            &FleetSpec::default(),
            &pure_swa(),
            "R2",
            BACKUP,
            "Host-pool retraction does not support pure-SWA models.",
            ("host_pool", "cpu_tensor"),
        );
    }

    #[test]
    fn r2_pipeline_stage_without_full_layer() {
        let layout = layout_at(json!({
            "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128, "head_dim": 64,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
        }));
        let pp2 = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        let verdict = run(&with(host_pool), &pp2, &layout);
        assert_eq!(ids(&verdict), vec![("R2", BACKUP)]);
        assert!(
            verdict.violations[0].fix.starts_with("pipeline stage 0 (layers 0..2)"),
            "{}",
            verdict.violations[0].fix
        );
        assert_eq!(
            run(&with(host_pool), &FleetSpec::default(), &layout).outcome,
            Outcome::Valid,
            "PP=1 has full layers"
        );
        assert_eq!(automatic_retraction_backup(&with(|_| {}), &pp2, &layout, CATALOGUE), RetractionBackup::CpuTensor);
    }

    #[test]
    fn r9_host_pool_with_mla_and_deepseek_v4() {
        for layout in [mla(), dsv4()] {
            assert_rewritable(
                with(host_pool),
                &FleetSpec::default(),
                &layout,
                "R9",
                BACKUP,
                "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
                ("host_pool", "cpu_tensor"),
            );
        }
    }

    #[test]
    fn s2_s3_s4_server_argument_checks() {
        let decode = FleetSpec::default();
        assert_rewritable(
            with(|s| {
                host_pool(s);
                s.decode_context_parallel = 2;
            }),
            &decode,
            // DCP needs an MLA pool (R19d); host_pool on MLA is R9, fixed by the same rewrite.
            &mla(),
            "S2",
            BACKUP,
            "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
            ("host_pool", "cpu_tensor"),
        );
        assert_rewritable(
            with(|s| {
                host_pool(s);
                s.priority_scheduling = true;
            }),
            &decode,
            &full(),
            "S3",
            BACKUP,
            "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption when priority \
             scheduling is enabled.",
            ("host_pool", "cpu_tensor"),
        );
        let preemption_off = with(|s| {
            host_pool(s);
            s.priority_scheduling = true;
            s.disable_priority_preemption = true;
        });
        assert_eq!(run(&preemption_off, &decode, &full()).outcome, Outcome::Valid);
        assert_rewritable(
            with(|s| {
                host_pool(s);
                s.decode_offload_kv_cache = true;
                s.hicache_storage_backend = Some("file".into());
            }),
            &decode,
            &full(),
            "S4",
            BACKUP,
            "The arguments disaggregation-decode-enable-offload-kvcache and disaggregation-decode-retraction-backup=host_pool \
             are mutually exclusive: both build a decode host pool.",
            ("host_pool", "cpu_tensor"),
        );
    }

    #[test]
    fn s6_decode_offload_needs_a_storage_backend() {
        let decode = FleetSpec::default();
        assert_rewritable(
            with(|s| s.decode_offload_kv_cache = true),
            &decode,
            &full(),
            "S6",
            OFFLOAD,
            "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend is \
             provided.",
            ("true", "false"),
        );
        let with_backend = with(|s| {
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("file".into());
        });
        assert_eq!(run(&with_backend, &decode, &full()).outcome, Outcome::Valid);
        let backend_alone = with(|s| s.hicache_storage_backend = Some("file".into()));
        assert_eq!(run(&backend_alone, &decode, &full()).outcome, Outcome::Valid, "a backend without offload is fine");
    }

    #[test]
    fn o1_decode_offload_needs_an_mha_or_mla_pool() {
        let offload = with(|s| {
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("file".into());
        });
        for layout in [hybrid_swa(), ssm(), dsv4()] {
            assert_eq!(
                messages("O1", &offload, &FleetSpec::default(), &layout),
                on(17..=23, "Unsupported KV cache type for decode offload")
            );
        }
        for layout in [full(), mla()] {
            assert_eq!(at(23, &offload, &FleetSpec::default(), &layout).outcome, Outcome::Valid);
        }
        let unified = with(|s| {
            s.decode_offload_kv_cache = true;
            s.hicache_storage_backend = Some("file".into());
            s.enable_unified_memory = true;
        });
        assert_eq!(
            messages("O1", &unified, &FleetSpec::default(), &hybrid_swa()),
            on(17..=20, "Unsupported KV cache type for decode offload"),
            "0.5.21 accepts the unified-memory hybrid-SWA pool"
        );
    }
}
