//! The data-parallel shape (the data-parallel hook, `arg_groups/parallel_hook.py`), the DP LM head
//! validation pass (`arg_groups/overrides.py`), DWDP's handler (`handle_dwdp` in
//! `arg_groups/parallel_hook.py`) and quantized communications (`arg_groups/validation_hook.py`).

use super::predicates::{
    DATA_PARALLEL_FIELD, DP_LM_HEAD, DP_LM_HEAD_FIELD, TWO_BATCH_OVERLAP, attention_cp_size, attention_dp_size,
    fleets_in_scope, speculative_algorithm,
};
use super::{EVERY_SERVER, Finding, Fix, Rule, RuleInput, Subject, text, text_from, when, when_with};
use crate::api::FleetSpec;
use crate::policy::argv::{given, number_option, option_value};
use crate::release::{Span, v0_5};

pub(super) const LH2: Rule = Rule {
    id: "LH2",
    about: "TP LM-head all-to-all without DP attention",
    reproduces: "_dp_lm_head_validation, srt/arg_groups/overrides.py (0.5.18–0.5.23)",
    field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[
        text("Please enable dp attention when setting enable_tp_lm_head_all_to_all."),
        text_from(22, "--enable-tp-lm-head-all-to-all requires attention DP (--attn-dp-size)."),
    ],
    check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::NoAttentionDp)),
    fix: Fix::Manual {
        hint: "drop --enable-tp-lm-head-all-to-all from extraArgs, or run DP attention (dataParallel above 1 with enableDpAttention)",
    },
    ..Rule::DEFAULT
};

pub(super) const LH3: Rule = Rule {
    id: "LH3",
    about: "TP LM-head all-to-all × DP LM head",
    reproduces: "_dp_lm_head_validation, srt/arg_groups/overrides.py (0.5.18–0.5.23)",
    field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-tp-lm-head-all-to-all uses a TP-sharded LM head and is incompatible with --enable-dp-lm-head.",
    )],
    check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::WithDpLmHead)),
    fix: Fix::Manual { hint: "drop --enable-tp-lm-head-all-to-all or --enable-dp-lm-head from extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const LH4: Rule = Rule {
    id: "LH4",
    about: "TP LM-head all-to-all needs TP equal to attention DP",
    reproduces: "_dp_lm_head_validation, srt/arg_groups/overrides.py (0.5.18–0.5.23)",
    field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[
        text("--enable-tp-lm-head-all-to-all currently requires tp_size == dp_size, got tp_size={tp}, dp_size={dp}."),
        text_from(
            22,
            "--enable-tp-lm-head-all-to-all currently requires tp_size == attn_dp_size, got tp_size={tp}, attn_dp_size={dp}.",
        ),
    ],
    check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::TpNotDp { .. })),
    fix: Fix::Manual {
        hint: "set dataParallel (with enableDpAttention) equal to tensorParallel, or drop --enable-tp-lm-head-all-to-all from extraArgs",
    },
    ..Rule::DEFAULT
};

pub(super) const LH5: Rule = Rule {
    id: "LH5",
    about: "TP LM-head all-to-all × attention CP",
    reproduces: "_dp_lm_head_validation, srt/arg_groups/overrides.py (0.5.18–0.5.23)",
    field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-tp-lm-head-all-to-all currently requires attn_cp_size == 1, got {cp}.")],
    check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::AttentionCp { .. })),
    fix: Fix::Manual { hint: "drop --attn-cp-size or --enable-tp-lm-head-all-to-all from extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const LH1: Rule =
    Rule {
        id: "LH1",
        about: "DP LM head on data-parallel replicas",
        reproduces: "_dp_lm_head_validation, srt/arg_groups/overrides.py (0.5.17–0.5.23)",
        field: DP_LM_HEAD_FIELD,
        roles: EVERY_SERVER,
        messages: &[
            text("Please enable dp attention when setting enable_dp_lm_head. "),
            text_from(22, "--enable-dp-lm-head requires attention DP (--attn-dp-size)."),
        ],
        // With one DP rank SGLang drops the DP LM head first (`_data_parallelism_defaults`), so
        // only data-parallel replicas without DP attention reach the check.
        check: |c| {
            when(fleets_in_scope(c).any(|fleet| {
                given(&fleet.extra_args, DP_LM_HEAD) && fleet.data_parallel > 1 && !fleet.enable_dp_attention
            }))
        },
        fix: Fix::Manual {
            hint: "drop --enable-dp-lm-head from extraArgs, or run DP attention (dataParallel above 1 with \
               enableDpAttention)",
        },
        ..Rule::DEFAULT
    };

pub(super) const WD1: Rule = Rule {
    id: "WD1",
    about: "DWDP size must equal TP",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("dwdp_size ({dwdp}) must equal tp_size ({tp})")],
    check: |c| {
        let (fleet, size) = dwdp_fleets(c).find(|(fleet, size)| *size != i64::from(fleet.tensor_parallel))?;
        when_with(true, vec![("dwdp", size.to_string()), ("tp", fleet.tensor_parallel.to_string())])
    },
    fix: Fix::Manual {
        hint: "set --dwdp-size in extraArgs to the fleet's tensorParallel (DWDP spreads the expert weights over \
               every TP rank), or drop it",
    },
    ..Rule::DEFAULT
};

