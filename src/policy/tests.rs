//! The policy as a whole: rule order, the rewrite pass, the automatic backup and its warnings, and
//! what holds for every rule; each rule's own tests are in its file under `rules/`.

use proptest::prelude::*;

use super::test_support::*;

#[test]
fn automatic_backup_follows_sglang() {
    let decode = FleetSpec::default();
    let unset = with(|_| {});
    for (layout, expected) in [
        (full(), RetractionBackup::HostPool),
        (hybrid_swa(), RetractionBackup::HostPool),
        (pure_swa(), RetractionBackup::CpuTensor),
        (ssm(), RetractionBackup::CpuTensor),
        (mla(), RetractionBackup::CpuTensor),
        (dsv4(), RetractionBackup::CpuTensor),
    ] {
        let verdict = run(&unset, &decode, &layout);
        assert_eq!(verdict.outcome, Outcome::Valid);
        assert_eq!(verdict.effective.retraction_backup, expected, "{:?}", layout.kv_pool);
        assert_eq!(verdict.effective.retraction_backup_source, SettingSource::Auto);
    }
    assert_eq!(run(&unset, &decode, &full()).effective.host_pool_ratio, Some(BACKUP_ONLY_HOST_POOL_RATIO));
    let hicache = run(&with(|s| s.hierarchical_cache = true), &decode, &full()).effective;
    assert_eq!((hicache.retraction_backup, hicache.host_pool_ratio), (RetractionBackup::HostPool, Some(2.0)));
    for edit in [
        (|s: &mut DisaggregationSpec| s.decode_radix_cache = true) as fn(&mut DisaggregationSpec),
        |s| s.decode_offload_kv_cache = true,
        |s| s.priority_scheduling = true,
        |s| s.decode_context_parallel = 2,
        |s| s.enable_unified_memory = true,
    ] {
        // Unified memory excludes host_pool from 0.5.20 on.
        let verdict = run_at(v0_5(20), &with(edit), &decode, &full());
        assert_eq!(verdict.effective.retraction_backup, RetractionBackup::CpuTensor, "{:?}", verdict.settings);
        assert_eq!(verdict.effective.host_pool_ratio, None);
    }
    let cpu = run(&with(|s| s.host_pool_ratio = Some(0.5)), &decode, &ssm());
    assert!(cpu.warnings.iter().any(|w| w.contains("hostPoolRatio has no effect")), "{:?}", cpu.warnings);
    let offload = with(|s| {
        s.host_pool_ratio = Some(0.5);
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
    });
    let sized = run(&offload, &decode, &full());
    assert!(!sized.warnings.iter().any(|w| w.contains("hostPoolRatio")), "decode offload's pool: {:?}", sized.warnings);
}

#[test]
fn violations_are_reported_in_rule_order_and_deterministically() {
    let settings = with(|s| {
        host_pool(s);
        s.decode_context_parallel = 2;
        s.priority_scheduling = true;
        s.decode_offload_kv_cache = true;
        s.hicache_storage_backend = Some("file".into());
        s.decode_radix_cache = true;
        s.transfer_backend = TransferBackend::Fake;
        s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBufferLazy);
    });
    let first = run(&settings, &FleetSpec::default(), &ssm());
    let rules: Vec<_> = first.violations.iter().map(|v| v.rule).collect();
    // 0.5.19 lets DCP use the fake backend; DCP needs an MLA pool (R19d), decode offload an MHA or MLA one (O1).
    assert_eq!(rules, vec!["S2", "S3", "S4", "R1", "R17", "R18b", "R19", "R19d", "O1", "M1"]);
    for _ in 0..10 {
        assert_eq!(run(&settings, &FleetSpec::default(), &ssm()), first);
    }
    let rewrite =
        run(&DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..settings }, &FleetSpec::default(), &ssm());
    // DCP on an SSM model (R19d) has no safe rewrite, so Rewrite mode still rejects.
    assert_eq!(rewrite.outcome, Outcome::Rejected);
    assert_eq!(ids(&rewrite), vec![("R19d", "spec.disaggregation.decodeContextParallel")]);
    let fields: Vec<_> = rewrite.rewrites.iter().map(|r| (r.rule.as_str(), r.field.as_str())).collect();
    assert_eq!(
        fields,
        vec![
            ("S2", BACKUP),
            ("R17", RADIX),
            ("O1", "spec.disaggregation.decodeOffloadKvCache"),
            ("M1", "spec.disaggregation.mambaRadixCacheStrategy")
        ],
        "one rewrite per field, by the first rule that needed it (M1 for the prefill servers, which keep \
         their radix cache)"
    );
}

