//! An InferenceDeployment validated as kube-apiserver validates it against the CRD, offline, so
//! that `kvpilot check`, `render` and the webhook refuse exactly what `kubectl apply` would:
//! unknown fields (strict field validation), then the structural schema (types, `minimum`,
//! `enum`, `maxLength`, `required`, int-or-string, …) and the `x-kubernetes-validations` CEL
//! rules, every problem at once, in the API server's words and field paths.
//!
//! The API server's order is kept: nulls of fields that are not `nullable` are pruned and the
//! schema's defaults applied before anything is validated, and a type error blocks the CEL rules
//! (they would read a value of the wrong type). The CEL rules are evaluated by kube-rs's own
//! `kube-cel` (the same engine kube's `cel` feature ships), not translated by hand.

use std::fmt;
use std::sync::OnceLock;

use kube::core::cel::{CompiledSchema, Validator, apply_defaults, compile_schema};
use serde_json::{Map, Value};

/// One problem, as kube-apiserver words it (`field.Error`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Dotted path, `spec.decode.tensorParallel`, `spec.decode.env[0].name`.
    pub field: String,
    /// What is wrong.
    pub problem: Problem,
}

/// The kinds of `field.Error` the schema gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// A field the schema does not declare; the nearest known one when close.
    Unknown { suggestion: Option<String>, known: Vec<String> },
    /// A required field is missing.
    Required,
    /// A value of the wrong type (blocks the CEL rules, as in the API server).
    Type { value: Value, expected: String },
    /// A value the schema or a CEL rule refuses; `value` is printed as the API server prints it.
    Invalid { value: Value, detail: String },
    /// A value outside the schema's `enum`.
    Unsupported { value: Value, supported: Vec<Value> },
    /// A string longer than `maxLength`.
    TooLong { max: u64 },
    /// An array longer than `maxItems`.
    TooMany { count: usize, max: u64 },
}

impl FieldError {
    /// Whether the API server stops before the CEL rules for this error (a wrong type or a
    /// value outside an enum: the rules would read what the schema does not allow).
    pub fn blocks_rules(&self) -> bool {
        matches!(self.problem, Problem::Type { .. } | Problem::Unsupported { .. })
    }
}

/// A JSON value as `field.Error` prints it: strings quoted, numbers and booleans bare.
fn printed(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

/// The JSON type name the API server's type check reports.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = &self.field;
        match &self.problem {
            Problem::Unknown { suggestion: Some(nearest), .. } => {
                write!(f, "unknown field \"{field}\"; did you mean \"{nearest}\"?")
            }
            Problem::Unknown { suggestion: None, known } => {
                write!(f, "unknown field \"{field}\"; the known fields there are {}", known.join(", "))
            }
            Problem::Required => write!(f, "{field}: Required value"),
            Problem::Type { value, expected } => write!(
                f,
                "{field}: Invalid value: {}: {field} in body must be of type {expected}: \"{}\"",
                printed(value),
                type_name(value)
            ),
            Problem::Invalid { value, detail } => write!(f, "{field}: Invalid value: {}: {detail}", printed(value)),
            Problem::Unsupported { value, supported } => {
                let supported: Vec<String> =
                    supported.iter().map(|v| if v.is_null() { "<nil>".into() } else { printed(v) }).collect();
                write!(f, "{field}: Unsupported value: {}: supported values: {}", printed(value), supported.join(", "))
            }
            Problem::TooLong { max } => write!(f, "{field}: Too long: may not be more than {max} bytes"),
            Problem::TooMany { count, max } => write!(f, "{field}: Too many: {count}: must have at most {max} items"),
        }
    }
}

/// The CRD's `openAPIV3Schema`.
pub fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = serde_json::to_value(super::crd()).unwrap_or_default();
        crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().unwrap_or_default()
    })
}

fn compiled_rules() -> &'static CompiledSchema {
    static COMPILED: OnceLock<CompiledSchema> = OnceLock::new();
    COMPILED.get_or_init(|| compile_schema(schema()))
}

