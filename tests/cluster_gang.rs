//! Gang scheduling and placement on the real control plane of `scripts/control-plane.sh`, with
//! the gang schedulers' own CRDs (Volcano's, scheduler-plugins', Kueue's: `scripts/gang-crds.sh`)
//! and the chart's RBAC: while the cluster serves none of their APIs, a resource asking for one
//! is refused in status and by the validating webhook; once they are installed, each gang mode
//! gets its PodGroups or labels with the right counts, the API server takes the pods with their
//! affinity and spread, and a replica's PodGroup goes with it.
//!
//! One test: the CRDs are cluster-wide, and so are the webhook configurations pointed at the
//! operator this test runs.

mod common;

use std::time::Duration;

use common::cluster::{ChartWebhooks, Cluster, TestNamespace, examples_in, text, wait_for_blocking};
use serde_json::{Value, json};

/// Long enough on a loaded 2-core machine for discovery's recheck and the controller's requeue.
const SETTLE: Duration = Duration::from_secs(120);
const PRIORITY_CLASS: &str = "kvpilot-gang-test";
const VOLCANO_PODGROUPS: &str = "podgroups.scheduling.volcano.sh";
const COSCHEDULING_PODGROUPS: &str = "podgroups.scheduling.x-k8s.io";

fn example(namespace: &str, file: &str) -> Value {
    examples_in(namespace).into_iter().find(|(name, o)| name == file && o["kind"] == "InferenceDeployment").unwrap().1
}

/// Llama as one decode fleet of 2-node replicas under `scheduling`.
fn llama(namespace: &str, name: &str, scheduling: Value) -> Value {
    let mut object = example(namespace, "llama-3.1-8b-full.yaml");
    object["metadata"]["name"] = json!(name);
    let spec = object["spec"].as_object_mut().unwrap();
    spec.remove("prefill");
    spec.insert("decode".into(), json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2, "pageSize": 16}));
    spec.insert("scheduling".into(), scheduling);
    object
}

fn create(cluster: &Cluster, object: &Value) -> Result<(), String> {
    let out = cluster.kubectl_with_input(&["create", "-f", "-"], &object.to_string());
    if out.status.success() { Ok(()) } else { Err(text(&out.stderr)) }
}

fn condition(object: &Value, type_: &str) -> Option<Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

