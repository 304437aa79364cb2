//! `spec.security`: the Pod Security Standards level (a namespace's
//! `pod-security.kubernetes.io/enforce`, which kube-apiserver's built-in `PodSecurity` admission
//! enforces) the servers' pods are built to meet, and the settings that need a laxer one.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{FleetSpec, InferenceDeploymentSpec, VolumeSource};

/// A Pod Security Standards level, as the namespace label `pod-security.kubernetes.io/enforce`
/// names it (`restricted`, `baseline`, `privileged`); spec.security.level unset means the strictest
/// level the settings allow.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    /// Non-root, a read-only root filesystem, no capability but NET_BIND_SERVICE, no privilege
    /// escalation, the runtime's default seccomp profile, only volumes that hold no host path.
    Restricted,
    /// No host namespaces or host paths, no capability outside the runtime's defaults.
    Baseline,
    /// Anything: what RDMA's IPC_LOCK, host networking or a hostPath volume need.
    Privileged,
}

impl PodSecurityLevel {
    /// The level as the namespace label spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Restricted => "restricted",
            Self::Baseline => "baseline",
            Self::Privileged => "privileged",
        }
    }
}

impl std::fmt::Display for PodSecurityLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.security`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecuritySpec {
    /// The Pod Security level the server pods are built to meet: `restricted` runs the SGLang
    /// servers as UID 1000 with a read-only root filesystem (HOME and /tmp on emptyDir volumes);
    /// `baseline` runs them as the image's user (root in lmsysorg/sglang); `privileged` says the
    /// settings need it. A setting that needs a laxer level than the one given is refused (rule
    /// POD11). Unset: the strictest level the settings allow (status.podSecurityLevel).
    pub level: Option<PodSecurityLevel>,
}

/// The capabilities the `baseline` level lets a container add (the Pod Security Standards'
/// "Capabilities" control); `restricted` lets it add NET_BIND_SERVICE only.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The volume types the `restricted` level allows (its "Volume Types" control); `baseline`
/// refuses only `hostPath`.
const RESTRICTED_VOLUMES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

/// A setting whose pods need a laxer level than `restricted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityNeed {
    /// The spec field (`spec.decode.capabilities`).
    pub field: &'static str,
    /// What in it (`IPC_LOCK`, `hostNetwork: true`, `a hostPath volume`).
    pub setting: String,
    pub level: PodSecurityLevel,
}

impl std::fmt::Display for SecurityNeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} needs {}", self.field, self.setting, self.level)
    }
}

fn capability_level(capability: &str) -> PodSecurityLevel {
    let name = capability.trim().to_ascii_uppercase();
    let name = name.strip_prefix("CAP_").unwrap_or(&name);
    if name == "NET_BIND_SERVICE" {
        PodSecurityLevel::Restricted
    } else if BASELINE_CAPABILITIES.contains(&name) {
        PodSecurityLevel::Baseline
    } else {
        PodSecurityLevel::Privileged
    }
}

fn volume_need(field: &'static str, source: &VolumeSource) -> Option<SecurityNeed> {
    let value = serde_json::to_value(&source.0).ok()?;
    let kind = value.as_object()?.keys().find(|key| *key != "name")?.clone();
    let level = match kind.as_str() {
        "hostPath" => PodSecurityLevel::Privileged,
        kind if RESTRICTED_VOLUMES.contains(&kind) => return None,
        _ => PodSecurityLevel::Baseline,
    };
    Some(SecurityNeed { field, setting: format!("a {kind} volume"), level })
}

/// A fleet's needs: `fields` are its capabilities' and its hostNetwork's.
fn fleet_needs(fields: (&'static str, &'static str), fleet: &FleetSpec) -> Vec<SecurityNeed> {
    let mut needs: Vec<SecurityNeed> = fleet
        .capabilities
        .iter()
        .map(|capability| (capability, capability_level(capability)))
        .filter(|(_, level)| *level > PodSecurityLevel::Restricted)
        .map(|(capability, level)| SecurityNeed { field: fields.0, setting: capability.clone(), level })
        .collect();
    if fleet.host_network {
        needs.push(SecurityNeed { field: fields.1, setting: "true".into(), level: PodSecurityLevel::Privileged });
    }
    needs
}