pub(super) const WD2: Rule = Rule {
    id: "WD2",
    about: "DWDP on a PD decode server",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    messages: &[text("DWDP requires --disaggregation-mode null or prefill")],
    // The decode servers only (a service's prefill servers may run it; the guard's server is a
    // PD decode server here, and no role list keeps this rule for other servers).
    check: |c| when(c.subject != Subject::OtherServer && dwdp_size(c.decode).is_some()),
    fix: Fix::Manual {
        hint: "drop --dwdp-size from the decode fleet's extraArgs: DWDP runs on PD prefill servers ({spec.prefill})",
    },
    ..Rule::DEFAULT
};

pub(super) const WD3: Rule = Rule {
    id: "WD3",
    about: "DWDP × EPLB",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("EPLB dynamic migration conflicts with static DWDP partitioning")],
    check: |c| when(dwdp_fleets(c).any(|(fleet, _)| given(&fleet.extra_args, "--enable-eplb"))),
    fix: Fix::Manual { hint: "drop --enable-eplb or --dwdp-size from extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const WD4: Rule = Rule {
    id: "WD4",
    about: "DWDP × speculative decoding",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DWDP does not support speculative decoding (MTP/draft workers)")],
    // Every server in scope runs the speculative settings; the handler reads the algorithm as
    // given, before the speculative hook resolves it.
    check: |c| when(speculative_algorithm(c).is_some() && dwdp_fleets(c).next().is_some()),
    fix: Fix::Manual {
        hint: "drop --dwdp-size from extraArgs, or turn speculative decoding off \
               ({spec.disaggregation.speculativeAlgorithm})",
    },
    ..Rule::DEFAULT
};

pub(super) const WD5: Rule = Rule {
    id: "WD5",
    about: "DWDP × pipeline stages",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DWDP requires pp_size == 1")],
    check: |c| when(dwdp_fleets(c).any(|(fleet, _)| fleet.pipeline_parallel > 1)),
    fix: Fix::Manual { hint: "set pipelineParallel to 1 on the fleet that runs --dwdp-size, or drop it" },
    ..Rule::DEFAULT
};

pub(super) const WD6: Rule = Rule {
    id: "WD6",
    about: "DWDP × two-batch overlap",
    reproduces: "ServerArgs._handle_dwdp, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: DWDP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DWDP's prefetch event protocol does not support two-batch overlap")],
    check: |c| when(dwdp_fleets(c).any(|(fleet, _)| given(&fleet.extra_args, TWO_BATCH_OVERLAP))),
    fix: Fix::Manual { hint: "drop --enable-two-batch-overlap or --dwdp-size from extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const QC1: Rule = Rule {
    id: "QC1",
    about: "quantized communications at TP 1",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.23)",
    field: "spec.decode.extraArgs[--enable-quant-communications]",
    roles: EVERY_SERVER,
    messages: &[text("Communications quantization is only used with tp_size != 1")],
    check: |c| when(quant_communication_fleets(c).any(|(fleet, _)| fleet.tensor_parallel == 1)),
    fix: Fix::Manual { hint: "drop --enable-quant-communications from extraArgs: it compresses TP collectives" },
    ..Rule::DEFAULT
};

pub(super) const QC2: Rule = Rule {
    id: "QC2",
    about: "quantized communications off an NPU",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.23)",
    field: "spec.decode.extraArgs[--enable-quant-communications]",
    roles: EVERY_SERVER,
    messages: &[text("Communications quantization is only supported for NPU device")],
    check: |c| when(quant_communication_fleets(c).any(|(fleet, npu)| fleet.tensor_parallel != 1 && !npu)),
    fix: Fix::Manual {
        hint: "drop --enable-quant-communications from extraArgs: SGLang implements it on Ascend NPUs only",
    },
    ..Rule::DEFAULT
};

