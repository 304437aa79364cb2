//! The verdict for an SGLang server that is not a PD decode server (a prefill server, or one
//! without disaggregation): the decode-side rules do not apply to it, SGLang's own checks for
//! such servers (§1.4 S1, S5; §2.2 R21) do.

use super::{Phase, PolicyInput, Scope, Verdict, Violation, evaluate_on, rules};
use crate::api::{OnInvalid, RetractionBackup, TransferBackend};

/// Rules of [`rules::RULES`] that SGLang applies on every PD server, prefill included (R20, M1, the
/// unified-memory rules about PD, L7, T11: the prefill's KV manager compares its target and draft
/// pools too, T1hnd: it registers its pool's buffers too, DeepSeek-V4.1's DSpark PD check V4, DSA
/// DCP's K2, MiniCPM's sparse attention MC3, Qwen4-Exp's MORI check QX1, and the pipeline checks of
/// SGLANG_ENABLE_PP_SPEC under PD, PP3 and PP4, and the encoder hook's refusal of an encoder-only
/// PD server, EN1, a language-model-only one, LO1, unified memory's need for lazy compaction
/// under PD, U16, the Rust server's bootstrap port on a prefill server, BP1, and the response store
/// and the watermark under PD, RS1 and WM1, and prefill_complete allocation, PC1 and PC3), or on
/// any server (M3, S8, HiCache × DCP, the unified-memory pool's other
/// exclusions, HiCache, LMCache and the linker without a radix cache S7, L3 and X1, which read the
/// server's own, the other LMCache and linker rules, the tree cache's checks H1, H2, H5, H6, N5 and
/// N6, DeepSeek-V4's host pool size H7, the speculative hook's SD1-SD5 and SD7-SD17, IQuest Q1's
/// MTP draft checks IQ9-IQ16, DeepSeek-V4's model hook's V1-V3, the DeepSeek family's model
/// overrides K1, K3-K5, and the other families' MC1, MC2, E1, QX2, IQ1-IQ8, NH1 and NH2, MiMo-V2's
/// fused QKV checks MV1 and MV2, the context-parallel hook's CP1-CP5, CP7 and CP8, the DSA KV cache
/// dtype checks DT1 and DT2, the data-parallel shape checks DP1-DP4, pipeline stages with
/// speculative decoding PP1, HiSparse's model and radix cache checks HS1 and HS2, decode CP with
/// prefill CP DC1, the DP LM head on data-parallel replicas LH1, the TP LM-head all-to-all's checks
/// LH2-LH5, the architectures --language-model-only serves, LO2, the DeepSeek family's prefill-CP
/// asserts CP9-CP13, MiMo-V2's HiCache check MV3, buffer-only host memory's H3 and H8, and DSA's
/// pooled index keys with DCP, K6, and DWDP's checks but its refusal of a decode server,
/// WD1 and WD3-WD6, the watermark's other checks, WM2-WM4, the decode-CP hook's checks of its
/// communication flags, DF1-DF3, priority retraction, RP1, quantized communications, QC1 and QC2,
/// DSA cache layer split's checks but its role's, LS0 and LS3-LS5, the linker's MLA
/// deduplication, LD1, and the DFLASH handler's block size checks, DB1-DB3).
const ON_EVERY_PD_SERVER: &[&str] = &[
    "R20", "M1", "U1", "U2", "U3", "U4c", "U9", "L7", "T11", "T1hnd", "V4", "K2", "MC3", "QX1", "PP3", "PP4", "EN1",
    "U16", "LO1", "BP1", "RS1", "WM1", "PC1", "PC3",
];
const ON_EVERY_SERVER: &[&str] = &[
    "M2", "M3", "M4", "M5", "M6", "M7", "S7", "S8", "F3", "F5", "L1", "L2", "L3", "L4", "L5", "L6", "L8", "X1", "X2",
    "X3", "X4", "X5", "D1", "D2", "D3", "D4", "D5", "D6", "U4", "U8", "U10", "U11", "U13", "U15", "H1", "H2", "H5",
    "H6", "H7", "N5", "N6", "SD1", "SD2", "SD3", "SD4", "SD5", "SD7", "SD8", "SD9", "SD10", "SD11", "SD12", "SD13",
    "SD14", "SD15", "SD16", "V1", "V2", "V3", "K1", "K3", "K4", "K5", "MC1", "MC2", "E1", "QX2", "IQ1", "IQ2", "IQ3",
    "IQ4", "IQ5", "IQ6", "IQ7", "IQ8", "IQ9", "IQ10", "IQ11", "IQ12", "IQ13", "IQ14", "IQ15", "IQ16", "CP1", "CP2",
    "CP3", "CP4", "CP5", "CP7", "CP8", "NH1", "NH2", "MV1", "MV2", "DT1", "DT2", "DP1", "DP2", "DP3", "DP4", "PP1",
    "HS1", "HS2", "DC1", "LH1", "SD17", "LO2", "LH2", "LH3", "LH4", "LH5", "CP9", "CP10", "CP11", "CP12", "CP13",
    "MV3", "H3", "H8", "K6", "WD1", "WD3", "WD4", "WD5", "WD6", "WM2", "WM3", "WM4", "DF1", "DF2", "DF3", "RP1", "QC1",
    "QC2", "LS0", "LS3", "LS4", "LS5", "LD1", "DB1", "DB2", "DB3",
];
/// Rules SGLang applies on servers without PD but not on prefill ones (DSPARK's pipeline stages,
/// SD6, EAGLE's, PP2, PP5 and PP6, KV cache sharding, KS1, prefill_complete allocation as such a
/// server's PD hook lists it, PC2, and DSA cache layer split, LS2).
const WITHOUT_PD: &[&str] = &["SD6", "PP2", "PP5", "PP6", "KS1", "PC2", "LS2"];

