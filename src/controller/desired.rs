//! The objects an InferenceDeployment should have, as a pure function of the resource and its
//! assessment. `kvpilot render` prints exactly these; the controller applies them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    HTTPGetAction, Pod, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::api::{DecodeSpec, DisaggregationSpec, EffectiveSettings, ImagePullPolicy, InferenceDeployment, OnInvalid};
use crate::policy::Assessment;
use crate::release::ReleaseChoice;

/// Label: what the pods are.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Label: which InferenceDeployment they belong to.
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Label: who manages them.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: the revision (hash of everything that affects a pod).
pub const LABEL_REVISION: &str = "kvpilot.dev/revision";
/// Label: the pod's ordinal.
pub const LABEL_ORDINAL: &str = "kvpilot.dev/ordinal";
/// `app.kubernetes.io/name` of decode pods.
pub const DECODE_APP: &str = "kvpilot-decode";
/// Port of the cache runtime's HTTP API and probes.
pub const RUNTIME_PORT: i32 = 8080;
/// Where the runtime ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/kvpilot";
/// The GPU resource requested per pod.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// User and group the runtime runs as (the image's non-root user).
pub const RUNTIME_UID: i64 = 65532;

/// Key of the runtime ConfigMap holding the SGLang flags for the fleet's effective settings
/// (`{"decode": [...], "prefill": [...]}`), for users to paste into their SGLang servers.
pub const SGLANG_ARGS_KEY: &str = "sglangArgs.json";

/// The `sglangArgs` of the resource, as the runtime ConfigMap holds them.
pub fn sglang_args_json(resource: &InferenceDeployment, assessment: &Assessment) -> String {
    let args = crate::sglang::args::sglang_args(&resource.spec, &assessment.verdict, assessment.release.release);
    serde_json::to_string_pretty(&args).unwrap_or_default()
}

/// Operator-wide settings that shape the objects.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Image of the cache runtime when `spec.decode.image` is unset.
    pub runtime_image: String,
    /// The SGLang release for resources whose spec and image name none (`--sglang-version`).
    pub default_release: ReleaseChoice,
}

/// What should exist for one InferenceDeployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// Hash of the pod template and the runtime configuration.
    pub revision: String,
    /// `NAME-runtime`, key `runtime.json`.
    pub config_map: ConfigMap,
    /// Headless `NAME-decode`.
    pub service: Service,
    /// Pod template; [`Desired::pod`] names it.
    template: Pod,
    /// `spec.decode.replicas`.
    pub replicas: i32,
    /// Label selector (`k=v,k=v`) of the decode pods.
    pub selector: String,
    name: String,
}

/// 64-bit FNV-1a: a stable hash (the standard library's is not stable across releases), the
/// family Kubernetes uses for pod-template hashes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The name of the pods' headless Service.
pub fn service_name(name: &str) -> String {
    format!("{name}-decode")
}

/// The name of the runtime ConfigMap.
pub fn config_map_name(name: &str) -> String {
    format!("{name}-runtime")
}

/// The name of the pod with `ordinal`.
pub fn pod_name(name: &str, ordinal: u32) -> String {
    format!("{name}-decode-{ordinal}")
}

/// The labels every decode pod of `name` carries (the Service selects on these).
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_INSTANCE.to_string(), name.to_string()), (LABEL_NAME.to_string(), DECODE_APP.to_string())])
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

/// The runtime's whole input: model, layout, effective settings and decode sizes, plus the
/// settings in spec form so the runtime can rerun the same policy check.
pub fn runtime_config(resource: &InferenceDeployment, assessment: &Assessment) -> serde_json::Value {
    let spec = &resource.spec;
    let decode = &spec.decode;
    let checked = DisaggregationSpec { on_invalid: OnInvalid::Reject, ..assessment.verdict.settings.clone() };
    json!({
        "model": {"name": spec.model.name, "revision": spec.model.revision},
        "layout": assessment.layout,
        "effective": assessment.verdict.effective,
        "disaggregation": checked,
        "sglangVersion": assessment.release.release.to_string(),
        "decode": {
            "pageSize": decode.page_size,
            "tensorParallel": decode.tensor_parallel,
            "dataParallel": decode.data_parallel,
            "pipelineParallel": decode.pipeline_parallel,
            "enableDpAttention": decode.enable_dp_attention,
            "gpusPerPod": decode.effective_gpus_per_pod(),
            "kvCacheDtype": decode.kv_cache_dtype,
            "env": decode.env,
        },
    })
}

