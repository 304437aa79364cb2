//! `spec.decode` and `spec.prefill`: a fleet of SGLang servers and its pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, EnvVar, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A fleet of SGLang servers: the decode fleet (`spec.decode`) or the prefill fleet
/// (`spec.prefill`). Validation messages name the field; the API server prefixes its path.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "FleetSpec::default", rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.nodesPerReplica) || (self.tensorParallel * self.pipelineParallel) % self.nodesPerReplica == 0"
).message("nodesPerReplica must divide tensorParallel × pipelineParallel: each pod of a replica holds an equal share of its GPUs"))]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas")
    .message("minReplicas must not be above maxReplicas"))]
pub struct FleetSpec {
    /// Number of replicas: SGLang servers of this fleet (`kubectl scale` sets the decode fleet's).
    /// With `ratio` (spec.prefill only) the prefill fleet's follows the decode fleet's instead.
    #[x_kube(validation = Rule::new("self >= 0").message("replicas must not be negative"))]
    pub replicas: i32,
    /// spec.prefill only: prefill replicas per decode replica. The prefill fleet then runs
    /// ceil(spec.decode.replicas × ratio) replicas, within minReplicas and maxReplicas, so
    /// scaling decode (an HPA or KEDA through the scale subresource, `kubectl scale infd`) keeps
    /// prefill in proportion; status shows both desired counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0").message("ratio must be greater than 0"))]
    pub ratio: Option<f64>,
    /// spec.prefill only: the fewest prefill replicas `ratio` may give.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("minReplicas must not be negative"))]
    pub min_replicas: Option<i32>,
    /// spec.prefill only: the most prefill replicas `ratio` may give.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("maxReplicas must not be negative"))]
    pub max_replicas: Option<i32>,
    /// Replicas of this fleet a voluntary disruption (a node drain, an eviction) may take down
    /// at once, a multi-node replica counting as one: the fleet's PodDisruptionBudget (default 1).
    #[x_kube(validation = Rule::new("self >= 0").message("maxUnavailable must not be negative"))]
    pub max_unavailable: i32,
    /// The pods' QoS class: `Burstable` (default: requests filled in where the spec sets none,
    /// no CPU or memory limit added) or `Guaranteed` (the SGLang container's requests equal its
    /// limits, so the kubelet evicts it last; kvpilot's own containers always are).
    pub qos: Qos,
    /// Tensor-parallel size.
    #[x_kube(validation = Rule::new("self >= 1").message("tensorParallel must be at least 1"))]
    pub tensor_parallel: i32,
    /// Data-parallel size.
    #[x_kube(validation = Rule::new("self >= 1").message("dataParallel must be at least 1"))]
    pub data_parallel: i32,
    /// Pipeline-parallel size.
    #[x_kube(validation = Rule::new("self >= 1").message("pipelineParallel must be at least 1"))]
    pub pipeline_parallel: i32,
    /// Whether the servers use DP attention (attention TP = TP / DP).
    pub enable_dp_attention: bool,
    /// Tokens per KV page (`--page-size`). Unset: 1 (SGLang's default) on the decode fleet; the
    /// prefill fleet takes the decode fleet's, since both sides must page alike (rule P1).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("pageSize must be at least 1"))]
    pub page_size: Option<i32>,
    /// KV cache dtype (SGLang's `--kv-cache-dtype`: `auto`, `fp8_e4m3`, `mxfp8`, …);
    /// defaults to `auto`, the model's dtype.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("kvCacheDtype must not be empty"))]
    pub kv_cache_dtype: Option<String>,
    /// SWA-layer KV tokens per full-layer KV token of a hybrid-SWA pool (SGLang's
    /// `--swa-full-tokens-ratio`, in (0, 1]); unset: SGLang's default (0.8, or the model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swa_full_tokens_ratio: Option<f64>,
    /// GPUs per pod; defaults to tensorParallel × pipelineParallel (× dataParallel for
    /// data-parallel replicas without DP attention) / nodesPerReplica.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("gpusPerPod must be at least 1"))]
    pub gpus_per_pod: Option<i32>,
    /// Pods per replica (default 1). Above 1, a replica is a group of pods
    /// `NAME-ROLE-REPLICA-RANK` that run one SGLang server together (`--nnodes`, `--node-rank`,
    /// `--dist-init-addr` of rank 0), created, rolled, counted and restarted as one unit; each
    /// pod gets tensorParallel × pipelineParallel / nodesPerReplica GPUs.
    #[x_kube(validation = Rule::new("self >= 1").message("nodesPerReplica must be at least 1"))]
    pub nodes_per_replica: i32,
    /// Port of SGLang's HTTP server (API, `/health`, metrics).
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("port must be between 1 and 65535"))]
    pub port: i32,
    /// Size of the memory-backed /dev/shm (NCCL and the host KV pool live there); default 16Gi.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<Quantity>,
    /// How long a server may take to load the model before its startup probe gives up
    /// (default 1800 s, probed every 30 s).
    #[x_kube(validation = Rule::new("self >= 30").message("startupTimeoutSeconds must be at least 30"))]
    pub startup_timeout_seconds: i32,
    /// How long a deleted pod has to finish its requests (default 60 s).
    #[x_kube(validation = Rule::new("self >= 0").message("terminationGracePeriodSeconds must not be negative"))]
    pub termination_grace_period_seconds: i64,
    /// Extended resources each pod requests besides its GPUs, for example
    /// `rdma/rdma_shared_device_a: 1` (requests equal limits).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_resources: BTreeMap<String, Quantity>,
    /// Linux capabilities added to the SGLang container, for example `IPC_LOCK` for RDMA.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Run the pods in the node's network namespace (with `dnsPolicy: ClusterFirstWithHostNet`),
    /// as RDMA fleets without an RDMA device plugin do.
    pub host_network: bool,
    /// InfiniBand devices for the KV transfer (`--disaggregation-ib-device`, e.g. `mlx5_0,mlx5_1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("ibDevice must not be empty"))]
    pub ib_device: Option<String>,
    /// SGLang image of the servers. Unset: the operator's --sglang-image for the
    /// resolved release (`lmsysorg/sglang:v{version}-cu129` by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy of the SGLang container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Resources of the SGLang container; the GPU limit is set from gpusPerPod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the pods.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Extra environment variables of the SGLang container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Extra SGLang server arguments, appended after the ones kvpilot renders. A flag that sets
    /// something kvpilot decides (retraction backup, transfer backend, parallel sizes, page
    /// size, caches, ports, …) is refused, naming the spec field to use instead; other flags
    /// pass through.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Extra labels of the pods.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Extra annotations of the pods.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Service account of the pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Priority class of the pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// How pods of an old revision are replaced.
    pub rollout: RolloutSpec,
}

