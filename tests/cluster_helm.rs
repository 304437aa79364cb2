//! `helm install`, `helm upgrade` and `helm uninstall` of charts/kvpilot into a real
//! kube-apiserver, with its defaults and with every values file of charts/kvpilot/ci. The
//! cert-manager and ServiceMonitor values files get those projects' own CRDs (from their published
//! Go modules, `scripts/third-party-crds.sh`), so their objects are created and validated against
//! the real schemas.
//! Without a kubelet the operator pods never run, so no install waits for them.

mod common;

use std::time::Duration;

use common::cluster::{Cluster, HelmRelease, TestNamespace, succeeded, text, wait_for_blocking, yaml_files};
use serde::Deserialize;
use serde_json::Value;

/// Kinds the chart renders, for the "nothing left" check after uninstall.
const KINDS: &str = "deployments,replicasets,pods,services,configmaps,secrets,serviceaccounts,roles,rolebindings,\
                     clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations,\
                     networkpolicies,poddisruptionbudgets,servicemonitors,certificates,issuers";

/// The objects of a release as Helm recorded them.
fn manifest(cluster: &Cluster, release: &HelmRelease) -> Vec<Value> {
    let out = cluster.helm(&["get", "manifest", &release.name, "--namespace", &release.namespace]);
    let text = succeeded("helm get manifest", out);
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|d| !d.is_null())
        .collect()
}

fn exists(cluster: &Cluster, object: &Value, default_namespace: &str) -> bool {
    let kind = object["kind"].as_str().unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or(default_namespace);
    let api_version = object["apiVersion"].as_str().unwrap();
    let resource = match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind.to_string(),
    };
    // Cluster-scoped kinds ignore -n.
    cluster.get_json(&[&resource, name, "-n", namespace]).is_some()
}

fn left_over(cluster: &Cluster, release: &str) -> String {
    let selector = format!("app.kubernetes.io/instance={release}");
    let out = cluster.kubectl(&["get", KINDS, "-A", "-l", &selector, "-o", "name"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn the_chart_installs_upgrades_and_uninstalls_with_every_values_file() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let crds = common::cluster::third_party_crds();
    for (file, crd) in [
        ("cert-manager/cert-manager.io_certificates.yaml", "certificates.cert-manager.io"),
        ("cert-manager/cert-manager.io_issuers.yaml", "issuers.cert-manager.io"),
        ("prometheus-operator/monitoring.coreos.com_servicemonitors.yaml", "servicemonitors.monitoring.coreos.com"),
    ] {
        cluster.install_crd_file(&crds.join(file), &format!("crd/{crd}"));
    }
    let watched = TestNamespace::create(&cluster, "kvp-watched");

    let mut cases: Vec<(String, Vec<String>)> = vec![("defaults".into(), vec![])];
    for file in yaml_files("charts/kvpilot/ci") {
        let stem = file.file_stem().unwrap().to_string_lossy().replace("-values", "");
        let mut args = vec!["-f".to_string(), file.to_string_lossy().into_owned()];
        let values: Value = serde_norway::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        // A namespace-scoped install needs its namespace to exist: use this test's own.
        if values["watchNamespace"].is_string() {
            args.extend(["--set".into(), format!("watchNamespace={}", watched.name)]);
        }
        cases.push((stem, args));
    }
    assert!(cases.len() >= 6, "{cases:?}");

    for (case, args) in &cases {
        let name = format!("h-{case}");
        let namespace = format!("kvp-helm-{case}-{}", std::process::id());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let release = HelmRelease::install(&cluster, &name, &namespace, &args);
        let objects = manifest(&cluster, &release);
        assert!(objects.len() >= 5, "{case}: {objects:?}");
        for object in &objects {
            assert!(
                exists(&cluster, object, &namespace),
                "{case}: {} {} was not created",
                object["kind"],
                object["metadata"]["name"]
            );
        }
        // Namespace-scoped: the operator's account reads InferenceDeployments in the watched
        // namespace only (a Role there, not a ClusterRole).
        if args.iter().any(|a| a.starts_with("watchNamespace=")) {
            let account = format!("system:serviceaccount:{namespace}:{}", release.fullname());
            let can_i = |args: &[&str]| {
                let mut full = vec!["auth", "can-i", "--as", &account];
                full.extend_from_slice(args);
                cluster.kubectl(&full).stdout.starts_with(b"yes")
            };
            assert!(can_i(&["watch", "inferencedeployments.kvpilot.dev", "-n", &watched.name]), "{case}");
            assert!(!can_i(&["watch", "inferencedeployments.kvpilot.dev", "--all-namespaces"]), "{case}");
            assert!(!can_i(&["create", "pods", "-n", "default"]), "{case}");
        }
        // The controller manager runs the Deployment: a ReplicaSet and (unscheduled) pods.
        let deployment = format!("deployment/{}", release.fullname());
        wait_for_blocking(&format!("{case}: the Deployment's ReplicaSet"), Duration::from_secs(60), || {
            let status = cluster.get_json(&[&deployment, "-n", &namespace])?;
            status["status"]["replicas"].as_i64().filter(|r| *r > 0)
        });

        let mut upgrade = vec!["upgrade", &name, "charts/kvpilot", "--namespace", &namespace, "--reuse-values"];
        upgrade.extend(["--set", "replicaCount=3"]);
        succeeded(&format!("{case}: helm upgrade"), cluster.helm(&upgrade));
        let upgraded = cluster.get_json(&[&deployment, "-n", &namespace]).unwrap();
        assert_eq!(upgraded["spec"]["replicas"], 3, "{case}");
        let history = succeeded("helm history", cluster.helm(&["history", &name, "--namespace", &namespace]));
        assert_eq!(history.lines().count(), 3, "{case}: two revisions: {history}");

        succeeded(&format!("{case}: helm uninstall"), cluster.helm(&["uninstall", &name, "--namespace", &namespace]));
        // The garbage collector removes the ReplicaSets and pods the Deployment owned.
        wait_for_blocking(&format!("{case}: nothing left after uninstall"), Duration::from_secs(90), || {
            left_over(&cluster, &name).is_empty().then_some(())
        });
        assert!(cluster.get_json(&["crd", "inferencedeployments.kvpilot.dev"]).is_some(), "{case}: the CRD stays");
        drop(release);
    }
}
