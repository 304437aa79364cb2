//! Status as a pure function of what the controller observed: standard conditions whose
//! `lastTransitionTime` moves only when their status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::desired::{FleetRole, resources};
use crate::api::{
    CONDITION_DEGRADED, CONDITION_MODEL_RESOLVED, CONDITION_PROGRESSING, CONDITION_READY, CONDITION_SETTINGS_VALID,
    FleetStatus, InferenceDeploymentSpec, InferenceDeploymentStatus, RolloutStatus, RouterStatus, SglangStatus,
};
use crate::policy::{Assessment, Outcome};
use crate::release::ReleaseChoice;

/// The reason of the conditions while the gang scheduler a resource asks for is not installed.
pub const GANG_SCHEDULER_MISSING: &str = "GangSchedulerMissing";

/// One condition as the controller decided it, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: String,
    pub message: String,
}

impl Decided {
    pub fn new(type_: &'static str, ok: Option<bool>, reason: impl Into<String>, message: impl Into<String>) -> Self {
        let status = match ok {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        Self { type_, status, reason: reason.into(), message: message.into() }
    }
}

/// The conditions a pass decides, one of each type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conditions {
    pub model_resolved: Decided,
    pub settings_valid: Decided,
    pub ready: Decided,
    pub progressing: Decided,
    /// Whether a fleet's replicas keep failing and their replacements wait.
    pub degraded: Decided,
}

impl Conditions {
    /// Each condition, in the order the status lists them.
    pub fn all(&self) -> [&Decided; 5] {
        [&self.model_resolved, &self.settings_valid, &self.ready, &self.progressing, &self.degraded]
    }
}

/// `Degraded` when nothing is known to be failing.
fn not_degraded() -> Decided {
    Decided::new(CONDITION_DEGRADED, Some(false), "Healthy", "no fleet is waiting out failures")
}

/// Conditions with `observedGeneration`, keeping the previous `lastTransitionTime` of any
/// condition whose status did not change.
pub fn conditions<'a>(
    previous: &[Condition],
    decided: impl IntoIterator<Item = &'a Decided>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    decided
        .into_iter()
        .map(|d| {
            let transition = previous
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == d.status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: d.type_.into(),
                status: d.status.into(),
                reason: d.reason.clone(),
                message: d.message.clone(),
                last_transition_time: transition,
                observed_generation: generation,
            }
        })
        .collect()
}

/// Status when the model config could not be read or is not a model config.
pub fn unresolved(reason: &str, message: &str) -> Conditions {
    Conditions {
        model_resolved: Decided::new(CONDITION_MODEL_RESOLVED, Some(false), reason, message),
        settings_valid: Decided::new(
            CONDITION_SETTINGS_VALID,
            None,
            "ModelUnresolved",
            "the settings are checked once the model config is read",
        ),
        ready: Decided::new(
            CONDITION_READY,
            Some(false),
            "ModelUnresolved",
            "no pods are managed until the model config is read",
        ),
        progressing: Decided::new(CONDITION_PROGRESSING, Some(false), "ModelUnresolved", message),
        degraded: not_degraded(),
    }
}

/// Pod counts for conditions and `status.decode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodCounts {
    /// Live replicas of any revision.
    pub total: i32,
    /// Live replicas of the current revision.
    pub updated: i32,
    /// Ready replicas of the current revision.
    pub ready_updated: i32,
    /// Ready replicas the router selects (of its key, any revision); without a router, every
    /// ready replica.
    pub serving: i32,
}

/// One fleet's desired replicas and counts, for the conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetProgress {
    pub role: FleetRole,
    pub desired: i32,
    pub counts: PodCounts,
}

impl FleetProgress {
    /// Every replica exists at the current revision.
    fn done(&self) -> bool {
        self.counts.updated == self.desired && self.counts.total == self.desired
    }

    /// Every replica exists at the current revision and is ready.
    fn all_ready(&self) -> bool {
        self.done() && self.counts.ready_updated == self.desired
    }
}

