//! LMCache (`--enable-lmcache`, 0.5.21 on): the KV cache hook's cache compatibility check
//! (`arg_groups/kv_cache_hook.py`, `handle_cache_compatibility`) and the HiCache hook
//! (`arg_groups/hicache_hook.py`).

use super::predicates::{buffer_only, dcp, own_radix_cache, runs_dp_attention, speculates};
use super::{EVERY_SERVER, Fix, PD_SERVERS, Rule, text, text_from, when};
use crate::api::DisaggregationSpec;
use crate::release::{Span, v0_5};

pub(super) const L1: Rule = Rule {
    id: "L1",
    about: "LMCache × HiCache",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-lmcache and --enable-hierarchical-cache are mutually exclusive")],
    check: |c| when(c.settings.lmcache && c.settings.hierarchical_cache),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L2: Rule = Rule {
    id: "L2",
    about: "LMCache × external cache linker",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive")],
    check: |c| when(c.settings.lmcache && c.settings.unified_cache_external_linker),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L3: Rule = Rule {
    id: "L3",
    about: "LMCache needs the radix cache",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-lmcache requires radix cache to be enabled")],
    // A decode server runs without the radix cache unless decode radix cache is on (R12).
    check: |c| when(c.settings.lmcache && !own_radix_cache(c)),
    fix: Fix::Rewrite {
        apply: lmcache_off,
        hint: "turn lmcache off: SGLang 0.5.21 and later run LMCache only on servers without PD disaggregation \
               ({spec.cache} is kvpilot's KV store for PD servers); on a server without PD, drop \
               --disable-radix-cache instead (LMCache sits under the radix cache)",
    },
    ..Rule::DEFAULT
};

pub(super) const L4: Rule = Rule {
    id: "L4",
    about: "LMCache × speculative decoding",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("LMCacheUnifiedRadixCache does not yet support speculative decoding")],
    check: |c| when(c.settings.lmcache && speculates(c)),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L5: Rule = Rule {
    id: "L5",
    about: "LMCache × DP attention",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("LMCacheUnifiedRadixCache does not yet support DP attention")],
    changes: &[
        text_from(21, "--enable-dp-attention"),
        text_from(22, "DP attention with more than one attention-DP group (dataParallel > 1)"),
    ],
    check: |c| when(c.settings.lmcache && runs_dp_attention(c, c.decode)),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L6: Rule = Rule {
    id: "L6",
    about: "LMCache × DCP",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation",
    )],
    check: |c| when(c.settings.lmcache && dcp(c)),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L7: Rule = Rule {
    id: "L7",
    about: "LMCache under PD disaggregation",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: PD_SERVERS,
    messages: &[text("LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only")],
    check: |c| when(c.settings.lmcache),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

pub(super) const L8: Rule = Rule {
    id: "L8",
    about: "LMCache × buffer-only host memory",
    reproduces: "handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.21–0.5.23)",
    field: LMCACHE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--hicache-host-memory-mode=buffer_only is a HiCache-only mode")],
    check: |c| when(c.settings.lmcache && buffer_only(c)),
    fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    ..Rule::DEFAULT
};

const LMCACHE: &str = "spec.disaggregation.lmcache";

const LMCACHE_HINT: &str = "turn lmcache off: SGLang 0.5.21 and later run LMCache only on servers without PD \
                            disaggregation ({spec.cache} is kvpilot's KV store for PD servers)";

fn lmcache_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.lmcache = false;
    ("true".into(), "false".into())
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn lmcache_is_refused_on_pd_servers_from_0_5_21_with_the_first_cause_sglang_names() {
        let with_radix = with(|s| {
            s.lmcache = true;
            s.decode_radix_cache = true;
        });
        let colocated_only = "LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only";
        assert_eq!(messages("L7", &with_radix, &FleetSpec::default(), &full()), on(21..=23, colocated_only));
        assert_eq!(messages("L3", &with_radix, &FleetSpec::default(), &full()), vec![None; 7]);
        // A decode server without decode radix cache runs with the radix cache disabled (R12).
        let without_radix = with(|s| s.lmcache = true);
        assert_eq!(
            messages("L3", &without_radix, &FleetSpec::default(), &full()),
            on(21..=23, "--enable-lmcache requires radix cache to be enabled")
        );
        let causes = [
            (
                "L1",
                with(|s| s.hierarchical_cache = true),
                "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
            ),
            (
                "L2",
                with(|s| s.unified_cache_external_linker = true),
                "--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive",
            ),
            (
                "L4",
                with(|s| s.speculative_algorithm = Some("EAGLE".into())),
                "LMCacheUnifiedRadixCache does not yet support speculative decoding",
            ),
            (
                "L6",
                with(|s| s.decode_context_parallel = 2),
                "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation",
            ),
        ];
        for (rule, base, message) in causes {
            let settings = DisaggregationSpec { lmcache: true, decode_radix_cache: true, ..base };
            assert_eq!(messages(rule, &settings, &FleetSpec::default(), &full()), on(21..=23, message), "{rule}");
        }
        // `NONE` is SGLang's spelling of no speculative algorithm.
        let none = with(|s| {
            s.lmcache = true;
            s.speculative_algorithm = Some("NONE".into());
        });
        assert_eq!(messages("L4", &none, &FleetSpec::default(), &full()), vec![None; 7]);
        // DP attention: 0.5.21 reads the flag, 0.5.22+ the attention-DP group count.
        let dp_attention = FleetSpec { enable_dp_attention: true, ..FleetSpec::default() };
        let dp_message = "LMCacheUnifiedRadixCache does not yet support DP attention";
        assert_eq!(messages("L5", &with_radix, &dp_attention, &full()), on(21..=21, dp_message));
        let two_groups = FleetSpec { tensor_parallel: 2, data_parallel: 2, ..dp_attention };
        assert_eq!(messages("L5", &with_radix, &two_groups, &full()), on(21..=23, dp_message));
        // The safe fix is LMCache off; nothing else changes.
        let rewritten = at(
            23,
            &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..without_radix },
            &FleetSpec::default(),
            &full(),
        );
        assert_eq!(rewritten.outcome, Outcome::Rewritten);
        assert_eq!(
            rewritten.rewrites.iter().map(|r| (r.rule.as_str(), r.to.as_str())).collect::<Vec<_>>(),
            [("L3", "false")]
        );
        assert!(!rewritten.settings.lmcache);
    }
}
