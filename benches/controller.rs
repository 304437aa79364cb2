//! `cargo bench --bench controller`: 1,000 InferenceDeployments × 4 replicas reconciled by the
//! `kvpilot operator` process against the in-process API server on loopback, with a simulated
//! kubelet. Reports the time until every resource is Ready, the operator's peak RSS (VmHWM of
//! its own process), and, as the baseline measured in the same run, the time the same client
//! stack takes just to write the objects the operator writes (ConfigMap, Service, 4 pods,
//! status) with no reconciling.
//!
//! `BENCH_DEPLOYMENTS` (default 1000) and `BENCH_REPLICAS` (default 4) change the size.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, PostParams};
use kvpilot::api::InferenceDeployment;
use kvpilot::apiserver::{ApiServer, kubelet};
use serde_json::{Value, json};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn resource(index: usize, replicas: usize) -> InferenceDeployment {
    let config: Value =
        serde_json::from_str(include_str!("../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
    serde_json::from_value(json!({
        "apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": format!("model-{index:04}"), "namespace": "bench"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"inline": config}},
                 "disaggregation": {"retractionBackup": "host_pool"}, "decode": {"replicas": replicas}}
    }))
    .unwrap()
}

fn ready_count(server: &ApiServer) -> usize {
    server.count(("kvpilot.dev", "v1alpha1", "inferencedeployments"), Some("bench"), |d| {
        d["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}

async fn serve() -> (ApiServer, std::net::SocketAddr) {
    let server = ApiServer::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve_http(listener).await });
    (server, addr)
}

/// The writes a reconcile of a fresh resource makes, done directly with the same client stack.
async fn baseline(deployments: usize, replicas: usize) -> Duration {
    let (server, addr) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, ApiServer::kubeconfig(addr, "bench")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&path).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let start = Instant::now();
    futures::stream::iter(0..deployments)
        .for_each_concurrent(64, |i| {
            let client = client.clone();
            async move {
                let name = format!("model-{i:04}");
                let pp = PostParams::default();
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("{name}-runtime")}, "data": {"runtime.json": "{}"}})).unwrap();
                Api::<ConfigMap>::namespaced(client.clone(), "bench").create(&pp, &cm).await.unwrap();
                let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("{name}-decode")}, "spec": {"clusterIP": "None"}})).unwrap();
                Api::<Service>::namespaced(client.clone(), "bench").create(&pp, &svc).await.unwrap();
                for r in 0..replicas {
                    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("{name}-decode-{r}")}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap();
                    Api::<Pod>::namespaced(client.clone(), "bench").create(&pp, &pod).await.unwrap();
                }
                let deployment = resource(i, replicas);
                Api::<InferenceDeployment>::namespaced(client.clone(), "bench").create(&pp, &deployment).await.unwrap();
            }
        })
        .await;
    drop(server);
    start.elapsed()
}

fn main() {
    let deployments = env_or("BENCH_DEPLOYMENTS", 1000);
    let replicas = env_or("BENCH_REPLICAS", 4);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let baseline = baseline(deployments, replicas).await;

        let (server, addr) = serve().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, ApiServer::kubeconfig(addr, "bench")).unwrap();
        let client = server.client();
        futures::stream::iter(0..deployments)
            .for_each_concurrent(64, |i| {
                let api: Api<InferenceDeployment> = Api::namespaced(client.clone(), "bench");
                async move {
                    api.create(&PostParams::default(), &resource(i, replicas)).await.unwrap();
                }
            })
            .await;
        let _kubelet = kubelet::spawn(client, "app.kubernetes.io/name=kvpilot-decode", Duration::ZERO);

        let start = Instant::now();
        let mut operator = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
            .args(["operator", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", std::env::var("OPERATOR_LOG").unwrap_or_else(|_| "error".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kvpilot operator");
        let pid = operator.id();
        let mut peak = 0;
        let deadline = Duration::from_secs(120);
        while ready_count(&server) < deployments {
            peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
            if start.elapsed() > deadline {
                let _ = operator.kill();
                panic!("{} of {deployments} resources were Ready after {deadline:?}", ready_count(&server));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let elapsed = start.elapsed();
        peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
        let pods = server.count(("", "v1", "pods"), Some("bench"), |_| true);
        let _ = operator.kill();
        let _ = operator.wait();

        println!("controller: {deployments} InferenceDeployments × {replicas} replicas ({pods} pods), operator in its own process");
        println!("{:<52} {:>12}", "all Ready (operator start → last Ready)", format!("{:.2} s", elapsed.as_secs_f64()));
        println!("{:<52} {:>12}", "operator peak RSS (VmHWM)", format!("{:.1} MiB", peak as f64 / 1024.0));
        println!("{:<52} {:>12}", "baseline: the same objects written directly", format!("{:.2} s", baseline.as_secs_f64()));
        println!("{:<52} {:>12}", "ratio operator / baseline", format!("{:.2}x", elapsed.as_secs_f64() / baseline.as_secs_f64()));
    });
}
