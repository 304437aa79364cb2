//! The SGLang guard end to end: `kvpilot check` (the real binary) on every workload kind and on
//! standard input, and the guard webhook's routes with real AdmissionReview JSON, reading the
//! model's ConfigMap from the in-process API server, applying its JSON patch with `json-patch`
//! and reading the command line back.

mod common;

use kvpilot::release::ReleaseChoice;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use kvpilot::apiserver::ApiServer;
use kvpilot::sglang::guard;
use kvpilot::source::{ClusterSource, HubClient};
use kvpilot::webhook::{self, WebhookState};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt;

use common::{HOST_POOL_DECODE_ARGS, kvpilot, kvpilot_with_input, repo_arg as repo};

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect()
}

fn pure_swa_config() -> String {
    std::fs::read_to_string(repo("tests/fixtures/configs/custom-pure-swa.json")).unwrap()
}

const CONFIG_MAP: &str = "pure-swa-config";

/// A pod template running an SGLang decode server with `args`.
fn template(args: &[&str]) -> Value {
    json!({
        "metadata": {"labels": {"app": "sglang"}},
        "spec": {"containers": [{
            "name": "sglang",
            "image": "lmsysorg/sglang:v0.5.22.post1",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": args,
        }]}
    })
}

/// One object of each kind the guard reads, each with the host_pool decode server.
fn every_kind() -> Vec<Value> {
    let t = template(HOST_POOL_DECODE_ARGS);
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": t["spec"]}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": t}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r"}, "spec": {"template": t}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"template": t}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"}, "spec": {"template": t}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": t}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": t}}}}),
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "leaderTemplate": t, "workerTemplate": t}}}),
        json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "g"},
            "spec": {"roles": [
                {"name": "prefill", "template": template(&["--model-path", "/models/m", "--disaggregation-mode", "prefill"])},
                {"name": "decode", "template": t}]}}),
    ];
    objects
        .into_iter()
        .map(|mut o| {
            o["metadata"]["namespace"] = json!("default");
            o["metadata"]["annotations"] = json!({guard::MODEL_CONFIG_ANNOTATION: format!("configmap/{CONFIG_MAP}")});
            o
        })
        .collect()
}

fn config_map_json() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": "default"},
        "data": {"config.json": pure_swa_config()}})
}

#[test]
fn check_reads_every_workload_kind_from_standard_input() {
    let mut items = every_kind();
    items.push(config_map_json());
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Vec<(String, &str, &str)> = reports
        .iter()
        .map(|r| {
            let name = match r["template"].as_str() {
                Some(template) => format!("{} {template}", r["name"].as_str().unwrap()),
                None => r["name"].as_str().unwrap().to_string(),
            };
            (name, r["mode"].as_str().unwrap(), r["verdict"].as_str().unwrap())
        })
        .collect();
    let expected = [
        ("pod/p", "decode", "rejected"),
        ("deploy/d", "decode", "rejected"),
        ("rs/r", "decode", "rejected"),
        ("sts/s", "decode", "rejected"),
        ("ds/ds", "decode", "rejected"),
        ("job/j", "decode", "rejected"),
        ("cronjob/c", "decode", "rejected"),
        ("lws/l leaderTemplate", "decode", "rejected"),
        ("lws/l workerTemplate", "decode", "rejected"),
        ("rbg/g role prefill", "prefill", "valid"),
        ("rbg/g role decode", "decode", "rejected"),
    ];
    let expected: Vec<(String, &str, &str)> = expected.iter().map(|(n, m, v)| (n.to_string(), *m, *v)).collect();
    assert_eq!(seen, expected);
    let first = &reports[0];
    // PyPI has no 0.5.22.post1: the tag names a release kvpilot does not model, so the default
    // release applies and a warning says so.
    assert_eq!(
        (first["sglang"]["version"].as_str(), first["sglang"]["source"].as_str()),
        (Some("0.5.23"), Some("Default"))
    );
    let warnings = first["warnings"].to_string();
    assert!(warnings.contains("the image tag names SGLang 0.5.22.post1, which kvpilot does not model"), "{warnings}");
    assert_eq!(first["violations"][0]["rule"], "R2");
    assert_eq!(first["violations"][0]["flag"], "--disaggregation-decode-retraction-backup=host_pool");
    assert_eq!(first["source"], "standard input, document 1");
}

