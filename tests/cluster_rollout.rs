//! Version-coherent PD rollouts on the real kube-apiserver, etcd and kube-controller-manager of
//! `scripts/control-plane.sh`, with the real Deployment and ReplicaSet controllers moving the
//! router and the test kubelet running every pod: a monitor watches every pod of the namespace
//! and, at every moment it observes, reads each router pod's selectors off its command line,
//! matches them against the server pods, and checks that no router pod matches servers of two KV
//! compatibility keys, that each key a router pod selects has a ready server of each fleet, that
//! each fleet's ready replicas and live replicas stay within their bounds, and that for each key a
//! router pod selects the ready prefill:decode ratio stays within one replica of the smaller fleet
//! of its target. Through (a) a model revision change with a
//! spare replica of each fleet, (b) the same with `maxSurge: 0`, (c) a new revision whose servers
//! never become ready (aborted, the old key serving throughout, and reverting returns to it
//! without restarting its pods), (d) a change that keeps the key (each fleet in place, the router
//! untouched).

mod common;
mod fleet;
mod kubelet;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kvpilot::api::{InferenceDeployment, RolloutPhase};
use serde_json::{Value, json};

use fleet::{Fleet, Operator, SERVICE_PODS, condition, is_ready, label, wait_for_or};
use kubelet::Timing;

const KEY: &str = "kvpilot.dev/kv-compat";
/// Pods the test kubelet never starts: the servers of a version that never becomes ready.
const NEVER_STARTS: &str = "kvpilot-test/start";
/// How long a rollout may take on a loaded two-core machine.
const ROLLOUT: Duration = Duration::from_secs(240);

/// One fleet's bounds while the monitor is armed.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    replicas: usize,
    /// Ready replicas it keeps at least.
    floor: usize,
    /// Live replicas it holds at most.
    ceiling: usize,
}

/// The bounds the monitor checks, per fleet (`kvpilot-prefill`, `kvpilot-decode`).
type Expect = BTreeMap<&'static str, Bounds>;

#[derive(Default)]
struct Seen {
    pods: BTreeMap<String, Pod>,
    expect: Option<Expect>,
    violations: Vec<String>,
    moments: usize,
    /// Every key a router pod was seen selecting.
    routed: BTreeSet<String>,
}

