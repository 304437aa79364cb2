//! Qwen4-Exp: its override provider (`arg_groups/model_overrides/qwen4_exp.py`).

use crate::api::TransferBackend;
use crate::policy::rules::predicates::{DECODE_PIPELINE, UNIFIED_MEMORY, fleets_in_scope, unified_memory_off};
use crate::policy::rules::{EVERY_SERVER, Fix, PD_SERVERS, Rule, text, when};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const QX1: Rule = Rule {
    id: "QX1",
    about: "Qwen4-Exp PD over MORI × pipeline stages",
    reproduces: "_qwen4_exp_overrides, srt/arg_groups/model_overrides/qwen4_exp.py (0.5.20–0.5.23)",
    field: DECODE_PIPELINE,
    span: Span::since(v0_5(20)),
    roles: PD_SERVERS,
    backends: &[TransferBackend::Mori],
    messages: &[text(
        "Qwen4-Exp PD with MORI requires --pp-size 1; MORI does not yet exchange the global QSA layer metadata \
         needed to pair compact state descriptors across pipeline stages.",
    )],
    check: |c| when(c.layout.architecture == QWEN4_EXP && fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1)),
    fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets, or use transferBackend mooncake or nixl" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const QX2: Rule = Rule {
    id: "QX2",
    about: "Qwen4-Exp × unified memory",
    reproduces: "_qwen4_exp_overrides, srt/arg_groups/model_overrides/qwen4_exp.py (0.5.20–0.5.23)",
    field: UNIFIED_MEMORY,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("Qwen4-Exp does not support --enable-unified-memory yet")],
    check: |c| when(c.layout.architecture == QWEN4_EXP && c.settings.enable_unified_memory),
    fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    ..Rule::DEFAULT
};

const QWEN4_EXP: &str = "Qwen4ExpForConditionalGeneration";
