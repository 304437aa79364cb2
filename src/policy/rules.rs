//! Every SGLang check (`sglang-rules.md` §1.4, §2, `sglang-drift.md` §2–§3) that can be decided
//! from an `InferenceDeployment` spec and its resolved layout, one named item each, keyed by the
//! SGLang releases it holds for, with SGLang's exact message per release range. A release's
//! profile is these rules evaluated at that release. The order of [`RULES`] is the order findings
//! are reported in.

use crate::api::AttentionLayout;
use crate::api::{
    AttentionKind, DisaggregationSpec, FleetSpec, HicacheHostMemoryMode, KvPool, LayerKind, LayoutFeature,
    MambaRadixCacheStrategy, MtpDraft, PrefillSpec, RetractionBackup, TransferBackend,
};
use crate::release::{Release, Span, v0_5};

/// What a rule sees: the settings as they stand (maybe already partly rewritten), the decode
/// fleet, the layout and the release the rules are evaluated at.
pub(crate) struct Context<'a> {
    pub(crate) settings: &'a DisaggregationSpec,
    pub(crate) decode: &'a FleetSpec,
    pub(crate) layout: &'a AttentionLayout,
    /// The speculative draft model's layout; None when the model's own NextN/MTP layers draft.
    pub(crate) draft: Option<&'a AttentionLayout>,
    /// Whether the draft model named is the model itself (`PolicyInput::draft_is_the_model`).
    pub(crate) draft_is_the_model: bool,
    /// The prefill fleet kvpilot runs (`spec.prefill`), whose `extraArgs` and env the rules read
    /// for a service; for the guard's decode server, the prefill server it is paired with, which
    /// only P3 reads (its KV layout settings).
    pub(crate) prefill_fleet: Option<&'a FleetSpec>,
    pub(crate) release: Release,
    pub(crate) scope: Scope,
}

/// What a verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A PD service: its decode servers and the prefill servers kvpilot gives the settings both
    /// sides share.
    Service,
    /// One PD decode server (a command line the guard reads).
    DecodeServer,
    /// One prefill server, or one without PD.
    OtherServer,
}

/// Where in SGLang's start-up or serving a rule is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Argument parsing and the argument hooks (`server_args.py`, `arg_groups/`).
    Args,
    /// Building the KV pools and the tree cache.
    PoolBuild,
    /// The prefill ↔ decode handshake, before the first transfer.
    Handshake,
    /// KV transfer, on the prefill sender.
    Transfer,
}

impl Phase {
    /// The phase as the docs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Args => "args",
            Self::PoolBuild => "pool build",
            Self::Handshake => "handshake",
            Self::Transfer => "transfer",
        }
    }
}

/// One text of a rule's message, used from `since` until the next entry's release. `{name}`
/// marks an interpolation the check supplies.
pub(crate) struct Message {
    pub(crate) since: Release,
    pub(crate) text: &'static str,
}

const fn text(text: &'static str) -> Message {
    Message { since: v0_5(17), text }
}

const fn text_from(patch: u16, text: &'static str) -> Message {
    Message { since: v0_5(patch), text }
}

/// How a violation can be fixed.
pub(crate) enum Fix {
    /// A safe change of one setting; `apply` makes it and returns `(from, to)` as displayed.
    Rewrite { apply: fn(&mut DisaggregationSpec) -> (String, String), hint: &'static str },
    /// No safe change exists; the user must change what `hint` says.
    Manual { hint: &'static str },
}

/// One rule: its id in `sglang-rules.md` / `sglang-drift.md`, what it is about, the field, the
/// releases and transfer backends it holds for, the phase SGLang raises it in, its message per
/// release range, and its check, which says whether it is violated at `Context::release`.
pub(crate) struct Rule {
    pub(crate) id: &'static str,
    /// Short description, unique together with `id` (the docs table's row label).
    pub(crate) about: &'static str,
    pub(crate) field: &'static str,
    pub(crate) span: Span,
    /// The transfer backends it holds for; empty for every backend.
    pub(crate) backends: &'static [TransferBackend],
    pub(crate) phase: Phase,
    pub(crate) messages: &'static [Message],
    /// How the condition changes in later releases, for the docs (the check implements it).
    pub(crate) changes: &'static [Message],
    pub(crate) check: fn(&Context<'_>) -> Option<Finding>,
    pub(crate) fix: Fix,
}

impl Rule {
    /// Whether the rule exists in `release` for `backend`.
    pub(crate) fn applies(&self, release: Release, backend: TransferBackend) -> bool {
        self.span.contains(release) && (self.backends.is_empty() || self.backends.contains(&backend))
    }

    /// The index into `messages` of the text `release` uses.
    pub(crate) fn variant(&self, release: Release) -> usize {
        self.messages.iter().rposition(|m| m.since <= release).unwrap_or(0)
    }

    /// The message `release` prints for `finding`, interpolations filled in.
    pub(crate) fn message(&self, release: Release, finding: &Finding) -> String {
        let mut message = self.messages[self.variant(release)].text.to_string();
        for (name, value) in &finding.args {
            message = message.replace(&format!("{{{name}}}"), value);
        }
        message
    }

    /// The finding if the rule exists in the context's release and backend and is violated.
    pub(crate) fn evaluate(&self, context: &Context<'_>) -> Option<Finding> {
        if !self.applies(context.release, context.settings.transfer_backend) {
            return None;
        }
        (self.check)(context)
    }
}

/// A failed check: the values its message interpolates and, where useful, detail for the fix.
pub(crate) struct Finding {
    pub(crate) args: Vec<(&'static str, String)>,
    pub(crate) detail: Option<String>,
}

impl Finding {
    fn new() -> Option<Self> {
        Some(Self { args: Vec::new(), detail: None })
    }
}

/// A finding when `violated`.
fn when(violated: bool) -> Option<Finding> {
    if violated { Finding::new() } else { None }
}

/// A finding with interpolated values when `violated`.
fn when_with(violated: bool, args: Vec<(&'static str, String)>) -> Option<Finding> {
    violated.then_some(Finding { args, detail: None })
}

pub(crate) const RETRACTION_BACKUP: &str = "spec.disaggregation.retractionBackup";
const DECODE_RADIX_CACHE: &str = "spec.disaggregation.decodeRadixCache";
const HIERARCHICAL_CACHE: &str = "spec.disaggregation.hierarchicalCache";
const TRANSFER_BACKEND: &str = "spec.disaggregation.transferBackend";
const MAMBA_STRATEGY: &str = "spec.disaggregation.mambaRadixCacheStrategy";
const UNIFIED_MEMORY: &str = "spec.disaggregation.enableUnifiedMemory";
const DECODE_TP: &str = "spec.decode.tensorParallel";
const DECODE_PIPELINE: &str = "spec.decode.pipelineParallel";
const DECODE_DP_ATTENTION: &str = "spec.decode.enableDpAttention";
const DECODE_PAGE_SIZE: &str = "spec.decode.pageSize";
const DECODE_ENV: &str = "spec.decode.env";
const DECODE_OFFLOAD: &str = "spec.disaggregation.decodeOffloadKvCache";
const DECODE_CONTEXT_PARALLEL: &str = "spec.disaggregation.decodeContextParallel";
const DECODE_KV_CACHE_DTYPE: &str = "spec.decode.kvCacheDtype";
const DECODE_SWA_RATIO: &str = "spec.decode.swaFullTokensRatio";
const LMCACHE: &str = "spec.disaggregation.lmcache";
const HOST_RECEIVE: &str = "spec.disaggregation.decodeHostReceiveThreshold";
const HOST_MEMORY_MODE: &str = "spec.disaggregation.hicacheHostMemoryMode";
const BOOTSTRAP_PORT: &str = "spec.disaggregation.bootstrapPort";
const BUFFER_ONLY_HINT: &str = "leave hicacheHostMemoryMode unset (cache): SGLang runs buffer_only host memory on \
                                prefill servers and servers without PD disaggregation only";
const HOST_RECEIVE_HINT: &str = "leave decodeHostReceiveThreshold unset: no transfer backend SGLang ships (mooncake, \
                                 nixl, mori, fake) can receive KV into decode host memory yet";
const LINKER: &str = "spec.disaggregation.unifiedCacheExternalLinker";
const SPECULATIVE_DRAFT_MODEL: &str = "spec.disaggregation.speculativeDraftModel";
const PREFILL_PIPELINE: &str = "spec.disaggregation.prefill.pipelineParallel";
const PREFILL_CONTEXT_PARALLEL: &str = "spec.disaggregation.prefill.attentionContextParallel";
const PREFILL_KV_SHARDING: &str = "spec.disaggregation.prefill.kvCacheSharding";
const UNIFIED_DCP_HINT: &str = "turn enableUnifiedMemory off, or set decodeContextParallel to 1";
const UNIFIED_EAGLE_HINT: &str = "turn enableUnifiedMemory off, or use another speculativeAlgorithm";
const HICACHE_DCP_HINT: &str = "turn hierarchicalCache off, or set decodeContextParallel to 1";
const LMCACHE_HINT: &str = "turn lmcache off: SGLang 0.5.21 and later run LMCache only on servers without PD \
                            disaggregation (spec.cache is kvpilot's KV store for PD servers)";

/// The env var that selects the unified radix tree (0.5.19–0.5.20 need it for R13, 0.5.17–0.5.18
/// for HiCache on MiMo-V2, MV3).
pub(crate) const UNIFIED_RADIX_TREE_ENV: &str = "SGLANG_ENABLE_UNIFIED_RADIX_TREE";

const MOONCAKE_NIXL: &[TransferBackend] = &[TransferBackend::Mooncake, TransferBackend::Nixl];

/// Whether the decode retraction backup is the host pool: asked for, or forced by host receive
/// (the PD hook sets host_pool over anything but an explicit cpu_tensor, which N1 refuses).
fn host_pool(c: &Context<'_>) -> bool {
    c.settings.retraction_backup == Some(RetractionBackup::HostPool)
        || (host_receive(c) && c.settings.retraction_backup != Some(RetractionBackup::CpuTensor))
}

fn host_receive(c: &Context<'_>) -> bool {
    host_receive_on(c.settings, c.release)
}

/// Whether decode host receive is on: a threshold above 0 in 0.5.21, below 1 from 0.5.22 (each
/// release's default keeps it off; releases before 0.5.21 have no such flag).
pub(crate) fn host_receive_on(settings: &DisaggregationSpec, release: Release) -> bool {
    match settings.decode_host_receive_threshold {
        Some(threshold) if release == v0_5(21) => threshold > 0.0,
        Some(threshold) if release > v0_5(21) => threshold < 1.0,
        _ => false,
    }
}

fn radix(c: &Context<'_>) -> bool {
    c.settings.decode_radix_cache
}

/// Whether a server in scope keeps a radix cache, where SGLang resolves and validates the Mamba
/// radix-cache strategy (`_mamba_radix_cache_resolution` returns early without one, 0.5.17-0.5.23).
fn radix_cache_in_use(c: &Context<'_>) -> bool {
    !radix_cache_fleets(c).is_empty()
}

/// The value of `option` among a server's arguments, handed over with each option as its full
/// name (`--name value` or `--name=value`), as the release's parser reads them; the last
/// occurrence is the one argparse keeps.
fn option_value<'a>(args: &'a [String], option: &str) -> Option<&'a str> {
    let options = &args[..args.iter().position(|arg| arg == "--").unwrap_or(args.len())];
    options.iter().enumerate().rev().find_map(|(i, arg)| match arg.strip_prefix(option) {
        Some("") => options.get(i + 1).map(String::as_str),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    })
}

/// The architectures whose Mamba state SGLang's extra-buffer strategy supports
/// (`_MAMBA_EXTRA_BUFFER_ARCHS` in arg_groups/overrides.py), with the first release of each. From
/// 0.5.21 a linear-attention registry spec may opt in too; no release's spec does.
const MAMBA_EXTRA_BUFFER: &[(&str, Release)] = &[
    ("BailingMoeV2_5ForCausalLM", v0_5(17)),
    ("FalconH1ForCausalLM", v0_5(17)),
    ("GraniteMoeHybridForCausalLM", v0_5(17)),
    ("InternS2PreviewForConditionalGeneration", v0_5(17)),
    ("KimiK3ForConditionalGeneration", v0_5(17)),
    ("KimiLinearForCausalLM", v0_5(17)),
    ("MiniCPMV4_6ForConditionalGeneration", v0_5(17)),
    ("NemotronHForCausalLM", v0_5(17)),
    ("NemotronHPuzzleForCausalLM", v0_5(17)),
    ("Qwen3NextForCausalLM", v0_5(17)),
    ("Qwen3_5ForConditionalGeneration", v0_5(17)),
    ("Qwen3_5MoeForConditionalGeneration", v0_5(17)),
    ("BailingMoeV3ForCausalLM", v0_5(19)),
    ("Qwen3_5ForCausalLM", v0_5(19)),
    ("Qwen3_5MoeForCausalLM", v0_5(19)),
    ("Glm5NextForConditionalGeneration", v0_5(20)),
    ("NemotronH_Omni_Reasoning_V3", v0_5(20)),
    ("Qwen4ExpForConditionalGeneration", v0_5(20)),
    ("BailingMoeV3VLForConditionalGeneration", v0_5(21)),
    ("InklingForConditionalGeneration", v0_5(21)),
    ("InklingForConditionalGenerationMTP", v0_5(21)),
    ("MiniCPMV4_7ForConditionalGeneration", v0_5(23)),
];

/// SGLang's `supports_mamba_cache_extra_buffer` on a server of `fleet`: a listed architecture on
/// the triton linear-attention backend (`--linear-attn-backend`, triton unless given).
fn extra_buffer_supported(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    MAMBA_EXTRA_BUFFER.iter().any(|(arch, since)| *arch == c.layout.architecture && *since <= c.release)
        && option_value(&fleet.extra_args, "--linear-attn-backend").is_none_or(|backend| backend == "triton")
}

/// Whether a server of `fleet` runs the extra-buffer strategy: as set, or, unset, SGLang's
/// automatic choice: extra_buffer where it is supported and the overlap schedule is on (its
/// default) or pages are longer than 1 token; else no_buffer, with the overlap schedule off.
fn runs_extra_buffer(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    match c.settings.mamba_radix_cache_strategy {
        Some(strategy) => strategy != MambaRadixCacheStrategy::NoBuffer,
        None => {
            extra_buffer_supported(c, fleet)
                && (!overlap_schedule_off(&fleet.extra_args) || fleet.effective_page_size() > 1)
        }
    }
}

/// The fleets in scope that keep a radix cache and run the extra-buffer strategy.
fn extra_buffer_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    radix_cache_fleets(c).into_iter().filter(|fleet| runs_extra_buffer(c, fleet))
}

/// The chunk size SGLang's extra-buffer Mamba cache takes where the config has none (the FLA
/// kernels' `CHUNK_SIZE`).
const FLA_CHUNK_SIZE: u64 = 64;

/// The whole number a server's arguments give the first of `spellings` they use; None when unset
/// or not a number.
fn number_option(args: &[String], spellings: &[&str]) -> Option<i64> {
    spellings.iter().find_map(|option| option_value(args, option)).and_then(|value| value.trim().parse().ok())
}

/// `--mamba-track-interval` among a server's arguments (kvpilot keeps no setting for it), else
/// SGLang's default, 256 in every release.
fn mamba_track_interval(args: &[String]) -> i64 {
    number_option(args, &["--mamba-track-interval"]).unwrap_or(256)
}

/// Whether a server's arguments (as [`mamba_track_interval`] gets them) turn the overlap
/// schedule off.
fn overlap_schedule_off(args: &[String]) -> bool {
    args.iter().take_while(|arg| *arg != "--").any(|arg| arg == "--disable-overlap-schedule")
}

/// The fleets whose servers keep a radix cache ([`keeps_radix_cache`]) and so resolve the Mamba
/// strategy, by the arguments and page size they run with: a service's decode fleet and its
/// prefill servers (the fleet kvpilot runs, or, for prefill servers run elsewhere, the decode
/// fleet's arguments standing in for theirs); the one server the guard reads.
fn radix_cache_fleets<'a>(c: &Context<'a>) -> Vec<&'a FleetSpec> {
    let servers = match c.scope {
        Scope::Service => vec![(c.decode, true), (c.prefill_fleet.unwrap_or(c.decode), false)],
        Scope::DecodeServer => vec![(c.decode, true)],
        Scope::OtherServer => vec![(c.decode, false)],
    };
    servers.into_iter().filter(|(fleet, decode)| keeps_radix_cache(c, fleet, *decode)).map(|(fleet, _)| fleet).collect()
}

/// SGLang's `uses_mamba_radix_cache`: an SSM-hybrid model whose server keeps a radix cache.
fn mamba_radix_cache(c: &Context<'_>) -> bool {
    c.layout.uses_ssm_state() && radix_cache_in_use(c)
}

fn dcp(c: &Context<'_>) -> bool {
    c.settings.decode_context_parallel > 1
}

fn mooncake_or_nixl(c: &Context<'_>) -> bool {
    matches!(c.settings.transfer_backend, TransferBackend::Mooncake | TransferBackend::Nixl)
}

/// Whether the decode env sets `name` to something other than a truthy value.
fn env_set_falsy(decode: &FleetSpec, name: &str) -> bool {
    decode.env_value(name).is_some() && !decode.env_on(name)
}

const LAZY_COMPACTION_OFF_ENV: &str = "SGLANG_DISABLE_LAZY_COMPACTION";
const CPP_RADIX_TREE_ENV: &str = "SGLANG_EXPERIMENTAL_CPP_RADIX_TREE";
const HND_KV_CACHE_ENV: &str = "SGLANG_USE_HND_KVCACHE";
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

/// The cache options of a server that its tree cache and its draft's host backup follow.
#[derive(Debug, Clone, Copy)]
struct CacheOptions {
    hierarchical: bool,
    lmcache: bool,
    /// The external cache linker (0.5.20 on).
    linker: bool,
}

impl CacheOptions {
    /// The decode servers' (the guard's one server's): the settings.
    fn of_settings(c: &Context<'_>) -> Self {
        Self {
            hierarchical: c.settings.hierarchical_cache,
            lmcache: c.settings.lmcache,
            linker: c.settings.unified_cache_external_linker && c.release >= v0_5(20),
        }
    }

    /// A service's prefill servers': kvpilot gives them none of these settings, so only their
    /// `extraArgs` turn them on.
    fn of_prefill(c: &Context<'_>, fleet: &FleetSpec) -> Self {
        Self {
            hierarchical: given(&fleet.extra_args, HICACHE_FLAG),
            lmcache: given(&fleet.extra_args, "--enable-lmcache"),
            linker: given(&fleet.extra_args, "--enable-unified-cache-external-linker") && c.release >= v0_5(20),
        }
    }
}

