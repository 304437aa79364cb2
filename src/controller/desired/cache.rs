//! What the kvpilot cache runtime adds to a decode pod with `spec.cache`: the init container
//! that installs SGLang's connector, the runtime as a native sidecar, the volumes they share with
//! the SGLang container, and the connector on SGLang's `PYTHONPATH`.

use k8s_openapi::api::core::v1::{Container, ContainerPort, EmptyDirVolumeSource, EnvVar, Volume, VolumeMount};

use super::container::{env_var, http_probe, mount, restricted_security};
use super::{RenderOptions, resources};
use crate::api::InferenceDeployment;
use crate::sglang::server;

/// The kvpilot image of this build: the cache runtime sidecar and the connector's installer.
pub const DEFAULT_RUNTIME_IMAGE: &str = concat!("kvpilot/kvpilot:", env!("CARGO_PKG_VERSION"));
/// Where the pod's containers share the cache runtime's socket.
const RUN_DIR: &str = "/run/kvpilot";
/// Where the init container writes the SGLang connector, on SGLang's `PYTHONPATH`.
const CONNECTOR_DIR: &str = "/opt/kvpilot-py";
/// Port of the cache runtime's metrics and probes.
const CACHE_METRICS_PORT: i32 = 9400;
/// User and group the kvpilot containers run as (the image's non-root user).
const RUNTIME_UID: i64 = 65532;

/// With `spec.cache`: the init container that writes the SGLang connector where SGLang imports
/// it from, and the cache runtime as a native sidecar (an init container that keeps running),
/// which is up before SGLang starts and restarts on its own. Both are Guaranteed; the sidecar's
/// memory is what `runtime::memory_limit` says a store of `capacity` may use, and it logs in the
/// operator's format.
pub(super) fn init_containers(resource: &InferenceDeployment, options: &RenderOptions) -> Option<Vec<Container>> {
    let cache = resource.spec.cache.as_ref()?;
    let capacity = cache.capacity_bytes().ok()?;
    let installer = Container {
        name: "install-connector".into(),
        image: Some(options.runtime_image.clone()),
        args: Some(vec!["install-connector".into(), CONNECTOR_DIR.into()]),
        volume_mounts: Some(vec![mount("kvpilot-py", CONNECTOR_DIR, false)]),
        resources: Some(resources::installer()),
        security_context: Some(restricted_security(RUNTIME_UID)),
        ..Container::default()
    };
    let sidecar = Container {
        name: "cache-runtime".into(),
        image: Some(options.runtime_image.clone()),
        restart_policy: Some("Always".into()),
        args: Some(vec![
            "cache-runtime".into(),
            "--socket".into(),
            server::CACHE_SOCKET.into(),
            "--capacity".into(),
            capacity.to_string(),
            "--metrics-addr".into(),
            format!("0.0.0.0:{CACHE_METRICS_PORT}"),
            "--log-format".into(),
            options.runtime_log_format.as_str().into(),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("cache-metrics".into()),
            container_port: CACHE_METRICS_PORT,
            ..ContainerPort::default()
        }]),
        resources: Some(resources::cache_runtime(&options.cache_runtime_cpu, capacity)),
        startup_probe: Some(http_probe("cache-metrics", "/readyz", 1, 2, 30)),
        readiness_probe: Some(http_probe("cache-metrics", "/readyz", 10, 2, 3)),
        liveness_probe: Some(http_probe("cache-metrics", "/healthz", 10, 2, 3)),
        volume_mounts: Some(vec![mount("kvpilot-run", RUN_DIR, false)]),
        security_context: Some(restricted_security(RUNTIME_UID)),
        ..Container::default()
    };
    Some(vec![installer, sidecar])
}

