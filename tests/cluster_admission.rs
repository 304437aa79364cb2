//! Admission through a real kube-apiserver: the chart's validating and mutating webhook
//! configurations, the self-signed certificate mode setting their real `caBundle`, and
//! `kvpilot operator` serving the webhook as a host process authenticated as the chart's
//! ServiceAccount.
//!
//! The configurations are pointed at the host process with a `url:` client config, because the
//! API server reaches a webhook Service only through a kubelet-run pod and kube-proxy, neither of
//! which runs here. The URL's host is `localhost` and the operator runs with
//! `--webhook-service=localhost`, so the certificate it issues (for the Service's DNS names:
//! `<service>`, `<service>.<ns>`, ...) names `localhost`, and the API server verifies it against
//! the caBundle exactly as it would the Service's name.
//!
//! One test: webhook configurations are cluster-wide, so nothing else in this binary may write
//! InferenceDeployments while they point at a process this test stops.

mod common;

use std::time::Duration;

use common::cluster::{ChartWebhooks, Cluster, TestNamespace, examples_in, text, wait_for_blocking};
use serde_json::{Value, json};

fn example(namespace: &str, file: &str) -> Value {
    examples_in(namespace)
        .into_iter()
        .find(|(name, object)| name == file && object["kind"] == "InferenceDeployment")
        .unwrap()
        .1
}

