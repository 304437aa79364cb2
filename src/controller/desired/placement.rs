//! Where a fleet's pods land (`spec.placement`), added to the fleet's own affinity rather than
//! replacing it: the replicas of a fleet spread across nodes (softly), the ranks of a multi-node
//! replica in one topology domain (`groupTopologyKey`, required), and the prefill and decode
//! replicas of a service in one domain (`colocateTopologyKey`, preferred).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinity, PodAffinityTerm, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{FleetRole, selector_labels};
use crate::api::InferenceDeploymentSpec;

/// The node label the replicas of a fleet spread over.
pub(super) const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";
/// The weight of the preference for the other fleet's domain: the most a preference can weigh,
/// since a KV transfer across domains costs every request.
const COLOCATE_WEIGHT: i32 = 100;

fn selecting(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector { match_labels: Some(labels), ..LabelSelector::default() })
}

/// The spread of the pods of the `role` fleet of `name` over nodes: at most one more on any node
/// than on another, where the scheduler can (`ScheduleAnyway`), so that losing a node loses as
/// few replicas as it can and a full cluster still schedules.
pub(super) fn spread_across_nodes(name: &str, role: FleetRole) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: HOSTNAME_TOPOLOGY_KEY.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: selecting(selector_labels(name, role)),
        ..TopologySpreadConstraint::default()
    }
}

/// The affinity of the pods of the `role` fleet of `name`: the fleet's `own`, and with
/// `spec.placement.colocateTopologyKey` a preference for the domain of the other fleet's pods.
pub(super) fn fleet_affinity(
    spec: &InferenceDeploymentSpec,
    name: &str,
    role: FleetRole,
    own: Option<&Affinity>,
) -> Option<Affinity> {
    let mut affinity = own.cloned();
    let key = spec.placement.as_ref().and_then(|p| p.colocate_topology_key.as_ref());
    if let Some(key) = key.filter(|_| spec.prefill.is_some()) {
        let other_role = match role {
            FleetRole::Decode => FleetRole::Prefill,
            FleetRole::Prefill => FleetRole::Decode,
        };
        let term = WeightedPodAffinityTerm {
            weight: COLOCATE_WEIGHT,
            pod_affinity_term: PodAffinityTerm {
                label_selector: selecting(selector_labels(name, other_role)),
                topology_key: key.clone(),
                ..PodAffinityTerm::default()
            },
        };
        pod_affinity(&mut affinity)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_default()
            .push(term);
    }
    affinity
}

/// Requires the pods of one replica (`group` selects them) to share the value of the node label
/// `key`: the first rank lands where the scheduler chooses, the others follow it.
pub(super) fn keep_group_together(affinity: &mut Option<Affinity>, key: &str, group: BTreeMap<String, String>) {
    let term =
        PodAffinityTerm { label_selector: selecting(group), topology_key: key.into(), ..PodAffinityTerm::default() };
    pod_affinity(affinity).required_during_scheduling_ignored_during_execution.get_or_insert_default().push(term);
}

