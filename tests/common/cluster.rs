//! Helpers for tests against the real control plane of `scripts/control-plane.sh`: its admin
//! kubeconfig from `KVPILOT_CLUSTER_KUBECONFIG`, kubectl of the same release, a namespace per
//! test, `kvpilot` host processes stopped on drop, and waiting with timeouts.
//!
//! `scripts/test.sh` always starts the control plane and sets the variable; a plain `cargo test`
//! without it skips these tests with a message (see [`Cluster::from_env`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

/// The environment variable naming the admin kubeconfig of the control plane.
pub const KUBECONFIG_ENV: &str = "KVPILOT_CLUSTER_KUBECONFIG";
/// Set by `scripts/test.sh`: a missing cluster fails the cluster tests instead of skipping them.
pub const REQUIRE_ENV: &str = "KVPILOT_REQUIRE_CLUSTER";
/// Optional: the kubectl binary (default: the one `scripts/control-plane.sh` built).
pub const KUBECTL_ENV: &str = "KVPILOT_CLUSTER_KUBECTL";

pub use super::repo;

/// kubectl arguments that server-side apply `crds/` as the tests' field manager.
pub const APPLY_CRDS: [&str; 6] =
    ["apply", "--server-side", "--force-conflicts", "--field-manager=kvpilot-tests", "-f", "crds/"];

/// The gang schedulers' CRDs whose APIs kvpilot asks discovery about.
pub const GANG_CRDS: [&str; 3] =
    ["crd/podgroups.scheduling.volcano.sh", "crd/podgroups.scheduling.x-k8s.io", "crd/workloads.kueue.x-k8s.io"];

/// The `.yaml` files of a directory of the repository, sorted.
pub fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The control plane under test, reached as cluster admin.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
}

/// Returns the cluster, or returns from the test after saying it is skipped.
#[macro_export]
macro_rules! cluster_or_skip {
    () => {
        match $crate::common::cluster::Cluster::from_env() {
            Some(cluster) => cluster,
            None => return,
        }
    };
}

impl Cluster {
    /// The cluster named by `KVPILOT_CLUSTER_KUBECONFIG`, or None (after printing that the test
    /// is skipped) when it is unset.
    pub fn from_env() -> Option<Cluster> {
        let Some(kubeconfig) = std::env::var_os(KUBECONFIG_ENV) else {
            assert!(
                std::env::var_os(REQUIRE_ENV).is_none(),
                "{REQUIRE_ENV} is set but {KUBECONFIG_ENV} is not: the cluster tests would be skipped"
            );
            eprintln!(
                "skipped: {KUBECONFIG_ENV} is not set; `bash scripts/test.sh` starts a control plane and sets it \
                 (or run `scripts/control-plane.sh up` and export {KUBECONFIG_ENV}=target/control-plane/kubeconfig)"
            );
            return None;
        };
        let kubeconfig = PathBuf::from(kubeconfig);
        assert!(kubeconfig.exists(), "{KUBECONFIG_ENV}={} does not exist", kubeconfig.display());
        let kubectl = std::env::var_os(KUBECTL_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| repo("target/control-plane/bin/kubectl"));
        assert!(kubectl.exists(), "kubectl is missing at {}: run `scripts/control-plane.sh build`", kubectl.display());
        Some(Cluster { kubeconfig, kubectl })
    }

    /// Stops and starts kube-apiserver alone (`scripts/control-plane.sh restart-apiserver`);
    /// etcd keeps the data, the address stays the same. Only for a test binary of its own: it
    /// interrupts every test using the control plane meanwhile.
    pub fn restart_apiserver(&self) {
        // The kubeconfig lives in the run's state directory (target/control-plane/kubeconfig is
        // a link to run/kubeconfig).
        let state = std::fs::canonicalize(&self.kubeconfig).unwrap().parent().unwrap().to_path_buf();
        let out = Command::new("bash")
            .arg(repo("scripts/control-plane.sh"))
            .arg("restart-apiserver")
            .env("KVPILOT_CONTROL_PLANE_DIR", &state)
            .output()
            .expect("run scripts/control-plane.sh");
        succeeded("scripts/control-plane.sh restart-apiserver", out);
    }

    /// A client authenticated as cluster admin.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }

    /// Runs kubectl as admin; returns its output whatever the exit status.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.kubeconfig, args, None)
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: &str) -> Output {
        self.kubectl_as(&self.kubeconfig, args, Some(input))
    }

    /// Runs kubectl with another kubeconfig (a ServiceAccount's, for example).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
        let mut child = Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .current_dir(repo(""))
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kubectl");
        if let Some(input) = input {
            child.stdin.take().unwrap().write_all(input.as_bytes()).expect("write kubectl stdin");
        }
        child.wait_with_output().expect("run kubectl")
    }

    /// Runs kubectl as admin and returns its stdout; panics with stderr when it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        succeeded(&format!("kubectl {}", args.join(" ")), self.kubectl(args))
    }

    /// `kubectl get -o json` of one object, or None when it does not exist.
    pub fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut full = vec!["get", "-o", "json"];
        full.extend_from_slice(args);
        let out = self.kubectl(&full);
        if !out.status.success() {
            let stderr = text(&out.stderr);
            assert!(stderr.contains("NotFound") || stderr.contains("not found"), "kubectl {full:?}: {stderr}");
            return None;
        }
        Some(serde_json::from_slice(&out.stdout).expect("kubectl -o json"))
    }

    /// Installs the CRD with server-side apply (idempotent, so tests may race to do it) and
    /// waits until it is Established.
    pub fn install_crd(&self) {
        self.kubectl_ok(&APPLY_CRDS);
        self.wait_established(&["crd/inferencedeployments.kvpilot.dev"]);
    }

    /// Waits until every CRD of `crds` (`crd/NAME`) is Established. `kubectl wait` fails outright
    /// on a CRD so new that it has no conditions yet (seen on a control plane just started:
    /// `.status.conditions accessor error: <nil>`), so it is asked again until it answers.
    pub fn wait_established(&self, crds: &[&str]) {
        let mut wait = vec!["wait", "--for=condition=Established", "--timeout=10s"];
        wait.extend_from_slice(crds);
        wait_for_blocking(&format!("{crds:?} Established"), Duration::from_secs(60), || {
            self.kubectl(&wait).status.success().then_some(())
        });
    }

    /// Installs one CRD file with server-side apply and waits until `crd` is Established.
    pub fn install_crd_file(&self, path: &Path, crd: &str) {
        let file = path.to_str().unwrap();
        self.kubectl_ok(&["apply", "--server-side", "--force-conflicts", "--field-manager=kvpilot-tests", "-f", file]);
        self.wait_established(&[crd]);
    }

    /// Points every webhook of the configuration `kind` (validatingwebhookconfiguration or
    /// mutatingwebhookconfiguration) `name` at `base` + the path of its Service client config,
    /// keeping everything else (selectors, rules, caBundle) as rendered: the API server reaches a
    /// webhook Service only through a kubelet-run pod and kube-proxy, neither of which runs here.
    pub fn point_every_webhook_at(&self, kind: &str, name: &str, base: &str) {
        let configuration = self.get_json(&[kind, name]).unwrap();
        let webhooks = configuration["webhooks"].as_array().unwrap();
        let patch: Vec<Value> = webhooks
            .iter()
            .enumerate()
            .flat_map(|(i, webhook)| {
                let path = webhook["clientConfig"]["service"]["path"].as_str().unwrap();
                [
                    serde_json::json!({"op": "remove", "path": format!("/webhooks/{i}/clientConfig/service")}),
                    serde_json::json!({
                        "op": "add", "path": format!("/webhooks/{i}/clientConfig/url"), "value": format!("{base}{path}")
                    }),
                ]
            })
            .collect();
        self.kubectl_ok(&["patch", kind, name, "--type=json", "-p", &Value::from(patch).to_string()]);
    }

    /// The caBundle of every webhook of the configuration `kind` `name`, once each is set.
    pub fn webhook_ca_bundles(&self, kind: &str, name: &str) -> Option<Vec<String>> {
        let configuration = self.get_json(&[kind, name])?;
        configuration["webhooks"]
            .as_array()?
            .iter()
            .map(|w| w["clientConfig"]["caBundle"].as_str().map(str::to_string))
            .collect()
    }

    /// Installs the gang schedulers' own CRDs (Volcano's, scheduler-plugins' and Kueue's, as
    /// `scripts/gang-crds.sh` fetches them, cached) and waits until they are Established.
    pub fn install_gang_crds(&self) {
        let script = Command::new("bash").arg(repo("scripts/gang-crds.sh")).output().expect("run scripts/gang-crds.sh");
        let dir = succeeded("scripts/gang-crds.sh", script);
        let dir = dir.trim();
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=kvpilot-tests",
            "-R",
            "-f",
            dir,
        ]);
        self.wait_established(&GANG_CRDS);
    }

    /// Deletes the gang schedulers' CRDs (and so every object of theirs), waiting until they
    /// are gone: a cluster that serves none of their APIs.
    pub fn remove_gang_crds(&self) {
        let mut delete = vec!["delete", "--ignore-not-found", "--wait", "--timeout=120s"];
        delete.extend(GANG_CRDS);
        self.kubectl_ok(&delete);
    }

    /// A kubeconfig (written into `dir`) that authenticates with a fresh token of the
    /// ServiceAccount `namespace/name` from the TokenRequest API.
    pub fn service_account_kubeconfig(&self, dir: &Path, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=2h"]);
        let admin: Value = serde_norway::from_str(&std::fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let cluster = &admin["clusters"][0]["cluster"];
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": name, "user": {"token": token.trim()}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": name, "namespace": namespace}}],
            "current-context": "test",
        });
        let path = dir.join(format!("{namespace}-{name}.kubeconfig"));
        std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
        path
    }
}

