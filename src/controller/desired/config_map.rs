//! `NAME-sglang`: the SGLang flags of both sides for the effective settings, and an inline
//! config.json.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{FleetRole, config_map_name, managed_labels, owned_meta, selector_labels};
use crate::api::{ConfigSourceRef, InferenceDeployment};
use crate::policy::Assessment;

/// Key of the ConfigMap holding the SGLang flags for the fleet's effective settings
/// (`{"decode": [...], "prefill": [...]}`), for the prefill servers users run themselves.
pub(super) const SGLANG_ARGS_KEY: &str = "sglangArgs.json";
/// Key of the ConfigMap holding an inline config.json, which the pods' model-config annotation
/// points the guard at.
pub(super) const MODEL_CONFIG_KEY: &str = "config.json";

/// The `sglangArgs` of the resource, as the ConfigMap holds them.
fn sglang_args_json(resource: &InferenceDeployment, assessment: &Assessment) -> String {
    let args = crate::sglang::args::sglang_args(&resource.spec, &assessment.verdict, assessment.release.release);
    serde_json::to_string_pretty(&args).unwrap_or_default()
}

/// The ConfigMap of `resource`.
pub(super) fn config_map(resource: &InferenceDeployment, assessment: &Assessment, owner: &OwnerReference) -> ConfigMap {
    let name = resource.metadata.name.clone().unwrap_or_default();
    let mut data = BTreeMap::from([(SGLANG_ARGS_KEY.to_string(), sglang_args_json(resource, assessment))]);
    if let Ok(ConfigSourceRef::Inline(config)) = resource.spec.model.config.source() {
        data.insert(MODEL_CONFIG_KEY.into(), serde_json::to_string_pretty(config).unwrap_or_default());
    }
    let labels = managed_labels(&selector_labels(&name, FleetRole::Decode));
    ConfigMap {
        metadata: owned_meta(config_map_name(&name), &resource.metadata.namespace, labels, owner),
        data: Some(data),
        ..ConfigMap::default()
    }
}
