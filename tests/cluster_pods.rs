//! Decode pods on the real kube-apiserver, etcd and kube-controller-manager of
//! `scripts/control-plane.sh`: SGLang pods with probes, volumes, RDMA pass-throughs and the
//! cache runtime as a native sidecar are accepted; a multi-node replica's ranks get DNS names (the EndpointSlice controller's hostname
//! records for the headless Service, what cluster DNS serves); through the readiness gate
//! `kvpilot.dev/group-ready` no rank is Ready until every rank is, and a lost rank turns the
//! others' gate False before its group is restarted; the fleet's PodDisruptionBudget refuses to
//! evict a second group while one is down; a new revision replaces groups whole;
//! an `extraArgs` flag kvpilot decides is refused; a group that keeps failing is made again at
//! growing intervals; every pod kvpilot makes gets a Burstable or Guaranteed QoS class from the
//! API server. Scaling decode through the `/scale` subresource, as an HPA does, brings prefill to
//! ceil(decode × ratio) within its bounds; with `--pod-monitors` each fleet gets a PodMonitor as
//! the Prometheus Operator's own CRD (`scripts/third-party-crds.sh`) stores it, and a clear warning
//! while that CRD is missing; the autoscaling examples (an HPA, a KEDA ScaledObject checked
//! against KEDA's CRD) are accepted.

mod common;
mod fleet;
mod kubelet;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use common::cluster::{Cluster, TestNamespace, examples_in, text, wait_for_blocking, yaml_documents};
use fleet::{DECODE_PODS, Fleet, condition, is_ready, label, until};
use kubelet::Timing;
use kvpilot::controller::desired::GROUP_READY;

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

/// Plays the node for pods the fleet's kubelet leaves alone: binds them, reports them started,
/// and makes them Ready once the controller opens their readiness gates.
async fn start_by_hand(fleet: &Fleet, names: &[&str]) {
    for name in names {
        assert!(kubelet::bind(&fleet.pods(), name).await, "bind {name}");
        assert!(kubelet::report_ready(&fleet.pods(), name).await, "start {name}");
    }
    until(&format!("{names:?} Ready behind their open readiness gates"), async || {
        for name in names {
            kubelet::follow_gates(&fleet.pods(), name).await;
            pod_named(fleet, name).await.filter(is_ready)?;
        }
        Some(())
    })
    .await;
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

    // Rank 0's containers are up, rank 1's are not: the group is not ready on any rank, so rank 0
    // is not Ready (its readiness gate waits on rank 1) and no endpoint is offered yet.
    until("rank 0 started but held back by its group, the replica not ready", async || {
        let rank0 = pod_named(&fleet, &rank0).await?;
        let gate = pod_condition(&rank0, GROUP_READY)?;
        let resource = fleet.deployments().get(&name).await.ok()?;
        let decode = resource.status.as_ref()?.decode.clone()?;
        (pod_condition(&rank0, "ContainersReady")?.status == "True"
            && gate.status == "False"
            && gate.reason.as_deref() == Some("RankNotReady")
            && !is_ready(&rank0)
            && decode.replicas == 1
            && decode.ready_replicas == 0
            && decode.endpoints.is_empty())
        .then_some(())
    })
    .await;
    assert_eq!(condition(&fleet.deployments().get(&name).await.unwrap(), "Ready").unwrap().status, "False");

    start_by_hand(&fleet, &[&rank1]).await;
    let ready = fleet.converged(&name, 1).await;
    let endpoints = ready.status.unwrap().decode.unwrap().endpoints;
    assert_eq!(endpoints, [format!("http://{rank0}.{service}.{}.svc:30000", fleet.ns())]);
    // The names cluster DNS serves for the ranks (`rank.service.namespace.svc`).
    until("the EndpointSlice controller names both ranks", async || {
        (dns_hostnames(&fleet, &service).await == [rank0.clone(), rank1.clone()]).then_some(())
    })
    .await;

    for pod_name in [&rank0, &rank1] {
        let pod = pod_named(&fleet, pod_name).await.unwrap();
        assert!(is_ready(&pod), "{pod_name}: every rank Ready once the group is");
    }

    // Deleting one rank takes the whole replica down: the other rank's readiness gate turns False
    // before the group is recreated (watched, so no moment is missed); it comes back whole.
    let old: Vec<String> = fleet.pods_of(&name).await.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let rank0_uid = pod_named(&fleet, &rank0).await.unwrap().uid().unwrap();
    let unready_before_replaced = {
        let config = watcher::Config::default().fields(&format!("metadata.name={rank0}"));
        let mut stream = watcher(fleet.pods(), config).applied_objects().boxed();
        tokio::spawn(async move {
            while let Some(Ok(pod)) = stream.next().await {
                if pod.uid().as_deref() != Some(rank0_uid.as_str()) {
                    continue;
                }
                if pod_condition(&pod, GROUP_READY).is_some_and(|c| c.status == "False") {
                    return pod.metadata.deletion_timestamp.is_none();
                }
                if pod.metadata.deletion_timestamp.is_some() {
                    return false;
                }
            }
            false
        })
    };
    fleet
        .pods()
        .delete(&rank1, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() })
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(60), unready_before_replaced).await.unwrap().unwrap(),
        "rank 0's kvpilot.dev/group-ready turned False before it was deleted for the group's recreation"
    );
    let replacement =
        until_pods(&fleet, &name, 2, |pods| pods.iter().all(|p| !old.contains(&p.uid().unwrap_or_default()))).await;
    let held = replacement.iter().find(|p| label(p, "kvpilot.dev/rank") == "1").unwrap().name_any();
    start_by_hand(&fleet, &[&held]).await;
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

fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Marks the pod `name` as a kubelet does when its readiness probe starts failing.
async fn fail_readiness(fleet: &Fleet, name: &str) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {"conditions": [
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}
    ]}});
    fleet.pods().patch_status(name, &PatchParams::default(), &Patch::Strategic(&status)).await.unwrap();
}

/// The fleet's PodDisruptionBudget as the disruption controller has counted it:
/// (expected pods, currently healthy, disruptions allowed).
async fn budget_counts(fleet: &Fleet, name: &str) -> Option<(i32, i32, i32)> {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(fleet.cluster.client().await, fleet.ns());
    let budget = budgets.get_opt(name).await.ok()??;
    let status = budget.status?;
    (status.observed_generation == budget.metadata.generation).then_some((
        status.expected_pods,
        status.current_healthy,
        status.disruptions_allowed,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_never_takes_a_second_group_down_while_one_is_down() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    // The kubelet runs group 1; the test plays the node for group 0, which it takes down itself.
    let fleet =
        Fleet::with_kubelet_for(&cluster, "pods-pdb", quick(), &format!("{DECODE_PODS},kvpilot.dev/ordinal!=0")).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"] = json!({"replicas": 2, "tensorParallel": 4, "nodesPerReplica": 2});
    }));
    let group = |replica: u32| [format!("{name}-decode-{replica}-0"), format!("{name}-decode-{replica}-1")];
    until("group 0 is created", async || {
        for pod_name in group(0) {
            pod_named(&fleet, &pod_name).await?;
        }
        Some(())
    })
    .await;
    let [rank0, rank1] = group(0);
    start_by_hand(&fleet, &[&rank0, &rank1]).await;
    fleet.converged(&name, 2).await;
    let budget = format!("{name}-decode");
    until("the budget allows one pod down, which breaks one group", async || {
        (budget_counts(&fleet, &budget).await? == (4, 4, 1)).then_some(())
    })
    .await;

    // Rank 1 of group 0 fails its readiness probe: the controller closes group 0's gates, rank 0
    // follows (its kubelet is the test), and the whole group is down.
    fail_readiness(&fleet, &group(0)[1]).await;
    until("rank 0 of group 0 is held back by its group", async || {
        kubelet::follow_gates(&fleet.pods(), &group(0)[0]).await;
        pod_named(&fleet, &group(0)[0]).await.filter(|p| !is_ready(p)).map(drop)
    })
    .await;
    until("the budget counts group 0 as down and allows nothing more", async || {
        (budget_counts(&fleet, &budget).await? == (4, 2, 0)).then_some(())
    })
    .await;

    // A drain reaching group 1 is refused; group 0's pods, which serve nothing, may go.
    let evictions: Api<Pod> = Api::namespaced(cluster.client_without_retries().await, fleet.ns());
    for pod_name in group(1) {
        match evictions.evict(&pod_name, &EvictParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429, "{pod_name}: {status:?}"),
            other => panic!("{pod_name} was evicted while group 0 is down: {other:?}"),
        }
    }
    evictions.evict(&group(0)[0], &EvictParams::default()).await.expect("an unready rank may be evicted");
    operator.assert_no_failures().await;
}

/// How a test sends its evictions: all at once, or one after another in either order.
#[derive(Clone, Copy, Debug)]
enum Arrival {
    Together,
    Ascending,
    Descending,
}

