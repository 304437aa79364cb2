//! A resource to render and readers of what was rendered, for the builders' tests.

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::json;

use super::{Desired, LABEL_INSTANCE, RenderOptions, desired_state};
use crate::api::{InferenceDeployment, InferenceDeploymentSpec};
use crate::release::ReleaseChoice;
use crate::sglang::verdict::assess;

/// `llama` in `serving`: Llama 3.1 8B with three decode replicas, spec.decode extended by `decode`.
pub(super) fn resource(decode: serde_json::Value) -> InferenceDeployment {
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/configs/llama-3.1-8b-instruct.json"
    ))
    .unwrap();
    let mut decode_spec = json!({"replicas": 3, "podLabels": {"team": "a", LABEL_INSTANCE: "spoofed"}});
    decode_spec.as_object_mut().unwrap().extend(decode.as_object().unwrap().clone());
    let spec: InferenceDeploymentSpec = serde_json::from_value(json!({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"inline": serde_json::from_str::<serde_json::Value>(&config).unwrap()}},
        "decode": decode_spec
    }))
    .unwrap();
    let mut resource = InferenceDeployment::new("llama", spec);
    resource.metadata.namespace = Some("serving".into());
    resource.metadata.uid = Some("uid-1".into());
    resource
}

/// What should exist for `resource`, assessed at the newest release with the default options.
pub(super) fn render(resource: &InferenceDeployment) -> Desired {
    render_with(resource, &RenderOptions::default())
}

/// [`render`] with `options`.
pub(super) fn render_with(resource: &InferenceDeployment, options: &RenderOptions) -> Desired {
    let config = serde_json::Value::Object(resource.spec.model.config.inline.clone().unwrap());
    let assessment =
        assess(&resource.spec, &crate::policy::ModelConfigs::target(config), &ReleaseChoice::default_newest()).unwrap();
    desired_state(resource, &assessment, options)
}

/// A pod's SGLang container.
pub(super) fn container(pod: &Pod) -> &Container {
    &pod.spec.as_ref().unwrap().containers[0]
}

/// The value given to the flag `name` in `args`.
pub(super) fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}
