//! The POD10 rule of the guard: a pod whose SGLang server uses kvpilot's cache runtime as its
//! HiCache L3 store must reach it. The server's connector (`module_path: kvpilot_sglang.hicache`
//! in `--hicache-storage-backend-extra-config`) connects to the `socket` that config names, and
//! SGLang imports the connector from `PYTHONPATH`; the cache runtime (`kvpilot cache-runtime
//! --socket P`) listens on its own path, and the installer (`kvpilot install-connector DIR`)
//! writes the connector into its own directory. Each path is in the container's own mount
//! namespace: they meet only where the same volume is mounted, at the same place within it.
//! A pod that gets this wrong starts, and its server never becomes ready (its first HiCache page
//! round trip fails, or `No module named 'kvpilot_sglang'`): nothing else refuses it first.

use serde_json::Value;

use crate::policy::{CACHE_WIRING, Violation};
use crate::sglang::cmdline::Arg;
use crate::sglang::guard::Server;
use crate::sglang::workload;

/// The connector module kvpilot's cache runtime is reached through.
const CONNECTOR_MODULE: &str = "kvpilot_sglang.hicache";
const EXTRA_CONFIG_FLAG: &str = "--hicache-storage-backend-extra-config";

/// Where a path of one container lands: a volume, and the path within it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OnVolume {
    volume: String,
    /// The path within the volume (its `subPath` joined with the rest of the path), no leading `/`.
    within: String,
    /// Where the container mounts it.
    mount_path: String,
}

/// The path components of `path` below `base`, if `base` is `path` or one of its directories.
fn below<'a>(path: &'a str, base: &str) -> Option<&'a str> {
    let base = base.trim_end_matches('/');
    let rest = path.strip_prefix(base)?;
    if rest.is_empty() { Some("") } else { rest.strip_prefix('/') }
}

fn join(a: &str, b: &str) -> String {
    match (a.trim_matches('/'), b.trim_matches('/')) {
        ("", b) => b.to_string(),
        (a, "") => a.to_string(),
        (a, b) => format!("{a}/{b}"),
    }
}

/// The volume `path` of `container` is on: its deepest mount that holds the path.
fn on_volume(container: &Value, path: &str) -> Option<OnVolume> {
    let mounts = container.get("volumeMounts").and_then(Value::as_array)?;
    mounts
        .iter()
        .filter_map(|mount| {
            let mount_path = mount.get("mountPath")?.as_str()?;
            let rest = below(path, mount_path)?;
            let sub_path = mount.get("subPath").and_then(Value::as_str).unwrap_or_default();
            Some(OnVolume {
                volume: mount.get("name")?.as_str()?.to_string(),
                within: join(sub_path, rest),
                mount_path: mount_path.to_string(),
            })
        })
        .max_by_key(|on| on.mount_path.len())
}

/// Where `container` sees the place `target` names in its volume, if it mounts that part of it.
fn seen_from(container: &Value, target: &OnVolume) -> Option<String> {
    let mounts = container.get("volumeMounts").and_then(Value::as_array)?;
    mounts.iter().find_map(|mount| {
        (mount.get("name")?.as_str()? == target.volume).then_some(())?;
        let sub_path = mount.get("subPath").and_then(Value::as_str).unwrap_or_default();
        let within = format!("/{}", target.within);
        let rest = below(&within, &format!("/{}", sub_path.trim_matches('/')))?;
        Some(format!("/{}", join(mount.get("mountPath")?.as_str()?, rest)))
    })
}

/// A container's `command` and `args` words.
fn words(container: &Value) -> Vec<&str> {
    ["command", "args"]
        .iter()
        .filter_map(|key| container.get(*key).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The value of `flag` in `words` (`--flag VALUE` or `--flag=VALUE`).
fn flag_value<'a>(words: &[&'a str], flag: &str) -> Option<&'a str> {
    words.iter().enumerate().find_map(|(i, word)| match word.strip_prefix(flag) {
        Some("") => words.get(i + 1).copied(),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    })
}

