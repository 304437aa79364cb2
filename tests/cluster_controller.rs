//! The controller against the real kube-apiserver, etcd and kube-controller-manager of
//! `scripts/control-plane.sh`: convergence of the examples, server-side apply with field
//! removal and other managers, rollout bounds observed continuously, deletion through the
//! garbage collector, ConfigMap sources, an operator killed mid-rollout and leader election.
//! Each test has its own namespace, its own operator process(es) watching only it, and the
//! test kubelet (`tests/kubelet`) for its pods: bound to a node, Ready after a delay, deleted
//! gracefully (a real API server keeps a terminating pod until its kubelet lets go).

mod common;
mod fleet;
mod kubelet;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use fleet::{DECODE_PODS, Fleet, SETTLE, condition, is_ready, label, until};
use kubelet::Timing;

fn quick() -> Timing {
    Timing::new(Duration::from_millis(200), Duration::from_millis(300))
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(common::cluster::repo(&format!("tests/fixtures/configs/{name}.json"))).unwrap()
}

/// Field managers of an object's main resource (status and binding subresources aside).
fn managers(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref().unwrap_or_default().is_empty())
        .filter_map(|f| f.manager.clone())
        .collect()
}

/// What each example's header comment documents: the SettingsValid reason and the rules whose
/// rewrites are recorded.
fn documented(file: &str) -> (&'static str, &'static [&'static str]) {
    match file {
        "deepseek-v3-mla-rejected.yaml" => ("R9", &[]),
        "mimo-pure-swa-rewrite.yaml" => ("Rewritten", &["R2"]),
        "qwen3-next-hybrid-ssm.yaml" => ("Rewritten", &["R1", "M1"]),
        "gemma-3-1b-sliding-full-pool.yaml"
        | "gpt-oss-20b-hybrid-swa.yaml"
        | "llama-3.1-8b-full.yaml"
        | "deepseek-v3-tp16-multinode.yaml"
        | "deepseek-v3-tp16-volcano.yaml"
        | "deepseek-v4-eagle-draft.yaml" => ("Valid", &[]),
        other => panic!("examples/{other} has no documented state in this test: add it"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_reaches_its_documented_state() {
    let cluster = cluster_or_skip!();
    // examples/deepseek-v3-tp16-volcano.yaml asks for Volcano, whose PodGroup API must be served.
    cluster.install_gang_crds();
    let fleet = Fleet::new(&cluster, "ctl-examples", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    // ConfigMaps first, so that a source is there when its resource is first reconciled.
    let mut examples = common::cluster::examples_in(fleet.ns());
    examples.sort_by_key(|(_, o)| o["kind"] != "ConfigMap");
    for (_, object) in &examples {
        fleet.create(object);
    }
    for (file, object) in examples.iter().filter(|(_, o)| o["kind"] == "InferenceDeployment") {
        let name = object["metadata"]["name"].as_str().unwrap();
        let (reason, rewritten) = documented(file);
        if !matches!(reason, "Valid" | "Rewritten") {
            until(&format!("{name} rejected with {reason}"), async || {
                let resource = fleet.deployments().get(name).await.ok()?;
                let settings = condition(&resource, "SettingsValid")?;
                (settings.status == "False"
                    && settings.reason == reason
                    && resource.status.as_ref()?.observed_generation == resource.metadata.generation)
                    .then_some(())
            })
            .await;
            assert!(fleet.pods_of(name).await.is_empty(), "{file}: no pods");
            assert!(fleet.config_maps().get_opt(&format!("{name}-sglang")).await.unwrap().is_none(), "{file}");
            assert!(fleet.services().get_opt(&format!("{name}-decode")).await.unwrap().is_none(), "{file}");
            continue;
        }
        let replicas = object["spec"]["decode"]["replicas"].as_u64().unwrap() as usize;
        let resource = fleet.converged(name, replicas).await;
        let settings = condition(&resource, "SettingsValid").unwrap();
        assert_eq!((settings.status.as_str(), settings.reason.as_str()), ("True", reason), "{file}");
        let rules: Vec<&str> = resource.status.as_ref().unwrap().rewrites.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(rules, rewritten, "{file}: recorded rewrites");
        let decode = resource.status.as_ref().unwrap().decode.clone().unwrap();
        assert_eq!(
            (decode.replicas, decode.ready_replicas, decode.updated_replicas),
            (replicas as i32, replicas as i32, replicas as i32)
        );
        let config_map = fleet.config_maps().get(&format!("{name}-sglang")).await.unwrap();
        let args: Value = serde_json::from_str(&config_map.data.unwrap()["sglangArgs.json"]).unwrap();
        let decode: Vec<String> = serde_json::from_value(args["decode"].clone()).unwrap();
        for pod in fleet.pods_of(name).await {
            let sglang = &pod.spec.as_ref().unwrap().containers[0];
            assert_eq!(sglang.args.as_ref().unwrap()[..decode.len()], decode[..], "{file}: {}", pod.name_any());
        }
        let service = fleet.services().get(&format!("{name}-decode")).await.unwrap();
        assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"), "{file}: headless");
    }
    operator.assert_no_failures().await;
    fleet.assert_no_repeated_events().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_fields_leave_the_pods_and_other_managers_fields_stay() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-ssa", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["env"] = json!([{"name": "EXTRA", "value": "1"}]);
        o["spec"]["decode"]["tolerations"] = json!([{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]);
        o["spec"]["decode"]["nodeSelector"] = json!({"pool": "gpu"});
        o["spec"]["decode"]["podLabels"] = json!({"team": "a"});
        o["spec"]["decode"]["podAnnotations"] = json!({"note": "x"});
    }));
    fleet.converged(&name, 2).await;
    let service_name = format!("{name}-decode");
    fleet.cluster.kubectl_ok(&["label", "service", &service_name, "-n", fleet.ns(), "owner=user"]);

    fleet
        .patch_spec(
            &name,
            json!({"decode": {"env": null, "tolerations": null, "nodeSelector": null, "podLabels": null,
                              "podAnnotations": null, "replicas": 3}}),
        )
        .await;
    fleet.converged(&name, 3).await;
    for pod in fleet.pods_of(&name).await {
        let spec = pod.spec.as_ref().unwrap();
        let container = &spec.containers[0];
        assert!(container.env.iter().flatten().all(|e| e.name != "EXTRA"), "env var left: {:?}", container.env);
        assert!(spec.tolerations.iter().flatten().all(|t| t.key.as_deref() != Some("gpu")), "{:?}", spec.tolerations);
        assert!(spec.node_selector.as_ref().is_none_or(|s| s.is_empty()), "{:?}", spec.node_selector);
        assert_eq!(label(&pod, "team"), "", "pod label left");
        assert!(pod.annotations().get("note").is_none(), "pod annotation left");
        assert_eq!(managers(&pod.metadata), BTreeSet::from(["kvpilot".to_string()]), "{}", pod.name_any());
    }

    let service = fleet.services().get(&service_name).await.unwrap();
    assert_eq!(service.labels().get("owner").map(String::as_str), Some("user"), "the user's label stays");
    let service_managers = managers(&service.metadata);
    assert!(service_managers.contains("kvpilot") && service_managers.len() == 2, "{service_managers:?}");
    let applied: Vec<_> =
        service.metadata.managed_fields.iter().flatten().filter(|f| f.operation.as_deref() == Some("Apply")).collect();
    assert!(applied.iter().all(|f| f.manager.as_deref() == Some("kvpilot")), "one applier: {applied:?}");
    let config_map = fleet.config_maps().get(&format!("{name}-sglang")).await.unwrap();
    assert_eq!(managers(&config_map.metadata), BTreeSet::from(["kvpilot".to_string()]));
    operator.assert_no_failures().await;
    fleet.assert_no_repeated_events().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_goes_through_the_garbage_collector_and_deleted_pods_come_back() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-gc", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let llama = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |_| {}));
    let gemma = fleet.create(&fleet.example("gemma-3-1b-sliding-full-pool.yaml", |_| {}));
    fleet.converged(&llama, 2).await;
    fleet.converged(&gemma, 1).await;

    let first = format!("{llama}-decode-0");
    let old_uid = fleet.pods().get(&first).await.unwrap().metadata.uid;
    fleet.pods().delete(&first, &DeleteParams::default()).await.unwrap();
    let replaced = fleet.converged(&llama, 2).await;
    let pods = fleet.pods_of(&llama).await;
    assert!(pods.iter().all(|p| p.metadata.uid != old_uid), "the deleted pod is gone and replaced: {pods:?}");
    assert_eq!(replaced.status.unwrap().decode.unwrap().ready_replicas, 2);

    // Foreground: the resource stays (finalizer foregroundDeletion) until its dependents are gone.
    let out = fleet.cluster.kubectl(&[
        "delete",
        "infd",
        &llama,
        "-n",
        fleet.ns(),
        "--cascade=foreground",
        "--wait=true",
        "--timeout=120s",
    ]);
    assert!(out.status.success(), "foreground deletion: {}", common::cluster::text(&out.stderr));
    assert!(fleet.pods_of(&llama).await.is_empty(), "the pods went first");
    for (kind, object) in [("configmap", format!("{llama}-sglang")), ("service", format!("{llama}-decode"))] {
        assert!(fleet.cluster.get_json(&[kind, &object, "-n", fleet.ns()]).is_none(), "{kind}/{object} left");
    }

    fleet.deployments().delete(&gemma, &DeleteParams::background()).await.unwrap();
    until("the garbage collector removes gemma's objects", async || {
        let none_left = fleet.pods_of(&gemma).await.is_empty()
            && fleet.config_maps().get_opt(&format!("{gemma}-sglang")).await.ok()?.is_none()
            && fleet.services().get_opt(&format!("{gemma}-decode")).await.ok()?.is_none();
        none_left.then_some(())
    })
    .await;
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_map_edit_to_an_unrunnable_model_is_rejected_and_leaves_the_pods_alone() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-source", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "model-config", "namespace": fleet.ns()},
        "data": {"config.json": fixture("llama-3.1-8b-instruct")}});
    fleet.create(&config_map);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["model"]["config"] = json!({"configMapRef": {"name": "model-config"}});
    }));
    fleet.converged(&name, 2).await;
    let uids = |pods: Vec<Pod>| pods.into_iter().filter_map(|p| p.metadata.uid).collect::<BTreeSet<_>>();
    let running = uids(fleet.pods_of(&name).await);

    let edit = |config: String| Patch::Merge(json!({"data": {"config.json": config}}));
    fleet
        .config_maps()
        .patch("model-config", &PatchParams::default(), &edit(fixture("custom-pure-swa")))
        .await
        .unwrap();
    until("the edit is rejected (R2)", async || {
        let resource = fleet.deployments().get(&name).await.ok()?;
        let settings = condition(&resource, "SettingsValid")?;
        (settings.status == "False" && settings.reason == "R2").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = fleet.pods_of(&name).await;
    assert!(pods.iter().all(|p| p.metadata.deletion_timestamp.is_none()), "running pods are left alone");
    assert_eq!(uids(pods), running, "no pod replaced or added");

    fleet
        .config_maps()
        .patch("model-config", &PatchParams::default(), &edit(fixture("llama-3.1-8b-instruct")))
        .await
        .unwrap();
    fleet.converged(&name, 2).await;
    assert_eq!(uids(fleet.pods_of(&name).await), running, "the same model: the same pods");
    operator.assert_no_failures().await;
    let rejections: Vec<_> =
        fleet.assert_no_repeated_events().await.into_iter().filter(|e| e.reason.as_deref() == Some("R2")).collect();
    assert_eq!(rejections.len(), 1, "one warning for the rejection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_of_a_release_kvpilot_does_not_model_is_refused_until_one_is_pinned() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-release", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["image"] = json!("lmsysorg/sglang:v0.5.9-cu129");
    }));
    until("the resource is refused naming spec.sglang.version", async || {
        let resource = fleet.deployments().get(&name).await.ok()?;
        let resolved = condition(&resource, "ModelResolved")?;
        let expected =
            "spec.sglang.version: the tag of spec.decode.image lmsysorg/sglang:v0.5.9-cu129 names SGLang 0.5.9";
        (resolved.status == "False"
            && resolved.reason == "UnknownSglangVersion"
            && resolved.message.starts_with(expected))
        .then_some(())
    })
    .await;
    assert!(fleet.pods_of(&name).await.is_empty(), "no pod for a release no rule models");
    // Pinned, the same image runs, checked as the release the spec names.
    fleet.patch_spec(&name, json!({"sglang": {"version": "0.5.19"}})).await;
    let sglang = fleet.converged(&name, 2).await.status.unwrap().sglang.unwrap();
    assert_eq!((sglang.version.as_str(), sglang.source.as_str()), ("0.5.19", "Spec"));

    let latest = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["metadata"]["name"] = json!("latest");
        o["spec"]["decode"]["image"] = json!("lmsysorg/sglang:latest");
    }));
    let status = fleet.converged(&latest, 2).await.status.unwrap();
    let sglang = status.sglang.unwrap();
    assert_eq!((sglang.version.as_str(), sglang.source.as_str()), ("0.5.23", "Default"));
    assert!(
        status
            .warnings
            .iter()
            .any(|w| w.starts_with("spec.decode.image lmsysorg/sglang:latest names no SGLang release")
                && w.contains("spec.sglang.version")),
        "{:?}",
        status.warnings
    );
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_speculative_draft_s_config_map_is_checked_against_the_model() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-draft", quick()).await;
    let mut operator = fleet.operator(&[], &[]);
    let draft_config = |fixture_name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "draft-config", "namespace": fleet.ns()},
            "data": {"config.json": fixture(fixture_name)}})
    };
    fleet.create(&draft_config("deepseek-v4-nextn"));
    let target: Value = serde_json::from_str(&fixture("deepseek-v4")).unwrap();
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["model"]["config"] = json!({"inline": target});
        o["spec"]["disaggregation"]["retractionBackup"] = json!("cpu_tensor");
        o["spec"]["disaggregation"]["speculativeAlgorithm"] = json!("EAGLE");
        o["spec"]["disaggregation"]["speculativeDraftModel"] =
            json!({"name": "acme/dsv4-nextn", "config": {"configMapRef": {"name": "draft-config"}}});
        // DeepSeek-V4 runs EAGLE with one draft token per step only, on both fleets (V2).
        for fleet in ["decode", "prefill"] {
            o["spec"][fleet]["extraArgs"] = json!(["--speculative-eagle-topk", "1"]);
        }
    }));
    fleet.converged(&name, 2).await;
    let resource = fleet.deployments().get(&name).await.unwrap();
    let draft_layout = resource.status.and_then(|s| s.draft_layout).expect("status.draftLayout");
    assert_eq!(draft_layout.sliding_window, Some(128));

    // The draft's ConfigMap now holds a checkpoint with another window: SGLang would refuse to start.
    let edit = Patch::Merge(json!({"data": {"config.json": fixture("deepseek-v4-nextn-window-64")}}));
    fleet.config_maps().patch("draft-config", &PatchParams::default(), &edit).await.unwrap();
    until("the draft edit is rejected (T11)", async || {
        let resource = fleet.deployments().get(&name).await.ok()?;
        let settings = condition(&resource, "SettingsValid")?;
        (settings.status == "False" && settings.reason == "T11").then_some(())
    })
    .await;
    operator.assert_no_failures().await;
}

