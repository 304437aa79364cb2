//! Argument parsing and wiring of the `kvpilot` subcommands. No rules live here.

mod cache_runtime_cmd;
mod check;
mod check_workloads;
mod demo_cmd;
mod layout_cmd;
mod manifests;
mod operator_cmd;
mod render_cmd;
mod report;
mod serve;
mod webhook_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::controller::desired::RenderOptions;
use crate::release::{self, ReleaseChoice, ReleaseError, ReleaseSource};
use crate::runtime::LogFormat;

/// The images of what kvpilot runs, shared by the commands that render pods.
#[derive(Args, Debug, Clone)]
pub(crate) struct ImageArgs {
    /// SGLang image of the servers when a fleet's image is unset; `{version}` stands
    /// for the resource's SGLang release.
    #[arg(long, env = "KVPILOT_SGLANG_IMAGE", default_value = crate::controller::desired::DEFAULT_SGLANG_IMAGE)]
    sglang_image: String,
    /// The kvpilot image of the cache runtime sidecar and the connector's init container
    /// (resources with spec.cache).
    #[arg(long, env = "KVPILOT_RUNTIME_IMAGE", default_value = crate::controller::desired::DEFAULT_RUNTIME_IMAGE)]
    runtime_image: String,
    /// Image of the SGLang router when spec.router.image is unset (`{version}` as for
    /// --sglang-image). Unset: the SGLang image, which ships the router.
    #[arg(long, env = "KVPILOT_ROUTER_IMAGE")]
    router_image: Option<String>,
    /// CPU of each cache runtime sidecar, its request and limit (a Kubernetes quantity: 1,
    /// 500m). The chart's cacheRuntime.cpu.
    #[arg(long, env = "KVPILOT_CACHE_RUNTIME_CPU", default_value = crate::controller::desired::DEFAULT_CACHE_RUNTIME_CPU,
          value_parser = cpu_quantity)]
    cache_runtime_cpu: String,
}

/// A CPU quantity as the API server takes one (`1`, `500m`, `0.5`), above zero.
fn cpu_quantity(text: &str) -> Result<String, String> {
    let (number, milli) = match text.strip_suffix('m') {
        Some(number) => (number, true),
        None => (text, false),
    };
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a CPU quantity: write 1, 2 or 500m"))?;
    let whole_milli = !milli || !number.contains('.');
    if value > 0.0 && value.is_finite() && whole_milli && !number.starts_with(['+', '-']) {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} is not a CPU quantity above zero: write 1, 2 or 500m"))
    }
}

impl ImageArgs {
    /// The options pods are rendered with: these images, `default_release` where a resource
    /// names none, the log format the cache runtime sidecars write, and whether each fleet gets
    /// a PodMonitor.
    pub(crate) fn render_options(
        &self,
        default_release: ReleaseChoice,
        runtime_log_format: LogFormat,
        pod_monitors: bool,
    ) -> RenderOptions {
        RenderOptions {
            sglang_image: self.sglang_image.clone(),
            router_image: self.router_image.clone().filter(|image| !image.is_empty()),
            runtime_image: self.runtime_image.clone(),
            default_release,
            runtime_log_format,
            pod_monitors,
            cache_runtime_cpu: self.cache_runtime_cpu.clone(),
        }
    }
}

/// `--sglang-version`, shared by every command that evaluates rules.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct SglangVersionArg {
    /// SGLang release whose rules and model classification apply (for example 0.5.23) when a
    /// resource's spec.sglang.version does not name one; default: the newest release kvpilot
    /// knows. A newer release than any known is checked as the newest, with a warning.
    #[arg(long = "sglang-version", env = "KVPILOT_SGLANG_VERSION", value_name = "VERSION")]
    pub(crate) sglang_version: Option<String>,
}

impl SglangVersionArg {
    /// The release the flag names, or the newest known one.
    pub(crate) fn choice(&self) -> Result<ReleaseChoice, ReleaseError> {
        match &self.sglang_version {
            Some(text) => release::choose_text(text, ReleaseSource::Flag),
            None => Ok(ReleaseChoice::default_newest()),
        }
    }

