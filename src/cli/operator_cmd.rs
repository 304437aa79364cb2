//! `kvpilot operator`: the controller, its metrics and health endpoints, optional leader
//! election and an optional embedded admission webhook.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use clap::Args;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use super::serve::{LogFormat, init_logging, runtime, shutdown_signal};
use super::webhook_cmd::{WebhookTlsArgs, serve_webhook};
use crate::controller::metrics::Metrics;
use crate::controller::{self, Context, Scope};
use crate::source::{ClusterSource, DEFAULT_HUB_ENDPOINT, HubClient};
use crate::webhook::WebhookState;
use crate::webhook::certs::{self, SelfSigned};

/// The Lease that elects the leader.
const LEASE_NAME: &str = "kvpilot-operator";
/// Longest wait for any byte from the API server. A kube-apiserver that restarts can leave a
/// watch request unanswered for good (seen against v1.37 after a restart over a compacted
/// etcd): without a limit that watch, and the reconciles it triggers, would stop. A quiet watch
/// that hits the limit is simply reopened from its resourceVersion.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args, Debug)]
pub(crate) struct OperatorArgs {
    /// Namespace to watch, or `all` for every namespace.
    #[arg(long, env = "KVPILOT_WATCH_NAMESPACE", default_value = "all")]
    namespace: String,
    #[command(flatten)]
    images: super::ImageArgs,
    #[command(flatten)]
    sglang: super::SglangVersionArg,
    /// Hub endpoint for hub sources that do not name one.
    #[arg(long, env = "KVPILOT_HUB_ENDPOINT", default_value = DEFAULT_HUB_ENDPOINT)]
    hub_endpoint: String,
    /// How long a fetched config.json is reused.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    hub_cache_seconds: u64,
    /// Address of the Prometheus `/metrics` endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Reconciliations in flight at once.
    #[arg(long, default_value_t = controller::DEFAULT_MAX_CONCURRENT_RECONCILES, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// How long a reconcile waits for more events about the same resource (0: not at all).
    #[arg(long, value_name = "MILLISECONDS", default_value_t = controller::DEFAULT_RECONCILE_DEBOUNCE.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    reconcile_debounce_ms: u64,
    /// Elect a leader through a Lease; only the leader reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// The operator's own namespace: where its leader-election Lease and its self-signed
    /// webhook Secret live.
    #[arg(long, alias = "lease-namespace", env = "POD_NAMESPACE", default_value = "kvpilot-system")]
    operator_namespace: String,
    /// Also serve the admission webhook on this address (HTTPS).
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    #[command(flatten)]
    tls: WebhookTlsArgs,
    /// Where the webhook's certificate comes from: `files` mounted by something else
    /// (cert-manager), or `self-signed`: kvpilot keeps a CA and certificate in a Secret, writes
    /// them to --tls-cert/--tls-key, and sets the caBundle of the webhook configurations.
    #[arg(long, value_enum, default_value_t = WebhookCerts::Files)]
    webhook_certs: WebhookCerts,
    /// self-signed: the Secret holding the CA and the serving certificate.
    #[arg(long, default_value = "kvpilot-webhook-tls")]
    webhook_secret: String,
    /// self-signed: the webhook Service the certificate is for.
    #[arg(long, default_value = "kvpilot-webhook")]
    webhook_service: String,
    /// self-signed: the ValidatingWebhookConfiguration whose caBundle kvpilot keeps.
    #[arg(long)]
    validating_webhook_configuration: Option<String>,
    /// self-signed: the MutatingWebhookConfiguration whose caBundle kvpilot keeps.
    #[arg(long)]
    mutating_webhook_configuration: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Make a Prometheus Operator PodMonitor (monitoring.coreos.com/v1) per fleet, instead of
    /// prometheus.io scrape annotations on the servers' pods (chart value
    /// metrics.podMonitor.enabled). Needs the Prometheus Operator's CRDs.
    #[arg(long)]
    pod_monitors: bool,
}

/// Where the webhook certificate comes from.
#[derive(Clone, Copy, Debug, clap::ValueEnum, PartialEq, Eq)]
enum WebhookCerts {
    /// Files mounted into the pod (cert-manager, or a Secret managed elsewhere).
    Files,
    /// Generated and kept by kvpilot itself.
    SelfSigned,
}

fn scope(namespace: &str) -> Scope {
    if namespace == "all" || namespace.is_empty() { Scope::All } else { Scope::Namespace(namespace.to_string()) }
}

/// `/metrics`, `/healthz`, `/readyz` over plain HTTP (scraped and probed inside the cluster).
async fn serve_http(addr: SocketAddr, app: Router, mut stop: watch::Receiver<bool>) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| e.to_string())
}

fn identity() -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("kvpilot-{}", std::process::id()))
}

