//! The operator keeps reconciling across a kube-apiserver restart
//! (`scripts/control-plane.sh restart-apiserver`). Each of its watches then resumes with a 410
//! Expired and relists; with kube-runtime's default pause after watch errors (shared by all
//! watches, 800 ms doubling to 30 s) the controller missed changes for minutes afterwards. A
//! binary of its own: the restart interrupts every other test using the control plane.

mod common;

use std::time::Duration;

use common::cluster::{Cluster, KvpilotProcess, TestNamespace, examples_in, free_port, wait_for_blocking};
use serde_json::json;

fn decode_pods(cluster: &Cluster, namespace: &str, instance: &str) -> usize {
    let selector = format!("app.kubernetes.io/instance={instance},app.kubernetes.io/name=kvpilot-decode");
    let pods = cluster.get_json(&["pods", "-n", namespace, "-l", &selector]).unwrap();
    pods["items"].as_array().unwrap().len()
}

#[test]
fn a_change_made_right_after_an_api_server_restart_is_reconciled_within_seconds() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let namespace = TestNamespace::create(&cluster, "kvp-restart");
    let ns = namespace.name.as_str();
    let (metrics, health) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let scope = format!("--namespace={ns}");
    let mut operator = KvpilotProcess::start(
        &cluster.kubeconfig,
        &["operator", &scope, "--metrics-addr", &metrics, "--health-addr", &health],
        &[],
    );
    let (_, mut llama) = examples_in(ns).into_iter().find(|(file, _)| file == "llama-3.1-8b-full.yaml").unwrap();
    llama["spec"]["decode"]["replicas"] = json!(1);
    cluster.kubectl_with_input(&["create", "-f", "-"], &serde_json::to_string(&llama).unwrap());
    wait_for_blocking("one decode pod", Duration::from_secs(60), || {
        operator.assert_running();
        (decode_pods(&cluster, ns, "llama-3-1-8b") == 1).then_some(())
    });

    cluster.restart_apiserver();
    cluster.kubectl_ok(&["scale", "infd", "llama-3-1-8b", "-n", ns, "--replicas=3"]);
    // About a second per watch with the controller's own pause; minutes with the default.
    wait_for_blocking("three decode pods after the restart", Duration::from_secs(30), || {
        operator.assert_running();
        (decode_pods(&cluster, ns, "llama-3-1-8b") == 3).then_some(())
    });
    operator.stop();
}
