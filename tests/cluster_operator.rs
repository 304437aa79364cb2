//! `kvpilot operator` as a host process against a real kube-apiserver, authenticated as the
//! chart's ServiceAccount (a TokenRequest token), so every call goes through the chart's RBAC:
//! the examples converge with no Forbidden, and the account can do nothing more than it needs.
//! There is no kubelet: this test plays it by marking decode pods Ready through the status
//! subresource as admin.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::cluster::{
    Cluster, HelmRelease, KvpilotProcess, TestNamespace, examples_in, free_port, text, wait_for_blocking,
};
use common::crd::{Constraint, constraints, crd_schema, set};
use serde_json::{Value, json};

const CONVERGE: Duration = Duration::from_secs(90);

fn condition(object: &Value, kind: &str) -> Option<Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind).cloned()
}

/// The operator's `kvpilot_api_requests_total` from its `/metrics` on `addr`, by (verb, resource).
fn requests_sent(addr: &str) -> BTreeMap<(String, String), f64> {
    let mut stream = TcpStream::connect(addr).expect("connect to the operator's /metrics");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let label = |line: &str, name: &str| {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        Some(line[start..].split('"').next()?.to_string())
    };
    response
        .lines()
        .filter(|line| line.starts_with("kvpilot_api_requests_total{"))
        .filter_map(|line| {
            let count = line.rsplit(' ').next()?.parse().ok()?;
            Some(((label(line, "verb")?, label(line, "resource")?), count))
        })
        .collect()
}

/// Marks every pod of `instance` Ready, as a kubelet would once its containers pass their probes.
fn play_kubelet(cluster: &Cluster, namespace: &str, instance: &str) -> usize {
    let pods = cluster.get_json(&["pods", "-n", namespace, "-l", &format!("app.kubernetes.io/instance={instance}")]);
    let pods = pods.map(|p| p["items"].as_array().cloned().unwrap_or_default()).unwrap_or_default();
    for pod in &pods {
        let ready = condition(pod, "Ready").is_some_and(|c| c["status"] == "True");
        if !ready {
            let now = "2026-01-01T00:00:00Z";
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ]}});
            let name = pod["metadata"]["name"].as_str().unwrap();
            let _ = cluster.kubectl(&[
                "patch",
                "pod",
                name,
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ]);
        }
    }
    pods.len()
}

fn can_i(cluster: &Cluster, account: &str, args: &[&str]) -> bool {
    let mut full = vec!["auth", "can-i", "--as", account];
    full.extend_from_slice(args);
    let out = cluster.kubectl(&full);
    match text(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!("kubectl {full:?}: {other} {}", text(&out.stderr)),
    }
}