/// What the test saw of the pods at one moment: after which event, how many pods were live
/// (not terminating) and how many of those were ready.
#[derive(Debug, Default, Clone)]
struct Moment {
    event: String,
    live: usize,
    available: usize,
}

/// Watches the pods of `name` and records a [`Moment`] after every event once the initial
/// list is complete (a partial list is no moment of the fleet).
fn observe(fleet: &Fleet, name: &str) -> (Arc<Mutex<Vec<Moment>>>, tokio::task::JoinHandle<()>) {
    let moments = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&moments);
    let config = watcher::Config::default().labels(&format!("{DECODE_PODS},app.kubernetes.io/instance={name}"));
    let stream = watcher(fleet.pods(), config).default_backoff();
    let task = tokio::spawn(async move {
        let (mut pods, mut listing) = (BTreeMap::<String, Pod>::new(), BTreeMap::<String, Pod>::new());
        let mut stream = stream.boxed();
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(pod)) => {
                    listing.insert(pod.name_any(), pod);
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    pods = std::mem::take(&mut listing);
                    "listed".to_string()
                }
                Ok(watcher::Event::Apply(pod)) => {
                    let event = format!("{} ready={}", pod.name_any(), is_ready(&pod));
                    pods.insert(pod.name_any(), pod);
                    event
                }
                Ok(watcher::Event::Delete(pod)) => {
                    pods.remove(&pod.name_any());
                    format!("{} gone", pod.name_any())
                }
                Err(_) => continue,
            };
            let live: Vec<&Pod> = pods.values().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            let available = live.iter().filter(|p| is_ready(p)).count();
            seen.lock().unwrap().push(Moment { event, live: live.len(), available });
        }
    });
    (moments, task)
}

