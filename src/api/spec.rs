//! The spec half of `InferenceDeployment`. Field names are a contract: the CLI, the webhook,
//! the controller, the examples and users' manifests all rely on them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, EnvVar, ResourceRequirements, Toleration, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::{preserve_unknown_object, volume_source};
use super::status::InferenceDeploymentStatus;

/// One model served with SGLang prefill/decode disaggregation. kvpilot resolves the model's
/// attention layout, checks the disaggregation settings against it, and runs SGLang decode
/// servers (and, with `spec.prefill`, prefill servers and the router) started with exactly the
/// flags it decided.
// clippy reads the repeated `printcolumn(type_ = ...)` arguments as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kvpilot.dev",
    version = "v1alpha1",
    kind = "InferenceDeployment",
    plural = "inferencedeployments",
    shortname = "infd",
    category = "kvpilot",
    namespaced,
    status = "InferenceDeploymentStatus",
    scale(
        spec_replicas_path = ".spec.decode.replicas",
        status_replicas_path = ".status.decode.replicas",
        label_selector_path = ".status.decode.selector"
    ),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model.name"),
    printcolumn(name = "Layout", type_ = "string", json_path = ".status.layout.kvPool"),
    printcolumn(name = "Backup", type_ = "string", json_path = ".status.effective.retractionBackup"),
    printcolumn(
        name = "Settings",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"SettingsValid\")].reason",
        priority = "1"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.decode.readyReplicas"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.decode.replicas"),
    printcolumn(name = "Prefill", type_ = "integer", json_path = ".status.prefill.readyReplicas", priority = "1"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.prefill) || !has(self.disaggregation) || !has(self.disaggregation.prefill)").message(
    "spec.disaggregation.prefill describes prefill servers kvpilot does not run; with spec.prefill set, move its fields there and remove spec.disaggregation.prefill"
))]
#[x_kube(validation = Rule::new("!has(self.router) || (has(self.router.enabled) && !self.router.enabled) || has(self.prefill)").message(
    "spec.router routes to the prefill fleet kvpilot runs: set spec.prefill, or spec.router.enabled: false"
))]
pub struct InferenceDeploymentSpec {
    /// The model to serve and where its config.json comes from.
    pub model: ModelSpec,
    /// Prefill/decode disaggregation and decode retraction settings, checked against the
    /// model's attention layout.
    #[serde(default)]
    pub disaggregation: DisaggregationSpec,
    /// The decode fleet: parallelism, pod count and pod template fields.
    #[serde(default)]
    pub decode: FleetSpec,
    /// The prefill fleet kvpilot runs beside the decode fleet (`--disaggregation-mode prefill`),
    /// with the same fields (boxed: debug builds deserialize it in one stack frame with the rest of
    /// the spec). Unset: the prefill servers run elsewhere (describe them in
    /// spec.disaggregation.prefill for the transfer rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<Box<FleetSpec>>,
    /// The SGLang router in front of both fleets (on by default when spec.prefill is set): it
    /// finds the prefill and decode servers by label and sends each request to a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Box<RouterSpec>>,
    /// The SGLang release the fleets run; its rules and model classification apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang: Option<SglangSpec>,
    /// The kvpilot cache runtime as the decode servers' HiCache L3 KV store: a sidecar beside
    /// every decode server, over shared memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
}

/// The kvpilot cache runtime beside every decode server, as SGLang's HiCache storage backend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.offload || self.reuse").message(
    "spec.cache: set offload (decode writes KV to the store), reuse (decode reads prefixes from it) or both"
))]
pub struct CacheSpec {
    /// Decode servers write the KV of finished requests to the store
    /// (`--disaggregation-decode-enable-offload-kvcache`).
    #[serde(default)]
    pub offload: bool,
    /// Decode servers keep a radix cache over a hierarchical cache and read prefixes from the
    /// store (`--disaggregation-decode-enable-radix-cache --enable-hierarchical-cache`).
    #[serde(default)]
    pub reuse: bool,
    /// Bytes of pages the sidecar keeps (`kvpilot cache-runtime --capacity`, for example
    /// `64Gi`); its memory request and limit are sized from it.
    pub capacity: Quantity,
    /// Host memory of each HiCache host pool of each GPU rank (SGLang's `--hicache-size`, which
    /// takes whole gigabytes of 10^9 bytes: rounded down, at least `1G`). Offload and reuse build
    /// a pool each. Counted in the SGLang container's memory request and limit. Unset: SGLang
    /// sizes the pools from the device pool (`--hicache-ratio`), which depends on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pool_size: Option<Quantity>,
}

