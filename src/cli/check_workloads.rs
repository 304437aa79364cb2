//! `kvpilot check` on workloads that run SGLang themselves (Pods, Deployments, StatefulSets,
//! Jobs, LeaderWorkerSets, RoleBasedGroups, …): one report per SGLang server container, naming
//! the object, container and flag. The guard's logic is `sglang::guard`; this file reads the
//! model configs from the manifest set and prints.

use std::collections::BTreeMap;

use serde::Serialize;

use super::manifests::{ManifestSet, ModelConfig};
use super::report::{Unchecked, layout_line};
use crate::api::{AttentionLayout, EffectiveSettings, SglangStatus};
use crate::controller::status::sglang_status;
use crate::policy::{ModelConfigs, Outcome};
use crate::release::ReleaseChoice;
use crate::sglang::flags::DisaggregationMode;
use crate::sglang::guard::{self, FlagRewrite, Inspection, Server};
use crate::sglang::verdict::server_flags::{self, FlagFinding, ServerVerdict};
use crate::sglang::workload::Member;
use crate::source::{HubClient, naming_annotation};

/// One SGLang server's report; `--output json` lists these after the InferenceDeployments.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServerReport {
    /// `deploy/NAME`.
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) container: String,
    /// The pod template within the object, for kinds with several (`workerTemplate`, `role decode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) template: Option<String>,
    /// JSON path of the container whose command line was read (a template patch's where the
    /// patch sets it): `spec.roles[1].leaderWorkerPattern.workerTemplatePatch.spec.containers[0]`.
    pub(crate) path: String,
    /// The role it belongs to (RoleBasedGroup role, OME component, Dynamo service, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member: Option<Member>,
    pub(crate) source: String,
    pub(crate) mode: DisaggregationMode,
    /// The SGLang release the server was checked against and where it came from (`Image`: its
    /// tag; `Flag`/`Default`: `--sglang-version` or the newest known release).
    pub(crate) sglang: SglangStatus,
    pub(crate) verdict: Outcome,
    pub(crate) violations: Vec<FlagFinding>,
    pub(crate) rewrites: Vec<FlagRewrite>,
    /// Absent when the model's config.json could not be read and only SGLang's parser judged
    /// the command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) effective: Option<EffectiveSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) layout: Option<AttentionLayout>,
    pub(crate) warnings: Vec<String>,
    #[serde(skip)]
    pub(crate) subject: String,
}

/// Checks every SGLang server in the set's workloads, rewriting where the workload or its
/// Namespace (when the files hold it) is labelled `kvpilot.dev/on-invalid: rewrite`. Servers
/// whose config.json cannot be found or read are `unchecked`, unless SGLang's parser refuses
/// their command line, which needs no config.
pub(crate) async fn check_workloads(
    set: &ManifestSet,
    hub: Option<&HubClient>,
    hub_endpoint: &str,
    default_release: &ReleaseChoice,
    errors: &mut Vec<String>,
    unchecked: &mut Vec<Unchecked>,
) -> Vec<ServerReport> {
    let mut reports = Vec::new();
    let mut inspections: Vec<Inspection> =
        set.workloads.iter().map(|found| guard::inspect(&found.object, default_release)).collect();
    pair_across_objects(set, &mut inspections);
    for (found, inspection) in set.workloads.iter().zip(&inspections) {
        for warning in &inspection.warnings {
            eprintln!("kvpilot check: {}: {warning}", found.location);
        }
        let namespace_rewrites = set
            .namespace_labels
            .get(found.namespace())
            .and_then(|labels| labels.get(guard::ON_INVALID_LABEL))
            .is_some_and(|value| value == "rewrite");
        let rewrite = namespace_rewrites || guard::asks_for_rewrite(&found.object);
        for server in &inspection.servers {
            let subject = server.subject(&inspection.object);
            let mut not_checked = |reason: String| match argv_only_report(found, &inspection.object, server, &subject) {
                Some(refused) => reports.push(refused),
                None => unchecked.push(Unchecked::new(subject.clone(), found.location.to_string(), reason)),
            };
            let model = match &server.model {
                Ok(model) => model,
                Err(warning) => {
                    not_checked(warning.clone());
                    continue;
                }
            };
            let config = match set.config_for(found.namespace(), model, hub, hub_endpoint).await {
                Ok(ModelConfig::Read(config)) => config,
                Ok(ModelConfig::SkippedOffline(url)) => {
                    not_checked(format!("--offline; its config.json is at {url}"));
                    continue;
                }
                Err(e) => {
                    let why = naming_annotation(&e.to_string(), guard::MODEL_CONFIG_ANNOTATION);
                    if e.is_unreadable_source() {
                        not_checked(format!("model config.json: {why}"));
                    } else {
                        errors.push(format!("{}: {subject}: model config.json: {why}", found.location));
                    }
                    continue;
                }
            };
            // The draft's config.json refines one rule (T11): without it the server is still checked,
            // and what kept it unread is said only where the check would have read it.
            let (draft, draft_problem) = match &server.draft {
                Some(Ok(draft)) => match set.config_for(found.namespace(), draft, hub, hub_endpoint).await {
                    Ok(ModelConfig::Read(config)) => (Some(config), None),
                    Ok(ModelConfig::SkippedOffline(url)) => {
                        (None, Some(format!("the draft model's config.json ({url}) was not read (--offline)")))
                    }
                    Err(e) => (
                        None,
                        Some(format!(
                            "draft model config.json: {}",
                            naming_annotation(&e.to_string(), guard::DRAFT_MODEL_CONFIG_ANNOTATION)
                        )),
                    ),
                },
                Some(Err(warning)) => (None, Some(warning.clone())),
                None => (None, None),
            };
            match server_flags::check(server, &ModelConfigs { target: config, draft }, rewrite) {
                Ok(verdict) => {
                    if let (Some(problem), true) = (&draft_problem, verdict.reads_draft_config()) {
                        eprintln!("kvpilot check: {}: {subject}: {problem}", found.location);
                    }
                    reports.push(report(found, &inspection.object, server, subject, verdict));
                }
                Err(e) => errors.push(format!("{}: {subject}: model config.json: {e}", found.location)),
            }
        }
    }
    reports
}

