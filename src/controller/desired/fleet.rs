//! A fleet of SGLang servers: its headless Service, its revision, and the pods of each replica,
//! made from one pod template.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::disruption_budget;
use super::placement::keep_group_together;
use super::pod::server_pod_template;
use super::pod_group::{Gang, PodGroup};
use super::pod_monitor::{self, PodMonitor};
use super::service::headless_service;
use super::{
    FleetRole, LABEL_KV_COMPAT, LABEL_ORDINAL, LABEL_RANK, LABEL_REVISION, RenderOptions, managed_labels, owned_meta,
    pod_name, replica_name, selector_labels, service_name, stable_hash,
};
use crate::api::{FleetSpec, GangScheduler, InferenceDeployment};
use crate::policy::Assessment;
use crate::sglang::server;

/// What should exist for one fleet of SGLang servers.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub role: FleetRole,
    /// Hash of the pod template.
    pub revision: String,
    /// Headless `NAME-ROLE`: stable DNS names for the pods.
    pub service: Service,
    /// `NAME-ROLE`: what evictions may take down at once.
    pub disruption_budget: PodDisruptionBudget,
    /// `NAME-ROLE`: how the Prometheus Operator scrapes the fleet (`--pod-monitors`); without
    /// it the pods carry scrape annotations.
    pub pod_monitor: Option<PodMonitor>,
    /// Pod template; [`Fleet::pod`] names it and gives it its rank.
    template: Pod,
    /// Replicas to run: the fleet's `replicas`, or for a prefill fleet with `ratio` its share of
    /// the decode fleet's.
    pub replicas: i32,
    /// Pods per replica.
    pub nodes_per_replica: i32,
    /// Label selector (`k=v,k=v`) of the fleet's pods.
    pub selector: String,
    name: String,
    namespace: String,
    port: i32,
    /// How many of the container's last arguments are the fleet's `extraArgs`.
    extra_args: usize,
    /// Whether its pods carry scrape annotations (no PodMonitor). Added per pod, after the
    /// revision is hashed: switching between the two restarts no server.
    scrape_annotations: bool,
    /// How each replica joins the gang scheduler (`spec.scheduling`).
    gang: Gang,
    /// The node label all ranks of a replica share (`spec.placement.groupTopologyKey`).
    group_topology_key: Option<String>,
    owner: OwnerReference,
}

/// The `role` fleet of `resource` as `fleet` (its spec.decode or spec.prefill) describes it, its
/// pods labelled with the KV compatibility key `kv_compat`.
pub(super) fn render_fleet(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    role: FleetRole,
    fleet: &FleetSpec,
    kv_compat: &str,
    owner: &OwnerReference,
) -> Fleet {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let selector = selector_labels(&name, role);
    let service = headless_service(&name, &namespace, role, &selector, fleet.port, owner);
    let replicas = match role {
        FleetRole::Decode => fleet.replicas,
        FleetRole::Prefill => resource.spec.prefill_replicas().unwrap_or(fleet.replicas),
    }
    .max(0);
    let nodes_per_replica = fleet.nodes_per_replica.max(1);
    let disruption_budget = disruption_budget::fleet(
        service_name(&name, role),
        &namespace,
        &selector,
        owner,
        (replicas, nodes_per_replica, fleet.max_unavailable),
    );
    let mut labels = managed_labels(&selector);
    labels.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
    let template = server_pod_template(resource, assessment, options, role, fleet, labels, owner);
    let cache = role == FleetRole::Decode && resource.spec.cache.is_some();
    let pod_monitor = options
        .pod_monitors
        .then(|| pod_monitor::pod_monitor(service_name(&name, role), &namespace, &selector, owner, cache));
    let gang = Gang::new(&resource.spec, fleet, &template, nodes_per_replica);
    let group_topology_key = resource.spec.placement.as_ref().and_then(|p| p.group_topology_key.clone());
    // What each replica adds to the template is decided here, once per revision: hashed with it.
    let revision = stable_hash(&format!(
        "{}\n{nodes_per_replica}\n{}\n{group_topology_key:?}",
        serde_json::to_string(&template).unwrap_or_default(),
        serde_json::to_string(&gang).unwrap_or_default()
    ));
    let selector = selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    Fleet {
        role,
        revision,
        service,
        disruption_budget,
        pod_monitor,
        template,
        replicas,
        nodes_per_replica,
        selector,
        name,
        namespace: namespace.unwrap_or_default(),
        port: fleet.port,
        extra_args: fleet.extra_args.len(),
        scrape_annotations: !options.pod_monitors,
        gang,
        group_topology_key,
        owner: owner.clone(),
    }
}

