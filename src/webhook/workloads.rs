//! The SGLang guard at admission: AdmissionReviews of workloads (Pods, Deployments, …,
//! LeaderWorkerSets, RoleBasedGroups, OME, Dynamo and AIBrix kinds, any kind holding containers)
//! in, decisions out, built on `sglang::guard`. No HTTP here.
//!
//! The namespace's `kvpilot.dev/guard` label picks the behaviour, and the webhook configuration
//! does the picking: one validating webhook per mode, each on its own path with a
//! namespaceSelector on the label. The handler so needs no read access to Namespaces and no
//! per-request API call, and a namespace without the label is never sent here.

use json_patch::Patch;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::Value;

use super::admission::{self, BadReview, denied, encode, warned};
use crate::policy::{ModelConfigs, Outcome};
use crate::release::ReleaseChoice;
use crate::sglang::guard::{self, Server};
use crate::sglang::verdict::server_flags::{self, ServerVerdict};
use crate::sglang::workload;
use crate::source::{ClusterSource, naming_annotation};

/// Namespace label opting a namespace into the guard: `enforce` or `warn`.
pub const GUARD_LABEL: &str = "kvpilot.dev/guard";

/// Which guard webhook is asking; each is served on its own path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardWebhook {
    /// `/guard/enforce`: deny workloads whose SGLang flags the model cannot run.
    Enforce,
    /// `/guard/warn`: allow them, with a warning per violation.
    Warn,
    /// `/guard/rewrite` (mutating): rewrite the flags that have a safe fix.
    Rewrite,
}

impl GuardWebhook {
    /// The HTTP path of this webhook.
    pub fn path(self) -> &'static str {
        match self {
            Self::Enforce => "/guard/enforce",
            Self::Warn => "/guard/warn",
            Self::Rewrite => "/guard/rewrite",
        }
    }
}

/// Decodes a request body, decides, and returns the response review as JSON.
pub async fn review(
    body: &[u8],
    webhook: GuardWebhook,
    source: Option<&ClusterSource>,
    default_release: &ReleaseChoice,
) -> Result<Value, BadReview> {
    let (request, api_version) = admission::request_of(body)?;
    let response = decide(&request, &api_version, webhook, source, default_release).await;
    Ok(encode(response.into_review()))
}

