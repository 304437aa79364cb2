//! One server's verdict in its own flags: the settings its command line maps to
//! ([`server_spec`]), the verdict on them ([`check`]) with each violation on the flag that carries
//! it, and the flag rewrites rewrite mode makes, as the edits the guard's patch writes back.

use serde::Serialize;

use crate::api::{
    AttentionLayout, DisaggregationSpec, DraftModelSpec, EffectiveSettings, FleetSpec, InferenceDeploymentSpec,
    ModelConfigSource, ModelSpec, OnInvalid,
};
use crate::layout::LayoutError;
use crate::policy::{self, FieldNames, ModelConfigs, Outcome, Violation};
use crate::release::ReleaseChoice;
use crate::sglang::flags::{self, Kind};
use crate::sglang::guard::{Edit, FlagRewrite, ON_INVALID_LABEL, Rewritten, Server};
use crate::sglang::server::CACHE_FLAGS;
use crate::sglang::server_cli;

use super::{Assessed, cache_wiring, command_line};

/// A violation on the flag that carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlagFinding {
    /// The flag as written (`--disaggregation-decode-retraction-backup=host_pool`), or the
    /// default it stands for.
    pub flag: String,
    #[serde(flatten)]
    pub violation: Violation,
}

impl std::fmt::Display for FlagFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} (fix: {})", self.flag, self.violation.message, self.violation.fix)
    }
}

/// The verdict on one server.
#[derive(Debug, Clone)]
pub struct ServerVerdict {
    pub outcome: Outcome,
    pub layout: AttentionLayout,
    /// Violations left standing.
    pub findings: Vec<FlagFinding>,
    /// Flag rewrites made (rewrite mode).
    pub rewrites: Vec<FlagRewrite>,
    pub effective: EffectiveSettings,
    /// The SGLang release the server was checked against, and where it came from.
    pub release: ReleaseChoice,
    pub warnings: Vec<String>,
    edits: Vec<Edit>,
}

impl ServerVerdict {
    /// Whether the check read the speculative draft's config.json: only a DeepSeek-V4 model's
    /// (T11 compares the two sliding windows) and IQuest Q1's (its MTP draft checks) do, so a
    /// draft that could not be read is worth a word only then.
    pub fn reads_draft_config(&self) -> bool {
        unread_draft_config(&self.layout).is_some()
    }

    /// What the guard's patch writes back into `server`'s command line for this verdict
    /// ([`crate::sglang::guard::rewrite_patch`]).
    pub fn rewritten<'a>(&'a self, server: &'a Server) -> Rewritten<'a> {
        Rewritten { server, rewrites: &self.rewrites, edits: &self.edits }
    }
}

/// What the check assumes or skips when the draft's config.json of a model with `layout` was
/// not read; None where no rule reads it.
fn unread_draft_config(layout: &AttentionLayout) -> Option<&'static str> {
    if layout.has(crate::api::LayoutFeature::DeepseekV4) {
        Some("T11 took the draft's sliding window to be the model's")
    } else if layout.architecture == "IQuestQ1ForCausalLM" {
        Some(
            "IQuest Q1's MTP draft checks that read it (IQ10-IQ12, and IQ16 without --speculative-num-steps) were not made",
        )
    } else {
        None
    }
}

/// The findings that need no config.json, and the CLI rule's warnings: a command line in one
/// word (EXEC), then the flag the release's parser refuses (CLI), then a cache runtime the server
/// cannot reach (POD10). What callers that cannot read a server's config.json report alone
/// ([`check`] includes them).
pub fn argv_check(server: &Server) -> (Vec<FlagFinding>, Vec<String>) {
    let (refusal, warnings) = command_line::command_line_rule(server);
    let located = |violation: Violation| FlagFinding { flag: flag_text(server, violation.field), violation };
    let one_word = command_line::one_word_command_rule(server).map(located);
    let wiring = cache_wiring::rule(server).into_iter().map(located);
    let findings = one_word.into_iter().chain(refusal.map(|violation| refused_flag(server, violation))).chain(wiring);
    (findings.collect(), warnings)
}

/// The CLI rule's violation on the flag the release's parser names in it.
fn refused_flag(server: &Server, violation: Violation) -> FlagFinding {
    let (flag, _) = server_cli::refusal_subject_and_fix(&violation.message, server.checked_as.release);
    FlagFinding { flag, violation }
}

