//! Every SGLang check that can be decided from an `InferenceDeployment` spec (or the command line
//! the guard reads) and the model's resolved layout, one named [`Rule`] each, keyed by the SGLang
//! releases it holds for, with SGLang's exact message per release range. A release's profile is
//! these rules evaluated at that release.
//!
//! One file per SGLang concern, mirroring the hook files of SGLang's `python/sglang/srt/arg_groups/`
//! (`models/` per model family, as SGLang's `model_overrides/`): each holds its rules, the
//! helpers only it uses and its tests; [`predicates`] holds what several share. [`registry`]
//! assembles the one table, [`RULES`], whose order is the order findings are reported in
//! (docs/architecture.md says how to add a rule).

mod context_parallel;
mod decode_context_parallel;
mod decode_radix_cache;
mod flags;
mod hicache;
mod hisparse;
mod host_receive;
mod kv_cache;
mod linker;
mod lmcache;
mod mamba;
mod models;
mod parallel;
mod pipeline_parallel;
mod predicates;
mod registry;
mod retraction;
mod server_roles;
mod speculative;
mod transfer;
mod tree_cache;
mod unified_memory;

use crate::api::{AttentionLayout, DisaggregationSpec, FleetSpec, TransferBackend};
use crate::release::{Release, Span, v0_5};

pub(crate) use predicates::{RETRACTION_BACKUP, UNIFIED_RADIX_TREE_ENV, host_receive_on, stage_without_full_layer};
pub use predicates::{RUST_SERVER_ENV, pipeline_stages, prefill_attention_tp};
pub use registry::{CACHE_WIRING, COMMAND_LINE, ONE_WORD_COMMAND, RuleInfo, pod};
pub(crate) use registry::{RULES, SERVER_ROLE_RULES};

/// What a rule sees: the settings as they stand (maybe already partly rewritten), the decode
/// fleet, the layout and the release the rules are evaluated at.
pub(crate) struct RuleInput<'a> {
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
    pub(crate) subject: Subject,
}

/// What a verdict is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A PD service: its decode servers and the prefill servers kvpilot gives the settings both
    /// sides share.
    Service,
    /// One PD decode server (a command line the guard reads).
    DecodeServer,
    /// One prefill server, or one without PD.
    OtherServer,
}

/// The role SGLang's PD hook sees a server in (`--disaggregation-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole {
    Decode,
    Prefill,
    WithoutPd,
}

/// A rule SGLang checks on PD decode servers only.
const DECODE_SERVERS: &[ServerRole] = &[ServerRole::Decode];
/// A rule SGLang checks on every PD server, prefill included.
const PD_SERVERS: &[ServerRole] = &[ServerRole::Decode, ServerRole::Prefill];
/// A rule SGLang checks on every server, with or without PD.
const EVERY_SERVER: &[ServerRole] = &[ServerRole::Decode, ServerRole::Prefill, ServerRole::WithoutPd];
/// A rule SGLang checks on PD decode servers and on servers without PD, not on prefill ones.
const NOT_PREFILL: &[ServerRole] = &[ServerRole::Decode, ServerRole::WithoutPd];
/// A rule SGLang checks on servers that are not PD decode servers only.
const NOT_DECODE: &[ServerRole] = &[ServerRole::Prefill, ServerRole::WithoutPd];
/// A rule SGLang checks on PD prefill servers only.
const PREFILL_SERVERS: &[ServerRole] = &[ServerRole::Prefill];

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

impl Fix {
    /// What to change, as the docs and the findings say it.
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            Self::Rewrite { hint, .. } | Self::Manual { hint } => hint,
        }
    }
}

/// One rule: its id, what it is about, the field, the releases and transfer backends it holds
/// for, the servers SGLang checks it on, the phase SGLang raises it in, its message per release
/// range, and its check, which says whether it is violated at `RuleInput::release`.
pub(crate) struct Rule {
    pub(crate) id: &'static str,
    /// Short description, unique together with `id` (the docs table's row label).
    pub(crate) about: &'static str,
    /// Where SGLang does what the rule reproduces, on one line: the function (with its class
    /// where it is a method) and its file under the `sglang/` package, with the releases each
    /// location holds for (`ServerArgs._handle_cache_compatibility, srt/server_args.py
    /// (0.5.18); handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)`),
    /// naming every release of `span` (docs/rules.md shows it; the registry's tests refuse an
    /// entry without one).
    pub(crate) reproduces: &'static str,
    pub(crate) field: &'static str,
    pub(crate) span: Span,
    /// The transfer backends it holds for; empty for every backend.
    pub(crate) backends: &'static [TransferBackend],
    /// The servers SGLang checks it on, by their role. A verdict on a PD decode server, or on a
    /// service, runs every rule (a rule of other servers only says so in its check); one on another
    /// server runs the rules of its role.
    pub(crate) roles: &'static [ServerRole],
    pub(crate) phase: Phase,
    pub(crate) messages: &'static [Message],
    /// How the condition changes in later releases, for the docs (the check implements it).
    pub(crate) changes: &'static [Message],
    pub(crate) check: fn(&RuleInput<'_>) -> Option<Finding>,
    pub(crate) fix: Fix,
}

impl Rule {
    /// What an entry of the table need not state: every release and transfer backend, a PD
    /// decode server's rule, raised while SGLang reads its arguments, one message with one
    /// condition. Every entry states its id, what it is about, what it reproduces, its field,
    /// message, check and fix (the registry's tests refuse an entry that keeps these placeholders).
    pub(crate) const DEFAULT: Rule = Rule {
        id: "",
        about: "",
        reproduces: "",
        field: "",
        span: Span::always(),
        backends: &[],
        roles: DECODE_SERVERS,
        phase: Phase::Args,
        messages: &[],
        changes: &[],
        check: |_| unreachable!("every rule states its check"),
        fix: Fix::Manual { hint: "" },
    };

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

    /// The finding if the rule exists in the input's release and backend and is violated.
    pub(crate) fn evaluate(&self, input: &RuleInput<'_>) -> Option<Finding> {
        if !self.applies(input.release, input.settings.transfer_backend) {
            return None;
        }
        (self.check)(input)
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
