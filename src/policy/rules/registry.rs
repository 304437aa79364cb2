//! The one table of rules, assembled from the concern files in the order findings are reported
//! in, and the ids of the findings that come from elsewhere: the checks of a server's role the
//! guard adds, kvpilot's own checks of the pods it runs, and SGLang's parser. Every id a verdict
//! can carry is here, once.

use super::{
    Rule, context_parallel, decode_context_parallel, decode_radix_cache, flags, hicache, hisparse, host_receive,
    kv_cache, linker, lmcache, mamba, models, parallel, pipeline_parallel, retraction, server_roles, speculative,
    transfer, tree_cache, unified_memory,
};

/// The rules, in report order (a rewrite that several rules ask for is recorded by the first).
pub(crate) const RULES: &[Rule] = &[
    flags::F1,
    flags::F2,
    flags::F4,
    host_receive::N2,
    host_receive::N3,
    host_receive::N1,
    host_receive::N4,
    host_receive::N7,
    server_roles::BP1,
    retraction::S2,
    retraction::S3,
    retraction::S4,
    retraction::S6,
    hicache::S7,
    kv_cache::S8,
    flags::F3,
    lmcache::L1,
    lmcache::L2,
    lmcache::L3,
    lmcache::L4,
    lmcache::L5,
    lmcache::L6,
    lmcache::L7,
    flags::F5,
    speculative::SD1,
    speculative::SD2,
    speculative::SD3,
    speculative::SD4,
    speculative::SD5,
    speculative::SD6,
    speculative::SD7,
    speculative::SD8,
    speculative::SD9,
    speculative::SD10,
    speculative::SD11,
    speculative::SD12,
    speculative::SD13,
    speculative::SD15,
    speculative::SD16,
    speculative::SD14,
    hisparse::HS1,
    hisparse::HS2,
    pipeline_parallel::PP1,
    pipeline_parallel::PP2,
    pipeline_parallel::PP3,
    pipeline_parallel::PP4,
    pipeline_parallel::PP5,
    pipeline_parallel::PP6,
    models::deepseek_v4::V1,
    models::deepseek_v4::V2,
    models::deepseek_v4::V3_SPECULATIVE,
    models::deepseek_v4::V3_HISPARSE,
    models::deepseek_v4::V3_TWO_BATCH_OVERLAP,
    models::deepseek_v4::V3_PIPELINE,
    models::deepseek_v4::V4,
    models::deepseek::K1,
    models::deepseek::K2,
    models::deepseek::K3,
    models::deepseek::K6,
    models::deepseek::K4,
    models::deepseek::K5,
    models::deepseek::CP9,
    models::deepseek_v4::CP11,
    models::deepseek_v4::CP12,
    models::deepseek_v4::CP13,
    models::deepseek::CP10,
    models::minicpm::MC1,
    models::minicpm::MC2,
    models::minicpm::MC3,
    models::ernie::E1,
    models::qwen4_exp::QX1,
    models::qwen4_exp::QX2,
    models::iquest::IQ1,
    models::iquest::IQ2,
    models::iquest::IQ3,
    models::iquest::IQ4,
    models::iquest::IQ5,
    models::iquest::IQ6,
    models::iquest::IQ7,
    models::iquest::IQ8,
    models::iquest::IQ9,
    models::iquest::IQ10,
    models::iquest::IQ11,
    models::iquest::IQ12,
    models::iquest::IQ13,
    models::iquest::IQ14,
    models::iquest::IQ15,
    models::iquest::IQ16,
    models::mimo::MV1,
    models::mimo::MV2,
    models::mimo::MV3,
    models::nemotron_h::NH1,
    models::nemotron_h::NH2,
    models::deepseek::CP6,
    models::deepseek::LS0,
    models::deepseek::LS1,
    models::deepseek::LS2,
    models::deepseek::LS3,
    models::deepseek::LS4,
    models::deepseek::LS5,
    models::deepseek::DT2,
    models::deepseek::DT1,
    context_parallel::CP2,
    context_parallel::CP3,
    context_parallel::CP4,
    context_parallel::CP5,
    context_parallel::CP1,
    context_parallel::CP7,
    context_parallel::CP8,
    speculative::SD17,
    server_roles::LO1,
    server_roles::LO2,
    parallel::LH2,
    parallel::LH3,
    parallel::LH4,
    parallel::LH5,
    server_roles::EN1,
    decode_context_parallel::DC1,
    parallel::LH1,
    parallel::WD1,
    parallel::WD2,
    parallel::WD3,
    parallel::WD4,
    parallel::WD5,
    parallel::WD6,
    server_roles::RS1,
    server_roles::KS1,
    server_roles::WM1,
    server_roles::WM2,
    server_roles::WM3,
    server_roles::WM4,
    server_roles::PC1,
    server_roles::PC2,
    server_roles::PC3,
    decode_context_parallel::DF1,
    decode_context_parallel::DF2,
    decode_context_parallel::DF3,
    retraction::RP1,
    parallel::QC1,
    parallel::QC2,
    speculative::DB1,
    speculative::DB2,
    speculative::DB3,
    parallel::DP3,
    parallel::DP1,
    parallel::DP4,
    parallel::DP2,
    tree_cache::H1,
    tree_cache::H2,
    tree_cache::H5,
    tree_cache::H6,
    tree_cache::H7,
    tree_cache::N5,
    tree_cache::N6,
    hicache::H3,
    hicache::H8,
    hicache::H4,
    lmcache::L8,
    hicache::D1,
    hicache::D6,
    hicache::D2,
    hicache::D3,
    hicache::D4,
    hicache::D5,
    linker::LD1,
    linker::X1,
    linker::X2,
    linker::X3,
    tree_cache::X4,
    tree_cache::X5,
    unified_memory::U6A,
    unified_memory::U6B,
    unified_memory::U6C,
    unified_memory::U7_MLA,
    unified_memory::U7_MAMBA,
    unified_memory::U7_SWA,
    retraction::R1,
    retraction::R2,
    tree_cache::R8,
    retraction::R9,
    decode_radix_cache::R13,
    decode_radix_cache::R14,
    decode_radix_cache::R15,
    decode_radix_cache::R16,
    decode_radix_cache::R17,
    decode_radix_cache::R18A,
    decode_radix_cache::R18B,
    decode_radix_cache::R18C,
    decode_context_parallel::R19_BACKEND,
    decode_context_parallel::R19_RADIX,
    decode_context_parallel::R19_HICACHE,
    transfer::R19D,
    transfer::R19E,
    transfer::R19F,
    transfer::R20,
    retraction::O1,
    transfer::P1,
    transfer::P2,
    transfer::T1_MORI,
    transfer::T1,
    transfer::T1HND,
    transfer::T1PP,
    transfer::T1_BLOCK_SCALES,
    transfer::T1NX,
    transfer::T1MX,
    transfer::P5,
    transfer::P3,
    transfer::P4,
    transfer::P4B,
    transfer::P6,
    transfer::T11_WINDOW,
    transfer::T11_DCP_PAGES,
    transfer::T4_PP,
    transfer::T4_PP_MORI,
    transfer::T5_PP,
    transfer::T4_TP,
    transfer::T4_TP_MORI,
    transfer::T5_TP,
    transfer::T4C,
    mamba::M1,
    mamba::M2,
    mamba::M6,
    mamba::M7,
    mamba::M5,
    mamba::M4,
    mamba::M3,
    unified_memory::U1,
    unified_memory::U1_PP,
    unified_memory::U1_SPECULATIVE,
    unified_memory::U4,
    unified_memory::U4_MLA,
    unified_memory::U4_SWA,
    unified_memory::U16,
    unified_memory::U4C,
    unified_memory::U8,
    unified_memory::U9,
    unified_memory::U10,
    unified_memory::U11,
    unified_memory::U12,
    unified_memory::U13,
    unified_memory::U14,
    unified_memory::U15,
    unified_memory::U2,
    unified_memory::U3,
];

