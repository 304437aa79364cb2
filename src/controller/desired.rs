//! The objects an InferenceDeployment should have, as a pure function of the resource and its
//! assessment. `kvpilot render` prints exactly these; the controller applies them.
//!
//! A fleet (decode, and prefill with `spec.prefill`) is a set of replicas. A replica is one
//! SGLang server: one pod, or with `nodesPerReplica` > 1 a group of pods
//! `NAME-ROLE-REPLICA-RANK` that start together and find rank 0 through the fleet's headless
//! Service. The router is a Deployment with its own ServiceAccount, a Role that may only read
//! the namespace's pods, and a Service: the resource's endpoint.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, Pod,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SecretKeySelector, SecurityContext, Service, ServiceAccount,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::api::{
    ConfigSourceRef, EffectiveSettings, FleetSpec, ImagePullPolicy, InferenceDeployment, InferenceDeploymentSpec,
    MODELS_DIR, RouterSpec, quantity_bytes,
};
use crate::policy::{Assessment, RUST_SERVER_ENV};
use crate::release::ReleaseChoice;
use crate::sglang::guard::MODEL_CONFIG_ANNOTATION;
pub use crate::sglang::server::FleetRole;
use crate::sglang::server::{self, ROUTER_METRICS_PORT};

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
/// `app.kubernetes.io/name` of decode pods.
pub const DECODE_APP: &str = "kvpilot-decode";
/// `app.kubernetes.io/name` of prefill pods.
pub const PREFILL_APP: &str = "kvpilot-prefill";
/// `app.kubernetes.io/name` of router pods.
pub const ROUTER_APP: &str = "kvpilot-router";
/// Annotation on prefill pods the router reads their bootstrap port from (`sglang-router` and
/// `smg` both read this name).
pub const BOOTSTRAP_PORT_ANNOTATION: &str = "sglang.ai/bootstrap-port";
/// The router container's name.
pub const ROUTER_CONTAINER: &str = "router";
/// The GPU resource requested per pod.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The SGLang container's name.
pub const SGLANG_CONTAINER: &str = "sglang";
/// The image of the decode servers when `spec.decode.image` is unset; `{version}` is replaced
/// by the resolved SGLang release.
pub const DEFAULT_SGLANG_IMAGE: &str = "lmsysorg/sglang:v{version}-cu129";
/// The kvpilot image of this build: the cache runtime sidecar and the connector's installer.
pub const DEFAULT_RUNTIME_IMAGE: &str = concat!("kvpilot/kvpilot:", env!("CARGO_PKG_VERSION"));
/// Where the pod's containers share the cache runtime's socket.
pub const RUN_DIR: &str = "/run/kvpilot";
/// Where the init container writes the SGLang connector, on SGLang's `PYTHONPATH`.
pub const CONNECTOR_DIR: &str = "/opt/kvpilot-py";
/// Port of the cache runtime's metrics and probes.
pub const CACHE_METRICS_PORT: i32 = 9400;
/// User and group the kvpilot containers run as (the image's non-root user).
pub const RUNTIME_UID: i64 = 65532;
/// `/dev/shm` when `spec.decode.shmSize` is unset.
pub const DEFAULT_SHM_SIZE: &str = "16Gi";
/// Where the hub cache volume is mounted (`HF_HOME`).
pub const HF_HOME: &str = "/hf-cache";
/// How often the startup probe asks while the model loads.
const STARTUP_PERIOD_SECONDS: i32 = 30;

/// Key of the ConfigMap holding the SGLang flags for the fleet's effective settings
/// (`{"decode": [...], "prefill": [...]}`), for the prefill servers users run themselves.
pub const SGLANG_ARGS_KEY: &str = "sglangArgs.json";
/// Key of the ConfigMap holding an inline config.json, which the pods' model-config annotation
/// points the guard at.
pub const MODEL_CONFIG_KEY: &str = "config.json";

/// The `sglangArgs` of the resource, as the ConfigMap holds them.
pub fn sglang_args_json(resource: &InferenceDeployment, assessment: &Assessment) -> String {
    let args = crate::sglang::args::sglang_args(&resource.spec, &assessment.verdict, assessment.release.release);
    serde_json::to_string_pretty(&args).unwrap_or_default()
}

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
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            sglang_image: DEFAULT_SGLANG_IMAGE.into(),
            router_image: None,
            runtime_image: DEFAULT_RUNTIME_IMAGE.into(),
            default_release: ReleaseChoice::default_newest(),
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
    /// The router, with `spec.prefill` unless `spec.router.enabled` is false.
    pub router: Option<Router>,
}

/// What should exist for one fleet of SGLang servers.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub role: FleetRole,
    /// Hash of the pod template.
    pub revision: String,
    /// Headless `NAME-ROLE`: stable DNS names for the pods.
    pub service: Service,
    /// Pod template; [`Fleet::pod`] names it and gives it its rank.
    template: Pod,
    /// The fleet's `replicas`.
    pub replicas: i32,
    /// Pods per replica.
    pub nodes_per_replica: i32,
    /// Label selector (`k=v,k=v`) of the fleet's pods.
    pub selector: String,
    name: String,
    namespace: String,
    port: i32,
    /// How many of the container's last arguments are the fleet's `extraArgs`.
    extra_args: usize,
}

/// The router's objects, all named `NAME-router`.
#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    pub service_account: ServiceAccount,
    /// May get, list and watch the pods of the resource's namespace, and nothing else.
    pub role: Role,
    pub role_binding: RoleBinding,
    pub deployment: Deployment,
    pub service: Service,
    /// `http://NAME-router.NAMESPACE.svc:PORT`.
    pub endpoint: String,
}

