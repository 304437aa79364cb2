//! The committed CRD files equal `kvpilot crd`, and every example validates against the
//! generated schema.

mod common;

use std::path::Path;

use common::repo;
use kvpilot::api::InferenceDeployment;
use serde::Deserialize;
use serde_json::{Map, Value, json};

const REGENERATE: &str = "regenerate with: cargo run -q -- crd > crds/inferencedeployment.yaml && \
                          cp crds/inferencedeployment.yaml charts/kvpilot/crds/inferencedeployment.yaml";

#[test]
fn committed_crd_files_match_the_generated_crd() {
    let generated = kvpilot::cli::crd_yaml();
    for path in ["crds/inferencedeployment.yaml", "charts/kvpilot/crds/inferencedeployment.yaml"] {
        let file = repo(path);
        let committed = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}; {REGENERATE}"));
        assert!(committed == generated, "{path} differs from `kvpilot crd`; {REGENERATE}");
    }
}

#[test]
fn crd_has_the_contracted_shape() {
    let crd = serde_json::to_value(kvpilot::api::crd()).unwrap();
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "kvpilot.dev");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["plural"], "inferencedeployments");
    assert_eq!(spec["names"]["shortNames"], json!(["infd"]));
    assert_eq!(spec["names"]["categories"], json!(["kvpilot"]));
    let version = &spec["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert_eq!(version["subresources"]["status"], json!({}));
    assert_eq!(
        version["subresources"]["scale"],
        json!({
            "specReplicasPath": ".spec.decode.replicas",
            "statusReplicasPath": ".status.decode.replicas",
            "labelSelectorPath": ".status.decode.selector"
        })
    );
    let columns: Vec<&str> =
        version["additionalPrinterColumns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for column in ["Model", "Layout", "Backup", "Ready", "Desired", "Age"] {
        assert!(columns.contains(&column), "printer column {column} missing from {columns:?}");
    }
    let schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let config_rules = &schema["model"]["properties"]["config"]["x-kubernetes-validations"];
    assert!(config_rules[0]["rule"].as_str().unwrap().contains("has(self.inline)"), "{config_rules}");
    assert_eq!(schema["decode"]["properties"]["replicas"]["x-kubernetes-validations"][0]["rule"], "self >= 0");
    for field in ["tensorParallel", "dataParallel", "pipelineParallel", "pageSize"] {
        assert_eq!(
            schema["decode"]["properties"][field]["x-kubernetes-validations"][0]["rule"], "self >= 1",
            "{field}"
        );
    }
    let inline = &schema["model"]["properties"]["config"]["properties"]["inline"];
    assert_eq!(inline["x-kubernetes-preserve-unknown-fields"], true);
    let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    for field in ["observedGeneration", "layout", "effective", "rewrites", "decode"] {
        assert!(status.get(field).is_some(), "status.{field} missing");
    }
}

#[test]
fn every_property_of_kvpilots_own_types_keeps_its_description() {
    use schemars::generate::{SchemaGenerator, SchemaSettings};
    // Every type the CRD is made of, each once: kvpilot's own are documented field by field
    // (`kubectl explain` shows it); the Kubernetes types embedded lose their docs in the CRD.
    let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
    let spec = generator.subschema_for::<kvpilot::api::InferenceDeploymentSpec>();
    let mut missing = Vec::new();
    for (name, schema) in
        generator.definitions().iter().chain([(&"InferenceDeploymentSpec".to_string(), spec.as_value())])
    {
        if name.starts_with("io.k8s.") {
            continue;
        }
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            if property.get("description").is_none() {
                missing.push(format!("{name}.{field}"));
            }
        }
    }
    assert!(missing.is_empty(), "fields without a description (kubectl explain needs one): {missing:?}");

    // In the CRD, kvpilot's fields keep theirs, the embedded Kubernetes types' fields do not.
    let crd = serde_json::to_value(kvpilot::api::crd()).unwrap();
    let fleet = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["decode"];
    assert!(fleet["properties"]["affinity"]["description"].is_string(), "kvpilot's doc of the affinity field");
    assert!(fleet["properties"]["affinity"]["properties"]["nodeAffinity"].get("description").is_none());
    assert!(fleet["properties"]["tensorParallel"]["description"].is_string());
}