/// The outcome of validating one InferenceDeployment: the object as the API server would store
/// it (nulls of fields that are not `nullable` pruned, defaults applied, no `status`), or every
/// problem found.
pub fn validate(object: &Value) -> Result<Value, Vec<FieldError>> {
    let schema = schema();
    let mut pruned = object.clone();
    prune_nulls(&mut pruned, schema);
    let mut defaulted = apply_defaults(schema, &pruned);
    // The status subresource ignores a status sent with the object; `metadata` is the API
    // server's, of which the name and namespace are checked.
    if let Some(root) = defaulted.as_object_mut() {
        root.remove("status");
    }
    let mut errors = Vec::new();
    check_metadata(&defaulted, &mut errors);
    match defaulted.get("spec") {
        Some(spec) => walk(spec, schema.pointer("/properties/spec").unwrap_or(&Value::Null), "spec", &mut errors),
        None => errors.push(FieldError { field: "spec".into(), problem: Problem::Required }),
    }
    if errors.iter().any(FieldError::blocks_rules) {
        errors.push(FieldError {
            field: "spec".into(),
            problem: Problem::Invalid {
                value: Value::String("object".into()),
                detail: "some validation rules were not checked because the object was invalid; correct the \
                         existing errors to complete validation"
                    .into(),
            },
        });
    } else if let Some(spec) = defaulted.get("spec") {
        // The API server's CEL reads a null field as absent: `has()` is false, its rules skipped.
        let mut spec = spec.clone();
        drop_nulls(&mut spec);
        let only_spec = Value::Object(Map::from_iter([("spec".to_string(), spec)]));
        if let Err(failures) = Validator::new().validate_compiled(compiled_rules(), &only_spec, None) {
            for failure in failures.into_vec() {
                let kind = schema_at(schema, &failure.field_path)
                    .and_then(|s| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("object");
                errors.push(FieldError {
                    field: failure.field_path,
                    problem: Problem::Invalid { value: Value::String(kind.into()), detail: failure.message },
                });
            }
        }
    }
    if errors.is_empty() { Ok(defaulted) } else { Err(errors) }
}

/// The schema of the field at a dotted path with `[i]` indexes, as the CEL engine reports them:
/// the API server prints a failed rule's value as that schema's type.
fn schema_at<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut schema = root;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, indexes) = part.split_once('[').unwrap_or((part, ""));
        schema = schema
            .pointer(&format!("/properties/{name}"))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))?;
        for _ in indexes.split('[').filter(|i| !i.is_empty()) {
            schema = schema.get("items")?;
        }
    }
    Some(schema)
}

/// Removes `null` where the schema does not say `nullable`, as the API server does before
/// defaulting (a null there means "unset").
fn prune_nulls(value: &mut Value, schema: &Value) {
    if preserves_unknown(schema) && schema.get("properties").is_none() {
        return;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|v| v.is_object());
            fields.retain(|name, field| {
                let field_schema = properties.and_then(|p| p.get(name)).or(additional);
                !(field.is_null() && field_schema.is_some_and(|s| !nullable(s)))
            });
            for (name, field) in fields.iter_mut() {
                if let Some(field_schema) = properties.and_then(|p| p.get(name)).or(additional) {
                    prune_nulls(field, field_schema);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|item| prune_nulls(item, item_schema));
            }
        }
        _ => {}
    }
}

fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|_, field| !field.is_null());
            fields.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn nullable(schema: &Value) -> bool {
    schema.get("nullable") == Some(&Value::Bool(true))
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// `metadata.name` and `metadata.namespace`, as the API server checks every object's.
fn check_metadata(object: &Value, errors: &mut Vec<FieldError>) {
    let metadata = object.get("metadata");
    match metadata.and_then(|m| m.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => {
            if let Some(detail) = not_a_dns_subdomain(name) {
                errors.push(FieldError {
                    field: "metadata.name".into(),
                    problem: Problem::Invalid { value: Value::String(name.clone()), detail },
                });
            }
        }
        Some(Value::String(_)) | None if metadata.is_some_and(|m| m.get("generateName").is_some()) => {}
        Some(other) if !other.is_string() => errors.push(FieldError {
            field: "metadata.name".into(),
            problem: Problem::Type { value: other.clone(), expected: "string".into() },
        }),
        _ => errors.push(FieldError { field: "metadata.name".into(), problem: Problem::Required }),
    }
    if let Some(namespace) = metadata.and_then(|m| m.get("namespace")).and_then(Value::as_str)
        && let Some(detail) = not_a_dns_label(namespace)
    {
        errors.push(FieldError {
            field: "metadata.namespace".into(),
            problem: Problem::Invalid { value: Value::String(namespace.into()), detail },
        });
    }
}

/// Kubernetes' `IsDNS1123Subdomain`, in its words.
fn not_a_dns_subdomain(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    (!name.split('.').all(label_ok)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must \
         start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            .into()
    })
}

