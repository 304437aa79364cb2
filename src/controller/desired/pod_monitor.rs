//! How Prometheus finds a fleet's metrics: SGLang's own (`--enable-metrics`, on the `http`
//! port at `/metrics`) and, on decode pods with `spec.cache`, the cache runtime's (port
//! `cache-metrics`).
//!
//! With the operator's `--pod-monitors` (chart value `metrics.podMonitor.enabled`), one
//! Prometheus Operator `monitoring.coreos.com/v1` PodMonitor per fleet, `NAME-ROLE`, owned by
//! the resource. Without it, the scrape annotations annotation-based Prometheus configurations
//! read (`prometheus.io/scrape`, `/port`, `/path`) on the pods that serve HTTP.
//!
//! Only rank 0 of a multi-node replica serves SGLang's HTTP API (the other ranks answer
//! `/health` alone), so only rank 0 is annotated and the PodMonitor's SGLang endpoint keeps rank
//! 0 alone; every rank runs its own cache runtime, so the cache endpoint keeps them all.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{managed_labels, owned_meta};
use crate::api::SchedulerApi;

/// Pod annotation: scrape this pod.
pub const SCRAPE_ANNOTATION: &str = "prometheus.io/scrape";
/// Pod annotation: the port to scrape.
pub const PORT_ANNOTATION: &str = "prometheus.io/port";
/// Pod annotation: the path to scrape.
pub const PATH_ANNOTATION: &str = "prometheus.io/path";
/// Where SGLang and the cache runtime serve their metrics.
pub const METRICS_PATH: &str = "/metrics";
/// The SGLang container's port, where `--enable-metrics` serves `/metrics`.
pub const SERVER_PORT_NAME: &str = "http";
/// The cache runtime's port.
pub const CACHE_PORT_NAME: &str = "cache-metrics";
/// Prometheus' service-discovery label of a pod's `kvpilot.dev/rank` ([`super::LABEL_RANK`],
/// sanitized to a label name).
const RANK_META_LABEL: &str = "__meta_kubernetes_pod_label_kvpilot_dev_rank";

/// The API a PodMonitor needs: the Prometheus Operator's CRD.
pub const POD_MONITOR_API: SchedulerApi = SchedulerApi {
    scheduler: "the Prometheus Operator",
    group: "monitoring.coreos.com",
    version: Some("v1"),
    resource: "podmonitors",
};

/// What status and the operator's log say while `--pod-monitors` is on and the cluster does not
/// serve [`POD_MONITOR_API`].
pub const POD_MONITORS_UNSERVED: &str = "the operator runs with --pod-monitors (chart value \
    metrics.podMonitor.enabled=true), but this cluster does not serve monitoring.coreos.com/v1 podmonitors: \
    install the Prometheus Operator's CRDs, or set metrics.podMonitor.enabled=false so that the servers carry \
    prometheus.io scrape annotations instead; meanwhile the fleets run without PodMonitors";

/// The Prometheus Operator's PodMonitor (`monitoring.coreos.com/v1`), the fields kvpilot sets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "monitoring.coreos.com",
    version = "v1",
    kind = "PodMonitor",
    derive = "PartialEq",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PodMonitorSpec {
    /// The fleet's pods (in the PodMonitor's own namespace, the Prometheus Operator's default).
    pub selector: LabelSelector,
    pub pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
}

/// One port of the selected pods to scrape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricsEndpoint {
    /// The container port's name.
    pub port: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relabelings: Vec<Relabeling>,
}

/// A Prometheus relabeling rule, the fields kvpilot sets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Relabeling {
    pub source_labels: Vec<String>,
    pub regex: String,
    pub action: String,
}

/// The PodMonitor of a fleet whose pods carry `selector`: SGLang's metrics of rank 0 and, with
/// `cache`, every rank's cache runtime.
pub(super) fn pod_monitor(
    object_name: String,
    namespace: &Option<String>,
    selector: &BTreeMap<String, String>,
    owner: &OwnerReference,
    cache: bool,
) -> PodMonitor {
    let server = PodMetricsEndpoint {
        port: SERVER_PORT_NAME.into(),
        path: METRICS_PATH.into(),
        relabelings: vec![Relabeling {
            source_labels: vec![RANK_META_LABEL.into()],
            regex: "0".into(),
            action: "keep".into(),
        }],
    };
    let cache = cache.then(|| PodMetricsEndpoint {
        port: CACHE_PORT_NAME.into(),
        path: METRICS_PATH.into(),
        relabelings: Vec::new(),
    });
    PodMonitor {
        metadata: owned_meta(object_name, namespace, managed_labels(selector), owner),
        spec: PodMonitorSpec {
            selector: LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() },
            pod_metrics_endpoints: std::iter::once(server).chain(cache).collect(),
        },
    }
}

