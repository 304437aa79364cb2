//! The InferenceDeployment controller: observe (the model config, the server pods and the
//! router Deployment in the watch caches) → the pure [`decide::decide`] (layout, policy, desired
//! objects, rollouts of both fleets, status, events) → [`act`] (server-side apply with one field
//! manager, status, pod deletes and creates, removal of what is no longer wanted, events). Only
//! the status of an InferenceDeployment is ever written, never its spec.

pub mod applied;
pub mod coherent;
pub mod decide;
pub mod desired;
pub mod metrics;
mod recovery;
pub mod rollout;
mod server_pod;
pub mod status;
pub mod watch_backoff;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::{GangScheduler, InferenceDeployment};
use crate::source::{ClusterSource, SourceError};
use applied::{AppliedBodies, ObjectKey, body_hash};
use decide::{Announcement, Decision, GROUP_READY, Next, Observed, ObservedPod, ObservedPodGroup, ObservedRouter};
use desired::{
    CoschedulingPodGroup, FleetRole, LABEL_KV_COMPAT, LABEL_ORDINAL, LABEL_RANK, LABEL_REVISION, POD_MONITOR_API,
    POD_MONITORS_UNSERVED, PodGroup, PodMonitor, RenderOptions, VolcanoPodGroup, with_type_meta,
};
use metrics::Metrics;
use server_pod::ServerPod;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "kvpilot";
/// How long pods this controller created may take to reach its watch cache before it stops
/// waiting for them (a create the API server accepted shows up well within this).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Objects per page of the initial lists of InferenceDeployments and pods (kube-runtime's
/// default is 500).
const LIST_PAGE_SIZE: u32 = 100;
/// Reconciliations in flight at once: each holds its rendered objects and an API connection,
/// so an unbounded burst (every resource at start-up) costs memory and connections for nothing.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 32;
/// How long a resource's reconcile waits for the triggers that follow the first: its pods are
/// created, scheduled and become ready in bursts, and one pass after a burst writes one status
/// where a pass per event wrote one each. Against kube-apiserver + etcd this took 1,000 × 4
/// from 43 s to 27 s to all Ready. A resource whose pods change without pause for longer
/// would wait until they pause; pods do not.
pub const DEFAULT_RECONCILE_DEBOUNCE: Duration = Duration::from_secs(1);

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
    /// The pod watch cache stopped (only while the controller shuts down).
    #[error("the pod watch cache has stopped")]
    CacheClosed,
}

impl Error {
    /// A bounded label for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(kube::Error::Api(status)) if status.code == 422 => "invalid",
            Self::Kube(_) => "kube",
            Self::Source(e) => e.reason(),
            Self::MissingMetadata(_) => "metadata",
            Self::CacheClosed => "cache",
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
    /// See [`DEFAULT_RECONCILE_DEBOUNCE`].
    pub reconcile_debounce: Duration,
    failures: Mutex<HashMap<ObjectRef<InferenceDeployment>, u32>>,
    /// Events standing for each resource as of its last reconcile, so that a reconcile starting
    /// from a cached status older than its own last write does not announce them again.
    announced: Mutex<HashMap<ObjectRef<InferenceDeployment>, BTreeSet<String>>>,
    /// Pods each resource's last pass created, until the watch cache shows them: a replica
    /// missing a rank it was just given is on its way, not broken (client-go's expectations).
    created: Mutex<HashMap<ObjectRef<InferenceDeployment>, CreatedPods>>,
    /// The UIDs of the pods each resource's passes deleted, while the watch cache still holds
    /// them: a group seen going rank by rank is the controller's doing, not a failure.
    deleted: Mutex<HashMap<ObjectRef<InferenceDeployment>, HashSet<String>>>,
    /// Whether the last look found the PodMonitor API missing (with `--pod-monitors`), so that
    /// the log says so when that changes, not at every reconcile.
    pod_monitors_unserved: std::sync::atomic::AtomicBool,
}

/// When a pass created pods, and their names.
type CreatedPods = (Instant, Vec<String>);

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
            reconcile_debounce: DEFAULT_RECONCILE_DEBOUNCE,
            failures: Mutex::new(HashMap::new()),
            announced: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
            pod_monitors_unserved: std::sync::atomic::AtomicBool::new(false),
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