#[test]
fn check_text_names_object_container_and_flag() {
    let out = kvpilot(&["check", "-f", &repo("examples/guard/deployment-rejected.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "deploy/web-decode container sglang (spec.template.spec.containers[0]): \
             --disaggregation-decode-retraction-backup=host_pool: Host-pool \
             retraction does not support pure-SWA models. (fix: use --disaggregation-decode-retraction-backup=cpu_tensor"
        ),
        "{text}"
    );
    assert!(text.contains("SGLang release: 0.5.23 (Image)"), "{text}");
    assert!(text.contains("1 checked: 0 valid, 0 rewritten, 1 rejected"), "{text}");

    let out = kvpilot(&["check", "-f", &repo("examples/guard/leaderworkerset-rewritten.yaml")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 checked: 0 valid, 2 rewritten, 0 rejected"));
}

/// A Deployment whose server runs `image` with `args` (the model's config in the ConfigMap).
fn deployment_running(image: &str, args: &[&str]) -> Value {
    let mut deployment = every_kind().remove(1);
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["image"] = json!(image);
    container["args"] = json!(args);
    deployment
}

#[test]
fn check_reports_what_the_release_s_parser_refuses_in_argparse_s_words() {
    // 0.5.23 has --cuda-graph-bs-decode and --cuda-graph-bs-prefill: the old flag is now an
    // ambiguous prefix, while `--mem-frac` is a unique one argparse accepts.
    let args = ["--model-path", "/models/m", "--cuda-graph-bs", "8", "--mem-frac", "0.8"];
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        config_map_json(), deployment_running("lmsysorg/sglang:v0.5.23-cu129", &args)]});
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let violation = &reports[0]["violations"][0];
    assert_eq!((violation["rule"].as_str(), violation["flag"].as_str()), (Some("CLI"), Some("--cuda-graph-bs")));
    assert_eq!(
        violation["message"],
        "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"
    );
    assert_eq!(reports[0]["verdict"], "rejected");
    // The same command line on 0.5.17, where --cuda-graph-bs is an option of its own.
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        config_map_json(), deployment_running("lmsysorg/sglang:v0.5.17", &args)]});
    let out = kvpilot_with_input(&["check", "-f", "-"], &list.to_string());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("✗ CLI"), "{text}");
    assert!(
        text.contains("! --mem-frac: SGLang 0.5.17's argparse reads this abbreviation as --mem-fraction-static"),
        "{text}"
    );
    // Unknown flags, in the text report with the rule first.
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [config_map_json(), deployment_running(
        "lmsysorg/sglang:v0.5.23", &["--model-path", "/models/m", "--enable-deepep-moe", "--tp-size", "two"])]});
    let out = kvpilot_with_input(&["check", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "✗ CLI deploy/d container sglang (spec.template.spec.containers[0]): --tp-size/--tensor-parallel-size: \
             argument --tp-size/--tensor-parallel-size: invalid int value: 'two' (fix: give --tp-size a whole number)"
        ),
        "{text}"
    );
}

#[test]
fn what_the_parser_refuses_is_reported_even_when_the_config_is_not_read() {
    // A hub model skipped by --offline: no rule is checked, but SGLang would exit on the argv.
    let mut deployment = deployment_running("lmsysorg/sglang:v0.5.23", &["--model-path", "org/model", "--tp-size=x"]);
    deployment["metadata"]["annotations"] = json!({});
    let out = kvpilot_with_input(&["check", "-o", "json", "--offline", "-f", "-"], &deployment.to_string());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["verdict"], "rejected");
    assert_eq!(
        reports[0]["violations"][0]["message"],
        "argument --tp-size/--tensor-parallel-size: invalid int value: 'x'"
    );
    assert!(reports[0].get("layout").is_none(), "{}", reports[0]);
    assert!(reports[0]["warnings"][0].as_str().unwrap().starts_with("the model's config.json was not read"));
    // Without a refusal such a server is not checked: listed, and the run is not green.
    let mut accepted = deployment.clone();
    accepted["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--model-path", "org/model"]);
    let out = kvpilot_with_input(&["check", "-o", "json", "--offline", "-f", "-"], &accepted.to_string());
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["verdict"], "unchecked");
    assert_eq!(reports[0]["name"], "deploy/d container sglang (spec.template.spec.containers[0])");
    assert!(reports[0]["reason"].as_str().unwrap().contains("its config.json is at https://huggingface.co/org/model/"));
}

