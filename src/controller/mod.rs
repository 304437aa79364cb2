//! The InferenceDeployment controller: observe → resolve the model config → layout → policy →
//! the pure [`desired::desired_state`] → server-side apply (one field manager) → status.
//! Only the status of an InferenceDeployment is ever written, never its spec.

pub mod desired;
pub mod metrics;
pub mod rollout;
pub mod status;
pub mod watch_backoff;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::{ConfigSourceRef, DecodeStatus, InferenceDeployment, InferenceDeploymentStatus, Rewrite};
use crate::policy::{self, Assessment, Outcome};
use crate::source::{ClusterSource, SourceError};
use desired::{Desired, LABEL_ORDINAL, LABEL_REVISION, RenderOptions, desired_state, with_type_meta};
use metrics::Metrics;
use rollout::{ObservedPod, resolve_int_or_percent};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "kvpilot";
/// How long a resource whose spec cannot work waits before it is looked at again (edits
/// trigger a reconcile at once anyway).
const USER_ERROR_REQUEUE: Duration = Duration::from_secs(300);
/// Periodic resync of a healthy resource.
const RESYNC: Duration = Duration::from_secs(600);
/// Re-check while a rollout waits for pods.
const ROLLOUT_REQUEUE: Duration = Duration::from_secs(15);
/// Reconciliations in flight at once: each holds its rendered objects and an API connection,
/// so an unbounded burst (every resource at start-up) costs memory and connections for nothing.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 32;

/// What can go wrong in a reconciliation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write or read against the API server failed (transient: backoff).
    #[error("Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The model config could not be read (transient for hubs and the API, backoff).
    #[error("model config: {0}")]
    Source(#[source] SourceError),
    /// The object has no namespace or name (never happens for a namespaced CRD from the API).
    #[error("the InferenceDeployment has no {0}")]
    MissingMetadata(&'static str),
}

impl Error {
    /// A bounded label for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kube",
            Self::Source(e) => e.reason(),
            Self::MissingMetadata(_) => "metadata",
        }
    }
}

/// Shared by every reconciliation.
pub struct Context {
    pub client: kube::Client,
    pub source: ClusterSource,
    pub recorder: Recorder,
    pub options: RenderOptions,
    pub metrics: Metrics,
    /// Reconciliations in flight at once.
    pub max_concurrent_reconciles: u16,
    failures: Mutex<HashMap<ObjectRef<InferenceDeployment>, u32>>,
    /// Events standing for each resource as of its last reconcile, so that a reconcile starting
    /// from a cached status older than its own last write does not announce them again.
    announced: Mutex<HashMap<ObjectRef<InferenceDeployment>, BTreeSet<String>>>,
}

impl Context {
    /// A context for `client`, reading config sources through `source`.
    pub fn new(client: kube::Client, source: ClusterSource, options: RenderOptions, metrics: Metrics) -> Self {
        let reporter = Reporter { controller: "kvpilot".into(), instance: std::env::var("POD_NAME").ok() };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            source,
            recorder,
            options,
            metrics,
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            failures: Mutex::new(HashMap::new()),
            announced: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<InferenceDeployment>, u32>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Which InferenceDeployments the controller watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace.
    All,
    /// One namespace.
    Namespace(String),
}

fn api<K>(client: &kube::Client, scope: &Scope) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match scope {
        Scope::All => Api::all(client.clone()),
        Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
    }
}

/// How long reconciles in flight may finish after `shutdown` before [`run`] returns anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Runs the controller until `shutdown` completes and the reconciles in flight finish, or
/// [`SHUTDOWN_GRACE`] after it. The bound matters: kube-runtime's graceful shutdown waits for
/// the first list of InferenceDeployments, so an operator whose list never succeeds (RBAC
/// refuses it, the CRD is not installed) ignored SIGTERM until killed (seen against a real
/// kube-apiserver).
pub async fn run(
    context: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let deadline = {
        let shutdown = shutdown.clone();
        async move {
            shutdown.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        }
    };
    tokio::select! {
        () = reconcile_until(context, scope, shutdown) => {}
        () = deadline => tracing::warn!(grace = ?SHUTDOWN_GRACE, "the controller did not stop in time; stopping anyway"),
    }
}