/// Evicts each of `pods` as `arrival` says; the outcome of each, in the order of `pods`.
async fn evict_all(api: &Api<Pod>, pods: &[String], arrival: Arrival) -> Vec<Result<(), kube::Error>> {
    let evict = |name: String| {
        let api = api.clone();
        async move { api.evict(&name, &EvictParams::default()).await.map(drop) }
    };
    match arrival {
        Arrival::Together => {
            // Every request is in flight before any is answered, as when a drain evicts a node's
            // pods from parallel goroutines.
            let start = Arc::new(tokio::sync::Barrier::new(pods.len()));
            let tasks: Vec<_> = pods
                .iter()
                .map(|name| {
                    let (start, evict) = (Arc::clone(&start), evict(name.clone()));
                    tokio::spawn(async move {
                        start.wait().await;
                        evict.await
                    })
                })
                .collect();
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.expect("eviction task"));
            }
            outcomes
        }
        Arrival::Ascending | Arrival::Descending => {
            let mut order: Vec<usize> = (0..pods.len()).collect();
            if matches!(arrival, Arrival::Descending) {
                order.reverse();
            }
            let mut outcomes: Vec<Option<Result<(), kube::Error>>> = pods.iter().map(|_| None).collect();
            for i in order {
                outcomes[i] = Some(evict(pods[i].clone()).await);
            }
            outcomes.into_iter().map(Option::unwrap).collect()
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_arriving_before_kvpilot_reacts_break_at_most_max_unavailable_groups() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    let fleet = Fleet::with_kubelet_for(&cluster, "pods-evict", quick(), DECODE_PODS).await;
    let mut operator = fleet.operator(&[], &[]);
    // A fleet per case: an eviction counts as a failure of its fleet, and a fleet evicted three
    // times would wait out the recovery backoff before it is whole again.
    let cases: Vec<(i32, Arrival)> = [1, 2]
        .into_iter()
        .flat_map(|max_unavailable| {
            [Arrival::Together, Arrival::Ascending, Arrival::Descending].map(|arrival| (max_unavailable, arrival))
        })
        .collect();
    let names: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, (max_unavailable, _))| {
            fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
                o["metadata"]["name"] = json!(format!("evict-{i}"));
                o["spec"]["decode"] = json!({
                    "replicas": 3, "tensorParallel": 4, "nodesPerReplica": 2, "maxUnavailable": max_unavailable
                });
            }))
        })
        .collect();
    let mut allowed = Vec::new();
    for name in &names {
        fleet.converged(name, 3).await;
        let budget = format!("{name}-decode");
        let mut last = String::new();
        let counted =
            fleet::wait_for_or(&format!("{budget} counts 6 healthy pods"), fleet::SETTLE, &mut last, async |last| {
                let counts = budget_counts(&fleet, &budget).await?;
                *last = format!("{counts:?}");
                (counts.0 == 6 && counts.1 == 6).then_some(counts.2)
            })
            .await;
        allowed.push(counted);
    }

    let evictions: Api<Pod> = Api::namespaced(cluster.client_without_retries().await, fleet.ns());
    for ((max_unavailable, arrival), name) in cases.iter().zip(&names) {
        // Rank 0 of every group: were each eviction allowed, every group would be broken.
        let rank0: Vec<String> = (0..3).map(|replica| format!("{name}-decode-{replica}-0")).collect();
        let mut uids = Vec::new();
        for pod in &rank0 {
            uids.push(pod_named(&fleet, pod).await.and_then(|p| p.uid()).expect(pod));
        }
        let outcomes = evict_all(&evictions, &rank0, *arrival).await;
        for (pod, outcome) in rank0.iter().zip(&outcomes) {
            if let Err(error) = outcome {
                assert!(
                    matches!(error, kube::Error::Api(status) if status.code == 429),
                    "{arrival:?}, maxUnavailable {max_unavailable}: {pod} refused otherwise than by its budget: {error:?}"
                );
            }
        }
        // The groups that lost a pod, as the API server has them: rank 0 gone, terminating or new.
        let mut broken = 0;
        for (pod, uid) in rank0.iter().zip(&uids) {
            let now = fleet.pods().get_opt(pod).await.unwrap();
            if now.is_none_or(|p| p.metadata.deletion_timestamp.is_some() || p.uid().as_ref() != Some(uid)) {
                broken += 1;
            }
        }
        let evicted = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(broken, evicted, "{arrival:?}: every group whose eviction was allowed lost its pod, no other");
        assert!(
            (1..=*max_unavailable as usize).contains(&broken),
            "{arrival:?}, maxUnavailable {max_unavailable}: {broken} of 3 groups broken: {outcomes:?}"
        );
        if !matches!(arrival, Arrival::Together) {
            assert_eq!(broken, *max_unavailable as usize, "{arrival:?}: the budget allows exactly that many");
        }
    }
    let wanted: Vec<i32> = cases.iter().map(|(max_unavailable, _)| *max_unavailable).collect();
    assert_eq!(allowed, wanted, "each budget allowed maxUnavailable pods down");
    operator.assert_no_failures().await;
}

