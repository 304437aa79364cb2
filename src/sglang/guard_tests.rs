use serde_json::{Value, json};

use super::*;
use crate::api::RetractionBackup;
use crate::release::ReleaseChoice;

fn pure_swa() -> Value {
    serde_json::from_str(include_str!("../../tests/fixtures/configs/custom-pure-swa.json")).unwrap()
}

fn deployment(command: Value, args: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web-decode", "annotations": {MODEL_CONFIG_ANNOTATION: "configmap/mimo"}},
        "spec": {"template": {"metadata": {"labels": {"app": "decode"}}, "spec": {"containers": [
            {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
            {"name": "sglang", "image": "lmsysorg/sglang:v0.5.23-cu129", "command": command, "args": args}
        ]}}}
    })
}

fn one_server(object: &Value) -> Server {
    let inspection = inspect(object, &ReleaseChoice::default_newest());
    assert_eq!(inspection.servers.len(), 1, "{:?}", inspection.warnings);
    inspection.servers.into_iter().next().unwrap()
}

/// Applies the rewrite patch with `json-patch` and inspects the result again.
fn rewritten(object: &Value) -> (Value, Server) {
    let server = one_server(object);
    let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
    assert_eq!(verdict.outcome, Outcome::Rewritten, "{:?}", verdict.findings);
    let patch = rewrite_patch(object, &[(&server, &verdict)]).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    let again = one_server(&patched);
    let recheck = check(&again, &ModelConfigs::target(pure_swa()), false).unwrap();
    assert_eq!(recheck.outcome, Outcome::Valid, "{:?}", recheck.findings);
    (patched, again)
}

#[test]
fn servers_settings_env_and_model_source_are_read() {
    let object = deployment(
        json!(["sh", "-c"]),
        json!(["SGLANG_DISAGG_STAGING_BUFFER=1 exec python3 -m sglang.launch_server --model-path /models/mimo \
                --disaggregation-mode decode --tp 2 --disaggregation-decode-retraction-backup host_pool"]),
    );
    let mut object = object;
    object["spec"]["template"]["spec"]["containers"][1]["env"] = json!([{"name": "SGLANG_ENABLE_UNIFIED_RADIX_TREE", "value": "1"}, {"name": "HF_TOKEN", "valueFrom": {}},
               {"name": "SGLANG_X", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}}}]);
    object["spec"]["template"]["spec"]["containers"][1]["envFrom"] = json!([{"configMapRef": {"name": "env"}}]);
    let server = one_server(&object);
    assert_eq!(
        server.subject("deploy/web-decode"),
        "deploy/web-decode container sglang (spec.template.spec.containers[1])"
    );
    assert_eq!(server.release, Some(crate::release::v0_5(23)));
    let settings = &server.parsed.settings;
    assert_eq!(settings.mode, DisaggregationMode::Decode);
    assert_eq!(settings.decode.tensor_parallel, 2);
    assert_eq!(settings.disaggregation.retraction_backup, Some(RetractionBackup::HostPool));
    let env: Vec<(&str, &str)> =
        settings.decode.env.iter().map(|v| (v.name.as_str(), v.value.as_deref().unwrap_or_default())).collect();
    assert_eq!(env, [("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1"), ("SGLANG_DISAGG_STAGING_BUFFER", "1")]);
    let warnings = server.parsed.warnings.join("\n");
    assert!(warnings.contains("env SGLANG_X comes from valueFrom") && warnings.contains("envFrom is not inspected"));
    let model = server.model.unwrap();
    assert_eq!(model.name, "/models/mimo");
    assert_eq!(model.config.config_map_ref.unwrap().key, "config.json");
}

