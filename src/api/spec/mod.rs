//! The spec half of `InferenceDeployment`, one file per block of the spec. Field names are a
//! contract: the CLI, the webhook, the controller, the examples and users' manifests all rely on
//! them. A block whose fields all have defaults states them once, in its `Default`: with
//! `#[serde(default = "Type::default")]` on the struct, serde fills every missing field from it,
//! and the schema's defaults are its values. (The path, not a bare `default`: `KubeSchema` derives
//! the schema from a copy of the struct, which has no `Default`.)

mod cache;
mod config_source;
mod disaggregation;
mod fleet;
mod model;
mod rollout;
mod router;
mod scheduling;
mod security;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use cache::*;
pub use config_source::*;
pub use disaggregation::*;
pub use fleet::*;
pub use model::*;
pub use rollout::*;
pub use router::*;
pub use scheduling::*;
pub use security::*;

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
    printcolumn(name = "Rollout", type_ = "string", json_path = ".status.rollout.phase", priority = "1"),
    printcolumn(name = "Security", type_ = "string", json_path = ".status.podSecurityLevel", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.prefill) || !has(self.disaggregation) || !has(self.disaggregation.prefill)").message(
    "spec.disaggregation.prefill describes prefill servers kvpilot does not run; with spec.prefill set, move its fields there and remove spec.disaggregation.prefill"
))]
#[x_kube(validation = Rule::new("!has(self.router) || (has(self.router.enabled) && !self.router.enabled) || has(self.prefill)").message(
    "spec.router routes to the prefill fleet kvpilot runs: set spec.prefill, or spec.router.enabled: false"
))]
#[x_kube(validation = Rule::new("!has(self.decode) || (!has(self.decode.ratio) && !has(self.decode.minReplicas) && !has(self.decode.maxReplicas))").message(
    "spec.decode.ratio, minReplicas and maxReplicas are spec.prefill's: the prefill fleet follows the decode fleet's replicas, which spec.decode.replicas (or its scale subresource) sets"
))]
#[x_kube(validation = Rule::new("!has(self.placement) || !has(self.placement.colocateTopologyKey) || has(self.prefill)").message(
    "spec.placement.colocateTopologyKey keeps the prefill fleet kvpilot runs beside the decode fleet: set spec.prefill, or remove it"
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
    /// How a change of what prefill and decode exchange (the KV compatibility key) rolls out
    /// across both fleets and the router; a change that keeps the key rolls each fleet in place
    /// by its own `rollout`.
    #[serde(default)]
    pub rollout: ServiceRolloutSpec,
    /// The SGLang release the fleets run; its rules and model classification apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang: Option<SglangSpec>,
    /// The kvpilot cache runtime as the decode servers' HiCache L3 KV store: a sidecar beside
    /// every decode server, over shared memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSpec>,
    /// Which scheduler places the prefill and decode pods: a gang scheduler the cluster runs
    /// (Volcano, scheduler-plugins' coscheduling, Kueue) that starts each replica's pods all at
    /// once, the scheduler's name and the pods' priority class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<SchedulingSpec>,
    /// Where the prefill and decode pods land: a multi-node replica's ranks in one topology
    /// domain, prefill beside decode, replicas spread across nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
    /// The Pod Security Standards level the server pods are built to meet (the namespace's
    /// `pod-security.kubernetes.io/enforce`); unset, the strictest the settings allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<SecuritySpec>,
}

impl InferenceDeploymentSpec {
    /// The prefill replicas to run: with `spec.prefill.ratio`, ceil(decode replicas × ratio)
    /// within `minReplicas` and `maxReplicas`; else `spec.prefill.replicas`. None without a
    /// prefill fleet.
    pub fn prefill_replicas(&self) -> Option<i32> {
        let prefill = self.prefill.as_deref()?;
        let Some(ratio) = prefill.ratio else { return Some(prefill.replicas) };
        // Rounded to 1e-9 first, so that 3 × 0.1 is 0.3 and not a hair above it.
        let share = ((f64::from(self.decode.replicas.max(0)) * ratio * 1e9).round() / 1e9).ceil();
        let share = if share.is_finite() { share.min(f64::from(i32::MAX)) as i32 } else { i32::MAX };
        let floor = prefill.min_replicas.unwrap_or(0);
        Some(prefill.max_replicas.map_or(share, |ceiling| share.min(ceiling)).max(floor))
    }

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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn spec(decode: i32, prefill: serde_json::Value) -> InferenceDeploymentSpec {
        serde_json::from_value(json!({
            "model": {"name": "m", "config": {"hub": {}}},
            "decode": {"replicas": decode},
            "prefill": prefill
        }))
        .unwrap()
    }

    #[test]
    fn prefill_follows_decode_by_its_ratio_within_its_bounds() {
        assert_eq!(spec(6, json!({"replicas": 2})).prefill_replicas(), Some(2), "no ratio: its own replicas");
        assert_eq!(spec(6, json!({"ratio": 0.5})).prefill_replicas(), Some(3));
        assert_eq!(spec(5, json!({"ratio": 0.5})).prefill_replicas(), Some(3), "rounded up");
        assert_eq!(
            spec(3, json!({"ratio": 0.1})).prefill_replicas(),
            Some(1),
            "3 × 0.1 is 0.3, not 0.30000000000000004"
        );
        assert_eq!(spec(10, json!({"ratio": 0.1})).prefill_replicas(), Some(1), "10 × 0.1 is exactly 1");
        assert_eq!(spec(6, json!({"ratio": 0.5, "maxReplicas": 2})).prefill_replicas(), Some(2));
        assert_eq!(spec(0, json!({"ratio": 0.5, "minReplicas": 1})).prefill_replicas(), Some(1));
        let mut alone = spec(1, json!({}));
        alone.prefill = None;
        assert_eq!(alone.prefill_replicas(), None);
    }

    proptest! {
        #[test]
        fn prefill_replicas_stay_within_bounds_and_grow_with_decode(
            decode in 0i32..10_000, ratio in 0.01f64..8.0, min in 0i32..20, extra in 0i32..50
        ) {
            let max = min + extra;
            let at = |d: i32| spec(d, json!({"ratio": ratio, "minReplicas": min, "maxReplicas": max})).prefill_replicas().unwrap();
            let replicas = at(decode);
            prop_assert!((min..=max).contains(&replicas));
            prop_assert!(at(decode + 1) >= replicas, "never fewer prefill replicas for more decode");
        }
    }
}
