//! What a gang scheduler (`spec.scheduling.gang`) needs of each replica, so that the scheduler
//! the cluster runs starts a replica's pods all at once or not at all:
//!
//! - Volcano: a `scheduling.volcano.sh/v1beta1` PodGroup per replica (`minMember` = its pods,
//!   `minResources` = everything its pods request together, GPUs, CPU and memory of the servers
//!   and of kvpilot's sidecars, the queue and priority class), and on each pod `schedulerName: volcano` and Volcano's group annotation;
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

use crate::api::{FleetSpec, GangScheduler, InferenceDeploymentSpec, format_bytes, parse_bytes, parse_millis};

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

/// What `members` pods like `template` request together, every resource of every container:
/// what a gang scheduler must find free for the whole group at once (scheduler-plugins'
/// Coscheduling checks it before placing a member, Volcano before it admits the group). A pod
/// requests, for each resource, what the kubelet and scheduler reserve for it: the larger of its
/// containers and native sidecars together, and its largest regular init container with the
/// sidecars started before it. A container's request defaults to its limit.
fn group_resources(template: &Pod, members: i32) -> BTreeMap<String, Quantity> {
    let Some(spec) = template.spec.as_ref() else { return BTreeMap::new() };
    let mut running: BTreeMap<String, u64> = BTreeMap::new();
    let mut starting: BTreeMap<String, u64> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, u64> = BTreeMap::new();
    for init in spec.init_containers.iter().flatten() {
        let asked = container_requests(init);
        if init.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &asked);
        } else {
            let mut at_start = sidecars.clone();
            add(&mut at_start, &asked);
            for (resource, amount) in at_start {
                let most = starting.entry(resource).or_default();
                *most = (*most).max(amount);
            }
        }
    }
    add(&mut running, &sidecars);
    for container in &spec.containers {
        add(&mut running, &container_requests(container));
    }
    for (resource, amount) in starting {
        let total = running.entry(resource).or_default();
        *total = (*total).max(amount);
    }
    let members = u64::try_from(members.max(1)).unwrap_or(1);
    running.into_iter().map(|(resource, amount)| (resource.clone(), quantity(&resource, amount * members))).collect()
}

fn add(total: &mut BTreeMap<String, u64>, more: &BTreeMap<String, u64>) {
    for (resource, amount) in more {
        *total.entry(resource.clone()).or_default() += amount;
    }
}

/// A container's requests (its limits where it sets no request), CPU in millicores and every
/// other resource in its own unit (bytes, devices); a quantity the API server would refuse is
/// left out.
fn container_requests(container: &k8s_openapi::api::core::v1::Container) -> BTreeMap<String, u64> {
    let resources = container.resources.as_ref();
    let limits = resources.and_then(|r| r.limits.clone()).unwrap_or_default();
    let mut asked = limits;
    asked.extend(resources.and_then(|r| r.requests.clone()).unwrap_or_default());
    asked
        .into_iter()
        .filter_map(|(resource, amount)| {
            let parsed = if resource == "cpu" { parse_millis(&amount.0) } else { parse_bytes(&amount.0) };
            Some((resource, parsed.ok()?))
        })
        .collect()
}

/// `amount` of `resource` as a quantity: CPU from millicores, memory in binary units.
fn quantity(resource: &str, amount: u64) -> Quantity {
    Quantity(match resource {
        "cpu" if amount.is_multiple_of(1000) => (amount / 1000).to_string(),
        "cpu" => format!("{amount}m"),
        "memory" | "ephemeral-storage" => format_bytes(amount),
        _ if resource.starts_with("hugepages-") => format_bytes(amount),
        _ => amount.to_string(),
    })
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

    /// Quantities as numbers: CPU in millicores, the rest in their units.
    fn parsed(quantities: &BTreeMap<String, Quantity>) -> BTreeMap<String, u64> {
        quantities
            .iter()
            .map(|(r, q)| (r.clone(), if r == "cpu" { parse_millis(&q.0) } else { parse_bytes(&q.0) }.unwrap()))
            .collect()
    }

    /// What `pods` request together, summed container by container as the API server stores them
    /// (every container and native sidecar; a regular init container only where it asks for more
    /// than those, which none of kvpilot's does).
    fn requested(pods: &[Pod]) -> BTreeMap<String, u64> {
        let mut total = BTreeMap::new();
        for pod in pods {
            let spec = pod.spec.as_ref().unwrap();
            let sidecars =
                spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
            for container in spec.containers.iter().chain(sidecars) {
                let requests = container.resources.as_ref().and_then(|r| r.requests.as_ref()).expect("requests");
                for (resource, amount) in parsed(requests) {
                    *total.entry(resource).or_default() += amount;
                }
            }
        }
        total
    }

    #[test]
    fn min_resources_is_everything_the_group_s_containers_request_for_each_gang_scheduler_with_a_pod_group() {
        for gang in ["volcano", "coscheduling"] {
            let mut resource =
                with_gang(json!({"replicas": 1, "tensorParallel": 8, "nodesPerReplica": 2}), json!({"gang": gang}));
            resource.spec.cache = Some(serde_json::from_value(json!({"offload": true, "capacity": "4Gi"})).unwrap());
            let desired = render(&resource);
            let pods = desired.decode.replica(0);
            let min_resources = match desired.decode.pod_group(0) {
                Some(PodGroup::Volcano(group)) => group.spec.min_resources,
                Some(PodGroup::Coscheduling(group)) => group.spec.min_resources,
                None => panic!("{gang}: no PodGroup"),
            };
            let installer = &pods[0].spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
            assert_eq!(installer.restart_policy, None, "the installer is a regular init container");
            let wanted = requested(&pods);
            assert_eq!(parsed(&min_resources), wanted, "{gang}");
            // The servers' and the sidecars' memory: more than the servers' alone.
            let servers: u64 = pods
                .iter()
                .map(|p| {
                    parse_bytes(
                        &p.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap()
                            ["memory"]
                            .0,
                    )
                    .unwrap()
                })
                .sum();
            assert!(wanted["memory"] > servers, "{gang}: {wanted:?}");
        }
    }

    #[test]
    fn a_pod_reserves_its_largest_init_container_where_that_asks_for_more_than_it_runs() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                {"name": "warm", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}
            ],
            "containers": [{"name": "server", "resources": {"limits": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "2"}}}]
        }}))
        .unwrap();
        let expected = BTreeMap::from([
            // The init container with the sidecar started before it: 4.1 CPUs, more than the 1.1 running.
            ("cpu".to_string(), Quantity("8200m".into())),
            ("memory".to_string(), Quantity("6Gi".into())),
            ("nvidia.com/gpu".to_string(), Quantity("4".into())),
        ]);
        assert_eq!(group_resources(&pod, 2), expected);
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
                ("cpu".to_string(), Quantity("16".into())),
                ("memory".to_string(), Quantity("96Gi".into())),
                ("nvidia.com/gpu".to_string(), Quantity("16".into())),
                ("rdma/rdma_shared_device_a".to_string(), Quantity("2".into())),
            ]),
            "two pods' GPUs, RDMA devices, CPU (the 8 the spec limits it to) and memory"
        );
        assert_eq!(parsed(&group.spec.min_resources), requested(&desired.decode.replica(1)));
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
