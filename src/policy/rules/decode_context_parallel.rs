//! Decode context parallelism (`--dcp-size`): the PD hook's DCP checks
//! (`arg_groups/pd_disaggregation_hook.py`) and the decode-CP hook's communication flags and its refusal of
//! prefill CP (`arg_groups/parallel_hook.py`, `handle_decode_context_parallelism`).

use super::predicates::{
    DECODE_CONTEXT_PARALLEL, DECODE_RADIX_CACHE, HIERARCHICAL_CACHE, PREFILL_CP, dcp, hierarchical_off, pd_servers,
    radix, radix_off,
};
use super::{EVERY_SERVER, Fix, Rule, RuleInput, text, text_from, when, when_with};
use crate::api::TransferBackend;
use crate::policy::argv::{given, option_value};
use crate::release::{Span, v0_5};

pub(super) const DC1: Rule = Rule {
    id: "DC1",
    about: "decode CP × prefill CP",
    reproduces: "handle_decode_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.22–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("--dcp-size > 1 does not support --enable-prefill-cp.")],
    // decodeContextParallel runs on the decode servers (the guard's server: its own --dcp-size).
    check: |c| when(dcp(c) && given(&c.decode.extra_args, PREFILL_CP)),
    fix: Fix::Manual {
        hint: "drop --enable-prefill-cp from the extraArgs of servers with decodeContextParallel above 1 (prefill CP \
               belongs on prefill servers)",
    },
    ..Rule::DEFAULT
};

pub(super) const DF1: Rule = Rule {
    id: "DF1",
    about: "an all-to-all DCP backend without DCP",
    reproduces: "ServerArgs._handle_dcp_validation, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dcp_validation, srt/arg_groups/parallel_hook.py (0.5.19); \
                 handle_decode_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.20–0.5.23)",
    field: "spec.decode.extraArgs[--dcp-comm-backend]",
    roles: EVERY_SERVER,
    messages: &[text(
        "--dcp-comm-backend {backend} only affects the decode context-parallel attention reduction and therefore \
         requires --dcp-size / --decode-context-parallel-size > 1, but got dcp_size={dcp}.",
    )],
    check: |c| {
        let (backend, dcp) = pd_servers(c).find_map(|(fleet, _, dcp)| {
            let backend = option_value(&fleet.extra_args, DCP_COMM_BACKEND)?;
            (matches!(backend, "a2a" | "fi_a2a") && dcp <= 1).then_some((backend, dcp))
        })?;
        when_with(true, vec![("backend", backend.to_string()), ("dcp", dcp.to_string())])
    },
    fix: Fix::Manual {
        hint: "drop --dcp-comm-backend from extraArgs, or set decodeContextParallel above 1 on the servers that \
               give it",
    },
    ..Rule::DEFAULT
};

pub(super) const DF2: Rule = Rule {
    id: "DF2",
    about: "a replicated DCP Q projection without DCP",
    reproduces: "ServerArgs._handle_dcp_validation, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dcp_validation, srt/arg_groups/parallel_hook.py (0.5.19); \
                 handle_decode_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.20–0.5.23)",
    field: "spec.decode.extraArgs[--dcp-replicate-q-proj]",
    roles: EVERY_SERVER,
    messages: &[text("--dcp-replicate-q-proj requires --dcp-size > 1.")],
    check: |c| when(pd_servers(c).any(|(fleet, _, dcp)| given(&fleet.extra_args, DCP_REPLICATE_Q_PROJ) && dcp <= 1)),
    fix: Fix::Manual {
        hint: "drop --dcp-replicate-q-proj from extraArgs, or set decodeContextParallel above 1 on the servers \
               that give it",
    },
    ..Rule::DEFAULT
};

pub(super) const DF3: Rule = Rule {
    id: "DF3",
    about: "a replicated DCP Q projection without an all-to-all DCP backend",
    reproduces: "ServerArgs._handle_dcp_validation, srt/server_args.py (0.5.17–0.5.18); \
                 handle_dcp_validation, srt/arg_groups/parallel_hook.py (0.5.19); \
                 handle_decode_context_parallelism, srt/arg_groups/parallel_hook.py (0.5.20–0.5.23)",
    field: "spec.decode.extraArgs[--dcp-replicate-q-proj]",
    roles: EVERY_SERVER,
    messages: &[text(
        "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend (it removes the head-dim \
         Q all-gather); got --dcp-comm-backend={backend}.",
    )],
    check: |c| {
        let backend = pd_servers(c).find_map(|(fleet, _, dcp)| {
            let args = &fleet.extra_args;
            let backend = dcp_comm_backend(c, args, dcp)?;
            (given(args, DCP_REPLICATE_Q_PROJ) && dcp > 1 && !matches!(backend, "a2a" | "fi_a2a")).then_some(backend)
        })?;
        when_with(true, vec![("backend", backend.to_string())])
    },
    fix: Fix::Manual {
        hint: "give --dcp-comm-backend a2a (or fi_a2a) next to --dcp-replicate-q-proj, or drop the latter",
    },
    ..Rule::DEFAULT
};