impl Fleet {
    /// The pods of replica `replica` at this revision, rank 0 first.
    pub fn replica(&self, replica: u32) -> Vec<Pod> {
        (0..self.nodes_per_replica).map(|rank| self.pod(replica, rank)).collect()
    }

    /// The DNS name of a pod through the headless Service.
    fn host(&self, pod_name: &str) -> String {
        format!("{pod_name}.{}.{}.svc", service_name(&self.name, self.role), self.namespace)
    }

    /// The URL a router sends replica `replica`'s requests to: its rank 0.
    pub fn endpoint(&self, replica: u32) -> String {
        self.endpoint_of(&pod_name(&self.name, self.role, replica, 0, self.nodes_per_replica))
    }

    /// The URL of the SGLang server of the pod named `pod_name`.
    pub fn endpoint_of(&self, pod_name: &str) -> String {
        format!("http://{}:{}", self.host(pod_name), self.port)
    }

    /// The labels every pod of replica `replica` carries, and only they: the fleet's and the
    /// replica's ordinal.
    fn replica_labels(&self, replica: u32) -> BTreeMap<String, String> {
        let mut labels = selector_labels(&self.name, self.role);
        labels.insert(LABEL_ORDINAL.into(), replica.to_string());
        labels
    }

    /// The gang scheduler of this revision's replicas.
    pub fn gang_scheduler(&self) -> GangScheduler {
        self.gang.scheduler()
    }

    /// The PodGroup of replica `replica` at this revision, when its gang scheduler takes one.
    pub fn pod_group(&self, replica: u32) -> Option<PodGroup> {
        let name = replica_name(&self.name, self.role, replica);
        let namespace = Some(self.namespace.clone());
        self.gang.pod_group(owned_meta(name, &namespace, managed_labels(&self.replica_labels(replica)), &self.owner))
    }

