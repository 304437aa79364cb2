//! The next step of a PD service's rollout, as a pure function of the replicas observed, the key
//! the router selects and the last recorded rollout: which replicas of each fleet to create and
//! delete, which KV compatibility key the router selects, and where the rollout stands.
//!
//! A change that keeps the key rolls each fleet in place ([`rollout::plan`] with the fleet's own
//! budget) and leaves the router alone. A change of key is coherent: replicas of the new key come
//! up beside the old ones within `spec.rollout`; once one replica of each fleet is ready the
//! router's Deployment is moved to the new key (each router pod selects one key, from start to
//! end); once every router pod is on it, the other keys' replicas retire as the new ones become
//! ready. Throughout, each fleet keeps `replicas − maxUnavailable` ready replicas (counting every
//! key) and at most `replicas + maxSurge` live ones, and for each key that a router pod may
//! select, the fleets' ready fractions differ by at most one replica of the smaller fleet:
//! `|prefill × D − decode × P| ≤ max(P, D)` for fleets of P and D replicas (new replicas are
//! created no faster than the other fleet's ready ones allow, so this holds whichever become
//! ready first). A new key that does not reach one ready replica of each fleet within
//! `abort_after` of the rollout's start aborts it: nothing more is created or deleted and the
//! router stays where it is, until the spec changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::desired::FleetRole;
use super::rollout::{self, ObservedReplica, Plan};
use super::status::Decided;
use crate::api::{CONDITION_PROGRESSING, KeyReadiness, RolloutPhase, RolloutStatus};

/// A fleet's rollout budget, in replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub max_unavailable: i32,
    pub max_surge: i32,
}

/// One fleet as the planner sees it.
#[derive(Debug, Clone)]
pub struct FleetInput<'a> {
    pub role: FleetRole,
    /// Replicas the spec asks for.
    pub replicas: i32,
    /// The pod revision the spec asks for (it carries the key).
    pub revision: &'a str,
    /// Its replicas, terminating and broken ones included (they keep their ordinals).
    pub observed: &'a [ObservedReplica],
    /// The fleet's own `rollout`, for changes that keep the key.
    pub in_place: Budget,
    /// `spec.rollout` resolved against this fleet's replicas, for changes of key.
    pub coherent: Budget,
}

/// The router's Deployment as observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterInput<'a> {
    /// The key its pods' selectors name; None when it does not exist yet.
    pub key: Option<&'a str>,
    /// Every router pod runs the Deployment's current template: no pod of an earlier key is left.
    pub settled: bool,
}

/// What one reconcile observed of a service.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The key the spec asks for.
    pub key: &'a str,
    /// The fleets kvpilot runs.
    pub fleets: &'a [FleetInput<'a>],
    /// The router, when kvpilot runs one.
    pub router: Option<RouterInput<'a>>,
    /// The rollout the last status recorded.
    pub previous: Option<&'a RolloutStatus>,
    pub now: Timestamp,
    /// How long the new key may take to reach one ready replica of each fleet.
    pub abort_after: Duration,
}

/// The next step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Per fleet, in the order of [`Input::fleets`].
    pub plans: Vec<Plan>,
    /// The key the router selects after this step (None without a router).
    pub route: Option<String>,
    /// Where the rollout between keys stands (None without a router).
    pub rollout: Option<RolloutStatus>,
}

/// Decides the next step of every fleet and the router.
pub fn plan(input: &Input<'_>) -> Step {
    let in_place = || input.fleets.iter().map(in_place_plan).collect();
    let Some(router) = input.router else {
        return Step { plans: in_place(), route: None, rollout: None };
    };
    let key = input.key;
    // A router that does not exist yet protects nothing: it starts on the spec's key.
    let routed = router.key.unwrap_or(key);
    let settled = router.key.is_none() || router.settled;
    let other_keys_live = input.fleets.iter().flat_map(|f| f.observed).any(|r| !r.terminating && r.key != key);
    let same = input.previous.filter(|p| p.to_key == key);
    let ongoing = same.filter(|p| p.phase != RolloutPhase::Complete);
    let start = ongoing.and_then(|p| p.start_time.clone()).unwrap_or(Time(input.now));
    let (phase, route) = if routed == key {
        let phase = match (other_keys_live, settled) {
            (false, _) => RolloutPhase::Complete,
            (true, false) => RolloutPhase::Switching,
            (true, true) => RolloutPhase::Retiring,
        };
        (phase, key)
    } else if ongoing.is_some_and(|p| p.phase == RolloutPhase::Aborted) || overdue(&start, input) {
        (RolloutPhase::Aborted, routed)
    } else if serves(input.fleets, key) {
        (RolloutPhase::Switching, key)
    } else {
        (RolloutPhase::Surging, routed)
    };
    let plans = match phase {
        RolloutPhase::Complete => in_place(),
        RolloutPhase::Aborted => vec![Plan::default(); input.fleets.len()],
        // Moved in this step, the router is not settled on its new key yet.
        _ => coherent_step(input.fleets, key, route, settled && route == routed),
    };
    let from_key = same
        .and_then(|p| p.from_key.clone())
        .or_else(|| (routed != key).then(|| routed.to_string()))
        .or_else(|| other_keys(input.fleets, key).into_iter().next());
    let start_time = match phase {
        RolloutPhase::Complete => same.and_then(|p| p.start_time.clone()),
        _ => Some(start),
    };
    let rollout =
        RolloutStatus { from_key, to_key: key.to_string(), phase, start_time, ready: readiness(input.fleets) };
    Step { plans, route: Some(route.to_string()), rollout: Some(rollout) }
}