#[test]
fn model_sources_come_from_the_annotation_or_a_hub_id() {
    let server_with = |annotation: Option<&str>, path: &str| {
        let mut object = deployment(json!(["sglang", "serve", "--model-path", path, "--revision", "r1"]), json!([]));
        match annotation {
            Some(value) => {
                object["spec"]["template"]["metadata"]["annotations"] = json!({MODEL_CONFIG_ANNOTATION: value})
            }
            None => object["metadata"]["annotations"] = json!({HUB_TOKEN_ANNOTATION: "hf/key"}),
        }
        one_server(&object).model
    };
    let hub = server_with(None, "openai/gpt-oss-20b").unwrap();
    let source = hub.config.hub.unwrap();
    assert_eq!((hub.name.as_str(), source.revision.as_deref()), ("openai/gpt-oss-20b", Some("r1")));
    assert_eq!(source.token_secret_ref.unwrap().key, "key");
    let annotated = server_with(Some("hub/XiaomiMiMo/MiMo-V2-Flash@abc"), "/models/x").unwrap();
    let source = annotated.config.hub.unwrap();
    assert_eq!((source.repo.as_deref(), source.revision.as_deref()), (Some("XiaomiMiMo/MiMo-V2-Flash"), Some("abc")));
    let config_map = server_with(Some("configmap/mimo/cfg.json"), "/models/x").unwrap().config.config_map_ref.unwrap();
    assert_eq!((config_map.name.as_str(), config_map.key.as_str()), ("mimo", "cfg.json"));
    for bad in ["configmap/", "hub/only-one", "s3/bucket", "hub/a/b@"] {
        let error = server_with(Some(bad), "/models/x").unwrap_err();
        assert!(error.contains(MODEL_CONFIG_ANNOTATION) && error.contains("configmap/NAME/KEY"), "{bad}: {error}");
    }
    let mut local = deployment(json!(["sglang", "serve", "--model-path", "/models/x"]), json!([]));
    local["metadata"]["annotations"] = json!({});
    let error = one_server(&local).model.unwrap_err();
    assert!(error.contains("/models/x is not a hub id") && error.contains(MODEL_CONFIG_ANNOTATION), "{error}");
}

