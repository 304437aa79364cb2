//! AdmissionReview in, AdmissionReview out: the validating and mutating decisions, built on
//! `policy::assess`. No HTTP here.

use base64::Engine;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, jsonptr::PointerBuf};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

use crate::api::{DRAFT_CONFIG_FIELD, InferenceDeployment, MODEL_CONFIG_FIELD, ModelSpec, OnInvalid};
use crate::layout::LayoutError;
use crate::policy::{self, ModelConfigs, Outcome};
use crate::release::ReleaseChoice;
use crate::source::ClusterSource;

/// The group/version/kind this webhook admits.
const GROUP: &str = "kvpilot.dev";
const VERSION: &str = "v1alpha1";
const KIND: &str = "InferenceDeployment";

/// Why a request body could not be taken as an AdmissionReview: the server answers HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("request body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("request body is not an admission.k8s.io/v1 AdmissionReview with a request: {0}")]
    NotAReview(String),
}

/// Which InferenceDeployment webhook is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceWebhook {
    /// `/validate`: allow or deny.
    Validate,
    /// `/mutate`: allow, with a JSON patch applying the rewrites for `onInvalid: Rewrite`.
    Mutate,
}

/// Decodes a request body, decides, and returns the response review as JSON (with `patch`
/// base64-encoded, as the API server requires).
pub async fn review(
    body: &[u8],
    webhook: ResourceWebhook,
    source: Option<&ClusterSource>,
    default_release: &ReleaseChoice,
) -> Result<Value, BadReview> {
    let (request, api_version) = request_of(body)?;
    let response = decide(&request, &api_version, webhook, source, default_release).await;
    Ok(encode(response.into_review()))
}

/// The request of an AdmissionReview body, and the review's apiVersion.
pub(crate) fn request_of(body: &[u8]) -> Result<(AdmissionRequest<DynamicObject>, String), BadReview> {
    let raw: Value = serde_json::from_slice(body).map_err(BadReview::NotJson)?;
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(raw).map_err(|e| BadReview::NotAReview(e.to_string()))?;
    let api_version = review.types.api_version.clone();
    let request = review.try_into().map_err(|_| BadReview::NotAReview("it has no request".into()))?;
    Ok((request, api_version))
}

/// The denial of a review whose apiVersion is not the one kvpilot speaks.
pub(crate) fn unsupported_version(response: AdmissionResponse, api_version: &str) -> Option<AdmissionResponse> {
    (api_version != "admission.k8s.io/v1").then(|| {
        denied(
            response,
            400,
            "BadRequest",
            format!("AdmissionReview apiVersion {api_version} is not supported; use admission.k8s.io/v1"),
        )
    })
}

