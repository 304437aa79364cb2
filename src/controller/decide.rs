//! The whole outcome of one reconcile, decided in pure code from what was observed: the objects
//! to apply, the status, the pods to delete and create, the events that stand, and when to look
//! again. [`super::act`] carries a [`Decision`] out; nothing here does I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::coherent::{self, Budget, FleetInput, RouterInput};
pub use super::desired::GROUP_READY;
use super::desired::{Fleet, FleetRole, POD_MONITORS_UNSERVED, PodGroup, RenderOptions, desired_state};
use super::recovery;
use super::rollout::{self, ObservedReplica, resolve_int_or_percent};
use super::status::{self, Conditions, FleetProgress, Workloads};
use crate::api::{
    CONDITION_DEGRADED, ConfigSourceRef, FleetStatus, GangScheduler, InferenceDeployment, InferenceDeploymentStatus,
    RecoveryStatus, Rewrite, RolloutPhase, RouterStatus, SchedulerApi,
};
use crate::policy::{self, Assessment, ModelConfigs, Outcome};
use crate::source::SourceError;

/// How long a resource whose spec cannot work waits before it is looked at again (edits
/// trigger a reconcile at once anyway).
pub const USER_ERROR_REQUEUE: Duration = Duration::from_secs(300);
/// Periodic resync of a healthy resource.
pub const RESYNC: Duration = Duration::from_secs(600);
/// Re-check while a rollout waits for pods.
pub const ROLLOUT_REQUEUE: Duration = Duration::from_secs(15);
/// Re-check while pods this controller created have not reached its watch cache yet.
pub const SETTLE_REQUEUE: Duration = Duration::from_secs(1);
/// Re-check while the gang scheduler a resource asks for, or the PodMonitor API of
/// `--pod-monitors`, is not installed: installing it changes nothing the controller watches.
pub const GANG_SCHEDULER_REQUEUE: Duration = Duration::from_secs(30);

/// One server pod as the controller's watch cache holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub name: String,
    /// The fleet it belongs to (`app.kubernetes.io/name`).
    pub role: FleetRole,
    /// The replica it belongs to (`kvpilot.dev/ordinal`).
    pub replica: u32,
    /// Its rank in the replica (`kvpilot.dev/rank`; 0 when absent).
    pub rank: i32,
    pub revision: String,
    /// Its KV compatibility key (`kvpilot.dev/kv-compat`; empty on pods from before keys).
    pub key: String,
    /// Its `Ready` condition: its containers are ready and, through the readiness gate
    /// [`GROUP_READY`], so is every other rank of its replica. What availability counts.
    pub ready: bool,
    /// Its containers are ready (`ContainersReady`: its probes pass), which the gate follows.
    pub containers_ready: bool,
    /// The status of its [`GROUP_READY`] condition; None before the controller set one.
    pub group_ready: Option<bool>,
    /// Being deleted.
    pub terminating: bool,
    /// This controller deleted it (a rollout, a scale-down, or a broken replica already counted
    /// as one failure): its replica going is no failure, however the watch shows its ranks go.
    pub deleted_by_controller: bool,
    /// Its phase is Failed: evicted, or a rank of a group whose server exited.
    pub failed: bool,
    /// Why it ended or its SGLang container last did (`Evicted: …`, `OOMKilled (exit code
    /// 137)`), when it did.
    pub termination: Option<String>,
}

/// A pod whose [`GROUP_READY`] condition is to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReadiness {
    pub pod: String,
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A PodGroup of the resource as the controller's watch cache holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPodGroup {
    /// Whose PodGroup it is (Volcano's or scheduler-plugins').
    pub scheduler: GangScheduler,
    pub name: String,
    /// The fleet of its replica (`app.kubernetes.io/name`).
    pub role: FleetRole,
    /// Its replica (`kvpilot.dev/ordinal`).
    pub replica: u32,
}

/// The router's Deployment as the controller's watch cache holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedRouter {
    /// Router pods that are ready.
    pub ready_replicas: i32,
    /// The KV compatibility key its pods select (`kvpilot.dev/kv-compat`; empty on a router from
    /// before keys, which selects every key).
    pub key: String,
    /// Its rollout is complete: every router pod runs the current template, none of an earlier
    /// one is left, terminating ones included.
    pub settled: bool,
}

/// What one reconcile observed.
pub struct Observed<'a> {
    pub resource: &'a InferenceDeployment,
    /// The resource's server pods, of both fleets.
    pub pods: Vec<ObservedPod>,
    /// The resource's PodGroups, of both fleets and both schedulers that take them.
    pub pod_groups: Vec<ObservedPodGroup>,
    /// The router Deployment, when it exists.
    pub router: Option<ObservedRouter>,
    /// The API the resource's gang scheduler needs and the cluster does not serve.
    pub missing_scheduler_api: Option<SchedulerApi>,
    /// The operator makes PodMonitors (`--pod-monitors`) and the cluster does not serve their
    /// API: the fleets run without them, and status says why.
    pub pod_monitors_unserved: bool,
    /// Pods created by an earlier pass have not all reached the watch cache yet: what is
    /// missing may be on its way, so no pod is created or deleted in this pass.
    pub settling: bool,
    pub options: &'a RenderOptions,
    pub now: Timestamp,
}

/// An event about something that stands on a resource: a problem, or a rewrite in effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
    pub action: String,
    /// Already recorded in the status the reconcile started from (covers an operator restart).
    pub recorded: bool,
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

    /// What identifies the announcement across reconciles.
    pub fn key(&self) -> String {
        format!("{}\u{0}{}\u{0}{}", self.reason, self.action, self.note)
    }
}

/// When to reconcile again, or the transient failure to back off from.
#[derive(Debug)]
pub enum Next {
    Requeue(Duration),
    /// Reading the model config failed; the error policy backs off.
    Retry(SourceError),
}

/// Everything one reconcile does, in the order [`super::act`] does it.
#[derive(Debug)]
pub struct Decision {
    /// The rendered objects, when the settings stand: the ConfigMap, Services and router objects
    /// to apply first.
    pub desired: Option<super::desired::Desired>,
    /// The new status, when it differs from the one observed.
    pub status: Option<InferenceDeploymentStatus>,
    /// Pods to delete, by name.
    pub delete: Vec<String>,
    /// Pods to create.
    pub create: Vec<Pod>,
    /// Pods whose readiness gate [`GROUP_READY`] changes, set before anything is deleted so a
    /// replica losing a rank stops serving at once.
    pub group_readiness: Vec<GroupReadiness>,
    /// PodGroups to apply before the pods are created: those of the current revision's replicas.
    pub pod_groups: Vec<PodGroup>,
    /// PodGroups to delete: their replica is gone, or now runs under another scheduler.
    pub stale_pod_groups: Vec<ObservedPodGroup>,
    /// Events that stand on the resource now.
    pub announcements: Vec<Announcement>,
    pub next: Next,
}

impl Decision {
    fn unresolved(observed: &Observed<'_>, reason: &str, message: &str, next: Next) -> Self {
        let previous = observed.resource.status.as_ref();
        let decided = status::unresolved(reason, message);
        Self {
            desired: None,
            status: new_status(observed, &decided, None, None),
            announcements: vec![Announcement::warning(previous, reason, message)],
            ..Self::keeping_pods(observed, next)
        }
    }

