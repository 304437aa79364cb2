//! Hand-written schema fragments for the places where the derived schema is not what the
//! Kubernetes structural-schema rules want.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A free-form JSON object whose unknown fields the API server must keep (a model's
/// `config.json` has hundreds of fields we never read).
pub(crate) fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "The model's config.json as a JSON object (unknown fields are preserved).",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `metav1.Condition` list keyed by `type`, so server-side apply merges conditions by type.
pub(crate) fn condition_list(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>::json_schema(generator);
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["type"]));
    schema
}

/// A `core/v1` Volume's schema without `name`: the volume sources a user picks from, named by
/// kvpilot.
pub(crate) fn volume_source(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <k8s_openapi::api::core::v1::Volume as JsonSchema>::json_schema(generator);
    if let Some(properties) = schema.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
        properties.remove("name");
    }
    if let Some(required) = schema.get_mut("required").and_then(serde_json::Value::as_array_mut) {
        required.retain(|field| field != "name");
    }
    schema.insert(
        "description".into(),
        "A Kubernetes volume source (persistentVolumeClaim, hostPath, nfs, csi, …), as in a Pod's volumes, without a name."
            .into(),
    );
    schema
}