async fn decide(
    request: &AdmissionRequest<DynamicObject>,
    api_version: &str,
    webhook: ResourceWebhook,
    source: Option<&ClusterSource>,
    default_release: &ReleaseChoice,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if let Some(denial) = unsupported_version(response.clone(), api_version) {
        return denial;
    }
    let gvk = &request.kind;
    if (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) != (GROUP, VERSION, KIND) {
        return denied(
            response,
            400,
            "BadRequest",
            format!(
                "kvpilot's webhook admits {GROUP}/{VERSION} {KIND} only, got {}/{} {}; check the webhook's rules",
                gvk.group, gvk.version, gvk.kind
            ),
        );
    }
    // Status writes (the controller's) and deletions are not settings changes.
    if request.sub_resource.is_some() || !matches!(request.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let Some(object) = &request.object else {
        return denied(response, 400, "BadRequest", format!("{:?} request has no object", request.operation));
    };
    // The mutating webhook runs before the API server validates the object against the CRD:
    // what the CRD refuses is refused here too, in its words, rather than decided on.
    let stored = match serde_json::to_value(object).map(|v| crate::api::validation::validate(&v)) {
        Ok(Ok(stored)) => stored,
        Ok(Err(problems)) => {
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return denied(
                response,
                422,
                "Invalid",
                format!("InferenceDeployment is invalid: {}", problems.join("; ")),
            );
        }
        Err(e) => return denied(response, 400, "BadRequest", format!("InferenceDeployment is not JSON: {e}")),
    };
    let resource: InferenceDeployment =
        match serde_path_to_error::deserialize(stored).map_err(|e| format!("field {}: {}", e.path(), e.inner())) {
            Ok(resource) => resource,
            Err(e) => return denied(response, 422, "Invalid", format!("InferenceDeployment is malformed: {e}")),
        };
    let name = format!("{}/{}", request.namespace.as_deref().unwrap_or("default"), request.name);
    let namespace = request.namespace.clone().unwrap_or_else(|| "default".into());
    let configs = match configs_for(&resource, &namespace, source).await {
        Ok(configs) => configs,
        Err(problem) => {
            return warned(
                response,
                vec![format!(
                    "kvpilot could not read the model config.json ({problem}); the controller checks the settings once \
                     it can, see the ModelResolved condition"
                )],
            );
        }
    };
    let release = match policy::resource_release(&resource.spec, default_release) {
        Ok(release) => release,
        Err(e) => return denied(response, 422, "Invalid", format!("{name}: spec.sglang.version: {e}")),
    };
    let assessment = match crate::sglang::verdict::assess(&resource.spec, &configs, &release) {
        Ok(assessment) => assessment,
        // An inline config is part of this object: refuse it. An external one can still be fixed.
        Err(e) => match inline_config_at_fault(&resource, &e) {
            Some(field) => {
                return denied(response, 422, "Invalid", format!("{name}: {field}.inline is not a model config: {e}"));
            }
            None => {
                return warned(response, vec![format!("the model config.json of {name} is not a model config: {e}")]);
            }
        },
    };
    let verdict = &assessment.verdict;
    let mut warnings: Vec<String> = assessment
        .layout
        .warnings
        .iter()
        .chain(&verdict.warnings)
        .chain(&assessment.command_line_warnings)
        .cloned()
        .collect();
    let scheduler_refusal = match missing_scheduler(&resource, source).await {
        Ok(refusal) => refusal,
        Err(warning) => {
            warnings.push(warning);
            None
        }
    };
    if webhook == ResourceWebhook::Validate
        && verdict.outcome != Outcome::Rejected
        && let Some(refusal) = &scheduler_refusal
    {
        return denied(response, 422, "Invalid", format!("{name}: {refusal}"));
    }
    match (verdict.outcome, webhook) {
        (Outcome::Rejected, ResourceWebhook::Validate) => {
            let listed: Vec<String> =
                verdict.violations.iter().map(ToString::to_string).chain(scheduler_refusal).collect();
            denied(
                response,
                422,
                "Invalid",
                format!(
                    "{name} is not valid for its model's attention layout ({}): {}",
                    assessment.layout.kv_pool.as_str(),
                    listed.join("; ")
                ),
            )
        }
        (Outcome::Rewritten, _) => {
            warnings.extend(
                verdict
                    .rewrites
                    .iter()
                    .map(|r| format!("{}: {} → {} ({}: {})", r.field, r.from, r.to, r.rule, r.message)),
            );
            if webhook == ResourceWebhook::Mutate && resource.spec.disaggregation.on_invalid == OnInvalid::Rewrite {
                match rewrite_patch(verdict)
                    .and_then(|patch| response.clone().with_patch(patch).map_err(|e| e.to_string()))
                {
                    Ok(patched) => warned(patched, warnings),
                    Err(e) => warned(response, vec![format!("kvpilot could not build the rewrite patch: {e}")]),
                }
            } else {
                warned(response, warnings)
            }
        }
        _ => warned(response, warnings),
    }
}

/// Why the gang scheduler `resource` asks for cannot place its pods (the cluster does not serve
/// its API), if it cannot; or a warning when the webhook could not ask.
async fn missing_scheduler(
    resource: &InferenceDeployment,
    source: Option<&ClusterSource>,
) -> Result<Option<String>, String> {
    let gang = resource.spec.scheduling.as_ref().map(|s| s.gang).unwrap_or_default();
    let Some(api) = gang.required_api() else { return Ok(None) };
    let not_checked = |why: String| {
        format!(
            "kvpilot could not check that the cluster serves {}'s API ({why}); the controller checks it, see \
             SettingsValid",
            api.scheduler
        )
    };
    let Some(source) = source else { return Err(not_checked("the webhook runs without a Kubernetes client".into())) };
    match source.apis().serves(api).await {
        Ok(served) => Ok((!served).then(|| api.refusal(gang))),
        Err(e) => Err(not_checked(e.to_string())),
    }
}

/// The config source field of the config.json a layout error is about, when that config is
/// inline (part of the object under review).
fn inline_config_at_fault(resource: &InferenceDeployment, error: &LayoutError) -> Option<&'static str> {
    let spec = &resource.spec;
    match &spec.disaggregation.speculative_draft_model {
        Some(draft) if error.field.starts_with(DRAFT_CONFIG_FIELD) => {
            draft.config.inline.is_some().then_some(DRAFT_CONFIG_FIELD)
        }
        _ => spec.model.config.inline.is_some().then_some(MODEL_CONFIG_FIELD),
    }
}

