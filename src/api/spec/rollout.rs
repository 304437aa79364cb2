//! `spec.rollout`: how a change of the KV compatibility key rolls out across both fleets and the
//! router.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A rollout that changes what prefill and decode servers exchange (the KV compatibility key,
/// `status.kvCompat`): servers of the new key come up beside the old ones, the router moves to
/// them once one replica of each fleet is ready, and the old ones retire. Each value is a count
/// of replicas or a percentage of each fleet's replicas. A rollout that keeps the key is each
/// fleet's own (`spec.decode.rollout`, `spec.prefill.rollout`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default = "ServiceRolloutSpec::default", rename_all = "camelCase")]
pub struct ServiceRolloutSpec {
    /// Replicas of each fleet that may run above its replicas while the new key comes up
    /// (percentages round up). Default 1: one spare replica of each fleet. 0 for a cluster with no
    /// spare GPUs: the rollout then replaces maxUnavailable replicas of each fleet at a time.
    pub max_surge: IntOrString,
    /// Ready replicas each fleet may lack below its replicas during the rollout (percentages
    /// round down). Default 0. With maxSurge 0 as well, one.
    pub max_unavailable: IntOrString,
}

impl Default for ServiceRolloutSpec {
    fn default() -> Self {
        Self { max_surge: IntOrString::Int(1), max_unavailable: IntOrString::Int(0) }
    }
}