#[test]
fn a_command_line_in_one_command_word_is_refused_as_a_container_that_never_starts() {
    // As published manifests write it: a folded scalar, one `command` item.
    let mut deployment = deployment_running("lmsysorg/sglang:v0.5.23", &[]);
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["command"] = json!(["python3 -m sglang.launch_server --model-path org/model --tp-size x"]);
    deployment["metadata"]["annotations"] = json!({});
    let out = kvpilot_with_input(&["check", "-o", "json", "--offline", "-f", "-"], &deployment.to_string());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["verdict"], "rejected");
    let rules: Vec<&str> =
        reports[0]["violations"].as_array().unwrap().iter().filter_map(|v| v["rule"].as_str()).collect();
    assert_eq!(rules, ["EXEC", "CLI"], "the container never starts; once split, SGLang refuses --tp-size x");
    let exec = &reports[0]["violations"][0];
    assert!(exec["message"].as_str().unwrap().starts_with("command[0] is a whole command line in one word"), "{exec}");
    assert!(exec["fix"].as_str().unwrap().contains("one item per word"), "{exec}");
}

#[test]
fn an_image_older_than_every_known_release_is_checked_as_the_oldest() {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        config_map_json(), deployment_running("lmsysorg/sglang:v0.5.9-cu126", &["--model-path", "/models/m"])]});
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let sglang = &reports[0]["sglang"];
    assert_eq!((sglang["version"].as_str(), sglang["requested"].as_str()), (Some("0.5.17"), Some("0.5.9")));
    assert!(
        reports[0]["warnings"].to_string().contains(
            "SGLang 0.5.9 (Image) is older than any release kvpilot knows; its rules are checked as SGLang 0.5.17, \
             the oldest known"
        ),
        "{}",
        reports[0]["warnings"]
    );
}

#[test]
fn check_rewrites_in_a_namespace_labelled_for_rewrites() {
    let mut deployment = every_kind().remove(1);
    deployment["metadata"]["namespace"] = json!("inference");
    let mut config_map = config_map_json();
    config_map["metadata"]["namespace"] = json!("inference");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "inference", "labels": {"kvpilot.dev/guard": "enforce", guard::ON_INVALID_LABEL: "rewrite"}}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [namespace, config_map, deployment]});
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (reports[0]["namespace"].as_str(), reports[0]["verdict"].as_str()),
        (Some("inference"), Some("rewritten"))
    );
    assert_eq!(reports[0]["rewrites"][0]["to"], "--disaggregation-decode-retraction-backup=cpu_tensor");
}

#[test]
fn check_pairs_prefill_and_decode_deployments_of_one_model_for_t1() {
    let gpt_oss = std::fs::read_to_string(repo("tests/fixtures/configs/gpt-oss-20b.json")).unwrap();
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpt-oss"},
        "data": {"config.json": gpt_oss}});
    let side = |name: &str, mode: &str, tp: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": {guard::MODEL_CONFIG_ANNOTATION: "configmap/gpt-oss"}},
            "spec": {"template": template(&["--model-path", "/models/gpt-oss-20b", "--disaggregation-mode", mode, "--tp-size", tp])}})
    };
    let list = json!({"apiVersion": "v1", "kind": "List",
        "items": [config_map, side("gpt-prefill", "prefill", "2"), side("gpt-decode", "decode", "4")]});
    // The image tag names no release kvpilot models, so --sglang-version decides: up to 0.5.21
    // mooncake needs equal attention TP for a hybrid-SWA model, from 0.5.22 it does not.
    let out = kvpilot_with_input(&["check", "-o", "json", "--sglang-version", "0.5.21", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let decode = reports.iter().find(|r| r["name"] == "deploy/gpt-decode").unwrap();
    assert_eq!(decode["violations"][0]["rule"], "T1");
    assert_eq!(decode["violations"][0]["flag"], "--tp-size=4");
    assert!(
        decode["violations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("does NOT support PD different TP sizes for non-MLA SWA hybrid models"),
        "{decode}"
    );
    let out = kvpilot_with_input(&["check", "-o", "json", "--sglang-version", "0.5.23", "-f", "-"], &list.to_string());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn check_reads_the_paired_prefill_s_attention_cp_and_kv_sharding_for_the_handshake() {
    let deepseek = std::fs::read_to_string(repo("tests/fixtures/configs/deepseek-v3.json")).unwrap();
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dsv3"},
        "data": {"config.json": deepseek}});
    let side = |name: &str, args: &[&str]| {
        let mut argv = vec!["--model-path", "/models/dsv3"];
        argv.extend_from_slice(args);
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": {guard::MODEL_CONFIG_ANNOTATION: "configmap/dsv3"}},
            "spec": {"template": template(&argv)}})
    };
    let check = |prefill: &[&str], decode: &[&str]| {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [config_map.clone(),
            side("dsv3-prefill", &[&["--disaggregation-mode", "prefill"], prefill].concat()),
            side("dsv3-decode", &[&["--disaggregation-mode", "decode"], decode].concat())]});
        let out =
            kvpilot_with_input(&["check", "-o", "json", "--sglang-version", "0.5.23", "-f", "-"], &list.to_string());
        let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let decode = reports.iter().find(|r| r["name"] == "deploy/dsv3-decode").unwrap().clone();
        decode["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["rule"].clone(), v["message"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        check(&["--tp-size", "4", "--attn-cp-size", "2"], &["--tp-size", "2", "--dcp-size", "2"]),
        vec![(json!("R19e"), json!("PD decode DCP currently requires prefill attention CP=1, got 2."))]
    );
    // Attention CP 2 of TP 4 is attention TP 2, the decode's: nothing to say without DCP.
    assert_eq!(check(&["--tp-size", "4", "--attn-cp-size", "2"], &["--tp-size", "2"]), vec![]);
    assert_eq!(
        check(&["--tp-size", "2", "--enable-kv-cache-sharding"], &["--tp-size", "4"]),
        vec![(
            json!("P5"),
            json!("MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill=2 decode=4")
        )]
    );
}