pub(super) const R19_BACKEND: Rule = Rule {
    id: "R19",
    about: "decode DCP transfer backend",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: TRANSFER_BACKEND,
    messages: &[
        text("PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got '{backend}'."),
        text_from(
            19,
            "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic \
             benchmarking, got '{backend}'.",
        ),
        text_from(
            22,
            "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, mori, ascend, or fake for \
             synthetic benchmarking, got '{backend}'.",
        ),
    ],
    changes: &[
        text_from(17, "mooncake, nixl"),
        text_from(19, "mooncake, nixl, fake"),
        text_from(22, "mooncake, nixl, mori, ascend, fake"),
    ],
    check: |c| {
        let backend = c.settings.transfer_backend;
        let allowed = match backend {
            TransferBackend::Mooncake | TransferBackend::Nixl => true,
            TransferBackend::Fake => c.release >= v0_5(19),
            TransferBackend::Mori => c.release >= v0_5(22),
        };
        when_with(dcp(c) && !allowed, vec![("backend", backend.as_str().into())])
    },
    fix: Fix::Manual {
        hint: "set transferBackend to mooncake or nixl (SGLang 0.5.22 and later: or mori), or \
               decodeContextParallel to 1",
    },
    ..Rule::DEFAULT
};

pub(super) const R19_RADIX: Rule = Rule {
    id: "R19",
    about: "decode DCP × decode radix",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.20)",
    field: DECODE_RADIX_CACHE,
    span: Span::between(v0_5(17), v0_5(20)),
    messages: &[text(
        "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported.",
    )],
    check: |c| when(dcp(c) && radix(c)),
    fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or set decodeContextParallel to 1" },
    ..Rule::DEFAULT
};

pub(super) const R19_HICACHE: Rule = Rule {
    id: "R19",
    about: "decode DCP × HiCache",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.20)",
    field: HIERARCHICAL_CACHE,
    span: Span::between(v0_5(17), v0_5(20)),
    messages: &[text("PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.")],
    check: |c| when(dcp(c) && c.settings.hierarchical_cache),
    fix: Fix::Rewrite {
        apply: hierarchical_off,
        hint: "turn hierarchicalCache off, or set decodeContextParallel to 1",
    },
    ..Rule::DEFAULT
};

const TRANSFER_BACKEND: &str = "spec.disaggregation.transferBackend";
const DCP_COMM_BACKEND: &str = "--dcp-comm-backend";
const DCP_REPLICATE_Q_PROJ: &str = "--dcp-replicate-q-proj";

/// The DCP communication backend of a server with `dcp` (its `--dcp-size`), as the decode-CP hook
/// reads it: as given, else `ag_rs` up to 0.5.19 (the parser's default); from 0.5.20 an unset
/// backend resolves to `fi_a2a` or `a2a` on a CUDA GPU with DCP above 1 (to `ag_rs` without), so
/// None stands for one of those.
fn dcp_comm_backend<'a>(c: &RuleInput<'_>, args: &'a [String], dcp: i32) -> Option<&'a str> {
    match option_value(args, DCP_COMM_BACKEND) {
        Some(backend) => Some(backend),
        None if c.release < v0_5(20) || dcp <= 1 => Some("ag_rs"),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn r19_decode_context_parallel() {
        let dcp = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.decode_context_parallel = 2;
                edit(s);
            })
        };
        assert_manual(
            dcp(|s| s.transfer_backend = TransferBackend::Mori),
            &FleetSpec::default(),
            &full(),
            "R19",
            "spec.disaggregation.transferBackend",
            "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic benchmarking, \
             got 'mori'.",
        );
        assert_rewritable(
            dcp(|s| s.decode_radix_cache = true),
            &FleetSpec::default(),
            &mla(),
            "R19",
            RADIX,
            "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported.",
            ("true", "false"),
        );
        assert_rewritable(
            dcp(|s| {
                // HiCache sits under the decode radix cache (S7); both are refused with DCP.
                s.decode_radix_cache = true;
                s.hierarchical_cache = true;
            }),
            &FleetSpec::default(),
            &mla(),
            "R19",
            "spec.disaggregation.hierarchicalCache",
            "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.",
            ("true", "false"),
        );
    }

    #[test]
    fn r19_decode_dcp_backends_widen_per_release() {
        let dcp = |backend| {
            with(|s| {
                s.decode_context_parallel = 2;
                s.transfer_backend = backend;
            })
        };
        let v1 = "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'mori'.";
        let v2 = "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic \
                  benchmarking, got 'mori'.";
        assert_eq!(
            messages("R19", &dcp(TransferBackend::Mori), &FleetSpec::default(), &mla()),
            concat(&[on(17..=18, v1), on(19..=21, v2)])
        );
        assert_eq!(
            messages("R19", &dcp(TransferBackend::Fake), &FleetSpec::default(), &mla()),
            on(17..=18, "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'fake'.")
        );
    }
}