    /// The pod of rank `rank` in replica `replica` at this revision.
    pub fn pod(&self, replica: u32, rank: i32) -> Pod {
        let mut pod = self.template.clone();
        let name = pod_name(&self.name, self.role, replica, rank, self.nodes_per_replica);
        pod.metadata.name = Some(name.clone());
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert(LABEL_REVISION.into(), self.revision.clone());
        labels.insert(LABEL_ORDINAL.into(), replica.to_string());
        labels.insert(LABEL_RANK.into(), rank.to_string());
        self.gang.join(&mut pod, &replica_name(&self.name, self.role, replica));
        if self.scrape_annotations {
            pod_monitor::annotate(pod.metadata.annotations.get_or_insert_default(), rank, self.port);
        }
        let leader = self.host(&pod_name(&self.name, self.role, replica, 0, self.nodes_per_replica));
        if let Some(spec) = pod.spec.as_mut() {
            spec.hostname = Some(name);
            if let Some(key) = self.group_topology_key.as_deref().filter(|_| self.nodes_per_replica > 1) {
                keep_group_together(&mut spec.affinity, key, self.replica_labels(replica));
            }
            if self.nodes_per_replica > 1
                && let Some(args) = spec.containers[0].args.as_mut()
            {
                // Before extraArgs, which come last.
                let at = args.len() - self.extra_args;
                let ranks = server::rank_args(self.nodes_per_replica, rank, &leader);
                args.splice(at..at, ranks);
            }
        }
        pod
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    use super::*;
    use crate::controller::desired::resources::GPU_RESOURCE;
    use crate::controller::desired::test_support::{container, flag, render, resource};

    #[test]
    fn a_multi_node_replica_is_a_group_that_finds_rank_zero_by_name() {
        let desired = render(&resource(
            json!({"tensorParallel": 16, "nodesPerReplica": 2, "extraArgs": ["--mem-fraction-static", "0.8"]}),
        ));
        let group = desired.decode.replica(3);
        let names: Vec<_> = group.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["llama-decode-3-0", "llama-decode-3-1"]);
        for (rank, pod) in group.iter().enumerate() {
            let args = container(pod).args.as_ref().unwrap();
            assert_eq!(flag(args, "--nnodes"), Some("2"));
            assert_eq!(flag(args, "--node-rank"), Some(rank.to_string().as_str()));
            assert_eq!(flag(args, "--dist-init-addr"), Some("llama-decode-3-0.llama-decode.serving.svc:5000"));
            assert_eq!(args[args.len() - 2..], ["--mem-fraction-static", "0.8"], "extraArgs stay last");
            assert_eq!(
                container(pod).resources.as_ref().unwrap().limits.as_ref().unwrap()[GPU_RESOURCE],
                Quantity("8".into())
            );
            assert_eq!(pod.spec.as_ref().unwrap().restart_policy.as_deref(), Some("Never"));
            assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_RANK], rank.to_string());
        }
        assert_eq!(desired.decode.endpoint(3), "http://llama-decode-3-0.llama-decode.serving.svc:30000");
        assert_eq!(desired.objects().len(), 3 + 3 * 2, "ConfigMap, Service, budget, 3 groups of 2");
        // The budget keeps all pods but one: however evictions arrive, at most one group breaks.
        let budget = desired.decode.disruption_budget.spec.as_ref().unwrap();
        assert_eq!(budget.min_available, Some(IntOrString::Int(5)));
        assert_eq!(budget.max_unavailable, None, "counted in pods, not through the resource's scale");
        assert_eq!(budget.unhealthy_pod_eviction_policy.as_deref(), Some("AlwaysAllow"));
        let selected = budget.selector.as_ref().unwrap().match_labels.as_ref().unwrap();
        let labels = group[0].metadata.labels.as_ref().unwrap();
        assert!(selected.iter().all(|(k, v)| labels.get(k) == Some(v)), "it selects the fleet's pods");
        let pod_spec = group[0].spec.as_ref().unwrap();
        assert_eq!(
            pod_spec.readiness_gates.as_ref().unwrap()[0].condition_type,
            "kvpilot.dev/group-ready",
            "every rank waits on its group"
        );
    }

    #[test]
    fn concurrent_evictions_within_the_budget_break_at_most_max_unavailable_groups() {
        for replicas in 0..6 {
            for nodes_per_replica in 1..5 {
                for max_unavailable in 0..8 {
                    let desired = render(&resource(json!({
                        "replicas": replicas, "tensorParallel": 4 * nodes_per_replica,
                        "nodesPerReplica": nodes_per_replica, "maxUnavailable": max_unavailable
                    })));
                    let budget = desired.decode.disruption_budget.spec.unwrap();
                    let Some(IntOrString::Int(min_available)) = budget.min_available else { panic!("{budget:?}") };
                    let pods = replicas * nodes_per_replica;
                    // Each pod evicted before kvpilot reacts may be a rank of a different group.
                    let evictable = pods - min_available;
                    assert!(
                        evictable <= max_unavailable && evictable == max_unavailable.min(pods) && min_available >= 0,
                        "{replicas} x {nodes_per_replica}, maxUnavailable {max_unavailable}: minAvailable {min_available}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_disruption_budget_never_asks_for_more_than_the_fleet_has() {
        let desired = render(&resource(json!({"replicas": 1, "maxUnavailable": 3})));
        let budget = desired.decode.disruption_budget.spec.unwrap();
        assert_eq!(budget.min_available, Some(IntOrString::Int(0)));
    }

    #[test]
    fn the_revision_covers_what_affects_a_pod_and_nothing_else() {
        let base = render(&resource(json!({})));
        assert_eq!(render(&resource(json!({}))).decode.revision, base.decode.revision, "deterministic");
        assert_ne!(
            render(&resource(json!({"tensorParallel": 2}))).decode.revision,
            base.decode.revision,
            "TP changes the pods"
        );
        assert_ne!(
            render(&resource(json!({"tensorParallel": 2, "nodesPerReplica": 2}))).decode.revision,
            render(&resource(json!({"tensorParallel": 2}))).decode.revision
        );
        assert_eq!(
            render(&resource(json!({"replicas": 7}))).decode.revision,
            base.decode.revision,
            "scaling is not a rollout"
        );
        assert_ne!(render(&resource(json!({"podLabels": {"team": "b"}}))).decode.revision, base.decode.revision);
    }
}