/// The scrape annotations of a pod of rank `rank` whose SGLang server listens on `port`; the
/// pod's own (`podAnnotations`) win. Ranks above 0 get none: they serve no metrics.
pub(super) fn annotate(annotations: &mut BTreeMap<String, String>, rank: i32, port: i32) {
    if rank != 0 {
        return;
    }
    for (key, value) in [
        (SCRAPE_ANNOTATION, "true".to_string()),
        (PORT_ANNOTATION, port.to_string()),
        (PATH_ANNOTATION, METRICS_PATH.to_string()),
    ] {
        annotations.entry(key.into()).or_insert(value);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{render_with, resource};
    use super::super::{FleetRole, RenderOptions, with_type_meta};
    use super::*;

    #[test]
    fn the_relabeling_reads_the_rank_label() {
        // Prometheus sanitizes a label name to [a-zA-Z0-9_]: kvpilot.dev/rank → kvpilot_dev_rank.
        let sanitized: String =
            super::super::LABEL_RANK.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        assert_eq!(RANK_META_LABEL, format!("__meta_kubernetes_pod_label_{sanitized}"));
    }

    #[test]
    fn without_pod_monitors_rank_zero_pods_carry_scrape_annotations() {
        let group = resource(json!({"tensorParallel": 4, "nodesPerReplica": 2, "port": 31000}));
        let desired = render_with(&group, &RenderOptions::default());
        assert!(desired.decode.pod_monitor.is_none());
        let annotations = |rank| desired.decode.pod(0, rank).metadata.annotations.unwrap_or_default();
        let rank0 = annotations(0);
        assert_eq!(
            (&rank0[SCRAPE_ANNOTATION][..], &rank0[PORT_ANNOTATION][..], &rank0[PATH_ANNOTATION][..]),
            ("true", "31000", "/metrics")
        );
        assert!(!annotations(1).contains_key(SCRAPE_ANNOTATION), "rank 1 serves no metrics");
        assert_eq!(
            desired.decode.revision,
            render_with(&group, &RenderOptions { pod_monitors: true, ..RenderOptions::default() }).decode.revision,
            "switching between annotations and PodMonitors restarts no server"
        );

        let mut own = resource(json!({"podAnnotations": {PATH_ANNOTATION: "/custom"}}));
        own.spec.decode.pod_annotations.insert(PORT_ANNOTATION.into(), "9999".into());
        let pod = render_with(&own, &RenderOptions::default()).decode.pod(0, 0);
        let annotations = pod.metadata.annotations.unwrap();
        assert_eq!((&annotations[PATH_ANNOTATION][..], &annotations[PORT_ANNOTATION][..]), ("/custom", "9999"));
    }

    #[test]
    fn with_pod_monitors_each_fleet_gets_one_selecting_its_pods_and_no_annotations() {
        let mut pd = resource(json!({}));
        pd.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        pd.spec.cache = Some(serde_json::from_value(json!({"offload": true, "capacity": "1Gi"})).unwrap());
        let options = RenderOptions { pod_monitors: true, ..RenderOptions::default() };
        let desired = render_with(&pd, &options);
        for role in [FleetRole::Decode, FleetRole::Prefill] {
            let fleet = desired.fleet(role).unwrap();
            let monitor = fleet.pod_monitor.as_ref().expect("a PodMonitor per fleet");
            let json = with_type_meta(monitor, "monitoring.coreos.com/v1", "PodMonitor");
            assert_eq!(json["metadata"]["name"], format!("llama-{}", role.as_str()));
            assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "InferenceDeployment");
            assert_eq!(json["metadata"]["labels"]["app.kubernetes.io/managed-by"], "kvpilot");
            let pod = fleet.pod(0, 0);
            let labels = pod.metadata.labels.as_ref().unwrap();
            let selected = json["spec"]["selector"]["matchLabels"].as_object().unwrap();
            assert!(selected.iter().all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str()), "{json}");
            let endpoints = json["spec"]["podMetricsEndpoints"].as_array().unwrap();
            assert_eq!(endpoints[0]["port"], "http");
            assert_eq!(endpoints[0]["path"], "/metrics");
            assert_eq!(endpoints[0]["relabelings"][0]["action"], "keep");
            let ports: Vec<_> = endpoints.iter().map(|e| e["port"].as_str().unwrap()).collect();
            match role {
                FleetRole::Decode => assert_eq!(ports, ["http", "cache-metrics"], "the cache runtime too"),
                FleetRole::Prefill => assert_eq!(ports, ["http"], "no cache runtime on prefill pods"),
            }
            assert!(!pod.metadata.annotations.unwrap_or_default().contains_key(SCRAPE_ANNOTATION));
        }
        let kinds: Vec<_> = desired
            .objects()
            .iter()
            .filter(|o| o["kind"] == "PodMonitor")
            .map(|o| o["metadata"]["name"].clone())
            .collect();
        assert_eq!(kinds, [json!("llama-decode"), json!("llama-prefill")], "render prints them");
    }
}
