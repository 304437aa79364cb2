//! kvpilot's pod rules POD1–POD9 and POD11: what keeps the pods of a resource from being built as
//! asked, or from serving once built. SGLang has no such rule (it never sees a pod); each says
//! what the pods would do instead (argparse refusing the server's argv, the kubelet failing the
//! rank, a cache that never hits, the API server's PodSecurity admission refusing them), in the
//! terms of the spec field that causes it.

use crate::api::{AttentionKind, AttentionLayout, FleetSpec, InferenceDeploymentSpec, parse_bytes};
use crate::policy::{self, Violation, argv, pod};
use crate::release::Release;
use crate::sglang::cmdline::{Arg, ArgList, ArgSite};
use crate::sglang::flags::FLAGS;
use crate::sglang::server::{CACHE_FLAGS, FleetRole, POD_FLAGS, PodFlag, ROUTER_FLAGS, host_pool_memory, server_args};
use crate::sglang::server_cli::{self, Word};

/// The flag an `extraArgs` item of a `role` server sets that kvpilot decides, and the spec field
/// deciding it, as `release`'s argparse reads the item: the option it resolves to (`--name`,
/// `--name=value`, every alias, a prefix unique among all of the release's options), when that
/// option is one of kvpilot's. An ambiguous prefix, an option the release lacks and a value are
/// none: argparse refuses the first two (POD8 reports that) and takes the value as no option.
pub fn owned_flag(arg: &str, cache: bool, role: FleetRole, release: Release) -> Option<(&'static str, String)> {
    let Word::Option { option, .. } = server_cli::for_release(release).classify(arg) else { return None };
    let cache_flags = if cache && role == FleetRole::Decode { CACHE_FLAGS } else { &[] };
    let (names, field) = FLAGS
        .iter()
        .map(|flag| (flag.names, flag.field))
        .chain(POD_FLAGS.iter().chain(cache_flags).map(|flag| (flag.names, flag.field)))
        .find(|(names, _)| option.strings.iter().any(|string| names.contains(string)))?;
    Some((names[0], role.own(field)))
}

/// The router flag an item of `spec.router.extraArgs` sets that kvpilot decides: `--name`,
/// `--name=value`, or a prefix of one of kvpilot's router flags (the first such; kvpilot has no
/// table of the router's own options to tell an ambiguous prefix by).
pub fn owned_router_flag(arg: &str) -> Option<(&'static str, String)> {
    let name = arg.split_once('=').map_or(arg, |(name, _)| name);
    if !name.starts_with("--") || name.len() < 4 {
        return None;
    }
    let owned = |flag: &&PodFlag| flag.names.contains(&name);
    let abbreviated = |flag: &&PodFlag| flag.names.iter().any(|full| full.starts_with(name));
    let flag = ROUTER_FLAGS.iter().find(owned).or_else(|| ROUTER_FLAGS.iter().find(abbreviated))?;
    Some((flag.names[0], flag.field.into()))
}

fn violation(rule: &'static str, field: &'static str, message: String, fix: String) -> Violation {
    Violation { rule, field, message, fix, phase: "spec" }
}

