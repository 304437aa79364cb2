//! The tree cache a server builds (`mem_cache/registry.py`, `default_radix_cache_factory` and
//! `create_tree_cache`) and the KV cache builder's checks after it: what only the unified radix tree serves.

use super::predicates::{
    CacheOptions, HOST_MEMORY_MODE, LINKER, NUM_STEPS, RETRACTION_BACKUP, SPECULATIVE_ALGORITHM,
    UNIFIED_RADIX_TREE_ENV, buffer_only, gemma4_assistant_draft, host_memory_mode_unset, host_pool, multi_layer_eagle,
    own_radix_cache, service_prefill, speculative_algorithm, to_cpu_tensor,
};
use super::{EVERY_SERVER, Finding, Fix, Phase, Rule, RuleInput, Subject, text, text_from, when, when_with};
use crate::api::{FleetSpec, KvPool, LayoutFeature, RetractionBackup};
use crate::policy::argv::{given, option_value};
use crate::release::{Span, v0_5};

pub(super) const H1: Rule = Rule {
    id: "H1",
    about: "buffer-only host memory needs the unified tree",
    reproduces: "create_tree_cache, srt/mem_cache/registry.py (0.5.19–0.5.23)",
    field: HOST_MEMORY_MODE,
    span: Span::since(v0_5(19)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text(
        "--hicache-host-memory-mode buffer_only is only implemented for the unified radix tree; this model \
         selected {cache}.",
    )],
    check: |c| {
        let cache = server_tree_cache(c);
        when_with(
            c.settings.hierarchical_cache && buffer_only(c) && !cache.is_unified(),
            vec![("cache", cache.class().into())],
        )
    },
    fix: Fix::Rewrite {
        apply: host_memory_mode_unset,
        hint: "leave hicacheHostMemoryMode unset (cache): this model's tree cache keeps its data in host memory",
    },
    ..Rule::DEFAULT
};

pub(super) const H2: Rule = Rule {
    id: "H2",
    about: "session radix cache needs the unified tree",
    reproduces: "create_tree_cache, srt/mem_cache/registry.py (0.5.17–0.5.23)",
    field: SESSION_RADIX_CACHE_FIELD,
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[
        text(
            "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Set \
             SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 (or remove --enable-session-radix-cache).",
        ),
        text_from(
            19,
            "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag \
             or the option that selected another tree cache for this model.",
        ),
    ],
    check: |c| tree_cache_finding(non_unified_tree_among(c, |args| given(args, SESSION_RADIX_CACHE))),
    fix: Fix::Manual {
        hint: "remove --enable-session-radix-cache from extraArgs, or run the servers with a tree cache that keeps \
               sessions (decode radix cache on a PD decode server; SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 on 0.5.17 \
               and 0.5.18)",
    },
    ..Rule::DEFAULT
};

pub(super) const H5: Rule = Rule {
    id: "H5",
    about: "T-LRU eviction needs the unified tree",
    reproduces: "create_tree_cache, srt/mem_cache/registry.py (0.5.21–0.5.23)",
    field: EVICTION_POLICY_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text(
        "--radix-eviction-policy tlru requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or \
         the option that selected another tree cache for this model.",
    )],
    check: |c| {
        tree_cache_finding(non_unified_tree_among(c, |args| option_value(args, EVICTION_POLICY) == Some("tlru")))
    },
    fix: Fix::Manual {
        hint: "pass another --radix-eviction-policy in extraArgs (lru is the default), or run the servers with the \
               unified tree cache (decode radix cache on a 0.5.21 PD decode server, no --enable-flexkv; a pure-SWA \
               model never gets it)",
    },
    ..Rule::DEFAULT
};

pub(super) const H6: Rule = Rule {
    id: "H6",
    about: "streaming sessions need the unified tree",
    reproduces: "create_tree_cache, srt/mem_cache/registry.py (0.5.22–0.5.23)",
    field: STREAMING_SESSION_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text(
        "--enable-streaming-session is not verified with {cache}; streaming sessions run on UnifiedRadixCache. \
         Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.",
    )],
    check: |c| tree_cache_finding(non_unified_tree_among(c, |args| given(args, STREAMING_SESSION))),
    fix: Fix::Manual {
        hint: "remove --enable-streaming-session from extraArgs, or --enable-flexkv, which selects another tree \
               cache (a pure-SWA model never gets the unified one)",
    },
    ..Rule::DEFAULT
};

pub(super) const H7: Rule = Rule {
    id: "H7",
    about: "DeepSeek-V4 host pools are sized by ratio",
    reproduces: "_deepseek_v4_num_host_pages, srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py (0.5.17–0.5.23)",
    field: HOST_POOL_SIZE_FIELD,
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text("DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.")],
    check: |c| when(c.layout.has(LayoutFeature::DeepseekV4) && sized_host_pool_on_unified_tree(c)),
    fix: Fix::Manual {
        hint: "drop --hicache-size ({spec.cache.hostPoolSize} where kvpilot renders it): DeepSeek-V4 sizes its \
               host pools from its device pools by {spec.disaggregation.hostPoolRatio}",
    },
    ..Rule::DEFAULT
};

pub(super) const N5: Rule = Rule {
    id: "N5",
    about: "Mamba state needs the unified tree",
    reproduces: "create_tree_cache, srt/mem_cache/registry.py (0.5.22–0.5.23)",
    field: FLEXKV_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text(
        "Models with mamba state are not verified with {cache}; mamba state lives in UnifiedRadixCache. Please \
         open an issue or a PR at https://github.com/sgl-project/sglang if you need this.",
    )],
    check: |c| tree_cache_finding(non_unified_tree_among(c, |_| c.layout.uses_ssm_state())),
    fix: Fix::Manual {
        hint: "remove --enable-flexkv from extraArgs: FlexKV's tree cache keeps no Mamba state, which this model has",
    },
    ..Rule::DEFAULT
};