pub(super) const DP3: Rule = Rule {
    id: "DP3",
    about: "data-parallel replicas × attention DP",
    reproduces: "handle_data_parallelism, srt/arg_groups/parallel_hook.py (0.5.22–0.5.23)",
    field: DATA_PARALLEL_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--dp-size {replicas} with --attn-dp-size {groups}: data-parallel replicas combined with attention data \
         parallelism are not supported.",
    )],
    check: |c| {
        let (replicas, groups) = fleets_in_scope(c).find_map(replicas_and_attention_dp)?;
        when_with(true, vec![("replicas", replicas.to_string()), ("groups", groups.to_string())])
    },
    fix: Fix::Manual {
        hint: "give either --dp-size (data-parallel replicas) or --attn-dp-size (attention DP groups), not both",
    },
    ..Rule::DEFAULT
};

pub(super) const DP1: Rule = Rule {
    id: "DP1",
    about: "attention DP must divide TP",
    reproduces: "ServerArgs._handle_data_parallelism, srt/server_args.py (0.5.17–0.5.18); handle_data_parallelism, \
                 srt/arg_groups/parallel_hook.py (0.5.19–0.5.23): the bare assert under DP attention",
    field: DATA_PARALLEL_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("AssertionError (assert self.tp_size % self.dp_size == 0)"),
        text_from(19, "AssertionError (assert cfg.tp_size % cfg.dp_size == 0)"),
        text_from(22, "AssertionError (assert cfg.tp_size % cfg.attn_dp_size == 0)"),
    ],
    check: |c| {
        when(fleets_in_scope(c).any(|fleet| {
            fleet.enable_dp_attention && fleet.data_parallel > 1 && fleet.tensor_parallel % fleet.data_parallel != 0
        }))
    },
    fix: Fix::Manual {
        hint: "set dataParallel to a divisor of tensorParallel: DP attention splits the TP ranks into that many equal \
               groups (SGLang's bare assert names no field)",
    },
    ..Rule::DEFAULT
};

pub(super) const DP4: Rule = Rule {
    id: "DP4",
    about: "TP × PP over the nodes",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.23)",
    field: NODES_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("tp_size must be divisible by number of nodes")],
    // A service's fleets are checked as pods (POD2) before SGLang sees them.
    check: |c| when(c.subject != Subject::Service && fleets_in_scope(c).any(nodes_split_tp_unevenly)),
    fix: Fix::Manual { hint: "run the server on a number of nodes (--nnodes) that divides --tp-size × --pp-size" },
    ..Rule::DEFAULT
};

pub(super) const DP2: Rule = Rule {
    id: "DP2",
    about: "data-parallel replicas across nodes",
    reproduces: "ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); \
                 check_server_args, srt/arg_groups/validation_hook.py (0.5.19–0.5.23)",
    field: DATA_PARALLEL_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("multi-node data parallel is not supported unless dp attention!"),
        text_from(
            22,
            "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes",
        ),
    ],
    check: |c| {
        when(
            fleets_in_scope(c)
                .any(|fleet| fleet.data_parallel > 1 && !fleet.enable_dp_attention && nodes_per_server(fleet) != 1),
        )
    },
    fix: Fix::Manual {
        hint: "run data-parallel replicas on one node (nodesPerReplica 1, or more replicas instead), or turn on \
               enableDpAttention to spread attention DP across the nodes",
    },
    ..Rule::DEFAULT
};

/// The nodes one server of `fleet` spans: the guard's `--nnodes`, else the fleet's
/// nodesPerReplica (which kvpilot renders as `--nnodes`).
fn nodes_per_server(fleet: &FleetSpec) -> i64 {
    number_option(&fleet.extra_args, &["--nnodes"]).unwrap_or(i64::from(fleet.nodes_per_replica))
}

const NODES_FIELD: &str = "spec.decode.nodesPerReplica";

