//! Self-signed webhook certificates, the chart's default, so a plain install needs nothing else.
//!
//! The operator keeps a CA and a serving certificate for the webhook Service in a Secret,
//! serves the webhook from files written from it, and keeps the `caBundle` of the validating and
//! mutating webhook configurations set to that CA. Replicas share the Secret: the first to find
//! it missing creates it and the others adopt it (a create that loses the race gets 409 and
//! reads the winner's). The certificate is renewed 30 days before it expires; a watch on the
//! webhook configurations restores a `caBundle` that an upgrade or a GitOps sync emptied.
//!
//! The trade-off against cert-manager: no extra component, but the CA's private key lives in a
//! Secret of the operator's namespace, and trust is only as good as that namespace's RBAC.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;

/// Annotation on the Secret: when the serving certificate expires (RFC 3339).
pub const ANNOTATION_NOT_AFTER: &str = "kvpilot.dev/not-after";
/// Annotation on the Secret: the DNS names the serving certificate covers.
pub const ANNOTATION_DNS_NAMES: &str = "kvpilot.dev/dns-names";
const VALIDITY_DAYS: i64 = 365;
const RENEW_BEFORE_DAYS: i64 = 30;

/// Whole days as an exact duration (timestamps take no calendar units).
fn days(n: i64) -> SignedDuration {
    SignedDuration::from_hours(n * 24)
}
/// How often the expiry is checked.
const RENEWAL_CHECK: Duration = Duration::from_secs(3600);

/// What goes wrong while keeping the certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The Kubernetes API refused or failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Generating the key or certificate failed.
    #[error("generating the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The files the webhook serves could not be written.
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    /// Other replicas kept changing the Secret.
    #[error("the Secret {0} kept changing under us; retrying later")]
    Contended(String),
}

/// Where the certificates live and what they are for.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    /// Namespace of the Secret and the webhook Service (the operator's).
    pub namespace: String,
    /// Name of the Secret (`ca.crt`, `tls.crt`, `tls.key`).
    pub secret: String,
    /// Name of the webhook Service the certificate is for.
    pub service: String,
    /// ValidatingWebhookConfiguration whose `caBundle` to keep, if any.
    pub validating: Option<String>,
    /// MutatingWebhookConfiguration whose `caBundle` to keep, if any.
    pub mutating: Option<String>,
    /// Where the serving certificate is written.
    pub cert_path: PathBuf,
    /// Where its key is written.
    pub key_path: PathBuf,
}

impl SelfSigned {
    /// The names clients use to reach the Service.
    pub fn dns_names(&self) -> Vec<String> {
        let (svc, ns) = (&self.service, &self.namespace);
        vec![svc.clone(), format!("{svc}.{ns}"), format!("{svc}.{ns}.svc"), format!("{svc}.{ns}.svc.cluster.local")]
    }
}

/// A CA and the serving certificate it signed, in PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The CA certificate (what `caBundle` carries).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
    /// When the serving certificate expires.
    pub not_after: Timestamp,
}

/// Year, month and day (UTC) of a timestamp, as certificates carry validity.
fn ymd(timestamp: Timestamp) -> (i32, u8, u8) {
    let date = timestamp.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).date();
    (i32::from(date.year()), date.month() as u8, date.day() as u8)
}

/// A fresh CA and a serving certificate for `dns_names`, valid from `now` for a year.
pub fn generate(dns_names: &[String], now: Timestamp) -> Result<Bundle, rcgen::Error> {
    let not_after = now + days(VALIDITY_DAYS);
    // A day of slack before `now` covers clocks a little behind ours.
    let (start_year, start_month, start_day) = ymd(now - days(1));
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name.push(DnType::CommonName, "kvpilot webhook CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_before = rcgen::date_time_ymd(start_year, start_month, start_day);
    ca.not_after = {
        let (y, m, d) = ymd(not_after + days(1));
        rcgen::date_time_ymd(y, m, d)
    };
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(dns_names.to_vec())?;
    serving.distinguished_name = DistinguishedName::new();
    serving.distinguished_name.push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    serving.not_before = rcgen::date_time_ymd(start_year, start_month, start_day);
    serving.not_after = {
        let (y, m, d) = ymd(not_after);
        rcgen::date_time_ymd(y, m, d)
    };
    let cert = serving.signed_by(&key, &issuer)?;
    Ok(Bundle { ca_pem: ca_cert.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem(), not_after })
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).and_then(|v| String::from_utf8(v.0.clone()).ok())
}

