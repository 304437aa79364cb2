//! A TLS certificate that follows its files: cert-manager (or kvpilot itself) rotates the
//! Secret, the kubelet updates the mounted files, and new handshakes get the new certificate
//! while open connections keep the session they have.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate/key pair that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS certificate {path}: {message}")]
    Certificate { path: PathBuf, message: String },
    #[error("cannot read TLS private key {path}: {message}")]
    Key { path: PathBuf, message: String },
}

/// Loads a PEM certificate chain and private key.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_error = |message: String| TlsError::Certificate { path: cert.to_path_buf(), message };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_error(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_error("no PEM certificate in the file".into()));
    }
    let key_error = |message: String| TlsError::Key { path: key.to_path_buf(), message };
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| key_error(e.to_string()))?;
    let signing = any_supported_type(&private).map_err(|e| key_error(e.to_string()))?;
    Ok(CertifiedKey::new(chain, signing))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Serves the current certificate and swaps it when the files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    state: RwLock<(Arc<CertifiedKey>, Option<SystemTime>, Option<SystemTime>)>,
}

impl ReloadingCert {
    /// Loads the pair once; fails if it cannot be loaded (a webhook without a certificate is no use).
    pub fn new(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let key = load_certified_key(cert_path, key_path)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            state: RwLock::new((Arc::new(key), modified(cert_path), modified(key_path))),
        }))
    }

    /// Reloads if either file changed since the last load. A pair that fails to load (say,
    /// the certificate is written before its key) keeps the old certificate in use and is
    /// retried on the next call. Returns whether a new certificate is now served.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let (cert_time, key_time) = (modified(&self.cert_path), modified(&self.key_path));
        {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            if state.1 == cert_time && state.2 == key_time {
                return Ok(false);
            }
        }
        let key = load_certified_key(&self.cert_path, &self.key_path)?;
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(key), cert_time, key_time);
        Ok(true)
    }

    /// Polls the files every `interval` until the process ends.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let cert = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match cert.reload_if_changed() {
                    Ok(true) => tracing::info!(cert = %cert.cert_path.display(), "reloaded the TLS certificate"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "keeping the current TLS certificate"),
                }
            }
        })
    }

    /// A rustls server configuration serving this certificate (HTTP/2 and HTTP/1.1).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.state.read().unwrap_or_else(|p| p.into_inner()).0))
    }
}
