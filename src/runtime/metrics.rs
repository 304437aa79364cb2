//! Prometheus metrics of the cache runtime (`cache-runtime.md` §6): pool occupancy by component
//! and state, prefix hits, evictions, retraction outcomes, backup/restore volume, latency and
//! bandwidth, and per-operation latency.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Component;
use super::cache::Stats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    component: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

/// The runtime's metrics, registered in one registry.
pub struct CacheMetrics {
    cache_tokens: Family<PoolLabels, Gauge>,
    host_slots: Family<StateLabels, Gauge>,
    tree_nodes: Gauge,
    hit_tokens: Counter,
    query_tokens: Counter,
    evicted_tokens: Family<ComponentLabels, Counter>,
    retractions: Family<OutcomeLabels, Counter>,
    backups_evicted: Counter,
    backup_bytes: Counter,
    restore_bytes: Counter,
    backup_latency: Histogram,
    restore_latency: Histogram,
    bandwidth: Gauge<f64, AtomicU64>,
    op_latency: Family<OpLabels, Histogram>,
    invariant_violations: Counter,
    registry: Registry,
}

impl Default for CacheMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kvpilot");
        let m = Self {
            cache_tokens: Family::default(),
            host_slots: Family::default(),
            tree_nodes: Gauge::default(),
            hit_tokens: Counter::default(),
            query_tokens: Counter::default(),
            evicted_tokens: Family::default(),
            retractions: Family::default(),
            backups_evicted: Counter::default(),
            backup_bytes: Counter::default(),
            restore_bytes: Counter::default(),
            backup_latency: Histogram::new(exponential_buckets(0.000_05, 2.0, 18)),
            restore_latency: Histogram::new(exponential_buckets(0.000_05, 2.0, 18)),
            bandwidth: Gauge::default(),
            op_latency: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_000_5, 2.0, 24))),
            invariant_violations: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "cache_tokens",
            "Pool occupancy by component (full, swa: tokens; ssm: state slots) and state",
            m.cache_tokens.clone(),
        );
        registry.register("cache_host_slots", "Host pool token slots by state", m.host_slots.clone());
        registry.register("cache_tree_nodes", "Nodes of the radix prefix tree", m.tree_nodes.clone());
        registry.register("prefix_hit_tokens", "Tokens served from the prefix cache", m.hit_tokens.clone());
        registry.register("prefix_query_tokens", "Tokens looked up in the prefix cache", m.query_tokens.clone());
        registry.register(
            "evicted_tokens",
            "Cached tokens (ssm: slots) evicted, by component",
            m.evicted_tokens.clone(),
        );
        registry.register("retractions", "Retractions by outcome", m.retractions.clone());
        registry.register(
            "backups_evicted",
            "Finished host-pool backups evicted to make room for newer ones",
            m.backups_evicted.clone(),
        );
        registry.register("backup_bytes", "Bytes copied into retraction backups", m.backup_bytes.clone());
        registry.register("restore_bytes", "Bytes copied back by restores", m.restore_bytes.clone());
        registry.register(
            "backup_latency_seconds",
            "Retraction backup time from submission to completion",
            m.backup_latency.clone(),
        );
        registry.register(
            "restore_latency_seconds",
            "Restore time from submission to completion",
            m.restore_latency.clone(),
        );
        registry.register(
            "transfer_bandwidth_bytes_per_second",
            "Copy bandwidth of the last finished backup or restore",
            m.bandwidth.clone(),
        );
        registry.register("cache_op_latency_seconds", "Cache operation latency by operation", m.op_latency.clone());
        registry.register(
            "cache_invariant_violations",
            "Internal invariant violations detected (should stay 0)",
            m.invariant_violations.clone(),
        );
        Self { registry, ..m }
    }
}

impl CacheMetrics {
    /// A fresh set, shareable between the cache and the HTTP server.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) fn prefix(&self, hit: usize, query: usize) {
        self.hit_tokens.inc_by(hit as u64);
        self.query_tokens.inc_by(query as u64);
    }

    pub(crate) fn evicted(&self, component: Component, units: usize) {
        if units > 0 {
            self.evicted_tokens.get_or_create(&ComponentLabels { component: component.as_str() }).inc_by(units as u64);
        }
    }

    pub(crate) fn retraction(&self, outcome: &'static str) {
        self.retractions.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub(crate) fn backup_evicted(&self) {
        self.backups_evicted.inc();
    }

    pub(crate) fn transfer(&self, backup: bool, bytes: usize, latency: Duration, copy_time: Duration) {
        let (counter, histogram) = if backup {
            (&self.backup_bytes, &self.backup_latency)
        } else {
            (&self.restore_bytes, &self.restore_latency)
        };
        counter.inc_by(bytes as u64);
        histogram.observe(latency.as_secs_f64());
        if bytes > 0 && !copy_time.is_zero() {
            self.bandwidth.set(bytes as f64 / copy_time.as_secs_f64());
        }
    }

    pub(crate) fn invariant_violation(&self) {
        self.invariant_violations.inc();
    }

    /// Records one operation's latency.
    pub fn op(&self, op: &'static str, elapsed: Duration) {
        self.op_latency.get_or_create(&OpLabels { op }).observe(elapsed.as_secs_f64());
    }

    pub(crate) fn occupancy(&self, stats: &Stats) {
        for (component, pool) in &stats.pools {
            for (state, value) in
                [("free", pool.free_tokens), ("evictable", pool.evictable_tokens), ("protected", pool.protected_tokens)]
            {
                self.cache_tokens.get_or_create(&PoolLabels { component, state }).set(value as i64);
            }
        }
        self.host_slots.get_or_create(&StateLabels { state: "free" }).set(stats.host.free_slots as i64);
        self.host_slots
            .get_or_create(&StateLabels { state: "used" })
            .set((stats.host.total_slots - stats.host.free_slots) as i64);
        self.tree_nodes.set(stats.tree_nodes as i64);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