async fn operate(args: &OperatorArgs) -> Result<(), String> {
    let mut config = kube::Config::infer().await.map_err(|e| format!("cannot find the Kubernetes API: {e}"))?;
    config.read_timeout = Some(READ_TIMEOUT);
    let metrics = Metrics::default();
    let counted = metrics.clone();
    let counting = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        counted.count_request(&request);
        request
    });
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| format!("cannot reach the Kubernetes API: {e}"))?
        .with_layer(&counting)
        .build();
    let hub = HubClient::new(Duration::from_secs(args.hub_cache_seconds), Duration::from_secs(20), &[])
        .map_err(|e| format!("cannot build the hub client: {e}"))?;
    let source = ClusterSource::new(client.clone(), Arc::new(hub), args.hub_endpoint.clone());
    let default_release = args.sglang.choice().map_err(|e| format!("--sglang-version: {e}"))?;
    if let Some(warning) = default_release.warning() {
        tracing::warn!(%warning, "--sglang-version");
    }
    let options = args.images.render_options(default_release.clone(), args.log_format, args.pod_monitors);
    let mut context = Context::new(client.clone(), source.clone(), options, metrics.clone());
    context.max_concurrent_reconciles = args.max_concurrent_reconciles;
    context.reconcile_debounce = std::time::Duration::from_millis(args.reconcile_debounce_ms);
    let context = Arc::new(context);
    let scope = scope(&args.namespace);

    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let metrics_app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                    metrics.encode(),
                )
            }
        }),
    );
    let health_app = Router::new().route("/healthz", get(|| async { "ok" })).route("/readyz", get(|| async { "ok" }));
    let servers = [
        tokio::spawn(serve_http(args.metrics_addr, metrics_app, stop.clone())),
        tokio::spawn(serve_http(args.health_addr, health_app, stop.clone())),
    ];
    if let Some(addr) = args.webhook_addr {
        if args.webhook_certs == WebhookCerts::SelfSigned {
            let certs = SelfSigned {
                namespace: args.operator_namespace.clone(),
                secret: args.webhook_secret.clone(),
                service: args.webhook_service.clone(),
                validating: args.validating_webhook_configuration.clone(),
                mutating: args.mutating_webhook_configuration.clone(),
                cert_path: args.tls.tls_cert.clone(),
                key_path: args.tls.tls_key.clone(),
            };
            certs::reconcile(&client, &certs).await.map_err(|e| format!("webhook certificate: {e}"))?;
            let upkeep = certs::maintain(client.clone(), certs);
            let mut stop = stop.clone();
            tokio::spawn(async move {
                let _ = stop.wait_for(|s| *s).await;
                upkeep.abort();
            });
        }
        let tls = args.tls.clone();
        let mut webhook_stop = stop.clone();
        tokio::spawn(async move {
            let state = WebhookState { source: Some(source), default_release };
            let shutdown = async move {
                let _ = webhook_stop.wait_for(|s| *s).await;
            };
            if let Err(e) = serve_webhook(addr, &tls, state, shutdown).await {
                tracing::error!(error = %e, "the webhook stopped");
            }
        });
    }

    let stopped = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if !args.leader_elect {
        tracing::info!(?scope, "reconciling");
        controller::run(context, scope, stopped(stop.clone())).await;
    } else {
        let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
            .with_namespace(&args.operator_namespace)
            .with_identity(identity())
            .with_duration(15)
            .with_grace(5)
            .build()
            .await
            .map_err(|e| format!("leader election: {e}"))?;
        let (leading, lease_task) = manager.watch().await;
        loop {
            let mut waiting = leading.clone();
            let mut signal = stop.clone();
            tokio::select! {
                _ = waiting.wait_for(|l| *l) => {},
                _ = signal.wait_for(|s| *s) => break,
            }
            tracing::info!(?scope, "elected leader: reconciling");
            let (mut lost, mut signal) = (leading.clone(), stop.clone());
            let step_down = async move {
                tokio::select! {
                    _ = lost.wait_for(|l| !*l) => {},
                    _ = signal.wait_for(|s| *s) => {},
                }
            };
            controller::run(Arc::clone(&context), scope.clone(), step_down).await;
            if *stop.borrow() {
                break;
            }
            tracing::warn!("lost the lease: standing by");
        }
        // Dropping the receiver makes the lease task release the lease.
        drop(leading);
        let _ = tokio::time::timeout(Duration::from_secs(5), lease_task).await;
    }
    for server in servers {
        let _ = server.await;
    }
    tracing::info!("stopped");
    Ok(())
}

pub(crate) fn run(args: &OperatorArgs) -> ExitCode {
    init_logging(args.log_format);
    let result = match runtime() {
        Ok(runtime) => runtime.block_on(operate(args)),
        Err(e) => Err(format!("cannot start: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvpilot operator: {e}");
            ExitCode::from(2)
        }
    }
}
