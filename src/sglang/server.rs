//! The decode server's own command line: what kvpilot writes after the policy's flags (address,
//! port, served name, multi-node ranks, IB devices), from one table that also tells which flags
//! `spec.decode.extraArgs` may not set, and the spec checks that come with running the pods.

use crate::api::{HICACHE_GIGABYTE, InferenceDeploymentSpec, ModelSpec, quantity_bytes};
use crate::layout::LayoutError;
use crate::policy::{self, Assessment, Outcome, Violation};
use crate::release::{Release, ReleaseChoice};

use super::args::sglang_args;
use super::flags::FLAGS;

/// Where a volume with the weights is mounted in the SGLang container.
pub const MODELS_DIR: &str = "/models";
/// The port rank 0 of a multi-node replica listens on for the other ranks (`--dist-init-addr`).
pub const DIST_INIT_PORT: i32 = 5000;

/// A flag kvpilot writes from the pod's spec rather than from the policy's settings.
#[derive(Debug, PartialEq, Eq)]
pub struct PodFlag {
    /// SGLang's spellings; the first is what kvpilot writes.
    pub names: &'static [&'static str],
    /// The spec field that decides it.
    pub field: &'static str,
}

const fn pod_flag(names: &'static [&'static str], field: &'static str) -> PodFlag {
    PodFlag { names, field }
}

const HOST: PodFlag = pod_flag(&["--host"], "the pod (kvpilot listens on every address)");
const PORT: PodFlag = pod_flag(&["--port"], "spec.decode.port");
const SERVED_NAME: PodFlag = pod_flag(&["--served-model-name"], "spec.model.name");
const METRICS: PodFlag = pod_flag(&["--enable-metrics"], "the pod (kvpilot always enables metrics)");
const IB_DEVICE: PodFlag = pod_flag(&["--disaggregation-ib-device"], "spec.decode.ibDevice");
const NNODES: PodFlag = pod_flag(&["--nnodes"], "spec.decode.nodesPerReplica");
const NODE_RANK: PodFlag = pod_flag(&["--node-rank"], "spec.decode.nodesPerReplica");
const DIST_INIT: PodFlag = pod_flag(&["--dist-init-addr", "--nccl-init-addr"], "spec.decode.nodesPerReplica");

/// Every flag kvpilot writes from the pod's spec.
pub const POD_FLAGS: &[PodFlag] = &[HOST, PORT, SERVED_NAME, METRICS, IB_DEVICE, NNODES, NODE_RANK, DIST_INIT];

const STORAGE_CONFIG: PodFlag = pod_flag(&["--hicache-storage-backend-extra-config"], "spec.cache");
const MEM_LAYOUT: PodFlag = pod_flag(&["--hicache-mem-layout"], "spec.cache");
const HOST_POOL_SIZE: PodFlag = pod_flag(&["--hicache-size"], "spec.cache.hostPoolSize");

/// The flags that connect SGLang to the cache runtime; kvpilot's with `spec.cache` set (without
/// it, `extraArgs` may configure another backend). `--hicache-storage-backend` itself is a
/// policy setting (spec.disaggregation.hicacheStorageBackend), always kvpilot's.
pub const CACHE_FLAGS: &[PodFlag] = &[STORAGE_CONFIG, MEM_LAYOUT, HOST_POOL_SIZE];

/// SGLang's storage backend that loads a connector class named in the extra config.
pub const CACHE_STORAGE_BACKEND: &str = "dynamic";

/// The Unix socket of the cache runtime, in the directory the pod's containers share.
pub const CACHE_SOCKET: &str = "/run/kvpilot/cache.sock";

/// SGLang's `--hicache-storage-backend-extra-config` for the kvpilot connector: inline JSON
/// (the shm allocator and decode offload read no `@file`), zero-copy v1 calls over a memfd host
/// pool the sidecar maps.
pub fn storage_backend_config() -> String {
    serde_json::json!({
        "backend_name": "kvpilot",
        "module_path": "kvpilot_sglang.hicache",
        "class_name": "KvpilotStorage",
        "interface_v1": 1,
        "allocator": "shm",
        "socket": CACHE_SOCKET,
    })
    .to_string()
}

