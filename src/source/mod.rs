//! Reading a model's config.json from where `spec.model.config` says: inline, a ConfigMap key,
//! or a Hugging Face-compatible hub over HTTPS (with a TTL cache shared by everything in the
//! process). The `check` and `render` commands, the controller and the webhook all use this.
//! `apis.rs`: which gang schedulers' APIs the cluster serves.

mod apis;
mod python_json;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api::{HubSource, MODEL_CONFIG_FIELD};
use crate::policy::ModelConfigs;
pub use apis::{RECHECK as SCHEDULER_API_RECHECK, ServedApis};
pub use python_json::to_strict_json;

/// Default hub endpoint.
pub const DEFAULT_HUB_ENDPOINT: &str = "https://huggingface.co";
/// config.json files are kilobytes; anything past this is not a model config.
pub const MAX_CONFIG_BYTES: usize = 4 * 1024 * 1024;

/// Why a config.json could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The ConfigMap named by `configMapRef` does not exist.
    #[error("ConfigMap {namespace}/{name} (spec.model.config.configMapRef.name) was not found")]
    ConfigMapNotFound { namespace: String, name: String },
    /// The ConfigMap exists but lacks the key.
    #[error(
        "ConfigMap {namespace}/{name} has no key \"{key}\" (spec.model.config.configMapRef.key); it has: {present}"
    )]
    ConfigMapKeyMissing { namespace: String, name: String, key: String, present: String },
    /// The Secret named by `tokenSecretRef` does not exist or lacks the key.
    #[error("Secret {namespace}/{name} with key \"{key}\" (spec.model.config.hub.tokenSecretRef) was not found")]
    TokenSecretNotFound { namespace: String, name: String, key: String },
    /// RBAC refuses the operator the Secret named by `tokenSecretRef`: the chart grants get only
    /// on the Secrets it lists.
    #[error(
        "the operator may not read Secret {namespace}/{name} (spec.model.config.hub.tokenSecretRef): add {{namespace: \
         {namespace}, name: {name}}} to the chart's rbac.hubTokenSecrets and upgrade the release (or set \
         rbac.readAllSecrets: true)"
    )]
    TokenSecretForbidden { namespace: String, name: String },
    /// The API server could not be asked (a transient error: retried).
    #[error("reading {what} from the API server failed: {message}")]
    ClusterApi { what: String, message: String },
    /// `spec.model.config` names no source or several.
    #[error("{0}")]
    SourceSelection(String),
    /// The text is not a JSON object.
    #[error("{origin} is not valid JSON (line {line}, column {column}): {message}")]
    InvalidJson { origin: String, line: usize, column: usize, message: String },
    /// The JSON is valid but is not an object.
    #[error("{origin} must hold a JSON object (a model config.json)")]
    NotAnObject { origin: String },
    /// The text is larger than any config.json.
    #[error("{origin} is {size} bytes; a config.json is at most {MAX_CONFIG_BYTES} bytes")]
    TooLarge { origin: String, size: usize },
    /// The hub endpoint is not an acceptable URL.
    #[error("spec.model.config.hub.endpoint \"{endpoint}\": {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// The hub answered with an error status.
    #[error("GET {url} returned HTTP {status}: {hint}")]
    HubStatus { url: String, status: u16, hint: String },
    /// The hub could not be reached.
    #[error("GET {url} failed: {message}")]
    HubUnreachable { url: String, message: String },
    /// An error reading the config source at another field than `spec.model.config` (the
    /// speculative draft's), which the message names instead.
    #[error("{}", .inner.to_string().replace(MODEL_CONFIG_FIELD, .field))]
    At { field: &'static str, inner: Box<SourceError> },
}

impl SourceError {
    /// Whether the source is well formed but could not be read: a ConfigMap, key or Secret that
    /// does not exist (yet), the API server or the hub unreachable or refusing. What was read
    /// but is not a model config, or a source named wrongly, is not.
    pub fn is_unreadable(&self) -> bool {
        match self {
            Self::ConfigMapNotFound { .. }
            | Self::ConfigMapKeyMissing { .. }
            | Self::TokenSecretNotFound { .. }
            | Self::TokenSecretForbidden { .. }
            | Self::ClusterApi { .. }
            | Self::HubStatus { .. }
            | Self::HubUnreachable { .. } => true,
            Self::At { inner, .. } => inner.is_unreadable(),
            Self::SourceSelection(_)
            | Self::InvalidJson { .. }
            | Self::NotAnObject { .. }
            | Self::TooLarge { .. }
            | Self::BadEndpoint { .. } => false,
        }
    }
}