/// POD1 for one list of extra arguments: each item that sets a flag kvpilot decides. `args` are the
/// items argparse may read as options ([`argv::options`]), each classified on its own, as
/// argparse's first pass does (`_parse_optional`, before any value is consumed): a word that reads
/// as an option is never taken as the value of the option before it (`--revision --tp-size` leaves
/// --revision without its value, a refusal POD8 reports, and --tp-size is still --tp-size), and a
/// value that looks like one (`-1`) is no option, so no whole-line reading is needed to tell
/// option words from values. kvpilot writes no `--` of its own before `extraArgs`.
fn owned_extra_args(
    list: &'static str,
    args: &[String],
    owned: impl Fn(&str) -> Option<(&'static str, String)>,
) -> Vec<Violation> {
    args.iter()
        .filter_map(|arg| {
            let (flag, field) = owned(arg)?;
            let spelled = if arg.split('=').next() == Some(flag) { String::new() } else { format!(" (as {arg})") };
            Some(violation(
                pod::EXTRA_ARGS.id,
                list,
                format!("{flag}{spelled} is set by kvpilot from {field}"),
                format!("remove {arg} from {list} and set {field} instead"),
            ))
        })
        .collect()
}

/// POD2 for one fleet: GPUs that do not split evenly over a replica's pods.
fn uneven_replicas(role: FleetRole, fleet: &FleetSpec) -> Vec<Violation> {
    let (nodes_field, gpus_field) = match role {
        FleetRole::Decode => ("spec.decode.nodesPerReplica", "spec.decode.gpusPerPod"),
        FleetRole::Prefill => ("spec.prefill.nodesPerReplica", "spec.prefill.gpusPerPod"),
    };
    let mut findings = Vec::new();
    let gpus = fleet.tensor_parallel.saturating_mul(fleet.pipeline_parallel);
    let nodes = fleet.nodes_per_replica.max(1);
    if gpus % nodes != 0 {
        findings.push(violation(
            pod::UNEVEN_REPLICA.id,
            nodes_field,
            format!("{nodes} pods per replica cannot share tensorParallel × pipelineParallel = {gpus} GPUs evenly"),
            format!("set {nodes_field} to a divisor of tensorParallel × pipelineParallel"),
        ));
    }
    if let Some(per_pod) = fleet.gpus_per_pod.filter(|n| nodes > 1 && n * nodes != gpus) {
        findings.push(violation(
            pod::UNEVEN_REPLICA.id,
            gpus_field,
            format!("{nodes} pods of {per_pod} GPUs do not hold tensorParallel × pipelineParallel = {gpus} GPUs"),
            format!(
                "unset {gpus_field} (kvpilot derives it) or make gpusPerPod × nodesPerReplica equal \
                 tensorParallel × pipelineParallel"
            ),
        ));
    }
    findings
}

/// What keeps the pods of `spec` from being built as asked: `extraArgs` setting a flag kvpilot
/// decides (POD1; a server's items read by `release`'s parser), a replica whose GPUs do not split
/// evenly over its pods (POD2), weights in a volume with no volume source (POD3), a cache capacity
/// that is no number of bytes (POD4), a storage backend named beside spec.cache's own (POD5), a host
/// pool size SGLang cannot take (POD6), fleets the router cannot reach on one port or a router with
/// no prefill fleet (POD7), a setting the Pod Security level asked for does not allow (POD11).
pub fn pod_findings(spec: &InferenceDeploymentSpec, release: Release) -> Vec<Violation> {
    let cache = spec.cache.is_some();
    let mut findings = owned_extra_args("spec.decode.extraArgs", argv::options(&spec.decode.extra_args), |a| {
        owned_flag(a, cache, FleetRole::Decode, release)
    });
    findings.extend(uneven_replicas(FleetRole::Decode, &spec.decode));
    if let Some(prefill) = &spec.prefill {
        findings.extend(owned_extra_args("spec.prefill.extraArgs", argv::options(&prefill.extra_args), |a| {
            owned_flag(a, cache, FleetRole::Prefill, release)
        }));
        findings.extend(uneven_replicas(FleetRole::Prefill, prefill));
        if spec.disaggregation.prefill.is_some() {
            findings.push(violation(
                pod::ROUTER.id,
                "spec.disaggregation.prefill",
                "spec.disaggregation.prefill describes prefill servers kvpilot does not run, and spec.prefill is set"
                    .into(),
                "move its fields to spec.prefill and remove spec.disaggregation.prefill".into(),
            ));
        }
    }
    if let Some(router) = &spec.router {
        findings.extend(owned_extra_args("spec.router.extraArgs", &router.extra_args, owned_router_flag));
        if router.enabled && spec.prefill.is_none() {
            findings.push(violation(
                pod::ROUTER.id,
                "spec.router",
                "spec.router routes to the prefill fleet kvpilot runs, and spec.prefill is not set".into(),
                "set spec.prefill, or spec.router.enabled: false".into(),
            ));
        }
    }
    if let (Some(_), Some(prefill)) = (spec.effective_router(), &spec.prefill)
        && prefill.port != spec.decode.port
    {
        findings.push(violation(
            pod::ROUTER.id,
            "spec.prefill.port",
            format!(
                "the router finds every server on one port (--service-discovery-port), and spec.prefill.port {} \
                 differs from spec.decode.port {}",
                prefill.port, spec.decode.port
            ),
            "give spec.prefill.port and spec.decode.port the same value".into(),
        ));
    }
    if let Some(Err(problem)) = spec.cache.as_ref().map(|c| c.capacity_bytes()) {
        findings.push(violation(
            pod::CACHE_CAPACITY.id,
            "spec.cache.capacity",
            format!("spec.cache.capacity: {problem}"),
            "give the store's size as a Kubernetes quantity (64Gi, 500G)".into(),
        ));
    }
    if let Some(backend) = spec.disaggregation.hicache_storage_backend.as_deref().filter(|_| spec.cache.is_some()) {
        findings.push(violation(
            pod::STORAGE_BACKEND.id,
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
            pod::HOST_POOL_SIZE.id,
            "spec.cache.hostPoolSize",
            format!("spec.cache.hostPoolSize: {problem}"),
            "give each rank's host pool in bytes of at least 1G (64G, 64Gi), or unset it to size the pools from \
             the device pool"
                .into(),
        ));
    }
    if host_pool_memory(spec).is_some() {
        // The host pools are added to the container's own memory request and limit.
        let memory = spec.decode.resources.iter().flat_map(|r| [r.requests.as_ref(), r.limits.as_ref()]);
        for quantity in memory.flatten().filter_map(|values| values.get("memory")) {
            if let Err(problem) = parse_bytes(&quantity.0) {
                findings.push(violation(
                    pod::HOST_POOL_SIZE.id,
                    "spec.decode.resources",
                    format!(
                        "spec.decode.resources memory: {problem}, so spec.cache.hostPoolSize cannot be added to it"
                    ),
                    "give the SGLang container's memory as a Kubernetes quantity (64Gi, 500G)".into(),
                ));
            }
        }
    }
    if let Some(source) = &spec.model.source {
        match (&source.hub, &source.volume) {
            (Some(_), Some(_)) | (None, None) => findings.push(violation(
                pod::MODEL_SOURCE.id,
                "spec.model.source",
                "spec.model.source must name exactly one of hub or volume".into(),
                "keep one of spec.model.source.hub and spec.model.source.volume".into(),
            )),
            (None, Some(volume)) if volume.source.is_empty() => findings.push(violation(
                pod::MODEL_SOURCE.id,
                "spec.model.source.volume.source",
                "spec.model.source.volume.source names no volume source".into(),
                "set one volume source such as persistentVolumeClaim: {claimName: …}, hostPath or nfs".into(),
            )),
            (None, Some(volume)) if volume.path.starts_with('/') || volume.path.split('/').any(|p| p == "..") => {
                findings.push(violation(
                    pod::MODEL_SOURCE.id,
                    "spec.model.source.volume.path",
                    format!("spec.model.source.volume.path {:?} leaves the volume", volume.path),
                    "give the model's directory relative to the volume's root, without a leading / or ..".into(),
                ));
            }
            _ => {}
        }
    }
    let draft_path = spec.disaggregation.speculative_draft_model.as_ref().and_then(|draft| draft.path.as_ref());
    if draft_path.is_some() && spec.model.weights_volume().is_none() {
        findings.push(violation(
            pod::MODEL_SOURCE.id,
            "spec.disaggregation.speculativeDraftModel.path",
            "spec.disaggregation.speculativeDraftModel.path is a directory in the model's weights volume, and \
             spec.model.source.volume is not set"
                .into(),
            "set spec.model.source.volume, or unset the draft's path so SGLang downloads its name from the hub".into(),
        ));
    }
    findings.extend(laxer_pod_security(spec));
    findings
}

/// POD11: a setting whose pods need a laxer Pod Security level than `spec.security.level`. The
/// API server's PodSecurity admission would refuse every such pod the controller creates in a
/// namespace enforcing the level asked for, as an event no one reads: said before.
fn laxer_pod_security(spec: &InferenceDeploymentSpec) -> Vec<Violation> {
    let Some(asked) = spec.security.as_ref().and_then(|security| security.level) else { return Vec::new() };
    spec.pod_security_needs()
        .into_iter()
        .filter(|need| need.level > asked)
        .map(|need| {
            violation(
                pod::LAXER_POD_SECURITY.id,
                need.field,
                format!(
                    "{} {} needs the Pod Security level {}, and spec.security.level is {asked}: a namespace \
                     enforcing {asked} refuses its pods",
                    need.field, need.setting, need.level
                ),
                format!(
                    "remove {} from {}, or set spec.security.level to {} and run the resource in a namespace \
                     whose pod-security.kubernetes.io/enforce level allows it",
                    need.setting, need.field, need.level
                ),
            )
        })
        .collect()
}

/// What a resource that asks for no Pod Security level is told when its settings need more than
/// `restricted`: the level its pods get, and why.
pub(super) fn pod_security_warning(spec: &InferenceDeploymentSpec) -> Option<String> {
    if spec.security.as_ref().is_some_and(|security| security.level.is_some()) {
        return None;
    }
    let needs = spec.pod_security_needs();
    let level = needs.iter().map(|need| need.level).max()?;
    let why: Vec<String> = needs
        .iter()
        .filter(|need| need.level == level)
        .map(|need| format!("{} {}", need.field, need.setting))
        .collect();
    Some(format!(
        "the server pods need the Pod Security level {level} ({}): a namespace enforcing a stricter level refuses \
         them; set spec.security.level: {level} to say so",
        why.join(", ")
    ))
}

/// POD9: prefix reuse from the cache runtime cannot work for an MLA model whose decode replica
/// spans nodes. Each node has its own sidecar; SGLang writes an MLA page from one rank only
/// (`is_storage_writer`: TP rank 0, or each DCP shard's first rank) and takes the MIN of every
/// rank's storage hits (`_sync_prefetch_hit_query`, `managers/cache_controller.py`, 0.5.23), so
/// the ranks on the other nodes never hit and the replica never reuses a page.
pub(super) fn prefix_reads_across_nodes(spec: &InferenceDeploymentSpec, layout: &AttentionLayout) -> Option<Violation> {
    let reuse = spec.cache.as_ref().is_some_and(|cache| cache.reuse);
    let nodes = spec.decode.nodes_per_replica;
    (reuse && layout.attention == AttentionKind::Mla && nodes > 1).then(|| {
        violation(
            pod::SHARED_PREFIX_READS.id,
            "spec.cache.reuse",
            format!(
                "spec.cache.reuse: {} stores MLA KV, which SGLang writes to storage from one rank only, and each of \
                 the {nodes} nodes of a decode replica has a cache runtime of its own; SGLang reuses a prefix only \
                 when every rank finds it, so the ranks on the other nodes never do and no page is ever reused",
                layout.architecture
            ),
            "set spec.cache.reuse to false (spec.cache.offload still works), or run each decode replica on one node \
             (spec.decode.nodesPerReplica: 1)"
                .into(),
        )
    })
}

/// POD8: the fleet's command line with its `extraArgs`, read by `release`'s own parser. kvpilot's
/// own flags are ones each release's parser accepts (the parity harness runs them), so what it
/// refuses comes from `extraArgs`: a refusal (SGLang exits before start-up) and warnings for
/// abbreviations and deprecated options.
pub(super) fn extra_args_reading(
    spec: &InferenceDeploymentSpec,
    role: FleetRole,
    verdict: &policy::Verdict,
    release: Release,
) -> (Option<Violation>, Vec<String>) {
    if role.fleet(spec).is_none_or(|fleet| fleet.extra_args.is_empty()) {
        return (None, Vec::new());
    }
    let list = match role {
        FleetRole::Decode => "spec.decode.extraArgs",
        FleetRole::Prefill => "spec.prefill.extraArgs",
    };
    let args: Vec<Arg> = server_args(spec, role, verdict, release)
        .into_iter()
        .enumerate()
        .map(|(index, text)| Arg {
            // The kubelet expands $(VAR) in args from the container's env, which kvpilot does not see here.
            expands: text.contains("$("),
            site: ArgSite::Item { list: ArgList::Args, index },
            text,
        })
        .collect();
    let reading = server_cli::for_release(release).read(&args);
    let warnings = reading.accepted_warnings(release).into_iter().map(|w| format!("{list}: {w}")).collect();
    let refusal = reading.refusal.map(|message| {
        let (_, fix) = server_cli::refusal_subject_and_fix(&message, release);
        violation(pod::COMMAND_LINE.id, list, message, format!("in {list}: {fix}"))
    });
    (refusal, warnings)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::DraftModelSpec;
    use crate::policy::{ModelConfigs, Outcome};
    use crate::release::{KNOWN, ReleaseChoice, v0_5};
    use crate::sglang::server::tests::spec;
    use crate::sglang::verdict::assess;

    const NEWEST: Release = v0_5(23);

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
            ("--page-size", Some("--page-size")),
            ("--mem-fraction-static", None),
            ("--trust-remote-code", None),
            ("--", None),
            ("-x", None),
            ("value", None),
        ];
        for (arg, expected) in cases {
            assert_eq!(owned_flag(arg, false, FleetRole::Decode, NEWEST).map(|(flag, _)| flag), expected, "{arg}");
        }
        for cache in [false, true] {
            assert_eq!(
                owned_flag("--hicache-storage-backend=mooncake", cache, FleetRole::Decode, NEWEST),
                Some(("--hicache-storage-backend", "spec.disaggregation.hicacheStorageBackend".to_string())),
                "the storage backend is a setting the policy checks (S6), with or without spec.cache"
            );
        }
        assert_eq!(
            owned_flag("--hicache-storage-backend-extra-config={}", false, FleetRole::Decode, NEWEST),
            None,
            "another backend's configuration, without spec.cache"
        );
        assert_eq!(
            owned_flag("--hicache-storage-backend-extra-config={}", true, FleetRole::Decode, NEWEST),
            Some(("--hicache-storage-backend-extra-config", "spec.cache".to_string()))
        );
    }

    /// POD1's findings on decode `extraArgs` under `release`, as (message, fix).
    fn pod1_at(extra: serde_json::Value, release: Release) -> Vec<(String, String)> {
        pod_findings(&spec(json!({"extraArgs": extra}), json!(null)), release)
            .into_iter()
            .filter(|v| v.rule == "POD1")
            .map(|v| (v.message, v.fix))
            .collect()
    }

    fn owned_at(arg: &str, release: Release) -> Option<&'static str> {
        owned_flag(arg, false, FleetRole::Decode, release).map(|(flag, _)| flag)
    }

    #[test]
    fn pod1_reads_each_item_as_the_releases_argparse_does() {
        // A prefix unique in the release, of an owned option: reported under the full name.
        assert_eq!(
            pod1_at(json!(["--tp=2"]), NEWEST),
            [(
                "--tensor-parallel-size (as --tp=2) is set by kvpilot from spec.decode.tensorParallel".to_string(),
                "remove --tp=2 from spec.decode.extraArgs and set spec.decode.tensorParallel instead".to_string()
            )]
        );
        // An exact owned option, and its `=value` form.
        let exact = pod1_at(json!(["--page-size", "16", "--page-size=16"]), NEWEST);
        assert_eq!(
            exact.iter().map(|(message, _)| message.as_str()).collect::<Vec<_>>(),
            ["--page-size is set by kvpilot from spec.decode.pageSize"; 2]
        );
        // Options kvpilot does not own, whole or abbreviated (--mem-frac is --mem-fraction-static).
        assert_eq!(pod1_at(json!(["--mem-frac", "0.8", "--mem-fraction-static=0.8"]), NEWEST), []);
        // A prefix follows each release: --page is --page-size up to 0.5.22 and ambiguous in
        // 0.5.23 (--paged-experts-num-resident); --swa is --swa-full-tokens-ratio up to 0.5.20 and
        // ambiguous from 0.5.21 (--swa-prefix-tails). argparse refuses an ambiguous prefix: POD8's.
        for (arg, unique_until, full) in [("--page", 22, "--page-size"), ("--swa", 20, "--swa-full-tokens-ratio")] {
            for release in KNOWN.iter().copied() {
                let expected = (release <= v0_5(unique_until)).then_some(full);
                assert_eq!(owned_at(arg, release), expected, "{arg} in {release}");
            }
        }
        assert_eq!(pod1_at(json!(["--page", "16"]), v0_5(22)).len(), 1);
        assert_eq!(pod1_at(json!(["--page", "16"]), v0_5(23)), []);
        // What the old prefix match (the first owned flag any of whose names starts with the
        // prefix) reported wrongly: --pp, --enable-hi and --dist are ambiguous in every release
        // (--pp-max-micro-batch-size, --enable-hisparse, --dist-timeout); --attn is
        // --attn-cp-size, not kvpilot's, up to 0.5.21 and ambiguous after; an owned option a
        // release does not have is no option of it (--enable-hicache before 0.5.23,
        // --attn-dp-size before 0.5.22): POD8 reports it unrecognized.
        for release in KNOWN.iter().copied() {
            for arg in ["--pp", "--pp=2", "--enable-hi", "--dist=x:1", "--attn"] {
                assert_eq!(owned_at(arg, release), None, "{arg} in {release}");
            }
        }
        assert_eq!(owned_at("--enable-hicache", v0_5(22)), None);
        assert_eq!(owned_at("--enable-hicache", v0_5(23)), Some("--enable-hierarchical-cache"));
        assert_eq!(owned_at("--attn-dp-size=2", v0_5(21)), None);
        assert_eq!(owned_at("--attn-dp-size=2", v0_5(22)), Some("--attn-dp-size"));
        // Values are no options: a word argparse takes as a value, a negative number, anything
        // after `--`. An option word after an option that wants a value is still an option
        // (argparse leaves --revision without its value, which POD8 reports).
        assert_eq!(
            pod1_at(json!(["--json-model-override-args", "page-size", "--mem-fraction-static", "-1"]), NEWEST),
            []
        );
        assert_eq!(pod1_at(json!(["--", "--tp-size", "2"]), NEWEST), []);
        assert_eq!(
            pod1_at(json!(["--revision", "--tp-size", "2"]), NEWEST)
                .iter()
                .map(|(message, _)| message.as_str())
                .collect::<Vec<_>>(),
            [
                "--revision is set by kvpilot from spec.model.revision",
                "--tensor-parallel-size (as --tp-size) is set by kvpilot from spec.decode.tensorParallel"
            ]
        );
    }

    #[test]
    fn a_capacity_is_read_as_the_cache_runtime_reads_its_own() {
        let pod4 = |capacity: &str| {
            let mut spec = spec(json!({}), json!(null));
            spec.cache = Some(serde_json::from_value(json!({"capacity": capacity, "offload": true})).unwrap());
            pod_findings(&spec, NEWEST).into_iter().filter(|v| v.rule == "POD4").map(|v| v.message).collect::<Vec<_>>()
        };
        for accepted in ["64 GB", "64GiB", "64Gi", "1.5Gi", "1e9"] {
            assert_eq!(pod4(accepted), Vec::<String>::new(), "{accepted}");
            assert!(crate::api::parse_capacity(accepted).is_ok(), "{accepted}");
        }
        for refused in ["0", "64 gigs", "-1Gi"] {
            let runtime = crate::api::parse_capacity(refused).unwrap_err();
            assert_eq!(pod4(refused), vec![format!("spec.cache.capacity: {runtime}")], "{refused}: the same words");
        }
    }

    #[test]
    fn prefix_reuse_is_refused_for_an_mla_model_whose_replicas_span_nodes() {
        let fired = |fixture: &str, nodes: i32, reuse: bool| {
            let path = format!("{}/tests/fixtures/configs/{fixture}", env!("CARGO_MANIFEST_DIR"));
            let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            let decode = json!({"tensorParallel": 16, "nodesPerReplica": nodes, "gpusPerPod": 16 / nodes});
            let mut spec = spec(decode, json!(null));
            spec.cache =
                Some(serde_json::from_value(json!({"reuse": reuse, "offload": true, "capacity": "64Gi"})).unwrap());
            let assessment = assess(&spec, &ModelConfigs::target(config), &ReleaseChoice::default_newest()).unwrap();
            let pod9: Vec<_> = assessment.verdict.violations.into_iter().filter(|v| v.rule == "POD9").collect();
            pod9
        };
        let refused = fired("deepseek-v3.json", 2, true);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].field, "spec.cache.reuse");
        assert!(
            refused[0].message.contains("each of the 2 nodes of a decode replica has a cache runtime"),
            "{}",
            refused[0].message
        );
        assert!(refused[0].fix.contains("spec.decode.nodesPerReplica: 1"), "{}", refused[0].fix);
        assert!(fired("deepseek-v3.json", 1, true).is_empty(), "one node: one sidecar every rank reads");
        assert!(fired("deepseek-v3.json", 2, false).is_empty(), "offload alone writes from rank 0 and works");
        assert!(fired("llama-3.1-8b-instruct.json", 2, true).is_empty(), "MHA: every rank writes its own shard");
    }

    #[test]
    fn extra_args_the_release_refuses_are_pod8_with_argparses_words() {
        let config: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
        let assess_at = |extra: serde_json::Value, patch: u16| {
            let release = crate::release::choose(crate::release::v0_5(patch), crate::release::ReleaseSource::Spec);
            assess(
                &spec(json!({"extraArgs": extra}), json!(null)),
                &ModelConfigs::target(config.clone()),
                &release.unwrap(),
            )
            .unwrap()
        };
        let refused = assess_at(json!(["--mem-fraction-static", "0.8", "--no-such-flag"]), 23).verdict;
        let pod8: Vec<_> = refused.violations.iter().filter(|v| v.rule == "POD8").collect();
        assert_eq!(pod8.len(), 1, "{:?}", refused.violations);
        assert_eq!(
            (pod8[0].field, pod8[0].message.as_str()),
            ("spec.decode.extraArgs", "unrecognized arguments: --no-such-flag")
        );
        assert!(pod8[0].fix.starts_with("in spec.decode.extraArgs: remove them"), "{}", pod8[0].fix);
        assert_eq!(refused.outcome, Outcome::Rejected);
        // An option one release has and another lacks: --enable-hisparse's neighbour in time, the linker flag.
        let linker = json!(["--enable-unified-cache-external-linker"]);
        assert!(assess_at(linker.clone(), 19).verdict.violations.iter().any(|v| v.rule == "POD8"));
        assert!(!assess_at(linker, 23).verdict.violations.iter().any(|v| v.rule == "POD8"));
        // An ambiguous prefix of an owned option is argparse's refusal (POD8), not POD1; where the
        // release reads the prefix as the owned option, it is POD1 and argparse accepts it.
        let rules = |verdict: &policy::Verdict| verdict.violations.iter().map(|v| v.rule).collect::<Vec<_>>();
        let ambiguous = assess_at(json!(["--page", "16"]), 23).verdict;
        assert_eq!(rules(&ambiguous), ["POD8"]);
        assert_eq!(
            ambiguous.violations[0].message,
            "ambiguous option: --page could match --page-size, --paged-experts-num-resident"
        );
        assert_eq!(rules(&assess_at(json!(["--page", "16"]), 22).verdict), ["POD1"]);
        // An abbreviation argparse accepts is a warning naming the full option; a $(VAR) value is not judged.
        let abbreviated = assess_at(json!(["--mem-frac", "0.8", "--max-running-requests", "$(MAX)"]), 23);
        let violations = &abbreviated.verdict.violations;
        assert!(!violations.iter().any(|v| v.rule == "POD8"), "{violations:?}");
        assert!(
            abbreviated.command_line_warnings.iter().any(|w| w.starts_with(
                "spec.decode.extraArgs: --mem-frac: SGLang 0.5.23's argparse reads this \
                                        abbreviation as --mem-fraction-static"
            )),
            "{:?}",
            abbreviated.command_line_warnings
        );
    }

    #[test]
    fn pod_findings_name_the_field_and_the_fix() {
        let found =
            pod_findings(&spec(json!({"extraArgs": ["--tp=2", "--mem-fraction-static", "0.8"]}), json!(null)), NEWEST);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].rule, found[0].field), ("POD1", "spec.decode.extraArgs"));
        assert!(found[0].message.contains("spec.decode.tensorParallel"), "{}", found[0].message);
        assert!(found[0].fix.contains("remove --tp=2"), "{}", found[0].fix);

        let uneven = pod_findings(&spec(json!({"tensorParallel": 8, "nodesPerReplica": 3}), json!(null)), NEWEST);
        assert_eq!(uneven.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.decode.nodesPerReplica"]);
        let even = pod_findings(&spec(json!({"tensorParallel": 16, "nodesPerReplica": 2}), json!(null)), NEWEST);
        assert!(even.is_empty(), "{even:?}");

        let empty = pod_findings(&spec(json!({}), json!({"volume": {"source": {}}})), NEWEST);
        assert_eq!(empty.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source.volume.source"]);
        let outside = pod_findings(
            &spec(json!({}), json!({"volume": {"source": {"hostPath": {"path": "/m"}}, "path": "a/../.."}})),
            NEWEST,
        );
        assert_eq!(outside.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source.volume.path"]);
        let both = pod_findings(
            &spec(json!({}), json!({"hub": {}, "volume": {"source": {"hostPath": {"path": "/m"}}}})),
            NEWEST,
        );
        assert_eq!(both.iter().map(|v| v.field).collect::<Vec<_>>(), ["spec.model.source"]);
    }

    #[test]
    fn a_draft_in_the_weights_volume_is_read_from_there() {
        let llama: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
        let with_draft = |source: serde_json::Value, path: Option<&str>| {
            let mut spec = spec(json!({}), source);
            spec.disaggregation.speculative_algorithm = Some("EAGLE3".into());
            spec.disaggregation.speculative_draft_model = Some(DraftModelSpec {
                name: "acme/eagle3".into(),
                revision: Some("v2".into()),
                path: path.map(Into::into),
                config: crate::api::ModelConfigSource { inline: llama.as_object().cloned(), ..Default::default() },
            });
            spec
        };
        let draft_flags = |spec: &InferenceDeploymentSpec| {
            let configs = ModelConfigs { target: llama.clone(), draft: Some(llama.clone()) };
            let assessment = assess(spec, &configs, &ReleaseChoice::default_newest()).unwrap();
            let args = server_args(spec, FleetRole::Decode, &assessment.verdict, assessment.release.release);
            let position = |flag: &str| args.iter().position(|a| a == flag).map(|i| args[i + 1].clone());
            (position("--speculative-draft-model-path"), position("--speculative-draft-model-revision"))
        };
        let volume = json!({"volume": {"source": {"hostPath": {"path": "/m"}}, "path": "llama"}});
        assert_eq!(
            draft_flags(&with_draft(volume.clone(), Some("eagle3/"))),
            (Some("/models/eagle3".into()), None),
            "a revision picks a hub commit, not a directory"
        );
        assert_eq!(draft_flags(&with_draft(volume, None)), (Some("acme/eagle3".into()), Some("v2".into())));
        let hub_target = pod_findings(&with_draft(json!(null), Some("eagle3")), NEWEST);
        assert_eq!(
            hub_target.iter().map(|v| (v.rule, v.field)).collect::<Vec<_>>(),
            [("POD3", "spec.disaggregation.speculativeDraftModel.path")]
        );
    }

    #[test]
    fn prefill_and_router_flags_are_owned_under_their_own_fields() {
        assert_eq!(
            owned_flag("--tp=2", false, FleetRole::Prefill, NEWEST),
            Some(("--tensor-parallel-size", "spec.prefill.tensorParallel".to_string()))
        );
        assert_eq!(
            owned_flag("--port", false, FleetRole::Prefill, NEWEST).map(|(_, f)| f).as_deref(),
            Some("spec.prefill.port")
        );
        assert_eq!(
            owned_flag("--disaggregation-bootstrap-port=9000", false, FleetRole::Decode, NEWEST)
                .map(|(_, f)| f)
                .as_deref(),
            Some("spec.disaggregation.bootstrapPort")
        );
        assert_eq!(
            owned_flag("--hicache-mem-layout", true, FleetRole::Prefill, NEWEST),
            None,
            "spec.cache is decode's"
        );
        assert_eq!(owned_router_flag("--policy=random").map(|(flag, _)| flag), Some("--policy"));
        assert_eq!(owned_router_flag("--prefill-sel").map(|(flag, _)| flag), Some("--prefill-selector"));
        assert_eq!(owned_router_flag("--request-timeout-secs"), None);
    }

    #[test]
    fn a_setting_laxer_than_the_pod_security_level_asked_for_is_pod11() {
        let rdma = |level: serde_json::Value| {
            let mut spec = spec(json!({"capabilities": ["IPC_LOCK"], "hostNetwork": true}), json!(null));
            spec.security = serde_json::from_value(json!({"level": level})).unwrap();
            spec
        };
        let refused = pod_findings(&rdma(json!("baseline")), NEWEST);
        let pod11: Vec<(&str, &str)> =
            refused.iter().filter(|v| v.rule == "POD11").map(|v| (v.field, v.message.as_str())).collect();
        assert_eq!(
            pod11,
            [
                (
                    "spec.decode.capabilities",
                    "spec.decode.capabilities IPC_LOCK needs the Pod Security level privileged, and spec.security.level \
                     is baseline: a namespace enforcing baseline refuses its pods"
                ),
                (
                    "spec.decode.hostNetwork",
                    "spec.decode.hostNetwork true needs the Pod Security level privileged, and spec.security.level is \
                     baseline: a namespace enforcing baseline refuses its pods"
                ),
            ]
        );
        assert!(refused[0].fix.contains("set spec.security.level to privileged"), "{}", refused[0].fix);
        assert!(pod_findings(&rdma(json!("privileged")), NEWEST).is_empty(), "the level the settings need");
        // Asking for nothing gets the strictest level the settings allow, and a warning saying so.
        let unasked = spec(json!({"capabilities": ["IPC_LOCK"]}), json!(null));
        assert!(pod_findings(&unasked, NEWEST).is_empty());
        assert_eq!(
            pod_security_warning(&unasked).unwrap(),
            "the server pods need the Pod Security level privileged (spec.decode.capabilities IPC_LOCK): a namespace \
             enforcing a stricter level refuses them; set spec.security.level: privileged to say so"
        );
        assert_eq!(pod_security_warning(&spec(json!({}), json!(null))), None, "restricted needs no word");
        assert_eq!(pod_security_warning(&rdma(json!("privileged"))), None, "asked for");
    }

    #[test]
    fn a_pd_service_is_checked_for_what_the_router_and_the_old_prefill_place_need() {
        let with = |extra: serde_json::Value| {
            let mut value = json!({"model": {"name": "m/x", "config": {"inline": {}}}});
            value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            pod_findings(&serde_json::from_value(value).unwrap(), NEWEST)
        };
        let fields = |found: Vec<Violation>| found.iter().map(|v| (v.rule, v.field)).collect::<Vec<_>>();
        assert!(with(json!({"prefill": {"replicas": 1}})).is_empty());
        assert_eq!(
            fields(with(json!({"prefill": {"extraArgs": ["--page-size", "16"]}}))),
            [("POD1", "spec.prefill.extraArgs")]
        );
        assert_eq!(
            fields(with(json!({"prefill": {"tensorParallel": 4, "nodesPerReplica": 3}}))),
            [("POD2", "spec.prefill.nodesPerReplica")]
        );
        assert_eq!(fields(with(json!({"router": {}}))), [("POD7", "spec.router")], "a router needs the prefill fleet");
        assert!(with(json!({"router": {"enabled": false}})).is_empty());
        assert_eq!(
            fields(with(json!({"prefill": {"port": 31000}}))),
            [("POD7", "spec.prefill.port")],
            "the router finds both fleets on one port"
        );
        assert!(with(json!({"prefill": {"port": 31000}, "router": {"enabled": false}})).is_empty());
        assert_eq!(
            fields(with(json!({"prefill": {}, "disaggregation": {"prefill": {"tensorParallel": 2}}}))),
            [("POD7", "spec.disaggregation.prefill")]
        );
        assert_eq!(
            fields(with(json!({"prefill": {}, "router": {"extraArgs": ["--service-discovery-port=1"]}}))),
            [("POD1", "spec.router.extraArgs")]
        );
    }

    #[test]
    fn cache_findings_name_the_storage_backend_and_the_host_pool_size() {
        let with_cache = |cache: serde_json::Value, edit: fn(&mut InferenceDeploymentSpec)| {
            let mut spec = spec(json!({"resources": {"limits": {"memory": "1.5Gi"}}}), json!(null));
            spec.cache = Some(serde_json::from_value(cache).unwrap());
            edit(&mut spec);
            pod_findings(&spec, NEWEST).into_iter().map(|v| (v.rule, v.field)).collect::<Vec<_>>()
        };
        let cache = json!({"offload": true, "capacity": "1Gi"});
        assert_eq!(with_cache(cache.clone(), |_| {}), [], "memory kvpilot adds nothing to is not read");
        let unreadable = json!({"offload": true, "capacity": "a lot"});
        assert_eq!(with_cache(unreadable, |_| {}), [("POD4", "spec.cache.capacity")]);
        assert_eq!(
            with_cache(cache.clone(), |s| s.disaggregation.hicache_storage_backend = Some("file".into())),
            [("POD5", "spec.disaggregation.hicacheStorageBackend")]
        );
        let small = json!({"offload": true, "capacity": "1Gi", "hostPoolSize": "512Mi"});
        assert_eq!(with_cache(small, |_| {}), [("POD6", "spec.cache.hostPoolSize")]);
        let sized = json!({"offload": true, "capacity": "1Gi", "hostPoolSize": "8G"});
        assert_eq!(with_cache(sized.clone(), |_| {}), [], "1.5Gi is read as the API server reads it");
        let unreadable = |s: &mut InferenceDeploymentSpec| {
            let memory = json!({"limits": {"memory": "64 gigs"}});
            s.decode.resources = Some(serde_json::from_value(memory).unwrap());
        };
        assert_eq!(with_cache(sized, unreadable), [("POD6", "spec.decode.resources")]);
    }
}