/// Watches every pod of the namespace and checks each moment it observes.
struct Monitor {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn app(pod: &Pod) -> &str {
    label(pod, "app.kubernetes.io/name")
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The `key=value` items after `flag` in a router's arguments, up to the next flag.
fn selector_after(args: &[String], flag: &str) -> Vec<(String, String)> {
    let Some(at) = args.iter().position(|a| a == flag) else { return Vec::new() };
    args[at + 1..]
        .iter()
        .take_while(|a| !a.starts_with("--"))
        .filter_map(|item| item.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn matches(pod: &Pod, selector: &[(String, String)]) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| label(pod, k) == v)
}

impl Seen {
    /// Checks the moment the pods now describe.
    fn check(&mut self) {
        self.moments += 1;
        let servers: Vec<&Pod> = self.pods.values().filter(|p| app(p) != "kvpilot-router").collect();
        let routers: Vec<&Pod> = self.pods.values().filter(|p| app(p) == "kvpilot-router").collect();
        let mut problems = Vec::new();
        let mut selected = BTreeSet::new();
        for router in &routers {
            let args = router.spec.as_ref().unwrap().containers[0].args.clone().unwrap_or_default();
            let mut keys = BTreeSet::new();
            for flag in ["--prefill-selector", "--decode-selector"] {
                let selector = selector_after(&args, flag);
                keys.extend(servers.iter().filter(|p| matches(p, &selector)).map(|p| label(p, KEY).to_string()));
                if let Some((_, key)) = selector.iter().find(|(k, _)| k == KEY) {
                    self.routed.insert(key.clone());
                    if !terminating(router) {
                        selected.insert(key.clone());
                    }
                }
            }
            if keys.len() > 1 {
                problems.push(format!("router pod {} matches servers of keys {keys:?}", name(router)));
            }
        }
        if let Some(expect) = &self.expect {
            let live = |app_name: &'static str| servers.iter().filter(move |p| app(p) == app_name && !terminating(p));
            for (app_name, bounds) in expect {
                let ready = live(app_name).filter(|p| is_ready(p)).count();
                let count = live(app_name).count();
                if ready < bounds.floor || count > bounds.ceiling {
                    problems.push(format!("{app_name}: {ready} ready, {count} live, bounds {bounds:?}"));
                }
            }
            for key in &selected {
                let serving = |app_name: &'static str| live(app_name).any(|p| is_ready(p) && label(p, KEY) == key);
                if !serving("kvpilot-prefill") || !serving("kvpilot-decode") {
                    problems.push(format!("a router pod selects key {key}, which has no ready pair"));
                }
            }
            let (prefill, decode) = (expect["kvpilot-prefill"], expect["kvpilot-decode"]);
            for key in &selected {
                let ready =
                    |app_name: &'static str| live(app_name).filter(|p| is_ready(p) && label(p, KEY) == key).count();
                let (p, d) = (ready("kvpilot-prefill"), ready("kvpilot-decode"));
                if (p * decode.replicas).abs_diff(d * prefill.replicas) > prefill.replicas.max(decode.replicas) {
                    problems
                        .push(format!("key {key}: {p} prefill and {d} decode ready, of {prefill:?} and {decode:?}"));
                }
            }
        }
        if !problems.is_empty() {
            let pods: Vec<String> = self
                .pods
                .values()
                .map(|p| {
                    let state = if terminating(p) {
                        "terminating"
                    } else if is_ready(p) {
                        "ready"
                    } else {
                        "starting"
                    };
                    format!("{} {} {state}", name(p), label(p, KEY))
                })
                .collect();
            self.violations.push(format!("{}: {pods:?}", problems.join("; ")));
        }
    }
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

impl Monitor {
    fn start(fleet: &Fleet) -> Monitor {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let pods: Api<Pod> = fleet.pods();
        let shared = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default().labels(SERVICE_PODS)).boxed();
            let mut listing = BTreeMap::new();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut seen = shared.lock().unwrap();
                match event {
                    watcher::Event::Apply(pod) => {
                        seen.pods.insert(name(&pod).to_string(), pod);
                    }
                    watcher::Event::Delete(pod) => {
                        seen.pods.remove(name(&pod));
                    }
                    // A (re)list: its pods are one moment, checked once the list is done.
                    watcher::Event::Init => {
                        listing.clear();
                        continue;
                    }
                    watcher::Event::InitApply(pod) => {
                        listing.insert(name(&pod).to_string(), pod);
                        continue;
                    }
                    watcher::Event::InitDone => seen.pods = std::mem::take(&mut listing),
                }
                seen.check();
            }
        });
        Monitor { seen, task }
    }

    /// Checks the bounds of `expect` from now on.
    fn arm(&self, expect: Expect) {
        self.seen.lock().unwrap().expect = Some(expect);
    }

    /// Asserts that no observed moment broke a bound; returns how many moments were checked and
    /// the keys router pods selected.
    fn assert_clean(&self) -> (usize, BTreeSet<String>) {
        let seen = self.seen.lock().unwrap();
        assert!(
            seen.violations.is_empty(),
            "{} of {} moments:\n{}",
            seen.violations.len(),
            seen.moments,
            seen.violations.join("\n")
        );
        (seen.moments, seen.routed.clone())
    }
}

fn quick() -> Timing {
    Timing::new(Duration::from_millis(300), Duration::from_millis(300))
}

