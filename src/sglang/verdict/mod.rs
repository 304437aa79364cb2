//! The verdict every entry point decides with (controller, webhooks, `check`, `render`, the
//! guard): [`assess`] runs the policy, then the rules of the command lines and pods, for a resource
//! or for one server the guard read.
//!
//! - [`pod_rules`]: POD1–POD9 and POD11, kvpilot's checks of the pods it builds for a resource;
//! - [`cache_wiring`]: POD10, a server that cannot reach the cache runtime of its pod;
//! - [`command_line`]: CLI and EXEC, what a server's release parser and the kubelet make of its
//!   command line;
//! - [`server_flags`]: one server's verdict in its own flags, and the flag rewrites the guard's
//!   patch writes back.

pub mod cache_wiring;
pub mod command_line;
pub mod pod_rules;
pub mod server_flags;

use crate::api::InferenceDeploymentSpec;
use crate::layout::LayoutError;
use crate::policy::{self, Assessment, Checked, ModelConfigs, Outcome};
use crate::release::ReleaseChoice;
use crate::sglang::guard::Server;
use crate::sglang::server::{FleetRole, effective_spec};

use pod_rules::{extra_args_reading, pod_findings, pod_security_warning, prefix_reads_across_nodes};

/// What a verdict is about.
#[derive(Clone, Copy)]
pub enum Assessed<'a> {
    /// An InferenceDeployment: the PD service and the pods kvpilot runs for it.
    Resource(&'a InferenceDeploymentSpec),
    /// One SGLang server of a workload the guard read, with the settings its command line maps to
    /// ([`server_flags::server_spec`]).
    Server { server: &'a Server, spec: &'a InferenceDeploymentSpec },
}

impl<'a> From<&'a InferenceDeploymentSpec> for Assessed<'a> {
    fn from(spec: &'a InferenceDeploymentSpec) -> Self {
        Self::Resource(spec)
    }
}

/// The verdict every entry point decides with (controller, webhooks, `check`, `render`, the
/// guard): [`policy::assess`], then the rules of the command lines. A resource's pods, as kvpilot
/// builds them, answer to the pod rules ([`pod_findings`]) and, with their `extraArgs`, to the
/// release's parser (POD8), after the policy's findings. A server's command line answers to the
/// release's parser first (CLI): SGLang refuses it before any rule runs.
pub fn assess<'a>(
    subject: impl Into<Assessed<'a>>,
    configs: &ModelConfigs,
    release: &ReleaseChoice,
) -> Result<Assessment, LayoutError> {
    match subject.into() {
        Assessed::Resource(spec) => {
            let mut assessment =
                policy::assess(&effective_spec(spec, release.release), configs, release, Checked::Service)?;
            let mut findings = pod_findings(spec, release.release);
            findings.extend(prefix_reads_across_nodes(spec, &assessment.layout));
            for role in [FleetRole::Decode, FleetRole::Prefill] {
                let (refusal, warnings) = extra_args_reading(spec, role, &assessment.verdict, release.release);
                findings.extend(refusal);
                assessment.command_line_warnings.extend(warnings);
            }
            if !findings.is_empty() {
                assessment.verdict.violations.extend(findings);
                assessment.verdict.outcome = Outcome::Rejected;
            }
            assessment.verdict.warnings.extend(pod_security_warning(spec));
            Ok(assessment)
        }
        Assessed::Server { server, spec } => {
            let checked = Checked::Server { role: server.role(), names: &server_flags::ServerFlags };
            let mut assessment = policy::assess(spec, configs, release, checked)?;
            let (refusal, warnings) = command_line::command_line_rule(server);
            assessment.command_line_warnings = warnings;
            // The container does not start at all: said first, before what SGLang would say.
            for refusal in [command_line::one_word_command_rule(server), refusal].into_iter().rev().flatten() {
                assessment.verdict.violations.insert(0, refusal);
                assessment.verdict.outcome = Outcome::Rejected;
            }
            // The pod starts, and its server never becomes ready: said after SGLang's own.
            let wiring = cache_wiring::rule(server);
            if !wiring.is_empty() {
                assessment.verdict.violations.extend(wiring);
                assessment.verdict.outcome = Outcome::Rejected;
            }
            Ok(assessment)
        }
    }
}
