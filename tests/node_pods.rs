//! kvpilot's pods started by a real kubelet: the node of `scripts/node.sh` (kubelet v1.37.2 with
//! containerd and runc, kube-scheduler, fake GPUs from a test device plugin) joined to the control
//! plane of `scripts/control-plane.sh`. Nothing here plays the node: the scheduler places each
//! pod, the kubelet runs its containers, and readiness comes from the pods' own probes.
//!
//! The operator runs from the kvpilot image as the Helm chart deploys it. What is overridden, and
//! nothing else: the chart's `image` (the locally built kvpilot image), `sglangImage` (the stand-in
//! SGLang image of tests/node/standin: `python3 -m sglang.launch_server` and
//! `sglang_router.launch_router` are test programs, not SGLang), and `watchNamespace` (each test
//! has its own operator in its own namespace, the chart's namespace-scoped mode); each fleet's
//! `resources` (100m CPU and 256Mi) and `shmSize` (64Mi) and the router's `resources`, since what
//! kvpilot requests for a GPU server (2 CPUs per GPU, /dev/shm and 4Gi per rank) would not fit this
//! 2-core machine; in the DeepSeek example `spec.cache.capacity` shrinks from 64Gi to 64Mi, since
//! the sidecar's memory request is sized from it; its weights claim is bound to a host directory
//! holding the example's config.json. The two ranks of its group run on the one node, whose
//! plugin advertises 32 GPUs (four 8-GPU nodes' worth).
//!
//! Without `KVPILOT_NODE_DIR` (set by `scripts/test.sh`) the tests say they are skipped.

mod common;
mod node;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kvpilot::controller::desired::GROUP_READY;
use serde_json::{Value, json};

use common::cluster::{Cluster, HelmRelease, examples_in, repo, succeeded, text, wait_for_blocking};
use node::{
    Node, PodHistory, SeenPod, condition, container, http_get, is_ready, metric, pod_ip, ready_pods, standin_report,
    started_at,
};

/// Long enough for pods to start (or stop) on a loaded 2-core machine, with room for a missed
/// startup probe (every 30 s); failures show the pods' states and the events.
const START: Duration = Duration::from_secs(300);

/// The operator from the kvpilot image, as `helm install` of charts/kvpilot deploys it, watching
/// `namespace`; waits until its Deployment is available (its pods Ready through their probes).
fn install_operator(cluster: &Cluster, node: &Node, namespace: &str, release: &str) -> HelmRelease {
    let (repository, tag) = node.kvpilot_image();
    let values = [
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        format!("sglangImage={}", node.standin_image()),
        format!("watchNamespace={namespace}"),
        // The cache runtime's default (1 CPU) would leave no room on the 2-core node.
        "cacheRuntime.cpu=100m".to_string(),
    ];
    let mut args = Vec::new();
    for value in &values {
        args.extend(["--set", value.as_str()]);
    }
    let release = HelmRelease::install(cluster, release, namespace, &args);
    let deployment = format!("deployment/{}", release.fullname());
    let out = cluster.kubectl(&["rollout", "status", &deployment, "-n", namespace, "--timeout=300s"]);
    assert!(
        out.status.success(),
        "the operator did not become available: {}\n{}",
        text(&out.stderr),
        text(&cluster.kubectl(&["get", "pods,events", "-n", namespace, "-o", "wide"]).stdout)
    );
    release
}

/// The CRD, applied by each test (they start together on a fresh control plane): `kubectl wait`
/// fails rather than waits while the new CRD has no conditions yet, so it is asked again.
fn install_crd(cluster: &Cluster) {
    succeeded("kubectl apply crds/", cluster.kubectl(&common::cluster::APPLY_CRDS));
    wait_for_blocking("the CRD Established", Duration::from_secs(60), || {
        let out = cluster.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=10s",
            "crd/inferencedeployments.kvpilot.dev",
        ]);
        out.status.success().then_some(())
    });
}

