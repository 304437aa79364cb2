//! `cargo bench --bench controller`: 1,000 InferenceDeployments × 4 replicas reconciled by the
//! `kvpilot operator` process against the in-process API server on loopback, with a simulated
//! kubelet. Every tenth resource is a whole PD service: a prefill replica and the router
//! (ServiceAccount, Role, RoleBinding, Deployment, Service) besides its decode fleet. Reports the time until every resource is Ready, the operator's peak RSS (VmHWM of
//! its own process), and, as the baseline measured in the same run, the time the same client
//! stack takes just to write the objects the operator writes (ConfigMap, Service, 4 pods,
//! status) with no reconciling. Against kube-apiserver the baseline writes the very objects
//! `desired_state` renders (SGLang pods) and waits for the kubelet, as the operator does.
//!
//! `BENCH_DEPLOYMENTS` (default 1000) and `BENCH_REPLICAS` (default 4) change the size.
//!
//! With `KVPILOT_BENCH_KUBECONFIG` naming the admin kubeconfig of a real control plane
//! (`scripts/control-plane.sh up`), the same run also reconciles the same fleet against
//! kube-apiserver + etcd, with the test kubelet (`tests/kubelet`) marking pods ready, in a
//! namespace of its own (deleted at the end). Both modes report the API requests per
//! reconcile the operator sent, by verb and resource, and its reconciles, from its own metrics
//! (`kvpilot_api_requests_total`, `kvpilot_reconciliations_total`). Against kube-apiserver the
//! run also reports what `apiserver_request_total` counted for the same kinds in the same
//! window, every client's: the operator's, the test kubelet's (which counts its own) and
//! kube-controller-manager's.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kvpilot::api::InferenceDeployment;
use kvpilot::apiserver::{ApiServer, kubelet};
use kvpilot::controller::desired::GROUP_READY;
use serde_json::{Value, json};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[path = "../tests/kubelet/mod.rs"]
mod real_kubelet;