fn pod_affinity(affinity: &mut Option<Affinity>) -> &mut PodAffinity {
    affinity.get_or_insert_default().pod_affinity.get_or_insert_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::controller::desired::test_support::{render, resource};
    use crate::controller::desired::{LABEL_INSTANCE, LABEL_NAME, LABEL_ORDINAL, PREFILL_APP};

    fn affinity(pod: &Pod) -> PodAffinity {
        pod.spec.as_ref().unwrap().affinity.clone().unwrap_or_default().pod_affinity.unwrap_or_default()
    }

    fn pd(placement: serde_json::Value, decode: serde_json::Value) -> crate::api::InferenceDeployment {
        let mut resource = resource(decode);
        resource.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        resource.spec.placement = Some(serde_json::from_value(placement).unwrap());
        resource
    }

    #[test]
    fn every_fleet_spreads_its_replicas_across_nodes_softly() {
        let desired = render(&pd(json!({}), json!({})));
        for (fleet, app) in [(&desired.decode, "kvpilot-decode"), (desired.prefill.as_ref().unwrap(), PREFILL_APP)] {
            let pod = fleet.pod(0, 0);
            let spread = pod.spec.as_ref().unwrap().topology_spread_constraints.clone().unwrap();
            assert_eq!(spread.len(), 1);
            let spread = &spread[0];
            assert_eq!(
                (spread.max_skew, spread.topology_key.as_str(), spread.when_unsatisfiable.as_str()),
                (1, HOSTNAME_TOPOLOGY_KEY, "ScheduleAnyway")
            );
            let selected = spread.label_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
            assert_eq!((selected[LABEL_INSTANCE].as_str(), selected[LABEL_NAME].as_str()), ("llama", app));
        }
    }

    #[test]
    fn a_group_keeps_its_ranks_in_one_domain_and_each_fleet_prefers_the_others_domain() {
        let own = json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h200"]}]}]}},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm":
                {"labelSelector": {"matchLabels": {"app": "batch"}}, "topologyKey": "kubernetes.io/hostname"}}]}
        });
        let resource = pd(
            json!({"groupTopologyKey": "nvidia.com/gpu.clique", "colocateTopologyKey": "topology.kubernetes.io/zone"}),
            json!({"tensorParallel": 16, "nodesPerReplica": 2, "affinity": own}),
        );
        let desired = render(&resource);
        for rank in 0..2 {
            let pod = desired.decode.pod(3, rank);
            let full = pod.spec.as_ref().unwrap().affinity.clone().unwrap();
            assert!(full.node_affinity.is_some() && full.pod_anti_affinity.is_some(), "the fleet's own terms stay");
            let required = affinity(&pod).required_during_scheduling_ignored_during_execution.unwrap();
            assert_eq!(required.len(), 2, "the fleet's own term, then the group's");
            assert_eq!(required[0].topology_key, "kubernetes.io/hostname");
            assert_eq!(required[1].topology_key, "nvidia.com/gpu.clique");
            let group = required[1].label_selector.as_ref().unwrap().match_labels.clone().unwrap();
            assert_eq!(
                (group[LABEL_INSTANCE].as_str(), group[LABEL_NAME].as_str(), group[LABEL_ORDINAL].as_str()),
                ("llama", "kvpilot-decode", "3"),
                "the replica's own ranks, which carry these labels"
            );
            assert!(group.iter().all(|(key, value)| pod.metadata.labels.as_ref().unwrap().get(key) == Some(value)));
            let preferred = affinity(&pod).preferred_during_scheduling_ignored_during_execution.unwrap();
            assert_eq!((preferred.len(), preferred[0].weight), (1, COLOCATE_WEIGHT));
            let term = &preferred[0].pod_affinity_term;
            assert_eq!(term.topology_key, "topology.kubernetes.io/zone");
            assert_eq!(term.label_selector.as_ref().unwrap().match_labels.as_ref().unwrap()[LABEL_NAME], PREFILL_APP);
        }
        let prefill = desired.prefill.as_ref().unwrap().pod(0, 0);
        let preferred = affinity(&prefill).preferred_during_scheduling_ignored_during_execution.unwrap();
        assert_eq!(
            preferred[0].pod_affinity_term.label_selector.as_ref().unwrap().match_labels.as_ref().unwrap()[LABEL_NAME],
            "kvpilot-decode"
        );
        assert_eq!(
            affinity(&prefill).required_during_scheduling_ignored_during_execution,
            None,
            "a single-pod replica needs no group term"
        );
    }

    #[test]
    fn the_group_domain_is_part_of_the_revision() {
        let group = |key: &str| {
            let mut resource = resource(json!({"tensorParallel": 16, "nodesPerReplica": 2}));
            resource.spec.placement = Some(serde_json::from_value(json!({"groupTopologyKey": key})).unwrap());
            render(&resource).decode.revision
        };
        assert_ne!(group("nvidia.com/gpu.clique"), group("example.com/rack"));
    }
}