    /// Nothing to apply, create or delete, no status and no event (the pods there stay, and
    /// their group readiness still follows their ranks); look again as `next` says.
    fn keeping_pods(observed: &Observed<'_>, next: Next) -> Self {
        Self {
            desired: None,
            status: None,
            delete: Vec::new(),
            create: Vec::new(),
            group_readiness: group_readiness(observed),
            pod_groups: Vec::new(),
            stale_pod_groups: Vec::new(),
            announcements: Vec::new(),
            next,
        }
    }
}

fn new_status(
    observed: &Observed<'_>,
    decided: &Conditions,
    assessment: Option<&Assessment>,
    workloads: Option<Workloads>,
) -> Option<InferenceDeploymentStatus> {
    let resource = observed.resource;
    let previous = resource.status.as_ref();
    let mut warnings = assessment.map(|a| status::warnings(&resource.spec, a)).unwrap_or_default();
    if observed.pod_monitors_unserved && workloads.is_some() {
        warnings.push(POD_MONITORS_UNSERVED.into());
    }
    let mut new =
        status::status(previous, decided, resource.metadata.generation, assessment, workloads, warnings, observed.now);
    new.pod_security_level = assessment.map(|_| resource.spec.pod_security_level());
    (previous != Some(&new)).then_some(new)
}

