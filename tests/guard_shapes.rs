//! The guard on manifests shaped like each project's published SGLang examples
//! (`tests/fixtures/guard_shapes/`, each naming the file it models): every server found with
//! its role, leader/worker, mode, release and JSON path, and nothing else reported; rewrites
//! written where the command line sits, patched templates included; and no manifest that
//! parses as YAML makes `kvpilot check` exit 2.

mod common;

use common::{HOST_POOL_DECODE_ARGS, kvpilot_with_input, repo};
use kvpilot::release::ReleaseChoice;
use kvpilot::sglang::guard;
use kvpilot::sglang::verdict::server_flags::{self, ServerVerdict};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The fixture followed by the ConfigMap its `kvpilot.dev/model-config` annotation names.
fn with_model_config(fixture: &str) -> String {
    let text = std::fs::read_to_string(repo(&format!("tests/fixtures/guard_shapes/{fixture}"))).unwrap();
    let config = std::fs::read_to_string(repo("tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "model-config", "namespace": "default"}, "data": {"config.json": config}});
    format!("{text}\n---\n{}\n", serde_json::to_string(&config_map).unwrap())
}

/// One server as `kvpilot check -o json` reports it.
#[derive(Debug, PartialEq)]
struct Found {
    name: String,
    path: String,
    role: Option<String>,
    member: Option<String>,
    mode: String,
    release: String,
    source: String,
}

fn found(name: &str, path: &str, role: Option<&str>, member: Option<&str>, mode: &str, release: (&str, &str)) -> Found {
    Found {
        name: name.into(),
        path: path.into(),
        role: role.map(str::to_string),
        member: member.map(str::to_string),
        mode: mode.into(),
        release: release.0.into(),
        source: release.1.into(),
    }
}

/// Checks the fixture; returns the servers reported and stderr.
fn check(fixture: &str) -> (Vec<Found>, String) {
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &with_model_config(fixture));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{fixture}: {stderr}");
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let servers = reports
        .iter()
        .filter(|r| r.get("container").is_some())
        .map(|r| Found {
            name: r["name"].as_str().unwrap().into(),
            path: r["path"].as_str().unwrap().into(),
            role: r["role"].as_str().map(str::to_string),
            member: r["member"].as_str().map(str::to_string),
            mode: r["mode"].as_str().unwrap().into(),
            release: r["sglang"]["version"].as_str().unwrap().into(),
            source: r["sglang"]["source"].as_str().unwrap().into(),
        })
        .collect();
    (servers, stderr)
}

const IMAGE: &str = "Image";
const DEFAULT: &str = "Default";

#[test]
fn rbg_v1alpha2_leader_worker_roles_with_patches() {
    let (servers, stderr) = check("rbg-v1alpha2-leader-worker.yaml");
    let base = |role: usize| format!("spec.roles[{role}].leaderWorkerPattern.template.spec.containers[0]");
    assert_eq!(
        servers,
        [
            found("rbg/pd-disagg-lws", &base(1), Some("prefill"), Some("leader"), "prefill", ("0.5.22", IMAGE)),
            found("rbg/pd-disagg-lws", &base(1), Some("prefill"), Some("worker"), "prefill", ("0.5.22", IMAGE)),
            found("rbg/pd-disagg-lws", &base(2), Some("decode"), Some("leader"), "decode", ("0.5.23", IMAGE)),
            found(
                "rbg/pd-disagg-lws",
                "spec.roles[2].leaderWorkerPattern.workerTemplatePatch.spec.containers[0]",
                Some("decode"),
                Some("worker"),
                "decode",
                ("0.5.23", IMAGE)
            ),
        ]
    );
    assert!(!stderr.contains("router"), "the SMG router is no server and needs no warning: {stderr}");
}

#[test]
fn rbg_v1alpha2_role_templates_with_patches() {
    let (servers, _) = check("rbg-v1alpha2-role-templates.yaml");
    let at = |role: usize| format!("spec.roles[{role}].standalonePattern.templateRef.patch.spec.containers[0]");
    assert_eq!(
        servers,
        [
            found("rbg/rbg-with-roletemplates", &at(0), Some("prefill"), None, "prefill", ("0.5.21", IMAGE)),
            found("rbg/rbg-with-roletemplates", &at(1), Some("decode"), None, "decode", ("0.5.21", IMAGE)),
        ]
    );
}

#[test]
fn ome_cluster_serving_runtime_engine_and_decoder() {
    let (servers, stderr) = check("ome-runtime-pd.yaml");
    let name = "clusterservingruntime/srt-llama-pd";
    assert_eq!(
        servers,
        [
            found(
                name,
                "spec.engineConfig.leader.runner",
                Some("engine"),
                Some("leader"),
                "prefill",
                ("0.5.22", IMAGE)
            ),
            found(
                name,
                "spec.engineConfig.worker.runner",
                Some("engine"),
                Some("worker"),
                "prefill",
                ("0.5.22", IMAGE)
            ),
            found(
                name,
                "spec.decoderConfig.leader.runner",
                Some("decoder"),
                Some("leader"),
                "decode",
                ("0.5.23", IMAGE)
            ),
            found(
                name,
                "spec.decoderConfig.worker.runner",
                Some("decoder"),
                Some("worker"),
                "decode",
                ("0.5.23", IMAGE)
            ),
        ]
    );
    assert!(!stderr.contains("routerConfig"), "{stderr}");
}

#[test]
fn dynamo_graph_deployments_both_versions() {
    let (servers, stderr) = check("dynamo-disagg.yaml");
    // Dynamo's image tags are Dynamo versions: the release falls back to the newest known one.
    let newest = kvpilot::release::Release::newest_known().to_string();
    let release = (newest.as_str(), DEFAULT);
    assert_eq!(
        servers,
        [
            found(
                "dgd/sglang-disagg",
                "spec.services.decode.extraPodSpec.mainContainer",
                Some("decode"),
                None,
                "decode",
                release
            ),
            found(
                "dgd/sglang-disagg",
                "spec.services.prefill.extraPodSpec.mainContainer",
                Some("prefill"),
                None,
                "prefill",
                release
            ),
            found(
                "dgd/sglang-disagg-v1beta1",
                "spec.components[1].podTemplate.spec.containers[0]",
                Some("decode"),
                None,
                "decode",
                release
            ),
        ]
    );
    // The v1beta1 Frontend runs the image's entrypoint: said, not reported as a server.
    assert!(stderr.contains("component Frontend container main"), "{stderr}");
    assert!(!stderr.contains("service Frontend"), "dynamo.frontend is no server: {stderr}");
}

#[test]
fn aibrix_storm_service_roles() {
    let (servers, stderr) = check("aibrix-stormservice.yaml");
    let at = |role: usize| format!("spec.template.spec.roles[{role}].template.spec.containers[0]");
    assert_eq!(
        servers,
        [
            found("stormservice/tp-1p1d", &at(1), Some("prefill"), None, "prefill", ("0.5.22", IMAGE)),
            found("stormservice/tp-1p1d", &at(2), Some("decode"), None, "decode", ("0.5.22", IMAGE)),
        ]
    );
    assert!(!stderr.contains("mini-lb"), "{stderr}");
}

#[test]
fn unknown_kinds_are_searched() {
    let (servers, _) = check("generic-llminferenceservice.yaml");
    assert_eq!(
        servers,
        [
            found(
                "llminferenceservice/llama-pd",
                "spec.prefill.template.containers[0]",
                None,
                None,
                "prefill",
                ("0.5.23", IMAGE)
            ),
            found(
                "llminferenceservice/llama-pd",
                "spec.template.containers[0]",
                None,
                None,
                "decode",
                ("0.5.23", IMAGE)
            ),
        ]
    );
}

/// host_pool on a pure-SWA model is rewritten where each pod's command line sits: the decode
/// worker's in its `workerTemplatePatch`, the leader's in the base template.
#[test]
fn rewrites_patch_the_container_where_it_sits() {
    let args =
        |extra: &[&str]| -> Vec<String> { HOST_POOL_DECODE_ARGS.iter().chain(extra).map(|s| s.to_string()).collect() };
    let object = json!({
        "apiVersion": "workloads.x-k8s.io/v1alpha2", "kind": "RoleBasedGroup",
        "metadata": {"name": "pd", "namespace": "default", "annotations": {"kvpilot.dev/model-config": "configmap/m"}},
        "spec": {"roles": [{"name": "decode", "leaderWorkerPattern": {"size": 2,
            "template": {"spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23",
                "command": ["python3", "-m", "sglang.launch_server"], "args": args(&[])}]}},
            "workerTemplatePatch": {"spec": {"containers": [{"name": "sglang", "args": args(&["--node-rank", "1"])}]}}}}]}
    });
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("tests/fixtures/configs/custom-pure-swa.json")).unwrap())
            .unwrap();
    let configs = kvpilot::policy::ModelConfigs::target(config);
    let fallback = ReleaseChoice::default_newest();
    let inspection = guard::inspect(&object, &fallback);
    assert_eq!(inspection.servers.len(), 2);
    let verdicts: Vec<ServerVerdict> =
        inspection.servers.iter().map(|s| server_flags::check(s, &configs, true).unwrap()).collect();
    let rewritten: Vec<guard::Rewritten> =
        inspection.servers.iter().zip(&verdicts).map(|(s, v)| v.rewritten(s)).collect();
    let patch = guard::rewrite_patch(&object, &rewritten).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    let lwp = &patched["spec"]["roles"][0]["leaderWorkerPattern"];
    assert_eq!(lwp["template"]["spec"]["containers"][0]["args"][5], "cpu_tensor", "{patched}");
    assert_eq!(lwp["workerTemplatePatch"]["spec"]["containers"][0]["args"][5], "cpu_tensor", "{patched}");
    assert_eq!(lwp["workerTemplatePatch"]["spec"]["containers"][0]["args"][7], "1", "the rest stays");
    for template in ["template", "workerTemplatePatch"] {
        let record = lwp[template]["metadata"]["annotations"][guard::REWRITES_ANNOTATION].as_str().unwrap();
        assert!(record.contains("cpu_tensor"), "{template}: {record}");
    }
    let paths: Vec<String> = serde_json::to_value(&patch)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        paths.contains(&"/spec/roles/0/leaderWorkerPattern/workerTemplatePatch/spec/containers/0/args/5".into()),
        "{paths:?}"
    );
    // Rewritten, both pods pass.
    let again = guard::inspect(&patched, &fallback);
    assert!(again.servers.iter().all(|s| server_flags::check(s, &configs, false).unwrap().findings.is_empty()));
}

