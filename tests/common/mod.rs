//! Shared by several integration-test crates, each of which uses only part of it.
#![allow(dead_code)]

pub mod cluster;
pub mod crd;
pub mod output;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A decode server's flags that SGLang refuses on a pure-SWA model (R2: host-pool retraction),
/// the command line the guard tests rewrite.
pub const HOST_POOL_DECODE_ARGS: &[&str] = &[
    "--model-path",
    "/models/m",
    "--disaggregation-mode",
    "decode",
    "--disaggregation-decode-retraction-backup",
    "host_pool",
];

/// A path inside the repository.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// [`repo`] as a command-line argument.
pub fn repo_arg(path: &str) -> String {
    repo(path).display().to_string()
}

/// A pinned tool of `scripts/install-test-tools.sh` (in `$KVPILOT_TOOLS/bin`, else
/// `target/test-tools/bin`); fails saying how to install it when it is missing.
pub fn test_tool(name: &str) -> PathBuf {
    let dir = std::env::var_os("KVPILOT_TOOLS")
        .map(|d| PathBuf::from(d).join("bin"))
        .unwrap_or_else(|| repo("target/test-tools/bin"));
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/install-test-tools.sh` (`bash scripts/test.sh` does it first)",
        path.display()
    );
    path
}

/// The kvpilot binary of this build with `args`, its standard input empty; the release it
/// falls back to is its own default whatever the environment says.
pub fn kvpilot(args: &[&str]) -> Output {
    kvpilot_with_input(args, "")
}

/// [`kvpilot`] with `stdin` on its standard input.
pub fn kvpilot_with_input(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
        .args(args)
        .env_remove("KVPILOT_SGLANG_VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kvpilot");
    let mut input = child.stdin.take().unwrap();
    // A child that exits early (bad input) closes its end; that is its answer, not an error here.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().unwrap()
}
