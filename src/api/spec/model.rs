//! `spec.model`: the model, where its weights come from, and the speculative draft model.

use k8s_openapi::api::core::v1::Volume;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ModelConfigSource;
use crate::api::schema::volume_source;

/// The model and the source of its Hugging Face config.json.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// Model id on the hub (for example `openai/gpt-oss-20b`); also the name the decode servers
    /// serve it under (`--served-model-name`).
    #[x_kube(validation = Rule::new("self != ''").message("spec.model.name must not be empty"))]
    pub name: String,
    /// Model revision (branch, tag or commit) SGLang downloads from the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Where the decode servers load the weights from: the hub (SGLang downloads spec.model.name,
    /// the default) or a volume mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WeightsSource>,
    /// Where the model's config.json comes from: exactly one of inline, configMapRef or hub.
    pub config: ModelConfigSource,
    /// Whether sliding-window models that SGLang supports with a hybrid SWA memory pool get
    /// one (`Auto`), or always a full-attention pool (`Disabled`, SGLang's
    /// `--disable-hybrid-swa-memory`).
    #[serde(default)]
    pub hybrid_swa_memory: HybridSwaMemory,
}

/// Where the weights come from: exactly one of `hub` or `volume`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.hub) ? 1 : 0) + (has(self.volume) ? 1 : 0) == 1")
    .message("set exactly one of spec.model.source.hub or spec.model.source.volume"))]
pub struct WeightsSource {
    /// SGLang downloads spec.model.name at spec.model.revision from the hub (with HF_TOKEN from
    /// spec.model.config.hub.tokenSecretRef when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubWeights>,
    /// The weights are in a volume, mounted read-only at /models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeWeights>,
}

/// Weights downloaded from the hub.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HubWeights {
    /// A volume kept as the Hugging Face cache (`HF_HOME`), so a restarted pod does not download
    /// the weights again: any Kubernetes volume source (`persistentVolumeClaim`, `hostPath`, …).
    /// Unset: the container's own disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "volume_source")]
    pub cache: Option<VolumeSource>,
}

/// Weights in a volume.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeWeights {
    /// The volume: any Kubernetes volume source (`persistentVolumeClaim`, `hostPath`, `nfs`,
    /// `csi`, …), mounted read-only at /models.
    #[schemars(schema_with = "volume_source")]
    pub source: VolumeSource,
    /// The model's directory inside the volume, relative to its root (`--model-path` is
    /// `/models/<path>`); empty for the root itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')").message(
        "spec.model.source.volume.path must be relative to the volume and stay inside it (no leading / and no ..)"
    ))]
    pub path: String,
}

/// A Kubernetes volume source: a `Volume` without its `name` (kvpilot names the volumes it
/// mounts). Boxed: a `Volume` is 3 KB inline, set or not, and the controller's watch cache
/// holds a spec for every InferenceDeployment.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeSource(pub Box<Volume>);

impl VolumeSource {
    /// The volume under `name`.
    pub fn named(&self, name: &str) -> Volume {
        Volume { name: name.to_string(), ..(*self.0).clone() }
    }
}

impl Serialize for VolumeSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(&self.0).map_err(serde::ser::Error::custom)?;
        if let Some(map) = value.as_object_mut() {
            map.remove("name");
        }
        value.serialize(serializer)
    }
}

/// Lenient on purpose: a watched object that fails to deserialize would stop the controller's
/// whole list, so an empty source is reported by [`VolumeSource::is_empty`]'s callers instead.
impl<'de> Deserialize<'de> for VolumeSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut map = serde_json::Map::deserialize(deserializer)?;
        map.insert("name".into(), "model".into());
        Volume::deserialize(serde_json::Value::Object(map))
            .map(|volume| Self(Box::new(volume)))
            .map_err(serde::de::Error::custom)
    }
}

impl VolumeSource {
    /// Whether no source is set (the API server would default such a volume to an emptyDir).
    pub fn is_empty(&self) -> bool {
        serde_json::to_value(&self.0).ok().and_then(|v| v.as_object().map(|m| m.len() <= 1)).unwrap_or(true)
    }
}

/// Where the model's weights volume is mounted in the SGLang containers.
pub const MODELS_DIR: &str = "/models";

impl ModelSpec {
    /// The volume the weights are in, if they are not downloaded from the hub.
    pub fn weights_volume(&self) -> Option<&VolumeWeights> {
        self.source.as_ref().and_then(|s| s.volume.as_ref())
    }

    /// The `--model-path` of its servers: the weights' directory in the mounted volume, or the
    /// hub id SGLang downloads.
    pub fn served_path(&self) -> String {
        match self.weights_volume() {
            Some(volume) => volume_path(&volume.path),
            None => self.name.clone(),
        }
    }
}

/// A directory of the weights volume as its servers see it, under [`MODELS_DIR`].
fn volume_path(relative: &str) -> String {
    match relative.trim_matches('/') {
        "" => MODELS_DIR.to_string(),
        relative => format!("{MODELS_DIR}/{relative}"),
    }
}

impl DraftModelSpec {
    /// The `--speculative-draft-model-path` of the servers of `model`: the draft's directory in
    /// the model's weights volume, or its hub id.
    pub fn served_path(&self, model: &ModelSpec) -> String {
        match (&self.path, model.weights_volume()) {
            (Some(path), Some(_)) => volume_path(path),
            _ => self.name.clone(),
        }
    }
}

/// The draft model of speculative decoding and the source of its config.json.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DraftModelSpec {
    /// Model id on the hub (SGLang downloads it; `--speculative-draft-model-path`), or a path in
    /// the image.
    #[x_kube(validation = Rule::new("self != ''").message("spec.disaggregation.speculativeDraftModel.name must not be empty"))]
    pub name: String,
    /// Revision of the draft model (`--speculative-draft-model-revision`) SGLang downloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The draft's directory inside the model's weights volume (spec.model.source.volume, mounted
    /// at /models), relative to its root. Unset: SGLang downloads `name` from the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')").message(
        "spec.disaggregation.speculativeDraftModel.path must be relative to the volume and stay inside it (no leading / and no ..)"
    ))]
    pub path: Option<String>,
    /// Where the draft's config.json comes from: exactly one of inline, configMapRef or hub (whose
    /// repo defaults to this name).
    pub config: ModelConfigSource,
}

/// Where `spec.disaggregation.speculativeDraftModel.config` is, for messages.
pub const DRAFT_CONFIG_FIELD: &str = "spec.disaggregation.speculativeDraftModel.config";
/// Where `spec.model.config` is, for messages.
pub const MODEL_CONFIG_FIELD: &str = "spec.model.config";

impl DraftModelSpec {
    /// The draft as a model to read the config.json of (served like the target as far as the
    /// layout's switches go).
    pub fn as_model(&self, target: &ModelSpec) -> ModelSpec {
        ModelSpec {
            name: self.name.clone(),
            revision: self.revision.clone(),
            source: None,
            config: self.config.clone(),
            hybrid_swa_memory: target.hybrid_swa_memory,
        }
    }
}

/// SGLang's hybrid SWA memory switch.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HybridSwaMemory {
    /// Hybrid SWA pools for the architectures SGLang supports them on.
    #[default]
    Auto,
    /// Always a full-attention pool (`--disable-hybrid-swa-memory`).
    Disabled,
}