/// The flags in the base template's `command` (as in rbg's pd-disagg-leader-worker.yaml), the
/// worker's patch adding `args`: leader and worker both read the base's command list, and the
/// one removal they both ask for is made once.
#[test]
fn an_edit_to_a_shared_base_list_is_made_once() {
    let object = json!({
        "apiVersion": "workloads.x-k8s.io/v1alpha2", "kind": "RoleBasedGroup",
        "metadata": {"name": "pd", "annotations": {"kvpilot.dev/model-config": "configmap/m"}},
        "spec": {"roles": [{"name": "decode", "leaderWorkerPattern": {
            "template": {"spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23",
                "command": ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m",
                    "--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"]}]}},
            "workerTemplatePatch": {"spec": {"containers": [{"name": "sglang", "args": ["--node-rank", "1"]}]}}}}]}
    });
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("tests/fixtures/configs/custom-pure-swa.json")).unwrap())
            .unwrap();
    let configs = kvpilot::policy::ModelConfigs::target(config);
    let fallback = ReleaseChoice::default_newest();
    let inspection = guard::inspect(&object, &fallback);
    assert_eq!(inspection.servers.len(), 2);
    let verdicts: Vec<ServerVerdict> =
        inspection.servers.iter().map(|s| server_flags::check(s, &configs, true).unwrap()).collect();
    assert!(verdicts.iter().all(|v| !v.rewrites.is_empty()), "both pods need the radix cache off");
    let rewritten: Vec<guard::Rewritten> =
        inspection.servers.iter().zip(&verdicts).map(|(s, v)| v.rewritten(s)).collect();
    let patch = guard::rewrite_patch(&object, &rewritten).unwrap();
    let removals =
        serde_json::to_value(&patch).unwrap().as_array().unwrap().iter().filter(|op| op["op"] == "remove").count();
    assert_eq!(removals, 1);
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    let command = &patched["spec"]["roles"][0]["leaderWorkerPattern"]["template"]["spec"]["containers"][0]["command"];
    assert_eq!(
        command,
        &json!([
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/m",
            "--disaggregation-mode",
            "decode"
        ])
    );
}

