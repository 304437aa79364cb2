//! The control plane's bad days, against the real kube-apiserver and etcd: the API server
//! killed and restarted in the middle of a rollout, and etcd compacted so that the
//! operator's watches come back to `410 Gone` and must list again. After each the fleet
//! converges with no lost pod, no duplicate ordinal, no orphan and no repeated event.
//!
//! This restarts the shared kube-apiserver (`scripts/control-plane.sh restart-apiserver`), so it
//! has a test binary of its own (cargo runs test binaries one after another).

mod common;
mod fleet;
mod kubelet;

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use common::cluster::{Cluster, succeeded};
use fleet::{Fleet, label, until};
use kubelet::Timing;

/// A restarted kube-apiserver can leave watch requests unanswered; the operator's read timeout
/// (30 s) and the watches' backoff bring them back, so convergence takes longer than usual.
const AFTER_RESTART: Duration = Duration::from_secs(240);

/// The state directory of the running control plane (certificates, `env` with its ports).
fn state_dir(cluster: &Cluster) -> PathBuf {
    std::env::var_os("KVPILOT_CONTROL_PLANE_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let kubeconfig = cluster.kubeconfig.canonicalize().expect("the kubeconfig path");
        kubeconfig.parent().expect("the kubeconfig's directory").to_path_buf()
    })
}

/// Stops kube-apiserver and starts it again (etcd keeps the data); returns once it is ready.
async fn restart_apiserver(cluster: &Cluster) {
    let state = state_dir(cluster);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(common::cluster::repo("scripts/control-plane.sh"))
            .arg("restart-apiserver")
            .env("KVPILOT_CONTROL_PLANE_DIR", &state)
            .output()
    })
    .await
    .expect("join")
    .expect("run scripts/control-plane.sh");
    succeeded("scripts/control-plane.sh restart-apiserver", out);
}

/// etcd's client URL, from the control plane's `env` file.
fn etcd_url(cluster: &Cluster) -> String {
    let env = std::fs::read_to_string(state_dir(cluster).join("env")).expect("the control plane's env file");
    let port = env.lines().find_map(|l| l.strip_prefix("ETCD_PORT=")).expect("ETCD_PORT in env");
    format!("http://127.0.0.1:{port}")
}

/// Compacts etcd's history up to its current revision, through etcd's JSON gateway: every
/// older resourceVersion is gone for good.
async fn compact_etcd(cluster: &Cluster) -> u64 {
    let http = reqwest::Client::new();
    let url = etcd_url(cluster);
    let key = base64::engine::general_purpose::STANDARD.encode("/registry");
    let range: Value = http
        .post(format!("{url}/v3/kv/range"))
        .json(&json!({"key": key, "limit": 1, "keys_only": true}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("etcd range")
        .json()
        .await
        .expect("etcd range response");
    let revision: u64 = range["header"]["revision"].as_str().and_then(|r| r.parse().ok()).expect("etcd revision");
    http.post(format!("{url}/v3/kv/compaction"))
        .json(&json!({"revision": revision.to_string(), "physical": true}))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("etcd compaction");
    revision
}

/// The operator with its watch errors in the log (kube-runtime logs them at debug).
fn operator_logging_watches(fleet: &Fleet) -> fleet::Operator {
    fleet.operator(&[], &[("RUST_LOG", "warn,kvpilot=info,kube_runtime::watcher=debug")])
}

/// Both faults in one restart (each restart costs the suite about a minute and a half): one
/// resource is in the middle of a rollout when kube-apiserver goes, and etcd was compacted past
/// every resourceVersion the operator holds, so its watches come back to 410 Gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_restarted_over_a_compacted_etcd_mid_rollout_loses_nothing() {
    let cluster = cluster_or_skip!();
    let slow = Timing::new(Duration::from_millis(700), Duration::from_millis(500));
    let fleet = Fleet::new(&cluster, "ctl-apiserver", slow).await;
    let mut operator = operator_logging_watches(&fleet);
    let rolling = fleet.create(&fleet.example("llama-3.1-8b-full.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(4);
    }));
    let scaled = fleet.create(&fleet.example("gemma-3-1b-sliding-full-pool.yaml", |o| {
        o["spec"]["decode"]["replicas"] = json!(2);
    }));
    fleet.converged(&rolling, 4).await;
    fleet.converged(&scaled, 2).await;

    fleet.patch_spec(&rolling, json!({"decode": {"pageSize": 32}})).await;
    until("the rollout started", async || {
        let pods = fleet.pods_of(&rolling).await;
        (pods.iter().map(|p| label(p, "kvpilot.dev/revision")).collect::<std::collections::BTreeSet<_>>().len() > 1)
            .then_some(())
    })
    .await;
    // Writes the operator does not watch move etcd past the resourceVersions its quiet watches
    // hold; the compaction then removes that history.
    let elsewhere = common::cluster::TestNamespace::create(&cluster, "ctl-compaction-noise");
    for i in 0..20 {
        cluster.kubectl_ok(&["create", "configmap", &format!("noise-{i}"), "-n", &elsewhere.name]);
    }
    compact_etcd(&cluster).await;
    restart_apiserver(&cluster).await;
    // A change made while the watches are still away must arrive through the relist.
    fleet.patch_spec(&scaled, json!({"decode": {"replicas": 3, "pageSize": 32}})).await;
    fleet.converged_within(&rolling, 4, AFTER_RESTART).await;
    fleet.converged_within(&scaled, 3, AFTER_RESTART).await;

    let logs = operator.process.logs();
    assert!(logs.contains("code: 410"), "no watch was told 410 Gone:\n{logs}");
    // Calls refused while the API server was away are retried (and counted as failures); none
    // may be a conflict or an invalid write.
    let (_, failures) = operator.failures().await;
    assert!(!failures.contains("conflict") && !failures.contains("invalid"), "{failures}");
    fleet.assert_no_repeated_events().await;
}
