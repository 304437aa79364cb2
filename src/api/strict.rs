//! Unknown fields in an InferenceDeployment, found the way `kubectl apply`'s strict field
//! validation finds them: against the CRD's structural schema, so that `spec.prefil` or
//! `spec.decode.replcas` is an error offline too instead of a field silently ignored.

use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::Value;

use super::InferenceDeployment;

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(InferenceDeployment::crd()).unwrap_or_default();
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().unwrap_or_default()
    })
}

/// Every field of `object` (an InferenceDeployment as JSON) its schema does not know, as
/// `unknown field "spec.prefil"` with the nearest known field when one is close. `metadata`
/// and `status` are the API server's and the controller's: not checked.
pub fn unknown_fields(object: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(spec) = object.get("spec") {
        walk(spec, schema().pointer("/properties/spec").unwrap_or(&Value::Null), "spec", &mut found);
    }
    found
}

fn walk(value: &Value, schema: &Value, path: &str, found: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(fields) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, field) in fields {
                    let at = format!("{path}.{name}");
                    match properties.get(name) {
                        Some(field_schema) => walk(field, field_schema, &at, found),
                        None => found.push(unknown(&at, name, properties.keys())),
                    }
                }
            } else if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                for (name, field) in fields {
                    walk(field, values, &format!("{path}.{name}"), found);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    walk(item, item_schema, &format!("{path}[{index}]"), found);
                }
            }
        }
        _ => {}
    }
}

fn unknown<'a>(path: &str, name: &str, known: impl Iterator<Item = &'a String>) -> String {
    let known: Vec<&String> = known.collect();
    let nearest = known
        .iter()
        .map(|candidate| (strsim::levenshtein(name, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min();
    match nearest {
        Some((_, candidate)) => format!("unknown field \"{path}\"; did you mean \"{candidate}\"?"),
        None => {
            let names: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
            format!("unknown field \"{path}\"; the known fields there are {}", names.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn typos_are_named_with_the_nearest_known_field() {
        let object = json!({
            "apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": "x", "anything": 1},
            "spec": {
                "model": {"name": "m", "config": {"inline": {"free": {"form": true}}}},
                "prefil": {},
                "decode": {"replcas": 2, "nodeSelector": {"pool": "gpu"}, "env": [{"name": "A", "vaule": "1"}],
                           "tolerations": [{"key": "gpu", "operator": "Exists"}]},
                "disaggregation": {"retractionBackup": "host_pool", "somethingElse": 1}
            },
            "status": {"whatever": 1}
        });
        assert_eq!(
            unknown_fields(&object),
            [
                "unknown field \"spec.decode.env[0].vaule\"; did you mean \"value\"?",
                "unknown field \"spec.decode.replcas\"; did you mean \"replicas\"?",
                "unknown field \"spec.disaggregation.somethingElse\"; the known fields there are bootstrapPort, \
                 decodeContextParallel, decodeHostReceiveThreshold, decodeOffloadKvCache, decodeRadixCache, disablePriorityPreemption, enableUnifiedMemory, \
                 hicacheHostMemoryMode, hicacheStorageBackend, hierarchicalCache, hisparse, hostPoolRatio, lmcache, mambaRadixCacheStrategy, onInvalid, \
                 prefill, priorityScheduling, retractionBackup, speculativeAlgorithm, speculativeDraftModel, transferBackend, unifiedCacheExternalLinker",
                "unknown field \"spec.prefil\"; did you mean \"prefill\"?",
            ]
        );
    }

    #[test]
    fn every_example_is_clean() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for document in serde_norway::Deserializer::from_str(&text) {
                let value = <Value as serde::Deserialize>::deserialize(document).unwrap();
                if value["kind"] == "InferenceDeployment" {
                    assert_eq!(unknown_fields(&value), Vec::<String>::new(), "{}", path.display());
                }
            }
        }
    }
}