/// Arbitrary YAML-ish values where pod specs, roles, patches and containers go.
fn yamlish() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "[ -~]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("python3"),
            Just("-m"),
            Just("sglang.launch_server"),
            Just("dynamo.sglang"),
            Just("--disaggregation-mode"),
            Just("decode"),
            Just("--tp"),
            Just("$(X)"),
            Just("sh"),
            Just("-c"),
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("containers".to_string()),
            Just("spec".to_string()),
            Just("template".to_string()),
            Just("command".to_string()),
            Just("args".to_string()),
            Just("env".to_string()),
            Just("name".to_string()),
            Just("image".to_string()),
            Just("roles".to_string()),
            Just("leaderWorkerPattern".to_string()),
            Just("workerTemplatePatch".to_string()),
            Just("templateRef".to_string()),
            Just("runner".to_string()),
            Just("metadata".to_string()),
            Just("annotations".to_string()),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("workloads.x-k8s.io/v1alpha2", "RoleBasedGroup"),
    ("ome.io/v1beta1", "ClusterServingRuntime"),
    ("nvidia.com/v1alpha1", "DynamoGraphDeployment"),
    ("orchestration.aibrix.ai/v1alpha1", "StormService"),
    ("example.com/v1", "Anything"),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Whatever a workload's spec holds, `kvpilot check` reads it without an input error: exit 2
    /// only says there is nothing to check (an object holding no containers), exit 3 that a
    /// server's model config.json was not read (`--offline`).
    #[test]
    fn no_yaml_workload_makes_check_exit_2(kind in 0..KINDS.len(), metadata in yamlish(), spec in yamlish()) {
        let (api_version, kind) = KINDS[kind];
        let object = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec});
        let out = kvpilot_with_input(&["check", "--offline", "-f", "-"], &serde_json::to_string(&object).unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let nothing_to_check = stderr.contains("nothing to check: the input holds no InferenceDeployment");
        prop_assert!(
            matches!(out.status.code(), Some(0 | 1 | 3)) || (out.status.code() == Some(2) && nothing_to_check),
            "{object}: {:?} {stderr}",
            out.status.code()
        );
        prop_assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
