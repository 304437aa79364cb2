//! `kvpilot cache-runtime` end to end: start-up refusals with SGLang's messages, bad input,
//! and a retraction round trip over HTTP.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

mod common;
use common::output::stderr;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn layout(fixture: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo(&format!("tests/fixtures/layouts/{fixture}.json"))).unwrap())
        .unwrap()
}

fn write_config(dir: &Path, name: &str, config: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(config).unwrap()).unwrap();
    path
}

fn runtime(config: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["cache-runtime", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kvpilot cache-runtime")
}

fn refused_with(config: Value, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = runtime(&write_config(dir.path(), "runtime.json", &config), &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(text.lines().next(), Some(message), "SGLang's message comes first, on its own line:\n{text}");
}

#[test]
fn host_pool_on_a_pure_swa_layout_exits_1_with_sglang_s_message() {
    refused_with(
        json!({"model": {"name": "custom/pure-swa"}, "layout": layout("custom-pure-swa"),
               "disaggregation": {"retractionBackup": "host_pool"}, "decode": {}}),
        "Host-pool retraction does not support pure-SWA models.",
    );
}

#[test]
fn host_pool_on_an_ssm_layout_exits_1_with_sglang_s_message() {
    refused_with(
        json!({"model": {"name": "Qwen/Qwen3-Next-80B-A3B"}, "layout": layout("qwen3-next-80b-a3b"),
               "disaggregation": {"retractionBackup": "host_pool"}, "decode": {}}),
        "Host-pool retraction does not support Mamba models.",
    );
}

#[test]
fn host_pool_on_an_mla_layout_exits_1_with_sglang_s_message() {
    refused_with(
        json!({"model": {"name": "deepseek-ai/DeepSeek-V3"}, "layout": layout("deepseek-v3"),
               "disaggregation": {"retractionBackup": "host_pool"}, "decode": {}}),
        "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
    );
}

#[test]
fn a_backup_stated_only_under_effective_is_checked_the_same() {
    refused_with(
        json!({"model": {"name": "custom/pure-swa"}, "layout": layout("custom-pure-swa"),
               "effective": {"retractionBackup": "host_pool", "retractionBackupSource": "spec",
                             "transferBackend": "mooncake", "decodeRadixCache": false, "decodeOffloadKvCache": false,
                             "hierarchicalCache": false, "priorityScheduling": false,
                             "disablePriorityPreemption": false, "decodeContextParallel": 1,
                             "enableUnifiedMemory": false},
               "decode": {}}),
        "Host-pool retraction does not support pure-SWA models.",
    );
}

#[test]
fn unreadable_or_inconsistent_input_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let missing = runtime(&dir.path().join("absent.json"), &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("cannot read the runtime config"), "{}", stderr(&missing));

    let typed = write_config(
        dir.path(),
        "typed.json",
        &json!({"model": {"name": "m"}, "layout": layout("llama-3.1-8b-instruct"), "decode": {"pageSize": "16"}}),
    );
    let out = runtime(&typed, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("field `decode.pageSize`"), "{}", stderr(&out));

    let mut broken = layout("llama-3.1-8b-instruct");
    broken["layers"]["total"] = json!(31);
    let inconsistent =
        write_config(dir.path(), "inconsistent.json", &json!({"model": {"name": "m"}, "layout": broken, "decode": {}}));
    let out = runtime(&inconsistent, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("layout.layerKinds: has 32 entries but layers.total is 31"), "{}", stderr(&out));

    let valid = write_config(
        dir.path(),
        "valid.json",
        &json!({"model": {"name": "m"}, "layout": layout("llama-3.1-8b-instruct")}),
    );
    let out = runtime(&valid, &[]);
    assert_eq!(out.status.code(), Some(2), "decode is required");
    let small = write_config(
        dir.path(),
        "small.json",
        &json!({"model": {"name": "m"}, "layout": layout("llama-3.1-8b-instruct"), "decode": {"pageSize": 64}}),
    );
    let out = runtime(&small, &["--device-memory", "1Mi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("give the runtime more device memory"), "{}", stderr(&out));
    let out = runtime(&small, &["--device-memory", "lots"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses a size it cannot read");
    assert!(stderr(&out).contains("expected bytes such as 4GiB"), "{}", stderr(&out));
}

struct Running {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the runtime and waits for its "ready" log line, which names the bound address.
fn start(config: &Path, device_memory: &str) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(["cache-runtime", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--device-memory", device_memory, "--log-format", "json"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kvpilot cache-runtime");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<Value>(&line)
                && let Some(addr) = entry["addr"].as_str()
            {
                let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(30)).expect("the runtime logs its address once ready");
    Running { child, addr }
}

async fn batch(client: &reqwest::Client, addr: SocketAddr, ops: Value) -> Vec<Value> {
    let response = client.post(format!("http://{addr}/v1/batch")).json(&json!({"ops": ops})).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["results"].as_array().unwrap().clone()
}

fn ok(result: &Value) -> &Value {
    assert!(result.get("error").is_none(), "operation failed: {result}");
    &result["ok"]
}

fn pages(value: &Value) -> Vec<u32> {
    value.as_array().map(|a| a.iter().map(|p| p.as_u64().unwrap() as u32).collect()).unwrap_or_default()
}

async fn wait_done(client: &reqwest::Client, addr: SocketAddr, ticket: u64) {
    let start = Instant::now();
    loop {
        let result = batch(client, addr, json!([{"op": "poll", "tickets": [ticket]}])).await;
        let state = ok(&result[0])["tickets"][0]["state"].as_str().unwrap().to_string();
        if state == "done" {
            return;
        }
        assert_eq!(state, "pending");
        assert!(start.elapsed() < Duration::from_secs(20), "ticket {ticket} never finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// GPT-OSS-20B: hybrid SWA with full layers, so the automatic backup is host_pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retraction_round_trip_over_http_restores_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "runtime.json",
        &json!({"model": {"name": "openai/gpt-oss-20b"}, "layout": layout("gpt-oss-20b"), "decode": {"pageSize": 4}}),
    );
    let runtime = start(&config, "64MiB");
    let addr = runtime.addr;
    let client = reqwest::Client::new();
    assert_eq!(client.get(format!("http://{addr}/readyz")).send().await.unwrap().status(), 200);
    let described: Value = client.get(format!("http://{addr}/v1/config")).send().await.unwrap().json().await.unwrap();
    assert_eq!(described["effective"]["retractionBackup"], "host_pool");
    assert_eq!(described["pools"]["window"], 128);

    let tokens: Vec<u32> = (1000..1040).collect();
    let results = batch(
        &client,
        addr,
        json!([{"op": "match", "request": "r1", "tokens": tokens},
               {"op": "allocate", "request": "r1", "tokens": 40},
               {"op": "describe", "request": "r1"}]),
    )
    .await;
    assert_eq!(ok(&results[0])["matchedTokens"], 0);
    let table = &ok(&results[2])["pages"];
    let (full, swa) = (pages(&table["full"]), pages(&table["swa"]));
    assert_eq!((full.len(), swa.len()), (10, 10), "40 tokens in pages of 4; all inside the 128-token window");
    let full_bytes: Vec<u8> = (0..full.len() * 4 * 24576).map(|i| (i * 7 % 251) as u8).collect();
    let swa_bytes: Vec<u8> = (0..swa.len() * 4 * 24576).map(|i| (i * 13 % 241) as u8).collect();
    let results = batch(
        &client,
        addr,
        json!([{"op": "write", "component": "full", "pages": full, "data": BASE64.encode(&full_bytes)},
               {"op": "write", "component": "swa", "pages": swa, "data": BASE64.encode(&swa_bytes)},
               {"op": "retract", "request": "r1"}]),
    )
    .await;
    let retraction = ok(&results[2]);
    assert_eq!(retraction["outcome"], "backingUp");
    assert_eq!(retraction["bytes"].as_u64().unwrap() as usize, full_bytes.len() + swa_bytes.len());
    wait_done(&client, addr, retraction["ticket"].as_u64().unwrap()).await;

    let stats: Value = client.get(format!("http://{addr}/v1/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(stats["pools"].as_object().unwrap().keys().collect::<Vec<_>>(), ["full", "swa"]);
    let full_pool = &stats["pools"]["full"];
    assert_eq!(full_pool["freeTokens"], full_pool["totalTokens"], "the device pages are free once backed up");
    assert_eq!(stats["host"]["totalSlots"].as_u64().unwrap() - stats["host"]["freeSlots"].as_u64().unwrap(), 80);

    // Another request takes the freed pages and overwrites them.
    let results = batch(&client, addr, json!([{"op": "allocate", "request": "r2", "tokens": 40}])).await;
    let reused = pages(&ok(&results[0])["pages"]["full"]);
    assert_eq!(reused, full, "the lowest free pages are handed out again");
    batch(
        &client,
        addr,
        json!([{"op": "write", "component": "full", "pages": reused, "data": BASE64.encode(vec![0xEE; full_bytes.len()])}]),
    )
    .await;

    let results = batch(&client, addr, json!([{"op": "restore", "request": "r1"}])).await;
    let restoration = ok(&results[0]);
    wait_done(&client, addr, restoration["ticket"].as_u64().unwrap()).await;
    let (full, swa) = (pages(&restoration["pages"]["full"]), pages(&restoration["pages"]["swa"]));
    let results = batch(
        &client,
        addr,
        json!([{"op": "read", "component": "full", "pages": full}, {"op": "read", "component": "swa", "pages": swa},
               {"op": "describe", "request": "r1"}, {"op": "restore", "request": "nobody"}]),
    )
    .await;
    assert_eq!(BASE64.decode(ok(&results[0])["data"].as_str().unwrap()).unwrap(), full_bytes);
    assert_eq!(BASE64.decode(ok(&results[1])["data"].as_str().unwrap()).unwrap(), swa_bytes);
    assert_eq!(ok(&results[2])["state"], "active");
    assert_eq!(results[3]["error"]["code"], "unknownRequest", "one failed operation does not stop the batch");

    let metrics = client.get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    for expected in [
        "kvpilot_retractions_total{outcome=\"backed_up\"} 1",
        "kvpilot_backup_bytes_total 1966080",
        "kvpilot_restore_bytes_total 1966080",
        "kvpilot_cache_tokens{component=\"swa\",state=\"protected\"}",
        "kvpilot_cache_op_latency_seconds_count{op=\"retract\"} 1",
    ] {
        assert!(metrics.contains(expected), "missing {expected} in\n{metrics}");
    }

    let response = client
        .post(format!("http://{addr}/v1/batch"))
        .body(r#"{"ops": [{"op": "allocate", "request": "x", "tokens": "many"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert!(text.contains("ops[0]") && text.contains("many"), "{text}");

    let mut runtime = runtime;
    let status = Command::new("kill").args(["-TERM", &runtime.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exited = runtime.child.wait().unwrap();
    assert!(exited.success(), "SIGTERM stops the runtime cleanly: {exited:?}");
}

fn bench_cache(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kvpilot")).arg("bench-cache").args(args).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn bench_cache_generates_replays_and_measures_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("gsp.jsonl");
    let trace = trace.to_str().unwrap();
    let generated = bench_cache(&[
        "--generate",
        "gsp",
        "--groups",
        "4",
        "--prompts-per-group",
        "4",
        "--system-len",
        "256",
        "--question-len",
        "16",
        "--seed",
        "7",
        "--out",
        trace,
    ]);
    assert_eq!((generated["requests"].as_u64(), generated["tokens"].as_u64()), (Some(16), Some(16 * 272)));
    let first_line = std::fs::read_to_string(trace).unwrap().lines().next().unwrap().to_string();
    assert_eq!(serde_json::from_str::<Value>(&first_line).unwrap()["tokens"].as_array().unwrap().len(), 272);

    let replay = bench_cache(&["--trace", trace, "--page-size", "16", "--rounds", "2"]);
    for field in ["requests", "tokens", "hitRate", "matchP50Us", "matchP99Us", "insertP50Us", "totalSeconds"] {
        assert!(replay[field].is_number(), "{field} missing in {replay}");
    }
    assert!(replay["hitRate"].as_f64().unwrap() >= 0.7, "12 of 16 prompts reuse a 256-token system prompt");

    let transfer = bench_cache(&[
        "--transfer",
        "--requests",
        "2",
        "--request-tokens",
        "64",
        "--bytes-per-token",
        "64",
        "--rounds",
        "1",
    ]);
    assert_eq!(transfer["verified"], true);
    assert!(transfer["backupVsMemcpy"].as_f64().unwrap() > 0.0);

    let out =
        Command::new(env!("CARGO_BIN_EXE_kvpilot")).args(["bench-cache", "--trace", "/nonexistent"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("/nonexistent"), "{}", stderr(&out));
}
