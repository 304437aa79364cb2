//! The CustomResourceDefinition as installed: the derived one without the documentation of the
//! Kubernetes types it embeds (affinity, volumes, env, resources, tolerations, …), as
//! controller-gen's `maxDescLen=0` drops it for them. Those descriptions are most of the
//! derived CRD's size and repeat, per fleet, what `kubectl explain pod.spec` already says; with
//! them the CRD outgrows the 256 KiB annotation that plain `kubectl apply -f crds/` writes.
//! kvpilot's own field docs, every type, bound, enum and CEL rule are kept.

use std::collections::HashSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::Value;

use super::{InferenceDeployment, InferenceDeploymentSpec, InferenceDeploymentStatus};

/// The name prefix k8s-openapi gives the schemas of Kubernetes' own types.
const KUBERNETES_SCHEMA_PREFIX: &str = "io.k8s.";

/// The InferenceDeployment CRD as `kvpilot crd` prints it and `crds/` holds it.
pub fn crd() -> CustomResourceDefinition {
    let derived = InferenceDeployment::crd();
    let (embedded, own) = descriptions();
    let mut value = serde_json::to_value(&derived).unwrap_or_default();
    if let Some(schema) = value.pointer_mut("/spec/versions/0/schema/openAPIV3Schema") {
        drop_descriptions(schema, &embedded, &own);
    }
    serde_json::from_value(value).unwrap_or(derived)
}

/// The descriptions found in the schemas of the Kubernetes types the CRD embeds, and those of
/// kvpilot's own types (which are kept even where a Kubernetes type says the same).
fn descriptions() -> (HashSet<String>, HashSet<String>) {
    let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
    let spec = generator.subschema_for::<InferenceDeploymentSpec>();
    let status = generator.subschema_for::<InferenceDeploymentStatus>();
    let (mut embedded, mut own) = (HashSet::new(), HashSet::new());
    for (name, schema) in generator.definitions() {
        let found = if name.starts_with(KUBERNETES_SCHEMA_PREFIX) { &mut embedded } else { &mut own };
        collect(schema, found);
    }
    collect(spec.as_value(), &mut own);
    collect(status.as_value(), &mut own);
    (embedded, own)
}

fn collect(schema: &Value, found: &mut HashSet<String>) {
    match schema {
        Value::Object(fields) => {
            if let Some(Value::String(description)) = fields.get("description") {
                found.insert(description.clone());
            }
            fields.values().for_each(|value| collect(value, found));
        }
        Value::Array(items) => items.iter().for_each(|item| collect(item, found)),
        _ => {}
    }
}

fn drop_descriptions(schema: &mut Value, embedded: &HashSet<String>, own: &HashSet<String>) {
    match schema {
        Value::Object(fields) => {
            let documents_kubernetes = matches!(
                fields.get("description"),
                Some(Value::String(description)) if embedded.contains(description) && !own.contains(description)
            );
            if documents_kubernetes {
                fields.remove("description");
            }
            fields.values_mut().for_each(|value| drop_descriptions(value, embedded, own));
        }
        Value::Array(items) => items.iter_mut().for_each(|item| drop_descriptions(item, embedded, own)),
        _ => {}
    }
}
