//! `kvpilot check -f PATH... [--output text|json] [--offline]`: the policy verdict of every
//! InferenceDeployment, and of every SGLang server in the workloads (`check_workloads`), in a
//! set of manifests, for CI pipelines (`helm template … | kvpilot check -f -`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::SglangVersionArg;
use super::check_workloads;
use super::manifests::{self, Found, ManifestSet, ModelConfig};
use super::report::{Unchecked, layout_line};
use crate::api::{AttentionLayout, DRAFT_CONFIG_FIELD, EffectiveSettings, MODEL_CONFIG_FIELD, Rewrite, SglangStatus};
use crate::controller::status::sglang_status;
use crate::policy::{self, ModelConfigs, Outcome, Violation};
use crate::release::ReleaseChoice;
use crate::source::{DEFAULT_HUB_ENDPOINT, HubClient};

#[derive(Args, Debug)]
pub(crate) struct CheckArgs {
    /// A manifest file or directory (recursed; *.yaml, *.yml, *.json), or `-` for standard input. Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// Do not fetch hub sources; resources and servers that need one are not checked (exit 3,
    /// unless --allow-unchecked).
    #[arg(long)]
    offline: bool,
    /// Report resources and servers whose config.json could not be read (--offline, a network
    /// error, a ConfigMap not in the files) as warnings instead of failing with exit 3.
    #[arg(long)]
    allow_unchecked: bool,
    /// Hub endpoint for hub sources that do not name one.
    #[arg(long, env = "KVPILOT_HUB_ENDPOINT", default_value = DEFAULT_HUB_ENDPOINT)]
    hub_endpoint: String,
    #[command(flatten)]
    sglang: SglangVersionArg,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}

/// One resource's report; the `--output json` array holds these.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    name: String,
    source: String,
    verdict: Outcome,
    violations: Vec<Violation>,
    rewrites: Vec<Rewrite>,
    effective: EffectiveSettings,
    layout: AttentionLayout,
    #[serde(skip_serializing_if = "Option::is_none")]
    draft_layout: Option<AttentionLayout>,
    warnings: Vec<String>,
    sglang: SglangStatus,
}

/// Builds the hub client for commands that may fetch, or None under `--offline`.
pub(crate) fn hub_client(offline: bool) -> Result<Option<HubClient>, String> {
    if offline {
        return Ok(None);
    }
    HubClient::new(Duration::from_secs(300), Duration::from_secs(20), &[])
        .map(Some)
        .map_err(|e| format!("cannot build the HTTPS client: {e}"))
}

/// What became of one resource.
pub(crate) enum Assessed {
    Report(Box<policy::Assessment>),
    /// Its config.json could not be read: why, and where the config is.
    Unchecked(String),
    /// No release kvpilot models can check it (`spec.sglang.version` or the image's tag names
    /// another): refused, as the webhook and the controller refuse it. The message names the field.
    UnknownRelease(String),
}

/// A resource refused before any rule ran: no release kvpilot models can check it.
#[derive(Serialize)]
struct Refused {
    name: String,
    source: String,
    /// Always `rejected`, as a report's verdict says.
    verdict: &'static str,
    /// The field to change and why.
    reason: String,
}

/// Reads each resource's config and runs layout + policy on it; errors name file, document and field.
pub(crate) async fn assess_all(
    set: &ManifestSet,
    hub: Option<&HubClient>,
    hub_endpoint: &str,
    default_release: &ReleaseChoice,
) -> Vec<(usize, Result<Assessed, String>)> {
    let mut results = Vec::new();
    for (index, found) in set.deployments.iter().enumerate() {
        results.push((index, assess_one(set, found, hub, hub_endpoint, default_release).await));
    }
    results
}

async fn assess_one(
    set: &ManifestSet,
    found: &Found,
    hub: Option<&HubClient>,
    hub_endpoint: &str,
    default_release: &ReleaseChoice,
) -> Result<Assessed, String> {
    let release = match policy::resource_release(&found.resource.spec, default_release) {
        Ok(release) => release,
        Err(e) => return Ok(Assessed::UnknownRelease(format!("spec.sglang.version: {e}"))),
    };
    let context = |field: &'static str| move |e: String| format!("{}: {} ({field}): {e}", found.location, found.name());
    let target = match set.model_config(found, hub, hub_endpoint).await {
        Ok(ModelConfig::Read(config)) => config,
        Ok(ModelConfig::SkippedOffline(url)) => {
            return Ok(Assessed::Unchecked(format!("--offline; its config.json is at {url}")));
        }
        Err(e) if e.is_unreadable_source() => return Ok(Assessed::Unchecked(format!("{MODEL_CONFIG_FIELD}: {e}"))),
        Err(e) => return Err(context(MODEL_CONFIG_FIELD)(e.to_string())),
    };
    let draft = match set.draft_config(found, hub, hub_endpoint).await {
        None => None,
        Some(Ok(ModelConfig::Read(config))) => Some(config),
        Some(Ok(ModelConfig::SkippedOffline(url))) => {
            return Ok(Assessed::Unchecked(format!("--offline; its draft model's config.json is at {url}")));
        }
        Some(Err(e)) if e.is_unreadable_source() => {
            return Ok(Assessed::Unchecked(format!("{DRAFT_CONFIG_FIELD}: {e}")));
        }
        Some(Err(e)) => return Err(context(DRAFT_CONFIG_FIELD)(e.to_string())),
    };
    crate::sglang::verdict::assess(&found.resource.spec, &ModelConfigs { target, draft }, &release)
        .map(|a| Assessed::Report(Box::new(a)))
        .map_err(|e| format!("{}: {}: model config.json: {e}", found.location, found.name()))
}