#[test]
fn the_crd_fits_the_annotation_client_side_apply_writes() {
    // `kubectl apply` (client-side) stores the whole object as JSON in the
    // kubectl.kubernetes.io/last-applied-configuration annotation; the API server refuses
    // annotations above 256 KiB in total.
    let crd = serde_json::to_string(&kvpilot::api::crd()).unwrap();
    assert!(
        crd.len() < 200 * 1024,
        "the CRD is {} bytes as JSON: plain `kubectl apply -f crds/` would fail",
        crd.len()
    );
}

/// The CRD's structural schema as a JSON Schema: `nullable` becomes a null type, objects without
/// preserve-unknown-fields refuse unknown properties (as `kubectl apply` with strict field
/// validation does), and the Kubernetes extensions are dropped.
fn to_json_schema(schema: &Value) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "properties" => {
                let props = value.as_object().unwrap().iter().map(|(k, v)| (k.clone(), to_json_schema(v))).collect();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" if value.is_object() => {
                out.insert(key.clone(), to_json_schema(value));
            }
            "nullable"
            | "x-kubernetes-validations"
            | "x-kubernetes-list-type"
            | "x-kubernetes-list-map-keys"
            | "x-kubernetes-map-type"
            | "x-kubernetes-preserve-unknown-fields"
            | "x-kubernetes-int-or-string" => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if map.get("nullable") == Some(&Value::Bool(true))
        && let Some(Value::String(t)) = out.get("type").cloned()
    {
        out.insert("type".into(), json!([t, "null"]));
    }
    if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        out.insert("type".into(), json!(["integer", "string", "null"]));
    }
    if map.contains_key("properties") && !map.contains_key("x-kubernetes-preserve-unknown-fields") {
        out.entry("additionalProperties").or_insert(Value::Bool(false));
    }
    Value::Object(out)
}

fn instance_validator() -> jsonschema::Validator {
    let crd = serde_json::to_value(kvpilot::api::crd()).unwrap();
    let mut schema = to_json_schema(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    // apiVersion, kind and metadata are checked by the API server itself, not this schema.
    schema["additionalProperties"] = Value::Bool(true);
    jsonschema::validator_for(&schema).expect("the generated schema is a valid JSON Schema")
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect()
}

#[test]
fn examples_parse_and_validate_against_the_schema() {
    let validator = instance_validator();
    let mut count = 0;
    let mut entries: Vec<_> = std::fs::read_dir(repo("examples")).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        for doc in documents(path) {
            if doc["kind"] != "InferenceDeployment" {
                continue;
            }
            count += 1;
            let errors: Vec<String> =
                validator.iter_errors(&doc).map(|e| format!("{}: {e}", e.instance_path())).collect();
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            let typed: InferenceDeployment = serde_json::from_value(doc.clone())
                .unwrap_or_else(|e| panic!("{}: does not parse as an InferenceDeployment: {e}", path.display()));
            assert!(typed.spec.model.config.source().is_ok(), "{}", path.display());
        }
    }
    assert!(count >= 5, "one example per layout kind, found {count}");
}

#[test]
fn the_schema_catches_bad_instances() {
    let validator = instance_validator();
    let mut doc = documents(&repo("examples/llama-3.1-8b-full.yaml")).remove(0);
    doc["spec"]["decode"]["replicas"] = json!("two");
    doc["spec"]["disaggregation"]["retractionBackup"] = json!("disk");
    doc["spec"]["disaggregation"]["bogusField"] = json!(true);
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.instance_path().to_string()).collect();
    for path in ["/spec/decode/replicas", "/spec/disaggregation/retractionBackup", "/spec/disaggregation"] {
        assert!(errors.iter().any(|e| e == path), "no error at {path}: {errors:?}");
    }
}