/// The rules SGLang applies to a server only because it is not a PD decode server, checked
/// before [`RULES`] on such a server. Not in the rules table of docs/rules.md: no resource can
/// ask for them.
pub(crate) const SERVER_ROLE_RULES: &[Rule] = &[server_roles::S1, server_roles::S5, server_roles::R21];

/// A rule whose findings do not come from the rules table: its id, what it checks and what it
/// reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleInfo {
    pub id: &'static str,
    pub about: &'static str,
    /// Where what it checks comes from, on one line, as [`Rule::reproduces`] says it: the SGLang
    /// function and file it reproduces, or, for a check of kvpilot's own, what it stands for (the
    /// kubelet's behaviour, what SGLang then does with the pod).
    pub reproduces: &'static str,
}

/// kvpilot's checks of the pods it runs for a resource, POD1–POD9 and POD11 (docs/pods.md), each
/// checked in `sglang::verdict::pod_rules`. Exported whole: a new pod rule is a line here, its
/// check there.
pub mod pod {
    use super::RuleInfo;

    /// Every pod rule, in the order `pod_findings` reports them.
    pub const ALL: &[RuleInfo] = &[
        EXTRA_ARGS,
        UNEVEN_REPLICA,
        MODEL_SOURCE,
        CACHE_CAPACITY,
        STORAGE_BACKEND,
        HOST_POOL_SIZE,
        ROUTER,
        COMMAND_LINE,
        SHARED_PREFIX_READS,
        LAXER_POD_SECURITY,
    ];
    pub const EXTRA_ARGS: RuleInfo = RuleInfo {
        id: "POD1",
        about: "`extraArgs` sets a flag kvpilot decides",
        reproduces: "kvpilot's own: an extraArgs item that names a flag kvpilot sets, each item read as Python 3.11's \
                     argparse reads an option word (ArgumentParser._parse_optional: a name, --name=value, a unique prefix) \
                     against the options of the parser ServerArgs.add_cli_args builds, srt/server_args.py (0.5.17–0.5.23); \
                     a router item by kvpilot's router flags and their prefixes",
    };
    pub const UNEVEN_REPLICA: RuleInfo = RuleInfo {
        id: "POD2",
        about: "`nodesPerReplica` does not divide TP × PP, or `gpusPerPod` × `nodesPerReplica` ≠ TP × PP",
        reproduces: "kvpilot's own, for the pods of a replica: SGLang asserts 'tp_size must be divisible by number of \
                     nodes' (ServerArgs.check_server_args, srt/server_args.py (0.5.17–0.5.18); check_server_args, \
                     srt/arg_groups/validation_hook.py (0.5.19–0.5.23), as DP4) and gives each node its share of the ranks \
                     (_calculate_rank_ranges, srt/entrypoints/engine.py (0.5.17–0.5.23)), which each of kvpilot's pods \
                     runs on its gpusPerPod GPUs",
    };
    pub const MODEL_SOURCE: RuleInfo = RuleInfo {
        id: "POD3",
        about: "`spec.model.source` names neither or both of hub and volume, a volume with no source, or a path \
                leaving the volume",
        reproduces: "kvpilot's own, for the pods it builds: the weights come from the hub or from one Kubernetes volume, \
                     which needs a volume source, read at a path within it (and a draft's path is in that volume); \
                     no SGLang function",
    };
    pub const CACHE_CAPACITY: RuleInfo = RuleInfo {
        id: "POD4",
        about: "`spec.cache.capacity` is no number of bytes",
        reproduces: "kvpilot's own: its cache runtime reads spec.cache.capacity as a number of bytes (the same reading, \
                     the same words); no SGLang function",
    };
    pub const STORAGE_BACKEND: RuleInfo = RuleInfo {
        id: "POD5",
        about: "`spec.disaggregation.hicacheStorageBackend` names a backend beside `spec.cache`'s own",
        reproduces: "kvpilot's own: with spec.cache a server's one --hicache-storage-backend is dynamic, kvpilot's \
                     connector (StorageBackendFactory._create_dynamic_backend, srt/mem_cache/storage/backend_factory.py \
                     (0.5.17–0.5.23)), so no other backend can be named beside it",
    };
    pub const HOST_POOL_SIZE: RuleInfo = RuleInfo {
        id: "POD6",
        about: "`spec.cache.hostPoolSize` under 1G, or a memory in `spec.decode.resources` it cannot be added to",
        reproduces: "kvpilot's own: SGLang's --hicache-size counts whole gigabytes and HostKVCache.__init__, \
                     srt/mem_cache/pool_host/base.py (0.5.17–0.5.23) sizes the host pool from --hicache-ratio when it is \
                     0, so a size under 1G is not the pool asked for; \
                     kvpilot adds the pools to a memory it reads as a Kubernetes quantity",
    };
    pub const ROUTER: RuleInfo = RuleInfo {
        id: "POD7",
        about: "`spec.prefill` together with `spec.disaggregation.prefill`; an enabled `spec.router` without \
                `spec.prefill`; prefill and decode ports that differ while a router runs",
        reproduces: "kvpilot's own, for the pods and Services it runs for a PD service: one prefill fleet, spec.prefill, \
                     and one port on which the router finds every server (its --service-discovery-port); \
                     no SGLang function",
    };
    pub const COMMAND_LINE: RuleInfo = RuleInfo {
        id: "POD8",
        about: "a fleet's command line with its `extraArgs` is one the release's own parser refuses",
        reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17–0.5.23), by the parser each \
                     release's ServerArgs.add_cli_args builds (its options read from the release wheels by \
                     tests/parity/server_cli.py), of a fleet's command line with its extraArgs",
    };

    pub const SHARED_PREFIX_READS: RuleInfo = RuleInfo {
        id: "POD9",
        about: "`spec.cache.reuse` on an MLA model whose decode replicas span nodes (`nodesPerReplica` > 1)",
        reproduces: "kvpilot's own, for the cache runtime of each node: SGLang's HiCache writes an MLA page to storage \
                     from one rank only (HiCacheController.attach_storage_backend's backup_skip, \
                     srt/managers/cache_controller.py (0.5.17–0.5.22); HiCacheStorageConfig.is_storage_writer, \
                     srt/mem_cache/hicache_storage.py (0.5.23)) and reuses a prefix only as far as every rank finds it, a \
                     MIN over the ranks' hits (HiCacheController.prefetch_thread_func (0.5.17–0.5.21), \
                     HiCacheController._sync_prefetch_hit_query (0.5.22–0.5.23), srt/managers/cache_controller.py)",
    };

    pub const LAXER_POD_SECURITY: RuleInfo = RuleInfo {
        id: "POD11",
        about: "a setting whose pods need a laxer Pod Security level than `spec.security.level`",
        reproduces: "kube-apiserver's PodSecurity admission (k8s.io/pod-security-admission, the Pod Security \
                     Standards' checks of capabilities, host namespaces and volume types), which refuses such pods \
                     in a namespace enforcing the level asked for",
    };
}

