//! `kvpilot render -f PATH... [--output yaml|json] [--offline]`: the objects the controller
//! would apply for each InferenceDeployment, for review in a GitOps pull request, with the
//! SGLang flags of its effective settings (`sglangArgs`) in the header comments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::SglangVersionArg;
use super::check::{Assessed, Ending, Prepared, assess_all, finish, nothing_to_check, prepare};
use super::report::Unchecked;
use super::serve::LogFormat;
use crate::controller::desired::desired_state;
use crate::policy::Outcome;
use crate::sglang::cmdline::shell_quote;
use crate::source::DEFAULT_HUB_ENDPOINT;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum RenderFormat {
    Yaml,
    Json,
}

#[derive(Args, Debug)]
pub(crate) struct RenderArgs {
    /// A manifest file or directory (recursed). Repeatable.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// `yaml`: documents with the verdict in comments; `json`: one v1 List.
    #[arg(long, short = 'o', value_enum, default_value_t = RenderFormat::Yaml)]
    output: RenderFormat,
    /// Do not fetch hub sources; resources that need one are not rendered (exit 3, unless
    /// --allow-unchecked).
    #[arg(long)]
    offline: bool,
    /// Skip resources whose config.json could not be read with a warning instead of exit 3.
    #[arg(long)]
    allow_unchecked: bool,
    /// Hub endpoint for hub sources that do not name one.
    #[arg(long, env = "KVPILOT_HUB_ENDPOINT", default_value = DEFAULT_HUB_ENDPOINT)]
    hub_endpoint: String,
    #[command(flatten)]
    images: super::ImageArgs,
    /// The log format of the cache runtime sidecars: the operator gives them its own
    /// --log-format (the chart's logFormat).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    runtime_log_format: LogFormat,
    /// Render a PodMonitor per fleet instead of scrape annotations, as the operator does with
    /// --pod-monitors (the chart's metrics.podMonitor.enabled).
    #[arg(long)]
    pod_monitors: bool,
    #[command(flatten)]
    sglang: SglangVersionArg,
}

pub(crate) fn run(args: &RenderArgs) -> ExitCode {
    let Prepared { runtime, set, mut errors, hub, default_release } =
        match prepare("render", &args.paths, args.offline, &args.sglang) {
            Ok(prepared) => prepared,
            Err(code) => return code,
        };
    let options = args.images.render_options(default_release, args.runtime_log_format, args.pod_monitors);
    if errors.is_empty() && set.deployments.is_empty() {
        errors.push(match nothing_to_check(&set) {
            Some(nothing) => nothing,
            None => "nothing to render: the input holds no InferenceDeployment (render shows what kvpilot would \
                     create for one); to check the SGLang servers of these workloads, run `kvpilot check -f` on them"
                .to_string(),
        });
    }
    let mut yaml = String::new();
    let mut items: Vec<Value> = Vec::new();
    let mut rejected = false;
    let mut unchecked = Vec::new();
    for (index, result) in
        runtime.block_on(assess_all(&set, hub.as_ref(), &args.hub_endpoint, &options.default_release))
    {
        let found = &set.deployments[index];
        let assessment = match result {
            Ok(Assessed::Report(assessment)) => assessment,
            Ok(Assessed::Unchecked(reason)) => {
                yaml += &format!("# {}: not checked, no objects (see stderr)\n", found.name());
                unchecked.push(Unchecked::new(found.name(), found.location.to_string(), reason));
                continue;
            }
            Ok(Assessed::UnknownRelease(reason)) => {
                rejected = true;
                eprintln!("kvpilot render: {} is rejected; nothing would be created:\n  {reason}", found.name());
                yaml += &format!("# {}: rejected, no objects (see stderr)\n", found.name());
                continue;
            }
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let verdict = &assessment.verdict;
        if verdict.outcome == Outcome::Rejected {
            rejected = true;
            eprintln!("kvpilot render: {} is rejected; nothing would be created:", found.name());
            for violation in &verdict.violations {
                eprintln!("  {violation}");
            }
            yaml += &format!("# {}: rejected, no objects (see stderr)\n", found.name());
            continue;
        }
        let desired = desired_state(&found.resource, &assessment, &options);
        yaml += &format!("# {}: {} (revision {})\n", found.name(), verdict.outcome.as_str(), desired.decode.revision);
        for rewrite in &verdict.rewrites {
            yaml +=
                &format!("#   rewritten {}: {} -> {} ({})\n", rewrite.field, rewrite.from, rewrite.to, rewrite.rule);
        }
        let args = crate::sglang::args::sglang_args(&found.resource.spec, verdict, assessment.release.release);
        let line = |args: &[String]| args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
        yaml += &format!("#   sglangArgs decode:  {}\n", line(&args.decode));
        yaml += &format!("#   sglangArgs prefill: {}\n", line(&args.prefill));
        for object in desired.objects() {
            yaml += "---\n";
            yaml += &serde_norway::to_string(&object).unwrap_or_default();
            items.push(object);
        }
    }
    let rendered = match args.output {
        RenderFormat::Yaml => yaml,
        RenderFormat::Json => {
            serde_json::to_string_pretty(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
                .unwrap_or_default()
                + "\n"
        }
    };
    let ending = Ending { errors: &errors, rejected, unchecked: &unchecked, allow_unchecked: args.allow_unchecked };
    finish("render", &rendered, ending)
}