/// 64-bit FNV-1a: a stable hash (the standard library's is not stable across releases), the
/// family Kubernetes uses for pod-template hashes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The name of a fleet's headless Service.
pub fn service_name(name: &str, role: FleetRole) -> String {
    format!("{name}-{}", role.as_str())
}

/// The name of the router's objects.
pub fn router_name(name: &str) -> String {
    format!("{name}-router")
}

/// `app.kubernetes.io/name` of a fleet's pods.
pub fn app_label(role: FleetRole) -> &'static str {
    match role {
        FleetRole::Decode => DECODE_APP,
        FleetRole::Prefill => PREFILL_APP,
    }
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

/// The labels every pod of the `role` fleet of `name` carries (its Service selects on these).
pub fn selector_labels(name: &str, role: FleetRole) -> BTreeMap<String, String> {
    app_labels(name, app_label(role))
}

fn app_labels(name: &str, app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_INSTANCE.to_string(), name.to_string()), (LABEL_NAME.to_string(), app.to_string())])
}

/// The labels the router selects a fleet's servers by, as `key=value` items: the fleet's pods
/// of rank 0 (the other ranks of a multi-node replica serve no HTTP requests).
pub fn router_selector(name: &str, role: FleetRole) -> Vec<String> {
    let mut labels = selector_labels(name, role);
    labels.insert(LABEL_RANK.into(), "0".into());
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

/// The SGLang image of a fleet: its `image`, else the operator's template for the release asked
/// for.
pub fn sglang_image(fleet: &FleetSpec, release: &ReleaseChoice, options: &RenderOptions) -> String {
    fleet.image.clone().unwrap_or_else(|| options.sglang_image.replace("{version}", &release.requested.to_string()))
}

/// The router's image: `spec.router.image`, else the operator's router image, else the SGLang
/// image of the release (it ships `sglang_router`).
fn router_image(router: &RouterSpec, release: &ReleaseChoice, options: &RenderOptions) -> String {
    let template = options.router_image.as_deref().unwrap_or(&options.sglang_image);
    router.image.clone().unwrap_or_else(|| template.replace("{version}", &release.requested.to_string()))
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..EnvVar::default() }
}

/// The SGLang container's environment: the fleet's, what the release needs for the decode
/// settings (`effective.decodeEnv`), and for hub weights the token and cache the download uses,
/// unless the spec sets them itself.
fn server_env(
    resource: &InferenceDeployment,
    role: FleetRole,
    fleet: &FleetSpec,
    effective: &EffectiveSettings,
) -> Vec<EnvVar> {
    let spec = &resource.spec;
    let decode_env: &[EnvVar] = if role == FleetRole::Decode { &effective.decode_env } else { &[] };
    let mut env: Vec<EnvVar> = fleet.env.iter().chain(decode_env).cloned().collect();
    let mut add = |var: EnvVar| {
        if !env.iter().any(|e| e.name == var.name) {
            env.push(var);
        }
    };
    if spec.model.weights_volume().is_none() {
        if let Ok(ConfigSourceRef::Hub(hub)) = spec.model.config.source()
            && let Some(secret) = &hub.token_secret_ref
        {
            add(EnvVar {
                name: "HF_TOKEN".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.name.clone(),
                        key: secret.key.clone(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            });
        }
        if spec.model.source.as_ref().and_then(|s| s.hub.as_ref()).is_some_and(|hub| hub.cache.is_some()) {
            add(env_var("HF_HOME", HF_HOME));
        }
    }
    if role == FleetRole::Decode && spec.cache.is_some() {
        // SGLang's scheduler processes inherit it; they are what import the connector. A
        // PYTHONPATH of the spec's keeps its entries, after the connector's.
        match env.iter_mut().find(|e| e.name == "PYTHONPATH") {
            Some(var) => {
                if let Some(value) = var.value.as_mut().filter(|v| !v.split(':').any(|p| p == CONNECTOR_DIR)) {
                    *value = format!("{CONNECTOR_DIR}:{value}");
                }
            }
            None => env.push(env_var("PYTHONPATH", CONNECTOR_DIR)),
        }
    }
    env
}

fn image_pull_policy(policy: ImagePullPolicy) -> String {
    match policy {
        ImagePullPolicy::Always => "Always",
        ImagePullPolicy::IfNotPresent => "IfNotPresent",
        ImagePullPolicy::Never => "Never",
    }
    .into()
}

/// An HTTP GET probe of `path` on the container port named `port`.
fn http_probe(port: &str, path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(port.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(timeout),
        ..Probe::default()
    }
}

/// SGLang's `GET /health`: cheap, answered by every rank (ranks above 0 run a health server of
/// their own once their schedulers are up).
fn health_probe(period: i32, timeout: i32, failures: i32) -> Probe {
    http_probe("http", "/health", period, timeout, failures)
}

/// The SGLang container's resources: the spec's, the GPUs and extended resources, and the
/// HiCache host pools (`host_pool_memory` bytes) added to its memory request and limit; with no
/// memory request the request is the limit, or the host pools alone, and with no limit none is
/// set.
fn resources(fleet: &FleetSpec, host_pool_memory: Option<u64>) -> ResourceRequirements {
    let mut resources = fleet.resources.clone().unwrap_or_default();
    if let Some(host_pools) = host_pool_memory {
        let add = |current: Option<&Quantity>| {
            // pod_findings refuses a memory kvpilot cannot read, so none reaches here unread.
            let current = current.map_or(Ok(0), |q| quantity_bytes(&q.0)).unwrap_or_default();
            Quantity(current.saturating_add(host_pools).to_string())
        };
        let limit = resources.limits.as_ref().and_then(|l| l.get("memory")).map(|q| add(Some(q)));
        let requests = resources.requests.get_or_insert_default();
        // A missing request defaults to the limit (as the API server would), else to the pools.
        let request = match (requests.get("memory"), &limit) {
            (Some(request), _) => add(Some(request)),
            (None, Some(limit)) => limit.clone(),
            (None, None) => add(None),
        };
        requests.insert("memory".into(), request);
        if let Some(limit) = limit {
            resources.limits.get_or_insert_default().insert("memory".into(), limit);
        }
    }
    let mut extended = fleet.extra_resources.clone();
    extended.insert(GPU_RESOURCE.into(), Quantity(fleet.effective_gpus_per_pod().to_string()));
    let limits = resources.limits.get_or_insert_default();
    limits.extend(extended.clone());
    // Extended resources must have requests equal to limits.
    if let Some(requests) = resources.requests.as_mut() {
        requests.extend(extended);
    }
    resources
}

/// Where the guard finds the model's config.json: the ConfigMap kvpilot writes for an inline
/// config, the user's ConfigMap, or the hub.
fn model_config_annotation(resource: &InferenceDeployment, name: &str) -> Option<String> {
    match resource.spec.model.config.source().ok()? {
        ConfigSourceRef::Inline(_) => Some(format!("configmap/{}/{MODEL_CONFIG_KEY}", config_map_name(name))),
        ConfigSourceRef::ConfigMap(r) => Some(format!("configmap/{}/{}", r.name, r.key)),
        ConfigSourceRef::Hub(hub) => {
            let repo = hub.repo.as_deref().unwrap_or(&resource.spec.model.name);
            Some(match &hub.revision {
                Some(revision) => format!("hub/{repo}@{revision}"),
                None => format!("hub/{repo}"),
            })
        }
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The port a prefill server serves the KV bootstrap registry on, which its pods advertise to the
/// router: on SGLang's Rust server (`SGLANG_RUST_SERVER` in the prefill env) the API port, where
/// its PD hook moves the default bootstrap port (policy rule BP1 refuses any other); otherwise
/// `spec.disaggregation.bootstrapPort`.
fn served_bootstrap_port(spec: &InferenceDeploymentSpec, fleet: &FleetSpec) -> i32 {
    if fleet.env_on(RUST_SERVER_ENV) { fleet.port } else { spec.disaggregation.bootstrap_port }
}

/// The pod's volumes and the SGLang container's mounts: `/dev/shm` in memory, the weights or the
/// hub cache, and on decode with `spec.cache` the cache runtime's socket and connector.
fn volumes(resource: &InferenceDeployment, role: FleetRole, fleet: &FleetSpec) -> (Vec<Volume>, Vec<VolumeMount>) {
    let spec = &resource.spec;
    let shm = fleet.shm_size.clone().unwrap_or_else(|| Quantity(DEFAULT_SHM_SIZE.into()));
    let mut volumes = vec![Volume {
        name: "dshm".into(),
        empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), size_limit: Some(shm) }),
        ..Volume::default()
    }];
    let mut mounts = vec![mount("dshm", "/dev/shm", false)];
    if let Some(weights) = spec.model.weights_volume() {
        volumes.push(weights.source.named("model"));
        mounts.push(mount("model", MODELS_DIR, true));
    } else if let Some(cache) = spec.model.source.as_ref().and_then(|s| s.hub.as_ref()).and_then(|h| h.cache.as_ref()) {
        volumes.push(cache.named("hf-cache"));
        mounts.push(mount("hf-cache", HF_HOME, false));
    }
    if role == FleetRole::Decode && spec.cache.is_some() {
        for name in ["kvpilot-run", "kvpilot-py"] {
            volumes.push(Volume {
                name: name.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            });
        }
        mounts.push(mount("kvpilot-run", RUN_DIR, false));
        mounts.push(mount("kvpilot-py", CONNECTOR_DIR, true));
    }
    (volumes, mounts)
}

