//! `kvpilot layout --config FILE [--disable-hybrid-swa-memory]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::layout::{ResolveOptions, resolve};

#[derive(Args, Debug)]
pub(crate) struct LayoutArgs {
    /// The model's config.json.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Resolve as SGLang's --disable-hybrid-swa-memory would (full pool for hybrid-SWA models).
    #[arg(long)]
    disable_hybrid_swa_memory: bool,
}

pub(crate) fn run(args: &LayoutArgs) -> ExitCode {
    let file = args.config.display();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("kvpilot layout: cannot read {file}: {e}");
            return ExitCode::from(2);
        }
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("kvpilot layout: {file}: not valid JSON (line {}, column {}): {e}", e.line(), e.column());
            return ExitCode::from(2);
        }
    };
    let options = ResolveOptions { disable_hybrid_swa_memory: args.disable_hybrid_swa_memory };
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
