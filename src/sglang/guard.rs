//! The guard's pure pipeline: a workload object → the SGLang servers in its pod templates
//! ([`inspect`]) → where each model's config.json comes from ([`Server::model`]) → a verdict per
//! server ([`check`]) → a JSON patch writing the rewrites back into the command lines
//! ([`rewrite_patch`]). Reading config.json (files, API server, hub) is the caller's.

use std::collections::BTreeMap;

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, jsonptr::PointerBuf};
use k8s_openapi::api::core::v1::EnvVar;
use serde::Serialize;
use serde_json::Value;

use super::cmdline::{self, AppendSite, Arg, ArgList, ArgSite, Entry, Invocation};
use super::flags::{self, DisaggregationMode, Parsed, ServerSettings};
use super::server_cli::{self, Reading};
use super::workload::{self, ContainerSite};
use crate::api::{ConfigMapKeyRef, FleetSpec, HubSource, ModelConfigSource, ModelSpec, PrefillSpec, SecretKeyRef};
use crate::policy::{self, ServerRole};
use crate::release::{self, Release, ReleaseChoice};

/// Annotation (workload or pod template) naming the model's config.json when `--model-path` is
/// not a hub id: `configmap/NAME`, `configmap/NAME/KEY` or `hub/ORG/NAME[@REVISION]`.
pub const MODEL_CONFIG_ANNOTATION: &str = "kvpilot.dev/model-config";
/// The same for the speculative draft model of `--speculative-draft-model-path`.
pub const DRAFT_MODEL_CONFIG_ANNOTATION: &str = "kvpilot.dev/draft-model-config";
/// Annotation naming a Secret (`NAME` or `NAME/KEY`, key `token` by default) with a hub token.
pub const HUB_TOKEN_ANNOTATION: &str = "kvpilot.dev/hub-token-secret";
/// Label (workload or namespace) asking for rewrites instead of refusals: `rewrite`.
pub const ON_INVALID_LABEL: &str = "kvpilot.dev/on-invalid";
/// Annotation on a pod template recording what the guard rewrote.
pub const REWRITES_ANNOTATION: &str = "kvpilot.dev/rewrites";

/// One SGLang server found in a container.
#[derive(Debug, Clone)]
pub struct Server {
    /// Where its container sits in the object, with its role and leader/worker.
    pub site: ContainerSite,
    /// The container's name.
    pub container: String,
    /// The SGLang release the image tag names (an image whose repository name contains `sglang`).
    pub release: Option<Release>,
    /// The release it is checked against ([`release::choose_for_workload`]), and why not the tag's, if
    /// not.
    pub checked_as: ReleaseChoice,
    pub release_warning: Option<String>,
    pub invocation: Invocation,
    /// The command line and environment read through the flag table, with the abbreviations of
    /// `checked_as`'s parser.
    pub parsed: Parsed,
    /// What `checked_as`'s own parser makes of the argv; None for `dynamo.sglang`, whose own
    /// parser reads the argv first (see [`DYNAMO_NOT_JUDGED`]).
    pub argv: Option<Reading>,
    /// The model and where its config.json is, or the warning saying why it cannot be found.
    pub model: Result<ModelSpec, String>,
    /// The speculative draft model of `--speculative-draft-model-path` and where its config.json
    /// is, or why it cannot be found; None without that flag.
    pub draft: Option<Result<ModelSpec, String>>,
    /// For a decode server paired with prefill servers ([`pair_with_prefill`]): the first prefill
    /// server's fleet settings, its words named in full as its release's parser reads them, for
    /// the handshake rules that compare what both fleets run (P3).
    pub paired_prefill: Option<FleetSpec>,
}

impl Server {
    /// `deploy/NAME container C (JSON path)`, with the template for kinds that have several.
    pub fn subject(&self, object: &str) -> String {
        subject(object, &self.site, &self.container)
    }

    /// The role its `--disaggregation-mode` gives it.
    pub fn role(&self) -> ServerRole {
        match self.parsed.settings.mode {
            DisaggregationMode::Decode => ServerRole::Decode,
            DisaggregationMode::Prefill => ServerRole::Prefill,
            DisaggregationMode::Null => ServerRole::WithoutPd,
        }
    }
}

fn subject(object: &str, site: &ContainerSite, container: &str) -> String {
    match &site.label {
        Some(label) => format!("{object} {label} container {container} ({})", site.path),
        None => format!("{object} container {container} ({})", site.path),
    }
}