/// Plays a node on which the pod `name` starts and its server exits at once.
async fn crash(fleet: &Fleet, name: &str) {
    assert!(kubelet::bind(&fleet.pods(), name).await, "bind {name}");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Failed",
        "containerStatuses": [{
            "name": "sglang", "image": "sglang", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}
        }]
    }});
    fleet.pods().patch_status(name, &PatchParams::default(), &Patch::Strategic(&status)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_keeps_failing_is_made_again_at_growing_intervals() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    // No kubelet runs this fleet's pods: the test crashes every rank 1 it sees, and starts rank 0.
    let fleet = Fleet::with_kubelet_for(&cluster, "pods-backoff", quick(), "kvpilot.dev/none=none").await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"] = json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2});
    }));
    // Each generation of the group: when its rank 1 appeared, crashed at once.
    let mut generations: Vec<(String, std::time::Instant)> = Vec::new();
    let started = std::time::Instant::now();
    while generations.len() < 6 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "only {} generations: {generations:?}",
            generations.len()
        );
        let crashing = fleet.pods_of(&name).await.into_iter().find(|p| {
            label(p, "kvpilot.dev/rank") == "1"
                && p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Failed")
        });
        if let Some(pod) = crashing {
            let uid = pod.uid().unwrap();
            if !generations.iter().any(|(seen, _)| *seen == uid) {
                generations.push((uid, std::time::Instant::now()));
                crash(&fleet, &pod.name_any()).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gaps: Vec<Duration> = generations.windows(2).map(|pair| pair[1].1 - pair[0].1).collect();
    // The first failures are recovered from at once; past three in ten minutes the waits double.
    assert!(gaps[..3].iter().all(|gap| *gap < Duration::from_secs(8)), "{gaps:?}");
    assert!(gaps[3] >= Duration::from_secs(10) && gaps[4] >= Duration::from_secs(20), "{gaps:?}");
    assert!(gaps[4] > gaps[3], "growing intervals: {gaps:?}");
    let resource = fleet.deployments().get(&name).await.unwrap();
    let degraded = condition(&resource, "Degraded").unwrap();
    assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", "ReplicasKeepFailing"));
    assert!(
        degraded.message.contains(&format!("rank 1 ({name}-decode-"))
            && degraded.message.contains("failed: container sglang Error (exit code 1)"),
        "{}",
        degraded.message
    );
    let recovery = resource.status.unwrap().decode.unwrap().recovery.unwrap();
    assert!(recovery.failures.len() >= 5 && recovery.retry_after.is_some(), "{recovery:?}");
    // Each failure is an event naming the rank and why it ended (a series once they repeat).
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(fleet.client.clone(), fleet.ns());
    let events = events.list(&ListParams::default()).await.unwrap().items;
    let failed: Vec<_> = events.iter().filter(|e| e.reason.as_deref() == Some("ReplicaFailed")).collect();
    assert!(
        failed.iter().any(|e| e.note.as_deref().is_some_and(|n| n.contains("rank 1") && n.contains("exit code 1"))),
        "{failed:?}"
    );
    operator.assert_no_failures().await;
}

/// The QoS class the API server gave each pod of `fleet`'s namespace, by name.
async fn qos_classes(fleet: &Fleet) -> BTreeMap<String, String> {
    let pods = fleet.pods().list(&ListParams::default()).await.unwrap().items;
    pods.iter()
        .map(|pod| {
            let class = pod.status.as_ref().and_then(|s| s.qos_class.clone()).unwrap_or_default();
            (pod.name_any(), class)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_kvpilot_creates_is_burstable_or_guaranteed_as_the_api_server_classes_it() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    let fleet = Fleet::new(&cluster, "pods-qos", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    // A PD service: decode with the cache runtime and its installer (defaults: Burstable), a
    // Guaranteed prefill fleet, and the router's Deployment, whose pod the ReplicaSet
    // controller creates.
    let name = fleet.create(&fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(1);
        o["spec"]["disaggregation"].as_object_mut().unwrap().remove("retractionBackup");
        o["spec"]["cache"] = json!({"offload": true, "capacity": "1Gi"});
        o["spec"]["prefill"]["qos"] = json!("Guaranteed");
    }));
    let expected = [(format!("{name}-decode-0"), "Burstable"), (format!("{name}-prefill-0"), "Guaranteed")];
    let classes = qos_classes_once_created(&fleet, &name, &expected).await;
    for (pod, class) in &expected {
        assert_eq!(classes.get(pod).map(String::as_str), Some(*class), "{pod}: {classes:?}");
    }
    let router: Vec<(&String, &String)> =
        classes.iter().filter(|(pod, _)| pod.starts_with(&format!("{name}-router-"))).collect();
    assert!(!router.is_empty(), "the router's pod: {classes:?}");
    for (pod, class) in classes.iter() {
        assert!(["Burstable", "Guaranteed"].contains(&class.as_str()), "{pod} is {class}: {classes:?}");
    }
    operator.assert_no_failures().await;
}

/// The pods' QoS classes once `expected` pods and a router pod exist.
async fn qos_classes_once_created(fleet: &Fleet, name: &str, expected: &[(String, &str)]) -> BTreeMap<String, String> {
    let mut last = String::new();
    fleet::wait_for_or("the decode, prefill and router pods exist", fleet::SETTLE, &mut last, async |last| {
        let classes = qos_classes(fleet).await;
        let router = classes.keys().any(|pod| pod.starts_with(&format!("{name}-router-")));
        let all = expected.iter().all(|(pod, _)| classes.contains_key(pod));
        let status = fleet.deployments().get(name).await.ok().and_then(|r| r.status);
        *last = format!("pods {classes:?}, status {status:?}");
        (router && all).then_some(classes)
    })
    .await
}

/// The prefill pods of `name` that are not terminating.
async fn live_prefill_pods(fleet: &Fleet, name: &str) -> Vec<Pod> {
    let selector = format!("app.kubernetes.io/name=kvpilot-prefill,app.kubernetes.io/instance={name}");
    let pods = fleet.pods().list(&ListParams::default().labels(&selector)).await.expect("list pods").items;
    pods.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Waits until `name` runs `decode` ready decode replicas and `prefill` ready prefill replicas,
/// with both desired counts in status and the pods there to count.
async fn scaled_to(fleet: &Fleet, name: &str, decode: i32, prefill: i32) {
    fleet.converged(name, decode as usize).await;
    until(&format!("{name}: {prefill} prefill replicas for {decode} decode replicas"), async || {
        let resource = fleet.deployments().get(name).await.ok()?;
        let status = resource.status.as_ref()?;
        let (decode_status, prefill_status) = (status.decode.as_ref()?, status.prefill.as_ref()?);
        let pods = live_prefill_pods(fleet, name).await;
        (status.observed_generation == resource.metadata.generation
            && decode_status.desired_replicas == decode
            && prefill_status.desired_replicas == prefill
            && prefill_status.replicas == prefill
            && prefill_status.ready_replicas == prefill
            && pods.len() == prefill as usize
            && pods.iter().all(is_ready))
        .then_some(())
    })
    .await;
}

/// Sets the decode replicas through the scale subresource, as an HPA or KEDA does, and checks
/// what it reads back there.
async fn scale_decode(fleet: &Fleet, name: &str, replicas: i32) {
    let patch = json!({"spec": {"replicas": replicas}});
    let scale = fleet.deployments().patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(replicas));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_decode_through_its_scale_subresource_keeps_prefill_at_its_ratio_within_bounds() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "pods-scale", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    // Prefill follows decode at 0.5 within 2..4; no router (nothing here reads it).
    let name = fleet.create(&fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        let prefill = o["spec"]["prefill"].as_object_mut().unwrap();
        prefill.insert("ratio".into(), json!(0.5));
        prefill.insert("minReplicas".into(), json!(2));
        prefill.insert("maxReplicas".into(), json!(4));
        o["spec"]["decode"]["replicas"] = json!(2);
        o["spec"]["router"] = json!({"enabled": false});
    }));
    // 2 decode: ceil(2 × 0.5) = 1, raised to minReplicas 2.
    scaled_to(&fleet, &name, 2, 2).await;
    let scale = fleet.deployments().get_scale(&name).await.unwrap();
    let status = scale.status.unwrap();
    assert_eq!(status.replicas, 2, "the scale subresource reads the decode replicas");
    let selector = status.selector.unwrap();
    assert!(selector.contains("app.kubernetes.io/name=kvpilot-decode"), "an HPA averages over decode pods: {selector}");

    // 6 decode: ceil(6 × 0.5) = 3, within the bounds.
    scale_decode(&fleet, &name, 6).await;
    scaled_to(&fleet, &name, 6, 3).await;
    assert_eq!(fleet.deployments().get(&name).await.unwrap().spec.decode.replicas, 6, "/scale set spec.decode");

    // 9 decode: ceil(9 × 0.5) = 5, capped by maxReplicas 4.
    scale_decode(&fleet, &name, 9).await;
    scaled_to(&fleet, &name, 9, 4).await;

    // And back: 4 decode, ceil(4 × 0.5) = 2.
    scale_decode(&fleet, &name, 4).await;
    scaled_to(&fleet, &name, 4, 2).await;
    operator.assert_no_failures().await;
}

