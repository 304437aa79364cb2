//! The KV compatibility key: everything that decides whether a prefill server and a decode server
//! can exchange KV, read off the servers kvpilot runs. Two servers of one key pair; servers of
//! different keys may not (the router selects one key at a time, and a change of key is a
//! coherent rollout of both fleets).
//!
//! The inputs are the settings SGLang's own bootstrap handshake and KV transfer compare between
//! the two sides (the handshake rules P1–P6, T1*, R19d–f and what `tests/parity/handshake.py` runs
//! of them), the model and the draft model they compute KV for, and the SGLang build on both
//! sides. Settings kvpilot writes are named by their row of the flag table ([`flags::FLAGS`]);
//! the options it reads but never writes come from the fleets' `extraArgs`. Every value is read
//! from the server's whole command line by the release's own parser, so an alias or an
//! abbreviation is the same setting. Any difference, on either side, is another key: a
//! change the handshake would in fact accept costs a coherent rollout, never a failed request.

use k8s_openapi::api::core::v1::EnvVar;

use super::cmdline::Arg;
use super::flags::{FLAGS, Flag, Target};
use super::server::FleetRole;
use super::server_cli;
use crate::release::Release;

/// Where one input of the key is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The flag of the flag table's row for this setting, on the server's command line.
    Flag(Target),
    /// An option kvpilot reads but never writes (it comes from `extraArgs`), by its full name.
    Option(&'static str),
    /// An environment variable of the SGLang container.
    Env(&'static str),
    /// The SGLang container's image.
    Image,
    /// The SGLang release kvpilot checked the servers against.
    Release,
}

/// One input of the key, and why it decides whether two servers exchange KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInput {
    pub source: Source,
    pub why: &'static str,
}

const fn input(source: Source, why: &'static str) -> KeyInput {
    KeyInput { source, why }
}

const ATTENTION_TP: &str = "attention TP as the handshake compares it (T1, T1mx, P4, P5, T4c)";

/// Every input of the key, in the order the key lists them.
pub const KEY_INPUTS: &[KeyInput] = &[
    input(Source::Flag(Target::ModelPath), "the weights whose KV both sides compute"),
    input(Source::Flag(Target::Revision), "the weights whose KV both sides compute"),
    input(Source::Flag(Target::TransferBackend), "the transfer engine both sides speak"),
    input(Source::Flag(Target::TensorParallel), ATTENTION_TP),
    input(Source::Flag(Target::DataParallel), ATTENTION_TP),
    input(Source::Flag(Target::EnableDpAttention), ATTENTION_TP),
    input(Source::Flag(Target::AttentionDataParallel), ATTENTION_TP),
    input(Source::Flag(Target::PipelineParallel), "pipeline stages (P6, T1pp, T4)"),
    input(Source::Flag(Target::PageSize), "the page size (P1)"),
    input(Source::Flag(Target::KvCacheDtype), "the KV cache dtype (P2, T1mx) and DeepSeek-V4's KV layout (P3)"),
    input(Source::Flag(Target::DecodeContextParallel), "decode context parallelism (R19d, R19e, R19f)"),
    input(Source::Flag(Target::SpeculativeAlgorithm), "the DSpark layout (P4, P4b) and the draft's KV"),
    input(Source::Flag(Target::DraftModelPath), "the draft model whose KV speculative PD hands over"),
    input(Source::Flag(Target::DraftRevision), "the draft model whose KV speculative PD hands over"),
    input(Source::Flag(Target::DisableHybridSwaMemory), "the SWA state sent beside the KV (T1)"),
    input(Source::Flag(Target::MambaRadixCacheStrategy), "the Mamba state sent beside the KV"),
    input(Source::Flag(Target::EnableUnifiedMemory), "the pool's page-major KV layout"),
    input(Source::Option("--attn-cp-size"), "prefill attention context parallelism (R19e, P4, P5)"),
    input(Source::Option("--enable-kv-cache-sharding"), "prefill KV cache sharding (R19f, P5)"),
    input(Source::Option("--dsv4-attn-backend"), "DeepSeek-V4's KV layout (P3)"),
    input(Source::Env("SGLANG_DSV4_KV_LAYOUT"), "DeepSeek-V4's KV layout (P3)"),
    input(Source::Env("SGLANG_DSV4_COMPRESSED_KV_LAYOUT"), "DeepSeek-V4's KV layout (P3)"),
    input(Source::Env("SGLANG_HACK_FLASHMLA_BACKEND"), "DeepSeek-V4's unified KV cache (P3)"),
    input(Source::Env("SGLANG_USE_HND_KVCACHE"), "the KV cache's slot layout the transfer reads (T1hnd)"),
    input(Source::Image, "the SGLang build both sides run: its handshake and transfer code"),
    input(Source::Release, "the SGLang release both sides run: its handshake and transfer code"),
];

/// The flag table's row for `target`.
fn flag_of(target: Target) -> &'static Flag {
    FLAGS.iter().find(|flag| flag.target == target).expect("every key input names a row of the flag table")
}

/// One server side of the pair, as kvpilot renders it.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    pub role: FleetRole,
    /// The server's arguments after `python3 -m sglang.launch_server`.
    pub args: &'a [String],
    /// The SGLang container's environment.
    pub env: &'a [EnvVar],
    pub image: &'a str,
}

