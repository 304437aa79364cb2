//! The router's objects, all named `NAME-router`: a ServiceAccount with a Role that may only read
//! the namespace's pods (it finds the servers by label), the Deployment, and the Service that is
//! the resource's endpoint.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, PodSpec, PodTemplateSpec, Service, ServiceAccount,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::container::{http_probe, image_pull_policy, restricted_pod_security, restricted_security};
use super::disruption_budget;
use super::{
    FleetRole, LABEL_KV_COMPAT, ROUTER_APP, RenderOptions, app_labels, managed_labels, owned_meta, resources,
    router_name, router_selector, with_type_meta,
};
use crate::api::{InferenceDeployment, RouterSpec};
use crate::policy::Assessment;
use crate::release::ReleaseChoice;
use crate::sglang::server::{self, ROUTER_METRICS_PORT};

/// The router container's name.
const ROUTER_CONTAINER: &str = "router";
/// The user and group the router runs as: not root, in any image (the SGLang image's files are
/// world-readable; the router writes nothing but under `/tmp`).
pub const ROUTER_UID: i64 = 65532;
/// The writable directory of a router whose root filesystem is read-only, also its `HOME`.
const ROUTER_TMP: &str = "/tmp";

/// The router's objects, all named `NAME-router`.
#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    pub service_account: ServiceAccount,
    /// May get, list and watch the pods of the resource's namespace, and nothing else.
    pub role: Role,
    pub role_binding: RoleBinding,
    pub deployment: Deployment,
    pub service: Service,
    /// Router pods an eviction may take down at once.
    pub disruption_budget: PodDisruptionBudget,
    /// `http://NAME-router.NAMESPACE.svc:PORT`.
    pub endpoint: String,
    /// The KV compatibility key whose servers its selectors select (its Deployment's and pods'
    /// label [`LABEL_KV_COMPAT`]).
    pub kv_compat: String,
}

/// The router's image: `spec.router.image`, else the operator's router image, else the SGLang
/// image of the release (it ships `sglang_router`).
fn router_image(router: &RouterSpec, release: &ReleaseChoice, options: &RenderOptions) -> String {
    let template = options.router_image.as_deref().unwrap_or(&options.sglang_image);
    router.image.clone().unwrap_or_else(|| template.replace("{version}", &release.requested.to_string()))
}

/// The router of `resource` as `router` (its effective spec.router) describes it.
pub(super) fn render_router(
    resource: &InferenceDeployment,
    assessment: &Assessment,
    options: &RenderOptions,
    router: &RouterSpec,
    kv_compat: &str,
    owner: &OwnerReference,
) -> Router {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let namespace = resource.metadata.namespace.clone();
    let object_name = router_name(&name);
    let selector = app_labels(&name, ROUTER_APP);
    let labels = managed_labels(&selector);
    let mut keyed = labels.clone();
    keyed.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
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
        &router_selector(&name, FleetRole::Prefill, kv_compat),
        &router_selector(&name, FleetRole::Decode, kv_compat),
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
        resources: Some(resources::router(router.resources.as_ref())),
        readiness_probe: Some(http_probe("http", "/readiness", 5, 5, 3)),
        liveness_probe: Some(http_probe("http", "/liveness", 10, 5, 3)),
        // Python and the launcher write their caches and temporary files under HOME and /tmp.
        env: Some(vec![EnvVar { name: "HOME".into(), value: Some(ROUTER_TMP.into()), ..EnvVar::default() }]),
        volume_mounts: Some(vec![VolumeMount {
            name: "tmp".into(),
            mount_path: ROUTER_TMP.into(),
            ..VolumeMount::default()
        }]),
        security_context: Some(restricted_security(ROUTER_UID)),
        ..Container::default()
    };
    let mut template_labels = selector.clone();
    template_labels.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
    let deployment = Deployment {
        metadata: owned_meta(object_name.clone(), &namespace, keyed, owner),
        spec: Some(DeploymentSpec {
            replicas: Some(router.replicas.max(0)),
            selector: LabelSelector { match_labels: Some(selector.clone()), ..LabelSelector::default() },
            // Moving to another key starts router pods of the new key and stops one of the old
            // only once a new one is ready: the service never routes with fewer router pods, and
            // each pod selects one key from start to end.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::String("25%".into())),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(template_labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "tmp".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    }]),
                    security_context: Some(restricted_pod_security(ROUTER_UID)),
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
            selector: Some(selector.clone()),
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
    let disruption_budget =
        disruption_budget::router(object_name.clone(), &namespace, &selector, owner, router.max_unavailable);
    let endpoint = format!("http://{object_name}.{}.svc:{}", namespace.unwrap_or_default(), router.service.port);
    Router {
        service_account,
        role,
        role_binding,
        deployment,
        service,
        disruption_budget,
        endpoint,
        kv_compat: kv_compat.into(),
    }
}

impl Router {
    /// Points the router at the servers of the KV compatibility key `kv_compat`: its selectors
    /// and its key label. A changed Deployment template rolls the router pods over to it.
    pub fn select(&mut self, kv_compat: &str) {
        let (from, to) = (format!("{LABEL_KV_COMPAT}={}", self.kv_compat), format!("{LABEL_KV_COMPAT}={kv_compat}"));
        if let Some(labels) = self.deployment.metadata.labels.as_mut() {
            labels.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
        }
        if let Some(template) = self.deployment.spec.as_mut().map(|spec| &mut spec.template) {
            if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
                labels.insert(LABEL_KV_COMPAT.into(), kv_compat.into());
            }
            let containers = template.spec.iter_mut().flat_map(|pod| pod.containers.iter_mut());
            for arg in containers.flat_map(|c| c.args.iter_mut().flatten()) {
                if *arg == from {
                    arg.clone_from(&to);
                }
            }
        }
        self.kv_compat = kv_compat.into();
    }

    /// The router's objects, in the order they are applied (its identity first).
    pub fn objects(&self) -> Vec<serde_json::Value> {
        vec![
            with_type_meta(&self.service_account, "v1", "ServiceAccount"),
            with_type_meta(&self.role, "rbac.authorization.k8s.io/v1", "Role"),
            with_type_meta(&self.role_binding, "rbac.authorization.k8s.io/v1", "RoleBinding"),
            with_type_meta(&self.deployment, "apps/v1", "Deployment"),
            with_type_meta(&self.service, "v1", "Service"),
            with_type_meta(&self.disruption_budget, "policy/v1", "PodDisruptionBudget"),
        ]
    }
}
