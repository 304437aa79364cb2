//! The admission webhook over HTTPS on loopback, with AdmissionReview JSON shaped as the API
//! server sends it and certificates generated in the test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use kvpilot::api::{InferenceDeployment, OnInvalid};
use kvpilot::webhook::{self, WebhookState, tls::ReloadingCert};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

struct Server {
    addr: SocketAddr,
    cert_pem: String,
    cert: Arc<ReloadingCert>,
    dir: tempfile::TempDir,
}

fn self_signed() -> (String, String) {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    (key.cert.pem(), key.signing_key.serialize_pem())
}

fn write_pair(dir: &Path, cert: &str, key: &str) -> (PathBuf, PathBuf) {
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    (cert_path, key_path)
}

async fn start() -> Server {
    start_with(WebhookState::default()).await
}

async fn start_with(state: WebhookState) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem) = self_signed();
    let (cert_path, key_path) = write_pair(dir.path(), &cert_pem, &key_pem);
    let cert = ReloadingCert::new(&cert_path, &key_path).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = cert.server_config().unwrap();
    tokio::spawn(webhook::serve_tls(listener, config, webhook::router(state), std::future::pending()));
    Server { addr, cert_pem, cert, dir }
}

fn client(cert_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .resolve("localhost", "127.0.0.1:0".parse().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    async fn post(&self, path: &str, body: Vec<u8>) -> (u16, String) {
        let response = client(&self.cert_pem).post(self.url(path)).body(body).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self.post(path, serde_json::to_vec(review).unwrap()).await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], review["request"]["uid"], "the response must carry the request's uid");
        answer["response"].clone()
    }
}

fn example(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "InferenceDeployment")
        .unwrap()
}

/// An AdmissionReview as the API server sends it.
fn admission_review(operation: &str, object: &Value, old_object: Option<&Value>) -> Value {
    let name = object["metadata"]["name"].clone();
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "kvpilot.dev", "version": "v1alpha1", "kind": "InferenceDeployment"},
            "resource": {"group": "kvpilot.dev", "version": "v1alpha1", "resource": "inferencedeployments"},
            "requestKind": {"group": "kvpilot.dev", "version": "v1alpha1", "kind": "InferenceDeployment"},
            "requestResource": {"group": "kvpilot.dev", "version": "v1alpha1", "resource": "inferencedeployments"},
            "name": name,
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated", "my-admin-group"]},
            "object": object,
            "oldObject": old_object,
            "dryRun": operation == "UPDATE",
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }}
        }
    })
}

fn pure_swa(on_invalid: &str) -> Value {
    let mut object = example("mimo-pure-swa-rewrite.yaml");
    object["spec"]["disaggregation"]["onInvalid"] = json!(on_invalid);
    object
}

#[tokio::test]
async fn valid_resources_are_allowed() {
    let server = start().await;
    let response =
        server.review("/validate", &admission_review("CREATE", &example("llama-3.1-8b-full.yaml"), None)).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn invalid_resources_are_denied_with_sglang_messages() {
    let server = start().await;
    let response = server.review("/validate", &admission_review("CREATE", &pure_swa("Reject"), None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("default/mimo-pure-swa is not valid for its model's attention layout (pure-swa): "),
        "{message}"
    );
    assert!(
        message.contains(
            "R2 spec.disaggregation.retractionBackup: Host-pool retraction does not support pure-SWA models."
        ),
        "{message}"
    );

    // Every violation is listed, on UPDATE too.
    let mut many = pure_swa("Reject");
    many["spec"]["disaggregation"]["decodeRadixCache"] = json!(true);
    let response = server.review("/validate", &admission_review("UPDATE", &many, Some(&pure_swa("Reject")))).await;
    let message = response["status"]["message"].as_str().unwrap();
    // Checked as the newest release: R13 is gone from SGLang 0.5.21 on.
    for rule in ["R8 spec.disaggregation.retractionBackup", "R16 spec.disaggregation.decodeRadixCache"] {
        assert!(message.contains(rule), "{rule} missing from {message}");
    }
    assert!(!message.contains("R13"), "{message}");
    // spec.sglang.version picks the release: 0.5.18 refuses decode radix cache on every SWA model.
    many["spec"]["sglang"] = json!({"version": "0.5.18"});
    let response = server.review("/validate", &admission_review("UPDATE", &many, Some(&pure_swa("Reject")))).await;
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "R13 spec.disaggregation.decodeRadixCache: --disaggregation-decode-enable-radix-cache is incompatible with \
             sliding window attention (SWA) models"
        ),
        "{message}"
    );
    many["spec"]["sglang"] = json!({"version": "0.5.9"});
    let response = server.review("/validate", &admission_review("UPDATE", &many, Some(&pure_swa("Reject")))).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.sglang.version: SGLang 0.5.9 is not a release kvpilot knows"), "{message}");
    many["spec"].as_object_mut().unwrap().remove("sglang");

    // A rule without a safe rewrite is denied in Rewrite mode too.
    let mut mismatched = example("gpt-oss-20b-hybrid-swa.yaml");
    mismatched["spec"]["disaggregation"]["onInvalid"] = json!("Rewrite");
    mismatched["spec"]["decode"]["tensorParallel"] = json!(4);
    // Mooncake and NIXL transfer SWA state head by head from SGLang 0.5.22; mori keeps T1.
    mismatched["spec"]["disaggregation"]["transferBackend"] = json!("mori");
    let response = server.review("/validate", &admission_review("CREATE", &mismatched, None)).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"].as_str().unwrap().contains(
            "T1 spec.decode.tensorParallel: PD state transfer does not support TP-mismatched non-MLA SWA models \
             (prefill_tp_size=2, decode_tp_size=4)"
        ),
        "{response}"
    );
}