/// Every container of the pod with its name: init containers (the runtime is a native sidecar)
/// and containers.
fn containers(pod: &Value) -> impl Iterator<Item = (&str, &Value)> {
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|list| pod.get(list).and_then(Value::as_array))
        .flatten()
        .map(|c| (c.get("name").and_then(Value::as_str).unwrap_or("<unnamed>"), c))
}

/// The container running `kvpilot SUBCOMMAND` and the path its `path_flag` (or, without one, its
/// first argument after the subcommand) names.
fn kvpilot_container<'a>(
    pod: &'a Value,
    subcommand: &str,
    path_flag: Option<&str>,
) -> Option<(&'a str, &'a Value, String)> {
    containers(pod).find_map(|(name, container)| {
        let words = words(container);
        let at = words.iter().position(|w| *w == subcommand)?;
        let path = match path_flag {
            Some(flag) => flag_value(&words[at..], flag)?,
            None => words.get(at + 1).copied()?,
        };
        Some((name, container, path.to_string()))
    })
}

fn violation(field: &'static str, message: String, fix: String) -> Violation {
    Violation { rule: CACHE_WIRING.id, field, message, fix, phase: "HiCache store start" }
}

/// POD10 for the server in `server` (a container of `pod`, whose SGLang arguments are `args`):
/// its socket must be where the cache runtime of the pod listens, and the connector the
/// installer writes must be on its `PYTHONPATH`. Nothing is said of a server that does not use
/// kvpilot's connector, nor where the pod runs no cache runtime or installer to compare with.
pub fn findings(pod: &Value, server: &Value, args: &[Arg], env: &[(String, String)]) -> Vec<Violation> {
    let words: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
    let Some(config) = flag_value(&words, EXTRA_CONFIG_FLAG).and_then(|text| serde_json::from_str::<Value>(text).ok())
    else {
        return Vec::new();
    };
    if config.get("module_path").and_then(Value::as_str) != Some(CONNECTOR_MODULE) {
        return Vec::new();
    }
    let server_name = server.get("name").and_then(Value::as_str).unwrap_or("<unnamed>");
    let mut found = Vec::new();
    if let (Some(socket), Some((runtime_name, runtime, listens))) =
        (config.get("socket").and_then(Value::as_str), kvpilot_container(pod, "cache-runtime", Some("--socket")))
    {
        let served = on_volume(runtime, &listens);
        let connects = on_volume(server, socket);
        let seen = served.as_ref().and_then(|on| seen_from(server, on));
        if served.is_none() || seen.as_deref() != Some(socket) {
            let listening = match &served {
                Some(on) => format!("{listens} (volume {} at {})", on.volume, on.mount_path),
                None => format!("{listens}, on no volume of its own"),
            };
            let looking = match &connects {
                Some(on) => format!("{socket} (volume {} at {})", on.volume, on.mount_path),
                None => format!("{socket}, on no volume"),
            };
            let fix = match (&served, &seen) {
                (Some(_), Some(seen)) => format!(
                    "set \"socket\": \"{seen}\" in {EXTRA_CONFIG_FLAG}, where container {server_name} sees the runtime's \
                     socket"
                ),
                (Some(on), None) => format!(
                    "mount volume {} in container {server_name} at {} (as container {runtime_name} does), or change \
                     the socket to a path on a volume both mount",
                    on.volume, on.mount_path
                ),
                (None, _) => format!(
                    "give container {runtime_name} the socket's directory as a volume (an emptyDir) and mount it in \
                     container {server_name} at the same path"
                ),
            };
            found.push(violation(
                EXTRA_CONFIG_FLAG,
                format!(
                    "container {server_name} connects to the cache runtime's socket at {looking}, but container \
                     {runtime_name} listens at {listening}, which container {server_name} sees {}: the server's \
                     HiCache store never connects and the server never becomes ready",
                    seen.map_or("nowhere".to_string(), |seen| format!("at {seen}"))
                ),
                fix,
            ));
        }
    }
    if let Some((installer_name, installer, directory)) = kvpilot_container(pod, "install-connector", None) {
        let written = on_volume(installer, &directory);
        let seen = written.as_ref().and_then(|on| seen_from(server, on));
        let python_path: Vec<&str> = env
            .iter()
            .filter(|(name, _)| name == "PYTHONPATH")
            .flat_map(|(_, value)| value.split(':'))
            .filter(|entry| !entry.is_empty())
            .collect();
        let imported = seen.as_deref().is_some_and(|seen| {
            python_path.iter().any(|entry| entry.trim_end_matches('/') == seen.trim_end_matches('/'))
        });
        if !imported {
            let fix = match &seen {
                Some(seen) => format!("put {seen} on container {server_name}'s PYTHONPATH"),
                None => match &written {
                    Some(on) => format!(
                        "mount volume {} in container {server_name} and put the connector's directory there on its \
                         PYTHONPATH",
                        on.volume
                    ),
                    None => format!(
                        "have container {installer_name} write the connector to a volume container {server_name} mounts"
                    ),
                },
            };
            found.push(violation(
                "env PYTHONPATH",
                format!(
                    "container {installer_name} writes the SGLang connector to {directory}, which container \
                     {server_name} sees {}, and its PYTHONPATH ({}) does not name it: SGLang cannot import {}",
                    seen.map_or("nowhere".to_string(), |seen| format!("at {seen}")),
                    if python_path.is_empty() { "unset".to_string() } else { python_path.join(":") },
                    CONNECTOR_MODULE
                ),
                fix,
            ));
        }
    }
    found
}