/// The kvpilot containers' security: non-root, nothing to escalate, a read-only root.
fn runtime_security() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUNTIME_UID),
        run_as_group: Some(RUNTIME_UID),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        ..SecurityContext::default()
    }
}

/// With `spec.cache`: the init container that writes the SGLang connector where SGLang imports
/// it from, and the cache runtime as a native sidecar (an init container that keeps running),
/// which is up before SGLang starts and restarts on its own. Its memory holds `capacity` plus
/// the index and pages still being read while evicted (`capacity × 1.05 + 64 MiB`).
fn cache_init_containers(resource: &InferenceDeployment, options: &RenderOptions) -> Option<Vec<Container>> {
    let cache = resource.spec.cache.as_ref()?;
    let capacity = cache.capacity_bytes().ok()?;
    let memory = Quantity((capacity + capacity / 20 + (64 << 20)).to_string());
    let installer = Container {
        name: "install-connector".into(),
        image: Some(options.runtime_image.clone()),
        args: Some(vec!["install-connector".into(), CONNECTOR_DIR.into()]),
        volume_mounts: Some(vec![mount("kvpilot-py", CONNECTOR_DIR, false)]),
        security_context: Some(runtime_security()),
        ..Container::default()
    };
    let sidecar = Container {
        name: "cache-runtime".into(),
        image: Some(options.runtime_image.clone()),
        restart_policy: Some("Always".into()),
        args: Some(vec![
            "cache-runtime".into(),
            "--socket".into(),
            server::CACHE_SOCKET.into(),
            "--capacity".into(),
            capacity.to_string(),
            "--metrics-addr".into(),
            format!("0.0.0.0:{CACHE_METRICS_PORT}"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("cache-metrics".into()),
            container_port: CACHE_METRICS_PORT,
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("memory".into(), memory.clone())])),
            limits: Some(BTreeMap::from([("memory".into(), memory)])),
            ..ResourceRequirements::default()
        }),
        startup_probe: Some(http_probe("cache-metrics", "/readyz", 1, 2, 30)),
        readiness_probe: Some(http_probe("cache-metrics", "/readyz", 10, 2, 3)),
        liveness_probe: Some(http_probe("cache-metrics", "/healthz", 10, 2, 3)),
        volume_mounts: Some(vec![mount("kvpilot-run", RUN_DIR, false)]),
        security_context: Some(runtime_security()),
        ..Container::default()
    };
    Some(vec![installer, sidecar])
}