/// Everything [`inspect`] found in one object.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// `deploy/NAME`.
    pub object: String,
    pub servers: Vec<Server>,
    /// Problems that concern no single server, each naming its subject.
    pub warnings: Vec<String>,
}

fn annotations(metadata: Option<&Value>) -> BTreeMap<String, String> {
    metadata
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .map(|map| map.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

fn strings(container: &Value, key: &str) -> Result<Vec<String>, String> {
    match container.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string).ok_or_else(|| format!("{key} holds a non-string item")))
            .collect(),
        Some(_) => Err(format!("{key} is not a list of strings")),
    }
}

/// Programs shipped in SGLang images that are not SGLang servers (routers, load balancers,
/// Dynamo's frontend, Mooncake): a container running one needs no "no server found" warning.
const NOT_SERVERS: &[&str] = &["sglang_router", "smg", "dynamo.frontend", "mooncake"];

/// The disaggregation mode a role's name or type stands for (`prefill`, `decode`, `decoder`).
fn role_mode(role: &str) -> Option<DisaggregationMode> {
    let role = role.to_ascii_lowercase();
    if role.contains("prefill") {
        Some(DisaggregationMode::Prefill)
    } else if role.contains("decode") {
        Some(DisaggregationMode::Decode)
    } else {
        None
    }
}

