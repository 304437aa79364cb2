//! HiCache (`--enable-hierarchical-cache`): the HiCache hook (`arg_groups/hicache_hook.py`) with DCP and
//! buffer-only host memory, and the KV cache hook's radix cache requirement
//! (`arg_groups/kv_cache_hook.py`).

use super::predicates::{
    HIERARCHICAL_CACHE, HOST_MEMORY_MODE, buffer_only, dcp, hierarchical_off, host_memory_mode_unset, host_pool,
    own_radix_cache,
};
use super::{EVERY_SERVER, Fix, Rule, RuleInput, Subject, text, text_from, when};
use crate::api::AttentionKind;
use crate::policy::argv::option_value;
use crate::release::{Span, v0_5};

pub(super) const S7: Rule = Rule {
    id: "S7",
    about: "HiCache without decode radix cache",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    roles: EVERY_SERVER,
    messages: &[text(
        "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be \
         used at the same time. Please use only one of them.",
    )],
    // A decode server runs the chunk cache (`disable_radix_cache`) unless decode radix cache
    // is on (R12), before this check reads it: so HiCache needs decode radix cache there.
    check: |c| when(c.settings.hierarchical_cache && !own_radix_cache(c)),
    fix: Fix::Rewrite {
        apply: hierarchical_off,
        hint: "turn decodeRadixCache on (HiCache sits under the decode radix cache; on a server that is not a PD \
               decode server, drop --disable-radix-cache), or turn hierarchicalCache off",
    },
    ..Rule::DEFAULT
};

pub(super) const H3: Rule = Rule {
    id: "H3",
    about: "buffer-only host memory needs a storage backend",
    reproduces: "validate_hicache_host_memory_mode, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HOST_MEMORY_MODE,
    span: Span::since(v0_5(19)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--hicache-host-memory-mode buffer_only requires a storage backend (--hicache-storage-backend): host \
         memory is only a staging buffer and all cached data lives in storage.",
    )],
    check: |c| when(buffer_only_checked(c) && c.settings.hicache_storage_backend.is_none()),
    fix: Fix::Rewrite { apply: host_memory_mode_unset, hint: BUFFER_ONLY_HINT },
    ..Rule::DEFAULT
};

pub(super) const H8: Rule = Rule {
    id: "H8",
    about: "buffer-only host memory × the write-back policy",
    reproduces: "validate_hicache_host_memory_mode, srt/arg_groups/hicache_hook.py (0.5.19–0.5.21)",
    field: HOST_MEMORY_MODE,
    span: Span::between(v0_5(19), v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--hicache-host-memory-mode buffer_only does not support --hicache-write-policy write_back; use \
         write_through or write_through_selective.",
    )],
    check: |c| {
        let write_back = option_value(&c.decode.extra_args, "--hicache-write-policy") == Some("write_back");
        when(buffer_only_checked(c) && c.settings.hicache_storage_backend.is_some() && write_back)
    },
    fix: Fix::Manual {
        hint: "drop --hicache-write-policy write_back from extraArgs (write_through is the default), or leave \
               hicacheHostMemoryMode unset (cache); from 0.5.22 SGLang resolves write_back to write_through \
               under buffer_only",
    },
    ..Rule::DEFAULT
};

pub(super) const H4: Rule = Rule {
    id: "H4",
    about: "buffer-only host memory on decode",
    reproduces: "validate_hicache_host_memory_mode, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HOST_MEMORY_MODE,
    span: Span::since(v0_5(19)),
    messages: &[text(
        "--hicache-host-memory-mode buffer_only is not supported on decode instances: the decode-side prefetch \
         and offload paths bypass the buffer-mode pipeline, fetching without its prefix context and never \
         consuming its staged holds. Prefill instances share the standard scheduler path and are supported.",
    )],
    check: |c| when(c.subject != Subject::OtherServer && buffer_only_checked(c)),
    fix: Fix::Rewrite { apply: host_memory_mode_unset, hint: BUFFER_ONLY_HINT },
    ..Rule::DEFAULT
};

