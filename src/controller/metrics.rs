//! Prometheus metrics of the controller: reconciliations, failures by reason, duration.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    reason: String,
}

/// The controller's metrics, registered in `registry`.
#[derive(Clone)]
pub struct Metrics {
    reconciliations: Counter,
    failures: Family<ErrorLabels, Counter>,
    duration: Histogram,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kvpilot");
        let reconciliations = Counter::default();
        let failures = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register("reconciliations", "Reconciliations of InferenceDeployments", reconciliations.clone());
        registry.register("reconcile_failures", "Failed reconciliations by reason", failures.clone());
        registry.register("reconcile_duration_seconds", "Time taken by one reconciliation", duration.clone());
        Self { reconciliations, failures, duration, registry: Arc::new(registry) }
    }
}

impl Metrics {
    /// Starts timing one reconciliation.
    pub fn start(&self) -> ReconcileTimer {
        self.reconciliations.inc();
        ReconcileTimer { start: Instant::now(), duration: self.duration.clone() }
    }

    /// Counts a failure under its reason.
    pub fn failure(&self, reason: &str) {
        self.failures.get_or_create(&ErrorLabels { reason: reason.into() }).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Observes the duration when dropped.
pub struct ReconcileTimer {
    start: Instant,
    duration: Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.duration.observe(self.start.elapsed().as_secs_f64());
    }
}