pub(super) const N6: Rule = Rule {
    id: "N6",
    about: "a HiCache draft sidecar needs the unified tree",
    reproduces: "maybe_register_hicache_draft, srt/mem_cache/kv_cache_builder.py (0.5.19–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    span: Span::since(v0_5(19)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text("HiCache draft pools require UnifiedRadixCache.")],
    check: |c| {
        let cache = sidecar_draft_on_other_tree(c)?;
        Some(Finding {
            args: Vec::new(),
            detail: Some(format!("{}, and the tree cache is a {}", sidecar_draft_reason(c), cache.class())),
        })
    },
    fix: Fix::Manual {
        hint: "give the servers the unified tree cache (decode radix cache on a PD decode server, no --enable-flexkv \
               or SGLANG_EXPERIMENTAL_CPP_RADIX_TREE), or turn HiCache and host-pool retraction off, or use a draft \
               that packs into the target's pools (EAGLE with the model's NextN layers)",
    },
    ..Rule::DEFAULT
};

pub(super) const X4: Rule = Rule {
    id: "X4",
    about: "external cache linker × sidecar draft",
    reproduces: "BaseSpecWorker._build_hicache_draft_plan, srt/speculative/base_spec_worker.py (0.5.20–0.5.22)",
    field: LINKER,
    span: Span::between(v0_5(20), v0_5(22)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text("The external linker only supports packed draft KV caches.")],
    check: |c| {
        linker_with_sidecar_draft(c).then(|| Finding { args: Vec::new(), detail: Some(sidecar_draft_reason(c)) })
    },
    fix: Fix::Manual {
        hint: "turn unifiedCacheExternalLinker off (on prefill servers: drop --enable-unified-cache-external-linker \
               from their extraArgs), or use a draft that packs into the target's pools (EAGLE with the model's \
               NextN layers); SGLang 0.5.23 takes one draft KV pool outside the target's",
    },
    ..Rule::DEFAULT
};

pub(super) const X5: Rule = Rule {
    id: "X5",
    about: "external cache linker × multi-layer sidecar draft",
    reproduces: "BaseSpecWorker._build_hicache_draft_plan, srt/speculative/base_spec_worker.py (0.5.23)",
    field: LINKER,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    phase: Phase::PoolBuild,
    messages: &[text("The external linker supports one non-packed draft KV pool.")],
    check: |c| {
        linker_with_many_sidecar_draft_runners(c).map(|runners| Finding {
            args: Vec::new(),
            detail: Some(format!(
                "{}, and multi-layer EAGLE builds {runners} draft runners, one per draft step",
                sidecar_draft_reason(c)
            )),
        })
    },
    fix: Fix::Manual {
        hint: "turn unifiedCacheExternalLinker off (on prefill servers: drop --enable-unified-cache-external-linker \
               from their extraArgs), run one draft step (--speculative-num-steps 1 in the extraArgs), or use a draft \
               that packs into the target's pools (EAGLE with the model's NextN layers)",
    },
    ..Rule::DEFAULT
};

pub(super) const R8: Rule = Rule {
    id: "R8",
    about: "host_pool needs UnifiedRadixCache",
    reproduces: "build_kv_cache, srt/mem_cache/kv_cache_builder.py (0.5.18–0.5.23)",
    field: RETRACTION_BACKUP,
    span: Span::since(v0_5(18)),
    phase: Phase::PoolBuild,
    messages: &[text(
        "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.",
    )],
    changes: &[
        text_from(
            18,
            "decode radix cache on a dense model without SGLANG_ENABLE_UNIFIED_RADIX_TREE, a pure-SWA model, \
             SGLANG_EXPERIMENTAL_CPP_RADIX_TREE, LMCache or --enable-flexkv",
        ),
        text_from(
            19,
            "decode radix cache on a pure-SWA model, with SGLANG_EXPERIMENTAL_CPP_RADIX_TREE (to 0.5.20), LMCache \
             (to 0.5.20) or --enable-flexkv",
        ),
    ],
    // The tree the decode server builds: without decode radix cache, host-pool retraction
    // builds the unified tree.
    check: |c| when(host_pool(c) && !server_tree_cache(c).is_unified()),
    fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeRadixCache off" },
    ..Rule::DEFAULT
};

const CPP_RADIX_TREE_ENV: &str = "SGLANG_EXPERIMENTAL_CPP_RADIX_TREE";
const SESSION_RADIX_CACHE: &str = "--enable-session-radix-cache";
const EVICTION_POLICY: &str = "--radix-eviction-policy";
const STREAMING_SESSION: &str = "--enable-streaming-session";
const FLEXKV: &str = "--enable-flexkv";

/// An option in `extraArgs` is named `spec.decode.extraArgs[--option]`.
const SESSION_RADIX_CACHE_FIELD: &str = "spec.decode.extraArgs[--enable-session-radix-cache]";
const EVICTION_POLICY_FIELD: &str = "spec.decode.extraArgs[--radix-eviction-policy]";
const STREAMING_SESSION_FIELD: &str = "spec.decode.extraArgs[--enable-streaming-session]";
const FLEXKV_FIELD: &str = "spec.decode.extraArgs[--enable-flexkv]";
const HOST_POOL_SIZE: &str = "--hicache-size";
const HOST_POOL_SIZE_FIELD: &str = "spec.cache.hostPoolSize";

/// The tree cache a server builds, as `default_radix_cache_factory` (mem_cache/registry.py)
/// picks it from what the settings decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TreeCache {
    Unified,
    LmcacheUnified,
    Chunk,
    SwaChunk,
    PureSwaChunk,
    PureSwaRadix,
    Radix,
    HiRadix,
    RadixCpp,
    LmcRadix,
    FlexKv,
}

