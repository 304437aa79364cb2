//! The whole outcome of one reconcile, decided in pure code from what was observed: the objects
//! to apply, the status, the pods to delete and create, the events that stand, and when to look
//! again. [`super::act`] carries a [`Decision`] out; nothing here does I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::desired::{Fleet, FleetRole, RenderOptions, desired_state};
use super::rollout::{self, ObservedReplica, resolve_int_or_percent};
use super::status::{self, Conditions, FleetProgress, Workloads};
use crate::api::{
    ConfigSourceRef, FleetStatus, InferenceDeployment, InferenceDeploymentStatus, Rewrite, RolloutSpec, RouterStatus,
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
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Its phase is Failed: evicted, or a rank of a group whose server exited.
    pub failed: bool,
}

/// What one reconcile observed.
pub struct Observed<'a> {
    pub resource: &'a InferenceDeployment,
    /// The resource's server pods, of both fleets.
    pub pods: Vec<ObservedPod>,
    /// The router Deployment's pods, when it exists.
    pub router: Option<RouterStatus>,
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
            delete: Vec::new(),
            create: Vec::new(),
            announcements: vec![Announcement::warning(previous, reason, message)],
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
    let new = status::status(previous, decided, resource.metadata.generation, assessment, workloads, observed.now);
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
    let assessment = match crate::sglang::server::assess(&resource.spec, &configs, &release) {
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
            desired: None,
            status: new_status(observed, &decided, Some(&assessment), None),
            delete: Vec::new(),
            create: Vec::new(),
            announcements: vec![warning],
            next: Next::Requeue(USER_ERROR_REQUEUE),
        };
    }

    let desired = desired_state(resource, &assessment, observed.options);
    let mut delete = Vec::new();
    let mut create = Vec::new();
    let mut progress = Vec::new();
    let mut statuses = Vec::new();
    let mut rollout_problems = Vec::new();
    for fleet in desired.fleets() {
        let Some(fleet_spec) = fleet.role.fleet(&resource.spec) else { continue };
        let plan = plan_fleet(observed, fleet, &fleet_spec.rollout);
        delete.extend(plan.delete);
        create.extend(plan.create);
        progress.push(FleetProgress { role: fleet.role, desired: fleet.replicas, counts: plan.counts });
        statuses.push(plan.status);
        rollout_problems.extend(plan.rollout_problem);
    }
    // Pods of a fleet no longer wanted (spec.prefill removed) go.
    delete.extend(
        observed.pods.iter().filter(|p| !p.terminating && desired.fleet(p.role).is_none()).map(|p| p.name.clone()),
    );
    let rollout_problem = (!rollout_problems.is_empty()).then(|| rollout_problems.join("; "));
    let router = desired.router.as_ref().map(|router| {
        let desired_pods = router.deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        RouterStatus {
            replicas: desired_pods,
            ready_replicas: observed.router.as_ref().map_or(0, |r| r.ready_replicas),
        }
    });
    let decided = status::resolved(&assessment, &source, &progress, router.as_ref(), rollout_problem.as_deref());
    let mut statuses = statuses.into_iter();
    let workloads = Workloads {
        decode: statuses.next(),
        prefill: statuses.next(),
        endpoint: desired.router.as_ref().map(|r| r.endpoint.clone()),
        router,
    };

    let mut announcements = Announcement::rewrites(previous, &assessment);
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
    let next = if observed.settling {
        SETTLE_REQUEUE
    } else if create.is_empty() && delete.is_empty() && decided.ready.status == "True" {
        RESYNC
    } else {
        ROLLOUT_REQUEUE
    };
    Decision {
        status: new_status(observed, &decided, Some(&assessment), Some(workloads)),
        desired: Some(desired),
        delete,
        create,
        announcements,
        next: Next::Requeue(next),
    }
}

/// What one fleet's pass does: pods to delete and create, its counts and status, and why its
/// rollout settings could not be used.
struct FleetPlan {
    delete: Vec<String>,
    create: Vec<Pod>,
    counts: status::PodCounts,
    status: FleetStatus,
    rollout_problem: Option<String>,
}