fn in_place_plan(fleet: &FleetInput<'_>) -> Plan {
    let budget = fleet.in_place;
    rollout::plan(fleet.observed, fleet.revision, fleet.replicas, budget.max_unavailable, budget.max_surge)
}

/// Whether the rollout began longer than `abort_after` ago.
fn overdue(start: &Time, input: &Input<'_>) -> bool {
    let elapsed = input.now.as_second().saturating_sub(start.0.as_second());
    u64::try_from(elapsed).is_ok_and(|elapsed| elapsed > input.abort_after.as_secs())
}

/// Whether `key` has a ready replica in every fleet that asks for any: the router can pair.
fn serves(fleets: &[FleetInput<'_>], key: &str) -> bool {
    fleets.iter().filter(|f| f.replicas > 0).all(|f| f.observed.iter().any(|r| live(r) && r.ready && r.key == key))
}

fn live(replica: &ObservedReplica) -> bool {
    !replica.terminating
}

/// The keys other than `key` that have live replicas, in order.
fn other_keys(fleets: &[FleetInput<'_>], key: &str) -> BTreeSet<String> {
    fleets.iter().flat_map(|f| f.observed).filter(|r| live(r) && r.key != key).map(|r| r.key.clone()).collect()
}

/// Ready replicas of each fleet per key with live replicas.
fn readiness(fleets: &[FleetInput<'_>]) -> Vec<KeyReadiness> {
    let mut by_key: BTreeMap<&str, KeyReadiness> = BTreeMap::new();
    for fleet in fleets {
        for replica in fleet.observed.iter().filter(|r| live(r)) {
            let entry = by_key.entry(&replica.key).or_insert_with(|| KeyReadiness {
                key: replica.key.clone(),
                prefill: 0,
                decode: 0,
            });
            let count = match fleet.role {
                FleetRole::Prefill => &mut entry.prefill,
                FleetRole::Decode => &mut entry.decode,
            };
            *count += i32::from(replica.ready);
        }
    }
    by_key.into_values().collect()
}

/// One fleet while a step is planned: what it had, and what the step deletes and creates.
struct Pool<'a> {
    replicas: usize,
    /// Ready replicas it keeps at least (replicas − maxUnavailable).
    floor: usize,
    /// Live replicas it holds at most (replicas + maxSurge).
    ceiling: usize,
    live: Vec<&'a ObservedReplica>,
    taken: BTreeSet<u32>,
    deleted: BTreeSet<&'a str>,
    created: Vec<u32>,
    /// Replicas deleted in this step to make room for new ones, which the next step creates.
    reserved: usize,
}

impl<'a> Pool<'a> {
    fn new(fleet: &FleetInput<'a>) -> Self {
        let Budget { max_unavailable, max_surge } = fleet.coherent;
        let replicas = fleet.replicas.max(0) as usize;
        // Both zero would never make progress (Deployments refuse it): one replica at a time.
        let unavailable = if max_unavailable <= 0 && max_surge <= 0 { 1 } else { max_unavailable.max(0) as usize };
        Self {
            replicas,
            floor: replicas.saturating_sub(unavailable),
            ceiling: replicas + max_surge.max(0) as usize,
            live: fleet.observed.iter().filter(|r| live(r)).collect(),
            taken: fleet.observed.iter().map(|r| r.ordinal).collect(),
            deleted: BTreeSet::new(),
            created: Vec::new(),
            reserved: 0,
        }
    }

    fn kept(&self) -> impl Iterator<Item = &'a ObservedReplica> + '_ {
        self.live.iter().copied().filter(|r| !self.deleted.contains(r.name.as_str()))
    }

    /// Replicas of `key` it keeps or creates.
    fn of_key(&self, key: &str) -> usize {
        self.kept().filter(|r| r.key == key).count() + self.created.len()
    }

    /// Ready replicas of `key` it keeps.
    fn ready_of(&self, key: &str) -> usize {
        self.kept().filter(|r| r.ready && r.key == key).count()
    }

    fn ready(&self) -> usize {
        self.kept().filter(|r| r.ready).count()
    }

    /// Live replicas once the step is carried out.
    fn count(&self) -> usize {
        self.kept().count() + self.created.len()
    }

    /// Replicas holding their resources while the step is carried out (a deleted one holds them
    /// until it is gone, so room it makes is used by the next step).
    fn held(&self) -> usize {
        self.live.len() + self.created.len()
    }

    fn delete(&mut self, replica: &'a ObservedReplica) {
        self.deleted.insert(&replica.name);
    }

    fn into_plan(self) -> Plan {
        let deleted = self.deleted;
        let delete = self.live.iter().filter(|r| deleted.contains(r.name.as_str())).map(|r| r.name.clone()).collect();
        Plan { create: self.created, delete }
    }
}

/// The ratio bound: `|a × B − b × A| ≤ max(A, B)` for `a` of `A` and `b` of `B` replicas.
fn deviation(a: usize, of_a: usize, b: usize, of_b: usize) -> usize {
    (a * of_b).abs_diff(b * of_a)
}

/// One step of a rollout between keys: `key` is the spec's, `route` the one the router selects,
/// `settled` whether every router pod selects `route`.
fn coherent_step(fleets: &[FleetInput<'_>], key: &str, route: &str, settled: bool) -> Vec<Plan> {
    let mut pools: Vec<Pool<'_>> = fleets.iter().map(Pool::new).collect();
    // A key a router pod may select: while pods of an earlier key may remain, every key.
    let serving = |replica_key: &str| !settled || replica_key == route;
    for pool in &mut pools {
        // Unready replicas of other keys serve nothing and count for nothing: they go at once.
        let unready: Vec<_> = pool.kept().filter(|r| r.key != key && !r.ready).collect();
        unready.into_iter().for_each(|r| pool.delete(r));
        // Replicas of the key above what the spec asks for (it scaled down): unready first, then
        // the highest ordinals.
        let mut current: Vec<_> = pool.kept().filter(|r| r.key == key).collect();
        current.sort_by(|a, b| a.ready.cmp(&b.ready).then(b.ordinal.cmp(&a.ordinal)));
        let surplus = current.len().saturating_sub(pool.replicas);
        current.into_iter().take(surplus).for_each(|r| pool.delete(r));
    }
    loop {
        let mut progress = false;
        for at in 0..pools.len() {
            progress |= create(&mut pools, at, key) || make_room(&mut pools, at, key, settled, &serving);
            progress |= retire(&mut pools, at, key, settled, &serving);
        }
        if !progress {
            break;
        }
    }
    pools.into_iter().map(Pool::into_plan).collect()
}

/// Whether the fleet at `at` may hold `extra` more replicas of `key` than it has: never more than
/// the other fleet's ready replicas of `key` allow within the ratio bound.
fn paced(pools: &[Pool<'_>], at: usize, key: &str, extra: usize) -> bool {
    let pool = &pools[at];
    let Some(other) = pools.iter().enumerate().find(|(i, _)| *i != at).map(|(_, p)| p) else { return true };
    if pool.replicas == 0 || other.replicas == 0 {
        return true;
    }
    let wanted = pool.of_key(key) + pool.reserved + extra;
    wanted * other.replicas <= other.ready_of(key) * pool.replicas + pool.replicas.max(other.replicas)
}

/// Creates a replica of `key` if the fleet lacks one, has room and the pace allows.
fn create(pools: &mut [Pool<'_>], at: usize, key: &str) -> bool {
    let pool = &pools[at];
    if pool.of_key(key) >= pool.replicas || !paced(pools, at, key, 1) {
        return false;
    }
    let replacing = pool.kept().any(|r| r.key != key);
    // Room counts what is held until the deleted replicas are gone.
    if replacing && pool.held() >= pool.ceiling {
        return false;
    }
    let pool = &mut pools[at];
    let ordinal = (0..).find(|o| !pool.taken.contains(o)).unwrap_or_default();
    pool.taken.insert(ordinal);
    pool.created.push(ordinal);
    true
}

/// A ready replica of another key whose deletion keeps the fleet at or above `floor` (unless
/// `above_ceiling`) and, for a key some router pod selects, within the ratio bound; stale keys'
/// replicas first, then the highest ordinals.
fn deletable<'a>(
    pools: &[Pool<'a>],
    at: usize,
    key: &str,
    serving_allowed: bool,
    above_ceiling: bool,
    serving: &dyn Fn(&str) -> bool,
) -> Option<&'a ObservedReplica> {
    let pool = &pools[at];
    if !above_ceiling && pool.ready() <= pool.floor {
        return None;
    }
    let other = pools.iter().enumerate().find(|(i, _)| *i != at).map(|(_, p)| p);
    let within_ratio = |replica: &ObservedReplica| {
        let Some(other) = other.filter(|o| o.replicas > 0 && pool.replicas > 0) else { return true };
        let (mine, theirs) = (pool.ready_of(&replica.key), other.ready_of(&replica.key));
        let before = deviation(mine, pool.replicas, theirs, other.replicas);
        let after = deviation(mine - 1, pool.replicas, theirs, other.replicas);
        after <= pool.replicas.max(other.replicas) || after <= before
    };
    let mut candidates: Vec<_> = pool
        .kept()
        .filter(|r| r.ready && r.key != key)
        .filter(|r| !serving(&r.key) || (serving_allowed && within_ratio(r)))
        .collect();
    candidates.sort_by(|a, b| serving(&a.key).cmp(&serving(&b.key)).then(b.ordinal.cmp(&a.ordinal)));
    candidates.into_iter().next()
}

/// Deletes a replica of another key to make room for one of `key` the fleet lacks and may not
/// create for want of room (with `maxSurge` 0: k old down, then k new up). Only on a settled
/// router: an unsettled one may still send requests to any key.
fn make_room(pools: &mut [Pool<'_>], at: usize, key: &str, settled: bool, serving: &dyn Fn(&str) -> bool) -> bool {
    let pool = &pools[at];
    let short = pool.of_key(key) + pool.reserved < pool.replicas;
    let no_room = pool.held() - pool.reserved >= pool.ceiling;
    if !settled || !short || !no_room || !paced(pools, at, key, 1) {
        return false;
    }
    let Some(replica) = deletable(pools, at, key, true, false, serving) else { return false };
    let pool = &mut pools[at];
    pool.delete(replica);
    pool.reserved += 1;
    true
}

/// Retires a ready replica of a key no router pod selects while the fleet stays at or above its
/// floor, or any replica of another key while it holds more than its ceiling.
fn retire(pools: &mut [Pool<'_>], at: usize, key: &str, settled: bool, serving: &dyn Fn(&str) -> bool) -> bool {
    if !settled {
        return false;
    }
    let above_ceiling = pools[at].count() > pools[at].ceiling;
    let Some(replica) = deletable(pools, at, key, above_ceiling, above_ceiling, serving) else { return false };
    pools[at].delete(replica);
    true
}

/// The Progressing condition while a rollout between keys runs or after it aborted; None once it
/// is complete (the fleets' own progress speaks then).
pub fn progressing(rollout: &RolloutStatus, abort_after: Duration) -> Option<Decided> {
    let to = &rollout.to_key;
    let from = rollout.from_key.as_deref().unwrap_or("none");
    let ready = rollout.ready.iter().find(|r| &r.key == to);
    let counts = format!(
        "{to} has {} prefill and {} decode replicas ready",
        ready.map_or(0, |r| r.prefill),
        ready.map_or(0, |r| r.decode)
    );
    let (ok, reason, message) = match rollout.phase {
        RolloutPhase::Complete => return None,
        RolloutPhase::Surging => (
            true,
            "NewKeyStarting",
            format!(
                "rolling from KV key {from} to {to}: {counts}; the router selects {from} until {to} has one of each"
            ),
        ),
        RolloutPhase::Switching => {
            (true, "RouterSwitching", format!("the router's pods move from KV key {from} to {to}; {counts}"))
        }
        RolloutPhase::Retiring => (
            true,
            "OldKeyRetiring",
            format!("the router selects KV key {to}; replicas of other keys retire as {to}'s become ready; {counts}"),
        ),
        RolloutPhase::Aborted => (
            false,
            "RolloutAborted",
            format!(
                "the servers of KV key {to} did not reach one ready replica of each fleet within twice the \
                 startupTimeoutSeconds ({} s): the router stays on {from} and nothing more changes; revert the spec \
                 to return to {from} (its pods keep running), or change it to roll out another key",
                abort_after.as_secs()
            ),
        ),
    };
    Some(Decided::new(CONDITION_PROGRESSING, Some(ok), reason, message))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SURGE: Budget = Budget { max_unavailable: 0, max_surge: 1 };
    const NO_SURGE: Budget = Budget { max_unavailable: 1, max_surge: 0 };
    const IN_PLACE: Budget = Budget { max_unavailable: 1, max_surge: 0 };

    fn replica(role: FleetRole, ordinal: u32, key: &str, ready: bool) -> ObservedReplica {
        ObservedReplica {
            name: format!("{}-{ordinal}", role.as_str()),
            ordinal,
            revision: format!("rev-{key}"),
            key: key.into(),
            ready,
            terminating: false,
        }
    }

    /// `replicas` ready replicas of `key` in each fleet.
    fn fleet_of(role: FleetRole, replicas: u32, key: &str) -> Vec<ObservedReplica> {
        (0..replicas).map(|o| replica(role, o, key, true)).collect()
    }

    fn inputs<'a>(
        key: &'a str,
        prefill: &'a [ObservedReplica],
        decode: &'a [ObservedReplica],
        replicas: (i32, i32),
        budget: Budget,
    ) -> Vec<FleetInput<'a>> {
        let revision = if key == "k1" { "rev-k1" } else { "rev-k2" };
        vec![
            FleetInput {
                role: FleetRole::Prefill,
                replicas: replicas.0,
                revision,
                observed: prefill,
                in_place: IN_PLACE,
                coherent: budget,
            },
            FleetInput {
                role: FleetRole::Decode,
                replicas: replicas.1,
                revision,
                observed: decode,
                in_place: IN_PLACE,
                coherent: budget,
            },
        ]
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn step(fleets: &[FleetInput<'_>], router: (&str, bool), previous: Option<&RolloutStatus>, now: i64) -> Step {
        plan(&Input {
            key: fleets[0].revision.trim_start_matches("rev-"),
            fleets,
            router: Some(RouterInput { key: Some(router.0), settled: router.1 }),
            previous,
            now: at(now),
            abort_after: Duration::from_secs(100),
        })
    }

    #[test]
    fn a_change_that_keeps_the_key_rolls_each_fleet_in_place_and_leaves_the_router() {
        let mut prefill = fleet_of(FleetRole::Prefill, 1, "k2");
        let mut decode = fleet_of(FleetRole::Decode, 2, "k2");
        prefill.iter_mut().chain(&mut decode).for_each(|r| r.revision = "an-older-template".into());
        let fleets = inputs("k2", &prefill, &decode, (1, 2), SURGE);
        let next = step(&fleets, ("k2", true), None, 0);
        assert_eq!(next.route.as_deref(), Some("k2"));
        assert_eq!(next.rollout.as_ref().map(|r| r.phase), Some(RolloutPhase::Complete));
        assert_eq!(next.plans, fleets.iter().map(in_place_plan).collect::<Vec<_>>(), "the fleets' own budgets");
        assert_eq!(next.plans[1].delete, ["decode-1"], "maxUnavailable 1, maxSurge 0 of spec.decode.rollout");
    }

    #[test]
    fn a_new_key_comes_up_beside_the_old_and_the_router_moves_once_it_has_one_of_each() {
        let prefill = fleet_of(FleetRole::Prefill, 1, "k1");
        let decode = fleet_of(FleetRole::Decode, 2, "k1");
        let fleets = inputs("k2", &prefill, &decode, (1, 2), SURGE);
        let first = step(&fleets, ("k1", true), None, 0);
        assert_eq!(
            (first.route.as_deref(), first.rollout.as_ref().unwrap().phase),
            (Some("k1"), RolloutPhase::Surging)
        );
        let created: Vec<_> = first.plans.iter().map(|p| (p.create.clone(), p.delete.len())).collect();
        assert_eq!(created, [(vec![1], 0), (vec![2], 0)], "one spare replica of each fleet, nothing retired");
        let started = first.rollout.clone().unwrap();
        assert_eq!((started.from_key.as_deref(), started.start_time.clone()), (Some("k1"), Some(Time(at(0)))));

        // The new prefill replica is ready, the new decode one is not: the router waits.
        let prefill = [prefill.clone(), vec![replica(FleetRole::Prefill, 1, "k2", true)]].concat();
        let decode_waiting = [decode.clone(), vec![replica(FleetRole::Decode, 2, "k2", false)]].concat();
        let fleets = inputs("k2", &prefill, &decode_waiting, (1, 2), SURGE);
        let waiting = step(&fleets, ("k1", true), Some(&started), 10);
        assert_eq!(waiting.route.as_deref(), Some("k1"));
        assert!(waiting.plans.iter().all(|p| p.create.is_empty() && p.delete.is_empty()), "{waiting:?}");
        assert_eq!(waiting.rollout.as_ref().unwrap().start_time, Some(Time(at(0))), "the clock runs from the start");

        let decode_ready = [decode.clone(), vec![replica(FleetRole::Decode, 2, "k2", true)]].concat();
        let fleets = inputs("k2", &prefill, &decode_ready, (1, 2), SURGE);
        let switch = step(&fleets, ("k1", true), Some(&started), 20);
        assert_eq!(switch.route.as_deref(), Some("k2"));
        assert_eq!(switch.rollout.as_ref().unwrap().phase, RolloutPhase::Switching);
        assert!(switch.plans.iter().all(|p| p.delete.is_empty()), "no ready replica goes while router pods move");

        // Router pods of k1 may remain: nothing of k1 goes.
        let moving = step(&fleets, ("k2", false), switch.rollout.as_ref(), 25);
        assert_eq!(moving.rollout.as_ref().unwrap().phase, RolloutPhase::Switching);
        assert!(moving.plans.iter().all(|p| p.delete.is_empty()), "{moving:?}");

        // Every router pod selects k2: k1 retires as k2 becomes ready, capacity kept.
        let retiring = step(&fleets, ("k2", true), moving.rollout.as_ref(), 30);
        let phase = retiring.rollout.as_ref().unwrap().phase;
        assert_eq!((phase, retiring.route.as_deref()), (RolloutPhase::Retiring, Some("k2")));
        assert_eq!(retiring.plans[0].delete, ["prefill-0"]);
        assert_eq!(retiring.plans[1].delete, ["decode-1"], "decode keeps 2 ready of its 2 (maxUnavailable 0)");
        let ready = &retiring.rollout.as_ref().unwrap().ready;
        assert_eq!(
            ready,
            &[
                KeyReadiness { key: "k1".into(), prefill: 1, decode: 2 },
                KeyReadiness { key: "k2".into(), prefill: 1, decode: 1 }
            ]
        );
    }

    #[test]
    fn without_spare_replicas_k_old_go_down_then_k_new_come_up() {
        let prefill = fleet_of(FleetRole::Prefill, 2, "k1");
        let decode = fleet_of(FleetRole::Decode, 2, "k1");
        let fleets = inputs("k2", &prefill, &decode, (2, 2), NO_SURGE);
        let down = step(&fleets, ("k1", true), None, 0);
        assert_eq!(down.rollout.as_ref().unwrap().phase, RolloutPhase::Surging);
        let deleted: Vec<_> = down.plans.iter().map(|p| (p.delete.clone(), p.create.len())).collect();
        assert_eq!(deleted, [(vec!["prefill-1".to_string()], 0), (vec!["decode-1".to_string()], 0)]);

        let gone = |mut replicas: Vec<ObservedReplica>| {
            replicas[1].terminating = true;
            replicas
        };
        let (prefill, decode) = (gone(prefill), gone(decode));
        let fleets = inputs("k2", &prefill, &decode, (2, 2), NO_SURGE);
        let up = step(&fleets, ("k1", true), down.rollout.as_ref(), 5);
        let created: Vec<_> = up.plans.iter().map(|p| (p.create.clone(), p.delete.len())).collect();
        assert_eq!(created, [(vec![2], 0), (vec![2], 0)], "the terminating replicas keep their ordinals");
    }

    #[test]
    fn a_new_key_never_ready_aborts_and_reverting_returns_without_restarting_the_old() {
        let prefill =
            [fleet_of(FleetRole::Prefill, 1, "k1"), vec![replica(FleetRole::Prefill, 1, "k2", false)]].concat();
        let decode = [fleet_of(FleetRole::Decode, 2, "k1"), vec![replica(FleetRole::Decode, 2, "k2", false)]].concat();
        let fleets = inputs("k2", &prefill, &decode, (1, 2), SURGE);
        let started = step(&fleets, ("k1", true), None, 0).rollout.unwrap();
        let in_time = step(&fleets, ("k1", true), Some(&started), 100);
        assert_eq!(in_time.rollout.as_ref().unwrap().phase, RolloutPhase::Surging);
        let late = step(&fleets, ("k1", true), Some(&started), 101);
        let aborted = late.rollout.clone().unwrap();
        assert_eq!((aborted.phase, late.route.as_deref()), (RolloutPhase::Aborted, Some("k1")));
        assert!(late.plans.iter().all(|p| p == &Plan::default()), "nothing more changes");
        let progressing = progressing(&aborted, Duration::from_secs(100)).unwrap();
        assert_eq!((progressing.status, progressing.reason.as_str()), ("False", "RolloutAborted"));
        assert!(progressing.message.contains("(100 s): the router stays on k1"), "{}", progressing.message);

        // Ready after all: the abort stands for this key.
        let prefill_ready =
            [fleet_of(FleetRole::Prefill, 1, "k1"), fleet_of(FleetRole::Prefill, 2, "k2")[1..].to_vec()];
        let decode_ready = [fleet_of(FleetRole::Decode, 2, "k1"), fleet_of(FleetRole::Decode, 3, "k2")[2..].to_vec()];
        let (prefill_ready, decode_ready) = (prefill_ready.concat(), decode_ready.concat());
        let fleets = inputs("k2", &prefill_ready, &decode_ready, (1, 2), SURGE);
        let still = step(&fleets, ("k1", true), Some(&aborted), 102);
        assert_eq!((still.rollout.unwrap().phase, still.route.as_deref()), (RolloutPhase::Aborted, Some("k1")));

        // Reverted: the new key's replicas go, the old key's stay as they are.
        let fleets = inputs("k1", &prefill, &decode, (1, 2), SURGE);
        let back = step(&fleets, ("k1", true), Some(&aborted), 200);
        assert_eq!(back.route.as_deref(), Some("k1"));
        let rollout = back.rollout.unwrap();
        assert_eq!((rollout.phase, rollout.from_key.as_deref()), (RolloutPhase::Retiring, Some("k2")));
        assert_eq!(back.plans[0], Plan { create: vec![], delete: vec!["prefill-1".into()] });
        assert_eq!(back.plans[1], Plan { create: vec![], delete: vec!["decode-2".into()] });
    }

    #[test]
    fn new_replicas_come_up_no_faster_than_the_other_fleets_ready_ones_allow() {
        // 1 prefill : 4 decode with room for everything: decode may run ahead by one prefill's
        // worth (4 replicas) of a prefill that is not ready, no further.
        let prefill = fleet_of(FleetRole::Prefill, 1, "k1");
        let decode = fleet_of(FleetRole::Decode, 4, "k1");
        let wide = Budget { max_unavailable: 0, max_surge: 8 };
        let fleets = inputs("k2", &prefill, &decode, (1, 4), wide);
        let first = step(&fleets, ("k1", true), None, 0);
        assert_eq!((first.plans[0].create.len(), first.plans[1].create.len()), (1, 4));
        // 2 prefill : 2 decode: lockstep, one ahead at most.
        let prefill = fleet_of(FleetRole::Prefill, 2, "k1");
        let decode = [fleet_of(FleetRole::Decode, 2, "k1"), vec![replica(FleetRole::Decode, 2, "k2", true)]].concat();
        let fleets = inputs("k2", &prefill, &decode, (2, 2), wide);
        let next = step(&fleets, ("k1", true), None, 0);
        assert_eq!((next.plans[0].create.len(), next.plans[1].create.len()), (2, 0), "decode waits for prefill");
    }

    /// The world the planner acts on in [`planned_steps_keep_every_bound`]: the replicas of both
    /// fleets, the router's pods and the key its Deployment selects.
    #[derive(Debug, Clone)]
    struct World {
        fleets: [Vec<ObservedReplica>; 2],
        next_ordinal: [u32; 2],
        /// The router Deployment's key, and its pods' keys and readiness.
        router_key: String,
        router_pods: Vec<(String, bool)>,
        previous: Option<RolloutStatus>,
    }

    /// One observation between steps, chosen by the property test.
    #[derive(Debug, Clone)]
    enum Event {
        /// Pods become ready (a bit mask over the unready ones).
        Ready(u16),
        /// The Deployment controller and kubelet move the router on.
        RouterProgress,
        /// The spec asks for another key.
        Spec(u8),
        /// Time passes.
        Wait(u16),
        /// Terminating replicas are gone.
        Gone,
    }

    fn events() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => any::<u16>().prop_map(Event::Ready),
            3 => Just(Event::RouterProgress),
            1 => (0..3u8).prop_map(Event::Spec),
            1 => (0..80u16).prop_map(Event::Wait),
            3 => Just(Event::Gone),
        ]
    }

    fn ready_of(replicas: &[ObservedReplica], key: &str) -> usize {
        replicas.iter().filter(|r| !r.terminating && r.ready && r.key == key).count()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// No sequence of observations makes the planner route to two keys at once or to a key
        /// without a ready pair, take a fleet below its floor or above its ceiling, delete a
        /// replica a router pod may still use, or break the ratio bound of a key a router pod
        /// selects; and once observations stop changing, the rollout completes (or aborted).
        #[test]
        fn planned_steps_keep_every_bound(
            sizes in (1..4i32, 1..5i32),
            budget in (0..3i32, 0..3i32),
            story in prop::collection::vec(events(), 1..60),
        ) {
            let (prefill_replicas, decode_replicas) = sizes;
            let coherent = Budget { max_unavailable: budget.0, max_surge: budget.1 };
            let keys = ["k0", "k1", "k2"];
            let mut key = "k0";
            let initial = |role, n: i32| (0..n as u32).map(|o| replica(role, o, "k0", true)).collect::<Vec<_>>();
            let mut world = World {
                fleets: [initial(FleetRole::Prefill, prefill_replicas), initial(FleetRole::Decode, decode_replicas)],
                next_ordinal: [prefill_replicas as u32, decode_replicas as u32],
                router_key: "k0".into(),
                router_pods: vec![("k0".into(), true)],
                previous: None,
            };
            let mut now = 0i64;
            let benign = std::iter::repeat_n([Event::Gone, Event::Ready(u16::MAX), Event::RouterProgress], 40).flatten();
            for event in story.into_iter().chain(benign) {
                match event {
                    Event::Ready(mask) => {
                        let unready = world.fleets.iter_mut().flatten().filter(|r| !r.ready && !r.terminating);
                        for (i, r) in unready.enumerate() {
                            r.ready |= mask & (1 << (i % 16)) != 0;
                        }
                    }
                    Event::RouterProgress => {
                        let target = world.router_key.clone();
                        if let Some(pod) = world.router_pods.iter_mut().find(|(k, ready)| *k == target && !ready) {
                            pod.1 = true;
                        } else if world.router_pods.iter().any(|(k, ready)| *k == target && *ready) {
                            world.router_pods.retain(|(k, _)| *k == target);
                        } else {
                            world.router_pods.push((target, false));
                        }
                    }
                    Event::Spec(k) => key = keys[usize::from(k)],
                    Event::Wait(seconds) => now += i64::from(seconds),
                    Event::Gone => world.fleets.iter_mut().for_each(|f| f.retain(|r| !r.terminating)),
                }
                now += 1;
                let settled = world.router_pods.len() == 1 && world.router_pods[0].0 == world.router_key;
                let revision = format!("rev-{key}");
                let fleets: Vec<FleetInput<'_>> = [FleetRole::Prefill, FleetRole::Decode]
                    .into_iter()
                    .zip(&world.fleets)
                    .zip([prefill_replicas, decode_replicas])
                    .map(|((role, observed), replicas)| FleetInput {
                        role, replicas, revision: &revision, observed, in_place: IN_PLACE, coherent,
                    })
                    .collect();
                let next = plan(&Input {
                    key,
                    fleets: &fleets,
                    router: Some(RouterInput { key: Some(&world.router_key), settled }),
                    previous: world.previous.as_ref(),
                    now: at(now),
                    abort_after: Duration::from_secs(100),
                });
                let route = next.route.clone().unwrap();
                let phase = next.rollout.as_ref().unwrap().phase;
                // One key, and a moved router always finds a pair.
                if route != world.router_key {
                    for fleet in &world.fleets {
                        prop_assert!(ready_of(fleet, &route) >= 1, "routed to {route} without a pair: {world:?}");
                    }
                }
                // Keys some router pod may select, now or once the Deployment moves.
                let selected: BTreeSet<String> =
                    world.router_pods.iter().map(|(k, _)| k.clone()).chain([route.clone()]).collect();
                let sizes = [prefill_replicas as usize, decode_replicas as usize];
                let unavailable = if coherent.max_unavailable <= 0 && coherent.max_surge <= 0 { 1 } else { coherent.max_unavailable.max(0) as usize };
                let before: Vec<Vec<ObservedReplica>> = world.fleets.to_vec();
                for (at_fleet, plan) in next.plans.iter().enumerate() {
                    let fleet = &world.fleets[at_fleet];
                    let kept = |r: &&ObservedReplica| !r.terminating && !plan.delete.contains(&r.name);
                    let ready_after = fleet.iter().filter(kept).filter(|r| r.ready).count();
                    let ready_before = fleet.iter().filter(|r| !r.terminating && r.ready).count();
                    if phase != RolloutPhase::Complete {
                        let floor = sizes[at_fleet].saturating_sub(unavailable);
                        prop_assert!(ready_after >= floor.min(ready_before), "fleet {at_fleet} below its floor: {plan:?} {world:?}");
                        let live_before = fleet.iter().filter(|r| !r.terminating).count();
                        let live_after = fleet.iter().filter(kept).count() + plan.create.len();
                        let ceiling = sizes[at_fleet] + coherent.max_surge.max(0) as usize;
                        prop_assert!(live_after <= ceiling.max(live_before), "fleet {at_fleet} above its ceiling: {plan:?}");
                    }
                    for name in &plan.delete {
                        let deleted = fleet.iter().find(|r| &r.name == name).unwrap();
                        prop_assert!(
                            !(deleted.ready && selected.contains(&deleted.key) && !settled && deleted.key != key),
                            "deleted {name} of {} while a router pod may use it", deleted.key
                        );
                    }
                    prop_assert!(plan.create.iter().all(|o| !fleet.iter().any(|r| r.ordinal == *o)), "an ordinal twice");
                }
                // The ratio bound, for keys a router pod selects: what the step leaves ready, and
                // what it would be if every created replica became ready.
                if phase != RolloutPhase::Complete {
                    for selected_key in &selected {
                        let counts: Vec<(usize, usize)> = before.iter().zip(&next.plans).map(|(fleet, plan)| {
                            let ready = fleet.iter().filter(|r| !r.terminating && !plan.delete.contains(&r.name) && r.ready && &r.key == selected_key).count();
                            let live = fleet.iter().filter(|r| !r.terminating && !plan.delete.contains(&r.name) && &r.key == selected_key).count()
                                + if selected_key == key { plan.create.len() } else { 0 };
                            (ready, live)
                        }).collect();
                        let before_ready: Vec<usize> = before.iter().map(|f| ready_of(f, selected_key)).collect();
                        let bound = sizes[0].max(sizes[1]);
                        let was = deviation(before_ready[0], sizes[0], before_ready[1], sizes[1]);
                        let now_dev = deviation(counts[0].0, sizes[0], counts[1].0, sizes[1]);
                        prop_assert!(now_dev <= bound.max(was), "key {selected_key}: ready {counts:?} of {sizes:?}");
                        if selected_key == key {
                            for (f, g) in [(0, 1), (1, 0)] {
                                let created_ahead = counts[f].1 * sizes[g];
                                let allowed = counts[g].0 * sizes[f] + bound;
                                let grew = !next.plans[f].create.is_empty();
                                prop_assert!(!grew || created_ahead <= allowed, "fleet {f} created ahead of its pair: {counts:?}");
                            }
                        }
                    }
                }
                // Carry the step out.
                for (at_fleet, plan) in next.plans.iter().enumerate() {
                    let fleet = &mut world.fleets[at_fleet];
                    fleet.iter_mut().filter(|r| plan.delete.contains(&r.name)).for_each(|r| r.terminating = true);
                    let role = if at_fleet == 0 { FleetRole::Prefill } else { FleetRole::Decode };
                    for ordinal in &plan.create {
                        let mut created = replica(role, *ordinal, key, false);
                        created.revision = revision.clone();
                        fleet.push(created);
                        world.next_ordinal[at_fleet] = world.next_ordinal[at_fleet].max(ordinal + 1);
                    }
                }
                world.router_key = route;
                world.previous = next.rollout;
            }
            let last = world.previous.clone().unwrap();
            if last.phase != RolloutPhase::Aborted {
                prop_assert_eq!(last.phase, RolloutPhase::Complete, "{:?}", world);
                prop_assert_eq!(&world.router_key, key);
                for (fleet, size) in world.fleets.iter().zip([prefill_replicas, decode_replicas]) {
                    prop_assert!(fleet.iter().filter(|r| !r.terminating).all(|r| r.key == key && r.ready));
                    prop_assert_eq!(fleet.iter().filter(|r| !r.terminating).count(), size as usize);
                }
            }
        }
    }
}