/// Finds every SGLang server in an object's containers ([`workload::read_containers`]) and
/// reads its command line (with the parser of the release it is checked against: its image
/// tag's, else `fallback`), env and model source. Containers without one give none.
pub fn inspect(object: &Value, fallback: &ReleaseChoice) -> Inspection {
    let name = workload::object_name(object);
    let discovery = workload::read_containers(object);
    let mut inspection = Inspection {
        object: name.clone(),
        servers: Vec::new(),
        warnings: discovery.warnings.iter().map(|w| format!("{name}: {w}")).collect(),
    };
    let object_annotations = annotations(object.get("metadata"));
    for site in discovery.sites {
        let container = &site.container;
        let mut merged = object_annotations.clone();
        // The pod template's annotation is the more specific one.
        merged.extend(site.annotations.clone());
        let container_name = container.get("name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string();
        let subject = subject(&name, &site, &container_name);
        let (command, args) = match (strings(container, "command"), strings(container, "args")) {
            (Ok(command), Ok(args)) => (command, args),
            (Err(e), _) | (_, Err(e)) => {
                inspection.warnings.push(format!("{subject}: {e}; not checked"));
                continue;
            }
        };
        let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
        let found = cmdline::find_invocations(&command, &args, &workload::literal_env(container));
        inspection.warnings.extend(found.warnings.iter().map(|w| format!("{subject}: {w}")));
        let runs_other_program = command.iter().chain(&args).any(|word| NOT_SERVERS.iter().any(|p| word.contains(p)));
        if found.invocations.is_empty() && image.contains("sglang") && found.warnings.is_empty() && !runs_other_program
        {
            inspection.warnings.push(format!(
                "{subject}: the image {image} is SGLang's but no `python -m sglang.launch_server`, `sglang serve` \
                 or `python -m dynamo.sglang` was found in command/args; not checked"
            ));
        }
        for invocation in found.invocations {
            // A Dynamo image's tag is Dynamo's version, not SGLang's.
            let image_release = if invocation.entry == Entry::Dynamo { None } else { release::from_image(image) };
            let (checked_as, release_warning) = release::choose_for_workload(image_release, fallback);
            let cli = server_cli::for_release(checked_as.release);
            // Dynamo hands SGLang's parser what its own leaves (see `DYNAMO_NOT_JUDGED`): the
            // settings are read as SGLang reads them, its refusals are not judged.
            let (server_argv, origin) = server_parser_argv(&invocation);
            let mut parsed = flags::read(&server_argv, cli);
            for occurrence in &mut parsed.occurrences {
                occurrence.name_at = origin[occurrence.name_at];
                occurrence.value_at = occurrence.value_at.map(|at| origin[at]);
            }
            let argv = (invocation.entry != Entry::Dynamo).then(|| {
                let mut reading = cli.read(&server_argv);
                for unseen in &mut reading.unseen_values {
                    unseen.at = origin[unseen.at];
                }
                reading
            });
            let mut env_warnings = read_env(container, &invocation, &mut parsed);
            parsed.warnings.append(&mut env_warnings);
            if let Some(role) = &site.role
                && let Some(expected) = role_mode(role)
                && expected != parsed.settings.mode
            {
                parsed.warnings.push(format!(
                    "the role {role} names the {} side but --disaggregation-mode is {}; checked as {} (SGLang runs by its \
                     flags)",
                    expected.as_str(),
                    parsed.settings.mode.as_str(),
                    parsed.settings.mode.as_str()
                ));
            }
            let model = model_spec(&merged, &parsed);
            let draft = draft_model_spec(&merged, &parsed);
            inspection.servers.push(Server {
                site: site.clone(),
                container: container_name.clone(),
                release: image_release,
                checked_as,
                release_warning,
                invocation,
                parsed,
                argv,
                model,
                draft,
                paired_prefill: None,
            });
        }
    }
    let mut servers: Vec<&mut Server> = inspection.servers.iter_mut().collect();
    if let Err(warning) = pair_with_prefill(&mut servers) {
        inspection.warnings.push(format!("{name}: {warning}"));
    }
    inspection
}

/// Gives the decode servers among `servers` their prefill side, from the prefill servers among
/// them: the transfer rule T1 compares their attention TP. The guard pairs the servers of one
/// object (the roles of a RoleBasedGroup, say); `kvpilot check` also pairs the servers of one
/// model across the objects of a namespace. Prefill servers that disagree pair with nothing.
pub fn pair_with_prefill(servers: &mut [&mut Server]) -> Result<(), String> {
    let prefill: Vec<PrefillSpec> = servers
        .iter()
        .filter(|s| s.parsed.settings.mode == DisaggregationMode::Prefill)
        .map(|s| super::server::prefill_side(&s.parsed.settings.decode, s.argv.as_ref().unwrap_or(&Reading::default())))
        .collect();
    let prefill_fleet = servers.iter().find(|s| s.parsed.settings.mode == DisaggregationMode::Prefill).map(|s| {
        let words: Vec<String> = s.invocation.args.iter().map(|arg| arg.text.clone()).collect();
        FleetSpec {
            extra_args: server_cli::for_release(s.checked_as.release).full_names(&words),
            ..s.parsed.settings.decode.clone()
        }
    });
    let Some(first) = prefill.first() else { return Ok(()) };
    let attention = policy::prefill_attention_tp;
    if prefill.iter().any(|p| attention(p) != attention(first)) {
        return Err(
            "the prefill servers run different attention TP sizes, so rule T1 is not checked against them".into()
        );
    }
    for server in servers.iter_mut().filter(|s| s.parsed.settings.mode == DisaggregationMode::Decode) {
        server.parsed.settings.disaggregation.prefill = Some(first.clone());
        server.paired_prefill = prefill_fleet.clone();
    }
    Ok(())
}

/// The `SGLANG_*` variables the rules read: from `env` (literal values), overridden by
/// `NAME=value` prefixes of the command. What cannot be seen becomes a warning.
fn read_env(container: &Value, invocation: &Invocation, parsed: &mut Parsed) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut env: Vec<EnvVar> = Vec::new();
    for var in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = var.get("name").and_then(Value::as_str).filter(|n| n.starts_with("SGLANG_")) else {
            continue;
        };
        match var.get("value").and_then(Value::as_str) {
            Some(value) => env.push(EnvVar { name: name.into(), value: Some(value.into()), value_from: None }),
            None if var.get("valueFrom").is_some() => {
                warnings.push(format!("env {name} comes from valueFrom, which kvpilot does not read; not checked"));
            }
            None => env.push(EnvVar { name: name.into(), value: Some(String::new()), value_from: None }),
        }
    }
    if container.get("envFrom").and_then(Value::as_array).is_some_and(|sources| !sources.is_empty()) {
        warnings.push("envFrom is not inspected: SGLANG_* variables set there are not checked".into());
    }
    for (name, value) in invocation.env.iter().filter(|(name, _)| name.starts_with("SGLANG_")) {
        env.retain(|var| &var.name != name);
        env.push(EnvVar { name: name.clone(), value: Some(value.clone()), value_from: None });
    }
    parsed.settings.decode.env = env;
    warnings
}

