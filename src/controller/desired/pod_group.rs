//! What a gang scheduler (`spec.scheduling.gang`) needs of each replica, so that the scheduler
//! the cluster runs starts a replica's pods all at once or not at all:
//!
//! - Volcano: a `scheduling.volcano.sh/v1beta1` PodGroup per replica (`minMember` = its pods,
//!   `minResources` = the GPUs and other extended resources they request together, the queue and
//!   priority class), and on each pod `schedulerName: volcano` and Volcano's group annotation;
//! - scheduler-plugins' coscheduling: a `scheduling.x-k8s.io/v1alpha1` PodGroup per replica and
//!   the pod label the plugin reads;
//! - Kueue: its plain-pod group labels and annotations, which make a replica one workload.
//!
//! A PodGroup is named after its replica (`NAME-ROLE-REPLICA`) and owned by the resource; the
//! controller deletes it when its replica goes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::api::{FleetSpec, GangScheduler, InferenceDeploymentSpec, parse_bytes};

/// The scheduler name Volcano's scheduler runs under.
pub const VOLCANO_SCHEDULER: &str = "volcano";
/// Pod annotation: the Volcano PodGroup the pod belongs to.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Pod label: the scheduler-plugins PodGroup the pod belongs to (what the coscheduling plugin
/// reads).
pub const COSCHEDULING_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Pod label: the Kueue plain-pod group the pod belongs to.
pub const KUEUE_GROUP_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
/// Pod annotation: how many pods Kueue waits for before it admits the group.
pub const KUEUE_GROUP_TOTAL_COUNT_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";
/// Pod annotation: a serving group, which Kueue never counts as finished while its pods run
/// (what Kueue's own LeaderWorkerSet integration sets on its groups).
pub const KUEUE_GROUP_SERVING_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-serving";
/// Pod label: the Kueue LocalQueue.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// Resources every node offers that gang admission does not count: a group fits or not by its
/// GPUs and other extended resources.
const NODE_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// Volcano's PodGroup (`volcano.sh/apis` `scheduling/v1beta1`), the fields kvpilot sets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    root = "VolcanoPodGroup",
    derive = "PartialEq",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    pub min_member: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub min_resources: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// scheduler-plugins' PodGroup (`sigs.k8s.io/scheduler-plugins` `apis/scheduling/v1alpha1`),
/// the fields kvpilot sets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    root = "CoschedulingPodGroup",
    derive = "PartialEq",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupSpec {
    pub min_member: i32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub min_resources: BTreeMap<String, Quantity>,
}

/// The PodGroup of one replica.
#[derive(Debug, Clone, PartialEq)]
pub enum PodGroup {
    Volcano(VolcanoPodGroup),
    Coscheduling(CoschedulingPodGroup),
}

impl PodGroup {
    /// Its name: the replica's.
    pub fn name(&self) -> String {
        let meta = match self {
            Self::Volcano(group) => &group.metadata,
            Self::Coscheduling(group) => &group.metadata,
        };
        meta.name.clone().unwrap_or_default()
    }

    /// The object as it is applied, with its apiVersion and kind.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Volcano(group) => serde_json::to_value(group),
            Self::Coscheduling(group) => serde_json::to_value(group),
        }
        .unwrap_or_default()
    }
}

/// How every replica of a fleet joins its gang scheduler: the same for each replica of a
/// revision, so the fleet's revision covers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Gang {
    scheduler: GangScheduler,
    queue: Option<String>,
    priority_class_name: Option<String>,
    /// Pods per replica.
    members: i32,
    /// The GPUs and other extended resources a replica's pods request together.
    resources: BTreeMap<String, Quantity>,
}

impl Gang {
    /// The gang of a fleet whose replicas are `members` pods like `template`.
    pub(super) fn new(spec: &InferenceDeploymentSpec, fleet: &FleetSpec, template: &Pod, members: i32) -> Self {
        let scheduling = spec.scheduling.clone().unwrap_or_default();
        Self {
            scheduler: scheduling.gang,
            queue: scheduling.queue,
            priority_class_name: priority_class_name(spec, fleet),
            members,
            resources: group_resources(template, members),
        }
    }

    /// The gang scheduler.
    pub(super) fn scheduler(&self) -> GangScheduler {
        self.scheduler
    }

