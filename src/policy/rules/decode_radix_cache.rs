//! Decode radix cache (`--disaggregation-decode-enable-radix-cache`) by layout and by what it cannot serve:
//! the PD hook (`arg_groups/pd_disaggregation_hook.py`), the speculative hook from 0.5.23, and the tree the
//! KV cache builder makes for it.

use super::predicates::{DECODE_RADIX_CACHE, UNIFIED_RADIX_TREE_ENV, radix, radix_off, resolved_speculative_algorithm};
use super::{Fix, Phase, Rule, text, text_from, when, when_with};
use crate::api::{FleetSpec, LayoutFeature, TransferBackend};
use crate::release::{Span, v0_5};

pub(super) const R13: Rule = Rule {
    id: "R13",
    about: "decode radix × SWA",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.17–0.5.20)",
    field: DECODE_RADIX_CACHE,
    span: Span::between(v0_5(17), v0_5(20)),
    phase: Phase::PoolBuild,
    messages: &[
        text("--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention (SWA) models"),
        text_from(
            19,
            "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the \
             unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).",
        ),
    ],
    changes: &[
        text_from(17, "every hybrid-SWA model"),
        text_from(
            19,
            "unless SGLANG_ENABLE_UNIFIED_RADIX_TREE is set; kvpilot sets it unless spec.decode.env sets it false",
        ),
    ],
    check: |c| {
        // 0.5.17–0.5.18 refuse every SWA model; 0.5.19–0.5.20 want the env var, which kvpilot
        // adds to the decode pods unless the spec sets it to something false.
        let blanket = c.release < v0_5(19);
        when(radix(c) && c.layout.is_hybrid_swa() && (blanket || env_set_falsy(c.decode, UNIFIED_RADIX_TREE_ENV)))
    },
    fix: Fix::Rewrite {
        apply: radix_off,
        hint: "turn decodeRadixCache off (SGLang 0.5.19–0.5.20: or drop the false SGLANG_ENABLE_UNIFIED_RADIX_TREE \
               from {spec.decode.env}; 0.5.21 and later allow it)",
    },
    ..Rule::DEFAULT
};

pub(super) const R14: Rule = Rule {
    id: "R14",
    about: "decode radix × SWA × HiCache",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.19–0.5.22); \
                 validate_decode_radix_cache, srt/mem_cache/kv_cache_builder.py (0.5.23)",
    field: DECODE_RADIX_CACHE,
    span: Span::since(v0_5(19)),
    phase: Phase::PoolBuild,
    messages: &[text(
        "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently supports \
         only device-resident cache and is incompatible with --enable-hierarchical-cache.",
    )],
    check: |c| when(radix(c) && c.layout.is_hybrid_swa() && c.settings.hierarchical_cache),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache or hierarchicalCache off" },
    ..Rule::DEFAULT
};

pub(super) const R15: Rule = Rule {
    id: "R15",
    about: "decode radix × DeepSeek-V4",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.19–0.5.22); \
                 validate_decode_radix_cache, srt/mem_cache/kv_cache_builder.py (0.5.23)",
    field: DECODE_RADIX_CACHE,
    span: Span::since(v0_5(19)),
    phase: Phase::PoolBuild,
    messages: &[
        text(
            "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV \
             (c4/c128/indexer) yet.",
        ),
        text_from(
            23,
            "--disaggregation-decode-enable-radix-cache with DeepSeek-V4 requires the unified KV layout \
             (SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton).",
        ),
    ],
    changes: &[text_from(23, "allowed with SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton")],
    check: |c| {
        let unified_kv = c.release >= v0_5(23)
            && c.decode.env_value("SGLANG_HACK_FLASHMLA_BACKEND").is_some_and(|v| v.trim() == "unified_kv_triton");
        when(radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::DeepseekV4) && !unified_kv)
    },
    fix: Fix::Rewrite {
        apply: radix_off,
        hint: "turn decodeRadixCache off (SGLang 0.5.23 and later: or set \
               SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton in {spec.decode.env})",
    },
    ..Rule::DEFAULT
};

pub(super) const R16: Rule = Rule {
    id: "R16",
    about: "decode radix × SWA-compress",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.19–0.5.22); \
                 validate_decode_radix_cache, srt/mem_cache/kv_cache_builder.py (0.5.23)",
    field: DECODE_RADIX_CACHE,
    span: Span::since(v0_5(19)),
    phase: Phase::PoolBuild,
    messages: &[text(
        "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) \
         yet.",
    )],
    check: |c| when(radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::SwaCompress)),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off" },
    ..Rule::DEFAULT
};

pub(super) const R17: Rule = Rule {
    id: "R17",
    about: "decode radix × SSM",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.17–0.5.20)",
    field: DECODE_RADIX_CACHE,
    span: Span::between(v0_5(17), v0_5(20)),
    phase: Phase::PoolBuild,
    messages: &[text("--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models")],
    check: |c| when(radix(c) && c.layout.uses_ssm_state()),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off (SGLang 0.5.21 and later allow it)" },
    ..Rule::DEFAULT
};