/// A server's command line that the release's own parser refuses (the guard, docs/guard.md).
pub const COMMAND_LINE: RuleInfo = RuleInfo {
    id: "CLI",
    about: "the release's own parser refuses the command line",
    reproduces: "argparse's refusal in prepare_server_args, srt/server_args.py (0.5.17–0.5.23), by the parser each \
                 release's ServerArgs.add_cli_args builds (its options read from the release wheels by \
                 tests/parity/server_cli.py), of a server's whole command line",
};

/// A server's whole command line written as one `command` word (the guard, docs/guard.md).
pub const ONE_WORD_COMMAND: RuleInfo = RuleInfo {
    id: "EXEC",
    about: "a `command` item holds a whole command line: the kubelet runs it as one file name and the container \
            never starts",
    reproduces: "the kubelet: it runs a container's first command item as the name of the program's file, and no file \
                 is named by a whole command line, so the container never starts (StartError, RunContainerError); \
                 no SGLang function",
};

/// A pod whose SGLang server cannot reach the kvpilot cache runtime beside it (the guard,
/// docs/guard.md).
pub const CACHE_WIRING: RuleInfo = RuleInfo {
    id: "POD10",
    about: "a server using kvpilot's connector whose socket is not where the pod's cache runtime listens, or whose \
            `PYTHONPATH` misses the directory the pod's installer writes the connector to",
    reproduces: "kvpilot's own check of a pod's volume mounts, for what SGLang does next: \
                 StorageBackendFactory._create_dynamic_backend, srt/mem_cache/storage/backend_factory.py \
                 (0.5.17–0.5.23) imports the connector (module_path kvpilot_sglang.hicache) from PYTHONPATH, and the \
                 connector opens the socket its extra config names; both must reach, through the same volume, where \
                 the pod's installer writes the connector and its cache runtime listens",
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;
    use crate::release::{KNOWN, Release, v0_5};

    /// Every id a verdict can carry, once each, by where its findings come from.
    fn sources() -> [(&'static str, BTreeSet<&'static str>); 6] {
        [
            ("the rules table", RULES.iter().map(|rule| rule.id).collect()),
            ("the server-role rules", SERVER_ROLE_RULES.iter().map(|rule| rule.id).collect()),
            ("the pod rules", pod::ALL.iter().map(|rule| rule.id).collect()),
            ("SGLang's parser", BTreeSet::from([COMMAND_LINE.id])),
            ("the kubelet", BTreeSet::from([ONE_WORD_COMMAND.id])),
            ("a workload's pod spec", BTreeSet::from([CACHE_WIRING.id])),
        ]
    }

    #[test]
    fn every_id_is_unique_across_the_sources_of_findings() {
        let sources = sources();
        for (index, (source, ids)) in sources.iter().enumerate() {
            for (other, other_ids) in &sources[index + 1..] {
                let shared: Vec<_> = ids.intersection(other_ids).collect();
                assert!(shared.is_empty(), "{source} and {other} both use {shared:?}");
            }
        }
        assert_eq!(pod::ALL.iter().map(|rule| rule.id).collect::<BTreeSet<_>>().len(), pod::ALL.len());
    }

    #[test]
    fn every_rule_is_named_once_and_its_messages_are_in_release_order() {
        let mut seen = std::collections::HashSet::new();
        for rule in RULES.iter().chain(SERVER_ROLE_RULES) {
            assert!(seen.insert((rule.id, rule.about)), "{} {} twice", rule.id, rule.about);
            assert!(rule.messages.first().is_some_and(|m| m.since <= rule.span.first), "{} {}", rule.id, rule.about);
            assert!(rule.messages.windows(2).all(|w| w[0].since < w[1].since), "{} {}", rule.id, rule.about);
            assert!(rule.changes.windows(2).all(|w| w[0].since < w[1].since), "{} {}", rule.id, rule.about);
        }
    }

    #[test]
    fn every_entry_states_what_the_default_leaves_open() {
        for rule in RULES.iter().chain(SERVER_ROLE_RULES) {
            let named = !rule.id.is_empty() && !rule.about.is_empty() && rule.field.starts_with("spec.");
            assert!(named, "an entry without its id, about or field: {} {}", rule.id, rule.about);
            assert!(!rule.messages.is_empty() && !rule.fix.hint().is_empty(), "{} {}", rule.id, rule.about);
        }
    }

    /// What a citation may name instead of a file of SGLang's: a check of kvpilot's own, or the
    /// kubelet's behaviour.
    const OTHER_SOURCES: &[&str] = &["kvpilot's own", "the kubelet", "kube-apiserver's"];

    /// Whether `reproduces` names its source: a Python file of SGLang's (`srt/….py`), or, at its
    /// start, one of [`OTHER_SOURCES`].
    fn names_a_source(reproduces: &str) -> bool {
        let names_a_file = reproduces
            .split([' ', ',', ';', '(', ')'])
            .any(|word| word.starts_with("srt/") && word.ends_with(".py") && word.len() > "srt/.py".len());
        names_a_file || OTHER_SOURCES.iter().any(|source| reproduces.starts_with(source))
    }

    /// The releases `reproduces` names: each `0.5.N`, and every release of a range `0.5.A–0.5.B`.
    fn releases_named(reproduces: &str) -> BTreeSet<Release> {
        let release = |word: &str| word.trim_end_matches('.').strip_prefix("0.5.")?.parse().ok().map(v0_5);
        reproduces
            .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '–'))
            .flat_map(|word| match word.split_once('–') {
                Some((first, last)) => match (release(first), release(last)) {
                    (Some(first), Some(last)) => KNOWN.iter().copied().filter(|r| (first..=last).contains(r)).collect(),
                    _ => Vec::new(),
                },
                None => release(word).into_iter().collect(),
            })
            .collect()
    }

    /// Why `reproduces` is no citation, if it is none: empty, more than one line, or naming no source.
    fn citation_problem(reproduces: &str) -> Option<&'static str> {
        if reproduces.trim().is_empty() {
            Some("says nothing of what it reproduces")
        } else if reproduces.contains('\n') {
            Some("says what it reproduces on more than one line")
        } else if !names_a_source(reproduces) {
            Some("names no SGLang file (srt/….py) it reproduces, nor another source (kvpilot's own, the kubelet)")
        } else {
            None
        }
    }

    #[test]
    fn a_citation_names_its_source_and_its_releases() {
        assert_eq!(citation_problem(""), Some("says nothing of what it reproduces"));
        assert!(citation_problem("the PD hook").is_some(), "no file");
        assert!(citation_problem("handle_dwdp, srt/.py (0.5.19)").is_some(), "no file name");
        assert_eq!(citation_problem("handle_dwdp, srt/arg_groups/parallel_hook.py (0.5.19–0.5.23)"), None);
        assert_eq!(citation_problem("the kubelet: it runs the first command item"), None);
        let named = releases_named("f, srt/a.py (0.5.17–0.5.18, 0.5.21); g, srt/b.py (0.5.23).");
        assert_eq!(named, BTreeSet::from([v0_5(17), v0_5(18), v0_5(21), v0_5(23)]));
    }

    #[test]
    fn every_entry_says_what_it_reproduces_in_each_of_its_releases() {
        for rule in RULES.iter().chain(SERVER_ROLE_RULES) {
            if let Some(problem) = citation_problem(rule.reproduces) {
                panic!("{} ({}) {problem}: {:?}", rule.id, rule.about, rule.reproduces);
            }
            let named = releases_named(rule.reproduces);
            let unnamed: Vec<String> =
                KNOWN.iter().filter(|r| rule.span.contains(**r) && !named.contains(r)).map(|r| r.to_string()).collect();
            assert!(unnamed.is_empty(), "{} ({}) says not what it reproduces in {unnamed:?}", rule.id, rule.about);
        }
        let others = pod::ALL.iter().copied().chain([COMMAND_LINE, ONE_WORD_COMMAND, CACHE_WIRING]);
        for rule in others {
            if let Some(problem) = citation_problem(rule.reproduces) {
                panic!("{} ({}) {problem}: {:?}", rule.id, rule.about, rule.reproduces);
            }
        }
    }

    #[test]
    fn every_id_is_documented_in_docs_rules_md() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules.md")).unwrap();
        let undocumented: Vec<String> = sources()
            .into_iter()
            .flat_map(|(source, ids)| ids.into_iter().map(move |id| (source, id)))
            .filter(|(_, id)| !doc.contains(&format!("\n| {id} | ")))
            .map(|(source, id)| format!("{id} ({source})"))
            .collect();
        assert!(undocumented.is_empty(), "no row in docs/rules.md for {undocumented:?}");
    }

    /// The test code of the crate: the test modules and test files under src/, tests/, and the
    /// parity harness's parts (both sides: its scripts and compare/).
    fn test_sources() -> String {
        fn walk(dir: &Path, out: &mut String) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                    continue;
                }
                let Some(extension) = path.extension().filter(|extension| *extension == "rs" || *extension == "py")
                else {
                    continue;
                };
                let text = std::fs::read_to_string(&path).unwrap();
                let name = path.file_name().unwrap().to_string_lossy();
                let in_tests = path.components().any(|part| part.as_os_str() == "tests");
                if in_tests || name.ends_with("tests.rs") || name == "test_support.rs" {
                    // The parity harness's parts name the rules they compare with SGLang's own code.
                    if extension == "py" && !path.ancestors().any(|dir| dir.ends_with("tests/parity")) {
                        continue;
                    }
                    *out += &text;
                } else if let Some(at) = test_module_at(&text) {
                    *out += &text[at..];
                }
            }
        }
        let mut out = String::new();
        for dir in ["src", "tests"] {
            walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut out);
        }
        out
    }

    /// Where a file's `#[cfg(test)] mod tests` starts, whatever its visibility (a module whose
    /// helpers other modules' tests use is `pub(super)`).
    fn test_module_at(text: &str) -> Option<usize> {
        text.match_indices("#[cfg(test)]\n").map(|(at, _)| at).find(|at| {
            let next = text[at + "#[cfg(test)]\n".len()..].lines().next().unwrap_or_default();
            next.trim_end_matches([' ', '{', ';']).split_whitespace().collect::<Vec<_>>().ends_with(&["mod", "tests"])
        })
    }

    #[test]
    fn the_test_sources_hold_every_test_module() {
        let tests = test_sources();
        // Tests of sglang::guard's and sglang::server's modules, which are pub(super) (verdict's
        // tests use their helpers); named in two halves, so that this file does not hold them.
        for (first, second) in [
            ("fn servers_settings_env_and_model_source", "_are_read"),
            ("fn host_pool_memory_is_every_pool", "_of_every_rank_on_the_pod"),
        ] {
            assert!(tests.contains(&format!("{first}{second}")), "{first}{second}");
        }
        assert_eq!(test_module_at("fn f() {}\n#[cfg(test)]\nfn helper() {}\n"), None);
    }

    /// Whether a test names the rule's id, or asserts one of its messages (up to the first value
    /// it interpolates).
    fn exercised(tests: &str, id: &str) -> bool {
        let messages =
            RULES.iter().chain(SERVER_ROLE_RULES).filter(|rule| rule.id == id).flat_map(|rule| rule.messages);
        tests.contains(&format!("\"{id}\""))
            || messages
                .map(|message| message.text.split('{').next().unwrap_or_default())
                .any(|literal| literal.len() >= 20 && tests.contains(literal))
    }

    #[test]
    fn every_id_is_exercised_by_a_test() {
        // A string continued on the next line reads as one.
        let tests = test_sources().split("\\\n").map(str::trim_start).collect::<String>();
        let unexercised: Vec<String> = sources()
            .into_iter()
            .flat_map(|(source, ids)| ids.into_iter().map(move |id| (source, id)))
            .filter(|(_, id)| !exercised(&tests, id))
            .map(|(source, id)| format!("{id} ({source})"))
            .collect();
        assert!(unexercised.is_empty(), "no test names {unexercised:?}");
    }
}
