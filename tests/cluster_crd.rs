//! The CRD on a real kube-apiserver (scripts/control-plane.sh): installed with server-side
//! apply and Established without warnings (so its CEL rules fit the cost budget), every example
//! accepted, every `x-kubernetes-validations` rule and every spec enum enforced with the API
//! server's own message, printer columns, the scale subresource and `kubectl explain`.

mod common;

use std::time::Duration;

use common::cluster::{APPLY_CRDS, TestNamespace, examples_in, text, wait_for_blocking};
use common::crd::{Constraint, constraints, crd_schema, set};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// A value that breaks `rule`. Every rule of the CRD needs a case here: a new rule fails this
/// test until it gets one, so no rule goes unchecked against the real API server.
fn breaking(rule: &str, path: &str) -> Value {
    match rule {
        "self >= 1" => json!(0),
        "self >= 0" => json!(-1),
        "self > 0.0" => json!(0.0),
        "self != ''" | "self.size() > 0" => json!(""),
        _ if rule.starts_with("self.matches(") && path == "spec.sglang.version" => json!("latest"),
        _ if rule.starts_with("self.matches(") && path == "spec.scheduling.queue" => json!("Team_A"),
        _ if rule.starts_with("self.matches(") && path.starts_with("spec.placement.") => json!("a rack"),
        _ if path == "spec.scheduling" => json!({"gang": "coscheduling", "queue": "inference"}),
        _ if path.ends_with(".config") && rule.contains("has(self.inline)") => {
            json!({"inline": {"model_type": "llama"}, "configMapRef": {"name": "model-config"}})
        }
        _ if path == "spec.disaggregation" && rule.contains("speculativeDraftModel") => {
            json!({"speculativeDraftModel": {"name": "acme/draft", "config": {"hub": {}}}})
        }
        _ if path == "spec.model.source" && rule.contains("has(self.hub)") => {
            json!({"hub": {}, "volume": {"source": {"persistentVolumeClaim": {"claimName": "weights"}}}})
        }
        _ if path == "spec.model.source.volume.path" || path == "spec.disaggregation.speculativeDraftModel.path" => {
            json!("models/../../etc")
        }
        "self >= 1 && self <= 65535" => json!(70000),
        _ if path == "spec.cache" => json!({"capacity": "1Gi"}),
        "self >= 30" => json!(10),
        _ if (path == "spec.decode" || path == "spec.prefill") && rule.contains("nodesPerReplica") => {
            json!({"replicas": 1, "tensorParallel": 8, "nodesPerReplica": 3})
        }
        _ if (path == "spec.decode" || path == "spec.prefill") && rule.contains("minReplicas <= self.maxReplicas") => {
            json!({"replicas": 2, "minReplicas": 4, "maxReplicas": 2})
        }
        _ => panic!("no invalid value for the rule `{rule}` at {path}: add a case to `breaking`"),
    }
}

/// Breaks a rule over the whole spec (fields that exclude or need each other) in `object`.
fn break_spec(object: &mut Value, rule: &str) {
    let spec = object["spec"].as_object_mut().unwrap();
    if rule.contains("self.disaggregation.prefill") {
        spec.insert("disaggregation".into(), json!({"prefill": {"tensorParallel": 1}}));
    } else if rule.contains("self.router") {
        spec.remove("prefill");
        spec.insert("router".into(), json!({"replicas": 1}));
    } else if rule.contains("colocateTopologyKey") {
        spec.remove("prefill");
        spec.insert("placement".into(), json!({"colocateTopologyKey": "topology.kubernetes.io/zone"}));
    } else {
        panic!("no invalid spec for the rule `{rule}`: add a case to `break_spec`");
    }
}

fn base(namespace: &str) -> Value {
    let (_, mut object) =
        examples_in(namespace).into_iter().find(|(file, _)| file == "llama-3.1-8b-full.yaml").unwrap();
    object["metadata"]["name"] = json!("invalid");
    object
}

fn inference_deployments(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kvpilot.dev", "v1alpha1", "InferenceDeployment"),
        "inferencedeployments",
    );
    Api::namespaced_with(client, namespace, &resource)
}