/// The bundle a Secret holds, if it is complete, for these names, loads as a TLS key pair, and
/// is not due for renewal at `now`.
pub fn usable(secret: &Secret, dns_names: &[String], now: Timestamp) -> Option<Bundle> {
    let annotations = secret.metadata.annotations.as_ref()?;
    let not_after: Timestamp = annotations.get(ANNOTATION_NOT_AFTER)?.parse().ok()?;
    if annotations.get(ANNOTATION_DNS_NAMES)? != &dns_names.join(",") {
        return None;
    }
    let renew_at = not_after.checked_sub(days(RENEW_BEFORE_DAYS)).ok()?;
    if now >= renew_at {
        return None;
    }
    let bundle = Bundle {
        ca_pem: text(secret, "ca.crt")?,
        cert_pem: text(secret, "tls.crt")?,
        key_pem: text(secret, "tls.key")?,
        not_after,
    };
    let pair_loads = {
        use rustls::pki_types::pem::PemObject;
        let chain: Result<Vec<_>, _> =
            rustls::pki_types::CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes()).collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes());
        matches!((chain, key), (Ok(c), Ok(k)) if !c.is_empty() && rustls::crypto::ring::sign::any_supported_type(&k).is_ok())
    };
    pair_loads.then_some(bundle)
}

fn secret_object(config: &SelfSigned, bundle: &Bundle, resource_version: Option<String>) -> Secret {
    let data = BTreeMap::from([
        ("ca.crt".to_string(), ByteString(bundle.ca_pem.clone().into_bytes())),
        ("tls.crt".to_string(), ByteString(bundle.cert_pem.clone().into_bytes())),
        ("tls.key".to_string(), ByteString(bundle.key_pem.clone().into_bytes())),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(config.secret.clone()),
            namespace: Some(config.namespace.clone()),
            resource_version,
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_string(), "kvpilot".to_string()),
                ("app.kubernetes.io/component".to_string(), "webhook-tls".to_string()),
            ])),
            annotations: Some(BTreeMap::from([
                (ANNOTATION_NOT_AFTER.to_string(), bundle.not_after.to_string()),
                (ANNOTATION_DNS_NAMES.to_string(), config.dns_names().join(",")),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The usable bundle in the Secret, creating or renewing it when needed. Safe to run from
/// several replicas at once: whoever loses a write race adopts the winner's bundle.
pub async fn ensure_secret(client: &kube::Client, config: &SelfSigned, now: Timestamp) -> Result<Bundle, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let names = config.dns_names();
    for _ in 0..5 {
        let existing = secrets.get_opt(&config.secret).await?;
        if let Some(bundle) = existing.as_ref().and_then(|s| usable(s, &names, now)) {
            return Ok(bundle);
        }
        let bundle = generate(&names, now)?;
        let written = match existing {
            None => secrets.create(&PostParams::default(), &secret_object(config, &bundle, None)).await,
            Some(old) => {
                let object = secret_object(config, &bundle, old.metadata.resource_version.clone());
                secrets.replace(&config.secret, &PostParams::default(), &object).await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %config.secret, not_after = %bundle.not_after, "wrote a new webhook certificate");
                return Ok(bundle);
            }
            // Another replica wrote first: read what it wrote.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CertError::Contended(config.secret.clone()))
}

/// Writes `data` to `path` through a temporary file, so a reader never sees half a file.
fn write_atomically(path: &Path, data: &str) -> Result<(), CertError> {
    let error = |source| CertError::Write { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error)?;
    }
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, data).map_err(error)?;
    std::fs::rename(&temporary, path).map_err(error)
}

/// Writes the serving pair for the webhook server (key first: the server reloads once both
/// files load as a pair).
pub fn write_files(config: &SelfSigned, bundle: &Bundle) -> Result<(), CertError> {
    write_atomically(&config.key_path, &bundle.key_pem)?;
    write_atomically(&config.cert_path, &bundle.cert_pem)
}

/// The validating and mutating webhook configurations, as far as their caBundles go.
trait WebhookConfiguration:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The base64 caBundle of each webhook, in order.
    fn ca_bundles(&self) -> Vec<Option<String>>;
}