/// Decides the reconcile of a resource that is not being deleted, given its model's (and
/// speculative draft's) config.json or why one could not be read.
pub fn decide(observed: &Observed<'_>, configs: Result<ModelConfigs, SourceError>) -> Decision {
    let resource = observed.resource;
    let previous = resource.status.as_ref();
    let configs = match configs {
        Ok(configs) => configs,
        Err(e) => return Decision::unresolved(observed, e.reason(), &e.to_string(), Next::Retry(e)),
    };
    let release = match policy::resource_release(&resource.spec, &observed.options.default_release) {
        Ok(release) => release,
        Err(e) => {
            let message = format!("spec.sglang.version: {e}");
            return Decision::unresolved(observed, "UnknownSglangVersion", &message, Next::Requeue(USER_ERROR_REQUEUE));
        }
    };
    let assessment = match crate::sglang::verdict::assess(&resource.spec, &configs, &release) {
        Ok(assessment) => assessment,
        Err(e) => {
            let message = format!("the model config.json is not a model config: {e}");
            return Decision::unresolved(observed, "InvalidModelConfig", &message, Next::Requeue(USER_ERROR_REQUEUE));
        }
    };
    let source = source_description(resource);
    if assessment.verdict.outcome == Outcome::Rejected {
        // Nothing is created or changed; pods that run keep running.
        let fleets = [FleetProgress {
            role: FleetRole::Decode,
            desired: resource.spec.decode.replicas,
            counts: Default::default(),
        }];
        let decided = status::resolved(&assessment, &source, &fleets, None, None);
        let settings = &decided.settings_valid;
        let warning = Announcement::warning(previous, &settings.reason, &settings.message);
        return Decision {
            status: new_status(observed, &decided, Some(&assessment), None),
            announcements: vec![warning],
            ..Decision::keeping_pods(observed, Next::Requeue(USER_ERROR_REQUEUE))
        };
    }
    if let Some(api) = observed.missing_scheduler_api {
        // Valid settings that no scheduler would place: nothing is created or changed either.
        let gang = resource.spec.scheduling.as_ref().map(|s| s.gang).unwrap_or_default();
        let refusal = api.refusal(gang);
        let decided = status::gang_scheduler_missing(&assessment, &source, &refusal);
        return Decision {
            status: new_status(observed, &decided, Some(&assessment), None),
            announcements: vec![Announcement::warning(previous, status::GANG_SCHEDULER_MISSING, &refusal)],
            ..Decision::keeping_pods(observed, Next::Requeue(GANG_SCHEDULER_REQUEUE))
        };
    }

    let mut desired = desired_state(resource, &assessment, observed.options);
    if observed.pod_monitors_unserved {
        // Nothing would take them; the servers run all the same.
        desired.decode.pod_monitor = None;
        if let Some(prefill) = desired.prefill.as_mut() {
            prefill.pod_monitor = None;
        }
    }
    let mut rollout_problems = Vec::new();
    let mut budget = |field: String, spec: (&IntOrString, &IntOrString), replicas: i32| match (
        resolve_int_or_percent(spec.0, replicas, false),
        resolve_int_or_percent(spec.1, replicas, true),
    ) {
        (Ok(max_unavailable), Ok(max_surge)) => Budget { max_unavailable, max_surge },
        (Err(e), _) | (_, Err(e)) => {
            let problem = format!("{field}: {e}");
            if !rollout_problems.contains(&problem) {
                rollout_problems.push(problem);
            }
            Budget { max_unavailable: 1, max_surge: 0 }
        }
    };
    let service_rollout = &resource.spec.rollout;
    let mut fleets = Vec::new();
    for fleet in desired.fleets() {
        let Some(fleet_spec) = fleet.role.fleet(&resource.spec) else { continue };
        let pods: Vec<ObservedPod> = observed.pods.iter().filter(|p| p.role == fleet.role).cloned().collect();
        let groups = group_replicas(&pods, fleet);
        let own = &fleet_spec.rollout;
        let in_place =
            budget(format!("{}.rollout", fleet.role.field()), (&own.max_unavailable, &own.max_surge), fleet.replicas);
        let coherent = budget(
            "spec.rollout".into(),
            (&service_rollout.max_unavailable, &service_rollout.max_surge),
            fleet.replicas,
        );
        fleets.push((fleet, pods, groups, in_place, coherent));
    }
    let inputs: Vec<FleetInput<'_>> = fleets
        .iter()
        .map(|(fleet, _, groups, in_place, coherent)| FleetInput {
            role: fleet.role,
            replicas: fleet.replicas,
            revision: &fleet.revision,
            observed: &groups.replicas,
            in_place: *in_place,
            coherent: *coherent,
        })
        .collect();
    let startup_timeout = fleets
        .iter()
        .filter_map(|(fleet, ..)| fleet.role.fleet(&resource.spec))
        .map(|spec| u64::try_from(spec.startup_timeout_seconds).unwrap_or_default())
        .max()
        .unwrap_or_default();
    let step = coherent::plan(&coherent::Input {
        key: &desired.kv_compat,
        fleets: &inputs,
        router: desired.router.as_ref().map(|_| RouterInput {
            key: observed.router.as_ref().map(|r| r.key.as_str()),
            settled: observed.router.as_ref().is_some_and(|r| r.settled),
        }),
        previous: previous.and_then(|p| p.rollout.as_ref()),
        now: observed.now,
        abort_after: Duration::from_secs(2 * startup_timeout),
    });
    let mut delete = Vec::new();
    let mut create = Vec::new();
    let mut pod_groups = Vec::new();
    let mut stale_pod_groups = Vec::new();
    let mut progress = Vec::new();
    let mut statuses = Vec::new();
    let mut failures = Vec::new();
    let mut degraded = Vec::new();
    let mut wait: Option<Duration> = None;
    for ((fleet, pods, groups, ..), plan) in fleets.iter().zip(step.plans) {
        let fleet_plan = plan_fleet(observed, fleet, pods, groups, plan, step.route.as_deref());
        delete.extend(fleet_plan.delete);
        create.extend(fleet_plan.create);
        failures.extend(fleet_plan.failures.iter().map(|failure| format!("{}: {failure}", fleet.role.field())));
        if let Some(recovery) = fleet_plan.recovery.as_ref().filter(|r| recovery::keeps_failing(r)) {
            let next = match fleet_plan.wait {
                Some(left) => format!("its replacements wait {}s", left.as_secs().max(1)),
                None => "its replacements are being made again".to_string(),
            };
            degraded.push(format!(
                "{} failed {} times in {} min (last: {}); {next}",
                fleet.role.field(),
                recovery.failures.len(),
                recovery::WINDOW.as_secs() / 60,
                recovery.last_reason,
            ));
        }
        if let Some(left) = fleet_plan.wait {
            wait = Some(wait.map_or(left, |w| w.min(left)));
        }
        pod_groups.extend(fleet_plan.pod_groups);
        stale_pod_groups.extend(fleet_plan.stale_pod_groups);
        progress.push(FleetProgress { role: fleet.role, desired: fleet.replicas, counts: fleet_plan.counts });
        statuses.push(fleet_plan.status);
    }
    if let (Some(router), Some(route)) = (desired.router.as_mut(), &step.route) {
        router.select(route);
    }
    // Pods of a fleet no longer wanted (spec.prefill removed) go.
    delete.extend(
        observed.pods.iter().filter(|p| !p.terminating && desired.fleet(p.role).is_none()).map(|p| p.name.clone()),
    );
    stale_pod_groups.extend(observed.pod_groups.iter().filter(|g| desired.fleet(g.role).is_none()).cloned());
    let rollout_problem = (!rollout_problems.is_empty()).then(|| rollout_problems.join("; "));
    let router = desired.router.as_ref().map(|router| {
        let desired_pods = router.deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        RouterStatus {
            replicas: desired_pods,
            ready_replicas: observed.router.as_ref().map_or(0, |r| r.ready_replicas),
        }
    });
    let mut decided = status::resolved(&assessment, &source, &progress, router.as_ref(), rollout_problem.as_deref());
    let rollout_phase = step.rollout.as_ref().map(|r| r.phase);
    if let Some(rollout) = &step.rollout
        && let Some(progressing) = coherent::progressing(rollout, Duration::from_secs(2 * startup_timeout))
        && (rollout.phase == RolloutPhase::Aborted || rollout_problem.is_none())
    {
        decided.progressing = progressing;
    }
    decided.degraded = match degraded.is_empty() {
        true => {
            let message = format!(
                "no fleet failed more than {} times in {} min",
                recovery::THRESHOLD,
                recovery::WINDOW.as_secs() / 60
            );
            status::Decided::new(CONDITION_DEGRADED, Some(false), "Healthy", message)
        }
        false => status::Decided::new(CONDITION_DEGRADED, Some(true), "ReplicasKeepFailing", degraded.join("; ")),
    };
    let mut statuses = statuses.into_iter();
    let workloads = Workloads {
        decode: statuses.next(),
        prefill: statuses.next(),
        endpoint: desired.router.as_ref().map(|r| r.endpoint.clone()),
        router,
        kv_compat: Some(desired.kv_compat.clone()),
        rollout: step.rollout,
    };

    let mut announcements = Announcement::rewrites(previous, &assessment);
    announcements.extend(failures.into_iter().map(|failure| Announcement {
        type_: EventType::Warning,
        reason: "ReplicaFailed".into(),
        note: format!("{failure}; the replica is made again whole"),
        action: "Recreate".into(),
        recorded: false,
    }));
    if let Some(warning) = assessment.release.warning() {
        // Once per requested release: status.sglang records it.
        let recorded = previous.and_then(|s| s.sglang.as_ref()) == Some(&status::sglang_status(&assessment.release));
        announcements.push(Announcement {
            type_: EventType::Warning,
            reason: "SglangVersionApproximated".into(),
            note: warning,
            action: "Reconcile".into(),
            recorded,
        });
    }
    if rollout_phase == Some(RolloutPhase::Aborted) {
        let progressing = &decided.progressing;
        announcements.push(Announcement::warning(previous, &progressing.reason, &progressing.message));
    }
    if observed.pod_monitors_unserved {
        announcements.push(Announcement {
            type_: EventType::Warning,
            reason: "PodMonitorsUnavailable".into(),
            note: POD_MONITORS_UNSERVED.into(),
            action: "Reconcile".into(),
            recorded: previous.is_some_and(|s| s.warnings.iter().any(|w| w == POD_MONITORS_UNSERVED)),
        });
    }
    if let Some(problem) = &rollout_problem {
        let recorded = previous.is_some_and(|s| {
            s.conditions.iter().any(|c| c.reason == "InvalidRollout" && c.message.starts_with(problem.as_str()))
        });
        announcements.push(Announcement {
            type_: EventType::Warning,
            reason: "InvalidRollout".into(),
            note: problem.clone(),
            action: "Reconcile".into(),
            recorded,
        });
    }
    let rolling = rollout_phase.is_some_and(|p| !matches!(p, RolloutPhase::Complete | RolloutPhase::Aborted));
    let next = if observed.settling {
        SETTLE_REQUEUE
    } else if let Some(wait) = wait {
        // Look again when the backoff ends, not before; a rollout between keys is still looked
        // at as often as any rollout.
        let wait = if rolling { wait.min(ROLLOUT_REQUEUE) } else { wait };
        wait.max(SETTLE_REQUEUE)
    } else if create.is_empty() && delete.is_empty() && decided.ready.status == "True" && !rolling {
        // Installing the Prometheus Operator's CRD changes nothing the controller watches.
        if observed.pod_monitors_unserved { GANG_SCHEDULER_REQUEUE } else { RESYNC }
    } else {
        ROLLOUT_REQUEUE
    };
    Decision {
        status: new_status(observed, &decided, Some(&assessment), Some(workloads)),
        desired: Some(desired),
        delete,
        create,
        group_readiness: group_readiness(observed),
        pod_groups,
        stale_pod_groups,
        announcements,
        next: Next::Requeue(next),
    }
}

/// What one fleet's pass does: pods to delete and create, PodGroups to apply and delete, and
/// its counts and status.
struct FleetPlan {
    delete: Vec<String>,
    create: Vec<Pod>,
    /// What broke each replica torn down in this pass.
    failures: Vec<String>,
    recovery: Option<RecoveryStatus>,
    /// How long replacements still wait.
    wait: Option<Duration>,
    pod_groups: Vec<PodGroup>,
    stale_pod_groups: Vec<ObservedPodGroup>,
    counts: status::PodCounts,
    status: FleetStatus,
}

