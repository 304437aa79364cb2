//! The servers' own command lines: what kvpilot writes after the policy's flags (address, port,
//! served name, bootstrap port, multi-node ranks, IB devices) for the decode and prefill fleets,
//! and the router's, from tables that also tell which flags `extraArgs` may not set (the pod rules
//! of [`super::verdict`] read them).

use crate::api::{FleetSpec, HICACHE_GIGABYTE, InferenceDeploymentSpec, PrefillSpec, RouterSpec};
use crate::policy;
use crate::release::Release;

use super::args::sglang_args;
use super::cmdline::{Arg, ArgList, ArgSite};
use super::server_cli::{self, Reading};

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

/// Which fleet a server belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FleetRole {
    Decode,
    Prefill,
}

impl FleetRole {
    /// Both, decode first.
    pub const ALL: [FleetRole; 2] = [FleetRole::Decode, FleetRole::Prefill];

    /// The role as SGLang's `--disaggregation-mode` and kvpilot's object names spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Decode => "decode",
            Self::Prefill => "prefill",
        }
    }

    /// The spec field of the fleet.
    pub fn field(self) -> &'static str {
        match self {
            Self::Decode => "spec.decode",
            Self::Prefill => "spec.prefill",
        }
    }

    /// The fleet of this role in `spec`, if kvpilot runs one.
    pub fn fleet(self, spec: &InferenceDeploymentSpec) -> Option<&FleetSpec> {
        match self {
            Self::Decode => Some(&spec.decode),
            Self::Prefill => spec.prefill.as_deref(),
        }
    }

    /// A field of the fleet named as the decode fleet's (`spec.decode.port`), for this role.
    pub fn own(self, field: &str) -> String {
        match field.strip_prefix("spec.decode") {
            Some(rest) => format!("{}{rest}", self.field()),
            None => field.to_string(),
        }
    }
}

const HOST: PodFlag = pod_flag(&["--host"], "the pod (kvpilot listens on every address)");
const PORT: PodFlag = pod_flag(&["--port"], "spec.decode.port");
const SERVED_NAME: PodFlag = pod_flag(&["--served-model-name"], "spec.model.name");
const METRICS: PodFlag = pod_flag(&["--enable-metrics"], "the pod (kvpilot always enables metrics)");
const IB_DEVICE: PodFlag = pod_flag(&["--disaggregation-ib-device"], "spec.decode.ibDevice");
const BOOTSTRAP_PORT: PodFlag = pod_flag(&["--disaggregation-bootstrap-port"], "spec.disaggregation.bootstrapPort");
const NNODES: PodFlag = pod_flag(&["--nnodes"], "spec.decode.nodesPerReplica");
const NODE_RANK: PodFlag = pod_flag(&["--node-rank"], "spec.decode.nodesPerReplica");
const DIST_INIT: PodFlag = pod_flag(&["--dist-init-addr", "--nccl-init-addr"], "spec.decode.nodesPerReplica");