/// Whether a server's TP × PP ranks do not split evenly over its nodes, which SGLang checks
/// except on an elastic-EP joiner (`--ep-join-mode scale`).
fn nodes_split_tp_unevenly(fleet: &FleetSpec) -> bool {
    let ranks = i64::from(fleet.tensor_parallel) * i64::from(fleet.pipeline_parallel);
    option_value(&fleet.extra_args, "--ep-join-mode") != Some("scale")
        && ranks.checked_rem(nodes_per_server(fleet)).is_some_and(|rest| rest != 0)
}

/// (replicas, attention DP groups) where a server's arguments give both above 1 (`--dp-size` and
/// `--attn-dp-size`, each in either spelling): kvpilot's settings keep one DP size, so this reads
/// the arguments as given (only the guard's servers can have both; POD1 refuses them in extraArgs).
fn replicas_and_attention_dp(fleet: &FleetSpec) -> Option<(i64, i64)> {
    let args = &fleet.extra_args;
    let replicas = number_option(args, &["--dp-size", "--data-parallel-size"]).filter(|&n| n > 1)?;
    let groups = number_option(args, &["--attn-dp-size", "--attention-data-parallel-size"]).filter(|&n| n > 1)?;
    Some((replicas, groups))
}

const TP_LM_HEAD_ALL_TO_ALL: &str = "--enable-tp-lm-head-all-to-all";
const TP_LM_HEAD_ALL_TO_ALL_FIELD: &str = "spec.decode.extraArgs[--enable-tp-lm-head-all-to-all]";

/// The first of the DP LM head validation pass's asserts on an explicit
/// `--enable-tp-lm-head-all-to-all` that a server fails (SGLang's own default turns it on only
/// where they hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TpLmHeadAllToAll {
    NoAttentionDp,
    WithDpLmHead,
    TpNotDp { tp: i64, dp: i64 },
    AttentionCp { cp: i64 },
}

/// LH2-LH5 on the first server in scope given `--enable-tp-lm-head-all-to-all` that fails one,
/// as the pass reads it after `_data_parallelism_defaults` (one DP rank drops DP attention up to
/// 0.5.21, and the DP LM head): up to 0.5.21 against `--dp-size` with DP attention, from 0.5.22
/// against the attention DP size.
fn tp_lm_head_all_to_all_refused(c: &RuleInput<'_>, selects: fn(TpLmHeadAllToAll) -> bool) -> Option<Finding> {
    let refusal =
        fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, TP_LM_HEAD_ALL_TO_ALL)).find_map(|fleet| {
            let tp = i64::from(fleet.tensor_parallel);
            let replicas_or_groups = i64::from(fleet.data_parallel.max(1));
            let attention_dp = fleet.enable_dp_attention && replicas_or_groups > 1;
            let dp = if c.release >= v0_5(22) { attention_dp_size(fleet) } else { replicas_or_groups };
            let cp = attention_cp_size(&fleet.extra_args)?;
            if !attention_dp {
                Some(TpLmHeadAllToAll::NoAttentionDp)
            } else if given(&fleet.extra_args, DP_LM_HEAD) {
                Some(TpLmHeadAllToAll::WithDpLmHead)
            } else if tp != dp {
                Some(TpLmHeadAllToAll::TpNotDp { tp, dp })
            } else if cp != 1 {
                Some(TpLmHeadAllToAll::AttentionCp { cp })
            } else {
                None
            }
        })?;
    let args = match refusal {
        TpLmHeadAllToAll::TpNotDp { tp, dp } => vec![("tp", tp.to_string()), ("dp", dp.to_string())],
        TpLmHeadAllToAll::AttentionCp { cp } => vec![("cp", cp.to_string())],
        _ => Vec::new(),
    };
    when_with(selects(refusal), args)
}

/// `--dwdp-size` (kvpilot keeps no setting for it): SGLang's DWDP handler checks a server only
/// where it is above 1.
const DWDP_SIZE: &str = "--dwdp-size";
const DWDP_FIELD: &str = "spec.decode.extraArgs[--dwdp-size]";

/// A server's `--dwdp-size` where it runs DWDP (distributed weight data parallelism).
fn dwdp_size(fleet: &FleetSpec) -> Option<i64> {
    number_option(&fleet.extra_args, &[DWDP_SIZE]).filter(|size| *size > 1)
}

/// The servers in scope that run DWDP, each with its `--dwdp-size`.
fn dwdp_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (&'a FleetSpec, i64)> {
    fleets_in_scope(c).filter_map(|fleet| Some((fleet, dwdp_size(fleet)?)))
}