impl SourceError {
    /// A short CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ConfigMapNotFound { .. } | Self::ConfigMapKeyMissing { .. } => "ConfigMapUnavailable",
            Self::TokenSecretNotFound { .. } | Self::TokenSecretForbidden { .. } => "TokenSecretUnavailable",
            Self::SourceSelection(_) => "InvalidConfigSource",
            Self::ClusterApi { .. } => "ApiUnavailable",
            Self::InvalidJson { .. } | Self::NotAnObject { .. } | Self::TooLarge { .. } => "InvalidConfigJson",
            Self::BadEndpoint { .. } => "InvalidHubEndpoint",
            Self::HubStatus { .. } | Self::HubUnreachable { .. } => "HubFetchFailed",
            Self::At { inner, .. } => inner.reason(),
        }
    }

    /// This error as one reading the config source at `field` (a message naming
    /// `spec.model.config` names `field` instead).
    pub fn at(self, field: &'static str) -> Self {
        if field == MODEL_CONFIG_FIELD { self } else { Self::At { field, inner: Box::new(self) } }
    }
}

/// `message` (about a config source) as it concerns a workload whose model config.json the
/// annotation `annotation` points at: the guard's workloads have no `spec.model.config`, so every
/// path under it becomes the annotation, and the hint of an inline config (which they cannot
/// have) goes.
pub fn naming_annotation(message: &str, annotation: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message.replace(", or use an inline config", "");
    while let Some(at) = rest.find(MODEL_CONFIG_FIELD) {
        out.push_str(&rest[..at]);
        let path_end = rest[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
            .map_or(rest.len(), |end| at + end);
        out.push_str("the annotation ");
        out.push_str(annotation);
        rest = rest[path_end..].to_string();
    }
    out.push_str(&rest);
    out
}

/// Parses config.json text as Python's `json` does (`NaN` and the infinities accepted), naming
/// `origin` (a ConfigMap key, a URL, a file) in errors.
pub fn parse_config_text(text: &str, origin: &str) -> Result<Value, SourceError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(SourceError::TooLarge { origin: origin.into(), size: text.len() });
    }
    let value: Value = serde_json::from_str(&to_strict_json(text)).map_err(|e| SourceError::InvalidJson {
        origin: origin.into(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(SourceError::NotAnObject { origin: origin.into() });
    }
    Ok(value)
}

/// The config.json text of a ConfigMap's data, or the error naming what is missing.
pub fn config_from_config_map_data(
    data: Option<&std::collections::BTreeMap<String, String>>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Value, SourceError> {
    let data = data.cloned().unwrap_or_default();
    match data.get(key) {
        Some(text) => parse_config_text(text, &format!("ConfigMap {namespace}/{name} key \"{key}\"")),
        None => Err(SourceError::ConfigMapKeyMissing {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
            present: if data.is_empty() {
                "no keys".into()
            } else {
                data.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
            },
        }),
    }
}

/// Where a hub source resolves to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HubLocation {
    /// Endpoint without a trailing slash.
    pub endpoint: String,
    /// Repository id.
    pub repo: String,
    /// Revision.
    pub revision: String,
}

impl HubLocation {
    /// Applies the defaults: `repo` = the model name, `revision` = main, `endpoint` = the
    /// operator's default.
    pub fn new(hub: &HubSource, model_name: &str, default_endpoint: &str) -> Result<Self, SourceError> {
        let endpoint = hub.endpoint.as_deref().unwrap_or(default_endpoint).trim_end_matches('/').to_string();
        check_endpoint(&endpoint)?;
        Ok(Self {
            endpoint,
            repo: hub.repo.clone().unwrap_or_else(|| model_name.to_string()),
            revision: hub.revision.clone().unwrap_or_else(|| "main".into()),
        })
    }

    /// `<endpoint>/<repo>/resolve/<revision>/config.json`.
    pub fn url(&self) -> String {
        format!("{}/{}/resolve/{}/config.json", self.endpoint, self.repo, self.revision)
    }
}

/// HTTPS only, except plain HTTP to a loopback address (a local mirror or a test server).
fn check_endpoint(endpoint: &str) -> Result<(), SourceError> {
    let bad = |reason: &str| SourceError::BadEndpoint { endpoint: endpoint.into(), reason: reason.into() };
    let url = reqwest::Url::parse(endpoint).map_err(|e| bad(&format!("not a URL ({e})")))?;
    match url.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
            let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
            if loopback {
                Ok(())
            } else {
                Err(bad("use https:// (plain http is accepted only for loopback addresses)"))
            }
        }
        other => Err(bad(&format!("scheme {other} is not supported; use https://"))),
    }
}