/// Rolls `name` (at `replicas`) to a new revision and checks every observed moment against
/// the floor and ceiling its rollout settings allow.
async fn roll_within(fleet: &Fleet, name: &str, replicas: usize, floor: usize, ceiling: usize, page_size: u32) {
    let (moments, watch) = observe(fleet, name);
    fleet.patch_spec(name, json!({"decode": {"pageSize": page_size}})).await;
    fleet.converged(name, replicas).await;
    watch.abort();
    let moments = moments.lock().unwrap().clone();
    assert!(moments.len() > replicas, "the rollout was observed: {moments:?}");
    for moment in &moments {
        let Moment { event, live, available } = moment;
        assert!(*available >= floor, "{available} available (floor {floor}) after {event}: {moments:?}");
        assert!(*live <= ceiling, "{live} pods (ceiling {ceiling}) after {event}: {moments:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_hold_max_unavailable_and_max_surge_at_every_moment() {
    let cluster = cluster_or_skip!();
    let slow = Timing::new(Duration::from_millis(800), Duration::from_millis(600));
    let fleet = Fleet::new(&cluster, "ctl-rollout", slow).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(4);
        o["spec"]["decode"]["rollout"] = json!({"maxUnavailable": 1, "maxSurge": 0});
    }));
    fleet.converged(&name, 4).await;
    roll_within(&fleet, &name, 4, 3, 4, 32).await;

    fleet.patch_spec(&name, json!({"decode": {"rollout": {"maxUnavailable": 0, "maxSurge": "50%"}}})).await;
    roll_within(&fleet, &name, 4, 4, 6, 64).await;

    fleet.patch_spec(&name, json!({"decode": {"rollout": {"maxUnavailable": "25%", "maxSurge": "25%"}}})).await;
    roll_within(&fleet, &name, 4, 3, 5, 16).await;

    // Scale up, then down, in the middle of a rollout: it still converges on the last word.
    fleet.patch_spec(&name, json!({"decode": {"pageSize": 32}})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.patch_spec(&name, json!({"decode": {"replicas": 6}})).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    fleet.patch_spec(&name, json!({"decode": {"replicas": 3}})).await;
    let resource = fleet.converged(&name, 3).await;
    let decode = resource.status.unwrap().decode.unwrap();
    assert_eq!((decode.replicas, decode.ready_replicas, decode.updated_replicas), (3, 3, 3));
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_never_claims_more_ready_or_updated_pods_than_exist() {
    let cluster = cluster_or_skip!();
    let slow = Timing::new(Duration::from_millis(700), Duration::from_millis(1500));
    let fleet = Fleet::new(&cluster, "ctl-status", slow).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(3);
    }));
    fleet.converged(&name, 3).await;
    let old = label(&fleet.pods_of(&name).await[0], "kvpilot.dev/revision").to_string();
    fleet.patch_spec(&name, json!({"decode": {"pageSize": 32}})).await;
    // Each status the operator wrote is checked against a snapshot of the pods taken after
    // it: the pods are listed first, then the resource is read, and the sample counts only when
    // the status is older than the list (etcd revisions order both). The operator writes status
    // before deleting, and readiness only grows, so the truth at the list is never less.
    let mut claims = 0;
    let deadline = std::time::Instant::now() + SETTLE;
    let selector = format!("{DECODE_PODS},app.kubernetes.io/instance={name}");
    loop {
        let listed = fleet.pods().list(&kube::api::ListParams::default().labels(&selector)).await.unwrap();
        let resource = fleet.deployments().get(&name).await.unwrap();
        let revision = |rv: Option<&String>| rv.and_then(|v| v.parse::<u64>().ok()).unwrap_or(u64::MAX);
        let pods = listed.items;
        let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
        let snapshot_is_newer = revision(resource.metadata.resource_version.as_ref())
            <= revision(listed.metadata.resource_version.as_ref());
        if snapshot_is_newer
            && let Some(status) = resource.status.as_ref()
            && let Some(decode) = status.decode.as_ref()
        {
            // The revision the status speaks of: the old one until it observed the change.
            let current = status.observed_generation == resource.metadata.generation;
            let counted = |p: &&&Pod| (label(p, "kvpilot.dev/revision") != old) == current;
            let updated = live.iter().filter(counted).count() as i32;
            let ready = live.iter().filter(counted).filter(|p| is_ready(p)).count() as i32;
            assert!(decode.ready_replicas <= ready, "claims {} ready, {ready} are: {status:?}", decode.ready_replicas);
            assert!(decode.updated_replicas <= updated, "claims {} updated, {updated} are", decode.updated_replicas);
            assert!(decode.replicas <= live.len() as i32, "claims {} pods, {} live", decode.replicas, live.len());
            claims += 1;
        }
        if fleet::fleet_problem(&resource, &pods, 3).is_none() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the rollout did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(claims > 3, "the rollout was observed");
    operator.assert_no_failures().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_killed_mid_rollout_resumes_without_losing_or_doubling_anything() {
    let cluster = cluster_or_skip!();
    let slow = Timing::new(Duration::from_millis(600), Duration::from_millis(400));
    let fleet = Fleet::new(&cluster, "ctl-sigkill", slow).await;
    let mut operator = fleet.operator(&[], &[]);
    let name = fleet.create(&fleet.example("mimo-pure-swa-rewrite.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(4);
    }));
    fleet.converged(&name, 4).await;
    fleet.patch_spec(&name, json!({"decode": {"pageSize": 32}})).await;
    until("the rollout started", async || {
        let pods = fleet.pods_of(&name).await;
        let revisions: BTreeSet<&str> = pods.iter().map(|p| label(p, "kvpilot.dev/revision")).collect();
        (revisions.len() > 1).then_some(())
    })
    .await;
    operator.process.stop();

    let mut restarted = fleet.operator(&[], &[]);
    fleet.converged(&name, 4).await;
    restarted.assert_no_failures().await;
    let events = fleet.assert_no_repeated_events().await;
    let rewrites = events.iter().filter(|e| e.reason.as_deref() == Some("SettingRewritten")).count();
    assert_eq!(rewrites, 1, "the restarted operator does not announce the rewrite again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_election_one_operator_reconciles_and_the_other_takes_over() {
    let cluster = cluster_or_skip!();
    let fleet = Fleet::new(&cluster, "ctl-leader", quick()).await;
    let ns = fleet.ns().to_string();
    let elect = ["--leader-elect", "--operator-namespace", ns.as_str()];
    let mut first = fleet.operator(&elect, &[("POD_NAME", "first")]);
    until("the first operator leads", async || {
        let lease = fleet.cluster.get_json(&["lease", "kvpilot-operator", "-n", &ns])?;
        (lease["spec"]["holderIdentity"] == "first").then_some(())
    })
    .await;
    let mut second = fleet.operator(&elect, &[("POD_NAME", "second")]);
    let name = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |_| {}));
    fleet.converged(&name, 2).await;
    let reconciled = |operator: &fleet::Operator| operator.process.logs().contains("elected leader: reconciling");
    assert!(reconciled(&first) && !reconciled(&second), "only the leader reconciles");
    second.assert_no_failures().await;

    first.process.stop();
    let killed = std::time::Instant::now();
    until("the second operator takes over", async || reconciled(&second).then_some(())).await;
    // The lease lasts 15 s; a kill (no release) is noticed when it expires.
    assert!(killed.elapsed() < Duration::from_secs(15 + 10), "took over after {:?}", killed.elapsed());
    fleet.patch_spec(&name, json!({"decode": {"replicas": 3}})).await;
    fleet.converged(&name, 3).await;
    second.assert_no_failures().await;
    fleet.assert_no_repeated_events().await;
}

#[test]
fn only_formatted_api_refusals_in_warnings_count_as_refusals() {
    let pid_in_namespace = "INFO kvpilot::cli::operator_cmd: reconciling scope=Namespace(\"ctl-source-24225-0\")";
    assert_eq!(fleet::api_refusal_in(pid_in_namespace), None);
    let warned_422 = "WARN name=web reconcile failed error=ApiError: Pod \"web-0\" is invalid (Status { code: 422 })";
    assert_eq!(fleet::api_refusal_in(warned_422), Some("code: 422"));
    let refused = "ERROR error=ApiError: forbidden (Status { reason: \"Forbidden\", code: 403 })";
    assert_eq!(fleet::api_refusal_in(refused), Some("code: 403"));
}
