//! The in-process API server's own behaviours, through a real `kube::Client`.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kvpilot::apiserver::{ApiServer, Fault};
use serde_json::{Value, json};

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap()
}

fn api_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn version(object: &impl kube::Resource) -> u64 {
    object.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

#[tokio::test]
async fn discovery_lists_the_served_types() {
    let server = ApiServer::new();
    let discovery = kube::Discovery::new(server.client()).run().await.unwrap();
    let mut kinds: Vec<String> =
        discovery.groups().flat_map(|g| g.recommended_resources()).map(|(r, _)| r.kind).collect();
    kinds.sort();
    for kind in ["ConfigMap", "InferenceDeployment", "Lease", "Pod", "Service"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} missing from {kinds:?}");
    }
}

#[tokio::test]
async fn create_get_list_with_label_selectors_and_conflicts() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "ns");
    let a = pods.create(&PostParams::default(), &pod("a", json!({"app": "decode", "rev": "1"}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({"app": "decode", "rev": "2"}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("c", json!({"app": "prefill"}))).await.unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_eq!(api_code(pods.create(&PostParams::default(), &pod("a", json!({}))).await.unwrap_err()), 409);

    let names = |list: kube::core::ObjectList<Pod>| {
        list.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(names(pods.list(&ListParams::default().labels("app=decode")).await.unwrap()), vec!["a", "b"]);
    assert_eq!(names(pods.list(&ListParams::default().labels("app=decode,rev!=1")).await.unwrap()), vec!["b"]);
    assert_eq!(names(pods.list(&ListParams::default().labels("app in (prefill)")).await.unwrap()), vec!["c"]);
    assert_eq!(names(pods.list(&ListParams::default().fields("metadata.name=c")).await.unwrap()), vec!["c"]);
    let other: Api<Pod> = Api::namespaced(server.client(), "other");
    assert!(other.list(&ListParams::default()).await.unwrap().items.is_empty());
    let all: Api<Pod> = Api::all(server.client());
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 3);

    assert_eq!(api_code(pods.get("missing").await.unwrap_err()), 404);
    // A replace from a stale read is refused.
    let mut stale = a.clone();
    pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))).await.unwrap();
    stale.metadata.labels.get_or_insert_default().insert("z".into(), "w".into());
    assert_eq!(api_code(pods.replace("a", &PostParams::default(), &stale).await.unwrap_err()), 409);
}

#[tokio::test]
async fn no_op_writes_bump_nothing_and_emit_no_event() {
    let server = ApiServer::new();
    let maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let params = PatchParams::apply("kvpilot").force();
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}});
    let first = maps.patch("cm", &params, &Patch::Apply(&desired)).await.unwrap();
    let again = maps.patch("cm", &params, &Patch::Apply(&desired)).await.unwrap();
    assert_eq!(version(&first), version(&again));
    let mut events = maps.watch(&WatchParams::default(), &version(&first).to_string()).await.unwrap().boxed();
    maps.patch("cm", &params, &Patch::Apply(&desired)).await.unwrap();
    maps.patch(
        "cm",
        &params,
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v2"}}),
        ),
    )
    .await
    .unwrap();
    match tokio::time::timeout(Duration::from_secs(2), events.try_next()).await.unwrap().unwrap().unwrap() {
        WatchEvent::Modified(cm) => assert_eq!(cm.data.unwrap()["k"], "v2", "the no-op apply produced no event"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn generation_counts_spec_changes_and_status_is_a_subresource() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    let status = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    assert_eq!(status.metadata.generation, Some(1), "status writes do not bump generation");
    assert_eq!(status.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    let labelled = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1), "metadata writes do not bump generation");
    let spec = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 30}, "status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
    assert_eq!(spec.metadata.generation, Some(2));
    assert_eq!(spec.status.unwrap().phase.as_deref(), Some("Running"), "main-resource writes keep status");
    let json_patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace", "path": "/spec/activeDeadlineSeconds", "value": 60}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (json_patched.spec.unwrap().active_deadline_seconds, json_patched.metadata.generation),
        (Some(60), Some(3))
    );
}