/// A hub repository id: `ORG/NAME` with no path-like start.
fn is_hub_id(path: &str) -> bool {
    let mut parts = path.split('/');
    let valid = |part: &str| {
        !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!((parts.next(), parts.next(), parts.next()), (Some(org), Some(name), None)
        if valid(org) && valid(name) && !org.starts_with('.'))
}

const MODEL_CONFIG_FORMS: &str = "configmap/NAME, configmap/NAME/KEY or hub/ORG/NAME[@REVISION]";

/// The model and its config source: the `kvpilot.dev/model-config` annotation, else a hub id
/// in `--model-path`.
fn model_spec(annotations: &BTreeMap<String, String>, parsed: &Parsed) -> Result<ModelSpec, String> {
    let settings = &parsed.settings;
    let located = Located {
        annotation: MODEL_CONFIG_ANNOTATION,
        flag: "--model-path",
        path: settings.model_path.clone(),
        revision: settings.revision.clone(),
    };
    located.model(annotations, settings)
}

/// The speculative draft model and its config source: the `kvpilot.dev/draft-model-config`
/// annotation, else a hub id in `--speculative-draft-model-path`; None without that flag.
fn draft_model_spec(annotations: &BTreeMap<String, String>, parsed: &Parsed) -> Option<Result<ModelSpec, String>> {
    let settings = &parsed.settings;
    let located = Located {
        annotation: DRAFT_MODEL_CONFIG_ANNOTATION,
        flag: "--speculative-draft-model-path",
        path: Some(settings.draft_model_path.clone()?),
        revision: settings.draft_revision.clone(),
    };
    Some(located.model(annotations, settings))
}

/// A model named on the command line by `flag`, whose config.json `annotation` can place.
struct Located {
    annotation: &'static str,
    flag: &'static str,
    path: Option<String>,
    revision: Option<String>,
}

impl Located {
    fn model(self, annotations: &BTreeMap<String, String>, settings: &ServerSettings) -> Result<ModelSpec, String> {
        let Self { annotation, flag, path, revision: flag_revision } = self;
        let token_secret_ref = annotations.get(HUB_TOKEN_ANNOTATION).map(|value| match value.split_once('/') {
            Some((name, key)) => SecretKeyRef { name: name.into(), key: key.into() },
            None => SecretKeyRef { name: value.clone(), key: "token".into() },
        });
        let (name, revision, config) = match annotations.get(annotation) {
            Some(value) => {
                let bad = || format!("annotation {annotation}: {value:?} is not one of {MODEL_CONFIG_FORMS}");
                let parts: Vec<&str> = value.trim().split('/').collect();
                match parts.as_slice() {
                    ["configmap", name] | ["configmap", name, _] if !name.is_empty() => {
                        let key = parts.get(2).filter(|k| !k.is_empty()).map_or("config.json", |k| k).to_string();
                        let reference = ConfigMapKeyRef { name: (*name).into(), key };
                        let config =
                            ModelConfigSource { config_map_ref: Some(reference), ..ModelConfigSource::default() };
                        (path.clone().unwrap_or_else(|| value.clone()), flag_revision, config)
                    }
                    ["hub", org, repo] => {
                        let (repo, revision) = match repo.split_once('@') {
                            Some((repo, revision)) => (repo, Some(revision.to_string())),
                            None => (*repo, None),
                        };
                        let id = format!("{org}/{repo}");
                        if !is_hub_id(&id) || revision.as_deref() == Some("") {
                            return Err(bad());
                        }
                        let hub = HubSource {
                            repo: Some(id.clone()),
                            revision: revision.clone(),
                            token_secret_ref,
                            ..HubSource::default()
                        };
                        (
                            path.clone().unwrap_or(id),
                            revision,
                            ModelConfigSource { hub: Some(hub), ..ModelConfigSource::default() },
                        )
                    }
                    _ => return Err(bad()),
                }
            }
            None => match path {
                Some(path) if is_hub_id(&path) => {
                    let hub = HubSource { revision: flag_revision.clone(), token_secret_ref, ..HubSource::default() };
                    (path, flag_revision, ModelConfigSource { hub: Some(hub), ..ModelConfigSource::default() })
                }
                Some(path) => {
                    return Err(format!(
                        "{flag} {path} is not a hub id, so kvpilot cannot read its config.json; add the annotation \
                         {annotation} ({MODEL_CONFIG_FORMS}) to the workload or its pod template"
                    ));
                }
                None => {
                    return Err(format!(
                        "no {flag} on the command line; add the annotation {annotation} ({MODEL_CONFIG_FORMS}) to \
                         the workload or its pod template"
                    ));
                }
            },
        };
        Ok(ModelSpec { name, revision, source: None, config, hybrid_swa_memory: settings.hybrid_swa_memory })
    }
}

/// One flag change: `from` and `to` as written on the command line (`to` empty: removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlagRewrite {
    pub rule: String,
    pub from: String,
    pub to: String,
    pub message: String,
}