pub(super) const D1: Rule = Rule {
    id: "D1",
    about: "HiCache × DCP × storage backend",
    reproduces: "ServerArgs._resolve_hicache_dcp_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.19–0.5.22)",
    field: HIERARCHICAL_CACHE,
    span: Span::between(v0_5(17), v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--hicache-storage-backend (L3) with --dcp-size > 1 is not supported yet: under DCP each rank holds a \
         distinct interleaved MLA KV shard, so the rank-0-only replicated-MLA backup and the storage keys must \
         become dcp_rank-aware first. Run HiCache+DCP with L1/L2 only.",
    )],
    check: |c| when(hicache_dcp(c) && c.settings.hicache_storage_backend.is_some()),
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const D6: Rule = Rule {
    id: "D6",
    about: "HiCache × DCP × storage backend × buffer-only host memory",
    reproduces: "resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.23)",
    field: HIERARCHICAL_CACHE,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text("HiCache L3 with DCP does not support buffer_only host memory.")],
    check: |c| when(hicache_dcp(c) && c.settings.hicache_storage_backend.is_some() && buffer_only(c)),
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const D2: Rule = Rule {
    id: "D2",
    about: "HiCache × DCP × speculative decoding",
    reproduces: "ServerArgs._resolve_hicache_dcp_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    roles: EVERY_SERVER,
    messages: &[
        text(
            "HiCache with --dcp-size > 1 does not support speculative decoding yet (the draft-model host pool has \
             no DCP index translation).",
        ),
        text_from(
            18,
            "HiCache with --dcp-size > 1 only supports DSPARK speculative decoding; other draft-model host pools \
             have no DCP index translation.",
        ),
    ],
    changes: &[text_from(17, "any algorithm"), text_from(18, "DSPARK allowed")],
    check: |c| {
        let algorithm = c.settings.speculative_algorithm.as_deref();
        let allowed = algorithm.is_none() || (c.release >= v0_5(18) && algorithm == Some("DSPARK"));
        when(hicache_dcp(c) && !allowed)
    },
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const D3: Rule = Rule {
    id: "D3",
    about: "HiCache × DCP × LMCache",
    reproduces: "ServerArgs._resolve_hicache_dcp_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation.",
    )],
    check: |c| when(hicache_dcp(c) && c.settings.lmcache),
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const D4: Rule = Rule {
    id: "D4",
    about: "HiCache × DCP × HiSparse",
    reproduces: "ServerArgs._resolve_hicache_dcp_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-hisparse with --dcp-size > 1 is not supported: the HiSparse host pool is constructed without \
         DCP translation.",
    )],
    check: |c| when(hicache_dcp(c) && c.settings.hisparse),
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

pub(super) const D5: Rule = Rule {
    id: "D5",
    about: "HiCache × DCP needs an MLA model",
    reproduces: "ServerArgs._resolve_hicache_dcp_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 resolve_hicache_dcp_compatibility, srt/arg_groups/hicache_hook.py (0.5.19–0.5.23)",
    field: HIERARCHICAL_CACHE,
    roles: EVERY_SERVER,
    messages: &[text(
        "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives in \
         MLATokenToKVPoolHost, and the MHA host pool has none.",
    )],
    check: |c| when(hicache_dcp(c) && c.layout.attention != AttentionKind::Mla),
    fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    ..Rule::DEFAULT
};

const BUFFER_ONLY_HINT: &str = "leave hicacheHostMemoryMode unset (cache): SGLang runs buffer_only host memory on \
                                prefill servers and servers without PD disaggregation only";

const HICACHE_DCP_HINT: &str = "turn hierarchicalCache off, or set decodeContextParallel to 1";

/// HiCache with decode context parallelism, which the HiCache hook checks further (D1–D5).
fn hicache_dcp(c: &RuleInput<'_>) -> bool {
    c.settings.hierarchical_cache && dcp(c)
}

