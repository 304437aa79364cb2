//! The objects an InferenceDeployment should have, as a pure function of the resource and its
//! assessment. `kvpilot render` prints exactly these; the controller applies them.
//!
//! A fleet (decode, and prefill with `spec.prefill`) is a set of replicas. A replica is one
//! SGLang server: one pod, or with `nodesPerReplica` > 1 a group of pods
//! `NAME-ROLE-REPLICA-RANK` that start together and find rank 0 through the fleet's headless
//! Service. The router is a Deployment with its own ServiceAccount, a Role that may only read
//! the namespace's pods, and a Service: the resource's endpoint.
//!
//! One builder per object kind: `config_map.rs`, `service.rs` (a fleet's headless Service),
//! `disruption_budget.rs` (a fleet's and the router's PodDisruptionBudget),
//! `fleet.rs` (a fleet's revision and the pods of its replicas), `pod.rs` (the SGLang server's
//! pod template), `pod_group.rs` (what a gang scheduler needs of a replica: its PodGroup, its
//! pods' group labels), `pod_monitor.rs` (how Prometheus finds a fleet's metrics: its PodMonitor
//! or the pods' scrape annotations), `placement.rs` (the affinity and spread of a fleet's pods), `cache.rs`
//! (what the cache runtime adds to a decode pod), `router.rs` (the router's objects);
//! `container.rs` holds the container pieces they share, `resources.rs` their resources. This
//! module holds
//! what every object shares: names, labels and the owner reference.

mod cache;
mod config_map;
mod container;
mod disruption_budget;
mod fleet;
mod placement;
mod pod;
mod pod_group;
mod pod_monitor;
pub mod resources;
mod router;
mod service;
#[cfg(test)]
mod test_support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;

pub use cache::DEFAULT_RUNTIME_IMAGE;
pub use fleet::Fleet;
pub use pod::DEFAULT_SGLANG_IMAGE;
pub use pod_group::{CoschedulingPodGroup, PodGroup, VolcanoPodGroup};
pub use pod_monitor::{POD_MONITOR_API, POD_MONITORS_UNSERVED, PodMonitor, SCRAPE_ANNOTATION};
pub use router::Router;

use crate::api::InferenceDeployment;
use crate::policy::Assessment;
use crate::release::ReleaseChoice;
use crate::runtime::LogFormat;
pub use crate::sglang::server::FleetRole;
use crate::sglang::{kv_compat, server};

/// Label: what the pods are.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label: which InferenceDeployment they belong to.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Label: who manages them.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: the revision (hash of everything that affects a pod).
pub const LABEL_REVISION: &str = "kvpilot.dev/revision";
/// Label: the replica's ordinal.
pub const LABEL_ORDINAL: &str = "kvpilot.dev/ordinal";
/// Label: the pod's rank within its replica (0 for single-pod replicas).
pub const LABEL_RANK: &str = "kvpilot.dev/rank";
/// Label: the KV compatibility key of a server pod (which servers it can exchange KV with), and on
/// the router's Deployment and pods the key whose servers the router selects.
pub const LABEL_KV_COMPAT: &str = "kvpilot.dev/kv-compat";
/// The readiness gate every server pod carries: the controller sets it True on every rank of a
/// replica while each of them is ready, False on all as soon as one is not, so that Services,
/// the router and disruption budgets count a replica as one unit.
pub const GROUP_READY: &str = "kvpilot.dev/group-ready";
/// `app.kubernetes.io/name` of decode pods.
pub const DECODE_APP: &str = "kvpilot-decode";
/// `app.kubernetes.io/name` of prefill pods.
pub const PREFILL_APP: &str = "kvpilot-prefill";
/// `app.kubernetes.io/name` of router pods.
pub const ROUTER_APP: &str = "kvpilot-router";

/// The cache runtime's CPU by default: copies between the ranks' host pools and its store.
pub const DEFAULT_CACHE_RUNTIME_CPU: &str = "1";

