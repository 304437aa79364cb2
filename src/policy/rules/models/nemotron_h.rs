//! Nemotron-H: its override provider (`arg_groups/model_overrides/nemotron_h.py`).

use crate::policy::argv::{given, option_value};
use crate::policy::rules::predicates::{fleets_in_scope, moe_a2a_backend};
use crate::policy::rules::{EVERY_SERVER, Fix, Rule, text, when};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const NH1: Rule = Rule {
    id: "NH1",
    about: "Nemotron-H expert remapping × the flashinfer_trtllm MoE runner",
    reproduces: "_validate_expert_remap, srt/arg_groups/model_overrides/nemotron_h.py (0.5.23)",
    field: MOE_RUNNER_FIELD,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text(
        "flashinfer_trtllm routes inside the kernel and does not support EPLB or redundant experts on \
         Nemotron-H; use --moe-runner-backend flashinfer_trtllm_routed.",
    )],
    check: |c| {
        when(
            NEMOTRON_H.contains(&c.layout.architecture.as_str())
                && fleets_in_scope(c).any(|fleet| {
                    remaps_experts(&fleet.extra_args)
                        && option_value(&fleet.extra_args, MOE_RUNNER_BACKEND) == Some("flashinfer_trtllm")
                }),
        )
    },
    fix: Fix::Manual { hint: "set --moe-runner-backend flashinfer_trtllm_routed in extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const NH2: Rule = Rule {
    id: "NH2",
    about: "Nemotron-H EPLB × flashinfer_cutedsl without an all-to-all backend",
    reproduces: "_validate_expert_remap, srt/arg_groups/model_overrides/nemotron_h.py (0.5.23)",
    field: MOE_RUNNER_FIELD,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text(
        "flashinfer_cutedsl without an a2a backend does not migrate its expert scales on EPLB rebalance; use \
         --moe-runner-backend flashinfer_trtllm_routed or set --moe-a2a-backend.",
    )],
    check: |c| {
        when(
            NEMOTRON_H.contains(&c.layout.architecture.as_str())
                && fleets_in_scope(c).any(|fleet| {
                    let args = &fleet.extra_args;
                    given(args, "--enable-eplb")
                        && option_value(args, MOE_RUNNER_BACKEND) == Some("flashinfer_cutedsl")
                        && moe_a2a_backend(args) == "none"
                }),
        )
    },
    fix: Fix::Manual {
        hint: "set --moe-runner-backend flashinfer_trtllm_routed, or an all-to-all backend with --moe-a2a-backend",
    },
    ..Rule::DEFAULT
};

/// The architectures SGLang's Nemotron-H override provider is registered for
/// (`arg_groups/model_overrides/nemotron_h.py`).
const NEMOTRON_H: &[&str] = &["NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3"];
const MOE_RUNNER_BACKEND: &str = "--moe-runner-backend";
const MOE_RUNNER_FIELD: &str = "spec.decode.extraArgs[--moe-runner-backend]";

/// Whether a server remaps experts as the Nemotron-H provider reads it (0.5.23): EPLB, redundant
/// experts, or an expert placement other than `trivial`.
fn remaps_experts(args: &[String]) -> bool {
    given(args, "--enable-eplb")
        || option_value(args, "--ep-num-redundant-experts").and_then(|n| n.trim().parse::<i64>().ok()) > Some(0)
        || option_value(args, "--init-expert-location").is_some_and(|location| location != "trivial")
}
