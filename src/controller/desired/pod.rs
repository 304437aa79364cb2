//! The SGLang server's pod template: its container (command line, ports, probes, resources,
//! environment, mounts), its volumes and its scheduling fields, shared by every replica of a
//! fleet.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, Pod, PodReadinessGate, PodSpec,
    Probe, SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::config_map::MODEL_CONFIG_KEY;
use super::container::{env_var, http_probe, image_pull_policy, mount, restricted_pod_security, restricted_security};
use super::resources::{self, DEFAULT_SHM_SIZE, ServerMemory};
use super::{FleetRole, GROUP_READY, RenderOptions, cache, config_map_name, placement, pod_group, service_name};
use crate::api::{
    ConfigSourceRef, EffectiveSettings, FleetSpec, InferenceDeployment, InferenceDeploymentSpec, MODELS_DIR,
    PodSecurityLevel,
};
use crate::policy::{Assessment, RUST_SERVER_ENV};
use crate::release::ReleaseChoice;
use crate::sglang::guard::MODEL_CONFIG_ANNOTATION;
use crate::sglang::server;

/// Annotation on prefill pods the router reads their bootstrap port from (`sglang-router` and
/// `smg` both read this name).
pub(super) const BOOTSTRAP_PORT_ANNOTATION: &str = "sglang.ai/bootstrap-port";
/// The SGLang container's name.
const SGLANG_CONTAINER: &str = "sglang";
/// The image of the decode servers when `spec.decode.image` is unset; `{version}` is replaced
/// by the resolved SGLang release.
pub const DEFAULT_SGLANG_IMAGE: &str = "lmsysorg/sglang:v{version}-cu129";
/// Where the hub cache volume is mounted (`HF_HOME`).
const HF_HOME: &str = "/hf-cache";
/// How often the startup probe asks while the model loads.
const STARTUP_PERIOD_SECONDS: i32 = 30;
/// The user (and group) the SGLang servers run as at the `restricted` Pod Security level.
/// lmsysorg/sglang's images run as root and name no user of their own; 1000 is the first user of
/// the Ubuntu images they are built on, and nothing the server does needs a passwd entry (`USER`
/// is set for Python's `getpass`, which torch's compile cache asks).
pub const SERVER_UID: i64 = 1000;
/// HOME of a `restricted` server, an emptyDir: the caches SGLang and its kernels write (the hub's,
/// Triton's, FlashInfer's and DeepGEMM's JIT caches) land under it.
const SERVER_HOME: &str = "/home/sglang";

/// The SGLang image of a fleet: its `image`, else the operator's template for the release asked
/// for.
pub(super) fn sglang_image(fleet: &FleetSpec, release: &ReleaseChoice, options: &RenderOptions) -> String {
    fleet.image.clone().unwrap_or_else(|| options.sglang_image.replace("{version}", &release.requested.to_string()))
}

/// The SGLang container's environment: the fleet's, what the release needs for the decode
/// settings (`effective.decodeEnv`), and for hub weights the token and cache the download uses,
/// unless the spec sets them itself.
fn server_env(
    resource: &InferenceDeployment,
    role: FleetRole,
    fleet: &FleetSpec,
    effective: &EffectiveSettings,
    restricted: bool,
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
    if restricted {
        add(env_var("HOME", SERVER_HOME));
        add(env_var("USER", "sglang"));
    }
    if role == FleetRole::Decode && spec.cache.is_some() {
        cache::add_connector_to_python_path(&mut env);
    }
    env
}

