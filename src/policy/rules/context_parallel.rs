//! Context parallelism: the context-parallel hook's strategy, model and divisibility checks
//! (`arg_groups/parallel_hook.py`).

use super::predicates::{
    ATTENTION_CP_FIELD, CP_STRATEGY, CP_STRATEGY_FIELD, MIMO_V2, PREFILL_CP, attention_cp_size, attention_dp_size,
    fleets_in_scope, prefill_cp_fleets, runs_attention_cp,
};
use super::{EVERY_SERVER, Fix, Rule, RuleInput, text, text_from, when};
use crate::api::{AttentionKind, FleetSpec, LayoutFeature};
use crate::policy::argv::{given, option_value};
use crate::release::{Span, v0_5};

pub(super) const CP2: Rule = Rule {
    id: "CP2",
    about: "Nemotron-H × attention context parallelism",
    reproduces: "_boundary_parallelism_overrides, srt/arg_groups/parallel_hook.py (0.5.21–0.5.23)",
    field: ATTENTION_CP_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("Nemotron-H does not support --attn-cp-size > 1")],
    check: |c| {
        when(
            matches!(c.layout.text_model_type(), Some("nemotron_h" | "nemotron_h_puzzle"))
                && fleets_in_scope(c).any(runs_attention_cp),
        )
    },
    fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs (or set it to 1)" },
    ..Rule::DEFAULT
};

pub(super) const CP3: Rule = Rule {
    id: "CP3",
    about: "LongCat-Flash prefill CP × attention CP",
    reproduces: "_boundary_parallelism_overrides, srt/arg_groups/parallel_hook.py (0.5.21–0.5.23)",
    field: ATTENTION_CP_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("LongCat-Flash does not support --enable-prefill-cp with --attn-cp-size > 1")],
    check: |c| when(c.layout.text_model_type() == Some("longcat_flash") && prefill_cp_fleets(c).any(runs_attention_cp)),
    fix: Fix::Manual { hint: "drop --enable-prefill-cp or --attn-cp-size from extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const CP4: Rule = Rule {
    id: "CP4",
    about: "DeepSeek-V3.2 prefill CP × the zigzag strategy",
    reproduces: "handle_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.20–0.5.23)",
    field: CP_STRATEGY_FIELD,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("DeepSeek V3.2 prefill CP does not support --cp-strategy zigzag; use interleave.")],
    check: |c| {
        when(
            c.layout.architecture == "DeepseekV32ForCausalLM"
                && prefill_cp_fleets(c).any(|fleet| option_value(&fleet.extra_args, CP_STRATEGY) == Some("zigzag")),
        )
    },
    fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const CP5: Rule = Rule {
    id: "CP5",
    about: "MiMo-V2 prefill CP needs the zigzag strategy",
    reproduces: "ServerArgs._handle_context_parallelism, srt/server_args.py (0.5.17–0.5.18); \
                 handle_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: CP_STRATEGY_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("MiMo V2 CP-v2 only supports --cp-strategy zigzag."),
        text_from(20, "MiMo V2 prefill CP only supports --cp-strategy zigzag."),
    ],
    changes: &[text_from(20, "checked on every prefill-CP server, not only with CP-v2 (SGLANG_ENABLE_CP_V2)")],
    check: |c| {
        when(
            MIMO_V2.contains(&c.layout.architecture.as_str())
                && prefill_cp_fleets(c).any(|fleet| {
                    mimo_v2_prefill_cp_checked(c, fleet)
                        && option_value(&fleet.extra_args, CP_STRATEGY) != Some("zigzag")
                }),
        )
    },
    fix: Fix::Manual { hint: "set --cp-strategy zigzag in extraArgs" },
    ..Rule::DEFAULT
};

pub(super) const CP1: Rule = Rule {
    id: "CP1",
    about: "prefill CP needs a strategy",
    reproduces: "ServerArgs._handle_context_parallelism, srt/server_args.py (0.5.17–0.5.18); \
                 handle_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: CP_STRATEGY_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("--cp-strategy must be set when --enable-prefill-cp is enabled.")],
    check: |c| when(prefill_cp_fleets(c).any(|fleet| option_value(&fleet.extra_args, CP_STRATEGY).is_none())),
    fix: Fix::Manual { hint: "add --cp-strategy interleave (or zigzag) to extraArgs next to --enable-prefill-cp" },
    ..Rule::DEFAULT
};