/// One gigabyte as SGLang's `--hicache-size` counts it.
pub const HICACHE_GIGABYTE: u64 = 1_000_000_000;

impl CacheSpec {
    /// `capacity` in bytes, or why it cannot be read.
    pub fn capacity_bytes(&self) -> Result<u64, String> {
        quantity_bytes(&self.capacity.0)
    }

    /// `hostPoolSize` as SGLang's `--hicache-size` (whole gigabytes), if set, or why it cannot
    /// be: below one gigabyte SGLang would read 0, which means "size from the ratio".
    pub fn host_pool_gigabytes(&self) -> Option<Result<u64, String>> {
        let size = self.host_pool_size.as_ref()?;
        Some(quantity_bytes(&size.0).and_then(|bytes| match bytes / HICACHE_GIGABYTE {
            0 => Err(format!("{:?} is less than the 1G SGLang's --hicache-size counts in", size.0)),
            gigabytes => Ok(gigabytes),
        }))
    }

    /// Host pools each GPU rank builds: one for decode offload, one for HiCache under reuse.
    pub fn host_pools_per_rank(&self) -> u64 {
        u64::from(self.offload) + u64::from(self.reuse)
    }
}

/// A Kubernetes quantity of bytes (`64Gi`, `500M`, `1073741824`) as a number of bytes.
pub fn quantity_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let multiplier: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(format!("{text:?} is not a whole number of bytes such as 64Gi, 512Mi or 1073741824")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is not a whole number of bytes such as 64Gi, 512Mi or 1073741824"))
}

/// Which SGLang release the resource is checked against.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SglangSpec {
    /// SGLang release as PyPI spells it (`0.5.23`, `v0.5.23`, `0.5.22.post1`). Unset: the
    /// version in the tag of an SGLang spec.decode.image (`lmsysorg/sglang:v0.5.23-cu129`), else the
    /// operator's --sglang-version, else the newest release kvpilot knows. A release newer than
    /// any known is checked as the newest known one, with a warning; status.sglang says which
    /// release was used and where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^v?[0-9]+[.][0-9]+[.][0-9]+([.]post[0-9]+)?$')").message(
        "spec.sglang.version must look like 0.5.23, v0.5.23 or 0.5.22.post1"
    ))]
    pub version: Option<String>,
}

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
/// mounts).
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeSource(pub Volume);

impl VolumeSource {
    /// The volume under `name`.
    pub fn named(&self, name: &str) -> Volume {
        Volume { name: name.to_string(), ..self.0.clone() }
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
        Volume::deserialize(serde_json::Value::Object(map)).map(Self).map_err(serde::de::Error::custom)
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

/// Exactly one source of the model's config.json.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.inline) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) + (has(self.hub) ? 1 : 0) == 1"
).message("set exactly one of config.inline, config.configMapRef or config.hub"))]
pub struct ModelConfigSource {
    /// The model's config.json as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub inline: Option<serde_json::Map<String, serde_json::Value>>,
    /// A key of a ConfigMap in the same namespace that holds the config.json text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
    /// Fetch config.json over HTTPS from a Hugging Face-compatible hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubSource>,
}

