//! ERNIE 4.5 VL MoE: its override provider (`arg_groups/model_overrides/ernie45_vl.py`).

use crate::policy::rules::predicates::{DECODE_DP_ATTENTION, fleets_in_scope, runs_dp_attention};
use crate::policy::rules::{EVERY_SERVER, Fix, Rule, text, when};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const E1: Rule = Rule {
    id: "E1",
    about: "ERNIE 4.5 VL MoE × DP attention",
    reproduces: "_ernie45_vl_overrides, srt/arg_groups/model_overrides/ernie45_vl.py (0.5.22–0.5.23)",
    field: DECODE_DP_ATTENTION,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "ERNIE 4.5 VL MoE does not support DP attention: its attention heads are split over the full TP group.",
    )],
    check: |c| {
        when(c.layout.architecture == ERNIE45_VL_MOE && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)))
    },
    fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets" },
    ..Rule::DEFAULT
};

const ERNIE45_VL_MOE: &str = "Ernie4_5_VLMoeForConditionalGeneration";