/// Operator-wide settings that shape the objects.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// The SGLang image for resources that name none, `{version}` standing for the release.
    pub sglang_image: String,
    /// The router image for resources that name none (`{version}` as above); unset, the SGLang
    /// image, which ships the router.
    pub router_image: Option<String>,
    /// The kvpilot image: the cache runtime sidecar and the connector's init container.
    pub runtime_image: String,
    /// The SGLang release for resources whose spec and image name none (`--sglang-version`).
    pub default_release: ReleaseChoice,
    /// The log format of the cache runtime sidecars: the operator's own.
    pub runtime_log_format: LogFormat,
    /// A Prometheus Operator PodMonitor per fleet (`--pod-monitors`) instead of scrape
    /// annotations on the pods.
    pub pod_monitors: bool,
    /// The CPU of each cache runtime sidecar, request and limit (`--cache-runtime-cpu`).
    pub cache_runtime_cpu: String,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            sglang_image: DEFAULT_SGLANG_IMAGE.into(),
            router_image: None,
            runtime_image: DEFAULT_RUNTIME_IMAGE.into(),
            default_release: ReleaseChoice::default_newest(),
            runtime_log_format: LogFormat::default(),
            pod_monitors: false,
            cache_runtime_cpu: DEFAULT_CACHE_RUNTIME_CPU.into(),
        }
    }
}

/// What should exist for one InferenceDeployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// `NAME-sglang`: the flags for both sides, and an inline config.json.
    pub config_map: ConfigMap,
    /// The decode fleet.
    pub decode: Fleet,
    /// The prefill fleet, with `spec.prefill`.
    pub prefill: Option<Fleet>,
    /// The router, with `spec.prefill` unless `spec.router.enabled` is false, selecting the
    /// servers of `kv_compat` (the controller points it at another key while a rollout between
    /// keys has not reached the new one: [`Router::select`]).
    pub router: Option<Router>,
    /// The KV compatibility key of the servers (label [`LABEL_KV_COMPAT`]).
    pub kv_compat: String,
}

/// Renders what should exist for `resource` given its (non-rejected) assessment.
pub fn desired_state(resource: &InferenceDeployment, assessment: &Assessment, options: &RenderOptions) -> Desired {
    let spec = &resource.spec;
    let owner = owner_reference(resource);
    let config_map = config_map::config_map(resource, assessment, &owner);
    let kv_compat = kv_compat(resource, assessment, options);
    let fleet = |role: FleetRole| {
        role.fleet(spec)
            .map(|fleet_spec| fleet::render_fleet(resource, assessment, options, role, fleet_spec, &kv_compat, &owner))
    };
    let decode = fleet(FleetRole::Decode).expect("every resource has a decode fleet");
    let prefill = fleet(FleetRole::Prefill);
    let router = spec
        .effective_router()
        .map(|router| router::render_router(resource, assessment, options, &router, &kv_compat, &owner));
    Desired { config_map, decode, prefill, router, kv_compat }
}

/// The KV compatibility key of the fleets `resource` runs, hashed for a label: their servers'
/// command lines, environments and images as the pods run them.
fn kv_compat(resource: &InferenceDeployment, assessment: &Assessment, options: &RenderOptions) -> String {
    let release = assessment.release.release;
    let rendered: Vec<(FleetRole, &crate::api::FleetSpec, Vec<String>, String)> = FleetRole::ALL
        .into_iter()
        .filter_map(|role| {
            let fleet = role.fleet(&resource.spec)?;
            let args = server::server_args(&resource.spec, role, &assessment.verdict, release);
            Some((role, fleet, args, pod::sglang_image(fleet, &assessment.release, options)))
        })
        .collect();
    let sides: Vec<kv_compat::Side<'_>> = rendered
        .iter()
        .map(|(role, fleet, args, image)| kv_compat::Side { role: *role, args, env: &fleet.env, image })
        .collect();
    stable_hash(&kv_compat::key(&sides, release))
}

/// 64-bit FNV-1a of `text` as 10 hex digits, a label value: a stable hash (the standard library's
/// is not stable across releases), of the family Kubernetes uses for pod-template hashes.
fn stable_hash(text: &str) -> String {
    let hash = text
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{hash:016x}")[..10].to_string()
}

impl Desired {
    /// Everything a fresh InferenceDeployment gets, as it is applied: the ConfigMap, each
    /// fleet's Service and, for its replicas 0..replicas, each one's PodGroup (with a gang
    /// scheduler that takes one) and pods, its PodMonitor (with `--pod-monitors`), and the
    /// router's objects.
    pub fn objects(&self) -> Vec<serde_json::Value> {
        let mut objects = vec![with_type_meta(&self.config_map, "v1", "ConfigMap")];
        for fleet in self.fleets() {
            objects.push(with_type_meta(&fleet.service, "v1", "Service"));
            objects.push(with_type_meta(&fleet.disruption_budget, "policy/v1", "PodDisruptionBudget"));
            objects.extend(fleet.pod_monitor.as_ref().map(|monitor| serde_json::to_value(monitor).unwrap_or_default()));
            for replica in 0..fleet.replicas as u32 {
                objects.extend(fleet.pod_group(replica).map(|group| group.to_json()));
                objects.extend(fleet.replica(replica).iter().map(|pod| with_type_meta(pod, "v1", "Pod")));
            }
        }
        if let Some(router) = &self.router {
            objects.extend(router.objects());
        }
        objects
    }