/// Fetches config.json from hubs, caching each (endpoint, repo, revision) for `ttl`.
pub struct HubClient {
    http: reqwest::Client,
    ttl: Duration,
    cache: Mutex<HashMap<HubLocation, (Instant, Value)>>,
}

impl HubClient {
    /// A client with the platform's trusted roots plus `extra_roots` (PEM), and a per-request timeout.
    pub fn new(ttl: Duration, timeout: Duration, extra_roots: &[reqwest::Certificate]) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::limited(5))
            .user_agent(concat!("kvpilot/", env!("CARGO_PKG_VERSION")));
        for root in extra_roots {
            builder = builder.add_root_certificate(root.clone());
        }
        Ok(Self { http: builder.build()?, ttl, cache: Mutex::new(HashMap::new()) })
    }

    /// The config.json at `location`, from the cache while it is fresh.
    pub async fn fetch(&self, location: &HubLocation, token: Option<&str>) -> Result<Value, SourceError> {
        if let Some(value) = self.cached(location) {
            return Ok(value);
        }
        let url = location.url();
        let unreachable = |e: reqwest::Error| SourceError::HubUnreachable { url: url.clone(), message: e.to_string() };
        let mut request = self.http.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token.trim());
        }
        let mut response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        if !status.is_success() {
            let hint = match status.as_u16() {
                401 | 403 => {
                    "the hub refused access: gated or private models need spec.model.config.hub.tokenSecretRef"
                }
                404 => "not found: check spec.model.config.hub.repo and revision (defaults: spec.model.name and main)",
                _ => "the hub failed; kvpilot retries with backoff",
            };
            return Err(SourceError::HubStatus { url, status: status.as_u16(), hint: hint.into() });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_CONFIG_BYTES {
                return Err(SourceError::TooLarge { origin: url, size: body.len() });
            }
        }
        let text = String::from_utf8_lossy(&body);
        let value = parse_config_text(&text, &url)?;
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(location.clone(), (Instant::now(), value.clone()));
        Ok(value)
    }

    fn cached(&self, location: &HubLocation) -> Option<Value> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(location).filter(|(at, _)| at.elapsed() < self.ttl).map(|(_, value)| value.clone())
    }
}

/// Reads config sources inside a cluster: ConfigMaps and token Secrets through the API server,
/// hub sources through a shared [`HubClient`]; and which gang schedulers' APIs it serves.
#[derive(Clone)]
pub struct ClusterSource {
    client: kube::Client,
    hub: std::sync::Arc<HubClient>,
    default_endpoint: String,
    apis: std::sync::Arc<ServedApis>,
}

impl ClusterSource {
    /// A reader using `client` for ConfigMaps, Secrets and discovery and `hub` for hub sources.
    pub fn new(client: kube::Client, hub: std::sync::Arc<HubClient>, default_endpoint: impl Into<String>) -> Self {
        let apis = std::sync::Arc::new(ServedApis::new(client.clone()));
        Self { client, hub, default_endpoint: default_endpoint.into(), apis }
    }

    /// The cluster's gang scheduler APIs, as discovery lists them.
    pub fn apis(&self) -> &ServedApis {
        &self.apis
    }

    /// The model's config.json, for a resource in `namespace`.
    pub async fn model_config(&self, namespace: &str, model: &crate::api::ModelSpec) -> Result<Value, SourceError> {
        self.model_config_at(namespace, model, MODEL_CONFIG_FIELD).await
    }

