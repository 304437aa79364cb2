//! One test's corner of the real control plane: a namespace, the test kubelet for it, and
//! `kvpilot operator` processes watching only it; plus what the cluster tests check of an
//! InferenceDeployment's fleet (converged, no lost pod, no duplicate ordinal, no orphan, no
//! repeated event). Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kvpilot::api::InferenceDeployment;
use serde_json::Value;

use crate::common::cluster::{
    Cluster, KvpilotProcess, TestNamespace, examples_in, free_port, text, wait_for, wait_for_blocking,
};
use crate::kubelet::{self, Kubelet, Timing};

/// Long enough for any convergence on a loaded 2-core machine; failures show the last state.
pub const SETTLE: Duration = Duration::from_secs(120);
/// The selector of decode pods.
pub const DECODE_PODS: &str = "app.kubernetes.io/name=kvpilot-decode";
/// Every pod kvpilot's workloads run: prefill and decode servers, and the router's (created by
/// the real Deployment controller).
pub const SERVICE_PODS: &str = "app.kubernetes.io/name in (kvpilot-decode,kvpilot-prefill,kvpilot-router)";

pub struct Fleet {
    pub cluster: Cluster,
    pub client: kube::Client,
    _kubelet: Kubelet,
    pub namespace: TestNamespace,
}

/// `kvpilot operator` watching the fleet's namespace, killed when dropped.
pub struct Operator {
    pub process: KvpilotProcess,
    metrics: String,
}

impl Operator {
    /// Sum of `kvpilot_reconcile_failures_total` over every reason, with the reasons.
    pub async fn failures(&mut self) -> (f64, String) {
        self.process.assert_running();
        let url = format!("http://{}/metrics", self.metrics);
        let body = reqwest::get(&url).await.and_then(|r| r.error_for_status()).expect("scrape /metrics");
        let body = body.text().await.expect("metrics body");
        let lines: Vec<&str> = body.lines().filter(|l| l.starts_with("kvpilot_reconcile_failures_total")).collect();
        let total = lines.iter().filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum();
        (total, lines.join("\n"))
    }

    /// Asserts no reconcile failed (no 409/422 loop, no API error) and nothing was refused.
    pub async fn assert_no_failures(&mut self) {
        let (total, lines) = self.failures().await;
        assert_eq!(total, 0.0, "reconcile failures:\n{lines}\nlogs:\n{}", self.process.logs());
        let logs = self.process.logs();
        if let Some(refusal) = api_refusal_in(&logs) {
            panic!("the operator logged {refusal}:\n{logs}");
        }
    }
}

/// The first API refusal among the warnings and errors of an operator log. Matched as kube
/// formats a refused request: a bare "422" also matches namespace names, which carry the
/// test's pid.
pub fn api_refusal_in(logs: &str) -> Option<&'static str> {
    const REFUSALS: [&str; 5] = ["code: 422", "code: 409", "code: 403", "reason: \"Invalid\"", "reason: \"Forbidden\""];
    logs.lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .find_map(|line| REFUSALS.into_iter().find(|refusal| line.contains(refusal)))
}

impl Drop for Fleet {
    /// Leaves nothing behind for later tests (an operator watching every namespace would pick
    /// it up): the resources go, then their pods at once, because with the kubelet gone a bound
    /// pod would stay Terminating for ever and hold its namespace with it.
    fn drop(&mut self) {
        let ns = self.namespace.name.clone();
        let _ = self.cluster.kubectl(&["delete", "infd", "--all", "-n", &ns, "--wait=false"]);
        let _ = self.cluster.kubectl(&["delete", "pods", "--all", "-n", &ns, "--grace-period=0", "--force"]);
    }
}

impl Drop for Operator {
    /// A failing test shows what the operator logged.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kvpilot operator log ---\n{}", self.process.logs());
        }
    }
}

impl Fleet {
    /// A fresh namespace `prefix-…` with the CRD installed and a kubelet of `timing` for it that
    /// runs every pod of kvpilot's workloads.
    pub async fn new(cluster: &Cluster, prefix: &str, timing: Timing) -> Fleet {
        Self::with_kubelet_for(cluster, prefix, timing, SERVICE_PODS).await
    }