/// Pairs the decode servers of a model with its prefill servers across the objects of a
/// namespace (a prefill Deployment beside a decode Deployment), so T1 is checked in CI.
fn pair_across_objects(set: &ManifestSet, inspections: &mut [Inspection]) {
    let mut groups: BTreeMap<(String, String), Vec<&mut Server>> = BTreeMap::new();
    for (found, inspection) in set.workloads.iter().zip(inspections.iter_mut()) {
        for server in &mut inspection.servers {
            if let Some(model) = server.parsed.settings.model_path.clone() {
                groups.entry((found.namespace().to_string(), model)).or_default().push(server);
            }
        }
    }
    for ((namespace, model), mut servers) in groups {
        if let Err(warning) = guard::pair_with_prefill(&mut servers) {
            eprintln!("kvpilot check: namespace {namespace}, --model-path {model}: {warning}");
        }
    }
}

/// The report of a server whose config.json was not read: none, unless its container cannot
/// start or the release's own parser refuses its command line, which need no config (SGLang
/// exits before reading it).
fn argv_only_report(
    found: &super::manifests::FoundWorkload,
    object: &str,
    server: &Server,
    subject: &str,
) -> Option<ServerReport> {
    let (refusals, mut warnings) = server_flags::argv_check(server);
    if refusals.is_empty() {
        return None;
    }
    warnings.insert(0, "the model's config.json was not read: only SGLang's parser judged the command line".into());
    let mut report = report_of(found, object, server, subject.to_string(), &server.checked_as);
    report.verdict = Outcome::Rejected;
    report.violations = refusals;
    report.warnings =
        server.release_warning.iter().cloned().chain(server.checked_as.warning()).chain(warnings).collect();
    Some(report)
}

fn report(
    found: &super::manifests::FoundWorkload,
    object: &str,
    server: &Server,
    subject: String,
    verdict: ServerVerdict,
) -> ServerReport {
    ServerReport {
        verdict: verdict.outcome,
        violations: verdict.findings,
        rewrites: verdict.rewrites,
        effective: Some(verdict.effective),
        layout: Some(verdict.layout),
        warnings: verdict.warnings,
        ..report_of(found, object, server, subject, &verdict.release)
    }
}

/// Where a server was found and the release it was checked as, with a valid verdict and nothing
/// else yet.
fn report_of(
    found: &super::manifests::FoundWorkload,
    object: &str,
    server: &Server,
    subject: String,
    release: &crate::release::ReleaseChoice,
) -> ServerReport {
    ServerReport {
        name: object.to_string(),
        namespace: found.namespace().to_string(),
        container: server.container.clone(),
        template: server.site.label.clone(),
        path: server.site.path.clone(),
        role: server.site.role.clone(),
        member: server.site.member,
        source: found.location.to_string(),
        mode: server.parsed.settings.mode,
        sglang: sglang_status(release),
        verdict: Outcome::Valid,
        violations: Vec::new(),
        rewrites: Vec::new(),
        effective: None,
        layout: None,
        warnings: Vec::new(),
        subject,
    }
}

/// The text report of the servers, in the form of the InferenceDeployments' one.
pub(crate) fn text_report(reports: &[ServerReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out += &format!("{} ({}): {}\n", r.subject, r.source, r.verdict.as_str());
        out += &format!(
            "  SGLang release: {} ({}); --disaggregation-mode {}\n",
            r.sglang.version,
            r.sglang.source,
            r.mode.as_str()
        );
        if let Some(layout) = &r.layout {
            out += &layout_line(layout);
        }
        for v in &r.violations {
            out += &format!("  ✗ {} {}: {v}\n", v.violation.rule, r.subject);
        }
        for w in &r.rewrites {
            out += &format!("  ↻ {}: {w}\n", r.subject);
        }
        for w in &r.warnings {
            out += &format!("  ! {w}\n");
        }
    }
    out
}
