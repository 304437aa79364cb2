//! `kvpilot webhook --addr HOST:PORT --tls-cert FILE --tls-key FILE`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::serve::{LogFormat, init_logging, runtime, shutdown_signal};
use crate::source::{ClusterSource, DEFAULT_HUB_ENDPOINT, HubClient};
use crate::webhook::{self, WebhookState, tls::ReloadingCert};

/// Flags of the webhook server, shared with `kvpilot operator --webhook-addr`.
#[derive(Args, Debug, Clone)]
pub(crate) struct WebhookTlsArgs {
    /// PEM certificate chain served by the webhook.
    #[arg(long, value_name = "FILE", default_value = "/etc/kvpilot/tls/tls.crt")]
    pub(crate) tls_cert: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long, value_name = "FILE", default_value = "/etc/kvpilot/tls/tls.key")]
    pub(crate) tls_key: PathBuf,
    /// How often the certificate files are checked for rotation.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub(crate) cert_reload_seconds: u64,
}

#[derive(Args, Debug)]
pub(crate) struct WebhookArgs {
    /// Address to listen on (HTTPS).
    #[arg(long, default_value = "0.0.0.0:9443")]
    addr: SocketAddr,
    #[command(flatten)]
    tls: WebhookTlsArgs,
    /// Hub endpoint for hub sources that do not name one.
    #[arg(long, env = "KVPILOT_HUB_ENDPOINT", default_value = DEFAULT_HUB_ENDPOINT)]
    hub_endpoint: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    sglang: super::SglangVersionArg,
}

/// Loads the certificate, connects to the cluster if one is reachable, and serves until SIGTERM.
pub(crate) async fn serve_webhook(
    addr: SocketAddr,
    tls: &WebhookTlsArgs,
    state: WebhookState,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let cert = ReloadingCert::new(&tls.tls_cert, &tls.tls_key).map_err(|e| e.to_string())?;
    let config = cert.server_config().map_err(|e| format!("TLS configuration: {e}"))?;
    let _watch = cert.watch(Duration::from_secs(tls.cert_reload_seconds.max(1)));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(%addr, "webhook serving /validate and /mutate over HTTPS");
    webhook::serve_tls(listener, config, webhook::router(state), shutdown).await.map_err(|e| e.to_string())
}

/// The webhook's view of the cluster, or None (sources outside the object then pass with a warning).
pub(crate) async fn cluster_source(hub_endpoint: &str) -> Option<ClusterSource> {
    let hub = match HubClient::new(Duration::from_secs(300), Duration::from_secs(10), &[]) {
        Ok(hub) => Arc::new(hub),
        Err(e) => {
            tracing::error!(error = %e, "cannot build the hub client");
            return None;
        }
    };
    match kube::Client::try_default().await {
        Ok(client) => Some(ClusterSource::new(client, hub, hub_endpoint)),
        Err(e) => {
            tracing::warn!(error = %e, "no Kubernetes client: configMapRef and hub sources are admitted with a warning");
            None
        }
    }
}

pub(crate) fn run(args: &WebhookArgs) -> ExitCode {
    init_logging(args.log_format);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kvpilot webhook: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    let default_release = match args.sglang.choice_for("webhook") {
        Ok(choice) => choice,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        let state = WebhookState { source: cluster_source(&args.hub_endpoint).await, default_release };
        serve_webhook(args.addr, &args.tls, state, shutdown_signal()).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvpilot webhook: {e}");
            ExitCode::from(2)
        }
    }
}