/// Every flag kvpilot writes from the pod's spec (fields named as the decode fleet's; a prefill
/// server's are the same fields under spec.prefill).
pub const POD_FLAGS: &[PodFlag] =
    &[HOST, PORT, SERVED_NAME, METRICS, IB_DEVICE, BOOTSTRAP_PORT, NNODES, NODE_RANK, DIST_INIT];

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
/// (offload writes; reuse reads through a radix cache over a hierarchical cache), and the prefill
/// fleet kvpilot runs is the prefill side the transfer rules compare decode with. Each fleet's
/// `extraArgs` name their options in full, as the release's parser reads them.
pub fn effective_spec(
    spec: &InferenceDeploymentSpec,
    release: Release,
) -> std::borrow::Cow<'_, InferenceDeploymentSpec> {
    if spec.cache.is_none() && spec.prefill.is_none() && spec.decode.extra_args.is_empty() {
        return std::borrow::Cow::Borrowed(spec);
    }
    let mut effective = spec.clone();
    // The policy finds the options kvpilot reads but never writes by their full names.
    let cli = server_cli::for_release(release);
    effective.decode.extra_args = cli.full_names(&spec.decode.extra_args);
    // The host pool size kvpilot renders for the decode servers is `--hicache-size` there (H7
    // reads it; POD1 keeps the flag itself out of `extraArgs`).
    effective.decode.extra_args.splice(0..0, host_pool_size_args(spec));
    if let Some(prefill) = effective.prefill.as_mut() {
        prefill.extra_args = cli.full_names(&prefill.extra_args);
    }
    let d = &mut effective.disaggregation;
    if let Some(cache) = &spec.cache {
        d.decode_offload_kv_cache |= cache.offload;
        d.decode_radix_cache |= cache.reuse;
        d.hierarchical_cache |= cache.reuse;
        // The store is the storage backend: S6 is checked against it, and the flag table writes it.
        d.hicache_storage_backend = Some(CACHE_STORAGE_BACKEND.into());
    }
    if let Some(prefill) = &spec.prefill {
        let args: Vec<Arg> = prefill
            .extra_args
            .iter()
            .enumerate()
            .map(|(index, text)| Arg {
                expands: text.contains("$("),
                site: ArgSite::Item { list: ArgList::Args, index },
                text: text.clone(),
            })
            .collect();
        let mut side = prefill_side(prefill, &cli.read(&args));
        // The prefill servers kvpilot runs take the decode fleet's page size and KV cache dtype
        // when their own fleet names none (`sglang_args`).
        side.page_size = Some(prefill.page_size.unwrap_or_else(|| spec.decode.effective_page_size()));
        side.kv_cache_dtype = side.kv_cache_dtype.or_else(|| spec.decode.kv_cache_dtype.clone());
        d.prefill = Some(side);
    }
    std::borrow::Cow::Owned(effective)
}