/// The settings a server's command line maps to, as the spec the policy reads: the model, the
/// flag table's settings (`on_invalid` as asked), the command line's words for the rules that read
/// a flag kvpilot keeps no setting for, and the prefill servers it is paired with.
pub fn server_spec(server: &Server, on_invalid: OnInvalid) -> InferenceDeploymentSpec {
    let settings = &server.parsed.settings;
    let model = server.model.clone().unwrap_or_else(|_| ModelSpec {
        name: settings.model_path.clone().unwrap_or_default(),
        revision: None,
        source: None,
        config: ModelConfigSource::default(),
        hybrid_swa_memory: settings.hybrid_swa_memory,
    });
    let words: Vec<String> = server.invocation.args.iter().map(|arg| arg.text.clone()).collect();
    InferenceDeploymentSpec {
        model,
        disaggregation: DisaggregationSpec {
            on_invalid,
            // The rules ask whether a draft model is given (SD2, SD4); its config.json comes apart.
            speculative_draft_model: settings.draft_model_path.as_ref().map(|path| DraftModelSpec {
                name: path.clone(),
                revision: settings.draft_revision.clone(),
                path: None,
                config: ModelConfigSource::default(),
            }),
            ..settings.disaggregation.clone()
        },
        // The command line's words, for the rules that read a flag kvpilot keeps no setting for
        // (M5: --disable-overlap-schedule).
        decode: FleetSpec {
            extra_args: server_cli::for_release(server.checked_as.release).full_names(&words),
            ..settings.decode.clone()
        },
        prefill: server.paired_prefill.clone().map(Box::new),
        router: None,
        rollout: Default::default(),
        sglang: None,
        cache: None,
        scheduling: None,
        placement: None,
        security: None,
    }
}

/// Checks one server against its model's config.json. With `rewrite`, the rewrites the policy
/// can make are made (and [`rewrite_patch`] writes them back); without, every violation stands
/// and its fix names the flag change.
pub fn check(server: &Server, configs: &ModelConfigs, rewrite: bool) -> Result<ServerVerdict, LayoutError> {
    let settings = &server.parsed.settings;
    let release = server.checked_as.clone();
    let assess = |on_invalid| {
        let spec = server_spec(server, on_invalid);
        super::assess(Assessed::Server { server, spec: &spec }, configs, &release)
    };
    let fixed = assess(OnInvalid::Rewrite)?;
    let strict = assess(OnInvalid::Reject)?;
    // SGLang's parser refuses before any rule runs: its finding comes first and the server does
    // not start, whatever the mode.
    // Nor is one that never starts: its words are not where the patch would put them.
    let refused = strict
        .verdict
        .violations
        .first()
        .is_some_and(|v| v.rule == policy::COMMAND_LINE.id || v.rule == policy::ONE_WORD_COMMAND.id);
    let layout = strict.layout;
    let mut warnings: Vec<String> = server.release_warning.iter().cloned().chain(release.warning()).collect();
    warnings.extend(strict.command_line_warnings);
    warnings.extend(layout.warnings.iter().cloned());
    warnings.extend(fixed.verdict.warnings.iter().cloned());
    warnings.extend(server.parsed.warnings.iter().cloned());
    if let (Some(path), None, Some(unread)) = (&settings.draft_model_path, &configs.draft, unread_draft_config(&layout))
    {
        warnings.push(format!("the config.json of the draft model {path} was not read: {unread}"));
    }
    // What rewrite mode changes, by the field it changes: applied with `rewrite`, named in each
    // violation's fix without.
    let fixed = fixed.verdict;
    let proposals: Vec<(&str, FlagRewrite, Vec<Edit>)> = fixed
        .rewrites
        .iter()
        .filter_map(|r| {
            let (rewrite, edits) = flag_rewrite(server, &r.field, &r.to, &r.rule, &r.message)?;
            Some((r.field.as_str(), rewrite, edits))
        })
        .collect();
    // A command line SGLang's parser refuses is not rewritten: where a flag lacks its value, taking
    // another flag out moves the next word into that value.
    let (outcome, violations, rewrites, edits, effective) = if rewrite && !refused {
        let edits = proposals.iter().flat_map(|(_, _, e)| e.clone()).collect();
        let rewrites = proposals.into_iter().map(|(_, r, _)| r).collect();
        (fixed.outcome, fixed.violations, rewrites, edits, fixed.effective)
    } else {
        let strict = strict.verdict;
        let violations = strict
            .violations
            .into_iter()
            .map(|mut v| {
                if let Some((_, proposal, _)) = proposals.iter().find(|(field, _, _)| *field == v.field) {
                    v.fix = format!(
                        "{}; or label the workload or namespace {ON_INVALID_LABEL}=rewrite to let kvpilot rewrite it",
                        change_text(proposal)
                    );
                }
                v
            })
            .collect();
        (strict.outcome, violations, Vec::new(), Vec::new(), strict.effective)
    };
    let findings = violations
        .into_iter()
        .map(|violation| match violation.rule == policy::COMMAND_LINE.id {
            true => refused_flag(server, violation),
            false => FlagFinding { flag: flag_text(server, violation.field), violation },
        })
        .collect();
    Ok(ServerVerdict { outcome, layout, findings, rewrites, effective, release, warnings, edits })
}

fn change_text(rewrite: &FlagRewrite) -> String {
    if rewrite.to.is_empty() { format!("remove {}", rewrite.from) } else { format!("use {}", rewrite.to) }
}

