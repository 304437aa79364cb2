//! `cargo bench --bench webhook`: open-loop load at a fixed rate over TLS on loopback against
//! `/validate` and `/mutate`, and the SGLang guard's `/guard/enforce` and `/guard/rewrite` (with
//! the model's ConfigMap read from the in-process API server on every request, as in a cluster),
//! with `/healthz` at the same rate as the baseline (TLS + HTTP with no admission work). Client
//! and server share this process and the machine's cores.
//!
//! `BENCH_RATE` (requests/s, default 1000) and `BENCH_SECONDS` (default 10) change the load.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kvpilot::apiserver::ApiServer;
use kvpilot::source::{ClusterSource, HubClient};
use kvpilot::webhook::{self, WebhookState, tls::ReloadingCert};
use serde::Deserialize;
use serde_json::{Value, json};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn review(on_invalid: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mimo-pure-swa-rewrite.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut object =
        serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).next().unwrap();
    object["spec"]["disaggregation"]["onInvalid"] = json!(on_invalid);
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "bench", "kind": {"group": "kvpilot.dev", "version": "v1alpha1", "kind": "InferenceDeployment"},
            "resource": {"group": "kvpilot.dev", "version": "v1alpha1", "resource": "inferencedeployments"},
            "name": "mimo-pure-swa", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "bench"}, "object": object, "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

/// A guard review of the example workload in `file` (its first document; the second is the
/// model's ConfigMap).
fn guard_review(file: &str) -> (Vec<u8>, Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/guard").join(file);
    let text = std::fs::read_to_string(path).unwrap();
    let documents: Vec<Value> =
        serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect();
    let object = documents[0].clone();
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let body = serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "bench", "kind": gvk, "resource": {"group": group, "version": version, "resource": "bench"},
            "name": object["metadata"]["name"], "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "bench"}, "object": object, "oldObject": null, "dryRun": false
        }
    }))
    .unwrap();
    (body, documents[1].clone())
}

#[derive(Clone)]
struct Result {
    sent: usize,
    errors: usize,
    achieved_rate: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

async fn load(client: &reqwest::Client, url: &str, body: Option<Vec<u8>>, rate: u64, seconds: u64) -> Result {
    let total = (rate * seconds) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let body = body.map(bytes::Bytes::from);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        // Open loop: request i is due at start + i × interval, whatever earlier ones are doing.
        let due = start + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let request = match &body {
            Some(body) => client.post(url).body(body.clone()),
            None => client.get(url),
        };
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = match request.send().await {
                Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                _ => false,
            };
            (sent.elapsed(), ok)
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    let mut errors = 0;
    for task in tasks {
        let (latency, ok) = task.await.unwrap();
        errors += usize::from(!ok);
        latencies.push(latency);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Result {
        sent: total,
        errors,
        achieved_rate: total as f64 / elapsed,
        p50: at(0.50),
        p99: at(0.99),
        max: *latencies.last().unwrap(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let rate = env_or("BENCH_RATE", 1000);
    let seconds = env_or("BENCH_SECONDS", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, key.cert.pem()).unwrap();
        std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
        let cert = ReloadingCert::new(&cert_path, &key_path).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (enforce_body, config_map) = guard_review("deployment-rejected.yaml");
        let (rewrite_body, _) = guard_review("leaderworkerset-rewritten.yaml");
        let cluster = ApiServer::new();
        let config_map: ConfigMap = serde_json::from_value(config_map).unwrap();
        Api::<ConfigMap>::namespaced(cluster.client(), "default")
            .create(&PostParams::default(), &config_map)
            .await
            .unwrap();
        let hub = Arc::new(HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).unwrap());
        let source = ClusterSource::new(cluster.client(), hub, "https://huggingface.co");
        let app = webhook::router(WebhookState {
            source: Some(source),
            default_release: kvpilot::release::ReleaseChoice::default_newest(),
        });
        tokio::spawn(webhook::serve_tls(listener, cert.server_config().unwrap(), app, std::future::pending()));
        let client = Arc::new(
            reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(key.cert.pem().as_bytes()).unwrap())
                .resolve("localhost", ([127, 0, 0, 1], port).into())
                .pool_max_idle_per_host(256)
                .build()
                .unwrap(),
        );
        let base = format!("https://localhost:{port}");
        // Warm the connection pool and the TLS session cache.
        load(&client, &format!("{base}/healthz"), None, rate, 1).await;

        println!("webhook over TLS on loopback, open loop at {rate} req/s for {seconds} s per endpoint");
        println!(
            "{:<34} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>12}",
            "endpoint", "sent", "errors", "req/s", "p50 ms", "p99 ms", "max ms", "p99/baseline"
        );
        let baseline = load(&client, &format!("{base}/healthz"), None, rate, seconds).await;
        let validate = load(&client, &format!("{base}/validate"), Some(review("Reject")), rate, seconds).await;
        let mutate = load(&client, &format!("{base}/mutate"), Some(review("Rewrite")), rate, seconds).await;
        let enforce = load(&client, &format!("{base}/guard/enforce"), Some(enforce_body), rate, seconds).await;
        let rewrite = load(&client, &format!("{base}/guard/rewrite"), Some(rewrite_body), rate, seconds).await;
        let rows = [
            ("GET /healthz (baseline)", baseline.clone()),
            ("POST /validate (deny, R2)", validate),
            ("POST /mutate (JSONPatch, R2)", mutate),
            ("POST /guard/enforce (Deployment)", enforce),
            ("POST /guard/rewrite (LWS, sh -c)", rewrite),
        ];
        for (name, r) in rows {
            println!(
                "{name:<34} {:>8} {:>7} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>11.2}x",
                r.sent,
                r.errors,
                r.achieved_rate,
                ms(r.p50),
                ms(r.p99),
                ms(r.max),
                ms(r.p99) / ms(baseline.p99)
            );
        }
    });
}