/// The CRD's CEL rules, evaluated offline as the API server would (kube's `cel` feature).
fn cel_errors(doc: &Value) -> Vec<String> {
    let crd = serde_json::to_value(kvpilot::api::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    match kube::core::cel::Validator::new().validate(schema, doc, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

#[test]
fn examples_pass_the_cel_rules() {
    for entry in std::fs::read_dir(repo("examples")).unwrap() {
        let path = entry.unwrap().path();
        // examples/guard holds SGLang workloads, not InferenceDeployments.
        if path.is_dir() {
            continue;
        }
        for doc in documents(&path).into_iter().filter(|d| d["kind"] == "InferenceDeployment") {
            assert_eq!(cel_errors(&doc), Vec::<String>::new(), "{}", path.display());
        }
    }
}

#[test]
fn cel_rules_refuse_what_the_schema_alone_cannot() {
    let base = documents(&repo("examples/llama-3.1-8b-full.yaml")).remove(0);
    // (expected message, JSON pointer of the field to set, value)
    let cases = [
        (
            "set exactly one of config.inline",
            "/spec/model/config/configMapRef",
            json!({"name": "x", "key": "config.json"}),
        ),
        ("set exactly one of config.inline", "/spec/model/config", json!({})),
        // Fleet fields' messages name the field; the API server prefixes its path.
        ("replicas must not be negative", "/spec/decode/replicas", json!(-1)),
        ("tensorParallel must be at least 1", "/spec/decode/tensorParallel", json!(0)),
        ("tensorParallel must be at least 1", "/spec/prefill/tensorParallel", json!(0)),
        ("nodesPerReplica must divide", "/spec/prefill/nodesPerReplica", json!(3)),
        (
            "spec.disaggregation.prefill describes prefill servers kvpilot does not run",
            "/spec/disaggregation/prefill",
            json!({"tensorParallel": 1}),
        ),
        (
            "spec.disaggregation.prefill.tensorParallel must be at least 1",
            "/spec/disaggregation/prefill",
            json!({"tensorParallel": 0}),
        ),
        (
            "spec.disaggregation.decodeContextParallel must be at least 1",
            "/spec/disaggregation/decodeContextParallel",
            json!(0),
        ),
        ("spec.model.name must not be empty", "/spec/model/name", json!("")),
        ("spec.sglang.version must look like 0.5.23", "/spec/sglang", json!({"version": "0.5"})),
        ("spec.sglang.version must look like 0.5.23", "/spec/sglang", json!({"version": "latest"})),
        (
            "spec.disaggregation.prefill.pageSize must be at least 1",
            "/spec/disaggregation/prefill",
            json!({"pageSize": 0}),
        ),
        ("kvCacheDtype must not be empty", "/spec/decode/kvCacheDtype", json!("")),
        (
            "spec.disaggregation.speculativeDraftModel drafts for speculative decoding",
            "/spec/disaggregation/speculativeDraftModel",
            json!({"name": "org/draft", "config": {"hub": {}}}),
        ),
        (
            "set exactly one of config.inline",
            "/spec/disaggregation/speculativeDraftModel",
            json!({"name": "org/draft", "config": {}}),
        ),
        (
            "spec.disaggregation.speculativeDraftModel.path must be relative to the volume",
            "/spec/disaggregation/speculativeDraftModel",
            json!({"name": "org/draft", "path": "drafts/../../etc", "config": {"hub": {}}}),
        ),
    ];
    for (expected, pointer, value) in cases {
        let mut doc = base.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        doc.pointer_mut(parent).unwrap().as_object_mut().unwrap().insert(key.to_string(), value);
        let errors = cel_errors(&doc);
        assert!(errors.iter().any(|e| e.starts_with(expected)), "expected {expected:?}, got {errors:?}");
    }
    let mut router_alone = base.clone();
    router_alone["spec"].as_object_mut().unwrap().remove("prefill");
    router_alone["spec"]["router"] = json!({"replicas": 2});
    let errors = cel_errors(&router_alone);
    assert!(errors.iter().any(|e| e.starts_with("spec.router routes to the prefill fleet kvpilot runs")), "{errors:?}");
    router_alone["spec"]["router"]["enabled"] = json!(false);
    assert_eq!(cel_errors(&router_alone), Vec::<String>::new(), "a disabled router needs no prefill fleet");
}

#[test]
fn cel_rules_accept_every_release_spelling() {
    let base = documents(&repo("examples/llama-3.1-8b-full.yaml")).remove(0);
    for version in ["0.5.23", "v0.5.23", "0.5.22.post1", "0.5.40"] {
        let mut doc = base.clone();
        doc["spec"]["sglang"] = json!({"version": version});
        assert_eq!(cel_errors(&doc), Vec::<String>::new(), "{version}");
    }
}

/// Regression: the derived `Default` once put `decodeContextParallel: 0` into the schema default
/// of a missing `disaggregation` block, which the CRD's own CEL rule then refused.
#[test]
fn defaults_equal_what_serde_fills_in_for_empty_blocks() {
    use kvpilot::api::{DisaggregationSpec, FleetSpec};
    assert_eq!(DisaggregationSpec::default(), serde_json::from_value::<DisaggregationSpec>(json!({})).unwrap());
    assert_eq!(FleetSpec::default(), serde_json::from_value::<FleetSpec>(json!({})).unwrap());
    let crd = serde_json::to_value(kvpilot::api::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["disaggregation"]["default"]["decodeContextParallel"], 1);
    assert_eq!(spec["decode"]["default"]["replicas"], 1);
}
