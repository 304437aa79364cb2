//! `kvpilot check` refuses exactly what kube-apiserver refuses. Mutations are generated from the
//! committed CRD's own schema (a new field is covered without a new test) and applied to every
//! example's InferenceDeployment: every integer field set to 0, -1, 3, 7, 2.5, a string and
//! 10^12, every number likewise, every enum to an unknown value, booleans as strings, strings as
//! numbers, arrays replaced by numbers, an unknown field in every object and null in every
//! field. Each is sent to the real API server (`dryRun=All`, strict field validation, as
//! `kubectl apply` sends it) and through `kvpilot check`: every manifest the API server refuses
//! must be refused by `check` as invalid input (exit 2), and none it accepts may be.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::cluster::{Cluster, TestNamespace, text, yaml_documents, yaml_files};
use common::crd::crd_schema;
use serde_json::{Value, json};

/// One mutated manifest: where the mutation is, what it set, and the example's documents with
/// the InferenceDeployment changed.
struct Mutation {
    example: String,
    path: String,
    value: Value,
    documents: Vec<Value>,
}

/// The values tried at a field of `schema`'s type.
fn mutations_for(schema: &Value) -> Vec<Value> {
    if schema["x-kubernetes-int-or-string"] == true {
        return vec![json!(2.5), json!(true), json!(-1)];
    }
    if schema["enum"].is_array() {
        return vec![json!("Bogus"), json!(3)];
    }
    match schema["type"].as_str() {
        Some("integer") => {
            vec![json!(0), json!(-1), json!(3), json!(7), json!(2.5), json!("a string"), json!(1_000_000_000_000_i64)]
        }
        Some("number") => vec![json!(0), json!(-1), json!(2.5), json!("a string"), json!(1e12)],
        Some("boolean") => vec![json!("true"), json!(1)],
        Some("string") => vec![json!(7), json!("")],
        Some("array") => vec![json!(3)],
        Some("object") => vec![json!("an object")],
        _ => Vec::new(),
    }
}

/// Walks the InferenceDeployment `object` and its schema together; for every object present,
/// every field its schema declares (present or not) gets each mutation of its type, null, and
/// the object an unknown field.
fn mutate(object: &Value, schema: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Value)>) {
    let Some(fields) = object.as_object() else {
        if let (Some(items), Some(item_schema)) = (object.as_array(), schema.get("items")) {
            for (index, item) in items.iter().enumerate() {
                path.push(index.to_string());
                mutate(item, item_schema, path, out);
                path.pop();
            }
        }
        return;
    };
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let properties = schema["properties"].as_object();
    if properties.is_some() {
        let mut at = path.clone();
        at.push("bogusField".into());
        out.push((at, json!(1)));
    }
    for (name, field_schema) in properties.into_iter().flatten() {
        path.push(name.clone());
        for value in mutations_for(field_schema).into_iter().chain([Value::Null]) {
            out.push((path.clone(), value));
        }
        if let Some(present) = fields.get(name) {
            mutate(present, field_schema, path, out);
        }
        path.pop();
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        for (name, value) in fields {
            if properties.is_some_and(|p| p.contains_key(name)) {
                continue;
            }
            path.push(name.clone());
            mutate(value, additional, path, out);
            path.pop();
        }
    }
}

fn set_at(object: &mut Value, path: &[String], value: Value) {
    let mut at = object;
    for part in &path[..path.len() - 1] {
        at = match part.parse::<usize>() {
            Ok(index) if at.is_array() => &mut at[index],
            _ => &mut at[part.as_str()],
        };
    }
    at[path[path.len() - 1].as_str()] = value;
}

fn all_mutations(namespace: &str) -> Vec<Mutation> {
    let schema = crd_schema();
    let mut mutations = Vec::new();
    for file in yaml_files("examples") {
        let example = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut documents = yaml_documents(&file);
        for document in &mut documents {
            document["metadata"]["namespace"] = json!(namespace);
        }
        for (index, document) in documents.iter().enumerate() {
            if document["kind"] != "InferenceDeployment" {
                continue;
            }
            let mut found = Vec::new();
            let spec_schema = &schema["properties"]["spec"];
            mutate(&document["spec"], spec_schema, &mut vec!["spec".into()], &mut found);
            for (path, value) in found {
                let mut mutated = documents.clone();
                set_at(&mut mutated[index], &path, value.clone());
                mutations.push(Mutation { example: example.clone(), path: path.join("."), value, documents: mutated });
            }
        }
    }
    mutations
}