/// Renders what should exist for `resource` given its (non-rejected) assessment.
pub fn desired_state(resource: &InferenceDeployment, assessment: &Assessment, options: &RenderOptions) -> Desired {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let spec = &resource.spec;
    let owner = owner_reference(resource);
    let mut data = BTreeMap::from([(SGLANG_ARGS_KEY.to_string(), sglang_args_json(resource, assessment))]);
    if let Ok(ConfigSourceRef::Inline(config)) = spec.model.config.source() {
        data.insert(MODEL_CONFIG_KEY.into(), serde_json::to_string_pretty(config).unwrap_or_default());
    }
    let mut common = selector_labels(&name, FleetRole::Decode);
    common.insert(LABEL_MANAGED_BY.into(), "kvpilot".into());
    let config_map = ConfigMap {
        metadata: owned_meta(config_map_name(&name), &namespace, common, &owner),
        data: Some(data),
        ..ConfigMap::default()
    };
    let fleet = |role: FleetRole| {
        role.fleet(spec).map(|fleet_spec| render_fleet(resource, assessment, options, role, fleet_spec, &owner))
    };
    let decode = fleet(FleetRole::Decode).expect("every resource has a decode fleet");
    let prefill = fleet(FleetRole::Prefill);
    let router = spec.effective_router().map(|router| render_router(resource, assessment, options, &router, &owner));
    Desired { config_map, decode, prefill, router }
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

fn render_fleet(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    role: FleetRole,
    fleet: &FleetSpec,
    owner: &OwnerReference,
) -> Fleet {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let spec = &resource.spec;
    let selector = selector_labels(&name, role);
    let mut common = selector.clone();
    common.insert(LABEL_MANAGED_BY.into(), "kvpilot".into());
    let service = Service {
        metadata: owned_meta(service_name(&name, role), &namespace, common.clone(), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector.clone()),
            // Ranks find rank 0 by name before any of them is ready.
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: fleet.port,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    let (volumes, volume_mounts) = volumes(resource, role, fleet);
    let env = server_env(resource, role, fleet, &assessment.verdict.effective);
    let startup_failures = (fleet.startup_timeout_seconds + STARTUP_PERIOD_SECONDS - 1) / STARTUP_PERIOD_SECONDS;
    let mut ports =
        vec![ContainerPort { name: Some("http".into()), container_port: fleet.port, ..ContainerPort::default() }];
    if role == FleetRole::Prefill && served_bootstrap_port(spec, fleet) != fleet.port {
        ports.push(ContainerPort {
            name: Some("bootstrap".into()),
            container_port: spec.disaggregation.bootstrap_port,
            ..ContainerPort::default()
        });
    }
    let container = Container {
        name: SGLANG_CONTAINER.into(),
        image: Some(sglang_image(fleet, &assessment.release, options)),
        image_pull_policy: fleet.image_pull_policy.map(image_pull_policy),
        command: Some(vec!["python3".into(), "-m".into(), "sglang.launch_server".into()]),
        args: Some(server::server_args(spec, role, &assessment.verdict, assessment.release.release)),
        ports: Some(ports),
        env: (!env.is_empty()).then_some(env),
        resources: Some(resources(fleet, server::host_pool_memory(spec).filter(|_| role == FleetRole::Decode))),
        startup_probe: Some(health_probe(STARTUP_PERIOD_SECONDS, 5, startup_failures.max(1))),
        readiness_probe: Some(health_probe(10, 5, 3)),
        liveness_probe: Some(health_probe(30, 10, 4)),
        security_context: (!fleet.capabilities.is_empty()).then(|| SecurityContext {
            capabilities: Some(Capabilities { add: Some(fleet.capabilities.clone()), ..Capabilities::default() }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(volume_mounts),
        ..Container::default()
    };
    let mut labels = fleet.pod_labels.clone();
    labels.extend(common);
    let mut annotations = fleet.pod_annotations.clone();
    if let Some(config) = model_config_annotation(resource, &name) {
        annotations.insert(MODEL_CONFIG_ANNOTATION.into(), config);
    }
    if role == FleetRole::Prefill {
        annotations.insert(BOOTSTRAP_PORT_ANNOTATION.into(), served_bootstrap_port(spec, fleet).to_string());
    }
    let nodes_per_replica = fleet.nodes_per_replica.max(1);
    let template = Pod {
        metadata: ObjectMeta {
            namespace: namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: if role == FleetRole::Decode { cache_init_containers(resource, options) } else { None },
            containers: vec![container],
            volumes: Some(volumes),
            subdomain: Some(service_name(&name, role)),
            host_network: fleet.host_network.then_some(true),
            dns_policy: fleet.host_network.then(|| "ClusterFirstWithHostNet".into()),
            // A rank that fails takes its replica down with it (NCCL cannot take a rank back),
            // and the controller replaces the group; a single pod is restarted in place.
            restart_policy: (nodes_per_replica > 1).then(|| "Never".into()),
            termination_grace_period_seconds: Some(fleet.termination_grace_period_seconds),
            node_selector: (!fleet.node_selector.is_empty()).then(|| fleet.node_selector.clone()),
            tolerations: (!fleet.tolerations.is_empty()).then(|| fleet.tolerations.clone()),
            affinity: fleet.affinity.clone(),
            service_account_name: fleet.service_account_name.clone(),
            priority_class_name: fleet.priority_class_name.clone(),
            automount_service_account_token: Some(false),
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let hashed = format!("{}\n{nodes_per_replica}", serde_json::to_string(&template).unwrap_or_default());
    let revision = format!("{:016x}", fnv1a(hashed.as_bytes()))[..10].to_string();
    let selector = selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    Fleet {
        role,
        revision,
        service,
        template,
        replicas: fleet.replicas.max(0),
        nodes_per_replica,
        selector,
        name,
        namespace: namespace.unwrap_or_default(),
        port: fleet.port,
        extra_args: fleet.extra_args.len(),
    }
}

fn render_router(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    router: &RouterSpec,
    owner: &OwnerReference,
) -> Router {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let object_name = router_name(&name);
    let selector = app_labels(&name, ROUTER_APP);
    let mut labels = selector.clone();
    labels.insert(LABEL_MANAGED_BY.into(), "kvpilot".into());
    let meta = || owned_meta(object_name.clone(), &namespace, labels.clone(), owner);
    let service_account = ServiceAccount { metadata: meta(), ..ServiceAccount::default() };
    let role = Role {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    };
    let role_binding = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: object_name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: object_name.clone(),
            namespace: namespace.clone(),
            ..Subject::default()
        }]),
    };
    let args = server::router_args(
        router,
        namespace.as_deref().unwrap_or_default(),
        resource.spec.decode.port,
        &router_selector(&name, FleetRole::Prefill),
        &router_selector(&name, FleetRole::Decode),
    );
    let container = Container {
        name: ROUTER_CONTAINER.into(),
        image: Some(router_image(router, &assessment.release, options)),
        image_pull_policy: router.image_pull_policy.map(image_pull_policy),
        command: Some(vec!["python3".into(), "-m".into(), router.launcher.module().into()]),
        args: Some(args),
        ports: Some(vec![
            ContainerPort { name: Some("http".into()), container_port: router.port, ..ContainerPort::default() },
            ContainerPort {
                name: Some("metrics".into()),
                container_port: ROUTER_METRICS_PORT,
                ..ContainerPort::default()
            },
        ]),
        resources: router.resources.clone(),
        readiness_probe: Some(http_probe("http", "/readiness", 5, 5, 3)),
        liveness_probe: Some(http_probe("http", "/liveness", 10, 5, 3)),
        ..Container::default()
    };
    let deployment = Deployment {
        metadata: meta(),
        spec: Some(DeploymentSpec {
            replicas: Some(router.replicas.max(0)),
            selector: LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(selector.clone()), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    service_account_name: Some(object_name.clone()),
                    node_selector: (!router.node_selector.is_empty()).then(|| router.node_selector.clone()),
                    tolerations: (!router.tolerations.is_empty()).then(|| router.tolerations.clone()),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    let service = Service {
        metadata: meta(),
        spec: Some(ServiceSpec {
            type_: Some(router.service.type_.as_str().into()),
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: router.service.port,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let endpoint = format!("http://{object_name}.{}.svc:{}", namespace.unwrap_or_default(), router.service.port);
    Router { service_account, role, role_binding, deployment, service, endpoint }
}

/// A typed object as JSON with apiVersion and kind (apply patches and `kvpilot render` need them).
pub fn with_type_meta<T: serde::Serialize>(object: &T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

impl Desired {
    /// Everything a fresh InferenceDeployment gets, as it is applied: the ConfigMap, each
    /// fleet's Service and the pods of its replicas 0..replicas, and the router's objects.
    pub fn objects(&self) -> Vec<serde_json::Value> {
        let mut objects = vec![with_type_meta(&self.config_map, "v1", "ConfigMap")];
        for fleet in self.fleets() {
            objects.push(with_type_meta(&fleet.service, "v1", "Service"));
            objects.extend(
                (0..fleet.replicas as u32)
                    .flat_map(|replica| fleet.replica(replica))
                    .map(|pod| with_type_meta(&pod, "v1", "Pod")),
            );
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

impl Router {
    /// The router's objects, in the order they are applied (its identity first).
    pub fn objects(&self) -> Vec<serde_json::Value> {
        vec![
            with_type_meta(&self.service_account, "v1", "ServiceAccount"),
            with_type_meta(&self.role, "rbac.authorization.k8s.io/v1", "Role"),
            with_type_meta(&self.role_binding, "rbac.authorization.k8s.io/v1", "RoleBinding"),
            with_type_meta(&self.deployment, "apps/v1", "Deployment"),
            with_type_meta(&self.service, "v1", "Service"),
        ]
    }
}

impl Fleet {
    /// The pods of replica `replica` at this revision, rank 0 first.
    pub fn replica(&self, replica: u32) -> Vec<Pod> {
        (0..self.nodes_per_replica).map(|rank| self.pod(replica, rank)).collect()
    }

    /// The DNS name of a pod through the headless Service.
    fn host(&self, pod_name: &str) -> String {
        format!("{pod_name}.{}.{}.svc", service_name(&self.name, self.role), self.namespace)
    }

    /// The URL a router sends replica `replica`'s requests to: its rank 0.
    pub fn endpoint(&self, replica: u32) -> String {
        self.endpoint_of(&pod_name(&self.name, self.role, replica, 0, self.nodes_per_replica))
    }

    /// The URL of the SGLang server of the pod named `pod_name`.
    pub fn endpoint_of(&self, pod_name: &str) -> String {
        format!("http://{}:{}", self.host(pod_name), self.port)
    }

    /// The pod of rank `rank` in replica `replica` at this revision.
    pub fn pod(&self, replica: u32, rank: i32) -> Pod {
        let mut pod = self.template.clone();
        let name = pod_name(&self.name, self.role, replica, rank, self.nodes_per_replica);
        pod.metadata.name = Some(name.clone());
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert(LABEL_REVISION.into(), self.revision.clone());
        labels.insert(LABEL_ORDINAL.into(), replica.to_string());
        labels.insert(LABEL_RANK.into(), rank.to_string());
        let leader = self.host(&pod_name(&self.name, self.role, replica, 0, self.nodes_per_replica));
        if let Some(spec) = pod.spec.as_mut() {
            spec.hostname = Some(name);
            if self.nodes_per_replica > 1
                && let Some(args) = spec.containers[0].args.as_mut()
            {
                // Before extraArgs, which come last.
                let at = args.len() - self.extra_args;
                let ranks = server::rank_args(self.nodes_per_replica, rank, &leader);
                args.splice(at..at, ranks);
            }
        }
        pod
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::server::assess;

    fn resource(decode: serde_json::Value) -> InferenceDeployment {
        let config = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/configs/llama-3.1-8b-instruct.json"
        ))
        .unwrap();
        let mut decode_spec = json!({"replicas": 3, "podLabels": {"team": "a", LABEL_INSTANCE: "spoofed"}});
        decode_spec.as_object_mut().unwrap().extend(decode.as_object().unwrap().clone());
        let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"inline": serde_json::from_str::<serde_json::Value>(&config).unwrap()}},
            "decode": decode_spec
        }))
        .unwrap();
        let mut resource = InferenceDeployment::new("llama", spec);
        resource.metadata.namespace = Some("serving".into());
        resource.metadata.uid = Some("uid-1".into());
        resource
    }

    fn render(resource: &InferenceDeployment) -> Desired {
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        let assessment =
            assess(&resource.spec, &crate::policy::ModelConfigs::target(config), &ReleaseChoice::default_newest())
                .unwrap();
        desired_state(resource, &assessment, &RenderOptions::default())
    }

    fn container(pod: &Pod) -> &Container {
        &pod.spec.as_ref().unwrap().containers[0]
    }

    fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
    }

    #[test]
    fn pods_run_sglang_owned_labelled_with_gpus_probes_and_shm() {
        let desired = render(&resource(json!({"tensorParallel": 2})));
        let pod = desired.decode.pod(1, 0);
        assert_eq!(pod.metadata.name.as_deref(), Some("llama-decode-1"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_INSTANCE], "llama", "user labels cannot steal the selector");
        assert_eq!(labels["team"], "a");
        assert_eq!(
            (labels[LABEL_REVISION].as_str(), labels[LABEL_RANK].as_str()),
            (desired.decode.revision.as_str(), "0")
        );
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        let sglang = container(&pod);
        assert_eq!(sglang.image.as_deref(), Some("lmsysorg/sglang:v0.5.23-cu129"));
        assert_eq!(sglang.command.as_ref().unwrap(), &["python3", "-m", "sglang.launch_server"]);
        let args = sglang.args.as_ref().unwrap();
        assert_eq!(flag(args, "--model-path"), Some("meta-llama/Llama-3.1-8B-Instruct"));
        assert_eq!(flag(args, "--disaggregation-mode"), Some("decode"));
        assert_eq!(flag(args, "--tensor-parallel-size"), Some("2"));
        assert_eq!((flag(args, "--host"), flag(args, "--port")), (Some("0.0.0.0"), Some("30000")));
        assert_eq!(flag(args, "--served-model-name"), Some("meta-llama/Llama-3.1-8B-Instruct"));
        assert!(args.iter().any(|a| a == "--enable-metrics") && !args.iter().any(|a| a == "--nnodes"));
        assert_eq!(sglang.resources.as_ref().unwrap().limits.as_ref().unwrap()[GPU_RESOURCE], Quantity("2".into()));
        let startup = sglang.startup_probe.as_ref().unwrap();
        assert_eq!((startup.period_seconds, startup.failure_threshold), (Some(30), Some(60)), "60 × 30 s to load");
        assert_eq!(
            sglang.readiness_probe.as_ref().unwrap().http_get.as_ref().unwrap().path.as_deref(),
            Some("/health")
        );
        let spec = pod.spec.as_ref().unwrap();
        let shm = spec.volumes.as_ref().unwrap().iter().find(|v| v.name == "dshm").unwrap().empty_dir.clone().unwrap();
        assert_eq!((shm.medium.as_deref(), shm.size_limit), (Some("Memory"), Some(Quantity("16Gi".into()))));
        assert_eq!((spec.termination_grace_period_seconds, spec.restart_policy.as_deref()), (Some(60), None));
        assert_eq!(spec.subdomain.as_deref(), Some("llama-decode"));
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[MODEL_CONFIG_ANNOTATION],
            "configmap/llama-sglang/config.json",
            "the guard finds the config kvpilot checked"
        );
        assert!(desired.config_map.data.as_ref().unwrap().contains_key(MODEL_CONFIG_KEY));
        assert_eq!(desired.decode.selector, "app.kubernetes.io/instance=llama,app.kubernetes.io/name=kvpilot-decode");
        assert_eq!(desired.decode.endpoint(1), "http://llama-decode-1.llama-decode.serving.svc:30000");
    }

    #[test]
    fn data_parallel_replicas_get_gpus_of_their_own_and_dp_attention_splits_tp() {
        let gpus = |decode: serde_json::Value| {
            let pod = render(&resource(decode)).decode.pod(0, 0);
            container(&pod).resources.as_ref().unwrap().limits.as_ref().unwrap()[GPU_RESOURCE].clone()
        };
        // SGLang starts each of the two replicas on TP × PP GPUs of its own.
        assert_eq!(gpus(json!({"tensorParallel": 2, "pipelineParallel": 2, "dataParallel": 2})), Quantity("8".into()));
        assert_eq!(
            gpus(json!({"tensorParallel": 8, "dataParallel": 4, "enableDpAttention": true})),
            Quantity("8".into())
        );
    }

    #[test]
    fn a_multi_node_replica_is_a_group_that_finds_rank_zero_by_name() {
        let desired = render(&resource(
            json!({"tensorParallel": 16, "nodesPerReplica": 2, "extraArgs": ["--mem-fraction-static", "0.8"]}),
        ));
        let group = desired.decode.replica(3);
        let names: Vec<_> = group.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["llama-decode-3-0", "llama-decode-3-1"]);
        for (rank, pod) in group.iter().enumerate() {
            let args = container(pod).args.as_ref().unwrap();
            assert_eq!(flag(args, "--nnodes"), Some("2"));
            assert_eq!(flag(args, "--node-rank"), Some(rank.to_string().as_str()));
            assert_eq!(flag(args, "--dist-init-addr"), Some("llama-decode-3-0.llama-decode.serving.svc:5000"));
            assert_eq!(args[args.len() - 2..], ["--mem-fraction-static", "0.8"], "extraArgs stay last");
            assert_eq!(
                container(pod).resources.as_ref().unwrap().limits.as_ref().unwrap()[GPU_RESOURCE],
                Quantity("8".into())
            );
            assert_eq!(pod.spec.as_ref().unwrap().restart_policy.as_deref(), Some("Never"));
            assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL_RANK], rank.to_string());
        }
        assert_eq!(desired.decode.endpoint(3), "http://llama-decode-3-0.llama-decode.serving.svc:30000");
        assert_eq!(desired.objects().len(), 2 + 3 * 2);
    }

    #[test]
    fn weights_come_from_a_volume_or_the_hub_cache() {
        let mut volume = resource(json!({}));
        volume.spec.model.source = Some(
            serde_json::from_value(
                json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "weights"}}, "path": "llama"}}),
            )
            .unwrap(),
        );
        volume.spec.model.revision = Some("abc".into());
        let pod = render(&volume).decode.pod(0, 0);
        let args = container(&pod).args.as_ref().unwrap();
        assert_eq!((flag(args, "--model-path"), flag(args, "--revision")), (Some("/models/llama"), None));
        let model = pod.spec.as_ref().unwrap().volumes.as_ref().unwrap().iter().find(|v| v.name == "model").unwrap();
        assert_eq!(model.persistent_volume_claim.as_ref().unwrap().claim_name, "weights");
        let mounted = container(&pod).volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "model").unwrap();
        assert_eq!((mounted.mount_path.as_str(), mounted.read_only), ("/models", Some(true)));

        let mut hub = resource(json!({}));
        hub.spec.model.source =
            Some(serde_json::from_value(json!({"hub": {"cache": {"hostPath": {"path": "/var/hf"}}}})).unwrap());
        let pod = render(&hub).decode.pod(0, 0);
        let env = container(&pod).env.clone().unwrap();
        assert!(env.iter().any(|e| e.name == "HF_HOME" && e.value.as_deref() == Some(HF_HOME)));
        assert!(container(&pod).volume_mounts.as_ref().unwrap().iter().any(|m| m.mount_path == HF_HOME));
    }

    #[test]
    fn host_pool_size_is_sglangs_hicache_size_and_counts_in_the_sglang_container_memory() {
        let mut resource = resource(json!({"tensorParallel": 2}));
        resource.spec.cache = Some(
            serde_json::from_value(json!({"offload": true, "reuse": true, "capacity": "1Gi", "hostPoolSize": "4Gi"}))
                .unwrap(),
        );
        let pod = render(&resource).decode.pod(0, 0);
        let sglang = container(&pod);
        // 4Gi is 4.29 GB; SGLang takes whole GB.
        assert_eq!(flag(sglang.args.as_ref().unwrap(), "--hicache-size"), Some("4"));
        let memory = |pod: &Pod| {
            let resources = container(pod).resources.clone().unwrap_or_default();
            let of =
                |values: Option<BTreeMap<String, Quantity>>| values.and_then(|m| m.get("memory").map(|q| q.0.clone()));
            (of(resources.requests), of(resources.limits))
        };
        // 4 GB × 2 pools (offload, reuse) × 2 ranks, as the request; no limit where the spec sets none.
        let pools = 4 * 1_000_000_000u64 * 2 * 2;
        assert_eq!(memory(&pod), (Some(pools.to_string()), None));

        resource.spec.decode.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity("64Gi".into()))])),
            ..ResourceRequirements::default()
        });
        let pod = render(&resource).decode.pod(0, 0);
        let with_limit = ((64u64 << 30) + pools).to_string();
        assert_eq!(
            memory(&pod),
            (Some(with_limit.clone()), Some(with_limit)),
            "the request follows the limit, as the API server defaults it"
        );

        resource.spec.cache.as_mut().unwrap().host_pool_size = None;
        let pod = render(&resource).decode.pod(0, 0);
        assert_eq!(flag(container(&pod).args.as_ref().unwrap(), "--hicache-size"), None);
        assert_eq!(
            memory(&pod),
            (None, Some("64Gi".to_string())),
            "without hostPoolSize the pools follow the GPU and are not counted"
        );
    }

    #[test]
    fn the_cache_runtime_runs_beside_sglang_as_a_native_sidecar() {
        let mut resource = resource(json!({}));
        resource.spec.cache = Some(serde_json::from_value(json!({"offload": true, "capacity": "1Gi"})).unwrap());
        let pod = render(&resource).decode.pod(0, 0);
        let spec = pod.spec.as_ref().unwrap();
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].args.as_ref().unwrap(), &["install-connector", CONNECTOR_DIR]);
        let sidecar = &init[1];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"), "a native sidecar");
        assert_eq!(
            sidecar.args.as_ref().unwrap()[..5],
            ["cache-runtime", "--socket", "/run/kvpilot/cache.sock", "--capacity", "1073741824"]
        );
        let memory = &sidecar.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"];
        assert_eq!(memory.0, (1073741824u64 + 1073741824 / 20 + (64 << 20)).to_string());
        assert_eq!(sidecar.security_context.as_ref().unwrap().run_as_user, Some(RUNTIME_UID));
        let sglang = container(&pod);
        let args = sglang.args.as_ref().unwrap();
        assert!(args.iter().any(|a| a == "--disaggregation-decode-enable-offload-kvcache"), "{args:?}");
        assert_eq!(flag(args, "--hicache-storage-backend"), Some("dynamic"));
        let config: serde_json::Value =
            serde_json::from_str(flag(args, "--hicache-storage-backend-extra-config").unwrap()).unwrap();
        assert_eq!(
            (config["module_path"].as_str(), config["socket"].as_str()),
            (Some("kvpilot_sglang.hicache"), Some("/run/kvpilot/cache.sock"))
        );
        assert!(
            sglang
                .env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "PYTHONPATH" && e.value.as_deref() == Some(CONNECTOR_DIR))
        );
        let mut own = resource.clone();
        own.spec.decode.env = vec![env_var("PYTHONPATH", "/opt/mine")];
        let pod = render(&own).decode.pod(0, 0);
        let env = container(&pod).env.clone().unwrap();
        let pythonpath: Vec<_> = env.iter().filter(|e| e.name == "PYTHONPATH").collect();
        assert_eq!(pythonpath.len(), 1);
        assert_eq!(pythonpath[0].value.as_deref(), Some("/opt/kvpilot-py:/opt/mine"), "the spec's entries stay");
        let mounts: Vec<&str> = sglang.volume_mounts.as_ref().unwrap().iter().map(|m| m.mount_path.as_str()).collect();
        assert!(mounts.contains(&RUN_DIR) && mounts.contains(&CONNECTOR_DIR), "{mounts:?}");
    }

    #[test]
    fn rdma_pass_throughs_reach_the_pod() {
        let desired = render(&resource(json!({
            "extraResources": {"rdma/rdma_shared_device_a": "1"}, "capabilities": ["IPC_LOCK"],
            "hostNetwork": true, "ibDevice": "mlx5_0,mlx5_1", "resources": {"requests": {"cpu": "8"}}
        })));
        let pod = desired.decode.pod(0, 0);
        let sglang = container(&pod);
        let resources = sglang.resources.as_ref().unwrap();
        assert_eq!(resources.limits.as_ref().unwrap()["rdma/rdma_shared_device_a"], Quantity("1".into()));
        assert_eq!(resources.requests.as_ref().unwrap()["rdma/rdma_shared_device_a"], Quantity("1".into()));
        assert_eq!(
            sglang.security_context.as_ref().unwrap().capabilities.as_ref().unwrap().add,
            Some(vec!["IPC_LOCK".into()])
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!((spec.host_network, spec.dns_policy.as_deref()), (Some(true), Some("ClusterFirstWithHostNet")));
        assert_eq!(flag(sglang.args.as_ref().unwrap(), "--disaggregation-ib-device"), Some("mlx5_0,mlx5_1"));
    }

    /// SGLang's Rust server serves a prefill server's KV bootstrap registry on its API port, so
    /// the pods advertise that port to the router and open no bootstrap port of their own.
    #[test]
    fn prefill_on_the_rust_server_advertises_its_api_port_for_bootstrap() {
        let mut pd = resource(json!({}));
        pd.spec.prefill = Some(
            serde_json::from_value(json!({"port": 31000, "env": [{"name": "SGLANG_RUST_SERVER", "value": "1"}]}))
                .unwrap(),
        );
        let desired = render(&pd);
        let pod = desired.prefill.as_ref().expect("a prefill fleet").pod(0, 0);
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()[BOOTSTRAP_PORT_ANNOTATION], "31000");
        let ports: Vec<_> = container(&pod).ports.as_ref().unwrap().iter().map(|p| p.container_port).collect();
        assert_eq!(ports, [31000]);
        assert_eq!(flag(container(&pod).args.as_ref().unwrap(), "--disaggregation-bootstrap-port"), Some("8998"));
    }

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
        assert!(
            joined.contains(
                "--prefill-selector app.kubernetes.io/instance=llama app.kubernetes.io/name=kvpilot-prefill \
                 kvpilot.dev/rank=0 --decode-selector"
            ),
            "{joined}"
        );
        assert_eq!(flag(args, "--service-discovery-namespace"), Some("serving"));
        assert_eq!(template.containers[0].command.as_ref().unwrap(), &["python3", "-m", "sglang_router.launch_router"]);
        assert_eq!(template.containers[0].image.as_deref(), Some("lmsysorg/sglang:v0.5.23-cu129"));
        assert_eq!(desired.objects().len(), 1 + (1 + 3) + (1 + 2) + 5, "ConfigMap, both fleets, the router");

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
        assert!(render(&off).router.is_none());
        assert!(render(&resource(json!({}))).router.is_none(), "no prefill fleet, no router");
    }

    #[test]
    fn the_revision_covers_what_affects_a_pod_and_nothing_else() {
        let base = render(&resource(json!({})));
        assert_eq!(render(&resource(json!({}))).decode.revision, base.decode.revision, "deterministic");
        assert_ne!(
            render(&resource(json!({"tensorParallel": 2}))).decode.revision,
            base.decode.revision,
            "TP changes the pods"
        );
        assert_ne!(
            render(&resource(json!({"tensorParallel": 2, "nodesPerReplica": 2}))).decode.revision,
            render(&resource(json!({"tensorParallel": 2}))).decode.revision
        );
        assert_eq!(
            render(&resource(json!({"replicas": 7}))).decode.revision,
            base.decode.revision,
            "scaling is not a rollout"
        );
        assert_ne!(render(&resource(json!({"podLabels": {"team": "b"}}))).decode.revision, base.decode.revision);
    }
}