#[tokio::test]
async fn rewrites_are_allowed_with_one_warning_each() {
    let server = start().await;
    let response = server.review("/validate", &admission_review("CREATE", &pure_swa("Rewrite"), None)).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(
        response["warnings"],
        json!([
            "spec.disaggregation.retractionBackup: host_pool → cpu_tensor (R2: Host-pool retraction does not support pure-SWA models.)"
        ])
    );
    assert!(response.get("patch").is_none(), "the validating webhook never patches");
}

#[tokio::test]
async fn mutate_returns_a_base64_json_patch_that_makes_the_spec_valid() {
    let server = start().await;
    for object in [
        pure_swa("Rewrite"),
        {
            // Two rewrites in one patch (R1 and M1), with the ConfigMap example's config inlined.
            let mut qwen = example("qwen3-next-hybrid-ssm.yaml");
            qwen["spec"]["model"]["config"] = json!({"inline": serde_json::from_str::<Value>(
            &std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs/qwen3-next-80b-a3b.json")).unwrap()
        ).unwrap()});
            qwen
        },
        {
            // SGLang 0.5.17 has no retraction flag: the patch removes retractionBackup (F1).
            let mut old_release = pure_swa("Rewrite");
            old_release["spec"]["sglang"] = json!({"version": "0.5.17"});
            old_release
        },
    ] {
        let response = server.review("/mutate", &admission_review("CREATE", &object, None)).await;
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let encoded = response["patch"].as_str().expect("patch is a base64 string, not an array of numbers");
        let patch: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let mut resource: InferenceDeployment = serde_json::from_value(patched).unwrap();
        assert_eq!(resource.spec.disaggregation.on_invalid, OnInvalid::Rewrite);
        resource.spec.disaggregation.on_invalid = OnInvalid::Reject;
        let config = serde_json::to_value(resource.spec.model.config.inline.clone().unwrap()).unwrap();
        let release = kvpilot::policy::resource_release(&resource.spec, &Default::default()).unwrap();
        let verdict = kvpilot::policy::assess(
            &resource.spec,
            &kvpilot::policy::ModelConfigs::target(config.clone()),
            &release,
            kvpilot::policy::Checked::Service,
        )
        .unwrap()
        .verdict;
        assert_eq!(verdict.outcome, kvpilot::policy::Outcome::Valid, "{:?}", verdict.violations);
        if resource.spec.sglang.is_some() {
            assert_eq!(resource.spec.disaggregation.retraction_backup, None, "removed by the patch");
        }
    }
    // Reject mode and valid resources are left unchanged.
    for object in [pure_swa("Reject"), example("llama-3.1-8b-full.yaml")] {
        let response = server.review("/mutate", &admission_review("CREATE", &object, None)).await;
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_none(), "{response}");
    }
}

#[tokio::test]
async fn what_is_not_a_settings_change_is_allowed() {
    let server = start().await;
    let mut review = admission_review("DELETE", &pure_swa("Reject"), Some(&pure_swa("Reject")));
    assert_eq!(server.review("/validate", &review).await["allowed"], true);
    review = admission_review("UPDATE", &pure_swa("Reject"), Some(&pure_swa("Reject")));
    review["request"]["subResource"] = json!("status");
    assert_eq!(server.review("/validate", &review).await["allowed"], true);
}

#[tokio::test]
async fn sources_the_webhook_cannot_read_are_allowed_with_a_warning() {
    let server = start().await;
    let mut object = pure_swa("Reject");
    object["spec"]["model"]["config"] = json!({"configMapRef": {"name": "mimo-config", "key": "config.json"}});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], true);
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(warning.contains("could not read the model config.json") && warning.contains("ModelResolved"), "{warning}");
}