/// A ConfigMap `name` holding `tests/fixtures/configs/<fixture>.json` as its config.json.
fn fixture_config_map(name: &str, fixture: &str) -> Value {
    let config = std::fs::read_to_string(repo(&format!("tests/fixtures/configs/{fixture}.json"))).unwrap();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
        "data": {"config.json": config}})
}

#[test]
fn check_reads_the_speculative_draft_model_s_config_for_t11() {
    let args = [
        "--model-path",
        "/models/dsv4",
        "--disaggregation-mode",
        "decode",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        "/models/dsv4-nextn",
        // DeepSeek-V4 runs EAGLE with one draft token per step only (V2).
        "--speculative-eagle-topk",
        "1",
    ];
    let mut deployment = deployment_running("lmsysorg/sglang:v0.5.22", &args);
    deployment["metadata"]["annotations"] = json!({
        guard::MODEL_CONFIG_ANNOTATION: "configmap/dsv4", guard::DRAFT_MODEL_CONFIG_ANNOTATION: "configmap/draft"});
    let list = |draft: &str, deployment: &Value| {
        json!({"apiVersion": "v1", "kind": "List", "items": [
            fixture_config_map("dsv4", "deepseek-v4"), fixture_config_map("draft", draft), deployment]})
        .to_string()
    };
    let out =
        kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list("deepseek-v4-nextn-window-64", &deployment));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let t11: Vec<&Value> = reports[0]["violations"].as_array().unwrap().iter().filter(|v| v["rule"] == "T11").collect();
    assert_eq!(t11.len(), 1, "{reports:?}");
    assert_eq!(t11[0]["flag"], "--speculative-draft-model-path=/models/dsv4-nextn");
    assert_eq!(
        t11[0]["message"],
        "DSV4 target and draft pools must share paged SWA geometry: target=(256, 128), draft=(256, 64)"
    );
    let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list("deepseek-v4-nextn", &deployment));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));

    // A draft whose config.json cannot be found: checked with the model's own window, and said so.
    deployment["metadata"]["annotations"] = json!({guard::MODEL_CONFIG_ANNOTATION: "configmap/dsv4"});
    let out =
        kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list("deepseek-v4-nextn-window-64", &deployment));
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--speculative-draft-model-path /models/dsv4-nextn is not a hub id"), "{err}");
    assert!(err.contains(guard::DRAFT_MODEL_CONFIG_ANNOTATION), "{err}");
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = reports[0]["warnings"].to_string();
    assert!(warnings.contains("the config.json of the draft model /models/dsv4-nextn was not read"), "{warnings}");
}

#[test]
fn check_says_which_annotation_a_local_model_path_needs() {
    let mut deployment = every_kind().remove(1);
    deployment["metadata"]["annotations"] = json!({});
    let out = kvpilot_with_input(&["check", "-f", "-"], &deployment.to_string());
    assert_eq!(out.status.code(), Some(3), "a server whose model kvpilot cannot find is not checked");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "deploy/d container sglang (spec.template.spec.containers[0]): not checked: --model-path /models/m is not a \
             hub id"
        )
            && err.contains("kvpilot.dev/model-config (configmap/NAME, configmap/NAME/KEY or hub/ORG/NAME[@REVISION])"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 checked: 0 valid, 0 rewritten, 0 rejected; 1 not checked")
    );
}