impl std::fmt::Display for FlagRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.to.is_empty() {
            write!(f, "{} removed ({}: {})", self.from, self.rule, self.message)
        } else {
            write!(f, "{} → {} ({}: {})", self.from, self.to, self.rule, self.message)
        }
    }
}

/// A change to make to a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Replace the argument at `site` with `text`.
    Replace { site: ArgSite, text: String },
    /// Remove the argument at `site`.
    Remove { site: ArgSite },
    /// Add `args` at the end of the invocation.
    Append { args: Vec<String> },
}

/// The argv SGLang's server parser receives from an invocation, and for each of its items the
/// index of the invocation's argument it comes from. `sglang serve` (sglang/cli/serve.py in every
/// release 0.5.17–0.5.23) first takes out its own `--model-type` selector and turns a model path
/// written first, as a positional, into `--model-path`; the other launchers hand their arguments
/// on as written.
fn server_parser_argv(invocation: &Invocation) -> (Vec<Arg>, Vec<usize>) {
    let all = || (invocation.args.clone(), (0..invocation.args.len()).collect());
    if invocation.entry != Entry::Serve {
        return all();
    }
    let mut kept: Vec<(usize, &Arg)> = Vec::new();
    let mut args = invocation.args.iter().enumerate();
    while let Some((at, arg)) = args.next() {
        if arg.text == "--model-type" {
            args.next();
        } else if !arg.text.starts_with("--model-type=") {
            kept.push((at, arg));
        }
    }
    let mut argv = Vec::with_capacity(kept.len() + 1);
    let mut origin = Vec::with_capacity(kept.len() + 1);
    if let Some((at, first)) = kept.first()
        && !first.text.starts_with('-')
    {
        argv.push(Arg { text: "--model-path".into(), site: first.site.clone(), expands: false });
        origin.push(*at);
    }
    for (at, arg) in kept {
        argv.push(arg.clone());
        origin.push(at);
    }
    (argv, origin)
}

fn pointer(text: &str) -> Result<PointerBuf, String> {
    PointerBuf::parse(text).map_err(|e| format!("bad JSON pointer {text}: {e}"))
}

/// What the patch writes back into one server's command line: its flag rewrites, recorded in the
/// [`REWRITES_ANNOTATION`], and the edits making them (a verdict's `rewritten`).
#[derive(Debug, Clone, Copy)]
pub struct Rewritten<'a> {
    pub server: &'a Server,
    pub rewrites: &'a [FlagRewrite],
    pub edits: &'a [Edit],
}