/// The operator's own counters, from its `/metrics`.
async fn operator_counter(metrics_addr: &str, name: &str) -> f64 {
    let text = operator_metrics(metrics_addr).await;
    text.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

async fn operator_metrics(metrics_addr: &str) -> String {
    let Ok(response) = reqwest::get(format!("http://{metrics_addr}/metrics")).await else { return String::new() };
    response.text().await.unwrap_or_default()
}

/// The requests the operator sent, from its `kvpilot_api_requests_total`, keyed "VERB resource".
async fn operator_requests(metrics_addr: &str) -> BTreeMap<String, f64> {
    let mut requests = BTreeMap::new();
    for line in operator_metrics(metrics_addr).await.lines().filter(|l| l.starts_with("kvpilot_api_requests_total{")) {
        let (Some(verb), Some(resource)) = (metric_label(line, "verb"), metric_label(line, "resource")) else {
            continue;
        };
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let resource = if resource.is_empty() { "(discovery)".to_string() } else { resource };
        *requests.entry(format!("{verb} {resource}")).or_insert(0.0) += value;
    }
    requests
}

/// The value of label `name` in a line of the Prometheus text format.
fn metric_label(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    Some(line[start..].split('"').next()?.to_string())
}

fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// What one operator run measured.
struct Run {
    elapsed: Duration,
    peak_kib: u64,
    reconciles: f64,
    /// Requests the operator sent, keyed "VERB resource" (kube-apiserver's verbs: LIST, WATCH,
    /// GET, APPLY for server-side apply, PATCH, DELETE, POST).
    requests: BTreeMap<String, f64>,
    /// On kube-apiserver: the requests it counted for the kinds the operator uses while the
    /// operator ran (every client's), and the test kubelet's share of them.
    served: Option<(f64, f64)>,
}

impl Run {
    fn print(&self, mode: &str, deployments: usize, replicas: usize) {
        let per = |verb: &str| self.requests.get(verb).copied().unwrap_or(0.0) / self.reconciles.max(1.0);
        let total: f64 = self.requests.values().sum();
        println!("{mode}: {deployments} InferenceDeployments × {replicas} replicas, operator in its own process");
        println!(
            "  {:<50} {:>12}",
            "all Ready (operator start → last Ready)",
            format!("{:.2} s", self.elapsed.as_secs_f64())
        );
        println!("  {:<50} {:>12}", "operator peak RSS (VmHWM)", format!("{:.1} MiB", self.peak_kib as f64 / 1024.0));
        println!("  {:<50} {:>12}", "reconciles", format!("{:.0}", self.reconciles));
        println!("  {:<50} {:>12}", "API requests per reconcile", format!("{:.2}", total / self.reconciles.max(1.0)));
        let (listed, rare): (Vec<&String>, Vec<&String>) = self.requests.keys().partition(|key| per(key) >= 0.001);
        for key in listed {
            println!("  {:<50} {:>12}", format!("  {key} per reconcile"), format!("{:.3}", per(key)));
        }
        let rare: f64 = rare.iter().map(|key| self.requests[*key]).sum();
        println!("  {:<50} {:>12}", "  the rest (lists, watches, discovery), in all", format!("{rare:.0}"));
        if let Some((served, kubelet)) = self.served {
            let kind = |key: &str| key.split([' ', '/']).nth(1).unwrap_or_default().to_string();
            let counted = |key: &&String| OPERATOR_RESOURCES.contains(&kind(key).as_str());
            let operator: f64 = self.requests.iter().filter(|(key, _)| counted(key)).map(|(_, n)| n).sum();
            println!("  {:<50} {:>12}", "kube-apiserver's count, same kinds, every client", format!("{served:.0}"));
            println!("  {:<50} {:>12}", "  of them the operator's (its own count)", format!("{operator:.0}"));
            println!("  {:<50} {:>12}", "  the test kubelet's (its own count)", format!("{kubelet:.0}"));
            println!(
                "  {:<50} {:>12}",
                "  the rest (kube-controller-manager's)",
                format!("{:.0}", served - operator - kubelet)
            );
        }
    }
}

/// Starts the operator, waits until `ready()` reaches `deployments`, and measures.
async fn run_operator<F, Fut>(
    kubeconfig: &std::path::Path,
    deployments: usize,
    ready: F,
) -> (Duration, u64, Child, String)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let metrics = free_addr();
    let start = Instant::now();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["operator", "--metrics-addr", &metrics, "--health-addr", "127.0.0.1:0", "--namespace", "all"])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", std::env::var("OPERATOR_LOG").unwrap_or_else(|_| "error".into()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kvpilot operator");
    let pid = operator.id();
    let mut peak = 0;
    let deadline = Duration::from_secs(300);
    loop {
        let count = ready().await;
        peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
        if count >= deployments {
            break;
        }
        if start.elapsed() > deadline {
            let _ = operator.kill();
            panic!("{count} of {deployments} resources were Ready after {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let elapsed = start.elapsed();
    peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
    (elapsed, peak, operator, metrics)
}

/// Whether resource `index` is a whole PD service (prefill fleet and router): every tenth.
fn is_service(index: usize) -> bool {
    index.is_multiple_of(10)
}

fn resource(index: usize, replicas: usize) -> InferenceDeployment {
    let config: Value =
        serde_json::from_str(include_str!("../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
    let mut spec = json!({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"inline": config}},
             "disaggregation": {"retractionBackup": "host_pool"}, "decode": {"replicas": replicas}});
    if is_service(index) {
        spec["prefill"] = json!({"replicas": 1});
    }
    serde_json::from_value(json!({
        "apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": format!("model-{index:04}"), "namespace": "bench"},
        "spec": spec
    }))
    .unwrap()
}

/// The resources the operator reads and writes, whose requests the bench counts.
const OPERATOR_RESOURCES: [&str; 10] = [
    "pods",
    "configmaps",
    "services",
    "serviceaccounts",
    "roles",
    "rolebindings",
    "deployments",
    "poddisruptionbudgets",
    "inferencedeployments",
    "events",
];

/// The pods the kubelets of the bench run: both fleets' servers and the routers'.
const SERVED_PODS: &str = "app.kubernetes.io/name in (kvpilot-decode,kvpilot-prefill,kvpilot-router)";

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
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("{name}-sglang")}, "data": {"sglangArgs.json": "{}"}})).unwrap();
                Api::<ConfigMap>::namespaced(client.clone(), "bench").create(&pp, &cm).await.unwrap();
                let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("{name}-decode")}, "spec": {"clusterIP": "None"}})).unwrap();
                Api::<Service>::namespaced(client.clone(), "bench").create(&pp, &svc).await.unwrap();
                for r in 0..replicas {
                    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("{name}-decode-{r}")}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap();
                    Api::<Pod>::namespaced(client.clone(), "bench").create(&pp, &pod).await.unwrap();
                }
                if is_service(i) {
                    let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("{name}-prefill")}, "spec": {"clusterIP": "None"}})).unwrap();
                    Api::<Service>::namespaced(client.clone(), "bench").create(&pp, &svc).await.unwrap();
                    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("{name}-prefill-0")}, "spec": {"containers": [{"name": "c", "image": "i"}]}})).unwrap();
                    Api::<Pod>::namespaced(client.clone(), "bench").create(&pp, &pod).await.unwrap();
                    let router = format!("{name}-router");
                    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": router}})).unwrap();
                    Api::<ServiceAccount>::namespaced(client.clone(), "bench").create(&pp, &sa).await.unwrap();
                    let role: Role = serde_json::from_value(json!({"metadata": {"name": router}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})).unwrap();
                    Api::<Role>::namespaced(client.clone(), "bench").create(&pp, &role).await.unwrap();
                    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": router}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": router}, "subjects": [{"kind": "ServiceAccount", "name": router}]})).unwrap();
                    Api::<RoleBinding>::namespaced(client.clone(), "bench").create(&pp, &binding).await.unwrap();
                    let deployment: Deployment = serde_json::from_value(json!({"metadata": {"name": router}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).unwrap();
                    Api::<Deployment>::namespaced(client.clone(), "bench").create(&pp, &deployment).await.unwrap();
                    let svc: Service = serde_json::from_value(json!({"metadata": {"name": router}, "spec": {"selector": {"a": "b"}}})).unwrap();
                    Api::<Service>::namespaced(client.clone(), "bench").create(&pp, &svc).await.unwrap();
                }
                let deployment = resource(i, replicas);
                Api::<InferenceDeployment>::namespaced(client.clone(), "bench").create(&pp, &deployment).await.unwrap();
            }
        })
        .await;
    drop(server);
    start.elapsed()
}