#[test]
fn the_examples_converge_through_the_charts_rbac_and_nothing_more_is_allowed() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    // examples/deepseek-v3-tp16-volcano.yaml asks for Volcano: its PodGroups go through the
    // chart's RBAC too.
    cluster.install_gang_crds();
    let operator_namespace = format!("kvp-op-{}", std::process::id());
    let workload = TestNamespace::create(&cluster, "kvp-examples");
    let ns = workload.name.as_str();
    // No webhook here (tests/cluster_admission.rs has it): a webhook configuration with
    // failurePolicy Fail and no reachable server would refuse every InferenceDeployment.
    let token = format!("rbac.hubTokenSecrets[0].namespace={ns},rbac.hubTokenSecrets[0].name=hf-token");
    let release = HelmRelease::install(
        &cluster,
        "rbac-kvpilot",
        &operator_namespace,
        &["--set", "webhook.enabled=false", "--set", "replicaCount=2", "--set", &token],
    );
    let account = release.fullname();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.service_account_kubeconfig(dir.path(), &operator_namespace, &account);

    // As the chart runs it (--namespace=all, leader election with replicaCount 2).
    let (metrics, health) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut operator = KvpilotProcess::start(
        &kubeconfig,
        &["operator", "--namespace=all", "--leader-elect", "--metrics-addr", &metrics, "--health-addr", &health],
        &[("POD_NAMESPACE", &operator_namespace), ("POD_NAME", "host-replica")],
    );
    for (file, object) in examples_in(ns) {
        let out = cluster.kubectl_with_input(&["create", "-f", "-"], &serde_json::to_string(&object).unwrap());
        assert!(out.status.success(), "examples/{file}: {}", text(&out.stderr));
    }
    let lease = wait_for_blocking("the operator takes the Lease", CONVERGE, || {
        operator.assert_running();
        cluster.get_json(&["lease", "kvpilot-operator", "-n", &operator_namespace])
    });
    assert_eq!(lease["spec"]["holderIdentity"], "host-replica");

    // examples/*-rejected.yaml are refused by the policy; the others are valid or rewritten.
    let deployments: Vec<(String, Value)> =
        examples_in(ns).into_iter().filter(|(_, o)| o["kind"] == "InferenceDeployment").collect();
    for (file, deployment) in &deployments {
        let name = deployment["metadata"]["name"].as_str().unwrap();
        let rejected = file.contains("-rejected");
        let converged = wait_for_blocking(&format!("{name} converges"), CONVERGE, || {
            operator.assert_running();
            if !rejected {
                play_kubelet(&cluster, ns, name);
            }
            let object = cluster.get_json(&["infd", name, "-n", ns])?;
            let settings = condition(&object, "SettingsValid")?;
            let done = if rejected {
                settings["status"] == "False"
            } else {
                let replicas = object["spec"]["decode"]["replicas"].as_i64();
                condition(&object, "ModelResolved").is_some_and(|c| c["status"] == "True")
                    && settings["status"] == "True"
                    && object["status"]["decode"]["readyReplicas"].as_i64() == replicas
            };
            done.then_some(object)
        });
        if rejected {
            let settings = condition(&converged, "SettingsValid").unwrap();
            // A rule id: a capital letter and a number (R9, M1, T1, ...).
            let rule_id = |word: &str| {
                let mut chars = word.chars();
                chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.as_str().parse::<u32>().is_ok()
            };
            let message = settings["message"].as_str().unwrap();
            assert!(message.split(|c: char| !c.is_ascii_alphanumeric()).any(rule_id), "no rule id: {settings}");
            assert_eq!(play_kubelet(&cluster, ns, name), 0, "a rejected deployment gets no pods");
        } else {
            for object in [format!("configmap/{name}-sglang"), format!("service/{name}-decode")] {
                assert!(cluster.get_json(&[&object, "-n", ns]).is_some(), "{object} missing");
            }
        }
    }
    // Converged means quiet: with the API server's defaulting of pods, Services and ConfigMaps,
    // the operator's server-side applies and status writes are no-ops, so nothing changes.
    let versions = || {
        cluster.kubectl_ok(&[
            "get",
            "infd,pods,services,configmaps",
            "-n",
            ns,
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion} {end}",
        ])
    };
    let settled = versions();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(versions(), settled, "objects keep changing after convergence");
    // By the operator's own count: it read no pod from the API server (its watch cache has them),
    // and it applied every server pod there is (the router's are its ReplicaSet's).
    let sent = requests_sent(&metrics);
    let sent_as = |verb: &str, resource: &str| sent.get(&(verb.into(), resource.into())).copied().unwrap_or(0.0);
    assert_eq!(sent_as("GET", "pods"), 0.0, "{sent:?}");
    let servers = "app.kubernetes.io/name in (kvpilot-decode,kvpilot-prefill)";
    let pods = cluster.get_json(&["pods", "-n", ns, "-l", servers]).unwrap()["items"].as_array().unwrap().len();
    assert!(pods > 0 && sent_as("APPLY", "pods") >= pods as f64, "{pods} pods, sent {sent:?}");
    assert!(sent_as("WATCH", "pods") >= 1.0 && sent_as("APPLY", "inferencedeployments/status") >= 1.0, "{sent:?}");
    let table = cluster.kubectl_ok(&["get", "infd", "-n", ns, "-o", "wide"]);
    let llama: Vec<&str> = table.lines().find(|l| l.starts_with("llama-3-1-8b ")).unwrap().split_whitespace().collect();
    assert_eq!(llama[1..7], ["meta-llama/Llama-3.1-8B-Instruct", "full", "host_pool", "Valid", "2", "2"], "{table}");
    // An RBAC refusal names the account (`... is forbidden: User "system:serviceaccount:NS:SA"
    // cannot ...`). Other 403s are not RBAC's: with --namespace=all the operator also sees
    // InferenceDeployments other tests left in namespaces being deleted, where the API server
    // refuses new objects (NamespaceTerminating) until the namespace controller deletes them.
    let logs = operator.logs();
    let account_name = format!("system:serviceaccount:{operator_namespace}:{account}");
    assert!(!logs.contains(&account_name), "the chart's RBAC refused a call:\n{logs}");

    // A token the chart does not list: refused by RBAC, and the status says which value to set.
    let mut gated = deployments.iter().find(|(file, _)| file == "llama-3.1-8b-full.yaml").unwrap().1.clone();
    gated["metadata"]["name"] = json!("gated");
    gated["spec"]["model"]["config"] = json!({"hub": {"tokenSecretRef": {"name": "other-token"}}});
    cluster.kubectl_ok(&["create", "secret", "generic", "other-token", "-n", ns, "--from-literal=token=hf_x"]);
    let out = cluster.kubectl_with_input(&["create", "-f", "-"], &gated.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let refused = wait_for_blocking("the token's refusal in status", CONVERGE, || {
        operator.assert_running();
        let object = cluster.get_json(&["infd", "gated", "-n", ns])?;
        condition(&object, "ModelResolved").filter(|c| c["reason"] == "TokenSecretUnavailable")
    });
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("may not read Secret {ns}/other-token"))
            && message
                .contains(&format!("add {{namespace: {ns}, name: other-token}} to the chart's rbac.hubTokenSecrets")),
        "{message}"
    );

    // The status the operator wrote passed the schema; each status enum is enforced on it too.
    let llama = cluster.get_json(&["infd", "llama-3-1-8b", "-n", ns]).unwrap();
    let mut found = Vec::new();
    constraints(&crd_schema(), "", &mut found);
    let mut checked = 0;
    for constraint in &found {
        let Constraint::Enum { path, .. } = constraint else { continue };
        let Some(field) = path.strip_prefix("status.") else { continue };
        let mut object = json!({"status": llama["status"].clone()});
        // An enum of list items: a list holding one bad item.
        let (field, bogus, reported) = match field.strip_suffix("[]") {
            Some(list) => (list, json!(["bogus"]), format!("status.{list}[0]")),
            None => (field, json!("bogus"), path.clone()),
        };
        set(&mut object, &format!("status.{field}"), bogus);
        let patch = object.to_string();
        let out = cluster.kubectl(&[
            "patch",
            "infd",
            "llama-3-1-8b",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ]);
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&format!("{reported}: Unsupported value: \"bogus\"")), "{path}: {stderr}");
        checked += 1;
    }
    assert!(checked >= 8, "status enums checked: {checked}");

    // Nothing more than it needs.
    let sa = account_name;
    assert!(can_i(&cluster, &sa, &["patch", "inferencedeployments.kvpilot.dev", "--subresource=status", "-n", ns]));
    assert!(can_i(&cluster, &sa, &["watch", "inferencedeployments.kvpilot.dev", "--all-namespaces"]));
    for verb in ["update", "patch", "create", "delete"] {
        assert!(!can_i(&cluster, &sa, &[verb, "inferencedeployments.kvpilot.dev", "-n", ns]), "{verb} spec");
    }
    for pod_groups in ["podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io"] {
        assert!(can_i(&cluster, &sa, &["delete", pod_groups, "-n", ns]), "{pod_groups}: replicas' PodGroups go");
        assert!(!can_i(&cluster, &sa, &["update", pod_groups, "-n", ns]), "{pod_groups}: applied, never updated");
    }
    assert!(!can_i(&cluster, &sa, &["create", "workloads.kueue.x-k8s.io", "-n", ns]), "Kueue makes its own");
    assert!(!can_i(&cluster, &sa, &["create", "queues.scheduling.volcano.sh"]), "no queue of Volcano's");
    assert!(!can_i(&cluster, &sa, &["list", "secrets", "--all-namespaces"]));
    assert!(!can_i(&cluster, &sa, &["list", "secrets", "-n", ns]));
    // Hub tokens: only those rbac.hubTokenSecrets lists, by name, in their namespace.
    assert!(can_i(&cluster, &sa, &["get", "secrets/hf-token", "-n", ns]));
    assert!(!can_i(&cluster, &sa, &["get", "secrets/other-token", "-n", ns]));
    assert!(!can_i(&cluster, &sa, &["get", "secrets/hf-token", "-n", "kube-system"]));
    assert!(can_i(&cluster, &sa, &["get", "leases/kvpilot-operator", "-n", &operator_namespace]));
    for verb in ["get", "create", "update", "patch", "delete"] {
        assert!(!can_i(&cluster, &sa, &[verb, "leases", "-n", ns]), "{verb} leases elsewhere");
        assert!(!can_i(&cluster, &sa, &[verb, "leases/kvpilot-operator", "-n", "kube-system"]), "{verb} kube-system");
    }
    assert!(!can_i(&cluster, &sa, &["update", "leases/other-lease", "-n", &operator_namespace]));
    operator.stop();
}

