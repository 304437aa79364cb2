//! A stand-in for the kubelet: reports pods Running and Ready through the API after a delay,
//! the way a node would once a container's readiness probe passes, and Deployments with their
//! pods ready. There is no container. As a kubelet does, it holds a pod's `Ready` condition
//! back until every readiness gate of the pod is True, and follows the gates as they change.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

fn condition(pod: &Pod, type_: &str) -> Option<bool> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status == "True")
}

/// Whether every readiness gate of the pod has its condition True (a pod without gates passes).
pub fn gates_pass(pod: &Pod) -> bool {
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref());
    gates.into_iter().flatten().all(|gate| condition(pod, &gate.condition_type) == Some(true))
}

/// What a kubelet's `Ready` condition is for this pod: its containers ready, every gate True.
pub fn should_be_ready(pod: &Pod) -> bool {
    condition(pod, "ContainersReady") == Some(true) && gates_pass(pod)
}

/// Whether the pod's `Ready` condition is not what [`should_be_ready`] says, once it started.
pub fn ready_is_stale(pod: &Pod) -> bool {
    condition(pod, "ContainersReady") == Some(true) && condition(pod, "Ready") != Some(should_be_ready(pod))
}

/// The status a kubelet reports for a started pod, its `Ready` following the gates; a strategic
/// merge patch, so conditions others own (the gates') stay.
pub fn started_status(pod: &Pod, pod_ip: &str) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ready = if gates_pass(pod) { "True" } else { "False" };
    json!({"status": {
        "phase": "Running",
        "podIP": pod_ip,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now}
        ]
    }})
}

/// The `Ready` condition of a started pod after its gates changed.
pub fn ready_status(pod: &Pod) -> Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ready = if should_be_ready(pod) { "True" } else { "False" };
    json!({"status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": now}]}})
}

/// Marks every pod whose labels match `selector` started `delay` after it first appears, and
/// keeps its `Ready` condition in step with its readiness gates, until the returned task is
/// aborted.
pub fn spawn(client: kube::Client, selector: &str, delay: Duration) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let mut stream = watcher(pods, config).default_backoff().applied_objects().boxed();
        while let Some(event) = stream.next().await {
            let Ok(pod) = event else { continue };
            let (Some(name), Some(namespace)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone()) else {
                continue;
            };
            let started = condition(&pod, "ContainersReady") == Some(true);
            if started && !ready_is_stale(&pod) {
                continue;
            }
            let client = client.clone();
            tokio::spawn(async move {
                if !started {
                    tokio::time::sleep(delay).await;
                }
                let api: Api<Pod> = Api::namespaced(client, &namespace);
                let status = if started { ready_status(&pod) } else { started_status(&pod, "10.0.0.1") };
                // Retry as a kubelet does; a pod deleted meanwhile is simply gone.
                for _ in 0..100 {
                    match api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status)).await {
                        Err(kube::Error::Api(e)) if e.code == 404 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        Ok(_) => return,
                    }
                }
            });
        }
    })
}

/// Stands in for the Deployment controller and the kubelets of its pods together: reports every
/// Deployment whose labels match `selector` with all its replicas ready `delay` after it first
/// appears (the in-process server runs no Deployment controller), until the task is aborted.
pub fn spawn_deployments(client: kube::Client, selector: &str, delay: Duration) -> tokio::task::JoinHandle<()> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let mut stream = watcher(deployments, config).default_backoff().applied_objects().boxed();
        while let Some(event) = stream.next().await {
            let Ok(deployment) = event else { continue };
            let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let ready = deployment.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
            if ready == wanted {
                continue;
            }
            let (Some(name), Some(namespace)) =
                (deployment.metadata.name.clone(), deployment.metadata.namespace.clone())
            else {
                continue;
            };
            let client = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let api: Api<Deployment> = Api::namespaced(client, &namespace);
                let status = json!({"status": {
                    "replicas": wanted, "readyReplicas": wanted, "availableReplicas": wanted, "updatedReplicas": wanted
                }});
                for _ in 0..100 {
                    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await {
                        Err(kube::Error::Api(e)) if e.code == 404 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        Ok(_) => return,
                    }
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_waits_on_every_readiness_gate() {
        let pod = |gate: Option<&str>| -> Pod {
            let mut conditions = vec![json!({"type": "ContainersReady", "status": "True"})];
            conditions.extend(gate.map(|status| json!({"type": "kvpilot.dev/group-ready", "status": status})));
            serde_json::from_value(json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [], "readinessGates": [{"conditionType": "kvpilot.dev/group-ready"}]},
                "status": {"conditions": conditions}
            }))
            .unwrap()
        };
        assert!(!should_be_ready(&pod(None)), "a gate without its condition holds Ready back");
        assert!(!should_be_ready(&pod(Some("False"))));
        assert!(should_be_ready(&pod(Some("True"))));
        assert!(ready_is_stale(&pod(Some("True"))), "no Ready condition yet");
    }
}
