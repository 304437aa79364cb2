//! The real kube-runtime `Controller` running kvpilot's reconciler against the in-process API
//! server, with a simulated kubelet marking pods ready.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kvpilot::api::InferenceDeployment;
use kvpilot::apiserver::{ApiServer, Fault, kubelet};
use kvpilot::controller::desired::RenderOptions;
use kvpilot::controller::{self, Context, Scope, metrics::Metrics};
use kvpilot::source::{ClusterSource, HubClient};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;

const NS: &str = "serving";

struct Operator {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Operator {
    fn start(server: &ApiServer) -> Self {
        let client = server.client();
        let hub = Arc::new(HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).unwrap());
        let source = ClusterSource::new(client.clone(), hub, "https://huggingface.co");
        let mut context = Context::new(client, source, RenderOptions::default(), Metrics::default());
        // These tests step through many reconciles each; the production debounce (the
        // operator tests and the cluster tests run it) would only make them wait.
        context.reconcile_debounce = Duration::from_millis(20);
        let context = Arc::new(context);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(controller::run(context, Scope::All, async move {
            let _ = stopped.await;
        }));
        Self { stop: Some(stop), task }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// An API server, a kubelet that reports pods ready `pod_start` after they appear, and a
/// running operator.
fn cluster(pod_start: Duration) -> (ApiServer, tokio::task::JoinHandle<()>, Operator) {
    let server = ApiServer::new();
    let kubelet =
        kubelet::spawn(server.client(), "app.kubernetes.io/name in (kvpilot-decode,kvpilot-prefill)", pod_start);
    let operator = Operator::start(&server);
    (server, kubelet, operator)
}

/// An example as a decode fleet alone (without spec.prefill and so without a router): most tests
/// here follow decode pods; [`a_pd_service_runs_prefill_decode_and_the_router`] the whole service.
fn example(name: &str) -> Value {
    let mut doc = pd_example(name);
    if let Some(spec) = doc["spec"].as_object_mut() {
        spec.remove("prefill");
    }
    doc
}

fn pd_example(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    let text = std::fs::read_to_string(path).unwrap();
    let mut doc = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "InferenceDeployment")
        .unwrap();
    doc["metadata"]["namespace"] = json!(NS);
    doc
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs").join(format!("{name}.json")),
    )
    .unwrap()
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match check().await {
            Ok(()) => return,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} did not happen within {timeout:?}: {last}");
}

fn deployments(server: &ApiServer) -> Api<InferenceDeployment> {
    Api::namespaced(server.client(), NS)
}

async fn create(server: &ApiServer, object: &Value) -> InferenceDeployment {
    let resource: InferenceDeployment = serde_json::from_value(object.clone()).unwrap();
    deployments(server).create(&PostParams::default(), &resource).await.unwrap()
}

fn pods_of(server: &ApiServer, name: &str) -> Vec<Value> {
    server
        .list("", "v1", "pods", Some(NS))
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app.kubernetes.io/instance"] == name)
        .collect()
}

fn condition(server: &ApiServer, name: &str, type_: &str) -> Option<Value> {
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, name)?;
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

/// The revisions the pods run, one entry per fleet and revision (`kvpilot-decode/abc`).
fn revisions(pods: &[Value]) -> Vec<String> {
    let mut revisions: Vec<String> = pods
        .iter()
        .map(|p| {
            let labels = &p["metadata"]["labels"];
            let fleet = labels["app.kubernetes.io/name"].as_str().unwrap();
            format!("{fleet}/{}", labels["kvpilot.dev/revision"].as_str().unwrap())
        })
        .collect();
    revisions.sort();
    revisions.dedup();
    revisions
}

async fn ready(server: &ApiServer, name: &str, replicas: usize) {
    eventually(&format!("{name} Ready with {replicas} pods"), Duration::from_secs(20), || async {
        let pods = pods_of(server, name);
        let ready = condition(server, name, "Ready").ok_or("no Ready condition")?;
        let fleets: std::collections::BTreeSet<&str> =
            pods.iter().filter_map(|p| p["metadata"]["labels"]["app.kubernetes.io/name"].as_str()).collect();
        if ready["status"] != "True" || pods.len() != replicas || revisions(&pods).len() > fleets.len() {
            return Err(format!(
                "Ready={} with {} pods, revisions {:?}",
                ready["status"],
                pods.len(),
                revisions(&pods)
            ));
        }
        Ok(())
    })
    .await;
}