/// The one config source a `ModelConfigSource` names, or why it names none or several.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigSourceRef<'a> {
    /// `spec.model.config.inline`.
    Inline(&'a serde_json::Map<String, serde_json::Value>),
    /// `spec.model.config.configMapRef`.
    ConfigMap(&'a ConfigMapKeyRef),
    /// `spec.model.config.hub`.
    Hub(&'a HubSource),
}

impl ModelConfigSource {
    /// The single source set, or an error naming the fields when zero or several are set
    /// (the CRD's CEL rule refuses that at admission; this covers offline checks).
    pub fn source(&self) -> Result<ConfigSourceRef<'_>, String> {
        self.source_at(MODEL_CONFIG_FIELD)
    }

    /// [`Self::source`] for the source at `field` (`spec.model.config`, or the draft's).
    pub fn source_at(&self, field: &str) -> Result<ConfigSourceRef<'_>, String> {
        let mut set = Vec::new();
        if self.inline.is_some() {
            set.push("inline");
        }
        if self.config_map_ref.is_some() {
            set.push("configMapRef");
        }
        if self.hub.is_some() {
            set.push("hub");
        }
        match (set.as_slice(), self) {
            ([_], Self { inline: Some(v), .. }) => Ok(ConfigSourceRef::Inline(v)),
            ([_], Self { config_map_ref: Some(r), .. }) => Ok(ConfigSourceRef::ConfigMap(r)),
            ([_], Self { hub: Some(h), .. }) => Ok(ConfigSourceRef::Hub(h)),
            ([], _) => Err(format!("{field}: none of inline, configMapRef or hub is set; set exactly one")),
            _ => {
                Err(format!("{field}: {} are all set; set exactly one of inline, configMapRef or hub", set.join(", ")))
            }
        }
    }
}

/// A key in a ConfigMap of the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap.
    pub name: String,
    /// Key holding the config.json text.
    #[serde(default = "default_config_key")]
    pub key: String,
}

fn default_config_key() -> String {
    "config.json".into()
}

/// A Hugging Face-compatible hub to fetch `<endpoint>/<repo>/resolve/<revision>/config.json` from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HubSource {
    /// Repository id on the hub; defaults to spec.model.name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Revision (branch, tag or commit); defaults to `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Hub base URL; defaults to `https://huggingface.co` (or the operator's `--hub-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A Secret key in the same namespace holding a bearer token for gated or private models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,
}

/// A key in a Secret of the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    pub name: String,
    /// Key holding the token.
    #[serde(default = "default_token_key")]
    pub key: String,
}

fn default_token_key() -> String {
    "token".into()
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

/// Where a retracted request's KV cache is kept until it is restored.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetractionBackup {
    /// Per-request host-memory buffers (works for every KV pool).
    #[serde(rename = "cpu_tensor")]
    CpuTensor,
    /// A reserved host pool beside the device pool (needs a full-attention MHA or hybrid-SWA pool).
    #[serde(rename = "host_pool")]
    HostPool,
    /// No backup: a retracted request is aborted with HTTP 503 for the client to retry (SGLang
    /// 0.5.21 and later).
    #[serde(rename = "none")]
    None,
}

impl RetractionBackup {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CpuTensor => "cpu_tensor",
            Self::HostPool => "host_pool",
            Self::None => "none",
        }
    }
}

/// What HiCache's host memory is (`--hicache-host-memory-mode`, SGLang 0.5.19 and later).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HicacheHostMemoryMode {
    /// A persistent cache tier (SGLang's default).
    #[serde(rename = "cache")]
    Cache,
    /// A transient staging buffer between the GPU and the storage backend, which holds all cached
    /// data; SGLang refuses it on decode servers.
    #[serde(rename = "buffer_only")]
    BufferOnly,
}

impl HicacheHostMemoryMode {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cache => "cache",
            Self::BufferOnly => "buffer_only",
        }
    }
}

/// What kvpilot does with settings the model's layout cannot run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnInvalid {
    /// Refuse the resource and say why.
    #[default]
    Reject,
    /// Fix the settings that have a safe fix, record each fix in status and events, and refuse
    /// only what has none.
    Rewrite,
}

/// The KV transfer engine between prefill and decode.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TransferBackend {
    /// Mooncake transfer engine.
    #[default]
    Mooncake,
    /// NVIDIA NIXL.
    Nixl,
    /// AMD MORI.
    Mori,
    /// No transfer (decode-only testing).
    Fake,
}

impl TransferBackend {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::Nixl => "nixl",
            Self::Mori => "mori",
            Self::Fake => "fake",
        }
    }
}

/// How the Mamba radix cache keeps SSM state for prefix reuse.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MambaRadixCacheStrategy {
    /// No extra state buffer.
    #[serde(rename = "no_buffer")]
    NoBuffer,
    /// An extra state buffer tracked at fixed intervals.
    #[serde(rename = "extra_buffer")]
    ExtraBuffer,
    /// The lazy variant of extra_buffer (not supported under PD disaggregation).
    #[serde(rename = "extra_buffer_lazy")]
    ExtraBufferLazy,
}

