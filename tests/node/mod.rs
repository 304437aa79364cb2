//! The real node of `scripts/node.sh` for the node tests: a kubelet of the control plane's
//! release with containerd and runc, kube-scheduler and fake GPUs. Its state directory is
//! `KVPILOT_NODE_DIR`; its `env` file names what the tests look at on the machine (the runtime's
//! socket, the kubelet's root directory, the images it holds).
//!
//! `scripts/test.sh` starts a node and sets the variable (and `KVPILOT_REQUIRE_NODE`); a plain
//! `cargo test` skips the node tests with a message.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use crate::common::cluster::{Cluster, repo, succeeded, text};

/// The node's state directory, from `scripts/node.sh up`.
pub const NODE_ENV: &str = "KVPILOT_NODE_DIR";
/// Set by `scripts/test.sh`: a missing node fails the node tests instead of skipping them.
pub const REQUIRE_ENV: &str = "KVPILOT_REQUIRE_NODE";

/// Returns the node, or returns from the test after saying it is skipped.
#[macro_export]
macro_rules! node_or_skip {
    () => {
        match $crate::node::Node::from_env() {
            Some(node) => node,
            None => return,
        }
    };
}

#[derive(Clone, Debug)]
pub struct Node {
    pub dir: PathBuf,
    env: BTreeMap<String, String>,
}

impl Node {
    /// The node named by `KVPILOT_NODE_DIR`, or None (after printing that the test is skipped).
    pub fn from_env() -> Option<Node> {
        let Some(dir) = std::env::var_os(NODE_ENV) else {
            assert!(
                std::env::var_os(REQUIRE_ENV).is_none(),
                "{REQUIRE_ENV} is set but {NODE_ENV} is not: the node tests would be skipped"
            );
            eprintln!(
                "skipped: {NODE_ENV} is not set; `bash scripts/test.sh` starts a node (scripts/node.sh up) and sets it"
            );
            return None;
        };
        let dir = PathBuf::from(dir);
        let file = dir.join("env");
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e} (is the node up?)", file.display()));
        let env = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        Some(Node { dir, env })
    }

    pub fn var(&self, name: &str) -> &str {
        self.env.get(name).unwrap_or_else(|| panic!("{} names no {name}", self.dir.join("env").display()))
    }

    pub fn name(&self) -> &str {
        self.var("NODE_NAME")
    }

    /// The kvpilot image as the node holds it (`localhost/kvpilot/kvpilot:VERSION`), as (repository, tag).
    pub fn kvpilot_image(&self) -> (&str, &str) {
        self.var("KVPILOT_IMAGE").rsplit_once(':').unwrap()
    }

    /// The stand-in SGLang image (server and router; not SGLang).
    pub fn standin_image(&self) -> &str {
        self.var("STANDIN_IMAGE")
    }

    /// Pod sandboxes and containers the runtime holds for `namespace`, through CRI as the kubelet
    /// sees them (`cri-sweep list`): one JSON object each.
    pub fn runtime_objects(&self, namespace: &str) -> Vec<Value> {
        let out = Command::new(repo("target/control-plane/bin/cri-sweep"))
            .args(["--endpoint", &format!("unix://{}", self.var("CONTAINERD_ADDRESS")), "list", namespace])
            .output()
            .expect("run cri-sweep");
        succeeded("cri-sweep list", out).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The containers the runtime holds for `pod` (this pod, by its uid), by name: the
    /// latest attempt of each, with its start and finish times in nanoseconds.
    pub fn runtime_containers(&self, pod: &Pod) -> Value {
        let uid = pod.metadata.uid.as_deref().unwrap();
        let mut latest = serde_json::Map::new();
        for object in self.runtime_objects(pod.metadata.namespace.as_deref().unwrap()) {
            if object["kind"] != "container" || object["pod_uid"] != uid {
                continue;
            }
            let container = object["container"].as_str().unwrap().to_string();
            let newer = latest.get(&container).is_none_or(|seen| seen["attempt"].as_u64() < object["attempt"].as_u64());
            if newer {
                latest.insert(container, object);
            }
        }
        Value::Object(latest)
    }

    /// The kubelet's directory of pod `uid` (volumes, plugins, containers' files).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        PathBuf::from(self.var("KUBELET_ROOT")).join("pods").join(uid)
    }

    /// Mount points on the machine whose path or source mentions any of `needles` (a pod's uid,
    /// a sandbox id): its volumes' tmpfs and bind mounts, its shm, its network namespace.
    pub fn mounts_mentioning(&self, needles: &[String]) -> Vec<String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        mounts.lines().filter(|l| needles.iter().any(|n| l.contains(n.as_str()))).map(str::to_string).collect()
    }

    /// Addresses the node's IP allocator still holds (host-local's files, one per address).
    pub fn allocated_ips(&self) -> BTreeSet<String> {
        let dir = self.dir.join("ipam").join(self.var("BRIDGE"));
        std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|name| name.parse::<std::net::Ipv4Addr>().is_ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What the node keeps of `pods` once they are gone: their sandboxes and containers in the
    /// runtime, the kubelet's pod directories, mounts and IP addresses. Empty when nothing is left.
    pub fn leftovers(&self, pods: &[SeenPod]) -> Vec<String> {
        let mut left = Vec::new();
        let namespaces: BTreeSet<&str> = pods.iter().map(|p| p.namespace.as_str()).collect();
        for namespace in namespaces {
            for object in self.runtime_objects(namespace) {
                if pods.iter().any(|p| object["pod_uid"] == p.uid.as_str()) {
                    left.push(format!("runtime: {object}"));
                }
            }
        }
        for pod in pods {
            if self.pod_dir(&pod.uid).exists() {
                left.push(format!("kubelet directory of {}: {}", pod.name, self.pod_dir(&pod.uid).display()));
            }
        }
        let needles: Vec<String> =
            pods.iter().flat_map(|p| std::iter::once(p.uid.clone()).chain(p.sandboxes.iter().cloned())).collect();
        left.extend(self.mounts_mentioning(&needles).into_iter().map(|m| format!("mount: {m}")));
        let allocated = self.allocated_ips();
        for pod in pods {
            if allocated.contains(&pod.ip) {
                left.push(format!("address {} of {} still allocated", pod.ip, pod.name));
            }
        }
        left
    }

    /// Waits until the node keeps nothing of `pods` (once deleted, the kubelet removes them).
    pub async fn assert_nothing_left(&self, pods: &[SeenPod]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        loop {
            let left = self.leftovers(pods);
            if left.is_empty() {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "the node still holds, 4 minutes on:\n{}", left.join("\n"));
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// A pod as the node ran it: what to look for once it is gone.
#[derive(Clone, Debug)]
pub struct SeenPod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub ip: String,
    pub sandboxes: Vec<String>,
}

impl SeenPod {
    pub fn of(node: &Node, pod: &Pod) -> SeenPod {
        let name = pod.metadata.name.clone().unwrap();
        let namespace = pod.metadata.namespace.clone().unwrap();
        let sandboxes = node
            .runtime_objects(&namespace)
            .into_iter()
            .filter(|o| o["kind"] == "sandbox" && o["pod_uid"] == pod.metadata.uid.as_deref().unwrap())
            .map(|o| o["id"].as_str().unwrap().to_string())
            .collect();
        SeenPod { name, namespace, uid: pod.metadata.uid.clone().unwrap(), ip: pod_ip(pod).to_string(), sandboxes }
    }
}

pub fn pod_ip(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).unwrap_or_else(|| panic!("{:?} has no IP", pod.metadata.name))
}

pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready") == Some("True")
}

pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

/// The status of container `name` (init containers included).
pub fn container<'a>(pod: &'a Pod, name: &str) -> &'a ContainerStatus {
    let status = pod.status.as_ref().unwrap();
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{:?} has no status of container {name}", pod.metadata.name))
}

/// When container `name` last started running, from its status.
pub fn started_at(pod: &Pod, name: &str) -> k8s_openapi::jiff::Timestamp {
    let state = container(pod, name).state.as_ref().unwrap();
    state
        .running
        .as_ref()
        .and_then(|r| r.started_at.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(|| panic!("{name} of {:?} is not running: {state:?}", pod.metadata.name))
}

/// A one-line account of each pod (phase, conditions, containers' states), for failures.
pub fn describe(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            let status = p.status.as_ref();
            let states: Vec<String> = status
                .into_iter()
                .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
                .map(|c| format!("{}={:?} ready={} restarts={}", c.name, c.state, c.ready, c.restart_count))
                .collect();
            format!(
                "{} phase={:?} ready={} {}",
                p.metadata.name.as_deref().unwrap_or("?"),
                status.and_then(|s| s.phase.clone()),
                is_ready(p),
                states.join("; ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pods of `namespace` matching `selector`.
pub async fn pods(client: &kube::Client, namespace: &str, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut pods = api.list(&ListParams::default().labels(selector)).await.expect("list pods").items;
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pods
}

/// Waits until the pods of `namespace` matching `selector` satisfy `done`, and returns them; a
/// failure shows each pod's state and the namespace's events.
pub async fn wait_pods(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&[Pod]) -> bool,
) -> Vec<Pod> {
    let mut last = String::new();
    let found = wait_for_or(timeout, async || {
        let pods = pods(client, namespace, selector).await;
        last = describe(&pods);
        done(&pods).then_some(pods)
    })
    .await;
    found.unwrap_or_else(|| panic!("{what} did not happen within {timeout:?}:\n{last}\n{}", cluster_events(namespace)))
}

/// Waits until exactly `names` match `selector`, each Ready and not terminating, and returns them.
pub async fn ready_pods(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    names: &[String],
    timeout: Duration,
) -> Vec<Pod> {
    let mut want: Vec<String> = names.to_vec();
    want.sort();
    let what = format!("{want:?} all Ready");
    wait_pods(client, namespace, selector, &what, timeout, |pods| {
        let got: Vec<&str> = pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect();
        got == want && pods.iter().all(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
    })
    .await
}

/// Waits until `group` (the pods matching `selector`) is replaced whole: as many pods, none of
/// them one of `group`, each Ready and not terminating; returns them.
pub async fn wait_group_replaced(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
    group: &[Pod],
    why: &str,
    timeout: Duration,
) -> Vec<Pod> {
    let old: BTreeSet<&str> = group.iter().map(|p| p.metadata.uid.as_deref().unwrap()).collect();
    let what = format!("the group restarted whole {why}");
    wait_pods(client, namespace, selector, &what, timeout, |pods| {
        let fresh = pods.iter().all(|p| !old.contains(p.metadata.uid.as_deref().unwrap()));
        pods.len() == group.len()
            && fresh
            && pods.iter().all(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
    })
    .await
}

/// Waits until pod `name` is Ready, and returns it; a failure shows its state and the events.
pub async fn ready_pod(client: &kube::Client, namespace: &str, name: &str, timeout: Duration) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut last = String::new();
    let found = wait_for_or(timeout, async || {
        let pod = api.get_opt(name).await.expect("get pod")?;
        last = describe(std::slice::from_ref(&pod));
        is_ready(&pod).then_some(pod)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("{name} did not become Ready within {timeout:?}:\n{last}\n{}", cluster_events(namespace))
    })
}

async fn wait_for_or<T>(timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The namespace's events (probe failures, scheduling, pulls), for failure messages.
fn cluster_events(namespace: &str) -> String {
    let Some(cluster) = Cluster::from_env() else { return String::new() };
    let out = cluster.kubectl(&["get", "events", "-n", namespace, "--sort-by=.lastTimestamp"]);
    format!("events:\n{}{}", text(&out.stdout), text(&out.stderr))
}

/// Every state of the pods of `namespace` matching `selector` that the API server's watch shows,
/// in order, from when it is made until it is dropped: what happened between two polls, such as
/// a condition that changed just before the pod was deleted.
pub struct PodHistory {
    seen: Arc<Mutex<Vec<Pod>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodHistory {
    /// Starts watching; returns once the watch has listed the pods there are now.
    pub async fn record(client: &kube::Client, namespace: &str, selector: &str) -> PodHistory {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (listed, is_listed) = tokio::sync::oneshot::channel();
        let mut listed = Some(listed);
        let mut stream = watcher(api, watcher::Config::default().labels(selector)).default_backoff().boxed();
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        recorded.lock().unwrap().push(pod)
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("pod watch: {e} (retrying)"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), is_listed)
            .await
            .expect("the pod watch listed within 60 s")
            .expect("the pod watch ran");
        PodHistory { seen, task }
    }

    /// The states of pod `uid` seen so far, oldest first.
    pub fn of(&self, uid: &str) -> Vec<Pod> {
        self.seen.lock().unwrap().iter().filter(|p| p.metadata.uid.as_deref() == Some(uid)).cloned().collect()
    }
}

impl Drop for PodHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// GET http://`ip`:`port``path` from the host, as the kubelet's probes reach pods: (status, body).
pub async fn http_get(ip: &str, port: u16, path: &str) -> Result<(u16, String), String> {
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
    let response = client.get(format!("http://{ip}:{port}{path}")).send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.map_err(|e| e.to_string())?))
}

/// The JSON a stand-in serves at `/kvpilot-standin` on `port` of `pod`.
pub async fn standin_report(pod: &Pod, port: u16) -> Value {
    let (status, body) = http_get(pod_ip(pod), port, "/kvpilot-standin")
        .await
        .unwrap_or_else(|e| panic!("the stand-in in {:?} does not answer: {e}", pod.metadata.name));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The value of Prometheus sample `name` in `text` (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
