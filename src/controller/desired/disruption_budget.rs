//! A PodDisruptionBudget per fleet and for the router: a node drain or any eviction takes down
//! at most `maxUnavailable` replicas of each at once, a multi-node replica counting as one.
//!
//! A fleet's budget is written as `minAvailable` pods, not `maxUnavailable`: with
//! `maxUnavailable` the disruption controller counts the pods it expects through their owner's
//! scale subresource, and an InferenceDeployment's scales the decode replicas, not the pods of
//! a fleet (a group of N ranks is N pods, and the prefill fleet has its own count).
//!
//! The budget allows `maxUnavailable` *pods* down, not `maxUnavailable × N`: one evicted pod
//! breaks its whole group, and concurrent evictions (a drain evicts a node's pods at once) all
//! arrive before kvpilot has closed any gate, so with a budget of `maxUnavailable × N` pods, one
//! rank of each of that many groups could go and break them all. With `maxUnavailable` pods, at
//! most `maxUnavailable` groups lose a pod whatever the order. Once kvpilot reacts, the readiness
//! gate `kvpilot.dev/group-ready` makes every rank of a broken group unready, so a down group
//! uses up N of the budget. Pods that are not ready may always be evicted (`AlwaysAllow`): they
//! serve nothing, and a drain must not wait on them.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{managed_labels, owned_meta};

fn budget(
    object_name: String,
    namespace: &Option<String>,
    selector: &BTreeMap<String, String>,
    owner: &OwnerReference,
    limit: (Option<IntOrString>, Option<IntOrString>),
) -> PodDisruptionBudget {
    let (min_available, max_unavailable) = limit;
    PodDisruptionBudget {
        metadata: owned_meta(object_name, namespace, managed_labels(selector), owner),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() }),
            min_available,
            max_unavailable,
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
        }),
        ..PodDisruptionBudget::default()
    }
}

/// The budget of a fleet of `replicas` replicas of `nodes_per_replica` pods: all its pods but
/// `max_unavailable` stay available, so no more than `max_unavailable` replicas lose a pod.
pub(super) fn fleet(
    object_name: String,
    namespace: &Option<String>,
    selector: &BTreeMap<String, String>,
    owner: &OwnerReference,
    (replicas, nodes_per_replica, max_unavailable): (i32, i32, i32),
) -> PodDisruptionBudget {
    let pods = replicas.max(0).saturating_mul(nodes_per_replica.max(1));
    let available = pods.saturating_sub(max_unavailable.max(0)).max(0);
    budget(object_name, namespace, selector, owner, (Some(IntOrString::Int(available)), None))
}

/// The router's budget: a Deployment, which the disruption controller counts through its own
/// scale.
pub(super) fn router(
    object_name: String,
    namespace: &Option<String>,
    selector: &BTreeMap<String, String>,
    owner: &OwnerReference,
    max_unavailable: i32,
) -> PodDisruptionBudget {
    budget(object_name, namespace, selector, owner, (None, Some(IntOrString::Int(max_unavailable.max(0)))))
}