/// What the offline commands start from.
pub(crate) struct Prepared {
    pub(crate) runtime: tokio::runtime::Runtime,
    /// The manifests read.
    pub(crate) set: ManifestSet,
    /// The problems met reading them.
    pub(crate) errors: Vec<String>,
    /// None under `--offline`.
    pub(crate) hub: Option<HubClient>,
    /// The release of `--sglang-version`, or the newest known.
    pub(crate) default_release: ReleaseChoice,
}

/// Starts an offline command: a runtime, the manifests, the hub client and `--sglang-version`.
/// Prints the error itself.
pub(crate) fn prepare(
    command: &str,
    paths: &[PathBuf],
    offline: bool,
    sglang: &SglangVersionArg,
) -> Result<Prepared, ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        eprintln!("kvpilot {command}: cannot start: {e}");
        ExitCode::from(2)
    })?;
    let (set, errors) = manifests::load(paths);
    let hub = hub_client(offline).map_err(|e| {
        eprintln!("kvpilot {command}: {e}");
        ExitCode::from(2)
    })?;
    let default_release = sglang.choice_for(command)?;
    Ok(Prepared { runtime, set, errors, hub, default_release })
}

/// How a run of the offline commands ended, for their exit code.
pub(crate) struct Ending<'a> {
    pub(crate) errors: &'a [String],
    pub(crate) rejected: bool,
    pub(crate) unchecked: &'a [Unchecked],
    pub(crate) allow_unchecked: bool,
}

/// The exit code of a run that left something unchecked.
pub(crate) const UNCHECKED_EXIT: u8 = 3;

/// Prints the report and the input problems, and gives the offline commands' exit code:
/// 2 for invalid input, 1 when anything is rejected, 3 when something could not be checked
/// (unless allowed), else 0.
pub(crate) fn finish(command: &str, rendered: &str, ending: Ending<'_>) -> ExitCode {
    if super::print_stdout(rendered) != ExitCode::SUCCESS {
        return ExitCode::from(2);
    }
    for error in ending.errors {
        eprintln!("kvpilot {command}: {error}");
    }
    let severity = if ending.allow_unchecked { "warning" } else { "not checked" };
    for unchecked in ending.unchecked {
        eprintln!("kvpilot {command}: {}: {}: {severity}: {}", unchecked.source, unchecked.name, unchecked.reason);
    }
    if !ending.errors.is_empty() {
        ExitCode::from(2)
    } else if ending.rejected {
        ExitCode::from(1)
    } else if !ending.unchecked.is_empty() && !ending.allow_unchecked {
        eprintln!(
            "kvpilot {command}: {} not checked (exit {UNCHECKED_EXIT}): give their config.json (inline, a ConfigMap \
             in the files, hub access), or pass --allow-unchecked",
            ending.unchecked.len()
        );
        ExitCode::from(UNCHECKED_EXIT)
    } else {
        ExitCode::SUCCESS
    }
}

/// The input problem of an input that holds nothing to check.
pub(crate) fn nothing_to_check(set: &ManifestSet) -> Option<String> {
    (set.deployments.is_empty() && set.workloads.is_empty()).then(|| {
        "nothing to check: the input holds no InferenceDeployment and no workload that runs containers (an empty \
         file or standard input, or a `helm template` that failed?)"
            .to_string()
    })
}