/// The tree cache of a server of `fleet` (whose env it reads) with cache `options`, whose radix
/// cache is `disabled` (a PD decode server without decode radix cache, or
/// `--disable-radix-cache`), with host-pool retraction or not. Chunked prefill is taken to be on
/// (SGLang sizes it from the GPU; even -1 is "not None" there). `--enable-flexkv` is read from the
/// fleet's arguments: in every release it replaces the factory's last, default choice.
fn tree_cache(c: &Context<'_>, fleet: &FleetSpec, options: CacheOptions, disabled: bool, host_pool: bool) -> TreeCache {
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
fn server_tree_cache(c: &Context<'_>) -> TreeCache {
    match c.scope {
        Scope::Service | Scope::DecodeServer => {
            tree_cache(c, c.decode, CacheOptions::of_settings(c), !own_radix_cache(c), resolved_host_pool(c))
        }
        Scope::OtherServer => tree_cache(c, c.decode, CacheOptions::of_settings(c), !own_radix_cache(c), false),
    }
}

/// Whether a decode server retracts to the host pool, as chosen or as SGLang's automatic choice
/// resolves it.
fn resolved_host_pool(c: &Context<'_>) -> bool {
    host_pool(c)
        || (c.settings.retraction_backup.is_none()
            && super::automatic_retraction_backup(c.settings, c.decode, c.layout, c.release)
                == RetractionBackup::HostPool)
}

/// N6: the servers in scope whose draft worker backs its KV up through a HiCache sidecar pool,
/// found on a tree that is not a UnifiedRadixCache. SGLang plans the draft's host backup when the
/// server has HiCache, the external cache linker (0.5.20 on) or host-pool retraction (a
/// service's prefill servers have these only through their `extraArgs`); EAGLE3,
/// STANDALONE and DFLASH drafts always take the sidecar plan, EAGLE drafts without NextN layers
/// and DSPARK drafts other than DeepSeek-V4's DSpark head do ([`sidecar_draft`]; fused drafts
/// need unified memory).
fn sidecar_draft_on_other_tree(c: &Context<'_>) -> Option<TreeCache> {
    if !sidecar_draft(c) || c.settings.enable_unified_memory {
        return None;
    }
    let planned = |options: CacheOptions| options.hierarchical || options.linker;
    let decode = match c.scope {
        Scope::Service | Scope::DecodeServer => planned(CacheOptions::of_settings(c)) || resolved_host_pool(c),
        Scope::OtherServer => planned(CacheOptions::of_settings(c)),
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
fn linker_with_sidecar_draft(c: &Context<'_>) -> bool {
    sidecar_draft(c) && linker_server_args(c).next().is_some()
}

/// X5 (0.5.23 on): a server in scope with the external cache linker whose sidecar draft has more
/// than one draft runner ([`draft_runners`]); SGLang 0.5.23 takes one non-packed draft pool.
/// Returns the runner count of the first such server.
fn linker_with_many_sidecar_draft_runners(c: &Context<'_>) -> Option<i64> {
    if !sidecar_draft(c) {
        return None;
    }
    linker_server_args(c).map(|args| draft_runners(c, args)).find(|runners| *runners > 1)
}

/// The arguments of the servers in scope that run the external cache linker: the decode servers
/// (the guard's one server), and a service's prefill servers, through their own `extraArgs`.
fn linker_server_args<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a [String]> {
    let decode = CacheOptions::of_settings(c).linker.then_some(c.decode.extra_args.as_slice());
    let prefill = service_prefill(c)
        .filter(|fleet| CacheOptions::of_prefill(c, fleet).linker)
        .map(|fleet| fleet.extra_args.as_slice());
    decode.into_iter().chain(prefill)
}

/// Target architectures whose model overrides turn multi-layer EAGLE on for
/// `--speculative-algorithm EAGLE` (0.5.23: MiMo-V2, Step-3.5/3.7, GigaChat-3.5). The overrides
/// run before the speculative hook resolves the name, so they see it as given: `NEXTN` or
/// `eagle` do not turn it on.
const MULTI_LAYER_EAGLE_ARCHITECTURES: &[&str] = &[
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
    "Step3p5ForCausalLM",
    "Step3p7ForConditionalGeneration",
    "GigaChat35ForCausalLM",
    "GigaChat35ForCausalLMNextN",
];

/// How many draft runners a server's speculative worker builds: one per draft step for
/// multi-layer EAGLE (EAGLE, NEXTN and EAGLE3 with `--enable-multi-layer-eagle`, or EAGLE on an
/// architecture of [`MULTI_LAYER_EAGLE_ARCHITECTURES`]), one otherwise. Without
/// `--speculative-num-steps` SGLang chooses 3 steps, 5 for Llama (adaptive decoding is turned off
/// for multi-layer EAGLE first).
fn draft_runners(c: &Context<'_>, args: &[String]) -> i64 {
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
fn sidecar_draft(c: &Context<'_>) -> bool {
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
fn sidecar_draft_reason(c: &Context<'_>) -> String {
    let algorithm = speculative_algorithm(c).unwrap_or_default();
    let why = match algorithm.as_str() {
        "EAGLE" | "NEXTN" => "the EAGLE draft model has no NextN layers".to_string(),
        "DSPARK" => "the DSPARK draft model is not DeepSeek-V4's DSpark head".to_string(),
        _ => format!("{algorithm} drafts always do"),
    };
    format!("the draft backs its KV up through a HiCache sidecar pool ({why})")
}

/// Whether `option` is among a server's arguments (named in full, before `--`).
fn given(args: &[String], option: &str) -> bool {
    args.iter().take_while(|arg| *arg != "--").any(|arg| arg == option)
}

/// The first tree cache that is not a UnifiedRadixCache among the servers in scope whose
/// arguments `wants_unified` picks: the decode servers (the guard's one server), and a service's
/// prefill servers, which keep their radix cache and retract nothing.
fn non_unified_tree_among(c: &Context<'_>, wants_unified: impl Fn(&[String]) -> bool) -> Option<TreeCache> {
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
fn sized_host_pool_on_unified_tree(c: &Context<'_>) -> bool {
    let sized =
        |args: &[String]| option_value(args, HOST_POOL_SIZE).and_then(|v| v.trim().parse::<i64>().ok()) > Some(0);
    let attached = |cache: TreeCache, options: CacheOptions, host_pool: bool| {
        cache.is_unified() && (options.hierarchical || (host_pool && c.release >= v0_5(18)))
    };
    let host_pool = matches!(c.scope, Scope::Service | Scope::DecodeServer) && resolved_host_pool(c);
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

const SPECULATIVE_ALGORITHM: &str = "spec.disaggregation.speculativeAlgorithm";

/// The names `--speculative-algorithm` takes in `release`, as its speculative hook reads them
/// (upper-cased): the `SpeculativeAlgorithm` members, and NEXTN, which the hook turns into EAGLE.
/// Plugin-registered algorithms are not known here.
fn known_speculative_algorithm(name: &str, release: Release) -> bool {
    const ALWAYS: &[&str] =
        &["DFLASH", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE", "NEXTN"];
    let name = name.to_uppercase();
    ALWAYS.contains(&name.as_str()) || (name == "UNO" && release >= v0_5(20))
}

/// The draft architectures for which SGLang's speculative hook turns EAGLE and NEXTN into
/// FROZEN_KV_MTP and refuses EAGLE3 (every release).
const GEMMA4_ASSISTANT_DRAFTS: &[&str] = &["Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"];

/// Whether the speculative draft model is a Gemma-4 assistant ([`GEMMA4_ASSISTANT_DRAFTS`]).
fn gemma4_assistant_draft(c: &Context<'_>) -> bool {
    c.draft.is_some_and(|draft| GEMMA4_ASSISTANT_DRAFTS.contains(&draft.architecture.as_str()))
}

/// The speculative algorithm, upper-cased as SGLang's hook reads it.
fn speculative_algorithm(c: &Context<'_>) -> Option<String> {
    c.settings.speculative_algorithm.as_deref().map(str::to_uppercase)
}

const DEEPSEEK_V4: &str = "DeepseekV4ForCausalLM";
const EAGLE_TOPK: &str = "--speculative-eagle-topk";
const EAGLE_TOPK_FIELD: &str = "spec.decode.extraArgs[--speculative-eagle-topk]";
const TWO_BATCH_OVERLAP: &str = "--enable-two-batch-overlap";
const TWO_BATCH_OVERLAP_FIELD: &str = "spec.decode.extraArgs[--enable-two-batch-overlap]";
const HISPARSE: &str = "spec.disaggregation.hisparse";
const RAGGED_VERIFY_ENV: &str = "SGLANG_RAGGED_VERIFY_MODE";

/// The speculative algorithm of a DeepSeek-V4 model as its model hook reads it
/// (`apply_deepseek_v4_defaults`, in the model-specific adjustments, which run before the
/// speculative hook upper-cases and resolves the name): as given.
fn deepseek_v4_speculative_algorithm<'a>(c: &'a Context<'_>) -> Option<&'a str> {
    (c.layout.architecture == DEEPSEEK_V4).then_some(())?;
    c.settings.speculative_algorithm.as_deref()
}

/// Whether the model is DeepSeek-V4.1, whose feature check (`validate_deepseek_v41_features`,
/// 0.5.21 on) reads the config's `model_type`.
fn deepseek_v41(c: &Context<'_>) -> bool {
    c.layout.architecture == DEEPSEEK_V4 && c.layout.model_type.as_deref() == Some("deepseek_v41")
}

/// The prefill fleet a service runs with the settings both sides share; none for a server the
/// guard reads, whose paired prefill server has its own command line.
fn service_prefill<'a>(c: &'a Context<'_>) -> Option<&'a FleetSpec> {
    c.prefill_fleet.filter(|_| c.scope == Scope::Service)
}

/// The fleets of every server in scope, which all run the settings (the speculative ones among
/// them): the decode servers (the guard's one server) and a service's prefill servers.
fn fleets_in_scope<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    std::iter::once(c.decode).chain(service_prefill(c))
}

/// Whether one PD server of a DeepSeek-V4.1 model that speculates fails the DSpark PD check of
/// `validate_deepseek_v41_features` (0.5.21 on): a ragged verify mode other than static, a
/// transfer backend other than Mooncake (0.5.22 on: or NIXL), decode context parallelism, and
/// attention context parallelism (0.5.22 on: prefill CP too, except on a prefill server that runs
/// it with the interleave strategy); 0.5.21 also refuses data parallelism. `fleet` is the
/// server's, `dcp` its `--dcp-size`; the CP flags are read from its arguments as given (SGLang
/// makes the CP size implicit only later).
fn deepseek_v41_dspark_pd_refused(c: &Context<'_>, fleet: &FleetSpec, prefill: bool, dcp: i32) -> bool {
    let args = &fleet.extra_args;
    let attention_cp = attention_cp_size(args);
    let ragged = fleet.env_value(RAGGED_VERIFY_ENV).is_some_and(|mode| mode != "static");
    let backend = c.settings.transfer_backend;
    if c.release < v0_5(22) {
        return ragged
            || backend != TransferBackend::Mooncake
            || fleet.data_parallel != 1
            || fleet.enable_dp_attention
            || attention_cp != Some(1)
            || dcp != 1;
    }
    let prefill_cp = given(args, "--enable-prefill-cp");
    let supported_prefill_cp = prefill && prefill_cp && option_value(args, "--cp-strategy") == Some("interleave");
    ragged || !mooncake_or_nixl(c) || ((prefill_cp || attention_cp != Some(1)) && !supported_prefill_cp) || dcp != 1
}

/// The PD servers in scope as (fleet, is a prefill server, `--dcp-size`): the decode servers
/// (the guard's one server: a decode server, or a prefill one outside a service), and a
/// service's prefill servers, whose DCP only their `extraArgs` set.
fn pd_servers<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool, i32)> {
    let own = (c.decode, c.scope == Scope::OtherServer, c.settings.decode_context_parallel);
    let prefill = service_prefill(c).map(|fleet| (fleet, true, dcp_of(&fleet.extra_args)));
    std::iter::once(own).chain(prefill)
}

/// Architectures SGLang's DeepSeek-family override provider is registered for
/// (`_deepseek_family_overrides` in `arg_groups/model_overrides/deepseek_v2.py`, the same list in
/// 0.5.20-0.5.23): HYV4's context-parallel checks (K4, K5) and, for a DSA model, DSA DCP's (K1-K3,
/// 0.5.22 on) run there. Earlier releases have neither.
const DEEPSEEK_FAMILY_OVERRIDES: &[&str] = &[
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration",
    "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN",
    "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN",
    "Dots3NoteForCausalLM",
];
const HYV4: &[&str] = &["HYV4ForCausalLM", "HYV4ForCausalLMNextN"];
const PREFILL_CP: &str = "--enable-prefill-cp";
const PREFILL_CP_FIELD: &str = "spec.prefill.extraArgs[--enable-prefill-cp]";

/// The servers in scope with decode context parallelism, for DSA DCP's checks (0.5.22 on) on a
/// DSA model of the DeepSeek family: each as (fleet, whether it runs HiSparse or HiCache).
fn dsa_dcp_servers<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    let dsa = c.release >= v0_5(22)
        && c.layout.has(LayoutFeature::Dsa)
        && DEEPSEEK_FAMILY_OVERRIDES.contains(&c.layout.architecture.as_str());
    let own = (c.decode, c.settings.decode_context_parallel, c.settings.hisparse || c.settings.hierarchical_cache);
    let prefill = service_prefill(c).map(|fleet| {
        let args = &fleet.extra_args;
        (fleet, dcp_of(args), given(args, "--enable-hisparse") || given(args, HICACHE_FLAG))
    });
    std::iter::once(own)
        .chain(prefill)
        .filter(move |(_, dcp, _)| dsa && *dcp > 1)
        .map(|(fleet, _, hierarchical)| (fleet, hierarchical))
}

/// A server's `--dcp-size` among its arguments (a service's prefill servers: kvpilot writes none).
fn dcp_of(args: &[String]) -> i32 {
    option_value(args, "--dcp-size").and_then(|v| v.trim().parse().ok()).unwrap_or(1)
}

/// HYV4's first server in scope with decode context parallelism, as (its architecture, its DCP)
/// (0.5.20 on).
fn hyv4_dcp(c: &Context<'_>) -> Option<(String, i32)> {
    (c.release >= v0_5(20) && HYV4.contains(&c.layout.architecture.as_str())).then_some(())?;
    pd_servers(c).find(|(_, _, dcp)| *dcp > 1).map(|(_, _, dcp)| (c.layout.architecture.clone(), dcp))
}

/// The attention context-parallel size among a server's arguments as given (`--attn-cp-size`, or
/// its older spelling); None when the value is not a number, 1 when unset.
fn attention_cp_size(args: &[String]) -> Option<i64> {
    ["--attn-cp-size", "--attention-context-parallel-size"]
        .iter()
        .find_map(|option| option_value(args, option))
        .map_or(Some(1), |size| size.trim().parse::<i64>().ok())
}

/// Whether a fleet's servers run DP attention as the MiniCPM and IQuest Q1 override providers
/// read it: the flag as given up to 0.5.21, where they test `enable_dp_attention`, and from 0.5.22
/// `attn_dp_enabled_of`, which [`runs_dp_attention`] reads.
fn provider_dp_attention(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    if c.release <= v0_5(21) { fleet.enable_dp_attention } else { runs_dp_attention(c, fleet) }
}

/// The architectures SGLang's MiniCPM override provider is registered for
/// (`arg_groups/model_overrides/minicpm.py`, 0.5.19 on).
const MINICPM: &[&str] = &["MiniCPMForCausalLM", "MiniCPMSALAForCausalLM"];
const MINICPM_FORCE_DENSE_ENV: &str = "SGLANG_MINICPM_FORCE_DENSE";
const ATTENTION_BACKENDS: [&str; 3] =
    ["--attention-backend", "--prefill-attention-backend", "--decode-attention-backend"];

/// Whether MiniCPM-SALA has hybrid attention (`has_minicpm_sparse_attention` or
/// `has_lightning_layers`), which its provider runs without the radix cache or HiCache.
fn minicpm_hybrid_attention(c: &Context<'_>) -> bool {
    c.layout.has(LayoutFeature::MinicpmSparseAttention)
        || (c.layout.model_type.as_deref() == Some("minicpm_sala") && c.layout.layers.ssm > 0)
}

/// Whether a MiniCPM server runs its sparse attention backend, as the provider decides it: no
/// `SGLANG_MINICPM_FORCE_DENSE`, and either no attention backend given (the provider then picks
/// a sparse one) or one of the three a sparse one.
fn minicpm_sparse_backend(fleet: &FleetSpec) -> bool {
    let backends = ATTENTION_BACKENDS.map(|option| option_value(&fleet.extra_args, option));
    !fleet.env_on(MINICPM_FORCE_DENSE_ENV)
        && (backends.iter().all(Option::is_none)
            || backends.iter().flatten().any(|b| matches!(*b, "minicpm_flashattn" | "minicpm_flashinfer")))
}

const ERNIE45_VL_MOE: &str = "Ernie4_5_VLMoeForConditionalGeneration";
const QWEN4_EXP: &str = "Qwen4ExpForConditionalGeneration";
/// The architectures SGLang's IQuest Q1 override provider is registered for
/// (`arg_groups/model_overrides/iquest_q1.py`, 0.5.21 on).
const IQUEST_Q1: &[&str] = &["IQuestQ1ForCausalLM", "IQuestQ1MTP"];
const IQUEST_FA3_HINT: &str = "drop --attention-backend, --prefill-attention-backend and --decode-attention-backend \
                               from extraArgs, or set them to fa3";

/// Whether the model is IQuest Q1.
fn iquest_q1(c: &Context<'_>) -> bool {
    IQUEST_Q1.contains(&c.layout.architecture.as_str())
}

const IQUEST_MTP_MODEL_TYPE: &str = "iquest_q1_mtp";
const IQUEST_MTP_DRAFT_HINT: &str = "name IQuest Q1's MTP draft checkpoint (an iquest_q1_mtp config) as \
                                     speculativeDraftModel (--speculative-draft-model-path), apart from the model";
const NUM_STEPS: &str = "--speculative-num-steps";
const NUM_STEPS_FIELD: &str = "spec.decode.extraArgs[--speculative-num-steps]";
const TOKEN_MAP: &str = "--speculative-token-map";

/// Whether IQuest Q1's MTP draft checks run (`_handle_iquest_q1_mtp_draft` in the speculative
/// hook's EAGLE family, 0.5.21 on): an IQuest Q1 target drafting with EAGLE or NEXTN, the
/// algorithms its override provider lets through (IQ2).
fn iquest_q1_mtp_drafting(c: &Context<'_>) -> bool {
    c.layout.architecture == "IQuestQ1ForCausalLM"
        && matches!(speculative_algorithm(c).as_deref(), Some("EAGLE" | "NEXTN"))
}

/// IQuest Q1's MTP draft and its facts, where its config.json was read and is an MTP
/// checkpoint's (IQ9 and IQ10 pass).
fn iquest_q1_mtp_draft<'a>(c: &'a Context<'_>) -> Option<(&'a AttentionLayout, MtpDraft)> {
    let draft = c.draft.filter(|_| iquest_q1_mtp_drafting(c) && !c.draft_is_the_model)?;
    Some((draft, draft.mtp_draft?))
}

/// A server's `--speculative-num-steps`, None when unset or not a number.
fn speculative_num_steps(args: &[String]) -> Option<i64> {
    number_option(args, &[NUM_STEPS])
}

/// Whether an attention backend option among a server's arguments is given as something other
/// than FA3 (the IQuest Q1 provider takes unset or `fa3`).
fn not_fa3(args: &[String], option: &str) -> bool {
    option_value(args, option).is_some_and(|backend| backend != "fa3")
}

const CP_STRATEGY: &str = "--cp-strategy";
const CP_STRATEGY_FIELD: &str = "spec.decode.extraArgs[--cp-strategy]";
const ATTENTION_CP_FIELD: &str = "spec.decode.extraArgs[--attn-cp-size]";
const DATA_PARALLEL_FIELD: &str = "spec.decode.dataParallel";

/// The nodes one server of `fleet` spans: the guard's `--nnodes`, else the fleet's
/// nodesPerReplica (which kvpilot renders as `--nnodes`).
fn nodes_per_server(fleet: &FleetSpec) -> i64 {
    number_option(&fleet.extra_args, &["--nnodes"]).unwrap_or(i64::from(fleet.nodes_per_replica))
}

const NODES_FIELD: &str = "spec.decode.nodesPerReplica";

/// Whether a server's TP × PP ranks do not split evenly over its nodes, which SGLang checks
/// except on an elastic-EP joiner (`--ep-join-mode scale`).
fn nodes_split_tp_unevenly(fleet: &FleetSpec) -> bool {
    let ranks = i64::from(fleet.tensor_parallel) * i64::from(fleet.pipeline_parallel);
    option_value(&fleet.extra_args, "--ep-join-mode") != Some("scale")
        && ranks.checked_rem(nodes_per_server(fleet)).is_some_and(|rest| rest != 0)
}

/// (replicas, attention DP groups) where a server's arguments give both above 1 (`--dp-size` and
/// `--attn-dp-size`, each in either spelling): kvpilot's settings keep one DP size, so this reads
/// the arguments as given (only the guard's servers can have both; K1 refuses them in extraArgs).
fn replicas_and_attention_dp(fleet: &FleetSpec) -> Option<(i64, i64)> {
    let args = &fleet.extra_args;
    let replicas = number_option(args, &["--dp-size", "--data-parallel-size"]).filter(|&n| n > 1)?;
    let groups = number_option(args, &["--attn-dp-size", "--attention-data-parallel-size"]).filter(|&n| n > 1)?;
    Some((replicas, groups))
}

const MODEL_CONFIG: &str = "spec.model.config";

/// The fleets in scope whose servers run the model hook's MiMo-V2 fused-QKV check: a
/// MiMoV2ForCausalLM model (its multimodal and text checkpoints; the Flash architecture is not
/// checked) on servers that are not `--encoder-only`.
fn mimo_v2_fused_qkv_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let checked = c.layout.architecture == "MiMoV2ForCausalLM";
    fleets_in_scope(c).filter(move |fleet| checked && !given(&fleet.extra_args, ENCODER_ONLY))
}

/// MV2: the first server whose effective attention TP (TP ÷ attention DP ÷ attention CP, as
/// SGLang's integer division gives it) does not divide the attention TP a fused-QKV MiMo-V2
/// checkpoint is interleaved for. Up to 0.5.21 the message names `--dp-size` and
/// `--enable-dp-attention`, from 0.5.22 the attention DP size.
fn mimo_v2_attention_tp_mismatch(c: &Context<'_>) -> Option<Finding> {
    if c.layout.attention_projection_layout.as_deref() != Some("fused_qkv") {
        return None;
    }
    let expected = i64::try_from(c.layout.fused_qkv_attention_tp?).ok()?;
    mimo_v2_fused_qkv_fleets(c).find_map(|fleet| {
        let cp = attention_cp_size(&fleet.extra_args)?;
        let attention_dp = attention_dp_size(fleet);
        let effective = i64::from(fleet.tensor_parallel) / attention_dp / cp.max(1);
        let dp = if c.release >= v0_5(22) { attention_dp } else { i64::from(fleet.data_parallel) };
        let dp_attention = if fleet.enable_dp_attention { "True" } else { "False" };
        when_with(
            effective > 0 && expected % effective != 0,
            vec![
                ("expected", expected.to_string()),
                ("effective", effective.to_string()),
                ("tp", fleet.tensor_parallel.to_string()),
                ("dp", dp.to_string()),
                ("dp_attention", dp_attention.to_string()),
                ("cp", cp.to_string()),
            ],
        )
    })
}

/// A server's attention DP size: its DP size under DP attention, else 1 (replicas do not split
/// attention).
fn attention_dp_size(fleet: &FleetSpec) -> i64 {
    if fleet.enable_dp_attention { i64::from(fleet.data_parallel.max(1)) } else { 1 }
}

/// Which of the context-parallel hook's divisibility asserts a server fails (CP7 first, as the
/// hook asserts them in turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CpDivisibility {
    TpByCp,
    TpByDpTimesCp,
}

/// The context-parallel hook's asserts that attention CP, and the DP size times it, divide TP,
/// on a server's attention CP as given (`--attn-cp-size`). Up to 0.5.21 the DP size is
/// `--dp-size` (replicas or attention DP), from 0.5.22 the attention DP size. Under prefill CP,
/// the DeepSeek family's overrides choose the CP size of an MLA or DSA model, and DeepSeek-V4's
/// hook its own: kvpilot leaves the asserts to SGLang there.
fn cp_divisibility(c: &Context<'_>, fleet: &FleetSpec) -> Option<CpDivisibility> {
    let family_resolves_cp = given(&fleet.extra_args, PREFILL_CP)
        && (c.layout.attention == AttentionKind::Mla || c.layout.has(LayoutFeature::DeepseekV4));
    let cp = attention_cp_size(&fleet.extra_args)?;
    if family_resolves_cp || cp <= 1 {
        return None;
    }
    let tp = i64::from(fleet.tensor_parallel);
    let dp = if c.release >= v0_5(22) { attention_dp_size(fleet) } else { i64::from(fleet.data_parallel.max(1)) };
    if tp % cp != 0 {
        Some(CpDivisibility::TpByCp)
    } else if tp % (dp * cp) != 0 {
        Some(CpDivisibility::TpByDpTimesCp)
    } else {
        None
    }
}

const CP_V2_ENV: &str = "SGLANG_ENABLE_CP_V2";
const MIMO_V2: &[&str] = &["MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"];

/// The fleets in scope whose servers run prefill context parallelism (`--enable-prefill-cp`).
fn prefill_cp_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, PREFILL_CP))
}

/// The fleets in scope that run DeepSeek-V4's prefill CP, which `validate_deepseek_v4_cp` checks
/// in the model hook on every server (CP10-CP13), before the context-parallel hook.
fn deepseek_v4_prefill_cp_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let deepseek_v4 = c.layout.architecture == DEEPSEEK_V4;
    prefill_cp_fleets(c).filter(move |_| deepseek_v4)
}

/// The `--cp-strategy` of each server [`deepseek_v4_prefill_cp_fleets`] yields, None where unset.
fn deepseek_v4_prefill_cp_strategies<'a>(c: &'a Context<'_>) -> impl Iterator<Item = Option<&'a str>> {
    deepseek_v4_prefill_cp_fleets(c).map(|fleet| option_value(&fleet.extra_args, CP_STRATEGY))
}

/// Whether a fleet's servers run attention context parallelism (`--attn-cp-size` above 1).
fn runs_attention_cp(fleet: &FleetSpec) -> bool {
    attention_cp_size(&fleet.extra_args).is_some_and(|size| size > 1)
}

/// Whether the context-parallel hook's MiMo V2 check runs on a prefill-CP server: from 0.5.20
/// always; before, only with CP-v2, which the hook turns on for MiMo V2 (a CP-v2 default class)
/// when `SGLANG_ENABLE_CP_V2` is unset, and which is otherwise what that variable says.
fn mimo_v2_prefill_cp_checked(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    c.release >= v0_5(20) || fleet.env_value(CP_V2_ENV).is_none() || fleet.env_on(CP_V2_ENV)
}

/// The architectures of the model hook's DeepSeek-family branch (`handle_model_specific_adjustments`)
/// with the first release of each, whose DSA branch refuses prefill CP on a PD decode server (CP6).
const MODEL_HOOK_DEEPSEEK_FAMILY: &[(&str, Release)] = &[
    ("DeepseekV3ForCausalLM", v0_5(17)),
    ("DeepseekV32ForCausalLM", v0_5(17)),
    ("KimiK25ForConditionalGeneration", v0_5(17)),
    ("MistralLarge3ForCausalLM", v0_5(17)),
    ("PixtralForConditionalGeneration", v0_5(17)),
    ("GlmMoeDsaForCausalLM", v0_5(17)),
    ("LongcatFlashForCausalLM", v0_5(17)),
    ("Dots3NoteForCausalLM", v0_5(19)),
    ("Glm5NextForConditionalGeneration", v0_5(20)),
    ("HYV4ForCausalLM", v0_5(20)),
    ("HYV4ForCausalLMNextN", v0_5(20)),
];

/// Whether the model takes the model hook's DSA branch: a DSA model of its DeepSeek family. The
/// family's override provider (`_deepseek_family_overrides`) is registered for the same DSA
/// architectures in each release, so its DSA prefill-CP asserts (CP9, CP10) read this too.
fn model_hook_dsa(c: &Context<'_>) -> bool {
    c.layout.has(LayoutFeature::Dsa)
        && MODEL_HOOK_DEEPSEEK_FAMILY.iter().any(|(arch, since)| *arch == c.layout.architecture && *since <= c.release)
}

/// The KV cache dtype of the first server in scope whose dtype the model hook's DSA branch
/// refuses (`_dsa_kv_cache_dtype_default`, run on CUDA and ROCm GPUs): one other than `allowed`,
/// as given. SGLang decides `auto` from the GPU (fp8_e4m3 from Blackwell, bfloat16 before, and
/// bfloat16 with learnable sinks), always an allowed one.
fn dsa_kv_cache_dtype_refused<'a>(c: &'a Context<'_>, allowed: &[&str]) -> Option<&'a str> {
    if !model_hook_dsa(c) {
        return None;
    }
    fleets_in_scope(c)
        .map(|fleet| kv_cache_dtype(fleet.kv_cache_dtype.as_deref()))
        .find(|dtype| !allowed.contains(dtype))
}

/// The architectures SGLang's Nemotron-H override provider is registered for
/// (`arg_groups/model_overrides/nemotron_h.py`).
const NEMOTRON_H: &[&str] = &["NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3"];
const MOE_RUNNER_BACKEND: &str = "--moe-runner-backend";
const MOE_RUNNER_FIELD: &str = "spec.decode.extraArgs[--moe-runner-backend]";

/// Whether a server remaps experts as the Nemotron-H provider reads it (0.5.23): EPLB, redundant
/// experts, or an expert placement other than `trivial`.
fn remaps_experts(args: &[String]) -> bool {
    given(args, "--enable-eplb")
        || option_value(args, "--ep-num-redundant-experts").and_then(|n| n.trim().parse::<i64>().ok()) > Some(0)
        || option_value(args, "--init-expert-location").is_some_and(|location| location != "trivial")
}

/// Whether a fleet's servers run DP attention as the speculative hook reads it: the flag as given
/// up to 0.5.21; from 0.5.22 the deprecated `--dp-size N --enable-dp-attention` becomes
/// `--attn-dp-size N`, and attention DP runs with more than one group.
fn runs_dp_attention(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    fleet.enable_dp_attention && (c.release < v0_5(22) || fleet.data_parallel > 1)
}

/// A server's `--speculative-eagle-topk`, None when unset (as in SGLang) or not a number.
fn eagle_topk(args: &[String]) -> Option<i64> {
    number_option(args, &[EAGLE_TOPK])
}

/// Whether a server's `--speculative-eagle-topk` is 1 (unset is None in SGLang, not 1).
fn eagle_topk_is_one(args: &[String]) -> bool {
    eagle_topk(args) == Some(1)
}

/// The speculative algorithm as SGLang's speculative hook resolves it: upper-cased, NEXTN as
/// EAGLE, and EAGLE or NEXTN with a Gemma-4 assistant draft as FROZEN_KV_MTP.
fn resolved_speculative_algorithm(c: &Context<'_>) -> Option<String> {
    let algorithm = speculative_algorithm(c)?;
    Some(match algorithm.as_str() {
        "EAGLE" | "NEXTN" if gemma4_assistant_draft(c) => "FROZEN_KV_MTP".to_string(),
        "NEXTN" => "EAGLE".to_string(),
        _ => algorithm,
    })
}

/// The servers in scope that run HiSparse, each with whether it is a PD decode server: the decode
/// servers with `hisparse` (the guard's one server: its own flag), and a service's prefill
/// servers with `--enable-hisparse` in their `extraArgs`.
fn hisparse_servers<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    let own = c.settings.hisparse.then_some((c.decode, c.scope != Scope::OtherServer));
    let prefill = service_prefill(c).filter(|fleet| given(&fleet.extra_args, "--enable-hisparse"));
    own.into_iter().chain(prefill.map(|fleet| (fleet, false)))
}

/// Whether a server keeps its radix cache: a PD decode server only with decode radix cache (the
/// PD hook decides it, over a given `--disable-radix-cache`), any other server unless
/// `--disable-radix-cache`.
fn keeps_radix_cache(c: &Context<'_>, fleet: &FleetSpec, decode: bool) -> bool {
    if decode { radix(c) } else { !given(&fleet.extra_args, "--disable-radix-cache") }
}

/// Whether the server the verdict is about keeps its radix cache ([`keeps_radix_cache`]): a
/// service's decode servers and the guard's decode server by decode radix cache, the guard's
/// other server by its own arguments.
fn own_radix_cache(c: &Context<'_>) -> bool {
    keeps_radix_cache(c, c.decode, c.scope != Scope::OtherServer)
}

const LANGUAGE_MODEL_ONLY: &str = "--language-model-only";
const LANGUAGE_MODEL_ONLY_FIELD: &str = "spec.decode.extraArgs[--language-model-only]";
/// `ServerArgs.LANGUAGE_MODEL_ONLY_ARCHITECTURES`, in its order, with the release each joins.
const LANGUAGE_MODEL_ONLY_ARCHITECTURES: &[(&str, Release)] = &[
    ("DeepseekV4ForCausalLM", v0_5(22)),
    ("MuseGlimmerForConditionalGeneration", v0_5(18)),
    ("Cosmos3ForConditionalGeneration", v0_5(20)),
    ("Cosmos3EdgeForConditionalGeneration", v0_5(20)),
];

/// Python's `repr()` of a list of strings, as SGLang's messages print one.
fn python_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| crate::python::py_repr(item)).collect();
    format!("[{}]", quoted.join(", "))
}

const TP_LM_HEAD_ALL_TO_ALL: &str = "--enable-tp-lm-head-all-to-all";
const TP_LM_HEAD_ALL_TO_ALL_FIELD: &str = "spec.decode.extraArgs[--enable-tp-lm-head-all-to-all]";

/// The first of the DP LM head validation pass's asserts on an explicit
/// `--enable-tp-lm-head-all-to-all` that a server fails (SGLang's own default turns it on only
/// where they hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TpLmHeadAllToAll {
    NoAttentionDp,
    WithDpLmHead,
    TpNotDp { tp: i64, dp: i64 },
    AttentionCp { cp: i64 },
}

/// LH2-LH5 on the first server in scope given `--enable-tp-lm-head-all-to-all` that fails one,
/// as the pass reads it after `_data_parallelism_defaults` (one DP rank drops DP attention up to
/// 0.5.21, and the DP LM head): up to 0.5.21 against `--dp-size` with DP attention, from 0.5.22
/// against the attention DP size.
fn tp_lm_head_all_to_all_refused(c: &Context<'_>, selects: fn(TpLmHeadAllToAll) -> bool) -> Option<Finding> {
    let refusal =
        fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, TP_LM_HEAD_ALL_TO_ALL)).find_map(|fleet| {
            let tp = i64::from(fleet.tensor_parallel);
            let replicas_or_groups = i64::from(fleet.data_parallel.max(1));
            let attention_dp = fleet.enable_dp_attention && replicas_or_groups > 1;
            let dp = if c.release >= v0_5(22) { attention_dp_size(fleet) } else { replicas_or_groups };
            let cp = attention_cp_size(&fleet.extra_args)?;
            if !attention_dp {
                Some(TpLmHeadAllToAll::NoAttentionDp)
            } else if given(&fleet.extra_args, DP_LM_HEAD) {
                Some(TpLmHeadAllToAll::WithDpLmHead)
            } else if tp != dp {
                Some(TpLmHeadAllToAll::TpNotDp { tp, dp })
            } else if cp != 1 {
                Some(TpLmHeadAllToAll::AttentionCp { cp })
            } else {
                None
            }
        })?;
    let args = match refusal {
        TpLmHeadAllToAll::TpNotDp { tp, dp } => vec![("tp", tp.to_string()), ("dp", dp.to_string())],
        TpLmHeadAllToAll::AttentionCp { cp } => vec![("cp", cp.to_string())],
        _ => Vec::new(),
    };
    when_with(selects(refusal), args)
}

/// `--dwdp-size` (kvpilot keeps no setting for it): SGLang's DWDP handler checks a server only
/// where it is above 1.
const DWDP_SIZE: &str = "--dwdp-size";
const DWDP_FIELD: &str = "spec.decode.extraArgs[--dwdp-size]";

/// A server's `--dwdp-size` where it runs DWDP (distributed weight data parallelism).
fn dwdp_size(fleet: &FleetSpec) -> Option<i64> {
    number_option(&fleet.extra_args, &[DWDP_SIZE]).filter(|size| *size > 1)
}

/// The servers in scope that run DWDP, each with its `--dwdp-size`.
fn dwdp_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (&'a FleetSpec, i64)> {
    fleets_in_scope(c).filter_map(|fleet| Some((fleet, dwdp_size(fleet)?)))
}

const ALLOCATION_POLICY: &str = "--disaggregation-decode-allocation-policy";
/// `_validate_prefill_complete`'s message, on PD servers (PC1) and without PD (PC2).
const PREFILL_COMPLETE_UNSUPPORTED: &str =
    "--disaggregation-decode-allocation-policy prefill_complete does not yet support {unsupported}";
const ALLOCATION_POLICY_FIELD: &str = "spec.decode.extraArgs[--disaggregation-decode-allocation-policy]";

/// The role SGLang's PD hook sees a server in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ServerRole {
    Decode,
    Prefill,
    WithoutPd,
}

/// What `_validate_prefill_complete` reads of one server that allocates decode memory only once
/// its prefill completes (`--disaggregation-decode-allocation-policy prefill_complete`, 0.5.22 on),
/// as given: its PD hook runs before the hooks that resolve CP and DP.
struct AllocatingServer<'a> {
    fleet: &'a FleetSpec,
    role: ServerRole,
    dcp: i32,
    hisparse: bool,
    host_receive: bool,
    hicache: bool,
    storage_backend: bool,
}

/// The servers in scope with `prefill_complete`: the decode servers (the guard's one server, in
/// `other_server`'s role where it is not a PD decode server), with the settings, and a service's
/// prefill servers, with their `extraArgs` (kvpilot gives them none of these settings).
fn prefill_complete_servers<'a>(c: &'a Context<'_>, other_server: ServerRole) -> Vec<AllocatingServer<'a>> {
    let own = AllocatingServer {
        fleet: c.decode,
        role: if c.scope == Scope::OtherServer { other_server } else { ServerRole::Decode },
        dcp: c.settings.decode_context_parallel,
        hisparse: c.settings.hisparse,
        host_receive: host_receive_on(c.settings, c.release),
        hicache: CacheOptions::of_settings(c).hierarchical,
        storage_backend: c.settings.hicache_storage_backend.is_some(),
    };
    let prefill = service_prefill(c).map(|fleet| {
        let args = &fleet.extra_args;
        let threshold = option_value(args, "--disaggregation-decode-host-receive-threshold")
            .and_then(|value| value.trim().parse::<f64>().ok());
        AllocatingServer {
            fleet,
            role: ServerRole::Prefill,
            dcp: dcp_of(args),
            hisparse: given(args, "--enable-hisparse"),
            host_receive: threshold.is_some_and(|threshold| threshold < 1.0),
            hicache: CacheOptions::of_prefill(c, fleet).hierarchical,
            storage_backend: option_value(args, "--hicache-storage-backend").is_some(),
        }
    });
    std::iter::once(own)
        .chain(prefill)
        .filter(|server| option_value(&server.fleet.extra_args, ALLOCATION_POLICY) == Some("prefill_complete"))
        .collect()
}