/// A client for any kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    kube::Client::try_from(config_for(kubeconfig).await).expect("client")
}

async fn config_for(kubeconfig: &Path) -> kube::Config {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    kube::Config::from_custom_kubeconfig(config, &options).await.expect("kubeconfig")
}

impl Cluster {
    /// An admin client that does not retry: kube's default client retries a 429 (throttling) for
    /// as long as the server asks, and an eviction a disruption budget refuses answers 429 too.
    pub async fn client_without_retries(&self) -> kube::Client {
        let mut config = config_for(&self.kubeconfig).await;
        config.default_retry = false;
        kube::Client::try_from(config).expect("client")
    }
}

/// The directory of the other projects' CRDs `scripts/third-party-crds.sh` fetches from their
/// published Go modules (cached): `prometheus-operator/`, `keda/`, `cert-manager/`.
pub fn third_party_crds() -> PathBuf {
    let script = Command::new("bash")
        .arg(repo("scripts/third-party-crds.sh"))
        .output()
        .expect("run scripts/third-party-crds.sh");
    PathBuf::from(succeeded("scripts/third-party-crds.sh", script).trim())
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stdout of a command that must have succeeded.
pub fn succeeded(what: &str, out: Output) -> String {
    assert!(out.status.success(), "{what} failed ({}):\n{}\n{}", out.status, text(&out.stderr), text(&out.stdout));
    text(&out.stdout)
}

/// Every document of a YAML file, parsed.
pub fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|d| !d.is_null())
        .collect()
}

/// The examples, each moved into `namespace` (they name `default` or `models`), by file name.
pub fn examples_in(namespace: &str) -> Vec<(String, Value)> {
    yaml_files("examples")
        .into_iter()
        .flat_map(|path| {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            yaml_documents(&path).into_iter().map(move |mut object| {
                object["metadata"]["namespace"] = Value::from(namespace);
                (file.clone(), object)
            })
        })
        .collect()
}

/// A namespace of its own for one test, deleted (without waiting) when dropped.
pub struct TestNamespace {
    pub name: String,
    cluster: Cluster,
}

impl TestNamespace {
    /// Creates `<prefix>-<pid>-<n>`: unique across parallel tests and test binaries.
    pub fn create(cluster: &Cluster, prefix: &str) -> TestNamespace {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        cluster.kubectl_ok(&["create", "namespace", &name]);
        TestNamespace { name, cluster: cluster.clone() }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = self.cluster.kubectl(&["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"]);
    }
}