#[test]
fn a_violation_names_the_flag_and_its_fix() {
    let object = deployment(
        json!(["python3", "-m", "sglang.launch_server"]),
        json!([
            "--model-path",
            "/models/mimo",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup=host_pool"
        ]),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
    assert_eq!(verdict.outcome, Outcome::Rejected);
    assert_eq!(
        verdict.findings[0].to_string(),
        "--disaggregation-decode-retraction-backup=host_pool: Host-pool retraction does not support pure-SWA models. \
         (fix: use --disaggregation-decode-retraction-backup=cpu_tensor; or label the workload or namespace \
         kvpilot.dev/on-invalid=rewrite to let kvpilot rewrite it)"
    );
    assert!(verdict.edits.is_empty());
}

/// The host pool size is a flag on a command line, whatever field kvpilot's own resources give it.
#[test]
fn a_deepseek_v4_host_pool_size_is_named_as_its_flag() {
    let dsv4: Value = serde_json::from_str(include_str!("../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
    let object = deployment(
        json!(["python3", "-m", "sglang.launch_server"]),
        json!([
            "--model-path",
            "/models/v4",
            "--disaggregation-mode",
            "prefill",
            "--enable-hierarchical-cache",
            "--hicache-size=16"
        ]),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(dsv4), false).unwrap();
    let h7 = verdict.findings.iter().find(|f| f.violation.rule == "H7").map(ToString::to_string);
    assert_eq!(
        h7.as_deref(),
        Some(
            "--hicache-size: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio \
             instead. (fix: drop --hicache-size (spec.cache.hostPoolSize where kvpilot renders it): DeepSeek-V4 \
             sizes its host pools from its device pools by --hicache-ratio)"
        )
    );
}

#[test]
fn the_storage_backend_and_the_radix_cache_are_read_for_s6_and_s7() {
    let llama: Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
    let rules_for = |args: Value| {
        let object =
            deployment(json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/llama"]), args);
        let verdict = check(&one_server(&object), &ModelConfigs::target(llama.clone()), false).unwrap();
        verdict.findings.iter().map(|f| (f.violation.rule, f.flag.clone())).collect::<Vec<_>>()
    };
    assert_eq!(
        rules_for(json!([
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-enable-offload-kvcache",
            "--enable-hierarchical-cache"
        ])),
        [
            ("S6", "--disaggregation-decode-enable-offload-kvcache".to_string()),
            ("S7", "--enable-hierarchical-cache".to_string())
        ]
    );
    let with_backend_and_radix = json!([
        "--disaggregation-mode",
        "decode",
        "--disaggregation-decode-enable-offload-kvcache",
        "--hicache-storage-backend",
        "file",
        "--disaggregation-decode-enable-radix-cache",
        "--enable-hierarchical-cache"
    ]);
    assert_eq!(rules_for(with_backend_and_radix), []);
}

#[test]
fn sglang_serve_takes_a_positional_model_path_and_its_own_model_type_flag() {
    // sglang/cli/serve.py removes `--model-type` and makes a first positional `--model-path`
    // before SGLang's server parser reads the rest.
    let object = deployment(
        json!(["sglang", "serve"]),
        json!([
            "/models/mimo",
            "--model-type",
            "llm",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup",
            "host_pool"
        ]),
    );
    let server = one_server(&object);
    assert_eq!(server.parsed.settings.model_path.as_deref(), Some("/models/mimo"));
    assert!(argv_check(&server).0.is_empty(), "no refusal of the positional or of --model-type");
    let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
    let patch = serde_json::to_value(rewrite_patch(&object, &[(&server, &verdict)]).unwrap()).unwrap();
    assert_eq!(
        patch[0],
        json!({"op": "replace", "path": "/spec/template/spec/containers/1/args/6", "value": "cpu_tensor"})
    );
}

#[test]
fn array_rewrites_are_index_exact() {
    let object = deployment(
        json!([
            "python3",
            "-m",
            "sglang.launch_server",
            "--disaggregation-decode-enable-radix-cache",
            "--model-path",
            "/models/mimo"
        ]),
        json!([
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup",
            "host_pool",
            "--disaggregation-decode-enable-radix-cache",
            "--mem-fraction-static",
            "0.8",
            "--disaggregation-decode-retraction-backup=host_pool",
        ]),
    );
    let server = one_server(&object);
    let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
    let patch = serde_json::to_value(rewrite_patch(&object, &[(&server, &verdict)]).unwrap()).unwrap();
    let base = "/spec/template/spec/containers/1";
    assert_eq!(
        patch,
        json!([
            {"op": "replace", "path": format!("{base}/args/3"), "value": "cpu_tensor"},
            {"op": "replace", "path": format!("{base}/args/7"), "value": "--disaggregation-decode-retraction-backup=cpu_tensor"},
            {"op": "remove", "path": format!("{base}/args/4")},
            {"op": "remove", "path": format!("{base}/command/3")},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {REWRITES_ANNOTATION:
                "sglang: --disaggregation-decode-retraction-backup=host_pool → --disaggregation-decode-retraction-backup=cpu_tensor \
                 (R8: --disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.); \
                 sglang: --disaggregation-decode-enable-radix-cache removed (R16: --disaggregation-decode-enable-radix-cache \
                 does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) yet.)"}}
        ])
    );
    let (patched, again) = rewritten(&object);
    let container = &patched["spec"]["template"]["spec"]["containers"][1];
    assert_eq!(container["command"], json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"]));
    assert_eq!(container["args"].as_array().unwrap().len(), 7);
    assert_eq!(again.parsed.settings.disaggregation.retraction_backup, Some(RetractionBackup::CpuTensor));
    assert!(!again.parsed.settings.disaggregation.decode_radix_cache);
}

#[test]
fn shell_script_rewrites_edit_the_words_in_place() {
    let script = "set -e\nexec python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \\\n  \
                  --disaggregation-decode-enable-radix-cache \\\n  --disaggregation-decode-retraction-backup 'host_pool' \
                  && echo done";
    let object = deployment(json!(["/bin/bash", "-lc", script]), json!([]));
    let (patched, _) = rewritten(&object);
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"][1]["command"][2],
        "set -e\nexec python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \\\n \\\n  \
         --disaggregation-decode-retraction-backup cpu_tensor && echo done"
    );
}

#[test]
fn the_rewrite_annotation_joins_existing_annotations() {
    let mut object = deployment(
        json!([
            "sglang",
            "serve",
            "--model-path",
            "/models/mimo",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup",
            "host_pool"
        ]),
        json!([]),
    );
    object["spec"]["template"]["metadata"]["annotations"] = json!({"team": "a"});
    let (patched, _) = rewritten(&object);
    let annotations = &patched["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["team"], "a");
    assert!(
        annotations[REWRITES_ANNOTATION]
            .as_str()
            .unwrap()
            .contains("→ --disaggregation-decode-retraction-backup=cpu_tensor")
    );
}

#[test]
fn prefill_servers_are_checked_against_prefill_rules_only() {
    let object = deployment(
        json!(["sglang", "serve", "--model-path", "/models/mimo"]),
        json!([
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-decode-retraction-backup",
            "host_pool",
            "--disaggregation-decode-enable-radix-cache"
        ]),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), true).unwrap();
    let rules: Vec<&str> = verdict.findings.iter().map(|f| f.violation.rule).collect();
    assert_eq!(rules, ["S1"]);
    assert!(verdict.edits.is_empty());
}

#[test]
fn lmcache_is_named_on_the_flag_for_pd_servers_and_checked_for_conflicts_on_colocated_ones() {
    let rules_of = |args: Value| -> Vec<(&'static str, String)> {
        let object = deployment(json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"]), args);
        let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
        verdict.findings.into_iter().map(|f| (f.violation.rule, f.flag)).collect()
    };
    assert_eq!(
        rules_of(json!(["--disaggregation-mode", "prefill", "--enable-lmcache"])),
        [("L7", "--enable-lmcache".to_string())]
    );
    // Without PD disaggregation LMCache is allowed, but not beside HiCache.
    assert!(rules_of(json!(["--enable-lmcache"])).is_empty());
    assert_eq!(
        rules_of(json!(["--enable-lmcache", "--enable-hierarchical-cache"])),
        [("L1", "--enable-lmcache".to_string())]
    );
    // On a decode server the radix cache is off unless decode radix cache is on (L3), and PD refuses LMCache (L7).
    let decode: Vec<&str> = rules_of(json!(["--disaggregation-mode", "decode", "--enable-lmcache"]))
        .into_iter()
        .map(|(rule, _)| rule)
        .collect();
    assert_eq!(decode, ["L3", "L7"]);
}

#[test]
fn objects_ask_for_rewrites_by_label() {
    let mut object = deployment(json!([]), json!([]));
    assert!(!asks_for_rewrite(&object));
    object["metadata"]["annotations"] = json!({ON_INVALID_LABEL: "rewrite"});
    assert!(!asks_for_rewrite(&object), "the webhook's objectSelector sees labels only");
    object["metadata"]["labels"] = json!({ON_INVALID_LABEL: "rewrite"});
    assert!(asks_for_rewrite(&object));
}

/// `$$` and resolved `$(VAR)` change the script the reader splits; its word spans then do not
/// index the written text, so the script is not rewritten (the webhook says so) rather than
/// corrupted.
#[test]
fn scripts_the_kubelet_expands_are_not_rewritten_by_span() {
    let script = "echo $$PPID; exec python3 -m sglang.launch_server --model-path /models/m --disaggregation-mode \
                  decode --disaggregation-decode-retraction-backup host_pool";
    let object = deployment(json!(["sh", "-c", script]), json!([]));
    let server = one_server(&object);
    let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
    assert!(!verdict.edits.is_empty());
    let error = rewrite_patch(&object, &[(&server, &verdict)]).unwrap_err();
    assert_eq!(
        error,
        "/spec/template/spec/containers/1/command/2: the script holds $(VAR) references or $$, so its words cannot \
         be rewritten in place"
    );
}

#[test]
fn unreadable_containers_are_warnings() {
    let object = deployment(json!("python3 -m sglang.launch_server"), json!([]));
    let inspection = inspect(&object, &ReleaseChoice::default_newest());
    assert!(inspection.servers.is_empty());
    assert_eq!(
        inspection.warnings,
        [
            "deploy/web-decode container sglang (spec.template.spec.containers[1]): command is not a list of strings; not checked"
        ]
    );
    let no_server = deployment(json!(["/entrypoint.sh"]), json!([]));
    assert!(
        inspect(&no_server, &ReleaseChoice::default_newest()).warnings[0]
            .contains("no `python -m sglang.launch_server`, `sglang serve` or `python -m dynamo.sglang`")
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Words SGLang command lines are made of: table flags in both forms, values good and bad,
    /// unknown flags, and noise.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("--disaggregation-mode".to_string()),
            Just("decode".to_string()),
            Just("prefill".to_string()),
            Just("--disaggregation-decode-retraction-backup".to_string()),
            Just("host_pool".to_string()),
            Just("--disaggregation-decode-retraction-backup=host_pool".to_string()),
            Just("--disaggregation-decode-enable-radix-cache".to_string()),
            Just("--enable-hierarchical-cache".to_string()),
            Just("--mamba-radix-cache-strategy=extra_buffer_lazy".to_string()),
            Just("--enable-unified-memory".to_string()),
            Just("--tp".to_string()),
            Just("2".to_string()),
            Just("--dcp-size=2".to_string()),
            Just("--mem-fraction-static".to_string()),
            "[a-z0-9 '\"=-]{0,10}",
        ]
    }

    fn object(words: &[String], script: bool) -> Value {
        if script {
            let line = words.iter().map(|w| cmdline::shell_quote(w)).collect::<Vec<_>>().join(" ");
            deployment(
                json!(["sh", "-c", format!("exec python3 -m sglang.launch_server {line} && echo done")]),
                json!([]),
            )
        } else {
            deployment(json!(["python3", "-m", "sglang.launch_server"]), json!(words))
        }
    }

    /// Found by the property below: `--disaggregation-decode-retraction-backup` lacks its value
    /// (argparse refuses it), and taking the decode radix flag out to fix R2 made `host_pool` that
    /// value. A refused command line gets no rewrite.
    #[test]
    fn a_command_line_the_parser_refuses_is_not_rewritten() {
        let words: Vec<String> = [
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup",
            "--disaggregation-decode-enable-radix-cache",
            "host_pool",
        ]
        .map(String::from)
        .to_vec();
        let object = object(&words, false);
        let server = one_server(&object);
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
        assert_eq!(verdict.outcome, Outcome::Rejected);
        assert!(verdict.findings.iter().any(|f| f.violation.rule == "CLI"), "{:?}", verdict.findings);
        assert!(verdict.rewrites.is_empty(), "{:?}", verdict.rewrites);
        assert!(rewrite_patch(&object, &[(&server, &verdict)]).unwrap().0.is_empty());
    }

    proptest! {
        /// Whatever the command line, the rewrite patch applies to the object, touches only its
        /// command line and annotation, and what it leaves is what the policy settled on.
        #[test]
        fn rewrite_patches_apply_and_leave_the_settled_settings(
            words in prop::collection::vec(word(), 0..14),
            script in any::<bool>(),
        ) {
            let object = object(&words, script);
            let server = one_server(&object);
            let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
            let patch = rewrite_patch(&object, &[(&server, &verdict)]).unwrap();
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch).unwrap();
            let again = one_server(&patched);
            if verdict.outcome != Outcome::Rejected {
                let recheck = check(&again, &ModelConfigs::target(pure_swa()), false).unwrap();
                prop_assert_eq!(recheck.outcome, Outcome::Valid, "{:?} → {:?}", words, recheck.findings);
            }
            prop_assert_eq!(&again.parsed.settings.disaggregation.retraction_backup, &verdict_backup(&server, &verdict));
            let mut untouched = patched.clone();
            untouched["spec"]["template"]["spec"]["containers"][1] = object["spec"]["template"]["spec"]["containers"][1].clone();
            untouched["spec"]["template"]["metadata"] = object["spec"]["template"]["metadata"].clone();
            prop_assert_eq!(untouched, object);
        }
    }

    /// The retraction backup a server runs with after the rewrites of `verdict`.
    fn verdict_backup(server: &Server, verdict: &ServerVerdict) -> Option<RetractionBackup> {
        let rewritten =
            verdict.rewrites.iter().any(|r| r.from.starts_with("--disaggregation-decode-retraction-backup"));
        if rewritten {
            Some(RetractionBackup::CpuTensor)
        } else {
            server.parsed.settings.disaggregation.retraction_backup
        }
    }
}

#[test]
fn decode_servers_are_paired_with_the_prefill_servers_of_their_object() {
    let gpt_oss: Value = serde_json::from_str(include_str!("../../tests/fixtures/configs/gpt-oss-20b.json")).unwrap();
    // Up to 0.5.21 mooncake needs equal attention TP on both sides for a hybrid-SWA model (T1);
    // from 0.5.22 it slices SWA state head by head and allows a different TP.
    let role = |name: &str, mode: &str, tp: &str| {
        json!({"name": name, "template": {"spec": {"containers": [{"name": name, "image": "lmsysorg/sglang:v0.5.21",
            "command": ["sglang", "serve", "--model-path", "openai/gpt-oss-20b", "--disaggregation-mode", mode, "--tp", tp]}]}}})
    };
    let group = |prefill_tp: &str, decode_tp: &str| {
        json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "pd"},
            "spec": {"roles": [role("prefill", "prefill", prefill_tp), role("decode", "decode", decode_tp)]}})
    };
    let verdicts = |object: &Value| -> Vec<ServerVerdict> {
        inspect(object, &ReleaseChoice::default_newest())
            .servers
            .iter()
            .map(|s| check(s, &ModelConfigs::target(gpt_oss.clone()), false).unwrap())
            .collect()
    };
    let mismatched = verdicts(&group("2", "4"));
    assert_eq!(mismatched[0].outcome, Outcome::Valid);
    let finding = &mismatched[1].findings[0];
    assert_eq!((finding.violation.rule, finding.flag.as_str()), ("T1", "--tp=4"));
    assert!(finding.violation.message.contains("different TP sizes for non-MLA SWA hybrid models"), "{finding}");
    assert!(finding.violation.fix.contains("--tensor-parallel-size"), "{finding}");
    let matched = verdicts(&group("4", "4"));
    assert!(matched.iter().all(|v| v.outcome == Outcome::Valid));
    assert!(!matched[1].warnings.iter().any(|w| w.contains("T1")), "{:?}", matched[1].warnings);
    let newer = serde_json::to_string(&group("2", "4")).unwrap().replace("v0.5.21", "v0.5.23");
    let newer = verdicts(&serde_json::from_str(&newer).unwrap());
    assert!(newer.iter().all(|v| v.outcome == Outcome::Valid), "0.5.23 allows a different TP on mooncake");
    assert_eq!(newer[1].release.release, crate::release::v0_5(23));
}