pub(super) const CP7: Rule = Rule {
    id: "CP7",
    about: "attention CP must divide TP",
    reproduces: "ServerArgs._handle_context_parallelism, srt/server_args.py (0.5.17–0.5.18); \
                 handle_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: ATTENTION_CP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("tp_size must be divisible by attn_cp_size")],
    check: |c| when(fleets_in_scope(c).any(|fleet| cp_divisibility(c, fleet) == Some(CpDivisibility::TpByCp))),
    fix: Fix::Manual {
        hint: "set --attn-cp-size in extraArgs to a divisor of tensorParallel (CP ranks split the TP group)",
    },
    ..Rule::DEFAULT
};

pub(super) const CP8: Rule = Rule {
    id: "CP8",
    about: "attention DP × attention CP must divide TP",
    reproduces: "ServerArgs._handle_context_parallelism, srt/server_args.py (0.5.17–0.5.18); \
                 handle_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)",
    field: ATTENTION_CP_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("tp_size must be divisible by dp_size * attn_cp_size"),
        text_from(22, "tp_size must be divisible by attn_dp_size * attn_cp_size"),
    ],
    check: |c| when(fleets_in_scope(c).any(|fleet| cp_divisibility(c, fleet) == Some(CpDivisibility::TpByDpTimesCp))),
    fix: Fix::Manual {
        hint: "set tensorParallel to a multiple of the DP size (dataParallel; from SGLang 0.5.22 only with DP \
               attention) times --attn-cp-size",
    },
    ..Rule::DEFAULT
};

/// Which of the context-parallel hook's divisibility asserts a server fails (CP7 first, as the
/// hook asserts them in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CpDivisibility {
    TpByCp,
    TpByDpTimesCp,
}

/// The context-parallel hook's asserts that attention CP, and the DP size times it, divide TP,
/// on a server's attention CP as given (`--attn-cp-size`). Up to 0.5.21 the DP size is
/// `--dp-size` (replicas or attention DP), from 0.5.22 the attention DP size. Under prefill CP,
/// the DeepSeek family's overrides choose the CP size of an MLA or DSA model, and DeepSeek-V4's
/// hook its own: kvpilot leaves the asserts to SGLang there.
fn cp_divisibility(c: &RuleInput<'_>, fleet: &FleetSpec) -> Option<CpDivisibility> {
    let family_resolves_cp = given(&fleet.extra_args, PREFILL_CP)
        && (c.layout.attention == AttentionKind::Mla || c.layout.has(LayoutFeature::DeepseekV4));
    let cp = attention_cp_size(&fleet.extra_args)?;
    if family_resolves_cp || cp <= 1 {
        return None;
    }
    let tp = i64::from(fleet.tensor_parallel);
    let dp = if c.release >= v0_5(22) { attention_dp_size(fleet) } else { i64::from(fleet.data_parallel.max(1)) };
    if tp % cp != 0 {
        Some(CpDivisibility::TpByCp)
    } else if tp % (dp * cp) != 0 {
        Some(CpDivisibility::TpByDpTimesCp)
    } else {
        None
    }
}

const CP_V2_ENV: &str = "SGLANG_ENABLE_CP_V2";