/// The prefill servers' flags that the policy's prefill-side fields stand for: the guard reads
/// them from the prefill servers it pairs with a decode server.
const PREFILL_FIELD_FLAGS: &[(&str, &str)] = &[
    ("spec.disaggregation.prefill.pipelineParallel", "--pipeline-parallel-size"),
    ("spec.disaggregation.prefill.attentionContextParallel", "--attn-cp-size"),
    ("spec.disaggregation.prefill.kvCacheSharding", "--enable-kv-cache-sharding"),
];

/// The names of the spec fields a verdict on a command line mentions: the flag each stands for
/// (the prefill servers' for the prefill side's), the container's env; a field no flag stands
/// for keeps its name.
pub(super) struct ServerFlags;

impl FieldNames for ServerFlags {
    fn name(&self, field: &str) -> String {
        if let Some((_, flag)) = PREFILL_FIELD_FLAGS.iter().find(|(prefill_field, _)| *prefill_field == field) {
            return format!("the prefill servers' {flag}");
        }
        if field == "spec.decode.env" {
            return "the container's env".into();
        }
        flags::for_field(field).map_or_else(|| field.to_string(), |flag| flag.name().to_string())
    }
}

/// The flag a policy field stands for, as written on this server's command line.
fn flag_text(server: &Server, field: &str) -> String {
    if field == "spec.decode.env" {
        let names: Vec<&str> = server.parsed.settings.decode.env.iter().map(|v| v.name.as_str()).collect();
        return format!("env {}", names.join(", "));
    }
    if let Some((_, flag)) = PREFILL_FIELD_FLAGS.iter().find(|(prefill_field, _)| *prefill_field == field) {
        return format!("the prefill servers' {flag}");
    }
    // A flag kvpilot writes for its cache runtime (`spec.cache`): the server's option.
    if let Some(flag) = CACHE_FLAGS.iter().find(|flag| flag.field == field) {
        return flag.names[0].to_string();
    }
    // An option kvpilot reads from extraArgs: `spec.decode.extraArgs[--option]`.
    if let Some(option) = field.strip_prefix("spec.decode.extraArgs[").and_then(|rest| rest.strip_suffix(']')) {
        return option.to_string();
    }
    let Some(flag) = flags::for_field(field) else { return field.to_string() };
    match server.parsed.last(flag) {
        Some(occurrence) => occurrence.written.clone(),
        None => format!("{} (not set)", flag.name()),
    }
}