impl MambaRadixCacheStrategy {
    /// The value as SGLang's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoBuffer => "no_buffer",
            Self::ExtraBuffer => "extra_buffer",
            Self::ExtraBufferLazy => "extra_buffer_lazy",
        }
    }
}

/// Disaggregation and retraction settings of the decode side.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.speculativeDraftModel) || has(self.speculativeAlgorithm)").message(
    "spec.disaggregation.speculativeDraftModel drafts for speculative decoding: set spec.disaggregation.speculativeAlgorithm too, or remove it"
))]
pub struct DisaggregationSpec {
    /// Where retracted requests keep their KV cache: `cpu_tensor`, `host_pool`, `none` (SGLang
    /// 0.5.21 and later: no backup, retracted requests are aborted), or unset for the runtime's
    /// automatic choice (host_pool when the release, the layout and the settings allow it). SGLang
    /// before 0.5.18 has no such setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retraction_backup: Option<RetractionBackup>,
    /// `Reject` (default) refuses invalid settings; `Rewrite` fixes those with a safe fix.
    #[serde(default)]
    pub on_invalid: OnInvalid,
    /// KV transfer backend shared with the prefill side.
    #[serde(default)]
    pub transfer_backend: TransferBackend,
    /// Prefill servers kvpilot does not run, as far as the transfer rules (T1, P1, P2) need
    /// them. With spec.prefill (a fleet kvpilot runs) this is taken from there instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<PrefillSpec>,
    /// Port of the prefill servers' bootstrap server (`--disaggregation-bootstrap-port`), which
    /// decode servers reach to set up each transfer; the router learns it from the prefill pods'
    /// `sglang.ai/bootstrap-port` annotation.
    #[serde(default = "default_bootstrap_port")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.disaggregation.bootstrapPort must be between 1 and 65535"))]
    pub bootstrap_port: i32,
    /// Keep a radix prefix cache on decode (`--disaggregation-decode-enable-radix-cache`).
    #[serde(default)]
    pub decode_radix_cache: bool,
    /// Offload decode KV to a HiCache storage backend (`--disaggregation-decode-enable-offload-kvcache`).
    #[serde(default)]
    pub decode_offload_kv_cache: bool,
    /// Hierarchical (HiCache) device + host cache on decode (`--enable-hierarchical-cache`).
    #[serde(default)]
    pub hierarchical_cache: bool,
    /// Priority scheduling (`--enable-priority-scheduling`).
    #[serde(default)]
    pub priority_scheduling: bool,
    /// Turn off priority preemption (`--disable-priority-preemption`).
    #[serde(default)]
    pub disable_priority_preemption: bool,
    /// Decode context-parallel size (`--dcp-size`).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.decodeContextParallel must be at least 1"))]
    pub decode_context_parallel: i32,
    /// Speculative decoding algorithm (`--speculative-algorithm`, for example `EAGLE` or `NEXTN`),
    /// if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<String>,
    /// The draft model of speculative decoding (`--speculative-draft-model-path`). Unset: the
    /// model's own NextN/MTP layers draft (SGLang loads the draft from the target's checkpoint).
    /// Its config.json is resolved like the model's, so the rules comparing the target's pools
    /// with the draft's (T11) can be checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_draft_model: Option<DraftModelSpec>,
    /// Mamba radix cache strategy for SSM-hybrid models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_radix_cache_strategy: Option<MambaRadixCacheStrategy>,
    /// Host pool size as a fraction of the device pool (SGLang's `--hicache-ratio`); defaults
    /// to 0.2 for a retraction-only host pool and 2.0 when hierarchical cache shares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0").message("spec.disaggregation.hostPoolRatio must be greater than 0"))]
    pub host_pool_ratio: Option<f64>,
    /// Unified device memory pool (`--enable-unified-memory`).
    #[serde(default)]
    pub enable_unified_memory: bool,
    /// HiCache storage backend of the decode servers (`--hicache-storage-backend`: `file`,
    /// `mooncake`, `dynamic`, …); decode offload needs one. Set by kvpilot to its cache runtime
    /// (`dynamic`) when spec.cache is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.disaggregation.hicacheStorageBackend must not be empty"))]
    pub hicache_storage_backend: Option<String>,
    /// LMCache as the radix cache's offload tier (`--enable-lmcache`). SGLang 0.5.21 and later
    /// run it only without PD disaggregation (rule L7), so a PD server refuses it there.
    #[serde(default)]
    pub lmcache: bool,
    /// The unified cache's direct L3 linker (`--enable-unified-cache-external-linker`, SGLang
    /// 0.5.20 and later); it replaces HiCache's storage backend.
    #[serde(default)]
    pub unified_cache_external_linker: bool,
    /// Hierarchical sparse attention (`--enable-hisparse`).
    #[serde(default)]
    pub hisparse: bool,
    /// Device token usage at which decode receives incoming KV into the retraction host pool
    /// (`--disaggregation-decode-host-receive-threshold`, SGLang 0.5.21 and later, in [0, 1]).
    /// Unset: the release's default, host receive off (0.5.21: on above 0; later: on below 1).
    /// No transfer backend SGLang ships supports it yet (rule N7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_host_receive_threshold: Option<f64>,
    /// HiCache host memory as a cache tier or a staging buffer (`--hicache-host-memory-mode`,
    /// SGLang 0.5.19 and later); unset: the release's default, `cache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_host_memory_mode: Option<HicacheHostMemoryMode>,
}

