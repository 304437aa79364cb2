//! `--sglang-version` on `kvpilot layout`, `check` and `render`, `spec.sglang.version`, `kvpilot
//! rules`, and config.json files with Python's `NaN` / `Infinity` from every source.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::Value;

mod common;
use common::kvpilot;
use common::output::{stderr, stdout, write};

const EMBEDDING_GEMMA2: &str = r#"{"architectures": ["EmbeddingGemma2Model"], "model_type": "gemma2", "num_hidden_layers": 4,
    "num_key_value_heads": 4, "head_dim": 64, "sliding_window": 512,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}"#;

/// Nemotron-H as published: `time_step_limit` holds a bare `Infinity`, and a `NaN` for good measure.
const NEMOTRON_H: &str = r#"{"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "num_hidden_layers": 4,
    "hybrid_override_pattern": "M*M-", "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 16,
    "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    "time_step_limit": [0.0, Infinity], "time_step_floor": NaN, "rescale_prenorm_residual": -Infinity}"#;

#[test]
fn layout_classifies_with_the_release_given() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "config.json", EMBEDDING_GEMMA2);
    let layout = |version: &str| {
        let out = kvpilot(&["layout", "--config", &config, "--sglang-version", version]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        (serde_json::from_str::<Value>(&stdout(&out)).unwrap(), stderr(&out))
    };
    let (old, _) = layout("0.5.21");
    assert_eq!(old["kvPool"], "full");
    assert!(
        old["warnings"][0].as_str().unwrap().starts_with("SGLang 0.5.21 has no model for EmbeddingGemma2Model"),
        "{old}"
    );
    let (new, _) = layout("v0.5.22");
    assert_eq!(new["kvPool"], "hybrid-swa");
    let (newer, warning) = layout("0.5.40");
    assert_eq!(newer, new, "a newer release is read as the newest known");
    assert!(warning.contains("SGLang 0.5.40 (Flag) is newer than any release kvpilot knows"), "{warning}");
    for bad in ["banana", "0.5.16", "0.5.22.post1"] {
        let out = kvpilot(&["layout", "--config", &config, "--sglang-version", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(stderr(&out).contains("--sglang-version"), "{}", stderr(&out));
    }
}

#[test]
fn layout_reads_python_json_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "config.json", NEMOTRON_H);
    let out = kvpilot(&["layout", "--config", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let layout: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(layout["kvPool"], "hybrid-ssm");
}

fn gpt_oss_with_radix(version: Option<&str>) -> String {
    let example =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/gpt-oss-20b-hybrid-swa.yaml"))
            .unwrap();
    let mut text = example.replace("  disaggregation:\n", "  disaggregation:\n    decodeRadixCache: true\n");
    if let Some(version) = version {
        text = text.replace("spec:\n", &format!("spec:\n  sglang:\n    version: \"{version}\"\n"));
    }
    text
}

fn check_json(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["check", "--output", "json"];
    all.extend_from_slice(args);
    let out = kvpilot(&all);
    let reports = serde_json::from_str(&stdout(&out)).unwrap_or_default();
    (out.status.code(), reports, stderr(&out))
}

#[test]
fn check_applies_the_flag_and_the_spec_field_wins() {
    let dir = tempfile::tempdir().unwrap();
    let unpinned = write(dir.path(), "unpinned.yaml", &gpt_oss_with_radix(None));
    assert!(std::fs::read_to_string(&unpinned).unwrap().contains("decodeRadixCache: true"));

    let (code, reports, err) = check_json(&["-f", &unpinned, "--sglang-version", "0.5.18"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(reports[0]["sglang"], serde_json::json!({"version": "0.5.18", "source": "Flag"}));
    assert_eq!(reports[0]["violations"][0]["rule"], "R13");
    assert_eq!(
        reports[0]["violations"][0]["message"],
        "--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention (SWA) models"
    );

    let (code, reports, err) = check_json(&["-f", &unpinned, "--sglang-version", "0.5.20"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        reports[0]["effective"]["decodeEnv"],
        serde_json::json!([{"name": "SGLANG_ENABLE_UNIFIED_RADIX_TREE", "value": "1"}])
    );

    let (code, reports, err) = check_json(&["-f", &unpinned]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reports[0]["sglang"], serde_json::json!({"version": "0.5.23", "source": "Default"}));

    let pinned = write(dir.path(), "pinned.yaml", &gpt_oss_with_radix(Some("0.5.23")));
    let (code, reports, err) = check_json(&["-f", &pinned, "--sglang-version", "0.5.18"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reports[0]["sglang"], serde_json::json!({"version": "0.5.23", "source": "Spec"}));

    // No release can check it: refused as the webhook and the controller refuse it.
    let unknown = write(dir.path(), "unknown.yaml", &gpt_oss_with_radix(Some("0.5.9")));
    let (code, reports, err) = check_json(&["-f", &unknown]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(reports[0]["verdict"], "rejected");
    let reason = reports[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("spec.sglang.version: SGLang 0.5.9 is not a release kvpilot knows"), "{reason}");

    let out = kvpilot(&["check", "-f", &unpinned, "--sglang-version", "five"]);
    assert_eq!(out.status.code(), Some(2));
    let (code, reports, err) = check_json(&["-f", &unpinned, "--sglang-version", "0.5.31"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("kvpilot check: warning: SGLang 0.5.31 (Flag) is newer than any release kvpilot knows"),
        "{err}"
    );
    assert_eq!(reports[0]["sglang"], serde_json::json!({"version": "0.5.23", "requested": "0.5.31", "source": "Flag"}));
}

/// The gpt-oss example with decode radix cache on (refused by 0.5.18, valid from 0.5.20) in
/// `image`, no release pinned.
fn gpt_oss_in_image(image: &str) -> String {
    gpt_oss_with_radix(None).replace("  decode:\n", &format!("  decode:\n    image: {image}\n"))
}

#[test]
fn check_refuses_an_image_of_a_release_kvpilot_does_not_model_and_warns_of_one_that_names_none() {
    let dir = tempfile::tempdir().unwrap();
    for (file, image) in [("old.yaml", "lmsysorg/sglang:v0.5.9-cu129"), ("post.yaml", "lmsysorg/sglang:v0.5.22.post1")]
    {
        let manifest = write(dir.path(), file, &gpt_oss_in_image(image));
        assert!(std::fs::read_to_string(&manifest).unwrap().contains(image));
        for flag in [&[][..], &["--sglang-version", "0.5.20"][..]] {
            let mut args = vec!["-f", manifest.as_str()];
            args.extend_from_slice(flag);
            let (code, reports, err) = check_json(&args);
            assert_eq!(code, Some(1), "{image} {flag:?}: {err}");
            assert_eq!(reports[0]["verdict"], "rejected", "{image}");
            let reason = reports[0]["reason"].as_str().unwrap();
            assert!(
                reason.starts_with(&format!("spec.sglang.version: the tag of spec.decode.image {image} names SGLang"))
                    && reason.contains("set spec.sglang.version")
                    && reason.contains("known releases: 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23"),
                "{reason}"
            );
        }
        let out = kvpilot(&["check", "-f", &manifest]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stdout(&out).contains("rejected\n  ✗ spec.sglang.version: the tag of spec.decode.image"),
            "{}",
            stdout(&out)
        );
    }
    // Pinned, the same image is checked as the release the spec names.
    let pinned = gpt_oss_in_image("lmsysorg/sglang:v0.5.9-cu129")
        .replace("spec:\n", "spec:\n  sglang:\n    version: \"0.5.18\"\n");
    let (code, reports, err) = check_json(&["-f", &write(dir.path(), "pinned.yaml", &pinned)]);
    assert_eq!(
        (code, &reports[0]["sglang"]),
        (Some(1), &serde_json::json!({"version": "0.5.18", "source": "Spec"})),
        "{err}"
    );
    assert_eq!(reports[0]["violations"][0]["rule"], "R13");

    for image in ["lmsysorg/sglang:latest", "lmsysorg/sglang", "lmsysorg/sglang@sha256:0123456789abcdef"] {
        let manifest = write(dir.path(), "latest.yaml", &gpt_oss_in_image(image));
        let (code, reports, err) = check_json(&["-f", &manifest]);
        assert_eq!(code, Some(0), "{image}: {err}");
        assert_eq!(reports[0]["sglang"], serde_json::json!({"version": "0.5.23", "source": "Default"}));
        let warnings = reports[0]["warnings"].to_string();
        assert!(
            warnings.contains(&format!("spec.decode.image {image} names no SGLang release"))
                && warnings.contains("checked as SGLang 0.5.23, the newest release kvpilot knows")
                && warnings.contains("pin the release it runs with spec.sglang.version"),
            "{warnings}"
        );
    }
}

#[test]
fn render_adds_the_env_var_the_release_needs() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write(dir.path(), "gpt-oss.yaml", &gpt_oss_with_radix(None));
    let out = kvpilot(&["render", "-f", &manifest, "--sglang-version", "0.5.19", "--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let env: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.pointer("/spec/template/spec/containers/0/env").or(o.pointer("/spec/containers/0/env")))
        .flat_map(|e| e.as_array().unwrap())
        .collect();
    assert!(env.iter().any(|e| e["name"] == "SGLANG_ENABLE_UNIFIED_RADIX_TREE" && e["value"] == "1"), "{list}");
}

#[test]
fn check_reads_python_json_tokens_from_a_config_map() {
    let dir = tempfile::tempdir().unwrap();
    let indented: String = NEMOTRON_H.lines().map(|l| format!("    {}\n", l.trim())).collect();
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nemotron\ndata:\n  config.json: |\n{indented}---\n\
         apiVersion: kvpilot.dev/v1alpha1\nkind: InferenceDeployment\nmetadata:\n  name: nemotron\nspec:\n  model:\n    \
         name: nvidia/nemotron\n    config:\n      configMapRef: {{name: nemotron}}\n"
    );
    let path = write(dir.path(), "nemotron.yaml", &text);
    let (code, reports, err) = check_json(&["-f", &path]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reports[0]["layout"]["kvPool"], "hybrid-ssm");
}

/// A hub on loopback serving Nemotron-H's config.json with its bare `Infinity`.
async fn serve_hub() -> SocketAddr {
    use axum::Router;
    use axum::routing::get;
    let app = Router::new().route("/acme/nemotron/resolve/{revision}/config.json", get(|| async { NEMOTRON_H }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_python_json_tokens_from_the_hub() {
    let addr = serve_hub().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "apiVersion: kvpilot.dev/v1alpha1\nkind: InferenceDeployment\nmetadata:\n  name: nemotron\nspec:\n  model:\n    \
         name: acme/nemotron\n    config:\n      hub: {{endpoint: \"http://{addr}\"}}\n"
    );
    let path = write(dir.path(), "hub.yaml", &text);
    let (code, reports, err) = tokio::task::spawn_blocking(move || check_json(&["-f", &path])).await.unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reports[0]["layout"]["kvPool"], "hybrid-ssm");
}

#[test]
fn check_reads_infinity_in_an_inline_yaml_config() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: kvpilot.dev/v1alpha1\nkind: InferenceDeployment\nmetadata:\n  name: nemotron\nspec:\n  model:\n    \
                name: nvidia/nemotron\n    config:\n      inline:\n        architectures: [NemotronHForCausalLM]\n        \
                num_hidden_layers: 4\n        hybrid_override_pattern: \"M*M-\"\n        num_key_value_heads: 8\n        \
                head_dim: 128\n        time_step_limit: [0.0, .inf]\n        time_step_floor: .nan\n";
    let path = write(dir.path(), "inline.yaml", text);
    let (code, reports, err) = check_json(&["-f", &path]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(reports[0]["layout"]["kvPool"], "hybrid-ssm");
}

#[test]
fn rules_prints_the_readme_table() {
    let out = kvpilot(&["rules"]);
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(table.starts_with("| rule | about | phase | backends | 0.5.17 |"), "{table}");
    assert!(table.contains("| R13 | decode radix × SWA | pool build | any | ✓ | ✓ | v2 | v2 | — | — | — |"), "{table}");
}