/// The API server's refusal of a server-side dry-run create, or a panic if it was admitted.
async fn refusal(api: &Api<DynamicObject>, object: &Value, what: &str) -> String {
    let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    match api.create(&PostParams { dry_run: true, ..Default::default() }, &object).await {
        Ok(_) => panic!("the API server admitted {what}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{what}: {status:?}");
            status.message
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

#[tokio::test]
async fn the_crd_is_established_without_warnings_and_every_example_is_accepted() {
    let cluster = cluster_or_skip!();
    let out = cluster.kubectl(&APPLY_CRDS);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Warning"), "the CRD drew warnings (CEL cost or otherwise): {stderr}");
    cluster.install_crd();
    let crd = cluster.get_json(&["crd", "inferencedeployments.kvpilot.dev"]).unwrap();
    for condition in ["Established", "NamesAccepted"] {
        let found = crd["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == condition);
        assert_eq!(found.map(|c| c["status"].clone()), Some(json!("True")), "{condition}: {:#}", crd["status"]);
    }

    let namespace = TestNamespace::create(&cluster, "crd-examples");
    for (file, object) in examples_in(&namespace.name) {
        let manifest = serde_json::to_string(&object).unwrap();
        let out = cluster.kubectl_with_input(&["create", "--dry-run=server", "-o", "json", "-f", "-"], &manifest);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "examples/{file} refused: {stderr}");
        assert!(!stderr.contains("Warning"), "examples/{file} drew warnings: {stderr}");
        // What the API server would store: every field the example sets kept as written (nothing
        // pruned), plus the schema's defaults.
        let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_kept(&object["spec"], &stored["spec"], &format!("examples/{file}: spec"));
        if object["kind"] == "InferenceDeployment" {
            assert!(stored["spec"]["disaggregation"]["onInvalid"].is_string(), "examples/{file}: no default applied");
        }
    }
}

#[tokio::test]
async fn plain_kubectl_apply_installs_the_crd() {
    let cluster = cluster_or_skip!();
    // Client-side apply writes the whole CRD into its last-applied-configuration annotation,
    // which the API server limits to 256 KiB; a dry run validates the object it would store.
    let out = cluster.kubectl(&["apply", "--dry-run=server", "-f", "crds/"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("customresourcedefinition.apiextensions.k8s.io/inferencedeployments.kvpilot.dev")
    );
}

fn assert_kept(written: &Value, stored: &Value, path: &str) {
    match written {
        Value::Object(fields) => {
            for (name, value) in fields {
                assert_kept(value, &stored[name], &format!("{path}.{name}"));
            }
        }
        // The API server stores an integral float as an integer (10000.0 as 10000): same number.
        Value::Number(number) => assert_eq!(Some(number.as_f64()), stored.as_number().map(|n| n.as_f64()), "{path}"),
        _ => assert_eq!(written, stored, "{path} was changed or pruned"),
    }
}

#[tokio::test]
async fn every_validation_rule_and_enum_is_enforced_with_the_api_servers_message() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let namespace = TestNamespace::create(&cluster, "crd-invalid");
    let api = inference_deployments(cluster.client().await, &namespace.name);
    let mut found = Vec::new();
    constraints(&crd_schema(), "", &mut found);
    let spec: Vec<&Constraint> = found
        .iter()
        .filter(|c| match c {
            Constraint::Rule { path, .. } | Constraint::Enum { path, .. } => path.starts_with("spec."),
        })
        .collect();
    assert!(spec.len() >= 15, "{found:?}");

    for constraint in spec {
        let mut object = base(&namespace.name);
        match constraint {
            Constraint::Rule { path, rule, message } => {
                if path == "spec.model.source.volume.path" {
                    // The volume's required source, so that only the rule under test refuses.
                    let source = json!({"persistentVolumeClaim": {"claimName": "weights"}});
                    set(&mut object, "spec.model.source.volume.source", source);
                }
                if path.starts_with("spec.disaggregation.speculativeDraftModel.") {
                    // A valid draft model, so that only the rule under test refuses.
                    set(&mut object, "spec.disaggregation.speculativeAlgorithm", json!("EAGLE"));
                    let draft = json!({"name": "acme/draft", "config": {"hub": {}}});
                    set(&mut object, "spec.disaggregation.speculativeDraftModel", draft);
                }
                if path == "spec" {
                    break_spec(&mut object, rule);
                } else {
                    set(&mut object, path, breaking(rule, path));
                }
                let refused = refusal(&api, &object, &format!("a value breaking `{rule}` at {path}")).await;
                assert!(refused.contains(&format!("{path}: Invalid value")), "{path}: {refused}");
                assert!(refused.contains(message), "{path}: expected `{message}` in: {refused}");
            }
            Constraint::Enum { path, values } => {
                set(&mut object, path, json!("Bogus"));
                let refused = refusal(&api, &object, &format!("`Bogus` at {path}")).await;
                let supported = values.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>().join(", ");
                let expected = format!("{path}: Unsupported value: \"Bogus\": supported values: {supported}");
                assert!(refused.contains(&expected), "expected `{expected}` in: {refused}");
            }
        }
    }

    // Schema types and required fields are the API server's too.
    let mut object = base(&namespace.name);
    set(&mut object, "spec.decode.replicas", json!("two"));
    let refused = refusal(&api, &object, "a string replica count").await;
    assert!(
        refused.contains(
            "spec.decode.replicas: Invalid value: \"string\": spec.decode.replicas in body must be of type integer"
        ),
        "{refused}"
    );
    let mut object = base(&namespace.name);
    object["spec"]["model"].as_object_mut().unwrap().remove("name");
    let refused = refusal(&api, &object, "a model without a name").await;
    assert!(refused.contains("spec.model.name: Required value"), "{refused}");
}

#[tokio::test]
async fn printer_columns_scale_and_explain_work_through_kubectl() {
    let cluster = cluster_or_skip!();
    cluster.install_crd();
    let namespace = TestNamespace::create(&cluster, "crd-kubectl");
    let ns = namespace.name.as_str();
    let (_, llama) = examples_in(ns).into_iter().find(|(file, _)| file == "llama-3.1-8b-full.yaml").unwrap();
    cluster.kubectl_with_input(&["create", "-f", "-"], &serde_json::to_string(&llama).unwrap());
    let name = llama["metadata"]["name"].as_str().unwrap();

    let table = cluster.kubectl_ok(&["get", "infd", "-n", ns, "-o", "wide"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "MODEL", "LAYOUT", "BACKUP", "SETTINGS", "READY", "DESIRED", "PREFILL", "ENDPOINT", "ROLLOUT",
            "SECURITY", "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..2], [name, "meta-llama/Llama-3.1-8B-Instruct"], "{table}");
    let narrow = cluster.kubectl_ok(&["get", "infd", "-n", ns]);
    for wide in ["SETTINGS", "PREFILL", "ENDPOINT", "ROLLOUT", "SECURITY"] {
        assert!(!narrow.contains(wide), "{wide} has priority 1, shown only with -o wide: {narrow}");
    }
    let by_category = cluster.kubectl_ok(&["get", "kvpilot", "-n", ns, "-o", "name"]);
    assert_eq!(by_category.trim(), format!("inferencedeployment.kvpilot.dev/{name}"));

    cluster.kubectl_ok(&["scale", "infd", name, "-n", ns, "--replicas=3"]);
    let scaled = cluster.get_json(&["infd", name, "-n", ns]).unwrap();
    assert_eq!(scaled["spec"]["decode"]["replicas"], 3);
    let scale = cluster.kubectl_ok(&["get", "infd", name, "-n", ns, "--subresource=scale", "-o", "json"]);
    let scale: Value = serde_json::from_str(&scale).unwrap();
    assert_eq!((scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("Scale"), Some(3)), "{scale}");
    let refused = cluster.kubectl(&["scale", "infd", name, "-n", ns, "--replicas=-1"]);
    assert!(!refused.status.success());
    assert!(text(&refused.stderr).contains("replicas"), "{}", text(&refused.stderr));

    // The CRD's OpenAPI reaches the API server's /openapi/v3 a moment after Established.
    let explained = wait_for_blocking("kubectl explain infd", Duration::from_secs(60), || {
        let out = cluster.kubectl(&["explain", "infd.spec.disaggregation.onInvalid"]);
        out.status.success().then(|| text(&out.stdout))
    });
    assert!(explained.contains("`Reject` (default) refuses invalid settings"), "{explained}");
    let spec = cluster.kubectl_ok(&["explain", "infd.spec"]);
    assert!(spec.contains("One model served with SGLang prefill/decode disaggregation"), "{spec}");
}
