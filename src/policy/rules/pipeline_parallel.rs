//! Pipeline stages with speculative decoding: the validation hook's pipeline statements
//! (`arg_groups/validation_hook.py`) and `SGLANG_ENABLE_PP_SPEC`.

use super::predicates::{
    DECODE_DP_ATTENTION, DECODE_PIPELINE, fleets_in_scope, multi_layer_eagle, resolved_speculative_algorithm,
    service_prefill,
};
use super::{EVERY_SERVER, Fix, NOT_PREFILL, PD_SERVERS, Rule, RuleInput, Subject, text, text_from, when};
use crate::api::FleetSpec;
use crate::policy::argv::given;
use crate::release::{Span, v0_5};

pub(super) const PP1: Rule = Rule {
    id: "PP1",
    about: "pipeline stages × speculative decoding",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.20); \
                 check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: DECODE_PIPELINE,
    roles: EVERY_SERVER,
    messages: &[
        text("Pipeline parallelism is not compatible with overlap schedule, speculative decoding"),
        text_from(21, "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding"),
    ],
    changes: &[text_from(21, "EAGLE without multi-layer EAGLE and DSPARK pass (PP2-PP6 and SD6 check them)")],
    check: |c| {
        let algorithm = resolved_speculative_algorithm(c)?;
        let refused = |fleet: &FleetSpec| match algorithm.as_str() {
            // Their own pipeline checks run first, in the speculative hook: DFLASH's (SD3), and
            // DSPARK's (SD9 up to 0.5.20, SD6 from 0.5.21, which lets PD prefill servers pass).
            "DFLASH" | "DSPARK" => false,
            "EAGLE" => c.release < v0_5(21) || multi_layer_eagle(c, &fleet.extra_args),
            _ => true,
        };
        when(fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1 && refused(fleet)))
    },
    fix: Fix::Manual {
        hint: "set pipelineParallel to 1 on the fleets that speculate, or turn speculative decoding off (from \
               SGLang 0.5.21 EAGLE without multi-layer EAGLE runs pipeline stages on PD prefill servers)",
    },
    ..Rule::DEFAULT
};

pub(super) const PP2: Rule = Rule {
    id: "PP2",
    about: "pipeline stages × EAGLE off a PD prefill server",
    reproduces: "check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: DECODE_PIPELINE,
    span: Span::since(v0_5(21)),
    roles: NOT_PREFILL,
    messages: &[text(
        "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)",
    )],
    check: |c| when(pipelined_eagle(c, c.decode) && !c.decode.env_on(PP_SPEC_ENV)),
    fix: Fix::Manual {
        hint: "set the decode pipelineParallel to 1 (EAGLE runs pipeline stages on PD prefill servers only), or \
               turn speculative decoding off",
    },
    ..Rule::DEFAULT
};

pub(super) const PP3: Rule = Rule {
    id: "PP3",
    about: "SGLANG_ENABLE_PP_SPEC × DSPARK on a PD prefill server",
    reproduces: "check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: PP_SPEC_ENV_FIELD,
    span: Span::since(v0_5(21)),
    roles: PD_SERVERS,
    messages: &[text("SGLANG_ENABLE_PP_SPEC does not support DSPARK PD prefill")],
    check: |c| {
        let prefill = service_prefill(c).or((c.subject == Subject::OtherServer).then_some(c.decode));
        when(
            resolved_speculative_algorithm(c)? == "DSPARK"
                && prefill.is_some_and(|fleet| fleet.pipeline_parallel > 1 && fleet.env_on(PP_SPEC_ENV)),
        )
    },
    fix: Fix::Manual { hint: "unset SGLANG_ENABLE_PP_SPEC in the prefill fleet's env" },
    ..Rule::DEFAULT
};

pub(super) const PP4: Rule = Rule {
    id: "PP4",
    about: "SGLANG_ENABLE_PP_SPEC under PD",
    reproduces: "check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: PP_SPEC_ENV_FIELD,
    span: Span::since(v0_5(21)),
    roles: PD_SERVERS,
    messages: &[text("SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode")],
    check: |c| when(fleets_in_scope(c).any(|fleet| pipelined_eagle(c, fleet) && fleet.env_on(PP_SPEC_ENV))),
    fix: Fix::Manual {
        hint: "unset SGLANG_ENABLE_PP_SPEC in the env of the PD servers (it runs EAGLE's pipeline stages on \
               servers without PD only)",
    },
    ..Rule::DEFAULT
};

pub(super) const PP5: Rule = Rule {
    id: "PP5",
    about: "SGLANG_ENABLE_PP_SPEC × adaptive speculative decoding",
    reproduces: "check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: ADAPTIVE_FIELD,
    span: Span::since(v0_5(21)),
    roles: NOT_PREFILL,
    messages: &[text("SGLANG_ENABLE_PP_SPEC is not compatible with --speculative-adaptive")],
    check: |c| when(pipeline_speculation_without_pd(c) && given(&c.decode.extra_args, ADAPTIVE)),
    fix: Fix::Manual { hint: "drop --speculative-adaptive, or unset SGLANG_ENABLE_PP_SPEC" },
    ..Rule::DEFAULT
};