#[tokio::test]
async fn watch_replays_from_a_resource_version_and_reports_410_after_compaction() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let a = pods.create(&PostParams::default(), &pod("a", json!({"app": "x"}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", json!({"app": "x"}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("c", json!({"app": "y"}))).await.unwrap();
    let mut stream =
        pods.watch(&WatchParams::default().labels("app=x"), &version(&a).to_string()).await.unwrap().boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("unexpected {other:?}"),
    }
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        other => panic!("unexpected {other:?}"),
    }

    server.compact();
    let mut old = pods.watch(&WatchParams::default(), &version(&a).to_string()).await.unwrap().boxed();
    match old.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(status) => assert_eq!(status.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_what_it_owns() {
    let server = ApiServer::new();
    let maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let owner = maps
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap())
        .await
        .unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid, "controller": true}]);
    let mut owned = pod("owned", json!({}));
    owned.metadata.owner_references = serde_json::from_value(owner_ref.clone()).unwrap();
    let owned = pods.create(&PostParams::default(), &owned).await.unwrap();
    let grandchild: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "grandchild", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "owned", "uid": owned.metadata.uid}]}}))
    .unwrap();
    maps.create(&PostParams::default(), &grandchild).await.unwrap();
    pods.create(&PostParams::default(), &pod("unrelated", json!({}))).await.unwrap();

    maps.delete("owner", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(pods.get("owned").await.unwrap_err()), 404);
    assert_eq!(api_code(maps.get("grandchild").await.unwrap_err()), 404, "collection cascades");
    assert!(pods.get("unrelated").await.is_ok());
}

#[tokio::test]
async fn leases_are_served() {
    let server = ApiServer::new();
    let leases: Api<Lease> = Api::namespaced(server.client(), "kvpilot-system");
    let lease: Lease = serde_json::from_value(
        json!({"metadata": {"name": "kvpilot"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
    )
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut taken = created.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let replaced = leases.replace("kvpilot", &PostParams::default(), &taken).await.unwrap();
    assert_eq!(replaced.spec.unwrap().holder_identity.as_deref(), Some("b"));
    assert_eq!(api_code(leases.replace("kvpilot", &PostParams::default(), &created).await.unwrap_err()), 409);
}

#[tokio::test]
async fn injected_faults_and_dropped_watches() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod("p", json!({}))).await.unwrap();
    server.inject(Fault { method: Some(http::Method::GET), path_contains: "/pods/p".into(), status: 500, times: 2 });
    assert_eq!(api_code(pods.get("p").await.unwrap_err()), 500);
    assert_eq!(api_code(pods.get("p").await.unwrap_err()), 500);
    assert!(pods.get("p").await.is_ok(), "the fault is spent");

    let mut stream = pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert!(matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
    server.drop_watches();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), stream.try_next()).await.unwrap().unwrap().is_none(),
        "the stream ended"
    );
}

#[tokio::test]
async fn server_side_apply_creates_then_replaces_named_fields() {
    let server = ApiServer::new();
    let maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let params = PatchParams::apply("kvpilot").force();
    let created = maps
        .patch("cm", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}})))
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let applied = maps
        .patch("cm", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"a": "2"}}, "data": {"x": "3"}})))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap(), [("x".to_string(), "3".to_string())].into());
    assert_eq!(applied.metadata.labels.unwrap()["a"], "2");
    assert_eq!(applied.metadata.uid, created.metadata.uid);
}

#[tokio::test]
async fn apply_conflicts_with_another_managers_fields_unless_forced() {
    let server = ApiServer::new();
    let maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let body = |value: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"owner": value}});
    maps.patch("cm", &PatchParams::apply("alice"), &Patch::Apply(body("alice"))).await.unwrap();
    maps.patch("cm", &PatchParams::apply("alice"), &Patch::Apply(body("alice-again"))).await.unwrap();
    let conflict = maps.patch("cm", &PatchParams::apply("bob"), &Patch::Apply(body("bob"))).await.unwrap_err();
    assert_eq!(api_code(conflict), 409);
    // The same value is no conflict, and force takes the field over.
    maps.patch("cm", &PatchParams::apply("bob"), &Patch::Apply(body("alice-again"))).await.unwrap();
    let forced = maps.patch("cm", &PatchParams::apply("bob").force(), &Patch::Apply(body("bob"))).await.unwrap();
    assert_eq!(forced.data.unwrap()["owner"], "bob");
    assert_eq!(
        api_code(maps.patch("cm", &PatchParams::apply("alice"), &Patch::Apply(body("alice"))).await.unwrap_err()),
        409
    );
}