    /// [`Self::choice`] for `kvpilot COMMAND`: a bad value is reported on stderr (exit 2), and a
    /// release newer than any known gets a warning there.
    pub(crate) fn choice_for(&self, command: &str) -> Result<ReleaseChoice, ExitCode> {
        let choice = self.choice().map_err(|e| {
            eprintln!("kvpilot {command}: --sglang-version: {e}");
            ExitCode::from(2)
        })?;
        if let Some(warning) = choice.warning() {
            eprintln!("kvpilot {command}: warning: {warning}");
        }
        Ok(choice)
    }
}

/// kvpilot: checks SGLang PD-disaggregation settings against a model's attention layout.
#[derive(Parser, Debug)]
#[command(name = "kvpilot", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the InferenceDeployment CustomResourceDefinition as YAML.
    Crd,
    /// Print the version.
    Version,
    /// Print the release × rule table of the SGLang rules kvpilot checks (Markdown).
    Rules,
    /// Print what the KV compatibility key of a PD service is made of: the settings whose change
    /// rolls both fleets and the router over to a new key (Markdown).
    KvCompat,
    /// Resolve a model's attention layout from its config.json and print it as JSON.
    Layout(layout_cmd::LayoutArgs),
    /// Check every InferenceDeployment and SGLang workload in manifests against its model's layout (for CI).
    Check(check::CheckArgs),
    /// Serve the validating and mutating admission webhooks over HTTPS.
    Webhook(webhook_cmd::WebhookArgs),
    /// Run the controller (and optionally the webhook) against the cluster.
    Operator(Box<operator_cmd::OperatorArgs>),
    /// Print the objects the controller would create for the InferenceDeployments in manifests.
    Render(render_cmd::RenderArgs),
    /// Run the controller against an in-process API server with the bundled examples.
    Demo(demo_cmd::DemoArgs),
    /// Run the cache sidecar: SGLang's HiCache L3 store over a Unix socket (beside each SGLang server).
    CacheRuntime(cache_runtime_cmd::CacheRuntimeArgs),
    /// Write the SGLang connector package (kvpilot_sglang) into a directory for SGLang's PYTHONPATH.
    InstallConnector(cache_runtime_cmd::InstallConnectorArgs),
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Crd => print_stdout(&crd_yaml()),
        Command::Version => print_stdout(&format!("kvpilot {}\n", env!("CARGO_PKG_VERSION"))),
        Command::Rules => print_stdout(&crate::policy::rules_markdown()),
        Command::KvCompat => print_stdout(&crate::sglang::kv_compat::inputs_markdown()),
        Command::Layout(args) => layout_cmd::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Webhook(args) => webhook_cmd::run(&args),
        Command::Operator(args) => operator_cmd::run(&args),
        Command::Render(args) => render_cmd::run(&args),
        Command::Demo(args) => demo_cmd::run(&args),
        Command::CacheRuntime(args) => cache_runtime_cmd::run(&args),
        Command::InstallConnector(args) => cache_runtime_cmd::install_connector(&args),
    }
}

/// The CRD exactly as `kvpilot crd` prints it and `crds/inferencedeployment.yaml` holds it.
pub fn crd_yaml() -> String {
    let crd = crate::api::crd();
    // Serializing a k8s-openapi object to YAML cannot fail: it is plain data.
    let body = serde_norway::to_string(&crd).unwrap_or_default();
    format!(
        "# Generated by `kvpilot crd`; do not edit. Regenerate with: cargo run -q -- crd > crds/inferencedeployment.yaml\n{body}"
    )
}

/// Writes to stdout; a closed pipe (`kvpilot crd | head`) is not an error worth a panic.
pub(crate) fn print_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvpilot: cannot write to stdout: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_quantity;

    #[test]
    fn the_cache_runtime_cpu_is_a_quantity_above_zero() {
        for accepted in ["1", "2", "0.5", "500m", "100m"] {
            assert_eq!(cpu_quantity(accepted).as_deref(), Ok(accepted));
        }
        for refused in ["0", "0m", "-1", "lots", "1.5m", "", "1Gi"] {
            assert!(cpu_quantity(refused).unwrap_err().contains("write 1, 2 or 500m"), "{refused}");
        }
    }
}