/// What the status reports of the workloads, when this pass looked at them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workloads {
    pub decode: Option<FleetStatus>,
    pub prefill: Option<FleetStatus>,
    pub router: Option<RouterStatus>,
    pub endpoint: Option<String>,
    pub kv_compat: Option<String>,
    pub rollout: Option<RolloutStatus>,
}

/// Ready: without a router, every replica of every fleet is ready at the current revision; with
/// one, the service answers: a ready router, and at least one ready replica of each fleet.
fn readiness(fleets: &[FleetProgress], router: Option<&RouterStatus>) -> Decided {
    let counted =
        |f: &FleetProgress| format!("{}/{} {} replicas ready", f.counts.ready_updated, f.desired, f.role.as_str());
    if let Some(router) = router {
        let serving = router.ready_replicas >= 1 && fleets.iter().all(|f| f.counts.serving >= 1);
        let mut parts = vec![format!("{}/{} router pods ready", router.ready_replicas, router.replicas)];
        parts.extend(fleets.iter().map(counted));
        let message = parts.join(", ");
        return if serving {
            Decided::new(CONDITION_READY, Some(true), "ServiceReady", message)
        } else {
            Decided::new(
                CONDITION_READY,
                Some(false),
                "ServiceNotReady",
                format!("{message}: the router and a replica of each fleet must be ready"),
            )
        };
    }
    if let [decode] = fleets {
        let desired = decode.desired;
        return if decode.all_ready() {
            Decided::new(
                CONDITION_READY,
                Some(true),
                "AllReplicasReady",
                format!("{desired}/{desired} decode replicas ready"),
            )
        } else {
            Decided::new(
                CONDITION_READY,
                Some(false),
                "ReplicasNotReady",
                format!("{}/{desired} decode replicas of the current revision ready", decode.counts.ready_updated),
            )
        };
    }
    let message = fleets.iter().map(counted).collect::<Vec<_>>().join(", ");
    if fleets.iter().all(FleetProgress::all_ready) {
        Decided::new(CONDITION_READY, Some(true), "AllReplicasReady", message)
    } else {
        Decided::new(CONDITION_READY, Some(false), "ReplicasNotReady", format!("{message} at the current revision"))
    }
}

/// ModelResolved for a model whose layout was resolved from `source`.
fn model_resolved(assessment: &Assessment, source: &str) -> Decided {
    let layout = &assessment.layout;
    Decided::new(
        CONDITION_MODEL_RESOLVED,
        Some(true),
        "Resolved",
        format!(
            "{} from {source}: {} pool, {} layers ({} full, {} sliding, {} ssm)",
            layout.architecture,
            layout.kv_pool.as_str(),
            layout.layers.total,
            layout.layers.full_attention,
            layout.layers.sliding_window,
            layout.layers.ssm
        ),
    )
}

/// Conditions for settings that are valid but ask for a gang scheduler whose API the cluster
/// does not serve (`refusal` says which and what to do): nothing is created or changed, as
/// for rejected settings, until it does.
pub fn gang_scheduler_missing(assessment: &Assessment, source: &str, refusal: &str) -> Conditions {
    Conditions {
        model_resolved: model_resolved(assessment, source),
        settings_valid: Decided::new(CONDITION_SETTINGS_VALID, Some(false), GANG_SCHEDULER_MISSING, refusal),
        ready: Decided::new(
            CONDITION_READY,
            Some(false),
            GANG_SCHEDULER_MISSING,
            "no pods are created or changed until the cluster serves the gang scheduler's API",
        ),
        progressing: Decided::new(
            CONDITION_PROGRESSING,
            Some(false),
            GANG_SCHEDULER_MISSING,
            "install the gang scheduler named in SettingsValid, or change spec.scheduling.gang",
        ),
        degraded: not_degraded(),
    }
}