/// SGLang's `GET /health`: cheap, answered by every rank (ranks above 0 run a health server of
/// their own once their schedulers are up).
fn health_probe(period: i32, timeout: i32, failures: i32) -> Probe {
    http_probe("http", "/health", period, timeout, failures)
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

/// The port a prefill server serves the KV bootstrap registry on, which its pods advertise to the
/// router: on SGLang's Rust server (`SGLANG_RUST_SERVER` in the prefill env) the API port, where
/// its PD hook moves the default bootstrap port (policy rule BP1 refuses any other); otherwise
/// `spec.disaggregation.bootstrapPort`.
fn served_bootstrap_port(spec: &InferenceDeploymentSpec, fleet: &FleetSpec) -> i32 {
    if fleet.env_on(RUST_SERVER_ENV) { fleet.port } else { spec.disaggregation.bootstrap_port }
}

/// The pod's volumes and the SGLang container's mounts: `/dev/shm` in memory, the weights or the
/// hub cache, and on decode with `spec.cache` the cache runtime's socket and connector.
fn volumes(
    resource: &InferenceDeployment,
    role: FleetRole,
    fleet: &FleetSpec,
    restricted: bool,
) -> (Vec<Volume>, Vec<VolumeMount>) {
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
    } else if let Some(hub_cache) =
        spec.model.source.as_ref().and_then(|s| s.hub.as_ref()).and_then(|h| h.cache.as_ref())
    {
        volumes.push(hub_cache.named("hf-cache"));
        mounts.push(mount("hf-cache", HF_HOME, false));
    }
    if role == FleetRole::Decode && spec.cache.is_some() {
        cache::add_volumes(&mut volumes, &mut mounts);
    }
    // A read-only root: what the server writes goes to its HOME and /tmp.
    if restricted {
        for (name, path) in [("home", SERVER_HOME), ("tmp", "/tmp")] {
            volumes.push(Volume {
                name: name.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            });
            mounts.push(mount(name, path, false));
        }
    }
    (volumes, mounts)
}

/// The SGLang container's security: at `restricted`, kvpilot's own containers' (as
/// [`SERVER_UID`], no capability but those the level allows); otherwise only the capabilities
/// the fleet adds.
fn server_security(fleet: &FleetSpec, restricted: bool) -> Option<SecurityContext> {
    if restricted {
        let mut security = restricted_security(SERVER_UID);
        if let Some(capabilities) = security.capabilities.as_mut() {
            capabilities.add = (!fleet.capabilities.is_empty()).then(|| fleet.capabilities.clone());
        }
        return Some(security);
    }
    (!fleet.capabilities.is_empty()).then(|| SecurityContext {
        capabilities: Some(Capabilities { add: Some(fleet.capabilities.clone()), ..Capabilities::default() }),
        ..SecurityContext::default()
    })
}