async fn reconcile_until(
    context: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let deployments: Api<InferenceDeployment> = api(&client, &scope);
    let controller = Controller::new(deployments, watcher::Config::default().any_semantic())
        .with_config(kube::runtime::controller::Config::default().concurrency(context.max_concurrent_reconciles))
        .trigger_backoff(watch_backoff::WatchBackoff::default());
    let store = controller.store();
    controller
        .owns(
            api::<Pod>(&client, &scope),
            watcher::Config::default().labels(&format!("{}={}", desired::LABEL_NAME, desired::DECODE_APP)),
        )
        .owns(
            api::<ConfigMap>(&client, &scope),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kvpilot"),
        )
        .owns(
            api::<Service>(&client, &scope),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kvpilot"),
        )
        // A ConfigMap named by spec.model.config.configMapRef re-reconciles the resources using it.
        .watches(api::<ConfigMap>(&client, &scope), watcher::Config::default(), move |config_map| {
            let namespace = config_map.namespace();
            let name = config_map.name_any();
            store
                .state()
                .into_iter()
                .filter(|d| {
                    d.namespace() == namespace
                        && matches!(d.spec.model.config.source(), Ok(ConfigSourceRef::ConfigMap(r)) if r.name == name)
                })
                .map(|d| ObjectRef::from_obj(d.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile loop");
            }
        })
        .await;
}

/// Backoff for transient errors: 100 ms doubling per consecutive failure up to five minutes
/// (client-go's per-item rate limiter has the same shape), with ±20% jitter so a burst of
/// failures does not retry in lockstep.
fn backoff(failures: u32) -> Duration {
    let base = (0.1 * 2f64.powi(failures.saturating_sub(1).min(20) as i32)).min(300.0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let jitter = 0.8 + 0.4 * f64::from(nanos % 1000) / 1000.0;
    Duration::from_secs_f64(base * jitter)
}

fn error_policy(resource: Arc<InferenceDeployment>, error: &Error, context: Arc<Context>) -> Action {
    context.metrics.failure(error.metric_label());
    let key = ObjectRef::from_obj(resource.as_ref());
    let failures = {
        let mut failures = context.failures();
        let count = failures.entry(key).or_insert(0);
        *count += 1;
        *count
    };
    tracing::warn!(name = %resource.name_any(), error = %error, failures, "reconcile failed");
    Action::requeue(backoff(failures))
}

async fn reconcile(resource: Arc<InferenceDeployment>, context: Arc<Context>) -> Result<Action, Error> {
    let _timer = context.metrics.start();
    let action = reconcile_inner(&resource, &context).await?;
    context.failures().remove(&ObjectRef::from_obj(resource.as_ref()));
    Ok(action)
}

async fn reconcile_inner(resource: &InferenceDeployment, context: &Context) -> Result<Action, Error> {
    let namespace = resource.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    resource.metadata.name.as_ref().ok_or(Error::MissingMetadata("name"))?;
    let deployments: Api<InferenceDeployment> = Api::namespaced(context.client.clone(), &namespace);
    let previous = resource.status.as_ref();

    let config = match context.source.model_config(&namespace, &resource.spec.model).await {
        Ok(config) => config,
        Err(e) => {
            let decided = status::unresolved(e.reason(), &e.to_string());
            write_status(&deployments, resource, &decided, None, None).await?;
            announce(context, resource, vec![Announcement::warning(previous, e.reason(), &e.to_string())]).await;
            return Err(Error::Source(e));
        }
    };
    let release = match policy::choose_release(&resource.spec, &context.options.default_release) {
        Ok(release) => release,
        Err(e) => {
            let message = format!("spec.sglang.version: {e}");
            write_status(&deployments, resource, &status::unresolved("UnknownSglangVersion", &message), None, None)
                .await?;
            announce(context, resource, vec![Announcement::warning(previous, "UnknownSglangVersion", &message)]).await;
            return Ok(Action::requeue(USER_ERROR_REQUEUE));
        }
    };
    let assessment = match policy::assess(&resource.spec, &config, &release) {
        Ok(assessment) => assessment,
        Err(e) => {
            let message = format!("the model config.json is not a model config: {e}");
            write_status(&deployments, resource, &status::unresolved("InvalidModelConfig", &message), None, None)
                .await?;
            announce(context, resource, vec![Announcement::warning(previous, "InvalidModelConfig", &message)]).await;
            return Ok(Action::requeue(USER_ERROR_REQUEUE));
        }
    };
    let source = source_description(resource);
    if assessment.verdict.outcome == Outcome::Rejected {
        // Nothing is created or changed; pods that run keep running.
        let decided = status::resolved(&assessment, &source, resource.spec.decode.replicas, Default::default(), None);
        let reason = decided[1].reason.clone();
        write_status(&deployments, resource, &decided, Some(&assessment), None).await?;
        announce(context, resource, vec![Announcement::warning(previous, &reason, &decided[1].message)]).await;
        return Ok(Action::requeue(USER_ERROR_REQUEUE));
    }

    let desired = desired_state(resource, &assessment, &context.options);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let config_maps: Api<ConfigMap> = Api::namespaced(context.client.clone(), &namespace);
    let config_map_name = desired.config_map.metadata.name.clone().unwrap_or_default();
    config_maps
        .patch(&config_map_name, &apply, &Patch::Apply(with_type_meta(&desired.config_map, "v1", "ConfigMap")))
        .await
        .map_err(Error::Kube)?;
    let services: Api<Service> = Api::namespaced(context.client.clone(), &namespace);
    let service_name = desired.service.metadata.name.clone().unwrap_or_default();
    services
        .patch(&service_name, &apply, &Patch::Apply(with_type_meta(&desired.service, "v1", "Service")))
        .await
        .map_err(Error::Kube)?;

    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let observed = observe_pods(&pods, &desired).await?;
    let rollout_spec = &resource.spec.decode.rollout;
    let (max_unavailable, max_surge, rollout_problem) = match (
        resolve_int_or_percent(&rollout_spec.max_unavailable, desired.replicas, false),
        resolve_int_or_percent(&rollout_spec.max_surge, desired.replicas, true),
    ) {
        (Ok(u), Ok(s)) => (u, s, None),
        (Err(e), _) | (_, Err(e)) => (1, 0, Some(format!("spec.decode.rollout: {e}"))),
    };
    let plan = rollout::plan(&observed, &desired.revision, desired.replicas, max_unavailable, max_surge);
    for ordinal in &plan.create {
        let pod = desired.pod(*ordinal);
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        match pods.patch(&pod_name, &apply, &Patch::Apply(with_type_meta(&pod, "v1", "Pod"))).await {
            Ok(_) => {}
            // The previous pod of that name is still terminating: the next pass retries.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    for pod_name in &plan.delete {
        match pods.delete(pod_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }

    let counts = count_after(&observed, &plan, &desired.revision);
    let decided = status::resolved(&assessment, &source, desired.replicas, counts, rollout_problem.as_deref());
    let decode = DecodeStatus {
        replicas: counts.total,
        ready_replicas: counts.ready_updated,
        updated_replicas: counts.updated,
        selector: desired.selector.clone(),
    };
    write_status(&deployments, resource, &decided, Some(&assessment), Some(decode)).await?;
    let mut standing = Announcement::rewrites(previous, &assessment);
    if let Some(warning) = assessment.release.warning() {
        // Once per requested release: status.sglang records it.
        let recorded = previous.and_then(|s| s.sglang.as_ref()) == Some(&status::sglang_status(&assessment.release));
        standing.push(Announcement {
            type_: EventType::Warning,
            reason: "SglangVersionApproximated".into(),
            note: warning,
            action: "Reconcile".into(),
            recorded,
        });
    }
    if let Some(problem) = &rollout_problem {
        let recorded = previous.is_some_and(|s| {
            s.conditions.iter().any(|c| c.reason == "InvalidRollout" && c.message.starts_with(problem.as_str()))
        });
        standing.push(Announcement {
            type_: EventType::Warning,
            reason: "InvalidRollout".into(),
            note: problem.clone(),
            action: "Reconcile".into(),
            recorded,
        });
    }
    announce(context, resource, standing).await;
    let settled = plan.create.is_empty() && plan.delete.is_empty() && decided[2].status == "True";
    Ok(Action::requeue(if settled { RESYNC } else { ROLLOUT_REQUEUE }))
}

fn source_description(resource: &InferenceDeployment) -> String {
    match resource.spec.model.config.source() {
        Ok(ConfigSourceRef::Inline(_)) => "spec.model.config.inline".into(),
        Ok(ConfigSourceRef::ConfigMap(r)) => format!("ConfigMap {} key {}", r.name, r.key),
        Ok(ConfigSourceRef::Hub(h)) => {
            format!("hub repository {}", h.repo.as_deref().unwrap_or(&resource.spec.model.name))
        }
        Err(e) => e,
    }
}

async fn observe_pods(pods: &Api<Pod>, desired: &Desired) -> Result<Vec<ObservedPod>, Error> {
    let listed = pods.list(&ListParams::default().labels(&desired.selector)).await.map_err(Error::Kube)?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|pod| {
            let labels = pod.metadata.labels.as_ref()?;
            let ordinal = labels.get(LABEL_ORDINAL)?.parse().ok()?;
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some(ObservedPod {
                name: pod.metadata.name.clone()?,
                ordinal,
                revision: labels.get(LABEL_REVISION).cloned().unwrap_or_default(),
                ready,
                terminating: pod.metadata.deletion_timestamp.is_some(),
            })
        })
        .collect())
}

/// Pod counts after the plan is carried out (created pods are not ready yet).
fn count_after(observed: &[ObservedPod], plan: &rollout::Plan, revision: &str) -> status::PodCounts {
    let kept: Vec<&ObservedPod> =
        observed.iter().filter(|p| !p.terminating && !plan.delete.contains(&p.name)).collect();
    let created = plan.create.len() as i32;
    status::PodCounts {
        total: kept.len() as i32 + created,
        updated: kept.iter().filter(|p| p.revision == revision).count() as i32 + created,
        ready_updated: kept.iter().filter(|p| p.revision == revision && p.ready).count() as i32,
    }
}

async fn write_status(
    deployments: &Api<InferenceDeployment>,
    resource: &InferenceDeployment,
    decided: &[status::Decided],
    assessment: Option<&Assessment>,
    decode: Option<DecodeStatus>,
) -> Result<(), Error> {
    let previous = resource.status.as_ref();
    let now = k8s_openapi::jiff::Timestamp::now();
    let new: InferenceDeploymentStatus =
        status::status(previous, decided, resource.metadata.generation, assessment, decode, now);
    if previous == Some(&new) {
        return Ok(());
    }
    let body = json!({"apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment", "status": new});
    let name = resource.name_any();
    deployments
        .patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await
        .map_err(Error::Kube)?;
    Ok(())
}

/// An event about something that stands on a resource: a problem, or a rewrite in effect.
struct Announcement {
    type_: EventType,
    reason: String,
    note: String,
    action: String,
    /// Already recorded in the status the reconcile started from (covers an operator restart).
    recorded: bool,
}

impl Announcement {
    /// A problem, recorded when the status carries a condition with its reason and message.
    fn warning(previous: Option<&InferenceDeploymentStatus>, reason: &str, message: &str) -> Self {
        let recorded =
            previous.is_some_and(|s| s.conditions.iter().any(|c| c.reason == reason && c.message == message));
        Self {
            type_: EventType::Warning,
            reason: reason.into(),
            note: message.into(),
            action: "Reconcile".into(),
            recorded,
        }
    }

    /// One Normal event per rewrite in effect.
    fn rewrites(previous: Option<&InferenceDeploymentStatus>, assessment: &Assessment) -> Vec<Self> {
        let known: &[Rewrite] = previous.map(|s| s.rewrites.as_slice()).unwrap_or_default();
        assessment
            .verdict
            .rewrites
            .iter()
            .map(|rewrite| Self {
                type_: EventType::Normal,
                reason: "SettingRewritten".into(),
                note: format!(
                    "{}: {} → {} ({}: {})",
                    rewrite.field, rewrite.from, rewrite.to, rewrite.rule, rewrite.message
                ),
                // The Recorder folds events of one reason and action into a series whatever
                // their note says, so each rule gets its own action.
                action: format!("Rewrite{}", rewrite.rule),
                recorded: known.contains(rewrite),
            })
            .collect()
    }

    fn key(&self) -> String {
        format!("{}\u{0}{}\u{0}{}", self.reason, self.action, self.note)
    }
}

/// Publishes the events of `standing` (everything that stands on the resource now) that were
/// not standing at its last reconcile nor recorded in its status. What no longer stands is
/// forgotten, so a problem that comes back is announced again.
async fn announce(context: &Context, resource: &InferenceDeployment, standing: Vec<Announcement>) {
    let fresh: Vec<Announcement> = {
        let mut announced = context.announced.lock().unwrap_or_else(|p| p.into_inner());
        let object = ObjectRef::from_obj(resource);
        let before = announced.remove(&object).unwrap_or_default();
        let now: BTreeSet<String> = standing.iter().map(Announcement::key).collect();
        if !now.is_empty() {
            announced.insert(object, now);
        }
        standing.into_iter().filter(|a| !a.recorded && !before.contains(&a.key())).collect()
    };
    for announcement in fresh {
        publish(context, resource, announcement.type_, &announcement.reason, &announcement.note, &announcement.action)
            .await;
    }
}

async fn publish(
    context: &Context,
    resource: &InferenceDeployment,
    type_: EventType,
    reason: &str,
    note: &str,
    action: &str,
) {
    let event = Event {
        type_,
        reason: reason.chars().take(128).collect(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = context.recorder.publish(&event, &resource.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot publish an event");
    }
}