/// The key of the servers `sides` (each fleet kvpilot runs): one line `ROLE INPUT=VALUE` per
/// input a side sets, in [`KEY_INPUTS`] order, sides in the order given. Callers hash it into the
/// `kvpilot.dev/kv-compat` label.
pub fn key(sides: &[Side<'_>], release: Release) -> String {
    let cli = server_cli::for_release(release);
    let mut key = String::new();
    for side in sides {
        let reading = cli.read(&Arg::items(side.args));
        let option = |name: &str| reading.last(name).map(|given| given.values.join(" "));
        for input in KEY_INPUTS {
            let value = match input.source {
                Source::Flag(target) => option(flag_of(target).name()),
                Source::Option(name) => option(name),
                Source::Env(name) => side.env.iter().find(|var| var.name == name).map(|var| match &var.value_from {
                    // A value kvpilot cannot see: where it comes from stands for it.
                    Some(source) => serde_json::to_string(source).unwrap_or_default(),
                    None => var.value.clone().unwrap_or_default(),
                }),
                Source::Image => Some(side.image.to_string()),
                Source::Release => Some(release.to_string()),
            };
            if let Some(value) = value {
                key += &format!("{} {}={value}\n", side.role.as_str(), label(input.source));
            }
        }
    }
    key
}

/// How the key and the docs name an input.
fn label(source: Source) -> String {
    match source {
        Source::Flag(target) => flag_of(target).name().to_string(),
        Source::Option(name) => name.to_string(),
        Source::Env(name) => format!("env {name}"),
        Source::Image => "image".to_string(),
        Source::Release => "release".to_string(),
    }
}

/// The marker lines around the generated list of inputs in docs/pods.md.
pub const INPUTS_DOC_START: &str = "<!-- kvpilot kv-compat inputs: generated by `kvpilot kv-compat`, do not edit -->";
/// See [`INPUTS_DOC_START`].
pub const INPUTS_DOC_END: &str = "<!-- end of kvpilot kv-compat inputs -->";

/// The key's inputs as the table in docs/pods.md lists them.
pub fn inputs_markdown() -> String {
    let mut out = String::from("| input (each fleet's) | set by | why it decides the pairing |\n|---|---|---|\n");
    for input in KEY_INPUTS {
        let set_by = match input.source {
            Source::Flag(target) => {
                format!("`{}`", flag_of(target).field.replacen("spec.decode.", "spec.{decode,prefill}.", 1))
            }
            Source::Option(_) => "`extraArgs`, read by the release's parser".to_string(),
            Source::Env(_) => "`env`".to_string(),
            Source::Image => "`image`, else the operator's `--sglang-image`".to_string(),
            Source::Release => "`spec.sglang.version` (`status.sglang.version`)".to_string(),
        };
        out += &format!("| `{}` | {set_by} | {} |\n", label(input.source), input.why);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::Release;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn decode<'a>(args: &'a [String], env: &'a [EnvVar]) -> Side<'a> {
        Side { role: FleetRole::Decode, args, env, image: "lmsysorg/sglang:v0.5.23-cu129" }
    }

    #[test]
    fn the_docs_list_is_current() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/pods.md")).unwrap();
        let start =
            doc.find(INPUTS_DOC_START).expect("docs/pods.md has the key inputs' start marker") + INPUTS_DOC_START.len();
        let end = doc.find(INPUTS_DOC_END).expect("docs/pods.md has the key inputs' end marker");
        assert_eq!(
            doc[start..end].trim(),
            inputs_markdown().trim(),
            "docs/pods.md's list of the KV compatibility key's inputs is stale: replace it with the output of \
             `cargo run -q -- kv-compat`"
        );
    }

    #[test]
    fn every_input_is_named_once() {
        let labels: Vec<String> = KEY_INPUTS.iter().map(|input| label(input.source)).collect();
        let unique: std::collections::BTreeSet<&String> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn the_key_reads_the_command_line_as_the_release_does() {
        let release = Release::newest_known();
        let written = strings(&["--model-path", "m", "--tensor-parallel-size", "2", "--page-size", "16"]);
        let abbreviated =
            strings(&["--model-path", "m", "--tp", "2", "--page-size=16", "--mem-fraction-static", "0.8"]);
        assert_eq!(key(&[decode(&written, &[])], release), key(&[decode(&abbreviated, &[])], release));
        let keyed = key(&[decode(&written, &[])], release);
        assert!(keyed.contains("decode --tensor-parallel-size=2\ndecode --page-size=16\n"), "{keyed}");
        assert!(!keyed.contains("mem-fraction"), "what the pairing does not depend on stays out: {keyed}");

        let other_page = strings(&["--model-path", "m", "--tensor-parallel-size", "2", "--page-size", "32"]);
        assert_ne!(key(&[decode(&other_page, &[])], release), keyed);
        let sharded =
            strings(&["--model-path", "m", "--tp-size", "2", "--page-size", "16", "--enable-kv-cache-sharding"]);
        assert_ne!(key(&[decode(&sharded, &[])], release), keyed, "an option kvpilot never writes");
        let layout = [EnvVar { name: "SGLANG_DSV4_KV_LAYOUT".into(), value: Some("v41".into()), value_from: None }];
        assert_ne!(key(&[decode(&written, &layout)], release), keyed);
        let other_image = Side { image: "lmsysorg/sglang:v0.5.23-cu130", ..decode(&written, &[]) };
        assert_ne!(key(&[other_image], release), keyed);
        let prefill = Side { role: FleetRole::Prefill, ..decode(&written, &[]) };
        assert_ne!(key(&[decode(&written, &[]), prefill], release), keyed, "the prefill side counts too");
    }
}
