//! What can be checked of the Dockerfile without a Docker engine (none runs on these machines).

use std::path::PathBuf;

fn dockerfile() -> Vec<String> {
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

fn version(text: &str) -> Vec<u32> {
    text.split('.').map(|p| p.parse().unwrap()).collect()
}

#[test]
fn builds_with_a_pinned_toolchain_at_least_the_crates_msrv_and_locked_dependencies() {
    let lines = dockerfile();
    let from: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert!(from.len() >= 2, "multi-stage: {from:?}");
    let toolchain = from[0]
        .strip_prefix("FROM rust:")
        .and_then(|r| r.split('-').next())
        .expect("the build stage uses the rust image");
    assert_eq!(toolchain.matches('.').count(), 2, "pin the full toolchain version, not {toolchain}");
    let manifest = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let msrv = manifest.lines().find_map(|l| l.strip_prefix("rust-version = ")).unwrap().trim_matches('"');
    assert!(version(toolchain) >= version(msrv), "toolchain {toolchain} is older than rust-version {msrv}");
    assert!(
        lines.iter().any(|l| l.starts_with("RUN cargo build") && l.contains("--release") && l.contains("--locked"))
    );
}

#[test]
fn runs_the_kvpilot_binary_as_a_non_root_user_from_a_minimal_base() {
    let lines = dockerfile();
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let run_stage = &lines[last_from..];
    assert!(!run_stage[0].starts_with("FROM rust"), "the run stage does not carry the toolchain");
    assert!(run_stage.iter().any(|l| l.starts_with("COPY --from=build") && l.ends_with("/usr/local/bin/kvpilot")));
    let user = run_stage.iter().find_map(|l| l.strip_prefix("USER ")).expect("the run stage sets USER");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "USER {user} is root");
    assert_eq!(run_stage.last().unwrap(), r#"ENTRYPOINT ["kvpilot"]"#);
    assert!(!run_stage.iter().any(|l| l.starts_with("RUN ")), "nothing runs in the minimal image");
}

#[test]
fn the_build_context_holds_what_the_build_needs() {
    // Every path the build stage copies exists (a missing one fails `docker build`).
    for line in dockerfile().iter().filter(|l| l.starts_with("COPY ") && !l.contains("--from")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(source);
            assert!(path.exists(), "{line}: {source} does not exist");
        }
    }
}
