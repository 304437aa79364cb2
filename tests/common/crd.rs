//! The constraints of the committed CRD's schema, for tests that break each one.

use serde_json::{Value, json};

use super::cluster::{repo, yaml_documents};

pub fn crd_schema() -> Value {
    let crd = yaml_documents(&repo("crds/inferencedeployment.yaml")).remove(0);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// A constraint of the schema at a dotted path under the object root.
#[derive(Debug)]
pub enum Constraint {
    Rule { path: String, rule: String, message: String },
    Enum { path: String, values: Vec<String> },
}

pub fn constraints(schema: &Value, path: &str, found: &mut Vec<Constraint>) {
    for rule in schema["x-kubernetes-validations"].as_array().into_iter().flatten() {
        found.push(Constraint::Rule {
            path: path.to_string(),
            rule: rule["rule"].as_str().unwrap().to_string(),
            message: rule["message"].as_str().unwrap().to_string(),
        });
    }
    if let Some(values) = schema["enum"].as_array() {
        let values = values.iter().map(|v| v.as_str().unwrap().to_string()).collect();
        found.push(Constraint::Enum { path: path.to_string(), values });
    }
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        constraints(property, &child, found);
    }
    if schema["items"].is_object() {
        constraints(&schema["items"], &format!("{path}[]"), found);
    }
}

/// Sets `value` at a dotted path, creating the objects on the way.
pub fn set(object: &mut Value, path: &str, value: Value) {
    let mut at = object;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        if !at[*part].is_object() {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    at[parts[parts.len() - 1]] = value;
}
