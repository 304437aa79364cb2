//! What can be checked of the Dockerfile without a Docker engine (none runs on these machines),
//! and that scripts/image.sh, which builds and runs the image with buildah and podman, builds the same image.

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

/// The Dockerfile's stages, each a list of instructions (continuation lines joined).
fn stages() -> Vec<Vec<String>> {
    let mut joined: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in dockerfile() {
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(&format!("{} ", head.trim())),
            None => joined.push(format!("{pending}{line}")),
        }
        if !line.ends_with('\\') {
            pending.clear();
        }
    }
    let mut stages: Vec<Vec<String>> = Vec::new();
    for line in joined {
        if line.starts_with("FROM ") {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("a Dockerfile starts with FROM").push(line);
    }
    stages
}

/// scripts/image.sh, and its top-level `NAME="value"` / `NAME='value'` / `NAME=(a b)` assignments.
fn image_script() -> (String, std::collections::HashMap<String, String>) {
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/image.sh")).unwrap();
    let mut vars = std::collections::HashMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once('=') else { continue };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            continue;
        }
        let value = value.trim();
        let unquoted = [('"', '"'), ('\'', '\''), ('(', ')')]
            .iter()
            .find_map(|&(open, close)| value.strip_prefix(open).and_then(|v| v.strip_suffix(close)));
        if let Some(value) = unquoted {
            vars.insert(name.to_string(), value.to_string());
        }
    }
    (text, vars)
}

#[test]
fn the_image_script_builds_what_the_dockerfile_builds() {
    let stages = stages();
    let (build, run) = (&stages[0], stages.last().unwrap());
    let (script, vars) = image_script();
    let var = |name: &str| vars.get(name).unwrap_or_else(|| panic!("scripts/image.sh sets no {name}")).as_str();

    // The base it replicates, and what that base is made of.
    assert_eq!(run[0].strip_prefix("FROM ").unwrap(), var("DOCKERFILE_RUN_BASE"), "the run stage's base");
    assert!(
        var("DOCKERFILE_RUN_BASE").starts_with("gcr.io/distroless/cc-debian12"),
        "replicated from Debian 12 packages"
    );
    let packages: Vec<&str> = var("BASE_PACKAGES").split_whitespace().collect();
    for needed in ["libc6", "libgcc-s1", "ca-certificates", "base-files", "tzdata", "netbase"] {
        assert!(packages.contains(&needed), "the cc-debian12 base holds {needed}; BASE_PACKAGES: {packages:?}");
    }

    // The same build command, so the same profile and binary.
    let cargo = build.iter().find_map(|l| l.strip_prefix("RUN ").filter(|c| c.starts_with("cargo build"))).unwrap();
    assert_eq!(cargo, var("BUILD_COMMAND"), "the Dockerfile and scripts/image.sh build the binary differently");
    let profile = if cargo.split_whitespace().any(|w| w == "--release") { "release" } else { "debug" };
    assert_eq!(var("BINARY_FROM"), format!("target/{profile}/kvpilot"), "the binary the build command makes");

    // The same files copied to the same places, the same user and entrypoint, and nothing else.
    let workdir = build.iter().rev().find_map(|l| l.strip_prefix("WORKDIR ")).unwrap_or("/");
    let copies: Vec<(String, String)> = run
        .iter()
        .filter_map(|l| l.strip_prefix("COPY --from=build "))
        .map(|args| {
            let parts: Vec<&str> = args.split_whitespace().collect();
            assert_eq!(parts.len(), 2, "one source per COPY: {args}");
            let source = parts[0].strip_prefix(workdir).unwrap_or(parts[0]).trim_start_matches('/');
            (source.to_string(), parts[1].to_string())
        })
        .collect();
    assert_eq!(
        copies,
        vec![(var("BINARY_FROM").to_string(), var("BINARY_TO").to_string())],
        "what the run stage copies"
    );
    let user = run.iter().find_map(|l| l.strip_prefix("USER ")).unwrap();
    assert_eq!(user, var("IMAGE_USER"));
    let entrypoint = run.iter().find_map(|l| l.strip_prefix("ENTRYPOINT ")).unwrap();
    assert_eq!(entrypoint, var("IMAGE_ENTRYPOINT"));
    for line in &run[1..] {
        assert!(
            ["COPY --from=build ", "USER ", "ENTRYPOINT "].iter().any(|p| line.starts_with(p)),
            "scripts/image.sh does not replicate `{line}`"
        );
    }

    // And the script uses them where it builds the image.
    for usage in [
        "\n    $BUILD_COMMAND\n",
        r#""$BINARY_FROM" "$BINARY_TO""#,
        r#"--user "$IMAGE_USER""#,
        r#"--entrypoint "$IMAGE_ENTRYPOINT""#,
        r#""${BASE_PACKAGES[@]}""#,
    ] {
        assert!(script.contains(usage), "scripts/image.sh no longer uses {usage:?}");
    }
}