/// Conditions for a resolved model: settings verdict, readiness and rollout progress.
/// `rollout_problem` names an unusable `rollout` of a fleet; Progressing carries it (reason
/// `InvalidRollout`) for as long as it stands, so the user sees why the defaults are in use.
pub fn resolved(
    assessment: &Assessment,
    source: &str,
    fleets: &[FleetProgress],
    router: Option<&RouterStatus>,
    rollout_problem: Option<&str>,
) -> Conditions {
    let verdict = &assessment.verdict;
    let model_resolved = model_resolved(assessment, source);
    let settings_valid = match verdict.outcome {
        Outcome::Valid => {
            Decided::new(CONDITION_SETTINGS_VALID, Some(true), "Valid", "the settings are valid for the layout")
        }
        Outcome::Rewritten => Decided::new(
            CONDITION_SETTINGS_VALID,
            Some(true),
            "Rewritten",
            verdict
                .rewrites
                .iter()
                .map(|r| format!("{}: {} → {} ({}: {})", r.field, r.from, r.to, r.rule, r.message))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Outcome::Rejected => Decided::new(
            CONDITION_SETTINGS_VALID,
            Some(false),
            verdict.violations.first().map(|v| v.rule).unwrap_or("Rejected"),
            verdict
                .violations
                .iter()
                .map(|v| format!("{} {}: {} Fix: {}", v.rule, v.field, v.message, v.fix))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    if verdict.outcome == Outcome::Rejected {
        return Conditions {
            model_resolved,
            settings_valid,
            ready: Decided::new(
                CONDITION_READY,
                Some(false),
                "SettingsRejected",
                "no pods are created or changed while the settings are rejected",
            ),
            progressing: Decided::new(
                CONDITION_PROGRESSING,
                Some(false),
                "SettingsRejected",
                "fix the settings named in SettingsValid",
            ),
            degraded: not_degraded(),
        };
    }
    let ready = readiness(fleets, router);
    let (rolling, reason, progress) = if fleets.iter().all(FleetProgress::all_ready) {
        (false, "Complete", "the current revision is rolled out".to_string())
    } else {
        let each = |f: &FleetProgress| {
            let role = if fleets.len() > 1 { format!("{} ", f.role.as_str()) } else { String::new() };
            format!(
                "{} of {} {role}replicas at the current revision, {} replicas in all",
                f.counts.updated, f.desired, f.counts.total
            )
        };
        (true, "RollingOut", fleets.iter().map(each).collect::<Vec<_>>().join("; "))
    };
    let progressing = match rollout_problem {
        Some(problem) => Decided::new(
            CONDITION_PROGRESSING,
            Some(rolling),
            "InvalidRollout",
            format!("{problem}; rolling out with maxUnavailable 1, maxSurge 0; {progress}"),
        ),
        None => Decided::new(CONDITION_PROGRESSING, Some(rolling), reason, progress),
    };
    Conditions { model_resolved, settings_valid, ready, progressing, degraded: not_degraded() }
}

/// `status.sglang`: the release the rules were evaluated at, and where it came from.
pub fn sglang_status(choice: &ReleaseChoice) -> SglangStatus {
    SglangStatus {
        version: choice.release.to_string(),
        requested: choice.approximate().then(|| choice.requested.to_string()),
        source: choice.source.as_str().to_string(),
    }
}

/// What status says beside the verdict: the layout's and the policy's warnings, what the release's
/// parser says of the fleets' `extraArgs`, and what the pods' resources change of what the spec set
/// (`check` prints the same).
pub fn warnings(spec: &InferenceDeploymentSpec, assessment: &Assessment) -> Vec<String> {
    let layouts = std::iter::once(&assessment.layout).chain(assessment.draft_layout.as_ref());
    layouts
        .flat_map(|layout| layout.warnings.iter().cloned())
        .chain(assessment.verdict.warnings.iter().cloned())
        .chain(assessment.command_line_warnings.iter().cloned())
        .chain(resources::warnings(spec))
        .collect()
}

/// The complete status object.
pub fn status(
    previous: Option<&InferenceDeploymentStatus>,
    decided: &Conditions,
    generation: Option<i64>,
    assessment: Option<&Assessment>,
    workloads: Option<Workloads>,
    warnings: Vec<String>,
    now: Timestamp,
) -> InferenceDeploymentStatus {
    // Keep the last known workloads when this pass could not look at them.
    let workloads = workloads.unwrap_or_else(|| {
        previous.map_or_else(Workloads::default, |p| Workloads {
            decode: p.decode.clone(),
            prefill: p.prefill.clone(),
            router: p.router.clone(),
            endpoint: p.endpoint.clone(),
            kv_compat: p.kv_compat.clone(),
            rollout: p.rollout.clone(),
        })
    });
    let previous_conditions = previous.map(|s| s.conditions.as_slice()).unwrap_or_default();
    InferenceDeploymentStatus {
        observed_generation: generation,
        conditions: conditions(previous_conditions, decided.all(), generation, now),
        layout: assessment.map(|a| a.layout.clone()),
        draft_layout: assessment.and_then(|a| a.draft_layout.clone()),
        effective: assessment.filter(|a| a.verdict.outcome != Outcome::Rejected).map(|a| a.verdict.effective.clone()),
        rewrites: assessment.map(|a| a.verdict.rewrites.clone()).unwrap_or_default(),
        decode: workloads.decode,
        prefill: workloads.prefill,
        router: workloads.router,
        endpoint: workloads.endpoint,
        sglang: assessment.map(|a| sglang_status(&a.release)),
        kv_compat: workloads.kv_compat,
        rollout: workloads.rollout,
        pod_security_level: None,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{self, ReleaseSource, v0_5};

    #[test]
    fn sglang_status_names_the_release_its_source_and_what_was_asked_for() {
        let newer = release::choose(v0_5(30), ReleaseSource::Spec).unwrap();
        let status = sglang_status(&newer);
        assert_eq!(
            (status.version.as_str(), status.requested.as_deref(), status.source.as_str()),
            ("0.5.23", Some("0.5.30"), "Spec")
        );
        let image = sglang_status(&release::choose(v0_5(21), ReleaseSource::Image).unwrap());
        assert_eq!((image.version.as_str(), image.requested, image.source.as_str()), ("0.5.21", None, "Image"));
    }

    #[test]
    fn with_a_router_ready_means_the_service_answers() {
        let fleet = |role, desired, ready| FleetProgress {
            role,
            desired,
            counts: PodCounts { total: desired, updated: desired, ready_updated: ready, serving: ready },
        };
        let fleets = [fleet(FleetRole::Decode, 4, 1), fleet(FleetRole::Prefill, 2, 1)];
        let router = RouterStatus { replicas: 1, ready_replicas: 1 };
        let ready = readiness(&fleets, Some(&router));
        assert_eq!((ready.status, ready.reason.as_str()), ("True", "ServiceReady"));
        assert_eq!(ready.message, "1/1 router pods ready, 1/4 decode replicas ready, 1/2 prefill replicas ready");
        let no_router = RouterStatus { replicas: 1, ready_replicas: 0 };
        assert_eq!(readiness(&fleets, Some(&no_router)).status, "False");
        let no_prefill = [fleet(FleetRole::Decode, 4, 4), fleet(FleetRole::Prefill, 2, 0)];
        assert_eq!(readiness(&no_prefill, Some(&router)).status, "False");
        assert_eq!(readiness(&no_prefill, None).status, "False", "without a router every replica counts");
        let all = [fleet(FleetRole::Decode, 4, 4), fleet(FleetRole::Prefill, 2, 2)];
        assert_eq!(readiness(&all, None).reason, "AllReplicasReady");
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let ready = [Decided::new(CONDITION_READY, Some(false), "ReplicasNotReady", "0/2")];
        let first = conditions(&[], &ready, Some(1), t0);
        let same_status = [Decided::new(CONDITION_READY, Some(false), "ReplicasNotReady", "1/2")];
        let second = conditions(&first, &same_status, Some(2), t1);
        assert_eq!(second[0].last_transition_time, Time(t0));
        assert_eq!((second[0].message.as_str(), second[0].observed_generation), ("1/2", Some(2)));
        let flipped = [Decided::new(CONDITION_READY, Some(true), "AllReplicasReady", "2/2")];
        assert_eq!(conditions(&second, &flipped, Some(2), t1)[0].last_transition_time, Time(t1));
    }
}