/// The spec as the policy sees it: `spec.cache` turns on the decode settings it stands for
/// (offload writes; reuse reads through a radix cache over a hierarchical cache).
pub fn effective_spec(spec: &InferenceDeploymentSpec) -> std::borrow::Cow<'_, InferenceDeploymentSpec> {
    let Some(cache) = &spec.cache else { return std::borrow::Cow::Borrowed(spec) };
    let mut spec = spec.clone();
    let d = &mut spec.disaggregation;
    d.decode_offload_kv_cache |= cache.offload;
    d.decode_radix_cache |= cache.reuse;
    d.hierarchical_cache |= cache.reuse;
    // The store is the storage backend: S6 is checked against it, and the flag table writes it.
    d.hicache_storage_backend = Some(CACHE_STORAGE_BACKEND.into());
    std::borrow::Cow::Owned(spec)
}

/// Bytes of host memory the SGLang container of each decode pod holds in HiCache host pools:
/// `hostPoolSize` (as SGLang rounds it) per pool, per GPU rank on the pod. None without a
/// usable `spec.cache.hostPoolSize` (SGLang then sizes the pools from the GPU's device pool).
pub fn host_pool_memory(spec: &InferenceDeploymentSpec) -> Option<u64> {
    let cache = spec.cache.as_ref()?;
    let gigabytes = cache.host_pool_gigabytes()?.ok()?;
    let ranks = u64::try_from(spec.decode.effective_gpus_per_pod()).ok()?;
    gigabytes.checked_mul(HICACHE_GIGABYTE)?.checked_mul(cache.host_pools_per_rank())?.checked_mul(ranks)
}

/// The `--model-path` of the decode servers: the weights' directory in the mounted volume, or
/// the hub id SGLang downloads.
pub fn model_path(model: &ModelSpec) -> String {
    match model.weights_volume() {
        Some(volume) if !volume.path.trim_matches('/').is_empty() => {
            format!("{MODELS_DIR}/{}", volume.path.trim_matches('/'))
        }
        Some(_) => MODELS_DIR.to_string(),
        None => model.name.clone(),
    }
}

/// The arguments of every decode server of `spec` (after `python3 -m sglang.launch_server`):
/// the policy's flags for the verdict, then the pod's, then `extraArgs`. Multi-node ranks add
/// [`rank_args`] before `extraArgs`.
pub fn decode_args(spec: &InferenceDeploymentSpec, verdict: &policy::Verdict, release: Release) -> Vec<String> {
    let decode = &spec.decode;
    let mut args = sglang_args(spec, verdict, release).decode;
    args.extend([HOST.names[0].to_string(), "0.0.0.0".into()]);
    args.extend([PORT.names[0].to_string(), decode.port.to_string()]);
    args.extend([SERVED_NAME.names[0].to_string(), spec.model.name.clone()]);
    args.push(METRICS.names[0].to_string());
    if let Some(devices) = &decode.ib_device {
        args.extend([IB_DEVICE.names[0].to_string(), devices.clone()]);
    }
    if spec.cache.is_some() {
        // `--hicache-storage-backend dynamic` comes from the policy's settings (effective_spec).
        args.extend([STORAGE_CONFIG.names[0].to_string(), storage_backend_config()]);
        args.extend([MEM_LAYOUT.names[0].to_string(), "page_first".into()]);
    }
    if let Some(Ok(gigabytes)) = spec.cache.as_ref().and_then(|c| c.host_pool_gigabytes()) {
        args.extend([HOST_POOL_SIZE.names[0].to_string(), gigabytes.to_string()]);
    }
    args.extend(decode.extra_args.iter().cloned());
    args
}

/// The flags of rank `rank` of a replica spread over `nodes` pods whose rank 0 is `leader`.
pub fn rank_args(nodes: i32, rank: i32, leader: &str) -> Vec<String> {
    vec![
        NNODES.names[0].to_string(),
        nodes.to_string(),
        NODE_RANK.names[0].to_string(),
        rank.to_string(),
        DIST_INIT.names[0].to_string(),
        format!("{leader}:{DIST_INIT_PORT}"),
    ]
}

