//! Decode host receive (`--disaggregation-decode-host-receive-threshold`, 0.5.21 on): the PD hook's and the
//! HiCache hook's checks (`arg_groups/pd_disaggregation_hook.py`, `arg_groups/hicache_hook.py`) and the decode KV
//! manager's refusal of host destinations (`disaggregation/decode.py`).

use super::predicates::{HOST_RECEIVE, dcp, host_receive, host_receive_off};
use super::{Fix, Phase, Rule, text, text_from, when};
use crate::api::RetractionBackup;
use crate::release::{Span, v0_5};

pub(super) const N2: Rule = Rule {
    id: "N2",
    about: "host-receive threshold range",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.21–0.5.23)",
    field: HOST_RECEIVE,
    span: Span::since(v0_5(21)),
    messages: &[text("--disaggregation-decode-host-receive-threshold must be between 0 and 1")],
    check: |c| when(c.settings.decode_host_receive_threshold.is_some_and(|t| !(0.0..=1.0).contains(&t))),
    fix: Fix::Manual { hint: "set {spec.disaggregation.decodeHostReceiveThreshold} within [0, 1], or unset it" },
    ..Rule::DEFAULT
};

pub(super) const N3: Rule = Rule {
    id: "N3",
    about: "host receive × HiSparse",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.21–0.5.23)",
    field: HOST_RECEIVE,
    span: Span::since(v0_5(21)),
    messages: &[text("Decode host receive does not yet support HiSparse or role switching")],
    check: |c| when(host_receive(c) && c.settings.hisparse),
    fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    ..Rule::DEFAULT
};

pub(super) const N1: Rule = Rule {
    id: "N1",
    about: "host receive needs host_pool",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.21–0.5.23)",
    field: HOST_RECEIVE,
    span: Span::since(v0_5(21)),
    messages: &[text("Decode host KV buffering requires host_pool retraction")],
    check: |c| when(host_receive(c) && c.settings.retraction_backup == Some(RetractionBackup::CpuTensor)),
    fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    ..Rule::DEFAULT
};

pub(super) const N4: Rule = Rule {
    id: "N4",
    about: "host receive × a page-first storage layout",
    reproduces: "handle_hicache, srt/arg_groups/hicache_hook.py (0.5.21–0.5.23)",
    field: HOST_RECEIVE,
    span: Span::since(v0_5(21)),
    messages: &[text(
        "The resolved HiCache storage layout 'page_first' cannot share the layer_first decode host pool used by \
         KV transfer",
    )],
    changes: &[
        text_from(21, "a mooncake or npu_memcache storage backend"),
        text_from(23, "a mooncake storage backend without DCP, or npu_memcache"),
    ],
    check: |c| {
        // Those backends switch the host layout to page_first (the kernel I/O backend's
        // default); from 0.5.23 Mooncake keeps layer_first under DCP.
        let backend = c.settings.hicache_storage_backend.as_deref();
        let page_first = match backend {
            Some("npu_memcache") => true,
            Some("mooncake") => c.release < v0_5(23) || !dcp(c),
            _ => false,
        };
        when(host_receive(c) && c.settings.retraction_backup != Some(RetractionBackup::CpuTensor) && page_first)
    },
    fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    ..Rule::DEFAULT
};

pub(super) const N7: Rule = Rule {
    id: "N7",
    about: "host receive needs a host-capable transfer backend",
    reproduces: "DecodePreallocQueue._init_kv_manager, srt/disaggregation/decode.py (0.5.21–0.5.23)",
    field: HOST_RECEIVE,
    span: Span::since(v0_5(21)),
    phase: Phase::PoolBuild,
    messages: &[text("Transfer backend does not support decode host KV destinations")],
    check: |c| when(host_receive(c)),
    fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    ..Rule::DEFAULT
};

const HOST_RECEIVE_HINT: &str = "leave decodeHostReceiveThreshold unset: no transfer backend SGLang ships (mooncake, \
                                 nixl, mori, fake) can receive KV into decode host memory yet";

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn decode_host_receive_forces_host_pool_and_no_shipped_backend_can_receive_into_host_memory() {
        let threshold = |t: f64| with(|s| s.decode_host_receive_threshold = Some(t));
        // The flag is 0.5.21's; its off value moved from 0 to 1 in 0.5.22.
        assert_eq!(
            messages("F4", &threshold(0.5), &FleetSpec::default(), &full()),
            on(17..=20, "unrecognized arguments: --disaggregation-decode-host-receive-threshold 0.5")
        );
        let no_receive = "Transfer backend does not support decode host KV destinations";
        assert_eq!(messages("N7", &threshold(0.5), &FleetSpec::default(), &full()), on(21..=23, no_receive));
        assert_eq!(messages("N7", &threshold(0.0), &FleetSpec::default(), &full()), on(22..=23, no_receive));
        assert_eq!(messages("N7", &threshold(1.0), &FleetSpec::default(), &full()), on(21..=21, no_receive));
        assert_eq!(
            messages("N2", &threshold(1.5), &FleetSpec::default(), &full()),
            on(21..=23, "--disaggregation-decode-host-receive-threshold must be between 0 and 1")
        );
        // Host receive makes host_pool the backup, so the host-pool rules see it (R1 on an SSM model).
        let verdict = at(23, &threshold(0.5), &FleetSpec::default(), &full());
        assert_eq!(verdict.effective.retraction_backup, RetractionBackup::HostPool);
        assert!(at(23, &threshold(0.5), &FleetSpec::default(), &ssm()).violations.iter().any(|v| v.rule == "R1"));
        let cpu_tensor = DisaggregationSpec { retraction_backup: Some(RetractionBackup::CpuTensor), ..threshold(0.5) };
        assert_eq!(
            messages("N1", &cpu_tensor, &FleetSpec::default(), &full()),
            on(21..=23, "Decode host KV buffering requires host_pool retraction")
        );
        let hisparse = DisaggregationSpec { hisparse: true, ..threshold(0.5) };
        assert_eq!(
            messages("N3", &hisparse, &FleetSpec::default(), &full()),
            on(21..=23, "Decode host receive does not yet support HiSparse or role switching")
        );
        // Mooncake storage switches the host pool to page_first; 0.5.23 keeps layer_first under DCP.
        let mooncake = DisaggregationSpec {
            hicache_storage_backend: Some("mooncake".into()),
            decode_context_parallel: 2,
            ..threshold(0.5)
        };
        assert_eq!(
            messages("N4", &mooncake, &FleetSpec::default(), &mla()).iter().flatten().count(),
            2,
            "0.5.21–0.5.22"
        );
        // Rewrite turns host receive off first, so the backup stays the automatic choice.
        let rewritten = at(
            23,
            &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..threshold(0.5) },
            &FleetSpec::default(),
            &ssm(),
        );
        assert_eq!(rewritten.outcome, Outcome::Rewritten);
        assert_eq!(rewritten.settings.decode_host_receive_threshold, None);
        assert_eq!(rewritten.settings.retraction_backup, None);
        assert_eq!(rewritten.rewrites.iter().map(|r| r.rule.as_str()).collect::<Vec<_>>(), ["N7"]);
    }
}