/// What one run of the controller reads instead of asking the API server: its watch caches.
struct Reconciler {
    context: Arc<Context>,
    /// Prefill and decode pods, as much of them as the planner reads ([`ServerPod`]).
    pods: Store<ServerPod>,
    /// The objects the controller keeps for each resource: the ConfigMap, the fleets' and the
    /// router's Services, and the router's identity and Deployment.
    config_maps: Kept<ConfigMap>,
    services: Kept<Service>,
    service_accounts: Kept<ServiceAccount>,
    roles: Kept<Role>,
    role_bindings: Kept<RoleBinding>,
    disruption_budgets: Kept<PodDisruptionBudget>,
    /// Router Deployments, trimmed by [`trim_deployment`] to metadata, their key and rollout.
    deployments: Kept<Deployment, Deployment>,
    /// The replicas' PodGroups of Volcano and of scheduler-plugins, trimmed by
    /// [`trim_pod_group`].
    volcano_pod_groups: Kept<VolcanoPodGroup>,
    coscheduling_pod_groups: Kept<CoschedulingPodGroup>,
    /// The fleets' PodMonitors, watched only with `--pod-monitors` (else empty).
    pod_monitors: Kept<PodMonitor>,
}

/// A kind the controller keeps objects of: its watch cache (metadata only, trimmed by
/// [`trim_kept`], unless the controller reads more), and what this run last applied to them.
struct Kept<
    K: Resource<DynamicType = ()> + 'static,
    Cached: Resource<DynamicType = ()> + 'static = PartialObjectMeta<K>,
> {
    cache: Store<Cached>,
    applied: AppliedBodies,
    kind: std::marker::PhantomData<K>,
}

/// Keeps of a ConfigMap's or Service's metadata what the owner trigger and [`Kept`] read:
/// name, namespace, resourceVersion and owner references.
fn trim_kept<K>(object: &mut PartialObjectMeta<K>) {
    trim_kept_meta(&mut object.metadata);
}

fn trim_kept_meta(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    meta.annotations = None;
    meta.creation_timestamp = None;
}

/// Keeps of a PodGroup's metadata what [`trim_kept`] keeps and the labels that name its
/// resource, fleet and replica.
fn trim_pod_group<K>(group: &mut PartialObjectMeta<K>) {
    let read = [desired::LABEL_INSTANCE, desired::LABEL_NAME, LABEL_ORDINAL];
    let labels = group.metadata.labels.take().map(|mut labels| {
        labels.retain(|key, _| read.contains(&key.as_str()));
        labels
    });
    trim_kept_meta(&mut group.metadata);
    group.metadata.labels = labels;
}