    /// [`Fleet::new`] whose kubelet runs only the decode pods `selector` selects; the test plays
    /// the node for the others.
    pub async fn with_kubelet_for(cluster: &Cluster, prefix: &str, timing: Timing, selector: &str) -> Fleet {
        cluster.install_crd();
        let namespace = TestNamespace::create(cluster, prefix);
        // Pods need the namespace's default ServiceAccount, which kube-controller-manager makes
        // a moment after the namespace: an operator faster than that is refused (and retries),
        // which the tests' no-failure checks would count.
        wait_for_blocking("the namespace's default ServiceAccount", Duration::from_secs(30), || {
            cluster.kubectl(&["get", "serviceaccount", "default", "-n", &namespace.name]).status.success().then_some(())
        });
        let client = cluster.client().await;
        let kubelet = kubelet::start(node_client(cluster).await, Some(&namespace.name), selector, timing);
        Fleet { cluster: cluster.clone(), client, _kubelet: kubelet, namespace }
    }

    pub fn ns(&self) -> &str {
        &self.namespace.name
    }

    /// Starts `kvpilot operator --namespace <ns> extra…` with its own metrics port.
    pub fn operator(&self, extra: &[&str], env: &[(&str, &str)]) -> Operator {
        let metrics = format!("127.0.0.1:{}", free_port());
        let health = format!("127.0.0.1:{}", free_port());
        let mut args = vec!["operator", "--namespace", self.ns(), "--metrics-addr", &metrics, "--health-addr", &health];
        args.extend_from_slice(extra);
        let process = KvpilotProcess::start(&self.cluster.kubeconfig, &args, env);
        Operator { process, metrics }
    }

    pub fn deployments(&self) -> Api<InferenceDeployment> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), self.ns())
    }

    /// The InferenceDeployment of `examples/<file>` (in this namespace) as a decode fleet alone
    /// (no spec.prefill, so no router either), with `edit` applied: what the decode tests follow.
    pub fn example(&self, file: &str, edit: impl FnOnce(&mut Value)) -> Value {
        self.pd_example(file, |object| {
            if let Some(spec) = object["spec"].as_object_mut() {
                spec.remove("prefill");
            }
            edit(object);
        })
    }

    /// The InferenceDeployment of `examples/<file>` (in this namespace) as written, with `edit`
    /// applied.
    pub fn pd_example(&self, file: &str, edit: impl FnOnce(&mut Value)) -> Value {
        let (_, mut object) = examples_in(self.ns())
            .into_iter()
            .find(|(f, o)| f == file && o["kind"] == "InferenceDeployment")
            .unwrap_or_else(|| panic!("no InferenceDeployment in examples/{file}"));
        edit(&mut object);
        object
    }

    /// `kubectl create` of `object`; returns its name.
    pub fn create(&self, object: &Value) -> String {
        let out = self.cluster.kubectl_with_input(&["create", "-f", "-"], &object.to_string());
        assert!(out.status.success(), "kubectl create: {}", text(&out.stderr));
        object["metadata"]["name"].as_str().unwrap().to_string()
    }

    /// A JSON merge patch of `spec`.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        let patch = serde_json::json!({"spec": spec});
        self.deployments().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch spec");
    }

    /// The decode pods of `name`, terminating ones included.
    pub async fn pods_of(&self, name: &str) -> Vec<Pod> {
        let selector = format!("{DECODE_PODS},app.kubernetes.io/instance={name}");
        self.pods().list(&ListParams::default().labels(&selector)).await.expect("list pods").items
    }

    /// Waits until `name` is Ready for its generation with exactly `replicas` live pods of one
    /// revision, distinct ordinals, each owned by it, and nothing terminating; returns it.
    pub async fn converged(&self, name: &str, replicas: usize) -> InferenceDeployment {
        self.converged_within(name, replicas, SETTLE).await
    }

    /// [`Fleet::converged`] with its own patience (after a fault, watches take a while back).
    pub async fn converged_within(&self, name: &str, replicas: usize, timeout: Duration) -> InferenceDeployment {
        let mut last = String::new();
        let found =
            wait_for_or(&format!("{name} converges on {replicas} replicas"), timeout, &mut last, async |last| {
                let resource = self.deployments().get(name).await.ok()?;
                let pods = self.pods_of(name).await;
                match fleet_problem(&resource, &pods, replicas) {
                    None => Some(resource),
                    Some(problem) => {
                        *last = problem;
                        None
                    }
                }
            })
            .await;
        self.assert_no_orphans().await;
        found
    }

    /// Every decode pod, ConfigMap and Service in the namespace is owned by an existing
    /// InferenceDeployment.
    pub async fn assert_no_orphans(&self) {
        let uids: BTreeSet<String> = self
            .deployments()
            .list(&ListParams::default())
            .await
            .expect("list deployments")
            .items
            .into_iter()
            .filter_map(|d| d.metadata.uid)
            .collect();
        let owned = ListParams::default().labels("app.kubernetes.io/managed-by=kvpilot");
        let mut owners: Vec<(String, Option<String>)> = Vec::new();
        let owner_of = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let owner = meta.owner_references.as_ref().and_then(|o| o.iter().find(|r| r.controller == Some(true)));
            (meta.name.clone().unwrap_or_default(), owner.map(|o| o.uid.clone()))
        };
        owners.extend(self.pods().list(&owned).await.unwrap().items.iter().map(|p| owner_of(&p.metadata)));
        owners.extend(self.config_maps().list(&owned).await.unwrap().items.iter().map(|c| owner_of(&c.metadata)));
        owners.extend(self.services().list(&owned).await.unwrap().items.iter().map(|s| owner_of(&s.metadata)));
        for (object, owner) in owners {
            assert!(owner.as_ref().is_some_and(|uid| uids.contains(uid)), "{object} is orphaned (owner {owner:?})");
        }
    }

    /// Events in the namespace, and that no announcement was made twice: no two events share
    /// object, reason and note, and no event grew a series.
    pub async fn assert_no_repeated_events(&self) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), self.ns());
        let events = events.list(&ListParams::default()).await.expect("list events").items;
        let mut seen: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        for event in &events {
            if event.reporting_controller.as_deref() != Some("kvpilot") {
                continue;
            }
            assert!(event.series.is_none(), "announced repeatedly: {event:?}");
            let regarding = event.regarding.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
            let key = (regarding, event.reason.clone().unwrap_or_default(), event.note.clone().unwrap_or_default());
            *seen.entry(key).or_default() += 1;
        }
        let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(repeated.is_empty(), "announced more than once: {repeated:?}");
        events
    }
}