impl TreeCache {
    /// Its class name, which SGLang's messages print.
    fn class(self) -> &'static str {
        match self {
            Self::Unified => "UnifiedRadixCache",
            Self::LmcacheUnified => "LMCacheUnifiedRadixCache",
            Self::Chunk => "ChunkCache",
            Self::SwaChunk => "SWAChunkCache",
            Self::PureSwaChunk => "PureSWAChunkCache",
            Self::PureSwaRadix => "PureSWARadixCache",
            Self::Radix => "RadixCache",
            Self::HiRadix => "HiRadixCache",
            Self::RadixCpp => "RadixCacheCpp",
            Self::LmcRadix => "LMCRadixCache",
            Self::FlexKv => "FlexKVRadixCache",
        }
    }

    /// A UnifiedRadixCache (or its LMCache subclass): the only tree with sessions, streaming
    /// sessions, T-LRU eviction, buffer-only host memory and, from 0.5.22, Mamba state (SGLang
    /// gives the unified tree the Mamba component whenever the model has Mamba state).
    fn is_unified(self) -> bool {
        matches!(self, Self::Unified | Self::LmcacheUnified)
    }
}

/// The tree cache of a server of `fleet` (whose env it reads) with cache `options`, whose radix
/// cache is `disabled` (a PD decode server without decode radix cache, or
/// `--disable-radix-cache`), with host-pool retraction or not. Chunked prefill is taken to be on
/// (SGLang sizes it from the GPU; even -1 is "not None" there). `--enable-flexkv` is read from the
/// fleet's arguments: in every release it replaces the factory's last, default choice.
fn tree_cache(
    c: &RuleInput<'_>,
    fleet: &FleetSpec,
    options: CacheOptions,
    disabled: bool,
    host_pool: bool,
) -> TreeCache {
    let layout = c.layout;
    let (swa, pure, ssm) = (layout.is_hybrid_swa(), layout.kv_pool == KvPool::PureSwa, layout.uses_ssm_state());
    let CacheOptions { hierarchical, lmcache, linker } = options;
    let flexkv = given(&fleet.extra_args, FLEXKV);
    if c.release >= v0_5(22) {
        return match () {
            _ if disabled => {
                if pure && !host_pool {
                    TreeCache::PureSwaRadix
                } else {
                    TreeCache::Unified
                }
            }
            _ if lmcache => TreeCache::LmcacheUnified,
            _ if linker => TreeCache::Unified,
            _ if pure => TreeCache::PureSwaRadix,
            _ if flexkv => TreeCache::FlexKv,
            _ => TreeCache::Unified,
        };
    }
    if disabled && host_pool && c.release >= v0_5(18) {
        return TreeCache::Unified;
    }
    if disabled {
        return match (swa, pure) {
            (false, _) => TreeCache::Chunk,
            (true, true) => TreeCache::PureSwaChunk,
            (true, false) => TreeCache::SwaChunk,
        };
    }
    if c.release <= v0_5(20) && fleet.env_on(CPP_RADIX_TREE_ENV) {
        return TreeCache::RadixCpp;
    }
    match c.release {
        r if r <= v0_5(18) => match () {
            _ if fleet.env_on(UNIFIED_RADIX_TREE_ENV) => TreeCache::Unified,
            _ if pure => TreeCache::PureSwaRadix,
            _ if swa || ssm => TreeCache::Unified,
            _ if hierarchical && layout.has(LayoutFeature::Dsa) => TreeCache::Unified,
            _ if hierarchical => TreeCache::HiRadix,
            _ if lmcache => TreeCache::LmcRadix,
            _ if flexkv => TreeCache::FlexKv,
            _ => TreeCache::Radix,
        },
        r if r <= v0_5(20) => match () {
            _ if linker => TreeCache::Unified,
            _ if pure => TreeCache::PureSwaRadix,
            _ if lmcache => TreeCache::LmcRadix,
            _ if flexkv => TreeCache::FlexKv,
            _ => TreeCache::Unified,
        },
        _ => match () {
            _ if lmcache => TreeCache::LmcacheUnified,
            _ if linker => TreeCache::Unified,
            _ if pure => TreeCache::PureSwaRadix,
            _ if flexkv => TreeCache::FlexKv,
            _ => TreeCache::Unified,
        },
    }
}

/// The tree cache of the server the verdict is about: the decode servers of a service or the
/// guard's decode server (radix cache off without decode radix cache; host-pool retraction as
/// chosen or as SGLang's automatic choice would), or the guard's other server (radix cache on
/// unless `--disable-radix-cache`).
fn server_tree_cache(c: &RuleInput<'_>) -> TreeCache {
    match c.subject {
        Subject::Service | Subject::DecodeServer => {
            tree_cache(c, c.decode, CacheOptions::of_settings(c), !own_radix_cache(c), resolved_host_pool(c))
        }
        Subject::OtherServer => tree_cache(c, c.decode, CacheOptions::of_settings(c), !own_radix_cache(c), false),
    }
}

/// Whether a decode server retracts to the host pool, as chosen or as SGLang's automatic choice
/// resolves it.
fn resolved_host_pool(c: &RuleInput<'_>) -> bool {
    host_pool(c)
        || (c.settings.retraction_backup.is_none()
            && crate::policy::automatic_retraction_backup(c.settings, c.decode, c.layout, c.release)
                == RetractionBackup::HostPool)
}

/// N6: the servers in scope whose draft worker backs its KV up through a HiCache sidecar pool,
/// found on a tree that is not a UnifiedRadixCache. SGLang plans the draft's host backup when the
/// server has HiCache, the external cache linker (0.5.20 on) or host-pool retraction (a
/// service's prefill servers have these only through their `extraArgs`); EAGLE3,
/// STANDALONE and DFLASH drafts always take the sidecar plan, EAGLE drafts without NextN layers
/// and DSPARK drafts other than DeepSeek-V4's DSpark head do ([`sidecar_draft`]; fused drafts
/// need unified memory).
fn sidecar_draft_on_other_tree(c: &RuleInput<'_>) -> Option<TreeCache> {
    if !sidecar_draft(c) || c.settings.enable_unified_memory {
        return None;
    }
    let planned = |options: CacheOptions| options.hierarchical || options.linker;
    let decode = match c.subject {
        Subject::Service | Subject::DecodeServer => planned(CacheOptions::of_settings(c)) || resolved_host_pool(c),
        Subject::OtherServer => planned(CacheOptions::of_settings(c)),
    };
    let prefill = service_prefill(c).and_then(|fleet| {
        let options = CacheOptions::of_prefill(c, fleet);
        planned(options).then(|| tree_cache(c, fleet, options, false, false))
    });
    decode.then(|| server_tree_cache(c)).into_iter().chain(prefill).find(|cache| !cache.is_unified())
}