#[tokio::test]
async fn only_one_lease_manager_leads_at_a_time() {
    use kube_lease_manager::LeaseManagerBuilder;
    let server = ApiServer::new();
    let build = |identity: &'static str| {
        LeaseManagerBuilder::new(server.client(), "kvpilot-operator")
            .with_namespace("kvpilot-system")
            .with_identity(identity)
            .with_duration(5)
            .with_grace(2)
            .build()
    };
    let first = build("replica-a").await.unwrap();
    let second = build("replica-b").await.unwrap();
    assert!(first.changed().await.unwrap(), "the first replica takes the free lease");
    let contender = tokio::time::timeout(Duration::from_millis(1500), second.changed()).await;
    assert!(contender.is_err(), "the second replica waits while the lease is held");
    let lease: Api<Lease> = Api::namespaced(server.client(), "kvpilot-system");
    assert_eq!(
        lease.get("kvpilot-operator").await.unwrap().spec.unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );
    first.release().await.unwrap();
    let took_over = tokio::time::timeout(Duration::from_secs(10), second.changed()).await.unwrap().unwrap();
    assert!(took_over, "the second replica leads once the lease is released");
    assert_eq!(
        lease.get("kvpilot-operator").await.unwrap().spec.unwrap().holder_identity.as_deref(),
        Some("replica-b")
    );
}

/// Regression: changes were published after the store lock was released, so two concurrent
/// writers could publish out of resourceVersion order and a live watch dropped the older one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_lose_no_watch_event() {
    let server = ApiServer::new();
    let maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut stream = maps.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let maps = maps.clone();
            tokio::spawn(async move {
                for i in 0..150 {
                    let cm: ConfigMap =
                        serde_json::from_value(json!({"metadata": {"name": format!("cm-{w}-{i}")}})).unwrap();
                    maps.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 1200 {
        match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(cm)))) => {
                seen.insert(cm.metadata.name.unwrap());
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => panic!("the watch saw {} of 1200 creations", seen.len()),
        }
    }
}

#[tokio::test]
async fn label_selected_lists_follow_relabels_deletes_and_garbage_collection() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "ns");
    let owner = pods.create(&PostParams::default(), &pod("owner", json!({"app": "x"}))).await.unwrap();
    for name in ["a", "b"] {
        let mut child = pod(name, json!({"app": "decode", "rev": "1"}));
        child.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        }]);
        pods.create(&PostParams::default(), &child).await.unwrap();
    }
    let names = |list: kube::core::ObjectList<Pod>| {
        list.items.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
    };
    let relabel = json!({"metadata": {"labels": {"rev": "2"}}});
    pods.patch("a", &PatchParams::default(), &Patch::Merge(&relabel)).await.unwrap();
    assert_eq!(names(pods.list(&ListParams::default().labels("app=decode,rev=1")).await.unwrap()), vec!["b"]);
    assert_eq!(names(pods.list(&ListParams::default().labels("rev=2")).await.unwrap()), vec!["a"]);
    assert!(pods.list(&ListParams::default().labels("rev=3")).await.unwrap().items.is_empty());
    let other: Api<Pod> = Api::namespaced(server.client(), "elsewhere");
    assert!(other.list(&ListParams::default().labels("app=decode")).await.unwrap().items.is_empty());
    pods.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(pods.list(&ListParams::default().labels("app=decode")).await.unwrap().items.is_empty(), "collected");
}

#[tokio::test]
async fn lists_are_paged_with_limit_and_continue() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "ns");
    for i in 0..7 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), json!({"app": "decode"}))).await.unwrap();
    }
    pods.create(&PostParams::default(), &pod("other", json!({"app": "prefill"}))).await.unwrap();
    for selector in ["", "app=decode"] {
        let mut seen = Vec::new();
        let mut params = ListParams::default().labels(selector).limit(3);
        let mut pages = 0;
        loop {
            let page = pods.list(&params).await.unwrap();
            pages += 1;
            assert!(page.items.len() <= 3);
            seen.extend(page.items.into_iter().map(|p| p.metadata.name.unwrap()));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        let expected = if selector.is_empty() { 8 } else { 7 };
        assert_eq!(seen.len(), expected, "{selector:?}: every object once: {seen:?}");
        assert_eq!(pages, expected.div_ceil(3));
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(seen, sorted, "in name order");
    }
    let first = pods.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.unwrap();
    // History after the token's version is forgotten: its snapshot can no longer be served.
    pods.create(&PostParams::default(), &pod("late", json!({}))).await.unwrap();
    server.compact();
    let expired = pods.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap_err();
    assert_eq!(api_code(expired), 410);
    let garbage = pods.list(&ListParams::default().limit(2).continue_token("not-a-token")).await.unwrap_err();
    assert_eq!(api_code(garbage), 400);
}
