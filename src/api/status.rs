//! The status half of `InferenceDeployment`, and the policy's output types it records.

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::layout_types::AttentionLayout;
use super::schema::condition_list;
use super::spec::{MambaRadixCacheStrategy, PodSecurityLevel, RetractionBackup, TransferBackend};

/// Condition type: the model's config.json was read and its layout resolved.
pub const CONDITION_MODEL_RESOLVED: &str = "ModelResolved";
/// Condition type: the disaggregation settings are valid for the layout (maybe after rewrites).
pub const CONDITION_SETTINGS_VALID: &str = "SettingsValid";
/// Condition type: every desired decode pod of the current revision is ready.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: a rollout or scale change is under way.
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Condition type: a fleet's replicas keep failing, and their replacements wait a backoff.
pub const CONDITION_DEGRADED: &str = "Degraded";

/// What kvpilot observed and decided. Written only by the controller.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InferenceDeploymentStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: ModelResolved, SettingsValid, Ready, Progressing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition_list")]
    pub conditions: Vec<Condition>,
    /// The resolved attention layout (as `kvpilot layout` prints it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<AttentionLayout>,
    /// The resolved attention layout of spec.disaggregation.speculativeDraftModel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_layout: Option<AttentionLayout>,
    /// The settings the decode pods actually run with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<EffectiveSettings>,
    /// Every setting kvpilot rewrote, and the rule that required it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrites: Vec<Rewrite>,
    /// Decode pod counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<FleetStatus>,
    /// Prefill pod counts, when kvpilot runs the prefill fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<FleetStatus>,
    /// The router's pods, when kvpilot runs the router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterStatus>,
    /// The URL of the service's OpenAI-compatible endpoint: the router's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The SGLang release the layout and settings were checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang: Option<SglangStatus>,
    /// The KV compatibility key of the servers the spec asks for: a hash of everything that
    /// decides whether a prefill and a decode server can exchange KV, the label
    /// `kvpilot.dev/kv-compat` of their pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_compat: Option<String>,
    /// Where the router is between KV compatibility keys, when kvpilot runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// The Pod Security level the server pods are built to meet: spec.security.level, else the
    /// strictest level the settings allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_level: Option<PodSecurityLevel>,
    /// What is worth knowing and is not a violation: the layout's and the policy's warnings, and
    /// what kvpilot changed of the resources the spec set (as `kvpilot check` prints them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A rollout from one KV compatibility key to another: the router selects the servers of one key
/// at a time.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The key the router selected when the rollout began (none for a service that never changed
    /// its key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_key: Option<String>,
    /// The key the spec asks for.
    pub to_key: String,
    /// Surging, Switching, Retiring, Complete or Aborted (`kubectl get infd -o wide` shows it).
    pub phase: RolloutPhase,
    /// When the rollout to toKey began; it is aborted if the router has not moved to toKey within
    /// twice the fleets' startupTimeoutSeconds of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Ready replicas of each fleet, per key that has live servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<KeyReadiness>,
}

/// Where a rollout between keys stands.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutPhase {
    /// Servers of the new key come up beside the old; the router selects the old key.
    Surging,
    /// The router's Deployment is moving its pods to the new key.
    Switching,
    /// The router selects the new key; servers of other keys retire.
    Retiring,
    /// Every server and the router are on one key.
    Complete,
    /// The new key's servers were not ready in time: nothing more changes and the router stays on
    /// the old key; reverting the spec returns to it.
    Aborted,
}

impl RolloutPhase {
    /// The phase as status spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Surging => "Surging",
            Self::Switching => "Switching",
            Self::Retiring => "Retiring",
            Self::Complete => "Complete",
            Self::Aborted => "Aborted",
        }
    }
}

/// The ready replicas of one key.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KeyReadiness {
    /// The KV compatibility key.
    pub key: String,
    /// Ready prefill replicas of this key.
    pub prefill: i32,
    /// Ready decode replicas of this key.
    pub decode: i32,
}