#[test]
fn check_refuses_malformed_input_on_standard_input() {
    let out = kvpilot_with_input(&["check", "-f", "-"], "kind: [unclosed");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard input, document 1: not valid YAML"));
}

// ---- the webhook ----

async fn cluster_state() -> (ApiServer, WebhookState) {
    let server = ApiServer::new();
    let config_map: ConfigMap = serde_json::from_value(config_map_json()).unwrap();
    Api::<ConfigMap>::namespaced(server.client(), "default").create(&PostParams::default(), &config_map).await.unwrap();
    let hub = Arc::new(HubClient::new(Duration::from_secs(60), Duration::from_secs(5), &[]).unwrap());
    let source = ClusterSource::new(server.client(), hub, "https://huggingface.co");
    (server, WebhookState { source: Some(source), default_release: ReleaseChoice::default_newest() })
}

fn admission_review(object: &Value) -> Value {
    update_review(object, None)
}

/// An UPDATE review when `old` is given, else a CREATE.
fn update_review(object: &Value, old: Option<&Value>) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let resource = json!({"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())});
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0c1f4e0a-6d6c-4b51-9a43-3b1c2a3d4e5f",
            "kind": gvk, "resource": resource, "requestKind": gvk, "requestResource": resource,
            "name": object["metadata"]["name"],
            "namespace": "default",
            "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if old.is_some() { "UpdateOptions" } else { "CreateOptions" }}
        }
    })
}

async fn post(state: &WebhookState, path: &str, review: &Value) -> Value {
    let request = axum::http::Request::post(path).body(Body::from(review.to_string())).unwrap();
    let response = webhook::router(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let answer: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    answer["response"].clone()
}

#[tokio::test]
async fn enforce_denies_every_kind_with_sglang_s_message() {
    let (_server, state) = cluster_state().await;
    for object in every_kind() {
        let response = post(&state, "/guard/enforce", &admission_review(&object)).await;
        assert_eq!(response["allowed"], false, "{object}");
        assert_eq!(response["status"]["code"], 422);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("SGLang flags the model cannot run: R2 "),
            "the refusal names the rule first: {message}"
        );
        assert!(
            message.contains(
                "containers[0]): --disaggregation-decode-retraction-backup=host_pool: Host-pool retraction does not \
                 support pure-SWA models."
            ),
            "{message}"
        );
    }
}

#[tokio::test]
async fn enforce_denies_and_warn_reports_what_the_release_s_parser_refuses() {
    let (_server, state) = cluster_state().await;
    let deployment = deployment_running(
        "lmsysorg/sglang:v0.5.23",
        &["--model-path", "/models/m", "--prefill-round-robin-balance", "--tp", "2"],
    );
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "SGLang flags the model cannot run: CLI deploy/d container sglang (spec.template.spec.containers[0]): \
             --prefill-round-robin-balance: unrecognized arguments: --prefill-round-robin-balance"
        ),
        "{message}"
    );
    let response = post(&state, "/guard/warn", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], true);
    let warnings = response["warnings"].to_string();
    assert!(warnings.contains("unrecognized arguments: --prefill-round-robin-balance"), "{warnings}");
    assert!(warnings.contains("--tp: SGLang 0.5.23's argparse reads this abbreviation as --tp-size"), "{warnings}");
}

#[tokio::test]
async fn enforce_denies_what_the_parser_refuses_without_the_model_config() {
    let (_server, state) = cluster_state().await;
    let mut deployment =
        deployment_running("lmsysorg/sglang:v0.5.23", &["--model-path", "/models/m", "--cuda-graph-bs", "8"]);
    deployment["metadata"]["annotations"] = json!({});
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("CLI deploy/d container sglang"), "{message}");
    assert!(message.contains("ambiguous option: --cuda-graph-bs could match"), "{message}");
}

#[tokio::test]
async fn updates_are_checked_only_when_a_pod_template_changes() {
    let (_server, state) = cluster_state().await;
    let deployment = every_kind().remove(1);
    let mut scaled = deployment.clone();
    scaled["spec"]["replicas"] = json!(3);
    scaled["metadata"]["labels"] = json!({"team": "a"});
    let response = post(&state, "/guard/enforce", &update_review(&scaled, Some(&deployment))).await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut changed = deployment.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["args"][1] = json!("/models/other");
    let response = post(&state, "/guard/enforce", &update_review(&changed, Some(&deployment))).await;
    assert_eq!(response["allowed"], false, "{response}");
}

