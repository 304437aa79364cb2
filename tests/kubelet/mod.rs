//! The node side of pods for tests against a real API server, which has no kubelet: binds
//! each decode pod to a node, reports it Running with its containers ready through the status
//! subresource after a start-up delay, keeps its `Ready` condition in step with its readiness
//! gates as a kubelet does, and, once the pod is being deleted, finishes the deletion after a
//! shutdown delay (a kubelet's final delete with grace period 0). Bound pods are what make a
//! real API server delete gracefully: an unbound pod is removed at once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// The node every pod is bound to (no Node object: nothing here checks that it exists).
pub const NODE: &str = "kvpilot-test-node";
/// The field manager of the kubelet's writes.
pub const MANAGER: &str = "kvpilot-test-kubelet";

/// The single-object requests this process's kubelets have sent (their watches, a list and
/// then a watch every few minutes, are not counted), so that a count of the API server's
/// requests can tell them apart.
static SENT: AtomicU64 = AtomicU64::new(0);

/// The requests the kubelets have sent so far.
#[allow(dead_code, reason = "the controller bench reads it; the cluster tests share this module")]
pub fn requests_sent() -> u64 {
    SENT.load(Ordering::Relaxed)
}

/// How the fake node behaves.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From a pod's appearance to Ready.
    pub start: Duration,
    /// From a pod's deletionTimestamp to its removal.
    pub stop: Duration,
    /// Bind pods to [`NODE`] (graceful deletion) or leave them unbound (deleted at once).
    pub bind: bool,
}

impl Timing {
    /// Pods start after `start` and take `stop` to shut down.
    pub fn new(start: Duration, stop: Duration) -> Self {
        Self { start, stop, bind: true }
    }
}

/// The running kubelet; stops when dropped.
pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn started(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "ContainersReady" && c.status == "True"))
}

/// Work already started for a pod, so a burst of watch events starts it once.
#[derive(Default)]
struct InFlight(Mutex<HashSet<(String, &'static str)>>);

impl InFlight {
    fn claim(&self, uid: &str, step: &'static str) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert((uid.to_string(), step))
    }
    fn release(&self, uid: &str, step: &'static str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&(uid.to_string(), step));
    }
}

/// Plays the node for the pods of `namespace` (all namespaces when None) matching `selector`.
pub fn start(client: kube::Client, namespace: Option<&str>, selector: &str, timing: Timing) -> Kubelet {
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().labels(selector);
    let in_flight = Arc::new(InFlight::default());
    let task = tokio::spawn(async move {
        let mut stream = watcher(pods, config).default_backoff().applied_objects().boxed();
        while let Some(event) = stream.next().await {
            let Ok(pod) = event else { continue };
            let (Some(name), Some(ns), Some(uid)) =
                (pod.metadata.name.clone(), pod.metadata.namespace.clone(), pod.metadata.uid.clone())
            else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let step = if pod.metadata.deletion_timestamp.is_some() {
                "stop"
            } else if timing.bind && !bound {
                "bind"
            } else if !started(&pod) {
                "start"
            } else if ready_is_stale(&pod) {
                "gates"
            } else {
                continue;
            };
            if !in_flight.claim(&uid, step) {
                continue;
            }
            let in_flight = Arc::clone(&in_flight);
            tokio::spawn(async move {
                tokio::time::sleep(match step {
                    "stop" => timing.stop,
                    "start" => timing.start,
                    _ => Duration::ZERO,
                })
                .await;
                // A node retries until the API server takes the write (it may be restarting);
                // a pod that no event will mention again must not be forgotten.
                for _ in 0..RETRIES {
                    let done = match step {
                        "stop" => finish_deletion(&api, &name, &uid).await,
                        "bind" => bind(&api, &name).await,
                        "gates" => follow_gates(&api, &name).await,
                        _ => report_ready(&api, &name).await,
                    };
                    if done {
                        // A later change of the gates is a new step.
                        if step == "gates" {
                            in_flight.release(&uid, step);
                        }
                        return;
                    }
                    tokio::time::sleep(RETRY).await;
                }
                in_flight.release(&uid, step);
            });
        }
    });
    Kubelet { task }
}

/// Attempts of one step, [`RETRY`] apart: two minutes of an API server away.
const RETRIES: u32 = 240;
const RETRY: Duration = Duration::from_millis(500);

/// Whether the write happened or can no longer happen (the pod is gone or changed).
fn settle(result: Result<(), kube::Error>) -> bool {
    match result {
        Ok(()) => true,
        Err(kube::Error::Api(e)) => e.code == 404 || e.code == 409,
        Err(_) => false,
    }
}

/// Binds the pod `name` to [`NODE`].
pub async fn bind(api: &Api<Pod>, name: &str) -> bool {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}
    });
    SENT.fetch_add(1, Ordering::Relaxed);
    let bound = api.create_subresource::<_, serde_json::Value>("binding", name, &PostParams::default(), &binding).await;
    settle(bound.map(drop))
}