/// `kvpilot operator` serving the webhooks on 127.0.0.1:`port` with self-signed certificates for
/// `localhost` (Secret `FULLNAME-webhook-tls`), keeping the caBundle of the chart's webhook
/// configurations `fullname`, and authenticated as the chart's ServiceAccount `fullname` in
/// `namespace`, so its every call goes through the chart's RBAC. `dir` holds its credentials.
pub fn start_webhook_operator(
    cluster: &Cluster,
    namespace: &str,
    fullname: &str,
    port: u16,
    dir: &Path,
) -> KvpilotProcess {
    let kubeconfig = cluster.service_account_kubeconfig(dir, namespace, fullname);
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let (metrics, health) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let webhook_addr = format!("127.0.0.1:{port}");
    let secret = format!("{fullname}-webhook-tls");
    KvpilotProcess::start(
        &kubeconfig,
        &[
            "operator",
            "--namespace=all",
            "--metrics-addr",
            &metrics,
            "--health-addr",
            &health,
            "--webhook-addr",
            &webhook_addr,
            "--webhook-certs=self-signed",
            "--webhook-secret",
            &secret,
            "--webhook-service=localhost",
            "--validating-webhook-configuration",
            fullname,
            "--mutating-webhook-configuration",
            fullname,
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[("POD_NAMESPACE", namespace)],
    )
}

/// The webhook configurations the chart renders.
pub const WEBHOOK_CONFIGURATIONS: [&str; 2] = ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"];

/// The chart installed, with every webhook it renders served by `kvpilot operator` on the host
/// ([`start_webhook_operator`]: as the chart's ServiceAccount, so every call it makes goes through
/// the chart's RBAC), once the operator has written one CA into every webhook's caBundle. What
/// each test of the API server calling kvpilot's webhooks starts from. Dropped, it stops the
/// operator, then uninstalls the chart.
pub struct ChartWebhooks {
    pub operator: KvpilotProcess,
    pub release: HelmRelease,
    pub fullname: String,
    /// The CA every webhook's caBundle holds.
    pub ca_bundle: String,
    /// The operator's credentials and certificates.
    _dir: tempfile::TempDir,
}

impl ChartWebhooks {
    /// `helm install NAME charts/kvpilot -n OPERATOR_NAMESPACE HELM_ARGS...`, every webhook pointed
    /// at the operator, and the caBundles set.
    pub fn install(cluster: &Cluster, name: &str, operator_namespace: &str, helm_args: &[&str]) -> ChartWebhooks {
        let release = HelmRelease::install(cluster, name, operator_namespace, helm_args);
        let fullname = release.fullname();
        let port = free_port();
        let rendered: Vec<&str> =
            WEBHOOK_CONFIGURATIONS.into_iter().filter(|kind| cluster.get_json(&[kind, &fullname]).is_some()).collect();
        assert!(!rendered.is_empty(), "the chart rendered no webhook configuration {fullname}");
        for kind in &rendered {
            cluster.point_every_webhook_at(kind, &fullname, &format!("https://localhost:{port}"));
        }
        let dir = tempfile::tempdir().unwrap();
        let mut operator = start_webhook_operator(cluster, operator_namespace, &fullname, port, dir.path());
        let ca_bundle =
            wait_for_blocking("kvpilot sets the caBundle of every webhook", Duration::from_secs(60), || {
                operator.assert_running();
                let bundles: Vec<String> = rendered
                    .iter()
                    .map(|kind| cluster.webhook_ca_bundles(kind, &fullname))
                    .collect::<Option<Vec<_>>>()?
                    .concat();
                bundles.iter().all(|bundle| *bundle == bundles[0]).then(|| bundles[0].clone())
            });
        ChartWebhooks { operator, release, fullname, ca_bundle, _dir: dir }
    }
}

/// A `kvpilot` subcommand running as a host process, killed when dropped (also when the test
/// fails). Its stderr goes to a file, shown by [`KvpilotProcess::logs`].
pub struct KvpilotProcess {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl KvpilotProcess {
    /// Starts `kvpilot <args>` with `KUBECONFIG=kubeconfig` and extra environment.
    pub fn start(kubeconfig: &Path, args: &[&str], env: &[(&str, &str)]) -> KvpilotProcess {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn,kvpilot=info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("start kvpilot");
        KvpilotProcess { child, log }
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Panics (with its log) if it exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("kvpilot exited ({status}):\n{}", self.logs());
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for it to exit; panics (with its log) if it does not.
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < timeout, "kvpilot ignored SIGTERM for {timeout:?}:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for KvpilotProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free loopback port (bound and released: good enough for a test's own listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Polls `check` every 200 ms until it returns Some; panics naming `what` after `timeout`.
pub async fn wait_for<T>(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < timeout, "{what} did not happen within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`wait_for`] for blocking checks (kubectl).
pub fn wait_for_blocking<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < timeout, "{what} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pinned helm binary of `scripts/install-test-tools.sh`.
pub fn helm_binary() -> PathBuf {
    super::test_tool("helm")
}

impl Cluster {
    /// Runs helm against the cluster as admin; returns its output whatever the exit status.
    pub fn helm(&self, args: &[&str]) -> Output {
        Command::new(helm_binary())
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(repo(""))
            .output()
            .expect("run helm")
    }
}

/// A Helm release of charts/kvpilot, uninstalled when dropped (also when the test fails).
pub struct HelmRelease {
    pub name: String,
    pub namespace: String,
    cluster: Cluster,
}

impl HelmRelease {
    /// `helm install NAME charts/kvpilot -n NAMESPACE --create-namespace ARGS...`, which must succeed.
    pub fn install(cluster: &Cluster, name: &str, namespace: &str, args: &[&str]) -> HelmRelease {
        let mut full = vec!["install", name, "charts/kvpilot", "--namespace", namespace, "--create-namespace"];
        full.extend_from_slice(args);
        succeeded(&format!("helm {}", full.join(" ")), cluster.helm(&full));
        HelmRelease { name: name.to_string(), namespace: namespace.to_string(), cluster: cluster.clone() }
    }

    /// The release's full name (`kvpilot.fullname`): the release name when it contains "kvpilot".
    pub fn fullname(&self) -> String {
        if self.name.contains("kvpilot") { self.name.clone() } else { format!("{}-kvpilot", self.name) }
    }
}

impl Drop for HelmRelease {
    fn drop(&mut self) {
        let _ = self.cluster.helm(&["uninstall", &self.name, "--namespace", &self.namespace, "--wait=false"]);
        let _ = self.cluster.kubectl(&["delete", "namespace", &self.namespace, "--wait=false", "--ignore-not-found"]);
    }
}