fn events_with_reason(server: &ApiServer, reason: &str) -> Vec<Value> {
    server.list("events.k8s.io", "v1", "events", Some(NS)).into_iter().filter(|e| e["reason"] == reason).collect()
}

fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    object.pointer_mut(parent).unwrap().as_object_mut().unwrap().insert(key.into(), value);
}

/// The decode flags of a resource's `NAME-sglang` ConfigMap.
fn decode_args(data: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let args: Value = serde_json::from_str(&data["sglangArgs.json"]).unwrap();
    serde_json::from_value(args["decode"].clone()).unwrap()
}

async fn patch_spec(server: &ApiServer, name: &str, patch: Value) {
    deployments(server).patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": patch}))).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_owned_objects_and_reports_ready() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(30));
    let created = create(&server, &example("llama-3.1-8b-full.yaml")).await;
    ready(&server, "llama-3-1-8b", 2).await;

    let uid = created.metadata.uid.unwrap();
    let config_map: ConfigMap = Api::namespaced(server.client(), NS).get("llama-3-1-8b-sglang").await.unwrap();
    let service: Service = Api::namespaced(server.client(), NS).get("llama-3-1-8b-decode").await.unwrap();
    for owners in [&config_map.metadata.owner_references, &service.metadata.owner_references] {
        assert_eq!(owners.as_ref().unwrap()[0].uid, uid);
    }
    let args = decode_args(&config_map.data.unwrap());
    assert!(args.windows(2).any(|w| w == ["--disaggregation-decode-retraction-backup", "host_pool"]), "{args:?}");
    assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let pods: Vec<Pod> = Api::namespaced(server.client(), NS).list(&ListParams::default()).await.unwrap().items;
    let mut names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    names.sort();
    assert_eq!(names, vec!["llama-3-1-8b-decode-0", "llama-3-1-8b-decode-1"]);
    for pod in &pods {
        let sglang = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(sglang.command.as_ref().unwrap(), &["python3", "-m", "sglang.launch_server"]);
        let pod_args = sglang.args.as_ref().unwrap();
        assert_eq!(pod_args[..args.len()], args[..], "the pod runs the flags the policy decided");
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].uid, uid);
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"], "kvpilot");
    }

    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "llama-3-1-8b").unwrap();
    let status = &object["status"];
    assert_eq!(status["observedGeneration"], object["metadata"]["generation"]);
    assert_eq!(status["layout"]["kvPool"], "full");
    assert_eq!(status["effective"]["retractionBackup"], "host_pool");
    assert_eq!(status["sglang"], json!({"version": "0.5.23", "source": "Default"}));
    assert_eq!(status["decode"]["readyReplicas"], 2);
    assert_eq!(
        status["decode"]["selector"],
        "app.kubernetes.io/instance=llama-3-1-8b,app.kubernetes.io/name=kvpilot-decode"
    );
    for (type_, expected) in
        [("ModelResolved", "True"), ("SettingsValid", "True"), ("Ready", "True"), ("Progressing", "False")]
    {
        assert_eq!(condition(&server, "llama-3-1-8b", type_).unwrap()["status"], expected, "{type_}");
    }
    assert_eq!(created.spec, deployments(&server).get("llama-3-1-8b").await.unwrap().spec, "the spec is never written");

    // Settled: no hot loop of no-op writes.
    let settled = server.resource_version();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.resource_version(), settled, "a settled resource causes no writes");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scales_up_and_down_and_recreates_deleted_pods() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    create(&server, &example("llama-3.1-8b-full.yaml")).await;
    ready(&server, "llama-3-1-8b", 2).await;

    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"replicas": 5}})).await;
    ready(&server, "llama-3-1-8b", 5).await;
    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"replicas": 2}})).await;
    ready(&server, "llama-3-1-8b", 2).await;
    let mut names: Vec<String> =
        pods_of(&server, "llama-3-1-8b").iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, vec!["llama-3-1-8b-decode-0", "llama-3-1-8b-decode-1"], "the highest ordinals went first");

    let pods: Api<Pod> = Api::namespaced(server.client(), NS);
    pods.delete("llama-3-1-8b-decode-1", &DeleteParams::default()).await.unwrap();
    ready(&server, "llama-3-1-8b", 2).await;
    assert!(pods.get("llama-3-1-8b-decode-1").await.is_ok(), "the deleted pod was recreated");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_out_a_new_revision_within_max_unavailable() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(40));
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/decode/replicas", json!(4));
    create(&server, &object).await;
    ready(&server, "llama-3-1-8b", 4).await;
    let before = revisions(&pods_of(&server, "llama-3-1-8b"));

    // Watch availability while the rollout runs.
    let monitor_server = server.clone();
    let monitor = tokio::spawn(async move {
        let mut lowest = usize::MAX;
        let mut highest = 0;
        for _ in 0..400 {
            let pods = pods_of(&monitor_server, "llama-3-1-8b");
            let ready = pods
                .iter()
                .filter(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
                .count();
            lowest = lowest.min(ready);
            highest = highest.max(pods.len());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (lowest, highest)
    });
    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"pageSize": 32}})).await;
    eventually("Progressing=True", Duration::from_secs(5), || async {
        let progressing = condition(&server, "llama-3-1-8b", "Progressing").ok_or("none")?;
        let ready = condition(&server, "llama-3-1-8b", "Ready").ok_or("none")?;
        (progressing["status"] == "True"
            || ready["status"] == "True" && revisions(&pods_of(&server, "llama-3-1-8b")) != before)
            .then_some(())
            .ok_or_else(|| progressing.to_string())
    })
    .await;
    ready(&server, "llama-3-1-8b", 4).await;
    let after = revisions(&pods_of(&server, "llama-3-1-8b"));
    assert_ne!(after, before, "every pod is at the new revision");
    let (lowest, highest) = monitor.await.unwrap();
    assert!(lowest >= 3, "maxUnavailable=1 of 4 kept at least 3 pods ready, saw {lowest}");
    assert!(highest <= 4, "maxSurge=0 never ran more than 4 pods, saw {highest}");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_settings_create_nothing_until_fixed_and_never_touch_running_pods() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    let mut object = example("mimo-pure-swa-rewrite.yaml");
    set(&mut object, "/spec/disaggregation/onInvalid", json!("Reject"));
    create(&server, &object).await;
    eventually("SettingsValid=False", Duration::from_secs(10), || async {
        let settings = condition(&server, "mimo-pure-swa", "SettingsValid").ok_or("none")?;
        (settings["status"] == "False" && settings["reason"] == "R2").then_some(()).ok_or_else(|| settings.to_string())
    })
    .await;
    let message =
        condition(&server, "mimo-pure-swa", "SettingsValid").unwrap()["message"].as_str().unwrap().to_string();
    assert!(message.contains("Host-pool retraction does not support pure-SWA models."), "{message}");
    assert_eq!(condition(&server, "mimo-pure-swa", "Ready").unwrap()["reason"], "SettingsRejected");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pods_of(&server, "mimo-pure-swa").is_empty(), "no pods for rejected settings");
    assert!(server.get("", "v1", "configmaps", NS, "mimo-pure-swa-sglang").is_none());
    assert_eq!(events_with_reason(&server, "R2").len(), 1, "one Warning event, not one per retry");

    patch_spec(&server, "mimo-pure-swa", json!({"disaggregation": {"retractionBackup": "cpu_tensor"}})).await;
    ready(&server, "mimo-pure-swa", 1).await;
    let running = pods_of(&server, "mimo-pure-swa");

    // Breaking the settings again leaves the running pod alone.
    patch_spec(
        &server,
        "mimo-pure-swa",
        json!({"disaggregation": {"retractionBackup": "host_pool"}, "decode": {"replicas": 3}}),
    )
    .await;
    eventually("rejected again", Duration::from_secs(10), || async {
        let settings = condition(&server, "mimo-pure-swa", "SettingsValid").ok_or("none")?;
        (settings["status"] == "False").then_some(()).ok_or_else(|| settings.to_string())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pods_of(&server, "mimo-pure-swa"), running, "existing pods keep running, none are added");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_are_recorded_in_status_and_events_and_run_by_the_pods() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    let created = create(&server, &example("mimo-pure-swa-rewrite.yaml")).await;
    ready(&server, "mimo-pure-swa", 1).await;
    let settings = condition(&server, "mimo-pure-swa", "SettingsValid").unwrap();
    assert_eq!((settings["status"].as_str(), settings["reason"].as_str()), (Some("True"), Some("Rewritten")));
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "mimo-pure-swa").unwrap();
    assert_eq!(object["status"]["rewrites"][0]["rule"], "R2");
    assert_eq!(object["status"]["rewrites"][0]["to"], "cpu_tensor");
    assert_eq!(object["status"]["effective"]["retractionBackup"], "cpu_tensor");
    assert_eq!(object["spec"]["disaggregation"]["retractionBackup"], "host_pool", "the spec keeps what the user wrote");
    assert_eq!(object["metadata"]["generation"], json!(created.metadata.generation.unwrap()));
    for pod in pods_of(&server, "mimo-pure-swa") {
        let args: Vec<&str> =
            pod["spec"]["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(args.windows(2).any(|w| w == ["--disaggregation-decode-retraction-backup", "cpu_tensor"]), "{args:?}");
    }
    let events = events_with_reason(&server, "SettingRewritten");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "Normal");
    assert!(events[0]["note"].as_str().unwrap().contains("host_pool → cpu_tensor (R2"), "{}", events[0]["note"]);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_sources_are_watched() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/model/config", json!({"configMapRef": {"name": "model-config"}}));
    create(&server, &object).await;
    eventually("ModelResolved=False", Duration::from_secs(10), || async {
        let model = condition(&server, "llama-3-1-8b", "ModelResolved").ok_or("none")?;
        (model["reason"] == "ConfigMapUnavailable").then_some(()).ok_or_else(|| model.to_string())
    })
    .await;
    assert_eq!(events_with_reason(&server, "ConfigMapUnavailable").len(), 1);

    let config_maps: Api<ConfigMap> = Api::namespaced(server.client(), NS);
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "model-config"}, "data": {"config.json": fixture("llama-3.1-8b-instruct")}
    }))
    .unwrap();
    config_maps.create(&PostParams::default(), &config_map).await.unwrap();
    ready(&server, "llama-3-1-8b", 2).await;

    // Editing the ConfigMap to a pure-SWA model re-reconciles: host_pool is now rejected.
    config_maps
        .patch(
            "model-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"config.json": fixture("custom-pure-swa")}})),
        )
        .await
        .unwrap();
    eventually("SettingsValid=False after the ConfigMap edit", Duration::from_secs(10), || async {
        let settings = condition(&server, "llama-3-1-8b", "SettingsValid").ok_or("none")?;
        (settings["reason"] == "R2").then_some(()).ok_or_else(|| settings.to_string())
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_speculative_draft_config_is_read_and_its_config_map_watched() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/disaggregation/speculativeAlgorithm", json!("EAGLE3"));
    set(
        &mut object,
        "/spec/disaggregation/speculativeDraftModel",
        json!({"name": "org/llama-eagle3", "config": {"configMapRef": {"name": "draft-config"}}}),
    );
    create(&server, &object).await;
    let model_resolved = |reason: &'static str| {
        let server = &server;
        move || async move {
            let model = condition(server, "llama-3-1-8b", "ModelResolved").ok_or("none")?;
            (model["reason"] == reason).then_some(()).ok_or_else(|| model.to_string())
        }
    };
    eventually("the draft's ConfigMap is missing", Duration::from_secs(10), model_resolved("ConfigMapUnavailable"))
        .await;
    let message = condition(&server, "llama-3-1-8b", "ModelResolved").unwrap()["message"].to_string();
    assert!(message.contains("spec.disaggregation.speculativeDraftModel.config.configMapRef.name"), "{message}");

    let config_maps: Api<ConfigMap> = Api::namespaced(server.client(), NS);
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "draft-config"}, "data": {"config.json": fixture("llama-3.1-8b-instruct")}
    }))
    .unwrap();
    config_maps.create(&PostParams::default(), &config_map).await.unwrap();
    ready(&server, "llama-3-1-8b", 2).await;
    let sglang: ConfigMap = config_maps.get("llama-3-1-8b-sglang").await.unwrap();
    let args = decode_args(&sglang.data.unwrap());
    assert!(args.windows(2).any(|w| w == ["--speculative-draft-model-path", "org/llama-eagle3"]), "{args:?}");
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "llama-3-1-8b").unwrap();
    assert_eq!(object["status"]["draftLayout"]["architecture"], "LlamaForCausalLM");

    // An edit of the draft's ConfigMap re-reconciles the resource.
    config_maps
        .patch("draft-config", &PatchParams::default(), &Patch::Merge(json!({"data": {"config.json": "[1, 2]"}})))
        .await
        .unwrap();
    eventually("the draft's config is no model config", Duration::from_secs(10), model_resolved("InvalidConfigJson"))
        .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_sources_are_fetched_from_a_local_server() {
    use axum::{Router, routing::get};
    let config = fixture("gpt-oss-20b");
    let app =
        Router::new().route("/openai/gpt-oss-20b/resolve/main/config.json", get(move || async move { config.clone() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let (server, _kubelet, operator) = cluster(Duration::from_millis(10));
    let mut object = example("gpt-oss-20b-hybrid-swa.yaml");
    set(&mut object, "/spec/model/config", json!({"hub": {"endpoint": format!("http://{addr}")}}));
    create(&server, &object).await;
    ready(&server, "gpt-oss-20b", 2).await;
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "gpt-oss-20b").unwrap();
    assert_eq!(object["status"]["layout"]["kvPool"], "hybrid-swa");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_dropped_watches_lose_and_duplicate_nothing() {
    let server = ApiServer::new();
    let _kubelet = kubelet::spawn(server.client(), "app.kubernetes.io/name=kvpilot-decode", Duration::from_millis(10));
    server.inject(Fault { method: Some(http::Method::PATCH), path_contains: "/pods/".into(), status: 500, times: 3 });
    server.inject(Fault { method: Some(http::Method::PATCH), path_contains: "/status".into(), status: 409, times: 2 });
    server.inject(Fault {
        method: Some(http::Method::PATCH),
        path_contains: "/configmaps/".into(),
        status: 503,
        times: 1,
    });
    let operator = Operator::start(&server);
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/decode/replicas", json!(3));
    create(&server, &object).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.drop_watches();
    ready(&server, "llama-3-1-8b", 3).await;
    server.drop_watches();
    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"replicas": 4}})).await;
    ready(&server, "llama-3-1-8b", 4).await;
    let mut names: Vec<String> =
        pods_of(&server, "llama-3-1-8b").iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, (0..4).map(|i| format!("llama-3-1-8b-decode-{i}")).collect::<Vec<_>>());
    let failures = server.request_count("PATCH", "/pods/");
    assert!(failures >= 7, "the injected 500s were retried ({failures} pod applies)");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_mid_rollout_converges() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(150));
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/decode/replicas", json!(4));
    create(&server, &object).await;
    ready(&server, "llama-3-1-8b", 4).await;
    let before = revisions(&pods_of(&server, "llama-3-1-8b"));
    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"pageSize": 64}})).await;
    eventually("the rollout started", Duration::from_secs(10), || async {
        let pods = pods_of(&server, "llama-3-1-8b");
        (revisions(&pods).len() > 1 || pods.len() < 4).then_some(()).ok_or("not yet".to_string())
    })
    .await;
    operator.stop().await;

    let restarted = Operator::start(&server);
    ready(&server, "llama-3-1-8b", 4).await;
    assert_ne!(revisions(&pods_of(&server, "llama-3-1-8b")), before);
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_rollout_is_named_in_progressing_and_warned_about_once() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(20));
    let mut object = example("llama-3.1-8b-full.yaml");
    set(&mut object, "/spec/decode/rollout", json!({"maxUnavailable": "half", "maxSurge": 0}));
    create(&server, &object).await;
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    eventually("Progressing names the rollout problem", Duration::from_secs(20), || async {
        let progressing = condition(&server, &name, "Progressing").ok_or("no Progressing condition")?;
        let message = progressing["message"].as_str().unwrap_or_default();
        if progressing["reason"] != "InvalidRollout" || !message.contains("spec.decode.rollout") {
            return Err(format!("{progressing}"));
        }
        Ok(())
    })
    .await;
    let progressing = condition(&server, &name, "Progressing").unwrap();
    assert!(progressing["message"].as_str().unwrap().contains("maxUnavailable 1, maxSurge 0"), "{progressing}");
    // More reconciles (a scale change, pods turning ready) must not repeat the warning.
    patch_spec(&server, &name, json!({"decode": {"replicas": 2}})).await;
    ready(&server, &name, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let warnings = events_with_reason(&server, "InvalidRollout");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]["series"].is_null(), "warned more than once: {}", warnings[0]);
    operator.stop().await;
}