#[test]
fn violation_display_is_rule_field_message() {
    let verdict = run(&with(host_pool), &FleetSpec::default(), &pure_swa());
    assert_eq!(
        verdict.violations[0].to_string(),
        "R2 spec.disaggregation.retractionBackup: Host-pool retraction does not support pure-SWA models. (fix: use \
         cpu_tensor or leave retractionBackup unset; or set onInvalid: Rewrite to let kvpilot rewrite it)"
    );
}

fn any_layout() -> impl Strategy<Value = AttentionLayout> {
    prop::sample::select(vec![full(), hybrid_swa(), pure_swa(), ssm(), mla(), dsv4(), gemma4(), kimi_linear()])
}

prop_compose! {
    fn any_settings()(
        backup in prop::option::of(prop::sample::select(vec![RetractionBackup::CpuTensor, RetractionBackup::HostPool, RetractionBackup::None])),
        rewrite in any::<bool>(),
        backend in prop::sample::select(vec![TransferBackend::Mooncake, TransferBackend::Nixl, TransferBackend::Mori, TransferBackend::Fake]),
        flags in prop::array::uniform10(any::<bool>()),
        dcp in 1..4i32,
        strategy in prop::option::of(prop::sample::select(vec![
            MambaRadixCacheStrategy::NoBuffer, MambaRadixCacheStrategy::ExtraBuffer, MambaRadixCacheStrategy::ExtraBufferLazy])),
        prefill_tp in prop::option::of(1..9i32),
        prefill_page in prop::option::of(1..3i32),
        prefill_dtype in prop::option::of(prop::sample::select(vec!["auto", "fp8_e4m3", "mxfp8"])),
        speculative in any::<bool>(),
        storage_backend in prop::option::of(prop::sample::select(vec!["file", "dynamic", "mooncake"])),
        host_receive in prop::option::of(prop::sample::select(vec![-0.5, 0.0, 0.5, 1.0])),
        buffer_only in any::<bool>(),
    ) -> DisaggregationSpec {
        DisaggregationSpec {
            retraction_backup: backup,
            on_invalid: if rewrite { OnInvalid::Rewrite } else { OnInvalid::Reject },
            transfer_backend: backend,
            prefill: prefill_tp.map(|tp| PrefillSpec {
                tensor_parallel: tp,
                page_size: prefill_page,
                kv_cache_dtype: prefill_dtype.map(str::to_string),
                ..PrefillSpec::default()
            }),
            bootstrap_port: 8998,
            decode_radix_cache: flags[0],
            decode_offload_kv_cache: flags[1],
            hierarchical_cache: flags[2],
            priority_scheduling: flags[3],
            disable_priority_preemption: flags[4],
            decode_context_parallel: dcp,
            speculative_algorithm: speculative.then(|| "EAGLE".to_string()),
            speculative_draft_model: None,
            mamba_radix_cache_strategy: strategy,
            host_pool_ratio: None,
            enable_unified_memory: flags[5],
            hicache_storage_backend: storage_backend.map(str::to_string),
            lmcache: flags[6],
            unified_cache_external_linker: flags[7],
            hisparse: flags[8] && flags[9],
            decode_host_receive_threshold: host_receive,
            hicache_host_memory_mode: buffer_only.then_some(crate::api::HicacheHostMemoryMode::BufferOnly),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// What Rewrite mode produces is valid as written; Reject mode rejects exactly when
    /// something is violated.
    #[test]
    fn rewritten_settings_are_valid_as_written(
        settings in any_settings(), layout in any_layout(), tp in 1..9i32, pp in 1..3i32, page in 1..3i32,
        unified_tree in prop::option::of(any::<bool>()), dtype in prop::option::of(prop::sample::select(vec!["auto", "mxfp8"])),
        release in prop::sample::select(crate::release::KNOWN.to_vec()),
    ) {
        let decode = FleetSpec {
            tensor_parallel: tp, pipeline_parallel: pp, page_size: Some(page),
            env: unified_tree.map(|on| vec![env_var("SGLANG_ENABLE_UNIFIED_RADIX_TREE", if on { "1" } else { "0" })]).unwrap_or_default(),
            kv_cache_dtype: dtype.map(str::to_string),
            ..FleetSpec::default()
        };
        let run = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| run_at(release, settings, decode, layout);
        let verdict = run(&settings, &decode, &layout);
        prop_assert_eq!(verdict.outcome == Outcome::Rejected, !verdict.violations.is_empty());
        if settings.on_invalid == OnInvalid::Reject {
            prop_assert!(verdict.rewrites.is_empty());
        }
        if verdict.outcome != Outcome::Rejected {
            let again = run(&DisaggregationSpec { on_invalid: OnInvalid::Reject, ..verdict.settings.clone() }, &decode, &layout);
            prop_assert_eq!(again.outcome, Outcome::Valid, "{:?}", again.violations);
            let same_source = EffectiveSettings { retraction_backup_source: again.effective.retraction_backup_source, ..verdict.effective.clone() };
            prop_assert_eq!(again.effective, same_source);
        }
        if verdict.outcome != Outcome::Rejected {
            // Never a value the release does not have.
            prop_assert!(release >= v0_5(18) || verdict.settings.retraction_backup.is_none());
            prop_assert!(release >= v0_5(21) || verdict.effective.retraction_backup != RetractionBackup::None);
        }
        if verdict.effective.retraction_backup == RetractionBackup::HostPool && verdict.outcome != Outcome::Rejected {
            prop_assert!(matches!(layout.kv_pool, KvPool::Full | KvPool::HybridSwa));
            prop_assert!(!layout.has(LayoutFeature::DeepseekV4));
        }
    }
}

#[test]
fn a_draft_model_is_the_model_where_its_servers_load_it_from_the_same_path() {
    let spec = |model: serde_json::Value, draft: serde_json::Value| -> InferenceDeploymentSpec {
        serde_json::from_value(json!({
            "model": model,
            "disaggregation": {"speculativeDraftModel": draft},
            "decode": {}
        }))
        .unwrap()
    };
    let hub = json!({"name": "iquest/q1", "config": {"inline": {}}});
    let volume = json!({"name": "iquest/q1", "config": {"inline": {}}, "source": {"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}, "path": "q1/"}}});
    let same_hub = spec(hub.clone(), json!({"name": "iquest/q1", "config": {"inline": {}}}));
    assert!(draft_is_the_model(&same_hub));
    assert!(!draft_is_the_model(&spec(hub, json!({"name": "iquest/q1-mtp", "config": {"inline": {}}}))));
    let same_directory = json!({"name": "draft", "path": "q1", "config": {"inline": {}}});
    assert!(draft_is_the_model(&spec(volume.clone(), same_directory)), "/models/q1 both");
    let other_directory = json!({"name": "iquest/q1", "path": "q1-mtp", "config": {"inline": {}}});
    assert!(!draft_is_the_model(&spec(volume, other_directory)));
    let mut none = same_hub;
    none.disaggregation.speculative_draft_model = None;
    assert!(!draft_is_the_model(&none), "no draft model named");
}

/// Flag combinations SGLang refuses on the servers they reach: an encoder-only server under PD
/// (EN1, every release; a server without PD may be encoder-only), decode CP with prefill CP (DC1,
/// 0.5.22 on) and the DP LM head on data-parallel replicas without attention DP (LH1).
#[test]
fn en1_dc1_lh1_flag_combinations() {
    let all = ["EN1", "DC1", "LH1"];
    let encoder_only = parallel_fleet(2, 1, false, &["--encoder-only"]);
    assert_eq!(violations_of(&all, &full(), &encoder_only, 17)[0].0, "EN1");
    let alone = |fleet: &FleetSpec, prefill: bool| {
        let verdict = evaluate_other_server(
            PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
            prefill,
        );
        verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    assert_eq!(alone(&encoder_only, true), ["EN1"]);
    assert!(alone(&encoder_only, false).is_empty(), "no PD");

    let dcp = with(|s| s.decode_context_parallel = 2);
    let prefill_cp = parallel_fleet(2, 1, false, &["--enable-prefill-cp", "--cp-strategy", "interleave"]);
    let rules = |patch| run_at(v0_5(patch), &dcp, &prefill_cp, &full()).violations.iter().any(|v| v.rule == "DC1");
    assert!(!rules(21) && rules(22));

    let lm_head = |dp, dp_attention| parallel_fleet(2, dp, dp_attention, &["--enable-dp-lm-head"]);
    assert_eq!(
        violations_of(&all, &full(), &lm_head(2, false), 22),
        [("LH1", "--enable-dp-lm-head requires attention DP (--attn-dp-size).".to_string())]
    );
    assert_eq!(
        violations_of(&all, &full(), &lm_head(2, false), 21),
        [("LH1", "Please enable dp attention when setting enable_dp_lm_head. ".to_string())]
    );
    assert!(violations_of(&all, &full(), &lm_head(2, true), 22).is_empty());
    // With one DP rank SGLang drops the DP LM head instead.
    assert!(violations_of(&all, &full(), &lm_head(1, false), 22).is_empty());
}

/// The decode-CP hook's checks of its communication flags (DF1-DF3, every release), priority
/// retraction without priority scheduling (RP1) and quantized communications off an NPU (QC1,
/// QC2).
#[test]
fn df_rp_qc_flag_checks() {
    let all = ["DF1", "DF2", "DF3", "RP1", "QC1", "QC2"];
    let fired = |settings: &DisaggregationSpec, tp, args: &[&str], patch| {
        let verdict = run_at(v0_5(patch), settings, &parallel_fleet(tp, 1, false, args), &full());
        verdict.violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
    };
    let defaults = DisaggregationSpec::default();
    let dcp = with(|s| s.decode_context_parallel = 2);
    assert_eq!(fired(&defaults, 2, &["--dcp-comm-backend", "a2a"], 17), ["DF1"]);
    assert!(fired(&dcp, 2, &["--dcp-comm-backend", "a2a"], 17).is_empty());
    assert!(fired(&defaults, 2, &["--dcp-comm-backend", "ag_rs"], 23).is_empty());
    assert_eq!(fired(&defaults, 2, &["--dcp-replicate-q-proj"], 23), ["DF2"]);
    // The parser's default backend is ag_rs up to 0.5.19; from 0.5.20 DCP resolves an all-to-all one.
    assert_eq!(fired(&dcp, 2, &["--dcp-replicate-q-proj"], 19), ["DF3"]);
    assert!(fired(&dcp, 2, &["--dcp-replicate-q-proj"], 20).is_empty());
    assert_eq!(fired(&dcp, 2, &["--dcp-replicate-q-proj", "--dcp-comm-backend", "ag_rs"], 23), ["DF3"]);
    let message = run_at(v0_5(23), &defaults, &parallel_fleet(2, 1, false, &["--dcp-comm-backend", "fi_a2a"]), &full())
        .violations
        .into_iter()
        .find(|v| v.rule == "DF1")
        .map(|v| v.message);
    assert_eq!(
        message.as_deref(),
        Some(
            "--dcp-comm-backend fi_a2a only affects the decode context-parallel attention reduction and therefore \
             requires --dcp-size / --decode-context-parallel-size > 1, but got dcp_size=1."
        )
    );

    assert_eq!(fired(&defaults, 1, &["--retraction-policy", "priority"], 17), ["RP1"]);
    assert!(fired(&defaults, 1, &["--retraction-policy", "priority", "--enable-priority-scheduling"], 17).is_empty());
    assert!(fired(&defaults, 1, &["--retraction-policy", "length"], 17).is_empty());

    assert_eq!(fired(&defaults, 1, &["--enable-quant-communications"], 23), ["QC1"]);
    assert_eq!(fired(&defaults, 2, &["--enable-quant-communications"], 23), ["QC2"]);
    assert!(fired(&defaults, 2, &["--enable-quant-communications", "--device", "npu"], 23).is_empty());
}

#[test]
fn s6_s7_s8_hold_on_every_release() {
    let offload = with(|s| s.decode_offload_kv_cache = true);
    assert_eq!(
        messages("S6", &offload, &FleetSpec::default(), &full()),
        on(
            17..=23,
            "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend \
             is provided."
        )
    );
    let hicache = with(|s| s.hierarchical_cache = true);
    assert_eq!(
        messages("S7", &hicache, &FleetSpec::default(), &full()),
        on(
            17..=23,
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be \
             used at the same time. Please use only one of them."
        )
    );
    let under_radix = with(|s| {
        s.hierarchical_cache = true;
        s.decode_radix_cache = true;
    });
    assert_eq!(messages("S7", &under_radix, &FleetSpec::default(), &full()), vec![None; 7]);
    let out_of_range = FleetSpec { swa_full_tokens_ratio: Some(1.5), ..FleetSpec::default() };
    assert_eq!(
        messages("S8", &DisaggregationSpec::default(), &out_of_range, &full()),
        on(17..=23, "--swa-full-tokens-ratio should be in range (0, 1.0].")
    );
}

#[test]
fn the_automatic_backup_and_its_host_pool_follow_each_release() {
    let unset = DisaggregationSpec::default();
    let effective =
        |patch, settings: &DisaggregationSpec| at(patch, settings, &FleetSpec::default(), &full()).effective;
    assert_eq!(effective(17, &unset).retraction_backup, RetractionBackup::CpuTensor);
    assert_eq!(
        (effective(18, &unset).retraction_backup, effective(18, &unset).host_pool_ratio),
        (RetractionBackup::HostPool, Some(1.0))
    );
    assert_eq!(effective(19, &unset).host_pool_ratio, Some(0.2));
    let unified = with(|s| s.enable_unified_memory = true);
    let backups: Vec<RetractionBackup> = (18..=23).map(|p| effective(p, &unified).retraction_backup).collect();
    use RetractionBackup::{CpuTensor, HostPool};
    assert_eq!(
        backups,
        [HostPool, HostPool, CpuTensor, HostPool, HostPool, HostPool],
        "unified memory excludes host_pool on 0.5.20 only; 0.5.21+ only for hybrid SWA (parity, each wheel)"
    );
    let unified_swa: Vec<RetractionBackup> =
        (18..=23).map(|p| at(p, &unified, &FleetSpec::default(), &hybrid_swa()).effective.retraction_backup).collect();
    assert_eq!(unified_swa, [HostPool, HostPool, CpuTensor, CpuTensor, CpuTensor, CpuTensor]);
    let warned = at(21, &unset, &FleetSpec::default(), &full()).warnings;
    assert!(warned.iter().any(|w| w.contains("max(0.2, one max-length request")), "{warned:?}");
}

#[test]
fn a_release_from_the_spec_wins_over_the_image_and_the_flag() {
    let spec = |version: Option<&str>, image: Option<&str>| -> InferenceDeploymentSpec {
        serde_json::from_value(json!({
            "model": {"name": "m", "config": {"inline": {}}},
            "sglang": version.map(|v| json!({"version": v})),
            "decode": {"image": image},
        }))
        .unwrap()
    };
    let flag = release::choose(v0_5(20), ReleaseSource::Flag).unwrap();
    let chosen = |s: &InferenceDeploymentSpec| resource_release(s, &flag).map(|c| (c.release, c.source));
    assert_eq!(
        chosen(&spec(Some("0.5.18"), Some("lmsysorg/sglang:v0.5.23-cu129"))),
        Ok((v0_5(18), ReleaseSource::Spec))
    );
    assert_eq!(chosen(&spec(None, Some("lmsysorg/sglang:v0.5.22-cu129"))), Ok((v0_5(22), ReleaseSource::Image)));
    assert_eq!(
        chosen(&spec(None, Some("kvpilot/kvpilot:0.1.0"))),
        Ok((v0_5(20), ReleaseSource::Flag)),
        "0.1.0 is no SGLang release"
    );
    assert_eq!(chosen(&spec(None, None)), Ok((v0_5(20), ReleaseSource::Flag)));
    let newer = resource_release(&spec(Some("0.5.30"), None), &flag).unwrap();
    assert_eq!((newer.release, newer.approximate()), (v0_5(23), true));
    assert!(resource_release(&spec(Some("0.5.16"), None), &flag).is_err());
}

#[test]
fn r12_says_which_settings_a_decode_server_without_radix_cache_ignores() {
    let strategy = with(|s| s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer));
    let eviction =
        FleetSpec { extra_args: vec!["--radix-eviction-policy".into(), "lfu".into()], ..FleetSpec::default() };
    let r12 = |settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout, patch, server: bool| {
        let input = PolicyInput::of(settings, layout, v0_5(patch)).with_decode(decode);
        let verdict = if server { evaluate_server(input, ServerRole::Decode, &SpecFields) } else { evaluate(input) };
        verdict.warnings.into_iter().filter(|w| w.starts_with("R12")).collect::<Vec<_>>()
    };
    let found = r12(&strategy, &FleetSpec::default(), &ssm(), 21, true);
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("logs \"KV cache is forced as chunk cache for decode server\""), "{found:?}");
    assert!(found[0].contains("so the Mamba radix cache strategy extra_buffer does nothing there"), "{found:?}");
    let found = r12(&strategy, &eviction, &ssm(), 22, false);
    assert!(found[0].contains("logs \"Radix cache is disabled for decode server\""), "{found:?}");
    assert!(
        found[0].contains("extra_buffer (the prefill servers use it) and --radix-eviction-policy does nothing"),
        "{found:?}"
    );
    // With decode radix cache, or nothing radix-specific set, nothing is said.
    let radix = with(|s| {
        s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer);
        s.decode_radix_cache = true;
    });
    assert!(r12(&radix, &eviction, &ssm(), 23, true).is_empty());
    assert!(r12(&DisaggregationSpec::default(), &FleetSpec::default(), &ssm(), 23, true).is_empty());
    // A strategy on a model without Mamba state is M4's business, not R12's.
    assert!(r12(&strategy, &FleetSpec::default(), &full(), 20, true).is_empty());
}