#[tokio::test]
async fn warn_allows_with_the_violation_as_a_warning() {
    let (_server, state) = cluster_state().await;
    let deployment = every_kind().remove(1);
    let response = post(&state, "/guard/warn", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none_or(Value::is_null));
    let warnings = response["warnings"].as_array().unwrap();
    assert!(
        warnings[0].as_str().unwrap().starts_with(
            "R2 deploy/d container sglang (spec.template.spec.containers[0]): \
             --disaggregation-decode-retraction-backup=host_pool: Host-pool retraction"
        ),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn valid_workloads_and_other_containers_are_allowed_quietly() {
    let (_server, state) = cluster_state().await;
    let mut deployment = every_kind().remove(1);
    deployment["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--model-path", "/models/m"]);
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let nginx = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let response = post(&state, "/guard/enforce", &admission_review(&nginx)).await;
    assert_eq!((response["allowed"].as_bool(), response.get("warnings")), (Some(true), None));
}

/// The pods kvpilot runs for an InferenceDeployment (SGLang prefill and decode servers started
/// with the flags the controller decided) are admitted in guarded namespaces without a word, the
/// guard reading the model's config.json from the ConfigMap their annotation names.
#[tokio::test]
async fn an_inference_deployment_s_own_pods_pass_the_guard() {
    let (server, state) = cluster_state().await;
    let files = [
        "examples/mimo-pure-swa-rewrite.yaml",
        "examples/deepseek-v3-tp16-multinode.yaml",
        "examples/llama-3.1-8b-full.yaml",
    ];
    for file in files {
        let resource: kvpilot::api::InferenceDeployment = serde_json::from_value(documents(file).remove(0)).unwrap();
        let config = Value::Object(resource.spec.model.config.inline.clone().unwrap());
        let assessment = kvpilot::sglang::verdict::assess(
            &resource.spec,
            &kvpilot::policy::ModelConfigs::target(config),
            &ReleaseChoice::default_newest(),
        )
        .unwrap();
        let options = kvpilot::controller::desired::RenderOptions::default();
        let desired = kvpilot::controller::desired::desired_state(&resource, &assessment, &options);
        Api::<ConfigMap>::namespaced(server.client(), "default")
            .create(&PostParams::default(), &desired.config_map)
            .await
            .unwrap();
        for pod in desired.fleets().flat_map(|fleet| fleet.replica(0)) {
            let pod = kvpilot::controller::desired::with_type_meta(&pod, "v1", "Pod");
            let response = post(&state, "/guard/enforce", &admission_review(&pod)).await;
            assert_eq!(
                (response["allowed"].as_bool(), response.get("warnings")),
                (Some(true), None),
                "{file}: {response}"
            );
        }
    }
}

#[tokio::test]
async fn unreadable_model_configs_are_allowed_with_a_warning_naming_the_annotation() {
    let (_server, state) = cluster_state().await;
    let mut deployment = every_kind().remove(1);
    deployment["metadata"]["annotations"] = json!({});
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], true);
    assert!(response["warnings"][0].as_str().unwrap().contains("add the annotation kvpilot.dev/model-config"));
    deployment["metadata"]["annotations"] = json!({guard::MODEL_CONFIG_ANNOTATION: "configmap/missing"});
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert_eq!(response["allowed"], true);
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(warning.contains("ConfigMap default/missing (the annotation kvpilot.dev/model-config)"), "{warning}");
    assert!(!warning.contains("spec.model.config"), "a Deployment has no such field: {warning}");
}