/// The volumes the runtime's socket and the connector live in, and the SGLang container's
/// mounts of them.
pub(super) fn add_volumes(volumes: &mut Vec<Volume>, mounts: &mut Vec<VolumeMount>) {
    for name in ["kvpilot-run", "kvpilot-py"] {
        volumes.push(Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    mounts.push(mount("kvpilot-run", RUN_DIR, false));
    mounts.push(mount("kvpilot-py", CONNECTOR_DIR, true));
}

/// The connector's directory first on `PYTHONPATH`: SGLang's scheduler processes inherit it, and
/// they are what import the connector. A PYTHONPATH of the spec's keeps its entries, after the
/// connector's.
pub(super) fn add_connector_to_python_path(env: &mut Vec<EnvVar>) {
    match env.iter_mut().find(|e| e.name == "PYTHONPATH") {
        Some(var) => {
            if let Some(value) = var.value.as_mut().filter(|v| !v.split(':').any(|p| p == CONNECTOR_DIR)) {
                *value = format!("{CONNECTOR_DIR}:{value}");
            }
        }
        None => env.push(env_var("PYTHONPATH", CONNECTOR_DIR)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::desired::test_support::{container, flag, render, resource};

    #[test]
    fn the_cache_runtime_runs_beside_sglang_as_a_native_sidecar() {
        let mut resource = resource(json!({}));
        resource.spec.cache = Some(serde_json::from_value(json!({"offload": true, "capacity": "1Gi"})).unwrap());
        let pod = render(&resource).decode.pod(0, 0);
        let spec = pod.spec.as_ref().unwrap();
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].args.as_ref().unwrap(), &["install-connector", CONNECTOR_DIR]);
        let sidecar = &init[1];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"), "a native sidecar");
        assert_eq!(
            sidecar.args.as_ref().unwrap()[..5],
            ["cache-runtime", "--socket", "/run/kvpilot/cache.sock", "--capacity", "1073741824"]
        );
        assert_eq!(sidecar.args.as_ref().unwrap()[7..], ["--log-format", "text"], "the operator's log format");
        // Guaranteed: requests equal limits, the memory a store of 1Gi may use, in binary units.
        for container in [&init[0], sidecar] {
            let resources = container.resources.as_ref().unwrap();
            let requests = resources.requests.as_ref().unwrap_or_else(|| panic!("{}: no requests", container.name));
            assert!(
                requests.contains_key("cpu") && requests.contains_key("memory"),
                "{}: {requests:?}",
                container.name
            );
            assert_eq!(resources.limits.as_ref(), Some(requests), "{}", container.name);
            let security = container.security_context.as_ref().unwrap();
            assert_eq!(security.seccomp_profile.as_ref().map(|p| p.type_.as_str()), Some("RuntimeDefault"));
        }
        let memory = &sidecar.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"];
        let bytes = crate::runtime::memory_limit(1 << 30);
        assert_eq!(memory.0, format!("{}Mi", bytes.div_ceil(1 << 20)));
        assert_eq!(sidecar.security_context.as_ref().unwrap().run_as_user, Some(RUNTIME_UID));
        let sglang = container(&pod);
        let args = sglang.args.as_ref().unwrap();
        assert!(args.iter().any(|a| a == "--disaggregation-decode-enable-offload-kvcache"), "{args:?}");
        assert_eq!(flag(args, "--hicache-storage-backend"), Some("dynamic"));
        let config: serde_json::Value =
            serde_json::from_str(flag(args, "--hicache-storage-backend-extra-config").unwrap()).unwrap();
        assert_eq!(
            (config["module_path"].as_str(), config["socket"].as_str()),
            (Some("kvpilot_sglang.hicache"), Some("/run/kvpilot/cache.sock"))
        );
        assert!(
            sglang
                .env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "PYTHONPATH" && e.value.as_deref() == Some(CONNECTOR_DIR))
        );
        let mut own = resource.clone();
        own.spec.decode.env = vec![env_var("PYTHONPATH", "/opt/mine")];
        let pod = render(&own).decode.pod(0, 0);
        let env = container(&pod).env.clone().unwrap();
        let pythonpath: Vec<_> = env.iter().filter(|e| e.name == "PYTHONPATH").collect();
        assert_eq!(pythonpath.len(), 1);
        assert_eq!(pythonpath[0].value.as_deref(), Some("/opt/kvpilot-py:/opt/mine"), "the spec's entries stay");
        let mounts: Vec<&str> = sglang.volume_mounts.as_ref().unwrap().iter().map(|m| m.mount_path.as_str()).collect();
        assert!(mounts.contains(&RUN_DIR) && mounts.contains(&CONNECTOR_DIR), "{mounts:?}");
    }
}