#[tokio::test]
async fn malformed_objects_and_inline_configs_are_denied_naming_the_field() {
    let server = start().await;
    let mut object = pure_swa("Reject");
    object["spec"]["decode"]["replicas"] = json!("two");
    object["spec"]["decode"]["tensorParallel"] = json!(0);
    for path in ["/validate", "/mutate"] {
        let response = server.review(path, &admission_review("CREATE", &object, None)).await;
        assert_eq!(response["allowed"], false);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.contains(
                "spec.decode.replicas: Invalid value: \"two\": spec.decode.replicas in body must be of type integer"
            ),
            "{path}: {response}"
        );
    }
    // What only the CRD's CEL rules refuse, before any decision on the settings.
    object["spec"]["decode"]["replicas"] = json!(1);
    let response = server.review("/mutate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"].as_str().unwrap().contains("tensorParallel must be at least 1"),
        "{response}"
    );

    let mut object = pure_swa("Reject");
    object["spec"]["model"]["config"]["inline"] = json!({"architectures": ["LlamaForCausalLM"]});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"].as_str().unwrap().contains("num_hidden_layers"), "{response}");

    // The speculative draft's inline config is part of the object too.
    let mut object = pure_swa("Reject");
    object["spec"]["disaggregation"]["retractionBackup"] = json!("cpu_tensor");
    object["spec"]["disaggregation"]["speculativeAlgorithm"] = json!("EAGLE");
    object["spec"]["disaggregation"]["speculativeDraftModel"] =
        json!({"name": "acme/draft", "config": {"inline": {"architectures": ["LlamaForCausalLM"]}}});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.disaggregation.speculativeDraftModel.config.inline is not a model config"),
        "{message}"
    );
    assert!(message.contains("num_hidden_layers"), "{message}");
    // A draft config the webhook cannot read leaves the object to the controller.
    object["spec"]["disaggregation"]["speculativeDraftModel"]["config"] = json!({"configMapRef": {"name": "draft"}});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn wrong_kinds_and_versions_are_denied_naming_the_problem() {
    let server = start().await;
    let mut review = admission_review("CREATE", &example("llama-3.1-8b-full.yaml"), None);
    review["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let response = server.review("/validate", &review).await;
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"].as_str().unwrap().contains("got apps/v1 Deployment"), "{response}");

    let mut review = admission_review("CREATE", &example("llama-3.1-8b-full.yaml"), None);
    review["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (status, body) = server.post("/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], false);
    assert!(answer["response"]["status"]["message"].as_str().unwrap().contains("v1beta1"), "{answer}");
}

#[tokio::test]
async fn bodies_that_are_not_reviews_get_400() {
    let server = start().await;
    for (body, expected) in [
        (b"not json".to_vec(), "not JSON"),
        (b"{\"kind\": \"AdmissionReview\", \"apiVersion\": \"admission.k8s.io/v1\"}".to_vec(), "has no request"),
        (b"[1, 2, 3]".to_vec(), "not an admission.k8s.io/v1 AdmissionReview"),
        (vec![b' '; webhook::MAX_REVIEW_BYTES + 1], "at most"),
    ] {
        let (status, text) = server.post("/validate", body).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(expected), "{expected:?} not in {text:?}");
    }
    let health = client(&server.cert_pem).get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn plain_http_is_refused() {
    let server = start().await;
    let plain = reqwest::Client::new().get(format!("http://127.0.0.1:{}/healthz", server.addr.port())).send().await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);
}