/// What `_validate_prefill_complete` lists as not yet supported on `server`, in its order. Its
/// attention TP reads `dp_size` where `enable_dp_attention` is set, which the deprecated-DP hook
/// has cleared by then (0.5.22 on), so any TP above 1 is listed.
fn prefill_complete_unsupported(c: &Context<'_>, server: &AllocatingServer<'_>) -> Vec<&'static str> {
    let args = &server.fleet.extra_args;
    let write_back = option_value(args, "--hicache-write-policy") == Some("write_back");
    [
        (server.role == ServerRole::WithoutPd, "aggregated serving"),
        (c.settings.transfer_backend != TransferBackend::Mooncake, "transfer backends other than Mooncake"),
        (
            server.fleet.pipeline_parallel != 1 || attention_cp_size(args) != Some(1) || server.dcp != 1,
            "pipeline or attention context parallelism",
        ),
        (server.fleet.tensor_parallel != 1, "attention tensor parallelism greater than one"),
        (
            given(args, "--enable-pdmux") || option_value(args, "--decoupled-spec-role").is_some_and(|r| r != "null"),
            "PD multiplexing or decoupled speculation",
        ),
        (given(args, "--enable-pd-role-switch"), "runtime PD role switching"),
        (given(args, ENCODER_ONLY) || given(args, "--language-only"), "encoder disaggregation"),
        (server.hisparse, "HiSparse"),
        (server.host_receive, "decode host KV buffering"),
        (
            server.role == ServerRole::Decode && (c.settings.decode_radix_cache || server.hicache),
            "decode radix cache or decode HiCache",
        ),
        (
            server.role == ServerRole::Prefill && server.hicache && (server.storage_backend || !write_back),
            "prefill HiCache other than L2 write_back",
        ),
        (server.fleet.env_on("SGLANG_DISAGG_STAGING_BUFFER"), "staging buffers"),
        (server.fleet.env_on(RUST_SERVER_ENV), "the Rust bootstrap registry"),
    ]
    .into_iter()
    .filter_map(|(unsupported, what)| unsupported.then_some(what))
    .collect()
}

/// The first server in scope whose `prefill_complete` lists something unsupported, as SGLang
/// joins the list.
fn prefill_complete_refused(c: &Context<'_>, other_server: ServerRole) -> Option<Finding> {
    let unsupported = prefill_complete_servers(c, other_server)
        .iter()
        .map(|server| prefill_complete_unsupported(c, server))
        .find(|unsupported| !unsupported.is_empty())?;
    when_with(true, vec![("unsupported", unsupported.join(", "))])
}

const DCP_COMM_BACKEND: &str = "--dcp-comm-backend";
const DCP_REPLICATE_Q_PROJ: &str = "--dcp-replicate-q-proj";

/// The DCP communication backend of a server with `dcp` (its `--dcp-size`), as the decode-CP hook
/// reads it: as given, else `ag_rs` up to 0.5.19 (the parser's default); from 0.5.20 an unset
/// backend resolves to `fi_a2a` or `a2a` on a CUDA GPU with DCP above 1 (to `ag_rs` without), so
/// None stands for one of those.
fn dcp_comm_backend<'a>(c: &Context<'_>, args: &'a [String], dcp: i32) -> Option<&'a str> {
    match option_value(args, DCP_COMM_BACKEND) {
        Some(backend) => Some(backend),
        None if c.release < v0_5(20) || dcp <= 1 => Some("ag_rs"),
        None => None,
    }
}

/// `--enable-quant-communications` among the arguments of a server in scope, with its TP and
/// whether it runs on an NPU (`--device npu`; kvpilot's servers run on CUDA GPUs).
fn quant_communication_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    fleets_in_scope(c)
        .filter(|fleet| given(&fleet.extra_args, "--enable-quant-communications"))
        .map(|fleet| (fleet, option_value(&fleet.extra_args, "--device") == Some("npu")))
}

const DSA_CACHE_LAYER_SPLIT: &str = "--enable-dsa-cache-layer-split";
const DSA_CACHE_LAYER_SPLIT_FIELD: &str = "spec.decode.extraArgs[--enable-dsa-cache-layer-split]";

/// The servers in scope that split a DSA model's cache layers over their prefill CP ranks, where
/// the model hook's DSA branch checks them.
fn dsa_layer_split_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let dsa = model_hook_dsa(c);
    fleets_in_scope(c).filter(move |fleet| dsa && given(&fleet.extra_args, DSA_CACHE_LAYER_SPLIT))
}

const DFLASH_BLOCK_SIZE_FIELD: &str = "spec.decode.extraArgs[--speculative-dflash-block-size]";

/// The DFLASH handler's sizes on the servers in scope, as given (kvpilot keeps no setting for
/// them): (block size, draft tokens, draft window), each None where unset; none where the
/// resolved algorithm is not DFLASH.
fn dflash_sizes<'a>(c: &'a Context<'_>) -> impl Iterator<Item = (Option<i64>, Option<i64>, Option<i64>)> + 'a {
    let dflash = resolved_speculative_algorithm(c).as_deref() == Some("DFLASH");
    fleets_in_scope(c).filter(move |_| dflash).map(|fleet| {
        let args = &fleet.extra_args;
        (
            number_option(args, &["--speculative-dflash-block-size"]),
            number_option(args, &["--speculative-num-draft-tokens"]),
            number_option(args, &["--speculative-draft-window-size"]),
        )
    })
}

const WATERMARK_FIELD: &str = "spec.decode.extraArgs[--enable-watermark]";

/// The servers in scope that watermark their output (`--enable-watermark`, 0.5.22 on), which
/// SGLang's last validation checks.
fn watermark_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, "--enable-watermark"))
}

const ENCODER_ONLY: &str = "--encoder-only";
const ENCODER_ONLY_FIELD: &str = "spec.decode.extraArgs[--encoder-only]";
const DP_LM_HEAD: &str = "--enable-dp-lm-head";
const DP_LM_HEAD_FIELD: &str = "spec.decode.extraArgs[--enable-dp-lm-head]";
const DP_SPEC_PREFILL_COORDINATION: &str = "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION";

/// The fleets in scope that run DP attention, as `dp_attention` says the handler reads it, with
/// the DP LM head, which the DFLASH (SD11, SD12) and DSPARK (SD14-SD16) handlers check further.
fn dp_lm_head_fleets<'a>(
    c: &'a Context<'_>,
    dp_attention: fn(&Context<'_>, &FleetSpec) -> bool,
) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(move |fleet| dp_attention(c, fleet) && given(&fleet.extra_args, DP_LM_HEAD))
}

const MOE_A2A: &str = "--moe-a2a-backend";
const MOE_A2A_FIELD: &str = "spec.decode.extraArgs[--moe-a2a-backend]";

/// A server's MoE all-to-all backend as given (`none`, SGLang's default, when unset).
fn moe_a2a_backend(args: &[String]) -> &str {
    option_value(args, MOE_A2A).unwrap_or("none")
}

/// The MoE all-to-all backends the DSPARK handler takes with DP attention in `release`.
fn dspark_dp_moe_backends(release: Release) -> &'static [&'static str] {
    if release < v0_5(18) {
        &["none"]
    } else if release < v0_5(21) {
        &["none", "megamoe"]
    } else {
        &["none", "megamoe", "mori"]
    }
}

/// Whether the DSPARK handler takes a fleet's servers to run DP attention: the flag as given in
/// 0.5.17; from 0.5.18 with more than one DP group (which `--dp-size N --enable-dp-attention`
/// becomes from 0.5.22).
fn dspark_dp_attention(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    fleet.enable_dp_attention && (c.release < v0_5(18) || fleet.data_parallel > 1)
}

const PP_SPEC_ENV: &str = "SGLANG_ENABLE_PP_SPEC";
const PP_SPEC_ENV_FIELD: &str = "spec.decode.env[SGLANG_ENABLE_PP_SPEC]";
const ADAPTIVE: &str = "--speculative-adaptive";
const ADAPTIVE_FIELD: &str = "spec.decode.extraArgs[--speculative-adaptive]";

/// Whether a fleet's servers run multi-layer EAGLE as the validation hook reads it:
/// `--enable-multi-layer-eagle`, or `EAGLE` as given on an architecture whose model overrides turn
/// it on.
fn multi_layer_eagle(c: &Context<'_>, args: &[String]) -> bool {
    given(args, "--enable-multi-layer-eagle")
        || (c.settings.speculative_algorithm.as_deref() == Some("EAGLE")
            && MULTI_LAYER_EAGLE_ARCHITECTURES.contains(&c.layout.architecture.as_str()))
}

/// Whether a fleet's servers run pipeline stages with the one speculative algorithm SGLang lets
/// them (from 0.5.21): EAGLE (`NEXTN` included) without multi-layer EAGLE.
fn pipelined_eagle(c: &Context<'_>, fleet: &FleetSpec) -> bool {
    fleet.pipeline_parallel > 1
        && resolved_speculative_algorithm(c).as_deref() == Some("EAGLE")
        && !multi_layer_eagle(c, &fleet.extra_args)
}

/// The guard's server without PD running EAGLE's pipeline stages under `SGLANG_ENABLE_PP_SPEC`,
/// which the validation hook checks further (PP5, PP6).
fn pipeline_speculation_without_pd(c: &Context<'_>) -> bool {
    c.scope == Scope::OtherServer && pipelined_eagle(c, c.decode) && c.decode.env_on(PP_SPEC_ENV)
}

/// The pipeline stages of every server that runs the speculative settings: the decode servers,
/// and a service's prefill fleet.
fn speculating_pipeline_stages(c: &Context<'_>) -> i32 {
    fleets_in_scope(c).map(|fleet| fleet.pipeline_parallel).max().unwrap_or(1)
}

const HICACHE_FLAG: &str = "--enable-hierarchical-cache";

/// The fleets in scope that run HiCache: the decode servers with `hierarchicalCache`, and a
/// service's prefill servers given `--enable-hierarchical-cache` in their `extraArgs`.
fn hicache_fleets<'a>(c: &'a Context<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let decode = c.settings.hierarchical_cache.then_some(c.decode);
    decode.into_iter().chain(service_prefill(c).filter(|fleet| given(&fleet.extra_args, HICACHE_FLAG)))
}

/// The env var that runs a server on SGLang's Rust server (its prefill serves the KV bootstrap
/// registry on the API port).
pub const RUST_SERVER_ENV: &str = "SGLANG_RUST_SERVER";
/// SGLang's default `--disaggregation-bootstrap-port`, every release.
const SGLANG_BOOTSTRAP_PORT: i64 = 8998;

/// (bootstrap port, API port) of the prefill server in scope that SGLang's Rust server runs
/// (`SGLANG_RUST_SERVER` in its env), whose PD hook serves the KV bootstrap registry on the API
/// port: a service's prefill servers, or the guard's server (ON_EVERY_PD_SERVER keeps it for a
/// prefill one). 0.5.23 asks whether the Rust server stands in for the backend's bootstrap
/// server: it does for every backend a prefill server may run.
fn rust_server_prefill_ports(c: &Context<'_>) -> Option<(i64, i64)> {
    let fleet = if c.scope == Scope::OtherServer { Some(c.decode) } else { service_prefill(c) }?;
    if !fleet.env_on(RUST_SERVER_ENV) {
        return None;
    }
    let args = &fleet.extra_args;
    let bootstrap =
        number_option(args, &["--disaggregation-bootstrap-port"]).unwrap_or(i64::from(c.settings.bootstrap_port));
    Some((bootstrap, number_option(args, &["--port"]).unwrap_or(i64::from(fleet.port))))
}

/// HiCache with decode context parallelism, which the HiCache hook checks further (D1–D5).
fn hicache_dcp(c: &Context<'_>) -> bool {
    c.settings.hierarchical_cache && dcp(c)
}

fn buffer_only(c: &Context<'_>) -> bool {
    c.settings.hicache_host_memory_mode == Some(HicacheHostMemoryMode::BufferOnly)
}

/// Whether the server's HiCache hook checks buffer-only host memory: a decode server's with
/// HiCache, decode offload, or the host_pool or automatic retraction backup (the hook normalizes
/// the decode host pool then); a prefill server's or one without PD with HiCache.
fn buffer_only_checked(c: &Context<'_>) -> bool {
    if c.scope == Scope::OtherServer {
        return buffer_only(c) && c.settings.hierarchical_cache;
    }
    let host_pool_path = c.settings.retraction_backup.is_none() || host_pool(c);
    buffer_only(c) && (c.settings.hierarchical_cache || c.settings.decode_offload_kv_cache || host_pool_path)
}

/// Whether a speculative algorithm is set (SGLang's `NONE` is no algorithm).
fn speculative(c: &Context<'_>) -> bool {
    c.settings.speculative_algorithm.as_deref().is_some_and(|a| !a.trim().eq_ignore_ascii_case("none"))
}

/// The page size SGLang serves DeepSeek-V4 with on CUDA: its model override sets it whatever
/// `--page-size` says (the paged SWA pool asserts it).
const DEEPSEEK_V4_PAGE_SIZE: i32 = 256;

/// The DeepSeek-V4 SWA geometry a decode server's target and draft pools are built with, when
/// both are DeepSeek-V4 pools and a draft worker runs: `(page size, sliding window)` of each, as
/// `setup_state_kv_args` compares them. The draft's pool pages the allocator's virtual space,
/// which decode context parallelism widens by its size (`loc_space_scale`); the window is each
/// config's `sliding_window`. None where no such pair of pools is built.
fn deepseek_v4_draft_geometry(c: &Context<'_>) -> Option<((i32, u64), (i32, u64))> {
    let algorithm = c.settings.speculative_algorithm.as_deref()?.trim();
    // NGRAM drafts from the prompt: no draft model and no draft KV pool.
    if !speculative(c) || algorithm.eq_ignore_ascii_case("ngram") {
        return None;
    }
    let draft = c.draft.unwrap_or(c.layout);
    if !c.layout.has(LayoutFeature::DeepseekV4) || !draft.has(LayoutFeature::DeepseekV4) {
        return None;
    }
    let target = (DEEPSEEK_V4_PAGE_SIZE, c.layout.sliding_window?);
    let draft_page = DEEPSEEK_V4_PAGE_SIZE.saturating_mul(c.settings.decode_context_parallel.max(1));
    Some((target, (draft_page, draft.sliding_window?)))
}

/// T11's finding when `differs` picks a difference of the target and draft geometry.
fn draft_geometry_mismatch(c: &Context<'_>, differs: fn((i32, u64), (i32, u64)) -> bool) -> Option<Finding> {
    let (target, draft) = deepseek_v4_draft_geometry(c)?;
    // 0.5.23's third element: None for both unless a DSpark draft keeps its own SWA ring, whose
    // size (and the target's request window) is set at start-up.
    let dspark = c.settings.speculative_algorithm.as_deref().is_some_and(|a| a.trim().eq_ignore_ascii_case("dspark"));
    let (target_ring, draft_ring) =
        if dspark { ("<request window capacity>", "<draft SWA ring size>") } else { ("None", "None") };
    when_with(
        differs(target, draft),
        vec![
            ("target_page", target.0.to_string()),
            ("target_window", target.1.to_string()),
            ("draft_page", draft.0.to_string()),
            ("draft_window", draft.1.to_string()),
            ("target_ring", target_ring.into()),
            ("draft_ring", draft_ring.into()),
        ],
    )
}

/// SGLang builds a `MiniMaxSparseKVPool` (MiniMax-M3 sparse attention: not DeepSeek-V4, MLA or
/// hybrid SWA, which its pool builder picks first), whose index state moves with every transfer.
fn minimax_sparse_state(c: &Context<'_>) -> bool {
    c.layout.has(LayoutFeature::MinimaxSparse) && !mla_like(c.layout) && !c.layout.is_hybrid_swa()
}

/// T4: the prefill sender's pipeline stages, when MiniMax sparse state moves and it has more than one.
fn minimax_pipelined_prefill(c: &Context<'_>) -> Option<Finding> {
    let stages = c.settings.prefill.as_ref()?.pipeline_parallel;
    when(minimax_sparse_state(c) && stages > 1)
}

/// T4/T4c/T5: MiniMax sparse state with prefill and decode attention TP that differ.
fn minimax_tp_mismatch(c: &Context<'_>) -> Option<Finding> {
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    when_with(
        minimax_sparse_state(c) && prefill_tp != decode_tp,
        vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
    )
}

const DSV4_KV_LAYOUT_ENV: &str = "SGLANG_DSV4_KV_LAYOUT";
const DSV4_COMPRESSED_KV_LAYOUT_ENV: &str = "SGLANG_DSV4_COMPRESSED_KV_LAYOUT";
/// ROCm's unified-KV mode (T9), whose pools describe no layout kvpilot decides.
const DSV4_UNIFIED_KV_ENV: &str = "SGLANG_HACK_FLASHMLA_BACKEND";

/// The KV layout a DeepSeek-V4 server of `fleet`, with KV cache `dtype`, describes to its PD
/// peer (0.5.23's `pd_kv_layout`: the main cache's layout, then each compression ratio's), where
/// it follows from the fleet's settings on every GPU the server starts on; None where it depends
/// on the GPU or the server does not start with these settings (an assert of SGLang's, not this
/// rule).
///
/// `select_dsv4_kv_layout` reads `SGLANG_DSV4_KV_LAYOUT` (default `v4`) and
/// `SGLANG_DSV4_COMPRESSED_KV_LAYOUT` (default `auto`) and `--dsv4-attn-backend`: `trtllm`
/// keeps uniform FP8 pages, `flashmla_mega` forces the V4.1 layout, and `auto` resolves to
/// `flashmla_mega` only for a `deepseek_v41` model with an FP8 KV cache on an SM100 GPU (unless
/// the layout variable is set to something else than auto, v41 or v41_new), so it depends on
/// the GPU there. The V4.1 layouts run only on SM100 or gfx950 GPUs, `auto` picks one there.
/// The prefill and decode servers may run on different GPUs: a layout that depends on the GPU
/// is not decided, even where the other server's settings need an SM100 GPU.
fn dsv4_pd_kv_layout(layout: &AttentionLayout, fleet: &FleetSpec, dtype: Option<&str>) -> Option<String> {
    if fleet.env_value(DSV4_UNIFIED_KV_ENV).is_some() {
        return None;
    }
    let set_mode = fleet.env_value(DSV4_KV_LAYOUT_ENV).map(str::to_lowercase);
    let mut mode = set_mode.clone().unwrap_or_else(|| "v4".into());
    let option = fleet.env_value(DSV4_COMPRESSED_KV_LAYOUT_ENV).map_or_else(|| "auto".into(), str::to_lowercase);
    let mut backend = option_value(&fleet.extra_args, "--dsv4-attn-backend").unwrap_or("auto").to_string();
    // The DeepSeek-V4 hook turns an automatic KV cache dtype into fp8_e4m3 on CUDA.
    let fp8 = matches!(kv_cache_dtype(dtype), "auto" | "fp8_e4m3");
    let v41_model = layout.model_type.as_deref() == Some("deepseek_v41");
    if backend == "auto" {
        // FlashMLA mega keeps an explicit V4.1 layout, as FlashMLA does; it turns the default
        // and `auto` into V4.1 on the SM100 GPUs it is picked on, which FlashMLA leaves V4
        // elsewhere.
        let mega_candidate =
            v41_model && fp8 && set_mode.as_deref().is_none_or(|m| matches!(m, "auto" | "v41" | "v41_new"));
        if mega_candidate {
            match (set_mode.as_deref(), option.as_str()) {
                (Some("v41" | "v41_new"), _) => {}
                // FlashMLA's default V4 cache refuses FP4 compressed caches: such a server starts
                // only where mega runs it as V4.1.
                (None, "fp4") => mode = "v41".into(),
                _ => return None,
            }
        }
        backend = "flashmla".into();
    }
    // The hook's asserts: flashmla_mega runs only DeepSeek-V4.1, trtllm only an FP8 cache.
    if (backend == "flashmla_mega" && !v41_model) || (backend == "trtllm" && !fp8) {
        return None;
    }
    if backend == "flashmla_mega" && mode != "v41_new" {
        mode = "v41".into();
    }
    if backend == "trtllm" {
        return (matches!(mode.as_str(), "auto" | "v4") && matches!(option.as_str(), "auto" | "fp8"))
            .then(|| "uniform_fp8".into());
    }
    let option = match option.as_str() {
        "auto" => None,
        "fp8" | "fp4" => Some(option.as_str()),
        _ => return None,
    };
    let (main, interleaved) = match mode.as_str() {
        "v4" => {
            // The V4 main cache pairs only with V4 caches.
            return (option != Some("fp4")).then(|| dsv4_layout_string("v4", &layout.compress_ratios, |_| "v4"));
        }
        "v41" => ("v41", false),
        "v41_new" => ("v41_new", true),
        _ => return None,
    };
    let compressed = |ratio: u32| {
        let fp4 = option == Some("fp4") || (option.is_none() && matches!(ratio, 1 | 2));
        match (fp4, interleaved) {
            (false, false) => "v41",
            (false, true) => "v41_new",
            (true, false) => "v41_fp4",
            (true, true) => "v41_fp4_new",
        }
    };
    Some(dsv4_layout_string(main, &layout.compress_ratios, compressed))
}

/// `main,c{ratio}:{layout},...` as `pd_kv_layout` writes it.
fn dsv4_layout_string(main: &str, ratios: &[u32], compressed: impl Fn(u32) -> &'static str) -> String {
    std::iter::once(main.to_string())
        .chain(ratios.iter().map(|r| format!("c{r}:{}", compressed(*r))))
        .collect::<Vec<_>>()
        .join(",")
}

/// P4: both servers describe their DeepSeek-V4.1 DSpark transfer layout (a model with
/// compression-ratio-2 layers, the DSPARK algorithm, which a service's prefill servers run too and
/// the guard takes the paired prefill servers to run), the layouts agree, and the attention TP
/// differs. Pipeline stages that differ make the layouts differ first (each side describes its
/// stage's layers and pool buffers), which kvpilot leaves to SGLang; from 0.5.22 an MLA prefill
/// whose attention CP ranks make up the decode attention TP passes.
fn dspark_tp_mismatch(c: &Context<'_>) -> Option<Finding> {
    let prefill = c.settings.prefill.as_ref()?;
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    // A prefill that does not run DSPARK fails the layout comparison first (P4b).
    let dspark = c.layout.has(LayoutFeature::DeepseekV41)
        && speculative_algorithm(c)? == "DSPARK"
        && paired_prefill_dspark(c) != Some(false);
    let same_layout = prefill.pipeline_parallel == c.decode.pipeline_parallel;
    let cp = prefill.attention_context_parallel;
    let cp_ranks_align = c.release >= v0_5(22) && cp > 1 && mla_like(c.layout) && prefill_tp * cp == decode_tp;
    when(dspark && same_layout && prefill_tp != decode_tp && !cp_ranks_align)
}

/// Where the prefill servers' `field` is set, for a fix: the prefill fleet kvpilot runs
/// (`spec.prefill`), the prefill servers run elsewhere (`spec.disaggregation.prefill`), or, for
/// the guard's decode server, the command line of the prefill servers it is paired with.
fn prefill_source(c: &Context<'_>, field: &str, flag: &str) -> String {
    match c.scope {
        Scope::Service if c.prefill_fleet.is_some() => format!("spec.prefill.{field}"),
        Scope::Service => format!("spec.disaggregation.prefill.{field}"),
        Scope::DecodeServer | Scope::OtherServer => format!("the prefill servers' {flag}"),
    }
}

/// Whether the prefill servers the guard pairs with a decode server run DSPARK, read from their
/// command line (upper-cased, as SGLang's speculative hook reads it); None for a service, whose
/// prefill servers run the decode side's algorithm.
fn paired_prefill_dspark(c: &Context<'_>) -> Option<bool> {
    let fleet = c.prefill_fleet.filter(|_| c.scope == Scope::DecodeServer)?;
    Some(option_value(&fleet.extra_args, "--speculative-algorithm").is_some_and(|name| name.to_uppercase() == "DSPARK"))
}

fn unified_memory(c: &Context<'_>) -> bool {
    c.settings.enable_unified_memory
}

/// Unified memory with EAGLE or EAGLE3, as the unified-memory pool hook reads the name: after
/// the speculative hook has resolved it (so NEXTN and `eagle` are EAGLE).
fn unified_eagle(c: &Context<'_>) -> bool {
    unified_memory(c) && matches!(resolved_speculative_algorithm(c).as_deref(), Some("EAGLE" | "EAGLE3"))
}

fn unified_offload(c: &Context<'_>) -> bool {
    unified_memory(c) && c.settings.decode_offload_kv_cache
}

/// The KV cache dtype a fleet runs with: its `--kv-cache-dtype`, `auto` when unset.
pub(crate) fn kv_cache_dtype(value: Option<&str>) -> &str {
    value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or("auto")
}

fn attention_tps(c: &Context<'_>) -> Option<(i32, i32)> {
    let prefill = c.settings.prefill.as_ref()?;
    Some((
        prefill_attention_tp(prefill),
        attention_tp(c.decode.tensor_parallel, c.decode.data_parallel, c.decode.enable_dp_attention),
    ))
}

/// The T1 family: a non-MLA layout whose state needs equal attention TP, and prefill and decode
/// attention TP that differ.
fn tp_mismatch(c: &Context<'_>, state_present: bool) -> Option<Finding> {
    let (prefill_tp, decode_tp) = attention_tps(c)?;
    if !state_present || mla_like(c.layout) || prefill_tp == decode_tp {
        return None;
    }
    Some(Finding {
        args: vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
        detail: Some(format!(
            "make the decode attention TP (tensorParallel{}) equal the prefill attention TP {prefill_tp}",
            if c.decode.enable_dp_attention { " ÷ dataParallel" } else { "" }
        )),
    })
}

fn swa_state(c: &Context<'_>) -> bool {
    c.layout.is_hybrid_swa()
}

/// MXFP8 KV adds BLOCK_SCALE state to a non-MLA pool (drift §3.4, T1mx).
fn block_scale_state(c: &Context<'_>) -> bool {
    kv_cache_dtype(c.decode.kv_cache_dtype.as_deref()).eq_ignore_ascii_case("mxfp8") && !swa_state(c)
}

fn unset_backup(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.retraction_backup.map_or("unset", RetractionBackup::as_str).to_string();
    s.retraction_backup = None;
    (from, "unset".into())
}

fn offload_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.decode_offload_kv_cache = false;
    ("true".into(), "false".into())
}

fn to_cpu_tensor(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.retraction_backup.map_or("unset", RetractionBackup::as_str).to_string();
    s.retraction_backup = Some(RetractionBackup::CpuTensor);
    (from, RetractionBackup::CpuTensor.as_str().to_string())
}

fn radix_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.decode_radix_cache = false;
    ("true".into(), "false".into())
}

fn hierarchical_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.hierarchical_cache = false;
    ("true".into(), "false".into())
}

fn host_receive_off(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.decode_host_receive_threshold.map_or_else(|| "unset".to_string(), |t| t.to_string());
    s.decode_host_receive_threshold = None;
    (from, "unset".into())
}

fn host_memory_mode_unset(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.hicache_host_memory_mode.map_or("unset", HicacheHostMemoryMode::as_str).to_string();
    s.hicache_host_memory_mode = None;
    (from, "unset".into())
}

fn lmcache_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.lmcache = false;
    ("true".into(), "false".into())
}

fn linker_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.unified_cache_external_linker = false;
    ("true".into(), "false".into())
}

fn unified_memory_off(s: &mut DisaggregationSpec) -> (String, String) {
    s.enable_unified_memory = false;
    ("true".into(), "false".into())
}

fn strategy_unset(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.mamba_radix_cache_strategy.map_or("unset", MambaRadixCacheStrategy::as_str).to_string();
    s.mamba_radix_cache_strategy = None;
    (from, "unset".into())
}

fn to_extra_buffer(s: &mut DisaggregationSpec) -> (String, String) {
    let from = s.mamba_radix_cache_strategy.map_or("unset", MambaRadixCacheStrategy::as_str).to_string();
    s.mamba_radix_cache_strategy = Some(MambaRadixCacheStrategy::ExtraBuffer);
    (from, MambaRadixCacheStrategy::ExtraBuffer.as_str().to_string())
}

/// Attention TP: TP ÷ DP under DP attention, else TP.
pub(crate) fn attention_tp(tensor_parallel: i32, data_parallel: i32, dp_attention: bool) -> i32 {
    if dp_attention && data_parallel > 0 { tensor_parallel / data_parallel } else { tensor_parallel }
}

/// The prefill servers' attention TP: what is left of TP after attention DP and attention CP
/// (SGLang's `derive_attn_tp_size`, `tp // attn_dp // attn_cp`).
pub fn prefill_attention_tp(prefill: &PrefillSpec) -> i32 {
    attention_tp(prefill.tensor_parallel, prefill.data_parallel, prefill.enable_dp_attention)
        / prefill.attention_context_parallel.max(1)
}

/// Layer ranges `[start, end)` of each pipeline stage, split as SGLang's `get_pp_indices`
/// does: evenly, with the remainder going one layer each to the stages before the last.
pub fn pipeline_stages(layers: usize, stages: usize) -> Vec<(usize, usize)> {
    let stages = stages.clamp(1, layers.max(1));
    let mut sizes = vec![layers / stages; stages];
    for i in 0..layers % stages {
        sizes[stages - 2 - i] += 1;
    }
    let mut start = 0;
    sizes
        .into_iter()
        .map(|size| {
            let range = (start, start + size);
            start += size;
            range
        })
        .collect()
}

/// The first pipeline stage of a hybrid-SWA model that holds no full-attention layer: that rank
/// builds a pure-SWA pool (§3.1, PP note).
pub(crate) fn stage_without_full_layer(layout: &AttentionLayout, stages: i32) -> Option<(usize, usize, usize)> {
    if layout.kv_pool != KvPool::HybridSwa || stages <= 1 {
        return None;
    }
    pipeline_stages(layout.layer_kinds.len(), stages as usize)
        .into_iter()
        .enumerate()
        .find(|(_, (start, end))| !layout.layer_kinds[*start..*end].contains(&LayerKind::Full))
        .map(|(stage, (start, end))| (stage, start, end))
}

fn mla_like(layout: &AttentionLayout) -> bool {
    layout.attention == AttentionKind::Mla || layout.has(LayoutFeature::DeepseekV4)
}