#[tokio::test]
async fn a_draft_config_that_cannot_be_read_is_spoken_of_only_where_the_check_reads_it() {
    let (server, state) = cluster_state().await;
    let dsv4 = std::fs::read_to_string(repo("tests/fixtures/configs/deepseek-v4.json")).unwrap();
    let config_map: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dsv4", "namespace": "default"}, "data": {"config.json": dsv4}}))
    .unwrap();
    Api::<ConfigMap>::namespaced(server.client(), "default").create(&PostParams::default(), &config_map).await.unwrap();
    let args = [
        "--model-path",
        "/models/target",
        "--disaggregation-mode",
        "decode",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        "/models/draft",
        // DeepSeek-V4 runs EAGLE with one draft token per step only (V2).
        "--speculative-eagle-topk",
        "1",
    ];
    let mut deployment = deployment_running("lmsysorg/sglang:v0.5.22", &args);
    let warnings_for = |model: &str| {
        let mut deployment = deployment.clone();
        deployment["metadata"]["annotations"] = json!({
            guard::MODEL_CONFIG_ANNOTATION: format!("configmap/{model}"),
            guard::DRAFT_MODEL_CONFIG_ANNOTATION: "configmap/no-draft"});
        let state = state.clone();
        async move {
            let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
            assert_eq!(response["allowed"], true, "{response}");
            response["warnings"].as_array().cloned().unwrap_or_default()
        }
    };

    // A DeepSeek-V4 model, whose check compares the draft's window (T11): the draft is named.
    let said = warnings_for("dsv4").await;
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].as_str().unwrap().contains("could not read the draft model's config.json"), "{said:?}");
    assert!(said[0].as_str().unwrap().contains("ConfigMap default/no-draft"), "{said:?}");
    assert!(said[1].as_str().unwrap().contains("T11 took the draft's sliding window to be the model's"), "{said:?}");

    // A model whose check never reads the draft: nothing is said about it.
    let said = warnings_for(CONFIG_MAP).await;
    assert!(said.is_empty(), "{said:?}");

    // The model's config.json is not found either: the server is not checked, and that is all.
    let said = warnings_for("missing").await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].as_str().unwrap().contains("not checked") && said[0].as_str().unwrap().contains("default/missing"));

    // Without an annotation for a local draft path, the annotation is named (DeepSeek-V4 only).
    deployment["metadata"]["annotations"] = json!({guard::MODEL_CONFIG_ANNOTATION: "configmap/dsv4"});
    let response = post(&state, "/guard/enforce", &admission_review(&deployment)).await;
    assert!(response["warnings"].to_string().contains(guard::DRAFT_MODEL_CONFIG_ANNOTATION), "{response}");
}

fn apply_patch(object: &Value, response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD.decode(response["patch"].as_str().unwrap()).unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    patched
}

#[tokio::test]
async fn rewrite_patches_the_example_lws_script_and_args() {
    let (_server, state) = cluster_state().await;
    let lws = documents("examples/guard/leaderworkerset-rewritten.yaml").remove(0);
    let response = post(&state, "/guard/rewrite", &admission_review(&lws)).await;
    assert_eq!(response["allowed"], true);
    let patched = apply_patch(&lws, &response);
    let template = &patched["spec"]["leaderWorkerTemplate"];
    let script = template["leaderTemplate"]["spec"]["containers"][0]["command"][2].as_str().unwrap();
    assert!(script.contains("--disaggregation-decode-retraction-backup cpu_tensor \\\n"), "{script}");
    assert_eq!(
        template["workerTemplate"]["spec"]["containers"][0]["args"][2],
        "--disaggregation-decode-retraction-backup=cpu_tensor"
    );
    for side in ["leaderTemplate", "workerTemplate"] {
        let record = template[side]["metadata"]["annotations"][guard::REWRITES_ANNOTATION].as_str().unwrap();
        assert!(record.contains("host_pool → --disaggregation-decode-retraction-backup=cpu_tensor (R2"), "{record}");
    }
    let warnings = response["warnings"].as_array().unwrap();
    assert!(
        warnings[0].as_str().unwrap().starts_with("kvpilot rewrote lws/decode leaderTemplate container sglang-leader")
    );
    // The rewritten object passes enforce, and a second rewrite pass changes nothing.
    let again = post(&state, "/guard/enforce", &admission_review(&patched)).await;
    assert_eq!(again["allowed"], true, "{again}");
    let second = post(&state, "/guard/rewrite", &admission_review(&patched)).await;
    assert!(second.get("patch").is_none_or(Value::is_null), "{second}");
}

#[tokio::test]
async fn kinds_without_containers_are_allowed_and_non_reviews_refused() {
    let (_server, state) = cluster_state().await;
    // Any kind the webhook's rules send is searched for containers (guard.extraResources); a
    // ConfigMap has none.
    let config_map = config_map_json();
    let response = post(&state, "/guard/enforce", &admission_review(&config_map)).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none_or(Value::is_null), "{response}");
    let request = axum::http::Request::post("/guard/warn").body(Body::from("{}")).unwrap();
    let response = webhook::router(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 400);
}