/// Plans one fleet from its observed pods: broken replicas go, the rollout planner replaces and
/// scales, and while created pods are settling nothing is created or deleted.
fn plan_fleet(observed: &Observed<'_>, fleet: &Fleet, rollout_spec: &RolloutSpec) -> FleetPlan {
    let pods: Vec<ObservedPod> = observed.pods.iter().filter(|p| p.role == fleet.role).cloned().collect();
    let (max_unavailable, max_surge, rollout_problem) = match (
        resolve_int_or_percent(&rollout_spec.max_unavailable, fleet.replicas, false),
        resolve_int_or_percent(&rollout_spec.max_surge, fleet.replicas, true),
    ) {
        (Ok(u), Ok(s)) => (u, s, None),
        (Err(e), _) | (_, Err(e)) => (1, 0, Some(format!("{}.rollout: {e}", fleet.role.field()))),
    };
    let groups = group_replicas(&pods, fleet);
    let plan = if observed.settling {
        rollout::Plan::default()
    } else {
        rollout::plan(&groups.replicas, &fleet.revision, fleet.replicas, max_unavailable, max_surge)
    };
    // The status counts only replicas that exist and stay: it never claims one being deleted or
    // not yet created (their watch events bring the next count), so readers never see more
    // than is true.
    let counts = count_staying(&groups.replicas, &plan, &fleet.revision);
    let status = FleetStatus {
        replicas: counts.total,
        ready_replicas: counts.ready_updated,
        updated_replicas: counts.updated,
        selector: fleet.selector.clone(),
        endpoints: endpoints(&pods, &groups.replicas, &plan, fleet),
    };
    let mut delete = if observed.settling { Vec::new() } else { groups.broken };
    for replica in &plan.delete {
        delete.extend(
            pods.iter().filter(|p| !p.terminating && p.replica.to_string() == *replica).map(|p| p.name.clone()),
        );
    }
    let create = plan.create.iter().flat_map(|replica| fleet.replica(*replica)).collect();
    FleetPlan { delete, create, counts, status, rollout_problem }
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

/// The replicas the rollout planner sees, and the pods of broken replicas to delete.
struct Groups {
    replicas: Vec<ObservedReplica>,
    broken: Vec<String>,
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
    let mut groups = Groups { replicas: Vec::new(), broken: Vec::new() };
    for (replica, members) in by_replica {
        let live: Vec<&&ObservedPod> = members.iter().filter(|p| !p.terminating).collect();
        let revision = live.first().map_or_else(String::new, |p| p.revision.clone());
        let mixed = live.iter().any(|p| p.revision != revision);
        let incomplete = revision == desired.revision && live.len() < nodes;
        let broken =
            !live.is_empty() && (members.iter().any(|p| p.failed) || live.len() < members.len() || mixed || incomplete);
        if broken {
            groups.broken.extend(live.iter().map(|p| p.name.clone()));
        }
        groups.replicas.push(ObservedReplica {
            name: replica.to_string(),
            ordinal: replica,
            revision,
            ready: !broken && !live.is_empty() && live.iter().all(|p| p.ready),
            terminating: broken || live.is_empty(),
        });
    }
    groups
}

/// Replica counts of the replicas that exist, are not terminating and stay after the plan.
fn count_staying(replicas: &[ObservedReplica], plan: &rollout::Plan, revision: &str) -> status::PodCounts {
    let staying: Vec<&ObservedReplica> =
        replicas.iter().filter(|r| !r.terminating && !plan.delete.contains(&r.name)).collect();
    let updated = || staying.iter().filter(|r| r.revision == revision);
    status::PodCounts {
        total: staying.len() as i32,
        updated: updated().count() as i32,
        ready_updated: updated().filter(|r| r.ready).count() as i32,
    }
}

/// The rank-0 URLs of the ready replicas that stay, for a router.
fn endpoints(pods: &[ObservedPod], replicas: &[ObservedReplica], plan: &rollout::Plan, desired: &Fleet) -> Vec<String> {
    let mut urls: Vec<String> = replicas
        .iter()
        .filter(|r| r.ready && !r.terminating && !plan.delete.contains(&r.name))
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

    fn observe<'a>(
        resource: &'a InferenceDeployment,
        options: &'a RenderOptions,
        pods: Vec<ObservedPod>,
        settling: bool,
    ) -> Decision {
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        decide(
            &Observed { resource, pods, router: None, settling, options, now: Timestamp::UNIX_EPOCH },
            Ok(ModelConfigs::target(config)),
        )
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
            ready,
            terminating: false,
            failed: false,
        }
    }

    #[test]
    fn status_counts_only_replicas_that_exist_and_stay() {
        let pod = |name: &str, revision: &str, ready: bool, terminating: bool| ObservedReplica {
            name: name.into(),
            ordinal: name.len() as u32,
            revision: revision.into(),
            ready,
            terminating,
        };
        let observed = [
            pod("a", "new", true, false),
            pod("bb", "new", true, true),
            pod("ccc", "old", true, false),
            pod("dddd", "new", false, false),
            pod("eeeee", "new", true, false),
        ];
        let plan = rollout::Plan { create: vec![7, 8], delete: vec!["eeeee".into()] };
        let counts = count_staying(&observed, &plan, "new");
        assert_eq!(counts, status::PodCounts { total: 3, updated: 2, ready_updated: 1 });
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

        let ready = vec![pod("m-decode-0-0", 0, 0, &rev, true), pod("m-decode-0-1", 0, 1, &rev, true)];
        let decode = observe(&resource, &options, ready, false).status.unwrap().decode.unwrap();
        assert_eq!((decode.replicas, decode.ready_replicas), (1, 1));
        assert_eq!(decode.endpoints, ["http://m-decode-0-0.m-decode.ns.svc:30000"]);
    }

    #[test]
    fn a_lost_or_failed_rank_takes_its_group_down_and_it_comes_back_whole() {
        let options = RenderOptions::default();
        let resource = resource(json!({"replicas": 1, "tensorParallel": 4, "nodesPerReplica": 2}));
        let rev = revision(&resource, &options);
        let mut deleted = pod("m-decode-0-1", 0, 1, &rev, true);
        deleted.terminating = true;
        let decision = observe(&resource, &options, vec![pod("m-decode-0-0", 0, 0, &rev, true), deleted], false);
        assert_eq!(decision.delete, ["m-decode-0-0"]);
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

        let gone = observe(&resource, &options, Vec::new(), false);
        assert_eq!(gone.create.len(), 2);
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
}
