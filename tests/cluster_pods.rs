//! Decode pods on the real kube-apiserver, etcd and kube-controller-manager of
//! `scripts/control-plane.sh`: SGLang pods with probes, volumes, RDMA pass-throughs and the
//! cache runtime as a native sidecar are accepted; a multi-node replica's ranks get DNS names (the EndpointSlice controller's hostname
//! records for the headless Service, what cluster DNS serves); the replica is Ready only when
//! every rank is; deleting one rank restarts its group; a new revision replaces groups whole;
//! an `extraArgs` flag kvpilot decides is refused.

mod common;
mod fleet;
mod kubelet;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use fleet::{DECODE_PODS, Fleet, condition, is_ready, label, until};
use kubelet::Timing;

fn quick() -> Timing {
    Timing::new(Duration::from_millis(200), Duration::from_millis(300))
}

/// The Node the test kubelet binds pods to: the EndpointSlice controller lists only pods on a
/// Node it knows.
fn ensure_node(cluster: &common::cluster::Cluster) {
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": kubelet::NODE}});
    let out = cluster.kubectl_with_input(&["apply", "--server-side", "-f", "-"], &node.to_string());
    assert!(out.status.success(), "{}", common::cluster::text(&out.stderr));
}

fn args_of(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().unwrap().containers[0].args.clone().unwrap_or_default()
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

async fn pod_named(fleet: &Fleet, name: &str) -> Option<Pod> {
    fleet.pods().get_opt(name).await.ok().flatten().filter(|p| p.metadata.deletion_timestamp.is_none())
}

/// Plays the node for a pod the fleet's kubelet leaves alone: binds it and reports it Ready.
async fn start_by_hand(fleet: &Fleet, name: &str) {
    assert!(kubelet::bind(&fleet.pods(), name).await, "bind {name}");
    assert!(kubelet::report_ready(&fleet.pods(), name).await, "ready {name}");
}

/// Hostnames the EndpointSlices of `service` give the pods behind it.
async fn dns_hostnames(fleet: &Fleet, service: &str) -> Vec<String> {
    let slices: Api<EndpointSlice> = Api::namespaced(fleet.cluster.client().await, fleet.ns());
    let selector = format!("kubernetes.io/service-name={service}");
    let mut names: Vec<String> = slices
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .flat_map(|s| s.endpoints.iter().filter_map(|e| e.hostname.clone()))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_node_replica_is_named_counted_and_restarted_as_one() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    // The kubelet runs rank 0 only; the test starts rank 1 itself, when it chooses.
    let fleet =
        Fleet::with_kubelet_for(&cluster, "pods-group", quick(), &format!("{DECODE_PODS},kvpilot.dev/rank!=1")).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"] = json!({
            "replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2, "hostNetwork": true,
            "capabilities": ["IPC_LOCK"], "extraResources": {"rdma/rdma_shared_device_a": "1"},
            "ibDevice": "mlx5_0", "shmSize": "8Gi"
        });
        o["spec"]["model"]["source"] =
            json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "weights"}}, "path": "llama"}});
        // Decode offload with an explicit host_pool backup is refused (S4): SGLang's choice instead.
        o["spec"]["disaggregation"].as_object_mut().unwrap().remove("retractionBackup");
        o["spec"]["cache"] = json!({"offload": true, "capacity": "1Gi"});
    }));
    let service = format!("{name}-decode");
    let (rank0, rank1) = (format!("{name}-decode-0-0"), format!("{name}-decode-0-1"));
    until("both ranks are created", async || {
        (pod_named(&fleet, &rank0).await.is_some() && pod_named(&fleet, &rank1).await.is_some()).then_some(())
    })
    .await;
    for (rank, pod_name) in [&rank0, &rank1].into_iter().enumerate() {
        let pod = pod_named(&fleet, pod_name).await.unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            (spec.hostname.as_deref(), spec.subdomain.as_deref()),
            (Some(pod_name.as_str()), Some(service.as_str()))
        );
        assert_eq!((spec.restart_policy.as_deref(), spec.host_network), (Some("Never"), Some(true)));
        let args = args_of(&pod);
        assert_eq!(flag(&args, "--node-rank"), Some(rank.to_string()));
        assert_eq!(flag(&args, "--dist-init-addr"), Some(format!("{rank0}.{service}.{}.svc:5000", fleet.ns())));
        assert_eq!(flag(&args, "--model-path").as_deref(), Some("/models/llama"));
        let sglang = &spec.containers[0];
        let limits = sglang.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!((limits["nvidia.com/gpu"].0.as_str(), limits["rdma/rdma_shared_device_a"].0.as_str()), ("2", "1"));
        assert!(sglang.startup_probe.is_some() && sglang.readiness_probe.is_some() && sglang.liveness_probe.is_some());
        // The cache runtime, accepted by the API server as a native sidecar.
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["install-connector", "cache-runtime"]);
        assert_eq!(init[1].restart_policy.as_deref(), Some("Always"));
    }

    // Rank 0 is up, rank 1 is not: the replica is not ready and no endpoint is offered yet.
    until("rank 0 ready, the replica not", async || {
        let rank0_ready = pod_named(&fleet, &rank0).await.is_some_and(|p| is_ready(&p));
        let resource = fleet.deployments().get(&name).await.ok()?;
        let decode = resource.status.as_ref()?.decode.clone()?;
        (rank0_ready && decode.replicas == 1 && decode.ready_replicas == 0 && decode.endpoints.is_empty()).then_some(())
    })
    .await;
    assert_eq!(condition(&fleet.deployments().get(&name).await.unwrap(), "Ready").unwrap().status, "False");

    start_by_hand(&fleet, &rank1).await;
    let ready = fleet.converged(&name, 1).await;
    let endpoints = ready.status.unwrap().decode.unwrap().endpoints;
    assert_eq!(endpoints, [format!("http://{rank0}.{service}.{}.svc:30000", fleet.ns())]);
    // The names cluster DNS serves for the ranks (`rank.service.namespace.svc`).
    until("the EndpointSlice controller names both ranks", async || {
        (dns_hostnames(&fleet, &service).await == [rank0.clone(), rank1.clone()]).then_some(())
    })
    .await;

    // Deleting one rank takes the whole replica down; it comes back whole.
    let old: Vec<String> = fleet.pods_of(&name).await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    fleet
        .pods()
        .delete(&rank1, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
        .await
        .unwrap();
    let replacement =
        until_pods(&fleet, &name, 2, |pods| pods.iter().all(|p| !old.contains(&p.uid().unwrap_or_default()))).await;
    let held = replacement.iter().find(|p| label(p, "kvpilot.dev/rank") == "1").unwrap().name_any();
    start_by_hand(&fleet, &held).await;
    fleet.converged(&name, 1).await;
    operator.assert_no_failures().await;
}

