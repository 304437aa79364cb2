use std::process::ExitCode;

use clap::Parser;

// glibc malloc's per-thread arenas held the operator's RSS at almost three times its heap
// (66 MiB for a 24 MB peak with 1,000 resources × 4 pods); jemalloc returns it.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc's options, read once at its start (`_RJEM_MALLOC_CONF` in the environment still
// overrides them): one arena and no per-thread caches. The operator's threads each kept an arena
// and caches of their own, which put its peak RSS at 67 MiB for 1,000 resources × 4 pods against
// 62 MiB with these, at the same speed (`cargo bench --bench controller`, docs/benchmarks.md).
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &[u8; 23] = b"narenas:1,tcache:false\0";

fn main() -> ExitCode {
    kvpilot::cli::run(kvpilot::cli::Cli::parse())
}