/// Applies to the ConfigMap and Service of `name` so far, from the server's request log.
fn kept_applies(server: &ApiServer, name: &str) -> u64 {
    let paths = [
        format!("PATCH /api/v1/namespaces/{NS}/configmaps/{name}-sglang"),
        format!("PATCH /api/v1/namespaces/{NS}/services/{name}-decode"),
    ];
    server.request_log().into_iter().filter(|(key, _)| paths.contains(key)).map(|(_, count)| count).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_map_and_service_are_applied_again_only_when_they_or_the_settings_change() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(30));
    create(&server, &example("llama-3.1-8b-full.yaml")).await;
    ready(&server, "llama-3-1-8b", 2).await;
    // Pod events re-reconciled the resource several times; the first pass wrote both objects.
    assert_eq!(kept_applies(&server, "llama-3-1-8b"), 2, "{:?}", server.request_log());

    // Another writer changes a field the controller owns: the change is its own write, so the
    // controller applies again and takes the field back.
    let config_maps: Api<ConfigMap> = Api::namespaced(server.client(), NS);
    let original = config_maps.get("llama-3-1-8b-sglang").await.unwrap().data.unwrap();
    let edit = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"sglangArgs.json": "{}"}});
    config_maps
        .patch("llama-3-1-8b-sglang", &PatchParams::apply("someone-else").force(), &Patch::Apply(edit))
        .await
        .unwrap();
    eventually("the controller restores sglangArgs.json", Duration::from_secs(10), || async {
        let data = config_maps.get("llama-3-1-8b-sglang").await.map_err(|e| e.to_string())?.data.unwrap_or_default();
        if data == original { Ok(()) } else { Err(format!("sglangArgs.json is {:?}", data.get("sglangArgs.json"))) }
    })
    .await;
    assert_eq!(kept_applies(&server, "llama-3-1-8b"), 2 + 2, "the edit, and the ConfigMap applied once more");

    // A settings change that reaches the ConfigMap applies it again.
    patch_spec(&server, "llama-3-1-8b", json!({"disaggregation": {"retractionBackup": "cpu_tensor"}})).await;
    eventually("sglangArgs.json follows the spec", Duration::from_secs(10), || async {
        let data = config_maps.get("llama-3-1-8b-sglang").await.map_err(|e| e.to_string())?.data.unwrap_or_default();
        let args = decode_args(&data);
        if args.windows(2).any(|w| w == ["--disaggregation-decode-retraction-backup", "cpu_tensor"]) {
            Ok(())
        } else {
            Err(format!("{args:?}"))
        }
    })
    .await;
    operator.stop().await;
}

