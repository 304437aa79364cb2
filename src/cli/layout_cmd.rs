//! `kvpilot layout --config FILE [--disable-hybrid-swa-memory] [--sglang-version X]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::SglangVersionArg;
use crate::layout::{ResolveOptions, resolve};
use crate::source::parse_config_text;

#[derive(Args, Debug)]
pub(crate) struct LayoutArgs {
    /// The model's config.json.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Resolve as SGLang's --disable-hybrid-swa-memory would (full pool for hybrid-SWA models).
    #[arg(long)]
    disable_hybrid_swa_memory: bool,
    #[command(flatten)]
    sglang: SglangVersionArg,
}

pub(crate) fn run(args: &LayoutArgs) -> ExitCode {
    let choice = match args.sglang.choice_for("layout") {
        Ok(choice) => choice,
        Err(code) => return code,
    };
    let file = args.config.display();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("kvpilot layout: cannot read {file}: {e}");
            return ExitCode::from(2);
        }
    };
    let value = match parse_config_text(&text, &file.to_string()) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("kvpilot layout: {e}");
            return ExitCode::from(2);
        }
    };
    let options = ResolveOptions { disable_hybrid_swa_memory: args.disable_hybrid_swa_memory, release: choice.release };
    match resolve(&value, options) {
        Ok(layout) => match serde_json::to_string_pretty(&layout) {
            Ok(json) => super::print_stdout(&format!("{json}\n")),
            Err(e) => {
                eprintln!("kvpilot layout: cannot render the layout: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("kvpilot layout: {file}: {e}");
            ExitCode::from(2)
        }
    }
}
