//! The `kvpilot operator` process end to end: two replicas with leader election against the
//! in-process API server served on loopback, reached through a kubeconfig.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kvpilot::api::InferenceDeployment;
use kvpilot::apiserver::{ApiServer, kubelet};
use serde::Deserialize;
use serde_json::{Value, json};

fn spawn_operator(kubeconfig: &std::path::Path, identity: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["operator", "--leader-elect", "--lease-namespace", "kvpilot-system"])
        .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0", "--log-format", "json"])
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", identity)
        .env("RUST_LOG", "warn,kvpilot=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kvpilot operator")
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within {timeout:?}");
}

/// The in-process API server over HTTP on loopback, and a kubeconfig (in `dir`) pointing at it.
async fn serve_on_loopback() -> (ApiServer, tempfile::TempDir, PathBuf) {
    let server = ApiServer::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve_http(listener).await });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, ApiServer::kubeconfig(addr, "default")).unwrap();
    (server, dir, kubeconfig)
}

fn ready_pods(server: &ApiServer, name: &str) -> usize {
    server
        .list("", "v1", "pods", Some("default"))
        .iter()
        .filter(|p| p["metadata"]["labels"]["app.kubernetes.io/instance"] == name)
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_sigterm_hands_over() {
    let (server, _dir, kubeconfig) = serve_on_loopback().await;
    let _kubelet = kubelet::spawn(server.client(), "app.kubernetes.io/name=kvpilot-decode", Duration::from_millis(20));

    let mut first = spawn_operator(&kubeconfig, "replica-a");
    let leases: Api<Lease> = Api::namespaced(server.client(), "kvpilot-system");
    let holder = |leases: Api<Lease>| async move {
        leases.get_opt("kvpilot-operator").await.ok().flatten().and_then(|l| l.spec?.holder_identity)
    };
    wait_for("replica-a leads", Duration::from_secs(20), async || {
        holder(leases.clone()).await.as_deref() == Some("replica-a")
    })
    .await;
    let mut second = spawn_operator(&kubeconfig, "replica-b");

    let text =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/llama-3.1-8b-full.yaml"))
            .unwrap();
    let object = serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).next().unwrap();
    let resource: InferenceDeployment = serde_json::from_value(object).unwrap();
    let deployments: Api<InferenceDeployment> = Api::namespaced(server.client(), "default");
    deployments.create(&PostParams::default(), &resource).await.unwrap();
    wait_for("2 ready pods", Duration::from_secs(20), async || ready_pods(&server, "llama-3-1-8b") == 2).await;
    assert_eq!(holder(leases.clone()).await.as_deref(), Some("replica-a"), "the standby did not take over");

    // SIGTERM: the leader releases the lease and exits cleanly; the standby takes over.
    let status = Command::new("kill").args(["-TERM", &first.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exited = tokio::task::spawn_blocking(move || first.wait().unwrap()).await.unwrap();
    assert!(exited.success(), "the operator exits 0 on SIGTERM: {exited:?}");
    wait_for("replica-b leads", Duration::from_secs(30), async || {
        holder(leases.clone()).await.as_deref() == Some("replica-b")
    })
    .await;

    deployments
        .patch("llama-3-1-8b", &PatchParams::default(), &Patch::Merge(json!({"spec": {"decode": {"replicas": 3}}})))
        .await
        .unwrap();
    wait_for("the new leader scales to 3", Duration::from_secs(20), async || ready_pods(&server, "llama-3-1-8b") == 3)
        .await;
    second.kill().unwrap();
    let _ = second.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_webhook_certificates_are_created_and_trusted_at_start_up() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Secret;

    let (server, dir, kubeconfig) = serve_on_loopback().await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(server.client());
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "kvpilot"},
        "webhooks": [{"name": "validate.kvpilot.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "clientConfig": {"service": {"name": "kvpilot-webhook", "namespace": "kvpilot-system"}}}]
    }))
    .unwrap();
    configurations.create(&PostParams::default(), &configuration).await.unwrap();

    let tls = dir.path().join("tls");
    let mut operator = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["operator", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .args(["--webhook-addr", "127.0.0.1:0", "--webhook-certs", "self-signed"])
        .args(["--validating-webhook-configuration", "kvpilot", "--operator-namespace", "kvpilot-system"])
        .arg("--tls-cert")
        .arg(tls.join("tls.crt"))
        .arg("--tls-key")
        .arg(tls.join("tls.key"))
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kvpilot operator");
    let secrets: Api<Secret> = Api::namespaced(server.client(), "kvpilot-system");
    wait_for("the webhook Secret and caBundle", Duration::from_secs(20), async || {
        let secret = secrets.get_opt("kvpilot-webhook-tls").await.ok().flatten();
        let ca = secret.and_then(|s| s.data?.get("ca.crt").cloned());
        let bundle =
            configurations.get("kvpilot").await.ok().and_then(|c| c.webhooks?[0].client_config.ca_bundle.clone());
        ca.is_some() && bundle == ca && tls.join("tls.crt").exists()
    })
    .await;
    operator.kill().unwrap();
    let _ = operator.wait();
}
