//! Prometheus metrics of the controller: reconciliations, failures by reason, duration, and the
//! requests it sends to the API server by verb and resource (client-go's
//! `rest_client_requests_total`, in kube-apiserver's own verbs).

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

/// A request to the API server as kube-apiserver's `apiserver_request_total` names it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// GET, LIST, WATCH, APPLY (server-side apply), PATCH, POST, PUT, DELETE, DELETECOLLECTION.
    pub verb: String,
    /// The resource's plural, with `/subresource` when there is one; empty for discovery and
    /// other paths outside a resource.
    pub resource: String,
}

impl RequestLabels {
    /// The labels of a request with `method`, `path` (and `query`, without the `?`) and
    /// Content-Type `content_type`.
    pub fn of(method: &http::Method, path: &str, query: Option<&str>, content_type: Option<&str>) -> Self {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
            _ => &[][..],
        };
        let rest = match rest {
            ["namespaces", _namespace, rest @ ..] if !rest.is_empty() => rest,
            other => other,
        };
        let (resource, named) = match rest {
            [resource] => ((*resource).to_string(), false),
            [resource, _name] => ((*resource).to_string(), true),
            [resource, _name, subresource, ..] => (format!("{resource}/{subresource}"), true),
            _ => (String::new(), true),
        };
        let watching = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
        let verb = match *method {
            http::Method::GET if watching => "WATCH",
            http::Method::GET if !named => "LIST",
            http::Method::PATCH if content_type == Some("application/apply-patch+yaml") => "APPLY",
            http::Method::DELETE if !named => "DELETECOLLECTION",
            ref other => other.as_str(),
        };
        Self { verb: verb.to_string(), resource }
    }
}

/// The controller's metrics, registered in `registry`.
#[derive(Clone)]
pub struct Metrics {
    reconciliations: Counter,
    failures: Family<ErrorLabels, Counter>,
    duration: Histogram,
    api_requests: Family<RequestLabels, Counter>,
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
        let api_requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API server, by verb and resource",
            api_requests.clone(),
        );
        Self { reconciliations, failures, duration, api_requests, registry: Arc::new(registry) }
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

    /// Counts a request about to be sent to the API server.
    pub fn count_request<B>(&self, request: &http::Request<B>) {
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let labels = RequestLabels::of(request.method(), request.uri().path(), request.uri().query(), content_type);
        self.api_requests.get_or_create(&labels).inc();
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

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    fn labels(method: Method, uri: &str, content_type: Option<&str>) -> (String, String) {
        let (path, query) = uri.split_once('?').map_or((uri, None), |(p, q)| (p, Some(q)));
        let labels = RequestLabels::of(&method, path, query, content_type);
        (labels.verb, labels.resource)
    }

    #[test]
    fn requests_are_named_as_kube_apiserver_names_them() {
        let cases = [
            (Method::GET, "/api/v1/namespaces/a/pods/p", None, ("GET", "pods")),
            (Method::GET, "/api/v1/pods?labelSelector=x&limit=100", None, ("LIST", "pods")),
            (Method::GET, "/api/v1/namespaces/a/pods?watch=true&resourceVersion=5", None, ("WATCH", "pods")),
            (
                Method::PATCH,
                "/api/v1/namespaces/a/pods/p?fieldManager=kvpilot&force=true",
                Some("application/apply-patch+yaml"),
                ("APPLY", "pods"),
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/a/pods/p/status",
                Some("application/strategic-merge-patch+json"),
                ("PATCH", "pods/status"),
            ),
            (
                Method::PATCH,
                "/apis/kvpilot.dev/v1alpha1/namespaces/a/inferencedeployments/m/status",
                Some("application/apply-patch+yaml"),
                ("APPLY", "inferencedeployments/status"),
            ),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/a/events", None, ("POST", "events")),
            (
                Method::DELETE,
                "/apis/policy/v1/namespaces/a/poddisruptionbudgets/b",
                None,
                ("DELETE", "poddisruptionbudgets"),
            ),
            (Method::DELETE, "/api/v1/namespaces/a/pods", None, ("DELETECOLLECTION", "pods")),
            (Method::GET, "/api/v1/namespaces/a", None, ("GET", "namespaces")),
            (Method::GET, "/apis/apps/v1/deployments?watch=1", None, ("WATCH", "deployments")),
            (Method::GET, "/apis/scheduling.volcano.sh/v1beta1", None, ("GET", "")),
            (Method::GET, "/version", None, ("GET", "")),
        ];
        for (method, uri, content_type, (verb, resource)) in cases {
            assert_eq!(labels(method, uri, content_type), (verb.to_string(), resource.to_string()), "{uri}");
        }
    }

    #[test]
    fn counted_requests_show_in_the_exposition() {
        let metrics = Metrics::default();
        let request = http::Request::get("/api/v1/namespaces/a/pods/p").body(()).unwrap();
        metrics.count_request(&request);
        metrics.count_request(&request);
        let text = metrics.encode();
        assert!(text.contains(r#"kvpilot_api_requests_total{verb="GET",resource="pods"} 2"#), "{text}");
    }
}