/// The JSON patch that applies each server's rewrites to `object`: index-exact `replace` and
/// `remove` operations on `command`/`args` items (or one `replace` of a `-c` script) of the
/// container that holds them (a template patch's, where the patch sets them), and the
/// [`REWRITES_ANNOTATION`] on the template holding them. An edit several servers make to the
/// same list (the leader and workers of one base template) is made once.
pub fn rewrite_patch(object: &Value, rewritten: &[Rewritten<'_>]) -> Result<Patch, String> {
    let mut operations = Vec::new();
    let mut records: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Containers' lists in order, each with all its edits.
    let mut by_lists: BTreeMap<(String, String), Vec<(&Server, &Edit)>> = BTreeMap::new();
    // Servers reading the same list (a leader and its workers running a base template's
    // `command`) make the same edit to it: it is made once. (list pointer, edit) of those made.
    let mut made: Vec<(String, &Edit)> = Vec::new();
    for Rewritten { server, rewrites, edits } in rewritten {
        let site = &server.site;
        let list_of = |list: ArgList| {
            let owner = match list {
                ArgList::Command => &site.command_at,
                ArgList::Args => &site.args_at,
            };
            format!("{owner}/{}", list.key())
        };
        let new_edits: Vec<(String, &Edit)> = edits
            .iter()
            .map(|edit| {
                let list = match edit {
                    Edit::Replace { site: ArgSite::Item { list, .. } | ArgSite::ShellWord { list, .. }, .. }
                    | Edit::Remove { site: ArgSite::Item { list, .. } | ArgSite::ShellWord { list, .. } } => *list,
                    Edit::Append { .. } => match &server.invocation.append_at {
                        AppendSite::Item { list, .. } | AppendSite::Shell { list, .. } => *list,
                    },
                };
                (list_of(list), edit)
            })
            .filter(|(list, edit)| !made.iter().any(|(made_list, made_edit)| made_list == list && made_edit == edit))
            .collect();
        if new_edits.is_empty() {
            continue;
        }
        for (_, edit) in &new_edits {
            by_lists.entry((site.command_at.clone(), site.args_at.clone())).or_default().push((server, edit));
        }
        made.extend(new_edits);
        if let Some(at) = &site.annotations_at {
            let record = records.entry(at.clone()).or_default();
            record.extend(rewrites.iter().map(|r| format!("{}: {r}", server.container)));
        }
    }
    for ((command_at, args_at), edits) in &by_lists {
        operations.extend(container_operations(object, command_at, args_at, edits)?);
    }
    for (metadata, lines) in records {
        let text = lines.join("; ");
        let (path, value) = match object.pointer(&metadata) {
            None => (metadata, serde_json::json!({"annotations": {REWRITES_ANNOTATION: text}})),
            Some(meta) if meta.get("annotations").is_none_or(Value::is_null) => {
                (format!("{metadata}/annotations"), serde_json::json!({REWRITES_ANNOTATION: text}))
            }
            Some(_) => {
                (format!("{metadata}/annotations/{}", workload::escape(REWRITES_ANNOTATION)), Value::String(text))
            }
        };
        operations.push(PatchOperation::Add(AddOperation { path: pointer(&path)?, value }));
    }
    Ok(Patch(operations))
}

/// Bytes of a `-c` script to replace, and their replacement (empty: removed).
type ScriptEdit = (std::ops::Range<usize>, String);

fn container_operations(
    object: &Value,
    command_at: &str,
    args_at: &str,
    edits: &[(&Server, &Edit)],
) -> Result<Vec<PatchOperation>, String> {
    // Each list sits in the container (base template's or patch's) that sets it.
    let list_at = |list: ArgList| match list {
        ArgList::Command => command_at,
        ArgList::Args => args_at,
    };
    let mut operations = Vec::new();
    let mut removals: Vec<(ArgList, usize)> = Vec::new();
    // Scripts edited in place: (list, index) → edits by byte span.
    let mut scripts: BTreeMap<(ArgList, usize), Vec<ScriptEdit>> = BTreeMap::new();
    let mut appends: Vec<(AppendSite, Vec<String>)> = Vec::new();
    for (server, edit) in edits {
        match edit {
            Edit::Replace { site: ArgSite::Item { list, index }, text } => {
                operations.push(PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&format!("{}/{}/{index}", list_at(*list), list.key()))?,
                    value: Value::String(text.clone()),
                }));
            }
            Edit::Remove { site: ArgSite::Item { list, index } } => removals.push((*list, *index)),
            Edit::Replace { site: ArgSite::ShellWord { list, index, span }, text } => {
                scripts.entry((*list, *index)).or_default().push((span.clone(), cmdline::shell_quote(text)));
            }
            Edit::Remove { site: ArgSite::ShellWord { list, index, span } } => {
                scripts.entry((*list, *index)).or_default().push((span.clone(), String::new()));
            }
            Edit::Append { args } => appends.push((server.invocation.append_at.clone(), args.clone())),
        }
    }
    for (site, args) in &appends {
        match site {
            AppendSite::Item { list, .. } => {
                for arg in args {
                    operations.push(PatchOperation::Add(AddOperation {
                        path: pointer(&format!("{}/{}/-", list_at(*list), list.key()))?,
                        value: Value::String(arg.clone()),
                    }));
                }
            }
            AppendSite::Shell { list, index, offset } => {
                let text: String = args.iter().map(|a| format!(" {}", cmdline::shell_quote(a))).collect();
                scripts.entry((*list, *index)).or_default().push((*offset..*offset, text));
            }
        }
    }
    for ((list, index), mut spans) in scripts {
        let item = format!("{}/{}/{index}", list_at(list), list.key());
        let script = object.pointer(&item).and_then(Value::as_str).ok_or_else(|| format!("{item} is not a string"))?;
        // Word spans index the script as the kubelet expands it; where `$(VAR)` or `$$` changed
        // it, they do not index the text written in the object.
        let container = &edits[0].0.site.container;
        if cmdline::expand_references(script, &workload::literal_env(container)).0 != script {
            return Err(format!(
                "{item}: the script holds $(VAR) references or $$, so its words cannot be rewritten in place"
            ));
        }
        let mut text = script.to_string();
        spans.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
        for (span, replacement) in spans {
            let start = if replacement.is_empty() {
                // A removed word takes the blanks before it along.
                text[..span.start].trim_end_matches([' ', '\t']).len()
            } else {
                span.start
            };
            text.replace_range(start..span.end, &replacement);
        }
        operations
            .push(PatchOperation::Replace(ReplaceOperation { path: pointer(&item)?, value: Value::String(text) }));
    }
    // Removals last and from the highest index down, so every index is exact when applied.
    removals.sort_by_key(|(_, index)| std::cmp::Reverse(*index));
    for (list, index) in removals {
        operations.push(PatchOperation::Remove(RemoveOperation {
            path: pointer(&format!("{}/{}/{index}", list_at(list), list.key()))?,
        }));
    }
    Ok(operations)
}