/// `kubectl apply` of `object`, retried while the operator's webhook has no endpoint yet (the
/// API server reaches it through its Service's endpoints, published after its pods are Ready).
fn apply(cluster: &Cluster, object: &Value) {
    let mut last = String::new();
    wait_for_blocking("the InferenceDeployment to be admitted", Duration::from_secs(90), || {
        let out = cluster.kubectl_with_input(&["apply", "-f", "-"], &object.to_string());
        last = text(&out.stderr);
        if out.status.success() {
            return Some(());
        }
        assert!(last.contains("webhook"), "kubectl apply refused {}: {last}", object["metadata"]["name"]);
        std::thread::sleep(Duration::from_secs(1));
        None
    });
}

/// Deletes cluster-scoped objects a test made, also when it fails.
struct DeleteOnDrop {
    cluster: Cluster,
    what: Vec<String>,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let mut args = vec!["delete", "--ignore-not-found", "--wait=false"];
        args.extend(self.what.iter().map(String::as_str));
        let _ = self.cluster.kubectl(&args);
    }
}

/// An example in `namespace`, sized for this node (see the module's header).
fn example(namespace: &str, file: &str) -> Value {
    let mut resource =
        examples_in(namespace).into_iter().find(|(f, _)| f == file).unwrap_or_else(|| panic!("no example {file}")).1;
    let spec = resource["spec"].as_object_mut().unwrap();
    let small = json!({"requests": {"cpu": "100m", "memory": "256Mi"}});
    for fleet in ["decode", "prefill"] {
        if let Some(fleet) = spec.get_mut(fleet).and_then(Value::as_object_mut) {
            fleet.insert("resources".into(), small.clone());
            fleet.insert("shmSize".into(), json!("64Mi"));
        }
    }
    if spec.contains_key("prefill") {
        let router = spec.entry("router").or_insert_with(|| json!({}));
        router["resources"] = json!({"requests": {"cpu": "50m", "memory": "64Mi"}});
    }
    resource
}

/// The scheduler, not a test, placed the pod on the node: PodScheduled, and the Scheduled event
/// from default-scheduler.
fn assert_scheduled(cluster: &Cluster, node: &Node, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap();
    let namespace = pod.metadata.namespace.as_deref().unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some(node.name()), "{name}");
    assert_eq!(node::condition(pod, "PodScheduled"), Some("True"), "{name}");
    let selector = format!(
        "involvedObject.name={name},involvedObject.uid={},reason=Scheduled",
        pod.metadata.uid.as_deref().unwrap()
    );
    let events = cluster.kubectl(&["get", "events", "-n", namespace, "--field-selector", &selector, "-o", "json"]);
    let events: Value = serde_json::from_slice(&events.stdout).unwrap();
    let by_scheduler = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["reportingComponent"] == "default-scheduler" || e["source"]["component"] == "default-scheduler");
    assert!(by_scheduler, "{name} has no Scheduled event from default-scheduler: {events}");
}

/// The fake devices the kubelet allocated to a container, as the device plugin told it
/// (`NVIDIA_VISIBLE_DEVICES`, `KVPILOT_TEST_DEVICES_<NAME>`), from the stand-in's environment.
fn devices(report: &Value, variable: &str) -> BTreeSet<String> {
    report["env"][variable]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect()
}