/// The flag an `extraArgs` item sets that kvpilot decides, and the spec field deciding it.
/// Reads as argparse does: `--name`, `--name=value`, every alias, and unambiguous prefixes
/// (argparse's `allow_abbrev`), so no spelling gets past the policy.
pub fn owned_flag(arg: &str, cache: bool) -> Option<(&'static str, &'static str)> {
    let name = arg.split_once('=').map_or(arg, |(name, _)| name);
    if !name.starts_with("--") || name.len() < 4 {
        return None;
    }
    let cache_flags = if cache { CACHE_FLAGS } else { &[] };
    let owned = FLAGS
        .iter()
        .map(|flag| (flag.names, flag.field))
        .chain(POD_FLAGS.iter().chain(cache_flags).map(|flag| (flag.names, flag.field)));
    let mut abbreviated = None;
    for (names, field) in owned {
        if names.contains(&name) {
            return Some((names[0], field));
        }
        if abbreviated.is_none() && names.iter().any(|full| full.starts_with(name)) {
            abbreviated = Some((names[0], field));
        }
    }
    abbreviated
}

fn violation(rule: &'static str, field: &'static str, message: String, fix: String) -> Violation {
    Violation { rule, field, message, fix, phase: "spec" }
}

/// What keeps the pods of `spec` from being built as asked: `extraArgs` setting a flag kvpilot
/// decides (K1), a replica whose GPUs do not split evenly over its pods (K2), weights in a
/// volume with no volume source (K3), a cache capacity that is no number of bytes (K4), a storage
/// backend named beside spec.cache's own (K5), a host pool size SGLang cannot take (K6).
pub fn pod_findings(spec: &InferenceDeploymentSpec) -> Vec<Violation> {
    let decode = &spec.decode;
    let mut findings: Vec<Violation> = decode
        .extra_args
        .iter()
        .filter_map(|arg| {
            let (flag, field) = owned_flag(arg, spec.cache.is_some())?;
            let spelled = if arg.split('=').next() == Some(flag) { String::new() } else { format!(" (as {arg})") };
            Some(violation(
                "K1",
                "spec.decode.extraArgs",
                format!("{flag}{spelled} is set by kvpilot from {field}"),
                format!("remove {arg} from spec.decode.extraArgs and set {field} instead"),
            ))
        })
        .collect();
    let gpus = decode.tensor_parallel.saturating_mul(decode.pipeline_parallel);
    let nodes = decode.nodes_per_replica.max(1);
    if gpus % nodes != 0 {
        findings.push(violation(
            "K2",
            "spec.decode.nodesPerReplica",
            format!("{nodes} pods per replica cannot share tensorParallel × pipelineParallel = {gpus} GPUs evenly"),
            "set spec.decode.nodesPerReplica to a divisor of tensorParallel × pipelineParallel".into(),
        ));
    }
    if let Some(per_pod) = decode.gpus_per_pod.filter(|n| nodes > 1 && n * nodes != gpus) {
        findings.push(violation(
            "K2",
            "spec.decode.gpusPerPod",
            format!("{nodes} pods of {per_pod} GPUs do not hold tensorParallel × pipelineParallel = {gpus} GPUs"),
            "unset spec.decode.gpusPerPod (kvpilot derives it) or make gpusPerPod × nodesPerReplica equal \
             tensorParallel × pipelineParallel"
                .into(),
        ));
    }
    if let Some(Err(problem)) = spec.cache.as_ref().map(|c| c.capacity_bytes()) {
        findings.push(violation(
            "K4",
            "spec.cache.capacity",
            format!("spec.cache.capacity: {problem}"),
            "give the store's size in bytes with an optional binary or decimal suffix (64Gi, 500G)".into(),
        ));
    }
    if let Some(backend) = spec.disaggregation.hicache_storage_backend.as_deref().filter(|_| spec.cache.is_some()) {
        findings.push(violation(
            "K5",
            "spec.disaggregation.hicacheStorageBackend",
            format!(
                "spec.disaggregation.hicacheStorageBackend {backend:?} conflicts with spec.cache, whose store is the \
                 storage backend"
            ),
            "unset spec.disaggregation.hicacheStorageBackend, or remove spec.cache to use another backend".into(),
        ));
    }
    if let Some(Err(problem)) = spec.cache.as_ref().and_then(|c| c.host_pool_gigabytes()) {
        findings.push(violation(
            "K6",
            "spec.cache.hostPoolSize",
            format!("spec.cache.hostPoolSize: {problem}"),
            "give each rank's host pool in bytes of at least 1G (64G, 64Gi), or unset it to size the pools from \
             the device pool"
                .into(),
        ));
    }
    if host_pool_memory(spec).is_some() {
        // The host pools are added to the container's own memory request and limit.
        let memory = decode.resources.iter().flat_map(|r| [r.requests.as_ref(), r.limits.as_ref()]);
        for quantity in memory.flatten().filter_map(|values| values.get("memory")) {
            if let Err(problem) = quantity_bytes(&quantity.0) {
                findings.push(violation(
                    "K6",
                    "spec.decode.resources",
                    format!(
                        "spec.decode.resources memory: {problem}, so spec.cache.hostPoolSize cannot be added to it"
                    ),
                    "give the SGLang container's memory as a whole number of bytes (64Gi, 500G)".into(),
                ));
            }
        }
    }
    if let Some(source) = &spec.model.source {
        match (&source.hub, &source.volume) {
            (Some(_), Some(_)) | (None, None) => findings.push(violation(
                "K3",
                "spec.model.source",
                "spec.model.source must name exactly one of hub or volume".into(),
                "keep one of spec.model.source.hub and spec.model.source.volume".into(),
            )),
            (None, Some(volume)) if volume.source.is_empty() => findings.push(violation(
                "K3",
                "spec.model.source.volume.source",
                "spec.model.source.volume.source names no volume source".into(),
                "set one volume source such as persistentVolumeClaim: {claimName: …}, hostPath or nfs".into(),
            )),
            (None, Some(volume)) if volume.path.starts_with('/') || volume.path.split('/').any(|p| p == "..") => {
                findings.push(violation(
                    "K3",
                    "spec.model.source.volume.path",
                    format!("spec.model.source.volume.path {:?} leaves the volume", volume.path),
                    "give the model's directory relative to the volume's root, without a leading / or ..".into(),
                ));
            }
            _ => {}
        }
    }
    findings
}

