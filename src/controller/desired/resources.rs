//! The resources of the containers kvpilot creates. Every one has CPU and memory requests, so no
//! pod is BestEffort (the first the kubelet evicts): an SGLang container takes its fleet's
//! `resources` as given and fills in what is missing from what kvpilot knows the server holds in
//! RAM, `qos: Guaranteed` makes its requests its limits, and kvpilot's own containers (the
//! cache runtime and the connector installer) are Guaranteed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::FleetRole;
use crate::api::{FleetSpec, InferenceDeploymentSpec, Qos, format_bytes, parse_bytes};
use crate::sglang::server;

/// The GPU resource requested per pod.
pub(super) const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// `/dev/shm` when a fleet's `shmSize` is unset.
pub(super) const DEFAULT_SHM_SIZE: &str = "16Gi";
/// CPU an SGLang server asks for per GPU it drives (each rank's scheduler process, with the
/// tokenizer and detokenizer beside them), when its fleet sets none.
const CPU_PER_GPU: u64 = 2;
/// The least CPU an SGLang server asks for, when its fleet sets none.
const MIN_SERVER_CPU: u64 = 4;
/// Memory each rank's process holds besides what kvpilot counts (Python, the CUDA context's
/// pinned host buffers), when its fleet sets none.
const PROCESS_MEMORY_PER_GPU: u64 = 4 << 30;
/// What the connector installer needs to copy a few Python files.
const INSTALLER_CPU: &str = "100m";
const INSTALLER_MEMORY: &str = "64Mi";
/// The router's requests, when `spec.router.resources` sets none.
const ROUTER_CPU: &str = "500m";
const ROUTER_MEMORY: &str = "512Mi";

/// What kvpilot knows an SGLang server of a fleet holds in RAM, per pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerMemory {
    /// The memory-backed `/dev/shm` (NCCL and SGLang's shared host buffers), charged to the pod.
    pub shm: u64,
    /// The HiCache host pools `spec.cache.hostPoolSize` sizes, every pool of every rank on the
    /// pod; None when SGLang sizes them from the GPU's device pool, which kvpilot cannot know.
    pub host_pools: Option<u64>,
}

impl ServerMemory {
    /// The memory of a server of the `role` fleet of `spec`.
    pub fn of(spec: &InferenceDeploymentSpec, role: FleetRole, fleet: &FleetSpec) -> Self {
        let shm = fleet.shm_size.as_ref().and_then(|q| parse_bytes(&q.0).ok());
        Self {
            shm: shm.unwrap_or_else(|| parse_bytes(DEFAULT_SHM_SIZE).unwrap_or_default()),
            host_pools: server::host_pool_memory(spec).filter(|_| role == FleetRole::Decode),
        }
    }
}

/// A size as a memory quantity: in the largest binary unit it fills, rounded up to a whole MiB.
fn memory_quantity(bytes: u64) -> Quantity {
    Quantity(format_bytes(bytes.div_ceil(1 << 20).saturating_mul(1 << 20)))
}

fn memory_of(values: Option<&BTreeMap<String, Quantity>>) -> Option<u64> {
    values?.get("memory").and_then(|q| parse_bytes(&q.0).ok())
}

/// The memory quantity as the user wrote it.
fn memory_text(values: Option<&BTreeMap<String, Quantity>>) -> Option<&str> {
    values?.get("memory").map(|q| q.0.as_str())
}

/// The SGLang container's resources. Memory the user set gets the host pools added (kvpilot put
/// them there; [`warnings`] says so); a missing memory request is the limit, as the API server
/// would default it, else /dev/shm, the host pools and each rank's process; a missing CPU
/// request is the limit, else 2 per GPU (at least 4). Under `qos: Guaranteed` the limits are the
/// requests (or the requests the limits the user set). GPUs and extended resources are limits
/// equal to requests.
pub(super) fn server(fleet: &FleetSpec, memory: ServerMemory) -> ResourceRequirements {
    let mut resources = fleet.resources.clone().unwrap_or_default();
    let gpus = u64::try_from(fleet.effective_gpus_per_pod()).unwrap_or(1);
    let pools = memory.host_pools.unwrap_or(0);
    let limits = resources.limits.get_or_insert_default();
    let memory_limit = memory_of(Some(limits)).map(|limit| limit.saturating_add(pools));
    if let Some(limit) = memory_limit {
        limits.insert("memory".into(), memory_quantity(limit));
    }
    let cpu_limit = limits.get("cpu").cloned();
    let requests = resources.requests.get_or_insert_default();
    let memory_request = match (memory_of(Some(requests)), memory_limit) {
        (Some(request), _) => request.saturating_add(pools),
        (None, Some(limit)) => limit,
        (None, None) => memory.shm.saturating_add(pools).saturating_add(PROCESS_MEMORY_PER_GPU.saturating_mul(gpus)),
    };
    requests.insert("memory".into(), memory_quantity(memory_request));
    if !requests.contains_key("cpu") {
        let cpu = cpu_limit.unwrap_or_else(|| Quantity((CPU_PER_GPU * gpus).max(MIN_SERVER_CPU).to_string()));
        requests.insert("cpu".into(), cpu);
    }
    if fleet.qos == Qos::Guaranteed {
        let requests = resources.requests.get_or_insert_default();
        let limits = resources.limits.get_or_insert_default();
        for name in ["cpu", "memory"] {
            match limits.get(name) {
                Some(limit) => requests.insert(name.into(), limit.clone()),
                None => limits.insert(name.into(), requests[name].clone()),
            };
        }
    }
    let mut extended = fleet.extra_resources.clone();
    extended.insert(GPU_RESOURCE.into(), Quantity(fleet.effective_gpus_per_pod().to_string()));
    resources.limits.get_or_insert_default().extend(extended.clone());
    // Extended resources must have requests equal to limits.
    resources.requests.get_or_insert_default().extend(extended);
    resources
}