/// Carries one fleet's step out on its pods: broken replicas go and are counted as failures, the
/// planned replicas are deleted and created whole (creations wait while the fleet's recovery
/// backs off), and while created pods are settling nothing is created or deleted. The status
/// counts what stays; `route` is the key the router selects, whose ready replicas serve.
fn plan_fleet(
    observed: &Observed<'_>,
    fleet: &Fleet,
    pods: &[ObservedPod],
    groups: &Groups,
    plan: rollout::Plan,
    route: Option<&str>,
) -> FleetPlan {
    let settling = observed.settling;
    // While created pods are settling, nothing is created or deleted.
    let mut plan = if settling { rollout::Plan::default() } else { plan };
    // Broken replicas are torn down in this pass, unless settling: then they are failures.
    let failures = if settling { Vec::new() } else { groups.failures.clone() };
    let status = observed.resource.status.as_ref();
    let previous = status.and_then(|s| fleet_status(s, fleet.role)).and_then(|f| f.recovery.as_ref());
    let recovery = recovery::update(previous, &failures, observed.now);
    let wait = recovery::waiting(recovery.as_ref(), observed.now);
    if wait.is_some() {
        plan.create.clear();
    }
    // The status counts only replicas that exist and stay: it never claims one being deleted or
    // not yet created (their watch events bring the next count), so readers never see more
    // than is true.
    let counts = count_staying(&groups.replicas, &plan, &fleet.revision, route);
    let status = FleetStatus {
        desired_replicas: fleet.replicas,
        replicas: counts.total,
        ready_replicas: counts.ready_updated,
        updated_replicas: counts.updated,
        selector: fleet.selector.clone(),
        endpoints: endpoints(pods, &groups.replicas, &plan, fleet, route),
        recovery: recovery.clone(),
    };
    let mut delete = if settling { Vec::new() } else { groups.broken.clone() };
    for replica in &plan.delete {
        delete.extend(
            pods.iter().filter(|p| !p.terminating && p.replica.to_string() == *replica).map(|p| p.name.clone()),
        );
    }
    let create = plan.create.iter().flat_map(|replica| fleet.replica(*replica)).collect();
    let (pod_groups, stale_pod_groups) = plan_pod_groups(observed, fleet, &groups.replicas, &plan);
    FleetPlan { delete, create, failures, recovery, wait, pod_groups, stale_pod_groups, counts, status }
}

/// A fleet's status.
fn fleet_status(status: &InferenceDeploymentStatus, role: FleetRole) -> Option<&FleetStatus> {
    match role {
        FleetRole::Decode => status.decode.as_ref(),
        FleetRole::Prefill => status.prefill.as_ref(),
    }
}