/// The prefill side the handshake and transfer rules compare decode with, from a prefill
/// server's parallelism and what `argv` (its command line, or a fleet's `extraArgs`, read by the
/// release's own parser) says of the flags kvpilot reads but never writes: `--attn-cp-size` and
/// `--enable-kv-cache-sharding`.
pub fn prefill_side(fleet: &FleetSpec, argv: &Reading) -> PrefillSpec {
    let attention_context_parallel = argv
        .last("--attn-cp-size")
        .and_then(|given| given.values.last()?.trim().parse().ok())
        .filter(|&size: &i32| size >= 1)
        .unwrap_or(1);
    PrefillSpec {
        tensor_parallel: fleet.tensor_parallel,
        data_parallel: fleet.data_parallel,
        enable_dp_attention: fleet.enable_dp_attention,
        pipeline_parallel: fleet.pipeline_parallel,
        page_size: Some(fleet.effective_page_size()),
        kv_cache_dtype: fleet.kv_cache_dtype.clone(),
        attention_context_parallel,
        kv_cache_sharding: argv.last("--enable-kv-cache-sharding").is_some(),
    }
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

/// `--hicache-size` of the decode servers, from `spec.cache.hostPoolSize` (none when unset or
/// unreadable, which validation reports).
fn host_pool_size_args(spec: &InferenceDeploymentSpec) -> Vec<String> {
    match spec.cache.as_ref().and_then(|c| c.host_pool_gigabytes()) {
        Some(Ok(gigabytes)) => vec![HOST_POOL_SIZE.names[0].to_string(), gigabytes.to_string()],
        _ => Vec::new(),
    }
}

/// The arguments of every server of the `role` fleet of `spec` (after `python3 -m
/// sglang.launch_server`): the policy's flags for the verdict, then the pod's, then
/// `extraArgs`. Multi-node ranks add [`rank_args`] before `extraArgs`. Empty when kvpilot runs
/// no such fleet.
pub fn server_args(
    spec: &InferenceDeploymentSpec,
    role: FleetRole,
    verdict: &policy::Verdict,
    release: Release,
) -> Vec<String> {
    let Some(fleet) = role.fleet(spec) else { return Vec::new() };
    let both = sglang_args(spec, verdict, release);
    let mut args = match role {
        FleetRole::Decode => both.decode,
        FleetRole::Prefill => both.prefill,
    };
    args.extend([HOST.names[0].to_string(), "0.0.0.0".into()]);
    args.extend([PORT.names[0].to_string(), fleet.port.to_string()]);
    args.extend([SERVED_NAME.names[0].to_string(), spec.model.name.clone()]);
    args.push(METRICS.names[0].to_string());
    if let Some(devices) = &fleet.ib_device {
        args.extend([IB_DEVICE.names[0].to_string(), devices.clone()]);
    }
    if role == FleetRole::Prefill {
        args.extend([BOOTSTRAP_PORT.names[0].to_string(), spec.disaggregation.bootstrap_port.to_string()]);
    }
    if role == FleetRole::Decode && spec.cache.is_some() {
        // `--hicache-storage-backend dynamic` comes from the policy's settings (effective_spec).
        args.extend([STORAGE_CONFIG.names[0].to_string(), storage_backend_config()]);
        args.extend([MEM_LAYOUT.names[0].to_string(), "page_first".into()]);
        args.extend(host_pool_size_args(spec));
    }
    args.extend(fleet.extra_args.iter().cloned());
    args
}

/// Port of the router's Prometheus metrics.
pub const ROUTER_METRICS_PORT: i32 = 29000;

/// A router flag kvpilot writes, and the spec field that decides it.
pub const ROUTER_FLAGS: &[PodFlag] = &[
    pod_flag(&["--pd-disaggregation"], "spec.prefill (the router always runs in PD mode)"),
    pod_flag(&["--host"], "the pod (the router listens on every address)"),
    pod_flag(&["--port"], "spec.router.port"),
    pod_flag(&["--policy"], "spec.router.policy"),
    pod_flag(&["--service-discovery"], "the pods kvpilot labels (the router finds them by label)"),
    pod_flag(&["--service-discovery-namespace"], "the resource's namespace"),
    pod_flag(&["--service-discovery-port"], "spec.decode.port"),
    pod_flag(&["--prefill-selector"], "the prefill pods' labels"),
    pod_flag(&["--decode-selector"], "the decode pods' labels"),
    pod_flag(&["--selector"], "the prefill and decode pods' labels"),
    pod_flag(&["--worker-urls"], "the pods kvpilot labels (the router finds them by label)"),
    pod_flag(&["--prefill"], "the prefill pods kvpilot labels"),
    pod_flag(&["--decode"], "the decode pods kvpilot labels"),
    pod_flag(&["--prometheus-host"], "the pod (metrics listen on every address)"),
    pod_flag(&["--prometheus-port"], "the pod (kvpilot serves metrics on 29000)"),
];

/// The router's arguments (after `python3 -m <launcher>`): PD mode, Kubernetes service
/// discovery in `namespace` of the rank-0 pods carrying `prefill` and `decode` (label
/// `key=value` pairs), then `extraArgs`.
pub fn router_args(
    router: &RouterSpec,
    namespace: &str,
    server_port: i32,
    prefill: &[String],
    decode: &[String],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--pd-disaggregation".into(),
        "--host".into(),
        "0.0.0.0".into(),
        "--port".into(),
        router.port.to_string(),
        "--policy".into(),
        router.policy.as_str().into(),
        "--service-discovery".into(),
        "--service-discovery-namespace".into(),
        namespace.into(),
        "--service-discovery-port".into(),
        server_port.to_string(),
        "--prefill-selector".into(),
    ];
    args.extend(prefill.iter().cloned());
    args.push("--decode-selector".into());
    args.extend(decode.iter().cloned());
    args.extend(["--prometheus-host".into(), "0.0.0.0".into()]);
    args.extend(["--prometheus-port".into(), ROUTER_METRICS_PORT.to_string()]);
    args.extend(router.extra_args.iter().cloned());
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

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::{Checked, ModelConfigs};
    use crate::release::{ReleaseChoice, v0_5};

    const NEWEST: Release = v0_5(23);

    /// A resource with `decode` as its decode fleet and `source` as its model's source.
    pub(crate) fn spec(decode: serde_json::Value, source: serde_json::Value) -> InferenceDeploymentSpec {
        let mut model = json!({"name": "m/x", "config": {"inline": {}}});
        if !source.is_null() {
            model["source"] = source;
        }
        serde_json::from_value(json!({"model": model, "decode": decode})).unwrap()
    }

    #[test]
    fn the_prefill_fleet_is_the_prefill_side_the_transfer_rules_see() {
        let spec = |extra_args: serde_json::Value| -> InferenceDeploymentSpec {
            serde_json::from_value(json!({
                "model": {"name": "m/x", "config": {"inline": {}}},
                "prefill": {"tensorParallel": 4, "dataParallel": 2, "enableDpAttention": true, "pageSize": 16,
                            "kvCacheDtype": "fp8_e4m3", "extraArgs": extra_args}
            }))
            .unwrap()
        };
        let prefill = |extra_args, release| effective_spec(&spec(extra_args), release).disaggregation.prefill.clone();
        assert_eq!(
            prefill(json!([]), NEWEST),
            Some(PrefillSpec {
                tensor_parallel: 4,
                data_parallel: 2,
                enable_dp_attention: true,
                pipeline_parallel: 1,
                page_size: Some(16),
                kv_cache_dtype: Some("fp8_e4m3".into()),
                attention_context_parallel: 1,
                kv_cache_sharding: false,
            })
        );
        // The flags kvpilot reads but never writes come from extraArgs, read by the release's own
        // parser: every spelling, the last occurrence, and not after `--`.
        for (extra_args, cp, sharding) in [
            (json!(["--attn-cp-size", "2", "--enable-kv-cache-sharding"]), 2, true),
            (json!(["--attention-context-parallel-size=4", "--attn-cp-size", "2"]), 2, false),
            (json!(["--enable-kv-cache-shard"]), 1, true),
            (json!(["--mem-fraction-static", "0.8", "--", "--attn-cp-size", "2"]), 1, false),
        ] {
            let side = prefill(extra_args.clone(), NEWEST).unwrap();
            assert_eq!((side.attention_context_parallel, side.kv_cache_sharding), (cp, sharding), "{extra_args}");
        }
        // 0.5.21's parser has no --enable-kv-cache-sharding (POD8 refuses it there).
        let side = prefill(json!(["--enable-kv-cache-sharding"]), v0_5(21)).unwrap();
        assert!(!side.kv_cache_sharding);
    }

    /// A prefill fleet without a page size or KV cache dtype runs the decode fleet's
    /// (`sglang_args`), so the handshake rules compare those: P1 and P2 used to reject such a
    /// service, whose servers would agree.
    #[test]
    fn a_prefill_fleet_without_a_page_size_or_kv_cache_dtype_runs_the_decode_fleet_s() {
        let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
            "model": {"name": "m/x", "config": {"inline": {}}},
            "decode": {"kvCacheDtype": "fp8_e4m3", "pageSize": 64},
            "prefill": {}
        }))
        .unwrap();
        let effective = effective_spec(&spec, NEWEST);
        let side = effective.disaggregation.prefill.as_ref().unwrap();
        assert_eq!((side.page_size, side.kv_cache_dtype.as_deref()), (Some(64), Some("fp8_e4m3")));
        let configs = ModelConfigs::target(
            json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8,
                   "head_dim": 128}),
        );
        let assessment =
            policy::assess(&effective, &configs, &ReleaseChoice::default_newest(), Checked::Service).unwrap();
        assert!(
            assessment.verdict.violations.iter().all(|v| v.rule != "P1" && v.rule != "P2"),
            "{:?}",
            assessment.verdict.violations
        );
        let args = sglang_args(&spec, &assessment.verdict, NEWEST);
        let flag = |args: &[String], name: &str| args.iter().position(|a| a == name).map(|i| args[i + 1].clone());
        for name in ["--kv-cache-dtype", "--page-size"] {
            assert_eq!(flag(&args.prefill, name), flag(&args.decode, name), "{name}");
        }
        assert_eq!(flag(&args.prefill, "--page-size").as_deref(), Some("64"));
    }

    /// P1's fix named `spec.disaggregation.prefill.pageSize` for a service whose prefill fleet
    /// kvpilot runs, where the prefill page size is `spec.prefill.pageSize`.
    #[test]
    fn a_page_size_mismatch_names_where_the_prefill_page_size_is_set() {
        let fix = |prefill: serde_json::Value| {
            let mut spec = json!({
                "model": {"name": "m/x", "config": {"inline": {}}},
                "decode": {"pageSize": 64}
            });
            spec.as_object_mut().unwrap().extend(prefill.as_object().unwrap().clone());
            let spec: InferenceDeploymentSpec = serde_json::from_value(spec).unwrap();
            let configs = ModelConfigs::target(
                json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "num_key_value_heads": 8,
                       "head_dim": 128}),
            );
            let assessment = policy::assess(
                &effective_spec(&spec, NEWEST),
                &configs,
                &ReleaseChoice::default_newest(),
                Checked::Service,
            )
            .unwrap();
            assessment.verdict.violations.into_iter().find(|v| v.rule == "P1").map(|v| v.fix)
        };
        assert_eq!(
            fix(json!({"prefill": {"pageSize": 16}})).as_deref(),
            Some(
                "the prefill page size is spec.prefill.pageSize; set spec.decode.pageSize and the prefill page size to the same value"
            )
        );
        assert_eq!(
            fix(json!({"disaggregation": {"prefill": {"pageSize": 16}}})).as_deref(),
            Some(
                "the prefill page size is spec.disaggregation.prefill.pageSize; set spec.decode.pageSize and the \
                 prefill page size to the same value"
            )
        );
    }

    /// DeepSeek-V4's host pools are sized by ratio: the host pool size kvpilot renders as
    /// `--hicache-size` is what H7 refuses.
    #[test]
    fn the_host_pool_size_kvpilot_renders_reaches_the_policy_as_hicache_size() {
        let spec = |cache: serde_json::Value| -> InferenceDeploymentSpec {
            serde_json::from_value(json!({"model": {"name": "m/x", "config": {"inline": {}}}, "cache": cache})).unwrap()
        };
        let config: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
        let h7 = |spec: &InferenceDeploymentSpec| {
            let effective = effective_spec(spec, NEWEST);
            let configs = ModelConfigs::target(config.clone());
            let assessment =
                policy::assess(&effective, &configs, &ReleaseChoice::default_newest(), Checked::Service).unwrap();
            assessment.verdict.violations.into_iter().find(|v| v.rule == "H7").map(|v| v.field)
        };
        let sized = spec(json!({"reuse": true, "capacity": "64Gi", "hostPoolSize": "8G"}));
        assert_eq!(effective_spec(&sized, NEWEST).decode.extra_args[..2], ["--hicache-size", "8"]);
        assert_eq!(h7(&sized), Some("spec.cache.hostPoolSize"));
        assert_eq!(h7(&spec(json!({"reuse": true, "capacity": "64Gi"}))), None);
    }

    #[test]
    fn the_policy_reads_extra_args_with_their_options_named_in_full() {
        let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
            "model": {"name": "m/x", "config": {"inline": {}}},
            "decode": {"extraArgs": ["--disable-overlap-sch", "--mamba-track-int=96", "--", "--disable-overlap-sch"]},
            "prefill": {"extraArgs": ["--mem-frac", "0.8"]}
        }))
        .unwrap();
        let effective = effective_spec(&spec, NEWEST);
        assert_eq!(
            effective.decode.extra_args,
            ["--disable-overlap-schedule", "--mamba-track-interval=96", "--", "--disable-overlap-sch"]
        );
        assert_eq!(effective.prefill.as_ref().unwrap().extra_args, ["--mem-fraction-static", "0.8"]);
    }

    #[test]
    fn the_router_runs_in_pd_mode_with_service_discovery_of_both_fleets() {
        let router =
            RouterSpec { extra_args: vec!["--request-timeout-secs".into(), "60".into()], ..RouterSpec::default() };
        let args = router_args(&router, "serving", 30000, &["a=p".into(), "r=0".into()], &["a=d".into()]);
        assert_eq!(
            args.join(" "),
            "--pd-disaggregation --host 0.0.0.0 --port 8000 --policy cache_aware --service-discovery \
             --service-discovery-namespace serving --service-discovery-port 30000 --prefill-selector a=p r=0 \
             --decode-selector a=d --prometheus-host 0.0.0.0 --prometheus-port 29000 --request-timeout-secs 60"
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
        assert_eq!(hub.model.served_path(), "m/x");
        let volume = spec(
            json!({}),
            json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}, "path": "llama/8b/"}}),
        );
        assert_eq!(volume.model.served_path(), "/models/llama/8b");
        let root = spec(json!({}), json!({"volume": {"source": {"persistentVolumeClaim": {"claimName": "w"}}}}));
        assert_eq!(root.model.served_path(), "/models");
    }
}