async fn decide(
    request: &AdmissionRequest<DynamicObject>,
    api_version: &str,
    webhook: GuardWebhook,
    source: Option<&ClusterSource>,
    default_release: &ReleaseChoice,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if let Some(denial) = admission::unsupported_version(response.clone(), api_version) {
        return denial;
    }
    if request.sub_resource.is_some() || !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = request.object.as_ref().and_then(|o| serde_json::to_value(o).ok()) else {
        return denied(response, 400, "BadRequest", format!("{:?} request has no object", request.operation));
    };
    // An update that leaves every pod template as it was (labels, replicas, an immutable Pod's
    // metadata) brings no new SGLang flags: it is never refused for flags admitted before.
    if let Some(old) = request.old_object.as_ref().and_then(|o| serde_json::to_value(o).ok())
        && workload::inspected_contents(&old) == workload::inspected_contents(&object)
    {
        return response;
    }
    let namespace = request.namespace.clone().unwrap_or_else(|| "default".into());
    let inspection = guard::inspect(&object, default_release);
    let mut warnings: Vec<String> = inspection.warnings.clone();
    let mut checked: Vec<(&Server, ServerVerdict)> = Vec::new();
    // Servers whose config.json could not be read: the rules were not checked, but what the
    // release's parser refuses stands on its own.
    let mut argv_refusals: Vec<String> = Vec::new();
    for server in &inspection.servers {
        let subject = server.subject(&inspection.object);
        // The two reads run together: an admission review has a deadline.
        let target_read = async {
            match (&server.model, source) {
                (Err(warning), _) => Err(warning.clone()),
                (Ok(model), Some(source)) => source.model_config(&namespace, model).await.map_err(|e| {
                    let why = naming_annotation(&e.to_string(), guard::MODEL_CONFIG_ANNOTATION);
                    format!("kvpilot could not read the model config.json ({why})")
                }),
                (Ok(_), None) => Err("the webhook runs without a Kubernetes client".to_string()),
            }
        };
        let draft_read = async {
            match (&server.draft, source) {
                (Some(Ok(draft)), Some(source)) => Some(source.model_config(&namespace, draft).await),
                _ => None,
            }
        };
        let (config, draft_config) = tokio::join!(target_read, draft_read);
        // The draft's config.json refines one rule (T11): without it the server is still checked,
        // and what kept it unread is said only where the check would have read it.
        let (draft, draft_problem) = match (&server.draft, draft_config) {
            (_, Some(Ok(config))) => (Some(config), None),
            (_, Some(Err(e))) => {
                let why = naming_annotation(&e.to_string(), guard::DRAFT_MODEL_CONFIG_ANNOTATION);
                (None, Some(format!("kvpilot could not read the draft model's config.json ({why})")))
            }
            (Some(Err(warning)), None) => (None, Some(warning.clone())),
            _ => (None, None),
        };
        let checked_server = config.and_then(|target| {
            server_flags::check(server, &ModelConfigs { target, draft }, webhook == GuardWebhook::Rewrite)
                .map_err(|e| format!("the model config.json is not a model config: {e}"))
        });
        match checked_server {
            Ok(verdict) => {
                if verdict.reads_draft_config() {
                    warnings.extend(draft_problem.map(|problem| format!("{subject}: {problem}")));
                }
                checked.push((server, verdict));
            }
            Err(why) => {
                warnings.push(format!("{subject}: not checked: {why}"));
                let (refusals, argv_warnings) = server_flags::argv_check(server);
                argv_refusals.extend(
                    refusals.into_iter().map(|finding| format!("{} {subject}: {finding}", finding.violation.rule)),
                );
                warnings.extend(argv_warnings.into_iter().map(|w| format!("{subject}: {w}")));
            }
        }
    }
    let findings: Vec<String> = argv_refusals
        .iter()
        .cloned()
        .chain(checked.iter().flat_map(|(server, verdict)| {
            let subject = server.subject(&inspection.object);
            // The rule id leads, as in `kvpilot check`'s report and the InferenceDeployment
            // webhook's refusals, so a refusal names the rule to look up.
            verdict.findings.iter().map(move |finding| format!("{} {subject}: {finding}", finding.violation.rule))
        }))
        .collect();
    for (server, verdict) in &checked {
        let subject = server.subject(&inspection.object);
        warnings.extend(verdict.warnings.iter().map(|w| format!("{subject}: {w}")));
    }
    match webhook {
        GuardWebhook::Enforce
            if !argv_refusals.is_empty() || checked.iter().any(|(_, v)| v.outcome == Outcome::Rejected) =>
        {
            denied(response, 422, "Invalid", format!("SGLang flags the model cannot run: {}", findings.join("; ")))
        }
        GuardWebhook::Enforce => warned(response, warnings),
        GuardWebhook::Warn => warned(response, findings.into_iter().chain(warnings).collect()),
        GuardWebhook::Rewrite => {
            let rewritten: Vec<guard::Rewritten> = checked.iter().map(|(s, v)| v.rewritten(s)).collect();
            let rewrites: Vec<String> = rewritten
                .iter()
                .flat_map(|done| {
                    let subject = done.server.subject(&inspection.object);
                    done.rewrites.iter().map(move |r| format!("kvpilot rewrote {subject}: {r}"))
                })
                .collect();
            if rewrites.is_empty() {
                return warned(response, warnings);
            }
            match guard::rewrite_patch(&object, &rewritten)
                .and_then(|patch: Patch| response.clone().with_patch(patch).map_err(|e| e.to_string()))
            {
                Ok(patched) => warned(patched, rewrites.into_iter().chain(warnings).collect()),
                Err(e) => {
                    warnings.push(format!("kvpilot could not build the rewrite patch: {e}"));
                    warned(response, warnings)
                }
            }
        }
    }
}
