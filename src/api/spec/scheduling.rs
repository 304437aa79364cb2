//! `spec.scheduling` and `spec.placement`: which scheduler places the fleets' pods (a gang
//! scheduler the cluster runs, never one of kvpilot's own) and where they land.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A DNS-1123 label, as Volcano queue names and Kueue queue-name label values must be.
const DNS_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A Kubernetes label key (an optional DNS-subdomain prefix and `/`, then a name), as a pod
/// affinity term's topologyKey must be.
const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// The scheduler that places the pods of a replica all at once, or none.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum GangScheduler {
    /// The cluster's scheduler places each pod on its own.
    #[default]
    None,
    /// Volcano: a `scheduling.volcano.sh/v1beta1` PodGroup per replica, pods scheduled by
    /// `volcano`.
    Volcano,
    /// scheduler-plugins' coscheduling plugin: a `scheduling.x-k8s.io/v1alpha1` PodGroup per
    /// replica.
    Coscheduling,
    /// Kueue: each replica is a plain-pod group Kueue admits as one workload.
    Kueue,
}

impl GangScheduler {
    /// The value as the spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Volcano => "volcano",
            Self::Coscheduling => "coscheduling",
            Self::Kueue => "kueue",
        }
    }

    /// The API the cluster must serve for this scheduler's objects or labels to mean anything.
    pub fn required_api(self) -> Option<SchedulerApi> {
        match self {
            Self::None => None,
            Self::Volcano => Some(SchedulerApi {
                scheduler: "Volcano",
                group: "scheduling.volcano.sh",
                version: Some("v1beta1"),
                resource: "podgroups",
            }),
            Self::Coscheduling => Some(SchedulerApi {
                scheduler: "scheduler-plugins (its coscheduling plugin)",
                group: "scheduling.x-k8s.io",
                version: Some("v1alpha1"),
                resource: "podgroups",
            }),
            // kvpilot writes no Kueue object, only labels Kueue reads: any served version will do.
            Self::Kueue => {
                Some(SchedulerApi { scheduler: "Kueue", group: "kueue.x-k8s.io", version: None, resource: "workloads" })
            }
        }
    }
}

/// An API a gang scheduler installs, as discovery lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SchedulerApi {
    /// Who installs it.
    pub scheduler: &'static str,
    pub group: &'static str,
    /// The version kvpilot writes objects of; None where it writes none and any version will do.
    pub version: Option<&'static str>,
    /// The resource (plural) that must be served.
    pub resource: &'static str,
}

impl SchedulerApi {
    /// Why a resource asking for `gang` cannot run while the cluster does not serve this API.
    pub fn refusal(&self, gang: GangScheduler) -> String {
        let api = match self.version {
            Some(version) => format!("{}/{version} {}", self.group, self.resource),
            None => format!("{} {}", self.group, self.resource),
        };
        format!(
            "spec.scheduling.gang is {}, but this cluster does not serve {api}: install {}, or set \
             spec.scheduling.gang to another scheduler or none",
            gang.as_str(),
            self.scheduler
        )
    }
}

/// Which scheduler places the fleets' pods, and how.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(default = "SchedulingSpec::default", rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.queue) || self.gang == 'volcano' || self.gang == 'kueue'").message(
    "spec.scheduling.queue is a Volcano queue or a Kueue LocalQueue: set gang to volcano or kueue, or remove queue"
))]
pub struct SchedulingSpec {
    /// The gang scheduler that starts each replica's pods all at once or not at all: `none`
    /// (default), `volcano` (a Volcano PodGroup per replica and `schedulerName: volcano`),
    /// `coscheduling` (a scheduler-plugins PodGroup per replica) or `kueue` (Kueue's plain-pod
    /// group labels). The scheduler must be installed: kvpilot refuses a gang whose API the
    /// cluster does not serve.
    pub gang: GangScheduler,
    /// The Volcano queue of the PodGroups, or the Kueue LocalQueue of the pod groups. Unset:
    /// Volcano's `default` queue; for Kueue, its default LocalQueue where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new(format!("self.matches('{DNS_LABEL}')")).message(
        "spec.scheduling.queue must be a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)"
    ))]
    pub queue: Option<String>,
    /// The scheduler of the prefill and decode pods (`schedulerName`), for example the name
    /// scheduler-plugins' scheduler runs under. Unset: `volcano` with gang volcano, else the
    /// cluster's default scheduler.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("spec.scheduling.schedulerName must not be empty"))]
    pub scheduler_name: Option<String>,
    /// The priority class of the prefill and decode pods (and of their Volcano PodGroups), unless
    /// the fleet sets its own priorityClassName.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("spec.scheduling.priorityClassName must not be empty"))]
    pub priority_class_name: Option<String>,
}

/// Where the fleets' pods land, beside each fleet's own affinity (these terms are added to it).
/// The replicas of a fleet are always spread across nodes, softly (`maxSkew: 1`,
/// `ScheduleAnyway` on `kubernetes.io/hostname`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// A node label every rank of a multi-node replica must share (required pod affinity), so
    /// a replica's ranks stay in one topology domain: an NVLink clique (`nvidia.com/gpu.clique`)
    /// or a rack label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    #[x_kube(validation = Rule::new(format!("self.matches('{LABEL_KEY}')")).message(
        "spec.placement.groupTopologyKey must be a label key such as nvidia.com/gpu.clique"
    ))]
    pub group_topology_key: Option<String>,
    /// A node label the service's prefill and decode replicas prefer to share (preferred pod
    /// affinity of each fleet to the other), so KV transfers stay in one domain. Needs
    /// spec.prefill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    #[x_kube(validation = Rule::new(format!("self.matches('{LABEL_KEY}')")).message(
        "spec.placement.colocateTopologyKey must be a label key such as topology.kubernetes.io/zone"
    ))]
    pub colocate_topology_key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gang_scheduler_names_the_api_it_needs_and_the_refusal_says_what_to_install() {
        assert_eq!(GangScheduler::None.required_api(), None);
        let volcano = GangScheduler::Volcano.required_api().unwrap();
        assert_eq!(
            volcano.refusal(GangScheduler::Volcano),
            "spec.scheduling.gang is volcano, but this cluster does not serve scheduling.volcano.sh/v1beta1 \
             podgroups: install Volcano, or set spec.scheduling.gang to another scheduler or none"
        );
        let kueue = GangScheduler::Kueue.required_api().unwrap();
        assert!(kueue.refusal(GangScheduler::Kueue).contains("does not serve kueue.x-k8s.io workloads: install Kueue"));
        let scheduling: SchedulingSpec = serde_json::from_value(serde_json::json!({"queue": "q"})).unwrap();
        assert_eq!(scheduling.gang, GangScheduler::None, "none unless asked for");
    }
}