/// Whether the server's HiCache hook checks buffer-only host memory: a decode server's with
/// HiCache, decode offload, or the host_pool or automatic retraction backup (the hook normalizes
/// the decode host pool then); a prefill server's or one without PD with HiCache.
fn buffer_only_checked(c: &RuleInput<'_>) -> bool {
    if c.subject == Subject::OtherServer {
        return buffer_only(c) && c.settings.hierarchical_cache;
    }
    let host_pool_path = c.settings.retraction_backup.is_none() || host_pool(c);
    buffer_only(c) && (c.settings.hierarchical_cache || c.settings.decode_offload_kv_cache || host_pool_path)
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    const HIERARCHICAL: &str = "spec.disaggregation.hierarchicalCache";

    #[test]
    fn s7_hierarchical_cache_needs_the_decode_radix_cache() {
        let decode = FleetSpec::default();
        assert_rewritable(
            with(|s| s.hierarchical_cache = true),
            &decode,
            &full(),
            "S7",
            HIERARCHICAL,
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be used at \
             the same time. Please use only one of them.",
            ("true", "false"),
        );
        let under_radix = with(|s| {
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        });
        let verdict = run(&under_radix, &decode, &full());
        assert_eq!(verdict.outcome, Outcome::Valid, "{:?}", verdict.violations);
        assert!(verdict.violations.iter().all(|v| v.rule != "S7"));
    }

    /// On a server that is not a PD decode server, HiCache, LMCache and the external cache linker sit
    /// under the server's own radix cache, which `--disable-radix-cache` turns off (S7, L3, X1);
    /// before, the guard left them to SGLang there.
    #[test]
    fn s7_l3_x1_read_the_own_radix_cache_of_a_server_without_pd_decode() {
        let rules = |settings: &DisaggregationSpec, args: &[&str], prefill: bool| {
            let server = FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
            let verdict = evaluate_other_server(PolicyInput::alone(settings, &server, &full(), v0_5(23)), prefill);
            verdict
                .violations
                .iter()
                .map(|v| v.rule)
                .filter(|rule| ["S7", "L3", "X1"].contains(rule))
                .collect::<Vec<_>>()
        };
        let hierarchical = with(|s| s.hierarchical_cache = true);
        let lmcache = with(|s| s.lmcache = true);
        let linker = with(|s| s.unified_cache_external_linker = true);
        for prefill in [false, true] {
            for (settings, rule) in [(&hierarchical, "S7"), (&lmcache, "L3"), (&linker, "X1")] {
                assert!(rules(settings, &[], prefill).is_empty(), "{rule} with the radix cache, prefill {prefill}");
                assert_eq!(rules(settings, &["--disable-radix-cache"], prefill), [rule], "prefill {prefill}");
            }
        }
        // A decode server's radix cache is decode radix cache's, whatever its arguments say.
        let decode = FleetSpec { extra_args: vec!["--disable-radix-cache".into()], ..FleetSpec::default() };
        let under_radix = with(|s| {
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        });
        assert!(run(&under_radix, &decode, &full()).violations.iter().all(|v| v.rule != "S7"));
    }

    /// Buffer-only host memory on a prefill server or one without PD is checked with HiCache only:
    /// it needs a storage backend (H3) and, 0.5.19-0.5.21, not the write-back policy (H8, also on a
    /// decode server, before H4). kvpilot used to call such prefill servers valid.
    #[test]
    fn h3_h8_buffer_only_host_memory_on_every_server() {
        let buffer_only = |hierarchical: bool, backend: Option<&str>| {
            with(|s| {
                s.hierarchical_cache = hierarchical;
                s.hicache_host_memory_mode = Some(HicacheHostMemoryMode::BufferOnly);
                s.hicache_storage_backend = backend.map(str::to_string);
            })
        };
        let llama = full();
        let alone = |settings: &DisaggregationSpec, fleet: &FleetSpec, patch: u16| {
            rule_ids(evaluate_other_server(PolicyInput::alone(settings, fleet, &llama, v0_5(patch)), true))
        };
        let plain = FleetSpec::default();
        assert_eq!(alone(&buffer_only(true, None), &plain, 21), ["H3"]);
        assert!(alone(&buffer_only(false, None), &plain, 21).is_empty(), "checked with HiCache only");
        assert!(alone(&buffer_only(true, None), &plain, 18).iter().all(|rule| *rule != "H3"), "0.5.19 on");
        let write_back = parallel_fleet(1, 1, false, &["--hicache-write-policy", "write_back"]);
        assert_eq!(alone(&buffer_only(true, Some("file")), &write_back, 21), ["H8"]);
        assert!(alone(&buffer_only(true, Some("file")), &write_back, 22).is_empty(), "resolved to write-through");
        assert!(alone(&buffer_only(true, Some("file")), &plain, 21).is_empty());
        let decode = run_at(v0_5(20), &buffer_only(true, Some("file")), &write_back, &full());
        assert_eq!(rule_ids(decode).into_iter().filter(|r| r.starts_with('H')).collect::<Vec<_>>(), ["H8", "H4"]);
    }

    #[test]
    fn hicache_with_dcp_is_refused_for_each_cause_the_hicache_hook_names() {
        let base = with(|s| {
            s.hierarchical_cache = true;
            s.decode_radix_cache = true;
            s.decode_context_parallel = 2;
        });
        let mla_model = mla();
        assert!(at(23, &base, &FleetSpec::default(), &mla_model).violations.iter().all(|v| !v.rule.starts_with('D')));
        assert_eq!(
            messages("D5", &base, &FleetSpec::default(), &full()),
            on(
                17..=23,
                "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives in \
                 MLATokenToKVPoolHost, and the MHA host pool has none."
            )
        );
        let storage = DisaggregationSpec { hicache_storage_backend: Some("file".into()), ..base.clone() };
        assert_eq!(
            messages("D1", &storage, &FleetSpec::default(), &mla_model).iter().flatten().count(),
            6,
            "0.5.17–0.5.22"
        );
        let dspark = DisaggregationSpec { speculative_algorithm: Some("DSPARK".into()), ..base.clone() };
        let fires: Vec<bool> =
            messages("D2", &dspark, &FleetSpec::default(), &mla_model).iter().map(Option::is_some).collect();
        assert_eq!(fires, [true, false, false, false, false, false, false], "DSPARK is allowed from 0.5.18");
        let lmcache = DisaggregationSpec { lmcache: true, ..base.clone() };
        assert_eq!(
            messages("D3", &lmcache, &FleetSpec::default(), &mla_model),
            on(
                17..=23,
                "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation."
            )
        );
        let hisparse = DisaggregationSpec { hisparse: true, decode_radix_cache: false, ..base };
        assert_eq!(messages("D4", &hisparse, &FleetSpec::default(), &mla_model).iter().flatten().count(), 7);
    }

    #[test]
    fn buffer_only_host_memory_is_for_servers_that_are_not_pd_decode_servers() {
        let buffer_only = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.hicache_host_memory_mode = Some(crate::api::HicacheHostMemoryMode::BufferOnly);
                edit(s);
            })
        };
        assert_eq!(
            messages("F5", &buffer_only(|_| {}), &FleetSpec::default(), &full()),
            on(17..=18, "unrecognized arguments: --hicache-host-memory-mode buffer_only")
        );
        let decode_refusal = "--hicache-host-memory-mode buffer_only is not supported on decode instances: the decode-side \
             prefetch and offload paths bypass the buffer-mode pipeline, fetching without its prefix context and never \
             consuming its staged holds. Prefill instances share the standard scheduler path and are supported.";
        // The HiCache hook checks it on a decode server whose host pool it builds: automatic or host_pool backup.
        assert_eq!(messages("H4", &buffer_only(|_| {}), &FleetSpec::default(), &full()), on(19..=23, decode_refusal));
        let cpu_tensor = buffer_only(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
        assert_eq!(messages("H4", &cpu_tensor, &FleetSpec::default(), &full()), vec![None; 7]);
        assert_eq!(messages("H3", &buffer_only(|_| {}), &FleetSpec::default(), &full()).iter().flatten().count(), 5);
        let with_backend = buffer_only(|s| s.hicache_storage_backend = Some("file".into()));
        assert_eq!(messages("H3", &with_backend, &FleetSpec::default(), &full()), vec![None; 7]);
        assert_eq!(
            messages("L8", &buffer_only(|s| s.lmcache = true), &FleetSpec::default(), &full()),
            on(21..=23, "--hicache-host-memory-mode=buffer_only is a HiCache-only mode")
        );
        let l3_dcp = buffer_only(|s| {
            s.hierarchical_cache = true;
            s.decode_radix_cache = true;
            s.decode_context_parallel = 2;
            s.hicache_storage_backend = Some("file".into());
        });
        assert_eq!(
            messages("D6", &l3_dcp, &FleetSpec::default(), &mla()),
            on(23..=23, "HiCache L3 with DCP does not support buffer_only host memory.")
        );
        let rewritten = at(
            23,
            &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..buffer_only(|_| {}) },
            &FleetSpec::default(),
            &full(),
        );
        assert_eq!(rewritten.outcome, Outcome::Rewritten);
        assert_eq!(rewritten.settings.hicache_host_memory_mode, None);
    }
}