impl Default for DisaggregationSpec {
    /// The same values serde fills in for an empty `disaggregation: {}` (this is also the
    /// schema default the API server applies when the block is missing).
    fn default() -> Self {
        Self {
            retraction_backup: None,
            on_invalid: OnInvalid::default(),
            transfer_backend: TransferBackend::default(),
            prefill: None,
            bootstrap_port: default_bootstrap_port(),
            decode_radix_cache: false,
            decode_offload_kv_cache: false,
            hierarchical_cache: false,
            priority_scheduling: false,
            disable_priority_preemption: false,
            decode_context_parallel: one(),
            speculative_algorithm: None,
            speculative_draft_model: None,
            mamba_radix_cache_strategy: None,
            host_pool_ratio: None,
            enable_unified_memory: false,
            hicache_storage_backend: None,
            lmcache: false,
            unified_cache_external_linker: false,
            hisparse: false,
            decode_host_receive_threshold: None,
            hicache_host_memory_mode: None,
        }
    }
}

/// The prefill fleet's parallelism, as far as the transfer rules need it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrefillSpec {
    /// Prefill tensor-parallel size.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.tensorParallel must be at least 1"))]
    pub tensor_parallel: i32,
    /// Prefill data-parallel size.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.dataParallel must be at least 1"))]
    pub data_parallel: i32,
    /// Whether prefill uses DP attention (attention TP = TP / DP).
    #[serde(default)]
    pub enable_dp_attention: bool,
    /// Prefill pipeline-parallel size (SWA head slicing refuses more than 1, T1pp).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.pipelineParallel must be at least 1"))]
    pub pipeline_parallel: i32,
    /// Prefill tokens per KV page (`--page-size`); must equal spec.decode.pageSize. Unset: not
    /// checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.pageSize must be at least 1"))]
    pub page_size: Option<i32>,
    /// Prefill KV cache dtype (`--kv-cache-dtype`, `auto` by default); must equal
    /// spec.decode.kvCacheDtype. Unset: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("spec.disaggregation.prefill.kvCacheDtype must not be empty"))]
    pub kv_cache_dtype: Option<String>,
    /// Prefill attention context-parallel size as the prefill servers resolve it (`--attn-cp-size`;
    /// DeepSeek's prefill context-parallel modes set it to TP ÷ attention DP). It divides the
    /// prefill attention TP the transfer rules compare; decode context parallelism needs 1 (R19e).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.disaggregation.prefill.attentionContextParallel must be at least 1"))]
    pub attention_context_parallel: i32,
    /// The prefill servers shard their KV cache across attention TP (`--enable-kv-cache-sharding`,
    /// SGLang 0.5.22 and later): decode context parallelism refuses such a prefill (R19f), and an
    /// MLA model's decode attention TP must then equal the prefill's (P5).
    #[serde(default)]
    pub kv_cache_sharding: bool,
}

impl Default for PrefillSpec {
    fn default() -> Self {
        Self {
            tensor_parallel: 1,
            data_parallel: 1,
            enable_dp_attention: false,
            pipeline_parallel: 1,
            page_size: None,
            kv_cache_dtype: None,
            attention_context_parallel: 1,
            kv_cache_sharding: false,
        }
    }
}

