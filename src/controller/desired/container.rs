//! Pieces of containers that the server pods, the cache runtime and the router share.

use k8s_openapi::api::core::v1::{
    Capabilities, EnvVar, HTTPGetAction, PodSecurityContext, Probe, SeccompProfile, SecurityContext, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::ImagePullPolicy;

pub(super) fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..EnvVar::default() }
}

pub(super) fn image_pull_policy(policy: ImagePullPolicy) -> String {
    match policy {
        ImagePullPolicy::Always => "Always",
        ImagePullPolicy::IfNotPresent => "IfNotPresent",
        ImagePullPolicy::Never => "Never",
    }
    .into()
}

/// An HTTP GET probe of `path` on the container port named `port`.
pub(super) fn http_probe(port: &str, path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(port.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(timeout),
        ..Probe::default()
    }
}

pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// A container's security as the Pod Security Standards' `restricted` level asks (non-root as
/// `uid`, nothing to escalate, no capability, the runtime's default seccomp profile), with a
/// read-only root: kvpilot's own containers and the router.
pub(super) fn restricted_security(uid: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
        ..SecurityContext::default()
    }
}

/// A pod's security as the Pod Security Standards' `restricted` level asks: non-root, its volumes
/// writable by `uid`'s group, the runtime's default seccomp profile.
pub(super) fn restricted_pod_security(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        fs_group: Some(uid),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
        ..PodSecurityContext::default()
    }
}