/// The decode container's environment: the spec's, then what the release needs for these
/// settings (`effective.decodeEnv`).
fn decode_env(decode: &DecodeSpec, effective: &EffectiveSettings) -> Option<Vec<EnvVar>> {
    let env: Vec<EnvVar> = decode.env.iter().chain(&effective.decode_env).cloned().collect();
    (!env.is_empty()).then_some(env)
}

fn image_pull_policy(policy: ImagePullPolicy) -> String {
    match policy {
        ImagePullPolicy::Always => "Always",
        ImagePullPolicy::IfNotPresent => "IfNotPresent",
        ImagePullPolicy::Never => "Never",
    }
    .into()
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn resources(user: Option<&ResourceRequirements>, gpus: i32) -> ResourceRequirements {
    let mut resources = user.cloned().unwrap_or_default();
    let gpu = Quantity(gpus.to_string());
    resources.limits.get_or_insert_default().insert(GPU_RESOURCE.into(), gpu.clone());
    // Extended resources must have requests equal to limits.
    if let Some(requests) = resources.requests.as_mut() {
        requests.insert(GPU_RESOURCE.into(), gpu);
    }
    resources
}

/// Renders what should exist for `resource` given its (non-rejected) assessment.
pub fn desired_state(resource: &InferenceDeployment, assessment: &Assessment, options: &RenderOptions) -> Desired {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let decode = &resource.spec.decode;
    let owner = owner_reference(resource);
    let selector = selector_labels(&name);
    let mut common = selector.clone();
    common.insert(LABEL_MANAGED_BY.into(), "kvpilot".into());

    // Metadata of the objects named after the resource: its labels and its controller reference.
    let owned = |object_name: String| ObjectMeta {
        name: Some(object_name),
        namespace: namespace.clone(),
        labels: Some(common.clone()),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let runtime_json = serde_json::to_string_pretty(&runtime_config(resource, assessment)).unwrap_or_default();
    let config_map = ConfigMap {
        metadata: owned(config_map_name(&name)),
        data: Some(BTreeMap::from([
            ("runtime.json".to_string(), runtime_json.clone()),
            (SGLANG_ARGS_KEY.to_string(), sglang_args_json(resource, assessment)),
        ])),
        ..ConfigMap::default()
    };
    let service = Service {
        metadata: owned(service_name(&name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector.clone()),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: RUNTIME_PORT,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };

    let mut args = vec![
        "cache-runtime".to_string(),
        "--config".into(),
        format!("{CONFIG_DIR}/runtime.json"),
        "--listen".into(),
        format!("0.0.0.0:{RUNTIME_PORT}"),
    ];
    args.extend(decode.extra_args.iter().cloned());
    let container = Container {
        name: "cache-runtime".into(),
        image: Some(decode.image.clone().unwrap_or_else(|| options.runtime_image.clone())),
        image_pull_policy: decode.image_pull_policy.map(image_pull_policy),
        command: Some(vec!["kvpilot".into()]),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: RUNTIME_PORT,
            ..ContainerPort::default()
        }]),
        env: decode_env(decode, &assessment.verdict.effective),
        resources: Some(resources(decode.resources.as_ref(), decode.effective_gpus_per_pod())),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        liveness_probe: Some(probe("/healthz", 10, 6)),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "runtime-config".into(),
                mount_path: CONFIG_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount { name: "scratch".into(), mount_path: "/tmp".into(), ..VolumeMount::default() },
        ]),
        ..Container::default()
    };
    let mut labels = decode.pod_labels.clone();
    labels.extend(common);
    let template = Pod {
        metadata: ObjectMeta {
            namespace: namespace.clone(),
            labels: Some(labels),
            annotations: (!decode.pod_annotations.is_empty()).then(|| decode.pod_annotations.clone()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(vec![
                Volume {
                    name: "runtime-config".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: config_map_name(&name),
                        ..ConfigMapVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "scratch".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                },
            ]),
            subdomain: Some(service_name(&name)),
            node_selector: (!decode.node_selector.is_empty()).then(|| decode.node_selector.clone()),
            tolerations: (!decode.tolerations.is_empty()).then(|| decode.tolerations.clone()),
            affinity: decode.affinity.clone(),
            service_account_name: decode.service_account_name.clone(),
            priority_class_name: decode.priority_class_name.clone(),
            automount_service_account_token: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUNTIME_UID),
                run_as_group: Some(RUNTIME_UID),
                fs_group: Some(RUNTIME_UID),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let hashed = format!("{}\n{runtime_json}", serde_json::to_string(&template).unwrap_or_default());
    let revision = format!("{:016x}", fnv1a(hashed.as_bytes()))[..10].to_string();
    let selector = selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    Desired { revision, config_map, service, template, replicas: decode.replicas.max(0), selector, name }
}

/// A typed object as JSON with apiVersion and kind (apply patches and `kvpilot render` need them).
pub fn with_type_meta<T: serde::Serialize>(object: &T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = json!(api_version);
    value["kind"] = json!(kind);
    value
}

impl Desired {
    /// Everything a fresh InferenceDeployment gets, as it is applied: the ConfigMap, the
    /// Service and pods 0..replicas.
    pub fn objects(&self) -> Vec<serde_json::Value> {
        let mut objects =
            vec![with_type_meta(&self.config_map, "v1", "ConfigMap"), with_type_meta(&self.service, "v1", "Service")];
        objects.extend((0..self.replicas as u32).map(|ordinal| with_type_meta(&self.pod(ordinal), "v1", "Pod")));
        objects
    }

    /// The pod with `ordinal` at this revision.
    pub fn pod(&self, ordinal: u32) -> Pod {
        let mut pod = self.template.clone();
        let pod_name = pod_name(&self.name, ordinal);
        pod.metadata.name = Some(pod_name.clone());
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert(LABEL_REVISION.into(), self.revision.clone());
        labels.insert(LABEL_ORDINAL.into(), ordinal.to_string());
        if let Some(spec) = pod.spec.as_mut() {
            spec.hostname = Some(pod_name);
        }
        pod
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::InferenceDeploymentSpec;
    use crate::policy::assess;

    fn resource(tp: i32) -> InferenceDeployment {
        let config = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/configs/llama-3.1-8b-instruct.json"
        ))
        .unwrap();
        let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"inline": serde_json::from_str::<serde_json::Value>(&config).unwrap()}},
            "decode": {"replicas": 3, "tensorParallel": tp, "podLabels": {"team": "a", LABEL_INSTANCE: "spoofed"}}
        }))
        .unwrap();
        let mut resource = InferenceDeployment::new("llama", spec);
        resource.metadata.namespace = Some("serving".into());
        resource.metadata.uid = Some("uid-1".into());
        resource
    }

    fn render(resource: &InferenceDeployment) -> Desired {
        let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
        desired_state(
            resource,
            &assess(&resource.spec, &config, &ReleaseChoice::default_newest()).unwrap(),
            &RenderOptions { runtime_image: "kvpilot:test".into(), default_release: ReleaseChoice::default_newest() },
        )
    }

    #[test]
    fn pods_are_owned_labelled_secured_and_request_gpus() {
        let desired = render(&resource(2));
        let pod = desired.pod(1);
        assert_eq!(pod.metadata.name.as_deref(), Some("llama-decode-1"));
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_INSTANCE], "llama", "user labels cannot steal the selector");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[LABEL_REVISION], desired.revision);
        assert_eq!(pod.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        let container = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(container.resources.as_ref().unwrap().limits.as_ref().unwrap()[GPU_RESOURCE], Quantity("2".into()));
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(
            (security.run_as_non_root, security.allow_privilege_escalation, security.read_only_root_filesystem),
            (Some(true), Some(false), Some(true))
        );
        assert_eq!(container.args.as_ref().unwrap()[..3], ["cache-runtime", "--config", "/etc/kvpilot/runtime.json"]);
        assert_eq!(desired.selector, "app.kubernetes.io/instance=llama,app.kubernetes.io/name=kvpilot-decode");
    }

    #[test]
    fn the_revision_covers_what_affects_a_pod_and_nothing_else() {
        let base = render(&resource(1));
        assert_eq!(render(&resource(1)).revision, base.revision, "deterministic");
        assert_ne!(render(&resource(2)).revision, base.revision, "TP changes the pods");
        let mut scaled = resource(1);
        scaled.spec.decode.replicas = 7;
        assert_eq!(render(&scaled).revision, base.revision, "scaling is not a rollout");
        let mut relabelled = resource(1);
        relabelled.spec.decode.pod_labels.insert("team".into(), "b".into());
        assert_ne!(render(&relabelled).revision, base.revision);
    }
}