/// A fleet of SGLang servers: the decode fleet (`spec.decode`) or the prefill fleet
/// (`spec.prefill`). Validation messages name the field; the API server prefixes its path.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.nodesPerReplica) || (self.tensorParallel * self.pipelineParallel) % self.nodesPerReplica == 0"
).message("nodesPerReplica must divide tensorParallel × pipelineParallel: each pod of a replica holds an equal share of its GPUs"))]
pub struct FleetSpec {
    /// Number of replicas: SGLang servers of this fleet (`kubectl scale` sets the decode fleet's).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas must not be negative"))]
    pub replicas: i32,
    /// Tensor-parallel size.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("tensorParallel must be at least 1"))]
    pub tensor_parallel: i32,
    /// Data-parallel size.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("dataParallel must be at least 1"))]
    pub data_parallel: i32,
    /// Pipeline-parallel size.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("pipelineParallel must be at least 1"))]
    pub pipeline_parallel: i32,
    /// Whether the servers use DP attention (attention TP = TP / DP).
    #[serde(default)]
    pub enable_dp_attention: bool,
    /// Tokens per KV page (`--page-size`). Unset: 1 (SGLang's default) on the decode fleet; the
    /// prefill fleet takes the decode fleet's, since both sides must page alike (rule P1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("pageSize must be at least 1"))]
    pub page_size: Option<i32>,
    /// KV cache dtype (SGLang's `--kv-cache-dtype`: `auto`, `fp8_e4m3`, `mxfp8`, …);
    /// defaults to `auto`, the model's dtype.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("kvCacheDtype must not be empty"))]
    pub kv_cache_dtype: Option<String>,
    /// SWA-layer KV tokens per full-layer KV token of a hybrid-SWA pool (SGLang's
    /// `--swa-full-tokens-ratio`, in (0, 1]); unset: SGLang's default (0.8, or the model's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swa_full_tokens_ratio: Option<f64>,
    /// GPUs per pod; defaults to tensorParallel × pipelineParallel (× dataParallel for
    /// data-parallel replicas without DP attention) / nodesPerReplica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("gpusPerPod must be at least 1"))]
    pub gpus_per_pod: Option<i32>,
    /// Pods per replica (default 1). Above 1, a replica is a group of pods
    /// `NAME-ROLE-REPLICA-RANK` that run one SGLang server together (`--nnodes`, `--node-rank`,
    /// `--dist-init-addr` of rank 0), created, rolled, counted and restarted as one unit; each
    /// pod gets tensorParallel × pipelineParallel / nodesPerReplica GPUs.
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message("nodesPerReplica must be at least 1"))]
    pub nodes_per_replica: i32,
    /// Port of SGLang's HTTP server (API, `/health`, metrics).
    #[serde(default = "default_port")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("port must be between 1 and 65535"))]
    pub port: i32,
    /// Size of the memory-backed /dev/shm (NCCL and the host KV pool live there); default 16Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<Quantity>,
    /// How long a server may take to load the model before its startup probe gives up
    /// (default 1800 s, probed every 30 s).
    #[serde(default = "default_startup_seconds")]
    #[x_kube(validation = Rule::new("self >= 30").message("startupTimeoutSeconds must be at least 30"))]
    pub startup_timeout_seconds: i32,
    /// How long a deleted pod has to finish its requests (default 60 s).
    #[serde(default = "default_grace_seconds")]
    #[x_kube(validation = Rule::new("self >= 0").message("terminationGracePeriodSeconds must not be negative"))]
    pub termination_grace_period_seconds: i64,
    /// Extended resources each pod requests besides its GPUs, for example
    /// `rdma/rdma_shared_device_a: 1` (requests equal limits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_resources: BTreeMap<String, Quantity>,
    /// Linux capabilities added to the SGLang container, for example `IPC_LOCK` for RDMA.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Run the pods in the node's network namespace (with `dnsPolicy: ClusterFirstWithHostNet`),
    /// as RDMA fleets without an RDMA device plugin do.
    #[serde(default)]
    pub host_network: bool,
    /// InfiniBand devices for the KV transfer (`--disaggregation-ib-device`, e.g. `mlx5_0,mlx5_1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("ibDevice must not be empty"))]
    pub ib_device: Option<String>,
    /// SGLang image of the servers. Unset: the operator's --sglang-image for the
    /// resolved release (`lmsysorg/sglang:v{version}-cu129` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy of the SGLang container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Resources of the SGLang container; the GPU limit is set from gpusPerPod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Extra environment variables of the SGLang container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Extra SGLang server arguments, appended after the ones kvpilot renders. A flag that sets
    /// something kvpilot decides (retraction backup, transfer backend, parallel sizes, page
    /// size, caches, ports, …) is refused, naming the spec field to use instead; other flags
    /// pass through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Extra labels of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Priority class of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// How pods of an old revision are replaced.
    #[serde(default)]
    pub rollout: RolloutSpec,
}