/// A PD service of `prefill` and `decode` replicas of Llama 3.1 8B at model revision `r1`, its
/// servers given up on after 30 s of start-up (so an abort comes after 60 s), with `rollout` as
/// its spec.rollout.
fn service(fleet: &Fleet, prefill: u32, decode: u32, rollout: Value) -> Value {
    fleet.pd_example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["model"]["revision"] = json!("r1");
        // Fixed counts: the example's prefill follows decode by a ratio, which this test leaves out.
        let prefill_spec = o["spec"]["prefill"].as_object_mut().unwrap();
        for follows in ["ratio", "minReplicas", "maxReplicas"] {
            prefill_spec.remove(follows);
        }
        prefill_spec.insert("replicas".into(), json!(prefill));
        o["spec"]["decode"]["replicas"] = json!(decode);
        o["spec"]["prefill"]["startupTimeoutSeconds"] = json!(30);
        o["spec"]["decode"]["startupTimeoutSeconds"] = json!(30);
        o["spec"]["rollout"] = rollout;
    })
}

/// The service's server pods and the router Deployment, once every server pod is of one key, ready
/// and not terminating, and the router's pods select that key and are ready.
async fn converged_on_one_key(fleet: &Fleet, name: &str, servers: usize) -> (String, Vec<Pod>, Deployment) {
    let deployments: Api<Deployment> = Api::namespaced(fleet.client.clone(), fleet.ns());
    let mut last = String::new();
    wait_for_or(&format!("{name} on one key"), ROLLOUT, &mut last, async |last| {
        let resource = fleet.deployments().get(name).await.ok()?;
        let status = resource.status.clone()?;
        let key = status.kv_compat.clone()?;
        let pods = fleet.pods().list(&Default::default()).await.ok()?.items;
        let router = deployments.get(&format!("{name}-router")).await.ok()?;
        let (routers, servers_now): (Vec<&Pod>, Vec<&Pod>) = pods.iter().partition(|p| app(p) == "kvpilot-router");
        let done = status.observed_generation == resource.metadata.generation
            && status.rollout.as_ref().is_some_and(|r| r.phase == RolloutPhase::Complete)
            && condition(&resource, "Progressing").is_some_and(|c| c.status == "False")
            && servers_now.len() == servers
            && servers_now.iter().all(|p| label(p, KEY) == key && is_ready(p) && !terminating(p))
            && !routers.is_empty()
            && routers.iter().all(|p| label(p, KEY) == key && is_ready(p) && !terminating(p))
            && label_of(&router) == key;
        *last = format!(
            "key {key}, rollout {:?}, pods {:?}",
            status.rollout.map(|r| r.phase),
            pods.iter().map(|p| format!("{} {} {}", name_of(p), label(p, KEY), is_ready(p))).collect::<Vec<_>>()
        );
        done.then(|| (key, servers_now.into_iter().cloned().collect(), router))
    })
    .await
}

fn name_of(pod: &Pod) -> String {
    name(pod).to_string()
}

fn label_of(deployment: &Deployment) -> String {
    deployment.metadata.labels.as_ref().and_then(|l| l.get(KEY)).cloned().unwrap_or_default()
}

/// A fleet whose kubelet starts every pod but those labelled never to start, and a node for it.
async fn fleet_for(cluster: &common::cluster::Cluster, prefix: &str) -> Fleet {
    let selector = format!("{SERVICE_PODS},{NEVER_STARTS}!=never");
    Fleet::with_kubelet_for(cluster, prefix, quick(), &selector).await
}

fn bounds(replicas: usize, max_unavailable: usize, max_surge: usize) -> Bounds {
    Bounds { replicas, floor: replicas - max_unavailable, ceiling: replicas + max_surge }
}