    /// Adds to a pod of the replica `group` the labels and annotations its scheduler reads.
    pub(super) fn join(&self, pod: &mut Pod, group: &str) {
        let labels = pod.metadata.labels.get_or_insert_default();
        let mut annotations = BTreeMap::new();
        match self.scheduler {
            GangScheduler::None => {}
            GangScheduler::Volcano => {
                annotations.insert(VOLCANO_GROUP_ANNOTATION, group.to_string());
            }
            GangScheduler::Coscheduling => {
                labels.insert(COSCHEDULING_GROUP_LABEL.into(), group.into());
            }
            GangScheduler::Kueue => {
                labels.insert(KUEUE_GROUP_LABEL.into(), group.into());
                if let Some(queue) = &self.queue {
                    labels.insert(KUEUE_QUEUE_LABEL.into(), queue.clone());
                }
                annotations.insert(KUEUE_GROUP_TOTAL_COUNT_ANNOTATION, self.members.to_string());
                annotations.insert(KUEUE_GROUP_SERVING_ANNOTATION, "true".into());
            }
        }
        if !annotations.is_empty() {
            let pod_annotations = pod.metadata.annotations.get_or_insert_default();
            pod_annotations.extend(annotations.into_iter().map(|(key, value)| (key.to_string(), value)));
        }
    }

    /// The PodGroup of the replica `meta` names, for the schedulers that take one.
    pub(super) fn pod_group(&self, metadata: ObjectMeta) -> Option<PodGroup> {
        match self.scheduler {
            GangScheduler::Volcano => Some(PodGroup::Volcano(VolcanoPodGroup {
                metadata,
                spec: VolcanoPodGroupSpec {
                    min_member: self.members,
                    min_resources: self.resources.clone(),
                    queue: self.queue.clone(),
                    priority_class_name: self.priority_class_name.clone(),
                },
            })),
            GangScheduler::Coscheduling => Some(PodGroup::Coscheduling(CoschedulingPodGroup {
                metadata,
                spec: CoschedulingPodGroupSpec { min_member: self.members, min_resources: self.resources.clone() },
            })),
            GangScheduler::None | GangScheduler::Kueue => None,
        }
    }
}

/// The scheduler of the server pods: `spec.scheduling.schedulerName`, else Volcano's for gang
/// volcano, else the cluster's default.
pub(super) fn scheduler_name(spec: &InferenceDeploymentSpec) -> Option<String> {
    let scheduling = spec.scheduling.as_ref()?;
    scheduling
        .scheduler_name
        .clone()
        .or_else(|| (scheduling.gang == GangScheduler::Volcano).then(|| VOLCANO_SCHEDULER.into()))
}

/// The priority class of a fleet's pods: the fleet's own, else `spec.scheduling`'s.
pub(super) fn priority_class_name(spec: &InferenceDeploymentSpec, fleet: &FleetSpec) -> Option<String> {
    fleet.priority_class_name.clone().or_else(|| spec.scheduling.as_ref()?.priority_class_name.clone())
}