/// The SGLang server container of the `role` fleet: `python3 -m sglang.launch_server` with the
/// flags kvpilot decided, its ports, probes, resources, environment and `mounts`.
fn server_container(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    role: FleetRole,
    fleet: &FleetSpec,
    mounts: Vec<VolumeMount>,
    restricted: bool,
) -> Container {
    let spec = &resource.spec;
    let env = server_env(resource, role, fleet, &assessment.verdict.effective, restricted);
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
    Container {
        name: SGLANG_CONTAINER.into(),
        image: Some(sglang_image(fleet, &assessment.release, options)),
        image_pull_policy: fleet.image_pull_policy.map(image_pull_policy),
        command: Some(vec!["python3".into(), "-m".into(), "sglang.launch_server".into()]),
        args: Some(server::server_args(spec, role, &assessment.verdict, assessment.release.release)),
        ports: Some(ports),
        env: (!env.is_empty()).then_some(env),
        resources: Some(resources::server(fleet, ServerMemory::of(spec, role, fleet))),
        startup_probe: Some(health_probe(STARTUP_PERIOD_SECONDS, 5, startup_failures.max(1))),
        readiness_probe: Some(health_probe(10, 5, 3)),
        liveness_probe: Some(health_probe(30, 10, 4)),
        security_context: server_security(fleet, restricted),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

/// The pod every replica of the `role` fleet is made from, unnamed and without rank: `labels`
/// (which select it) over the fleet's own pod labels, and the annotations the guard and the
/// router read.
pub(super) fn server_pod_template(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    role: FleetRole,
    fleet: &FleetSpec,
    labels: BTreeMap<String, String>,
    owner: &OwnerReference,
) -> Pod {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let spec = &resource.spec;
    // The level decides the container's security, its env and volumes, and the pod's security.
    let restricted = spec.pod_security_level() == PodSecurityLevel::Restricted;
    let (volumes, mounts) = volumes(resource, role, fleet, restricted);
    let container = server_container(resource, assessment, options, role, fleet, mounts, restricted);
    let mut pod_labels = fleet.pod_labels.clone();
    pod_labels.extend(labels);
    let mut annotations = fleet.pod_annotations.clone();
    if let Some(config) = model_config_annotation(resource, &name) {
        annotations.insert(MODEL_CONFIG_ANNOTATION.into(), config);
    }
    if role == FleetRole::Prefill {
        annotations.insert(BOOTSTRAP_PORT_ANNOTATION.into(), served_bootstrap_port(spec, fleet).to_string());
    }
    Pod {
        metadata: ObjectMeta {
            namespace: resource.metadata.namespace.clone(),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            init_containers: if role == FleetRole::Decode { cache::init_containers(resource, options) } else { None },
            containers: vec![container],
            volumes: Some(volumes),
            subdomain: Some(service_name(&name, role)),
            host_network: fleet.host_network.then_some(true),
            dns_policy: fleet.host_network.then(|| "ClusterFirstWithHostNet".into()),
            // A rank that fails takes its replica down with it (NCCL cannot take a rank back),
            // and the controller replaces the group; a single pod is restarted in place.
            restart_policy: (fleet.nodes_per_replica > 1).then(|| "Never".into()),
            termination_grace_period_seconds: Some(fleet.termination_grace_period_seconds),
            node_selector: (!fleet.node_selector.is_empty()).then(|| fleet.node_selector.clone()),
            tolerations: (!fleet.tolerations.is_empty()).then(|| fleet.tolerations.clone()),
            affinity: placement::fleet_affinity(spec, &name, role, fleet.affinity.as_ref()),
            topology_spread_constraints: Some(vec![placement::spread_across_nodes(&name, role)]),
            scheduler_name: pod_group::scheduler_name(spec),
            readiness_gates: Some(vec![PodReadinessGate { condition_type: GROUP_READY.into() }]),
            service_account_name: fleet.service_account_name.clone(),
            priority_class_name: pod_group::priority_class_name(spec, fleet),
            automount_service_account_token: Some(false),
            security_context: restricted.then(|| restricted_pod_security(SERVER_UID)),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
    use serde_json::json;

    use super::*;
    use crate::controller::desired::resources::GPU_RESOURCE;
    use crate::controller::desired::test_support::{container, flag, render, resource};
    use crate::controller::desired::{LABEL_INSTANCE, LABEL_RANK, LABEL_REVISION};

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
        // 4 GB × 2 pools (offload, reuse) × 2 ranks, with /dev/shm (16Gi) and each rank's process
        // (4Gi), as the request, in binary units rounded up to a MiB; no limit where the spec
        // sets none.
        let pools = 4 * 1_000_000_000u64 * 2 * 2;
        let mib = |bytes: u64| Some(format!("{}Mi", bytes.div_ceil(1 << 20)));
        assert_eq!(memory(&pod), (mib((16u64 << 30) + pools + (8 << 30)), None));

        resource.spec.decode.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), Quantity("64Gi".into()))])),
            ..ResourceRequirements::default()
        });
        let pod = render(&resource).decode.pod(0, 0);
        let with_limit = mib((64u64 << 30) + pools);
        assert_eq!(
            memory(&pod),
            (with_limit.clone(), with_limit),
            "the request follows the limit, as the API server defaults it"
        );
        let warnings = resources::warnings(&resource.spec);
        assert_eq!(
            warnings,
            ["spec.decode.resources.limits.memory 64Gi becomes 80795Mi on the SGLang container: kvpilot adds the \
              15259Mi of HiCache host pools spec.cache.hostPoolSize puts in RAM on each pod (give the memory \
              without them, or lower hostPoolSize)"],
            "a memory the user set is never changed silently"
        );

        resource.spec.cache.as_mut().unwrap().host_pool_size = None;
        let pod = render(&resource).decode.pod(0, 0);
        assert_eq!(flag(container(&pod).args.as_ref().unwrap(), "--hicache-size"), None);
        assert_eq!(
            memory(&pod),
            (Some("64Gi".to_string()), Some("64Gi".to_string())),
            "without hostPoolSize the pools follow the GPU and are not counted"
        );
        assert_eq!(resources::warnings(&resource.spec), Vec::<String>::new());
    }

    #[test]
    fn every_container_has_cpu_and_memory_requests_and_guaranteed_means_requests_equal_limits() {
        let burstable = render(&resource(json!({"tensorParallel": 8})));
        let requests = container(&burstable.decode.pod(0, 0)).resources.clone().unwrap().requests.unwrap();
        assert_eq!(
            (requests["cpu"].0.as_str(), requests["memory"].0.as_str()),
            ("16", "48Gi"),
            "2 CPUs per GPU; /dev/shm (16Gi) and 4Gi per rank"
        );

        let mut guaranteed =
            resource(json!({"tensorParallel": 2, "qos": "Guaranteed", "resources": {"limits": {"cpu": "12"}}}));
        let pod = render(&guaranteed).decode.pod(0, 0);
        let resources = container(&pod).resources.clone().unwrap();
        let (requests, limits) = (resources.requests.unwrap(), resources.limits.unwrap());
        for name in ["cpu", "memory", GPU_RESOURCE] {
            assert_eq!(requests[name], limits[name], "{name}");
        }
        assert_eq!(limits["cpu"].0, "12", "a limit the user set is kept, and becomes the request");
        assert_eq!(limits["memory"].0, "24Gi");

        // A limit that cannot hold /dev/shm is said, with the numbers.
        guaranteed.spec.decode.resources = Some(serde_json::from_value(json!({"limits": {"memory": "8Gi"}})).unwrap());
        assert_eq!(
            resources::warnings(&guaranteed.spec),
            ["spec.decode.resources.limits.memory 8Gi cannot hold the 16Gi /dev/shm of spec.decode.shmSize (NCCL and \
              SGLang's shared buffers live there, charged to the pod's memory): raise the limit above 16Gi, or lower \
              shmSize"]
        );
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

    #[test]
    fn servers_run_at_the_pod_security_level_their_settings_allow() {
        // Nothing asks for more: restricted, as UID 1000 with a read-only root and HOME and /tmp
        // on volumes, on decode and prefill alike.
        let mut pd = resource(json!({}));
        pd.spec.prefill = Some(serde_json::from_value(json!({"replicas": 1})).unwrap());
        let desired = render(&pd);
        for pod in [desired.decode.pod(0, 0), desired.prefill.as_ref().unwrap().pod(0, 0)] {
            let sglang = container(&pod);
            let security = sglang.security_context.clone().unwrap();
            assert_eq!(
                (security.run_as_non_root, security.run_as_user, security.run_as_group),
                (Some(true), Some(SERVER_UID), Some(SERVER_UID))
            );
            assert_eq!(
                (security.read_only_root_filesystem, security.allow_privilege_escalation),
                (Some(true), Some(false))
            );
            assert_eq!(security.capabilities.unwrap(), Capabilities { drop: Some(vec!["ALL".into()]), add: None });
            assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
            let env = sglang.env.as_ref().unwrap();
            let value = |name: &str| env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
            assert_eq!((value("HOME").as_deref(), value("USER").as_deref()), (Some(SERVER_HOME), Some("sglang")));
            let spec = pod.spec.as_ref().unwrap();
            for path in [SERVER_HOME, "/tmp"] {
                let mount = sglang.volume_mounts.as_ref().unwrap().iter().find(|m| m.mount_path == path).unwrap();
                let volume = spec.volumes.as_ref().unwrap().iter().find(|v| v.name == mount.name).unwrap();
                assert!(volume.empty_dir.is_some() && mount.read_only.is_none(), "{path}");
            }
            let pod_security = spec.security_context.clone().unwrap();
            assert_eq!((pod_security.run_as_non_root, pod_security.fs_group), (Some(true), Some(SERVER_UID)));
        }
        // Asked for baseline: the image's own user, as before.
        let mut baseline = resource(json!({}));
        baseline.spec.security = serde_json::from_value(json!({"level": "baseline"})).unwrap();
        let pod = render(&baseline).decode.pod(0, 0);
        assert_eq!(container(&pod).security_context, None);
        assert!(!container(&pod).env.iter().flatten().any(|e| e.name == "HOME"));
        assert_eq!(pod.spec.as_ref().unwrap().security_context, None);
        // RDMA's IPC_LOCK needs privileged: its capability, nothing dropped.
        let rdma = render(&resource(json!({"capabilities": ["IPC_LOCK"]}))).decode.pod(0, 0);
        let security = container(&rdma).security_context.clone().unwrap();
        assert_eq!((security.run_as_user, security.read_only_root_filesystem), (None, None));
        // A capability restricted allows is kept at restricted.
        let bind = render(&resource(json!({"capabilities": ["NET_BIND_SERVICE"]}))).decode.pod(0, 0);
        let capabilities = container(&bind).security_context.clone().unwrap().capabilities.unwrap();
        assert_eq!(
            (capabilities.drop, capabilities.add),
            (Some(vec!["ALL".into()]), Some(vec!["NET_BIND_SERVICE".into()]))
        );
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
}