    /// The fleets kvpilot runs, decode first.
    pub fn fleets(&self) -> impl Iterator<Item = &Fleet> {
        std::iter::once(&self.decode).chain(self.prefill.as_ref())
    }

    /// The fleet of `role`, if kvpilot runs one.
    pub fn fleet(&self, role: FleetRole) -> Option<&Fleet> {
        self.fleets().find(|fleet| fleet.role == role)
    }
}

/// A typed object as JSON with apiVersion and kind (apply patches and `kvpilot render` need them).
pub fn with_type_meta<T: serde::Serialize>(object: &T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

/// The name of a fleet's headless Service.
pub fn service_name(name: &str, role: FleetRole) -> String {
    format!("{name}-{}", role.as_str())
}

/// The name of the router's objects.
pub fn router_name(name: &str) -> String {
    format!("{name}-router")
}

/// The name of the ConfigMap with the SGLang flags.
pub fn config_map_name(name: &str) -> String {
    format!("{name}-sglang")
}

/// The name of a replica: its pod's name, or the prefix of its pods' names.
pub fn replica_name(name: &str, role: FleetRole, replica: u32) -> String {
    format!("{name}-{}-{replica}", role.as_str())
}

/// The name of the pod of rank `rank` in replica `replica` of the `role` fleet.
pub fn pod_name(name: &str, role: FleetRole, replica: u32, rank: i32, nodes_per_replica: i32) -> String {
    let replica = replica_name(name, role, replica);
    if nodes_per_replica > 1 { format!("{replica}-{rank}") } else { replica }
}

/// `app.kubernetes.io/name` of a fleet's pods.
pub fn app_label(role: FleetRole) -> &'static str {
    match role {
        FleetRole::Decode => DECODE_APP,
        FleetRole::Prefill => PREFILL_APP,
    }
}

/// The labels every pod of the `role` fleet of `name` carries (its Service selects on these).
pub fn selector_labels(name: &str, role: FleetRole) -> BTreeMap<String, String> {
    app_labels(name, app_label(role))
}

fn app_labels(name: &str, app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_INSTANCE.to_string(), name.to_string()), (LABEL_NAME.to_string(), app.to_string())])
}

/// `selector`'s labels and kvpilot's `app.kubernetes.io/managed-by`, which its watches select on.
fn managed_labels(selector: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = selector.clone();
    labels.insert(LABEL_MANAGED_BY.into(), "kvpilot".into());
    labels
}

/// The labels the router selects a fleet's servers by, as `key=value` items: the fleet's pods
/// of rank 0 (the other ranks of a multi-node replica serve no HTTP requests) of the KV
/// compatibility key `kv_compat`.
pub fn router_selector(name: &str, role: FleetRole, kv_compat: &str) -> Vec<String> {
    let mut labels = selector_labels(name, role);
    labels.insert(LABEL_RANK.into(), "0".into());
    labels.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
    labels.into_iter().map(|(key, value)| format!("{key}={value}")).collect()
}

