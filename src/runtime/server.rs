//! The runtime's HTTP API: `POST /v1/batch`, `GET /v1/stats`, `GET /v1/config`, `/healthz`,
//! `/readyz` (ready once the pools are allocated) and `/metrics`.

use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use super::cache::Cache;
use super::metrics::CacheMetrics;
use super::ops;

/// Largest batch body: a step of 256 requests × 32K tokens as JSON numbers, with room to spare.
pub const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// What the handlers share.
pub struct RuntimeState {
    cache: OnceLock<Mutex<Cache>>,
    metrics: Arc<CacheMetrics>,
    /// What `GET /v1/config` reports: model, layout summary, effective settings, pools.
    description: Value,
}

impl RuntimeState {
    /// State whose cache is installed later with [`RuntimeState::ready`].
    pub fn new(metrics: Arc<CacheMetrics>, description: Value) -> Arc<Self> {
        Arc::new(Self { cache: OnceLock::new(), metrics, description })
    }

    /// Installs the allocated cache; `/readyz` then answers ok.
    pub fn ready(&self, mut cache: Cache) {
        cache.set_metrics(Arc::clone(&self.metrics));
        cache.stats();
        let _ = self.cache.set(Mutex::new(cache));
    }

    fn with_cache<T>(&self, f: impl FnOnce(&mut Cache) -> T) -> Option<T> {
        let cache = self.cache.get()?;
        let mut guard = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Some(f(&mut guard))
    }
}

/// The runtime's routes.
pub fn router(state: Arc<RuntimeState>) -> Router {
    Router::new()
        .route("/v1/batch", post(batch))
        .route("/v1/stats", get(stats))
        .route("/v1/config", get(|State(state): State<Arc<RuntimeState>>| async move { json(&state.description) }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

fn json(value: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

fn not_ready() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the pools are being allocated\n").into_response()
}

async fn readyz(State(state): State<Arc<RuntimeState>>) -> Response {
    if state.cache.get().is_some() { "ok".into_response() } else { not_ready() }
}

async fn stats(State(state): State<Arc<RuntimeState>>) -> Response {
    match state.with_cache(|cache| serde_json::to_value(cache.stats()).unwrap_or(Value::Null)) {
        Some(stats) => json(&stats),
        None => not_ready(),
    }
}

async fn metrics(State(state): State<Arc<RuntimeState>>) -> Response {
    // Occupancy gauges are refreshed at scrape time.
    state.with_cache(|cache| cache.stats());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

async fn batch(State(state): State<Arc<RuntimeState>>, body: Body) -> Response {
    let bytes = match axum::body::to_bytes(body, MAX_BATCH_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => return bad_request(format!("cannot read the batch (at most {MAX_BATCH_BYTES} bytes): {e}")),
    };
    let batch = match ops::parse_batch(&bytes) {
        Ok(batch) => batch,
        Err(e) => return bad_request(format!("not a batch: {e}; expected {{\"ops\": [{{\"op\": \"match\", ...}}]}}")),
    };
    let metrics = Arc::clone(&state.metrics);
    // Cache operations are short and CPU-bound; copies run on the copy thread.
    match state.with_cache(|cache| ops::execute(cache, batch, Some(&metrics))) {
        Some(results) => json(&results),
        None => not_ready(),
    }
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message + "\n").into_response()
}