impl Default for FleetSpec {
    fn default() -> Self {
        Self {
            replicas: 1,
            tensor_parallel: 1,
            data_parallel: 1,
            pipeline_parallel: 1,
            enable_dp_attention: false,
            page_size: None,
            kv_cache_dtype: None,
            swa_full_tokens_ratio: None,
            gpus_per_pod: None,
            nodes_per_replica: 1,
            port: default_port(),
            shm_size: None,
            startup_timeout_seconds: default_startup_seconds(),
            termination_grace_period_seconds: default_grace_seconds(),
            extra_resources: BTreeMap::new(),
            capabilities: Vec::new(),
            host_network: false,
            ib_device: None,
            image: None,
            image_pull_policy: None,
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            env: Vec::new(),
            extra_args: Vec::new(),
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            service_account_name: None,
            priority_class_name: None,
            rollout: RolloutSpec::default(),
        }
    }
}

impl FleetSpec {
    /// Tokens per KV page of a server of this fleet: `pageSize`, or SGLang's default of 1. (A
    /// prefill fleet without one takes the decode fleet's; see `sglang::server::effective_spec`.)
    pub fn effective_page_size(&self) -> i32 {
        self.page_size.unwrap_or(1)
    }

    /// GPUs each pod requests: `gpusPerPod`, or one server's GPUs spread over nodesPerReplica
    /// pods.
    pub fn effective_gpus_per_pod(&self) -> i32 {
        self.gpus_per_pod.unwrap_or(self.gpus_per_server() / self.nodes_per_replica.max(1))
    }

    /// GPUs one SGLang server of this fleet runs on: tensorParallel × pipelineParallel, times
    /// dataParallel for data-parallel replicas (without DP attention SGLang starts each replica
    /// on GPUs of its own; DP attention splits the TP ranks instead).
    pub fn gpus_per_server(&self) -> i32 {
        let replicas = if self.enable_dp_attention { 1 } else { self.data_parallel.max(1) };
        self.tensor_parallel.saturating_mul(self.pipeline_parallel).saturating_mul(replicas)
    }

    /// The value of an environment variable set literally in `env`, if any.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|e| e.name == name).and_then(|e| e.value.as_deref())
    }

    /// Whether `env` turns the boolean `SGLANG_*` variable `name` on, as SGLang's `EnvBool`
    /// reads it: `true`, `1`, `yes` or `y` in any case, nothing trimmed; any other value is
    /// invalid and SGLang falls back to the default, off for every variable kvpilot reads.
    pub fn env_on(&self, name: &str) -> bool {
        self.env_value(name).is_some_and(|v| matches!(v.to_lowercase().as_str(), "true" | "1" | "yes" | "y"))
    }
}

/// The SGLang router of a PD service: a Deployment that finds the prefill and decode servers by
/// their labels (Kubernetes service discovery in its own namespace) and a Service in front of it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterSpec {
    /// Run the router (default true when spec.prefill is set).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Router pods (they share nothing; each discovers every server).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.router.replicas must not be negative"))]
    pub replicas: i32,
    /// Which router package the image runs: `sglang-router` (`python3 -m
    /// sglang_router.launch_router`, default) or its successor `smg` (`python3 -m
    /// smg.launch_router`); both take the same flags.
    #[serde(default)]
    pub launcher: RouterLauncher,
    /// Router image. Unset: the operator's --router-image, else the servers' SGLang image
    /// (SGLang's images ship the router).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy of the router container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// How the router picks a server (`--policy`).
    #[serde(default)]
    pub policy: RouterPolicy,
    /// Port the router listens on.
    #[serde(default = "default_router_port")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.router.port must be between 1 and 65535"))]
    pub port: i32,
    /// The router's Service.
    #[serde(default)]
    pub service: RouterServiceSpec,
    /// Resources of the router container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the router pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the router pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Extra router arguments, appended after kvpilot's. A flag kvpilot sets (PD mode, service
    /// discovery, selectors, host, port, policy) is refused, naming the field to use instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

