//! Prometheus metrics of the sidecar, and its `/metrics`, `/healthz`, `/readyz` routes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::store::PageStore;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The sidecar's metrics, in one registry.
pub struct Metrics {
    stored_bytes: Gauge,
    stored_pages: Gauge,
    capacity_bytes: Gauge,
    lookups: Family<ResultLabels, Counter>,
    evictions: Counter,
    set_bytes: Counter,
    get_bytes: Counter,
    latency: Family<OpLabels, Histogram>,
    connections: Gauge,
    closed_connections: Family<ReasonLabels, Counter>,
    ready: AtomicBool,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kvpilot_cache");
        let m = Self {
            stored_bytes: Gauge::default(),
            stored_pages: Gauge::default(),
            capacity_bytes: Gauge::default(),
            lookups: Family::default(),
            evictions: Counter::default(),
            set_bytes: Counter::default(),
            get_bytes: Counter::default(),
            // 1 µs to ~8 s: an EXISTS of one key up to a 128-page copy-mode batch.
            latency: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_001, 2.0, 24))),
            connections: Gauge::default(),
            closed_connections: Family::default(),
            ready: AtomicBool::new(false),
            registry: Registry::default(),
        };
        registry.register("stored_bytes", "Bytes of pages held in the store", m.stored_bytes.clone());
        registry.register("stored_pages", "Pages held in the store", m.stored_pages.clone());
        registry.register("capacity_bytes", "The store's capacity (--capacity)", m.capacity_bytes.clone());
        registry.register("lookups", "Pages looked up by GET, by result (hit, miss)", m.lookups.clone());
        registry.register("evictions", "Pages evicted to make room (least recently used first)", m.evictions.clone());
        registry.register("set_bytes", "Bytes copied into the store", m.set_bytes.clone());
        registry.register("get_bytes", "Bytes copied out of the store", m.get_bytes.clone());
        registry.register("request_seconds", "Time to serve one frame, by operation", m.latency.clone());
        registry.register("connections", "Open connections from rank processes", m.connections.clone());
        registry.register(
            "connections_closed",
            "Connections closed, by reason (eof: the client's own close)",
            m.closed_connections.clone(),
        );
        Self { registry, ..m }
    }
}

impl Metrics {
    /// Metrics for a store of `capacity` bytes.
    pub fn new(capacity: u64) -> Arc<Self> {
        let metrics = Self::default();
        metrics.capacity_bytes.set(i64::try_from(capacity).unwrap_or(i64::MAX));
        Arc::new(metrics)
    }

    /// Marks the socket as accepting connections.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the socket accepts connections.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn served(&self, op: &'static str, elapsed: Duration) {
        self.latency.get_or_create(&OpLabels { op }).observe(elapsed.as_secs_f64());
    }

    pub(crate) fn lookups(&self, hits: u64, misses: u64) {
        self.lookups.get_or_create(&ResultLabels { result: "hit" }).inc_by(hits);
        self.lookups.get_or_create(&ResultLabels { result: "miss" }).inc_by(misses);
    }

    pub(crate) fn stored(&self, bytes: u64, evicted: u64) {
        self.set_bytes.inc_by(bytes);
        self.evictions.inc_by(evicted);
    }

    pub(crate) fn read(&self, bytes: u64) {
        self.get_bytes.inc_by(bytes);
    }

    pub(crate) fn connection_opened(&self) {
        self.connections.inc();
    }

    pub(crate) fn connection_closed(&self, reason: &'static str) {
        self.connections.dec();
        self.closed_connections.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The OpenMetrics text exposition, with the store's totals as of now.
    pub fn encode(&self, store: &PageStore) -> String {
        let usage = store.usage();
        self.stored_bytes.set(i64::try_from(usage.bytes).unwrap_or(i64::MAX));
        self.stored_pages.set(i64::try_from(usage.pages).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// `/metrics`, `/healthz` (the process answers) and `/readyz` (the socket accepts).
pub fn router(metrics: Arc<Metrics>, store: Arc<PageStore>) -> Router {
    let ready = Arc::clone(&metrics);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                if ready.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "socket not bound yet")
                }
            }),
        )
        .route(
            "/metrics",
            get(move || async move {
                (
                    [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                    metrics.encode(&store),
                )
                    .into_response()
            }),
        )
}