    /// The model's and its speculative draft's config.json (the draft's when
    /// `spec.disaggregation.speculativeDraftModel` names one).
    pub async fn model_configs(
        &self,
        namespace: &str,
        spec: &crate::api::InferenceDeploymentSpec,
    ) -> Result<ModelConfigs, SourceError> {
        // The two reads run together; the model's error comes first whichever finishes first, so
        // the condition a failure leaves does not flap between the two.
        let draft_read = async {
            match &spec.disaggregation.speculative_draft_model {
                None => Ok(None),
                Some(draft) => self
                    .model_config_at(namespace, &draft.as_model(&spec.model), crate::api::DRAFT_CONFIG_FIELD)
                    .await
                    .map(Some),
            }
        };
        let (target, draft) = tokio::join!(self.model_config(namespace, &spec.model), draft_read);
        let (target, draft) = (target?, draft?);
        Ok(ModelConfigs { target, draft })
    }

    /// The config.json of `model`, whose config source is at `field`.
    pub async fn model_config_at(
        &self,
        namespace: &str,
        model: &crate::api::ModelSpec,
        field: &'static str,
    ) -> Result<Value, SourceError> {
        self.read(namespace, model, field).await.map_err(|e| e.at(field))
    }

    async fn read(&self, namespace: &str, model: &crate::api::ModelSpec, field: &str) -> Result<Value, SourceError> {
        use crate::api::ConfigSourceRef;
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        use kube::Api;

        match model.config.source_at(field) {
            Err(message) => Err(SourceError::SourceSelection(message)),
            Ok(ConfigSourceRef::Inline(map)) => Ok(Value::Object(map.clone())),
            Ok(ConfigSourceRef::ConfigMap(reference)) => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                let not_found =
                    || SourceError::ConfigMapNotFound { namespace: namespace.into(), name: reference.name.clone() };
                let config_map = api
                    .get_opt(&reference.name)
                    .await
                    .map_err(|e| api_error(format!("ConfigMap {namespace}/{}", reference.name), e))?
                    .ok_or_else(not_found)?;
                config_from_config_map_data(config_map.data.as_ref(), namespace, &reference.name, &reference.key)
            }
            Ok(ConfigSourceRef::Hub(hub)) => {
                let location = HubLocation::new(hub, &model.name, &self.default_endpoint)?;
                let token = match &hub.token_secret_ref {
                    None => None,
                    Some(reference) => {
                        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                        let missing = || SourceError::TokenSecretNotFound {
                            namespace: namespace.into(),
                            name: reference.name.clone(),
                            key: reference.key.clone(),
                        };
                        let secret = api
                            .get_opt(&reference.name)
                            .await
                            .map_err(|e| match e {
                                kube::Error::Api(status) if status.code == 403 => SourceError::TokenSecretForbidden {
                                    namespace: namespace.into(),
                                    name: reference.name.clone(),
                                },
                                e => api_error(format!("Secret {namespace}/{}", reference.name), e),
                            })?
                            .ok_or_else(missing)?;
                        let bytes = secret.data.and_then(|d| d.get(&reference.key).cloned()).ok_or_else(missing)?;
                        Some(String::from_utf8_lossy(&bytes.0).into_owned())
                    }
                };
                self.hub.fetch(&location, token.as_deref()).await
            }
        }
    }
}

fn api_error(what: String, error: kube::Error) -> SourceError {
    SourceError::ClusterApi { what, message: error.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_s_config_source_errors_name_its_annotation() {
        let missing = SourceError::ConfigMapNotFound { namespace: "ml".into(), name: "llama".into() }.to_string()
            + " in the files given; add it with -f, or use an inline config";
        assert_eq!(
            naming_annotation(&missing, "kvpilot.dev/model-config"),
            "ConfigMap ml/llama (the annotation kvpilot.dev/model-config) was not found in the files given; add it \
             with -f"
        );
        let key = SourceError::ConfigMapKeyMissing {
            namespace: "ml".into(),
            name: "llama".into(),
            key: "config.json".into(),
            present: "cfg".into(),
        };
        assert_eq!(
            naming_annotation(&key.to_string(), "kvpilot.dev/draft-model-config"),
            "ConfigMap ml/llama has no key \"config.json\" (the annotation kvpilot.dev/draft-model-config); it has: cfg"
        );
        assert_eq!(naming_annotation("GET https://hub/x failed: timeout", "a"), "GET https://hub/x failed: timeout");
    }
}
