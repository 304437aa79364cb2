//! DeepSeek-V4 and V4.1: the DeepSeek-V4 model hook (`arg_groups/deepseek_v4_hook.py`:
//! `apply_deepseek_v4_defaults`, `validate_deepseek_v41_features`, `validate_deepseek_v4_cp`).

use crate::api::{FleetSpec, TransferBackend};
use crate::policy::argv::{given, option_value};
use crate::policy::rules::predicates::{
    CP_STRATEGY, CP_STRATEGY_FIELD, DATA_PARALLEL_FIELD, DECODE_PIPELINE, DEEPSEEK_V4, EAGLE_TOPK_FIELD, HISPARSE,
    RAGGED_VERIFY_ENV, SPECULATIVE_ALGORITHM, TWO_BATCH_OVERLAP, attention_cp_size, eagle_topk_is_one, fleets_in_scope,
    mooncake_or_nixl, pd_servers, prefill_cp_fleets, service_prefill, speculating_pipeline_stages,
    speculative_algorithm,
};
use crate::policy::rules::{EVERY_SERVER, Fix, PD_SERVERS, Rule, RuleInput, text, text_from, when, when_with};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const V1: Rule = Rule {
    id: "V1",
    about: "DeepSeek-V4 speculative algorithm",
    reproduces: "apply_deepseek_v4_defaults, srt/arg_groups/deepseek_v4_hook.py (0.5.17–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    roles: EVERY_SERVER,
    messages: &[text("Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM")],
    check: |c| when(!matches!(deepseek_v4_speculative_algorithm(c)?, "EAGLE" | "DSPARK")),
    fix: Fix::Manual {
        hint: "write speculativeAlgorithm as EAGLE or DSPARK, in capitals: DeepSeek-V4's model hook reads the name \
               as given, before SGLang resolves nextn or NEXTN to EAGLE",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V2: Rule = Rule {
    id: "V2",
    about: "DeepSeek-V4 EAGLE needs one draft token per step",
    reproduces: "apply_deepseek_v4_defaults, srt/arg_groups/deepseek_v4_hook.py (0.5.17–0.5.23)",
    field: EAGLE_TOPK_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM")],
    check: |c| {
        when(
            deepseek_v4_speculative_algorithm(c)? == "EAGLE"
                && fleets_in_scope(c).any(|fleet| !eagle_topk_is_one(&fleet.extra_args)),
        )
    },
    fix: Fix::Manual {
        hint: "add --speculative-eagle-topk 1 to {spec.decode.extraArgs} (and a service's {spec.prefill.extraArgs}): \
               SGLang leaves the top-k unset, which DeepSeek-V4 refuses",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V3_SPECULATIVE: Rule = Rule {
    id: "V3",
    about: "DeepSeek-V4.1 × speculative decoding other than DSpark",
    reproduces: "validate_deepseek_v41_features, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text(
        "DeepSeek-V4.1 does not support speculative decoding other than DSpark yet; disable it to serve this \
         model.",
    )],
    check: |c| when(deepseek_v41(c) && speculative_algorithm(c)? != "DSPARK"),
    fix: Fix::Manual { hint: "set speculativeAlgorithm to DSPARK, or unset it" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V3_HISPARSE: Rule = Rule {
    id: "V3",
    about: "DeepSeek-V4.1 × HiSparse",
    reproduces: "validate_deepseek_v41_features, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: HISPARSE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("DeepSeek-V4.1 does not support HiSparse yet; disable it to serve this model.")],
    check: |c| {
        when(
            deepseek_v41(c)
                && (c.settings.hisparse
                    || service_prefill(c).is_some_and(|fleet| given(&fleet.extra_args, "--enable-hisparse"))),
        )
    },
    fix: Fix::Manual {
        hint: "turn hisparse off (and drop --enable-hisparse from a service's {spec.prefill.extraArgs})",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V3_TWO_BATCH_OVERLAP: Rule = Rule {
    id: "V3",
    about: "DeepSeek-V4.1 × two-batch overlap",
    reproduces: "validate_deepseek_v41_features, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: TWO_BATCH_OVERLAP_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("DeepSeek-V4.1 does not support two-batch overlap yet; disable it to serve this model.")],
    check: |c| when(deepseek_v41(c) && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, TWO_BATCH_OVERLAP))),
    fix: Fix::Manual { hint: "remove --enable-two-batch-overlap from extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V3_PIPELINE: Rule = Rule {
    id: "V3",
    about: "DeepSeek-V4.1 × pipeline parallelism",
    reproduces: "validate_deepseek_v41_features, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: DECODE_PIPELINE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("DeepSeek-V4.1 does not support pipeline parallelism yet; disable it to serve this model.")],
    check: |c| when(deepseek_v41(c) && speculating_pipeline_stages(c) > 1),
    fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const V4: Rule = Rule {
    id: "V4",
    about: "DeepSeek-V4.1 DSpark PD needs Mooncake or NIXL and no context or data parallelism",
    reproduces: "validate_deepseek_v41_features, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    span: Span::since(v0_5(21)),
    roles: PD_SERVERS,
    messages: &[
        text_from(
            21,
            "DeepSeek-V4.1 DSpark PD requires static verify, Mooncake, DP=1 and CP=1. Both servers must enable \
             DSpark with the same block size and TP size.",
        ),
        text_from(
            22,
            "DeepSeek-V4.1 DSpark PD requires static verify, Mooncake or NIXL, DCP=1, and CP=1 on decode. Prefill \
             CP requires --enable-prefill-cp with the interleave strategy. DP attention is supported when both \
             servers use the same block size and target/draft KV layout.",
        ),
    ],
    changes: &[
        text_from(21, "any DP, attention CP or DCP, or a backend other than mooncake"),
        text_from(22, "NIXL and DP allowed; prefill CP with the interleave strategy allowed on prefill"),
    ],
    check: |c| {
        when(
            deepseek_v41(c)
                && c.settings.speculative_algorithm.is_some()
                && pd_servers(c).any(|(fleet, prefill, dcp)| deepseek_v41_dspark_pd_refused(c, fleet, prefill, dcp)),
        )
    },
    fix: Fix::Manual {
        hint: "run DeepSeek-V4.1 DSpark under PD with transferBackend mooncake (0.5.22 and later: or nixl), \
               decodeContextParallel 1, SGLANG_RAGGED_VERIFY_MODE unset or static, no attention context \
               parallelism (a prefill server may run --enable-prefill-cp --cp-strategy interleave from 0.5.22) \
               and, in 0.5.21, no data parallelism; or unset speculativeAlgorithm",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP11: Rule = Rule {
    id: "CP11",
    about: "DeepSeek-V4 prefill CP × a strategy it does not run",
    reproduces: "validate_deepseek_v4_cp, srt/arg_groups/deepseek_v4_hook.py (0.5.17–0.5.23)",
    field: CP_STRATEGY_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("DeepSeekV4 only supports interleave CP strategy, got {strategy}"),
        text_from(21, "DeepSeekV4 only supports interleave/zigzag CP strategy, got {strategy}"),
    ],
    changes: &[text_from(21, "zigzag passes this check (CP12 refuses it on GPUs); a missing strategy does not")],
    check: |c| {
        let strategy = deepseek_v4_prefill_cp_strategies(c).find(|strategy| match strategy {
            None => true,
            Some(strategy) => c.release < v0_5(21) && *strategy != "interleave",
        })?;
        when_with(true, vec![("strategy", strategy.unwrap_or("None").to_string())])
    },
    fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs next to --enable-prefill-cp" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP12: Rule = Rule {
    id: "CP12",
    about: "DeepSeek-V4 prefill CP × the zigzag strategy on a GPU",
    reproduces: "validate_deepseek_v4_cp, srt/arg_groups/deepseek_v4_hook.py (0.5.21–0.5.23)",
    field: CP_STRATEGY_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[
        text("DeepSeekV4 zigzag CP requires the NPU backend; the CUDA backend reindexes with interleave order."),
        text_from(
            22,
            "DeepSeekV4 zigzag CP requires the NPU backend; CUDA/HIP backends reindex with interleave order.",
        ),
    ],
    check: |c| when(deepseek_v4_prefill_cp_strategies(c).any(|strategy| strategy == Some("zigzag"))),
    fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs (zigzag runs on Ascend NPUs only)" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP13: Rule = Rule {
    id: "CP13",
    about: "DeepSeek-V4 prefill CP × DP",
    reproduces: "validate_deepseek_v4_cp, srt/arg_groups/deepseek_v4_hook.py (0.5.17–0.5.23)",
    field: DATA_PARALLEL_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("For round-robin split mode, dp attention is not supported.")],
    check: |c| when(deepseek_v4_prefill_cp_fleets(c).any(|fleet| fleet.data_parallel > 1)),
    fix: Fix::Manual {
        hint: "drop dataParallel (--dp-size, --attn-dp-size) from the prefill-CP servers: DeepSeek-V4's prefill CP \
               spans the whole TP group",
    },
    ..Rule::DEFAULT
};

const TWO_BATCH_OVERLAP_FIELD: &str = "spec.decode.extraArgs[--enable-two-batch-overlap]";

/// The speculative algorithm of a DeepSeek-V4 model as its model hook reads it
/// (`apply_deepseek_v4_defaults`, in the model-specific adjustments, which run before the
/// speculative hook upper-cases and resolves the name): as given.
fn deepseek_v4_speculative_algorithm<'a>(c: &'a RuleInput<'_>) -> Option<&'a str> {
    (c.layout.architecture == DEEPSEEK_V4).then_some(())?;
    c.settings.speculative_algorithm.as_deref()
}

/// Whether the model is DeepSeek-V4.1, whose feature check (`validate_deepseek_v41_features`,
/// 0.5.21 on) reads the config's `model_type`.
fn deepseek_v41(c: &RuleInput<'_>) -> bool {
    c.layout.architecture == DEEPSEEK_V4 && c.layout.model_type.as_deref() == Some("deepseek_v41")
}

/// Whether one PD server of a DeepSeek-V4.1 model that speculates fails the DSpark PD check of
/// `validate_deepseek_v41_features` (0.5.21 on): a ragged verify mode other than static, a
/// transfer backend other than Mooncake (0.5.22 on: or NIXL), decode context parallelism, and
/// attention context parallelism (0.5.22 on: prefill CP too, except on a prefill server that runs
/// it with the interleave strategy); 0.5.21 also refuses data parallelism. `fleet` is the
/// server's, `dcp` its `--dcp-size`; the CP flags are read from its arguments as given (SGLang
/// makes the CP size implicit only later).
fn deepseek_v41_dspark_pd_refused(c: &RuleInput<'_>, fleet: &FleetSpec, prefill: bool, dcp: i32) -> bool {
    let args = &fleet.extra_args;
    let attention_cp = attention_cp_size(args);
    let ragged = fleet.env_value(RAGGED_VERIFY_ENV).is_some_and(|mode| mode != "static");
    let backend = c.settings.transfer_backend;
    if c.release < v0_5(22) {
        return ragged
            || backend != TransferBackend::Mooncake
            || fleet.data_parallel != 1
            || fleet.enable_dp_attention
            || attention_cp != Some(1)
            || dcp != 1;
    }
    let prefill_cp = given(args, "--enable-prefill-cp");
    let supported_prefill_cp = prefill && prefill_cp && option_value(args, "--cp-strategy") == Some("interleave");
    ragged || !mooncake_or_nixl(c) || ((prefill_cp || attention_cp != Some(1)) && !supported_prefill_cp) || dcp != 1
}

/// The fleets in scope that run DeepSeek-V4's prefill CP, which `validate_deepseek_v4_cp` checks
/// in the model hook on every server (CP10-CP13), before the context-parallel hook.
fn deepseek_v4_prefill_cp_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let deepseek_v4 = c.layout.architecture == DEEPSEEK_V4;
    prefill_cp_fleets(c).filter(move |_| deepseek_v4)
}

/// The `--cp-strategy` of each server [`deepseek_v4_prefill_cp_fleets`] yields, None where unset.
fn deepseek_v4_prefill_cp_strategies<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = Option<&'a str>> {
    deepseek_v4_prefill_cp_fleets(c).map(|fleet| option_value(&fleet.extra_args, CP_STRATEGY))
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// DeepSeek-V4's model hook runs before the speculative hook: it takes EAGLE and DSPARK only as
    /// written (V1), EAGLE only with `--speculative-eagle-topk 1` on every server that speculates
    /// (V2), and from 0.5.21 refuses DeepSeek-V4.1 with another algorithm, HiSparse, two-batch
    /// overlap or pipeline stages (V3).
    #[test]
    fn deepseek_v4_s_model_hook_reads_the_algorithm_as_given_and_eagle_s_top_k() {
        let v1 = "Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM";
        let v2 = "Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM";
        let top_k = |k: &str| FleetSpec {
            extra_args: vec!["--speculative-eagle-topk".into(), k.into()],
            ..FleetSpec::default()
        };
        let fired = |verdict: Verdict| {
            verdict.violations.into_iter().filter(|v| v.rule.starts_with('V')).map(|v| v.message).collect::<Vec<_>>()
        };
        for patch in 17..=23 {
            for algorithm in ["nextn", "NEXTN", "eagle", "dspark", "EAGLE3"] {
                assert_eq!(
                    fired(at(patch, &speculating(algorithm), &top_k("1"), &dsv4())),
                    [v1],
                    "{algorithm} 0.5.{patch}"
                );
            }
            assert!(fired(at(patch, &speculating("DSPARK"), &FleetSpec::default(), &dsv4())).is_empty());
            assert!(fired(at(patch, &speculating("EAGLE"), &top_k("1"), &dsv4())).is_empty());
            assert_eq!(fired(at(patch, &speculating("EAGLE"), &FleetSpec::default(), &dsv4())), [v2], "unset is not 1");
            assert_eq!(fired(at(patch, &speculating("EAGLE"), &top_k("2"), &dsv4())), [v2]);
            assert!(fired(at(patch, &speculating("nextn"), &FleetSpec::default(), &mla())).is_empty(), "DeepSeek-V3");
        }
        // A service's prefill servers run the same algorithm and need the top-k too.
        let prefill = FleetSpec::default();
        let service = evaluate(
            PolicyInput::of(&speculating("EAGLE"), &dsv4(), v0_5(23))
                .with_decode(&top_k("1"))
                .with_prefill(Some(&prefill)),
        );
        assert_eq!(fired(service), [v2]);

        let v41 = layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
            "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 128]
        }));
        let v3 =
            |feature: &str| format!("DeepSeek-V4.1 does not support {feature} yet; disable it to serve this model.");
        assert!(fired(at(20, &speculating("EAGLE"), &top_k("1"), &v41)).is_empty(), "0.5.20 has no V4.1 check");
        assert_eq!(
            fired(at(21, &speculating("EAGLE"), &top_k("1"), &v41)),
            [v3("speculative decoding other than DSpark")]
        );
        assert!(
            !fired(at(21, &speculating("dspark"), &top_k("1"), &v41))
                .contains(&v3("speculative decoding other than DSpark"))
        );
        let hisparse = with(|s| s.hisparse = true);
        assert!(fired(at(22, &hisparse, &FleetSpec::default(), &v41)).contains(&v3("HiSparse")));
        let overlap = FleetSpec { extra_args: vec!["--enable-two-batch-overlap".into()], ..FleetSpec::default() };
        assert_eq!(fired(at(23, &DisaggregationSpec::default(), &overlap, &v41)), [v3("two-batch overlap")]);
        let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        assert_eq!(fired(at(23, &DisaggregationSpec::default(), &stages, &v41)), [v3("pipeline parallelism")]);
        assert!(fired(at(23, &DisaggregationSpec::default(), &stages, &dsv4())).is_empty(), "DeepSeek-V4 runs PP");
    }

    /// DeepSeek-V4.1 DSpark under PD (0.5.21 on) needs static ragged verify, Mooncake (0.5.22 on: or
    /// NIXL), no DCP and no attention CP; 0.5.21 refuses DP too, 0.5.22 lets a prefill server run
    /// prefill CP with the interleave strategy (V4).
    #[test]
    fn deepseek_v41_dspark_pd_needs_mooncake_or_nixl_and_no_context_parallelism() {
        let v41 = layout_at(json!({
            "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 4,
            "sliding_window": 128, "head_dim": 512, "compress_ratios": [0, 2, 4, 128]
        }));
        let dspark = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.speculative_algorithm = Some("DSPARK".into());
                edit(s);
            })
        };
        let v4 = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec| {
            at(patch, settings, decode, &v41).violations.into_iter().any(|v| v.rule == "V4")
        };
        let plain = FleetSpec::default();
        for patch in 21..=23 {
            assert!(!v4(patch, &dspark(|_| ()), &plain), "0.5.{patch}");
            assert!(v4(patch, &dspark(|s| s.transfer_backend = TransferBackend::Mori), &plain));
            assert!(v4(patch, &dspark(|s| s.decode_context_parallel = 2), &plain));
            assert!(v4(patch, &dspark(|_| ()), &env_fleet("SGLANG_RAGGED_VERIFY_MODE", "compact")));
            assert!(!v4(patch, &dspark(|_| ()), &env_fleet("SGLANG_RAGGED_VERIFY_MODE", "static")));
            let cp = FleetSpec { extra_args: vec!["--attn-cp-size".into(), "2".into()], ..FleetSpec::default() };
            assert!(v4(patch, &dspark(|_| ()), &cp), "decode attention CP");
        }
        let nixl = dspark(|s| s.transfer_backend = TransferBackend::Nixl);
        assert!(v4(21, &nixl, &plain) && !v4(22, &nixl, &plain));
        let dp = FleetSpec { data_parallel: 2, enable_dp_attention: true, ..FleetSpec::default() };
        assert!(v4(21, &dspark(|_| ()), &dp) && !v4(22, &dspark(|_| ()), &dp));
        assert!(!v4(20, &dspark(|s| s.transfer_backend = TransferBackend::Mori), &plain), "0.5.20 has no V4.1 check");
        assert!(!v4(23, &with(|s| s.transfer_backend = TransferBackend::Mori), &plain), "without speculative decoding");

        // A service's prefill servers: prefill CP with the interleave strategy passes from 0.5.22.
        let service = |patch: u16, prefill_args: &[&str]| {
            let prefill =
                FleetSpec { extra_args: prefill_args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
            evaluate(
                PolicyInput::of(&dspark(|_| ()), &v41, v0_5(patch)).with_decode(&plain).with_prefill(Some(&prefill)),
            )
            .violations
            .into_iter()
            .any(|v| v.rule == "V4")
        };
        let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave", "--attn-cp-size", "2"];
        assert!(!service(22, &interleave));
        assert!(service(21, &interleave));
        assert!(service(22, &["--enable-prefill-cp", "--cp-strategy", "zigzag"]));
        assert!(service(23, &["--dcp-size", "2"]));
    }
}