/// `--enable-quant-communications` among the arguments of a server in scope, with its TP and
/// whether it runs on an NPU (`--device npu`; kvpilot's servers run on CUDA GPUs).
fn quant_communication_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    fleets_in_scope(c)
        .filter(|fleet| given(&fleet.extra_args, "--enable-quant-communications"))
        .map(|fleet| (fleet, option_value(&fleet.extra_args, "--device") == Some("npu")))
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// DWDP (`--dwdp-size` above 1, every release): its handler wants the size equal to TP (WD1), no
    /// PD decode server (WD2: a service's prefill servers and servers without PD may run it), and no
    /// EPLB, speculative decoding, pipeline stages or two-batch overlap (WD3-WD6).
    #[test]
    fn wd_dwdp_checks() {
        let all = ["WD1", "WD2", "WD3", "WD4", "WD5", "WD6"];
        let dwdp = |tp, args: &[&str]| parallel_fleet(tp, 1, false, &[&["--dwdp-size", "4"], args].concat());
        let plain = parallel_fleet(4, 1, false, &[]);
        let llama = full();
        let service = |settings: &DisaggregationSpec, decode: &FleetSpec, prefill: &FleetSpec| {
            let input = PolicyInput::alone(settings, decode, &llama, v0_5(17)).with_prefill(Some(prefill));
            evaluate(input).violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
        let defaults = DisaggregationSpec::default();
        assert!(service(&defaults, &plain, &dwdp(4, &[])).is_empty(), "DWDP on the prefill servers");
        assert_eq!(service(&defaults, &dwdp(4, &[]), &plain), ["WD2"]);
        assert_eq!(service(&defaults, &plain, &dwdp(4, &["--enable-eplb"])), ["WD3"]);
        assert_eq!(service(&defaults, &plain, &dwdp(4, &["--enable-two-batch-overlap"])), ["WD6"]);
        let staged = FleetSpec { pipeline_parallel: 2, ..dwdp(4, &[]) };
        assert_eq!(service(&defaults, &plain, &staged), ["WD5"]);
        let speculative = with(|s| s.speculative_algorithm = Some("nextn".into()));
        assert_eq!(service(&speculative, &plain, &dwdp(4, &[])), ["WD4"]);
        assert!(service(&defaults, &plain, &parallel_fleet(4, 1, false, &["--dwdp-size", "1"])).is_empty(), "off");
        assert_eq!(
            violations_of(&all, &full(), &dwdp(2, &[]), 23),
            [
                ("WD1", "dwdp_size (4) must equal tp_size (2)".to_string()),
                ("WD2", "DWDP requires --disaggregation-mode null or prefill".to_string())
            ]
        );

        let alone = |fleet: &FleetSpec, prefill: bool| {
            let verdict = evaluate_other_server(
                PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
                prefill,
            );
            verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
        assert!(alone(&dwdp(4, &[]), true).is_empty() && alone(&dwdp(4, &[]), false).is_empty());
        assert_eq!(alone(&dwdp(2, &["--enable-eplb"]), false), ["WD1", "WD3"]);
    }

    /// An explicit `--enable-tp-lm-head-all-to-all` (0.5.18 on) needs DP attention (LH2), no DP LM
    /// head (LH3), TP equal to the DP size (LH4: `--dp-size` up to 0.5.21, the attention DP size
    /// from 0.5.22) and no attention CP (LH5), checked in that order.
    #[test]
    fn lh2_to_lh5_tp_lm_head_all_to_all() {
        let rules = ["LH2", "LH3", "LH4", "LH5"];
        let fired = |tp, dp, dp_attention, args: &[&str], patch| {
            let mut args = args.to_vec();
            args.push("--enable-tp-lm-head-all-to-all");
            violations_of(&rules, &full(), &parallel_fleet(tp, dp, dp_attention, &args), patch)
        };
        assert_eq!(fired(2, 2, false, &[], 18)[0].0, "LH2", "replicas are not DP attention");
        assert_eq!(
            fired(2, 2, false, &[], 22)[0].1,
            "--enable-tp-lm-head-all-to-all requires attention DP (--attn-dp-size)."
        );
        assert_eq!(fired(2, 2, true, &["--enable-dp-lm-head"], 23)[0].0, "LH3");
        assert_eq!(
            fired(4, 2, true, &[], 21),
            [(
                "LH4",
                "--enable-tp-lm-head-all-to-all currently requires tp_size == dp_size, got tp_size=4, dp_size=2."
                    .to_string()
            )]
        );
        assert_eq!(fired(2, 2, true, &["--attn-cp-size", "2"], 23)[0].0, "LH5");
        assert!(fired(2, 2, true, &[], 23).is_empty());
        assert!(fired(2, 2, false, &[], 17).is_empty(), "no such flag before 0.5.18");
    }

    /// The data-parallel shape, on every server: attention DP divides TP (DP1, SGLang's bare assert
    /// as its traceback ends, per release), data-parallel replicas stay on one node (DP2; DP
    /// attention may span nodes), from 0.5.22 replicas and attention DP do not combine (DP3), and
    /// the nodes split the TP × PP ranks (DP4).
    #[test]
    fn the_data_parallel_shape_divides_tp_and_keeps_replicas_on_one_node() {
        let fired = |patch: u16, decode: &FleetSpec| {
            let verdict = at(patch, &DisaggregationSpec::default(), decode, &full());
            verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
        };
        let fleet = |tp: i32, dp: i32, dp_attention: bool, nodes: i32| FleetSpec {
            tensor_parallel: tp,
            data_parallel: dp,
            enable_dp_attention: dp_attention,
            nodes_per_replica: nodes,
            ..FleetSpec::default()
        };
        for (patch, text) in [
            (17, "AssertionError (assert self.tp_size % self.dp_size == 0)"),
            (19, "AssertionError (assert cfg.tp_size % cfg.dp_size == 0)"),
            (22, "AssertionError (assert cfg.tp_size % cfg.attn_dp_size == 0)"),
        ] {
            assert_eq!(fired(patch, &fleet(4, 3, true, 1)), [("DP1", text.to_string())]);
            assert_eq!(fired(patch, &fleet(2, 4, true, 1)), [("DP1", text.to_string())], "more groups than TP ranks");
        }
        assert!(fired(23, &fleet(8, 4, true, 2)).is_empty(), "attention DP across two nodes");
        assert!(fired(23, &fleet(4, 3, false, 1)).is_empty(), "three replicas of TP 4 on one node");
        assert_eq!(
            fired(21, &fleet(4, 2, false, 2)),
            [("DP2", "multi-node data parallel is not supported unless dp attention!".to_string())]
        );
        let replicas_on_nodes = FleetSpec { extra_args: vec!["--nnodes".into(), "2".into()], ..fleet(4, 2, false, 1) };
        assert_eq!(fired(22, &replicas_on_nodes).into_iter().map(|(rule, _)| rule).collect::<Vec<_>>(), ["DP2"]);

        // TP × PP ranks that do not split over the guard's nodes (DP4; a service's pods are POD2's).
        let on_nodes = |tp: i32, pp: i32, words: &[&str]| FleetSpec {
            pipeline_parallel: pp,
            extra_args: words.iter().map(|w| w.to_string()).collect(),
            ..fleet(tp, 1, false, 1)
        };
        let server = |patch: u16, fleet: &FleetSpec| {
            let (settings, layout) = (DisaggregationSpec::default(), full());
            let input = PolicyInput::alone(&settings, fleet, &layout, v0_5(patch));
            evaluate_other_server(input, false).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
        };
        assert_eq!(server(17, &on_nodes(3, 1, &["--nnodes", "2"])), ["DP4"]);
        assert!(server(23, &on_nodes(3, 2, &["--nnodes", "2"])).is_empty(), "six ranks on two nodes");
        assert!(server(23, &on_nodes(3, 1, &["--nnodes", "2", "--ep-join-mode", "scale"])).is_empty(), "an EP joiner");
        assert!(server(23, &on_nodes(3, 1, &["--nnodes", "0"])).is_empty(), "no nodes: the parser's to refuse");
        assert!(
            !fired(23, &FleetSpec { nodes_per_replica: 2, ..fleet(3, 1, false, 1) }).iter().any(|(r, _)| *r == "DP4")
        );

        let both = FleetSpec {
            extra_args: vec!["--dp-size=2".into(), "--attn-dp-size".into(), "4".into()],
            ..fleet(8, 4, true, 1)
        };
        assert!(fired(21, &both).is_empty(), "no --attn-dp-size before 0.5.22 (its parser refuses it)");
        assert_eq!(
            fired(22, &both),
            [(
                "DP3",
                "--dp-size 2 with --attn-dp-size 4: data-parallel replicas combined with attention data parallelism are \
                 not supported."
                    .to_string()
            )]
        );
    }
}
