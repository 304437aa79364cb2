//! Which pods to create and delete, as a pure function of the pods that exist: replacement of
//! old revisions within maxUnavailable / maxSurge, scale up and down, recreation of deleted pods.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A replica (one pod, or a group of ranks) as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedReplica {
    pub name: String,
    pub ordinal: u32,
    pub revision: String,
    /// Its KV compatibility key (empty for pods from before kvpilot labelled keys).
    pub key: String,
    pub ready: bool,
    /// Being deleted: counts for nothing but keeps its name (and ordinal) taken.
    pub terminating: bool,
}

/// One step of the rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Ordinals of replicas to create at the current revision.
    pub create: Vec<u32>,
    /// Names of replicas to delete.
    pub delete: Vec<String>,
}

/// Resolves an int-or-percent against `replicas`: percentages round up for surge, down for
/// unavailability, as Deployments do.
pub fn resolve_int_or_percent(value: &IntOrString, replicas: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) if *n >= 0 => Ok(*n),
        IntOrString::Int(n) => Err(format!("{n} is negative")),
        IntOrString::String(text) => {
            let percent: i64 = text
                .strip_suffix('%')
                .and_then(|p| p.trim().parse().ok())
                .filter(|p| (0..=100).contains(p))
                .ok_or_else(|| format!("\"{text}\" is not a count or a percentage like \"25%\""))?;
            let scaled = i64::from(replicas.max(0)) * percent;
            Ok((if round_up { (scaled + 99) / 100 } else { scaled / 100 }) as i32)
        }
    }
}

/// Unready pods go first, then the highest ordinals.
fn deletion_order(pods: &mut [&ObservedReplica]) {
    pods.sort_by(|a, b| a.ready.cmp(&b.ready).then(b.ordinal.cmp(&a.ordinal)));
}