/// Keeps of a router Deployment its metadata as [`trim_kept`] does, the key it selects, its
/// replicas and how far its rollout is.
fn trim_deployment(deployment: &mut Deployment) {
    let key = deployment.metadata.labels.as_ref().and_then(|labels| labels.get(LABEL_KV_COMPAT)).cloned();
    trim_kept_meta(&mut deployment.metadata);
    deployment.metadata.labels = key.map(|key| [(LABEL_KV_COMPAT.to_string(), key)].into());
    deployment.spec =
        deployment.spec.take().map(|spec| DeploymentSpec { replicas: spec.replicas, ..DeploymentSpec::default() });
    deployment.status = deployment.status.take().map(|status| DeploymentStatus {
        observed_generation: status.observed_generation,
        replicas: status.replicas,
        updated_replicas: status.updated_replicas,
        ready_replicas: status.ready_replicas,
        terminating_replicas: status.terminating_replicas,
        ..DeploymentStatus::default()
    });
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
    let (deployments, deployments_writer) = reflector::store::<InferenceDeployment>();
    // Lists are consistent reads, not `any_semantic`: after a kube-apiserver restart over a
    // compacted etcd, a list served from its watch cache carried a resourceVersion older than
    // the compaction, and the watch resumed from it got 410 Gone again, for ever.
    // Lists come in pages of LIST_PAGE_SIZE: a page is held whole (its body and every object in
    // it) while it is read, and 500 full InferenceDeployments or pods set the operator's peak.
    let listed = || watcher::Config::default().page_size(LIST_PAGE_SIZE);
    let deployment_stream = watcher(api::<InferenceDeployment>(&client, &scope), listed())
        .modify(|d| d.metadata.managed_fields = None)
        .reflect(deployments_writer)
        .applied_objects();
    let (pods, pods_writer) = reflector::store::<ServerPod>();
    // The router's pods too: an old API server sets no `terminatingReplicas` on the router's
    // Deployment, and a router pod of the old key still routes while it terminates.
    let servers = format!(
        "{} in ({},{},{})",
        desired::LABEL_NAME,
        desired::DECODE_APP,
        desired::PREFILL_APP,
        desired::ROUTER_APP
    );
    let pod_stream = watcher(api::<ServerPod>(&client, &scope), listed().labels(&servers))
        .modify(server_pod::trim)
        .reflect(pods_writer)
        .touched_objects();
    let (kept_config_maps, config_maps) = watch_managed(&client, &scope, trim_kept::<ConfigMap>);
    let (kept_services, services) = watch_managed(&client, &scope, trim_kept::<Service>);
    let (kept_service_accounts, service_accounts) = watch_managed(&client, &scope, trim_kept::<ServiceAccount>);
    let (kept_roles, roles) = watch_managed(&client, &scope, trim_kept::<Role>);
    let (kept_role_bindings, role_bindings) = watch_managed(&client, &scope, trim_kept::<RoleBinding>);
    let (kept_budgets, disruption_budgets) = watch_managed(&client, &scope, trim_kept::<PodDisruptionBudget>);
    let (kept_router_deployments, router_deployments) = watch_managed(&client, &scope, trim_deployment);
    let (kept_volcano_pod_groups, volcano_pod_groups) = watch_optional::<VolcanoPodGroup>(&client, &scope);
    let (kept_coscheduling_pod_groups, coscheduling_pod_groups) =
        watch_optional::<CoschedulingPodGroup>(&client, &scope);
    // Without --pod-monitors the operator may not read PodMonitors (the chart grants nothing on
    // them): no watch, an empty cache.
    let (kept_pod_monitors, pod_monitors) = if context.options.pod_monitors {
        watch_optional::<PodMonitor>(&client, &scope)
    } else {
        (reflector::store().0, futures::stream::empty().boxed())
    };
    let sources =
        watcher(api::<PartialObjectMeta<ConfigMap>>(&client, &scope), watcher::Config::default()).touched_objects();
    let users = deployments.clone();
    let reconciler = Arc::new(Reconciler {
        context: Arc::clone(&context),
        pods,
        config_maps: Kept::new(kept_config_maps),
        services: Kept::new(kept_services),
        service_accounts: Kept::new(kept_service_accounts),
        roles: Kept::new(kept_roles),
        role_bindings: Kept::new(kept_role_bindings),
        disruption_budgets: Kept::new(kept_budgets),
        deployments: Kept::new(kept_router_deployments),
        volcano_pod_groups: Kept::new(kept_volcano_pod_groups),
        coscheduling_pod_groups: Kept::new(kept_coscheduling_pod_groups),
        pod_monitors: Kept::new(kept_pod_monitors),
    });
    Controller::for_stream(deployment_stream, deployments)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(context.max_concurrent_reconciles)
                .debounce(context.reconcile_debounce),
        )
        .trigger_backoff(watch_backoff::WatchBackoff::default())
        // One trigger stream for every owned kind: a chain of `owns_stream`s nests one stream
        // combinator per kind, and polling seven of them overflowed a 2 MiB worker stack in
        // debug builds.
        .reconcile_on(futures::stream::select_all([
            pod_triggers(pod_stream),
            config_maps,
            services,
            service_accounts,
            roles,
            role_bindings,
            disruption_budgets,
            router_deployments,
            volcano_pod_groups,
            coscheduling_pod_groups,
            pod_monitors,
        ]))
        // A ConfigMap named by the model's or the draft's configMapRef re-reconciles the resources
        // using it.
        .watches_stream(sources, move |config_map| {
            let namespace = config_map.namespace();
            let name = config_map.name_any();
            users
                .state()
                .into_iter()
                .filter(|d| d.namespace() == namespace && d.spec.reads_config_map(&name))
                .map(|d| ObjectRef::from_obj(d.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile loop");
            }
        })
        .await;
}

/// A namespaced kind the controller watches.
trait Watched:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// A watch of the objects of kind `K` that kvpilot manages (label `managed-by=kvpilot`), trimmed
/// by `trim` before they reach the cache: the cache, and the resources whose objects changed.
fn watch_managed<K: Watched>(
    client: &kube::Client,
    scope: &Scope,
    trim: fn(&mut K),
) -> (Store<K>, futures::stream::BoxStream<'static, ObjectRef<InferenceDeployment>>) {
    let (cache, changed) = watch_labelled(client, scope, trim);
    (cache, owner_triggers(changed))
}

/// A watch of the objects kvpilot manages of a kind another project installs (a gang
/// scheduler's PodGroups, the Prometheus Operator's PodMonitors), as [`watch_managed`] watches
/// its other kinds, keeping the labels that name their resource, fleet and replica. A cluster
/// without that project serves no such API: the list fails (404) until it is installed, retried
/// with kube-runtime's backoff (up to 30 s apart) rather than at once.
fn watch_optional<K: Watched>(
    client: &kube::Client,
    scope: &Scope,
) -> (Store<PartialObjectMeta<K>>, futures::stream::BoxStream<'static, ObjectRef<InferenceDeployment>>) {
    let (cache, changed) = watch_labelled(client, scope, trim_pod_group::<K>);
    (cache, owner_triggers(changed.default_backoff()))
}

/// The cache of the `managed-by=kvpilot` objects of kind `K`, trimmed by `trim`, and the stream
/// of their changes that keeps it.
fn watch_labelled<K: Watched>(
    client: &kube::Client,
    scope: &Scope,
    trim: fn(&mut K),
) -> (Store<K>, impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static) {
    let (cache, writer) = reflector::store();
    let config = watcher::Config::default().labels("app.kubernetes.io/managed-by=kvpilot");
    (cache, watcher(api::<K>(client, scope), config).modify(trim).reflect(writer).touched_objects())
}