#[test]
fn a_decode_server_compares_its_deepseek_v4_kv_layout_with_its_paired_prefill_servers() {
    let dsv4: Value = serde_json::from_str(include_str!("../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
    let role = |name: &str, layout: Option<&str>| {
        let env: Vec<Value> =
            layout.iter().map(|value| json!({"name": "SGLANG_DSV4_KV_LAYOUT", "value": value})).collect();
        json!({"name": name, "template": {"spec": {"containers": [{"name": name, "image": "lmsysorg/sglang:v0.5.23",
            "env": env, "command": ["sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V4",
            "--disaggregation-mode", name]}]}}})
    };
    let group = |prefill: Option<&str>, decode: Option<&str>| {
        json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "pd"},
            "spec": {"roles": [role("prefill", prefill), role("decode", decode)]}})
    };
    let p3 = |object: &Value| -> Vec<String> {
        let inspection = inspect(object, &ReleaseChoice::default_newest());
        let decode = inspection.servers.iter().find(|s| s.parsed.settings.mode == DisaggregationMode::Decode).unwrap();
        let verdict = check(decode, &ModelConfigs::target(dsv4.clone()), false).unwrap();
        verdict.findings.iter().filter(|f| f.violation.rule == "P3").map(|f| f.violation.message.clone()).collect()
    };
    assert_eq!(
        p3(&group(Some("v41"), None)),
        ["KV layout mismatch: prefill server has kv_layout=v41,c4:v41,c128:v41, but decode server has \
          kv_layout=v4,c4:v4,c128:v4. Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT."]
    );
    assert!(p3(&group(Some("v41"), Some("V41"))).is_empty());
    assert!(p3(&group(None, None)).is_empty());
}