impl Default for FleetSpec {
    fn default() -> Self {
        Self {
            replicas: 1,
            ratio: None,
            min_replicas: None,
            max_replicas: None,
            max_unavailable: 1,
            qos: Qos::default(),
            tensor_parallel: 1,
            data_parallel: 1,
            pipeline_parallel: 1,
            enable_dp_attention: false,
            page_size: None,
            kv_cache_dtype: None,
            swa_full_tokens_ratio: None,
            gpus_per_pod: None,
            nodes_per_replica: 1,
            port: 30000,
            shm_size: None,
            startup_timeout_seconds: 1800,
            termination_grace_period_seconds: 60,
            extra_resources: BTreeMap::new(),
            capabilities: Vec::new(),
            host_network: false,
            ib_device: None,
            image: None,
            image_pull_policy: None,
            resources: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            affinity: None,
            env: Vec::new(),
            extra_args: Vec::new(),
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            service_account_name: None,
            priority_class_name: None,
            rollout: RolloutSpec::default(),
        }
    }
}

impl FleetSpec {
    /// Tokens per KV page of a server of this fleet: `pageSize`, or SGLang's default of 1. (A
    /// prefill fleet without one takes the decode fleet's; see `sglang::server::effective_spec`.)
    pub fn effective_page_size(&self) -> i32 {
        self.page_size.unwrap_or(1)
    }

    /// GPUs each pod requests: `gpusPerPod`, or one server's GPUs spread over nodesPerReplica
    /// pods.
    pub fn effective_gpus_per_pod(&self) -> i32 {
        self.gpus_per_pod.unwrap_or(self.gpus_per_server() / self.nodes_per_replica.max(1))
    }

    /// GPUs one SGLang server of this fleet runs on: tensorParallel × pipelineParallel, times
    /// dataParallel for data-parallel replicas (without DP attention SGLang starts each replica
    /// on GPUs of its own; DP attention splits the TP ranks instead).
    pub fn gpus_per_server(&self) -> i32 {
        let replicas = if self.enable_dp_attention { 1 } else { self.data_parallel.max(1) };
        self.tensor_parallel.saturating_mul(self.pipeline_parallel).saturating_mul(replicas)
    }

    /// The value of an environment variable set literally in `env`, if any.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|e| e.name == name).and_then(|e| e.value.as_deref())
    }

    /// Whether `env` turns the boolean `SGLANG_*` variable `name` on, as SGLang's `EnvBool`
    /// reads it: `true`, `1`, `yes` or `y` in any case, nothing trimmed; any other value is
    /// invalid and SGLang falls back to the default, off for every variable kvpilot reads.
    pub fn env_on(&self, name: &str) -> bool {
        self.env_value(name).is_some_and(|v| matches!(v.to_lowercase().as_str(), "true" | "1" | "yes" | "y"))
    }
}

/// The QoS class a fleet's pods get.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Qos {
    /// Requests filled in, limits as given.
    #[default]
    Burstable,
    /// Every container's requests equal its limits.
    Guaranteed,
}

/// Container image pull policy.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImagePullPolicy {
    /// Always pull.
    Always,
    /// Pull when the image is not on the node.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// Rollout of a new pod revision.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Pods that may be unavailable during a rollout (count or percentage of replicas).
    pub max_unavailable: IntOrString,
    /// Pods that may be created above replicas during a rollout (count or percentage).
    pub max_surge: IntOrString,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self { max_unavailable: IntOrString::Int(1), max_surge: IntOrString::Int(0) }
    }
}