/// `apiserver_request_total` summed by verb over the resources the operator touches.
async fn apiserver_requests(client: &kube::Client) -> BTreeMap<(String, String, String), f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.expect("scrape kube-apiserver /metrics");
    let mut totals = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let label = |name: &str| metric_label(line, name);
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else { continue };
        let subresource = label("subresource").unwrap_or_default();
        if !OPERATOR_RESOURCES.contains(&resource.as_str()) {
            continue;
        }
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *totals.entry((verb, resource, subresource)).or_insert(0.0) += value;
    }
    totals
}

async fn in_process(deployments: usize, replicas: usize) -> Run {
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
    let _kubelet = kubelet::spawn(client.clone(), SERVED_PODS, Duration::ZERO);
    let _routers = kubelet::spawn_deployments(client, "app.kubernetes.io/name=kvpilot-router", Duration::ZERO);
    let (elapsed, peak_kib, mut operator, metrics) =
        run_operator(&kubeconfig, deployments, || std::future::ready(ready_count(&server))).await;
    let reconciles = operator_counter(&metrics, "kvpilot_reconciliations_total").await;
    let requests = operator_requests(&metrics).await;
    let _ = operator.kill();
    let _ = operator.wait();
    Run { elapsed, peak_kib, reconciles, requests, served: None }
}

/// Waits until nothing writes or reads the kinds the bench uses for 3 s (at most 5 minutes):
/// the garbage collector may still be working through an earlier run's objects.
async fn settle(client: &kube::Client) {
    let count = async || {
        apiserver_requests(client).await.iter().filter(|(key, _)| key.0 != "WATCH").map(|(_, n)| n).sum::<f64>()
    };
    let start = Instant::now();
    let mut last = count().await;
    while start.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = count().await;
        if now == last {
            return;
        }
        last = now;
    }
}