/// What `members` pods like `template` request together of the resources that decide whether
/// a group fits: its GPUs and other extended resources (requests equal limits for those).
fn group_resources(template: &Pod, members: i32) -> BTreeMap<String, Quantity> {
    let containers = template.spec.iter().flat_map(|spec| &spec.containers);
    let mut per_pod: BTreeMap<String, u64> = BTreeMap::new();
    for limits in containers.filter_map(|c| c.resources.as_ref()?.limits.as_ref()) {
        for (resource, quantity) in limits {
            if NODE_RESOURCES.contains(&resource.as_str()) || resource.starts_with("hugepages-") {
                continue;
            }
            // The API server refuses a pod whose extended resource is no whole number.
            if let Ok(count) = parse_bytes(&quantity.0) {
                *per_pod.entry(resource.clone()).or_default() += count;
            }
        }
    }
    let members = u64::try_from(members.max(1)).unwrap_or(1);
    per_pod.into_iter().map(|(resource, count)| (resource, Quantity((count * members).to_string()))).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::desired::test_support::{render, resource};
    use crate::controller::desired::{LABEL_INSTANCE, LABEL_ORDINAL};

    fn with_gang(decode: serde_json::Value, scheduling: serde_json::Value) -> crate::api::InferenceDeployment {
        let mut resource = resource(decode);
        resource.spec.scheduling = Some(serde_json::from_value(scheduling).unwrap());
        resource
    }

    fn annotations(pod: &Pod) -> BTreeMap<String, String> {
        pod.metadata.annotations.clone().unwrap_or_default()
    }

    fn labels(pod: &Pod) -> BTreeMap<String, String> {
        pod.metadata.labels.clone().unwrap_or_default()
    }

    #[test]
    fn volcano_gets_a_pod_group_per_replica_with_its_pods_and_gpus_and_schedules_its_pods() {
        let resource = with_gang(
            json!({"replicas": 2, "tensorParallel": 16, "nodesPerReplica": 2,
                   "extraResources": {"rdma/rdma_shared_device_a": "1"}, "resources": {"limits": {"cpu": "8"}}}),
            json!({"gang": "volcano", "queue": "inference", "priorityClassName": "serving"}),
        );
        let desired = render(&resource);
        let Some(PodGroup::Volcano(group)) = desired.decode.pod_group(1) else { panic!("a Volcano PodGroup") };
        assert_eq!(group.metadata.name.as_deref(), Some("llama-decode-1"));
        assert_eq!(group.metadata.namespace.as_deref(), Some("serving"));
        assert_eq!(group.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1", "owned by the resource");
        let group_labels = group.metadata.labels.as_ref().unwrap();
        assert_eq!((group_labels[LABEL_INSTANCE].as_str(), group_labels[LABEL_ORDINAL].as_str()), ("llama", "1"));
        assert_eq!(group.spec.min_member, 2);
        assert_eq!(
            group.spec.min_resources,
            BTreeMap::from([
                ("nvidia.com/gpu".to_string(), Quantity("16".into())),
                ("rdma/rdma_shared_device_a".to_string(), Quantity("2".into())),
            ]),
            "two pods' GPUs and RDMA devices; CPU is no gang resource"
        );
        assert_eq!(
            (group.spec.queue.as_deref(), group.spec.priority_class_name.as_deref()),
            (Some("inference"), Some("serving"))
        );
        for pod in desired.decode.replica(1) {
            assert_eq!(annotations(&pod)[VOLCANO_GROUP_ANNOTATION], "llama-decode-1");
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.scheduler_name.as_deref(), Some(VOLCANO_SCHEDULER));
            assert_eq!(spec.priority_class_name.as_deref(), Some("serving"));
        }
        let json = serde_json::to_value(&group).unwrap();
        assert_eq!(
            (json["apiVersion"].as_str(), json["kind"].as_str()),
            (Some("scheduling.volcano.sh/v1beta1"), Some("PodGroup"))
        );
        assert_eq!(json["spec"]["minResources"]["nvidia.com/gpu"], "16");
    }

    #[test]
    fn coscheduling_labels_the_pods_with_their_pod_group_and_the_scheduler_name_passes_through() {
        let resource = with_gang(
            json!({"tensorParallel": 8, "nodesPerReplica": 2, "priorityClassName": "decode-first"}),
            json!({"gang": "coscheduling", "schedulerName": "scheduler-plugins-scheduler", "priorityClassName": "serving"}),
        );
        let desired = render(&resource);
        let Some(PodGroup::Coscheduling(group)) = desired.decode.pod_group(0) else {
            panic!("a coscheduling PodGroup")
        };
        assert_eq!((group.spec.min_member, group.spec.min_resources["nvidia.com/gpu"].0.as_str()), (2, "8"));
        let json = serde_json::to_value(&group).unwrap();
        assert_eq!(json["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
        for pod in desired.decode.replica(0) {
            assert_eq!(labels(&pod)[COSCHEDULING_GROUP_LABEL], "llama-decode-0");
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.scheduler_name.as_deref(), Some("scheduler-plugins-scheduler"));
            assert_eq!(spec.priority_class_name.as_deref(), Some("decode-first"), "the fleet's own class wins");
        }
    }

    #[test]
    fn kueue_makes_each_replica_a_serving_pod_group_in_its_queue_and_needs_no_pod_group() {
        let resource =
            with_gang(json!({"tensorParallel": 4, "nodesPerReplica": 2}), json!({"gang": "kueue", "queue": "team-a"}));
        let desired = render(&resource);
        assert!(desired.decode.pod_group(0).is_none());
        for pod in desired.decode.replica(2) {
            let (labels, annotations) = (labels(&pod), annotations(&pod));
            assert_eq!(
                (labels[KUEUE_GROUP_LABEL].as_str(), labels[KUEUE_QUEUE_LABEL].as_str()),
                ("llama-decode-2", "team-a")
            );
            assert_eq!(annotations[KUEUE_GROUP_TOTAL_COUNT_ANNOTATION], "2");
            assert_eq!(annotations[KUEUE_GROUP_SERVING_ANNOTATION], "true");
            assert_eq!(pod.spec.as_ref().unwrap().scheduler_name, None, "Kueue admits; the default scheduler places");
        }
    }

    #[test]
    fn without_a_gang_nothing_is_added_and_every_gang_changes_the_revision() {
        let plain = render(&resource(json!({"tensorParallel": 4, "nodesPerReplica": 2})));
        assert!(plain.decode.pod_group(0).is_none());
        let pod = plain.decode.pod(0, 1);
        assert_eq!(pod.spec.as_ref().unwrap().scheduler_name, None);
        assert!(!annotations(&pod).contains_key(VOLCANO_GROUP_ANNOTATION));
        assert!(labels(&pod).keys().all(|key| !key.starts_with("kueue.x-k8s.io/") && !key.starts_with("scheduling.")));
        let mut revisions = vec![plain.decode.revision.clone()];
        for scheduling in [
            json!({"gang": "volcano"}),
            json!({"gang": "volcano", "queue": "other"}),
            json!({"gang": "coscheduling"}),
            json!({"gang": "kueue"}),
        ] {
            let revision =
                render(&with_gang(json!({"tensorParallel": 4, "nodesPerReplica": 2}), scheduling)).decode.revision;
            assert!(!revisions.contains(&revision), "a new gang setting is a new revision of the pods");
            revisions.push(revision);
        }
    }
}