const POD_MONITOR_CRD: &str = "crd/podmonitors.monitoring.coreos.com";

/// The stored PodMonitor `name`, or None.
fn pod_monitor(cluster: &Cluster, namespace: &str, name: &str) -> Option<serde_json::Value> {
    cluster.get_json(&["podmonitors.monitoring.coreos.com", name, "-n", namespace])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_monitors_are_made_per_fleet_once_their_crd_is_served_and_go_with_their_fleet() {
    let cluster = cluster_or_skip!();
    // Only this test touches PodMonitors: start from a cluster without the Prometheus Operator.
    cluster.kubectl_ok(&["delete", "--ignore-not-found", "--wait", "--timeout=120s", POD_MONITOR_CRD]);
    let fleet = Fleet::new(&cluster, "pods-monitor", quick()).await;
    let mut operator = fleet.operator(&["--pod-monitors"], &[]);
    let name = fleet.create(&fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["router"] = json!({"enabled": false});
        // Decode offload with an explicit host_pool backup is refused (S4): SGLang's choice instead.
        o["spec"]["disaggregation"].as_object_mut().unwrap().remove("retractionBackup");
        o["spec"]["cache"] = json!({"offload": true, "capacity": "1Gi"});
    }));

    // No PodMonitor API: the servers run all the same, and status and the log say what to do.
    fleet.converged(&name, 2).await;
    let warning = {
        let mut found = None;
        until("status warns that PodMonitors cannot be made", async || {
            let resource = fleet.deployments().get(&name).await.ok()?;
            let warnings = resource.status?.warnings;
            found = warnings.into_iter().find(|w| w.contains("--pod-monitors"));
            found.as_ref().map(drop)
        })
        .await;
        found.unwrap()
    };
    assert!(
        warning.contains("metrics.podMonitor.enabled") && warning.contains("does not serve monitoring.coreos.com/v1"),
        "{warning}"
    );
    assert!(operator.process.logs().contains("PodMonitors cannot be made"), "{}", operator.process.logs());
    for pod in fleet.pods_of(&name).await {
        let annotations = pod.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key("prometheus.io/scrape"), "PodMonitors, not annotations, were asked for");
    }

    // The Prometheus Operator's own CRD: a PodMonitor per fleet, as the API server stores it.
    cluster.install_crd_file(
        &common::cluster::third_party_crds().join("prometheus-operator/monitoring.coreos.com_podmonitors.yaml"),
        POD_MONITOR_CRD,
    );
    let uid = fleet.deployments().get(&name).await.unwrap().metadata.uid.unwrap();
    for (fleet_name, app, ports) in
        [("decode", "kvpilot-decode", &["http", "cache-metrics"][..]), ("prefill", "kvpilot-prefill", &["http"][..])]
    {
        let monitor_name = format!("{name}-{fleet_name}");
        let stored = wait_for_blocking(&format!("the PodMonitor {monitor_name}"), fleet::SETTLE, || {
            pod_monitor(&cluster, fleet.ns(), &monitor_name)
        });
        let owner = &stored["metadata"]["ownerReferences"][0];
        assert_eq!((owner["kind"].as_str(), owner["uid"].as_str()), (Some("InferenceDeployment"), Some(uid.as_str())));
        assert_eq!(
            stored["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/instance": name, "app.kubernetes.io/name": app}),
            "{stored}"
        );
        let endpoints = stored["spec"]["podMetricsEndpoints"].as_array().unwrap();
        let stored_ports: Vec<&str> = endpoints.iter().filter_map(|e| e["port"].as_str()).collect();
        assert_eq!(stored_ports, ports, "{stored}");
        assert!(endpoints.iter().all(|e| e["path"] == "/metrics"), "{stored}");
        let keep = &endpoints[0]["relabelings"][0];
        assert_eq!(
            (keep["action"].as_str(), keep["regex"].as_str()),
            (Some("keep"), Some("0")),
            "SGLang's metrics from rank 0 only: {stored}"
        );
        // The selected pods are the fleet's, and carry the ports the endpoints name.
        let selector = format!("app.kubernetes.io/instance={name},app.kubernetes.io/name={app}");
        let pods = fleet.pods().list(&ListParams::default().labels(&selector)).await.unwrap().items;
        assert!(!pods.is_empty());
        for pod in &pods {
            let spec = pod.spec.as_ref().unwrap();
            let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
            let named: Vec<String> =
                containers.flat_map(|c| c.ports.iter().flatten().filter_map(|p| p.name.clone())).collect();
            assert!(ports.iter().all(|p| named.iter().any(|n| n == p)), "{}: ports {named:?}", pod.name_any());
        }
    }
    until("the warning is gone once PodMonitors are made", async || {
        let resource = fleet.deployments().get(&name).await.ok()?;
        (!resource.status?.warnings.iter().any(|w| w.contains("--pod-monitors"))).then_some(())
    })
    .await;

    // The prefill fleet goes, and its PodMonitor with it; decode's stays.
    fleet.patch_spec(&name, json!({"prefill": null, "router": null})).await;
    let prefill_monitor = format!("{name}-prefill");
    wait_for_blocking("the prefill PodMonitor is deleted", fleet::SETTLE, || {
        pod_monitor(&cluster, fleet.ns(), &prefill_monitor).is_none().then_some(())
    });
    assert!(pod_monitor(&cluster, fleet.ns(), &format!("{name}-decode")).is_some());
    operator.assert_no_failures().await;
}