/// The items of `kubectl get KIND -n NS -l SELECTOR -o json`.
fn items(cluster: &Cluster, kind: &str, namespace: &str, selector: &str) -> Vec<Value> {
    let list = cluster.get_json(&[kind, "-n", namespace, "-l", selector]).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Quantities of a stored object as numbers: CPU in millicores, the rest in their units.
fn amounts(quantities: &Value) -> std::collections::BTreeMap<String, u64> {
    let parse = |resource: &str, text: &str| {
        if resource == "cpu" { kvpilot::api::parse_millis(text) } else { kvpilot::api::parse_bytes(text) }.unwrap()
    };
    quantities.as_object().unwrap().iter().map(|(r, q)| (r.clone(), parse(r, q.as_str().unwrap()))).collect()
}

/// What the stored `pods` request together: each container and native sidecar, as the API
/// server has them (kvpilot's regular init container asks for less than those).
fn requested(pods: &[Value]) -> std::collections::BTreeMap<String, u64> {
    let mut total = std::collections::BTreeMap::new();
    for pod in pods {
        let sidecars =
            pod["spec"]["initContainers"].as_array().into_iter().flatten().filter(|c| c["restartPolicy"] == "Always");
        for container in pod["spec"]["containers"].as_array().unwrap().iter().chain(sidecars) {
            for (resource, amount) in amounts(&container["resources"]["requests"]) {
                *total.entry(resource).or_default() += amount;
            }
        }
    }
    total
}

fn names(objects: &[Value]) -> Vec<&str> {
    let mut names: Vec<&str> = objects.iter().filter_map(|o| o["metadata"]["name"].as_str()).collect();
    names.sort();
    names
}

fn instance(name: &str) -> String {
    format!("app.kubernetes.io/instance={name}")
}

#[test]
fn gang_schedulers_are_refused_until_installed_then_each_replica_gets_its_group() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    cluster.remove_gang_crds();
    cluster.kubectl_ok(&["delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found"]);
    cluster.kubectl_ok(&["create", "priorityclass", PRIORITY_CLASS, "--value=1000"]);
    let workload = TestNamespace::create(&cluster, "kvp-gang");
    let ns = workload.name.as_str();

    // One resource per gang mode, created before any webhook is there to refuse them.
    let volcano = example(ns, "deepseek-v3-tp16-volcano.yaml");
    let coscheduling = llama(
        ns,
        "llama-coscheduling",
        json!({"gang": "coscheduling", "schedulerName": "scheduler-plugins-scheduler", "priorityClassName": PRIORITY_CLASS}),
    );
    let kueue = llama(ns, "llama-kueue", json!({"gang": "kueue", "queue": "team-a"}));
    for object in [&volcano, &coscheduling, &kueue] {
        create(&cluster, object).unwrap();
    }

    // The chart, its webhooks pointed at `kvpilot operator` running as the chart's ServiceAccount,
    // so every call it makes goes through the chart's RBAC.
    let operator_namespace = format!("kvp-gang-op-{}", std::process::id());
    let mut chart = ChartWebhooks::install(&cluster, "gang-kvpilot", &operator_namespace, &["--set", "replicaCount=1"]);
    let fullname = chart.fullname.clone();

    // No gang scheduler's API is served: each resource is refused in status, naming what to install.
    for (object, install) in
        [(&volcano, "install Volcano"), (&coscheduling, "install scheduler-plugins"), (&kueue, "install Kueue")]
    {
        let name = object["metadata"]["name"].as_str().unwrap();
        let settings = wait_for_blocking(&format!("{name} refused for its gang scheduler"), SETTLE, || {
            chart.operator.assert_running();
            let settings = condition(&cluster.get_json(&["infd", name, "-n", ns])?, "SettingsValid")?;
            (settings["reason"] == "GangSchedulerMissing").then_some(settings)
        });
        assert_eq!(settings["status"], "False");
        let message = settings["message"].as_str().unwrap();
        assert!(message.contains("this cluster does not serve") && message.contains(install), "{message}");
        assert!(items(&cluster, "pods", ns, &instance(name)).is_empty(), "{name}: no pods while refused");
    }
    // ... and at `kubectl create`, by the webhook.
    let late = llama(ns, "llama-volcano", json!({"gang": "volcano", "queue": "inference"}));
    let refusal = wait_for_blocking("the API server calls the webhook", SETTLE, || {
        chart.operator.assert_running();
        create(&cluster, &late).err().filter(|stderr| stderr.contains("denied the request"))
    });
    assert!(refusal.contains("spec.scheduling.gang is volcano") && refusal.contains("install Volcano"), "{refusal}");

    // The schedulers' CRDs come: what was refused runs, each gang mode with its own objects.
    cluster.install_gang_crds();
    let name = volcano["metadata"]["name"].as_str().unwrap();
    let uid = cluster.get_json(&["infd", name, "-n", ns]).unwrap()["metadata"]["uid"].clone();
    let groups = wait_for_blocking("the Volcano example's PodGroups and pods", SETTLE, || {
        chart.operator.assert_running();
        let groups = items(&cluster, VOLCANO_PODGROUPS, ns, &instance(name));
        let servers = items(&cluster, "pods", ns, &format!("{},kvpilot.dev/rank", instance(name)));
        (groups.len() == 3 && servers.len() == 6).then_some(groups)
    });
    assert_eq!(names(&groups), [format!("{name}-decode-0"), format!("{name}-decode-1"), format!("{name}-prefill-0")]);
    for group in &groups {
        assert_eq!(group["spec"]["minMember"], 2, "{group}");
        assert_eq!(
            group["spec"]["minResources"],
            json!({"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "16", "rdma/rdma_shared_device_a": "2"})
        );
        // The group's pods: those of its fleet and replica (a PodGroup carries their labels).
        let labels = group["metadata"]["labels"].as_object().unwrap();
        let selector = ["app.kubernetes.io/instance", "app.kubernetes.io/name", "kvpilot.dev/ordinal"]
            .map(|key| format!("{key}={}", labels[key].as_str().unwrap()))
            .join(",");
        let members = items(&cluster, "pods", ns, &selector);
        assert_eq!(members.len(), 2, "{group}");
        assert_eq!(
            amounts(&group["spec"]["minResources"]),
            requested(&members),
            "every container's requests of the group"
        );
        assert_eq!(group["spec"]["queue"], "inference");
        assert_eq!(group["metadata"]["ownerReferences"][0]["uid"], uid, "owned by the resource");
    }
    for pod in items(&cluster, "pods", ns, &format!("{},kvpilot.dev/rank", instance(name))) {
        let labels = &pod["metadata"]["labels"];
        let group = format!(
            "{name}-{}-{}",
            labels["app.kubernetes.io/name"].as_str().unwrap().trim_start_matches("kvpilot-"),
            labels["kvpilot.dev/ordinal"].as_str().unwrap()
        );
        assert_eq!(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], group.as_str());
        let spec = &pod["spec"];
        assert_eq!(spec["schedulerName"], "volcano");
        // The API server took the placement terms as kvpilot wrote them.
        let required = &spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(required["topologyKey"], "nvidia.com/gpu.clique");
        assert_eq!(required["labelSelector"]["matchLabels"]["kvpilot.dev/ordinal"], labels["kvpilot.dev/ordinal"]);
        let preferred = &spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            (preferred["weight"].as_i64(), preferred["podAffinityTerm"]["topologyKey"].as_str()),
            (Some(100), Some("topology.kubernetes.io/zone"))
        );
        let spread = &spec["topologySpreadConstraints"][0];
        assert_eq!(
            (spread["maxSkew"].as_i64(), spread["topologyKey"].as_str(), spread["whenUnsatisfiable"].as_str()),
            (Some(1), Some("kubernetes.io/hostname"), Some("ScheduleAnyway"))
        );
    }

    let name = coscheduling["metadata"]["name"].as_str().unwrap();
    let group = wait_for_blocking("the coscheduling PodGroup and pods", SETTLE, || {
        let groups = items(&cluster, COSCHEDULING_PODGROUPS, ns, &instance(name));
        (groups.len() == 1 && items(&cluster, "pods", ns, &instance(name)).len() == 2).then(|| groups[0].clone())
    });
    assert_eq!(group["metadata"]["name"], format!("{name}-decode-0"));
    assert_eq!(group["spec"]["minMember"].as_i64(), Some(2));
    assert_eq!(group["spec"]["minResources"]["nvidia.com/gpu"], "4");
    let members = items(&cluster, "pods", ns, &instance(name));
    assert_eq!(amounts(&group["spec"]["minResources"]), requested(&members), "every container's requests of the group");
    for pod in items(&cluster, "pods", ns, &instance(name)) {
        assert_eq!(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], format!("{name}-decode-0"));
        assert_eq!(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
        assert_eq!(pod["spec"]["priorityClassName"], PRIORITY_CLASS);
    }

    let name = kueue["metadata"]["name"].as_str().unwrap();
    let pods = wait_for_blocking("the Kueue group's pods", SETTLE, || {
        let pods = items(&cluster, "pods", ns, &instance(name));
        (pods.len() == 2).then_some(pods)
    });
    for pod in pods {
        let (labels, annotations) = (&pod["metadata"]["labels"], &pod["metadata"]["annotations"]);
        assert_eq!(labels["kueue.x-k8s.io/pod-group-name"], format!("{name}-decode-0"));
        assert_eq!(labels["kueue.x-k8s.io/queue-name"], "team-a");
        assert_eq!(annotations["kueue.x-k8s.io/pod-group-total-count"], "2");
        assert_eq!(annotations["kueue.x-k8s.io/pod-group-serving"], "true");
    }
    for kind in [VOLCANO_PODGROUPS, COSCHEDULING_PODGROUPS] {
        assert!(items(&cluster, kind, ns, &instance(name)).is_empty(), "Kueue's groups are labels, not PodGroups");
    }

    // The webhook admits what it refused.
    create(&cluster, &late).unwrap();

    // A replica's PodGroup goes with it: scale-down, then the resource itself (owner references).
    let name = volcano["metadata"]["name"].as_str().unwrap();
    cluster.kubectl_ok(&[
        "patch",
        "infd",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"decode":{"replicas":1}}}"#,
    ]);
    wait_for_blocking("decode replica 1's PodGroup goes with it", SETTLE, || {
        let groups = items(&cluster, VOLCANO_PODGROUPS, ns, &instance(name));
        (names(&groups) == [format!("{name}-decode-0").as_str(), &format!("{name}-prefill-0")]).then_some(())
    });
    cluster.kubectl_ok(&["delete", "infd", name, "-n", ns, "--wait=false"]);
    wait_for_blocking("the garbage collector deletes the resource's PodGroups", SETTLE, || {
        items(&cluster, VOLCANO_PODGROUPS, ns, &instance(name)).is_empty().then_some(())
    });

    let logs = chart.operator.logs();
    let account = format!("system:serviceaccount:{operator_namespace}:{fullname}");
    assert!(!logs.contains(&account), "the chart's RBAC refused a call:\n{logs}");
    chart.operator.stop();
    drop(chart);
    cluster.kubectl_ok(&["delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found"]);
}