/// The rules, in report order.
pub(crate) const RULES: &[Rule] = &[
    Rule {
        id: "F1",
        about: "retraction-backup flag unknown",
        field: RETRACTION_BACKUP,
        span: Span::between(v0_5(17), v0_5(17)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("unrecognized arguments: --disaggregation-decode-retraction-backup {value}")],
        changes: &[],
        check: |c| {
            let value = c.settings.retraction_backup?;
            when_with(true, vec![("value", value.as_str().into())])
        },
        fix: Fix::Rewrite {
            apply: unset_backup,
            hint: "leave retractionBackup unset: this release has no such flag and always uses per-request CPU \
                   tensors",
        },
    },
    Rule {
        id: "F2",
        about: "retraction backup none unknown",
        field: RETRACTION_BACKUP,
        span: Span::between(v0_5(18), v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "argument --disaggregation-decode-retraction-backup: invalid choice: 'none' (choose from 'cpu_tensor', \
             'host_pool')",
        )],
        changes: &[],
        check: |c| when(c.settings.retraction_backup == Some(RetractionBackup::None)),
        fix: Fix::Rewrite {
            apply: to_cpu_tensor,
            hint: "use cpu_tensor: retractionBackup none exists from SGLang 0.5.21",
        },
    },
    Rule {
        id: "F4",
        about: "host-receive threshold flag unknown",
        field: HOST_RECEIVE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("unrecognized arguments: --disaggregation-decode-host-receive-threshold {value}")],
        changes: &[],
        check: |c| {
            let threshold = c.settings.decode_host_receive_threshold?;
            when_with(true, vec![("value", threshold.to_string())])
        },
        fix: Fix::Rewrite {
            apply: host_receive_off,
            hint: "leave decodeHostReceiveThreshold unset: SGLang has it from 0.5.21",
        },
    },
    Rule {
        id: "N2",
        about: "host-receive threshold range",
        field: HOST_RECEIVE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--disaggregation-decode-host-receive-threshold must be between 0 and 1")],
        changes: &[],
        check: |c| when(c.settings.decode_host_receive_threshold.is_some_and(|t| !(0.0..=1.0).contains(&t))),
        fix: Fix::Manual { hint: "set spec.disaggregation.decodeHostReceiveThreshold within [0, 1], or unset it" },
    },
    Rule {
        id: "N3",
        about: "host receive × HiSparse",
        field: HOST_RECEIVE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Decode host receive does not yet support HiSparse or role switching")],
        changes: &[],
        check: |c| when(host_receive(c) && c.settings.hisparse),
        fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    },
    Rule {
        id: "N1",
        about: "host receive needs host_pool",
        field: HOST_RECEIVE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Decode host KV buffering requires host_pool retraction")],
        changes: &[],
        check: |c| when(host_receive(c) && c.settings.retraction_backup == Some(RetractionBackup::CpuTensor)),
        fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    },
    Rule {
        id: "N4",
        about: "host receive × a page-first storage layout",
        field: HOST_RECEIVE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "The resolved HiCache storage layout 'page_first' cannot share the layer_first decode host pool used by \
             KV transfer",
        )],
        changes: &[
            text_from(21, "a mooncake or npu_memcache storage backend"),
            text_from(23, "a mooncake storage backend without DCP, or npu_memcache"),
        ],
        check: |c| {
            // Those backends switch the host layout to page_first (the kernel I/O backend's
            // default); from 0.5.23 Mooncake keeps layer_first under DCP.
            let backend = c.settings.hicache_storage_backend.as_deref();
            let page_first = match backend {
                Some("npu_memcache") => true,
                Some("mooncake") => c.release < v0_5(23) || !dcp(c),
                _ => false,
            };
            when(host_receive(c) && c.settings.retraction_backup != Some(RetractionBackup::CpuTensor) && page_first)
        },
        fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    },
    Rule {
        id: "N7",
        about: "host receive needs a host-capable transfer backend",
        field: HOST_RECEIVE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("Transfer backend does not support decode host KV destinations")],
        changes: &[],
        check: |c| when(host_receive(c)),
        fix: Fix::Rewrite { apply: host_receive_off, hint: HOST_RECEIVE_HINT },
    },
    Rule {
        id: "BP1",
        about: "prefill on SGLang's Rust server × a bootstrap port of its own",
        field: BOOTSTRAP_PORT,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "SGLANG_RUST_SERVER serves the PD KV bootstrap registry on the api port itself; \
             --disaggregation-bootstrap-port {bootstrap} conflicts with --port {port}. Drop \
             --disaggregation-bootstrap-port (decode nodes and the PD router must then target the prefill api port).",
        )],
        changes: &[],
        check: |c| {
            let (bootstrap, port) = rust_server_prefill_ports(c)?;
            when_with(
                bootstrap != SGLANG_BOOTSTRAP_PORT && bootstrap != port,
                vec![("bootstrap", bootstrap.to_string()), ("port", port.to_string())],
            )
        },
        fix: Fix::Manual {
            hint: "set bootstrapPort to the prefill servers' API port (spec.prefill.port), where the Rust server serves \
                   the registry, or drop SGLANG_RUST_SERVER from the prefill servers' env",
        },
    },
    Rule {
        id: "S2",
        about: "host_pool × DCP",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.")],
        changes: &[],
        check: |c| when(host_pool(c) && dcp(c)),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set decodeContextParallel to 1" },
    },
    Rule {
        id: "S3",
        about: "host_pool × priority preemption",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--disaggregation-decode-retraction-backup=host_pool requires --disable-priority-preemption when \
             priority scheduling is enabled.",
        )],
        changes: &[],
        check: |c| when(host_pool(c) && c.settings.priority_scheduling && !c.settings.disable_priority_preemption),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or set disablePriorityPreemption: true" },
    },
    Rule {
        id: "S4",
        about: "host_pool × decode offload",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "The arguments disaggregation-decode-enable-offload-kvcache and \
             disaggregation-decode-retraction-backup=host_pool are mutually exclusive: both build a decode host pool.",
        )],
        changes: &[],
        check: |c| when(host_pool(c) && c.settings.decode_offload_kv_cache),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeOffloadKvCache off" },
    },
    Rule {
        id: "S6",
        about: "decode offload without a storage backend",
        field: DECODE_OFFLOAD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "The argument disaggregation-decode-enable-offload-kvcache is only supported when hicache-storage-backend \
             is provided.",
        )],
        changes: &[],
        check: |c| when(c.settings.decode_offload_kv_cache && c.settings.hicache_storage_backend.is_none()),
        fix: Fix::Rewrite {
            apply: offload_off,
            hint: "set spec.disaggregation.hicacheStorageBackend (or spec.cache, kvpilot's own store), or turn \
                   decodeOffloadKvCache off",
        },
    },
    Rule {
        id: "S7",
        about: "HiCache without decode radix cache",
        field: HIERARCHICAL_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be \
             used at the same time. Please use only one of them.",
        )],
        changes: &[],
        // A decode server runs the chunk cache (`disable_radix_cache`) unless decode radix cache
        // is on (R12), before this check reads it: so HiCache needs decode radix cache there.
        check: |c| when(c.settings.hierarchical_cache && !own_radix_cache(c)),
        fix: Fix::Rewrite {
            apply: hierarchical_off,
            hint: "turn decodeRadixCache on (HiCache sits under the decode radix cache; on a server that is not a PD \
                   decode server, drop --disable-radix-cache), or turn hierarchicalCache off",
        },
    },
    Rule {
        id: "S8",
        about: "SWA full-tokens ratio range",
        field: DECODE_SWA_RATIO,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--swa-full-tokens-ratio should be in range (0, 1.0].")],
        changes: &[],
        check: |c| {
            let ratio = c.decode.swa_full_tokens_ratio?;
            // SGLang checks the resolved ratio: Step-3.5 with HiCache resets any value to 1.0 first.
            let reset = c.layout.architecture == "Step3p5ForCausalLM" && c.settings.hierarchical_cache;
            let in_range = ratio > 0.0 && ratio <= 1.0;
            when(!reset && !in_range)
        },
        fix: Fix::Manual { hint: "set spec.decode.swaFullTokensRatio above 0 and at most 1, or unset it" },
    },
    Rule {
        id: "F3",
        about: "external cache linker flag unknown",
        field: LINKER,
        span: Span::between(v0_5(17), v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("unrecognized arguments: --enable-unified-cache-external-linker")],
        changes: &[],
        check: |c| when(c.settings.unified_cache_external_linker),
        fix: Fix::Rewrite { apply: linker_off, hint: "turn unifiedCacheExternalLinker off: SGLang has it from 0.5.20" },
    },
    Rule {
        id: "L1",
        about: "LMCache × HiCache",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-lmcache and --enable-hierarchical-cache are mutually exclusive")],
        changes: &[],
        check: |c| when(c.settings.lmcache && c.settings.hierarchical_cache),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "L2",
        about: "LMCache × external cache linker",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive")],
        changes: &[],
        check: |c| when(c.settings.lmcache && c.settings.unified_cache_external_linker),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "L3",
        about: "LMCache needs the radix cache",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-lmcache requires radix cache to be enabled")],
        changes: &[],
        // A decode server runs without the radix cache unless decode radix cache is on (R12).
        check: |c| when(c.settings.lmcache && !own_radix_cache(c)),
        fix: Fix::Rewrite {
            apply: lmcache_off,
            hint: "turn lmcache off: SGLang 0.5.21 and later run LMCache only on servers without PD disaggregation \
                   (spec.cache is kvpilot's KV store for PD servers); on a server without PD, drop \
                   --disable-radix-cache instead (LMCache sits under the radix cache)",
        },
    },
    Rule {
        id: "L4",
        about: "LMCache × speculative decoding",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("LMCacheUnifiedRadixCache does not yet support speculative decoding")],
        changes: &[],
        check: |c| when(c.settings.lmcache && speculative(c)),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "L5",
        about: "LMCache × DP attention",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("LMCacheUnifiedRadixCache does not yet support DP attention")],
        changes: &[
            text_from(21, "--enable-dp-attention"),
            text_from(22, "DP attention with more than one attention-DP group (dataParallel > 1)"),
        ],
        check: |c| when(c.settings.lmcache && runs_dp_attention(c, c.decode)),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "L6",
        about: "LMCache × DCP",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation",
        )],
        changes: &[],
        check: |c| when(c.settings.lmcache && dcp(c)),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "L7",
        about: "LMCache under PD disaggregation",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only")],
        changes: &[],
        check: |c| when(c.settings.lmcache),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "F5",
        about: "HiCache host memory mode flag unknown",
        field: HOST_MEMORY_MODE,
        span: Span::between(v0_5(17), v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("unrecognized arguments: --hicache-host-memory-mode {value}")],
        changes: &[],
        check: |c| {
            let mode = c.settings.hicache_host_memory_mode?;
            when_with(true, vec![("value", mode.as_str().into())])
        },
        fix: Fix::Rewrite {
            apply: host_memory_mode_unset,
            hint: "leave hicacheHostMemoryMode unset: SGLang has it from 0.5.19",
        },
    },
    Rule {
        id: "SD1",
        about: "unknown speculative algorithm",
        field: SPECULATIVE_ALGORITHM,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Unknown speculative algorithm name: {name}")],
        changes: &[text_from(20, "UNO is an algorithm")],
        check: |c| {
            let name = speculative_algorithm(c)?;
            when_with(!known_speculative_algorithm(&name, c.release), vec![("name", name)])
        },
        fix: Fix::Manual {
            hint: "use one of SGLang's algorithms: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, \
                   FROZEN_KV_MTP, or UNO from 0.5.20",
        },
    },
    Rule {
        id: "SD2",
        about: "DFLASH without a draft model",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DFLASH speculative decoding requires setting --speculative-draft-model-path.")],
        changes: &[],
        check: |c| when(speculative_algorithm(c)? == "DFLASH" && c.settings.speculative_draft_model.is_none()),
        fix: Fix::Manual { hint: "set spec.disaggregation.speculativeDraftModel to the DFLASH draft checkpoint" },
    },
    Rule {
        id: "SD3",
        about: "DFLASH with pipeline parallelism",
        field: DECODE_PIPELINE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Currently DFLASH speculative decoding only supports pp_size == 1.")],
        changes: &[],
        check: |c| when(speculative_algorithm(c)? == "DFLASH" && speculating_pipeline_stages(c) != 1),
        fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets, or use another speculativeAlgorithm" },
    },
    Rule {
        id: "SD4",
        about: "UNO with a draft model",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("UNO reuses the target model and does not accept --speculative-draft-model-path.")],
        changes: &[],
        check: |c| when(speculative_algorithm(c)? == "UNO" && c.settings.speculative_draft_model.is_some()),
        fix: Fix::Manual { hint: "unset spec.disaggregation.speculativeDraftModel: UNO drafts with the model itself" },
    },
    Rule {
        id: "SD5",
        about: "EAGLE3 with a Gemma-4 assistant draft",
        field: SPECULATIVE_ALGORITHM,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "Gemma4AssistantForCausalLM draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not \
             supported for this draft architecture.",
        )],
        changes: &[],
        check: |c| when(speculative_algorithm(c)? == "EAGLE3" && gemma4_assistant_draft(c)),
        fix: Fix::Manual {
            hint: "set speculativeAlgorithm to EAGLE or NEXTN for a Gemma-4 assistant draft (SGLang runs it as \
                   FROZEN_KV_MTP), or use an EAGLE3 draft model",
        },
    },
    Rule {
        id: "SD6",
        about: "DSPARK with pipeline stages off a PD prefill server",
        field: DECODE_PIPELINE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated serving require pp_size \
             == 1.",
        )],
        changes: &[],
        check: |c| when(resolved_speculative_algorithm(c)? == "DSPARK" && c.decode.pipeline_parallel > 1),
        fix: Fix::Manual {
            hint: "set the decode pipelineParallel to 1 (DSPARK runs pipeline stages on PD prefill servers only), or \
                   use another speculativeAlgorithm",
        },
    },
    Rule {
        id: "SD7",
        about: "STANDALONE with DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Currently standalone speculative decoding does not support dp attention.")],
        changes: &[],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "STANDALONE"
                    && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)),
            )
        },
        fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets, or use another speculativeAlgorithm" },
    },
    Rule {
        id: "SD8",
        about: "NGRAM with DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Currently ngram speculative decoding does not support dp attention.")],
        changes: &[],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "NGRAM"
                    && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)),
            )
        },
        fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets, or use another speculativeAlgorithm" },
    },
    Rule {
        id: "SD9",
        about: "DSPARK with pipeline stages",
        field: DECODE_PIPELINE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Currently DSpark speculative decoding only supports pp_size == 1.")],
        changes: &[],
        check: |c| when(resolved_speculative_algorithm(c)? == "DSPARK" && speculating_pipeline_stages(c) != 1),
        fix: Fix::Manual {
            hint: "set pipelineParallel to 1 on both fleets (from SGLang 0.5.21 DSPARK runs pipeline stages on PD \
                   prefill servers), or use another speculativeAlgorithm",
        },
    },
    Rule {
        id: "SD10",
        about: "DFLASH with DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("Currently DFLASH speculative decoding does not support dp attention."),
            text_from(20, "Currently DFLASH speculative decoding does not support dp attention on non-NPU devices."),
            text_from(23, "DFLASH with dp attention requires --enable-dp-lm-head."),
        ],
        changes: &[text_from(23, "allowed with --enable-dp-lm-head (SD11, SD12 check further)")],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "DFLASH"
                    && fleets_in_scope(c).any(|fleet| {
                        runs_dp_attention(c, fleet) && (c.release < v0_5(23) || !given(&fleet.extra_args, DP_LM_HEAD))
                    }),
            )
        },
        fix: Fix::Manual {
            hint: "turn DP attention off on the fleets that speculate, or use another speculativeAlgorithm (from \
                   SGLang 0.5.23: or add --enable-dp-lm-head to their extraArgs)",
        },
    },
    Rule {
        id: "SD11",
        about: "DFLASH with DP attention × attention CP",
        field: ATTENTION_CP_FIELD,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DFLASH with dp attention does not support context parallel.")],
        changes: &[],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "DFLASH"
                    && dp_lm_head_fleets(c, runs_dp_attention).any(|f| attention_cp_size(&f.extra_args) != Some(1)),
            )
        },
        fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs, or turn DP attention off" },
    },
    Rule {
        id: "SD12",
        about: "DFLASH with DP attention × DP speculative prefill coordination",
        field: "spec.decode.env[SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION]",
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DFLASH with dp attention requires SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=0.")],
        changes: &[],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "DFLASH"
                    && dp_lm_head_fleets(c, runs_dp_attention).any(|fleet| {
                        attention_cp_size(&fleet.extra_args) == Some(1) && fleet.env_on(DP_SPEC_PREFILL_COORDINATION)
                    }),
            )
        },
        fix: Fix::Manual { hint: "unset SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION (or set it to 0)" },
    },
    Rule {
        id: "SD13",
        about: "DSPARK with DP attention needs the DP LM head",
        field: DP_LM_HEAD_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DSpark with dp attention requires --enable-dp-lm-head.")],
        changes: &[text_from(18, "DP attention with one DP group passes")],
        check: |c| {
            when(
                resolved_speculative_algorithm(c)? == "DSPARK"
                    && fleets_in_scope(c)
                        .any(|fleet| dspark_dp_attention(c, fleet) && !given(&fleet.extra_args, DP_LM_HEAD)),
            )
        },
        fix: Fix::Manual {
            hint: "add --enable-dp-lm-head to the extraArgs of the fleets that run DP attention, or turn DP attention off",
        },
    },
    Rule {
        id: "SD15",
        about: "DSPARK with DP attention × the MoE all-to-all backend",
        field: MOE_A2A_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("DSpark with dp attention only supports the built-in TP MoE (moe_a2a_backend='none'), got {backend}."),
            text_from(
                18,
                "DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE) or 'megamoe', got {backend}.",
            ),
            text_from(
                21,
                "DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE), 'megamoe', or 'mori', got \
                 {backend}.",
            ),
        ],
        changes: &[],
        check: |c| {
            (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
            let allowed = dspark_dp_moe_backends(c.release);
            let backend = dp_lm_head_fleets(c, dspark_dp_attention)
                .map(|fleet| moe_a2a_backend(&fleet.extra_args))
                .find(|backend| !allowed.contains(backend))?;
            when_with(true, vec![("backend", format!("'{backend}'"))])
        },
        fix: Fix::Manual {
            hint: "drop --moe-a2a-backend from extraArgs (the built-in TP MoE), or pass one DSpark takes with DP \
                   attention (megamoe from SGLang 0.5.18, mori from 0.5.21)",
        },
    },
    Rule {
        id: "SD16",
        about: "DSPARK with DP attention × ragged verification",
        field: "spec.decode.env[SGLANG_RAGGED_VERIFY_MODE]",
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("DSpark with dp attention + moe_a2a_backend={backend} requires SGLANG_RAGGED_VERIFY_MODE=static."),
            text_from(22, "DSpark DP MoE or prefill coordination requires SGLANG_RAGGED_VERIFY_MODE=static."),
        ],
        changes: &[text_from(22, "also with SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION on")],
        check: |c| {
            (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
            let allowed = dspark_dp_moe_backends(c.release);
            let backend = dp_lm_head_fleets(c, dspark_dp_attention).find_map(|fleet| {
                let backend = moe_a2a_backend(&fleet.extra_args);
                let coordinated = c.release >= v0_5(22) && fleet.env_on(DP_SPEC_PREFILL_COORDINATION);
                let ragged = matches!(fleet.env_value(RAGGED_VERIFY_ENV), Some("compact" | "cap-accept"));
                (allowed.contains(&backend) && (backend != "none" || coordinated) && ragged).then_some(backend)
            })?;
            when_with(true, vec![("backend", format!("'{backend}'"))])
        },
        fix: Fix::Manual { hint: "set SGLANG_RAGGED_VERIFY_MODE to static (the default) in the fleet's env" },
    },
    Rule {
        id: "SD14",
        about: "DSPARK with DP attention × attention CP",
        field: ATTENTION_CP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DSpark with dp attention does not support context parallel (attn_cp_size={size}).")],
        changes: &[],
        check: |c| {
            (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
            let size = dp_lm_head_fleets(c, dspark_dp_attention)
                .find_map(|fleet| attention_cp_size(&fleet.extra_args).filter(|&size| size > 1))?;
            when_with(true, vec![("size", size.to_string())])
        },
        fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs, or turn DP attention off" },
    },
    Rule {
        id: "HS1",
        about: "HiSparse on a model without sparse attention",
        field: HISPARSE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., DeepSeek V3.2, \
                 GLM-5) and DeepSeek V4 now. ",
            ),
            text_from(
                21,
                "--enable-hisparse is only supported for DSA (DeepSeek Sparse Attention) models (e.g., DeepSeek V3.2, \
                 GLM-5), DeepSeek V4, and MiniMax M3 now. ",
            ),
        ],
        changes: &[text_from(21, "MiniMax-M3 sparse models pass")],
        check: |c| {
            let sparse = c.layout.has(LayoutFeature::Dsa)
                || c.layout.has(LayoutFeature::DeepseekV4)
                || (c.release >= v0_5(21) && c.layout.has(LayoutFeature::MinimaxSparse));
            when(!sparse && hisparse_servers(c).next().is_some())
        },
        fix: Fix::Manual {
            hint: "turn hisparse off (and drop --enable-hisparse from a service's spec.prefill.extraArgs): HiSparse \
                   needs a DSA, DeepSeek-V4 or (from SGLang 0.5.21) MiniMax-M3 sparse model",
        },
    },
    Rule {
        id: "HS2",
        about: "HiSparse with a radix cache",
        field: HISPARSE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Hierarchical sparse attention currently requires --disable-radix-cache.")],
        changes: &[],
        check: |c| when(hisparse_servers(c).any(|(fleet, decode)| keeps_radix_cache(c, fleet, decode))),
        fix: Fix::Manual {
            hint: "turn decodeRadixCache off on HiSparse decode servers, and add --disable-radix-cache to the \
                   extraArgs of HiSparse servers that are not PD decode servers",
        },
    },
    Rule {
        id: "PP1",
        about: "pipeline stages × speculative decoding",
        field: DECODE_PIPELINE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("Pipeline parallelism is not compatible with overlap schedule, speculative decoding"),
            text_from(21, "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding"),
        ],
        changes: &[text_from(21, "EAGLE without multi-layer EAGLE and DSPARK pass (PP2-PP6 and SD6 check them)")],
        check: |c| {
            let algorithm = resolved_speculative_algorithm(c)?;
            let refused = |fleet: &FleetSpec| match algorithm.as_str() {
                // Their own pipeline checks run first, in the speculative hook: DFLASH's (SD3), and
                // DSPARK's (SD9 up to 0.5.20, SD6 from 0.5.21, which lets PD prefill servers pass).
                "DFLASH" | "DSPARK" => false,
                "EAGLE" => c.release < v0_5(21) || multi_layer_eagle(c, &fleet.extra_args),
                _ => true,
            };
            when(fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1 && refused(fleet)))
        },
        fix: Fix::Manual {
            hint: "set pipelineParallel to 1 on the fleets that speculate, or turn speculative decoding off (from \
                   SGLang 0.5.21 EAGLE without multi-layer EAGLE runs pipeline stages on PD prefill servers)",
        },
    },
    Rule {
        id: "PP2",
        about: "pipeline stages × EAGLE off a PD prefill server",
        field: DECODE_PIPELINE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)",
        )],
        changes: &[],
        check: |c| when(pipelined_eagle(c, c.decode) && !c.decode.env_on(PP_SPEC_ENV)),
        fix: Fix::Manual {
            hint: "set the decode pipelineParallel to 1 (EAGLE runs pipeline stages on PD prefill servers only), or \
                   turn speculative decoding off",
        },
    },
    Rule {
        id: "PP3",
        about: "SGLANG_ENABLE_PP_SPEC × DSPARK on a PD prefill server",
        field: PP_SPEC_ENV_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("SGLANG_ENABLE_PP_SPEC does not support DSPARK PD prefill")],
        changes: &[],
        check: |c| {
            let prefill = service_prefill(c).or((c.scope == Scope::OtherServer).then_some(c.decode));
            when(
                resolved_speculative_algorithm(c)? == "DSPARK"
                    && prefill.is_some_and(|fleet| fleet.pipeline_parallel > 1 && fleet.env_on(PP_SPEC_ENV)),
            )
        },
        fix: Fix::Manual { hint: "unset SGLANG_ENABLE_PP_SPEC in the prefill fleet's env" },
    },
    Rule {
        id: "PP4",
        about: "SGLANG_ENABLE_PP_SPEC under PD",
        field: PP_SPEC_ENV_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation-mode")],
        changes: &[],
        check: |c| when(fleets_in_scope(c).any(|fleet| pipelined_eagle(c, fleet) && fleet.env_on(PP_SPEC_ENV))),
        fix: Fix::Manual {
            hint: "unset SGLANG_ENABLE_PP_SPEC in the env of the PD servers (it runs EAGLE's pipeline stages on \
                   servers without PD only)",
        },
    },
    Rule {
        id: "PP5",
        about: "SGLANG_ENABLE_PP_SPEC × adaptive speculative decoding",
        field: ADAPTIVE_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("SGLANG_ENABLE_PP_SPEC is not compatible with --speculative-adaptive")],
        changes: &[],
        check: |c| when(pipeline_speculation_without_pd(c) && given(&c.decode.extra_args, ADAPTIVE)),
        fix: Fix::Manual { hint: "drop --speculative-adaptive, or unset SGLANG_ENABLE_PP_SPEC" },
    },
    Rule {
        id: "PP6",
        about: "SGLANG_ENABLE_PP_SPEC × DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("SGLANG_ENABLE_PP_SPEC is not compatible with --enable-dp-attention"),
            text_from(22, "SGLANG_ENABLE_PP_SPEC is not compatible with attention DP (--attn-dp-size)"),
        ],
        changes: &[],
        check: |c| {
            when(
                pipeline_speculation_without_pd(c)
                    && !given(&c.decode.extra_args, ADAPTIVE)
                    && c.decode.enable_dp_attention
                    && c.decode.data_parallel > 1,
            )
        },
        fix: Fix::Manual { hint: "turn DP attention off, or unset SGLANG_ENABLE_PP_SPEC" },
    },
    Rule {
        id: "V1",
        about: "DeepSeek-V4 speculative algorithm",
        field: SPECULATIVE_ALGORITHM,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Only EAGLE and DSPARK speculative algorithms are supported for DeepseekV4ForCausalLM")],
        changes: &[],
        check: |c| when(!matches!(deepseek_v4_speculative_algorithm(c)?, "EAGLE" | "DSPARK")),
        fix: Fix::Manual {
            hint: "write speculativeAlgorithm as EAGLE or DSPARK, in capitals: DeepSeek-V4's model hook reads the name \
                   as given, before SGLang resolves nextn or NEXTN to EAGLE",
        },
    },
    Rule {
        id: "V2",
        about: "DeepSeek-V4 EAGLE needs one draft token per step",
        field: EAGLE_TOPK_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM")],
        changes: &[],
        check: |c| {
            when(
                deepseek_v4_speculative_algorithm(c)? == "EAGLE"
                    && fleets_in_scope(c).any(|fleet| !eagle_topk_is_one(&fleet.extra_args)),
            )
        },
        fix: Fix::Manual {
            hint: "add --speculative-eagle-topk 1 to spec.decode.extraArgs (and a service's spec.prefill.extraArgs): \
                   SGLang leaves the top-k unset, which DeepSeek-V4 refuses",
        },
    },
    Rule {
        id: "V3",
        about: "DeepSeek-V4.1 × speculative decoding other than DSpark",
        field: SPECULATIVE_ALGORITHM,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "DeepSeek-V4.1 does not support speculative decoding other than DSpark yet; disable it to serve this \
             model.",
        )],
        changes: &[],
        check: |c| when(deepseek_v41(c) && speculative_algorithm(c)? != "DSPARK"),
        fix: Fix::Manual { hint: "set speculativeAlgorithm to DSPARK, or unset it" },
    },
    Rule {
        id: "V3",
        about: "DeepSeek-V4.1 × HiSparse",
        field: HISPARSE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DeepSeek-V4.1 does not support HiSparse yet; disable it to serve this model.")],
        changes: &[],
        check: |c| {
            when(
                deepseek_v41(c)
                    && (c.settings.hisparse
                        || service_prefill(c).is_some_and(|fleet| given(&fleet.extra_args, "--enable-hisparse"))),
            )
        },
        fix: Fix::Manual {
            hint: "turn hisparse off (and drop --enable-hisparse from a service's spec.prefill.extraArgs)",
        },
    },
    Rule {
        id: "V3",
        about: "DeepSeek-V4.1 × two-batch overlap",
        field: TWO_BATCH_OVERLAP_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DeepSeek-V4.1 does not support two-batch overlap yet; disable it to serve this model.")],
        changes: &[],
        check: |c| when(deepseek_v41(c) && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, TWO_BATCH_OVERLAP))),
        fix: Fix::Manual { hint: "remove --enable-two-batch-overlap from extraArgs" },
    },
    Rule {
        id: "V3",
        about: "DeepSeek-V4.1 × pipeline parallelism",
        field: DECODE_PIPELINE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DeepSeek-V4.1 does not support pipeline parallelism yet; disable it to serve this model.")],
        changes: &[],
        check: |c| when(deepseek_v41(c) && speculating_pipeline_stages(c) > 1),
        fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets" },
    },
    Rule {
        id: "V4",
        about: "DeepSeek-V4.1 DSpark PD needs Mooncake or NIXL and no context or data parallelism",
        field: SPECULATIVE_ALGORITHM,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text_from(
                21,
                "DeepSeek-V4.1 DSpark PD requires static verify, Mooncake, DP=1 and CP=1. Both servers must enable \
                 DSpark with the same block size and TP size.",
            ),
            text_from(
                22,
                "DeepSeek-V4.1 DSpark PD requires static verify, Mooncake or NIXL, DCP=1, and CP=1 on decode. Prefill \
                 CP requires --enable-prefill-cp with the interleave strategy. DP attention is supported when both \
                 servers use the same block size and target/draft KV layout.",
            ),
        ],
        changes: &[
            text_from(21, "any DP, attention CP or DCP, or a backend other than mooncake"),
            text_from(22, "NIXL and DP allowed; prefill CP with the interleave strategy allowed on prefill"),
        ],
        check: |c| {
            when(
                deepseek_v41(c)
                    && c.settings.speculative_algorithm.is_some()
                    && pd_servers(c)
                        .any(|(fleet, prefill, dcp)| deepseek_v41_dspark_pd_refused(c, fleet, prefill, dcp)),
            )
        },
        fix: Fix::Manual {
            hint: "run DeepSeek-V4.1 DSpark under PD with transferBackend mooncake (0.5.22 and later: or nixl), \
                   decodeContextParallel 1, SGLANG_RAGGED_VERIFY_MODE unset or static, no attention context \
                   parallelism (a prefill server may run --enable-prefill-cp --cp-strategy interleave from 0.5.22) \
                   and, in 0.5.21, no data parallelism; or unset speculativeAlgorithm",
        },
    },
    Rule {
        id: "K1",
        about: "DSA decode context parallelism × HiSparse or HiCache",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DSA DCP does not support HiSparse or HiCache.")],
        changes: &[],
        check: |c| when(dsa_dcp_servers(c).any(|(_, hierarchical)| hierarchical)),
        fix: Fix::Manual { hint: "set decodeContextParallel to 1, or turn hierarchicalCache and hisparse off" },
    },
    Rule {
        id: "K2",
        about: "DSA decode context parallelism under PD",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DSA DCP does not support PD disaggregation.")],
        changes: &[],
        check: |c| when(dsa_dcp_servers(c).next().is_some()),
        fix: Fix::Manual {
            hint: "set decodeContextParallel to 1: from SGLang 0.5.22 a DSA model (DeepSeek-V3.2, GLM-5) runs \
                   decode context parallelism only without PD disaggregation",
        },
    },
    Rule {
        id: "K3",
        about: "DSA decode context parallelism needs one draft token per step",
        field: EAGLE_TOPK_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DSA DCP requires --speculative-eagle-topk 1.")],
        changes: &[],
        check: |c| {
            when(dsa_dcp_servers(c).any(|(fleet, _)| {
                option_value(&fleet.extra_args, EAGLE_TOPK).is_some() && !eagle_topk_is_one(&fleet.extra_args)
            }))
        },
        fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs, or decodeContextParallel to 1" },
    },
    Rule {
        id: "K6",
        about: "DSA pooled index keys × decode context parallelism",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--dcp-size > 1 is not supported for DSA with index_kpool={kpool}: a pooled index key spans positions \
             owned by different DCP ranks.",
        )],
        changes: &[],
        check: |c| {
            let kpool = c.layout.dsa_index_kpool.filter(|&kpool| kpool > 1)?;
            when_with(dsa_dcp_servers(c).next().is_some(), vec![("kpool", kpool.to_string())])
        },
        fix: Fix::Manual {
            hint: "set decodeContextParallel to 1 (and drop --dcp-size from extraArgs): the model pools its index keys \
                   (index_kpool above 1), which CUDA's DSA path cannot split across DCP ranks",
        },
    },
    Rule {
        id: "K4",
        about: "HYV4 × decode context parallelism",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--dcp-size > 1 is not supported for HYV4 because decode context parallelism gathers query heads across \
             DCP ranks but does not provide single-owner semantics for learnable attention sinks. Got \
             architecture='{arch}' and dcp_size={dcp}.",
        )],
        changes: &[],
        check: |c| {
            let (arch, dcp) = hyv4_dcp(c)?;
            when_with(true, vec![("arch", arch), ("dcp", dcp.to_string())])
        },
        fix: Fix::Manual { hint: "set decodeContextParallel to 1 (and drop --dcp-size from extraArgs)" },
    },
    Rule {
        id: "K5",
        about: "HYV4 × prefill context parallelism",
        field: PREFILL_CP_FIELD,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-prefill-cp is not supported for HYV4 because its attention path does not implement DSA \
             context-parallel metadata and sharding. Got architecture='{arch}' and enable_prefill_cp=True.",
        )],
        changes: &[],
        check: |c| {
            let arch = c.layout.architecture.as_str();
            when_with(
                c.release >= v0_5(20)
                    && HYV4.contains(&arch)
                    && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, PREFILL_CP)),
                vec![("arch", arch.to_string())],
            )
        },
        fix: Fix::Manual { hint: "remove --enable-prefill-cp from extraArgs" },
    },
    Rule {
        id: "CP9",
        about: "DSA prefill CP with the interleave strategy × DP",
        field: DATA_PARALLEL_FIELD,
        span: Span::between(v0_5(17), v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("interleave DSA CP does not support DP attention.")],
        changes: &[],
        check: |c| {
            when(
                model_hook_dsa(c)
                    && prefill_cp_fleets(c).any(|fleet| {
                        option_value(&fleet.extra_args, CP_STRATEGY) != Some("zigzag") && fleet.data_parallel > 1
                    }),
            )
        },
        fix: Fix::Manual {
            hint: "drop dataParallel (--dp-size) from the prefill-CP servers (CP spans the TP group), use --cp-strategy \
                   zigzag, or use SGLang 0.5.22 or later, where interleave prefill CP runs with attention DP",
        },
    },
    Rule {
        id: "CP11",
        about: "DeepSeek-V4 prefill CP × a strategy it does not run",
        field: CP_STRATEGY_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("DeepSeekV4 only supports interleave CP strategy, got {strategy}"),
            text_from(21, "DeepSeekV4 only supports interleave/zigzag CP strategy, got {strategy}"),
        ],
        changes: &[text_from(21, "zigzag passes this check (CP12 refuses it on GPUs); a missing strategy does not")],
        check: |c| {
            let strategy = deepseek_v4_prefill_cp_strategies(c).find(|strategy| match strategy {
                None => true,
                Some(strategy) => c.release < v0_5(21) && *strategy != "interleave",
            })?;
            when_with(true, vec![("strategy", strategy.unwrap_or("None").to_string())])
        },
        fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs next to --enable-prefill-cp" },
    },
    Rule {
        id: "CP12",
        about: "DeepSeek-V4 prefill CP × the zigzag strategy on a GPU",
        field: CP_STRATEGY_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("DeepSeekV4 zigzag CP requires the NPU backend; the CUDA backend reindexes with interleave order."),
            text_from(
                22,
                "DeepSeekV4 zigzag CP requires the NPU backend; CUDA/HIP backends reindex with interleave order.",
            ),
        ],
        changes: &[],
        check: |c| when(deepseek_v4_prefill_cp_strategies(c).any(|strategy| strategy == Some("zigzag"))),
        fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs (zigzag runs on Ascend NPUs only)" },
    },
    Rule {
        id: "CP13",
        about: "DeepSeek-V4 prefill CP × DP",
        field: DATA_PARALLEL_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("For round-robin split mode, dp attention is not supported.")],
        changes: &[],
        check: |c| when(deepseek_v4_prefill_cp_fleets(c).any(|fleet| fleet.data_parallel > 1)),
        fix: Fix::Manual {
            hint: "drop dataParallel (--dp-size, --attn-dp-size) from the prefill-CP servers: DeepSeek-V4's prefill CP \
                   spans the whole TP group",
        },
    },
    Rule {
        id: "CP10",
        about: "DeepSeek prefill CP beyond one machine",
        field: DECODE_TP,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "Context parallel only supports single machine (tp_size <= 8). Cross-machine CP has precision issues.",
        )],
        changes: &[],
        check: |c| {
            let deepseek = model_hook_dsa(c) || c.layout.architecture == DEEPSEEK_V4;
            when(deepseek && prefill_cp_fleets(c).any(|fleet| fleet.tensor_parallel > 8))
        },
        fix: Fix::Manual {
            hint: "keep tensorParallel at 8 or below on servers with --enable-prefill-cp (SGLang runs a DeepSeek \
                   model's prefill CP on one machine)",
        },
    },
    Rule {
        id: "MC1",
        about: "MiniCPM × DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MiniCPM does not support DP attention")],
        changes: &[text_from(22, "DP attention counts from more than one attention-DP group")],
        check: |c| {
            when(
                MINICPM.contains(&c.layout.architecture.as_str())
                    && fleets_in_scope(c).any(|fleet| provider_dp_attention(c, fleet)),
            )
        },
        fix: Fix::Manual {
            hint: "turn enableDpAttention off on both fleets (and drop --enable-dp-attention from extraArgs)",
        },
    },
    Rule {
        id: "MC2",
        about: "MiniCPM-SALA hybrid attention × HiCache",
        field: HIERARCHICAL_CACHE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MiniCPM SALA does not support hierarchical cache")],
        changes: &[],
        check: |c| {
            when(
                MINICPM.contains(&c.layout.architecture.as_str())
                    && minicpm_hybrid_attention(c)
                    && hicache_fleets(c).next().is_some(),
            )
        },
        fix: Fix::Manual {
            hint: "turn hierarchicalCache off: MiniCPM-SALA's sparse and lightning layers run without it",
        },
    },
    Rule {
        id: "MC3",
        about: "MiniCPM sparse attention under PD",
        field: "spec.decode.extraArgs[--attention-backend]",
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MiniCPM sparse attention does not support PD disaggregation")],
        changes: &[],
        check: |c| {
            when(
                MINICPM.contains(&c.layout.architecture.as_str())
                    && c.layout.has(LayoutFeature::MinicpmSparseAttention)
                    && fleets_in_scope(c).any(minicpm_sparse_backend),
            )
        },
        fix: Fix::Manual {
            hint: "serve MiniCPM-SALA's sparse attention without PD disaggregation, or run its dense attention under PD \
                   (env SGLANG_MINICPM_FORCE_DENSE=1, or --attention-backend fa3 or flashinfer in extraArgs)",
        },
    },
    Rule {
        id: "E1",
        about: "ERNIE 4.5 VL MoE × DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "ERNIE 4.5 VL MoE does not support DP attention: its attention heads are split over the full TP group.",
        )],
        changes: &[],
        check: |c| {
            when(c.layout.architecture == ERNIE45_VL_MOE && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)))
        },
        fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets" },
    },
    Rule {
        id: "QX1",
        about: "Qwen4-Exp PD over MORI × pipeline stages",
        field: DECODE_PIPELINE,
        span: Span::since(v0_5(20)),
        backends: &[TransferBackend::Mori],
        phase: Phase::Args,
        messages: &[text(
            "Qwen4-Exp PD with MORI requires --pp-size 1; MORI does not yet exchange the global QSA layer metadata \
             needed to pair compact state descriptors across pipeline stages.",
        )],
        changes: &[],
        check: |c| {
            when(c.layout.architecture == QWEN4_EXP && fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1))
        },
        fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets, or use transferBackend mooncake or nixl" },
    },
    Rule {
        id: "QX2",
        about: "Qwen4-Exp × unified memory",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Qwen4-Exp does not support --enable-unified-memory yet")],
        changes: &[],
        check: |c| when(c.layout.architecture == QWEN4_EXP && c.settings.enable_unified_memory),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
    Rule {
        id: "IQ1",
        about: "IQuest Q1 needs FA3 attention",
        field: "spec.decode.extraArgs[--attention-backend]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "IQuestQ1 applies its attention sink from the softmax LSE and requires FA3 attention for both prefill and \
             decode.",
        )],
        changes: &[],
        check: |c| {
            when(
                iquest_q1(c)
                    && fleets_in_scope(c)
                        .any(|fleet| ATTENTION_BACKENDS.iter().any(|option| not_fa3(&fleet.extra_args, option))),
            )
        },
        fix: Fix::Manual { hint: IQUEST_FA3_HINT },
    },
    Rule {
        id: "IQ2",
        about: "IQuest Q1 drafts with EAGLE or NEXTN only",
        field: SPECULATIVE_ALGORITHM,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 MTP requires serial EAGLE or NEXTN drafting.")],
        changes: &[],
        check: |c| when(iquest_q1(c) && !matches!(speculative_algorithm(c)?.as_str(), "EAGLE" | "NEXTN")),
        fix: Fix::Manual { hint: "set speculativeAlgorithm to EAGLE (or NEXTN), or unset it" },
    },
    Rule {
        id: "IQ3",
        about: "IQuest Q1's MTP draft needs FA3 attention",
        field: "spec.decode.extraArgs[--speculative-draft-attention-backend]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuestQ1 requires FA3 attention for the MTP draft.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1(c)
                    && c.settings.speculative_algorithm.is_some()
                    && fleets_in_scope(c)
                        .any(|fleet| not_fa3(&fleet.extra_args, "--speculative-draft-attention-backend")),
            )
        },
        fix: Fix::Manual { hint: "drop --speculative-draft-attention-backend from extraArgs, or set it to fa3" },
    },
    Rule {
        id: "IQ4",
        about: "IQuest Q1 × context parallelism",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuestQ1 does not support context parallelism.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1(c)
                    && pd_servers(c).any(|(fleet, _, dcp)| {
                        let args = &fleet.extra_args;
                        dcp > 1 || runs_attention_cp(fleet) || given(args, PREFILL_CP)
                    }),
            )
        },
        fix: Fix::Manual {
            hint: "set decodeContextParallel to 1 and drop --attn-cp-size and --enable-prefill-cp from extraArgs",
        },
    },
    Rule {
        id: "IQ5",
        about: "IQuest Q1 drafts one token per step",
        field: EAGLE_TOPK_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuestQ1 speculative decoding requires --speculative-eagle-topk 1.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1(c)
                    && fleets_in_scope(c).any(|fleet| eagle_topk(&fleet.extra_args).is_some_and(|topk| topk > 1)),
            )
        },
        fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs" },
    },
    Rule {
        id: "IQ6",
        about: "IQuest Q1 × multi-layer EAGLE",
        field: "spec.decode.extraArgs[--enable-multi-layer-eagle]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 MTP drafting does not support multi-layer EAGLE.")],
        changes: &[],
        check: |c| {
            when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, "--enable-multi-layer-eagle")))
        },
        fix: Fix::Manual { hint: "drop --enable-multi-layer-eagle from extraArgs" },
    },
    Rule {
        id: "IQ7",
        about: "IQuest Q1 × DP attention",
        field: DECODE_DP_ATTENTION,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 does not support DP attention.")],
        changes: &[text_from(22, "DP attention counts from more than one attention-DP group")],
        check: |c| when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| provider_dp_attention(c, fleet))),
        fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets" },
    },
    Rule {
        id: "IQ8",
        about: "IQuest Q1 × pipeline stages",
        field: DECODE_PIPELINE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 does not support pipeline parallelism.")],
        changes: &[],
        check: |c| when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1)),
        fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets" },
    },
    Rule {
        id: "IQ9",
        about: "IQuest Q1 drafts with an MTP checkpoint of its own",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 requires an independent draft model path.")],
        changes: &[],
        check: |c| {
            when(iquest_q1_mtp_drafting(c) && (c.settings.speculative_draft_model.is_none() || c.draft_is_the_model))
        },
        fix: Fix::Manual { hint: IQUEST_MTP_DRAFT_HINT },
    },
    Rule {
        id: "IQ10",
        about: "IQuest Q1's draft is an IQuest Q1 MTP checkpoint",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("IQuest Q1 requires an independent MTP draft checkpoint.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1_mtp_drafting(c)
                    && !c.draft_is_the_model
                    && c.draft.is_some_and(|draft| draft.model_type.as_deref() != Some(IQUEST_MTP_MODEL_TYPE)),
            )
        },
        fix: Fix::Manual { hint: IQUEST_MTP_DRAFT_HINT },
    },
    Rule {
        id: "IQ11",
        about: "IQuest Q1's MTP draft has the target's hidden and vocabulary sizes",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP draft hidden size and vocabulary must match the target.")],
        changes: &[],
        check: |c| {
            let (draft, _) = iquest_q1_mtp_draft(c)?;
            let differs = |ours: Option<u64>, theirs: Option<u64>| ours.zip(theirs).is_some_and(|(a, b)| a != b);
            when(differs(draft.hidden_size, c.layout.hidden_size) || differs(draft.vocab_size, c.layout.vocab_size))
        },
        fix: Fix::Manual {
            hint: "use the MTP draft checkpoint trained for this model (same hidden_size and vocab_size)",
        },
    },
    Rule {
        id: "IQ12",
        about: "IQuest Q1's MTP draft was trained for the target's layer count",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP draft target layer count must match the target.")],
        changes: &[],
        check: |c| {
            let (_, mtp) = iquest_q1_mtp_draft(c)?;
            when(mtp.target_layers != u64::from(c.layout.layers.total))
        },
        fix: Fix::Manual {
            hint: "use the MTP draft checkpoint trained for this model (its num_target_layers is the model's \
                   num_hidden_layers)",
        },
    },
    Rule {
        id: "IQ13",
        about: "IQuest Q1's MTP draft × a speculative token map",
        field: "spec.decode.extraArgs[--speculative-token-map]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP uses its own full-vocabulary embedding and head.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1_mtp_drafting(c)
                    && fleets_in_scope(c).any(|fleet| option_value(&fleet.extra_args, TOKEN_MAP).is_some()),
            )
        },
        fix: Fix::Manual { hint: "drop --speculative-token-map from extraArgs" },
    },
    Rule {
        id: "IQ14",
        about: "IQuest Q1's MTP draft runs at least one step",
        field: NUM_STEPS_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP requires positive speculative_num_steps.")],
        changes: &[],
        check: |c| {
            when(
                iquest_q1_mtp_drafting(c)
                    && fleets_in_scope(c).any(|fleet| speculative_num_steps(&fleet.extra_args).is_some_and(|s| s < 1)),
            )
        },
        fix: Fix::Manual {
            hint: "set --speculative-num-steps to 1 or more in extraArgs, or drop it (the checkpoint's \
                   num_draft_slots)",
        },
    },
    Rule {
        id: "IQ15",
        about: "IQuest Q1's MTP draft × a top-k below 1",
        field: EAGLE_TOPK_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP requires --speculative-eagle-topk 1.")],
        changes: &[],
        // A top-k above 1 is refused before, by the override provider (IQ5).
        check: |c| {
            when(
                iquest_q1_mtp_drafting(c)
                    && fleets_in_scope(c).any(|fleet| eagle_topk(&fleet.extra_args).is_some_and(|topk| topk < 1)),
            )
        },
        fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs, or drop it" },
    },
    Rule {
        id: "IQ16",
        about: "IQuest Q1's MTP draft verifies its steps and one token",
        field: "spec.decode.extraArgs[--speculative-num-draft-tokens]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("MTP verification width must equal draft steps + 1.")],
        changes: &[],
        check: |c| {
            if !iquest_q1_mtp_drafting(c) {
                return None;
            }
            let slots = iquest_q1_mtp_draft(c).map(|(_, mtp)| mtp.draft_slots);
            when(fleets_in_scope(c).any(|fleet| {
                let args = &fleet.extra_args;
                let steps = match option_value(args, NUM_STEPS) {
                    Some(_) => speculative_num_steps(args),
                    None => slots.and_then(|slots| i64::try_from(slots).ok()),
                };
                let tokens =
                    option_value(args, "--speculative-num-draft-tokens").and_then(|t| t.trim().parse::<i64>().ok());
                matches!((steps, tokens), (Some(steps), Some(tokens)) if tokens != steps + 1)
            }))
        },
        fix: Fix::Manual {
            hint: "set --speculative-num-draft-tokens to --speculative-num-steps + 1 in extraArgs (the steps default \
                   to the checkpoint's num_draft_slots), or drop it",
        },
    },
    Rule {
        id: "MV1",
        about: "MiMo-V2 fused QKV projection layout",
        field: MODEL_CONFIG,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "MiMoV2 hf_config has unsupported attention_projection_layout={layout}; expected 'fused_qkv' or unset.",
            ),
            text_from(
                22,
                "MiMoV2 hf_config has unsupported attention_projection_layout={layout}; expected 'fused_qkv', 'split' \
                 or unset.",
            ),
        ],
        changes: &[],
        check: |c| {
            let layout = c.layout.attention_projection_layout.as_deref()?;
            let supported = layout == "fused_qkv" || (layout == "split" && c.release >= v0_5(22));
            when_with(
                !supported && mimo_v2_fused_qkv_fleets(c).next().is_some(),
                vec![("layout", crate::python::py_repr(layout))],
            )
        },
        fix: Fix::Manual {
            hint: "set attention_projection_layout in the model's config.json to fused_qkv or leave it unset (split \
                   from SGLang 0.5.22), as its checkpoint's QKV weights are stored",
        },
    },
    Rule {
        id: "MV2",
        about: "MiMo-V2 fused QKV weights × attention TP",
        field: DECODE_TP,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "MiMoV2ForCausalLM requires effective attention TP size {expected} because its fused qkv_proj weights \
                 are TP={expected}-interleaved; got {effective} (tp_size={tp}, dp_size={dp}, \
                 enable_dp_attention={dp_attention}, attn_cp_size={cp}). Set --tp, --dp, --enable-dp-attention, and \
                 --attention-context-parallel-size so the effective attention TP size is {expected}.",
            ),
            text_from(
                22,
                "MiMoV2ForCausalLM requires effective attention TP size {expected} because its fused qkv_proj weights \
                 are TP={expected}-interleaved; got {effective} (tp_size={tp}, attn_dp_size={dp}, attn_cp_size={cp}). \
                 Set --tp, --attn-dp-size, and --attention-context-parallel-size so the effective attention TP size is \
                 {expected}.",
            ),
        ],
        changes: &[],
        check: mimo_v2_attention_tp_mismatch,
        fix: Fix::Manual {
            hint: "set tensorParallel, dataParallel with enableDpAttention, and --attn-cp-size in extraArgs so that TP ÷ \
                   attention DP ÷ attention CP divides the model's num_key_value_heads",
        },
    },
    Rule {
        id: "MV3",
        about: "MiMo-V2 × HiCache without the unified radix tree",
        field: HIERARCHICAL_CACHE,
        span: Span::between(v0_5(17), v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "Hierarchical cache for MiMoV2 requires the unified radix tree. Set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 to \
             enable --enable-hierarchical-cache for this model.",
        )],
        changes: &[],
        check: |c| {
            let mimo_v2 = MIMO_V2.contains(&c.layout.architecture.as_str());
            when(mimo_v2 && hicache_fleets(c).any(|fleet| !fleet.env_on(UNIFIED_RADIX_TREE_ENV)))
        },
        fix: Fix::Manual {
            hint: "set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 in the env of the servers with HiCache (spec.decode.env, \
                   spec.prefill.env), turn hierarchicalCache off, or use SGLang 0.5.19 or later",
        },
    },
    Rule {
        id: "NH1",
        about: "Nemotron-H expert remapping × the flashinfer_trtllm MoE runner",
        field: MOE_RUNNER_FIELD,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "flashinfer_trtllm routes inside the kernel and does not support EPLB or redundant experts on \
             Nemotron-H; use --moe-runner-backend flashinfer_trtllm_routed.",
        )],
        changes: &[],
        check: |c| {
            when(
                NEMOTRON_H.contains(&c.layout.architecture.as_str())
                    && fleets_in_scope(c).any(|fleet| {
                        remaps_experts(&fleet.extra_args)
                            && option_value(&fleet.extra_args, MOE_RUNNER_BACKEND) == Some("flashinfer_trtllm")
                    }),
            )
        },
        fix: Fix::Manual { hint: "set --moe-runner-backend flashinfer_trtllm_routed in extraArgs" },
    },
    Rule {
        id: "NH2",
        about: "Nemotron-H EPLB × flashinfer_cutedsl without an all-to-all backend",
        field: MOE_RUNNER_FIELD,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "flashinfer_cutedsl without an a2a backend does not migrate its expert scales on EPLB rebalance; use \
             --moe-runner-backend flashinfer_trtllm_routed or set --moe-a2a-backend.",
        )],
        changes: &[],
        check: |c| {
            when(
                NEMOTRON_H.contains(&c.layout.architecture.as_str())
                    && fleets_in_scope(c).any(|fleet| {
                        let args = &fleet.extra_args;
                        given(args, "--enable-eplb")
                            && option_value(args, MOE_RUNNER_BACKEND) == Some("flashinfer_cutedsl")
                            && moe_a2a_backend(args) == "none"
                    }),
            )
        },
        fix: Fix::Manual {
            hint: "set --moe-runner-backend flashinfer_trtllm_routed, or an all-to-all backend with --moe-a2a-backend",
        },
    },
    Rule {
        id: "CP6",
        about: "DSA prefill CP on a PD decode server",
        field: "spec.decode.extraArgs[--enable-prefill-cp]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "CP is only supported for prefill when PD disaggregation, please remove --enable-prefill-cp.",
        )],
        changes: &[],
        check: |c| when(c.scope != Scope::OtherServer && model_hook_dsa(c) && given(&c.decode.extra_args, PREFILL_CP)),
        fix: Fix::Manual {
            hint: "remove --enable-prefill-cp from the decode servers' extraArgs (prefill servers keep it)",
        },
    },
    Rule {
        id: "LS0",
        about: "DSA cache layer split on a model without DSA",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-dsa-cache-layer-split is only supported for DSA (DeepSeek Sparse Attention) models.",
        )],
        changes: &[],
        check: |c| {
            when(
                !c.layout.has(LayoutFeature::Dsa)
                    && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, DSA_CACHE_LAYER_SPLIT)),
            )
        },
        fix: Fix::Manual { hint: "drop --enable-dsa-cache-layer-split from extraArgs: the model has no DSA layers" },
    },
    Rule {
        id: "LS1",
        about: "DSA cache layer split on a PD decode server",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-dsa-cache-layer-split is not supported on decode workers. This flag is a prefill-CP \
             optimization; decode receives full cache shards through PD transfer.",
        )],
        changes: &[],
        // The decode servers (no role list keeps this rule for other servers).
        check: |c| {
            when(
                c.scope != Scope::OtherServer
                    && model_hook_dsa(c)
                    && given(&c.decode.extra_args, DSA_CACHE_LAYER_SPLIT),
            )
        },
        fix: Fix::Manual {
            hint: "drop --enable-dsa-cache-layer-split from the decode fleet's extraArgs (it belongs on the prefill \
                   servers, spec.prefill)",
        },
    },
    Rule {
        id: "LS2",
        about: "DSA cache layer split on a server without PD",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-dsa-cache-layer-split is only supported on PD prefill workers. Non-PD workers also run decode \
             and require ordinary local decode cache semantics.",
        )],
        changes: &[],
        // The guard's server without PD (WITHOUT_PD).
        check: |c| {
            when(
                c.scope == Scope::OtherServer
                    && model_hook_dsa(c)
                    && given(&c.decode.extra_args, DSA_CACHE_LAYER_SPLIT),
            )
        },
        fix: Fix::Manual {
            hint: "drop --enable-dsa-cache-layer-split: it splits the cache of PD prefill servers only",
        },
    },
    Rule {
        id: "LS3",
        about: "DSA cache layer split without interleaved prefill CP",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave (or legacy \
                 --enable-nsa-prefill-context-parallel with --nsa-prefill-cp-mode round-robin-split).",
            ),
            text_from(20, "--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave."),
        ],
        changes: &[],
        check: |c| {
            when(dsa_layer_split_fleets(c).any(|fleet| {
                let args = &fleet.extra_args;
                !given(args, PREFILL_CP) || option_value(args, "--cp-strategy") != Some("interleave")
            }))
        },
        fix: Fix::Manual {
            hint: "add --enable-prefill-cp and --cp-strategy interleave to the extraArgs that split the cache layers",
        },
    },
    Rule {
        id: "LS4",
        about: "DSA cache layer split off Mooncake",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-dsa-cache-layer-split currently only supports the mooncake transfer backend (mooncake / \
             mooncake_tcp). Got --disaggregation-transfer-backend '{backend}'. mori/nixl support will be added later \
             by the community.",
        )],
        changes: &[],
        check: |c| {
            when_with(
                c.settings.transfer_backend != TransferBackend::Mooncake && dsa_layer_split_fleets(c).next().is_some(),
                vec![("backend", c.settings.transfer_backend.as_str().to_string())],
            )
        },
        fix: Fix::Manual {
            hint: "set transferBackend to mooncake, or drop --enable-dsa-cache-layer-split from extraArgs",
        },
    },
    Rule {
        id: "LS5",
        about: "DSA cache layer split × pipeline stages",
        field: DSA_CACHE_LAYER_SPLIT_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-dsa-cache-layer-split is not supported with pipeline parallelism (pp_size > 1) yet. It requires \
             prefill context parallelism, and CP + PP has not been validated for this feature.",
        )],
        changes: &[],
        check: |c| when(dsa_layer_split_fleets(c).any(|fleet| fleet.pipeline_parallel > 1)),
        fix: Fix::Manual {
            hint: "set pipelineParallel to 1 on the servers that split the cache layers, or drop \
                   --enable-dsa-cache-layer-split",
        },
    },
    Rule {
        id: "DT2",
        about: "DSA learnable attention sinks × a KV cache dtype other than bfloat16",
        field: DECODE_KV_CACHE_DTYPE,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Learnable DSA attention sinks require a bfloat16 KV cache; got kv_cache_dtype={dtype}.")],
        changes: &[],
        check: |c| {
            let dtype = dsa_kv_cache_dtype_refused(c, &["auto", "bf16", "bfloat16"])?;
            when_with(c.layout.has(LayoutFeature::LearnableAttentionSinks), vec![("dtype", dtype.to_string())])
        },
        fix: Fix::Manual {
            hint: "set the KV cache dtype (kvCacheDtype, --kv-cache-dtype) to bfloat16, or leave it unset",
        },
    },
    Rule {
        id: "DT1",
        about: "DSA KV cache dtype other than bfloat16 or fp8_e4m3",
        field: DECODE_KV_CACHE_DTYPE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype")],
        changes: &[],
        check: |c| when(dsa_kv_cache_dtype_refused(c, &["auto", "bf16", "bfloat16", "fp8_e4m3"]).is_some()),
        fix: Fix::Manual {
            hint: "set the KV cache dtype (kvCacheDtype, --kv-cache-dtype) to fp8_e4m3 or bfloat16, or leave it unset \
                   (SGLang then picks fp8_e4m3 on Blackwell and bfloat16 before)",
        },
    },
    Rule {
        id: "CP2",
        about: "Nemotron-H × attention context parallelism",
        field: ATTENTION_CP_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Nemotron-H does not support --attn-cp-size > 1")],
        changes: &[],
        check: |c| {
            when(
                matches!(c.layout.text_model_type(), Some("nemotron_h" | "nemotron_h_puzzle"))
                    && fleets_in_scope(c).any(runs_attention_cp),
            )
        },
        fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs (or set it to 1)" },
    },
    Rule {
        id: "CP3",
        about: "LongCat-Flash prefill CP × attention CP",
        field: ATTENTION_CP_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("LongCat-Flash does not support --enable-prefill-cp with --attn-cp-size > 1")],
        changes: &[],
        check: |c| {
            when(c.layout.text_model_type() == Some("longcat_flash") && prefill_cp_fleets(c).any(runs_attention_cp))
        },
        fix: Fix::Manual { hint: "drop --enable-prefill-cp or --attn-cp-size from extraArgs" },
    },
    Rule {
        id: "CP4",
        about: "DeepSeek-V3.2 prefill CP × the zigzag strategy",
        field: CP_STRATEGY_FIELD,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DeepSeek V3.2 prefill CP does not support --cp-strategy zigzag; use interleave.")],
        changes: &[],
        check: |c| {
            when(
                c.layout.architecture == "DeepseekV32ForCausalLM"
                    && prefill_cp_fleets(c).any(|fleet| option_value(&fleet.extra_args, CP_STRATEGY) == Some("zigzag")),
            )
        },
        fix: Fix::Manual { hint: "set --cp-strategy interleave in extraArgs" },
    },
    Rule {
        id: "CP5",
        about: "MiMo-V2 prefill CP needs the zigzag strategy",
        field: CP_STRATEGY_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("MiMo V2 CP-v2 only supports --cp-strategy zigzag."),
            text_from(20, "MiMo V2 prefill CP only supports --cp-strategy zigzag."),
        ],
        changes: &[text_from(20, "checked on every prefill-CP server, not only with CP-v2 (SGLANG_ENABLE_CP_V2)")],
        check: |c| {
            when(
                MIMO_V2.contains(&c.layout.architecture.as_str())
                    && prefill_cp_fleets(c).any(|fleet| {
                        mimo_v2_prefill_cp_checked(c, fleet)
                            && option_value(&fleet.extra_args, CP_STRATEGY) != Some("zigzag")
                    }),
            )
        },
        fix: Fix::Manual { hint: "set --cp-strategy zigzag in extraArgs" },
    },
    Rule {
        id: "CP1",
        about: "prefill CP needs a strategy",
        field: CP_STRATEGY_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--cp-strategy must be set when --enable-prefill-cp is enabled.")],
        changes: &[],
        check: |c| when(prefill_cp_fleets(c).any(|fleet| option_value(&fleet.extra_args, CP_STRATEGY).is_none())),
        fix: Fix::Manual { hint: "add --cp-strategy interleave (or zigzag) to extraArgs next to --enable-prefill-cp" },
    },
    Rule {
        id: "CP7",
        about: "attention CP must divide TP",
        field: ATTENTION_CP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("tp_size must be divisible by attn_cp_size")],
        changes: &[],
        check: |c| when(fleets_in_scope(c).any(|fleet| cp_divisibility(c, fleet) == Some(CpDivisibility::TpByCp))),
        fix: Fix::Manual {
            hint: "set --attn-cp-size in extraArgs to a divisor of tensorParallel (CP ranks split the TP group)",
        },
    },
    Rule {
        id: "CP8",
        about: "attention DP × attention CP must divide TP",
        field: ATTENTION_CP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("tp_size must be divisible by dp_size * attn_cp_size"),
            text_from(22, "tp_size must be divisible by attn_dp_size * attn_cp_size"),
        ],
        changes: &[],
        check: |c| {
            when(fleets_in_scope(c).any(|fleet| cp_divisibility(c, fleet) == Some(CpDivisibility::TpByDpTimesCp)))
        },
        fix: Fix::Manual {
            hint: "set tensorParallel to a multiple of the DP size (dataParallel; from SGLang 0.5.22 only with DP \
                   attention) times --attn-cp-size",
        },
    },
    Rule {
        id: "SD17",
        about: "DP speculative prefill coordination without single-layer EAGLE",
        field: "spec.decode.env[SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text_from(21, "DP spec/prefill coordination requires single-layer EAGLE or EAGLE3"),
            text_from(22, "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK"),
        ],
        changes: &[text_from(22, "DSPARK allowed")],
        // The speculative hook checks the algorithm as it resolved it (NEXTN is EAGLE), on every
        // server whose env turns the coordination on, speculating or not.
        check: |c| {
            let algorithm = resolved_speculative_algorithm(c);
            let allowed = matches!(algorithm.as_deref(), Some("EAGLE" | "EAGLE3"))
                || (c.release >= v0_5(22) && algorithm.as_deref() == Some("DSPARK"));
            when(fleets_in_scope(c).any(|fleet| {
                fleet.env_on(DP_SPEC_PREFILL_COORDINATION) && (!allowed || multi_layer_eagle(c, &fleet.extra_args))
            }))
        },
        fix: Fix::Manual {
            hint: "unset SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION (or set it to 0), or speculate with single-layer \
                   EAGLE or EAGLE3 (DSPARK too from SGLang 0.5.22)",
        },
    },
    Rule {
        id: "LO1",
        about: "a language-model-only server under PD",
        field: LANGUAGE_MODEL_ONLY_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--language-model-only is incompatible with --disaggregation-mode prefill/decode")],
        changes: &[text_from(22, "DeepSeek-V4.1 allowed")],
        // Every server in scope is a PD server (the guard applies it to prefill servers through
        // ON_EVERY_PD_SERVER). From 0.5.22 DeepSeek-V4.1's text-only workers use the PD path.
        check: |c| {
            let exempt = c.release >= v0_5(22) && c.layout.model_type.as_deref() == Some("deepseek_v41");
            when(!exempt && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, LANGUAGE_MODEL_ONLY)))
        },
        fix: Fix::Manual { hint: "drop --language-model-only from extraArgs (it serves without PD disaggregation)" },
    },
    Rule {
        id: "LO2",
        about: "a language-model-only server of an architecture without it",
        field: LANGUAGE_MODEL_ONLY_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--language-model-only does not support {architectures}. Supported: {supported}.")],
        changes: &[],
        check: |c| {
            let supported: Vec<&str> = LANGUAGE_MODEL_ONLY_ARCHITECTURES
                .iter()
                .filter(|(_, since)| *since <= c.release)
                .map(|(architecture, _)| *architecture)
                .collect();
            when_with(
                !supported.contains(&c.layout.architecture.as_str())
                    && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, LANGUAGE_MODEL_ONLY)),
                vec![
                    ("architectures", python_list(&[c.layout.architecture.as_str()])),
                    ("supported", python_list(&supported)),
                ],
            )
        },
        fix: Fix::Manual {
            hint: "drop --language-model-only from extraArgs: the release serves only the architectures it lists \
                   that way",
        },
    },
    Rule {
        id: "LH2",
        about: "TP LM-head all-to-all without DP attention",
        field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("Please enable dp attention when setting enable_tp_lm_head_all_to_all."),
            text_from(22, "--enable-tp-lm-head-all-to-all requires attention DP (--attn-dp-size)."),
        ],
        changes: &[],
        check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::NoAttentionDp)),
        fix: Fix::Manual {
            hint: "drop --enable-tp-lm-head-all-to-all from extraArgs, or run DP attention (dataParallel above 1 with enableDpAttention)",
        },
    },
    Rule {
        id: "LH3",
        about: "TP LM-head all-to-all × DP LM head",
        field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-tp-lm-head-all-to-all uses a TP-sharded LM head and is incompatible with --enable-dp-lm-head.",
        )],
        changes: &[],
        check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::WithDpLmHead)),
        fix: Fix::Manual { hint: "drop --enable-tp-lm-head-all-to-all or --enable-dp-lm-head from extraArgs" },
    },
    Rule {
        id: "LH4",
        about: "TP LM-head all-to-all needs TP equal to attention DP",
        field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "--enable-tp-lm-head-all-to-all currently requires tp_size == dp_size, got tp_size={tp}, dp_size={dp}.",
            ),
            text_from(
                22,
                "--enable-tp-lm-head-all-to-all currently requires tp_size == attn_dp_size, got tp_size={tp}, attn_dp_size={dp}.",
            ),
        ],
        changes: &[],
        check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::TpNotDp { .. })),
        fix: Fix::Manual {
            hint: "set dataParallel (with enableDpAttention) equal to tensorParallel, or drop --enable-tp-lm-head-all-to-all from extraArgs",
        },
    },
    Rule {
        id: "LH5",
        about: "TP LM-head all-to-all × attention CP",
        field: TP_LM_HEAD_ALL_TO_ALL_FIELD,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-tp-lm-head-all-to-all currently requires attn_cp_size == 1, got {cp}.")],
        changes: &[],
        check: |c| tp_lm_head_all_to_all_refused(c, |refusal| matches!(refusal, TpLmHeadAllToAll::AttentionCp { .. })),
        fix: Fix::Manual { hint: "drop --attn-cp-size or --enable-tp-lm-head-all-to-all from extraArgs" },
    },
    Rule {
        id: "EN1",
        about: "an encoder-only server under PD",
        field: ENCODER_ONLY_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Cannot set --encoder-only and --disaggregation-mode prefill/decode together")],
        changes: &[],
        // Every server in scope is a PD server: the guard applies this rule to prefill servers
        // (ON_EVERY_PD_SERVER) but not to servers without PD.
        check: |c| when(fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, ENCODER_ONLY))),
        fix: Fix::Manual {
            hint: "drop --encoder-only from extraArgs: an encoder-only server runs outside PD disaggregation (its own \
                   fleet, without --disaggregation-mode)",
        },
    },
    Rule {
        id: "DC1",
        about: "decode CP × prefill CP",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--dcp-size > 1 does not support --enable-prefill-cp.")],
        changes: &[],
        // decodeContextParallel runs on the decode servers (the guard's server: its own --dcp-size).
        check: |c| when(dcp(c) && given(&c.decode.extra_args, PREFILL_CP)),
        fix: Fix::Manual {
            hint: "drop --enable-prefill-cp from the extraArgs of servers with decodeContextParallel above 1 (prefill CP \
                   belongs on prefill servers)",
        },
    },
    Rule {
        id: "LH1",
        about: "DP LM head on data-parallel replicas",
        field: DP_LM_HEAD_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("Please enable dp attention when setting enable_dp_lm_head. "),
            text_from(22, "--enable-dp-lm-head requires attention DP (--attn-dp-size)."),
        ],
        changes: &[],
        // With one DP rank SGLang drops the DP LM head first (`_data_parallelism_defaults`), so
        // only data-parallel replicas without DP attention reach the check.
        check: |c| {
            when(fleets_in_scope(c).any(|fleet| {
                given(&fleet.extra_args, DP_LM_HEAD) && fleet.data_parallel > 1 && !fleet.enable_dp_attention
            }))
        },
        fix: Fix::Manual {
            hint: "drop --enable-dp-lm-head from extraArgs, or run DP attention (dataParallel above 1 with \
                   enableDpAttention)",
        },
    },
    Rule {
        id: "WD1",
        about: "DWDP size must equal TP",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("dwdp_size ({dwdp}) must equal tp_size ({tp})")],
        changes: &[],
        check: |c| {
            let (fleet, size) = dwdp_fleets(c).find(|(fleet, size)| *size != i64::from(fleet.tensor_parallel))?;
            when_with(true, vec![("dwdp", size.to_string()), ("tp", fleet.tensor_parallel.to_string())])
        },
        fix: Fix::Manual {
            hint: "set --dwdp-size in extraArgs to the fleet's tensorParallel (DWDP spreads the expert weights over \
                   every TP rank), or drop it",
        },
    },
    Rule {
        id: "WD2",
        about: "DWDP on a PD decode server",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DWDP requires --disaggregation-mode null or prefill")],
        changes: &[],
        // The decode servers only (a service's prefill servers may run it; the guard's server is a
        // PD decode server here, and no role list keeps this rule for other servers).
        check: |c| when(c.scope != Scope::OtherServer && dwdp_size(c.decode).is_some()),
        fix: Fix::Manual {
            hint: "drop --dwdp-size from the decode fleet's extraArgs: DWDP runs on PD prefill servers (spec.prefill)",
        },
    },
    Rule {
        id: "WD3",
        about: "DWDP × EPLB",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("EPLB dynamic migration conflicts with static DWDP partitioning")],
        changes: &[],
        check: |c| when(dwdp_fleets(c).any(|(fleet, _)| given(&fleet.extra_args, "--enable-eplb"))),
        fix: Fix::Manual { hint: "drop --enable-eplb or --dwdp-size from extraArgs" },
    },
    Rule {
        id: "WD4",
        about: "DWDP × speculative decoding",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DWDP does not support speculative decoding (MTP/draft workers)")],
        changes: &[],
        // Every server in scope runs the speculative settings; the handler reads the algorithm as
        // given, before the speculative hook resolves it.
        check: |c| when(speculative_algorithm(c).is_some() && dwdp_fleets(c).next().is_some()),
        fix: Fix::Manual {
            hint: "drop --dwdp-size from extraArgs, or turn speculative decoding off \
                   (spec.disaggregation.speculativeAlgorithm)",
        },
    },
    Rule {
        id: "WD5",
        about: "DWDP × pipeline stages",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DWDP requires pp_size == 1")],
        changes: &[],
        check: |c| when(dwdp_fleets(c).any(|(fleet, _)| fleet.pipeline_parallel > 1)),
        fix: Fix::Manual { hint: "set pipelineParallel to 1 on the fleet that runs --dwdp-size, or drop it" },
    },
    Rule {
        id: "WD6",
        about: "DWDP × two-batch overlap",
        field: DWDP_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DWDP's prefetch event protocol does not support two-batch overlap")],
        changes: &[],
        check: |c| when(dwdp_fleets(c).any(|(fleet, _)| given(&fleet.extra_args, TWO_BATCH_OVERLAP))),
        fix: Fix::Manual { hint: "drop --enable-two-batch-overlap or --dwdp-size from extraArgs" },
    },
    Rule {
        id: "RS1",
        about: "the response store on a PD server",
        field: "spec.decode.extraArgs[--enable-response-store]",
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-response-store is not supported with --disaggregation-mode=prefill or decode; response storage \
             must remain disabled in PD mode.",
        )],
        changes: &[],
        check: |c| when(fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, "--enable-response-store"))),
        fix: Fix::Manual {
            hint: "drop --enable-response-store from extraArgs: SGLang stores responses only on servers without PD",
        },
    },
    Rule {
        id: "KS1",
        about: "KV cache sharding off a PD prefill server",
        field: "spec.decode.extraArgs[--enable-kv-cache-sharding]",
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool holds only its stripe \
             of every cached page, which is incompatible with local decode.",
        )],
        changes: &[],
        // The decode servers, and (WITHOUT_PD) a server without PD the guard reads; a service's
        // prefill servers may shard.
        check: |c| when(given(&c.decode.extra_args, "--enable-kv-cache-sharding")),
        fix: Fix::Manual {
            hint: "drop --enable-kv-cache-sharding from the decode fleet's extraArgs: it shards the KV cache of PD \
                   prefill servers (spec.prefill)",
        },
    },
    Rule {
        id: "WM1",
        about: "the watermark on a PD server",
        field: WATERMARK_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-watermark is not supported with PD disaggregation")],
        changes: &[],
        check: |c| when(watermark_fleets(c).next().is_some()),
        fix: Fix::Manual {
            hint: "drop --enable-watermark from extraArgs: SGLang watermarks only on servers without PD",
        },
    },
    Rule {
        id: "WM2",
        about: "the watermark × a speculative algorithm it does not sample",
        field: WATERMARK_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-watermark supports speculative algorithms NGRAM, EAGLE, and EAGLE3, got '{algorithm}'",
        )],
        changes: &[],
        // Checked last (check_server_args), on the algorithm the speculative hook resolved.
        check: |c| {
            let algorithm =
                resolved_speculative_algorithm(c).filter(|a| !matches!(a.as_str(), "NGRAM" | "EAGLE" | "EAGLE3"))?;
            when_with(watermark_fleets(c).next().is_some(), vec![("algorithm", algorithm)])
        },
        fix: Fix::Manual { hint: "drop --enable-watermark from extraArgs, or speculate with NGRAM, EAGLE or EAGLE3" },
    },
    Rule {
        id: "WM3",
        about: "the watermark × pipeline stages that speculate",
        field: WATERMARK_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-watermark is not supported with pipeline-parallel speculative decoding")],
        changes: &[],
        check: |c| {
            when(speculative_algorithm(c).is_some() && watermark_fleets(c).any(|fleet| fleet.pipeline_parallel > 1))
        },
        fix: Fix::Manual {
            hint: "drop --enable-watermark from extraArgs, set pipelineParallel to 1, or turn speculative decoding off",
        },
    },
    Rule {
        id: "WM4",
        about: "the watermark on SGLang's Rust server",
        field: WATERMARK_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-watermark is not supported with SGLANG_RUST_SERVER")],
        changes: &[],
        check: |c| when(watermark_fleets(c).any(|fleet| fleet.env_on(RUST_SERVER_ENV))),
        fix: Fix::Manual { hint: "drop --enable-watermark from extraArgs, or SGLANG_RUST_SERVER from the fleet's env" },
    },
    Rule {
        id: "PC1",
        about: "prefill_complete allocation on a PD server that does not support it",
        field: ALLOCATION_POLICY_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(PREFILL_COMPLETE_UNSUPPORTED)],
        changes: &[],
        check: |c| prefill_complete_refused(c, ServerRole::Prefill),
        fix: Fix::Manual {
            hint: "drop --disaggregation-decode-allocation-policy prefill_complete from extraArgs, or change what the \
                   message lists (it runs on TP 1 Mooncake servers without CP, PP, HiSparse, host receive, decode \
                   radix cache or HiCache)",
        },
    },
    Rule {
        id: "PC2",
        about: "prefill_complete allocation on a server without PD",
        field: ALLOCATION_POLICY_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(PREFILL_COMPLETE_UNSUPPORTED)],
        changes: &[],
        // The guard's server without PD only (WITHOUT_PD); PC1 covers PD servers.
        check: |c| prefill_complete_refused(c, ServerRole::WithoutPd).filter(|_| c.scope == Scope::OtherServer),
        fix: Fix::Manual {
            hint: "drop --disaggregation-decode-allocation-policy from a server without PD disaggregation",
        },
    },
    Rule {
        id: "PC3",
        about: "prefill_complete allocation without optimistic prefill",
        field: ALLOCATION_POLICY_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "prefill_complete requires optimistic prefill, but the resolved model/cache configuration disabled it.",
        )],
        changes: &[],
        // On a prefill server that passes PC1 the PD hook turns 0 attempts (the default) into 1 and
        // nothing later turns them off, so only negative attempts as given stay.
        check: |c| {
            when(prefill_complete_servers(c, ServerRole::Prefill).iter().any(|server| {
                server.role == ServerRole::Prefill
                    && number_option(&server.fleet.extra_args, &["--optimistic-prefill-attempts"])
                        .is_some_and(|attempts| attempts < 0)
            }))
        },
        fix: Fix::Manual {
            hint: "set --optimistic-prefill-attempts to 0 (the default) or more on the prefill servers, or drop \
                   --disaggregation-decode-allocation-policy prefill_complete",
        },
    },
    Rule {
        id: "DF1",
        about: "an all-to-all DCP backend without DCP",
        field: "spec.decode.extraArgs[--dcp-comm-backend]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--dcp-comm-backend {backend} only affects the decode context-parallel attention reduction and therefore \
             requires --dcp-size / --decode-context-parallel-size > 1, but got dcp_size={dcp}.",
        )],
        changes: &[],
        check: |c| {
            let (backend, dcp) = pd_servers(c).find_map(|(fleet, _, dcp)| {
                let backend = option_value(&fleet.extra_args, DCP_COMM_BACKEND)?;
                (matches!(backend, "a2a" | "fi_a2a") && dcp <= 1).then_some((backend, dcp))
            })?;
            when_with(true, vec![("backend", backend.to_string()), ("dcp", dcp.to_string())])
        },
        fix: Fix::Manual {
            hint: "drop --dcp-comm-backend from extraArgs, or set decodeContextParallel above 1 on the servers that \
                   give it",
        },
    },
    Rule {
        id: "DF2",
        about: "a replicated DCP Q projection without DCP",
        field: "spec.decode.extraArgs[--dcp-replicate-q-proj]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--dcp-replicate-q-proj requires --dcp-size > 1.")],
        changes: &[],
        check: |c| {
            when(pd_servers(c).any(|(fleet, _, dcp)| given(&fleet.extra_args, DCP_REPLICATE_Q_PROJ) && dcp <= 1))
        },
        fix: Fix::Manual {
            hint: "drop --dcp-replicate-q-proj from extraArgs, or set decodeContextParallel above 1 on the servers \
                   that give it",
        },
    },
    Rule {
        id: "DF3",
        about: "a replicated DCP Q projection without an all-to-all DCP backend",
        field: "spec.decode.extraArgs[--dcp-replicate-q-proj]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend (it removes the head-dim \
             Q all-gather); got --dcp-comm-backend={backend}.",
        )],
        changes: &[],
        check: |c| {
            let backend = pd_servers(c).find_map(|(fleet, _, dcp)| {
                let args = &fleet.extra_args;
                let backend = dcp_comm_backend(c, args, dcp)?;
                (given(args, DCP_REPLICATE_Q_PROJ) && dcp > 1 && !matches!(backend, "a2a" | "fi_a2a"))
                    .then_some(backend)
            })?;
            when_with(true, vec![("backend", backend.to_string())])
        },
        fix: Fix::Manual {
            hint: "give --dcp-comm-backend a2a (or fi_a2a) next to --dcp-replicate-q-proj, or drop the latter",
        },
    },
    Rule {
        id: "RP1",
        about: "priority retraction without priority scheduling",
        field: "spec.decode.extraArgs[--retraction-policy]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--retraction-policy priority requires --enable-priority-scheduling")],
        changes: &[],
        check: |c| {
            when(fleets_in_scope(c).any(|fleet| {
                option_value(&fleet.extra_args, "--retraction-policy") == Some("priority")
                    && !given(&fleet.extra_args, "--enable-priority-scheduling")
            }))
        },
        fix: Fix::Manual {
            hint: "add --enable-priority-scheduling to extraArgs next to --retraction-policy priority, or drop the \
                   latter (the default, length, retracts by output and input length)",
        },
    },
    Rule {
        id: "QC1",
        about: "quantized communications at TP 1",
        field: "spec.decode.extraArgs[--enable-quant-communications]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Communications quantization is only used with tp_size != 1")],
        changes: &[],
        check: |c| when(quant_communication_fleets(c).any(|(fleet, _)| fleet.tensor_parallel == 1)),
        fix: Fix::Manual { hint: "drop --enable-quant-communications from extraArgs: it compresses TP collectives" },
    },
    Rule {
        id: "QC2",
        about: "quantized communications off an NPU",
        field: "spec.decode.extraArgs[--enable-quant-communications]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("Communications quantization is only supported for NPU device")],
        changes: &[],
        check: |c| when(quant_communication_fleets(c).any(|(fleet, npu)| fleet.tensor_parallel != 1 && !npu)),
        fix: Fix::Manual {
            hint: "drop --enable-quant-communications from extraArgs: SGLang implements it on Ascend NPUs only",
        },
    },
    Rule {
        id: "DB1",
        about: "a DFLASH block size that is not positive",
        field: DFLASH_BLOCK_SIZE_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("DFLASH requires --speculative-dflash-block-size to be positive, got {size}.")],
        changes: &[],
        check: |c| {
            let size = dflash_sizes(c).find_map(|(size, _, _)| size.filter(|size| *size <= 0))?;
            when_with(true, vec![("size", size.to_string())])
        },
        fix: Fix::Manual { hint: "set --speculative-dflash-block-size to a positive verify window, or drop it" },
    },
    Rule {
        id: "DB2",
        about: "DFLASH draft tokens other than its block size",
        field: DFLASH_BLOCK_SIZE_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. For \
             DFLASH they must match. speculative_num_draft_tokens={tokens}, speculative_dflash_block_size={size}.",
        )],
        changes: &[],
        check: |c| {
            let (size, tokens) = dflash_sizes(c).find_map(|(size, tokens, _)| {
                let (size, tokens) = (size?, tokens?);
                (size > 0 && size != tokens).then_some((size, tokens))
            })?;
            when_with(true, vec![("tokens", tokens.to_string()), ("size", size.to_string())])
        },
        fix: Fix::Manual {
            hint: "give one of --speculative-num-draft-tokens and --speculative-dflash-block-size, or the same value \
                   to both",
        },
    },
    Rule {
        id: "DB3",
        about: "a DFLASH draft window narrower than its block",
        field: "spec.decode.extraArgs[--speculative-draft-window-size]",
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). \
             window_size={window}, block_size={block}.",
        )],
        changes: &[],
        // The block is the block size as given, else the draft tokens as given; SGLang reads one
        // from the draft's config.json otherwise (or takes 16), which kvpilot leaves to it.
        check: |c| {
            let (window, block) = dflash_sizes(c).find_map(|(size, tokens, window)| {
                let (window, block) = (window?, size.or(tokens)?);
                (window < block).then_some((window, block))
            })?;
            when_with(true, vec![("window", window.to_string()), ("block", block.to_string())])
        },
        fix: Fix::Manual { hint: "set --speculative-draft-window-size to at least the DFLASH block size, or drop it" },
    },
    Rule {
        id: "DP3",
        about: "data-parallel replicas × attention DP",
        field: DATA_PARALLEL_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--dp-size {replicas} with --attn-dp-size {groups}: data-parallel replicas combined with attention data \
             parallelism are not supported.",
        )],
        changes: &[],
        check: |c| {
            let (replicas, groups) = fleets_in_scope(c).find_map(replicas_and_attention_dp)?;
            when_with(true, vec![("replicas", replicas.to_string()), ("groups", groups.to_string())])
        },
        fix: Fix::Manual {
            hint: "give either --dp-size (data-parallel replicas) or --attn-dp-size (attention DP groups), not both",
        },
    },
    Rule {
        id: "DP1",
        about: "attention DP must divide TP",
        field: DATA_PARALLEL_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("AssertionError (assert self.tp_size % self.dp_size == 0)"),
            text_from(19, "AssertionError (assert cfg.tp_size % cfg.dp_size == 0)"),
            text_from(22, "AssertionError (assert cfg.tp_size % cfg.attn_dp_size == 0)"),
        ],
        changes: &[],
        check: |c| {
            when(fleets_in_scope(c).any(|fleet| {
                fleet.enable_dp_attention && fleet.data_parallel > 1 && fleet.tensor_parallel % fleet.data_parallel != 0
            }))
        },
        fix: Fix::Manual {
            hint: "set dataParallel to a divisor of tensorParallel: DP attention splits the TP ranks into that many equal \
                   groups (SGLang's bare assert names no field)",
        },
    },
    Rule {
        id: "DP4",
        about: "TP × PP over the nodes",
        field: NODES_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("tp_size must be divisible by number of nodes")],
        changes: &[],
        // A service's fleets are checked as pods (K2) before SGLang sees them.
        check: |c| when(c.scope != Scope::Service && fleets_in_scope(c).any(nodes_split_tp_unevenly)),
        fix: Fix::Manual { hint: "run the server on a number of nodes (--nnodes) that divides --tp-size × --pp-size" },
    },
    Rule {
        id: "DP2",
        about: "data-parallel replicas across nodes",
        field: DATA_PARALLEL_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("multi-node data parallel is not supported unless dp attention!"),
            text_from(
                22,
                "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes",
            ),
        ],
        changes: &[],
        check: |c| {
            when(
                fleets_in_scope(c)
                    .any(|fleet| fleet.data_parallel > 1 && !fleet.enable_dp_attention && nodes_per_server(fleet) != 1),
            )
        },
        fix: Fix::Manual {
            hint: "run data-parallel replicas on one node (nodesPerReplica 1, or more replicas instead), or turn on \
                   enableDpAttention to spread attention DP across the nodes",
        },
    },
    Rule {
        id: "H1",
        about: "buffer-only host memory needs the unified tree",
        field: HOST_MEMORY_MODE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--hicache-host-memory-mode buffer_only is only implemented for the unified radix tree; this model \
             selected {cache}.",
        )],
        changes: &[],
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
    },
    Rule {
        id: "H2",
        about: "session radix cache needs the unified tree",
        field: SESSION_RADIX_CACHE_FIELD,
        span: Span::always(),
        backends: &[],
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
        changes: &[],
        check: |c| tree_cache_finding(non_unified_tree_among(c, |args| given(args, SESSION_RADIX_CACHE))),
        fix: Fix::Manual {
            hint: "remove --enable-session-radix-cache from extraArgs, or run the servers with a tree cache that keeps \
                   sessions (decode radix cache on a PD decode server; SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 on 0.5.17 \
                   and 0.5.18)",
        },
    },
    Rule {
        id: "H5",
        about: "T-LRU eviction needs the unified tree",
        field: EVICTION_POLICY_FIELD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--radix-eviction-policy tlru requires UnifiedRadixCache, but tree_cache is {cache}. Drop the flag or \
             the option that selected another tree cache for this model.",
        )],
        changes: &[],
        check: |c| {
            tree_cache_finding(non_unified_tree_among(c, |args| option_value(args, EVICTION_POLICY) == Some("tlru")))
        },
        fix: Fix::Manual {
            hint: "pass another --radix-eviction-policy in extraArgs (lru is the default), or run the servers with the \
                   unified tree cache (decode radix cache on a 0.5.21 PD decode server, no --enable-flexkv; a pure-SWA \
                   model never gets it)",
        },
    },
    Rule {
        id: "H6",
        about: "streaming sessions need the unified tree",
        field: STREAMING_SESSION_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--enable-streaming-session is not verified with {cache}; streaming sessions run on UnifiedRadixCache. \
             Please open an issue or a PR at https://github.com/sgl-project/sglang if you need this.",
        )],
        changes: &[],
        check: |c| tree_cache_finding(non_unified_tree_among(c, |args| given(args, STREAMING_SESSION))),
        fix: Fix::Manual {
            hint: "remove --enable-streaming-session from extraArgs, or --enable-flexkv, which selects another tree \
                   cache (a pure-SWA model never gets the unified one)",
        },
    },
    Rule {
        id: "H7",
        about: "DeepSeek-V4 host pools are sized by ratio",
        field: HOST_POOL_SIZE_FIELD,
        span: Span::always(),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
        )],
        changes: &[],
        check: |c| when(c.layout.has(LayoutFeature::DeepseekV4) && sized_host_pool_on_unified_tree(c)),
        fix: Fix::Manual {
            hint: "drop --hicache-size (spec.cache.hostPoolSize where kvpilot renders it): DeepSeek-V4 sizes its \
                   host pools from its device pools by spec.disaggregation.hostPoolRatio",
        },
    },
    Rule {
        id: "N5",
        about: "Mamba state needs the unified tree",
        field: FLEXKV_FIELD,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "Models with mamba state are not verified with {cache}; mamba state lives in UnifiedRadixCache. Please \
             open an issue or a PR at https://github.com/sgl-project/sglang if you need this.",
        )],
        changes: &[],
        check: |c| tree_cache_finding(non_unified_tree_among(c, |_| c.layout.uses_ssm_state())),
        fix: Fix::Manual {
            hint: "remove --enable-flexkv from extraArgs: FlexKV's tree cache keeps no Mamba state, which this model has",
        },
    },
    Rule {
        id: "N6",
        about: "a HiCache draft sidecar needs the unified tree",
        field: SPECULATIVE_ALGORITHM,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("HiCache draft pools require UnifiedRadixCache.")],
        changes: &[],
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
    },
    Rule {
        id: "H3",
        about: "buffer-only host memory needs a storage backend",
        field: HOST_MEMORY_MODE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--hicache-host-memory-mode buffer_only requires a storage backend (--hicache-storage-backend): host \
             memory is only a staging buffer and all cached data lives in storage.",
        )],
        changes: &[],
        check: |c| when(buffer_only_checked(c) && c.settings.hicache_storage_backend.is_none()),
        fix: Fix::Rewrite { apply: host_memory_mode_unset, hint: BUFFER_ONLY_HINT },
    },
    Rule {
        id: "H8",
        about: "buffer-only host memory × the write-back policy",
        field: HOST_MEMORY_MODE,
        span: Span::between(v0_5(19), v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--hicache-host-memory-mode buffer_only does not support --hicache-write-policy write_back; use \
             write_through or write_through_selective.",
        )],
        changes: &[],
        check: |c| {
            let write_back = option_value(&c.decode.extra_args, "--hicache-write-policy") == Some("write_back");
            when(buffer_only_checked(c) && c.settings.hicache_storage_backend.is_some() && write_back)
        },
        fix: Fix::Manual {
            hint: "drop --hicache-write-policy write_back from extraArgs (write_through is the default), or leave \
                   hicacheHostMemoryMode unset (cache); from 0.5.22 SGLang resolves write_back to write_through \
                   under buffer_only",
        },
    },
    Rule {
        id: "H4",
        about: "buffer-only host memory on decode",
        field: HOST_MEMORY_MODE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--hicache-host-memory-mode buffer_only is not supported on decode instances: the decode-side prefetch \
             and offload paths bypass the buffer-mode pipeline, fetching without its prefix context and never \
             consuming its staged holds. Prefill instances share the standard scheduler path and are supported.",
        )],
        changes: &[],
        check: |c| when(c.scope != Scope::OtherServer && buffer_only_checked(c)),
        fix: Fix::Rewrite { apply: host_memory_mode_unset, hint: BUFFER_ONLY_HINT },
    },
    Rule {
        id: "L8",
        about: "LMCache × buffer-only host memory",
        field: LMCACHE,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--hicache-host-memory-mode=buffer_only is a HiCache-only mode")],
        changes: &[],
        check: |c| when(c.settings.lmcache && buffer_only(c)),
        fix: Fix::Rewrite { apply: lmcache_off, hint: LMCACHE_HINT },
    },
    Rule {
        id: "D1",
        about: "HiCache × DCP × storage backend",
        field: HIERARCHICAL_CACHE,
        span: Span::between(v0_5(17), v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--hicache-storage-backend (L3) with --dcp-size > 1 is not supported yet: under DCP each rank holds a \
             distinct interleaved MLA KV shard, so the rank-0-only replicated-MLA backup and the storage keys must \
             become dcp_rank-aware first. Run HiCache+DCP with L1/L2 only.",
        )],
        changes: &[],
        check: |c| when(hicache_dcp(c) && c.settings.hicache_storage_backend.is_some()),
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "D6",
        about: "HiCache × DCP × storage backend × buffer-only host memory",
        field: HIERARCHICAL_CACHE,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("HiCache L3 with DCP does not support buffer_only host memory.")],
        changes: &[],
        check: |c| when(hicache_dcp(c) && c.settings.hicache_storage_backend.is_some() && buffer_only(c)),
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "D2",
        about: "HiCache × DCP × speculative decoding",
        field: HIERARCHICAL_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "HiCache with --dcp-size > 1 does not support speculative decoding yet (the draft-model host pool has \
                 no DCP index translation).",
            ),
            text_from(
                18,
                "HiCache with --dcp-size > 1 only supports DSPARK speculative decoding; other draft-model host pools \
                 have no DCP index translation.",
            ),
        ],
        changes: &[text_from(17, "any algorithm"), text_from(18, "DSPARK allowed")],
        check: |c| {
            let algorithm = c.settings.speculative_algorithm.as_deref();
            let allowed = algorithm.is_none() || (c.release >= v0_5(18) && algorithm == Some("DSPARK"));
            when(hicache_dcp(c) && !allowed)
        },
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "D3",
        about: "HiCache × DCP × LMCache",
        field: HIERARCHICAL_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index translation.",
        )],
        changes: &[],
        check: |c| when(hicache_dcp(c) && c.settings.lmcache),
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "D4",
        about: "HiCache × DCP × HiSparse",
        field: HIERARCHICAL_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-hisparse with --dcp-size > 1 is not supported: the HiSparse host pool is constructed without \
             DCP translation.",
        )],
        changes: &[],
        check: |c| when(hicache_dcp(c) && c.settings.hisparse),
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "D5",
        about: "HiCache × DCP needs an MLA model",
        field: HIERARCHICAL_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "HiCache with --dcp-size > 1 is only supported for MLA models: the index translation lives in \
             MLATokenToKVPoolHost, and the MHA host pool has none.",
        )],
        changes: &[],
        check: |c| when(hicache_dcp(c) && c.layout.attention != AttentionKind::Mla),
        fix: Fix::Rewrite { apply: hierarchical_off, hint: HICACHE_DCP_HINT },
    },
    Rule {
        id: "LD1",
        about: "MLA deduplication needs the Mooncake linker",
        field: "spec.decode.extraArgs[--enable-linker-mla-dedup]",
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-linker-mla-dedup requires the Mooncake linker.")],
        changes: &[],
        // Before the linker's own checks (X1-X3), on every server that gives the flag: the decode
        // servers with unifiedCacheExternalLinker, a service's prefill servers with the linker in
        // their extraArgs; the linker's backend is Mooncake unless its flag names another.
        check: |c| {
            let own = (c.decode, CacheOptions::of_settings(c).linker);
            let prefill = service_prefill(c).map(|fleet| (fleet, CacheOptions::of_prefill(c, fleet).linker));
            when(std::iter::once(own).chain(prefill).any(|(fleet, linker)| {
                let args = &fleet.extra_args;
                given(args, "--enable-linker-mla-dedup")
                    && (!linker
                        || option_value(args, "--unified-cache-external-linker-backend").unwrap_or("mooncake")
                            != "mooncake")
            }))
        },
        fix: Fix::Manual {
            hint: "drop --enable-linker-mla-dedup from extraArgs, or run the external cache linker \
                   (unifiedCacheExternalLinker) on its Mooncake backend",
        },
    },
    Rule {
        id: "X1",
        about: "external cache linker needs the radix cache",
        field: LINKER,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-cache-external-linker requires the default UnifiedRadixCache with radix caching enabled.",
        )],
        changes: &[],
        check: |c| when(c.settings.unified_cache_external_linker && !own_radix_cache(c)),
        fix: Fix::Rewrite {
            apply: linker_off,
            hint: "turn decodeRadixCache on (the linker sits under the radix cache; on a server that is not a PD \
                   decode server, drop --disable-radix-cache), or turn unifiedCacheExternalLinker off",
        },
    },
    Rule {
        id: "X2",
        about: "external cache linker × HiCache",
        field: LINKER,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-cache-external-linker and --enable-hierarchical-cache are mutually exclusive.",
        )],
        changes: &[],
        check: |c| when(c.settings.unified_cache_external_linker && c.settings.hierarchical_cache),
        fix: Fix::Rewrite { apply: linker_off, hint: "use one of unifiedCacheExternalLinker and hierarchicalCache" },
    },
    Rule {
        id: "X3",
        about: "external cache linker × storage backend",
        field: LINKER,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-unified-cache-external-linker does not use --hicache-storage-backend.")],
        changes: &[],
        check: |c| when(c.settings.unified_cache_external_linker && c.settings.hicache_storage_backend.is_some()),
        fix: Fix::Rewrite {
            apply: linker_off,
            hint: "use one of unifiedCacheExternalLinker and hicacheStorageBackend (spec.cache sets the storage \
                   backend)",
        },
    },
    Rule {
        id: "X4",
        about: "external cache linker × sidecar draft",
        field: LINKER,
        span: Span::between(v0_5(20), v0_5(22)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("The external linker only supports packed draft KV caches.")],
        changes: &[],
        check: |c| {
            linker_with_sidecar_draft(c).then(|| Finding { args: Vec::new(), detail: Some(sidecar_draft_reason(c)) })
        },
        fix: Fix::Manual {
            hint: "turn unifiedCacheExternalLinker off (on prefill servers: drop --enable-unified-cache-external-linker \
                   from their extraArgs), or use a draft that packs into the target's pools (EAGLE with the model's \
                   NextN layers); SGLang 0.5.23 takes one draft KV pool outside the target's",
        },
    },
    Rule {
        id: "X5",
        about: "external cache linker × multi-layer sidecar draft",
        field: LINKER,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("The external linker supports one non-packed draft KV pool.")],
        changes: &[],
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
    },
    Rule {
        id: "U6a",
        about: "unified memory host_pool × decode radix",
        field: RETRACTION_BACKUP,
        span: Span::between(v0_5(21), v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory host-pool decode retraction does not support decode radix-cache H2D/D2H \
             transfers yet.",
        )],
        changes: &[],
        check: |c| when(host_pool(c) && unified_memory(c) && radix(c)),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor, or turn decodeRadixCache off" },
    },
    Rule {
        id: "U6b",
        about: "unified memory host_pool × hybrid Mamba",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-unified-memory host-pool decode retraction does not support hybrid-Mamba models.")],
        changes: &[],
        check: |c| when(host_pool(c) && unified_memory(c) && c.layout.uses_ssm_state()),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "U6c",
        about: "unified memory host_pool × hybrid SWA",
        field: RETRACTION_BACKUP,
        span: Span::between(v0_5(21), v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory host-pool decode retraction does not support hybrid-SWA H2D/D2H transfers yet.",
        )],
        changes: &[],
        check: |c| when(host_pool(c) && unified_memory(c) && c.layout.is_hybrid_swa()),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "U7",
        about: "unified memory decode offload × MLA",
        field: DECODE_OFFLOAD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-unified-memory decode KV offload does not support MLA models yet.")],
        changes: &[],
        check: |c| when(unified_offload(c) && c.layout.attention == AttentionKind::Mla),
        fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    },
    Rule {
        id: "U7",
        about: "unified memory decode offload × hybrid Mamba",
        field: DECODE_OFFLOAD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--enable-unified-memory decode KV offload does not support hybrid-Mamba models.")],
        changes: &[],
        check: |c| when(unified_offload(c) && c.layout.uses_ssm_state()),
        fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    },
    Rule {
        id: "U7",
        about: "unified memory decode offload × hybrid SWA",
        field: DECODE_OFFLOAD,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory decode KV offload does not support hybrid-SWA H2D/D2H transfers yet.",
        )],
        changes: &[],
        check: |c| when(unified_offload(c) && c.layout.is_hybrid_swa()),
        fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache or enableUnifiedMemory off" },
    },
    Rule {
        id: "R1",
        about: "host_pool × Mamba",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("Host-pool retraction does not support Mamba models.")],
        changes: &[],
        check: |c| when(host_pool(c) && c.layout.uses_ssm_state()),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R2",
        about: "host_pool × pure SWA",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("Host-pool retraction does not support pure-SWA models.")],
        changes: &[],
        check: |c| {
            if !host_pool(c) || radix(c) {
                return None;
            }
            if c.layout.kv_pool == KvPool::PureSwa {
                return Finding::new();
            }
            stage_without_full_layer(c.layout, c.decode.pipeline_parallel).map(|(stage, start, end)| Finding {
                args: Vec::new(),
                detail: Some(format!(
                    "pipeline stage {stage} (layers {start}..{end}) of pipelineParallel={} holds no full-attention layer, so \
                     that rank is pure SWA",
                    c.decode.pipeline_parallel
                )),
            })
        },
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R8",
        about: "host_pool needs UnifiedRadixCache",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
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
    },
    Rule {
        id: "R9",
        about: "host_pool needs an MHA or hybrid-SWA host stack",
        field: RETRACTION_BACKUP,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--disaggregation-decode-retraction-backup=host_pool requires an MHA or hybrid-SWA HiCache host stack.",
        )],
        changes: &[],
        check: |c| when(host_pool(c) && !c.layout.uses_ssm_state() && mla_like(c.layout)),
        fix: Fix::Rewrite { apply: to_cpu_tensor, hint: "use cpu_tensor or leave retractionBackup unset" },
    },
    Rule {
        id: "R13",
        about: "decode radix × SWA",
        field: DECODE_RADIX_CACHE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[
            text(
                "--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention (SWA) models",
            ),
            text_from(
                19,
                "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models requires the \
                 unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1).",
            ),
        ],
        changes: &[
            text_from(17, "every hybrid-SWA model"),
            text_from(
                19,
                "unless SGLANG_ENABLE_UNIFIED_RADIX_TREE is set; kvpilot sets it unless spec.decode.env sets it false",
            ),
        ],
        check: |c| {
            // 0.5.17–0.5.18 refuse every SWA model; 0.5.19–0.5.20 want the env var, which kvpilot
            // adds to the decode pods unless the spec sets it to something false.
            let blanket = c.release < v0_5(19);
            when(radix(c) && c.layout.is_hybrid_swa() && (blanket || env_set_falsy(c.decode, UNIFIED_RADIX_TREE_ENV)))
        },
        fix: Fix::Rewrite {
            apply: radix_off,
            hint: "turn decodeRadixCache off (SGLang 0.5.19–0.5.20: or drop the false SGLANG_ENABLE_UNIFIED_RADIX_TREE \
                   from spec.decode.env; 0.5.21 and later allow it)",
        },
    },
    Rule {
        id: "R14",
        about: "decode radix × SWA × HiCache",
        field: DECODE_RADIX_CACHE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--disaggregation-decode-enable-radix-cache with sliding window attention (SWA) models currently supports \
             only device-resident cache and is incompatible with --enable-hierarchical-cache.",
        )],
        changes: &[],
        check: |c| when(radix(c) && c.layout.is_hybrid_swa() && c.settings.hierarchical_cache),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache or hierarchicalCache off" },
    },
    Rule {
        id: "R15",
        about: "decode radix × DeepSeek-V4",
        field: DECODE_RADIX_CACHE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[
            text(
                "--disaggregation-decode-enable-radix-cache does not support DeepSeek-V4 (DSA) compressed KV \
                 (c4/c128/indexer) yet.",
            ),
            text_from(
                23,
                "--disaggregation-decode-enable-radix-cache with DeepSeek-V4 requires the unified KV layout \
                 (SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton).",
            ),
        ],
        changes: &[text_from(23, "allowed with SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton")],
        check: |c| {
            let unified_kv = c.release >= v0_5(23)
                && c.decode.env_value("SGLANG_HACK_FLASHMLA_BACKEND").is_some_and(|v| v.trim() == "unified_kv_triton");
            when(radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::DeepseekV4) && !unified_kv)
        },
        fix: Fix::Rewrite {
            apply: radix_off,
            hint: "turn decodeRadixCache off (SGLang 0.5.23 and later: or set \
                   SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton in spec.decode.env)",
        },
    },
    Rule {
        id: "R16",
        about: "decode radix × SWA-compress",
        field: DECODE_RADIX_CACHE,
        span: Span::since(v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--disaggregation-decode-enable-radix-cache does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) \
             yet.",
        )],
        changes: &[],
        check: |c| when(radix(c) && c.layout.is_hybrid_swa() && c.layout.has(LayoutFeature::SwaCompress)),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off" },
    },
    Rule {
        id: "R17",
        about: "decode radix × SSM",
        field: DECODE_RADIX_CACHE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("--disaggregation-decode-enable-radix-cache is incompatible with Mamba/SSM models")],
        changes: &[],
        check: |c| when(radix(c) && c.layout.uses_ssm_state()),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off (SGLang 0.5.21 and later allow it)" },
    },
    Rule {
        id: "R18a",
        about: "decode radix × HiSparse",
        field: DECODE_RADIX_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse")],
        changes: &[],
        check: |c| when(radix(c) && c.settings.hisparse),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or turn hisparse off" },
    },
    Rule {
        id: "R18b",
        about: "decode radix × fake backend",
        field: DECODE_RADIX_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake",
        )],
        changes: &[],
        check: |c| when(radix(c) && c.settings.transfer_backend == TransferBackend::Fake),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or use a real transfer backend" },
    },
    Rule {
        id: "R18c",
        about: "decode radix × speculative decoding",
        field: DECODE_RADIX_CACHE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--disaggregation-decode-enable-radix-cache is incompatible with speculative decoding \
             (--speculative-algorithm {algorithm})",
        )],
        changes: &[
            text_from(17, "any algorithm"),
            text_from(21, "DSPARK allowed"),
            text_from(23, "DSPARK, EAGLE, EAGLE3 and NEXTN allowed"),
        ],
        check: |c| {
            let given = c.settings.speculative_algorithm.as_deref().filter(|_| radix(c))?;
            // Up to 0.5.22 the PD hook checks the name as given, before the speculative hook
            // upper-cases it; 0.5.23's speculative hook checks the resolved name (NEXTN is EAGLE).
            // Algorithms that keep decode radix cache: DSPARK from 0.5.21, EAGLE/EAGLE3 from 0.5.23.
            let (algorithm, allowed): (String, &[&str]) = if c.release >= v0_5(23) {
                (resolved_speculative_algorithm(c)?, &["DSPARK", "EAGLE", "EAGLE3"])
            } else if c.release >= v0_5(21) {
                (given.to_string(), &["DSPARK"])
            } else {
                (given.to_string(), &[])
            };
            when_with(!allowed.contains(&algorithm.as_str()), vec![("algorithm", algorithm)])
        },
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or drop speculativeAlgorithm" },
    },
    Rule {
        id: "R19",
        about: "decode DCP transfer backend",
        field: TRANSFER_BACKEND,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got '{backend}'."),
            text_from(
                19,
                "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, or fake for synthetic \
                 benchmarking, got '{backend}'.",
            ),
            text_from(
                22,
                "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, mori, ascend, or fake for \
                 synthetic benchmarking, got '{backend}'.",
            ),
        ],
        changes: &[
            text_from(17, "mooncake, nixl"),
            text_from(19, "mooncake, nixl, fake"),
            text_from(22, "mooncake, nixl, mori, ascend, fake"),
        ],
        check: |c| {
            let backend = c.settings.transfer_backend;
            let allowed = match backend {
                TransferBackend::Mooncake | TransferBackend::Nixl => true,
                TransferBackend::Fake => c.release >= v0_5(19),
                TransferBackend::Mori => c.release >= v0_5(22),
            };
            when_with(dcp(c) && !allowed, vec![("backend", backend.as_str().into())])
        },
        fix: Fix::Manual {
            hint: "set transferBackend to mooncake or nixl (SGLang 0.5.22 and later: or mori), or \
                   decodeContextParallel to 1",
        },
    },
    Rule {
        id: "R19",
        about: "decode DCP × decode radix",
        field: DECODE_RADIX_CACHE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported.",
        )],
        changes: &[],
        check: |c| when(dcp(c) && radix(c)),
        fix: Fix::Rewrite { apply: radix_off, hint: "turn decodeRadixCache off, or set decodeContextParallel to 1" },
    },
    Rule {
        id: "R19",
        about: "decode DCP × HiCache",
        field: HIERARCHICAL_CACHE,
        span: Span::between(v0_5(17), v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.",
        )],
        changes: &[],
        check: |c| when(dcp(c) && c.settings.hierarchical_cache),
        fix: Fix::Rewrite {
            apply: hierarchical_off,
            hint: "turn hierarchicalCache off, or set decodeContextParallel to 1",
        },
    },
    Rule {
        id: "R19d",
        about: "decode DCP needs an MLA pool",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::always(),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text("PD decode DCP requires an MLA or hybrid-MLA KV pool.")],
        changes: &[],
        check: |c| when(dcp(c) && !mla_like(c.layout)),
        fix: Fix::Manual { hint: "set decodeContextParallel to 1: decode context parallelism needs an MLA model" },
    },
    Rule {
        id: "R19e",
        about: "decode DCP × prefill attention CP",
        field: PREFILL_CONTEXT_PARALLEL,
        span: Span::always(),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text("PD decode DCP currently requires prefill attention CP=1, got {cp}.")],
        changes: &[],
        check: |c| {
            let cp = c.settings.prefill.as_ref()?.attention_context_parallel;
            when_with(dcp(c) && cp != 1, vec![("cp", cp.to_string())])
        },
        fix: Fix::Manual {
            hint: "run the prefill servers without attention context parallelism (no --attn-cp-size, no prefill CP \
                   mode), or set spec.disaggregation.decodeContextParallel to 1",
        },
    },
    Rule {
        id: "R19f",
        about: "decode DCP × prefill KV cache sharding",
        field: PREFILL_KV_SHARDING,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text("PD decode DCP does not support a prefill with --enable-kv-cache-sharding.")],
        changes: &[],
        check: |c| when(dcp(c) && c.settings.prefill.as_ref()?.kv_cache_sharding),
        fix: Fix::Manual {
            hint: "run the prefill servers without --enable-kv-cache-sharding, or set \
                   spec.disaggregation.decodeContextParallel to 1",
        },
    },
    Rule {
        id: "R20",
        about: "staging buffer backend",
        field: DECODE_ENV,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got \
             '{backend}'.",
        )],
        changes: &[],
        check: |c| {
            when_with(
                c.decode.env_on("SGLANG_DISAGG_STAGING_BUFFER") && !mooncake_or_nixl(c),
                vec![("backend", c.settings.transfer_backend.as_str().into())],
            )
        },
        fix: Fix::Manual {
            hint: "remove SGLANG_DISAGG_STAGING_BUFFER from spec.decode.env, or set transferBackend to mooncake or nixl",
        },
    },
    Rule {
        id: "O1",
        about: "decode offload needs an MHA or MLA pool",
        field: DECODE_OFFLOAD,
        span: Span::always(),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text("Unsupported KV cache type for decode offload")],
        changes: &[text_from(21, "the unified-memory hybrid-SWA pool is accepted")],
        check: |c| {
            let pool_supported = match c.layout.kv_pool {
                KvPool::Full | KvPool::Mla => true,
                // 0.5.21 accepts the unified-memory hybrid-SWA pool (UnifiedSWAKVPool).
                KvPool::HybridSwa | KvPool::PureSwa => {
                    c.release >= v0_5(21) && unified_memory(c) && !c.layout.has(LayoutFeature::DeepseekV4)
                }
                KvPool::HybridSsm => false,
            };
            when(c.settings.decode_offload_kv_cache && !pool_supported)
        },
        fix: Fix::Rewrite { apply: offload_off, hint: "turn decodeOffloadKvCache off" },
    },
    Rule {
        id: "P1",
        about: "prefill and decode page size",
        field: DECODE_PAGE_SIZE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text(
            "Page size mismatch: prefill server has page_size={prefill}, but decode server has page_size={decode}. \
             Both servers must use the same --page-size value.",
        )],
        changes: &[],
        check: |c| {
            let prefill = c.settings.prefill.as_ref()?.page_size?;
            let decode = c.decode.effective_page_size();
            (prefill != decode).then(|| Finding {
                args: vec![("prefill", prefill.to_string()), ("decode", decode.to_string())],
                detail: Some(format!("the prefill page size is {}", prefill_source(c, "pageSize", "--page-size"))),
            })
        },
        fix: Fix::Manual { hint: "set spec.decode.pageSize and the prefill page size to the same value" },
    },
    Rule {
        id: "P2",
        about: "prefill and decode KV cache dtype",
        field: DECODE_KV_CACHE_DTYPE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text(
            "KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill}, but decode server has \
             kv_cache_dtype={decode}. Both servers must use the same --kv-cache-dtype value.",
        )],
        changes: &[],
        check: |c| {
            let prefill = kv_cache_dtype(c.settings.prefill.as_ref()?.kv_cache_dtype.as_deref());
            let decode = kv_cache_dtype(c.decode.kv_cache_dtype.as_deref());
            (!prefill.eq_ignore_ascii_case(decode)).then(|| Finding {
                args: vec![("prefill", prefill.to_string()), ("decode", decode.to_string())],
                detail: Some(format!(
                    "the prefill KV cache dtype is {}",
                    prefill_source(c, "kvCacheDtype", "--kv-cache-dtype")
                )),
            })
        },
        fix: Fix::Manual { hint: "set spec.decode.kvCacheDtype and the prefill KV cache dtype to the same value" },
    },
    Rule {
        id: "T1",
        about: "SWA state × TP mismatch (mori)",
        field: DECODE_TP,
        span: Span::always(),
        backends: &[TransferBackend::Mori],
        phase: Phase::Transfer,
        messages: &[text(
            "PD state transfer does not support TP-mismatched non-MLA SWA models (prefill_tp_size={prefill_tp}, \
             decode_tp_size={decode_tp})",
        )],
        changes: &[],
        check: |c| tp_mismatch(c, swa_state(c)),
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T1",
        about: "SWA state × TP mismatch (mooncake, nixl)",
        field: DECODE_TP,
        span: Span::between(v0_5(17), v0_5(21)),
        backends: MOONCAKE_NIXL,
        phase: Phase::Transfer,
        messages: &[text(
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.",
        )],
        changes: &[],
        check: |c| tp_mismatch(c, swa_state(c)),
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T1hnd",
        about: "HND KV cache layout on a PD server",
        field: DECODE_ENV,
        span: Span::always(),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "PD-disaggregation KV transfer assumes NHD slot-row layout; HND KV cache (SGLANG_USE_HND_KVCACHE) is \
             not supported with disagg yet.",
        )],
        changes: &[],
        // The KV manager of every PD server registers its pool's buffers at start-up, and the MHA
        // pool's `get_contiguous_buf_infos` asserts the NHD layout (0.5.17-0.5.23). A
        // unified-memory pool states its page-major layout itself; MLA, DeepSeek-V4 and MiniMax
        // sparse pools are other classes.
        check: |c| {
            let layout = c.layout;
            let mha_pool = match layout.kv_pool {
                KvPool::Full | KvPool::HybridSwa | KvPool::PureSwa => {
                    !layout.has(LayoutFeature::DeepseekV4) && !layout.has(LayoutFeature::MinimaxSparse)
                }
                KvPool::HybridSsm => layout.attention != AttentionKind::Mla,
                KvPool::Mla => false,
            };
            let hnd = fleets_in_scope(c).any(|fleet| fleet.env_on(HND_KV_CACHE_ENV));
            when(mha_pool && !c.settings.enable_unified_memory && hnd)
        },
        fix: Fix::Manual {
            hint: "remove SGLANG_USE_HND_KVCACHE from the env of the PD servers (spec.decode.env, spec.prefill.env): \
                   their KV transfer reads the NHD layout",
        },
    },
    Rule {
        id: "T1pp",
        about: "SWA head slicing × prefill PP (mooncake, nixl)",
        field: DECODE_TP,
        span: Span::since(v0_5(22)),
        backends: MOONCAKE_NIXL,
        phase: Phase::Transfer,
        messages: &[text(
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models with pipeline \
             parallelism yet.",
        )],
        changes: &[],
        // From 0.5.22 SWA state moves by head slicing when attention TP differs; the sender (the
        // prefill server) cannot pair its per-stage SWA entries with decode's layers under PP.
        check: |c| {
            let prefill_pp = c.settings.prefill.as_ref().map_or(1, |p| p.pipeline_parallel);
            tp_mismatch(c, swa_state(c) && prefill_pp > 1)
        },
        fix: Fix::Manual {
            hint: "set the prefill pipelineParallel to 1, or make prefill and decode attention TP equal",
        },
    },
    Rule {
        id: "T1",
        about: "MXFP8 block scales × TP mismatch (mooncake, nixl)",
        field: DECODE_TP,
        span: Span::between(v0_5(19), v0_5(21)),
        backends: MOONCAKE_NIXL,
        phase: Phase::Transfer,
        messages: &[text(
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA BLOCK_SCALE hybrid models yet.",
        )],
        changes: &[text_from(19, "mooncake only"), text_from(20, "nixl too")],
        check: |c| {
            // NIXL transfers BLOCK_SCALE state through this check from 0.5.20, Mooncake from 0.5.19.
            let checked = c.settings.transfer_backend == TransferBackend::Mooncake || c.release >= v0_5(20);
            tp_mismatch(c, checked && block_scale_state(c))
        },
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T1mx",
        about: "MXFP8 KV × attention TP mismatch",
        field: DECODE_TP,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text(
            "PD Disaggregation does NOT support different attention TP sizes with MXFP8 KV cache: prefill \
             attn_tp_size={prefill_tp}, decode attn_tp_size={decode_tp}, state types {states}.",
        )],
        changes: &[],
        check: |c| {
            let mxfp8 = kv_cache_dtype(c.decode.kv_cache_dtype.as_deref()).eq_ignore_ascii_case("mxfp8");
            let mut finding = tp_mismatch(c, mxfp8)?;
            let states = if swa_state(c) { "['block_scale', 'block_scale_swa']" } else { "['block_scale']" };
            finding.args.push(("states", states.into()));
            Some(finding)
        },
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "P5",
        about: "MLA KV cache sharding × attention TP mismatch",
        field: DECODE_TP,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text(
            "MLA KV cache sharding requires equal prefill/decode attn TP sizes, got prefill={prefill_tp} \
             decode={decode_tp}",
        )],
        changes: &[],
        // The decode side maps its ranks onto sharded prefill ranks only for an MLA pool (SGLang's
        // `is_mla_backend`: MLA or DeepSeek-V4, not a hybrid-linear pool around MLA) and only
        // when prefill runs no attention CP.
        check: |c| {
            let prefill = c.settings.prefill.as_ref()?;
            let (prefill_tp, decode_tp) = attention_tps(c)?;
            when_with(
                prefill.kv_cache_sharding
                    && prefill.attention_context_parallel == 1
                    && mla_like(c.layout)
                    && !c.layout.uses_ssm_state()
                    && prefill_tp != decode_tp,
                vec![("prefill_tp", prefill_tp.to_string()), ("decode_tp", decode_tp.to_string())],
            )
        },
        fix: Fix::Manual {
            hint: "make the decode attention TP (spec.decode.tensorParallel) equal the prefill attention TP, or run \
                   the prefill servers without --enable-kv-cache-sharding",
        },
    },
    Rule {
        id: "P3",
        about: "DeepSeek-V4 KV layout mismatch",
        field: DECODE_ENV,
        span: Span::since(v0_5(23)),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[text(
            "KV layout mismatch: prefill server has kv_layout={prefill}, but decode server has kv_layout={decode}. \
             Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT.",
        )],
        changes: &[],
        check: |c| {
            if !c.layout.has(LayoutFeature::DeepseekV4) {
                return None;
            }
            // The prefill servers' KV cache dtype as they run it (a service's prefill fleet
            // without one runs the decode fleet's).
            let prefill_dtype = c.settings.prefill.as_ref().and_then(|p| p.kv_cache_dtype.as_deref());
            let prefill = dsv4_pd_kv_layout(c.layout, c.prefill_fleet?, prefill_dtype)?;
            let decode = dsv4_pd_kv_layout(c.layout, c.decode, c.decode.kv_cache_dtype.as_deref())?;
            when_with(prefill != decode, vec![("prefill", prefill), ("decode", decode)])
        },
        fix: Fix::Manual {
            hint: "give the prefill and decode servers the same SGLANG_DSV4_KV_LAYOUT, \
                   SGLANG_DSV4_COMPRESSED_KV_LAYOUT and --dsv4-attn-backend",
        },
    },
    Rule {
        id: "P4",
        about: "DeepSeek-V4.1 DSpark × attention TP mismatch",
        field: DECODE_TP,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Handshake,
        messages: &[
            text("DeepSeek-V4.1 DSpark PD requires the same TP size on both servers"),
            text_from(
                22,
                "DeepSeek-V4.1 DSpark PD requires the same TP size on both servers (including prefill CP ranks for MLA)",
            ),
        ],
        changes: &[text_from(22, "a prefill whose attention TP × attention CP equals the decode attention TP passes")],
        check: dspark_tp_mismatch,
        fix: Fix::Manual {
            hint: "make the decode attention TP (spec.decode.tensorParallel) equal the prefill attention TP (from 0.5.22 \
                   also: equal the prefill attention TP × attention CP)",
        },
    },
    Rule {
        id: "P4b",
        about: "DeepSeek-V4.1 DSpark on one side only",
        field: SPECULATIVE_ALGORITHM,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Handshake,
        // A server that runs DSPARK describes its DSpark transfer layout, one that does not
        // describes none, so every field of the layout differs.
        messages: &[text(
            "DeepSeek-V4.1 DSpark PD layout mismatch (compression_ratios, kv_item_lens, kv_layer_ids, \
             num_draft_tokens, state_item_lens, state_types): both servers must enable DSpark with the same block \
             size and target/draft KV layout. Upgrade both servers together.",
        )],
        changes: &[],
        check: |c| {
            let decode = speculative_algorithm(c).as_deref() == Some("DSPARK");
            when(c.layout.has(LayoutFeature::DeepseekV41) && decode != paired_prefill_dspark(c)?)
        },
        fix: Fix::Manual {
            hint: "run the decode and the prefill servers both with spec.disaggregation.speculativeAlgorithm DSPARK, \
                   or neither",
        },
    },
    Rule {
        id: "P6",
        about: "decode pipeline stages × prefill pipeline stages",
        field: DECODE_PIPELINE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Handshake,
        // An assert whose message is a one-element tuple: SGLang prints it in parentheses.
        messages: &[text("Decode pp size ({decode}) should be equal to prefill pp size ({prefill}) or 1")],
        changes: &[],
        check: |c| {
            let prefill = c.settings.prefill.as_ref()?.pipeline_parallel;
            let decode = c.decode.pipeline_parallel;
            when_with(
                decode != prefill && decode != 1,
                vec![("decode", decode.to_string()), ("prefill", prefill.to_string())],
            )
        },
        fix: Fix::Manual {
            hint: "set spec.decode.pipelineParallel to 1 or to the prefill pipelineParallel (each decode stage pulls \
                   from the prefill stage holding its layers)",
        },
    },
    Rule {
        id: "T11",
        about: "DeepSeek-V4 draft window ≠ target window",
        field: SPECULATIVE_DRAFT_MODEL,
        span: Span::always(),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: T11_MESSAGES,
        changes: &[],
        check: |c| draft_geometry_mismatch(c, |target, draft| target.1 != draft.1),
        fix: Fix::Manual {
            hint: "use a draft model whose sliding_window equals the model's, or unset speculativeDraftModel so \
                   the model's own NextN layers draft",
        },
    },
    Rule {
        id: "T11",
        about: "DeepSeek-V4 draft pages × decode DCP",
        field: DECODE_CONTEXT_PARALLEL,
        span: Span::always(),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: T11_MESSAGES,
        changes: &[],
        check: |c| draft_geometry_mismatch(c, |target, draft| target.0 != draft.0),
        fix: Fix::Manual {
            hint: "set decodeContextParallel to 1 (a draft pool pages DCP's widened space, the target's does not), \
                   or turn speculative decoding off",
        },
    },
    Rule {
        id: "T4",
        about: "MiniMax sparse state × prefill PP (mooncake, nixl)",
        field: PREFILL_PIPELINE,
        span: Span::always(),
        backends: MOONCAKE_NIXL,
        phase: Phase::Transfer,
        messages: T4_PP_MESSAGES,
        changes: &[],
        check: minimax_pipelined_prefill,
        fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    },
    Rule {
        id: "T4",
        about: "MiniMax sparse state × prefill PP (mori)",
        field: PREFILL_PIPELINE,
        span: Span::between(v0_5(17), v0_5(19)),
        backends: &[TransferBackend::Mori],
        phase: Phase::Transfer,
        messages: T4_PP_MESSAGES,
        changes: &[],
        check: minimax_pipelined_prefill,
        fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    },
    Rule {
        id: "T5",
        about: "MiniMax sparse state × prefill PP (mori)",
        field: PREFILL_PIPELINE,
        span: Span::since(v0_5(20)),
        backends: &[TransferBackend::Mori],
        phase: Phase::Transfer,
        messages: &[text(
            "MORI PD disaggregation requires PP=1 for minimax_index_k; PP>1 needs peer state_layer_ids for \
             global-layer descriptor pairing.",
        )],
        changes: &[],
        check: minimax_pipelined_prefill,
        fix: Fix::Manual { hint: MINIMAX_PP_HINT },
    },
    Rule {
        id: "T4",
        about: "MiniMax sparse state × attention TP mismatch (mooncake, nixl)",
        field: DECODE_TP,
        span: Span::between(v0_5(17), v0_5(22)),
        backends: MOONCAKE_NIXL,
        phase: Phase::Transfer,
        messages: T4_TP_MESSAGES,
        changes: &[],
        check: minimax_tp_mismatch,
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T4",
        about: "MiniMax sparse state × attention TP mismatch (mori)",
        field: DECODE_TP,
        span: Span::between(v0_5(17), v0_5(19)),
        backends: &[TransferBackend::Mori],
        phase: Phase::Transfer,
        messages: T4_TP_MESSAGES,
        changes: &[],
        check: minimax_tp_mismatch,
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T5",
        about: "MiniMax sparse state × attention TP mismatch (mori)",
        field: DECODE_TP,
        span: Span::between(v0_5(20), v0_5(22)),
        backends: &[TransferBackend::Mori],
        phase: Phase::Transfer,
        messages: &[text("PD disagg: heterogeneous TP not supported for minimax_index_k yet.")],
        changes: &[],
        check: minimax_tp_mismatch,
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "T4c",
        about: "MiniMax sparse state × attention TP mismatch (handshake)",
        field: DECODE_TP,
        span: Span::since(v0_5(23)),
        backends: &[TransferBackend::Mooncake, TransferBackend::Nixl, TransferBackend::Mori],
        phase: Phase::Handshake,
        messages: &[text(
            "MiniMax sparse PD requires matching attention TP sizes: prefill={prefill_tp}, decode={decode_tp}.",
        )],
        changes: &[],
        check: minimax_tp_mismatch,
        fix: Fix::Manual { hint: TP_HINT },
    },
    Rule {
        id: "M1",
        about: "extra_buffer_lazy under PD",
        field: MAMBA_STRATEGY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "extra_buffer_lazy unsupported under PD disaggregation; use --mamba-radix-cache-strategy extra_buffer.",
        )],
        changes: &[],
        check: |c| {
            when(
                mamba_radix_cache(c)
                    && c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::ExtraBufferLazy),
            )
        },
        fix: Fix::Rewrite { apply: to_extra_buffer, hint: "use extra_buffer" },
    },
    Rule {
        id: "M2",
        about: "extra_buffer track interval × page size",
        field: DECODE_PAGE_SIZE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "AssertionError (assert view.mamba_track_interval % view.page_size == 0): --mamba-track-interval \
             {interval} is not a multiple of --page-size {page}",
        )],
        changes: &[],
        check: |c| {
            if !c.layout.uses_ssm_state() {
                return None;
            }
            extra_buffer_fleets(c).find_map(|fleet| {
                let interval = mamba_track_interval(&fleet.extra_args);
                let page = i64::from(fleet.effective_page_size().max(1));
                when_with(interval % page != 0, vec![("interval", interval.to_string()), ("page", page.to_string())])
            })
        },
        fix: Fix::Manual {
            hint: "make the page size (spec.decode.pageSize, and spec.prefill.pageSize) divide the Mamba track \
                   interval (256 unless extraArgs pass --mamba-track-interval), or pass --mamba-track-interval \
                   with a multiple of the page size in each fleet's extraArgs",
        },
    },
    Rule {
        id: "M6",
        about: "extra_buffer chunk size × page size",
        field: DECODE_PAGE_SIZE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "For SSM models, either chunk_size or page_size must be divisible by the other, got chunk_size={chunk}, \
             page_size={page}",
        )],
        changes: &[],
        check: |c| {
            // The extra-buffer validation sizes its cache chunks from the model's chunk size
            // (64 where its config class has none) and a page size given on the command line.
            if !c.layout.uses_ssm_state() {
                return None;
            }
            let chunk = c.layout.mamba_chunk_size.unwrap_or(FLA_CHUNK_SIZE);
            extra_buffer_fleets(c).find_map(|fleet| {
                let page = u64::try_from(fleet.page_size?).ok().filter(|page| *page > 0)?;
                let (small, large) = (chunk.min(page), chunk.max(page));
                when_with(
                    small == 0 || large % small != 0,
                    vec![("chunk", chunk.to_string()), ("page", page.to_string())],
                )
            })
        },
        fix: Fix::Manual {
            hint: "use a page size (spec.decode.pageSize, and spec.prefill.pageSize) that divides the model's Mamba \
                   chunk size or is a multiple of it (powers of two do for every default chunk size)",
        },
    },
    Rule {
        id: "M7",
        about: "extra_buffer on a model or backend without it",
        field: MAMBA_STRATEGY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("extra_buffer is not supported for {architecture}; use no_buffer.")],
        changes: &[],
        check: |c| {
            let strategy = c.settings.mamba_radix_cache_strategy?;
            when_with(
                strategy != MambaRadixCacheStrategy::NoBuffer
                    && c.layout.uses_ssm_state()
                    && radix_cache_fleets(c).into_iter().any(|fleet| !extra_buffer_supported(c, fleet)),
                vec![("architecture", c.layout.architecture.clone())],
            )
        },
        fix: Fix::Rewrite {
            apply: strategy_unset,
            hint: "unset mambaRadixCacheStrategy (SGLang then picks no_buffer), and drop --linear-attn-backend from \
                   extraArgs where it is not triton",
        },
    },
    Rule {
        id: "M5",
        about: "no_buffer with the overlap schedule",
        field: MAMBA_STRATEGY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.")],
        changes: &[],
        // The overlap schedule is on unless --disable-overlap-schedule is given (in extraArgs: kvpilot
        // keeps no setting for it); SGLang's automatic strategy turns it off itself for no_buffer.
        check: |c| {
            let overlap_on = radix_cache_fleets(c).into_iter().any(|fleet| !overlap_schedule_off(&fleet.extra_args));
            when(
                c.layout.uses_ssm_state()
                    && c.settings.mamba_radix_cache_strategy == Some(MambaRadixCacheStrategy::NoBuffer)
                    && overlap_on,
            )
        },
        fix: Fix::Rewrite {
            apply: strategy_unset,
            hint: "leave mambaRadixCacheStrategy unset (SGLang's automatic choice turns the overlap schedule off \
                   for no_buffer), or add --disable-overlap-schedule to the extraArgs of every fleet that keeps a \
                   radix cache (spec.prefill, and spec.decode with decodeRadixCache)",
        },
    },
    Rule {
        id: "M4",
        about: "extra-buffer strategy without Mamba state",
        field: MAMBA_STRATEGY,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("--mamba-radix-cache-strategy {strategy} needs mamba state, got {architecture}.")],
        changes: &[],
        check: |c| {
            let strategy = c.settings.mamba_radix_cache_strategy?;
            let extra_buffer = strategy != MambaRadixCacheStrategy::NoBuffer;
            when_with(
                extra_buffer && radix_cache_in_use(c) && !c.layout.uses_ssm_state(),
                vec![("strategy", strategy.as_str().into()), ("architecture", c.layout.architecture.clone())],
            )
        },
        fix: Fix::Rewrite {
            apply: strategy_unset,
            hint: "unset mambaRadixCacheStrategy: the model keeps no Mamba state",
        },
    },
    Rule {
        id: "M3",
        about: "no_buffer page size",
        field: DECODE_PAGE_SIZE,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[text("no_buffer only supports page_size=1.")],
        changes: &[],
        // Unset, SGLang picks no_buffer where the model does not support extra_buffer (M7).
        check: |c| {
            when(
                c.layout.uses_ssm_state()
                    && radix_cache_fleets(c)
                        .into_iter()
                        .any(|fleet| !runs_extra_buffer(c, fleet) && fleet.effective_page_size() != 1),
            )
        },
        fix: Fix::Manual {
            hint: "set spec.decode.pageSize (and spec.prefill.pageSize) to 1, or mambaRadixCacheStrategy to \
                   extra_buffer where the model supports it",
        },
    },
    Rule {
        id: "U1",
        about: "unified memory under PD",
        field: UNIFIED_MEMORY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("--enable-unified-memory is not yet compatible with PD disaggregation."),
            text_from(
                18,
                "--enable-unified-memory with PD disaggregation supports only the mooncake transfer backend; got \
                 '{backend}'.",
            ),
            text_from(
                21,
                "--enable-unified-memory with PD disaggregation supports only these transfer backends: mooncake; got \
                 '{backend}'.",
            ),
        ],
        changes: &[
            text_from(17, "any unified memory under PD"),
            text_from(18, "off mooncake (PP is a rule of its own, and from 0.5.21 speculative decoding)"),
        ],
        check: |c| {
            let backend = c.settings.transfer_backend;
            let refused = c.release < v0_5(18) || backend != TransferBackend::Mooncake;
            when_with(unified_memory(c) && refused, vec![("backend", backend.as_str().into())])
        },
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
    Rule {
        id: "U1",
        about: "unified memory under PD × PP",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation does not support pipeline parallelism (whole-envelope \
             transfer has no per-layer entries to subset).",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.decode.pipeline_parallel > 1),
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or set pipelineParallel to 1",
        },
    },
    Rule {
        id: "U1",
        about: "unified memory under PD × speculative decoding",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(21)),
        backends: &[TransferBackend::Mooncake],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation does not support speculative decoding with the Mooncake \
             transfer backend.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.settings.speculative_algorithm.is_some()),
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or drop speculativeAlgorithm",
        },
    },
    Rule {
        id: "U4",
        about: "unified memory × DCP",
        field: UNIFIED_MEMORY,
        span: Span::between(v0_5(17), v0_5(19)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory is not yet compatible with decode context parallelism (--dcp-size > 1): the pool \
             has no DCP-aware masked write path (UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is None), \
             so a DCP run would boot and then fail on the first KV write.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && dcp(c)),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    },
    Rule {
        id: "U4",
        about: "unified memory × DCP needs an MLA model",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with decode context parallelism (--dcp-size > 1) supports MLA models only (e.g. \
             kimi-linear): the MHA unified pool has no DCP-aware masked write path \
             (UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is None).",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && dcp(c) && c.layout.attention != AttentionKind::Mla),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    },
    Rule {
        id: "U4",
        about: "unified memory × DCP × hybrid SWA",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with decode context parallelism (--dcp-size > 1) does not support hybrid \
             sliding-window models: UnifiedSWATokenToKVPoolAllocator does not widen its virtual id space, and the \
             full->swa mapping is not DCP-sharded.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && dcp(c) && c.layout.is_hybrid_swa()),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    },
    Rule {
        id: "U16",
        about: "unified memory under PD without lazy compaction",
        field: "spec.decode.env[SGLANG_DISABLE_LAZY_COMPACTION]",
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation requires lazy compaction; unset \
             SGLANG_DISABLE_LAZY_COMPACTION.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && fleets_in_scope(c).any(|fleet| fleet.env_on(LAZY_COMPACTION_OFF_ENV))),
        fix: Fix::Manual { hint: "remove SGLANG_DISABLE_LAZY_COMPACTION from the fleets' env (or set it to 0)" },
    },
    Rule {
        id: "U4c",
        about: "unified memory × DCP under PD",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(20)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with decode context parallelism (--dcp-size > 1) does not support PD \
             disaggregation: the transfer ships whole page envelopes, which under DCP hold only this rank's shard of \
             each widened page. Rejected here rather than at the first KV transfer, where \
             translate_kv_indices_for_transfer would abort a server that had already booted.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && dcp(c)),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_DCP_HINT },
    },
    Rule {
        id: "U8",
        about: "unified memory × speculative algorithm",
        field: UNIFIED_MEMORY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text("--enable-unified-memory is not yet compatible with speculative decoding."),
            text_from(
                18,
                "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); other speculative \
                 algorithms are not yet audited for the unified pool's virtual/dense loc translation. Got \
                 --speculative-algorithm='{algorithm}'.",
            ),
            text_from(
                19,
                "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); other speculative \
                 algorithms are not yet audited for the unified pool's virtual/kernel-facing loc translation. Got \
                 --speculative-algorithm='{algorithm}'.",
            ),
            text_from(
                22,
                "--enable-unified-memory only supports --speculative-algorithm DSPARK, DFLASH, EAGLE and EAGLE3; other \
                 speculative algorithms are not yet audited for the unified pool's virtual-to-physical loc \
                 translation. Got --speculative-algorithm='{algorithm}'.",
            ),
        ],
        changes: &[
            text_from(17, "any algorithm"),
            text_from(18, "DSPARK allowed"),
            text_from(22, "DSPARK, DFLASH, EAGLE and EAGLE3 allowed"),
        ],
        check: |c| {
            // The pool hook runs after the speculative hook: it reads the resolved name.
            let algorithm = resolved_speculative_algorithm(c).filter(|_| unified_memory(c))?;
            let allowed: &[&str] = match c.release {
                r if r < v0_5(18) => &[],
                r if r < v0_5(22) => &["DSPARK"],
                _ => &["DSPARK", "DFLASH", "EAGLE", "EAGLE3"],
            };
            when_with(!allowed.contains(&algorithm.as_str()), vec![("algorithm", algorithm)])
        },
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or change speculativeAlgorithm",
        },
    },
    Rule {
        id: "U9",
        about: "unified memory under PD × HiSparse",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(18)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation is not compatible with --enable-hisparse: the decode-side \
             HiSparse prealloc path ships host/C4 rows straight from the allocator, bypassing the virtual->physical \
             translation the unified pool needs.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.settings.hisparse),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off, or turn hisparse off" },
    },
    Rule {
        id: "U10",
        about: "unified memory × host-tiered KV cache",
        field: UNIFIED_MEMORY,
        span: Span::always(),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "--enable-unified-memory is not yet compatible with hierarchical / host-tiered KV cache \
                 (--enable-hierarchical-cache / --enable-lmcache): the unified-memory-pool init wires up no host pools, \
                 and its device mamba / full-attention slots are VIRTUAL — the host-offload path does not translate \
                 them to physical.",
            ),
            text_from(
                21,
                "--enable-unified-memory is not yet compatible with --enable-lmcache: the LMCache offload path indexes \
                 the device buffers with the ids it is handed, and under the unified pool those are VIRTUAL.",
            ),
        ],
        changes: &[text_from(17, "HiCache or LMCache"), text_from(21, "LMCache only")],
        check: |c| {
            let hicache = c.settings.hierarchical_cache && c.release < v0_5(21);
            when(unified_memory(c) && (c.settings.lmcache || hicache))
        },
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or turn lmcache (before SGLang 0.5.21 also hierarchicalCache) off",
        },
    },
    Rule {
        id: "U11",
        about: "unified memory × external cache linker",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory does not support --enable-unified-cache-external-linker: direct L3 transfers do \
             not preserve unified page-envelope indices and compaction lifetimes. Use --enable-hierarchical-cache for \
             supported L2/L3 transfers.",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.settings.unified_cache_external_linker),
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or turn unifiedCacheExternalLinker off",
        },
    },
    Rule {
        id: "U12",
        about: "unified memory decode offload needs file storage",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(21)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory with decode KV offload currently supports --hicache-storage-backend=file only.",
        )],
        changes: &[],
        check: |c| when(unified_offload(c) && c.settings.hicache_storage_backend.as_deref() != Some("file")),
        fix: Fix::Rewrite {
            apply: unified_memory_off,
            hint: "turn enableUnifiedMemory off, or use hicacheStorageBackend file (spec.cache sets dynamic)",
        },
    },
    Rule {
        id: "U13",
        about: "unified memory EAGLE needs a unified target",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[
            text(
                "--enable-unified-memory + EAGLE/EAGLE3 requires a unified target (hybrid-SWA or a mamba hybrid): the \
                 draft's KV lives fused inside the full-attention page envelope.",
            ),
            text_from(
                23,
                "--enable-unified-memory + EAGLE/EAGLE3 requires a unified target (hybrid-SWA or a mamba hybrid): the \
                 draft's KV lives fused inside the target's sub-pool entries.",
            ),
        ],
        changes: &[],
        check: |c| when(unified_eagle(c) && !c.layout.is_hybrid_swa() && !c.layout.uses_ssm_state()),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    },
    Rule {
        id: "U14",
        about: "unified memory EAGLE × host_pool",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory + EAGLE/EAGLE3 does not support --disaggregation-decode-retraction-backup=host_pool: \
             the backup builds the draft's host pool off the draft's own device pool, which a fused EAGLE draft does \
             not have.",
        )],
        changes: &[],
        check: |c| when(unified_eagle(c) && host_pool(c)),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    },
    Rule {
        id: "U15",
        about: "unified memory EAGLE × HiCache",
        field: UNIFIED_MEMORY,
        span: Span::since(v0_5(22)),
        backends: &[],
        phase: Phase::Args,
        messages: &[text(
            "--enable-unified-memory + EAGLE/EAGLE3 does not support --enable-hierarchical-cache: HiCache keeps the \
             draft on a private pool, and would pack an MTP head's KV into the target's page-envelope host pool, which \
             refuses per-layer draft loads.",
        )],
        changes: &[],
        check: |c| when(unified_eagle(c) && c.settings.hierarchical_cache),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: UNIFIED_EAGLE_HINT },
    },
    Rule {
        id: "U2",
        about: "unified memory × MHA Mamba",
        field: UNIFIED_MEMORY,
        span: Span::between(v0_5(18), v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation currently supports only MLA hybrid-Mamba models (e.g. \
             kimi-linear)",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.layout.uses_ssm_state() && c.layout.attention != AttentionKind::Mla),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
    Rule {
        id: "U3",
        about: "unified memory × hybrid SWA",
        field: UNIFIED_MEMORY,
        span: Span::between(v0_5(18), v0_5(19)),
        backends: &[],
        phase: Phase::PoolBuild,
        messages: &[text(
            "--enable-unified-memory with PD disaggregation does not support hybrid-SWA models yet (no whole-envelope \
             transfer scheme for the SWA sub-pool).",
        )],
        changes: &[],
        check: |c| when(unified_memory(c) && c.layout.is_hybrid_swa() && !c.layout.has(LayoutFeature::DeepseekV4)),
        fix: Fix::Rewrite { apply: unified_memory_off, hint: "turn enableUnifiedMemory off" },
    },
];

/// T4's text for a pipelined prefill: 0.5.21 names all MiniMax state (its dense KV moves too).
const T4_PP_MESSAGES: &[Message] = &[
    text("PD disagg: PP>1 not supported for MiniMax sparse index yet."),
    text_from(21, "PD disagg: PP>1 not supported for MiniMax state yet."),
];
const T4_TP_MESSAGES: &[Message] = &[
    text("PD disagg: heterogeneous TP not supported for MiniMax sparse index yet."),
    text_from(21, "PD disagg: heterogeneous TP not supported for MiniMax state yet."),
];
const MINIMAX_PP_HINT: &str = "set the prefill pipelineParallel to 1: MiniMax sparse state is paired by compacted layer \
                               lists, which pipeline stages split";

/// T11's text: 0.5.23 adds the request window's capacity and the draft's ring size, sized at
/// start-up, to the compared tuples.
const T11_MESSAGES: &[Message] = &[
    text(
        "DSV4 target and draft pools must share paged SWA geometry: target=({target_page}, {target_window}), \
         draft=({draft_page}, {draft_window})",
    ),
    text_from(
        23,
        "DSV4 target and draft pools must share SWA geometry: target=({target_page}, {target_window}, \
         {target_ring}), draft=({draft_page}, {draft_window}, {draft_ring})",
    ),
];

const TP_HINT: &str = "changing TP changes the GPU count, so kvpilot does not rewrite it: set spec.decode.tensorParallel \
                       (or dataParallel under DP attention) so prefill and decode attention TP match";