/// Checks a prefill server (`prefill`) or a server without disaggregation. Nothing is
/// rewritten: each finding here asks for a flag to be dropped or changed by hand.
pub fn evaluate_non_decode(input: PolicyInput<'_>, prefill: bool) -> Verdict {
    let settings = crate::api::DisaggregationSpec { on_invalid: OnInvalid::Reject, ..input.disaggregation.clone() };
    let mut verdict = evaluate_on(PolicyInput { disaggregation: &settings, ..input }, Scope::OtherServer);
    let mut violations = Vec::new();
    if settings.retraction_backup == Some(RetractionBackup::HostPool) {
        violations.push(Violation {
            rule: "S1",
            field: rules::RETRACTION_BACKUP,
            message: "--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode server."
                .into(),
            fix: "drop --disaggregation-decode-retraction-backup from servers that are not PD decode servers".into(),
            phase: Phase::Args.as_str(),
        });
    }
    if settings.decode_offload_kv_cache {
        violations.push(Violation {
            rule: "S5",
            field: "spec.disaggregation.decodeOffloadKvCache",
            message: "The argument disaggregation-decode-enable-offload-kvcache is only supported for decode side."
                .into(),
            fix: "drop --disaggregation-decode-enable-offload-kvcache from servers that are not PD decode servers"
                .into(),
            phase: Phase::Args.as_str(),
        });
    }
    if prefill && settings.transfer_backend == TransferBackend::Fake {
        violations.push(Violation {
            rule: "R21",
            field: "spec.disaggregation.transferBackend",
            message: "Prefill server does not support 'fake' as the transfer backend".into(),
            fix: "use a real transfer backend (mooncake, nixl or mori) on the prefill server".into(),
            phase: Phase::Args.as_str(),
        });
    }
    violations.extend(verdict.violations.into_iter().filter(|v| {
        ON_EVERY_SERVER.contains(&v.rule)
            || (prefill && ON_EVERY_PD_SERVER.contains(&v.rule))
            || (!prefill && WITHOUT_PD.contains(&v.rule))
    }));
    verdict.outcome = if violations.is_empty() { super::Outcome::Valid } else { super::Outcome::Rejected };
    verdict.violations = violations;
    // The remaining warnings are about the decode side's pool and pairing.
    verdict.warnings.clear();
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DisaggregationSpec, FleetSpec, MambaRadixCacheStrategy};
    use crate::layout::{ResolveOptions, resolve};

    fn layout() -> crate::api::AttentionLayout {
        let config = serde_json::from_str(include_str!("../../tests/fixtures/configs/llama-3.1-8b-instruct.json"));
        resolve(&config.unwrap(), ResolveOptions::default()).unwrap()
    }

    fn rules_of(settings: &DisaggregationSpec, prefill: bool) -> Vec<&'static str> {
        let layout = layout();
        let decode = FleetSpec::default();
        let input = PolicyInput {
            disaggregation: settings,
            decode: &decode,
            layout: &layout,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: None,
            release: crate::release::Release::newest_known(),
        };
        evaluate_non_decode(input, prefill).violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn decode_only_settings_are_refused_off_the_decode_side() {
        let settings = DisaggregationSpec {
            retraction_backup: Some(RetractionBackup::HostPool),
            decode_offload_kv_cache: true,
            transfer_backend: TransferBackend::Fake,
            mamba_radix_cache_strategy: Some(MambaRadixCacheStrategy::ExtraBufferLazy),
            ..DisaggregationSpec::default()
        };
        // The Llama model keeps no Mamba state: the lazy strategy is refused as such (M4, 0.5.21+).
        assert_eq!(rules_of(&settings, true), ["S1", "S5", "R21", "M4"]);
        assert_eq!(rules_of(&settings, false), ["S1", "S5", "M4"]);
        // Decode radix cache is a decode-side flag SGLang ignores elsewhere.
        let radix = DisaggregationSpec { decode_radix_cache: true, ..DisaggregationSpec::default() };
        assert!(rules_of(&radix, true).is_empty());
    }

    #[test]
    fn the_swa_ratio_range_holds_on_every_server() {
        let layout = layout();
        let settings = DisaggregationSpec::default();
        let decode = FleetSpec { swa_full_tokens_ratio: Some(0.0), ..FleetSpec::default() };
        let input = PolicyInput {
            disaggregation: &settings,
            decode: &decode,
            layout: &layout,
            draft: None,
            draft_is_the_model: false,
            prefill_fleet: None,
            release: crate::release::Release::newest_known(),
        };
        for prefill in [true, false] {
            let rules: Vec<_> = evaluate_non_decode(input, prefill).violations.iter().map(|v| v.rule).collect();
            assert_eq!(rules, ["S8"], "prefill: {prefill}");
        }
    }

    #[test]
    fn a_prefill_server_compares_its_deepseek_v4_draft_pool_too() {
        let dsv4 = |window: u64, arch: &str| {
            let config = serde_json::json!({
                "architectures": [arch], "num_hidden_layers": 2, "sliding_window": window, "head_dim": 512,
                "compress_ratios": [0, 4]
            });
            resolve(&config, ResolveOptions::default()).unwrap()
        };
        let (target, draft) = (dsv4(128, "DeepseekV4ForCausalLM"), dsv4(64, "DeepseekV4ForCausalLMNextN"));
        let settings =
            DisaggregationSpec { speculative_algorithm: Some("EAGLE".into()), ..DisaggregationSpec::default() };
        // DeepSeek-V4 runs EAGLE with one draft token per step only (V2).
        let decode =
            FleetSpec { extra_args: vec!["--speculative-eagle-topk".into(), "1".into()], ..FleetSpec::default() };
        let input = PolicyInput {
            disaggregation: &settings,
            decode: &decode,
            layout: &target,
            draft: Some(&draft),
            draft_is_the_model: false,
            prefill_fleet: None,
            release: crate::release::Release::newest_known(),
        };
        let rules = |prefill| evaluate_non_decode(input, prefill).violations.iter().map(|v| v.rule).collect::<Vec<_>>();
        assert_eq!(rules(true), ["T11"]);
        assert!(rules(false).is_empty(), "without PD no KV manager compares the pools");
    }

    #[test]
    fn lmcache_is_refused_on_a_prefill_server_and_checked_for_its_conflicts_everywhere() {
        let lmcache = DisaggregationSpec { lmcache: true, ..DisaggregationSpec::default() };
        assert_eq!(rules_of(&lmcache, true), ["L7"]);
        // Without PD disaggregation LMCache runs; decode radix cache is not what it needs there.
        assert!(rules_of(&lmcache, false).is_empty());
        let with_hicache = DisaggregationSpec { hierarchical_cache: true, ..lmcache };
        assert_eq!(rules_of(&with_hicache, false), ["L1"]);
        assert_eq!(rules_of(&with_hicache, true), ["L1", "L7"]);
    }
}