pub(super) const PP6: Rule = Rule {
    id: "PP6",
    about: "SGLANG_ENABLE_PP_SPEC × DP attention",
    reproduces: "check_pipeline_parallel_compat, srt/arg_groups/validation_hook.py (0.5.21–0.5.23)",
    field: DECODE_DP_ATTENTION,
    span: Span::since(v0_5(21)),
    roles: NOT_PREFILL,
    messages: &[
        text("SGLANG_ENABLE_PP_SPEC is not compatible with --enable-dp-attention"),
        text_from(22, "SGLANG_ENABLE_PP_SPEC is not compatible with attention DP (--attn-dp-size)"),
    ],
    check: |c| {
        when(
            pipeline_speculation_without_pd(c)
                && !given(&c.decode.extra_args, ADAPTIVE)
                && c.decode.enable_dp_attention
                && c.decode.data_parallel > 1,
        )
    },
    fix: Fix::Manual { hint: "turn DP attention off, or unset SGLANG_ENABLE_PP_SPEC" },
    ..Rule::DEFAULT
};

const PP_SPEC_ENV: &str = "SGLANG_ENABLE_PP_SPEC";
const PP_SPEC_ENV_FIELD: &str = "spec.decode.env[SGLANG_ENABLE_PP_SPEC]";
const ADAPTIVE: &str = "--speculative-adaptive";
const ADAPTIVE_FIELD: &str = "spec.decode.extraArgs[--speculative-adaptive]";

/// Whether a fleet's servers run pipeline stages with the one speculative algorithm SGLang lets
/// them (from 0.5.21): EAGLE (`NEXTN` included) without multi-layer EAGLE.
fn pipelined_eagle(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    fleet.pipeline_parallel > 1
        && resolved_speculative_algorithm(c).as_deref() == Some("EAGLE")
        && !multi_layer_eagle(c, &fleet.extra_args)
}

/// The guard's server without PD running EAGLE's pipeline stages under `SGLANG_ENABLE_PP_SPEC`,
/// which the validation hook checks further (PP5, PP6).
fn pipeline_speculation_without_pd(c: &RuleInput<'_>) -> bool {
    c.subject == Subject::OtherServer && pipelined_eagle(c, c.decode) && c.decode.env_on(PP_SPEC_ENV)
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// The validation hook's pipeline checks: up to 0.5.20 pipeline stages refuse every speculative
    /// algorithm (PP1); from 0.5.21 they run EAGLE without multi-layer EAGLE (NEXTN included) on PD
    /// prefill servers only (PP2) and DSPARK as SD6 says, and SGLANG_ENABLE_PP_SPEC moves EAGLE's
    /// stages to servers without PD (PP4; there PP5 and PP6), refusing DSPARK (PP3).
    #[test]
    fn pipeline_stages_run_eagle_on_pd_prefill_servers_only() {
        let pp_rules = |violations: Vec<Violation>| {
            let mut rules: Vec<_> = violations.into_iter().map(|v| v.rule).filter(|r| r.starts_with("PP")).collect();
            rules.sort_unstable();
            rules
        };
        let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
            pp_rules(at(patch, &speculating(algorithm), decode, &full()).violations)
        };
        let on_server = |patch: u16, algorithm: &str, server: &FleetSpec, prefill: bool| {
            let (settings, layout) = (speculating(algorithm), full());
            let input = PolicyInput::alone(&settings, server, &layout, v0_5(patch));
            pp_rules(evaluate_other_server(input, prefill).violations)
        };
        let stages = |args: &[&str], pp_spec: bool| FleetSpec {
            pipeline_parallel: 2,
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            env: if pp_spec { env_fleet("SGLANG_ENABLE_PP_SPEC", "1").env } else { Vec::new() },
            ..FleetSpec::default()
        };
        let plain = stages(&[], false);
        for algorithm in ["EAGLE", "NEXTN", "EAGLE3", "STANDALONE", "NGRAM"] {
            assert_eq!(fired(20, algorithm, &plain), ["PP1"], "{algorithm}");
            assert_eq!(on_server(20, algorithm, &plain, true), ["PP1"], "{algorithm} on a prefill server");
        }
        assert!(fired(20, "EAGLE", &FleetSpec::default()).is_empty(), "one stage");
        assert_eq!(
            at(20, &speculating("EAGLE"), &plain, &full()).violations.iter().find(|v| v.rule == "PP1").unwrap().message,
            "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"
        );

        assert_eq!(fired(21, "EAGLE3", &plain), ["PP1"]);
        assert_eq!(fired(21, "EAGLE", &stages(&["--enable-multi-layer-eagle"], false)), ["PP1"]);
        for algorithm in ["EAGLE", "nextn"] {
            assert_eq!(fired(21, algorithm, &plain), ["PP2"], "{algorithm} on a decode server");
            assert!(on_server(23, algorithm, &plain, true).is_empty(), "{algorithm} on a prefill server");
            assert_eq!(on_server(23, algorithm, &plain, false), ["PP2"], "{algorithm} without PD");
        }
        assert!(fired(21, "DSPARK", &plain).is_empty(), "SD6 refuses it on a decode server");

        let pp_spec = stages(&[], true);
        assert_eq!(fired(22, "EAGLE", &pp_spec), ["PP4"]);
        assert_eq!(on_server(22, "EAGLE", &pp_spec, true), ["PP4"]);
        assert_eq!(on_server(22, "DSPARK", &pp_spec, true), ["PP3"]);
        assert!(on_server(22, "EAGLE", &pp_spec, false).is_empty(), "the env's own place");
        assert_eq!(on_server(22, "EAGLE", &stages(&["--speculative-adaptive"], true), false), ["PP5"]);
        let dp_attention = FleetSpec { tensor_parallel: 2, data_parallel: 2, enable_dp_attention: true, ..pp_spec };
        assert_eq!(on_server(22, "EAGLE", &dp_attention, false), ["PP6"]);
    }
}