/// With spec.prefill the resource is a whole PD service: prefill pods with the bootstrap port,
/// the router with its own identity, and status.endpoint; each fleet rolls on its own without
/// touching the router, and what is no longer asked for goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pd_service_runs_prefill_decode_and_the_router() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(30));
    let _routers = kubelet::spawn_deployments(server.client(), "app.kubernetes.io/name=kvpilot-router", Duration::ZERO);
    create(&server, &pd_example("llama-3.1-8b-full.yaml")).await;
    ready(&server, "llama-3-1-8b", 3).await;
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "llama-3-1-8b").unwrap();
    assert_eq!(object["status"]["endpoint"], "http://llama-3-1-8b-router.serving.svc:8000");
    assert_eq!(object["status"]["prefill"]["readyReplicas"], 1);
    assert_eq!(object["status"]["router"]["readyReplicas"], 1);
    let ready_condition = condition(&server, "llama-3-1-8b", "Ready").unwrap();
    assert_eq!(ready_condition["reason"], "ServiceReady", "{ready_condition}");

    let prefill = server.get("", "v1", "pods", NS, "llama-3-1-8b-prefill-0").expect("the prefill pod");
    let args: Vec<&str> =
        prefill["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let flag = |name: &str| args.iter().position(|a| *a == name).map(|i| args[i + 1]);
    assert_eq!(flag("--disaggregation-mode"), Some("prefill"));
    assert_eq!(flag("--disaggregation-bootstrap-port"), Some("8998"));
    assert_eq!(flag("--page-size"), Some("16"), "the page size the decode fleet uses");
    assert_eq!(prefill["metadata"]["annotations"]["sglang.ai/bootstrap-port"], "8998");
    for (group, plural) in [
        ("", "serviceaccounts"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("apps", "deployments"),
        ("", "services"),
    ] {
        let object = server
            .get(group, "v1", plural, NS, "llama-3-1-8b-router")
            .unwrap_or_else(|| panic!("no {plural} llama-3-1-8b-router"));
        assert_eq!(object["metadata"]["ownerReferences"][0]["name"], "llama-3-1-8b", "{plural}");
    }
    let router_version =
        || server.get("apps", "v1", "deployments", NS, "llama-3-1-8b-router").unwrap()["spec"]["template"].to_string();
    let before = router_version();

    patch_spec(&server, "llama-3-1-8b", json!({"decode": {"env": [{"name": "A", "value": "1"}]}})).await;
    patch_spec(&server, "llama-3-1-8b", json!({"prefill": {"env": [{"name": "B", "value": "2"}]}})).await;
    eventually("both fleets at a new revision", Duration::from_secs(20), || async {
        let pods = pods_of(&server, "llama-3-1-8b");
        let with_env = pods.iter().filter(|p| p["spec"]["containers"][0]["env"].is_array()).count();
        if with_env == 3 && condition(&server, "llama-3-1-8b", "Progressing").unwrap()["status"] == "False" {
            Ok(())
        } else {
            Err(format!("{with_env} of {} pods rolled", pods.len()))
        }
    })
    .await;
    assert_eq!(router_version(), before, "a fleet's rollout never restarts the router");

    patch_spec(&server, "llama-3-1-8b", json!({"router": {"enabled": false}})).await;
    eventually("the router's objects gone", Duration::from_secs(20), || async {
        let left: Vec<&str> = [("", "serviceaccounts"), ("apps", "deployments"), ("", "services")]
            .into_iter()
            .filter(|(group, plural)| server.get(group, "v1", plural, NS, "llama-3-1-8b-router").is_some())
            .map(|(_, plural)| plural)
            .collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?} remain")) }
    })
    .await;
    patch_spec(&server, "llama-3-1-8b", json!({"router": null, "prefill": null})).await;
    ready(&server, "llama-3-1-8b", 2).await;
    assert!(server.get("", "v1", "services", NS, "llama-3-1-8b-prefill").is_none(), "the prefill Service goes too");
    let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "llama-3-1-8b").unwrap();
    assert!(object["status"]["endpoint"].is_null() && object["status"]["prefill"].is_null(), "{}", object["status"]);
    operator.stop().await;
}