/// X4: a server in scope with the external cache linker whose draft backs its KV up outside the
/// target's pools ([`sidecar_draft`]).
/// The linker alone makes SGLang plan the draft's backup, so HiCache and the tree do not matter.
fn linker_with_sidecar_draft(c: &RuleInput<'_>) -> bool {
    sidecar_draft(c) && linker_server_args(c).next().is_some()
}

/// X5 (0.5.23 on): a server in scope with the external cache linker whose sidecar draft has more
/// than one draft runner ([`draft_runners`]); SGLang 0.5.23 takes one non-packed draft pool.
/// Returns the runner count of the first such server.
fn linker_with_many_sidecar_draft_runners(c: &RuleInput<'_>) -> Option<i64> {
    if !sidecar_draft(c) {
        return None;
    }
    linker_server_args(c).map(|args| draft_runners(c, args)).find(|runners| *runners > 1)
}

/// The arguments of the servers in scope that run the external cache linker: the decode servers
/// (the guard's one server), and a service's prefill servers, through their own `extraArgs`.
fn linker_server_args<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a [String]> {
    let decode = CacheOptions::of_settings(c).linker.then_some(c.decode.extra_args.as_slice());
    let prefill = service_prefill(c)
        .filter(|fleet| CacheOptions::of_prefill(c, fleet).linker)
        .map(|fleet| fleet.extra_args.as_slice());
    decode.into_iter().chain(prefill)
}

/// How many draft runners a server's speculative worker builds: one per draft step for
/// multi-layer EAGLE (EAGLE, NEXTN and EAGLE3 with `--enable-multi-layer-eagle`, or EAGLE on an
/// architecture of [`MULTI_LAYER_EAGLE_ARCHITECTURES`]), one otherwise. Without
/// `--speculative-num-steps` SGLang chooses 3 steps, 5 for Llama (adaptive decoding is turned off
/// for multi-layer EAGLE first).
fn draft_runners(c: &RuleInput<'_>, args: &[String]) -> i64 {
    let eagle = matches!(speculative_algorithm(c).as_deref(), Some("EAGLE" | "NEXTN" | "EAGLE3"));
    if !eagle || !multi_layer_eagle(c, args) {
        return 1;
    }
    let chosen = if c.layout.architecture == "LlamaForCausalLM" { 5 } else { 3 };
    let steps = option_value(args, NUM_STEPS).map_or(Some(chosen), |steps| steps.parse::<i64>().ok());
    steps.unwrap_or(1).max(1)
}

/// Whether the speculative draft backs its KV up through a sidecar pool
/// (`_build_hicache_draft_plan` packs only NextN EAGLE and DeepSeek-V4 DSpark drafts): always for
/// EAGLE3, STANDALONE and DFLASH, for an EAGLE draft model whose config gives it no NextN
/// layers, and for a DSPARK draft model that is not DeepSeek-V4's DSpark head. Without a draft
/// model, SGLang drafts EAGLE with the model's own NextN layers and DSPARK with the DSpark head
/// the checkpoint bundles, which pack (a model without them gets no draft, which SGLang refuses
/// elsewhere).
fn sidecar_draft(c: &RuleInput<'_>) -> bool {
    match speculative_algorithm(c).as_deref() {
        Some("EAGLE3" | "STANDALONE" | "DFLASH") => true,
        // A Gemma-4 assistant draft runs as FROZEN_KV_MTP, whose worker has no draft runners.
        Some("EAGLE" | "NEXTN") => {
            !gemma4_assistant_draft(c) && c.draft.is_some_and(|draft| draft.has(LayoutFeature::NoNextnLayers))
        }
        Some("DSPARK") => c.draft.is_some_and(|draft| !draft.has(LayoutFeature::DsparkHead)),
        _ => false,
    }
}

/// Why the draft backs its KV up through a sidecar pool ([`sidecar_draft`]), for the fix.
fn sidecar_draft_reason(c: &RuleInput<'_>) -> String {
    let algorithm = speculative_algorithm(c).unwrap_or_default();
    let why = match algorithm.as_str() {
        "EAGLE" | "NEXTN" => "the EAGLE draft model has no NextN layers".to_string(),
        "DSPARK" => "the DSPARK draft model is not DeepSeek-V4's DSpark head".to_string(),
        _ => format!("{algorithm} drafts always do"),
    };
    format!("the draft backs its KV up through a HiCache sidecar pool ({why})")
}

/// The first tree cache that is not a UnifiedRadixCache among the servers in scope whose
/// arguments `wants_unified` picks: the decode servers (the guard's one server), and a service's
/// prefill servers, which keep their radix cache and retract nothing.
fn non_unified_tree_among(c: &RuleInput<'_>, wants_unified: impl Fn(&[String]) -> bool) -> Option<TreeCache> {
    let decode = wants_unified(&c.decode.extra_args).then(|| server_tree_cache(c));
    let prefill = service_prefill(c)
        .filter(|fleet| wants_unified(&fleet.extra_args))
        .map(|fleet| tree_cache(c, fleet, CacheOptions::of_prefill(c, fleet), false, false));
    decode.into_iter().chain(prefill).find(|cache| !cache.is_unified())
}