fn apply(cluster: &Cluster, object: &Value) -> (bool, String, String) {
    let out = cluster.kubectl_with_input(&["apply", "-f", "-"], &serde_json::to_string(object).unwrap());
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_api_server_calls_the_webhook_refuses_rewrites_warns_and_applies_the_failure_policy() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let operator_namespace = format!("kvp-adm-{}", std::process::id());
    let mut chart = ChartWebhooks::install(
        &cluster,
        "adm-kvpilot",
        &operator_namespace,
        &["--set", "webhook.mutating.enabled=true", "--set", "replicaCount=1"],
    );
    let fullname = chart.fullname.clone();
    let bundle = chart.ca_bundle.clone();
    let secret = format!("{fullname}-webhook-tls");
    let stored = cluster.get_json(&["secret", &secret, "-n", &operator_namespace]).unwrap();
    assert_eq!(stored["data"]["ca.crt"].as_str(), Some(bundle.as_str()), "the caBundle is the Secret's CA");

    let workload = TestNamespace::create(&cluster, "kvp-admitted");
    let ns = workload.name.as_str();
    let llama = example(ns, "llama-3.1-8b-full.yaml");
    // The API server reaches the webhook once the TLS files are written and it listens.
    wait_for_blocking("the API server calls the webhook", Duration::from_secs(60), || {
        chart.operator.assert_running();
        let out = cluster
            .kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &serde_json::to_string(&llama).unwrap());
        out.status.success().then_some(())
    });

    // Refused at `kubectl apply` with SGLang's message and the rule id.
    let (admitted, _, refusal) = apply(&cluster, &example(ns, "deepseek-v3-mla-rejected.yaml"));
    assert!(!admitted, "the rejected example was admitted");
    assert!(
        refusal.contains("admission webhook \"validate.inferencedeployments.kvpilot.dev\" denied the request"),
        "{refusal}"
    );
    assert!(refusal.contains("R9"), "{refusal}");
    assert!(refusal.contains("requires an MHA or hybrid-SWA HiCache host stack"), "{refusal}");

    // A flag kvpilot decides cannot come in through extraArgs, whatever the spelling.
    let mut smuggled = llama.clone();
    smuggled["metadata"]["name"] = serde_json::json!("smuggled");
    smuggled["spec"]["decode"]["extraArgs"] = serde_json::json!(["--tp=8", "--enable-hierarchical"]);
    let (admitted, _, refusal) = apply(&cluster, &smuggled);
    assert!(!admitted, "extraArgs setting kvpilot's flags were admitted");
    assert!(refusal.contains("POD1") && refusal.contains("spec.decode.tensorParallel"), "{refusal}");
    assert!(refusal.contains("spec.disaggregation.hierarchicalCache"), "{refusal}");

    // A setting the Pod Security level asked for does not allow is refused naming the level it
    // needs; without a level asked for, it is admitted with a warning saying which it gets.
    let mut rdma = llama.clone();
    rdma["metadata"]["name"] = json!("rdma-at-restricted");
    rdma["spec"]["decode"]["capabilities"] = json!(["IPC_LOCK"]);
    rdma["spec"]["security"] = json!({"level": "restricted"});
    let (admitted, _, refusal) = apply(&cluster, &rdma);
    assert!(!admitted, "IPC_LOCK was admitted at restricted");
    assert!(
        refusal.contains("POD11")
            && refusal.contains("spec.decode.capabilities IPC_LOCK needs the Pod Security level privileged"),
        "{refusal}"
    );
    rdma["spec"].as_object_mut().unwrap().remove("security");
    let (admitted, _, warnings) = apply(&cluster, &rdma);
    assert!(admitted, "{warnings}");
    assert!(warnings.contains("the server pods need the Pod Security level privileged"), "{warnings}");

    // An image of a release kvpilot does not model is refused naming the field that pins one; an
    // image that names no release is admitted with a warning saying how to pin it.
    let mut old = llama.clone();
    old["metadata"]["name"] = json!("old-release");
    old["spec"]["decode"]["image"] = json!("lmsysorg/sglang:v0.5.9-cu129");
    let (admitted, _, refusal) = apply(&cluster, &old);
    assert!(!admitted, "an image of SGLang 0.5.9 was admitted");
    assert!(
        refusal.contains(
            "old-release: spec.sglang.version: the tag of spec.decode.image lmsysorg/sglang:v0.5.9-cu129 names SGLang 0.5.9"
        ) && refusal.contains("known releases: 0.5.17"),
        "{refusal}"
    );
    let mut latest = llama.clone();
    latest["metadata"]["name"] = json!("latest-release");
    latest["spec"]["decode"]["image"] = json!("lmsysorg/sglang:latest");
    let (admitted, _, warnings) = apply(&cluster, &latest);
    assert!(admitted, "{warnings}");
    assert!(
        warnings.contains("Warning: spec.decode.image lmsysorg/sglang:latest names no SGLang release"),
        "{warnings}"
    );

    // onInvalid: Rewrite with the mutating webhook: the rewritten spec is what is stored, and the
    // rewrite reaches kubectl's output as a warning.
    let (admitted, _, warnings) = apply(&cluster, &example(ns, "mimo-pure-swa-rewrite.yaml"));
    assert!(admitted, "{warnings}");
    assert!(
        warnings.contains("Warning: spec.disaggregation.retractionBackup: host_pool → cpu_tensor (R2"),
        "{warnings}"
    );
    let stored = cluster.get_json(&["infd", "mimo-pure-swa", "-n", ns]).unwrap();
    assert_eq!(stored["spec"]["disaggregation"]["retractionBackup"], "cpu_tensor", "{:#}", stored["spec"]);
    assert_eq!(stored["spec"]["disaggregation"]["onInvalid"], "Rewrite");

    let (admitted, _, stderr) = apply(&cluster, &llama);
    assert!(admitted, "{stderr}");

    // Every webhook replica stopped: failurePolicy Fail (the chart's default) refuses writes ...
    chart.operator.stop();
    let mut gemma = example(ns, "gemma-3-1b-sliding-full-pool.yaml");
    let (admitted, _, refusal) = apply(&cluster, &gemma);
    assert!(!admitted, "admitted with no webhook and failurePolicy Fail");
    assert!(refusal.contains("failed calling webhook") && refusal.contains("connection refused"), "{refusal}");
    // ... and Ignore admits them (the controller still checks the settings in status).
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let patch = json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]);
        cluster.kubectl_ok(&["patch", kind, &fullname, "--type=json", "-p", &patch.to_string()]);
    }
    gemma["metadata"]["name"] = json!("gemma-unchecked");
    let (admitted, _, stderr) = apply(&cluster, &gemma);
    assert!(admitted, "refused with failurePolicy Ignore: {stderr}");
    drop(chart);
}