/// A role named or typed prefill/decode whose server's flag says otherwise is checked by the
/// flag (SGLang runs by it), with a warning; a role that names no mode says nothing.
#[test]
fn a_role_that_disagrees_with_the_mode_flag_is_a_warning() {
    let service = |sub_component: &str, mode: &str| {
        json!({"componentType": "worker", "subComponentType": sub_component, "extraPodSpec": {"mainContainer": {
            "image": "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1", "command": ["python3", "-m", "dynamo.sglang"],
            "args": ["--model-path", "/models/m", "--disaggregation-mode", mode]}}})
    };
    let object = json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "annotations": {MODEL_CONFIG_ANNOTATION: "configmap/m"}},
        "spec": {"services": {"a": service("decode", "prefill"), "b": service("worker", "decode")}}});
    let inspection = inspect(&object, &ReleaseChoice::default_newest());
    let warnings: Vec<&Vec<String>> = inspection.servers.iter().map(|s| &s.parsed.warnings).collect();
    assert_eq!(inspection.servers[0].parsed.settings.mode, DisaggregationMode::Prefill);
    assert_eq!(
        *warnings[0],
        [
            "the role decode names the decode side but --disaggregation-mode is prefill; checked as prefill (SGLang runs by its flags)"
        ]
    );
    assert!(warnings[1].is_empty(), "{:?}", warnings[1]);
    assert_eq!(inspection.servers[0].release, None, "a Dynamo image's tag is not an SGLang release");
}