fn owner_reference(resource: &InferenceDeployment) -> OwnerReference {
    OwnerReference {
        api_version: "kvpilot.dev/v1alpha1".into(),
        kind: "InferenceDeployment".into(),
        name: resource.metadata.name.clone().unwrap_or_default(),
        // `kvpilot render` has no server-assigned uid; the zero uid marks the placeholder.
        uid: resource.metadata.uid.clone().unwrap_or_else(|| "00000000-0000-0000-0000-000000000000".into()),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Metadata of an object named after the resource: `labels` and its controller reference.
fn owned_meta(
    object_name: String,
    namespace: &Option<String>,
    labels: BTreeMap<String, String>,
    owner: &OwnerReference,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(object_name),
        namespace: namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::pod::BOOTSTRAP_PORT_ANNOTATION;
    use super::test_support::{container, flag, render, resource};
    use super::*;

    #[test]
    fn a_prefill_fleet_and_the_router_make_one_pd_service() {
        let mut pd = resource(json!({"pageSize": 16}));
        pd.spec.prefill = Some(
            serde_json::from_value(json!({"replicas": 2, "tensorParallel": 2, "pageSize": 16, "extraArgs": ["--chunked-prefill-size", "8192"]}))
                .unwrap(),
        );
        let desired = render(&pd);
        let prefill = desired.prefill.as_ref().expect("a prefill fleet");
        let pod = prefill.pod(1, 0);
        assert_eq!(pod.metadata.name.as_deref(), Some("llama-prefill-1"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_NAME], PREFILL_APP);
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()[BOOTSTRAP_PORT_ANNOTATION], "8998");
        let sglang = container(&pod);
        let args = sglang.args.as_ref().unwrap();
        assert_eq!(flag(args, "--disaggregation-mode"), Some("prefill"));
        assert_eq!(flag(args, "--tensor-parallel-size"), Some("2"));
        assert_eq!(flag(args, "--page-size"), Some("16"));
        assert_eq!(flag(args, "--disaggregation-bootstrap-port"), Some("8998"));
        assert_eq!(args[args.len() - 2..], ["--chunked-prefill-size", "8192"], "extraArgs stay last");
        let ports: Vec<_> =
            sglang.ports.as_ref().unwrap().iter().map(|p| (p.name.clone().unwrap(), p.container_port)).collect();
        assert_eq!(ports, [("http".to_string(), 30000), ("bootstrap".to_string(), 8998)]);
        assert_eq!(pod.spec.as_ref().unwrap().subdomain.as_deref(), Some("llama-prefill"));
        assert_ne!(prefill.revision, desired.decode.revision, "each fleet has its own revision");
        assert_eq!(prefill.endpoint(0), "http://llama-prefill-0.llama-prefill.serving.svc:30000");

        let router = desired.router.as_ref().expect("a router by default");
        assert_eq!(router.endpoint, "http://llama-router.serving.svc:8000");
        let rules = router.role.rules.as_ref().unwrap();
        assert_eq!((rules.len(), rules[0].resources.as_deref()), (1, Some(&["pods".to_string()][..])));
        assert_eq!(rules[0].verbs, ["get", "list", "watch"], "read pods, nothing else");
        let template = router.deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(template.service_account_name.as_deref(), Some("llama-router"));
        let args = template.containers[0].args.as_ref().unwrap();
        let joined = args.join(" ");
        let key = &desired.kv_compat;
        assert!(
            joined.contains(&format!(
                "--prefill-selector app.kubernetes.io/instance=llama app.kubernetes.io/name=kvpilot-prefill \
                 kvpilot.dev/kv-compat={key} kvpilot.dev/rank=0 --decode-selector app.kubernetes.io/instance=llama \
                 app.kubernetes.io/name=kvpilot-decode kvpilot.dev/kv-compat={key} kvpilot.dev/rank=0"
            )),
            "{joined}"
        );
        assert_eq!(flag(args, "--service-discovery-namespace"), Some("serving"));
        assert_eq!(template.containers[0].command.as_ref().unwrap(), &["python3", "-m", "sglang_router.launch_router"]);
        assert_eq!(template.containers[0].image.as_deref(), Some("lmsysorg/sglang:v0.5.23-cu129"));
        assert_eq!(
            desired.objects().len(),
            1 + (2 + 3) + (2 + 2) + 6,
            "ConfigMap, both fleets (Service, budget, pods), the router"
        );

        let mut smg = pd.clone();
        smg.spec.router = Some(Box::new(
            serde_json::from_value(json!({"launcher": "smg", "image": "example/smg:1.13.0", "policy": "round_robin"}))
                .unwrap(),
        ));
        let desired = render(&smg);
        let router = desired.router.as_ref().unwrap();
        let container = &router.deployment.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.command.as_ref().unwrap()[2], "smg.launch_router");
        assert_eq!(flag(container.args.as_ref().unwrap(), "--policy"), Some("round_robin"));
        let mut off = pd.clone();
        off.spec.router = Some(Box::new(serde_json::from_value(json!({"enabled": false})).unwrap()));
        assert_eq!(render(&off).kv_compat, desired.kv_compat, "the key is the servers', with or without a router");
        assert!(render(&off).router.is_none());
        assert!(render(&resource(json!({}))).router.is_none(), "no prefill fleet, no router");
    }

    #[test]
    fn every_server_pod_carries_the_key_of_what_both_fleets_exchange() {
        let mut pd = resource(json!({"pageSize": 16}));
        pd.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        let desired = render(&pd);
        let key = desired.kv_compat.clone();
        assert_eq!(key.len(), 10);
        for fleet in desired.fleets() {
            assert_eq!(fleet.pod(0, 0).metadata.labels.unwrap()[LABEL_KV_COMPAT], key, "{:?}", fleet.role);
        }
        let with = |edit: &dyn Fn(&mut InferenceDeployment)| {
            let mut changed = pd.clone();
            edit(&mut changed);
            render(&changed)
        };
        // What decides the pairing changes the key, on either side.
        assert_ne!(with(&|r| r.spec.model.revision = Some("abc".into())).kv_compat, key);
        assert_ne!(with(&|r| r.spec.decode.page_size = Some(32)).kv_compat, key, "the prefill fleet follows");
        assert_ne!(with(&|r| r.spec.prefill.as_mut().unwrap().tensor_parallel = 2).kv_compat, key);
        assert_ne!(with(&|r| r.spec.prefill.as_mut().unwrap().image = Some("example/sglang:x".into())).kv_compat, key);
        let cp = with(&|r| r.spec.prefill.as_mut().unwrap().extra_args = vec!["--attn-cp-size".into(), "2".into()]);
        assert_ne!(cp.kv_compat, key, "an option kvpilot never writes");
        // What does not, keeps it: the pods roll in place.
        let env = with(&|r| r.spec.decode.env = vec![container::env_var("A", "1")]);
        assert_eq!(env.kv_compat, key);
        assert_ne!(env.decode.revision, desired.decode.revision);
        let memory = with(&|r| r.spec.decode.extra_args = vec!["--mem-fraction-static".into(), "0.8".into()]);
        assert_eq!(memory.kv_compat, key);
        assert_eq!(with(&|r| r.spec.decode.replicas = 9).kv_compat, key);
    }

    #[test]
    fn the_router_is_pointed_at_one_key_in_both_selectors_and_its_labels() {
        let mut pd = resource(json!({}));
        pd.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        let mut router = render(&pd).router.unwrap();
        let before = router.deployment.clone();
        router.select("0123456789");
        assert_eq!(router.kv_compat, "0123456789");
        assert_eq!(router.deployment.metadata.labels.as_ref().unwrap()[LABEL_KV_COMPAT], "0123456789");
        let template = &router.deployment.spec.as_ref().unwrap().template;
        assert_eq!(template.metadata.as_ref().unwrap().labels.as_ref().unwrap()[LABEL_KV_COMPAT], "0123456789");
        let args = template.spec.as_ref().unwrap().containers[0].args.clone().unwrap();
        let keyed: Vec<&String> = args.iter().filter(|a| a.starts_with(LABEL_KV_COMPAT)).collect();
        assert_eq!(keyed, ["kvpilot.dev/kv-compat=0123456789"; 2], "{args:?}");
        let strategy = router.deployment.spec.as_ref().unwrap().strategy.clone().unwrap();
        assert_eq!(strategy.rolling_update.unwrap().max_unavailable, Some(IntOrString::Int(0)));
        assert_ne!(router.deployment, before);
    }

    #[test]
    fn the_router_runs_as_the_restricted_pod_security_level_asks_with_its_memory_bounded() {
        let mut pd = resource(json!({}));
        pd.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        let router = render(&pd).router.unwrap();
        let pod = router.deployment.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        let security = container.security_context.clone().unwrap();
        assert_eq!(
            (security.run_as_non_root, security.run_as_user, security.allow_privilege_escalation),
            (Some(true), Some(router::ROUTER_UID), Some(false))
        );
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
        assert_eq!(pod.security_context.unwrap().seccomp_profile.unwrap().type_, "RuntimeDefault");
        // Its one writable directory, also HOME, is a volume.
        let mount = &container.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(mount.mount_path, "/tmp");
        assert!(pod.volumes.unwrap().iter().any(|v| v.name == mount.name && v.empty_dir.is_some()));
        assert!(container.env.as_ref().unwrap().iter().any(|e| e.name == "HOME" && e.value.as_deref() == Some("/tmp")));
        let resources = container.resources.clone().unwrap();
        let (requests, limits) = (resources.requests.unwrap(), resources.limits.unwrap());
        assert_eq!((requests["cpu"].0.as_str(), requests["memory"].0.as_str()), ("500m", "512Mi"));
        assert_eq!(limits.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect::<Vec<_>>(), [("memory", "512Mi")]);

        // A limit the user sets is kept, and is the request where the spec sets none.
        let mut sized = pd.clone();
        sized.spec.router =
            Some(serde_json::from_value(json!({"resources": {"limits": {"memory": "2Gi", "cpu": "2"}}})).unwrap());
        let resources = render(&sized).router.unwrap().deployment.spec.unwrap().template.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap();
        let (requests, limits) = (resources.requests.unwrap(), resources.limits.unwrap());
        assert_eq!((requests["memory"].0.as_str(), limits["memory"].0.as_str()), ("2Gi", "2Gi"));
        assert_eq!((requests["cpu"].0.as_str(), limits["cpu"].0.as_str()), ("2", "2"));
    }
}