/// Changes the model revision of the running service to `revision` and follows the coherent
/// rollout to its end under `expect`.
async fn roll_the_model_revision(fleet: &Fleet, operator: &mut Operator, name: &str, expect: Expect) {
    let total: usize = expect.values().map(|b| b.replicas).sum();
    let (old_key, old_pods, _) = converged_on_one_key(fleet, name, total).await;
    let monitor = Monitor::start(fleet);
    monitor.arm(expect);
    fleet.patch_spec(name, json!({"model": {"revision": "r2"}})).await;
    let (new_key, pods, router) = converged_on_one_key(fleet, name, total).await;
    assert_ne!(new_key, old_key, "a model revision is part of the key");
    assert!(pods.iter().all(|p| !old_pods.iter().any(|o| o.metadata.uid == p.metadata.uid)), "every server replaced");
    assert_eq!(label_of(&router), new_key);
    let resource = fleet.deployments().get(name).await.unwrap();
    let rollout = resource.status.unwrap().rollout.unwrap();
    assert_eq!((rollout.from_key.as_deref(), rollout.to_key.as_str()), (Some(old_key.as_str()), new_key.as_str()));
    let (moments, routed) = monitor.assert_clean();
    assert!(moments > 10, "the monitor saw the rollout ({moments} moments)");
    assert_eq!(routed, BTreeSet::from([old_key, new_key]), "router pods selected the old key, then the new");
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_revision_change_surges_then_moves_the_router_then_retires_the_old_key() {
    let cluster = cluster_or_skip!();
    let fleet = fleet_for(&cluster, "coherent-surge").await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&service(&fleet, 2, 3, json!({"maxSurge": 1, "maxUnavailable": 0})));
    let fleets = BTreeMap::from([("kvpilot-prefill", bounds(2, 0, 1)), ("kvpilot-decode", bounds(3, 0, 1))]);
    roll_the_model_revision(&fleet, &mut operator, &name, fleets).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_spare_gpus_the_same_rollout_goes_in_steps() {
    let cluster = cluster_or_skip!();
    let fleet = fleet_for(&cluster, "coherent-steps").await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&service(&fleet, 2, 3, json!({"maxSurge": 0, "maxUnavailable": 1})));
    let fleets = BTreeMap::from([("kvpilot-prefill", bounds(2, 1, 0)), ("kvpilot-decode", bounds(3, 1, 0))]);
    roll_the_model_revision(&fleet, &mut operator, &name, fleets).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_never_becomes_ready_is_aborted_and_reverting_returns_to_the_old_key() {
    let cluster = cluster_or_skip!();
    let fleet = fleet_for(&cluster, "coherent-abort").await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&service(&fleet, 1, 2, json!({})));
    let (old_key, old_pods, old_router) = converged_on_one_key(&fleet, &name, 3).await;
    let monitor = Monitor::start(&fleet);
    let fleets = BTreeMap::from([("kvpilot-prefill", bounds(1, 0, 1)), ("kvpilot-decode", bounds(2, 0, 1))]);
    monitor.arm(fleets);

    let never = json!({NEVER_STARTS: "never"});
    let broken = json!({"model": {"revision": "r2"}, "prefill": {"podLabels": never}, "decode": {"podLabels": never}});
    fleet.patch_spec(&name, broken).await;
    let mut last = String::new();
    let aborted = wait_for_or("the rollout aborted", ROLLOUT, &mut last, async |last| {
        let resource = fleet.deployments().get(&name).await.ok()?;
        let progressing = condition(&resource, "Progressing")?.clone();
        *last = format!("{progressing:?}");
        (progressing.reason == "RolloutAborted").then_some(resource)
    })
    .await;
    let status = aborted.status.clone().unwrap();
    let new_key = status.kv_compat.clone().unwrap();
    assert_ne!(new_key, old_key);
    assert_eq!(status.rollout.as_ref().map(|r| r.phase), Some(RolloutPhase::Aborted));
    assert_eq!(condition(&aborted, "Progressing").unwrap().status, "False");
    assert_eq!(condition(&aborted, "Ready").unwrap().status, "True", "the old key keeps serving");
    let out = cluster.kubectl_ok(&["get", "infd", &name, "-n", fleet.ns(), "-o", "wide", "--no-headers"]);
    assert!(out.split_whitespace().any(|column| column == "Aborted"), "kubectl get -o wide shows the phase: {out}");
    let deployments: Api<Deployment> = Api::namespaced(fleet.client.clone(), fleet.ns());
    let router = deployments.get(&format!("{name}-router")).await.unwrap();
    assert_eq!(label_of(&router), old_key, "the router stays on the old key");
    assert_eq!(router.metadata.generation, old_router.metadata.generation, "the router was never moved");
    let pods = fleet.pods().list(&Default::default()).await.unwrap().items;
    let new_servers = pods.iter().filter(|p| label(p, KEY) == new_key).count();
    assert_eq!(new_servers, 2, "one spare replica of each fleet tried the new key");
    let events = fleet.assert_no_repeated_events().await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("RolloutAborted")), "a Warning event says why");

    fleet
        .patch_spec(
            &name,
            json!({"model": {"revision": "r1"}, "prefill": {"podLabels": null}, "decode": {"podLabels": null}}),
        )
        .await;
    let (key, pods, router) = converged_on_one_key(&fleet, &name, 3).await;
    assert_eq!(key, old_key, "reverting returns to the old key");
    let uids = |pods: &[Pod]| pods.iter().map(|p| p.metadata.uid.clone().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(uids(&pods), uids(&old_pods), "the old key's servers were never restarted");
    assert_eq!(router.metadata.generation, old_router.metadata.generation, "nor was the router");
    let (_, routed) = monitor.assert_clean();
    assert_eq!(routed, BTreeSet::from([old_key]), "no router pod ever selected the new key");
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_keeps_the_key_rolls_each_fleet_in_place_and_leaves_the_router_alone() {
    let cluster = cluster_or_skip!();
    let fleet = fleet_for(&cluster, "coherent-inplace").await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&service(&fleet, 2, 2, json!({})));
    let (old_key, old_pods, old_router) = converged_on_one_key(&fleet, &name, 4).await;
    let router_pods = |pods: Vec<Pod>| {
        pods.into_iter().filter(|p| app(p) == "kvpilot-router").map(|p| p.metadata.uid.unwrap()).collect::<Vec<_>>()
    };
    let routers_before = router_pods(fleet.pods().list(&Default::default()).await.unwrap().items);
    let monitor = Monitor::start(&fleet);
    // Each fleet's own rollout: maxUnavailable 1, maxSurge 0.
    let fleets = BTreeMap::from([("kvpilot-prefill", bounds(2, 1, 0)), ("kvpilot-decode", bounds(2, 1, 0))]);
    monitor.arm(fleets);

    let env = json!([{"name": "SGLANG_LOG_LEVEL", "value": "debug"}]);
    fleet.patch_spec(&name, json!({"prefill": {"env": env}, "decode": {"env": env}})).await;
    let mut last = String::new();
    let (key, pods) = wait_for_or("both fleets rolled in place", ROLLOUT, &mut last, async |last| {
        let (key, pods, _) = converged_on_one_key(&fleet, &name, 4).await;
        let rolled = pods.iter().all(|p| {
            let env = p.spec.as_ref().unwrap().containers[0].env.clone().unwrap_or_default();
            env.iter().any(|e| e.name == "SGLANG_LOG_LEVEL")
        });
        *last = format!("{:?}", pods.iter().map(name_of).collect::<Vec<_>>());
        rolled.then_some((key, pods))
    })
    .await;
    assert_eq!(key, old_key, "an environment variable outside the key keeps it");
    assert!(pods.iter().all(|p| !old_pods.iter().any(|o| o.metadata.uid == p.metadata.uid)), "rolled in place");
    let deployments: Api<Deployment> = Api::namespaced(fleet.client.clone(), fleet.ns());
    let router = deployments.get(&format!("{name}-router")).await.unwrap();
    assert_eq!(router.metadata.generation, old_router.metadata.generation, "the router's Deployment untouched");
    assert_eq!(router_pods(fleet.pods().list(&Default::default()).await.unwrap().items), routers_before);
    let resource: InferenceDeployment = fleet.deployments().get(&name).await.unwrap();
    let rollout = resource.status.unwrap().rollout.unwrap();
    assert_eq!((rollout.phase, rollout.from_key), (RolloutPhase::Complete, None), "never a rollout between keys");
    let (_, routed) = monitor.assert_clean();
    assert_eq!(routed, BTreeSet::from([old_key]));
    operator.assert_no_failures().await;
}