/// The next step towards `replicas` pods at `revision`.
pub fn plan(pods: &[ObservedReplica], revision: &str, replicas: i32, max_unavailable: i32, max_surge: i32) -> Plan {
    let replicas = replicas.max(0) as usize;
    // Both zero would never make progress; Deployments refuse it, we allow one unavailable.
    let max_unavailable = if max_unavailable <= 0 && max_surge <= 0 { 1 } else { max_unavailable.max(0) } as usize;
    let max_surge = max_surge.max(0) as usize;
    let live: Vec<&ObservedReplica> = pods.iter().filter(|p| !p.terminating).collect();
    let mut current: Vec<&ObservedReplica> = live.iter().copied().filter(|p| p.revision == revision).collect();
    let mut old: Vec<&ObservedReplica> = live.iter().copied().filter(|p| p.revision != revision).collect();
    let mut plan = Plan::default();

    // Scale down: surplus current pods go at once.
    if current.len() > replicas {
        deletion_order(&mut current);
        let surplus = current.len() - replicas;
        plan.delete.extend(current.drain(..surplus).map(|p| p.name.clone()));
    }

    // Create what is missing, within the surge budget while old pods remain.
    let total = current.len() + old.len();
    let room = if old.is_empty() { replicas - current.len() } else { (replicas + max_surge).saturating_sub(total) };
    let creations = (replicas - current.len()).min(room);
    let taken: BTreeSet<u32> = pods.iter().map(|p| p.ordinal).collect();
    plan.create = (0..).filter(|o| !taken.contains(o)).take(creations).collect();

    // Old pods: unready ones serve nothing and go at once; ready ones go while availability
    // stays above the floor, or while there are more pods than the surge ceiling allows.
    let floor = replicas.saturating_sub(max_unavailable);
    let ceiling = replicas + max_surge;
    let mut available = current.iter().chain(&old).filter(|p| p.ready).count();
    let mut count = current.len() + plan.create.len() + old.len();
    deletion_order(&mut old);
    for pod in old {
        if pod.ready && available <= floor && count <= ceiling {
            break;
        }
        available -= usize::from(pod.ready);
        count -= 1;
        plan.delete.push(pod.name.clone());
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(ordinal: u32, revision: &str, ready: bool) -> ObservedReplica {
        ObservedReplica {
            name: format!("p-{ordinal}"),
            ordinal,
            revision: revision.into(),
            key: String::new(),
            ready,
            terminating: false,
        }
    }

    #[test]
    fn creates_missing_pods_with_the_lowest_free_ordinals() {
        let pods = [pod(1, "a", true)];
        assert_eq!(plan(&pods, "a", 3, 1, 0), Plan { create: vec![0, 2], delete: vec![] });
    }

    #[test]
    fn scales_down_unready_and_highest_ordinals_first() {
        let pods = [pod(0, "a", true), pod(1, "a", false), pod(2, "a", true), pod(3, "a", true)];
        assert_eq!(plan(&pods, "a", 2, 1, 0).delete, vec!["p-1", "p-3"]);
        assert_eq!(plan(&pods, "a", 0, 1, 0).delete.len(), 4);
    }

    #[test]
    fn rolls_one_pod_at_a_time_with_max_unavailable_one() {
        let old = [pod(0, "a", true), pod(1, "a", true), pod(2, "a", true)];
        assert_eq!(plan(&old, "b", 3, 1, 0), Plan { create: vec![], delete: vec!["p-2".into()] });
        let after = [pod(0, "a", true), pod(1, "a", true)];
        assert_eq!(plan(&after, "b", 3, 1, 0), Plan { create: vec![2], delete: vec![] });
        let new_not_ready = [pod(0, "a", true), pod(1, "a", true), pod(2, "b", false)];
        assert_eq!(plan(&new_not_ready, "b", 3, 1, 0), Plan::default(), "waits for the new pod");
        let new_ready = [pod(0, "a", true), pod(1, "a", true), pod(2, "b", true)];
        assert_eq!(plan(&new_ready, "b", 3, 1, 0).delete, vec!["p-1"]);
    }

    #[test]
    fn surges_before_deleting_with_max_unavailable_zero() {
        let old = [pod(0, "a", true), pod(1, "a", true)];
        assert_eq!(plan(&old, "b", 2, 0, 1), Plan { create: vec![2], delete: vec![] });
        let surged = [pod(0, "a", true), pod(1, "a", true), pod(2, "b", true)];
        assert_eq!(plan(&surged, "b", 2, 0, 1), Plan { create: vec![], delete: vec!["p-1".into()] });
    }

    #[test]
    fn unready_old_pods_are_replaced_at_once() {
        let pods = [pod(0, "a", false), pod(1, "a", false)];
        let step = plan(&pods, "b", 2, 1, 0);
        assert_eq!(step.delete, vec!["p-1", "p-0"]);
    }

    #[test]
    fn terminating_pods_count_for_nothing_but_keep_their_ordinal() {
        let mut gone = pod(0, "a", true);
        gone.terminating = true;
        assert_eq!(plan(&[gone], "a", 1, 1, 0), Plan { create: vec![1], delete: vec![] });
    }

    #[test]
    fn percentages_round_like_deployments() {
        assert_eq!(resolve_int_or_percent(&IntOrString::String("25%".into()), 10, true), Ok(3));
        assert_eq!(resolve_int_or_percent(&IntOrString::String("25%".into()), 10, false), Ok(2));
        assert!(resolve_int_or_percent(&IntOrString::String("lots".into()), 10, false).is_err());
        assert!(resolve_int_or_percent(&IntOrString::Int(-1), 10, false).is_err());
    }

    /// Simulates the controller and a kubelet that makes created pods ready one step later:
    /// the rollout converges, never drops below the availability floor, never exceeds the
    /// surge ceiling.
    fn simulate(replicas: i32, old_count: u32, unavailable: i32, surge: i32) -> Result<(), String> {
        let mut pods: Vec<ObservedReplica> = (0..old_count).map(|o| pod(o, "a", true)).collect();
        let floor =
            (replicas as usize).saturating_sub(if unavailable <= 0 && surge <= 0 { 1 } else { unavailable as usize });
        let ceiling = (replicas as usize + surge.max(0) as usize).max(old_count as usize);
        for _ in 0..200 {
            for p in pods.iter_mut() {
                p.ready = true;
            }
            let step = plan(&pods, "b", replicas, unavailable, surge);
            if step == Plan::default() {
                let converged = pods.len() == replicas as usize && pods.iter().all(|p| p.revision == "b");
                return if converged { Ok(()) } else { Err(format!("stuck at {pods:?}")) };
            }
            pods.retain(|p| !step.delete.contains(&p.name));
            let ready_before_create = pods.iter().filter(|p| p.ready).count();
            if ready_before_create < floor.min(old_count as usize).min(replicas as usize) {
                return Err(format!("availability {ready_before_create} fell below {floor}"));
            }
            pods.extend(step.create.iter().map(|o| pod(*o, "b", false)));
            if pods.len() > ceiling {
                return Err(format!("{} pods exceed the ceiling {ceiling}", pods.len()));
            }
        }
        Err("did not converge in 200 steps".into())
    }

    proptest! {
        #[test]
        fn rollouts_converge_within_their_budgets(replicas in 0..12i32, old in 0..12u32, unavailable in 0..4i32, surge in 0..4i32) {
            prop_assert_eq!(simulate(replicas, old, unavailable, surge), Ok(()));
        }
    }
}