impl Default for RouterSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            replicas: 1,
            launcher: RouterLauncher::default(),
            image: None,
            image_pull_policy: None,
            policy: RouterPolicy::default(),
            port: default_router_port(),
            service: RouterServiceSpec::default(),
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            extra_args: Vec::new(),
        }
    }
}

/// The Python package whose launcher the router image runs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RouterLauncher {
    /// `sglang-router` (`python3 -m sglang_router.launch_router`).
    #[default]
    SglangRouter,
    /// `smg`, the router's successor (`python3 -m smg.launch_router`).
    Smg,
}

impl RouterLauncher {
    /// The module `python3 -m` runs.
    pub fn module(self) -> &'static str {
        match self {
            Self::SglangRouter => "sglang_router.launch_router",
            Self::Smg => "smg.launch_router",
        }
    }
}

/// The router's load-balancing policy (`--policy`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RouterPolicy {
    /// Prefer the server holding the longest cached prefix, balanced by load.
    #[default]
    CacheAware,
    /// Round robin.
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// The less loaded of two random servers.
    PowerOfTwo,
}

impl RouterPolicy {
    /// The value as the router's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CacheAware => "cache_aware",
            Self::RoundRobin => "round_robin",
            Self::Random => "random",
            Self::PowerOfTwo => "power_of_two",
        }
    }
}

/// The router's Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterServiceSpec {
    /// Service port (the OpenAI-compatible endpoint).
    #[serde(default = "default_router_port")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.router.service.port must be between 1 and 65535"))]
    pub port: i32,
    /// Service type.
    #[serde(default, rename = "type")]
    pub type_: RouterServiceType,
}

impl Default for RouterServiceSpec {
    fn default() -> Self {
        Self { port: default_router_port(), type_: RouterServiceType::default() }
    }
}

/// Kubernetes Service types the router's Service may have.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RouterServiceType {
    /// Reachable inside the cluster.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through the cloud's load balancer.
    LoadBalancer,
}

impl RouterServiceType {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

impl InferenceDeploymentSpec {
    /// Whether the config.json of the model or of its speculative draft is read from the
    /// ConfigMap `name` (of the resource's namespace).
    pub fn reads_config_map(&self, name: &str) -> bool {
        let draft = self.disaggregation.speculative_draft_model.as_ref().map(|draft| &draft.config);
        [Some(&self.model.config), draft]
            .into_iter()
            .flatten()
            .any(|config| config.config_map_ref.as_ref().is_some_and(|reference| reference.name == name))
    }

    /// The router kvpilot runs: spec.router unless disabled, or the default one when
    /// spec.prefill is set and spec.router is not.
    pub fn effective_router(&self) -> Option<RouterSpec> {
        match (&self.router, &self.prefill) {
            (Some(router), _) if !router.enabled => None,
            (Some(router), Some(_)) => Some(router.as_ref().clone()),
            (None, Some(_)) => Some(RouterSpec::default()),
            (_, None) => None,
        }
    }
}

/// Container image pull policy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePullPolicy {
    /// Always pull.
    Always,
    /// Pull when the image is not on the node.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// Rollout of a new pod revision.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Pods that may be unavailable during a rollout (count or percentage of replicas).
    #[serde(default = "default_max_unavailable")]
    pub max_unavailable: IntOrString,
    /// Pods that may be created above replicas during a rollout (count or percentage).
    #[serde(default = "default_max_surge")]
    pub max_surge: IntOrString,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self { max_unavailable: default_max_unavailable(), max_surge: default_max_surge() }
    }
}

fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}

fn default_max_surge() -> IntOrString {
    IntOrString::Int(0)
}

fn one() -> i32 {
    1
}

fn default_port() -> i32 {
    30000
}

fn default_bootstrap_port() -> i32 {
    8998
}

fn default_router_port() -> i32 {
    8000
}

fn yes() -> bool {
    true
}

fn default_startup_seconds() -> i32 {
    1800
}

fn default_grace_seconds() -> i64 {
    60
}