/// The PodGroups of one fleet: each replica of the current revision that stays or is created
/// has its own, applied before its pods; a replica of an older revision keeps the one it was
/// created with until it goes; every other PodGroup goes (its replica is gone or going, or now
/// runs under another scheduler). While created pods are settling nothing is deleted: a
/// replica just created may not be in the pod cache yet.
fn plan_pod_groups(
    observed: &Observed<'_>,
    fleet: &Fleet,
    replicas: &[ObservedReplica],
    plan: &rollout::Plan,
) -> (Vec<PodGroup>, Vec<ObservedPodGroup>) {
    let staying = || replicas.iter().filter(|r| !r.terminating && !plan.delete.contains(&r.name));
    let mut current: BTreeSet<u32> = staying().filter(|r| r.revision == fleet.revision).map(|r| r.ordinal).collect();
    current.extend(&plan.create);
    let older: BTreeSet<u32> = staying().filter(|r| r.revision != fleet.revision).map(|r| r.ordinal).collect();
    let apply = current.iter().filter_map(|replica| fleet.pod_group(*replica)).collect();
    if observed.settling {
        return (apply, Vec::new());
    }
    let scheduler = fleet.gang_scheduler();
    let stale = observed
        .pod_groups
        .iter()
        .filter(|group| group.role == fleet.role)
        .filter(|group| {
            let kept =
                older.contains(&group.replica) || (current.contains(&group.replica) && group.scheduler == scheduler);
            !kept
        })
        .cloned()
        .collect();
    (apply, stale)
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

/// The replicas the rollout planner sees, the pods of broken replicas to delete, and what broke
/// each of them.
struct Groups {
    replicas: Vec<ObservedReplica>,
    broken: Vec<String>,
    failures: Vec<String>,
}

/// What broke a replica: its first rank that failed, was deleted or is missing.
fn failure_of(replica: u32, members: &[&ObservedPod], nodes: usize) -> Option<String> {
    let described = |rank: i32, what: String| format!("replica {replica}: rank {rank} {what}");
    if let Some(pod) = members.iter().find(|p| p.failed) {
        let why = pod.termination.as_deref().unwrap_or("no reason given");
        return Some(described(pod.rank, format!("({}) failed: {why}", pod.name)));
    }
    if let Some(pod) = members.iter().find(|p| p.terminating) {
        return Some(described(pod.rank, format!("({}) was deleted", pod.name)));
    }
    (0..nodes as i32)
        .find(|rank| !members.iter().any(|p| p.rank == *rank))
        .map(|rank| described(rank, "is missing".into()))
}

/// The readiness gates to change, whatever the verdict on the settings (pods that run keep
/// being watched over): a replica of a fleet is group-ready while each of its ranks is there,
/// alive and ready, and every rank is of one revision.
fn group_readiness(observed: &Observed<'_>) -> Vec<GroupReadiness> {
    let mut by_replica: BTreeMap<(FleetRole, u32), Vec<&ObservedPod>> = BTreeMap::new();
    for pod in &observed.pods {
        by_replica.entry((pod.role, pod.replica)).or_default().push(pod);
    }
    let mut changes = Vec::new();
    for ((role, _), members) in by_replica {
        let nodes = role.fleet(&observed.resource.spec).map_or(1, |f| f.nodes_per_replica.max(1)) as usize;
        let live: Vec<&&ObservedPod> = members.iter().filter(|p| !p.terminating).collect();
        let mixed = live.iter().any(|p| p.revision != live[0].revision);
        let why_not = not_group_ready(&members, nodes, mixed);
        let ready = why_not.is_none();
        let (reason, message) =
            why_not.unwrap_or(("GroupReady", format!("all {nodes} ranks of the replica are ready")));
        for pod in members.iter().filter(|p| !p.terminating && p.group_ready != Some(ready)) {
            changes.push(GroupReadiness { pod: pod.name.clone(), ready, reason, message: message.clone() });
        }
    }
    changes
}

/// Why a replica's pods are not group-ready: its first rank that is not, or that is missing.
fn not_group_ready(members: &[&ObservedPod], nodes: usize, mixed: bool) -> Option<(&'static str, String)> {
    for rank in 0..nodes as i32 {
        let at_rank = |live: bool| members.iter().find(|p| p.rank == rank && (!live || !p.terminating));
        match at_rank(true).or_else(|| at_rank(false)) {
            None => return Some(("RankMissing", format!("rank {rank} of the replica is missing"))),
            Some(pod) if pod.failed => return Some(("RankFailed", format!("rank {rank} ({}) failed", pod.name))),
            Some(pod) if pod.terminating => {
                return Some(("RankTerminating", format!("rank {rank} ({}) is being deleted", pod.name)));
            }
            Some(pod) if !pod.containers_ready => {
                return Some(("RankNotReady", format!("rank {rank} ({}) is not ready", pod.name)));
            }
            Some(_) => {}
        }
    }
    if members.iter().filter(|p| !p.terminating).count() > nodes {
        return Some(("ReplicaReplaced", "the replica has ranks of two generations".to_string()));
    }
    mixed.then(|| ("ReplicaReplaced", "the replica's ranks are of different revisions".to_string()))
}

/// Groups pods into replicas. A replica is ready when all its ranks are there and ready. It is
/// broken when a rank failed, or some ranks are being deleted while others still run, or a
/// replica of the current revision misses ranks: SGLang cannot take a rank back into a running
/// server, so every pod of a broken replica is deleted and the replica comes back whole. A
/// broken replica keeps its ordinal (as terminating) until its pods are gone.
fn group_replicas(pods: &[ObservedPod], desired: &Fleet) -> Groups {
    let mut by_replica: BTreeMap<u32, Vec<&ObservedPod>> = BTreeMap::new();
    for pod in pods {
        by_replica.entry(pod.replica).or_default().push(pod);
    }
    let nodes = desired.nodes_per_replica.max(1) as usize;
    let mut groups = Groups { replicas: Vec::new(), broken: Vec::new(), failures: Vec::new() };
    for (replica, members) in by_replica {
        let live: Vec<&&ObservedPod> = members.iter().filter(|p| !p.terminating).collect();
        let revision = live.first().map_or_else(String::new, |p| p.revision.clone());
        let key = live.first().map_or_else(String::new, |p| p.key.clone());
        let mixed = live.iter().any(|p| p.revision != revision);
        let incomplete = revision == desired.revision && live.len() < nodes;
        let broken =
            !live.is_empty() && (members.iter().any(|p| p.failed) || live.len() < members.len() || mixed || incomplete);
        if broken {
            groups.broken.extend(live.iter().map(|p| p.name.clone()));
            // A replica this controller is taking down, ranks seen going one by one, is the
            // controller's doing (and a failure already counted, if one broke it).
            if !members.iter().any(|p| p.deleted_by_controller) {
                groups.failures.extend(failure_of(replica, &members, nodes));
            }
        }
        groups.replicas.push(ObservedReplica {
            name: replica.to_string(),
            ordinal: replica,
            revision,
            key,
            ready: !broken && !live.is_empty() && live.iter().all(|p| p.ready),
            terminating: broken || live.is_empty(),
        });
    }
    groups
}

/// Replica counts of the replicas that exist, are not terminating and stay after the plan;
/// `route` is the key the router selects.
fn count_staying(
    replicas: &[ObservedReplica],
    plan: &rollout::Plan,
    revision: &str,
    route: Option<&str>,
) -> status::PodCounts {
    let staying: Vec<&ObservedReplica> =
        replicas.iter().filter(|r| !r.terminating && !plan.delete.contains(&r.name)).collect();
    let updated = || staying.iter().filter(|r| r.revision == revision);
    status::PodCounts {
        total: staying.len() as i32,
        updated: updated().count() as i32,
        ready_updated: updated().filter(|r| r.ready).count() as i32,
        serving: staying.iter().filter(|r| r.ready && route.is_none_or(|key| r.key == key)).count() as i32,
    }
}

/// The rank-0 URLs of the ready replicas that stay, of the key the router selects (`route`), if
/// there is a router: the servers it sends requests to.
fn endpoints(
    pods: &[ObservedPod],
    replicas: &[ObservedReplica],
    plan: &rollout::Plan,
    desired: &Fleet,
    route: Option<&str>,
) -> Vec<String> {
    let mut urls: Vec<String> = replicas
        .iter()
        .filter(|r| r.ready && !r.terminating && !plan.delete.contains(&r.name))
        .filter(|r| route.is_none_or(|key| r.key == key))
        .filter_map(|r| {
            let leader = pods.iter().find(|p| p.replica == r.ordinal && p.rank == 0 && !p.terminating)?;
            Some(desired.endpoint_of(&leader.name))
        })
        .collect();
    urls.sort();
    urls
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::InferenceDeploymentSpec;
    use crate::controller::desired::LABEL_KV_COMPAT;

    fn resource(decode: serde_json::Value) -> InferenceDeployment {
        let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
            "model": {"name": "m", "config": {"inline": {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4}}},
            "decode": decode
        }))
        .unwrap();
        let mut resource = InferenceDeployment::new("m", spec);
        resource.metadata.namespace = Some("ns".into());
        resource
    }

    fn observe(
        resource: &InferenceDeployment,
        options: &RenderOptions,
        pods: Vec<ObservedPod>,
        settling: bool,
    ) -> Decision {
        observe_scheduled(resource, options, pods, Vec::new(), None, settling)
    }

    /// [`observe`] with the PodGroups in the cache and the gang scheduler API discovery missed.
    fn observe_scheduled(
        resource: &InferenceDeployment,
        options: &RenderOptions,
        pods: Vec<ObservedPod>,
        pod_groups: Vec<ObservedPodGroup>,
        missing_scheduler_api: Option<SchedulerApi>,
        settling: bool,
    ) -> Decision {
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        let observed = Observed {
            resource,
            pods,
            pod_groups,
            router: None,
            missing_scheduler_api,
            pod_monitors_unserved: false,
            settling,
            options,
            now: Timestamp::UNIX_EPOCH,
        };
        decide(&observed, Ok(ModelConfigs::target(config)))
    }

    fn revision(resource: &InferenceDeployment, options: &RenderOptions) -> String {
        observe(resource, options, Vec::new(), false).desired.unwrap().decode.revision
    }

    fn pod(name: &str, replica: u32, rank: i32, revision: &str, ready: bool) -> ObservedPod {
        ObservedPod {
            name: name.into(),
            role: FleetRole::Decode,
            replica,
            rank,
            revision: revision.into(),
            key: String::new(),
            ready,
            containers_ready: ready,
            group_ready: None,
            terminating: false,
            failed: false,
            deleted_by_controller: false,
            termination: None,
        }
    }

    #[test]
    fn status_counts_only_replicas_that_exist_and_stay() {
        let pod = |name: &str, revision: &str, key: &str, ready: bool, terminating: bool| ObservedReplica {
            name: name.into(),
            ordinal: name.len() as u32,
            revision: revision.into(),
            key: key.into(),
            ready,
            terminating,
        };
        let observed = [
            pod("a", "new", "k1", true, false),
            pod("bb", "new", "k1", true, true),
            pod("ccc", "old", "k1", true, false),
            pod("dddd", "new", "k2", false, false),
            pod("eeeee", "new", "k1", true, false),
        ];
        let plan = rollout::Plan { create: vec![7, 8], delete: vec!["eeeee".into()] };
        let counts = count_staying(&observed, &plan, "new", None);
        assert_eq!(counts, status::PodCounts { total: 3, updated: 2, ready_updated: 1, serving: 2 });
        let routed = count_staying(&observed, &plan, "new", Some("k1"));
        assert_eq!(routed.serving, 2, "the router's key's ready replicas serve, whatever their revision");
        assert_eq!(count_staying(&observed, &plan, "new", Some("k2")).serving, 0);
    }

    #[test]
    fn a_group_is_created_whole_and_counted_once_when_every_rank_is_ready() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        let created = observe(&resource, &options, Vec::new(), false);
        let names: Vec<_> = created.create.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["m-decode-0-0", "m-decode-0-1"]);

        let rev = revision(&resource, &options);
        let half_ready = vec![pod("m-decode-0-0", 0, 0, &rev, true), pod("m-decode-0-1", 0, 1, &rev, false)];
        let decision = observe(&resource, &options, half_ready, false);
        let decode = decision.status.unwrap().decode.unwrap();
        assert_eq!((decode.replicas, decode.ready_replicas, decode.endpoints.len()), (1, 0, 0));
        assert!(decision.create.is_empty() && decision.delete.is_empty());

        let gates: Vec<_> = decision.group_readiness.iter().map(|g| (g.pod.as_str(), g.ready, g.reason)).collect();
        assert_eq!(
            gates,
            [("m-decode-0-0", false, "RankNotReady"), ("m-decode-0-1", false, "RankNotReady")],
            "a group with a rank that is not ready is not ready on any rank"
        );

        let ready = vec![pod("m-decode-0-0", 0, 0, &rev, true), pod("m-decode-0-1", 0, 1, &rev, true)];
        let decision = observe(&resource, &options, ready.clone(), false);
        let decode = decision.status.unwrap().decode.unwrap();
        assert_eq!((decode.replicas, decode.ready_replicas), (1, 1));
        assert_eq!(decode.endpoints, ["http://m-decode-0-0.m-decode.ns.svc:30000"]);
        assert!(decision.group_readiness.iter().all(|g| g.ready) && decision.group_readiness.len() == 2);
        let gated: Vec<ObservedPod> = ready.into_iter().map(|p| ObservedPod { group_ready: Some(true), ..p }).collect();
        let decision = observe(&resource, &options, gated, false);
        assert!(decision.group_readiness.is_empty(), "a gate already set is not written again");
    }

    #[test]
    fn a_lost_or_failed_rank_takes_its_group_down_and_it_comes_back_whole() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        let rev = revision(&resource, &options);
        let mut deleted = pod("m-decode-0-1", 0, 1, &rev, true);
        deleted.terminating = true;
        let survivor = ObservedPod { group_ready: Some(true), ..pod("m-decode-0-0", 0, 0, &rev, true) };
        let decision = observe(&resource, &options, vec![survivor, deleted], false);
        assert_eq!(decision.delete, ["m-decode-0-0"]);
        assert_eq!(
            decision.group_readiness,
            [GroupReadiness {
                pod: "m-decode-0-0".into(),
                ready: false,
                reason: "RankTerminating",
                message: "rank 1 (m-decode-0-1) is being deleted".into()
            }],
            "the surviving rank stops serving before it is deleted"
        );
        let names: Vec<_> = decision.create.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["m-decode-1-0", "m-decode-1-1"], "a whole group replaces it; ordinal 0 stays taken");

        let missing = observe(&resource, &options, vec![pod("m-decode-0-0", 0, 0, &rev, true)], false);
        assert_eq!(missing.delete, ["m-decode-0-0"]);
        let unsure = observe(&resource, &options, vec![pod("m-decode-0-0", 0, 0, &rev, true)], true);
        assert!(unsure.delete.is_empty(), "a rank just created may not be in the cache yet");

        let mut failed = pod("m-decode-0-1", 0, 1, &rev, false);
        failed.failed = true;
        let decision = observe(&resource, &options, vec![pod("m-decode-0-0", 0, 0, &rev, true), failed], false);
        assert_eq!(decision.delete, ["m-decode-0-0", "m-decode-0-1"]);
        assert!(decision.group_readiness.iter().all(|g| !g.ready && g.reason == "RankFailed"));

        let gone = observe(&resource, &options, Vec::new(), false);
        assert_eq!(gone.create.len(), 2);
    }

    #[test]
    fn a_group_the_controller_is_taking_down_is_no_failure_however_its_ranks_are_seen_going() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        let rev = revision(&resource, &options);
        let recovery = |decision: &Decision| decision.status.as_ref().and_then(|s| s.decode.as_ref()?.recovery.clone());
        let by_someone_else = ObservedPod { terminating: true, ..pod("m-decode-0-1", 0, 1, &rev, true) };
        let broken = observe(&resource, &options, vec![pod("m-decode-0-0", 0, 0, &rev, true), by_someone_else], false);
        assert_eq!(recovery(&broken).map(|r| r.failures.len()), Some(1), "a rank deleted by someone else is one");
        // The watch shows one rank of the group the controller deleted as going, the other not yet.
        let going =
            ObservedPod { terminating: true, deleted_by_controller: true, ..pod("m-decode-0-1", 0, 1, &rev, true) };
        let not_yet = ObservedPod { deleted_by_controller: true, ..pod("m-decode-0-0", 0, 0, &rev, true) };
        let decision = observe(&resource, &options, vec![not_yet.clone(), going], false);
        assert_eq!(recovery(&decision), None, "a scale-down, a rollout or a failure counted once already");
        assert_eq!(decision.delete, ["m-decode-0-0"], "its rest still goes");
        let vanished = observe(&resource, &options, vec![not_yet], false);
        assert_eq!(recovery(&vanished), None, "nor when a deleted rank has already gone from the cache");
    }

    #[test]
    fn a_new_revision_replaces_a_group_as_a_unit() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 2, "tensorParallel": 4, "nodesPerReplica": 2}));
        let old = vec![
            pod("m-decode-0-0", 0, 0, "old", true),
            pod("m-decode-0-1", 0, 1, "old", true),
            pod("m-decode-1-0", 1, 0, "old", true),
            pod("m-decode-1-1", 1, 1, "old", true),
        ];
        let decision = observe(&resource, &options, old, false);
        assert_eq!(decision.delete, ["m-decode-1-0", "m-decode-1-1"], "one replica at a time (maxUnavailable 1)");
        assert!(decision.create.is_empty());
    }

    #[test]
    fn an_evicted_single_pod_is_replaced() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 1}));
        let rev = revision(&resource, &options);
        let mut evicted = pod("m-decode-0", 0, 0, &rev, false);
        evicted.failed = true;
        assert_eq!(observe(&resource, &options, vec![evicted], false).delete, ["m-decode-0"]);
    }

    fn gang(resource: &mut InferenceDeployment, gang: GangScheduler) {
        resource.spec.scheduling = Some(crate::api::SchedulingSpec { gang, ..Default::default() });
    }

    fn pod_group(scheduler: GangScheduler, replica: u32) -> ObservedPodGroup {
        ObservedPodGroup { scheduler, name: format!("m-decode-{replica}"), role: FleetRole::Decode, replica }
    }

    fn names(groups: &[ObservedPodGroup]) -> Vec<&str> {
        groups.iter().map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn a_gang_scheduler_the_cluster_does_not_serve_is_refused_in_status_and_nothing_changes() {
        let options = RenderOptions::default();
        let mut resource = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        gang(&mut resource, GangScheduler::Volcano);
        let missing = GangScheduler::Volcano.required_api();
        let running = vec![pod("m-decode-0-0", 0, 0, "old", true), pod("m-decode-0-1", 0, 1, "old", true)];
        let groups = vec![pod_group(GangScheduler::Volcano, 0)];
        let decision = observe_scheduled(&resource, &options, running, groups, missing, false);
        assert!(decision.desired.is_none() && decision.create.is_empty() && decision.delete.is_empty());
        assert!(decision.pod_groups.is_empty() && decision.stale_pod_groups.is_empty(), "PodGroups stay as they are");
        let status = decision.status.unwrap();
        let settings = status.conditions.iter().find(|c| c.type_ == "SettingsValid").unwrap();
        assert_eq!((settings.status.as_str(), settings.reason.as_str()), ("False", "GangSchedulerMissing"));
        assert!(settings.message.contains("install Volcano"), "{}", settings.message);
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "GangSchedulerMissing"));
        assert_eq!(decision.announcements.len(), 1);
        assert!(matches!(decision.next, Next::Requeue(after) if after == GANG_SCHEDULER_REQUEUE));
    }

    #[test]
    fn a_replicas_pod_group_comes_with_its_pods_and_goes_with_them() {
        let options = RenderOptions::default();
        let mut resource = resource(json!({"replicas": 2, "tensorParallel": 4, "nodesPerReplica": 2}));
        gang(&mut resource, GangScheduler::Volcano);
        let created = observe(&resource, &options, Vec::new(), false);
        let applied: Vec<String> = created.pod_groups.iter().map(PodGroup::name).collect();
        assert_eq!(applied, ["m-decode-0", "m-decode-1"]);
        assert_eq!(created.create.len(), 4);

        let rev = revision(&resource, &options);
        let group_of = |replica: u32| {
            vec![
                pod(&format!("m-decode-{replica}-0"), replica, 0, &rev, true),
                pod(&format!("m-decode-{replica}-1"), replica, 1, &rev, true),
            ]
        };
        let running: Vec<ObservedPod> = group_of(0).into_iter().chain(group_of(1)).collect();
        let cached = vec![
            pod_group(GangScheduler::Volcano, 0),
            pod_group(GangScheduler::Volcano, 1),
            pod_group(GangScheduler::Volcano, 5),
        ];
        let steady = observe_scheduled(&resource, &options, running.clone(), cached.clone(), None, false);
        assert_eq!(steady.pod_groups.len(), 2, "kept applied, so a deleted PodGroup comes back");
        assert_eq!(names(&steady.stale_pod_groups), ["m-decode-5"], "its replica is gone");
        let settling = observe_scheduled(&resource, &options, running.clone(), cached.clone(), None, true);
        assert!(settling.stale_pod_groups.is_empty(), "a replica just created may not be cached yet");

        resource.spec.decode.replicas = 1;
        let scaled = observe_scheduled(&resource, &options, running.clone(), cached[..2].to_vec(), None, false);
        assert_eq!(scaled.delete, ["m-decode-1-0", "m-decode-1-1"]);
        assert_eq!(names(&scaled.stale_pod_groups), ["m-decode-1"], "the PodGroup goes with its group");

        resource.spec.decode.replicas = 2;
        let mut lost = running.clone();
        lost[3].terminating = true;
        let broken = observe_scheduled(&resource, &options, lost, cached[..2].to_vec(), None, false);
        assert_eq!(broken.delete, ["m-decode-1-0"]);
        assert_eq!(names(&broken.stale_pod_groups), ["m-decode-1"]);
    }

    #[test]
    fn another_scheduler_replaces_the_pod_groups_as_the_replicas_roll() {
        let options = RenderOptions::default();
        let mut resource = resource(json!({"replicas": 2, "tensorParallel": 4, "nodesPerReplica": 2}));
        gang(&mut resource, GangScheduler::Coscheduling);
        let rev = revision(&resource, &options);
        let pods = vec![
            pod("m-decode-0-0", 0, 0, "volcano-rev", true),
            pod("m-decode-0-1", 0, 1, "volcano-rev", true),
            // Not ready yet: the old replica stays (maxUnavailable 1).
            pod("m-decode-1-0", 1, 0, &rev, false),
            pod("m-decode-1-1", 1, 1, &rev, false),
        ];
        let cached = vec![
            pod_group(GangScheduler::Volcano, 0),
            pod_group(GangScheduler::Volcano, 1),
            pod_group(GangScheduler::Coscheduling, 1),
        ];
        let decision = observe_scheduled(&resource, &options, pods, cached, None, false);
        assert_eq!(
            decision.stale_pod_groups,
            [pod_group(GangScheduler::Volcano, 1)],
            "replica 0 keeps the PodGroup its pods were created with until it is replaced"
        );
        let applied: Vec<String> = decision.pod_groups.iter().map(PodGroup::name).collect();
        assert_eq!(applied, ["m-decode-1"]);
        assert!(matches!(decision.pod_groups[0], PodGroup::Coscheduling(_)));
    }

    #[test]
    fn pod_groups_of_a_fleet_no_longer_wanted_go() {
        let options = RenderOptions::default();
        let mut resource = resource(json!({"replicas": 1}));
        gang(&mut resource, GangScheduler::Volcano);
        let prefill = ObservedPodGroup {
            role: FleetRole::Prefill,
            name: "m-prefill-0".into(),
            ..pod_group(GangScheduler::Volcano, 0)
        };
        let decision = observe_scheduled(&resource, &options, Vec::new(), vec![prefill.clone()], None, false);
        assert_eq!(decision.stale_pod_groups, [prefill]);
    }

    #[test]
    fn rejected_settings_write_status_and_touch_no_pod() {
        let options = RenderOptions::default();
        let resource = resource(json!({"extraArgs": ["--tp", "2"]}));
        let decision = observe(&resource, &options, vec![pod("m-decode-0", 0, 0, "old", true)], false);
        assert!(decision.desired.is_none() && decision.create.is_empty() && decision.delete.is_empty());
        let status = decision.status.unwrap();
        let settings = status.conditions.iter().find(|c| c.type_ == "SettingsValid").unwrap();
        assert_eq!(settings.reason, "POD1");
        assert!(settings.message.contains("spec.decode.tensorParallel"), "{}", settings.message);
        assert_eq!(decision.announcements.len(), 1);
    }

    /// A PD service of one prefill and one decode replica, each a group of two pods.
    fn multi_node_service() -> InferenceDeployment {
        let mut service = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        service.spec.prefill =
            Some(serde_json::from_value(json!({"replicas": 1, "tensorParallel": 2, "nodesPerReplica": 2})).unwrap());
        service
    }

    fn decide_service(
        resource: &InferenceDeployment,
        pods: Vec<ObservedPod>,
        router: (&str, bool),
        now: i64,
    ) -> Decision {
        let options = RenderOptions::default();
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        let router = ObservedRouter { ready_replicas: 1, key: router.0.into(), settled: router.1 };
        let now = Timestamp::from_second(now).unwrap();
        let observed = Observed {
            resource,
            pods,
            pod_groups: Vec::new(),
            router: Some(router),
            missing_scheduler_api: None,
            pod_monitors_unserved: false,
            settling: false,
            options: &options,
            now,
        };
        decide(&observed, Ok(ModelConfigs::target(config)))
    }

    /// The two ranks of replica `replica` of `role`, of `key`, with rank 1 ready or not.
    fn group(role: FleetRole, replica: u32, key: &str, rank_one_ready: bool) -> Vec<ObservedPod> {
        (0..2)
            .map(|rank| ObservedPod {
                name: format!("m-{}-{replica}-{rank}", role.as_str()),
                role,
                replica,
                rank,
                revision: format!("rev-{key}"),
                key: key.into(),
                ready: rank == 0 || rank_one_ready,
                containers_ready: rank == 0 || rank_one_ready,
                group_ready: None,
                terminating: false,
                failed: false,
                deleted_by_controller: false,
                termination: None,
            })
            .collect()
    }

    fn router_selects(decision: &Decision) -> String {
        decision.desired.as_ref().unwrap().router.as_ref().unwrap().kv_compat.clone()
    }

    #[test]
    fn a_new_key_moves_the_router_only_once_whole_groups_of_both_fleets_are_ready() {
        let service = multi_node_service();
        let old = || [group(FleetRole::Decode, 0, "old", true), group(FleetRole::Prefill, 0, "old", true)].concat();
        let first = decide_service(&service, old(), ("old", true), 0);
        let key = first.desired.as_ref().unwrap().kv_compat.clone();
        let created: Vec<_> = first.create.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(created, ["m-decode-1-0", "m-decode-1-1", "m-prefill-1-0", "m-prefill-1-1"], "whole groups");
        assert!(first.create.iter().all(|p| p.metadata.labels.as_ref().unwrap()[LABEL_KV_COMPAT] == key));
        assert!(first.delete.is_empty());
        assert_eq!(router_selects(&first), "old");
        let status = first.status.unwrap();
        let rollout = status.rollout.unwrap();
        assert_eq!((rollout.phase, rollout.from_key.as_deref()), (RolloutPhase::Surging, Some("old")));
        assert_eq!(status.kv_compat.as_deref(), Some(key.as_str()));
        assert_eq!(status.pod_security_level, Some(crate::api::PodSecurityLevel::Restricted), "nothing asks for more");
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.reason, "ServiceReady", "the old key serves meanwhile: {}", ready.message);
        let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing").unwrap();
        assert_eq!(progressing.reason, "NewKeyStarting");

        // A group with a rank not ready is no ready replica: the router stays.
        let half = [old(), group(FleetRole::Decode, 1, &key, false), group(FleetRole::Prefill, 1, &key, true)].concat();
        let waiting = decide_service(&service, half, ("old", true), 10);
        assert_eq!(router_selects(&waiting), "old");
        assert!(waiting.create.is_empty() && waiting.delete.is_empty());

        let whole =
            || [old(), group(FleetRole::Decode, 1, &key, true), group(FleetRole::Prefill, 1, &key, true)].concat();
        let switch = decide_service(&service, whole(), ("old", true), 20);
        assert_eq!(router_selects(&switch), key);
        let deployment = &switch.desired.as_ref().unwrap().router.as_ref().unwrap().deployment;
        assert_eq!(deployment.metadata.labels.as_ref().unwrap()[LABEL_KV_COMPAT], key);
        assert!(switch.delete.is_empty(), "nothing goes while router pods of the old key may remain");

        let retiring = decide_service(&service, whole(), (&key, true), 30);
        let mut deleted = retiring.delete.clone();
        deleted.sort();
        assert_eq!(deleted, ["m-decode-0-0", "m-decode-0-1", "m-prefill-0-0", "m-prefill-0-1"], "whole groups go");
        let status = retiring.status.unwrap();
        assert_eq!(status.decode.unwrap().endpoints, ["http://m-decode-1-0.m-decode.ns.svc:30000"], "the router's key");
    }

    #[test]
    fn an_aborted_rollout_is_announced_once_and_leaves_everything_as_it_is() {
        let service = multi_node_service();
        let old = [group(FleetRole::Decode, 0, "old", true), group(FleetRole::Prefill, 0, "old", true)].concat();
        let first = decide_service(&service, old.clone(), ("old", true), 0);
        let key = first.desired.as_ref().unwrap().kv_compat.clone();
        let mut started = service.clone();
        started.status = first.status;
        let never = [old, group(FleetRole::Decode, 1, &key, false), group(FleetRole::Prefill, 1, &key, false)].concat();
        // 2 × startupTimeoutSeconds (1800 s by default).
        let late = decide_service(&started, never.clone(), ("old", true), 3601);
        assert!(late.create.is_empty() && late.delete.is_empty());
        assert_eq!(router_selects(&late), "old");
        let status = late.status.unwrap();
        let progressing = status.conditions.iter().find(|c| c.type_ == "Progressing").unwrap().clone();
        assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("False", "RolloutAborted"));
        assert!(progressing.message.contains("(3600 s)"), "{}", progressing.message);
        let warnings: Vec<_> = late.announcements.iter().filter(|a| a.reason == "RolloutAborted").collect();
        assert_eq!(warnings.len(), 1);
        assert!(!warnings[0].recorded);
        started.status = Some(status);
        let again = decide_service(&started, never, ("old", true), 3700);
        let warned = again.announcements.iter().find(|a| a.reason == "RolloutAborted").unwrap();
        assert!(warned.recorded, "announced once: the status records it");
    }

    #[test]
    fn a_fleet_that_keeps_failing_holds_its_surge_while_the_rollout_between_keys_goes_on() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

        let mut service = multi_node_service();
        let old = [group(FleetRole::Decode, 0, "old", true), group(FleetRole::Prefill, 0, "old", true)].concat();
        let first = decide_service(&service, old.clone(), ("old", true), 0);
        // Five decode failures in the last seconds: its replacements wait 20 s after the last.
        let at = |second| Time(Timestamp::from_second(second).unwrap());
        let mut status = first.status.unwrap();
        status.decode.as_mut().unwrap().recovery = Some(RecoveryStatus {
            failures: (45..50).map(at).collect(),
            last_reason: "replica 9: rank 1 (m-decode-9-1) failed: OOMKilled (exit code 137)".into(),
            retry_after: Some(at(69)),
        });
        service.status = Some(status);
        let held = decide_service(&service, old, ("old", true), 50);
        let created: Vec<_> = held.create.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(created, ["m-prefill-1-0", "m-prefill-1-1"], "the decode surge waits out the backoff");
        assert!(held.delete.is_empty());
        assert!(matches!(held.next, Next::Requeue(ROLLOUT_REQUEUE)), "a rollout between keys is looked at again");
        assert_eq!(held.group_readiness.len(), 4, "the readiness gates are still set");
        assert!(held.group_readiness.iter().all(|g| g.ready));
        assert_eq!(router_selects(&held), "old");
        let status = held.status.unwrap();
        assert_eq!(status.rollout.unwrap().phase, RolloutPhase::Surging);
        let degraded = status.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", "ReplicasKeepFailing"));
        assert!(degraded.message.contains("its replacements wait 19s"), "{}", degraded.message);
    }

    #[test]
    fn pod_monitors_nobody_serves_are_left_out_and_said_so_while_the_servers_run() {
        let options = RenderOptions { pod_monitors: true, ..RenderOptions::default() };
        let resource = resource(json!({"replicas": 2}));
        let served = observe(&resource, &options, Vec::new(), false);
        assert!(served.desired.unwrap().decode.pod_monitor.is_some());
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        let observed = Observed {
            resource: &resource,
            pods: Vec::new(),
            pod_groups: Vec::new(),
            router: None,
            missing_scheduler_api: None,
            pod_monitors_unserved: true,
            settling: false,
            options: &options,
            now: Timestamp::UNIX_EPOCH,
        };
        let decision = decide(&observed, Ok(ModelConfigs::target(config)));
        assert!(decision.desired.as_ref().unwrap().decode.pod_monitor.is_none(), "nothing applied that would fail");
        assert_eq!(decision.create.len(), 2, "the servers are made all the same");
        let warnings = decision.status.unwrap().warnings;
        let warning = warnings.iter().find(|w| w.contains("--pod-monitors")).expect("status says why");
        assert!(warning.contains("metrics.podMonitor.enabled=false"), "names the chart value and the fix: {warning}");
        let event = decision.announcements.iter().find(|a| a.reason == "PodMonitorsUnavailable").unwrap();
        assert!(matches!(event.type_, EventType::Warning) && !event.recorded);
    }
}