/// The kubelet's client: like a node's, it gives up on a silent connection (a restarted
/// kube-apiserver can leave a watch request unanswered) and watches again.
async fn node_client(cluster: &Cluster) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("kubeconfig");
    config.read_timeout = Some(Duration::from_secs(20));
    kube::Client::try_from(config).expect("client")
}

/// [`wait_for`] that names the last observed problem when it times out.
pub async fn wait_for_or<T>(
    what: &str,
    timeout: Duration,
    last: &mut String,
    mut check: impl AsyncFnMut(&mut String) -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(found) = check(last).await {
            return found;
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not happen within {timeout:?}: {last}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn label<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str).unwrap_or_default()
}

pub fn condition<'a>(
    resource: &'a InferenceDeployment,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    resource.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// What keeps `resource` and its `pods` from being converged on `replicas`, if anything.
pub fn fleet_problem(resource: &InferenceDeployment, pods: &[Pod], replicas: usize) -> Option<String> {
    let Some(status) = resource.status.as_ref() else {
        return Some("no status yet".into());
    };
    if status.observed_generation != resource.metadata.generation {
        return Some(format!(
            "observedGeneration {:?} of {:?}",
            status.observed_generation, resource.metadata.generation
        ));
    }
    let terminating = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some()).count();
    let revisions: BTreeSet<&str> = pods.iter().map(|p| label(p, "kvpilot.dev/revision")).collect();
    // A replacement takes the lowest ordinal free when it is created, and a terminating pod
    // holds its own until it is gone: ordinals may move, but never repeat.
    let ordinals: BTreeSet<u32> = pods.iter().filter_map(|p| label(p, "kvpilot.dev/ordinal").parse().ok()).collect();
    // A replica of a multi-node resource is a group of pods, one per rank.
    let nodes = resource.spec.decode.nodes_per_replica.max(1) as usize;
    if terminating > 0 || revisions.len() > 1 || pods.len() != replicas * nodes || ordinals.len() != replicas {
        return Some(format!(
            "{} pods: ordinals {ordinals:?}, revisions {revisions:?}, {terminating} terminating",
            pods.len()
        ));
    }
    if !pods.iter().all(is_ready) {
        return Some("a pod is not ready".into());
    }
    let ready = condition(resource, "Ready").map(|c| c.status.as_str());
    if ready != Some("True") {
        return Some(format!("Ready={ready:?}"));
    }
    let uid = resource.metadata.uid.as_deref();
    let foreign = pods
        .iter()
        .any(|p| p.metadata.owner_references.as_ref().is_none_or(|o| !o.iter().any(|r| Some(r.uid.as_str()) == uid)));
    foreign.then(|| "a pod is not owned by the resource".to_string())
}

/// Waits (with [`wait_for`]) until `check` holds, for blocking kubectl checks.
pub async fn until(what: &str, check: impl AsyncFnMut() -> Option<()>) {
    wait_for(what, SETTLE, check).await
}
