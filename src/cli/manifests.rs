//! Reads manifests for the offline commands (`check`, `render`): YAML or JSON files and
//! directories (or standard input for `-`), multi-document YAML, `kind: List`; collects
//! InferenceDeployments, the workloads the SGLang guard reads, and the ConfigMaps and Secrets
//! they may refer to.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{ConfigSourceRef, DRAFT_CONFIG_FIELD, InferenceDeployment, MODEL_CONFIG_FIELD, ModelSpec};
use crate::sglang::workload;
use crate::source::{self, HubClient, HubLocation, SourceError};

/// Where a document came from, for error messages: `FILE, document N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: PathBuf,
    /// 1-based position of the document in the file.
    pub document: usize,
}

/// The path that stands for standard input.
pub const STDIN: &str = "-";

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file.as_os_str() == STDIN {
            return write!(f, "standard input, document {}", self.document);
        }
        write!(f, "{}, document {}", self.file.display(), self.document)
    }
}

/// An InferenceDeployment and where it was read.
pub struct Found {
    pub location: Location,
    pub resource: InferenceDeployment,
}

impl Found {
    /// `NAMESPACE/NAME`, with `default` for an omitted namespace.
    pub fn name(&self) -> String {
        format!("{}/{}", self.namespace(), self.resource.metadata.name.as_deref().unwrap_or("<unnamed>"))
    }

    pub fn namespace(&self) -> &str {
        self.resource.metadata.namespace.as_deref().unwrap_or("default")
    }
}

/// A workload object (Deployment, LeaderWorkerSet, …) and where it was read.
pub struct FoundWorkload {
    pub location: Location,
    pub object: Value,
}

impl FoundWorkload {
    pub fn namespace(&self) -> &str {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default")
    }
}

/// Everything read from the given paths.
#[derive(Default)]
pub struct ManifestSet {
    pub deployments: Vec<Found>,
    pub workloads: Vec<FoundWorkload>,
    /// Labels of the Namespaces in the files (the guard's `kvpilot.dev/on-invalid`).
    pub namespace_labels: HashMap<String, BTreeMap<String, String>>,
    config_maps: HashMap<(String, String), BTreeMap<String, String>>,
    secrets: HashMap<(String, String), BTreeMap<String, Vec<u8>>>,
}

/// Reads every path; returns the set and every problem found (so one run reports them all).
pub fn load(paths: &[PathBuf]) -> (ManifestSet, Vec<String>) {
    let mut set = ManifestSet::default();
    let mut errors = Vec::new();
    for path in paths {
        if path.as_os_str() == STDIN {
            let mut text = String::new();
            match std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
                Ok(_) => read_documents(path, &text, &mut set, &mut errors),
                Err(e) => errors.push(format!("standard input: cannot read: {e}")),
            }
            continue;
        }
        let mut files = Vec::new();
        if let Err(e) = collect_files(path, &mut files) {
            errors.push(format!("{}: {e}", path.display()));
        }
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => read_documents(&file, &text, &mut set, &mut errors),
                Err(e) => errors.push(format!("{}: cannot read: {e}", file.display())),
            }
        }
    }
    (set, errors)
}

fn collect_files(path: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !path.is_dir() {
        std::fs::metadata(path)?;
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        let is_manifest =
            entry.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if entry.is_dir() {
            collect_files(&entry, files)?;
        } else if is_manifest {
            files.push(entry);
        }
    }
    Ok(())
}

fn read_documents(file: &Path, text: &str, set: &mut ManifestSet, errors: &mut Vec<String>) {
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let location = Location { file: file.to_path_buf(), document: index + 1 };
        match Value::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => add(location, value, set, errors),
            Err(e) => {
                errors.push(format!("{location}: not valid YAML or JSON: {e}"));
                // The YAML stream cannot be resynchronised after a syntax error.
                return;
            }
        }
    }
}

fn add(location: Location, value: Value, set: &mut ManifestSet, errors: &mut Vec<String>) {
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    match (api_version.as_str(), kind.as_str()) {
        ("kvpilot.dev/v1alpha1", "InferenceDeployment") => {
            // What `kubectl apply` refuses (strict field validation, the schema, the CRD's CEL
            // rules), kvpilot refuses, every problem at once; what it accepts is read as the API
            // server stores it (nulls unset, defaults applied).
            let stored = match crate::api::validation::validate(&value) {
                Ok(stored) => stored,
                Err(problems) => {
                    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
                    errors.extend(problems.iter().map(|p| format!("{location}: InferenceDeployment {name}: {p}")));
                    return;
                }
            };
            match typed::<InferenceDeployment>(stored) {
                Ok(resource) => set.deployments.push(Found { location, resource }),
                Err(e) => errors.push(format!("{location}: InferenceDeployment: {e}")),
            }
        }
        (_, "InferenceDeployment") => errors.push(format!(
            "{location}: apiVersion \"{api_version}\" is not served for InferenceDeployment; use kvpilot.dev/v1alpha1"
        )),
        ("v1", "ConfigMap") => match typed::<ConfigMap>(value) {
            Ok(cm) => {
                let key = (namespace_of(&cm.metadata), cm.metadata.name.clone().unwrap_or_default());
                set.config_maps.insert(key, cm.data.unwrap_or_default());
            }
            Err(e) => errors.push(format!("{location}: ConfigMap: {e}")),
        },
        ("v1", "Secret") => match typed::<Secret>(value) {
            Ok(secret) => {
                let key = (namespace_of(&secret.metadata), secret.metadata.name.clone().unwrap_or_default());
                let mut data: BTreeMap<String, Vec<u8>> =
                    secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                data.extend(secret.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
                set.secrets.insert(key, data);
            }
            Err(e) => errors.push(format!("{location}: Secret: {e}")),
        },
        ("v1", "Namespace") => {
            let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            let labels = value
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
                .unwrap_or_default();
            set.namespace_labels.insert(name, labels);
        }
        (_, "List") => {
            for item in value.get("items").and_then(Value::as_array).cloned().unwrap_or_default() {
                add(location.clone(), item, set, errors);
            }
        }
        // Any other kind holding containers is read by the guard (by its shape where known).
        _ if workload::holds_containers(&value) => {
            set.workloads.push(FoundWorkload { location, object: value });
        }
        _ => {}
    }
}

/// Deserializes with the path of the failing field in the error.
fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { e.inner().to_string() } else { format!("field {path}: {}", e.inner()) }
    })
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