pub(crate) fn run(args: &CheckArgs) -> ExitCode {
    let Prepared { runtime, set, mut errors, hub, default_release } =
        match prepare("check", &args.paths, args.offline, &args.sglang) {
            Ok(prepared) => prepared,
            Err(code) => return code,
        };
    if errors.is_empty() {
        errors.extend(nothing_to_check(&set));
    }
    let results = runtime.block_on(assess_all(&set, hub.as_ref(), &args.hub_endpoint, &default_release));
    let mut reports = Vec::new();
    let mut refused = Vec::new();
    let mut unchecked = Vec::new();
    for (index, result) in results {
        let found = &set.deployments[index];
        match result {
            Ok(Assessed::Report(assessment)) => {
                let assessment = *assessment;
                reports.push(Report {
                    name: found.name(),
                    source: found.location.to_string(),
                    verdict: assessment.verdict.outcome,
                    violations: assessment.verdict.violations,
                    rewrites: assessment.verdict.rewrites,
                    effective: assessment.verdict.effective,
                    layout: assessment.layout,
                    draft_layout: assessment.draft_layout,
                    warnings: assessment
                        .verdict
                        .warnings
                        .into_iter()
                        .chain(assessment.command_line_warnings)
                        .chain(crate::controller::desired::resources::warnings(&found.resource.spec))
                        .collect(),
                    sglang: sglang_status(&assessment.release),
                })
            }
            Ok(Assessed::Unchecked(reason)) => {
                unchecked.push(Unchecked::new(found.name(), found.location.to_string(), reason));
            }
            Ok(Assessed::UnknownRelease(reason)) => {
                refused.push(Refused {
                    name: found.name(),
                    source: found.location.to_string(),
                    verdict: "rejected",
                    reason,
                });
            }
            Err(e) => errors.push(e),
        }
    }
    let servers = runtime.block_on(check_workloads::check_workloads(
        &set,
        hub.as_ref(),
        &args.hub_endpoint,
        &default_release,
        &mut errors,
        &mut unchecked,
    ));
    let rendered = match args.output {
        OutputFormat::Json => {
            let mut items: Vec<serde_json::Value> =
                reports.iter().filter_map(|r| serde_json::to_value(r).ok()).collect();
            items.extend(refused.iter().filter_map(|r| serde_json::to_value(r).ok()));
            items.extend(servers.iter().filter_map(|r| serde_json::to_value(r).ok()));
            items.extend(unchecked.iter().filter_map(|u| serde_json::to_value(u).ok()));
            serde_json::to_string_pretty(&items).map(|json| json + "\n").unwrap_or_default()
        }
        OutputFormat::Text => text_report(&reports, &refused, &servers, &unchecked),
    };
    let rejected = !refused.is_empty()
        || reports.iter().map(|r| r.verdict).chain(servers.iter().map(|r| r.verdict)).any(|v| v == Outcome::Rejected);
    let ending = Ending { errors: &errors, rejected, unchecked: &unchecked, allow_unchecked: args.allow_unchecked };
    finish("check", &rendered, ending)
}

fn text_report(
    reports: &[Report],
    refused: &[Refused],
    servers: &[check_workloads::ServerReport],
    unchecked: &[Unchecked],
) -> String {
    let mut out = String::new();
    for r in reports {
        let l = &r.layout;
        out += &format!(
            "{} ({}): {} (SGLang {}, {})\n",
            r.name,
            r.source,
            r.verdict.as_str(),
            r.sglang.version,
            r.sglang.source
        );
        out += &layout_line(l);
        if let Some(draft) = &r.draft_layout {
            out += &layout_line(draft).replacen("  layout:", "  draft layout:", 1);
        }
        for v in &r.violations {
            out += &format!("  ✗ {} {}: {}\n      fix: {}\n", v.rule, v.field, v.message, v.fix);
        }
        for w in &r.rewrites {
            out += &format!("  ↻ {} {}: {} → {}\n", w.rule, w.field, w.from, w.to);
        }
        if r.verdict != Outcome::Rejected {
            let e = &r.effective;
            out += &format!(
                "  effective: retractionBackup={} ({}), transferBackend={}, decodeRadixCache={}{}\n",
                e.retraction_backup.as_str(),
                match e.retraction_backup_source {
                    crate::api::SettingSource::Spec => "as set",
                    crate::api::SettingSource::Auto => "automatic",
                    crate::api::SettingSource::Rewritten => "rewritten",
                },
                e.transfer_backend.as_str(),
                e.decode_radix_cache,
                e.host_pool_ratio.map(|r| format!(", hostPoolRatio={r}")).unwrap_or_default(),
            );
        }
        for w in l.warnings.iter().chain(&r.warnings) {
            out += &format!("  ! {w}\n");
        }
    }
    for r in refused {
        out += &format!("{} ({}): rejected\n  ✗ {}\n", r.name, r.source, r.reason);
    }
    out += &check_workloads::text_report(servers);
    let verdicts: Vec<Outcome> = reports
        .iter()
        .map(|r| r.verdict)
        .chain(refused.iter().map(|_| Outcome::Rejected))
        .chain(servers.iter().map(|r| r.verdict))
        .collect();
    let count = |o: Outcome| verdicts.iter().filter(|v| **v == o).count();
    for u in unchecked {
        out += &format!("{} ({}): not checked\n  ? {}\n", u.name, u.source, u.reason);
    }
    out += &format!(
        "{} checked: {} valid, {} rewritten, {} rejected; {} not checked\n",
        verdicts.len(),
        count(Outcome::Valid),
        count(Outcome::Rewritten),
        count(Outcome::Rejected),
        unchecked.len()
    );
    out
}