/// H7: a server in scope whose unified tree cache attaches its host pools (HiCache, or
/// host-pool retraction from 0.5.18) with `--hicache-size` above 0. Only the unified cache's
/// HiCache set-up picks the model's host-pool stack, and DeepSeek-V4's sizes its pools from the
/// device pools alone. A service's decode servers get `--hicache-size` from `spec.cache`
/// (`effective_spec` writes it where kvpilot renders it) or their `extraArgs`, its prefill
/// servers from their own `extraArgs`.
fn sized_host_pool_on_unified_tree(c: &RuleInput<'_>) -> bool {
    let sized =
        |args: &[String]| option_value(args, HOST_POOL_SIZE).and_then(|v| v.trim().parse::<i64>().ok()) > Some(0);
    let attached = |cache: TreeCache, options: CacheOptions, host_pool: bool| {
        cache.is_unified() && (options.hierarchical || (host_pool && c.release >= v0_5(18)))
    };
    let host_pool = matches!(c.subject, Subject::Service | Subject::DecodeServer) && resolved_host_pool(c);
    let decode = sized(&c.decode.extra_args) && attached(server_tree_cache(c), CacheOptions::of_settings(c), host_pool);
    let prefill = service_prefill(c).filter(|fleet| sized(&fleet.extra_args)).is_some_and(|fleet| {
        let options = CacheOptions::of_prefill(c, fleet);
        attached(tree_cache(c, fleet, options, false, false), options, false)
    });
    decode || prefill
}