async fn real_api_server(kubeconfig: &std::path::Path, deployments: usize, replicas: usize) -> Run {
    let client = real_client(kubeconfig).await;
    let crd: CustomResourceDefinition =
        serde_norway::from_str(include_str!("../crds/inferencedeployment.yaml")).expect("crds/");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let apply = PatchParams::apply("kvpilot-bench").force();
    crds.patch("inferencedeployments.kvpilot.dev", &apply, &Patch::Apply(&crd)).await.expect("apply the CRD");
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle(&client).await;
    let namespace = format!("kvpilot-bench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    namespaces.create(&PostParams::default(), &object).await.expect("create the bench namespace");
    let api: Api<InferenceDeployment> = Api::namespaced(client.clone(), &namespace);
    futures::stream::iter(0..deployments)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            let namespace = namespace.clone();
            async move {
                let mut object = resource(i, replicas);
                object.metadata.namespace = Some(namespace);
                api.create(&PostParams::default(), &object).await.expect("create an InferenceDeployment");
            }
        })
        .await;
    let timing = real_kubelet::Timing { bind: false, ..real_kubelet::Timing::new(Duration::ZERO, Duration::ZERO) };
    let _kubelet = real_kubelet::start(client.clone(), Some(&namespace), SERVED_PODS, timing);
    // Ready is counted from a watch: polling lists of 1,000 resources took kube-apiserver CPU
    // from the run it measures.
    let (watched, writer) = kube::runtime::reflector::store::<InferenceDeployment>();
    let watching = tokio::spawn(
        kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| std::future::ready(())),
    );
    watched.wait_until_ready().await.expect("watch the bench's InferenceDeployments");
    let before = apiserver_requests(&client).await;
    let kubelet_before = real_kubelet::requests_sent();
    let ready = || {
        let ready = watched
            .state()
            .iter()
            .filter(|d| {
                d.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        std::future::ready(ready)
    };
    let (elapsed, peak_kib, mut operator, metrics) = run_operator(kubeconfig, deployments, ready).await;
    let reconciles = operator_counter(&metrics, "kvpilot_reconciliations_total").await;
    let requests = operator_requests(&metrics).await;
    let after = apiserver_requests(&client).await;
    let kubelet = real_kubelet::requests_sent() - kubelet_before;
    watching.abort();
    let _ = operator.kill();
    let _ = operator.wait();
    let served: f64 = after.iter().map(|(key, value)| (value - before.get(key).copied().unwrap_or(0.0)).max(0.0)).sum();
    delete_namespace(&namespaces, &namespace).await;
    Run { elapsed, peak_kib, reconciles, requests, served: Some((served, kubelet as f64)) }
}

/// A client for the admin kubeconfig of a real control plane.
async fn real_client(kubeconfig: &std::path::Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).expect("read KVPILOT_BENCH_KUBECONFIG"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig");
    kube::Client::try_from(config).unwrap()
}

/// Deletes the bench namespace and waits until it is gone, so that the next run starts on an
/// idle API server (the namespace controller's deletion of thousands of objects would compete
/// with it).
async fn delete_namespace(namespaces: &Api<Namespace>, namespace: &str) {
    let _ = namespaces.delete(namespace, &DeleteParams::background()).await;
    let gone = Instant::now();
    while namespaces.get_opt(namespace).await.ok().flatten().is_some() && gone.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The baseline on kube-apiserver: one client writes what the operator would for every
/// resource, with no reconciling — the ConfigMap, the Service and the pods exactly as
/// `desired_state` renders them (server-side apply, like the operator), then, once the test
/// kubelet has marked a resource's pods ready, a status with Ready=True. Timed from the first
/// write to the last Ready status, on the same server, with the same kubelet and concurrency.
async fn real_baseline(kubeconfig: &std::path::Path, deployments: usize, replicas: usize) -> Duration {
    use kvpilot::controller::desired::{RenderOptions, desired_state};
    let client = real_client(kubeconfig).await;
    settle(&client).await;
    let namespace = format!("kvpilot-bench-base-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    namespaces.create(&PostParams::default(), &object).await.expect("create the baseline namespace");
    let api: Api<InferenceDeployment> = Api::namespaced(client.clone(), &namespace);
    let created: Vec<InferenceDeployment> = futures::stream::iter(0..deployments)
        .map(|i| {
            let api = api.clone();
            let namespace = namespace.clone();
            async move {
                let mut object = resource(i, replicas);
                object.metadata.namespace = Some(namespace);
                api.create(&PostParams::default(), &object).await.expect("create an InferenceDeployment")
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let timing = real_kubelet::Timing { bind: false, ..real_kubelet::Timing::new(Duration::ZERO, Duration::ZERO) };
    let _kubelet = real_kubelet::start(client.clone(), Some(&namespace), SERVED_PODS, timing);
    // Ready pods per resource, from a watch, as the operator learns them.
    let (pods, writer) = kube::runtime::reflector::store::<Pod>();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let watching = tokio::spawn(
        kube::runtime::watcher(pod_api, kube::runtime::watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| std::future::ready(())),
    );
    pods.wait_until_ready().await.expect("watch the baseline's pods");
    let options = RenderOptions::default();
    let apply = PatchParams::apply("kvpilot-bench").force();
    let start = Instant::now();
    futures::stream::iter(created)
        .for_each_concurrent(32, |resource| {
            let (client, pods, apply, options) = (client.clone(), pods.clone(), apply.clone(), options.clone());
            async move {
                let namespace = resource.metadata.namespace.clone().unwrap();
                let name = resource.metadata.name.clone().unwrap();
                let config = Value::Object(resource.spec.model.config.inline.clone().unwrap());
                let configs = kvpilot::policy::ModelConfigs::target(config);
                let assessment =
                    kvpilot::sglang::verdict::assess(&resource.spec, &configs, &Default::default()).unwrap();
                let desired = desired_state(&resource, &assessment, &options);
                // Every object the operator would write, as it renders them (pods of all replicas).
                for object in desired.objects() {
                    let kind = object["kind"].as_str().unwrap().to_string();
                    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
                        Some((group, version)) => (group.to_string(), version.to_string()),
                        None => (String::new(), "v1".to_string()),
                    };
                    let gvk = kube::api::GroupVersionKind::gvk(&group, &version, &kind);
                    let plural = format!("{}s", kind.to_lowercase());
                    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural);
                    let api: Api<kube::api::DynamicObject> =
                        Api::namespaced_with(client.clone(), &namespace, &resource);
                    let object_name = object["metadata"]["name"].as_str().unwrap().to_string();
                    api.patch(&object_name, &apply, &Patch::Apply(object)).await.unwrap();
                }
                let servers = replicas + desired.prefill.as_ref().map_or(0, |p| p.replicas as usize);
                let routers = desired.router.is_some() as usize;
                let holds = |pod: &Pod, type_: &str| {
                    pod.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
                };
                let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                loop {
                    let mine: Vec<std::sync::Arc<Pod>> = pods
                        .state()
                        .into_iter()
                        .filter(|p| {
                            p.metadata.labels.as_ref().and_then(|l| l.get("app.kubernetes.io/instance")) == Some(&name)
                        })
                        .collect();
                    if mine.iter().filter(|p| holds(p, "Ready")).count() >= servers + routers {
                        break;
                    }
                    // As the operator does: once every server's containers are ready, each server
                    // pod's readiness gate is set, which its Ready condition waits for.
                    let gated: Vec<&std::sync::Arc<Pod>> =
                        mine.iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.readiness_gates.is_some())).collect();
                    if gated.len() >= servers && gated.iter().all(|p| holds(p, "ContainersReady")) {
                        for pod in gated.into_iter().filter(|p| !holds(p, GROUP_READY)) {
                            let condition = json!({"status": {"conditions": [{"type": GROUP_READY, "status": "True",
                                "reason": "GroupReady", "message": "",
                                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
                            let pod_name = pod.metadata.name.clone().unwrap();
                            pod_api
                                .patch_status(&pod_name, &PatchParams::default(), &Patch::Strategic(condition))
                                .await
                                .unwrap();
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let status = json!({"apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady",
                        "message": "", "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
                Api::<InferenceDeployment>::namespaced(client, &namespace)
                    .patch_status(&name, &apply, &Patch::Apply(status))
                    .await
                    .unwrap();
            }
        })
        .await;
    let elapsed = start.elapsed();
    watching.abort();
    delete_namespace(&namespaces, &namespace).await;
    elapsed
}

fn main() {
    let deployments = env_or("BENCH_DEPLOYMENTS", 1000);
    let replicas = env_or("BENCH_REPLICAS", 4);
    let real = std::env::var_os("KVPILOT_BENCH_KUBECONFIG").map(std::path::PathBuf::from);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let baseline = baseline(deployments, replicas).await;
        let run = in_process(deployments, replicas).await;
        run.print("in-process API server", deployments, replicas);
        println!(
            "  {:<50} {:>12}",
            "baseline: the same objects written directly",
            format!("{:.2} s", baseline.as_secs_f64())
        );
        println!(
            "  {:<50} {:>12}",
            "ratio operator / baseline",
            format!("{:.2}x", run.elapsed.as_secs_f64() / baseline.as_secs_f64())
        );
        if let Some(kubeconfig) = real {
            let run = real_api_server(&kubeconfig, deployments, replicas).await;
            run.print("kube-apiserver + etcd", deployments, replicas);
            let baseline = real_baseline(&kubeconfig, deployments, replicas).await;
            println!(
                "  {:<50} {:>12}",
                "baseline: one client writes the same objects",
                format!("{:.2} s", baseline.as_secs_f64())
            );
            println!(
                "  {:<50} {:>12}",
                "ratio operator / baseline (target ≤ 1.5)",
                format!("{:.2}x", run.elapsed.as_secs_f64() / baseline.as_secs_f64())
            );
        }
    });
}