/// Kubernetes' `IsDNS1123Label`, in its words.
fn not_a_dns_label(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    (!ok).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and \
         end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            .into()
    })
}

/// The structural schema's checks of `value` at `path`, and of everything below it.
fn walk(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    // A nullable field may be null; only an enum that does not list null refuses it.
    if value.is_null() && nullable(schema) {
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            errors.push(FieldError {
                field: path.into(),
                problem: Problem::Unsupported { value: Value::Null, supported: allowed.clone() },
            });
        }
        return;
    }
    if !type_matches(value, schema) {
        let expected = if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            "integer,string".to_string()
        } else {
            schema.get("type").and_then(Value::as_str).unwrap_or("object").to_string()
        };
        errors.push(FieldError { field: path.into(), problem: Problem::Type { value: value.clone(), expected } });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(FieldError {
            field: path.into(),
            problem: Problem::Unsupported { value: value.clone(), supported: allowed.clone() },
        });
    }
    check_bounds(value, schema, path, errors);
    match value {
        Value::Object(fields) => walk_object(fields, schema, path, errors),
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(FieldError { field: path.into(), problem: Problem::TooMany { count: items.len(), max } });
            }
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    walk(item, item_schema, &format!("{path}[{index}]"), errors);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(fields: &Map<String, Value>, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|v| v.is_object());
    for (name, field) in fields {
        let at = format!("{path}.{name}");
        match properties.and_then(|p| p.get(name)).or(additional) {
            Some(field_schema) => walk(field, field_schema, &at, errors),
            None if preserves_unknown(schema) => {}
            None => {
                errors.push(unknown(&at, name, properties.map(|p| p.keys().cloned().collect()).unwrap_or_default()))
            }
        }
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !fields.contains_key(required) {
            errors.push(FieldError { field: format!("{path}.{required}"), problem: Problem::Required });
        }
    }
}

/// The OpenAPI type check as the API server makes it: an integral number is an integer, any
/// number a number, and int-or-string takes either.
fn type_matches(value: &Value, schema: &Value) -> bool {
    let integer = |value: &Value| {
        value.as_i64().is_some() || value.as_u64().is_some() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
    };
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return value.is_string() || (value.is_number() && integer(value));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_number() && integer(value),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    }
}

/// `minimum`/`maximum` (and their exclusive forms) of numbers, `maxLength` of strings.
fn check_bounds(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(number) = value.as_f64().filter(|_| value.is_number()) {
        let exclusive = |key: &str| schema.get(key) == Some(&Value::Bool(true));
        if let Some(minimum) = schema.get("minimum").and_then(Value::as_f64) {
            let (refused, words) = if exclusive("exclusiveMinimum") {
                (number <= minimum, "greater than")
            } else {
                (number < minimum, "greater than or equal to")
            };
            if refused {
                errors.push(FieldError {
                    field: path.into(),
                    problem: Problem::Invalid {
                        value: value.clone(),
                        detail: format!("{path} in body should be {words} {}", bound(&schema["minimum"])),
                    },
                });
            }
        }
        if let Some(maximum) = schema.get("maximum").and_then(Value::as_f64) {
            let (refused, words) = if exclusive("exclusiveMaximum") {
                (number >= maximum, "less than")
            } else {
                (number > maximum, "less than or equal to")
            };
            if refused {
                errors.push(FieldError {
                    field: path.into(),
                    problem: Problem::Invalid {
                        value: value.clone(),
                        detail: format!("{path} in body should be {words} {}", bound(&schema["maximum"])),
                    },
                });
            }
        }
    }
    if let (Some(text), Some(max)) = (value.as_str(), schema.get("maxLength").and_then(Value::as_u64))
        && text.chars().count() as u64 > max
    {
        errors.push(FieldError { field: path.into(), problem: Problem::TooLong { max } });
    }
}

fn bound(value: &Value) -> String {
    value.as_f64().map(|f| if f.fract() == 0.0 { format!("{}", f as i64) } else { f.to_string() }).unwrap_or_default()
}

