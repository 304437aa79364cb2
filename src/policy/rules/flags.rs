//! Options a release's parser does not have yet (argparse's `unrecognized arguments`, `invalid choice`):
//! kvpilot's settings that map to a flag added in a later release.

use super::predicates::{
    HOST_MEMORY_MODE, HOST_RECEIVE, LINKER, RETRACTION_BACKUP, host_memory_mode_unset, host_receive_off, linker_off,
    to_cpu_tensor,
};
use super::{EVERY_SERVER, Fix, Rule, text, when, when_with};
use crate::api::{DisaggregationSpec, RetractionBackup};
use crate::release::{Span, v0_5};

pub(super) const F1: Rule = Rule {
    id: "F1",
    about: "retraction-backup flag unknown",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17): the parser \
                 ServerArgs.add_cli_args builds has no --disaggregation-decode-retraction-backup (the field is \
                 declared from 0.5.18)",
    field: RETRACTION_BACKUP,
    span: Span::between(v0_5(17), v0_5(17)),
    messages: &[text("unrecognized arguments: --disaggregation-decode-retraction-backup {value}")],
    check: |c| {
        let value = c.settings.retraction_backup?;
        when_with(true, vec![("value", value.as_str().into())])
    },
    fix: Fix::Rewrite {
        apply: unset_backup,
        hint: "leave retractionBackup unset: this release has no such flag and always uses per-request CPU \
               tensors",
    },
    ..Rule::DEFAULT
};

pub(super) const F2: Rule = Rule {
    id: "F2",
    about: "retraction backup none unknown",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.18–0.5.20) of a value outside the \
                 choices ['cpu_tensor', 'host_pool'] of the disaggregation_decode_retraction_backup field: ServerArgs, \
                 srt/server_args.py (0.5.18–0.5.19); Disagg, srt/arg_groups/fields/disagg.py (0.5.20)",
    field: RETRACTION_BACKUP,
    span: Span::between(v0_5(18), v0_5(20)),
    messages: &[text(
        "argument --disaggregation-decode-retraction-backup: invalid choice: 'none' (choose from 'cpu_tensor', \
         'host_pool')",
    )],
    check: |c| when(c.settings.retraction_backup == Some(RetractionBackup::None)),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor: retractionBackup none exists from SGLang 0.5.21" },
    ..Rule::DEFAULT
};

pub(super) const F4: Rule = Rule {
    id: "F4",
    about: "host-receive threshold flag unknown",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17–0.5.20): the parser \
                 ServerArgs.add_cli_args builds has no --disaggregation-decode-host-receive-threshold (the Disagg \
                 field, srt/arg_groups/fields/disagg.py, is declared from 0.5.21)",
    field: HOST_RECEIVE,
    span: Span::between(v0_5(17), v0_5(20)),
    messages: &[text("unrecognized arguments: --disaggregation-decode-host-receive-threshold {value}")],
    check: |c| {
        let threshold = c.settings.decode_host_receive_threshold?;
        when_with(true, vec![("value", threshold.to_string())])
    },
    fix: Fix::Rewrite {
        apply: host_receive_off,
        hint: "leave decodeHostReceiveThreshold unset: SGLang has it from 0.5.21",
    },
    ..Rule::DEFAULT
};

pub(super) const F3: Rule = Rule {
    id: "F3",
    about: "external cache linker flag unknown",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17–0.5.19): the parser \
                 ServerArgs.add_cli_args builds has no --enable-unified-cache-external-linker (the Memory field, \
                 srt/arg_groups/fields/memory.py, is declared from 0.5.20)",
    field: LINKER,
    span: Span::between(v0_5(17), v0_5(19)),
    roles: EVERY_SERVER,
    messages: &[text("unrecognized arguments: --enable-unified-cache-external-linker")],
    check: |c| when(c.settings.unified_cache_external_linker),
    fix: Fix::Rewrite { apply: linker_off, hint: "turn unifiedCacheExternalLinker off: SGLang has it from 0.5.20" },
    ..Rule::DEFAULT
};

pub(super) const F5: Rule = Rule {
    id: "F5",
    about: "HiCache host memory mode flag unknown",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17–0.5.18): the parser \
                 ServerArgs.add_cli_args builds has no --hicache-host-memory-mode (the ServerArgs field, \
                 srt/server_args.py, is declared from 0.5.19)",
    field: HOST_MEMORY_MODE,
    span: Span::between(v0_5(17), v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[text("unrecognized arguments: --hicache-host-memory-mode {value}")],
    check: |c| {
        let mode = c.settings.hicache_host_memory_mode?;
        when_with(true, vec![("value", mode.as_str().into())])
    },
    fix: Fix::Rewrite {
        apply: host_memory_mode_unset,
        hint: "leave hicacheHostMemoryMode unset: SGLang has it from 0.5.19",
    },
    ..Rule::DEFAULT
};

fn unset_backup(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.retraction_backup.map_or("unset", RetractionBackup::as_str).to_string();
    s.retraction_backup = None;
    (from, "unset".into())
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn f1_the_retraction_flag_does_not_exist_before_0_5_18() {
        let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
        assert_eq!(
            messages("F1", &host_pool, &FleetSpec::default(), &full()),
            on(17..=17, "unrecognized arguments: --disaggregation-decode-retraction-backup host_pool")
        );
        let rewritten =
            at(17, &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..host_pool }, &FleetSpec::default(), &full());
        assert_eq!(rewritten.outcome, Outcome::Rewritten);
        assert_eq!((rewritten.rewrites[0].from.as_str(), rewritten.rewrites[0].to.as_str()), ("host_pool", "unset"));
        assert_eq!(rewritten.settings.retraction_backup, None);
        assert_eq!(
            rewritten.effective.retraction_backup,
            RetractionBackup::CpuTensor,
            "0.5.17 always copies to CPU tensors"
        );
    }

    #[test]
    fn f2_none_exists_from_0_5_21() {
        let none = with(|s| s.retraction_backup = Some(RetractionBackup::None));
        assert_eq!(
            messages("F2", &none, &FleetSpec::default(), &full()),
            on(
                18..=20,
                "argument --disaggregation-decode-retraction-backup: invalid choice: 'none' (choose from 'cpu_tensor', \
                 'host_pool')"
            )
        );
        let rewritten = at(
            20,
            &DisaggregationSpec { on_invalid: OnInvalid::Rewrite, ..none.clone() },
            &FleetSpec::default(),
            &full(),
        );
        assert_eq!(rewritten.settings.retraction_backup, Some(RetractionBackup::CpuTensor));
        let valid = at(21, &none, &FleetSpec::default(), &full());
        assert_eq!((valid.outcome, valid.effective.retraction_backup), (Outcome::Valid, RetractionBackup::None));
        assert_eq!(valid.effective.host_pool_ratio, None);
        assert!(valid.warnings.iter().any(|w| w.contains("aborted with HTTP 503")), "{:?}", valid.warnings);
    }
}