/// A change of what prefill and decode exchange (here the model revision) moves the whole
/// service to a new KV compatibility key: new servers beside the old, the router's Deployment
/// moved to them, the old ones gone; status.rollout records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_key_moves_the_router_to_the_new_servers_and_retires_the_old() {
    let (server, _kubelet, operator) = cluster(Duration::from_millis(30));
    let _routers = kubelet::spawn_deployments(server.client(), "app.kubernetes.io/name=kvpilot-router", Duration::ZERO);
    create(&server, &pd_example("llama-3.1-8b-full.yaml")).await;
    ready(&server, "llama-3-1-8b", 3).await;
    let key_of = |labels: &Value| labels["kvpilot.dev/kv-compat"].as_str().unwrap_or_default().to_string();
    let router_key =
        || key_of(&server.get("apps", "v1", "deployments", NS, "llama-3-1-8b-router").unwrap()["metadata"]["labels"]);
    let old = router_key();
    assert!(pods_of(&server, "llama-3-1-8b").iter().all(|p| key_of(&p["metadata"]["labels"]) == old));

    patch_spec(&server, "llama-3-1-8b", json!({"model": {"revision": "r2"}})).await;
    eventually("the service on the new key", Duration::from_secs(30), || async {
        let object = server.get("kvpilot.dev", "v1alpha1", "inferencedeployments", NS, "llama-3-1-8b").unwrap();
        let status = &object["status"];
        let new = status["kvCompat"].as_str().unwrap_or_default().to_string();
        let keys: Vec<String> =
            pods_of(&server, "llama-3-1-8b").iter().map(|p| key_of(&p["metadata"]["labels"])).collect();
        let rollout = &status["rollout"];
        let done = new != old
            && keys.len() == 3
            && keys.iter().all(|k| *k == new)
            && router_key() == new
            && rollout["phase"] == "Complete"
            && rollout["fromKey"] == old.as_str()
            && rollout["toKey"] == new.as_str();
        if done { Ok(()) } else { Err(format!("keys {keys:?}, router {}, rollout {rollout}", router_key())) }
    })
    .await;
    let router = server.get("apps", "v1", "deployments", NS, "llama-3-1-8b-router").unwrap();
    let args = router["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains(&format!("kvpilot.dev/kv-compat={old}")), "{args}");
    operator.stop().await;
}
