//! `spec.router`: the SGLang router in front of both fleets.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ImagePullPolicy;

/// The port the router listens on and its Service's port, unless set.
const DEFAULT_ROUTER_PORT: i32 = 8000;

/// The SGLang router of a PD service: a Deployment that finds the prefill and decode servers by
/// their labels (Kubernetes service discovery in its own namespace) and a Service in front of it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "RouterSpec::default", rename_all = "camelCase")]
pub struct RouterSpec {
    /// Run the router (default true when spec.prefill is set).
    pub enabled: bool,
    /// Router pods (they share nothing; each discovers every server).
    #[x_kube(validation = Rule::new("self >= 0").message("spec.router.replicas must not be negative"))]
    pub replicas: i32,
    /// Router pods a voluntary disruption may take down at once: its PodDisruptionBudget
    /// (default 1).
    #[x_kube(validation = Rule::new("self >= 0").message("spec.router.maxUnavailable must not be negative"))]
    pub max_unavailable: i32,
    /// Which router package the image runs: `sglang-router` (`python3 -m
    /// sglang_router.launch_router`, default) or its successor `smg` (`python3 -m
    /// smg.launch_router`); both take the same flags.
    pub launcher: RouterLauncher,
    /// Router image. Unset: the operator's --router-image, else the servers' SGLang image
    /// (SGLang's images ship the router).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy of the router container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// How the router picks a server (`--policy`).
    pub policy: RouterPolicy,
    /// Port the router listens on.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.router.port must be between 1 and 65535"))]
    pub port: i32,
    /// The router's Service.
    pub service: RouterServiceSpec,
    /// Resources of the router container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the router pods.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the router pods.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Extra router arguments, appended after kvpilot's. A flag kvpilot sets (PD mode, service
    /// discovery, selectors, host, port, policy) is refused, naming the field to use instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

impl Default for RouterSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            replicas: 1,
            max_unavailable: 1,
            launcher: RouterLauncher::default(),
            image: None,
            image_pull_policy: None,
            policy: RouterPolicy::default(),
            port: DEFAULT_ROUTER_PORT,
            service: RouterServiceSpec::default(),
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            extra_args: Vec::new(),
        }
    }
}

/// The Python package whose launcher the router image runs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RouterLauncher {
    /// `sglang-router` (`python3 -m sglang_router.launch_router`).
    #[default]
    SglangRouter,
    /// `smg`, the router's successor (`python3 -m smg.launch_router`).
    Smg,
}

impl RouterLauncher {
    /// The module `python3 -m` runs.
    pub fn module(self) -> &'static str {
        match self {
            Self::SglangRouter => "sglang_router.launch_router",
            Self::Smg => "smg.launch_router",
        }
    }
}

/// The router's load-balancing policy (`--policy`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RouterPolicy {
    /// Prefer the server holding the longest cached prefix, balanced by load.
    #[default]
    CacheAware,
    /// Round robin.
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// The less loaded of two random servers.
    PowerOfTwo,
}

impl RouterPolicy {
    /// The value as the router's flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CacheAware => "cache_aware",
            Self::RoundRobin => "round_robin",
            Self::Random => "random",
            Self::PowerOfTwo => "power_of_two",
        }
    }
}

/// The router's Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "RouterServiceSpec::default", rename_all = "camelCase")]
pub struct RouterServiceSpec {
    /// Service port (the OpenAI-compatible endpoint).
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.router.service.port must be between 1 and 65535"))]
    pub port: i32,
    /// Service type.
    #[serde(rename = "type")]
    pub type_: RouterServiceType,
}

impl Default for RouterServiceSpec {
    fn default() -> Self {
        Self { port: DEFAULT_ROUTER_PORT, type_: RouterServiceType::default() }
    }
}

/// Kubernetes Service types the router's Service may have.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RouterServiceType {
    /// Reachable inside the cluster.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through the cloud's load balancer.
    LoadBalancer,
}

impl RouterServiceType {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}
