//! `kvpilot bench-cache`: generate a workload trace, replay one against the prefix cache, or
//! measure backup/restore bandwidth against memcpy. Results are one JSON object on stdout.

use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::cache_runtime_cmd::parse_bytes;
use super::print_stdout;
use crate::runtime::trace::{self, GspParams, MooncakeParams, TransferParams};

/// Trace shapes `--generate` writes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum Shape {
    /// SGLang's generated-shared-prefix workload.
    Gsp,
    /// Mooncake-style hash-id blocks (shared system prompts, multi-turn sessions).
    Mooncake,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["generate", "trace", "transfer"]))]
pub(crate) struct BenchCacheArgs {
    /// Write a trace of this shape to --out.
    #[arg(long, value_enum, requires = "out")]
    generate: Option<Shape>,
    /// gsp: groups of prompts sharing a system prompt.
    #[arg(long, default_value_t = 64)]
    groups: usize,
    /// gsp: prompts per group.
    #[arg(long, default_value_t = 16)]
    prompts_per_group: usize,
    /// gsp: system prompt tokens.
    #[arg(long, default_value_t = 2048)]
    system_len: usize,
    /// gsp: question tokens.
    #[arg(long, default_value_t = 128)]
    question_len: usize,
    /// mooncake: requests; transfer: requests retracted per round.
    #[arg(long)]
    requests: Option<usize>,
    /// mooncake: tokens per hash block.
    #[arg(long, default_value_t = 512)]
    block_size: usize,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where --generate writes the trace.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replay this trace against the prefix cache.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Tokens per page.
    #[arg(long, default_value_t = 1)]
    page_size: usize,
    /// Replay: cache capacity in tokens (allocation evicts beyond it).
    #[arg(long, default_value_t = 1 << 20)]
    capacity_tokens: usize,
    /// Measure backup and restore bandwidth against memcpy.
    #[arg(long)]
    transfer: bool,
    /// Transfer: tokens per request.
    #[arg(long, default_value_t = 2048)]
    request_tokens: usize,
    /// Transfer: KV bytes per token (default: Llama-3.1-8B, 32 layers × 8 heads × 256 × bf16).
    #[arg(long, value_parser = parse_bytes, default_value = "128KiB")]
    bytes_per_token: u64,
    /// Replay and transfer: rounds, each on a fresh cache (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

fn bench(args: &BenchCacheArgs) -> Result<String, String> {
    if let Some(shape) = args.generate {
        let requests = match shape {
            Shape::Gsp => trace::generate_gsp(GspParams {
                groups: args.groups,
                prompts_per_group: args.prompts_per_group,
                system_len: args.system_len,
                question_len: args.question_len,
                seed: args.seed,
            }),
            Shape::Mooncake => trace::generate_mooncake(MooncakeParams {
                requests: args.requests.unwrap_or(1000),
                block_size: args.block_size.max(1),
                seed: args.seed,
            }),
        };
        let out = args.out.as_ref().ok_or("--generate needs --out FILE")?;
        let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
        trace::write_trace(&requests, &mut std::io::BufWriter::new(file))
            .map_err(|e| format!("{}: {e}", out.display()))?;
        let tokens: usize = requests.iter().map(Vec::len).sum();
        return Ok(serde_json::json!({"requests": requests.len(), "tokens": tokens, "out": out}).to_string());
    }
    if let Some(path) = &args.trace {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let requests = trace::read_trace(BufReader::new(file), &path.display().to_string())?;
        let report = trace::replay(&requests, args.page_size, args.capacity_tokens, args.rounds)?;
        return serde_json::to_string(&report).map_err(|e| e.to_string());
    }
    let report = trace::transfer(TransferParams {
        requests: args.requests.unwrap_or(4),
        request_tokens: args.request_tokens,
        page_size: args.page_size,
        bytes_per_token: args.bytes_per_token,
        rounds: args.rounds,
    })?;
    if !report.verified {
        return Err("restored bytes differ from what was backed up".into());
    }
    serde_json::to_string(&report).map_err(|e| e.to_string())
}

pub(crate) fn run(args: &BenchCacheArgs) -> ExitCode {
    match bench(args) {
        Ok(json) => print_stdout(&(json + "\n")),
        Err(e) => {
            eprintln!("kvpilot bench-cache: {e}");
            ExitCode::from(2)
        }
    }
}