/// The InferenceDeployment that controls each object of `stream` (its controller owner
/// reference), as kube-runtime's `owns_stream` finds it, boxed so that merged streams stay flat.
fn owner_triggers<K>(
    stream: impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> futures::stream::BoxStream<'static, ObjectRef<InferenceDeployment>>
where
    K: Resource + Send + 'static,
{
    stream
        .filter_map(|object| async move {
            let object = match object {
                Ok(object) => object,
                Err(e) => {
                    tracing::debug!(error = %e, "owned objects' watch");
                    return None;
                }
            };
            owning_resource(object.meta())
        })
        .boxed()
}

/// The InferenceDeployment that controls the object of `meta`.
fn owning_resource(meta: &kube::api::ObjectMeta) -> Option<ObjectRef<InferenceDeployment>> {
    let owner = meta.owner_references.iter().flatten().find(|owner| {
        owner.controller == Some(true)
            && owner.kind == "InferenceDeployment"
            && owner.api_version.starts_with("kvpilot.dev/")
    })?;
    Some(ObjectRef::new(&owner.name).within(meta.namespace.as_deref()?))
}

/// The resource of each server pod (its owner) and of each router pod (whose owner is the router
/// Deployment's ReplicaSet: its instance label), so that a router pod of an old key going away
/// lets a rollout go on.
fn pod_triggers(
    stream: impl futures::Stream<Item = Result<ServerPod, watcher::Error>> + Send + 'static,
) -> futures::stream::BoxStream<'static, ObjectRef<InferenceDeployment>> {
    stream
        .filter_map(|pod| async move {
            let pod = pod.map_err(|e| tracing::debug!(error = %e, "server and router pods' watch")).ok()?;
            owning_resource(&pod.metadata).or_else(|| {
                let (_, instance) = router_pod_of(&pod)?;
                Some(ObjectRef::new(instance).within(pod.metadata.namespace.as_deref()?))
            })
        })
        .boxed()
}

