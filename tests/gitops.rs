//! The GitOps material in `deploy/`: the Argo CD health check run by a real Lua 5.4 on statuses
//! the controller's own status code produces, the Flux HelmRelease's values against the chart's
//! schema, and the CI example's commands against the binary.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{repo, test_tool};
use k8s_openapi::jiff::Timestamp;
use kvpilot::api::{InferenceDeployment, InferenceDeploymentSpec, RolloutPhase, RolloutStatus};
use kvpilot::controller::coherent;
use kvpilot::controller::desired::FleetRole;
use kvpilot::controller::status::{self, FleetProgress, PodCounts};
use kvpilot::policy::assess;
use serde::Deserialize;
use serde_json::{Value, json};

/// A JSON value as a Lua table constructor (null fields are left out, as Argo CD's are absent).
fn lua_literal(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")),
        Value::Array(items) => format!("{{{}}}", items.iter().map(lua_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[\"{k}\"] = {}", lua_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// (status, message) the health script returns for `object`.
fn health(object: &Value) -> (String, String) {
    let program = format!(
        "obj = {}\nlocal hs = dofile(\"deploy/argocd/inferencedeployment-health.lua\")\nio.write(hs.status, \"\\n\", hs.message)",
        lua_literal(object)
    );
    let out = Command::new(test_tool("lua5.4")).args(["-e", &program]).current_dir(repo("")).output().unwrap();
    assert!(out.status.success(), "lua failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let (status, message) = text.split_once('\n').unwrap();
    (status.to_string(), message.to_string())
}

fn example(name: &str) -> InferenceDeployment {
    let text = std::fs::read_to_string(repo("examples").join(name)).unwrap();
    let object = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "InferenceDeployment")
        .unwrap();
    serde_json::from_value(object).unwrap()
}

/// The resource with the status the controller would write when every replica of each fleet
/// exists at the current revision, all of them ready or none (`ready`), or with no pods looked
/// at (`None`).
fn with_status(resource: &InferenceDeployment, ready: Option<bool>, generation: i64, observed: i64) -> Value {
    with_decided(resource, ready, generation, observed, |_| {})
}

/// As [`with_status`], with the decided conditions changed by `change` before they are written.
fn with_decided(
    resource: &InferenceDeployment,
    ready: Option<bool>,
    generation: i64,
    observed: i64,
    change: impl FnOnce(&mut status::Conditions),
) -> Value {
    let spec: &InferenceDeploymentSpec = &resource.spec;
    let config = Value::Object(spec.model.config.inline.clone().unwrap());
    let assessment = assess(
        spec,
        &kvpilot::policy::ModelConfigs::target(config.clone()),
        &Default::default(),
        kvpilot::policy::Checked::Service,
    )
    .unwrap();
    let fleets: Vec<FleetProgress> = FleetRole::ALL
        .into_iter()
        .filter_map(|role| {
            let desired = role.fleet(spec)?.replicas;
            let counts = match ready {
                Some(ready) => {
                    let ready = if ready { desired } else { 0 };
                    PodCounts { total: desired, updated: desired, ready_updated: ready, serving: ready }
                }
                None => PodCounts::default(),
            };
            Some(FleetProgress { role, desired, counts })
        })
        .collect();
    let mut decided = status::resolved(&assessment, "spec.model.config.inline", &fleets, None, None);
    change(&mut decided);
    let written = status::status(None, &decided, Some(observed), Some(&assessment), None, Vec::new(), Timestamp::now());
    let mut object = serde_json::to_value(resource).unwrap();
    object["metadata"]["generation"] = json!(generation);
    object["status"] = serde_json::to_value(written).unwrap();
    object
}

#[test]
fn argo_cd_health_follows_the_conditions_the_controller_writes() {
    let llama = example("llama-3.1-8b-full.yaml");
    let fresh = serde_json::to_value(&llama).unwrap();
    assert_eq!(health(&fresh).0, "Progressing", "no status yet");

    let rolling = with_status(&llama, Some(false), 1, 1);
    let (state, message) = health(&rolling);
    assert_eq!(state, "Progressing");
    assert!(message.starts_with("RollingOut"), "{message}");

    let ready = with_status(&llama, Some(true), 1, 1);
    assert_eq!(health(&ready).0, "Healthy");
    let stale = with_status(&llama, Some(true), 2, 1);
    let (state, message) = health(&stale);
    assert_eq!((state.as_str(), message.as_str()), ("Progressing", "Waiting for kvpilot to observe generation 2"));

    let failing = with_decided(&llama, Some(true), 1, 1, |decided| {
        let message = "spec.decode failed 4 times in 10 min (last: rank 1 failed); its replacements wait 10s";
        decided.degraded = status::Decided::new("Degraded", Some(true), "ReplicasKeepFailing", message);
    });
    let (state, message) = health(&failing);
    assert_eq!(state, "Degraded");
    assert!(message.contains("ReplicasKeepFailing") && message.contains("wait 10s"), "{message}");

    let rejected = with_status(&example("deepseek-v3-mla-rejected.yaml"), None, 1, 1);
    let (state, message) = health(&rejected);
    assert_eq!(state, "Degraded");
    assert!(message.contains("R9") && message.contains("host_pool"), "{message}");

    let rewritten = example("mimo-pure-swa-rewrite.yaml");
    let healthy = with_status(&rewritten, Some(true), 3, 3);
    let (state, message) = health(&healthy);
    assert_eq!(state, "Healthy");
    assert!(message.contains("settings rewritten") && message.contains("cpu_tensor"), "{message}");

    let mut unresolved = serde_json::to_value(&llama).unwrap();
    let decided = status::unresolved("ConfigMapNotFound", "ConfigMap serving/llama-config not found");
    unresolved["status"] =
        serde_json::to_value(status::status(None, &decided, Some(1), None, None, Vec::new(), Timestamp::now()))
            .unwrap();
    let (state, message) = health(&unresolved);
    assert_eq!(state, "Degraded");
    assert!(message.contains("ConfigMapNotFound"), "{message}");

    // The old key keeps serving (Ready), but the rollout the spec asks for stopped.
    let mut aborted = with_status(&llama, Some(true), 2, 2);
    let rollout = RolloutStatus {
        from_key: Some("a1".into()),
        to_key: "b2".into(),
        phase: RolloutPhase::Aborted,
        start_time: None,
        ready: Vec::new(),
    };
    let progressing = coherent::progressing(&rollout, Duration::from_secs(60)).unwrap();
    let conditions = aborted["status"]["conditions"].as_array_mut().unwrap();
    let at = conditions.iter().position(|c| c["type"] == "Progressing").unwrap();
    conditions[at]["status"] = json!(progressing.status);
    conditions[at]["reason"] = json!(progressing.reason);
    conditions[at]["message"] = json!(progressing.message);
    let (state, message) = health(&aborted);
    assert_eq!(state, "Degraded");
    assert!(message.starts_with("Rollout aborted (RolloutAborted: the servers of KV key b2"), "{message}");
}

#[test]
fn the_argo_cd_config_map_patch_carries_the_tested_script() {
    let script = std::fs::read_to_string(repo("deploy/argocd/inferencedeployment-health.lua")).unwrap();
    let patch: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo("deploy/argocd/argocd-cm-patch.yaml")).unwrap()).unwrap();
    assert_eq!(patch["data"]["resource.customizations.health.kvpilot.dev_InferenceDeployment"], json!(script));
}

#[test]
fn the_flux_helm_release_installs_this_chart_with_valid_values() {
    let text = std::fs::read_to_string(repo("deploy/flux/helmrelease.yaml")).unwrap();
    let documents: Vec<Value> =
        serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect();
    let release = documents.iter().find(|d| d["kind"] == "HelmRelease").unwrap();
    let chart: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo("charts/kvpilot/Chart.yaml")).unwrap()).unwrap();
    assert_eq!(release["spec"]["chart"]["spec"]["chart"], "charts/kvpilot");
    assert!(repo("charts/kvpilot/Chart.yaml").exists());
    assert_eq!(release["spec"]["chart"]["spec"]["version"], chart["version"]);
    assert_eq!(release["spec"]["upgrade"]["crds"], "CreateReplace", "Flux upgrades the CRD, which Helm does not");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("charts/kvpilot/values.schema.json")).unwrap()).unwrap();
    let defaults: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo("charts/kvpilot/values.yaml")).unwrap()).unwrap();
    let mut values = defaults;
    merge(&mut values, &release["spec"]["values"]);
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> =
        validator.iter_errors(&values).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// Helm's value merge: maps merge key by key, anything else replaces.
fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, overlay) => *base = overlay.clone(),
    }
}

#[test]
fn the_ci_example_uses_commands_and_flags_that_exist() {
    let workflow: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo("deploy/ci/check-inferencedeployments.yaml")).unwrap())
            .unwrap();
    let steps = workflow["jobs"]["check"]["steps"].as_array().unwrap();
    let mut checked = 0;
    for run in steps.iter().filter_map(|s| s["run"].as_str()) {
        let words: Vec<&str> = run.split_whitespace().filter(|w| *w != "\\").collect();
        let image = words.iter().position(|w| w.starts_with("kvpilot/kvpilot:")).unwrap();
        assert_eq!(words[image], format!("kvpilot/kvpilot:{}", env!("CARGO_PKG_VERSION")));
        let command = words[image + 1];
        let help = Command::new(env!("CARGO_BIN_EXE_kvpilot")).args([command, "--help"]).output().unwrap();
        assert!(help.status.success(), "kvpilot {command} does not exist");
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for flag in words[image + 2..].iter().filter(|w| w.starts_with('-')) {
            assert!(help.contains(flag), "kvpilot {command} has no {flag}");
        }
        checked += 1;
    }
    assert_eq!(checked, 2);
}

#[test]
fn the_end_to_end_script_checks_every_admitted_example() {
    let script = std::fs::read_to_string(repo("scripts/e2e-cluster.sh")).unwrap();
    let listed = script.lines().find_map(|l| l.strip_prefix("ADMITTED=")).expect("ADMITTED list").trim_matches('"');
    let mut listed: Vec<&str> = listed.split_whitespace().collect();
    listed.sort();
    let mut expected = Vec::new();
    for entry in std::fs::read_dir(repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        // examples/guard holds SGLang workloads, not InferenceDeployments.
        if path.is_dir() {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for object in serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()) {
            if object["kind"] != "InferenceDeployment" {
                continue;
            }
            let resource: InferenceDeployment = serde_json::from_value(object.clone()).unwrap();
            let config = match resource.spec.model.config.inline.clone() {
                Some(inline) => Value::Object(inline),
                None => config_json_of_config_map(&text),
            };
            if assess(
                &resource.spec,
                &kvpilot::policy::ModelConfigs::target(config.clone()),
                &Default::default(),
                kvpilot::policy::Checked::Service,
            )
            .unwrap()
            .verdict
            .outcome
                != kvpilot::policy::Outcome::Rejected
            {
                expected.push(format!(
                    "{}/{}",
                    object["metadata"]["namespace"].as_str().unwrap(),
                    object["metadata"]["name"].as_str().unwrap()
                ));
            }
        }
    }
    expected.sort();
    assert_eq!(listed, expected, "update ADMITTED in scripts/e2e-cluster.sh");
}

/// The config.json of the ConfigMap in the same example file.
fn config_json_of_config_map(text: &str) -> Value {
    let config_map = serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a configMapRef example carries its ConfigMap");
    serde_json::from_str(config_map["data"]["config.json"].as_str().unwrap()).unwrap()
}
