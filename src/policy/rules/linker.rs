//! The unified cache's external linker (`--enable-unified-cache-external-linker`, 0.5.20 on): the KV cache
//! hook's cache compatibility check (`arg_groups/kv_cache_hook.py`) and the HiCache hook
//! (`arg_groups/hicache_hook.py`).

use super::predicates::{CacheOptions, LINKER, linker_off, own_radix_cache, service_prefill};
use super::{EVERY_SERVER, Fix, Rule, text, when};
use crate::policy::argv::{given, option_value};
use crate::release::{Span, v0_5};

pub(super) const LD1: Rule = Rule {
    id: "LD1",
    about: "MLA deduplication needs the Mooncake linker",
    reproduces: "handle_hicache, srt/arg_groups/hicache_hook.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--enable-linker-mla-dedup]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-linker-mla-dedup requires the Mooncake linker.")],
    // Before the linker's own checks (X1-X3), on every server that gives the flag: the decode
    // servers with unifiedCacheExternalLinker, a service's prefill servers with the linker in
    // their extraArgs; the linker's backend is Mooncake unless its flag names another.
    check: |c| {
        let own = (c.decode, CacheOptions::of_settings(c).linker);
        let prefill = service_prefill(c).map(|fleet| (fleet, CacheOptions::of_prefill(c, fleet).linker));
        when(std::iter::once(own).chain(prefill).any(|(fleet, linker)| {
            let args = &fleet.extra_args;
            given(args, "--enable-linker-mla-dedup")
                && (!linker
                    || option_value(args, "--unified-cache-external-linker-backend").unwrap_or("mooncake")
                        != "mooncake")
        }))
    },
    fix: Fix::Manual {
        hint: "drop --enable-linker-mla-dedup from extraArgs, or run the external cache linker \
               (unifiedCacheExternalLinker) on its Mooncake backend",
    },
    ..Rule::DEFAULT
};

pub(super) const X1: Rule = Rule {
    id: "X1",
    about: "external cache linker needs the radix cache",
    reproduces: "handle_hicache, srt/arg_groups/hicache_hook.py (0.5.23)",
    field: LINKER,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-unified-cache-external-linker requires the default UnifiedRadixCache with radix caching enabled.",
    )],
    check: |c| when(c.settings.unified_cache_external_linker && !own_radix_cache(c)),
    fix: Fix::Rewrite {
        apply: linker_off,
        hint: "turn decodeRadixCache on (the linker sits under the radix cache; on a server that is not a PD \
               decode server, drop --disable-radix-cache), or turn unifiedCacheExternalLinker off",
    },
    ..Rule::DEFAULT
};

pub(super) const X2: Rule = Rule {
    id: "X2",
    about: "external cache linker × HiCache",
    reproduces: "handle_hicache, srt/arg_groups/hicache_hook.py (0.5.20–0.5.23)",
    field: LINKER,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive.")],
    check: |c| when(c.settings.unified_cache_external_linker && c.settings.hierarchical_cache),
    fix: Fix::Rewrite { apply: linker_off, hint: "use one of unifiedCacheExternalLinker and hierarchicalCache" },
    ..Rule::DEFAULT
};

pub(super) const X3: Rule = Rule {
    id: "X3",
    about: "external cache linker × storage backend",
    reproduces: "handle_hicache, srt/arg_groups/hicache_hook.py (0.5.20–0.5.23)",
    field: LINKER,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-unified-cache-external-linker does not use --hicache-storage-backend.")],
    check: |c| when(c.settings.unified_cache_external_linker && c.settings.hicache_storage_backend.is_some()),
    fix: Fix::Rewrite {
        apply: linker_off,
        hint: "use one of unifiedCacheExternalLinker and hicacheStorageBackend ({spec.cache} sets the storage \
               backend)",
    },
    ..Rule::DEFAULT
};

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// From 0.5.21 `--enable-linker-mla-dedup` needs the external cache linker on its Mooncake backend
    /// (LD1), on every server that gives it.
    #[test]
    fn ld1_linker_mla_dedup_needs_the_mooncake_linker() {
        let fired = |linker: bool, args: &[&str], patch| {
            let settings = with(|s| s.unified_cache_external_linker = linker);
            let verdict = run_at(v0_5(patch), &settings, &parallel_fleet(1, 1, false, args), &full());
            verdict.violations.iter().any(|v| v.rule == "LD1")
        };
        let dedup = "--enable-linker-mla-dedup";
        assert!(fired(false, &[dedup], 21));
        assert!(!fired(false, &[dedup], 20), "no such flag");
        assert!(!fired(true, &[dedup], 23));
        assert!(!fired(true, &[dedup, "--unified-cache-external-linker-backend", "mooncake"], 23));
        assert!(fired(true, &[dedup, "--unified-cache-external-linker-backend", "mori"], 23));
        assert!(!fired(false, &[], 23));

        let alone = |args: &[&str]| {
            let fleet = parallel_fleet(1, 1, false, args);
            let verdict = evaluate_other_server(
                PolicyInput::alone(&DisaggregationSpec::default(), &fleet, &full(), v0_5(23)),
                true,
            );
            verdict.violations.iter().any(|v| v.rule == "LD1")
        };
        assert!(alone(&[dedup]), "a prefill server without the linker");
    }

    #[test]
    fn the_external_cache_linker_exists_from_0_5_20_and_excludes_hicache_and_a_storage_backend() {
        let linker = with(|s| {
            s.unified_cache_external_linker = true;
            s.decode_radix_cache = true;
        });
        assert_eq!(
            messages("F3", &linker, &FleetSpec::default(), &full()),
            on(17..=19, "unrecognized arguments: --enable-unified-cache-external-linker")
        );
        assert_eq!(at(23, &linker, &FleetSpec::default(), &full()).outcome, Outcome::Valid);
        let with_hicache = DisaggregationSpec { hierarchical_cache: true, ..linker.clone() };
        assert_eq!(
            messages("X2", &with_hicache, &FleetSpec::default(), &full()),
            on(
                20..=23,
                "--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive."
            )
        );
        let with_backend = DisaggregationSpec { hicache_storage_backend: Some("file".into()), ..linker.clone() };
        assert_eq!(
            messages("X3", &with_backend, &FleetSpec::default(), &full()),
            on(20..=23, "--enable-unified-cache-external-linker does not use --hicache-storage-backend.")
        );
        let without_radix = DisaggregationSpec { decode_radix_cache: false, ..linker };
        assert_eq!(
            messages("X1", &without_radix, &FleetSpec::default(), &full()),
            on(
                23..=23,
                "--enable-unified-cache-external-linker requires the default UnifiedRadixCache with radix caching enabled."
            )
        );
    }
}