/// The API server's verdict on creating `object`: None if admitted, else its message.
async fn api_server_refusal(client: &kube::Client, object: &Value) -> Option<String> {
    let namespace = object["metadata"]["namespace"].as_str().unwrap();
    let uri = format!(
        "/apis/kvpilot.dev/v1alpha1/namespaces/{namespace}/inferencedeployments?dryRun=All&fieldValidation=Strict"
    );
    let request = http::Request::post(uri)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(object).unwrap())
        .unwrap();
    match client.request_text(request).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => {
            assert!(matches!(status.code, 400 | 422), "{status:?}");
            Some(status.message)
        }
        Err(e) => panic!("the API server did not answer: {e}"),
    }
}

fn write_manifest(dir: &Path, index: usize, mutation: &Mutation) -> PathBuf {
    let path = dir.join(format!("mutation-{index:05}.yaml"));
    let text: Vec<String> = mutation.documents.iter().map(|d| serde_json::to_string(d).unwrap()).collect();
    std::fs::write(&path, text.join("\n---\n")).unwrap();
    path
}

fn check(paths: &[&Path]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kvpilot"));
    command.args(["check", "--offline", "--output", "json"]);
    for path in paths {
        command.arg("-f").arg(path);
    }
    let out = command.output().unwrap();
    (out.status.code(), text(&out.stderr))
}

#[tokio::test]
async fn check_refuses_exactly_what_the_api_server_refuses() {
    let cluster: Cluster = cluster_or_skip!();
    cluster.install_crd();
    let namespace = TestNamespace::create(&cluster, "check-agrees");
    let client = cluster.client().await;
    let mutations = all_mutations(&namespace.name);
    assert!(mutations.len() > 1000, "only {} mutations: is the schema read?", mutations.len());

    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut refused_by_api_server = BTreeMap::new();
    for (index, mutation) in mutations.iter().enumerate() {
        let object = mutation.documents.iter().find(|d| d["kind"] == "InferenceDeployment").unwrap();
        if let Some(message) = api_server_refusal(&client, object).await {
            refused_by_api_server.insert(index, message);
        }
        files.push(write_manifest(dir.path(), index, mutation));
    }

    // One `check` over every file: its input errors name the file of each refused manifest
    // (a resource whose config.json it could not read is listed as not checked, not refused).
    let (_, stderr) = check(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    let mut disagreements = Vec::new();
    for (index, mutation) in mutations.iter().enumerate() {
        let file = files[index].display().to_string();
        let refused_by_check = stderr
            .lines()
            .any(|line| line.starts_with(&format!("kvpilot check: {file}, ")) && !line.contains(": not checked: "));
        let api_server = refused_by_api_server.get(&index);
        if refused_by_check != api_server.is_some() {
            disagreements.push(format!(
                "{} {} = {}: API server {}, check {}",
                mutation.example,
                mutation.path,
                mutation.value,
                api_server.map_or("accepts".to_string(), |m| format!("refuses ({m})")),
                if refused_by_check { "refuses" } else { "accepts" },
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} manifests disagree:\n{}",
        disagreements.len(),
        mutations.len(),
        disagreements.join("\n")
    );

    // Each manifest on its own gives the exit code the gate promises: 2 for what the API server
    // refuses, never 2 for what it accepts (a sample of every kind of mutation, one per path).
    let mut seen = std::collections::HashSet::new();
    for (index, mutation) in mutations.iter().enumerate() {
        if !seen.insert((mutation.path.clone(), refused_by_api_server.contains_key(&index))) || index % 7 != 0 {
            continue;
        }
        let (code, stderr) = check(&[files[index].as_path()]);
        let refused = refused_by_api_server.contains_key(&index);
        assert_eq!(
            code == Some(2),
            refused,
            "{} {} = {}: exit {code:?}: {stderr}",
            mutation.example,
            mutation.path,
            mutation.value
        );
    }
    eprintln!(
        "{} mutations of {} examples: {} refused by the API server and by check, {} accepted by both",
        mutations.len(),
        yaml_files("examples").len(),
        refused_by_api_server.len(),
        mutations.len() - refused_by_api_server.len()
    );
}