/// What a server pod with the cache runtime shows on the node: the connector installed first, the
/// sidecar serving before the server started, the server's page round trip through the sidecar
/// byte for byte, and the sidecar's own counters having moved those bytes.
async fn assert_cache_pod(node: &Node, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap();
    let installer = container(pod, "install-connector");
    let terminated = installer.state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(terminated.map(|t| t.exit_code), Some(0), "{name}: install-connector {:?}", installer.state);
    let sidecar = container(pod, "cache-runtime");
    assert!(sidecar.ready && sidecar.started == Some(true), "{name}: cache-runtime {sidecar:?}");
    assert_eq!(sidecar.restart_count, 0, "{name}: the sidecar restarted");
    assert_eq!(container(pod, "sglang").restart_count, 0, "{name}: the server restarted");
    // Start order: from the kubelet's container statuses (whole seconds), from the runtime's
    // own times (nanoseconds), and from the server's first instant (the socket already answered).
    let installed = terminated.unwrap().finished_at.as_ref().unwrap().0;
    let (sidecar_started, server_started) = (started_at(pod, "cache-runtime"), started_at(pod, "sglang"));
    assert!(
        installed <= sidecar_started && sidecar_started <= server_started,
        "{name}: installer done {installed}, sidecar {sidecar_started}, server {server_started}"
    );
    let runtime = node.runtime_containers(pod);
    let time = |container: &str, field: &str| -> i64 {
        runtime[container][field]
            .as_i64()
            .unwrap_or_else(|| panic!("{name}: the runtime has no {field} of {container}: {runtime}"))
    };
    assert!(
        time("install-connector", "finished_at") < time("cache-runtime", "started_at")
            && time("cache-runtime", "started_at") < time("sglang", "started_at"),
        "{name}: the runtime's start times are out of order: {runtime}"
    );

    let report = standin_report(pod, 30000).await;
    assert_eq!(
        report["socket"]["accepted_at_start"], true,
        "{name}: the sidecar's socket did not answer when the server started: {report}"
    );
    let cache = &report["hicache"];
    assert_eq!(cache["connector_file"], "/opt/kvpilot-py/kvpilot_sglang/hicache.py", "{name}: {report}");
    assert!(cache["mode"].as_str().unwrap().starts_with("zero-copy"), "{name}: {cache}");
    let last = &cache["last"];
    assert_eq!(last["ok"], true, "{name}: {report}");
    let (pages, page_bytes) = (last["pages"].as_u64().unwrap(), last["page_bytes"].as_u64().unwrap());
    assert_eq!(
        (last["stored"].as_u64(), last["read_back"].as_u64(), last["mismatched_bytes"].as_u64()),
        (Some(pages), Some(pages), Some(0)),
        "{name}: {last}"
    );
    assert_eq!(last["never_written_key_missed"], true, "{name}: {last}");
    assert_eq!(cache["failures"], 0, "{name}: a round trip failed since start: {cache}");

    let (status, metrics) = http_get(pod_ip(pod), 9400, "/metrics").await.expect("the sidecar's metrics");
    assert_eq!(status, 200);
    let moved = (pages * page_bytes) as f64;
    for counter in ["kvpilot_cache_set_bytes_total", "kvpilot_cache_get_bytes_total"] {
        assert!(metric(&metrics, counter) >= moved, "{name}: {counter} < {moved}:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_node_decode_group_with_the_cache_runtime_runs_recovers_and_leaves_nothing_on_a_real_kubelet() {
    let cluster = cluster_or_skip!();
    let node = node_or_skip!();
    install_crd(&cluster);
    let client = cluster.client().await;
    let namespace = format!("kvp-node-group-{}", std::process::id());
    let _operator = install_operator(&cluster, &node, &namespace, "kvpilot-group");

    // The example's weights claim, bound to a host directory with its config.json (what SGLang
    // reads first from --model-path).
    let mut resource = example(&namespace, "deepseek-v3-tp16-multinode.yaml");
    let weights = tempfile::tempdir_in(repo("target")).unwrap();
    std::fs::create_dir(weights.path().join("DeepSeek-V3")).unwrap();
    let config = &resource["spec"]["model"]["config"]["inline"];
    std::fs::write(weights.path().join("DeepSeek-V3/config.json"), config.to_string()).unwrap();
    let claim = resource["spec"]["model"]["source"]["volume"]["source"]["persistentVolumeClaim"]["claimName"]
        .as_str()
        .unwrap()
        .to_string();
    let volume = format!("{namespace}-weights");
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": weights.path(), "type": "Directory"},
                  "claimRef": {"namespace": namespace, "name": claim}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": namespace},
         "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": volume,
                  "resources": {"requests": {"storage": "1Gi"}}}}
    ]});
    let _volume = DeleteOnDrop { cluster: cluster.clone(), what: vec![format!("persistentvolume/{volume}")] };
    succeeded("kubectl create (weights)", cluster.kubectl_with_input(&["create", "-f", "-"], &objects.to_string()));
    resource["spec"]["cache"]["capacity"] = json!("64Mi");
    let name = resource["metadata"]["name"].as_str().unwrap().to_string();
    apply(&cluster, &resource);

    let selector = format!("app.kubernetes.io/instance={name}");
    let ranks = [format!("{name}-decode-0-0"), format!("{name}-decode-0-1")];
    let pods = ready_pods(&client, &namespace, &selector, &ranks, START).await;
    let mut seen: Vec<SeenPod> = pods.iter().map(|p| SeenPod::of(&node, p)).collect();
    let mut gpus = Vec::new();
    for pod in &pods {
        assert_scheduled(&cluster, &node, pod);
        assert_cache_pod(&node, pod).await;
        let report = standin_report(pod, 30000).await;
        assert_eq!(
            report["model"],
            json!({"path": "/models/DeepSeek-V3", "exists": true, "config_json": true, "read_only": true})
        );
        let rank = pod.metadata.labels.as_ref().unwrap()["kvpilot.dev/rank"].clone();
        assert_eq!(report["node_rank"].to_string(), rank, "{report}");
        assert_eq!(devices(&report, "KVPILOT_TEST_DEVICES_RDMA_SHARED_DEVICE_A").len(), 1, "{report}");
        gpus.push(devices(&report, "NVIDIA_VISIBLE_DEVICES"));
    }
    assert!(
        gpus.iter().all(|g| g.len() == 8) && gpus[0].is_disjoint(&gpus[1]),
        "each rank gets 8 GPUs of its own: {gpus:?}"
    );
    // Rank 1 finds rank 0 by the name in its --dist-init-addr: the node runs no cluster DNS, so
    // what DNS would answer is read where it comes from, the headless Service's EndpointSlice
    // (rank 0's hostname there, with rank 0's address).
    let argv: Vec<String> = serde_json::from_value(standin_report(&pods[1], 30000).await["argv"].clone()).unwrap();
    let init = &argv[argv.iter().position(|a| a == "--dist-init-addr").unwrap() + 1];
    let host = init.rsplit_once(':').unwrap().0;
    let [hostname, service, ns, "svc"] = host.split('.').collect::<Vec<_>>()[..] else {
        panic!("--dist-init-addr {init}")
    };
    assert_eq!(ns, namespace, "{init}");
    let slices = cluster
        .get_json(&["endpointslices", "-n", &namespace, "-l", &format!("kubernetes.io/service-name={service}")])
        .unwrap();
    let addresses: Vec<&Value> = slices["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .filter(|e| e["hostname"] == hostname)
        .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(hostname, ranks[0], "{init}");
    assert_eq!(addresses, [&json!(pod_ip(&pods[0]))], "{service}'s endpoints for {hostname}: {slices}");
    let ready_replicas = || {
        let resource = cluster.get_json(&["infd", &name, "-n", &namespace]).unwrap();
        resource["status"]["decode"]["readyReplicas"].as_u64()
    };
    wait_for_blocking("the group counted ready", Duration::from_secs(60), || {
        (ready_replicas() == Some(1)).then_some(())
    });

    // A rank's server dies, as SGLang's does on a fatal error. The rank cannot rejoin a running
    // group, so its pod does not restart (restartPolicy Never) and the kubelet fails it; kvpilot
    // closes the surviving rank's readiness gate before it deletes the group, so a rank whose own
    // probe still passes stops counting as ready, and the group comes back whole.
    let history = PodHistory::record(&client, &namespace, &selector).await;
    let (status, body) = http_get(pod_ip(&pods[1]), 30000, "/kvpilot-standin/die").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let pods =
        node::wait_group_replaced(&client, &namespace, &selector, &pods, "after a rank's server died", START).await;
    let [survivor, dead] = [0, 1].map(|rank| history.of(&seen[rank].uid));
    assert!(
        dead.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")),
        "the kubelet failed the rank whose server died:\n{}",
        node::describe(&dead)
    );
    let closed_in_time = survivor.iter().any(|p| {
        p.metadata.deletion_timestamp.is_none()
            && condition(p, "ContainersReady") == Some("True")
            && condition(p, GROUP_READY) == Some("False")
    });
    assert!(
        closed_in_time,
        "the surviving rank's gate closed while its own probe passed, before it was deleted:\n{}",
        node::describe(&survivor)
    );
    drop(history);
    seen.extend(pods.iter().map(|p| SeenPod::of(&node, p)));

    // A rank deleted: the group is restarted whole (SGLang cannot take a rank back), both ranks
    // come back Ready through their probes, and the page round trip works again.
    // The group that replaced the first may have a new ordinal: the rank is named as it runs now.
    let rank_1 = pods[1].metadata.name.as_deref().unwrap();
    succeeded("kubectl delete pod", cluster.kubectl(&["delete", "pod", rank_1, "-n", &namespace, "--wait=false"]));
    let replaced =
        node::wait_group_replaced(&client, &namespace, &selector, &pods, "after a rank was deleted", START).await;
    for pod in &replaced {
        assert_cache_pod(&node, pod).await;
        seen.push(SeenPod::of(&node, pod));
    }
    wait_for_blocking("the restarted group counted ready", Duration::from_secs(60), || {
        (ready_replicas() == Some(1)).then_some(())
    });

    // Deleted: the pods go, and the node keeps nothing of any of them.
    succeeded("kubectl delete infd", cluster.kubectl(&["delete", "infd", &name, "-n", &namespace, "--wait=false"]));
    node::wait_pods(&client, &namespace, &selector, "the group's pods gone", START, <[Pod]>::is_empty).await;
    node.assert_nothing_left(&seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pd_service_runs_on_a_real_kubelet_and_its_router_finds_both_fleets() {
    let cluster = cluster_or_skip!();
    let node = node_or_skip!();
    install_crd(&cluster);
    let client = cluster.client().await;
    let namespace = format!("kvp-node-pd-{}", std::process::id());
    let operator = install_operator(&cluster, &node, &namespace, "kvpilot-pd");
    let operator_pods = node::pods(&client, &namespace, &format!("app.kubernetes.io/instance={}", operator.name)).await;
    assert_eq!(operator_pods.len(), 2, "the chart's two replicas: {}", node::describe(&operator_pods));
    for pod in &operator_pods {
        assert!(is_ready(pod), "{}", node::describe(&operator_pods));
        assert_scheduled(&cluster, &node, pod);
    }

    let resource = example(&namespace, "llama-3.1-8b-full.yaml");
    let name = resource["metadata"]["name"].as_str().unwrap().to_string();
    apply(&cluster, &resource);
    let servers =
        format!("app.kubernetes.io/instance={name},app.kubernetes.io/name in (kvpilot-prefill,kvpilot-decode)");
    let names = [format!("{name}-decode-0"), format!("{name}-decode-1"), format!("{name}-prefill-0")];
    let pods = ready_pods(&client, &namespace, &servers, &names, START).await;
    let router_selector = format!("app.kubernetes.io/instance={name},app.kubernetes.io/name=kvpilot-router");
    let routers = node::wait_pods(&client, &namespace, &router_selector, "the router pod Ready", START, |pods| {
        pods.len() == 1 && is_ready(&pods[0])
    })
    .await;
    let mut seen = Vec::new();
    for pod in pods.iter().chain(&routers) {
        assert_scheduled(&cluster, &node, pod);
        seen.push(SeenPod::of(&node, pod));
    }

    // The prefill server's bootstrap port, where its annotation says the router finds it.
    let prefill = pods.iter().find(|p| p.metadata.name.as_deref() == Some(names[2].as_str())).unwrap();
    let bootstrap: u16 = prefill.metadata.annotations.as_ref().unwrap()["sglang.ai/bootstrap-port"].parse().unwrap();
    assert_eq!(http_get(pod_ip(prefill), bootstrap, "/health").await.map(|r| r.0), Ok(200));
    assert_eq!(standin_report(prefill, 30000).await["mode"], "prefill");

    // The router found both fleets through the API with its own ServiceAccount (in-cluster, the
    // kubernetes Service) and its selectors, and each server's health: its readiness probe says
    // so, and its report names them.
    // (It polls every 2 s: the report may trail the servers' readiness by one poll.)
    let healthy = |report: &Value, role: &str| -> Vec<String> {
        let mut names: Vec<String> = report["workers"][role]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["healthy"] == true)
            .map(|w| w["pod"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    let mut report = Value::Null;
    for _ in 0..30 {
        report = standin_report(&routers[0], 8000).await;
        if healthy(&report, "prefill") == [names[2].clone()]
            && healthy(&report, "decode") == [names[0].clone(), names[1].clone()]
            && report["error"].is_null()
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(healthy(&report, "prefill"), [names[2].clone()], "{report}");
    assert_eq!(healthy(&report, "decode"), [names[0].clone(), names[1].clone()], "{report}");

    let status = wait_for_blocking("the service Ready", Duration::from_secs(90), || {
        let resource = cluster.get_json(&["infd", &name, "-n", &namespace]).unwrap();
        let ready = resource["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
        (ready["status"] == "True").then_some(resource["status"].clone())
    });
    assert_eq!(status["endpoint"], format!("http://{name}-router.{namespace}.svc:8000"));
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["reason"], "ServiceReady", "{status}");

    succeeded("kubectl delete infd", cluster.kubectl(&["delete", "infd", &name, "-n", &namespace, "--wait=false"]));
    let everything = format!("app.kubernetes.io/instance={name}");
    node::wait_pods(&client, &namespace, &everything, "the service's pods gone", START, <[Pod]>::is_empty).await;
    node.assert_nothing_left(&seen).await;
}

/// One decode pod as kvpilot renders it (`kvpilot render`, the controller's own builder) with
/// the cache runtime, images pointed at the node's, as a bare Pod in `namespace`; and the
/// ConfigMap its `kvpilot.dev/model-config` annotation names.
fn rendered_cache_pod(node: &Node, namespace: &str) -> (Value, Value) {
    let mut resource = example(namespace, "llama-3.1-8b-full.yaml");
    let spec = resource["spec"].as_object_mut().unwrap();
    spec.remove("prefill");
    spec.remove("router");
    spec["decode"]["replicas"] = json!(1);
    spec.insert("cache".into(), json!({"offload": true, "capacity": "64Mi"}));
    // Decode offload builds its own host pool: SGLang refuses it beside host_pool retraction (S4).
    spec["disaggregation"]["retractionBackup"] = json!("cpu_tensor");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), resource.to_string()).unwrap();
    let (repository, tag) = node.kvpilot_image();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["render", "-o", "json", "-f", file.path().to_str().unwrap()])
        .args(["--sglang-image", node.standin_image(), "--runtime-image", &format!("{repository}:{tag}")])
        .args(["--cache-runtime-cpu", "100m"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_str(&succeeded("kvpilot render", out)).unwrap();
    let items = list["items"].as_array().unwrap();
    let mut pod = items.iter().find(|o| o["kind"] == "Pod").unwrap().clone();
    let config_map = items.iter().find(|o| o["kind"] == "ConfigMap").unwrap().clone();
    pod["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    // No operator runs beside these pods to open their group's readiness gate
    // (`kvpilot.dev/group-ready`), so Ready follows their own probes alone here; the tests that
    // run the operator keep the gate.
    let gates = pod["spec"].as_object_mut().unwrap().remove("readinessGates");
    assert!(gates.is_some(), "kvpilot renders the group readiness gate");
    (pod, config_map)
}

fn with_name(pod: &Value, suffix: &str) -> Value {
    let mut pod = pod.clone();
    let name = format!("{}-{suffix}", pod["metadata"]["name"].as_str().unwrap());
    pod["metadata"]["name"] = json!(name);
    pod["spec"]["hostname"] = json!(name);
    pod
}

fn containers_mut<'a>(pod: &'a mut Value, list: &str, name: &str) -> &'a mut Value {
    pod["spec"][list].as_array_mut().unwrap().iter_mut().find(|c| c["name"] == name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_pod_whose_server_misses_the_connector_or_the_socket_is_refused_by_check_and_never_gets_ready() {
    let cluster = cluster_or_skip!();
    let node = node_or_skip!();
    let client = cluster.client().await;
    let namespace = common::cluster::TestNamespace::create(&cluster, "kvp-node-broken");
    let ns = namespace.name.clone();
    let (pod, config_map) = rendered_cache_pod(&node, &ns);

    // As rendered, at the restricted Pod Security level: the server as UID 1000 with a read-only
    // root, the installer and the sidecar as 65532; the connector's files, the socket and the
    // memfd are shared across the users.
    let control = with_name(&pod, "as-rendered");
    // And as the image's root user, as `spec.security.level: baseline` runs it.
    let mut other_user = with_name(&pod, "server-as-root");
    other_user["spec"]["securityContext"] = Value::Null;
    containers_mut(&mut other_user, "containers", "sglang")["securityContext"] = Value::Null;
    // The installer writes the package one directory below the server's PYTHONPATH.
    let mut installer_elsewhere = with_name(&pod, "installer-elsewhere");
    let installer = containers_mut(&mut installer_elsewhere, "initContainers", "install-connector");
    assert_eq!(installer["args"], json!(["install-connector", "/opt/kvpilot-py"]));
    installer["args"] = json!(["install-connector", "/opt/kvpilot-py/lib"]);
    // The server mounts the socket's volume somewhere else than the path its argv names.
    let mut socket_elsewhere = with_name(&pod, "socket-elsewhere");
    let server = containers_mut(&mut socket_elsewhere, "containers", "sglang");
    let mount =
        server["volumeMounts"].as_array_mut().unwrap().iter_mut().find(|m| m["mountPath"] == "/run/kvpilot").unwrap();
    mount["mountPath"] = json!("/run/kvpilot-sidecar");

    // The API server's validation (a dry run) passes them; kvpilot's guard refuses each (POD10)
    // naming what the server misses, and passes the controls.
    let broken = [installer_elsewhere, socket_elsewhere];
    let check = |pod: &Value| {
        let mut pod = pod.clone();
        pod["metadata"]["namespace"] = json!(ns);
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [config_map, pod]});
        (list.clone(), common::kvpilot_with_input(&["check", "-f", "-"], &list.to_string()))
    };
    for (pod, refused) in [(&broken[0], "env PYTHONPATH"), (&broken[1], "--hicache-storage-backend-extra-config")] {
        let (list, out) = check(pod);
        succeeded(
            "kubectl create --dry-run=server",
            cluster.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &list.to_string()),
        );
        let report = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{report}");
        assert!(
            report.contains("1 checked: 0 valid, 0 rewritten, 1 rejected") && report.contains("✗ POD10"),
            "{report}"
        );
        assert!(report.contains(&format!("): {refused}: ")), "{report}");
    }
    for pod in [&control, &other_user] {
        let (_, out) = check(pod);
        let report = succeeded("kvpilot check", out);
        assert!(report.contains("1 checked: 1 valid"), "{report}");
    }

    let list =
        json!({"apiVersion": "v1", "kind": "List", "items": [config_map, control, other_user, broken[0], broken[1]]});
    succeeded("kubectl create", cluster.kubectl_with_input(&["create", "-n", &ns, "-f", "-"], &list.to_string()));
    let base = pod["metadata"]["name"].as_str().unwrap().to_string();
    let get = async |suffix: &str| -> Pod {
        let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &ns);
        api.get(&format!("{base}-{suffix}")).await.expect("get pod")
    };

    // The spec as kvpilot renders it runs, also with the server as root: the controls. At
    // restricted the server writes its HOME and /tmp (its caches' volumes) and not its root.
    let mut seen = Vec::new();
    for (suffix, uid, root_writable) in [("as-rendered", 1000, false), ("server-as-root", 0, true)] {
        let pod = node::ready_pod(&client, &ns, &format!("{base}-{suffix}"), START).await;
        assert_cache_pod(&node, &pod).await;
        let report = standin_report(&pod, 30000).await;
        assert_eq!(report["uid"], uid, "{base}-{suffix}");
        let writable = &report["writable"];
        assert_eq!(writable["/"], root_writable, "{base}-{suffix}: {writable}");
        assert!(writable.as_object().unwrap().iter().all(|(path, w)| path == "/" || *w == true), "{writable}");
        seen.push(SeenPod::of(&node, &pod));
    }

    // Each broken one runs too, and its server's own health check keeps it out of service: its
    // startup probe has failed (the kubelet's Unhealthy events), it is not Ready, and the
    // stand-in says why.
    for (suffix, cause) in [
        ("installer-elsewhere", "No module named 'kvpilot_sglang'"),
        ("socket-elsewhere", "page round trip through the sidecar failed"),
    ] {
        let name = format!("{base}-{suffix}");
        // (The server's first probe may come before it listens: connection refused. The next
        // one, 30 s on, gets its answer.)
        let selector =
            format!("involvedObject.name={name},involvedObject.fieldPath=spec.containers{{sglang}},reason=Unhealthy");
        let failed = format!("{name}: the server's startup probe answered 503");
        wait_for_blocking(&failed, START, || {
            let out = cluster.kubectl(&["get", "events", "-n", &ns, "--field-selector", &selector, "-o", "json"]);
            let events: Value = serde_json::from_slice(&out.stdout).ok()?;
            let messages: Vec<&str> =
                events["items"].as_array()?.iter().filter_map(|e| e["message"].as_str()).collect();
            messages
                .iter()
                .any(|m| m.contains("Startup probe failed: HTTP probe failed with statuscode: 503"))
                .then_some(())
        });
        let pod = get(suffix).await;
        let server = container(&pod, "sglang");
        assert!(server.state.as_ref().is_some_and(|s| s.running.is_some()), "{name}: the server runs: {server:?}");
        assert!(
            !is_ready(&pod) && !server.ready && server.started != Some(true),
            "{}",
            node::describe(std::slice::from_ref(&pod))
        );
        let report = standin_report(&pod, 30000).await;
        let problems = report["problems"].to_string();
        assert!(problems.contains(cause), "{name}: the stand-in's problems do not name {cause:?}: {report}");
        if suffix == "socket-elsewhere" {
            assert_eq!(report["socket"]["accepted_at_start"], false, "{report}");
            assert_eq!(report["hicache"]["last"]["stored"], 0, "{report}");
        }
        seen.push(SeenPod::of(&node, &pod));
    }

    succeeded("kubectl delete pods", cluster.kubectl(&["delete", "pods", "--all", "-n", &ns, "--wait=false"]));
    node::wait_pods(&client, &ns, "", "the pods gone", START, <[Pod]>::is_empty).await;
    node.assert_nothing_left(&seen).await;
}