fn unknown(path: &str, name: &str, known: Vec<String>) -> FieldError {
    let suggestion = known
        .iter()
        .map(|candidate| (strsim::levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min()
        .map(|(_, candidate)| candidate.clone());
    FieldError { field: path.into(), problem: Problem::Unknown { suggestion, known } }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn base() -> Value {
        json!({
            "apiVersion": "kvpilot.dev/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": "llama", "namespace": "serving"},
            "spec": {
                "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "config": {"hub": {}}},
                "decode": {"replicas": 2, "tensorParallel": 2}
            }
        })
    }

    fn problems(object: &Value) -> Vec<String> {
        validate(object).err().unwrap_or_default().iter().map(ToString::to_string).collect()
    }

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
            problems(&object),
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
    fn every_type_error_is_reported_at_once_and_blocks_the_rules() {
        let mut object = base();
        object["spec"]["decode"]["replicas"] = json!("two");
        object["spec"]["decode"]["tensorParallel"] = json!(2.5);
        object["spec"]["decode"]["pageSize"] = json!(0);
        assert_eq!(
            problems(&object),
            [
                "spec.decode.replicas: Invalid value: \"two\": spec.decode.replicas in body must be of type integer: \"string\"",
                "spec.decode.tensorParallel: Invalid value: 2.5: spec.decode.tensorParallel in body must be of type integer: \"number\"",
                "spec: Invalid value: \"object\": some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            ]
        );
    }

    #[test]
    fn the_crd_rules_are_evaluated_with_their_messages_and_paths() {
        let mut object = base();
        object["spec"]["decode"]["tensorParallel"] = json!(0);
        object["spec"]["decode"]["replicas"] = json!(-1);
        object["spec"]["disaggregation"] = json!({"bootstrapPort": 0, "hostPoolRatio": -1});
        let found = problems(&object);
        for expected in [
            "spec.decode.replicas: Invalid value: \"integer\": replicas must not be negative",
            "spec.decode.tensorParallel: Invalid value: \"integer\": tensorParallel must be at least 1",
            "spec.disaggregation.bootstrapPort: Invalid value: \"integer\": spec.disaggregation.bootstrapPort must be between 1 and 65535",
            "spec.disaggregation.hostPoolRatio: Invalid value: \"number\": spec.disaggregation.hostPoolRatio must be greater than 0",
        ] {
            assert!(found.iter().any(|f| f == expected), "{expected:?} not in {found:#?}");
        }
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_refuses() {
        let mut object = base();
        object["spec"]["decode"]["nodesPerReplica"] = json!(0);
        let found = problems(&object);
        assert!(found.iter().any(|f| f.starts_with("spec.decode") && f.contains("nodesPerReplica")), "{found:#?}");
    }

    #[test]
    fn minimums_enums_and_required_fields_speak_the_api_servers_words() {
        let mut object = base();
        object["spec"]["disaggregation"] = json!({"retractionBackup": "disk"});
        object["spec"]["model"].as_object_mut().unwrap().remove("name");
        object["spec"]["decode"]["terminationGracePeriodSeconds"] = json!(-5);
        object["metadata"]["name"] = json!("Llama_3");
        let found = problems(&object);
        assert!(found.contains(&"spec.model.name: Required value".to_string()), "{found:#?}");
        assert!(
            found.iter().any(|f| f
                .starts_with("spec.disaggregation.retractionBackup: Unsupported value: \"disk\": supported values: ")),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("metadata.name: Invalid value: \"Llama_3\": a lowercase RFC 1123 subdomain")),
            "{found:#?}"
        );
    }

    #[test]
    fn nulls_of_fields_that_are_not_nullable_are_unset_and_defaults_applied() {
        let mut object = base();
        object["spec"]["decode"]["tensorParallel"] = Value::Null;
        let stored = validate(&object).unwrap();
        assert_eq!(stored["spec"]["decode"]["tensorParallel"], 1, "the schema's default, as the API server stores it");
        object["spec"]["model"]["name"] = Value::Null;
        assert_eq!(problems(&object), ["spec.model.name: Required value"]);
    }

    #[test]
    fn every_example_is_valid() {
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
                    assert_eq!(problems(&value), Vec::<String>::new(), "{}", path.display());
                }
            }
        }
    }
}
