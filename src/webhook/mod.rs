//! The admission webhook server: `POST /validate`, `POST /mutate` (InferenceDeployments), the
//! SGLang guard's `POST /guard/enforce`, `/guard/warn`, `/guard/rewrite` (workloads),
//! `/healthz`, `/readyz`, over HTTPS only, with certificates reloaded from disk as they rotate.

pub mod admission;
pub mod certs;
pub mod tls;
pub mod workloads;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::release::ReleaseChoice;
use crate::source::ClusterSource;
use admission::ResourceWebhook;
use workloads::GuardWebhook;

/// Largest AdmissionReview accepted: an object and its old version at the API server's 1.5 MiB
/// object limit, plus slack.
pub const MAX_REVIEW_BYTES: usize = 4 * 1024 * 1024;

/// What the handlers share.
#[derive(Clone, Default)]
pub struct WebhookState {
    /// Reads ConfigMap and hub sources; None when no cluster is reachable (those sources are
    /// then allowed with a warning).
    pub source: Option<ClusterSource>,
    /// The SGLang release for resources whose spec and image name none (`--sglang-version`).
    pub default_release: ReleaseChoice,
}

/// The webhook's routes.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .route(GuardWebhook::Enforce.path(), post(|state, body| guarded(state, body, GuardWebhook::Enforce)))
        .route(GuardWebhook::Warn.path(), post(|state, body| guarded(state, body, GuardWebhook::Warn)))
        .route(GuardWebhook::Rewrite.path(), post(|state, body| guarded(state, body, GuardWebhook::Rewrite)))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .with_state(Arc::new(state))
}

async fn validate(State(state): State<Arc<WebhookState>>, body: Body) -> Response {
    handle(state, body, ResourceWebhook::Validate).await
}

async fn mutate(State(state): State<Arc<WebhookState>>, body: Body) -> Response {
    handle(state, body, ResourceWebhook::Mutate).await
}

async fn guarded(State(state): State<Arc<WebhookState>>, body: Body, webhook: GuardWebhook) -> Response {
    match review_body(body).await {
        Ok(bytes) => reply(workloads::review(&bytes, webhook, state.source.as_ref(), &state.default_release).await),
        Err(refusal) => refusal,
    }
}

async fn handle(state: Arc<WebhookState>, body: Body, webhook: ResourceWebhook) -> Response {
    match review_body(body).await {
        Ok(bytes) => reply(admission::review(&bytes, webhook, state.source.as_ref(), &state.default_release).await),
        Err(refusal) => refusal,
    }
}

/// The bytes of an AdmissionReview request, or the answer to a body that cannot be read.
async fn review_body(body: Body) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, MAX_REVIEW_BYTES)
        .await
        .map_err(|e| bad_request(format!("cannot read the request body (at most {MAX_REVIEW_BYTES} bytes): {e}")))
}

/// The answer to a review: the response review as JSON, or HTTP 400.
fn reply(review: Result<serde_json::Value, admission::BadReview>) -> Response {
    match review {
        Ok(review) => ([(header::CONTENT_TYPE, "application/json")], review.to_string()).into_response(),
        Err(e) => bad_request(e.to_string()),
    }
}

fn bad_request(message: String) -> Response {
    tracing::warn!(reason = %message, "refused an admission request");
    (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message + "\n").into_response()
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, then lets open requests
/// finish. Each connection is served on its own task, so a slow client holds up no one.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls_stream = match acceptor.accept(stream).await {
                Ok(tls_stream) => tls_stream,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), service).into_owned();
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}
