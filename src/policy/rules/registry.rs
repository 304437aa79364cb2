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

/// A rule whose findings do not come from the rules table: its id and what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleInfo {
    pub id: &'static str,
    pub about: &'static str,
}

/// kvpilot's checks of the pods it runs for a resource (docs/pods.md).
pub const POD_RULES: [RuleInfo; 9] = [
    POD_EXTRA_ARGS,
    POD_UNEVEN_REPLICA,
    POD_MODEL_SOURCE,
    POD_CACHE_CAPACITY,
    POD_STORAGE_BACKEND,
    POD_HOST_POOL_SIZE,
    POD_ROUTER,
    POD_COMMAND_LINE,
    POD_SHARED_PREFIX_READS,
];
pub const POD_EXTRA_ARGS: RuleInfo = RuleInfo { id: "POD1", about: "`extraArgs` sets a flag kvpilot decides" };
pub const POD_UNEVEN_REPLICA: RuleInfo = RuleInfo {
    id: "POD2",
    about: "`nodesPerReplica` does not divide TP × PP, or `gpusPerPod` × `nodesPerReplica` ≠ TP × PP",
};
pub const POD_MODEL_SOURCE: RuleInfo = RuleInfo {
    id: "POD3",
    about: "`spec.model.source` names neither or both of hub and volume, a volume with no source, or a path \
            leaving the volume",
};
pub const POD_CACHE_CAPACITY: RuleInfo = RuleInfo { id: "POD4", about: "`spec.cache.capacity` is no number of bytes" };
pub const POD_STORAGE_BACKEND: RuleInfo = RuleInfo {
    id: "POD5",
    about: "`spec.disaggregation.hicacheStorageBackend` names a backend beside `spec.cache`'s own",
};
pub const POD_HOST_POOL_SIZE: RuleInfo = RuleInfo {
    id: "POD6",
    about: "`spec.cache.hostPoolSize` under 1G, or a memory in `spec.decode.resources` it cannot be added to",
};
pub const POD_ROUTER: RuleInfo = RuleInfo {
    id: "POD7",
    about: "`spec.prefill` together with `spec.disaggregation.prefill`; an enabled `spec.router` without \
            `spec.prefill`; prefill and decode ports that differ while a router runs",
};
pub const POD_COMMAND_LINE: RuleInfo = RuleInfo {
    id: "POD8",
    about: "a fleet's command line with its `extraArgs` is one the release's own parser refuses",
};

pub const POD_SHARED_PREFIX_READS: RuleInfo = RuleInfo {
    id: "POD9",
    about: "`spec.cache.reuse` on an MLA model whose decode replicas span nodes (`nodesPerReplica` > 1)",
};

/// A server's command line that the release's own parser refuses (the guard, docs/guard.md).
pub const COMMAND_LINE: RuleInfo = RuleInfo { id: "CLI", about: "the release's own parser refuses the command line" };

/// A server's whole command line written as one `command` word (the guard, docs/guard.md).
pub const ONE_WORD_COMMAND: RuleInfo = RuleInfo {
    id: "EXEC",
    about: "a `command` item holds a whole command line: the kubelet runs it as one file name and the container \
            never starts",
};

/// A pod whose SGLang server cannot reach the kvpilot cache runtime beside it (the guard,
/// docs/guard.md).
pub const CACHE_WIRING: RuleInfo = RuleInfo {
    id: "POD10",
    about: "a server using kvpilot's connector whose socket is not where the pod's cache runtime listens, or whose \
            `PYTHONPATH` misses the directory the pod's installer writes the connector to",
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    /// Every id a verdict can carry, once each, by where its findings come from.
    fn sources() -> [(&'static str, BTreeSet<&'static str>); 6] {
        [
            ("the rules table", RULES.iter().map(|rule| rule.id).collect()),
            ("the server-role rules", SERVER_ROLE_RULES.iter().map(|rule| rule.id).collect()),
            ("the pod rules", POD_RULES.iter().map(|rule| rule.id).collect()),
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
        assert_eq!(POD_RULES.iter().map(|rule| rule.id).collect::<BTreeSet<_>>().len(), POD_RULES.len());
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
                } else if let Some(at) = text.find("#[cfg(test)]\nmod tests") {
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