/// The flag change for a policy rewrite of `field` to `to`, and the edits that make it.
fn flag_rewrite(server: &Server, field: &str, to: &str, rule: &str, message: &str) -> Option<(FlagRewrite, Vec<Edit>)> {
    let flag = flags::for_field(field)?;
    let occurrences: Vec<&flags::Occurrence> =
        server.parsed.occurrences.iter().filter(|o| std::ptr::eq(o.flag, flag)).collect();
    let args = &server.invocation.args;
    let from = occurrences.last().map_or_else(|| flag.name().to_string(), |o| o.written.clone());
    let (to_text, edits) = match flag.kind {
        Kind::Switch if to == "false" => {
            (String::new(), occurrences.iter().map(|o| Edit::Remove { site: args[o.name_at].site.clone() }).collect())
        }
        Kind::Switch => (flag.name().to_string(), vec![Edit::Append { args: vec![flag.name().to_string()] }]),
        Kind::Value if occurrences.is_empty() => (
            format!("{}={to}", flag.name()),
            vec![Edit::Append { args: vec![flag.name().to_string(), to.to_string()] }],
        ),
        Kind::Value => {
            let edits = occurrences
                .iter()
                .map(|o| match o.value_at {
                    Some(at) => Edit::Replace { site: args[at].site.clone(), text: to.to_string() },
                    None => {
                        let name = o.written.split_once('=').map_or(o.written.as_str(), |(name, _)| name);
                        Edit::Replace { site: args[o.name_at].site.clone(), text: format!("{name}={to}") }
                    }
                })
                .collect();
            let name = from.split_once('=').map_or(flag.name(), |(name, _)| name);
            (format!("{name}={to}"), edits)
        }
    };
    Some((FlagRewrite { rule: rule.into(), from, to: to_text, message: message.into() }, edits))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::RetractionBackup;
    use crate::release::ReleaseChoice;
    use crate::sglang::cmdline::{self, ArgList};
    use crate::sglang::flags::DisaggregationMode;
    use crate::sglang::guard::tests::{deployment, one_server, pure_swa};
    use crate::sglang::guard::{REWRITES_ANNOTATION, inspect, rewrite_patch};
    use crate::sglang::verdict::command_line::DYNAMO_NOT_JUDGED;

    /// Applies the rewrite patch with `json-patch` and inspects the result again.
    fn rewritten(object: &Value) -> (Value, Server) {
        let server = one_server(object);
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
        assert_eq!(verdict.outcome, Outcome::Rewritten, "{:?}", verdict.findings);
        let patch = rewrite_patch(object, &[verdict.rewritten(&server)]).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let again = one_server(&patched);
        let recheck = check(&again, &ModelConfigs::target(pure_swa()), false).unwrap();
        assert_eq!(recheck.outcome, Outcome::Valid, "{:?}", recheck.findings);
        (patched, again)
    }

    #[test]
    fn a_violation_names_the_flag_and_its_fix() {
        let object = deployment(
            json!(["python3", "-m", "sglang.launch_server"]),
            json!([
                "--model-path",
                "/models/mimo",
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup=host_pool"
            ]),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
        assert_eq!(verdict.outcome, Outcome::Rejected);
        assert_eq!(
            verdict.findings[0].to_string(),
            "--disaggregation-decode-retraction-backup=host_pool: Host-pool retraction does not support pure-SWA models. \
             (fix: use --disaggregation-decode-retraction-backup=cpu_tensor; or label the workload or namespace \
             kvpilot.dev/on-invalid=rewrite to let kvpilot rewrite it)"
        );
        assert!(verdict.edits.is_empty());
    }

    /// The host pool size is a flag on a command line, whatever field kvpilot's own resources give it.
    #[test]
    fn a_deepseek_v4_host_pool_size_is_named_as_its_flag() {
        let dsv4: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
        let object = deployment(
            json!(["python3", "-m", "sglang.launch_server"]),
            json!([
                "--model-path",
                "/models/v4",
                "--disaggregation-mode",
                "prefill",
                "--enable-hierarchical-cache",
                "--hicache-size=16"
            ]),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(dsv4), false).unwrap();
        let h7 = verdict.findings.iter().find(|f| f.violation.rule == "H7").map(ToString::to_string);
        assert_eq!(
            h7.as_deref(),
            Some(
                "--hicache-size: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio \
                 instead. (fix: drop --hicache-size (spec.cache.hostPoolSize where kvpilot renders it): DeepSeek-V4 \
                 sizes its host pools from its device pools by --hicache-ratio)"
            )
        );
    }

    #[test]
    fn the_storage_backend_and_the_radix_cache_are_read_for_s6_and_s7() {
        let llama: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
        let rules_for = |args: Value| {
            let object =
                deployment(json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/llama"]), args);
            let verdict = check(&one_server(&object), &ModelConfigs::target(llama.clone()), false).unwrap();
            verdict.findings.iter().map(|f| (f.violation.rule, f.flag.clone())).collect::<Vec<_>>()
        };
        assert_eq!(
            rules_for(json!([
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-enable-offload-kvcache",
                "--enable-hierarchical-cache"
            ])),
            [
                ("S6", "--disaggregation-decode-enable-offload-kvcache".to_string()),
                ("S7", "--enable-hierarchical-cache".to_string())
            ]
        );
        let with_backend_and_radix = json!([
            "--disaggregation-mode",
            "decode",
            "--disaggregation-decode-enable-offload-kvcache",
            "--hicache-storage-backend",
            "file",
            "--disaggregation-decode-enable-radix-cache",
            "--enable-hierarchical-cache"
        ]);
        assert_eq!(rules_for(with_backend_and_radix), []);
    }

    #[test]
    fn sglang_serve_takes_a_positional_model_path_and_its_own_model_type_flag() {
        // sglang/cli/serve.py removes `--model-type` and makes a first positional `--model-path`
        // before SGLang's server parser reads the rest.
        let object = deployment(
            json!(["sglang", "serve"]),
            json!([
                "/models/mimo",
                "--model-type",
                "llm",
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup",
                "host_pool"
            ]),
        );
        let server = one_server(&object);
        assert_eq!(server.parsed.settings.model_path.as_deref(), Some("/models/mimo"));
        assert!(argv_check(&server).0.is_empty(), "no refusal of the positional or of --model-type");
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
        let patch = serde_json::to_value(rewrite_patch(&object, &[verdict.rewritten(&server)]).unwrap()).unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "replace", "path": "/spec/template/spec/containers/1/args/6", "value": "cpu_tensor"})
        );
    }

    #[test]
    fn array_rewrites_are_index_exact() {
        let object = deployment(
            json!([
                "python3",
                "-m",
                "sglang.launch_server",
                "--disaggregation-decode-enable-radix-cache",
                "--model-path",
                "/models/mimo"
            ]),
            json!([
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup",
                "host_pool",
                "--disaggregation-decode-enable-radix-cache",
                "--mem-fraction-static",
                "0.8",
                "--disaggregation-decode-retraction-backup=host_pool",
            ]),
        );
        let server = one_server(&object);
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
        let patch = serde_json::to_value(rewrite_patch(&object, &[verdict.rewritten(&server)]).unwrap()).unwrap();
        let base = "/spec/template/spec/containers/1";
        assert_eq!(
            patch,
            json!([
                {"op": "replace", "path": format!("{base}/args/3"), "value": "cpu_tensor"},
                {"op": "replace", "path": format!("{base}/args/7"), "value": "--disaggregation-decode-retraction-backup=cpu_tensor"},
                {"op": "remove", "path": format!("{base}/args/4")},
                {"op": "remove", "path": format!("{base}/command/3")},
                {"op": "add", "path": "/spec/template/metadata/annotations", "value": {REWRITES_ANNOTATION:
                    "sglang: --disaggregation-decode-retraction-backup=host_pool → --disaggregation-decode-retraction-backup=cpu_tensor \
                     (R8: --disaggregation-decode-retraction-backup=host_pool requires UnifiedRadixCache with HiCache attached.); \
                     sglang: --disaggregation-decode-enable-radix-cache removed (R16: --disaggregation-decode-enable-radix-cache \
                     does not support SWA-compress models (e.g. Gemma4 / MiMo-V2) yet.)"}}
            ])
        );
        let (patched, again) = rewritten(&object);
        let container = &patched["spec"]["template"]["spec"]["containers"][1];
        assert_eq!(
            container["command"],
            json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"])
        );
        assert_eq!(container["args"].as_array().unwrap().len(), 7);
        assert_eq!(again.parsed.settings.disaggregation.retraction_backup, Some(RetractionBackup::CpuTensor));
        assert!(!again.parsed.settings.disaggregation.decode_radix_cache);
    }

    #[test]
    fn shell_script_rewrites_edit_the_words_in_place() {
        let script = "set -e\nexec python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \\\n  \
                      --disaggregation-decode-enable-radix-cache \\\n  --disaggregation-decode-retraction-backup 'host_pool' \
                      && echo done";
        let object = deployment(json!(["/bin/bash", "-lc", script]), json!([]));
        let (patched, _) = rewritten(&object);
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"][1]["command"][2],
            "set -e\nexec python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \\\n \\\n  \
             --disaggregation-decode-retraction-backup cpu_tensor && echo done"
        );
    }

    #[test]
    fn the_rewrite_annotation_joins_existing_annotations() {
        let mut object = deployment(
            json!([
                "sglang",
                "serve",
                "--model-path",
                "/models/mimo",
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup",
                "host_pool"
            ]),
            json!([]),
        );
        object["spec"]["template"]["metadata"]["annotations"] = json!({"team": "a"});
        let (patched, _) = rewritten(&object);
        let annotations = &patched["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["team"], "a");
        assert!(
            annotations[REWRITES_ANNOTATION]
                .as_str()
                .unwrap()
                .contains("→ --disaggregation-decode-retraction-backup=cpu_tensor")
        );
    }

    #[test]
    fn prefill_servers_are_checked_against_prefill_rules_only() {
        let object = deployment(
            json!(["sglang", "serve", "--model-path", "/models/mimo"]),
            json!([
                "--disaggregation-mode",
                "prefill",
                "--disaggregation-decode-retraction-backup",
                "host_pool",
                "--disaggregation-decode-enable-radix-cache"
            ]),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), true).unwrap();
        let rules: Vec<&str> = verdict.findings.iter().map(|f| f.violation.rule).collect();
        assert_eq!(rules, ["S1"]);
        assert!(verdict.edits.is_empty());
    }

    #[test]
    fn lmcache_is_named_on_the_flag_for_pd_servers_and_checked_for_conflicts_on_colocated_ones() {
        let rules_of = |args: Value| -> Vec<(&'static str, String)> {
            let object =
                deployment(json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"]), args);
            let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
            verdict.findings.into_iter().map(|f| (f.violation.rule, f.flag)).collect()
        };
        assert_eq!(
            rules_of(json!(["--disaggregation-mode", "prefill", "--enable-lmcache"])),
            [("L7", "--enable-lmcache".to_string())]
        );
        // Without PD disaggregation LMCache is allowed, but not beside HiCache.
        assert!(rules_of(json!(["--enable-lmcache"])).is_empty());
        assert_eq!(
            rules_of(json!(["--enable-lmcache", "--enable-hierarchical-cache"])),
            [("L1", "--enable-lmcache".to_string())]
        );
        // On a decode server the radix cache is off unless decode radix cache is on (L3), and PD refuses LMCache (L7).
        let decode: Vec<&str> = rules_of(json!(["--disaggregation-mode", "decode", "--enable-lmcache"]))
            .into_iter()
            .map(|(rule, _)| rule)
            .collect();
        assert_eq!(decode, ["L3", "L7"]);
    }

    /// `$$` and resolved `$(VAR)` change the script the reader splits; its word spans then do not
    /// index the written text, so the script is not rewritten (the webhook says so) rather than
    /// corrupted.
    #[test]
    fn scripts_the_kubelet_expands_are_not_rewritten_by_span() {
        let script = "echo $$PPID; exec python3 -m sglang.launch_server --model-path /models/m --disaggregation-mode \
                      decode --disaggregation-decode-retraction-backup host_pool";
        let object = deployment(json!(["sh", "-c", script]), json!([]));
        let server = one_server(&object);
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
        assert!(!verdict.edits.is_empty());
        let error = rewrite_patch(&object, &[verdict.rewritten(&server)]).unwrap_err();
        assert_eq!(
            error,
            "/spec/template/spec/containers/1/command/2: the script holds $(VAR) references or $$, so its words cannot \
             be rewritten in place"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// Words SGLang command lines are made of: table flags in both forms, values good and bad,
        /// unknown flags, and noise.
        fn word() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("--disaggregation-mode".to_string()),
                Just("decode".to_string()),
                Just("prefill".to_string()),
                Just("--disaggregation-decode-retraction-backup".to_string()),
                Just("host_pool".to_string()),
                Just("--disaggregation-decode-retraction-backup=host_pool".to_string()),
                Just("--disaggregation-decode-enable-radix-cache".to_string()),
                Just("--enable-hierarchical-cache".to_string()),
                Just("--mamba-radix-cache-strategy=extra_buffer_lazy".to_string()),
                Just("--enable-unified-memory".to_string()),
                Just("--tp".to_string()),
                Just("2".to_string()),
                Just("--dcp-size=2".to_string()),
                Just("--mem-fraction-static".to_string()),
                "[a-z0-9 '\"=-]{0,10}",
            ]
        }

        fn object(words: &[String], script: bool) -> Value {
            if script {
                let line = words.iter().map(|w| cmdline::shell_quote(w)).collect::<Vec<_>>().join(" ");
                deployment(
                    json!(["sh", "-c", format!("exec python3 -m sglang.launch_server {line} && echo done")]),
                    json!([]),
                )
            } else {
                deployment(json!(["python3", "-m", "sglang.launch_server"]), json!(words))
            }
        }

        /// Found by the property below: `--disaggregation-decode-retraction-backup` lacks its value
        /// (argparse refuses it), and taking the decode radix flag out to fix R2 made `host_pool` that
        /// value. A refused command line gets no rewrite.
        #[test]
        fn a_command_line_the_parser_refuses_is_not_rewritten() {
            let words: Vec<String> = [
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup",
                "--disaggregation-decode-enable-radix-cache",
                "host_pool",
            ]
            .map(String::from)
            .to_vec();
            let object = object(&words, false);
            let server = one_server(&object);
            let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
            assert_eq!(verdict.outcome, Outcome::Rejected);
            assert!(verdict.findings.iter().any(|f| f.violation.rule == "CLI"), "{:?}", verdict.findings);
            assert!(verdict.rewrites.is_empty(), "{:?}", verdict.rewrites);
            assert!(rewrite_patch(&object, &[verdict.rewritten(&server)]).unwrap().0.is_empty());
        }

        proptest! {
            /// Whatever the command line, the rewrite patch applies to the object, touches only its
            /// command line and annotation, and what it leaves is what the policy settled on.
            #[test]
            fn rewrite_patches_apply_and_leave_the_settled_settings(
                words in prop::collection::vec(word(), 0..14),
                script in any::<bool>(),
            ) {
                let object = object(&words, script);
                let server = one_server(&object);
                let verdict = check(&server, &ModelConfigs::target(pure_swa()), true).unwrap();
                let patch = rewrite_patch(&object, &[verdict.rewritten(&server)]).unwrap();
                let mut patched = object.clone();
                json_patch::patch(&mut patched, &patch).unwrap();
                let again = one_server(&patched);
                if verdict.outcome != Outcome::Rejected {
                    let recheck = check(&again, &ModelConfigs::target(pure_swa()), false).unwrap();
                    prop_assert_eq!(recheck.outcome, Outcome::Valid, "{:?} → {:?}", words, recheck.findings);
                }
                prop_assert_eq!(&again.parsed.settings.disaggregation.retraction_backup, &verdict_backup(&server, &verdict));
                let mut untouched = patched.clone();
                untouched["spec"]["template"]["spec"]["containers"][1] = object["spec"]["template"]["spec"]["containers"][1].clone();
                untouched["spec"]["template"]["metadata"] = object["spec"]["template"]["metadata"].clone();
                prop_assert_eq!(untouched, object);
            }
        }

        /// The retraction backup a server runs with after the rewrites of `verdict`.
        fn verdict_backup(server: &Server, verdict: &ServerVerdict) -> Option<RetractionBackup> {
            let rewritten =
                verdict.rewrites.iter().any(|r| r.from.starts_with("--disaggregation-decode-retraction-backup"));
            if rewritten {
                Some(RetractionBackup::CpuTensor)
            } else {
                server.parsed.settings.disaggregation.retraction_backup
            }
        }
    }

    #[test]
    fn decode_servers_are_paired_with_the_prefill_servers_of_their_object() {
        let gpt_oss: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/gpt-oss-20b.json")).unwrap();
        // Up to 0.5.21 mooncake needs equal attention TP on both sides for a hybrid-SWA model (T1);
        // from 0.5.22 it slices SWA state head by head and allows a different TP.
        let role = |name: &str, mode: &str, tp: &str| {
            json!({"name": name, "template": {"spec": {"containers": [{"name": name, "image": "lmsysorg/sglang:v0.5.21",
                "command": ["sglang", "serve", "--model-path", "openai/gpt-oss-20b", "--disaggregation-mode", mode, "--tp", tp]}]}}})
        };
        let group = |prefill_tp: &str, decode_tp: &str| {
            json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "pd"},
                "spec": {"roles": [role("prefill", "prefill", prefill_tp), role("decode", "decode", decode_tp)]}})
        };
        let verdicts = |object: &Value| -> Vec<ServerVerdict> {
            inspect(object, &ReleaseChoice::default_newest())
                .servers
                .iter()
                .map(|s| check(s, &ModelConfigs::target(gpt_oss.clone()), false).unwrap())
                .collect()
        };
        let mismatched = verdicts(&group("2", "4"));
        assert_eq!(mismatched[0].outcome, Outcome::Valid);
        let finding = &mismatched[1].findings[0];
        assert_eq!((finding.violation.rule, finding.flag.as_str()), ("T1", "--tp=4"));
        assert!(finding.violation.message.contains("different TP sizes for non-MLA SWA hybrid models"), "{finding}");
        assert!(finding.violation.fix.contains("--tensor-parallel-size"), "{finding}");
        let matched = verdicts(&group("4", "4"));
        assert!(matched.iter().all(|v| v.outcome == Outcome::Valid));
        assert!(!matched[1].warnings.iter().any(|w| w.contains("T1")), "{:?}", matched[1].warnings);
        let newer = serde_json::to_string(&group("2", "4")).unwrap().replace("v0.5.21", "v0.5.23");
        let newer = verdicts(&serde_json::from_str(&newer).unwrap());
        assert!(newer.iter().all(|v| v.outcome == Outcome::Valid), "0.5.23 allows a different TP on mooncake");
        assert_eq!(newer[1].release.release, crate::release::v0_5(23));
    }

    #[test]
    fn a_decode_server_compares_its_deepseek_v4_kv_layout_with_its_paired_prefill_servers() {
        let dsv4: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
        let role = |name: &str, layout: Option<&str>| {
            let env: Vec<Value> =
                layout.iter().map(|value| json!({"name": "SGLANG_DSV4_KV_LAYOUT", "value": value})).collect();
            json!({"name": name, "template": {"spec": {"containers": [{"name": name, "image": "lmsysorg/sglang:v0.5.23",
                "env": env, "command": ["sglang", "serve", "--model-path", "deepseek-ai/DeepSeek-V4",
                "--disaggregation-mode", name]}]}}})
        };
        let group = |prefill: Option<&str>, decode: Option<&str>| {
            json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": "pd"},
                "spec": {"roles": [role("prefill", prefill), role("decode", decode)]}})
        };
        let p3 = |object: &Value| -> Vec<String> {
            let inspection = inspect(object, &ReleaseChoice::default_newest());
            let decode =
                inspection.servers.iter().find(|s| s.parsed.settings.mode == DisaggregationMode::Decode).unwrap();
            let verdict = check(decode, &ModelConfigs::target(dsv4.clone()), false).unwrap();
            verdict.findings.iter().filter(|f| f.violation.rule == "P3").map(|f| f.violation.message.clone()).collect()
        };
        assert_eq!(
            p3(&group(Some("v41"), None)),
            ["KV layout mismatch: prefill server has kv_layout=v41,c4:v41,c128:v41, but decode server has \
              kv_layout=v4,c4:v4,c128:v4. Both servers must use the same --dsv4-attn-backend and SGLANG_DSV4_KV_LAYOUT."]
        );
        assert!(p3(&group(Some("v41"), Some("V41"))).is_empty());
        assert!(p3(&group(None, None)).is_empty());
    }

    /// Dynamo's own parser reads the argv before SGLang's: its settings are read as SGLang reads what
    /// it hands on, its refusals are not judged.
    #[test]
    fn dynamo_servers_are_read_but_their_argv_is_not_judged() {
        let object = deployment(
            json!(["python3", "-m", "dynamo.sglang"]),
            json!(["--model-path", "/models/mimo", "--tp", "2", "--migration-limit", "3", "--cuda-graph-bs", "8"]),
        );
        let server = one_server(&object);
        assert_eq!((server.argv.as_ref(), server.parsed.settings.decode.tensor_parallel), (None, 2));
        let verdict = check(&server, &ModelConfigs::target(pure_swa()), false).unwrap();
        assert!(verdict.findings.iter().all(|f| f.violation.rule != "CLI"), "{:?}", verdict.findings);
        assert!(verdict.warnings.iter().any(|w| w == DYNAMO_NOT_JUDGED), "{:?}", verdict.warnings);
        // The same argv through SGLang's own launcher is refused.
        let object = deployment(
            json!(["python3", "-m", "sglang.launch_server"]),
            object["spec"]["template"]["spec"]["containers"][1]["args"].clone(),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
        assert_eq!(
            verdict.findings[0].violation.message,
            "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"
        );
    }

    /// A value kvpilot cannot see is said once: by the flag table for its flags, by the release's
    /// parser for values it would convert or check, not at all for free strings.
    #[test]
    fn unseen_values_are_warned_about_once() {
        let object = deployment(
            json!(["python3", "-m", "sglang.launch_server", "--model-path", "/models/mimo"]),
            json!(["--tp-size", "$(TP)", "--nnodes=$(N)", "--host", "$(POD_IP)"]),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(pure_swa()), false).unwrap();
        let about = |text: &str| verdict.warnings.iter().filter(|w| w.contains(text)).count();
        assert_eq!((about("$(TP)"), about("--nnodes $(N)"), about("$(POD_IP)")), (1, 1, 0), "{:?}", verdict.warnings);
    }

    /// The policy's warnings about a command line name its flags, not the spec fields they map to.
    #[test]
    fn a_server_s_warnings_name_its_flags() {
        let llama: Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/llama-3.1-8b-instruct.json")).unwrap();
        let object = deployment(
            json!(["python3", "-m", "sglang.launch_server"]),
            json!([
                "--model-path",
                "/models/llama",
                "--disaggregation-mode",
                "decode",
                "--disaggregation-decode-retraction-backup",
                "cpu_tensor",
                "--hicache-ratio",
                "2",
                "--radix-eviction-policy",
                "lru"
            ]),
        );
        let verdict = check(&one_server(&object), &ModelConfigs::target(llama), false).unwrap();
        for expected in [
            "R12: without --disaggregation-decode-enable-radix-cache SGLang 0.5.23 disables the decode servers' radix \
             cache (it logs \"Radix cache is disabled for decode server\"), so --radix-eviction-policy does nothing there; \
             turn decodeRadixCache on to use it",
            "--hicache-ratio has no effect: the effective retraction backup is cpu_tensor and neither hierarchical cache \
             nor decode offload builds a host pool",
        ] {
            assert!(verdict.warnings.iter().any(|w| w == expected), "{expected:?} not among {:?}", verdict.warnings);
        }
    }

    /// A whole command line in one `command` word (a YAML folded scalar) never starts: the kubelet
    /// runs the word as a file name. Said first, and its flags are still read as once split.
    #[test]
    fn a_command_line_in_one_command_word_never_starts_and_its_flags_are_still_checked() {
        let line = "python3 -m sglang.launch_server --model-path /models/mimo --disaggregation-mode decode \
                    --disaggregation-decode-retraction-backup host_pool";
        let object = deployment(json!([line]), json!(["--tp", "2"]));
        let server = one_server(&object);
        assert_eq!(server.invocation.one_word, Some((ArgList::Command, 0)));
        assert_eq!(server.parsed.settings.decode.tensor_parallel, 2, "the args after it are its arguments");
        for rewrite in [false, true] {
            let verdict = check(&server, &ModelConfigs::target(pure_swa()), rewrite).unwrap();
            assert_eq!(verdict.outcome, Outcome::Rejected, "rewrite {rewrite}");
            let rules: Vec<&str> = verdict.findings.iter().map(|f| f.violation.rule).collect();
            assert_eq!(rules[0], "EXEC", "{rules:?}");
            assert!(rules.contains(&"R2"), "the flags inside are checked: {rules:?}");
            let exec = verdict.findings[0].to_string();
            assert!(exec.contains("command[0] is a whole command line in one word"), "{exec}");
            assert!(exec.contains("[\"sh\", \"-c\""), "the fix: {exec}");
            assert!(
                verdict.edits.is_empty() && verdict.rewrites.is_empty(),
                "a container that never starts is not patched"
            );
        }
        let (refusals, _) = argv_check(&server);
        assert_eq!(refusals.iter().map(|f| f.violation.rule).collect::<Vec<_>>(), ["EXEC"], "needs no config.json");

        // Split into words, or run through a shell, it starts, and only its flags are judged.
        let split = deployment(
            json!(["python3", "-m", "sglang.launch_server"]),
            json!(line.split(' ').skip(3).collect::<Vec<_>>()),
        );
        assert_eq!(one_server(&split).invocation.one_word, None);
        let shell = deployment(json!(["sh", "-c", line]), json!(null));
        assert_eq!(one_server(&shell).invocation.one_word, None);
        // Under the image's entrypoint (no command) an args item may be a shell's script: not judged.
        let under_entrypoint = deployment(json!(null), json!([line]));
        assert!(inspect(&under_entrypoint, &ReleaseChoice::default_newest()).servers.is_empty());
    }
}