/// Waits until `name` has `count` live pods for which `check` holds, and returns them.
async fn until_pods(fleet: &Fleet, name: &str, count: usize, check: impl Fn(&[Pod]) -> bool) -> Vec<Pod> {
    let mut found = Vec::new();
    until(&format!("{count} new pods of {name}"), async || {
        let pods: Vec<Pod> =
            fleet.pods_of(name).await.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        if pods.len() == count && check(&pods) {
            found = pods;
            Some(())
        } else {
            None
        }
    })
    .await;
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_replaces_groups_whole_within_max_unavailable() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "pods-roll", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"] = json!({"replicas": 3, "tensorParallel": 2, "nodesPerReplica": 2});
    }));
    fleet.converged(&name, 3).await;

    // Watch every pod of the resource through the rollout: a replica's live ranks never run two
    // revisions, and at most one replica (maxUnavailable 1) is short of ready ranks.
    let seen: Arc<Mutex<BTreeMap<String, Pod>>> =
        Arc::new(Mutex::new(fleet.pods_of(&name).await.into_iter().map(|p| (p.name_any(), p)).collect()));
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let watch = {
        let (seen, violations) = (Arc::clone(&seen), Arc::clone(&violations));
        let config = watcher::Config::default().labels(&format!("{DECODE_PODS},app.kubernetes.io/instance={name}"));
        let mut stream = watcher(fleet.pods(), config).applied_objects().boxed();
        tokio::spawn(async move {
            while let Some(Ok(pod)) = stream.next().await {
                let mut seen = seen.lock().unwrap();
                seen.insert(pod.name_any(), pod);
                let mut replicas: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
                for pod in seen.values().filter(|p| p.metadata.deletion_timestamp.is_none()) {
                    replicas.entry(label(pod, "kvpilot.dev/ordinal").to_string()).or_default().push(pod);
                }
                for (ordinal, ranks) in &replicas {
                    let revisions: std::collections::BTreeSet<&str> =
                        ranks.iter().map(|p| label(p, "kvpilot.dev/revision")).collect();
                    if revisions.len() > 1 {
                        violations.lock().unwrap().push(format!("replica {ordinal} mixes revisions {revisions:?}"));
                    }
                }
                let ready = replicas.values().filter(|r| r.len() == 2 && r.iter().all(|p| is_ready(p))).count();
                if ready + 1 < 3 {
                    violations.lock().unwrap().push(format!("{ready} ready replicas of 3 mid-rollout"));
                }
            }
        })
    };
    let before: Vec<String> =
        fleet.pods_of(&name).await.iter().map(|p| label(p, "kvpilot.dev/revision").to_string()).collect();
    fleet.patch_spec(&name, json!({"decode": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}})).await;
    let after = fleet.converged(&name, 3).await;
    watch.abort();
    let pods = fleet.pods_of(&name).await;
    assert_eq!(pods.len(), 6);
    assert!(
        pods.iter().all(|p| !before.contains(&label(p, "kvpilot.dev/revision").to_string())),
        "every group replaced"
    );
    assert_eq!(after.status.unwrap().decode.unwrap().endpoints.len(), 3);
    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:?}");
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_args_setting_a_flag_kvpilot_decides_are_refused_in_status() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "pods-owned", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["extraArgs"] =
            json!(["--disaggregation-decode-retraction-backup=cpu_tensor", "--trust-remote-code"]);
    }));
    until("SettingsValid=False with POD1", async || {
        let resource = fleet.deployments().get(&name).await.ok()?;
        let settings = condition(&resource, "SettingsValid")?;
        (settings.status == "False" && settings.reason == "POD1").then_some(())
    })
    .await;
    let resource = fleet.deployments().get(&name).await.unwrap();
    let message = condition(&resource, "SettingsValid").unwrap().message.clone();
    assert!(message.contains("spec.disaggregation.retractionBackup"), "{message}");
    assert!(fleet.pods_of(&name).await.is_empty(), "no pods for refused settings");

    // Set through its field instead, the same setting runs.
    fleet
        .patch_spec(
            &name,
            json!({"decode": {"extraArgs": ["--trust-remote-code"]}, "disaggregation": {"retractionBackup": "cpu_tensor"}}),
        )
        .await;
    fleet.converged(&name, 2).await;
    for pod in fleet.pods_of(&name).await {
        let args = args_of(&pod);
        assert_eq!(flag(&args, "--disaggregation-decode-retraction-backup").as_deref(), Some("cpu_tensor"));
        assert_eq!(args.last().map(String::as_str), Some("--trust-remote-code"));
    }
    operator.assert_no_failures().await;
}