/// Pod IPs handed out, one per pod started, so that EndpointSlices list each pod apart.
static STARTED: AtomicU32 = AtomicU32::new(0);

/// Reports the pod `name` Running with its containers ready and an address of its own; `Ready`
/// as its readiness gates say.
pub async fn report_ready(api: &Api<Pod>, name: &str) -> bool {
    SENT.fetch_add(1, Ordering::Relaxed);
    let pod = match api.get(name).await {
        Ok(pod) => pod,
        Err(e) => return settle(Err(e)),
    };
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, (n & 0xff).max(1));
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..PatchParams::default() };
    let status = started_status(&pod, &ip);
    SENT.fetch_add(1, Ordering::Relaxed);
    settle(api.patch_status(name, &params, &Patch::Strategic(&status)).await.map(drop))
}

/// Sets the pod's `Ready` condition to what its readiness gates say now.
pub async fn follow_gates(api: &Api<Pod>, name: &str) -> bool {
    SENT.fetch_add(1, Ordering::Relaxed);
    let pod = match api.get(name).await {
        Ok(pod) => pod,
        Err(e) => return settle(Err(e)),
    };
    if !ready_is_stale(&pod) {
        return true;
    }
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..PatchParams::default() };
    SENT.fetch_add(1, Ordering::Relaxed);
    settle(api.patch_status(name, &params, &Patch::Strategic(&ready_status(&pod))).await.map(drop))
}

async fn finish_deletion(api: &Api<Pod>, name: &str, uid: &str) -> bool {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    SENT.fetch_add(1, Ordering::Relaxed);
    settle(api.delete(name, &params).await.map(drop))
}

// The kubelet's readiness rule, written here from Kubernetes' documentation of pod readiness
// ("Pod readiness gates": a pod is ready only when all its containers are ready and every
// condition its readiness gates name is True; a gate whose condition is missing counts as False),
// and not taken from kvpilot's own in-process kubelet, so that the tests of kvpilot's gates do not
// check kvpilot against itself.

fn condition_is_true(pod: &Pod, type_: &str) -> bool {
    let conditions = pod.status.iter().flat_map(|s| s.conditions.iter().flatten());
    conditions.into_iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether a kubelet reports the pod Ready, given its containers are ready.
fn gates_open(pod: &Pod) -> bool {
    let gates = pod.spec.iter().flat_map(|s| s.readiness_gates.iter().flatten());
    gates.into_iter().all(|gate| condition_is_true(pod, &gate.condition_type))
}

/// Whether a started pod's `Ready` condition disagrees with its containers and gates.
fn ready_is_stale(pod: &Pod) -> bool {
    condition_is_true(pod, "ContainersReady") && condition_is_true(pod, "Ready") != gates_open(pod)
}

fn status_word(ready: bool) -> &'static str {
    if ready { "True" } else { "False" }
}

/// What a kubelet reports once the pod's containers started and pass their probes.
fn started_status(pod: &Pod, pod_ip: &str) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    json!({"status": {
        "phase": "Running",
        "podIP": pod_ip,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": status_word(gates_open(pod)), "lastTransitionTime": now}
        ]
    }})
}

/// The `Ready` condition of a started pod after its gates changed.
fn ready_status(pod: &Pod) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    json!({"status": {"conditions": [{"type": "Ready", "status": status_word(gates_open(pod)), "lastTransitionTime": now}]}})
}