/// [`policy::assess`] plus [`pod_findings`]: the verdict on a resource whose pods kvpilot runs.
/// Every entry point (controller, webhook, `check`, `render`) decides with this.
pub fn assess(
    spec: &InferenceDeploymentSpec,
    config: &serde_json::Value,
    release: &ReleaseChoice,
) -> Result<Assessment, LayoutError> {
    let mut assessment = policy::assess(&effective_spec(spec), config, release)?;
    let findings = pod_findings(spec);
    if !findings.is_empty() {
        assessment.verdict.violations.extend(findings);
        assessment.verdict.outcome = Outcome::Rejected;
    }
    Ok(assessment)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn owned_flags_are_found_in_every_spelling_argparse_accepts() {
        let cases = [
            ("--tp", Some("--tensor-parallel-size")),
            ("--tp-size=4", Some("--tensor-parallel-size")),
            ("--disaggregation-decode-retraction-backup=host_pool", Some("--disaggregation-decode-retraction-backup")),
            ("--disaggregation-decode-retraction", Some("--disaggregation-decode-retraction-backup")),
            ("--enable-hierarchical", Some("--enable-hierarchical-cache")),
            ("--port", Some("--port")),
            ("--nccl-init-addr=x:1", Some("--dist-init-addr")),
            ("--page", Some("--page-size")),
            ("--mem-fraction-static", None),
            ("--trust-remote-code", None),
            ("--", None),
            ("-x", None),
            ("value", None),
        ];
        for (arg, expected) in cases {
            assert_eq!(owned_flag(arg, false).map(|(flag, _)| flag), expected, "{arg}");
        }
        for cache in [false, true] {
            assert_eq!(
                owned_flag("--hicache-storage-backend=mooncake", cache),
                Some(("--hicache-storage-backend", "spec.disaggregation.hicacheStorageBackend")),
                "the storage backend is a setting the policy checks (S6), with or without spec.cache"
            );
        }
        assert_eq!(
            owned_flag("--hicache-storage-backend-extra-config={}", false),
            None,
            "another backend's configuration, without spec.cache"
        );
        assert_eq!(
            owned_flag("--hicache-storage-backend-extra-config={}", true),
            Some(("--hicache-storage-backend-extra-config", "spec.cache"))
        );
    }

    fn spec(decode: serde_json::Value, source: serde_json::Value) -> InferenceDeploymentSpec {
        let mut model = json!({"name": "m/x", "config": {"inline": {}}});
        if !source.is_null() {
            model["source"] = source;
        }
        serde_json::from_value(json!({"model": model, "decode": decode})).unwrap()
    }

    #[test]
    fn pod_findings_name_the_field_and_the_fix() {
        let found = pod_findings(&spec(json!({"extraArgs": ["--tp=2", "--mem-fraction-static", "0.8"]}), json!(null)));
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].rule, found[0].field), ("K1", "spec.decode.extraArgs"));
        assert!(found[0].message.contains("spec.decode.tensorParallel"), "{}", found[0].message);
        assert!(found[0].fix.contains("remove --tp=2"), "{}", found[0].fix);

        let uneven = pod_findings(&spec(json!({"tensorParallel": 8, "nodesPerReplica": 3}), json!(null)));
        assert_eq!(uneven.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.decode.nodesPerReplica"]);
        let even = pod_findings(&spec(json!({"tensorParallel": 16, "nodesPerReplica": 2}), json!(null)));
        assert!(even.is_empty(), "{even:?}");

        let empty = pod_findings(&spec(json!({}), json!({"volume": {"source": {}}})));
        assert_eq!(empty.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source.volume.source"]);
        let outside = pod_findings(&spec(
            json!({}),
            json!({"volume": {"source": {"hostPath": {"path": "/m"}}, "path": "a/../.."}}),
        ));
        assert_eq!(outside.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source.volume.path"]);
        let both =
            pod_findings(&spec(json!({}), json!({"hub": {}, "volume": {"source": {"hostPath": {"path": "/m"}}}})));
        assert_eq!(both.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source"]);
    }

    #[test]
    fn cache_findings_name_the_storage_backend_and_the_host_pool_size() {
        let with_cache = |cache: serde_json::Value, edit: fn(&mut InferenceDeploymentSpec)| {
            let mut spec = spec(json!({"resources": {"limits": {"memory": "1.5Gi"}}}), json!(null));
            spec.cache = Some(serde_json::from_value(cache).unwrap());
            edit(&mut spec);
            pod_findings(&spec).into_iter().map(|v| (v.rule, v.field)).collect::<Vec<_>>()
        };
        let cache = json!({"offload": true, "capacity": "1Gi"});
        assert_eq!(with_cache(cache.clone(), |_| {}), [], "memory kvpilot adds nothing to is not read");
        assert_eq!(
            with_cache(cache.clone(), |s| s.disaggregation.hicache_storage_backend = Some("file".into())),
            [("K5", "spec.disaggregation.hicacheStorageBackend")]
        );
        let small = json!({"offload": true, "capacity": "1Gi", "hostPoolSize": "512Mi"});
        assert_eq!(with_cache(small, |_| {}), [("K6", "spec.cache.hostPoolSize")]);
        let sized = json!({"offload": true, "capacity": "1Gi", "hostPoolSize": "8G"});
        assert_eq!(
            with_cache(sized, |_| {}),
            [("K6", "spec.decode.resources")],
            "1.5Gi is no whole number of bytes to add the host pool to"
        );
    }

    #[test]
    fn host_pool_memory_is_every_pool_of_every_rank_on_the_pod() {
        let mut spec = spec(json!({"tensorParallel": 8, "pipelineParallel": 2, "nodesPerReplica": 2}), json!(null));
        assert_eq!(host_pool_memory(&spec), None);
        spec.cache =
            Some(serde_json::from_value(json!({"offload": true, "capacity": "1Gi", "hostPoolSize": "10G"})).unwrap());
        // 8 GPUs per pod, one pool (offload) of 10 GB each.
        assert_eq!(host_pool_memory(&spec), Some(80_000_000_000));
        spec.cache.as_mut().unwrap().reuse = true;
        assert_eq!(host_pool_memory(&spec), Some(160_000_000_000));
    }

    #[test]
    fn the_model_path_is_the_volume_directory_or_the_hub_id() {
        let hub = spec(json!({}), json!(null));
        assert_eq!(model_path(&hub.model), "m/x");
        let volume = spec(
            json!({}),
            json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}, "path": "llama/8b/"}}),
        );
        assert_eq!(model_path(&volume.model), "/models/llama/8b");
        let root = spec(json!({}), json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}}}));
        assert_eq!(model_path(&root.model), "/models");
    }
}