/// Dynamo's own parser reads the argv before SGLang's: its settings are read as SGLang reads what
/// it hands on, its refusals are not judged.
#[test]
fn dynamo_servers_are_read_but_their_argv_is_not_judged() {
    let object = deployment(
        json!(["python3", "-m", "dynamo.sglang"]),
        json!(["--model-path", "/models/mimo", "--tp", "2", "--migration-limit", "3", "--cuda-graph-bs", "8"]),
    );
    let server = one_server(&object);
    assert_eq!((server.argv.as_ref(), server.parsed.settings.decode.tensor_parallel), (None, 2));
    let verdict = check(&server, &ModelConfigs::target(pure_swa()), false).unwrap();
    assert!(verdict.findings.iter().all(|f| f.violation.rule != "CLI"), "{:?}", verdict.findings);
    assert!(verdict.warnings.iter().any(|w| w == DYNAMO_NOT_JUDGED), "{:?}", verdict.warnings);
    // The same argv through SGLang's own launcher is refused.
    let object = deployment(
        json!(["python3", "-m", "sglang.launch_server"]),
        object["spec"]["template"]["spec"]["containers"][1]["args"].clone(),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
    assert_eq!(
        verdict.findings[0].violation.message,
        "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"
    );
}

/// A value kvpilot cannot see is said once: by the flag table for its flags, by the release's
/// parser for values it would convert or check, not at all for free strings.
#[test]
fn unseen_values_are_warned_about_once() {
    let object = deployment(
        json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"]),
        json!(["--tp-size", "$(TP)", "--nnodes=$(N)", "--host", "$(POD_IP)"]),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
    let about = |text: &str| verdict.warnings.iter().filter(|w| w.contains(text)).count();
    assert_eq!((about("$(TP)"), about("--nnodes $(N)"), about("$(POD_IP)")), (1, 1, 0), "{:?}", verdict.warnings);
}

/// The policy's warnings about a command line name its flags, not the spec fields they map to.
#[test]
fn a_server_s_warnings_name_its_flags() {
    let llama: Value =
        serde_json::from_str(include_str!("../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
    let object = deployment(
        json!(["python3", "-m", "sglang.launch_server"]),
        json!([
            "--model-path",
            "/models/llama",
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-retraction-backup",
            "cpu_tensor",
            "--hicache-ratio",
            "2",
            "--radix-eviction-policy",
            "lru"
        ]),
    );
    let verdict = check(&one_server(&object), &ModelConfigs::target(llama), false).unwrap();
    for expected in [
        "R12: without --disaggregation-decode-enable-radix-cache SGLang 0.5.23 disables the decode servers' radix \
         cache (it logs \"Radix cache is disabled for decode server\"), so --radix-eviction-policy does nothing there; \
         turn decodeRadixCache on to use it",
        "--hicache-ratio has no effect: the effective retraction backup is cpu_tensor and neither hierarchical cache \
         nor decode offload builds a host pool",
    ] {
        assert!(verdict.warnings.iter().any(|w| w == expected), "{expected:?} not among {:?}", verdict.warnings);
    }
}

/// A whole command line in one `command` word (a YAML folded scalar) never starts: the kubelet
/// runs the word as a file name. Said first, and its flags are still read as once split.
#[test]
fn a_command_line_in_one_command_word_never_starts_and_its_flags_are_still_checked() {
    let line = "python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \
                --disaggregation-decode-retraction-backup host_pool";
    let object = deployment(json!([line]), json!(["--tp", "2"]));
    let server = one_server(&object);
    assert_eq!(server.invocation.one_word, Some((ArgList::Command, 0)));
    assert_eq!(server.parsed.settings.decode.tensor_parallel, 2, "the args after it are its arguments");
    for rewrite in [false, true] {
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), rewrite).unwrap();
        assert_eq!(verdict.outcome, Outcome::Rejected, "rewrite {rewrite}");
        let rules: Vec<&str> = verdict.findings.iter().map(|f| f.violation.rule).collect();
        assert_eq!(rules[0], "EXEC", "{rules:?}");
        assert!(rules.contains(&"R2"), "the flags inside are checked: {rules:?}");
        let exec = verdict.findings[0].to_string();
        assert!(exec.contains("command[0] is a whole command line in one word"), "{exec}");
        assert!(exec.contains("[\"sh\", \"-c\""), "the fix: {exec}");
        assert!(
            verdict.edits.is_empty() && verdict.rewrites.is_empty(),
            "a container that never starts is not patched"
        );
    }
    let (refusals, _) = argv_check(&server);
    assert_eq!(refusals.iter().map(|f| f.violation.rule).collect::<Vec<_>>(), ["EXEC"], "needs no config.json");

    // Split into words, or run through a shell, it starts, and only its flags are judged.
    let split = deployment(
        json!(["python3", "-m", "sglang.launch_server"]),
        json!(line.split(' ').skip(3).collect::<Vec<_>>()),
    );
    assert_eq!(one_server(&split).invocation.one_word, None);
    let shell = deployment(json!(["sh", "-c", line]), json!(null));
    assert_eq!(one_server(&shell).invocation.one_word, None);
    // Under the image's entrypoint (no command) an args item may be a shell's script: not judged.
    let under_entrypoint = deployment(json!(null), json!([line]));
    assert!(inspect(&under_entrypoint, &ReleaseChoice::default_newest()).servers.is_empty());
}