#[test]
fn a_namespaced_install_converges_its_namespace_and_may_touch_no_other() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let operator_namespace = format!("kvp-nsop-{}", std::process::id());
    let watched = TestNamespace::create(&cluster, "kvp-watched");
    let other = TestNamespace::create(&cluster, "kvp-unwatched");
    let release = HelmRelease::install(
        &cluster,
        "scoped-kvpilot",
        &operator_namespace,
        &["--set", "webhook.enabled=false", "--set", &format!("watchNamespace={}", watched.name)],
    );
    let account = release.fullname();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.service_account_kubeconfig(dir.path(), &operator_namespace, &account);
    let (metrics, health) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    // As the chart runs it with watchNamespace.
    let namespace_arg = format!("--namespace={}", watched.name);
    let mut operator = KvpilotProcess::start(
        &kubeconfig,
        &["operator", &namespace_arg, "--metrics-addr", &metrics, "--health-addr", &health],
        &[("POD_NAMESPACE", &operator_namespace), ("POD_NAME", "host-replica")],
    );
    let example = |namespace: &str| {
        examples_in(namespace).into_iter().find(|(file, _)| file == "llama-3.1-8b-full.yaml").unwrap().1
    };
    for namespace in [&watched.name, &other.name] {
        let out = cluster.kubectl_with_input(&["create", "-f", "-"], &example(namespace).to_string());
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let name = example(&watched.name)["metadata"]["name"].as_str().unwrap().to_string();
    wait_for_blocking("the watched namespace's resource converges", CONVERGE, || {
        operator.assert_running();
        play_kubelet(&cluster, &watched.name, &name);
        let object = cluster.get_json(&["infd", &name, "-n", &watched.name])?;
        condition(&object, "Ready").filter(|c| c["status"] == "True")
    });
    // The other namespace's resource is not this operator's: no status, no pods.
    let untouched = cluster.get_json(&["infd", &name, "-n", &other.name]).unwrap();
    assert!(untouched["status"].is_null(), "{untouched}");
    assert_eq!(play_kubelet(&cluster, &other.name, &name), 0);
    let logs = operator.logs();
    let account_name = format!("system:serviceaccount:{operator_namespace}:{account}");
    assert!(!logs.contains(&account_name), "the chart's RBAC refused a call:\n{logs}");

    let sa = account_name;
    let (inside, outside) = (watched.name.as_str(), other.name.as_str());
    for (verb, resource) in [("create", "pods"), ("delete", "pods"), ("patch", "pods/status"), ("create", "services")] {
        assert!(can_i(&cluster, &sa, &[verb, resource, "-n", inside]), "{verb} {resource} in the watched namespace");
        assert!(!can_i(&cluster, &sa, &[verb, resource, "-n", outside]), "{verb} {resource} elsewhere");
    }
    assert!(!can_i(&cluster, &sa, &["list", "inferencedeployments.kvpilot.dev", "--all-namespaces"]));
    assert!(!can_i(&cluster, &sa, &["list", "inferencedeployments.kvpilot.dev", "-n", outside]));
    assert!(!can_i(&cluster, &sa, &["create", "roles", "-n", outside]));
    assert!(!can_i(&cluster, &sa, &["get", "secrets", "-n", inside]), "no Secret unless listed");
    operator.stop();
}

#[test]
fn sigterm_stops_an_operator_whose_first_list_is_refused() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let namespace = TestNamespace::create(&cluster, "kvp-norbac");
    cluster.kubectl_ok(&["create", "serviceaccount", "nobody", "-n", &namespace.name]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.service_account_kubeconfig(dir.path(), &namespace.name, "nobody");
    let (metrics, health) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut operator =
        KvpilotProcess::start(&kubeconfig, &["operator", "--metrics-addr", &metrics, "--health-addr", &health], &[]);
    wait_for_blocking("RBAC refuses the first list", Duration::from_secs(30), || {
        operator.assert_running();
        operator.logs().contains("cannot list resource \\\"inferencedeployments\\\"").then_some(())
    });
    // kube-runtime holds a graceful shutdown until that list succeeds; the controller bounds it.
    let status = operator.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}:\n{}", operator.logs());
}
