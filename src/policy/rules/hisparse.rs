//! HiSparse (`--enable-hisparse`): the HiSparse validation pass (`arg_groups/hisparse_hook.py`).

use super::predicates::{HISPARSE, keeps_radix_cache, service_prefill};
use super::{EVERY_SERVER, Fix, Rule, RuleInput, Subject, text, text_from, when};
use crate::api::{FleetSpec, LayoutFeature};
use crate::policy::argv::given;
use crate::release::v0_5;

pub(super) const HS1: Rule = Rule {
    id: "HS1",
    about: "HiSparse on a model without sparse attention",
    reproduces: "validate_hisparse, srt/arg_groups/hisparse_hook.py (0.5.17–0.5.23)",
    field: HISPARSE,
    roles: EVERY_SERVER,
    messages: &[
        text(
            "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., DeepSeek V3.2, \
             GLM-5) and DeepSeek V4 now. ",
        ),
        text_from(
            21,
            "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., DeepSeek V3.2, \
             GLM-5), DeepSeek V4, and MiniMax M3 now. ",
        ),
    ],
    changes: &[text_from(21, "MiniMax-M3 sparse models pass")],
    check: |c| {
        let sparse = c.layout.has(LayoutFeature::Dsa)
            || c.layout.has(LayoutFeature::DeepseekV4)
            || (c.release >= v0_5(21) && c.layout.has(LayoutFeature::MinimaxSparse));
        when(!sparse && hisparse_servers(c).next().is_some())
    },
    fix: Fix::Manual {
        hint: "turn hisparse off (and drop --enable-hisparse from a service's {spec.prefill.extraArgs}): HiSparse \
               needs a DSA, DeepSeek-V4 or (from SGLang 0.5.21) MiniMax-M3 sparse model",
    },
    ..Rule::DEFAULT
};

pub(super) const HS2: Rule = Rule {
    id: "HS2",
    about: "HiSparse with a radix cache",
    reproduces: "validate_hisparse, srt/arg_groups/hisparse_hook.py (0.5.17–0.5.23)",
    field: HISPARSE,
    roles: EVERY_SERVER,
    messages: &[text("Hierarchical sparse attention currently requires --disable-radix-cache.")],
    check: |c| when(hisparse_servers(c).any(|(fleet, decode)| keeps_radix_cache(c, fleet, decode))),
    fix: Fix::Manual {
        hint: "turn decodeRadixCache off on HiSparse decode servers, and add --disable-radix-cache to the \
               extraArgs of HiSparse servers that are not PD decode servers",
    },
    ..Rule::DEFAULT
};

/// The servers in scope that run HiSparse, each with whether it is a PD decode server: the decode
/// servers with `hisparse` (the guard's one server: its own flag), and a service's prefill
/// servers with `--enable-hisparse` in their `extraArgs`.
fn hisparse_servers<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    let own = c.settings.hisparse.then_some((c.decode, c.subject != Subject::OtherServer));
    let prefill = service_prefill(c).filter(|fleet| given(&fleet.extra_args, "--enable-hisparse"));
    own.into_iter().chain(prefill.map(|fleet| (fleet, false)))
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// HiSparse's validation pass: a DSA or DeepSeek-V4 model only (MiniMax-M3 sparse too from
    /// 0.5.21, HS1), and no radix cache: a PD decode server has none unless decode radix cache (which
    /// the PD hook refuses first, R18a), other servers need --disable-radix-cache (HS2).
    #[test]
    fn hisparse_needs_sparse_attention_and_no_radix_cache() {
        let hisparse = with(|s| s.hisparse = true);
        let fired = |patch: u16, settings: &DisaggregationSpec, layout: &AttentionLayout| {
            at(patch, settings, &FleetSpec::default(), layout)
                .violations
                .into_iter()
                .map(|v| v.rule)
                .filter(|r| ["HS1", "HS2", "R18a"].contains(r))
                .collect::<Vec<_>>()
        };
        let dsa = fixture("deepseek-v3.2-exp");
        let m3 = fixture("minimax-m3-sparse");
        assert_eq!(fired(23, &hisparse, &full()), ["HS1"]);
        assert_eq!(fired(23, &hisparse, &mla()), ["HS1"], "MLA without DSA");
        assert!(fired(23, &hisparse, &dsa).is_empty());
        assert!(fired(23, &hisparse, &dsv4()).is_empty());
        assert_eq!(fired(20, &hisparse, &m3), ["HS1"]);
        assert!(fired(21, &hisparse, &m3).is_empty());
        let radix = with(|s| {
            s.hisparse = true;
            s.decode_radix_cache = true;
        });
        let mut both = fired(23, &radix, &dsa);
        both.sort_unstable();
        assert_eq!(both, ["HS2", "R18a"]);

        // A prefill server keeps its radix cache unless told otherwise.
        let server = |args: &[&str]| {
            let fleet = FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
            let input = PolicyInput::alone(&hisparse, &fleet, &dsa, v0_5(23));
            let rules = evaluate_other_server(input, true).violations.into_iter().map(|v| v.rule);
            rules.filter(|r| r.starts_with("HS")).collect::<Vec<_>>()
        };
        assert_eq!(server(&[]), ["HS2"]);
        assert!(server(&["--disable-radix-cache"]).is_empty());
    }
}
