//! MiniCPM: its override provider (`arg_groups/model_overrides/minicpm.py`, 0.5.19 on).

use crate::api::{FleetSpec, LayoutFeature};
use crate::policy::argv::option_value;
use crate::policy::rules::predicates::{
    ATTENTION_BACKENDS, DECODE_DP_ATTENTION, HIERARCHICAL_CACHE, fleets_in_scope, hicache_fleets, provider_dp_attention,
};
use crate::policy::rules::{EVERY_SERVER, Fix, PD_SERVERS, Rule, RuleInput, text, text_from, when};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const MC1: Rule = Rule {
    id: "MC1",
    about: "MiniCPM × DP attention",
    reproduces: "_minicpm_sala_overrides, srt/arg_groups/model_overrides/minicpm.py (0.5.19–0.5.23)",
    field: DECODE_DP_ATTENTION,
    span: Span::since(v0_5(19)),
    roles: EVERY_SERVER,
    messages: &[text("MiniCPM does not support DP attention")],
    changes: &[text_from(22, "DP attention counts from more than one attention-DP group")],
    check: |c| {
        when(
            MINICPM.contains(&c.layout.architecture.as_str())
                && fleets_in_scope(c).any(|fleet| provider_dp_attention(c, fleet)),
        )
    },
    fix: Fix::Manual {
        hint: "turn enableDpAttention off on both fleets (and drop --enable-dp-attention from extraArgs)",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const MC2: Rule = Rule {
    id: "MC2",
    about: "MiniCPM-SALA hybrid attention × HiCache",
    reproduces: "_minicpm_sala_overrides, srt/arg_groups/model_overrides/minicpm.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    span: Span::since(v0_5(19)),
    roles: EVERY_SERVER,
    messages: &[text("MiniCPM SALA does not support hierarchical cache")],
    check: |c| {
        when(
            MINICPM.contains(&c.layout.architecture.as_str())
                && minicpm_hybrid_attention(c)
                && hicache_fleets(c).next().is_some(),
        )
    },
    fix: Fix::Manual { hint: "turn hierarchicalCache off: MiniCPM-SALA's sparse and lightning layers run without it" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const MC3: Rule = Rule {
    id: "MC3",
    about: "MiniCPM sparse attention under PD",
    reproduces: "_minicpm_sala_overrides, srt/arg_groups/model_overrides/minicpm.py (0.5.19–0.5.23)",
    field: "spec.decode.extraArgs[--attention-backend]",
    span: Span::since(v0_5(19)),
    roles: PD_SERVERS,
    messages: &[text("MiniCPM sparse attention does not support PD disaggregation")],
    check: |c| {
        when(
            MINICPM.contains(&c.layout.architecture.as_str())
                && c.layout.has(LayoutFeature::MinicpmSparseAttention)
                && fleets_in_scope(c).any(minicpm_sparse_backend),
        )
    },
    fix: Fix::Manual {
        hint: "serve MiniCPM-SALA's sparse attention without PD disaggregation, or run its dense attention under PD \
               (env SGLANG_MINICPM_FORCE_DENSE=1, or --attention-backend fa3 or flashinfer in extraArgs)",
    },
    ..Rule::DEFAULT
};

/// The architectures SGLang's MiniCPM override provider is registered for
/// (`arg_groups/model_overrides/minicpm.py`, 0.5.19 on).
const MINICPM: &[&str] = &["MiniCPMForCausalLM", "MiniCPMSALAForCausalLM"];
const MINICPM_FORCE_DENSE_ENV: &str = "SGLANG_MINICPM_FORCE_DENSE";

/// Whether MiniCPM-SALA has hybrid attention (`has_minicpm_sparse_attention` or
/// `has_lightning_layers`), which its provider runs without the radix cache or HiCache.
fn minicpm_hybrid_attention(c: &RuleInput<'_>) -> bool {
    c.layout.has(LayoutFeature::MinicpmSparseAttention)
        || (c.layout.model_type.as_deref() == Some("minicpm_sala") && c.layout.layers.ssm > 0)
}

/// Whether a MiniCPM server runs its sparse attention backend, as the provider decides it: no
/// `SGLANG_MINICPM_FORCE_DENSE`, and either no attention backend given (the provider then picks
/// a sparse one) or one of the three a sparse one.
fn minicpm_sparse_backend(fleet: &FleetSpec) -> bool {
    let backends = ATTENTION_BACKENDS.map(|option| option_value(&fleet.extra_args, option));
    !fleet.env_on(MINICPM_FORCE_DENSE_ENV)
        && (backends.iter().all(Option::is_none)
            || backends.iter().flatten().any(|b| matches!(*b, "minicpm_flashattn" | "minicpm_flashinfer")))
}