/// Why a config.json was not read.
#[derive(Debug)]
pub struct ConfigError {
    message: String,
    /// The source is well formed but could not be read (a ConfigMap or Secret not in the files,
    /// the hub unreachable or refusing): the resource is not checked, rather than invalid.
    unreadable: bool,
}

impl ConfigError {
    fn from_source(error: SourceError) -> Self {
        Self { unreadable: error.is_unreadable(), message: error.to_string() }
    }

    fn invalid(message: String) -> Self {
        Self { message, unreadable: false }
    }

    /// Whether the config could not be read, as opposed to being named or written wrongly.
    pub fn is_unreadable_source(&self) -> bool {
        self.unreadable
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The outcome of reading one resource's config.json.
pub enum ModelConfig {
    /// The parsed config.json.
    Read(Value),
    /// A hub source under `--offline`.
    SkippedOffline(String),
}

impl ManifestSet {
    /// Reads the config.json `found` names: inline, a ConfigMap of the file set, or the hub
    /// (unless `hub` is None, meaning offline).
    pub async fn model_config(
        &self,
        found: &Found,
        hub: Option<&HubClient>,
        default_endpoint: &str,
    ) -> Result<ModelConfig, ConfigError> {
        self.config_for(found.namespace(), &found.resource.spec.model, hub, default_endpoint).await
    }

    /// The config.json of `found`'s speculative draft model, if the spec names one; errors
    /// name `spec.disaggregation.speculativeDraftModel.config`.
    pub async fn draft_config(
        &self,
        found: &Found,
        hub: Option<&HubClient>,
        default_endpoint: &str,
    ) -> Option<Result<ModelConfig, ConfigError>> {
        let spec = &found.resource.spec;
        let draft = spec.disaggregation.speculative_draft_model.as_ref()?.as_model(&spec.model);
        let read = self.config_at(found.namespace(), &draft, DRAFT_CONFIG_FIELD, hub, default_endpoint).await;
        Some(read.map_err(|e| ConfigError { message: e.message.replace(MODEL_CONFIG_FIELD, DRAFT_CONFIG_FIELD), ..e }))
    }

    /// Reads the config.json `model` names for an object in `namespace`.
    pub async fn config_for(
        &self,
        namespace: &str,
        model: &ModelSpec,
        hub: Option<&HubClient>,
        default_endpoint: &str,
    ) -> Result<ModelConfig, ConfigError> {
        self.config_at(namespace, model, MODEL_CONFIG_FIELD, hub, default_endpoint).await
    }

    async fn config_at(
        &self,
        namespace: &str,
        model: &ModelSpec,
        field: &str,
        hub: Option<&HubClient>,
        default_endpoint: &str,
    ) -> Result<ModelConfig, ConfigError> {
        let namespace = namespace.to_string();
        match model.config.source_at(field).map_err(ConfigError::invalid)? {
            ConfigSourceRef::Inline(map) => Ok(ModelConfig::Read(Value::Object(map.clone()))),
            ConfigSourceRef::ConfigMap(reference) => {
                let Some(data) = self.config_maps.get(&(namespace.clone(), reference.name.clone())) else {
                    let missing = SourceError::ConfigMapNotFound { namespace, name: reference.name.clone() };
                    return Err(ConfigError {
                        message: format!("{missing} in the files given; add it with -f, or use an inline config"),
                        unreadable: true,
                    });
                };
                source::config_from_config_map_data(Some(data), &namespace, &reference.name, &reference.key)
                    .map(ModelConfig::Read)
                    .map_err(ConfigError::from_source)
            }
            ConfigSourceRef::Hub(spec) => {
                let location =
                    HubLocation::new(spec, &model.name, default_endpoint).map_err(ConfigError::from_source)?;
                let Some(hub) = hub else { return Ok(ModelConfig::SkippedOffline(location.url())) };
                let token = match &spec.token_secret_ref {
                    Some(reference) => match self.secrets.get(&(namespace.clone(), reference.name.clone())) {
                        Some(data) => match data.get(&reference.key) {
                            Some(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                            None => {
                                return Err(ConfigError::from_source(SourceError::TokenSecretNotFound {
                                    namespace,
                                    name: reference.name.clone(),
                                    key: reference.key.clone(),
                                }));
                            }
                        },
                        // Secrets are rarely committed next to manifests: fall back to HF_TOKEN.
                        None => std::env::var("HF_TOKEN").ok(),
                    },
                    None => std::env::var("HF_TOKEN").ok(),
                };
                hub.fetch(&location, token.as_deref()).await.map(ModelConfig::Read).map_err(ConfigError::from_source)
            }
        }
    }
}