/// The key a router pod selects and the resource it routes for; None for other pods.
fn router_pod_of(pod: &ServerPod) -> Option<(&str, &str)> {
    let labels = pod.metadata.labels.as_ref()?;
    (labels.get(desired::LABEL_NAME).map(String::as_str) == Some(desired::ROUTER_APP)).then_some(())?;
    let key = labels.get(LABEL_KV_COMPAT).map_or("", String::as_str);
    Some((key, labels.get(desired::LABEL_INSTANCE)?.as_str()))
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

fn error_policy(resource: Arc<InferenceDeployment>, error: &Error, reconciler: Arc<Reconciler>) -> Action {
    let context = &reconciler.context;
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

async fn reconcile(resource: Arc<InferenceDeployment>, reconciler: Arc<Reconciler>) -> Result<Action, Error> {
    let context = &reconciler.context;
    let _timer = context.metrics.start();
    // An empty cache before the first list would look like a resource with no pods.
    reconciler.pods.wait_until_ready().await.map_err(|_| Error::CacheClosed)?;
    let action = reconcile_inner(&resource, &reconciler).await?;
    context.failures().remove(&ObjectRef::from_obj(resource.as_ref()));
    Ok(action)
}

async fn reconcile_inner(resource: &InferenceDeployment, reconciler: &Reconciler) -> Result<Action, Error> {
    let context = &reconciler.context;
    let namespace = resource.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    resource.metadata.name.as_ref().ok_or(Error::MissingMetadata("name"))?;
    if resource.metadata.deletion_timestamp.is_some() {
        // The garbage collector is removing what it owns (with --cascade=foreground it waits
        // for that): a pod recreated now would be deleted again, and would hold the owner up.
        return Ok(Action::await_change());
    }
    let configs = context.source.model_configs(&namespace, &resource.spec).await;
    let deleted = reconciler.deleted_still_cached(resource, &namespace);
    let pods = observe_pods(&reconciler.pods, &namespace, resource, &deleted);
    let settling = reconciler.settling(resource, &pods);
    let router = reconciler.router_status(&namespace, resource);
    let missing_scheduler_api = context.source.apis().missing_for(&resource.spec).await.map_err(Error::Kube)?;
    let pod_monitors_unserved = context.options.pod_monitors && !pod_monitors_served(context).await?;
    let observed = Observed {
        resource,
        pods,
        pod_groups: reconciler.observe_pod_groups(&namespace, resource),
        router,
        missing_scheduler_api,
        pod_monitors_unserved,
        settling,
        options: &context.options,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let decision = decide::decide(&observed, configs);
    act(resource, &namespace, reconciler, decision).await
}

/// Whether the cluster serves the PodMonitor API (discovery, answers kept as for the gang
/// schedulers'); logs an error when it stops doing so, and when it starts again.
async fn pod_monitors_served(context: &Context) -> Result<bool, Error> {
    let served = context.source.apis().serves(POD_MONITOR_API).await.map_err(Error::Kube)?;
    let was_unserved = context.pod_monitors_unserved.swap(!served, std::sync::atomic::Ordering::Relaxed);
    match (served, was_unserved) {
        (false, false) => tracing::error!(problem = POD_MONITORS_UNSERVED, "PodMonitors cannot be made"),
        (true, true) => tracing::info!("the cluster serves monitoring.coreos.com/v1 podmonitors again"),
        _ => {}
    }
    Ok(served)
}

/// Carries out a [`Decision`]: the ConfigMap and Service, then the status (which counts only
/// what exists and stays), then pod deletes and creates, then the events.
async fn act(
    resource: &InferenceDeployment,
    namespace: &str,
    reconciler: &Reconciler,
    decision: Decision,
) -> Result<Action, Error> {
    let context = &reconciler.context;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(desired) = &decision.desired {
        // Boxed: its state machine holds every apply's, and debug builds do not overlap them.
        Box::pin(reconciler.apply_objects(resource, namespace, desired, &apply)).await?;
    }
    if let Some(status) = &decision.status {
        let deployments: Api<InferenceDeployment> = Api::namespaced(context.client.clone(), namespace);
        let body = json!({"apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment", "status": status});
        deployments.patch_status(&resource.name_any(), &apply, &Patch::Apply(body)).await.map_err(Error::Kube)?;
    }
    // Answers are decoded as the cache decodes pods: a pod's spec would be read for nothing.
    let pods: Api<ServerPod> = Api::namespaced(context.client.clone(), namespace);
    for change in &decision.group_readiness {
        let condition = json!({"status": {"conditions": [{
            "type": GROUP_READY,
            "status": if change.ready { "True" } else { "False" },
            "reason": change.reason,
            "message": change.message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        }]}});
        // A strategic merge keeps the kubelet's conditions (they merge by type).
        match pods.patch_status(&change.pod, &PatchParams::default(), &Patch::Strategic(condition)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    for pod_name in &decision.delete {
        // Remembered before the call: a pod deleted while the call's answer was lost is ours too.
        reconciler.expect_deleted(resource, namespace, pod_name);
        match pods.delete(pod_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    for group in &decision.pod_groups {
        reconciler.apply_pod_group(namespace, group, &apply).await?;
    }
    let mut created = Vec::new();
    for pod in &decision.create {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        match pods.patch(&pod_name, &apply, &Patch::Apply(with_type_meta(pod, "v1", "Pod"))).await {
            Ok(_) => created.push(pod_name),
            // The previous pod of that name is still terminating: the next pass retries.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    if !created.is_empty() {
        reconciler.expect_created(resource, created);
    }
    for group in &decision.stale_pod_groups {
        reconciler.remove_pod_group(resource, namespace, group).await?;
    }
    announce(context, resource, decision.announcements).await;
    match decision.next {
        Next::Requeue(after) => Ok(Action::requeue(after)),
        Next::Retry(error) => Err(Error::Source(error)),
    }
}

impl Reconciler {
    /// Applies the ConfigMap, the fleets' Services, budgets and PodMonitors and the router's
    /// objects, and deletes the prefill Service, budget and PodMonitor and the router objects of
    /// this resource when they are no longer wanted
    /// (spec.prefill removed, the router turned off). Pods of a fleet no longer wanted are
    /// deleted by the decision.
    async fn apply_objects(
        &self,
        resource: &InferenceDeployment,
        namespace: &str,
        desired: &desired::Desired,
        apply: &PatchParams,
    ) -> Result<(), Error> {
        let client = &self.context.client;
        let name_of =
            |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| meta.name.clone().unwrap_or_default();
        let config_map = with_type_meta(&desired.config_map, "v1", "ConfigMap");
        self.config_maps.apply(client, apply, namespace, &name_of(&desired.config_map.metadata), config_map).await?;
        for fleet in desired.fleets() {
            let service = with_type_meta(&fleet.service, "v1", "Service");
            self.services.apply(client, apply, namespace, &name_of(&fleet.service.metadata), service).await?;
            let budget = with_type_meta(&fleet.disruption_budget, "policy/v1", "PodDisruptionBudget");
            let budget_name = name_of(&fleet.disruption_budget.metadata);
            self.disruption_budgets.apply(client, apply, namespace, &budget_name, budget).await?;
            if let Some(monitor) = &fleet.pod_monitor {
                let body = serde_json::to_value(monitor).unwrap_or_default();
                self.pod_monitors.apply(client, apply, namespace, &name_of(&monitor.metadata), body).await?;
            }
        }
        let name = resource.name_any();
        if desired.prefill.is_none() {
            let prefill = desired::service_name(&name, FleetRole::Prefill);
            self.services.remove(client, resource, namespace, &prefill).await?;
            self.disruption_budgets.remove(client, resource, namespace, &prefill).await?;
            self.pod_monitors.remove(client, resource, namespace, &prefill).await?;
        }
        let router_name = desired::router_name(&name);
        match &desired.router {
            Some(router) => {
                let sa = with_type_meta(&router.service_account, "v1", "ServiceAccount");
                self.service_accounts.apply(client, apply, namespace, &router_name, sa).await?;
                let role = with_type_meta(&router.role, "rbac.authorization.k8s.io/v1", "Role");
                self.roles.apply(client, apply, namespace, &router_name, role).await?;
                let binding = with_type_meta(&router.role_binding, "rbac.authorization.k8s.io/v1", "RoleBinding");
                self.role_bindings.apply(client, apply, namespace, &router_name, binding).await?;
                let deployment = with_type_meta(&router.deployment, "apps/v1", "Deployment");
                self.deployments.apply(client, apply, namespace, &router_name, deployment).await?;
                let service = with_type_meta(&router.service, "v1", "Service");
                self.services.apply(client, apply, namespace, &router_name, service).await?;
                let budget = with_type_meta(&router.disruption_budget, "policy/v1", "PodDisruptionBudget");
                self.disruption_budgets.apply(client, apply, namespace, &router_name, budget).await?;
            }
            None => {
                self.disruption_budgets.remove(client, resource, namespace, &router_name).await?;
                self.services.remove(client, resource, namespace, &router_name).await?;
                self.deployments.remove(client, resource, namespace, &router_name).await?;
                self.role_bindings.remove(client, resource, namespace, &router_name).await?;
                self.roles.remove(client, resource, namespace, &router_name).await?;
                self.service_accounts.remove(client, resource, namespace, &router_name).await?;
            }
        }
        Ok(())
    }

    /// Server-side applies a replica's PodGroup.
    async fn apply_pod_group(&self, namespace: &str, group: &PodGroup, apply: &PatchParams) -> Result<(), Error> {
        let client = &self.context.client;
        let (name, body) = (group.name(), group.to_json());
        match group {
            PodGroup::Volcano(_) => self.volcano_pod_groups.apply(client, apply, namespace, &name, body).await,
            PodGroup::Coscheduling(_) => {
                self.coscheduling_pod_groups.apply(client, apply, namespace, &name, body).await
            }
        }
    }

    /// Deletes a PodGroup of `resource` that its replica no longer needs.
    async fn remove_pod_group(
        &self,
        resource: &InferenceDeployment,
        namespace: &str,
        group: &ObservedPodGroup,
    ) -> Result<(), Error> {
        let client = &self.context.client;
        match group.scheduler {
            GangScheduler::Volcano => self.volcano_pod_groups.remove(client, resource, namespace, &group.name).await,
            GangScheduler::Coscheduling => {
                self.coscheduling_pod_groups.remove(client, resource, namespace, &group.name).await
            }
            GangScheduler::None | GangScheduler::Kueue => Ok(()),
        }
    }

    /// The resource's PodGroups as the watch caches hold them.
    fn observe_pod_groups(&self, namespace: &str, resource: &InferenceDeployment) -> Vec<ObservedPodGroup> {
        let name = resource.name_any();
        let volcano =
            self.volcano_pod_groups.cache.state().into_iter().map(|g| (GangScheduler::Volcano, g.metadata.clone()));
        let coscheduling = self
            .coscheduling_pod_groups
            .cache
            .state()
            .into_iter()
            .map(|g| (GangScheduler::Coscheduling, g.metadata.clone()));
        volcano
            .chain(coscheduling)
            .filter(|(_, meta)| meta.namespace.as_deref() == Some(namespace))
            .filter_map(|(scheduler, meta)| {
                let labels = meta.labels.as_ref()?;
                if labels.get(desired::LABEL_INSTANCE) != Some(&name) {
                    return None;
                }
                Some(ObservedPodGroup {
                    scheduler,
                    name: meta.name.clone()?,
                    role: fleet_role(labels.get(desired::LABEL_NAME)?)?,
                    replica: labels.get(LABEL_ORDINAL)?.parse().ok()?,
                })
            })
            .collect()
    }

    /// The router Deployment and its pods (terminating ones too) as the watch caches hold them.
    fn router_status(&self, namespace: &str, resource: &InferenceDeployment) -> Option<ObservedRouter> {
        let resource_name = resource.name_any();
        let name = desired::router_name(&resource_name);
        let deployment = self.deployments.cache.get(&ObjectRef::new(&name).within(namespace))?;
        let pods = self.pods.state();
        let keys: Vec<&str> = pods
            .iter()
            .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|pod| router_pod_of(pod))
            .filter(|(_, instance)| *instance == resource_name)
            .map(|(key, _)| key)
            .collect();
        Some(observe_router(&deployment, &keys))
    }

    /// Whether pods the last pass created for `resource` are still missing from `observed`
    /// (and not for longer than [`SETTLE_TIMEOUT`]); forgets them once they are all seen.
    fn settling(&self, resource: &InferenceDeployment, observed: &[ObservedPod]) -> bool {
        let key = ObjectRef::from_obj(resource);
        let mut created = self.context.created.lock().unwrap_or_else(|p| p.into_inner());
        let Some((at, names)) = created.get(&key) else { return false };
        let missing = names.iter().any(|name| !observed.iter().any(|pod| &pod.name == name));
        if missing && at.elapsed() < SETTLE_TIMEOUT {
            return true;
        }
        created.remove(&key);
        false
    }

    /// The UIDs of pods this controller deleted for `resource` that the watch cache still
    /// holds; forgets the rest (a pod made again under the same name has a new UID).
    fn deleted_still_cached(&self, resource: &InferenceDeployment, namespace: &str) -> HashSet<String> {
        let key = ObjectRef::from_obj(resource);
        let mut deleted = self.context.deleted.lock().unwrap_or_else(|p| p.into_inner());
        let Some(uids) = deleted.get_mut(&key) else { return HashSet::new() };
        let cached: HashSet<String> = self
            .pods
            .state()
            .iter()
            .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|pod| pod.metadata.uid.clone())
            .collect();
        uids.retain(|uid| cached.contains(uid));
        let still = uids.clone();
        if still.is_empty() {
            deleted.remove(&key);
        }
        still
    }

    fn expect_deleted(&self, resource: &InferenceDeployment, namespace: &str, pod_name: &str) {
        let cached = self.pods.get(&ObjectRef::new(pod_name).within(namespace));
        let Some(uid) = cached.and_then(|pod| pod.metadata.uid.clone()) else { return };
        let mut deleted = self.context.deleted.lock().unwrap_or_else(|p| p.into_inner());
        deleted.entry(ObjectRef::from_obj(resource)).or_default().insert(uid);
    }

    fn expect_created(&self, resource: &InferenceDeployment, names: Vec<String>) {
        let mut created = self.context.created.lock().unwrap_or_else(|p| p.into_inner());
        created.insert(ObjectRef::from_obj(resource), (Instant::now(), names));
    }
}

impl<K, Cached> Kept<K, Cached>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + 'static,
    Cached: Resource<DynamicType = ()> + Clone + 'static,
{
    fn new(cache: Store<Cached>) -> Self {
        Self { cache, applied: AppliedBodies::default(), kind: std::marker::PhantomData }
    }

    /// The object's resourceVersion in the watch cache.
    fn cached_version(&self, (namespace, name): &ObjectKey) -> Option<String> {
        self.cache.get(&ObjectRef::new(name).within(namespace))?.meta().resource_version.clone()
    }

    /// Deletes the object `name` if the watch cache shows it owned by `resource`: what this
    /// resource no longer wants, never an object of someone else's that shares the name.
    async fn remove(
        &self,
        client: &kube::Client,
        resource: &InferenceDeployment,
        namespace: &str,
        name: &str,
    ) -> Result<(), Error> {
        let Some(cached) = self.cache.get(&ObjectRef::new(name).within(namespace)) else { return Ok(()) };
        let uid = resource.metadata.uid.as_deref();
        let owned = cached.meta().owner_references.iter().flatten().any(|o| Some(o.uid.as_str()) == uid);
        if !owned || cached.meta().deletion_timestamp.is_some() {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        }
    }

    /// Server-side applies `body` to the object `name`, unless this run applied the same body
    /// last and nobody wrote the object since (see [`AppliedBodies`]).
    async fn apply(
        &self,
        client: &kube::Client,
        apply: &PatchParams,
        namespace: &str,
        name: &str,
        body: serde_json::Value,
    ) -> Result<(), Error> {
        let key: ObjectKey = (namespace.to_string(), name.to_string());
        let hash = body_hash(&body);
        if self.applied.unchanged(&key, hash, self.cached_version(&key).as_deref()) {
            return Ok(());
        }
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let written = api.patch(name, apply, &Patch::Apply(body)).await.map_err(Error::Kube)?;
        let version = written.meta().resource_version.clone();
        self.applied.record(key, hash, version, |key| self.cached_version(key).is_some());
        Ok(())
    }
}

/// A router Deployment as the planner reads it: settled once the Deployment controller has seen
/// its current spec and every pod runs it, none of an earlier template left or terminating.
/// `pod_keys` are the keys the router's pods select, terminating ones included: API servers
/// before `terminatingReplicas` (and those with its feature gate off) leave it unset, and
/// `replicas` never counts a terminating pod, which still routes until it exits.
fn observe_router(deployment: &Deployment, pod_keys: &[&str]) -> ObservedRouter {
    let status = deployment.status.clone().unwrap_or_default();
    let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let seen = status.observed_generation.is_some_and(|seen| Some(seen) >= deployment.metadata.generation);
    let key = deployment.metadata.labels.as_ref().and_then(|l| l.get(LABEL_KV_COMPAT)).cloned().unwrap_or_default();
    ObservedRouter {
        ready_replicas: status.ready_replicas.unwrap_or(0),
        settled: seen
            && status.updated_replicas.unwrap_or(0) == wanted
            && status.replicas.unwrap_or(0) == wanted
            && status.terminating_replicas.unwrap_or(0) == 0
            && pod_keys.iter().all(|pod_key| *pod_key == key),
        key,
    }
}

/// The resource's server pods as the watch cache holds them.
fn observe_pods(
    cached: &Store<ServerPod>,
    namespace: &str,
    resource: &InferenceDeployment,
    deleted_by_controller: &HashSet<String>,
) -> Vec<ObservedPod> {
    let name = resource.name_any();
    cached
        .state()
        .iter()
        .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|pod| {
            let labels = pod.metadata.labels.as_ref()?;
            if labels.get(desired::LABEL_INSTANCE) != Some(&name) {
                return None;
            }
            let role = fleet_role(labels.get(desired::LABEL_NAME)?)?;
            Some(ObservedPod {
                name: pod.metadata.name.clone()?,
                role,
                replica: labels.get(LABEL_ORDINAL)?.parse().ok()?,
                rank: labels.get(LABEL_RANK).and_then(|r| r.parse().ok()).unwrap_or(0),
                revision: labels.get(LABEL_REVISION).cloned().unwrap_or_default(),
                key: labels.get(LABEL_KV_COMPAT).cloned().unwrap_or_default(),
                ready: pod.state.ready,
                containers_ready: pod.state.containers_ready,
                group_ready: pod.state.group_ready,
                terminating: pod.metadata.deletion_timestamp.is_some(),
                deleted_by_controller: pod.metadata.uid.as_ref().is_some_and(|uid| deleted_by_controller.contains(uid)),
                failed: pod.state.failed,
                termination: pod.state.termination.clone(),
            })
        })
        .collect()
}

/// The fleet whose pods and PodGroups carry `app.kubernetes.io/name: app`.
fn fleet_role(app: &str) -> Option<FleetRole> {
    match app {
        desired::PREFILL_APP => Some(FleetRole::Prefill),
        desired::DECODE_APP => Some(FleetRole::Decode),
        _ => None,
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;

    /// A router Deployment of `key` rolled out whole, as an API server without
    /// `terminatingReplicas` reports it.
    fn rolled_out(key: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                generation: Some(2),
                labels: Some([(LABEL_KV_COMPAT.to_string(), key.to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec { replicas: Some(2), ..DeploymentSpec::default() }),
            status: Some(DeploymentStatus {
                observed_generation: Some(2),
                replicas: Some(2),
                updated_replicas: Some(2),
                ready_replicas: Some(2),
                ..DeploymentStatus::default()
            }),
        }
    }

    #[test]
    fn a_router_pod_of_another_key_still_terminating_keeps_the_router_unsettled_without_terminating_replicas() {
        let deployment = rolled_out("new");
        assert!(!observe_router(&deployment, &["new", "new", "old"]).settled, "an old-key pod still routes");
        assert!(observe_router(&deployment, &["new", "new"]).settled);
        assert!(observe_router(&deployment, &[]).settled, "pods not yet seen hold nothing back");
        let mut newer = deployment.clone();
        newer.status.as_mut().unwrap().terminating_replicas = Some(1);
        assert!(!observe_router(&newer, &["new", "new"]).settled, "a server that counts them is believed");
    }

    #[test]
    fn router_pods_trigger_their_resource_by_label_and_server_pods_by_owner() {
        let router: ServerPod = serde_json::from_value(json!({"metadata": {"name": "r", "namespace": "ns",
            "labels": {desired::LABEL_NAME: desired::ROUTER_APP, desired::LABEL_INSTANCE: "llama", LABEL_KV_COMPAT: "k1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama-router-1", "uid": "u", "controller": true}]}}))
        .unwrap();
        assert_eq!(router_pod_of(&router), Some(("k1", "llama")));
        let server: ServerPod = serde_json::from_value(json!({"metadata": {"name": "s", "namespace": "ns",
            "labels": {desired::LABEL_NAME: desired::DECODE_APP, desired::LABEL_INSTANCE: "llama"},
            "ownerReferences": [{"apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment", "name": "llama", "uid": "u", "controller": true}]}}))
        .unwrap();
        assert_eq!(router_pod_of(&server), None);
        let triggers = futures::executor::block_on(
            pod_triggers(futures::stream::iter([Ok(router), Ok(server)])).collect::<Vec<_>>(),
        );
        let expected = ObjectRef::<InferenceDeployment>::new("llama").within("ns");
        assert_eq!(triggers, [expected.clone(), expected]);
    }
}
