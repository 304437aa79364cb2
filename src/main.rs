use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    kvpilot::cli::run(kvpilot::cli::Cli::parse())
}