#[tokio::test]
async fn rotated_certificates_are_served_without_dropping_connections() {
    let server = start().await;
    let old_client = client(&server.cert_pem);
    assert_eq!(old_client.get(server.url("/healthz")).send().await.unwrap().status(), 200);

    // cert-manager writes a new pair; the next reload serves it.
    let (new_cert, new_key) = self_signed();
    tokio::time::sleep(Duration::from_millis(20)).await;
    write_pair(server.dir.path(), &new_cert, &new_key);
    assert!(server.cert.reload_if_changed().unwrap(), "the change is noticed");
    assert!(!server.cert.reload_if_changed().unwrap(), "and loaded once");

    // The open connection keeps working with the session it has.
    assert_eq!(old_client.get(server.url("/healthz")).send().await.unwrap().status(), 200);
    // New handshakes get the new certificate: a client trusting only the new one connects, a
    // fresh client trusting only the old one does not.
    assert_eq!(client(&new_cert).get(server.url("/healthz")).send().await.unwrap().status(), 200);
    assert!(client(&server.cert_pem).get(server.url("/healthz")).send().await.is_err());

    // A half-written pair keeps the current certificate.
    std::fs::write(server.dir.path().join("tls.key"), "-----BEGIN PRIVATE KEY-----\ngarbage\n").unwrap();
    assert!(server.cert.reload_if_changed().is_err());
    assert_eq!(client(&new_cert).get(server.url("/healthz")).send().await.unwrap().status(), 200);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary bodies and arbitrarily damaged reviews get 200 or 400, and the server stays up.
    #[test]
    fn fuzzed_bodies_never_break_the_server(
        noise in prop::collection::vec(any::<u8>(), 0..512),
        drop_field in prop::sample::select(vec!["uid", "kind", "object", "operation", "name", "request", "spec"]),
        replacement in prop_oneof![Just(Value::Null), Just(json!(7)), Just(json!("x")), Just(json!([])), Just(json!({}))],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let server = start().await;
            let (status, _) = server.post("/validate", noise).await;
            assert!(status == 400 || status == 200, "{status}");
            let mut review = admission_review("CREATE", &pure_swa("Rewrite"), None);
            let target = if drop_field == "spec" { &mut review["request"]["object"] } else if drop_field == "request" { &mut review } else { &mut review["request"] };
            target.as_object_mut().unwrap().insert(drop_field.to_string(), replacement.clone());
            for path in ["/validate", "/mutate"] {
                let (status, body) = server.post(path, serde_json::to_vec(&review).unwrap()).await;
                assert!(status == 400 || status == 200, "{status} {body}");
            }
            let health = client(&server.cert_pem).get(server.url("/healthz")).send().await.unwrap();
            assert_eq!(health.status(), 200);
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_sources_are_read_through_the_api_server() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kvpilot::apiserver::ApiServer;
    use kvpilot::source::{ClusterSource, HubClient};

    let api = ApiServer::new();
    let config = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs/custom-pure-swa.json"),
    )
    .unwrap();
    let config_map: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "mimo-config", "namespace": "default"}, "data": {"config.json": config}}),
    )
    .unwrap();
    Api::<ConfigMap>::namespaced(api.client(), "default").create(&PostParams::default(), &config_map).await.unwrap();
    let hub = Arc::new(HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).unwrap());
    let server = start_with(WebhookState {
        source: Some(ClusterSource::new(api.client(), hub, "https://huggingface.co")),
        ..WebhookState::default()
    })
    .await;

    let mut object = pure_swa("Reject");
    object["spec"]["model"]["config"] = json!({"configMapRef": {"name": "mimo-config", "key": "config.json"}});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"].as_str().unwrap().contains("R2 spec.disaggregation.retractionBackup"),
        "{response}"
    );

    object["spec"]["model"]["config"] = json!({"configMapRef": {"name": "missing", "key": "config.json"}});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], true, "an unreadable source is allowed with a warning");
    assert!(response["warnings"][0].as_str().unwrap().contains("ConfigMap default/missing"), "{response}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_scheduler_the_cluster_does_not_serve_is_denied_naming_what_to_install() {
    use kvpilot::apiserver::ApiServer;
    use kvpilot::source::{ClusterSource, HubClient};

    // The in-process API server serves no gang scheduler's API.
    let api = ApiServer::new();
    let hub = Arc::new(HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).unwrap());
    let server = start_with(WebhookState {
        source: Some(ClusterSource::new(api.client(), hub, "https://huggingface.co")),
        ..WebhookState::default()
    })
    .await;
    let mut object = example("llama-3.1-8b-full.yaml");
    for (gang, install) in
        [("volcano", "install Volcano"), ("coscheduling", "install scheduler-plugins"), ("kueue", "install Kueue")]
    {
        object["spec"]["scheduling"] = json!({"gang": gang});
        let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("spec.scheduling.gang is {gang}")) && message.contains(install), "{message}");
        let mutated = server.review("/mutate", &admission_review("CREATE", &object, None)).await;
        assert_eq!(mutated["allowed"], true, "the validating webhook refuses, not the mutating one: {mutated}");
    }
    // Refused settings and the missing scheduler are listed together.
    let mut rejected = pure_swa("Reject");
    rejected["spec"]["scheduling"] = json!({"gang": "volcano"});
    let response = server.review("/validate", &admission_review("CREATE", &rejected, None)).await;
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("R2 spec.disaggregation.retractionBackup") && message.contains("install Volcano"),
        "{message}"
    );

    object["spec"]["scheduling"] = json!({"gang": "none", "schedulerName": "custom"});
    let response = server.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], true, "no gang, nothing to install: {response}");

    // Without a client the webhook cannot ask, and says so.
    let offline = start().await;
    object["spec"]["scheduling"] = json!({"gang": "volcano"});
    let response = offline.review("/validate", &admission_review("CREATE", &object, None)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warned = response["warnings"].as_array().unwrap().iter().filter_map(Value::as_str);
    assert!(
        warned.into_iter().any(|w| w.contains("could not check that the cluster serves Volcano's API")),
        "{response}"
    );
}