fn encoded(bundle: &Option<ByteString>) -> Option<String> {
    bundle.as_ref().map(|b| BASE64.encode(&b.0))
}

impl WebhookConfiguration for ValidatingWebhookConfiguration {
    fn ca_bundles(&self) -> Vec<Option<String>> {
        self.webhooks.iter().flatten().map(|w| encoded(&w.client_config.ca_bundle)).collect()
    }
}

impl WebhookConfiguration for MutatingWebhookConfiguration {
    fn ca_bundles(&self) -> Vec<Option<String>> {
        self.webhooks.iter().flatten().map(|w| encoded(&w.client_config.ca_bundle)).collect()
    }
}

/// Sets `caBundle` on every webhook of the named configuration that does not carry `ca_pem`.
/// Returns whether anything was patched; a configuration that does not exist is reported and
/// skipped (the webhook may be disabled, or not applied yet).
async fn patch_ca_bundle<K: WebhookConfiguration>(
    client: &kube::Client,
    name: &str,
    ca_pem: &str,
) -> Result<bool, CertError> {
    let api: Api<K> = Api::all(client.clone());
    let Some(configuration) = api.get_opt(name).await? else {
        tracing::warn!(configuration = name, "webhook configuration not found; caBundle not set");
        return Ok(false);
    };
    let wanted = BASE64.encode(ca_pem);
    let operations: Vec<serde_json::Value> = configuration
        .ca_bundles()
        .iter()
        .enumerate()
        .filter(|(_, current)| current.as_deref() != Some(wanted.as_str()))
        .map(|(i, _)| json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": wanted}))
        .collect();
    if operations.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(json!(operations)).map_err(|e| CertError::Kube(kube::Error::SerdeError(e)))?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch)).await?;
    tracing::info!(configuration = name, webhooks = operations.len(), "set the webhook caBundle");
    Ok(true)
}

/// Points the named webhook configurations at the CA.
pub async fn sync_ca_bundles(client: &kube::Client, config: &SelfSigned, ca_pem: &str) -> Result<(), CertError> {
    if let Some(name) = &config.validating {
        patch_ca_bundle::<ValidatingWebhookConfiguration>(client, name, ca_pem).await?;
    }
    if let Some(name) = &config.mutating {
        patch_ca_bundle::<MutatingWebhookConfiguration>(client, name, ca_pem).await?;
    }
    Ok(())
}

/// Every change to the named configuration, as a tick.
fn changes<K: WebhookConfiguration>(client: &kube::Client, name: &str) -> futures::stream::BoxStream<'static, ()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(Api::<K>::all(client.clone()), config).default_backoff().touched_objects().map(|_| ()).boxed()
}

/// Makes sure the Secret, the served files and the caBundles agree; returns the bundle.
pub async fn reconcile(client: &kube::Client, config: &SelfSigned) -> Result<Bundle, CertError> {
    let bundle = ensure_secret(client, config, Timestamp::now()).await?;
    write_files(config, &bundle)?;
    sync_ca_bundles(client, config, &bundle.ca_pem).await?;
    Ok(bundle)
}

/// Keeps everything in step until the task is aborted: re-checks the expiry hourly, and
/// restores a caBundle as soon as a webhook configuration changes.
pub fn maintain(client: kube::Client, config: SelfSigned) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let names: Vec<String> = config.validating.iter().chain(config.mutating.iter()).cloned().collect();
        let validating = config.validating.iter().map(|name| changes::<ValidatingWebhookConfiguration>(&client, name));
        let mutating = config.mutating.iter().map(|name| changes::<MutatingWebhookConfiguration>(&client, name));
        let mut changes = futures::stream::select_all(validating.chain(mutating));
        let mut ticker = tokio::time::interval(RENEWAL_CHECK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::debug!(configurations = ?names, "maintaining the webhook certificate");
        loop {
            tokio::select! {
                _ = ticker.tick() => {},
                Some(()) = changes.next() => {},
            }
            if let Err(e) = reconcile(&client, &config).await {
                tracing::warn!(error = %e, "webhook certificate upkeep failed; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    })
}