/// Server-side dry-run create with strict field validation: what the API server (and a CRD's
/// schema) would store, without storing it.
fn dry_run(cluster: &Cluster, object: &serde_json::Value) -> Result<String, String> {
    let out = cluster.kubectl_with_input(
        &["create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-"],
        &object.to_string(),
    );
    if out.status.success() { Ok(text(&out.stdout)) } else { Err(text(&out.stderr)) }
}

#[test]
fn the_autoscaling_examples_are_accepted_and_scale_an_example_inference_deployment() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    cluster.install_crd_file(
        &common::cluster::third_party_crds().join("keda/keda.sh_scaledobjects.yaml"),
        "crd/scaledobjects.keda.sh",
    );
    let namespace = TestNamespace::create(&cluster, "pods-autoscaling");
    let examples: Vec<serde_json::Value> =
        examples_in("default").into_iter().map(|(_, o)| o).filter(|o| o["kind"] == "InferenceDeployment").collect();
    for (file, kind) in [("hpa.yaml", "HorizontalPodAutoscaler"), ("keda-scaledobject.yaml", "ScaledObject")] {
        let documents = yaml_documents(&common::cluster::repo(&format!("examples/autoscaling/{file}")));
        assert_eq!(documents.len(), 1, "{file}");
        let mut object = documents.into_iter().next().unwrap();
        assert_eq!(object["kind"], kind, "{file}");
        // It scales the decode fleet of an InferenceDeployment the examples define, in its namespace.
        let target = object["spec"]["scaleTargetRef"].clone();
        assert_eq!(
            (target["apiVersion"].as_str(), target["kind"].as_str()),
            (Some("kvpilot.dev/v1alpha1"), Some("InferenceDeployment"))
        );
        let scaled = examples
            .iter()
            .find(|e| e["metadata"]["name"] == target["name"])
            .unwrap_or_else(|| panic!("{file}: {} is no example", target["name"]));
        assert_eq!(object["metadata"]["namespace"], "default", "{file}: beside {}", scaled["metadata"]["name"]);
        assert!(scaled["spec"]["prefill"]["ratio"].is_number(), "{file}: its prefill fleet follows decode");
        object["metadata"]["namespace"] = json!(namespace.name);
        let stored: serde_json::Value =
            serde_json::from_str(&dry_run(&cluster, &object).unwrap_or_else(|e| panic!("{file} refused: {e}")))
                .unwrap();
        assert_eq!(stored["spec"]["scaleTargetRef"]["name"], target["name"], "{file}");
        match kind {
            "HorizontalPodAutoscaler" => {
                let metric = &stored["spec"]["metrics"][0];
                assert_eq!(
                    (metric["type"].as_str(), metric["pods"]["metric"]["name"].as_str()),
                    (Some("Pods"), Some("sglang:num_queue_reqs"))
                );
            }
            _ => {
                let queries: Vec<&str> = stored["spec"]["triggers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|t| t["metadata"]["query"].as_str())
                    .collect();
                for metric in ["sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:token_usage"] {
                    assert!(queries.iter().any(|q| q.contains(metric)), "{file}: no trigger on {metric}: {queries:?}");
                }
                assert!(stored["spec"]["triggers"].as_array().unwrap().iter().all(|t| t["type"] == "prometheus"));
            }
        }
        // A field the kind does not have is refused, so the acceptance above means something.
        let mut broken = object.clone();
        broken["spec"]["scaleTargetRef"]["replicas"] = json!(3);
        assert!(dry_run(&cluster, &broken).is_err(), "{file}: strict validation refuses unknown fields");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_is_admitted_where_the_namespace_enforces_the_restricted_pod_security_level() {
    let cluster = cluster_or_skip!();
    ensure_node(&cluster);
    let fleet = Fleet::new(&cluster, "pods-restricted", quick()).await;
    let enforce =
        ["pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest"];
    let out = cluster.kubectl(&["label", "namespace", fleet.ns(), enforce[0], enforce[1]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The API server's PodSecurity admission enforces it: a pod with no security context is refused.
    let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": fleet.ns()},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let out = cluster.kubectl_with_input(&["create", "-f", "-"], &bare.to_string());
    let refusal = text(&out.stderr);
    assert!(!out.status.success() && refusal.contains("violates PodSecurity \"restricted:latest\""), "{refusal}");

    let _operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(1);
    }));
    // The ReplicaSet controller creates the router's pod, which PodSecurity admits.
    let selector = format!("app.kubernetes.io/name=kvpilot-router,app.kubernetes.io/instance={name}");
    let mut last = String::new();
    let pod = fleet::wait_for_or("the router's pod is admitted", fleet::SETTLE, &mut last, async |last| {
        let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
            Api::namespaced(fleet.client.clone(), fleet.ns());
        let conditions: Vec<String> = replica_sets
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?
            .items
            .iter()
            .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
            .map(|c| format!("{}: {}", c.type_, c.message.clone().unwrap_or_default()))
            .collect();
        *last = format!("ReplicaSet conditions {conditions:?}");
        fleet.pods().list(&ListParams::default().labels(&selector)).await.ok()?.items.into_iter().next()
    })
    .await;
    let container = &pod.spec.unwrap().containers[0];
    let limits = container.resources.as_ref().and_then(|r| r.limits.clone()).unwrap_or_default();
    assert!(limits.contains_key("memory"), "the router's memory is bounded: {:?}", container.resources);
}

/// Every example's rendered pods and router Deployment, created for real in namespaces whose
/// PodSecurity admission enforces `baseline` and `restricted`: kube-apiserver's verdict on what
/// kvpilot builds at the level each resource gets (`spec.security.level`, else the strictest its
/// settings allow). The RDMA examples need `privileged`, which `kvpilot check` says.
#[test]
fn every_example_s_pods_are_admitted_at_the_pod_security_level_kvpilot_builds_them_for() {
    let cluster = cluster_or_skip!();
    let enforcing = |level: &str| {
        let namespace = TestNamespace::create(&cluster, &format!("kvp-pss-{level}"));
        let labels = [
            format!("pod-security.kubernetes.io/enforce={level}"),
            "pod-security.kubernetes.io/enforce-version=latest".into(),
        ];
        cluster.kubectl_ok(&["label", "namespace", &namespace.name, &labels[0], &labels[1]]);
        namespace
    };
    let (baseline, restricted) = (enforcing("baseline"), enforcing("restricted"));
    // Rendered objects of `file` (with `edit` applied to its resource) that PodSecurity judges, and
    // the router's ServiceAccount.
    let rendered = |file: &str, edit: &dyn Fn(&mut serde_json::Value)| -> Vec<serde_json::Value> {
        let mut documents = yaml_documents(&common::repo(&format!("examples/{file}")));
        documents.iter_mut().for_each(edit);
        let manifests = documents.iter().map(|d| serde_json::to_string(d).unwrap()).collect::<Vec<_>>().join("\n---\n");
        let out = common::kvpilot_with_input(&["render", "-f", "-", "-o", "json", "--offline"], &manifests);
        assert!(out.status.success(), "{file}: {}", text(&out.stderr));
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| ["Pod", "Deployment", "ServiceAccount"].contains(&o["kind"].as_str().unwrap()))
            .cloned()
            .collect()
    };
    let create = |namespace: &str, object: &serde_json::Value| {
        let mut object = object.clone();
        object["metadata"]["namespace"] = json!(namespace);
        // The owner does not exist here: the garbage collector would delete what it owns.
        object["metadata"].as_object_mut().unwrap().remove("ownerReferences");
        let out = cluster.kubectl_with_input(&["create", "-f", "-"], &object.to_string());
        (out.status.success(), text(&out.stderr))
    };
    let rdma = ["deepseek-v3-tp16-multinode.yaml", "deepseek-v3-tp16-volcano.yaml"];
    let mut routers = Vec::new();
    let mut pods = 0;
    for path in common::cluster::yaml_files("examples") {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if file.ends_with("-rejected.yaml") {
            continue; // its settings are refused: nothing is rendered
        }
        let objects = rendered(&file, &|_| {});
        let needs_privileged = rdma.contains(&file.as_str());
        for object in &objects {
            let what = format!("{file}: {} {}", object["kind"], object["metadata"]["name"]);
            for (namespace, level) in [(&baseline.name, "baseline"), (&restricted.name, "restricted")] {
                let (admitted, refusal) = create(namespace, object);
                if object["kind"] == "ServiceAccount" {
                    // The router's own, which its pods need to be created at all.
                    assert!(admitted, "{what}: {refusal}");
                } else if object["kind"] == "Deployment" {
                    assert!(admitted, "{what}: {refusal}");
                    if level == "restricted" {
                        routers.push(object["metadata"]["name"].as_str().unwrap().to_string());
                    }
                } else if needs_privileged {
                    assert!(!admitted && refusal.contains("\"IPC_LOCK\""), "{what} admitted at {level}: {refusal}");
                } else {
                    assert!(admitted, "{what} refused at {level}: {refusal}");
                    pods += 1;
                }
            }
        }
        if needs_privileged {
            let out = common::kvpilot(&["check", "-f", &path.to_string_lossy(), "--offline"]);
            let report = text(&out.stdout);
            assert!(
                out.status.success()
                    && report.contains(
                        "the server pods need the Pod Security level privileged (spec.decode.capabilities IPC_LOCK"
                    ),
                "{file}: {report}"
            );
        }
    }
    assert!(pods >= 2 * 8, "every example but the RDMA ones rendered pods: {pods} admitted");
    // The router Deployments' pods, created by the ReplicaSet controller, pass `restricted` too.
    for router in &routers {
        wait_for_blocking(&format!("{router}'s pod admitted at restricted"), Duration::from_secs(60), || {
            let out = cluster.kubectl(&[
                "get",
                "pods",
                "-n",
                &restricted.name,
                "-l",
                "app.kubernetes.io/name=kvpilot-router",
                "-o",
                "name",
            ]);
            text(&out.stdout).contains(router.as_str()).then_some(())
        });
    }
    assert!(!routers.is_empty());
    // The check can fail: a resource run as the image's root user is refused where restricted is enforced.
    let as_root = rendered("llama-3.1-8b-full.yaml", &|d| d["spec"]["security"] = json!({"level": "baseline"}));
    let pod = as_root.iter().find(|o| o["kind"] == "Pod").unwrap();
    let (admitted, refusal) = create(&restricted.name, pod);
    assert!(!admitted && refusal.contains("violates PodSecurity \"restricted:latest\""), "{refusal}");
    assert!(
        create(&baseline.name, &{
            let mut p = pod.clone();
            p["metadata"]["name"] = json!("as-root");
            p
        })
        .0
    );
}
