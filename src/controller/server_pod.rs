//! The prefill and decode pods as the controller's watch cache keeps them: the metadata the
//! planner and the owner trigger read, and a summary of the status, taken as each pod is
//! decoded. A `Pod` is 2 KB inline before any of its fields are set (its spec and status are
//! inline options), so a cache of thousands of trimmed `Pod`s still cost megabytes; the spec
//! is never decoded at all.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::decide::GROUP_READY;
use super::desired::{self, LABEL_KV_COMPAT, LABEL_ORDINAL, LABEL_RANK, LABEL_REVISION};

/// A server pod: its metadata (trimmed by [`trim`]) and what the planner reads of its status.
#[derive(Clone, Debug, Deserialize)]
pub struct ServerPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, rename = "status", deserialize_with = "summarize")]
    pub state: ServerPodState,
}

/// What the planner reads of a pod's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerPodState {
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Its `ContainersReady` condition is True.
    pub containers_ready: bool,
    /// Its `kvpilot.dev/group-ready` condition, if it has one.
    pub group_ready: Option<bool>,
    /// Its phase is Failed.
    pub failed: bool,
    /// Why it ended, or its SGLang container last did (see [`termination`]).
    pub termination: Option<String>,
}

impl k8s_openapi::Resource for ServerPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for ServerPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn summarize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ServerPodState, D::Error> {
    let status = Option::<PodStatus>::deserialize(deserializer)?;
    Ok(status.map(|status| ServerPodState::of(&status)).unwrap_or_default())
}

impl ServerPodState {
    /// The summary of `status`.
    pub fn of(status: &PodStatus) -> Self {
        let condition =
            |type_: &str| status.conditions.iter().flatten().find(|c| c.type_ == type_).map(|c| c.status == "True");
        Self {
            ready: condition("Ready") == Some(true),
            containers_ready: condition("ContainersReady") == Some(true),
            group_ready: condition(GROUP_READY),
            failed: status.phase.as_deref() == Some("Failed"),
            termination: termination(status),
        }
    }
}

/// Drops the metadata the controller never reads before the pod reaches the cache: managed
/// fields, annotations and the labels other than those naming its resource, fleet, replica,
/// rank, revision and KV compatibility key.
pub fn trim(pod: &mut ServerPod) {
    let read =
        [desired::LABEL_INSTANCE, desired::LABEL_NAME, LABEL_ORDINAL, LABEL_RANK, LABEL_REVISION, LABEL_KV_COMPAT];
    let meta = &mut pod.metadata;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|key, _| read.contains(&key.as_str()));
    }
    meta.managed_fields = None;
    meta.annotations = None;
    meta.generate_name = None;
    meta.creation_timestamp = None;
}

/// Why a pod ended, or its SGLang container last did: the pod's own reason (an eviction), else
/// the container's termination reason and exit code.
fn termination(status: &PodStatus) -> Option<String> {
    if status.phase.as_deref() == Some("Failed")
        && let Some(reason) = &status.reason
    {
        let message = status.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        return Some(format!("{reason}{message}"));
    }
    let containers = status.container_statuses.iter().flatten();
    containers
        .filter_map(|c| {
            let state = c.state.as_ref().and_then(|s| s.terminated.as_ref());
            state.or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref())).map(|t| (c, t))
        })
        .map(|(container, ended)| {
            let reason = ended.reason.as_deref().unwrap_or("Terminated");
            format!("container {} {reason} (exit code {})", container.name, ended.exit_code)
        })
        .next()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decoded(pod: serde_json::Value) -> ServerPod {
        let mut pod: ServerPod = serde_json::from_value(pod).unwrap();
        trim(&mut pod);
        pod
    }

    #[test]
    fn cached_pods_keep_what_the_planner_and_the_owner_trigger_read() {
        let pod = decoded(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "llama-decode-0", "namespace": "serving", "uid": "u1",
                "labels": {LABEL_ORDINAL: "0", LABEL_REVISION: "abc", "team": "a"},
                "annotations": {"big": "x"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment", "name": "llama", "uid": "o1", "controller": true}],
                "managedFields": [{"manager": "kvpilot", "operation": "Apply"}]
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"}, {"type": "ContainersReady", "status": "True"},
                {"type": GROUP_READY, "status": "False"}, {"type": "Ready", "status": "False"}
            ]}
        }));
        assert!(pod.metadata.annotations.is_none() && pod.metadata.managed_fields.is_none());
        let expected = ServerPodState { containers_ready: true, group_ready: Some(false), ..ServerPodState::default() };
        assert_eq!(pod.state, expected, "not ready, as it said; its group not ready");
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(pod.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(pod.metadata.labels.as_ref().map(|l| l[LABEL_REVISION].as_str()), Some("abc"));
        assert!(pod.metadata.labels.as_ref().is_some_and(|l| !l.contains_key("team")), "labels nobody reads go");

        let pending = decoded(json!({"metadata": {"name": "p"}}));
        assert_eq!(pending.state, ServerPodState::default());
        let null_status = decoded(json!({"metadata": {"name": "p"}, "status": null}));
        assert_eq!(null_status.state, ServerPodState::default());
    }

    #[test]
    fn a_pod_that_ended_says_why() {
        let evicted = decoded(json!({
            "metadata": {"name": "p", "labels": {LABEL_RANK: "1"}},
            "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
        }));
        assert!(evicted.state.failed && !evicted.state.containers_ready);
        assert_eq!(evicted.state.termination.as_deref(), Some("Evicted: low on memory"));
        assert_eq!(evicted.metadata.labels.as_ref().map(|l| l[LABEL_RANK].as_str()), Some("1"));

        let restarted = decoded(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "sglang", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }));
        assert!(!restarted.state.failed);
        assert_eq!(restarted.state.termination.as_deref(), Some("container sglang OOMKilled (exit code 137)"));
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_a_pod() {
        assert!(std::mem::size_of::<ServerPod>() * 4 < std::mem::size_of::<Pod>());
    }
}