/// The SGLang release a resource was checked against and where it came from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SglangStatus {
    /// The release whose rules applied (`0.5.23`).
    pub version: String,
    /// The release asked for, when it is newer than any kvpilot knows and `version` stands in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// Where it came from: `Spec` (spec.sglang.version), `Image` (the tag of spec.decode.image),
    /// `Flag` (the operator's --sglang-version) or `Default` (the newest known release).
    pub source: String,
}

/// The router Deployment's pods.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    /// Router pods desired.
    pub replicas: i32,
    /// Router pods that are ready.
    pub ready_replicas: i32,
}

/// A fleet's pod counts (the decode fleet's are also read by the scale subresource).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    /// Replicas the fleet should run: its spec's, or for a prefill fleet with `ratio` its share
    /// of the decode fleet's, within its bounds.
    #[serde(default)]
    pub desired_replicas: i32,
    /// Replicas that exist, of any revision (a multi-node replica counts once).
    pub replicas: i32,
    /// Replicas of the current revision all of whose pods are ready.
    pub ready_replicas: i32,
    /// Replicas of the current revision.
    pub updated_replicas: i32,
    /// Label selector of the fleet's pods (the decode one is the scale subresource's).
    pub selector: String,
    /// The URLs of the ready replicas' SGLang servers (rank 0 of each), for a router.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    /// Replicas that broke recently (a rank failed, was evicted or deleted) and when their
    /// replacements may be made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryStatus>,
}

/// A fleet's recent failures: past a few within ten minutes, replacements wait a backoff.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryStatus {
    /// When replicas of the fleet broke within the last ten minutes, oldest first.
    pub failures: Vec<Time>,
    /// What broke the last one: the replica, its rank and that rank's last termination reason.
    pub last_reason: String,
    /// Replacements are not made before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Time>,
}

/// One setting kvpilot changed, and why.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rewrite {
    /// The rule that required the change (an id of docs/rules.md, for example `R2`).
    pub rule: String,
    /// Field path of the setting, for example `spec.disaggregation.retractionBackup`.
    pub field: String,
    /// The value asked for.
    pub from: String,
    /// The value used instead.
    pub to: String,
    /// SGLang's message for the rule.
    pub message: String,
}

/// The settings the decode pods run with, after automatic choices and rewrites.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveSettings {
    /// The retraction backup in effect (SGLang's automatic choice when unset).
    pub retraction_backup: RetractionBackup,
    /// Whether retractionBackup was set, chosen automatically, or rewritten.
    pub retraction_backup_source: SettingSource,
    /// KV transfer backend.
    pub transfer_backend: TransferBackend,
    /// Decode radix prefix cache.
    pub decode_radix_cache: bool,
    /// Decode KV offload to a storage backend.
    pub decode_offload_kv_cache: bool,
    /// Hierarchical cache.
    pub hierarchical_cache: bool,
    /// Priority scheduling.
    pub priority_scheduling: bool,
    /// Priority preemption turned off.
    pub disable_priority_preemption: bool,
    /// Decode context-parallel size.
    pub decode_context_parallel: i32,
    /// Speculative decoding algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<String>,
    /// Mamba radix cache strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_radix_cache_strategy: Option<MambaRadixCacheStrategy>,
    /// Host pool size as a fraction of the device pool; null when there is no host pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pool_ratio: Option<f64>,
    /// Unified device memory pool.
    pub enable_unified_memory: bool,
    /// Environment variables kvpilot adds to the decode pods because the release needs them
    /// for these settings (SGLANG_ENABLE_UNIFIED_RADIX_TREE on 0.5.19–0.5.20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_env: Vec<EnvVar>,
}

/// Where an effective setting came from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum SettingSource {
    /// Set in the spec and used as is.
    Spec,
    /// Unset in the spec; the runtime's automatic rule chose it.
    Auto,
    /// Set in the spec and rewritten by the policy.
    Rewritten,
}