/// The POD10 rule: a server using kvpilot's connector must reach the cache runtime of its pod
/// and import the connector the pod's installer writes ([`findings`]).
pub(super) fn rule(server: &Server) -> Vec<Violation> {
    let Some(pod) = &server.site.pod else { return Vec::new() };
    let mut env = workload::literal_env(&server.site.container);
    env.extend(server.invocation.env.iter().cloned());
    findings(pod, &server.site.container, &server.invocation.args, &env)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A pod as kvpilot renders one with `spec.cache`: the installer, the runtime as a native
    /// sidecar, and the server (its arguments and environment).
    fn rendered() -> (Value, Vec<Arg>, Vec<(String, String)>) {
        let pod = json!({
            "initContainers": [
                {"name": "install-connector", "args": ["install-connector", "/opt/kvpilot-py"],
                 "volumeMounts": [{"name": "kvpilot-py", "mountPath": "/opt/kvpilot-py"}]},
                {"name": "cache-runtime", "restartPolicy": "Always",
                 "args": ["cache-runtime", "--socket", "/run/kvpilot/cache.sock", "--capacity", "1073741824"],
                 "volumeMounts": [{"name": "kvpilot-run", "mountPath": "/run/kvpilot"}]}
            ],
            "containers": [{"name": "sglang",
                "volumeMounts": [{"name": "kvpilot-run", "mountPath": "/run/kvpilot"},
                                 {"name": "kvpilot-py", "mountPath": "/opt/kvpilot-py", "readOnly": true}]}]
        });
        let config =
            json!({"module_path": CONNECTOR_MODULE, "class_name": "KvpilotStore", "socket": "/run/kvpilot/cache.sock"});
        let args = Arg::items(&[
            "--hicache-storage-backend".into(),
            "dynamic".into(),
            EXTRA_CONFIG_FLAG.into(),
            config.to_string(),
        ]);
        (pod, args, vec![("PYTHONPATH".into(), "/opt/kvpilot-py".into())])
    }

    fn server(pod: &Value) -> &Value {
        &pod["containers"][0]
    }

    #[test]
    fn a_pod_as_kvpilot_renders_it_reaches_its_runtime_and_imports_its_connector() {
        let (pod, args, env) = rendered();
        assert_eq!(findings(&pod, server(&pod), &args, &env), Vec::new());
        // Another user's paths that still meet: the volume mounted elsewhere, the socket named there.
        let mut elsewhere = pod.clone();
        elsewhere["containers"][0]["volumeMounts"][0]["mountPath"] = json!("/var/run/store");
        let moved = Arg::items(&[
            EXTRA_CONFIG_FLAG.into(),
            json!({"module_path": CONNECTOR_MODULE, "socket": "/var/run/store/cache.sock"}).to_string(),
        ]);
        assert_eq!(findings(&elsewhere, server(&elsewhere), &moved, &env), Vec::new());
    }

    #[test]
    fn a_server_mounting_the_socket_s_volume_elsewhere_than_its_argv_names_is_refused_with_the_path_it_sees() {
        let (mut pod, args, env) = rendered();
        pod["containers"][0]["volumeMounts"][0]["mountPath"] = json!("/run/kvpilot-sidecar");
        let found = findings(&pod, server(&pod), &args, &env);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].rule, found[0].field), ("POD10", EXTRA_CONFIG_FLAG));
        assert!(
            found[0]
                .message
                .contains("connects to the cache runtime's socket at /run/kvpilot/cache.sock, on no volume")
                && found[0].message.contains("sees at /run/kvpilot-sidecar/cache.sock"),
            "{}",
            found[0].message
        );
        assert!(found[0].fix.contains("\"socket\": \"/run/kvpilot-sidecar/cache.sock\""), "{}", found[0].fix);
        // Without the volume at all, the fix is to mount it.
        let mut unmounted = pod.clone();
        unmounted["containers"][0]["volumeMounts"].as_array_mut().unwrap().remove(0);
        let found = findings(&unmounted, server(&unmounted), &args, &env);
        assert!(
            found[0].message.contains("sees nowhere") && found[0].fix.contains("mount volume kvpilot-run"),
            "{found:?}"
        );
    }

    #[test]
    fn a_connector_written_off_the_server_s_python_path_is_refused() {
        let (mut pod, args, env) = rendered();
        pod["initContainers"][0]["args"] = json!(["install-connector", "/opt/kvpilot-py/lib"]);
        let found = findings(&pod, server(&pod), &args, &env);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].rule, found[0].field), ("POD10", "env PYTHONPATH"));
        assert!(
            found[0].message.contains("sees at /opt/kvpilot-py/lib, and its PYTHONPATH (/opt/kvpilot-py)"),
            "{}",
            found[0].message
        );
        assert_eq!(found[0].fix, "put /opt/kvpilot-py/lib on container sglang's PYTHONPATH");
        assert_eq!(findings(&pod, server(&pod), &args, &[]).len(), 1, "unset PYTHONPATH");
    }

    #[test]
    fn servers_of_other_stores_and_pods_without_a_runtime_are_not_judged() {
        let (pod, _, env) = rendered();
        let other = Arg::items(&[
            EXTRA_CONFIG_FLAG.into(),
            json!({"module_path": "lmcache.store", "socket": "/x"}).to_string(),
        ]);
        assert_eq!(findings(&pod, server(&pod), &other, &env), Vec::new());
        let alone = json!({"containers": [server(&pod).clone()]});
        let (_, args, _) = rendered();
        assert_eq!(findings(&alone, server(&alone), &args, &env), Vec::new());
        assert_eq!(
            findings(&pod, server(&pod), &Arg::items(&[EXTRA_CONFIG_FLAG.into(), "{not json".into()]), &env),
            Vec::new()
        );
    }

    #[test]
    fn sub_paths_are_part_of_where_a_path_lands() {
        let (mut pod, args, env) = rendered();
        // The runtime mounts the volume's `run` directory; the server the whole volume.
        pod["initContainers"][1]["volumeMounts"][0]["subPath"] = json!("run");
        let found = findings(&pod, server(&pod), &args, &env);
        assert!(found.len() == 1 && found[0].fix.contains("\"socket\": \"/run/kvpilot/run/cache.sock\""), "{found:?}");
    }
}
