//! Self-signed webhook certificates against the in-process API server: the Secret is created
//! once and shared by replicas, the served certificate chains to the CA put in `caBundle`, it is
//! renewed before it expires, and a `caBundle` emptied by an upgrade comes back.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kvpilot::apiserver::ApiServer;
use kvpilot::webhook::certs::{self, ANNOTATION_NOT_AFTER, SelfSigned};
use kvpilot::webhook::{self, WebhookState, tls::ReloadingCert};
use serde_json::json;

const NS: &str = "kvpilot-system";

fn config(dir: &Path) -> SelfSigned {
    SelfSigned {
        namespace: NS.into(),
        secret: "kvpilot-webhook-tls".into(),
        service: "kvpilot-webhook".into(),
        validating: Some("kvpilot".into()),
        mutating: Some("kvpilot".into()),
        cert_path: dir.join("tls.crt"),
        key_path: dir.join("tls.key"),
    }
}

/// Webhook configurations as the chart renders them: two webhooks, no caBundle.
async fn configurations(client: &kube::Client) {
    let webhook = |path: &str| {
        json!({"name": format!("{path}.kvpilot.dev"), "admissionReviewVersions": ["v1"], "sideEffects": "None",
               "clientConfig": {"service": {"name": "kvpilot-webhook", "namespace": NS, "path": path}}})
    };
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "kvpilot"}, "webhooks": [webhook("validate"), webhook("validate-again")]
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();
    let mutating: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "kvpilot"}, "webhooks": [webhook("mutate")]})).unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone()).create(&PostParams::default(), &mutating).await.unwrap();
}

async fn ca_bundles(client: &kube::Client) -> Vec<Option<String>> {
    let encode = |b: &Option<k8s_openapi::ByteString>| b.as_ref().map(|b| BASE64.encode(&b.0));
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get("kvpilot").await.unwrap();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone()).get("kvpilot").await.unwrap();
    validating
        .webhooks
        .unwrap()
        .iter()
        .map(|w| encode(&w.client_config.ca_bundle))
        .chain(mutating.webhooks.unwrap().iter().map(|w| encode(&w.client_config.ca_bundle)))
        .collect()
}

/// An API server holding the webhook configurations, a client, and certificate settings whose
/// files go to the returned directory.
async fn cluster() -> (ApiServer, kube::Client, tempfile::TempDir, SelfSigned) {
    let server = ApiServer::new();
    let client = server.client();
    configurations(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    (server, client, dir, config)
}

fn secret_version(server: &ApiServer) -> String {
    let secret = server.get("", "v1", "secrets", NS, "kvpilot-webhook-tls").unwrap();
    secret["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn the_served_certificate_chains_to_the_ca_set_in_every_ca_bundle() {
    let (_server, client, _dir, config) = cluster().await;
    let bundle = certs::reconcile(&client, &config).await.unwrap();
    let expected = Some(BASE64.encode(&bundle.ca_pem));
    assert_eq!(ca_bundles(&client).await, vec![expected.clone(), expected.clone(), expected]);
    let secret = Api::<Secret>::namespaced(client.clone(), NS).get("kvpilot-webhook-tls").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let keys: Vec<&String> = secret.data.as_ref().unwrap().keys().collect();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);

    // A real TLS handshake to the webhook server, trusting only the CA, under the Service's name.
    let cert = ReloadingCert::new(&config.cert_path, &config.key_path).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = cert.server_config().unwrap();
    tokio::spawn(webhook::serve_tls(listener, tls, webhook::router(WebhookState::default()), std::future::pending()));
    let name = format!("kvpilot-webhook.{NS}.svc");
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(bundle.ca_pem.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .resolve(&name, addr)
        .build()
        .unwrap();
    let response = https.get(format!("https://{name}:{}/healthz", addr.port())).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let wrong_name = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(bundle.ca_pem.as_bytes()).unwrap())
        .tls_built_in_root_certs(false)
        .resolve("elsewhere.example", addr)
        .build()
        .unwrap();
    assert!(wrong_name.get(format!("https://elsewhere.example:{}/healthz", addr.port())).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_racing_at_start_up_share_one_secret() {
    let server = ApiServer::new();
    let client = server.client();
    configurations(&client).await;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (config_a, config_b) = (config(a.path()), config(b.path()));
    let (first, second) = tokio::join!(certs::reconcile(&client, &config_a), certs::reconcile(&client, &config_b));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first, second, "both replicas serve the same certificate");
    assert_eq!(
        std::fs::read_to_string(&config_a.cert_path).unwrap(),
        std::fs::read_to_string(&config_b.cert_path).unwrap()
    );
    // A later restart adopts the Secret without writing it.
    let version = secret_version(&server);
    let again = certs::reconcile(&client, &config_a).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(secret_version(&server), version);
}

#[tokio::test]
async fn certificates_are_renewed_before_they_expire_and_when_the_service_changes() {
    let (_server, client, _dir, config) = cluster().await;
    let now = Timestamp::now();
    let first = certs::ensure_secret(&client, &config, now).await.unwrap();
    let still_fine = now + SignedDuration::from_hours(300 * 24);
    assert_eq!(certs::ensure_secret(&client, &config, still_fine).await.unwrap(), first);
    let near_expiry = now + SignedDuration::from_hours(340 * 24);
    let renewed = certs::ensure_secret(&client, &config, near_expiry).await.unwrap();
    assert_ne!(renewed.ca_pem, first.ca_pem, "renewed within 30 days of expiry");
    let secret = Api::<Secret>::namespaced(client.clone(), NS).get("kvpilot-webhook-tls").await.unwrap();
    assert_eq!(secret.metadata.annotations.unwrap()[ANNOTATION_NOT_AFTER], renewed.not_after.to_string());
    let moved = SelfSigned { service: "kvpilot-webhook-v2".into(), ..config.clone() };
    let reissued = certs::ensure_secret(&client, &moved, near_expiry).await.unwrap();
    assert_ne!(reissued, renewed, "a certificate for other DNS names is not reused");
    // A Secret someone broke is replaced, not served.
    let broken = json!({"data": {"tls.key": BASE64.encode("not a key")}});
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch("kvpilot-webhook-tls", &PatchParams::default(), &Patch::Merge(&broken))
        .await
        .unwrap();
    let repaired = certs::ensure_secret(&client, &moved, near_expiry).await.unwrap();
    assert_ne!(repaired.key_pem, "not a key");
    assert!(
        certs::usable(
            &Api::<Secret>::namespaced(client.clone(), NS).get("kvpilot-webhook-tls").await.unwrap(),
            &moved.dns_names(),
            near_expiry
        )
        .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_bundle_emptied_by_an_upgrade_is_restored() {
    let (_server, client, _dir, config) = cluster().await;
    let bundle = certs::reconcile(&client, &config).await.unwrap();
    let upkeep = certs::maintain(client.clone(), config);
    // `helm upgrade` re-applies the configuration as rendered, without a caBundle.
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let reset = json!([{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}]);
    let patch: json_patch::Patch = serde_json::from_value(reset).unwrap();
    validating.patch("kvpilot", &PatchParams::default(), &Patch::<()>::Json(patch)).await.unwrap();
    let expected = Some(BASE64.encode(&bundle.ca_pem));
    let start = Instant::now();
    while ca_bundles(&client).await[0] != expected {
        assert!(start.elapsed() < Duration::from_secs(10), "the caBundle was not restored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    upkeep.abort();
}