/// A finding naming the tree cache, for the checks `create_tree_cache` makes after building it
/// (H2, H5, H6, N5).
fn tree_cache_finding(cache: Option<TreeCache>) -> Option<Finding> {
    when_with(true, vec![("cache", cache?.class().into())])
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn r8_host_pool_with_decode_radix_cache_on_pure_swa() {
        let settings = with(|s| {
            host_pool(s);
            s.decode_radix_cache = true;
        });
        let (reject, rewrite) = both_modes(settings, &FleetSpec::default(), &pure_swa());
        // R13 does not fire: kvpilot adds SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 on 0.5.19.
        assert_eq!(ids(&reject), vec![("R8", BACKUP), ("R16", RADIX)]);
        assert_eq!(
            reject.violations[0].message,
            "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached."
        );
        assert_eq!(rewrite.outcome, Outcome::Rewritten);
        let rewrites: Vec<_> = rewrite.rewrites.iter().map(|r| (r.rule.as_str(), r.field.as_str())).collect();
        assert_eq!(rewrites, vec![("R8", BACKUP), ("R16", RADIX)]);
    }

    #[test]
    fn r8_on_0_5_18_needs_the_unified_tree_env_for_decode_radix_cache() {
        let settings = with(|s| {
            s.retraction_backup = Some(RetractionBackup::HostPool);
            s.decode_radix_cache = true;
        });
        let fires: Vec<bool> =
            messages("R8", &settings, &FleetSpec::default(), &full()).iter().map(Option::is_some).collect();
        assert_eq!(fires, [false, true, false, false, false, false, false]);
        let with_env = env_fleet("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1");
        assert_eq!(at(18, &settings, &with_env, &full()).outcome, Outcome::Valid);
    }

    #[test]
    fn h1_h2_follow_the_tree_cache_each_release_builds() {
        let session = FleetSpec { extra_args: vec!["--enable-session-radix-cache".into()], ..FleetSpec::default() };
        let h2 = |patch: u16, cache: &str| {
            if patch < 19 {
                format!(
                    "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Set \
                     SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 (or remove --enable-session-radix-cache)."
                )
            } else {
                format!(
                    "--enable-session-radix-cache requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or \
                     the option that selected another tree cache for this model."
                )
            }
        };
        let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
        // A decode server without decode radix cache: a chunk cache up to 0.5.21, the unified tree after.
        let expected: Vec<Option<String>> = (17..=23).map(|p| (p <= 21).then(|| h2(p, "ChunkCache"))).collect();
        assert_eq!(messages("H2", &cpu, &session, &full()), expected);
        // With decode radix cache: 0.5.17-0.5.18 build the plain RadixCache for a dense model.
        let radix = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.decode_radix_cache = true;
        });
        let expected: Vec<Option<String>> = (17..=23).map(|p| (p <= 18).then(|| h2(p, "RadixCache"))).collect();
        assert_eq!(messages("H2", &radix, &session, &full()), expected);
        let unified_env = FleetSpec { env: env_fleet("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1").env, ..session.clone() };
        assert_eq!(messages("H2", &radix, &unified_env, &full()), vec![None; 7]);
        // No flag, nothing to say.
        assert_eq!(messages("H2", &cpu, &FleetSpec::default(), &full()), vec![None; 7]);

        // H1: HiCache with buffer-only host memory on a pure-SWA model's PureSWARadixCache (0.5.19 on).
        let pure = layout_at(
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/custom-pure-swa.json")).unwrap(),
        );
        assert_eq!(pure.kv_pool, KvPool::PureSwa);
        let buffer_only = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
            s.hicache_host_memory_mode = Some(HicacheHostMemoryMode::BufferOnly);
        });
        let h1 = "--hicache-host-memory-mode buffer_only is only implemented for the unified radix tree; this model \
                  selected PureSWARadixCache.";
        assert_eq!(messages("H1", &buffer_only, &FleetSpec::default(), &pure), on(19..=23, h1));
        assert_eq!(messages("H1", &buffer_only, &FleetSpec::default(), &full()), vec![None; 7]);
    }

    #[test]
    fn h5_h6_n5_follow_the_tree_cache_flexkv_and_pure_swa_included() {
        let args = |args: &[&str]| FleetSpec {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let tlru = |cache: &str| {
            format!(
                "--radix-eviction-policy tlru requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or the \
                 option that selected another tree cache for this model."
            )
        };
        let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
        let radix = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.decode_radix_cache = true;
        });
        // T-LRU (0.5.21 on): 0.5.21's decode servers without decode radix cache build a chunk cache;
        // the option is read in both spellings, the last occurrence winning.
        let expected: Vec<Option<String>> = (17..=23).map(|p| (p == 21).then(|| tlru("ChunkCache"))).collect();
        assert_eq!(messages("H5", &cpu, &args(&["--radix-eviction-policy", "tlru"]), &full()), expected);
        assert_eq!(messages("H5", &cpu, &args(&["--radix-eviction-policy=tlru"]), &full()), expected);
        assert_eq!(
            messages("H5", &cpu, &args(&["--radix-eviction-policy=tlru", "--radix-eviction-policy", "lru"]), &full()),
            vec![None; 7]
        );
        // FlexKV replaces the default tree in every release.
        let flexkv_tlru = args(&["--enable-flexkv", "--radix-eviction-policy", "tlru"]);
        assert_eq!(messages("H5", &radix, &flexkv_tlru, &full()), on(21..=23, &tlru("FlexKVRadixCache")));
        assert_eq!(messages("H5", &radix, &args(&["--radix-eviction-policy", "tlru"]), &full()), vec![None; 7]);

        // Streaming sessions (0.5.22 on): a pure-SWA model's PureSWARadixCache refuses them.
        let pure = layout_at(
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/custom-pure-swa.json")).unwrap(),
        );
        let streaming = args(&["--enable-streaming-session"]);
        let h6 = "--enable-streaming-session is not verified with PureSWARadixCache; streaming sessions run on \
                  UnifiedRadixCache. Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.";
        assert_eq!(messages("H6", &cpu, &streaming, &pure), on(22..=23, h6));
        assert_eq!(messages("H6", &cpu, &streaming, &full()), vec![None; 7]);

        // Mamba state (0.5.22 on) lives only in the unified tree, which FlexKV replaces.
        let n5 = "Models with mamba state are not verified with FlexKVRadixCache; mamba state lives in UnifiedRadixCache. \
                  Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.";
        let flexkv = args(&["--enable-flexkv"]);
        assert_eq!(messages("N5", &radix, &flexkv, &ssm()), on(22..=23, n5));
        assert_eq!(messages("N5", &radix, &flexkv, &full()), vec![None; 7]);
        // Without decode radix cache the decode server's radix cache is disabled, which builds the
        // unified tree before FlexKV is considered.
        assert_eq!(messages("N5", &cpu, &flexkv, &ssm()), vec![None; 7]);
        // A service's prefill servers keep their radix cache, so FlexKV there is refused.
        let model = ssm();
        let input = PolicyInput::of(&cpu, &model, v0_5(23)).with_prefill(Some(&flexkv));
        assert!(evaluate(input).violations.iter().any(|v| v.rule == "N5" && v.message == n5));
    }

    #[test]
    fn h7_refuses_a_sized_deepseek_v4_host_pool_where_the_unified_tree_attaches_one() {
        let h7 = "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.";
        let args = |args: &[&str]| FleetSpec {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let sized = args(&["--hicache-size", "8"]);
        // Host-pool retraction (0.5.18 on) attaches the host pools on the unified tree it builds.
        let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
        assert_eq!(messages("H7", &host_pool, &sized, &dsv4()), on(18..=23, h7));
        assert_eq!(messages("H7", &host_pool, &args(&["--hicache-size=8"]), &dsv4()), on(18..=23, h7));
        // 0 is SGLang's "size from the ratio"; the last occurrence wins.
        assert_eq!(messages("H7", &host_pool, &args(&["--hicache-size", "0"]), &dsv4()), vec![None; 7]);
        assert_eq!(
            messages("H7", &host_pool, &args(&["--hicache-size=8", "--hicache-size", "0"]), &dsv4()),
            vec![None; 7]
        );
        assert_eq!(messages("H7", &host_pool, &FleetSpec::default(), &dsv4()), vec![None; 7]);
        // Other models' host pools take a size.
        assert_eq!(messages("H7", &host_pool, &sized, &full()), vec![None; 7]);
        assert_eq!(messages("H7", &host_pool, &sized, &mla()), vec![None; 7]);
        // HiCache on the decode radix tree, in every release; without HiCache or host-pool
        // retraction no host pool is attached.
        let hicache = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        });
        assert_eq!(messages("H7", &hicache, &sized, &dsv4()), on(17..=23, h7));
        let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
        assert_eq!(messages("H7", &cpu, &sized, &dsv4()), vec![None; 7]);
        // A service's prefill servers with HiCache and a size in their own extraArgs.
        let prefill = args(&["--enable-hierarchical-cache", "--hicache-size", "8"]);
        let model = dsv4();
        let input = PolicyInput::of(&cpu, &model, v0_5(23)).with_prefill(Some(&prefill));
        assert!(evaluate(input).violations.iter().any(|v| v.rule == "H7" && v.message == h7));
    }

    #[test]
    fn x4_refuses_the_external_linker_with_a_sidecar_draft_up_to_0_5_22() {
        let x4 = "The external linker only supports packed draft KV caches.";
        let linker = |algorithm: &str| {
            let algorithm = algorithm.to_string();
            with(move |s| {
                s.unified_cache_external_linker = true;
                s.speculative_algorithm = Some(algorithm);
            })
        };
        for algorithm in ["EAGLE3", "standalone", "DFLASH"] {
            assert_eq!(
                messages("X4", &linker(algorithm), &FleetSpec::default(), &full()),
                on(20..=22, x4),
                "{algorithm}"
            );
        }
        // NextN EAGLE packs into the target's pools; NGRAM has no draft model.
        for algorithm in ["EAGLE", "NGRAM"] {
            assert_eq!(
                messages("X4", &linker(algorithm), &FleetSpec::default(), &full()),
                vec![None; 7],
                "{algorithm}"
            );
        }
        let no_linker = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
        assert_eq!(messages("X4", &no_linker, &FleetSpec::default(), &full()), vec![None; 7]);
        // A service's prefill servers with the linker in their own extraArgs plan their draft too.
        let prefill =
            FleetSpec { extra_args: vec!["--enable-unified-cache-external-linker".into()], ..FleetSpec::default() };
        let model = full();
        let input = PolicyInput::of(&no_linker, &model, v0_5(22)).with_prefill(Some(&prefill));
        assert!(evaluate(input).violations.iter().any(|v| v.rule == "X4" && v.message == x4));
    }

    /// From 0.5.23 the linker takes one sidecar draft pool: multi-layer EAGLE, which builds a draft
    /// runner per step, is refused with more than one step.
    #[test]
    fn x5_refuses_the_external_linker_with_a_multi_layer_sidecar_draft_from_0_5_23() {
        let x5 = "The external linker supports one non-packed draft KV pool.";
        let linker = |algorithm: &str| {
            let algorithm = algorithm.to_string();
            with(move |s| {
                s.unified_cache_external_linker = true;
                s.speculative_algorithm = Some(algorithm);
            })
        };
        let fleet = |args: &[&str]| FleetSpec {
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let multi_layer = fleet(&["--enable-multi-layer-eagle"]);
        // SGLang's own step count (5 for Llama) or the one given.
        assert_eq!(messages("X5", &linker("EAGLE3"), &multi_layer, &full()), on(23..=23, x5));
        let two = fleet(&["--enable-multi-layer-eagle", "--speculative-num-steps=2"]);
        assert_eq!(messages("X5", &linker("EAGLE3"), &two, &full()), on(23..=23, x5));
        let one = fleet(&["--enable-multi-layer-eagle", "--speculative-num-steps", "1"]);
        assert_eq!(messages("X5", &linker("EAGLE3"), &one, &full()), vec![None; 7]);
        // Single-layer EAGLE3 builds one runner; STANDALONE and DFLASH are never multi-layer.
        assert_eq!(messages("X5", &linker("EAGLE3"), &FleetSpec::default(), &full()), vec![None; 7]);
        for algorithm in ["STANDALONE", "DFLASH"] {
            assert_eq!(messages("X5", &linker(algorithm), &multi_layer, &full()), vec![None; 7], "{algorithm}");
        }
        // MiMo-V2's overrides turn multi-layer EAGLE on for EAGLE as given, before NEXTN or a lower-case
        // name is resolved; the model's own NextN layers pack, a draft without them does not.
        let mimo: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/mimo-v2-flash.json")).unwrap();
        let mimo = layout_at(mimo);
        let x5_rules = |algorithm: &str, draft: Option<&AttentionLayout>| {
            at_with_draft(23, &linker(algorithm), &mimo, draft)
                .violations
                .into_iter()
                .filter(|v| v.rule == "X5")
                .count()
        };
        assert_eq!(x5_rules("EAGLE", Some(&full())), 1);
        assert_eq!(x5_rules("NEXTN", Some(&full())), 0);
        assert_eq!(x5_rules("eagle", Some(&full())), 0);
        assert_eq!(x5_rules("EAGLE", None), 0);
        let finding = at_with_draft(23, &linker("EAGLE"), &mimo, Some(&full()))
            .violations
            .into_iter()
            .find(|v| v.rule == "X5")
            .unwrap();
        assert!(
            finding.fix.contains("multi-layer EAGLE builds 3 draft runners, one per draft step"),
            "{}",
            finding.fix
        );
        // A service's prefill servers with the linker and multi-layer EAGLE in their own extraArgs.
        let prefill = fleet(&["--enable-unified-cache-external-linker", "--enable-multi-layer-eagle"]);
        let eagle3 = with(|s| s.speculative_algorithm = Some("EAGLE3".into()));
        let model = full();
        let input = PolicyInput::of(&eagle3, &model, v0_5(23)).with_prefill(Some(&prefill));
        assert!(evaluate(input).violations.iter().any(|v| v.rule == "X5" && v.message == x5));
    }

    #[test]
    fn n6_refuses_a_sidecar_draft_where_the_tree_is_not_unified() {
        let n6 = "HiCache draft pools require UnifiedRadixCache.";
        let hicache = |algorithm: &str| {
            let algorithm = algorithm.to_string();
            with(move |s| {
                s.retraction_backup = Some(RetractionBackup::CpuTensor);
                s.hierarchical_cache = true;
                s.speculative_algorithm = Some(algorithm);
            })
        };
        // A decode server without decode radix cache builds a chunk cache up to 0.5.21.
        for algorithm in ["EAGLE3", "standalone", "DFLASH"] {
            assert_eq!(
                messages("N6", &hicache(algorithm), &FleetSpec::default(), &full()),
                on(19..=21, n6),
                "{algorithm}"
            );
        }
        // NextN EAGLE packs into the target's pools; NGRAM has no draft model.
        for algorithm in ["EAGLE", "NGRAM"] {
            assert_eq!(
                messages("N6", &hicache(algorithm), &FleetSpec::default(), &full()),
                vec![None; 7],
                "{algorithm}"
            );
        }
        // Without HiCache or host-pool retraction no draft backup is planned.
        let plain = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.speculative_algorithm = Some("EAGLE3".into());
        });
        assert_eq!(messages("N6", &plain, &FleetSpec::default(), &full()), vec![None; 7]);
        // FlexKV's tree on a server with decode radix cache, in every release that plans.
        let radix = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
            s.speculative_algorithm = Some("EAGLE3".into());
        });
        let flexkv = FleetSpec { extra_args: vec!["--enable-flexkv".into()], ..FleetSpec::default() };
        assert_eq!(messages("N6", &radix, &flexkv, &full()), on(19..=23, n6));
        assert_eq!(messages("N6", &radix, &FleetSpec::default(), &full()), vec![None; 7]);
        // A service's prefill servers run without HiCache (kvpilot gives it to the decode side), so
        // they plan a draft backup only when their extraArgs turn it on.
        let prefill_n6 = |prefill: &FleetSpec| {
            let model = full();
            let input = PolicyInput::of(&radix, &model, v0_5(23)).with_prefill(Some(prefill));
            evaluate(input).violations.iter().any(|v| v.rule == "N6")
        };
        assert!(!prefill_n6(&flexkv));
        let hicache_flexkv = FleetSpec {
            extra_args: vec!["--enable-flexkv".into(), "--enable-hierarchical-cache".into()],
            ..FleetSpec::default()
        };
        assert!(prefill_n6(&hicache_flexkv));
    }

    /// An EAGLE draft model without NextN layers, or a DSPARK draft that is not DeepSeek-V4's DSpark
    /// head, backs up through a sidecar pool as EAGLE3's does; the others pack, and without a draft
    /// model SGLang drafts with what the model itself carries.
    #[test]
    fn n6_and_x4_take_an_eagle_draft_without_nextn_layers_as_a_sidecar() {
        let eagle = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.hierarchical_cache = true;
            s.speculative_algorithm = Some("EAGLE".into());
        });
        let rules = |settings: &DisaggregationSpec, draft: Option<&AttentionLayout>, patch: u16| {
            let violations = at_with_draft(patch, settings, &full(), draft).violations;
            violations.into_iter().map(|v| v.rule).filter(|r| *r == "N6" || *r == "X4").collect::<Vec<_>>()
        };
        // A Llama draft resolves with no NextN layers; the same config with one NextN layer packs.
        let head = full();
        assert!(head.has(LayoutFeature::NoNextnLayers));
        let mtp = layout_at(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4,
                                   "num_key_value_heads": 8, "head_dim": 128, "num_nextn_predict_layers": 1}));
        assert_eq!(rules(&eagle, Some(&head), 21), ["N6"]);
        let n6 =
            at_with_draft(21, &eagle, &full(), Some(&head)).violations.into_iter().find(|v| v.rule == "N6").unwrap();
        assert!(
            n6.fix.starts_with(
                "the draft backs its KV up through a HiCache sidecar pool (the EAGLE draft model has no NextN layers), \
                 and the tree cache is a ChunkCache; "
            ),
            "{}",
            n6.fix
        );
        assert!(rules(&eagle, Some(&head), 18).is_empty(), "no draft plan before 0.5.19");
        assert!(rules(&eagle, Some(&mtp), 21).is_empty(), "a draft with NextN layers packs");
        assert!(rules(&eagle, None, 21).is_empty(), "the model's own NextN layers pack");
        let nextn = with(|s| {
            s.unified_cache_external_linker = true;
            s.speculative_algorithm = Some("nextn".into());
        });
        assert_eq!(rules(&nextn, Some(&head), 22), ["X4"]);
        assert!(rules(&nextn, Some(&mtp), 22).is_empty());
        // A DSPARK draft packs only as DeepSeek-V4's DSpark head, which a V4.1 checkpoint bundles.
        let dspark = with(|s| {
            s.retraction_backup = Some(RetractionBackup::CpuTensor);
            s.hierarchical_cache = true;
            s.speculative_algorithm = Some("DSPARK".into());
        });
        let bundled: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/deepseek-v4.1-dspark.json")).unwrap();
        let dspark_head = layout_at(bundled);
        assert!(dspark_head.has(LayoutFeature::DsparkHead));
        assert!(rules(&dspark, Some(&dspark_head), 21).is_empty());
        assert_eq!(rules(&dspark, Some(&mtp), 21), ["N6"]);
        assert!(rules(&dspark, None, 21).is_empty(), "the checkpoint's own head");
    }

    #[test]
    fn r8_follows_the_tree_host_pool_retraction_meets() {
        let r8 =
            "--disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.";
        let radix_host_pool = with(|s| {
            s.retraction_backup = Some(RetractionBackup::HostPool);
            s.decode_radix_cache = true;
        });
        // 0.5.18 builds the plain RadixCache for a dense model, the unified tree for a hybrid-SWA one.
        assert_eq!(messages("R8", &radix_host_pool, &FleetSpec::default(), &full()), on(18..=18, r8));
        assert_eq!(messages("R8", &radix_host_pool, &FleetSpec::default(), &hybrid_swa()), vec![None; 7]);
        // The C++ tree (to 0.5.20) and FlexKV's are not unified.
        let cpp = env_fleet("SGLANG_EXPERIMENTAL_CPP_RADIX_TREE", "1");
        assert_eq!(messages("R8", &radix_host_pool, &cpp, &full()), on(18..=20, r8));
        let flexkv = FleetSpec { extra_args: vec!["--enable-flexkv".into()], ..FleetSpec::default() };
        assert_eq!(messages("R8", &radix_host_pool, &flexkv, &full()), on(18..=23, r8));
        // Without decode radix cache host-pool retraction builds the unified tree.
        let host_pool = with(|s| s.retraction_backup = Some(RetractionBackup::HostPool));
        assert_eq!(messages("R8", &host_pool, &flexkv, &full()), vec![None; 7]);
    }

    #[test]
    fn h2_reads_a_service_s_prefill_fleet_with_its_own_env() {
        let session = FleetSpec { extra_args: vec!["--enable-session-radix-cache".into()], ..FleetSpec::default() };
        let unified = FleetSpec { env: env_fleet("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1").env, ..session.clone() };
        let cpu = with(|s| s.retraction_backup = Some(RetractionBackup::CpuTensor));
        let h2_on = |prefill: &FleetSpec, patch| {
            let model = full();
            let input = PolicyInput::of(&cpu, &model, v0_5(patch)).with_prefill(Some(prefill));
            evaluate(input).violations.into_iter().filter(|v| v.rule == "H2").map(|v| v.message).collect::<Vec<_>>()
        };
        // 0.5.17's prefill servers build the plain RadixCache for a dense model, unless their env asks
        // for the unified tree; from 0.5.19 they build the unified tree.
        assert_eq!(h2_on(&session, 17).len(), 1);
        assert!(h2_on(&session, 17)[0].contains("tree_cache is RadixCache"));
        assert!(h2_on(&unified, 17).is_empty());
        assert!(h2_on(&session, 19).is_empty());
    }
}
