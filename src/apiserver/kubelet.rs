//! A stand-in for the kubelet: reports pods Running and Ready through the API after a delay,
//! the way a node would once a container's readiness probe passes, and Deployments with their
//! pods ready. There is no container.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Marks every pod whose labels match `selector` Ready `delay` after it first appears,
/// until the returned task is aborted.
pub fn spawn(client: kube::Client, selector: &str, delay: Duration) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let mut stream = watcher(pods, config).default_backoff().applied_objects().boxed();
        while let Some(event) = stream.next().await {
            let Ok(pod) = event else { continue };
            if is_ready(&pod) {
                continue;
            }
            let (Some(name), Some(namespace)) = (pod.metadata.name.clone(), pod.metadata.namespace.clone()) else {
                continue;
            };
            let client = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let api: Api<Pod> = Api::namespaced(client, &namespace);
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {
                    "phase": "Running",
                    "podIP": "10.0.0.1",
                    "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}
                    ]
                }});
                // Retry as a kubelet does; a pod deleted meanwhile is simply gone.
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

/// Stands in for the Deployment controller and the kubelets of its pods together: reports every
/// Deployment whose labels match `selector` rolled out, all its replicas ready at its current
/// generation, `delay` after it first appears or its spec changes (the in-process server runs no
/// Deployment controller), until the task is aborted.
pub fn spawn_deployments(client: kube::Client, selector: &str, delay: Duration) -> tokio::task::JoinHandle<()> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let mut stream = watcher(deployments, config).default_backoff().applied_objects().boxed();
        while let Some(event) = stream.next().await {
            let Ok(deployment) = event else { continue };
            let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let ready = deployment.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
            let generation = deployment.metadata.generation;
            let seen = deployment.status.as_ref().and_then(|s| s.observed_generation);
            if ready == wanted && seen == generation {
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
                    "observedGeneration": generation,
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
