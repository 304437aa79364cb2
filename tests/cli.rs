//! The `kvpilot` binary's contracts: `crd`, `layout`, `check` (exit codes, JSON, ConfigMap
//! resolution, hub sources served by a real HTTP server on loopback).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;
use common::output::{stderr, stdout, write};
use common::{kvpilot, repo_arg as repo};

#[test]
fn crd_prints_the_committed_file() {
    let out = kvpilot(&["crd"]);
    assert!(out.status.success());
    let committed = std::fs::read_to_string(repo("crds/inferencedeployment.yaml")).unwrap();
    assert!(stdout(&out) == committed, "kvpilot crd differs from crds/inferencedeployment.yaml; regenerate it");
}

#[test]
fn version_prints_the_package_version() {
    let out = kvpilot(&["version"]);
    assert_eq!(stdout(&out).trim(), format!("kvpilot {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn layout_prints_one_json_object() {
    let out = kvpilot(&["layout", "--config", &repo("tests/fixtures/configs/gpt-oss-20b.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let layout: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(layout["kvPool"], "hybrid-swa");
    assert_eq!(layout["layers"]["fullAttention"], 12);
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(repo("tests/fixtures/layouts/gpt-oss-20b.json")).unwrap())
            .unwrap();
    assert_eq!(layout, expected);

    let disabled = kvpilot(&[
        "layout",
        "--config",
        &repo("tests/fixtures/configs/gpt-oss-20b.json"),
        "--disable-hybrid-swa-memory",
    ]);
    let layout: Value = serde_json::from_str(&stdout(&disabled)).unwrap();
    assert_eq!(layout["kvPool"], "full");
}

#[test]
fn layout_errors_name_the_file_and_field_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let no_layers = write(dir.path(), "no-layers.json", r#"{"architectures": ["LlamaForCausalLM"]}"#);
    let out = kvpilot(&["layout", "--config", &no_layers]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&no_layers) && stderr(&out).contains("num_hidden_layers"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());

    let not_json = write(dir.path(), "broken.json", "{\"architectures\": [");
    let out = kvpilot(&["layout", "--config", &not_json]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not valid JSON (line 1"), "{}", stderr(&out));

    let out = kvpilot(&["layout", "--config", "/nonexistent/config.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent/config.json"), "{}", stderr(&out));
}

fn check_json(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["check", "--output", "json"];
    all.extend_from_slice(args);
    let out = kvpilot(&all);
    let reports: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    (out.status.code(), reports, stderr(&out))
}

fn by_name<'a>(reports: &'a [Value], name: &str) -> &'a Value {
    reports.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name} not in {reports:?}"))
}

#[test]
fn check_reports_every_example_and_exits_1_on_a_rejection() {
    let (code, reports, err) = check_json(&["-f", &repo("examples")]);
    assert_eq!(code, Some(1), "{err}");
    // Nine InferenceDeployments, then the three SGLang servers of examples/guard.
    assert_eq!(reports.len(), 12);
    assert!(reports[9..].iter().all(|r| r["container"].is_string()), "{reports:?}");
    let drafted = by_name(&reports, "default/deepseek-v4-mtp");
    assert_eq!(
        (drafted["verdict"].as_str(), drafted["draftLayout"]["architecture"].as_str()),
        (Some("valid"), Some("DeepseekV4ForCausalLMNextN"))
    );
    let rejected = by_name(&reports, "default/deepseek-v3");
    assert_eq!(rejected["verdict"], "rejected");
    assert_eq!(rejected["violations"][0]["rule"], "R9");
    assert_eq!(rejected["violations"][0]["field"], "spec.disaggregation.retractionBackup");
    assert_eq!(
        rejected["violations"][0]["message"],
        "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack."
    );
    let rewritten = by_name(&reports, "default/mimo-pure-swa");
    assert_eq!(rewritten["verdict"], "rewritten");
    assert_eq!(
        rewritten["rewrites"][0],
        serde_json::json!({
            "rule": "R2", "field": "spec.disaggregation.retractionBackup", "from": "host_pool", "to": "cpu_tensor",
            "message": "Host-pool retraction does not support pure-SWA models."
        })
    );
    assert_eq!(rewritten["effective"]["retractionBackup"], "cpu_tensor");
    // Resolved from the ConfigMap in the same file.
    let from_config_map = by_name(&reports, "models/qwen3-next");
    assert_eq!(from_config_map["layout"]["kvPool"], "hybrid-ssm");
    assert_eq!(from_config_map["rewrites"].as_array().unwrap().len(), 2);
    let valid = by_name(&reports, "default/gpt-oss-20b");
    assert_eq!(
        (valid["verdict"].as_str(), valid["effective"]["retractionBackup"].as_str()),
        (Some("valid"), Some("host_pool"))
    );
}

#[test]
fn check_exits_0_when_nothing_is_rejected_and_defaults_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(repo("examples/llama-3.1-8b-full.yaml")).unwrap().replace("  namespace: default\n", "");
    write(dir.path(), "llama.yaml", &text);
    let nested = dir.path().join("nested");
    std::fs::create_dir(&nested).unwrap();
    std::fs::copy(repo("examples/mimo-pure-swa-rewrite.yaml"), nested.join("mimo.yml")).unwrap();
    write(dir.path(), "notes.txt", "not a manifest");
    let (code, reports, err) = check_json(&["-f", &dir.path().display().to_string()]);
    assert_eq!(code, Some(0), "{err}");
    let names: Vec<_> = reports.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["default/llama-3-1-8b", "default/mimo-pure-swa"]);
}

#[test]
fn check_text_output_is_readable() {
    let out = kvpilot(&["check", "-f", &repo("examples/deepseek-v3-mla-rejected.yaml")]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("default/deepseek-v3"), "{text}");
    assert!(text.contains("✗ R9 spec.disaggregation.retractionBackup"), "{text}");
    assert!(text.contains("1 checked: 0 valid, 0 rewritten, 1 rejected"), "{text}");
}

const MINIMAL: &str = r#"apiVersion: kvpilot.dev/v1alpha1
kind: InferenceDeployment
metadata:
  name: NAME
spec:
  model:
    name: acme/model
    config:
      SOURCE
"#;

fn manifest(name: &str, source: &str) -> String {
    MINIMAL.replace("NAME", name).replace("SOURCE", source)
}

#[test]
fn check_invalid_input_exits_2_naming_file_document_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let missing_cm = write(dir.path(), "missing-cm.yaml", &manifest("a", "configMapRef: {name: nowhere}"));
    let (code, reports, err) = check_json(&["-f", &missing_cm]);
    assert_eq!(code, Some(3), "a ConfigMap not in the files leaves the resource unchecked: {err}");
    assert_eq!(reports[0]["verdict"], "unchecked");
    assert!(err.contains(&format!("{missing_cm}, document 1")), "{err}");
    assert!(err.contains("ConfigMap default/nowhere"), "{err}");

    // Every type error at once, in the API server's words.
    let bad_fields = write(
        dir.path(),
        "bad-field.yaml",
        &(manifest("b", "inline: {num_hidden_layers: 2}") + "  decode:\n    replicas: two\n    tensorParallel: 2.5\n"),
    );
    let (code, _, err) = check_json(&["-f", &bad_fields]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("InferenceDeployment b: spec.decode.replicas: Invalid value: \"two\": spec.decode.replicas in body must be of type integer: \"string\""),
        "{err}"
    );
    assert!(err.contains("spec.decode.tensorParallel: Invalid value: 2.5: "), "{err}");

    // What only the CRD's CEL rules and minimums refuse.
    let out_of_range = write(
        dir.path(),
        "range.yaml",
        &(manifest("e", "inline: {num_hidden_layers: 2}")
            + "  decode:\n    tensorParallel: 0\n    nodesPerReplica: 0\n  disaggregation:\n    bootstrapPort: 0\n"),
    );
    for command in ["check", "render"] {
        let out = kvpilot(&[command, "-f", &out_of_range, "--offline"]);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        let err = stderr(&out);
        for expected in [
            "spec.decode.tensorParallel: Invalid value: \"integer\": tensorParallel must be at least 1",
            "spec.decode.nodesPerReplica: Invalid value: \"integer\": nodesPerReplica must be at least 1",
            "spec.disaggregation.bootstrapPort: Invalid value: \"integer\": spec.disaggregation.bootstrapPort must be between 1 and 65535",
        ] {
            assert!(err.contains(expected), "{command}: {expected} not in {err}");
        }
        assert!(!stdout(&out).contains("tensor-parallel-size 0"), "{command} rendered an invalid resource");
    }

    let two_sources =
        write(dir.path(), "two.yaml", &manifest("c", "inline: {num_hidden_layers: 2}\n      configMapRef: {name: x}"));
    let (code, _, err) = check_json(&["-f", &two_sources]);
    assert_eq!(code, Some(2));
    assert!(err.contains("spec.model.config: Invalid value: \"object\": set exactly one of config.inline, config.configMapRef or config.hub"), "{err}");

    let bad_yaml = write(dir.path(), "bad.yaml", "apiVersion: v1\nkind: [unclosed\n");
    let (code, _, err) = check_json(&["-f", &bad_yaml]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bad.yaml, document 1: not valid YAML"), "{err}");

    let bad_config =
        write(dir.path(), "bad-config.yaml", &manifest("d", "inline: {architectures: [LlamaForCausalLM]}"));
    let (code, _, err) = check_json(&["-f", &bad_config]);
    assert_eq!(code, Some(2));
    assert!(err.contains("field `num_hidden_layers`"), "{err}");

    let (code, _, err) = check_json(&["-f", "/nonexistent/dir"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/dir"), "{err}");
}

#[test]
fn an_input_with_nothing_to_check_is_not_green() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.yaml", "");
    let only_a_config_map = write(dir.path(), "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    for input in [empty.as_str(), only_a_config_map.as_str()] {
        for command in ["check", "render"] {
            let out = kvpilot(&[command, "-f", input]);
            assert_eq!(out.status.code(), Some(2), "{command} {input}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("nothing to check: the input holds no InferenceDeployment"),
                "{}",
                stderr(&out)
            );
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["check", "-f", "-"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "`helm template … | kvpilot check -f -` after a failed helm is not green");

    let workload = repo("examples/guard/deployment-rejected.yaml");
    let out = kvpilot(&["render", "-f", &workload]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing to render: the input holds no InferenceDeployment"), "{}", stderr(&out));
    assert!(stderr(&out).contains("run `kvpilot check -f` on them"), "{}", stderr(&out));
}

mod hub {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::get;

    use super::*;

    /// A Hugging Face-compatible hub on loopback serving one gated repository.
    async fn serve() -> SocketAddr {
        let config = std::fs::read_to_string(repo("tests/fixtures/configs/nemotron-nano-9b-v2.json")).unwrap();
        let app = Router::new().route(
            "/acme/nemotron/resolve/{revision}/config.json",
            get(move |headers: HeaderMap| async move {
                match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                    Some("Bearer hub-token") => (StatusCode::OK, config.clone()),
                    _ => (StatusCode::UNAUTHORIZED, "gated".to_string()),
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    fn hub_manifest(addr: SocketAddr, with_secret: bool) -> String {
        let mut text = manifest(
            "nemotron",
            &format!("hub: {{repo: acme/nemotron, endpoint: \"http://{addr}\", tokenSecretRef: {{name: hub-token}}}}"),
        ) + "  disaggregation:\n    retractionBackup: host_pool\n";
        if with_secret {
            text +=
                "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hub-token\nstringData:\n  token: hub-token\n";
        }
        text
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_fetches_hub_sources_with_the_token_secret() {
        let addr = serve().await;
        let dir = tempfile::tempdir().unwrap();
        let with_token = write(dir.path(), "hub.yaml", &hub_manifest(addr, true));
        let (code, reports, err) = tokio::task::spawn_blocking(move || check_json(&["-f", &with_token])).await.unwrap();
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(reports[0]["layout"]["kvPool"], "hybrid-ssm");
        assert_eq!(reports[0]["violations"][0]["rule"], "R1");
        assert_eq!(reports[0]["violations"][0]["message"], "Host-pool retraction does not support Mamba models.");

        let without_token = write(dir.path(), "hub-no-secret.yaml", &hub_manifest(addr, false));
        let path = without_token.clone();
        let (code, reports, err) = tokio::task::spawn_blocking(move || check_json(&["-f", &path])).await.unwrap();
        assert_eq!(code, Some(3), "a resource whose config the hub refused is not checked: {err}");
        assert!(err.contains("HTTP 401") && err.contains("tokenSecretRef"), "{err}");
        assert_eq!(reports[0]["verdict"], "unchecked");

        let offline = without_token.clone();
        let (code, reports, err) =
            tokio::task::spawn_blocking(move || check_json(&["--offline", "-f", &offline])).await.unwrap();
        assert_eq!(code, Some(3), "a gate that checked nothing is not green: {err}");
        assert_eq!(
            (reports[0]["name"].as_str(), reports[0]["verdict"].as_str()),
            (Some("default/nemotron"), Some("unchecked"))
        );
        assert!(
            reports[0]["reason"].as_str().unwrap().contains("--offline; its config.json is at http://"),
            "{reports:?}"
        );
        assert!(err.contains("default/nemotron: not checked: --offline"), "{err}");

        let (code, _, err) =
            tokio::task::spawn_blocking(move || check_json(&["--offline", "--allow-unchecked", "-f", &without_token]))
                .await
                .unwrap();
        assert_eq!(code, Some(0), "--allow-unchecked makes it a warning: {err}");
        assert!(err.contains("default/nemotron: warning: --offline"), "{err}");
    }

    #[test]
    fn plain_http_hubs_are_refused_off_loopback() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "hub.yaml", &manifest("remote", "hub: {endpoint: \"http://hub.example.com\"}"));
        let (code, _, err) = check_json(&["-f", &path]);
        assert_eq!(code, Some(2));
        assert!(err.contains("use https://"), "{err}");
    }
}

/// `kvpilot render -f X | kvpilot check -f -`: the guard, reading the SGLang servers of the pods
/// kvpilot renders, reaches the verdict kvpilot reached for the resource and runs the same
/// effective settings; a rewritten resource's pods run the rewrite, so the guard finds them valid.
#[test]
fn rendered_pods_get_the_verdict_and_settings_of_their_inference_deployment() {
    let mut examples: Vec<PathBuf> = std::fs::read_dir(repo("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    let mut compared = 0;
    for example in examples {
        let example = example.to_str().unwrap();
        let rendered = kvpilot(&["render", "-f", example]);
        let (_, originals, _) = check_json(&["-f", example]);
        let original = &originals[0];
        if original["verdict"] == "rejected" {
            assert_eq!(rendered.status.code(), Some(1), "{example}");
            continue;
        }
        assert_eq!(rendered.status.code(), Some(0), "{example}: {}", stderr(&rendered));
        // The example file too: a configMapRef source's ConfigMap is in it.
        let mut check = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
            .args(["check", "-f", "-", "-f", example, "--output", "json", "--offline"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        check.stdin.take().unwrap().write_all(&rendered.stdout).unwrap();
        let out = check.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{example}: {}", stderr(&out));
        let reports: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
        let servers: Vec<&Value> = reports.iter().filter(|r| r["container"] == "sglang").collect();
        assert!(!servers.is_empty(), "{example}: the guard found no server in the rendered pods: {reports:?}");
        assert!(
            reports.iter().all(|r| r["container"] != "router"),
            "{example}: the router is no SGLang server: {reports:?}"
        );
        let without_source = |effective: &Value| {
            let mut effective = effective.clone();
            effective.as_object_mut().unwrap().remove("retractionBackupSource");
            effective
        };
        for server in servers {
            assert_eq!(server["verdict"], "valid", "{example} {}: {server}", server["name"]);
            if server["mode"] == "prefill" {
                assert!(server["name"].as_str().unwrap().contains("-prefill-"), "{example}: {server}");
                continue;
            }
            assert_eq!(server["mode"], "decode", "{example}");
            assert_eq!(server["sglang"]["version"], original["sglang"]["version"], "{example}");
            assert_eq!(server["layout"], original["layout"], "{example}");
            assert_eq!(
                without_source(&server["effective"]),
                without_source(&original["effective"]),
                "{example} {}",
                server["name"]
            );
            compared += 1;
        }
    }
    assert!(compared >= 8, "{compared} servers compared");
}

/// `kubectl apply` refuses unknown fields (strict field validation); `check` and `render` too,
/// naming the path and the nearest known field, with exit 2.
#[test]
fn unknown_fields_are_refused_like_kubectl_does() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo("examples/llama-3.1-8b-full.yaml"))
        .unwrap()
        .replace("    replicas: 2\n", "    replcas: 2\n");
    assert!(text.contains("replcas"), "the example changed: update this test");
    let path = write(dir.path(), "typo.yaml", &text);
    for command in ["check", "render"] {
        let out = kvpilot(&[command, "-f", &path]);
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("unknown field \"spec.decode.replcas\"; did you mean \"replicas\"?"),
            "{command}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn render_prints_valid_objects_and_refuses_rejected_resources() {
    let out = kvpilot(&[
        "render",
        "-f",
        &repo("examples/mimo-pure-swa-rewrite.yaml"),
        "-f",
        &repo("examples/gpt-oss-20b-hybrid-swa.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("# default/mimo-pure-swa: rewritten (revision "), "{text}");
    assert!(
        text.contains("#   rewritten spec.disaggregation.retractionBackup: host_pool -> cpu_tensor (R2)"),
        "{text}"
    );
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| !d.is_null())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    let budget = "PodDisruptionBudget";
    assert_eq!(kinds, vec!["ConfigMap", "Service", budget, "Pod", "ConfigMap", "Service", budget, "Pod", "Pod"]);
    // The SGLang flags of the effective (rewritten) settings, in the ConfigMap and the header.
    let sglang_args: Value = serde_json::from_str(docs[0]["data"]["sglangArgs.json"].as_str().unwrap()).unwrap();
    let decode: Vec<&str> = sglang_args["decode"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(decode.windows(2).any(|w| w == ["--disaggregation-decode-retraction-backup", "cpu_tensor"]), "{decode:?}");
    assert!(decode.windows(2).any(|w| w == ["--disaggregation-mode", "decode"]), "{decode:?}");
    assert!(text.contains("#   sglangArgs decode:  --model-path "), "{text}");
    assert!(text.contains("#   sglangArgs prefill: --model-path "), "{text}");
    let pod = &docs[3]["spec"]["containers"][0];
    assert_eq!(pod["image"], "lmsysorg/sglang:v0.5.23-cu129");
    let pod_args: Vec<&str> = pod["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(pod_args[..decode.len()], decode[..], "the pod runs the decode flags of the ConfigMap");

    let json_out = kvpilot(&[
        "render",
        "-o",
        "json",
        "--sglang-version",
        "0.5.21",
        "--sglang-image",
        "registry.local/sglang:{version}-rdma",
        "-f",
        &repo("examples/llama-3.1-8b-full.yaml"),
    ]);
    let list: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    let items = list["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|item| item["kind"].as_str().unwrap()).collect();
    assert_eq!(
        (list["kind"].as_str(), kinds),
        (
            Some("List"),
            vec![
                "ConfigMap",
                "Service",
                "PodDisruptionBudget",
                "Pod",
                "Pod",
                "Service",
                "PodDisruptionBudget",
                "Pod",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Deployment",
                "Service",
                "PodDisruptionBudget"
            ]
        ),
        "the decode fleet, the prefill fleet and the router"
    );
    assert_eq!(list["items"][3]["spec"]["containers"][0]["image"], "registry.local/sglang:0.5.21-rdma");
    assert_eq!(
        list["items"][11]["spec"]["template"]["spec"]["containers"][0]["image"], "registry.local/sglang:0.5.21-rdma",
        "SGLang's image ships the router"
    );

    let rejected = kvpilot(&["render", "-f", &repo("examples/deepseek-v3-mla-rejected.yaml")]);
    assert_eq!(rejected.status.code(), Some(1));
    assert!(!stdout(&rejected).contains("kind:"), "no objects for a rejected resource");
    assert!(stderr(&rejected).contains("R9 spec.disaggregation.retractionBackup"), "{}", stderr(&rejected));
}

#[test]
fn demo_runs_the_controller_on_the_bundled_examples() {
    let out = kvpilot(&["demo", "--pod-start-ms", "20"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for row in [
        "deepseek-v3        deepseek-ai/DeepSeek-V3            mla          -            R9          0       1",
        "deepseek-v3-tp16   deepseek-ai/DeepSeek-V3            mla          cpu_tensor   Valid       1       1",
        "mimo-pure-swa      example/mimo-v2-pure-swa           pure-swa     cpu_tensor   Rewritten   1       1",
        "gpt-oss-20b        openai/gpt-oss-20b                 hybrid-swa   host_pool    Valid       2       2",
        // The pods as `kubectl get pods -o wide` shows them: SGLang servers, a group of two ranks.
        "deepseek-v3-tp16-decode-0-1   1/1     Running",
        "gpt-oss-20b-decode-1          1/1     Running",
    ] {
        assert!(text.contains(row), "{row:?} missing from\n{text}");
    }
    assert!(text.contains("lmsysorg/sglang:v0.5.23-cu129"), "{text}");
    // The command line of rank 1 of the multi-node replica.
    assert!(
        text.contains(
            "python3 -m sglang.launch_server --model-path /models/DeepSeek-V3 --disaggregation-mode decode \
             --tensor-parallel-size 16"
        ),
        "{text}"
    );
    assert!(
        text.contains("--nnodes 2 --node-rank 1 --dist-init-addr deepseek-v3-tp16-decode-0-0.deepseek-v3-tp16-decode.default.svc:5000"),
        "{text}"
    );
    assert!(text.contains("http://llama-3-1-8b-decode-1.llama-3-1-8b-decode.default.svc:30000"), "{text}");
    // The whole PD service of the llama example: its prefill pod, its router and its endpoint.
    assert!(text.contains("llama-3-1-8b-prefill-0        1/1     Running"), "{text}");
    assert!(text.contains("llama-3-1-8b-router   1/1"), "{text}");
    assert!(text.contains("http://llama-3-1-8b-router.default.svc:8000"), "{text}");
    assert!(text.contains("R1: Host-pool retraction does not support Mamba models."), "{text}");
    assert!(text.contains("M1: extra_buffer_lazy unsupported under PD disaggregation"), "{text}");
}

/// A DeepSeek-V4 InferenceDeployment with EAGLE (one draft token per step, which DeepSeek-V4
/// needs: rule V2) and a draft model whose config.json is the ConfigMap `draft` of the same file
/// set.
fn deepseek_v4_with_draft(draft_fixture: &str, dcp: i32) -> String {
    let config = |name: &str| std::fs::read_to_string(repo(&format!("tests/fixtures/configs/{name}.json"))).unwrap();
    let indent = |text: String| text.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n");
    format!(
        "apiVersion: kvpilot.dev/v1alpha1\nkind: InferenceDeployment\nmetadata:\n  name: dsv4\nspec:\n  model:\n    \
         name: deepseek-ai/DeepSeek-V4\n    config:\n      inline: {target}\n  disaggregation:\n    \
         retractionBackup: cpu_tensor\n    speculativeAlgorithm: EAGLE\n    decodeContextParallel: {dcp}\n    \
         speculativeDraftModel:\n      name: acme/dsv4-nextn\n      revision: v2\n      config:\n        \
         configMapRef: {{name: draft}}\n  decode:\n    tensorParallel: 4\n    \
         extraArgs: [--speculative-eagle-topk, \"1\"]\n---\napiVersion: v1\nkind: ConfigMap\n\
         metadata:\n  name: draft\ndata:\n  config.json: |\n{draft}\n",
        target = config("deepseek-v4").replace('\n', " "),
        draft = indent(config(draft_fixture)),
    )
}

#[test]
fn check_and_render_read_the_speculative_draft_model() {
    let dir = tempfile::tempdir().unwrap();
    let same = write(dir.path(), "same.yaml", &deepseek_v4_with_draft("deepseek-v4-nextn", 1));
    let (code, reports, err) = check_json(&["-f", &same, "--offline"]);
    assert_eq!(code, Some(0), "{err} {reports:?}");
    let narrower = write(dir.path(), "narrower.yaml", &deepseek_v4_with_draft("deepseek-v4-nextn-window-64", 1));
    let (code, reports, err) = check_json(&["-f", &narrower, "--offline", "--sglang-version", "0.5.22"]);
    assert_eq!(code, Some(1), "{err}");
    let violations = by_name(&reports, "default/dsv4")["violations"].as_array().unwrap().clone();
    let t11: Vec<_> = violations.iter().filter(|v| v["rule"] == "T11").collect();
    assert_eq!(t11.len(), 1, "{violations:?}");
    assert_eq!(by_name(&reports, "default/dsv4")["draftLayout"]["slidingWindow"], 64);
    assert_eq!(t11[0]["field"], "spec.disaggregation.speculativeDraftModel");
    assert_eq!(
        t11[0]["message"],
        "DSV4 target and draft pools must share paged SWA geometry: target=(256, 128), draft=(256, 64)"
    );

    let out = kvpilot(&["check", "-f", &narrower, "--offline"]);
    assert!(
        stdout(&out).contains(
            "  draft layout: DeepseekV4ForCausalLMNextN pure-swa — 1 layers (0 full, 1 sliding, 0 ssm), window 64"
        ),
        "{}",
        stdout(&out)
    );
    let out = kvpilot(&["render", "-f", &same, "--offline"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "--speculative-algorithm EAGLE --speculative-draft-model-path acme/dsv4-nextn \
                       --speculative-draft-model-revision v2"
        ),
        "{text}"
    );

    let missing = deepseek_v4_with_draft("deepseek-v4-nextn", 1)
        .replace("configMapRef: {name: draft}", "configMapRef: {name: nowhere}");
    let missing = write(dir.path(), "missing.yaml", &missing);
    let (code, _, err) = check_json(&["-f", &missing, "--offline"]);
    assert_eq!(code, Some(3), "a ConfigMap that is not in the files leaves the resource unchecked: {err}");
    assert!(err.contains("not checked: spec.disaggregation.speculativeDraftModel.config: "), "{err}");
    assert!(
        err.contains("ConfigMap default/nowhere (spec.disaggregation.speculativeDraftModel.config.configMapRef.name)"),
        "{err}"
    );
}

#[test]
fn check_reads_the_prefill_fleet_s_attention_cp_and_kv_sharding_from_its_extra_args() {
    let manifest = |prefill_extra: &str, dcp: i32, decode_tp: i32| {
        let config = std::fs::read_to_string(repo("tests/fixtures/configs/deepseek-v3.json")).unwrap();
        format!(
            "apiVersion: kvpilot.dev/v1alpha1\nkind: InferenceDeployment\nmetadata:\n  name: dsv3\nspec:\n  model:\n    \
             name: deepseek-ai/DeepSeek-V3\n    config:\n      inline: {config}\n  sglang: {{version: 0.5.23}}\n  \
             disaggregation:\n    retractionBackup: cpu_tensor\n    decodeContextParallel: {dcp}\n  decode:\n    \
             tensorParallel: {decode_tp}\n  prefill:\n    tensorParallel: 4\n    extraArgs: {prefill_extra}\n",
            config = config.replace('\n', " "),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let handshake = |prefill_extra: &str, dcp: i32, decode_tp: i32| {
        let path = write(dir.path(), "dsv3.yaml", &manifest(prefill_extra, dcp, decode_tp));
        let (_, reports, err) = check_json(&["-f", &path, "--offline"]);
        let violations = by_name(&reports, "default/dsv3")["violations"].as_array().cloned().unwrap_or_default();
        let found: Vec<(String, String)> = violations
            .iter()
            .filter(|v| v["phase"] == "handshake")
            .map(|v| (v["rule"].as_str().unwrap().to_string(), v["message"].as_str().unwrap().to_string()))
            .collect();
        (found, err)
    };
    let (found, err) = handshake("[--attn-cp-size, '2']", 2, 4);
    assert_eq!(
        found,
        [("R19e".to_string(), "PD decode DCP currently requires prefill attention CP=1, got 2.".to_string())],
        "{err}"
    );
    let (found, err) = handshake("[--enable-kv-cache-sharding]", 2, 4);
    assert_eq!(found.iter().map(|(rule, _)| rule.as_str()).collect::<Vec<_>>(), ["R19f"], "{err}");
    let (found, err) = handshake("[--enable-kv-cache-sharding]", 1, 4);
    assert!(found.is_empty(), "{found:?} {err}");
    let (found, err) = handshake("[--enable-kv-cache-sharding]", 1, 2);
    assert_eq!(
        found,
        [(
            "P5".to_string(),
            "MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill=4 decode=2".to_string()
        )],
        "{err}"
    );
}