/// Whether the context-parallel hook's MiMo V2 check runs on a prefill-CP server: from 0.5.20
/// always; before, only with CP-v2, which the hook turns on for MiMo V2 (a CP-v2 default class)
/// when `SGLANG_ENABLE_CP_V2` is unset, and which is otherwise what that variable says.
fn mimo_v2_prefill_cp_checked(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    c.release >= v0_5(20) || fleet.env_value(CP_V2_ENV).is_none() || fleet.env_on(CP_V2_ENV)
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// The context-parallel hook asserts that attention CP divides TP (CP7), then that the DP size
    /// times it does (CP8: `--dp-size` up to 0.5.21, the attention DP size from 0.5.22). Under prefill
    /// CP the DeepSeek family's overrides choose the CP size of an MLA model, and kvpilot leaves the
    /// asserts to SGLang there. Before, kvpilot called `--attn-cp-size 2` on one GPU valid.
    #[test]
    fn cp7_cp8_attention_cp_divides_tp() {
        let rules = |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| {
            violations_of(&["CP7", "CP8"], layout, fleet, patch)
        };
        let cp2 = ["--attn-cp-size", "2"];
        let cp7 = ("CP7", "tp_size must be divisible by attn_cp_size".to_string());
        assert_eq!(rules(&full(), &parallel_fleet(1, 1, false, &cp2), 23), std::slice::from_ref(&cp7));
        assert!(rules(&full(), &parallel_fleet(2, 1, false, &cp2), 23).is_empty());
        // Two replicas count up to 0.5.21; from 0.5.22 only attention DP does.
        let replicas = parallel_fleet(2, 2, false, &cp2);
        assert_eq!(
            rules(&full(), &replicas, 21),
            [("CP8", "tp_size must be divisible by dp_size * attn_cp_size".to_string())]
        );
        assert!(rules(&full(), &replicas, 22).is_empty());
        assert_eq!(
            rules(&full(), &parallel_fleet(2, 2, true, &cp2), 22),
            [("CP8", "tp_size must be divisible by attn_dp_size * attn_cp_size".to_string())]
        );
        let prefill_cp = ["--attn-cp-size", "2", "--enable-prefill-cp", "--cp-strategy", "interleave"];
        assert!(
            rules(&mla(), &parallel_fleet(1, 1, false, &prefill_cp), 23).is_empty(),
            "the family chooses the CP size"
        );
        assert_eq!(rules(&full(), &parallel_fleet(1, 1, false, &prefill_cp), 23), [cp7]);
    }

    /// The context-parallel hook: prefill CP needs a strategy (CP1, every release); Nemotron-H,
    /// read by its text config's model type, refuses attention CP (CP2, 0.5.21 on); MiMo-V2's prefill
    /// CP needs zigzag (CP5), up to 0.5.19 only under CP-v2, which the hook turns on for MiMo-V2
    /// unless `SGLANG_ENABLE_CP_V2` says otherwise.
    #[test]
    fn the_context_parallel_hook_checks_strategies_and_models() {
        let fired = |patch: u16, decode: &FleetSpec, layout: &AttentionLayout| {
            let verdict = at(patch, &DisaggregationSpec::default(), decode, layout);
            verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
        };
        let args = |words: &[&str], env: &[(&str, &str)]| FleetSpec {
            extra_args: words.iter().map(|w| w.to_string()).collect(),
            env: env
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.to_string(),
                    value: Some(value.to_string()),
                    value_from: None,
                })
                .collect(),
            ..FleetSpec::default()
        };
        let rules = |found: Vec<(&'static str, String)>| found.into_iter().map(|(rule, _)| rule).collect::<Vec<_>>();
        assert_eq!(rules(fired(17, &args(&["--enable-prefill-cp"], &[]), &full())), ["CP1"]);
        assert!(fired(17, &args(&["--enable-prefill-cp", "--cp-strategy", "zigzag"], &[]), &full()).is_empty());

        let nemotron_vl = layout_at(
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/nemotron-nano-vl-v2.json")).unwrap(),
        );
        assert_eq!(nemotron_vl.text_model_type(), Some("nemotron_h"));
        // Two GPUs, so that attention CP divides TP (CP7).
        let cp2 = FleetSpec { tensor_parallel: 2, ..args(&["--attn-cp-size", "2"], &[]) };
        assert!(fired(20, &cp2, &nemotron_vl).is_empty());
        assert_eq!(rules(fired(21, &cp2, &nemotron_vl)), ["CP2"]);

        let mimo = layout_at(
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/mimo-v2-flash.json")).unwrap(),
        );
        let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave"];
        let old = fired(19, &args(&interleave, &[]), &mimo);
        assert_eq!(
            old.iter().map(|(rule, message)| (*rule, message.as_str())).collect::<Vec<_>>(),
            [("CP5", "MiMo V2 CP-v2 only supports --cp-strategy zigzag.")]
        );
        assert!(fired(19, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "0")]), &mimo).is_empty(), "CP-v2 off");
        assert_eq!(rules(fired(19, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "yes")]), &mimo)), ["CP5"]);
        assert_eq!(
            rules(fired(20, &args(&interleave, &[("SGLANG_ENABLE_CP_V2", "0")]), &mimo)),
            ["CP5"],
            "always from 0.5.20"
        );
    }
}