pub(super) const R18A: Rule = Rule {
    id: "R18a",
    about: "decode radix × HiSparse",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: DECODE_RADIX_CACHE,
    messages: &[text("--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse")],
    check: |c| when(radix(c) && c.settings.hisparse),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or turn hisparse off" },
    ..Rule::DEFAULT
};

pub(super) const R18B: Rule = Rule {
    id: "R18b",
    about: "decode radix × fake backend",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: DECODE_RADIX_CACHE,
    messages: &[text(
        "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake",
    )],
    check: |c| when(radix(c) && c.settings.transfer_backend == TransferBackend::Fake),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or use a real transfer backend" },
    ..Rule::DEFAULT
};

pub(super) const R18C: Rule = Rule {
    id: "R18c",
    about: "decode radix × speculative decoding",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.22); \
                 handle_speculative_decoding, srt/arg_groups/speculative_hook.py (0.5.23)",
    field: DECODE_RADIX_CACHE,
    messages: &[text(
        "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding \
         (--speculative-algorithm {algorithm})",
    )],
    changes: &[
        text_from(17, "any algorithm"),
        text_from(21, "DSPARK allowed"),
        text_from(23, "DSPARK, EAGLE, EAGLE3 and NEXTN allowed"),
    ],
    check: |c| {
        let given = c.settings.speculative_algorithm.as_deref().filter(|_| radix(c))?;
        // Up to 0.5.22 the PD hook checks the name as given, before the speculative hook
        // upper-cases it; 0.5.23's speculative hook checks the resolved name (NEXTN is EAGLE).
        // Algorithms that keep decode radix cache: DSPARK from 0.5.21, EAGLE/EAGLE3 from 0.5.23.
        let (algorithm, allowed): (String, &[&str]) = if c.release >= v0_5(23) {
            (resolved_speculative_algorithm(c)?, &["DSPARK", "EAGLE", "EAGLE3"])
        } else if c.release >= v0_5(21) {
            (given.to_string(), &["DSPARK"])
        } else {
            (given.to_string(), &[])
        };
        when_with(!allowed.contains(&algorithm.as_str()), vec![("algorithm", algorithm)])
    },
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or drop speculativeAlgorithm" },
    ..Rule::DEFAULT
};