impl InferenceDeploymentSpec {
    /// What in the spec needs a laxer level than `restricted`, fleet by fleet, then the volumes.
    /// kvpilot's own containers (the router, the cache runtime) always meet `restricted`.
    pub fn pod_security_needs(&self) -> Vec<SecurityNeed> {
        let mut needs = fleet_needs(("spec.decode.capabilities", "spec.decode.hostNetwork"), &self.decode);
        if let Some(prefill) = &self.prefill {
            needs.extend(fleet_needs(("spec.prefill.capabilities", "spec.prefill.hostNetwork"), prefill));
        }
        if let Some(source) = &self.model.source {
            needs
                .extend(source.volume.as_ref().and_then(|v| volume_need("spec.model.source.volume.source", &v.source)));
            let cache = source.hub.as_ref().and_then(|hub| hub.cache.as_ref());
            needs.extend(cache.and_then(|cache| volume_need("spec.model.source.hub.cache", cache)));
        }
        needs
    }

    /// The level the server pods are built to: `spec.security.level`, else the strictest level
    /// the settings allow.
    pub fn pod_security_level(&self) -> PodSecurityLevel {
        self.security.as_ref().and_then(|s| s.level).unwrap_or_else(|| self.least_pod_security_level())
    }

    /// The strictest level the settings allow.
    pub fn least_pod_security_level(&self) -> PodSecurityLevel {
        self.pod_security_needs().into_iter().map(|need| need.level).max().unwrap_or(PodSecurityLevel::Restricted)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(value: serde_json::Value) -> InferenceDeploymentSpec {
        let mut base = json!({"model": {"name": "m/x", "config": {"inline": {}}}});
        base.as_object_mut().unwrap().extend(value.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn the_strictest_level_the_settings_allow_is_the_default() {
        assert_eq!(spec(json!({})).pod_security_level(), PodSecurityLevel::Restricted);
        let bind = spec(json!({"decode": {"capabilities": ["NET_BIND_SERVICE"]}}));
        assert_eq!(bind.pod_security_level(), PodSecurityLevel::Restricted, "restricted lets it add that one");
        let chown = spec(json!({"decode": {"capabilities": ["CAP_CHOWN"]}}));
        assert_eq!(chown.pod_security_level(), PodSecurityLevel::Baseline);
        let rdma = spec(json!({"prefill": {"capabilities": ["IPC_LOCK"]}}));
        assert_eq!(rdma.pod_security_level(), PodSecurityLevel::Privileged);
        assert_eq!(
            rdma.pod_security_needs(),
            [SecurityNeed {
                field: "spec.prefill.capabilities",
                setting: "IPC_LOCK".into(),
                level: PodSecurityLevel::Privileged
            }]
        );
        let host = spec(json!({"decode": {"hostNetwork": true}}));
        assert_eq!(host.pod_security_needs()[0].to_string(), "spec.decode.hostNetwork true needs privileged");
    }

    #[test]
    fn volumes_need_what_their_type_needs() {
        let weights = |source: serde_json::Value| {
            spec(json!({"model": {"name": "m/x", "config": {"inline": {}}, "source": {"volume": {"source": source}}}}))
        };
        assert_eq!(weights(json!({"persistentVolumeClaim": {"claimName": "w"}})).pod_security_needs(), []);
        let nfs = weights(json!({"nfs": {"server": "n", "path": "/w"}}));
        assert_eq!(nfs.least_pod_security_level(), PodSecurityLevel::Baseline);
        assert_eq!(nfs.pod_security_needs()[0].setting, "a nfs volume");
        let host = weights(json!({"hostPath": {"path": "/models"}}));
        assert_eq!(host.least_pod_security_level(), PodSecurityLevel::Privileged);
        assert_eq!(host.pod_security_needs()[0].field, "spec.model.source.volume.source");
    }

    #[test]
    fn a_level_asked_for_is_the_level() {
        let rdma = spec(json!({"decode": {"capabilities": ["IPC_LOCK"]}, "security": {"level": "baseline"}}));
        assert_eq!(rdma.pod_security_level(), PodSecurityLevel::Baseline, "POD11 refuses it; the level stays asked");
        assert_eq!(rdma.least_pod_security_level(), PodSecurityLevel::Privileged);
        assert!(PodSecurityLevel::Restricted < PodSecurityLevel::Baseline);
    }
}