/// Requests equal to limits: a Guaranteed container.
fn guaranteed(cpu: &str, memory: Quantity) -> ResourceRequirements {
    let values = BTreeMap::from([("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), memory)]);
    ResourceRequirements { requests: Some(values.clone()), limits: Some(values), ..ResourceRequirements::default() }
}

/// The cache runtime sidecar: Guaranteed, `cpu` and its memory [`crate::runtime::memory_limit`].
pub(super) fn cache_runtime(cpu: &str, capacity: u64) -> ResourceRequirements {
    guaranteed(cpu, memory_quantity(crate::runtime::memory_limit(capacity)))
}

/// The connector installer init container: Guaranteed.
pub(super) fn installer() -> ResourceRequirements {
    guaranteed(INSTALLER_CPU, Quantity(INSTALLER_MEMORY.into()))
}

/// The router container: `spec.router.resources`, with CPU and memory requests filled in, and a
/// memory limit (its request, where the spec sets none): a router that leaks is restarted
/// alone instead of pressing on the node's servers. No CPU limit is added, so a burst of
/// requests is not throttled; a user who wants one sets it.
pub(super) fn router(given: Option<&ResourceRequirements>) -> ResourceRequirements {
    let mut resources = given.cloned().unwrap_or_default();
    let limits = resources.limits.clone().unwrap_or_default();
    let requests = resources.requests.get_or_insert_default();
    for (name, default) in [("cpu", ROUTER_CPU), ("memory", ROUTER_MEMORY)] {
        if !requests.contains_key(name) {
            requests.insert(name.into(), limits.get(name).cloned().unwrap_or_else(|| Quantity(default.into())));
        }
    }
    let memory = requests["memory"].clone();
    resources.limits.get_or_insert_default().entry("memory".into()).or_insert(memory);
    resources
}

/// What `check` and status say about a fleet's memory: a limit the user set that cannot hold
/// what the flags put in RAM, and memory kvpilot raised, each with the numbers and the field.
pub fn warnings(spec: &InferenceDeploymentSpec) -> Vec<String> {
    let mut fleets = vec![(FleetRole::Decode, &spec.decode)];
    fleets.extend(spec.prefill.as_deref().map(|prefill| (FleetRole::Prefill, prefill)));
    let mut warnings = Vec::new();
    for (role, fleet) in fleets {
        let field = role.field();
        let memory = ServerMemory::of(spec, role, fleet);
        let given = fleet.resources.as_ref();
        let limit = given.and_then(|r| memory_of(r.limits.as_ref()));
        if let Some(limit) = limit
            && limit < memory.shm
        {
            warnings.push(format!(
                "{field}.resources.limits.memory {} cannot hold the {} /dev/shm of {field}.shmSize (NCCL and SGLang's \
                 shared buffers live there, charged to the pod's memory): raise the limit above {}, or lower shmSize",
                memory_text(given.and_then(|r| r.limits.as_ref())).unwrap_or_default(),
                format_bytes(memory.shm),
                format_bytes(memory.shm),
            ));
        }
        let Some(pools) = memory.host_pools else { continue };
        for (kind, values) in
            [("requests", given.and_then(|r| r.requests.as_ref())), ("limits", given.and_then(|r| r.limits.as_ref()))]
        {
            if let (Some(set), Some(text)) = (memory_of(values), memory_text(values)) {
                warnings.push(format!(
                    "{field}.resources.{kind}.memory {text} becomes {} on the SGLang container: kvpilot adds the {} of \
                     HiCache host pools spec.cache.hostPoolSize puts in RAM on each pod (give the memory without them, \
                     or lower hostPoolSize)",
                    memory_quantity(set.saturating_add(pools)).0,
                    memory_quantity(pools).0,
                ));
            }
        }
    }
    warnings
}