/// Whether the decode env sets `name` to something other than a truthy value.
fn env_set_falsy(decode: &FleetSpec, name: &str) -> bool {
    decode.env_value(name).is_some() && !decode.env_on(name)
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    fn unified_radix_tree() -> FleetSpec {
        FleetSpec { env: vec![env_var("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1")], ..FleetSpec::default() }
    }

    #[test]
    fn r13_to_r17_decode_radix_cache_by_layout() {
        let radix = || with(|s| s.decode_radix_cache = true);
        // 0.5.19–0.5.20: kvpilot sets the env var the release needs; a spec that sets it false is R13.
        let added = run(&radix(), &FleetSpec::default(), &hybrid_swa());
        assert_eq!(added.outcome, Outcome::Valid);
        assert_eq!(added.effective.decode_env, vec![env_var("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1")]);
        let turned_off =
            FleetSpec { env: vec![env_var("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "0")], ..FleetSpec::default() };
        assert_rewritable(
            radix(),
            &turned_off,
            &hybrid_swa(),
            "R13",
            RADIX,
            "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the unified \
             radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).",
            ("true", "false"),
        );
        assert_eq!(run(&radix(), &unified_radix_tree(), &hybrid_swa()).outcome, Outcome::Valid);
        assert_rewritable(
            with(|s| {
                s.decode_radix_cache = true;
                s.hierarchical_cache = true;
            }),
            &unified_radix_tree(),
            &hybrid_swa(),
            "R14",
            RADIX,
            "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently supports only \
             device-resident cache and is incompatible with --enable-hierarchical-cache.",
            ("true", "false"),
        );
        assert_rewritable(
            radix(),
            &unified_radix_tree(),
            &dsv4(),
            "R15",
            RADIX,
            "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV (c4/c128/indexer) yet.",
            ("true", "false"),
        );
        assert_rewritable(
            radix(),
            &unified_radix_tree(),
            &gemma4(),
            "R16",
            RADIX,
            "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) yet.",
            ("true", "false"),
        );
        assert_rewritable(
            radix(),
            &FleetSpec::default(),
            &ssm(),
            "R17",
            RADIX,
            "--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models",
            ("true", "false"),
        );
        assert_eq!(run(&radix(), &FleetSpec::default(), &full()).outcome, Outcome::Valid);
    }

    #[test]
    fn r18_decode_radix_cache_with_fake_backend_or_speculation() {
        assert_rewritable(
            with(|s| {
                s.decode_radix_cache = true;
                s.transfer_backend = TransferBackend::Fake;
            }),
            &FleetSpec::default(),
            &full(),
            "R18b",
            RADIX,
            "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake",
            ("true", "false"),
        );
        assert_rewritable(
            with(|s| {
                s.decode_radix_cache = true;
                s.speculative_algorithm = Some("EAGLE".into());
            }),
            &FleetSpec::default(),
            &full(),
            "R18c",
            RADIX,
            "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding (--speculative-algorithm EAGLE)",
            ("true", "false"),
        );
    }

    #[test]
    fn r13_is_a_blanket_refusal_until_0_5_18_wants_the_env_var_until_0_5_20_and_is_gone_after() {
        let radix = with(|s| s.decode_radix_cache = true);
        let blanket =
            "--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention (SWA) models";
        assert_eq!(messages("R13", &radix, &FleetSpec::default(), &hybrid_swa()), on(17..=18, blanket));
        let off = env_fleet("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "0");
        let needs_env = "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the \
                         unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).";
        assert_eq!(
            messages("R13", &radix, &off, &hybrid_swa()),
            concat(&[on(17..=18, blanket), on(19..=20, needs_env)])
        );
        for patch in 17..=23 {
            let added = at(patch, &radix, &FleetSpec::default(), &hybrid_swa()).effective.decode_env;
            assert_eq!(added.len(), usize::from((19..=20).contains(&patch)), "0.5.{patch}: {added:?}");
        }
    }

    #[test]
    fn r17_and_the_dcp_chunk_cache_rules_end_with_0_5_20() {
        let radix = with(|s| s.decode_radix_cache = true);
        assert_eq!(
            messages("R17", &radix, &FleetSpec::default(), &ssm()),
            on(17..=20, "--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models")
        );
        let dcp_radix = with(|s| {
            s.decode_radix_cache = true;
            s.decode_context_parallel = 2;
        });
        let verdicts: Vec<bool> = (17..=23)
            .map(|p| at(p, &dcp_radix, &FleetSpec::default(), &mla()).violations.iter().any(|v| v.rule == "R19"))
            .collect();
        assert_eq!(verdicts, [true, true, true, true, false, false, false]);
    }

    #[test]
    fn r15_changes_text_and_condition_in_0_5_23() {
        let radix = with(|s| s.decode_radix_cache = true);
        let old = "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV \
                   (c4/c128/indexer) yet.";
        let new = "--disaggregation-decode-enable-radix-cache with DeepSeek-V4 requires the unified KV layout \
                   (SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton).";
        assert_eq!(
            messages("R15", &radix, &FleetSpec::default(), &dsv4()),
            concat(&[on(19..=22, old), on(23..=23, new)])
        );
        let unified_kv = env_fleet("SGLANG_HACK_FLASHMLA_BACKEND", "unified_kv_triton");
        assert_eq!(messages("R15", &radix, &unified_kv, &dsv4()), on(19..=22, old));
    }

    #[test]
    fn r18_speculative_algorithms_decode_radix_cache_allows_per_release() {
        let with_algorithm = |algorithm: &str| {
            with(|s| {
                s.decode_radix_cache = true;
                s.speculative_algorithm = Some(algorithm.into());
            })
        };
        let fires = |algorithm: &str| -> Vec<bool> {
            messages("R18c", &with_algorithm(algorithm), &FleetSpec::default(), &full())
                .iter()
                .map(Option::is_some)
                .collect()
        };
        assert_eq!(fires("EAGLE"), [true, true, true, true, true, true, false]);
        assert_eq!(fires("DSPARK"), [true, true, true, true, false, false, false]);
        assert_eq!(fires("NGRAM"), [true; 7]);
        // Up to 0.5.22 the PD hook compares the name as given; 0.5.23 the resolved, upper-cased one.
        assert_eq!(fires("dspark"), [true, true, true, true, true, true, false]);
        assert_eq!(fires("nextn"), [true, true, true, true, true, true, false]);
        let r18c = |algorithm: &str, patch: u16| {
            at(patch, &with_algorithm(algorithm), &FleetSpec::default(), &full())
                .violations
                .into_iter()
                .find(|v| v.rule == "R18c")
                .map(|v| v.message)
        };
        let message = |name: &str| {
            format!(
                "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding \
                 (--speculative-algorithm {name})"
            )
        };
        assert_eq!(r18c("ngram", 22), Some(message("ngram")));
        assert_eq!(r18c("ngram", 23), Some(message("NGRAM")));
        // EAGLE with a Gemma-4 assistant draft runs as FROZEN_KV_MTP, which 0.5.23 refuses.
        let assistant: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/parity/gemma-4-assistant.json"))
                .unwrap();
        let assistant = layout_at(assistant);
        let verdict = at_with_draft(23, &with_algorithm("EAGLE"), &full(), Some(&assistant));
        let refused = verdict.violations.into_iter().find(|v| v.rule == "R18c").map(|v| v.message);
        assert_eq!(refused, Some(message("FROZEN_KV_MTP")));
    }

    #[test]
    fn r18a_decode_radix_cache_refuses_hisparse_in_every_release() {
        let settings = with(|s| {
            s.decode_radix_cache = true;
            s.hisparse = true;
        });
        assert_eq!(
            messages("R18a", &settings, &FleetSpec::default(), &full()),
            on(17..=23, "--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse")
        );
        assert_eq!(messages("R18a", &with(|s| s.hisparse = true), &FleetSpec::default(), &full()), vec![None; 7]);
    }
}