/// Whether the object itself asks for rewrites: the label `kvpilot.dev/on-invalid: rewrite`
/// (a label, because that is what the mutating webhook's objectSelector can see).
pub fn asks_for_rewrite(object: &Value) -> bool {
    object.pointer(&format!("/metadata/labels/{}", workload::escape(ON_INVALID_LABEL))).and_then(Value::as_str)
        == Some("rewrite")
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::RetractionBackup;
    use crate::release::ReleaseChoice;

    pub(crate) fn pure_swa() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/configs/custom-pure-swa.json")).unwrap()
    }

    pub(crate) fn deployment(command: Value, args: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web-decode", "annotations": {MODEL_CONFIG_ANNOTATION: "configmap/mimo"}},
            "spec": {"template": {"metadata": {"labels": {"app": "decode"}}, "spec": {"containers": [
                {"name": "sidecar", "image": "busybox", "command": ["sleep", "inf"]},
                {"name": "sglang", "image": "lmsysorg/sglang:v0.5.23-cu129", "command": command, "args": args}
            ]}}}
        })
    }

    pub(crate) fn one_server(object: &Value) -> Server {
        let inspection = inspect(object, &ReleaseChoice::default_newest());
        assert_eq!(inspection.servers.len(), 1, "{:?}", inspection.warnings);
        inspection.servers.into_iter().next().unwrap()
    }

    #[test]
    fn servers_settings_env_and_model_source_are_read() {
        let object = deployment(
            json!(["sh", "-c"]),
            json!(["SGLANG_DISAGG_STAGING_BUFFER=1 exec python3 -m sglang.launch_server --model-path /models/mimo \
                    --disaggregation-mode decode --tp 2 --disaggregation-decode-retraction-backup host_pool"]),
        );
        let mut object = object;
        object["spec"]["template"]["spec"]["containers"][1]["env"] = json!([{"name": "SGLANG_ENABLE_UNIFIED_RADIX_TREE", "value": "1"}, {"name": "HF_TOKEN", "valueFrom": {}},
                   {"name": "SGLANG_X", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "b"}}}]);
        object["spec"]["template"]["spec"]["containers"][1]["envFrom"] = json!([{"configMapRef": {"name": "env"}}]);
        let server = one_server(&object);
        assert_eq!(
            server.subject("deploy/web-decode"),
            "deploy/web-decode container sglang (spec.template.spec.containers[1])"
        );
        assert_eq!(server.release, Some(crate::release::v0_5(23)));
        let settings = &server.parsed.settings;
        assert_eq!(settings.mode, DisaggregationMode::Decode);
        assert_eq!(settings.decode.tensor_parallel, 2);
        assert_eq!(settings.disaggregation.retraction_backup, Some(RetractionBackup::HostPool));
        let env: Vec<(&str, &str)> =
            settings.decode.env.iter().map(|v| (v.name.as_str(), v.value.as_deref().unwrap_or_default())).collect();
        assert_eq!(env, [("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1"), ("SGLANG_DISAGG_STAGING_BUFFER", "1")]);
        let warnings = server.parsed.warnings.join("\n");
        assert!(
            warnings.contains("env SGLANG_X comes from valueFrom") && warnings.contains("envFrom is not inspected")
        );
        let model = server.model.unwrap();
        assert_eq!(model.name, "/models/mimo");
        assert_eq!(model.config.config_map_ref.unwrap().key, "config.json");
    }

    #[test]
    fn model_sources_come_from_the_annotation_or_a_hub_id() {
        let server_with = |annotation: Option<&str>, path: &str| {
            let mut object =
                deployment(json!(["sglang", "serve", "--model-path", path, "--revision", "r1"]), json!([]));
            match annotation {
                Some(value) => {
                    object["spec"]["template"]["metadata"]["annotations"] = json!({MODEL_CONFIG_ANNOTATION: value})
                }
                None => object["metadata"]["annotations"] = json!({HUB_TOKEN_ANNOTATION: "hf/key"}),
            }
            one_server(&object).model
        };
        let hub = server_with(None, "openai/gpt-oss-20b").unwrap();
        let source = hub.config.hub.unwrap();
        assert_eq!((hub.name.as_str(), source.revision.as_deref()), ("openai/gpt-oss-20b", Some("r1")));
        assert_eq!(source.token_secret_ref.unwrap().key, "key");
        let annotated = server_with(Some("hub/XiaomiMiMo/MiMo-V2-Flash@abc"), "/models/x").unwrap();
        let source = annotated.config.hub.unwrap();
        assert_eq!(
            (source.repo.as_deref(), source.revision.as_deref()),
            (Some("XiaomiMiMo/MiMo-V2-Flash"), Some("abc"))
        );
        let config_map =
            server_with(Some("configmap/mimo/cfg.json"), "/models/x").unwrap().config.config_map_ref.unwrap();
        assert_eq!((config_map.name.as_str(), config_map.key.as_str()), ("mimo", "cfg.json"));
        for bad in ["configmap/", "hub/only-one", "s3/bucket", "hub/a/b@"] {
            let error = server_with(Some(bad), "/models/x").unwrap_err();
            assert!(error.contains(MODEL_CONFIG_ANNOTATION) && error.contains("configmap/NAME/KEY"), "{bad}: {error}");
        }
        let mut local = deployment(json!(["sglang", "serve", "--model-path", "/models/x"]), json!([]));
        local["metadata"]["annotations"] = json!({});
        let error = one_server(&local).model.unwrap_err();
        assert!(error.contains("/models/x is not a hub id") && error.contains(MODEL_CONFIG_ANNOTATION), "{error}");
    }

    #[test]
    fn objects_ask_for_rewrites_by_label() {
        let mut object = deployment(json!([]), json!([]));
        assert!(!asks_for_rewrite(&object));
        object["metadata"]["annotations"] = json!({ON_INVALID_LABEL: "rewrite"});
        assert!(!asks_for_rewrite(&object), "the webhook's objectSelector sees labels only");
        object["metadata"]["labels"] = json!({ON_INVALID_LABEL: "rewrite"});
        assert!(asks_for_rewrite(&object));
    }

    #[test]
    fn unreadable_containers_are_warnings() {
        let object = deployment(json!("python3 -m sglang.launch_server"), json!([]));
        let inspection = inspect(&object, &ReleaseChoice::default_newest());
        assert!(inspection.servers.is_empty());
        assert_eq!(
            inspection.warnings,
            [
                "deploy/web-decode container sglang (spec.template.spec.containers[1]): command is not a list of strings; not checked"
            ]
        );
        let no_server = deployment(json!(["/entrypoint.sh"]), json!([]));
        assert!(
            inspect(&no_server, &ReleaseChoice::default_newest()).warnings[0]
                .contains("no `python -m sglang.launch_server`, `sglang serve` or `python -m dynamo.sglang`")
        );
    }

    /// A role named or typed prefill/decode whose server's flag says otherwise is checked by the
    /// flag (SGLang runs by it), with a warning; a role that names no mode says nothing.
    #[test]
    fn a_role_that_disagrees_with_the_mode_flag_is_a_warning() {
        let service = |sub_component: &str, mode: &str| {
            json!({"componentType": "worker", "subComponentType": sub_component, "extraPodSpec": {"mainContainer": {
                "image": "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1", "command": ["python3", "-m", "dynamo.sglang"],
                "args": ["--model-path", "/models/m", "--disaggregation-mode", mode]}}})
        };
        let object = json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": "g", "annotations": {MODEL_CONFIG_ANNOTATION: "configmap/m"}},
            "spec": {"services": {"a": service("decode", "prefill"), "b": service("worker", "decode")}}});
        let inspection = inspect(&object, &ReleaseChoice::default_newest());
        let warnings: Vec<&Vec<String>> = inspection.servers.iter().map(|s| &s.parsed.warnings).collect();
        assert_eq!(inspection.servers[0].parsed.settings.mode, DisaggregationMode::Prefill);
        assert_eq!(
            *warnings[0],
            [
                "the role decode names the decode side but --disaggregation-mode is prefill; checked as prefill (SGLang runs by its flags)"
            ]
        );
        assert!(warnings[1].is_empty(), "{:?}", warnings[1]);
        assert_eq!(inspection.servers[0].release, None, "a Dynamo image's tag is not an SGLang release");
    }
}