/// The model's and the speculative draft's config.json: inline ones from the object, the
/// others through the API server or the hub.
async fn configs_for(
    resource: &InferenceDeployment,
    namespace: &str,
    source: Option<&ClusterSource>,
) -> Result<ModelConfigs, String> {
    let spec = &resource.spec;
    let read = async |model: &ModelSpec, field: &'static str| match (&model.config.inline, source) {
        (Some(inline), _) => Ok(Value::Object(inline.clone())),
        (None, Some(source)) => source.model_config_at(namespace, model, field).await.map_err(|e| e.to_string()),
        (None, None) => Err("the webhook runs without a Kubernetes client".to_string()),
    };
    let target = read(&spec.model, MODEL_CONFIG_FIELD).await?;
    let draft = match &spec.disaggregation.speculative_draft_model {
        Some(draft) => Some(read(&draft.as_model(&spec.model), DRAFT_CONFIG_FIELD).await?),
        None => None,
    };
    Ok(ModelConfigs { target, draft })
}

/// JSON patch that writes each rewritten field of `spec.disaggregation` into the object.
fn rewrite_patch(verdict: &policy::Verdict) -> Result<Patch, String> {
    let settings = serde_json::to_value(&verdict.settings).map_err(|e| e.to_string())?;
    // Every rewritable rule is about a field of spec.disaggregation, so the block exists.
    let mut operations = Vec::new();
    for rewrite in &verdict.rewrites {
        let key = rewrite
            .field
            .strip_prefix("spec.disaggregation.")
            .ok_or_else(|| format!("{} is not a disaggregation field", rewrite.field))?;
        let path = PointerBuf::parse(format!("/spec/disaggregation/{key}")).map_err(|e| e.to_string())?;
        // A rewrite to "unset" (F1: no retraction flag in the release) removes the field.
        operations.push(match settings.get(key).cloned() {
            Some(value) => PatchOperation::Add(AddOperation { path, value }),
            None => PatchOperation::Remove(RemoveOperation { path }),
        });
    }
    Ok(Patch(operations))
}

pub(crate) fn denied(response: AdmissionResponse, code: u16, reason: &str, message: String) -> AdmissionResponse {
    let mut response = response.deny(message);
    response.result.code = code;
    response.result.reason = reason.into();
    response
}

pub(crate) fn warned(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// Serializes the review with `response.patch` as base64 text: kube's type writes the bytes as
/// a JSON array of numbers, which the Kubernetes API does not document (kube-rs #1781).
pub(crate) fn encode(review: AdmissionReview<DynamicObject>) -> Value {
    let mut value = serde_json::to_value(&review).unwrap_or(Value::Null);
    if let Some(patch) = value.pointer_mut("/response/patch")
        && let Some(bytes) =
            patch.as_array().map(|items| items.iter().filter_map(|b| b.as_u64()).map(|b| b as u8).collect::<Vec<u8>>())
    {
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    value
}