#[test]
fn check_reads_iquest_q1_s_mtp_draft_config_for_its_draft_checks() {
    let check = |draft_path: &str, draft_config: Option<&str>| {
        let args = [
            "--model-path",
            "/models/q1",
            "--speculative-algorithm",
            "NEXTN",
            "--speculative-draft-model-path",
            draft_path,
        ];
        let mut deployment = deployment_running("lmsysorg/sglang:v0.5.23", &args);
        let mut annotations = json!({guard::MODEL_CONFIG_ANNOTATION: "configmap/q1"});
        let mut items = vec![fixture_config_map("q1", "parity/iquest-q1")];
        if let Some(draft) = draft_config {
            annotations[guard::DRAFT_MODEL_CONFIG_ANNOTATION] = json!("configmap/draft");
            items.push(fixture_config_map("draft", draft));
        }
        deployment["metadata"]["annotations"] = annotations;
        items.push(deployment);
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
        let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list);
        let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let rules: Vec<String> = reports[0]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["rule"].as_str().unwrap().to_string())
            .collect();
        (out.status.code(), rules, reports[0]["warnings"].to_string())
    };
    assert_eq!(check("/models/q1-mtp", Some("parity/iquest-q1-mtp")).0, Some(0));
    let (code, rules, _) = check("/models/q1-mtp", Some("parity/iquest-q1-mtp-other-target"));
    assert_eq!((code, rules), (Some(1), vec!["IQ12".to_string()]));
    let (code, rules, _) = check("/models/q1", Some("parity/iquest-q1"));
    assert_eq!((code, rules), (Some(1), vec!["IQ9".to_string()]), "the model's own path");
    // A draft whose config.json cannot be found: the checks that read it are not made, and said so.
    let (code, _, warnings) = check("/models/q1-mtp", None);
    assert_eq!(code, Some(0));
    assert!(warnings.contains("IQuest Q1's MTP draft checks that read it"), "{warnings}");
}

/// The ConfigMap and first pod `kvpilot render` makes of an example with `spec.cache`.
fn rendered_cache_pod() -> (Value, Value) {
    let out = kvpilot(&["render", "-o", "json", "-f", &repo("examples/deepseek-v3-tp16-multinode.yaml")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let find = |kind: &str| items.iter().find(|i| i["kind"] == kind).unwrap().clone();
    (find("ConfigMap"), find("Pod"))
}

fn container_named<'a>(pod: &'a mut Value, list: &str, name: &str) -> &'a mut Value {
    pod["spec"][list].as_array_mut().unwrap().iter_mut().find(|c| c["name"] == name).unwrap()
}

#[test]
fn check_refuses_a_cache_pod_whose_server_cannot_reach_the_runtime_or_import_the_connector() {
    let (config_map, pod) = rendered_cache_pod();
    let check = |pod: &Value| {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [config_map, pod]});
        let out = kvpilot_with_input(&["check", "-o", "json", "-f", "-"], &list.to_string());
        let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (out.status.code(), reports)
    };
    let (code, reports) = check(&pod);
    assert_eq!((code, reports[0]["verdict"].as_str()), (Some(0), Some("valid")), "{reports:?}");

    // The server mounts the socket's volume somewhere else than the path its argv names.
    let mut socket_elsewhere = pod.clone();
    let mounts = container_named(&mut socket_elsewhere, "containers", "sglang")["volumeMounts"].as_array_mut().unwrap();
    mounts.iter_mut().find(|m| m["mountPath"] == "/run/kvpilot").unwrap()["mountPath"] = json!("/run/kvpilot-sidecar");
    // The installer writes the connector one directory below the server's PYTHONPATH.
    let mut installer_elsewhere = pod.clone();
    container_named(&mut installer_elsewhere, "initContainers", "install-connector")["args"] =
        json!(["install-connector", "/opt/kvpilot-py/lib"]);
    for (broken, field, says) in [
        (&socket_elsewhere, "--hicache-storage-backend-extra-config", "sees at /run/kvpilot-sidecar/cache.sock"),
        (&installer_elsewhere, "env PYTHONPATH", "cannot import kvpilot_sglang.hicache"),
    ] {
        let (code, reports) = check(broken);
        assert_eq!(code, Some(1), "{reports:?}");
        let violations = reports[0]["violations"].as_array().unwrap();
        let pod10: Vec<&Value> = violations.iter().filter(|v| v["rule"] == "POD10").collect();
        assert_eq!(pod10.len(), 1, "{violations:?}");
        assert_eq!(pod10[0]["field"], field);
        assert!(pod10[0]["message"].as_str().unwrap().contains(says), "{}", pod10[0]["message"]);
    }
}
