//! The Helm chart with a real `helm` (v4.1.4, pinned) and `kubernetes-validate --strict` for
//! Kubernetes 1.33, for every values file in `charts/kvpilot/ci/`: lint, render, validate, and
//! check what the rendering grants and runs. `bash scripts/install-test-tools.sh` installs the
//! tools (`bash scripts/test.sh` runs it first).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{repo, test_tool as tool};
use serde::Deserialize;
use serde_json::{Value, json};

const CHART: &str = "charts/kvpilot";
const RELEASE_NAMESPACE: &str = "kvpilot-system";
/// Kinds without a schema in kubernetes-validate (third-party CRDs); checked structurally here.
const THIRD_PARTY_KINDS: &[&str] = &["Certificate", "Issuer", "ServiceMonitor"];

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program).args(args).current_dir(repo("")).output().expect("run tool")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn values_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(&format!("{CHART}/ci")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "values files: {files:?}");
    files
}

/// `helm template` output, parsed, for a values file and extra `--set`s.
fn render(values: &Path, sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec!["template", "kv", CHART, "--namespace", RELEASE_NAMESPACE, "--include-crds", "-f"];
    let values = values.to_str().unwrap();
    args.push(values);
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = run(&tool("helm"), &args);
    if !out.status.success() {
        return Err(text(&out.stderr));
    }
    Ok(serde_norway::Deserializer::from_str(&text(&out.stdout))
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|d| !d.is_null())
        .collect())
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn values_of(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let value: Value = serde_norway::from_str(&text).unwrap();
    if value.is_null() { Value::Object(Default::default()) } else { value }
}

#[test]
fn every_values_file_lints_renders_and_validates_for_kubernetes_1_33() {
    let (helm, validate) = (tool("helm"), tool("kubernetes-validate"));
    let dir = tempfile::tempdir().unwrap();
    for values in values_files() {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let lint = run(&helm, &["lint", CHART, "--strict", "-f", values.to_str().unwrap()]);
        assert!(lint.status.success(), "{name}: helm lint failed:\n{}{}", text(&lint.stdout), text(&lint.stderr));
        let objects = render(&values, &[]).unwrap_or_else(|e| panic!("{name}: helm template failed: {e}"));
        let rendered = dir.path().join(&name);
        let documents: Vec<String> = objects.iter().map(|o| serde_norway::to_string(o).unwrap()).collect();
        std::fs::write(&rendered, documents.join("---\n")).unwrap();
        let out = run(&validate, &["--strict", "-k", "1.33.0", rendered.to_str().unwrap()]);
        let report = text(&out.stdout) + &text(&out.stderr);
        assert!(out.status.success(), "{name}: kubernetes-validate failed:\n{report}");
        for warning in report.lines().filter(|l| l.starts_with("WARN")) {
            assert!(
                THIRD_PARTY_KINDS.iter().any(|k| warning.contains(&format!("kind {k} "))),
                "{name}: unexpected warning: {warning}"
            );
        }
        let validated = report.lines().filter(|l| l.contains(" passed for resource ")).count();
        let third_party =
            objects.iter().filter(|o| THIRD_PARTY_KINDS.contains(&o["kind"].as_str().unwrap_or(""))).count();
        assert_eq!(validated + third_party, objects.len(), "{name}: every object is validated:\n{report}");
    }
}

#[test]
fn hub_token_secrets_are_read_by_name_in_their_namespace_unless_all_are_allowed() {
    let default = repo(&format!("{CHART}/ci/default-values.yaml"));
    let secret_rules = |objects: &[Value]| -> Vec<(String, Value)> {
        objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .flat_map(|role| {
                let place = format!("{} {}", role["kind"].as_str().unwrap(), role["metadata"]["namespace"]);
                role["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| strings(&r["resources"]).contains(&"secrets"))
                    .map(move |r| (place.clone(), r.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let operator_namespace = format!("Role \"{RELEASE_NAMESPACE}\"");
    let elsewhere = |objects: &[Value]| -> Vec<(String, Value)> {
        secret_rules(objects).into_iter().filter(|(place, _)| *place != operator_namespace).collect()
    };
    // By default no Secret outside the operator's own namespace can be read.
    assert_eq!(elsewhere(&render(&default, &[]).unwrap()), vec![]);

    let listed = render(
        &default,
        &[
            "rbac.hubTokenSecrets[0].namespace=serving,rbac.hubTokenSecrets[0].name=hf-token",
            "rbac.hubTokenSecrets[1].namespace=serving,rbac.hubTokenSecrets[1].name=gated-token",
            "rbac.hubTokenSecrets[2].namespace=research,rbac.hubTokenSecrets[2].name=hf-token",
        ],
    )
    .unwrap();
    let rules = elsewhere(&listed);
    assert_eq!(
        rules,
        vec![
            (
                "Role \"research\"".to_string(),
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hf-token"], "verbs": ["get"]})
            ),
            (
                "Role \"serving\"".to_string(),
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hf-token", "gated-token"], "verbs": ["get"]})
            ),
        ]
    );
    let bindings: Vec<&Value> = of_kind(&listed, "RoleBinding")
        .into_iter()
        .filter(|b| b["roleRef"]["name"] == "kv-kvpilot-hub-tokens")
        .collect();
    assert_eq!(bindings.len(), 2, "one binding per namespace");

    let all = render(&default, &["rbac.readAllSecrets=true"]).unwrap();
    let rules = elsewhere(&all);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].0, "ClusterRole null");
    assert_eq!(rules[0].1["verbs"], json!(["get"]));

    let namespaced = repo(&format!("{CHART}/ci/namespaced-values.yaml"));
    let outside = render(&namespaced, &["rbac.hubTokenSecrets[0].namespace=elsewhere,rbac.hubTokenSecrets[0].name=t"]);
    let error = outside.unwrap_err();
    assert!(error.contains("rbac.hubTokenSecrets: elsewhere/t is outside watchNamespace"), "{error}");
    assert!(values_schema_refuses(&default, "rbac.hubTokenSecrets[0].name=t"), "a Secret without its namespace");
}

/// The rules of docs/install.md's RBAC table: (role, resources, by name, verbs).
fn documented_rules() -> BTreeSet<(String, Vec<String>, bool, Vec<String>)> {
    let docs = std::fs::read_to_string(repo("docs/install.md")).unwrap();
    docs.lines()
        .filter(|line| {
            ["controller", "hub-tokens", "operator", "webhook-ca"].iter().any(|r| line.starts_with(&format!("| {r} |")))
        })
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let resources: Vec<String> = cells[2].split('`').skip(1).step_by(2).map(str::to_string).collect();
            let verbs = cells[3].split(", ").map(str::to_string).collect();
            (cells[1].to_string(), resources, cells[2].ends_with("by name"), verbs)
        })
        .collect()
}

#[test]
fn docs_install_lists_every_rule_the_chart_grants_its_operator() {
    let default = repo(&format!("{CHART}/ci/default-values.yaml"));
    let sets = [
        "rbac.readAllSecrets=true",
        "rbac.hubTokenSecrets[0].namespace=serving,rbac.hubTokenSecrets[0].name=hf-token",
        "webhook.mutating.enabled=true",
        "metrics.podMonitor.enabled=true",
    ];
    let objects = render(&default, &sets).unwrap();
    let mut granted = BTreeSet::new();
    for role in objects.iter().filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap();
        let Some(suffix) = ["controller", "hub-tokens", "operator", "webhook-ca"]
            .into_iter()
            .find(|suffix| name.ends_with(&format!("-{suffix}")))
        else {
            continue;
        };
        for rule in role["rules"].as_array().unwrap() {
            let resources = strings(&rule["resources"]).into_iter().map(str::to_string).collect();
            let by_name = !strings(&rule["resourceNames"]).is_empty();
            let verbs = strings(&rule["verbs"]).into_iter().map(str::to_string).collect();
            granted.insert((suffix.to_string(), resources, by_name, verbs));
        }
    }
    assert_eq!(documented_rules(), granted, "docs/install.md's RBAC table and the chart differ");
}

/// Whether `helm template` refuses `set` on top of `values` through values.schema.json.
fn values_schema_refuses(values: &Path, set: &str) -> bool {
    render(values, &[set]).is_err_and(|e| e.contains("values don't meet the specifications of the schema"))
}

#[test]
fn rbac_has_no_wildcards_and_grants_the_controller_exactly_what_it_uses() {
    for values in values_files() {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let objects = render(&values, &[]).unwrap();
        let roles: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole").collect();
        assert!(!roles.is_empty(), "{name}");
        for role in &roles {
            for rule in role["rules"].as_array().unwrap() {
                for field in ["apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"] {
                    assert!(!strings(&rule[field]).contains(&"*"), "{name}: wildcard in {role}");
                }
                for verb in strings(&rule["verbs"]) {
                    assert!(!["escalate", "bind", "impersonate"].contains(&verb), "{name}: {verb} in {role}");
                }
                let resources = strings(&rule["resources"]);
                if resources.contains(&"secrets") {
                    let verbs = strings(&rule["verbs"]);
                    let in_release_namespace = role["metadata"]["namespace"] == RELEASE_NAMESPACE;
                    assert!(
                        verbs == ["get"] || (in_release_namespace && role["kind"] == "Role"),
                        "{name}: secrets beyond get only in the operator's namespace: {role}"
                    );
                    assert!(!verbs.contains(&"list") && !verbs.contains(&"watch"), "{name}: listing secrets: {role}");
                    // Create cannot name what it creates: the webhook's own Secret, in its namespace.
                    let creates_its_own = in_release_namespace && verbs == ["create"];
                    assert!(
                        creates_its_own || !strings(&rule["resourceNames"]).is_empty(),
                        "{name}: Secrets by name only: {role}"
                    );
                }
            }
        }
        let values = values_of(&values);
        let scoped = values["watchNamespace"].as_str().unwrap_or_default();
        let controller = roles
            .iter()
            .find(|r| r["metadata"]["name"].as_str().unwrap().ends_with("-controller"))
            .unwrap_or_else(|| panic!("{name}: no controller role"));
        let verbs_on = |resource: &str| -> BTreeSet<&str> {
            controller["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| strings(&r["resources"]).contains(&resource))
                .flat_map(|r| strings(&r["verbs"]))
                .collect()
        };
        let set = |v: &[&'static str]| v.iter().copied().collect::<BTreeSet<&str>>();
        assert_eq!(verbs_on("inferencedeployments"), set(&["get", "list", "watch"]), "{name}: never writes spec");
        assert_eq!(verbs_on("inferencedeployments/status"), set(&["get", "patch"]), "{name}");
        assert_eq!(verbs_on("pods"), set(&["get", "list", "watch", "create", "patch", "delete"]), "{name}");
        assert_eq!(verbs_on("pods/status"), set(&["patch"]), "{name}: the group-ready readiness gate only");
        assert_eq!(verbs_on("configmaps"), set(&["get", "list", "watch", "create", "patch"]), "{name}");
        let kept = set(&["get", "list", "watch", "create", "patch", "delete"]);
        for router_kind in
            ["services", "serviceaccounts", "deployments", "roles", "rolebindings", "poddisruptionbudgets"]
        {
            assert_eq!(verbs_on(router_kind), kept, "{name}: {router_kind} of the router and the fleets");
        }
        assert_eq!(
            verbs_on("podgroups"),
            set(&["list", "watch", "create", "patch", "delete"]),
            "{name}: the replicas' PodGroups, watched, applied and deleted"
        );
        let pod_group_rules: Vec<&Value> = controller["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| strings(&r["resources"]).contains(&"podgroups"))
            .collect();
        assert_eq!(pod_group_rules.len(), 1, "{name}");
        assert_eq!(
            strings(&pod_group_rules[0]["apiGroups"]),
            ["scheduling.volcano.sh", "scheduling.x-k8s.io"],
            "{name}: Volcano's and scheduler-plugins' PodGroups, no other group's"
        );
        assert_eq!(strings(&pod_group_rules[0]["resources"]), ["podgroups"], "{name}");
        // The fleets' PodMonitors only where the chart asks the controller to make them.
        let pod_monitors = values["metrics"]["podMonitor"]["enabled"].as_bool().unwrap_or(false);
        let monitor_rules: Vec<&Value> = controller["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| strings(&r["resources"]).contains(&"podmonitors"))
            .collect();
        if pod_monitors {
            assert_eq!(monitor_rules.len(), 1, "{name}");
            assert_eq!(strings(&monitor_rules[0]["apiGroups"]), ["monitoring.coreos.com"], "{name}");
            assert_eq!(strings(&monitor_rules[0]["resources"]), ["podmonitors"], "{name}");
            assert_eq!(
                verbs_on("podmonitors"),
                set(&["list", "watch", "create", "patch", "delete"]),
                "{name}: the fleets' PodMonitors, watched, applied and deleted"
            );
        } else {
            assert!(monitor_rules.is_empty(), "{name}: podmonitors granted with metrics.podMonitor.enabled off");
        }
        if scoped.is_empty() {
            assert_eq!(controller["kind"], "ClusterRole", "{name}");
        } else {
            assert_eq!(
                (controller["kind"].as_str(), controller["metadata"]["namespace"].as_str()),
                (Some("Role"), Some(scoped))
            );
            for role in of_kind(&objects, "ClusterRole") {
                let resources: Vec<&str> =
                    role["rules"].as_array().unwrap().iter().flat_map(|r| strings(&r["resources"])).collect();
                assert!(
                    resources
                        .iter()
                        .all(|r| r.starts_with("inferencedeployments") || r.ends_with("webhookconfigurations")),
                    "{name}: namespace-scoped mode grants {resources:?} cluster-wide"
                );
            }
        }
    }
}

#[test]
fn every_container_runs_restricted_and_the_flags_follow_the_values() {
    let help = text(&Command::new(env!("CARGO_BIN_EXE_kvpilot")).args(["operator", "--help"]).output().unwrap().stdout);
    for values_file in values_files() {
        let name = values_file.file_name().unwrap().to_string_lossy().into_owned();
        let objects = render(&values_file, &[]).unwrap();
        let values = values_of(&values_file);
        let deployment = of_kind(&objects, "Deployment")[0];
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        for container in pod["containers"].as_array().unwrap() {
            let security = &container["securityContext"];
            assert_eq!(security["runAsNonRoot"], true, "{name}");
            assert_eq!(security["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(security["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"], "{name}");
            assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault", "{name}");
            assert!(container["livenessProbe"].is_object() && container["readinessProbe"].is_object(), "{name}");
        }
        let args = strings(&pod["containers"][0]["args"]);
        assert_eq!(args[0], "operator");
        for flag in args.iter().skip(1) {
            let flag = flag.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} "))
                    || help.contains(&format!("{flag}\n"))
                    || help.contains(&format!("{flag} <")),
                "{name}: the chart passes {flag}, which `kvpilot operator` does not know"
            );
        }
        let replicas = values["replicaCount"].as_i64().unwrap_or(2);
        assert_eq!(deployment["spec"]["replicas"], replicas, "{name}");
        assert_eq!(args.contains(&"--leader-elect"), replicas > 1, "{name}: leader election iff replicas > 1");
        let pod_monitors = values["metrics"]["podMonitor"]["enabled"].as_bool().unwrap_or(false);
        assert_eq!(
            args.contains(&"--pod-monitors"),
            pod_monitors,
            "{name}: --pod-monitors iff metrics.podMonitor.enabled"
        );
        let webhook = values["webhook"]["enabled"].as_bool().unwrap_or(true);
        let mode = values["webhook"]["certificates"]["mode"].as_str().unwrap_or("self-signed");
        assert_eq!(args.iter().any(|a| a.starts_with("--webhook-addr")), webhook, "{name}");
        assert_eq!(args.contains(&"--webhook-certs=self-signed"), webhook && mode == "self-signed", "{name}");
        let pdb = of_kind(&objects, "PodDisruptionBudget");
        assert_eq!(pdb.len(), usize::from(replicas > 1), "{name}: a PDB iff more than one replica");
        let configurations = of_kind(&objects, "ValidatingWebhookConfiguration");
        assert_eq!(configurations.len(), usize::from(webhook), "{name}");
        if webhook {
            let configuration = configurations[0];
            let expected_policy = values["webhook"]["failurePolicy"].as_str().unwrap_or("Fail");
            assert_eq!(configuration["webhooks"][0]["failurePolicy"], expected_policy, "{name}");
            // The webhook Service reaches the pods' webhook port.
            let service_name = configuration["webhooks"][0]["clientConfig"]["service"]["name"].as_str().unwrap();
            let service =
                of_kind(&objects, "Service").into_iter().find(|s| s["metadata"]["name"] == service_name).unwrap();
            let labels = &deployment["spec"]["template"]["metadata"]["labels"];
            for (key, value) in service["spec"]["selector"].as_object().unwrap() {
                assert_eq!(&labels[key], value, "{name}: the webhook Service selects the operator pods");
            }
            assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
            if mode == "cert-manager" {
                let certificate = of_kind(&objects, "Certificate")[0];
                let inject =
                    configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str().unwrap();
                assert_eq!(
                    inject,
                    format!(
                        "{}/{}",
                        certificate["metadata"]["namespace"].as_str().unwrap(),
                        certificate["metadata"]["name"].as_str().unwrap()
                    )
                );
                let mounted = pod["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["secret"]["secretName"] == certificate["spec"]["secretName"]);
                assert!(mounted, "{name}: the certificate's Secret is mounted");
                assert!(
                    strings(&certificate["spec"]["dnsNames"])
                        .contains(&format!("{service_name}.{RELEASE_NAMESPACE}.svc").as_str())
                );
            } else {
                assert!(configuration["metadata"]["annotations"].is_null(), "{name}: no cert-manager injection");
            }
        }
    }
}

#[test]
fn bad_values_fail_at_install_naming_the_value() {
    let defaults = repo(&format!("{CHART}/ci/default-values.yaml"));
    for (set, expected) in [
        ("webhook.failurePolicy=Sometimes", "failurePolicy"),
        ("replicaCount=0", "replicaCount"),
        ("webhook.certificates.mode=vault", "mode"),
        ("logFormat=xml", "logFormat"),
        ("watchNamespace=Not_A_Namespace", "watchNamespace"),
        ("replicaCuont=3", "replicaCuont"),
        ("sglangVersion=latest", "sglangVersion"),
    ] {
        let error = render(&defaults, &[set]).expect_err(set);
        assert!(error.contains(expected), "--set {set}: {error}");
    }
}

#[test]
fn the_chart_versions_follow_the_crate() {
    let chart: Value =
        serde_norway::from_str(&std::fs::read_to_string(repo(&format!("{CHART}/Chart.yaml"))).unwrap()).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let objects = render(&repo(&format!("{CHART}/ci/default-values.yaml")), &[]).unwrap();
    let image =
        of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
    assert_eq!(image, format!("kvpilot/kvpilot:{}", env!("CARGO_PKG_VERSION")));
    let crds = of_kind(&objects, "CustomResourceDefinition");
    assert_eq!(crds.len(), 1, "the chart carries the CRD");
}

#[test]
fn the_sglang_version_value_becomes_the_operator_flag() {
    let defaults = repo(&format!("{CHART}/ci/default-values.yaml"));
    let args = |sets: &[&str]| -> Vec<String> {
        let objects = render(&defaults, sets).unwrap();
        let pod = &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
        strings(&pod["containers"][0]["args"]).into_iter().map(str::to_string).collect()
    };
    assert!(!args(&[]).iter().any(|a| a.starts_with("--sglang-version")), "unset: the newest known release");
    assert!(args(&["sglangVersion=0.5.21"]).contains(&"--sglang-version=0.5.21".to_string()));
}

/// The (API group, resource) pairs of a webhook entry's rules, in order.
fn covered(entry: &Value) -> Vec<(String, String)> {
    let mut covered = Vec::new();
    for rule in entry["rules"].as_array().unwrap() {
        for resource in strings(&rule["resources"]) {
            covered.push((strings(&rule["apiGroups"])[0].to_string(), resource.to_string()));
        }
    }
    covered
}

/// The rules a guard entry should have under `values`: the core kinds, then each custom
/// resource switched on (cluster-scoped ones only where `cluster_scoped_too`).
fn expected_rules(values: &Value, cluster_scoped_too: bool) -> Vec<(String, String)> {
    use kvpilot::sglang::workload::{CUSTOM_RESOURCES, RESOURCES};
    let core = RESOURCES.iter().map(|(g, r)| (g.to_string(), r.to_string()));
    let custom = CUSTOM_RESOURCES
        .iter()
        .filter(|c| values["guard"]["resources"][c.value] == true && (cluster_scoped_too || !c.cluster_scoped))
        .map(|c| (c.group.to_string(), c.plural.to_string()));
    core.chain(custom).collect()
}

/// The SGLang guard: one validating webhook per namespace mode on its own path, the rewrite
/// webhooks, failurePolicy Ignore by default, every workload kind, and not one RBAC rule more.
#[test]
fn the_guard_webhooks_follow_the_values_and_need_no_extra_rbac() {
    let defaults = repo(&format!("{CHART}/ci/default-values.yaml"));
    let objects = render(&defaults, &[]).unwrap();
    let webhooks = |objects: &[Value], kind: &str| -> Vec<Value> {
        of_kind(objects, kind).first().map(|c| c["webhooks"].as_array().unwrap().clone()).unwrap_or_default()
    };
    let guard_entries = |objects: &[Value], kind: &str| -> Vec<Value> {
        webhooks(objects, kind).into_iter().filter(|w| w["name"].as_str().unwrap().contains("sglang-guard")).collect()
    };
    let chart_values = values_of(&repo(&format!("{CHART}/values.yaml")));
    let validating = guard_entries(&objects, "ValidatingWebhookConfiguration");
    let paths: Vec<&str> = validating.iter().map(|w| w["clientConfig"]["service"]["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/guard/enforce", "/guard/warn"]);
    for (entry, mode) in validating.iter().zip(["enforce", "warn"]) {
        assert_eq!(entry["failurePolicy"], "Ignore");
        assert_eq!(
            entry["namespaceSelector"]["matchExpressions"],
            serde_json::json!([{"key": "kvpilot.dev/guard", "operator": "In", "values": [mode]}])
        );
        assert_eq!(covered(entry), expected_rules(&chart_values, mode == "enforce"), "{mode}");
        assert!(entry["rules"].as_array().unwrap().iter().all(|r| strings(&r["operations"]) == ["CREATE", "UPDATE"]));
    }
    let mutating = guard_entries(&objects, "MutatingWebhookConfiguration");
    assert_eq!(mutating.len(), 2);
    assert!(mutating.iter().all(|w| w["clientConfig"]["service"]["path"] == "/guard/rewrite"));
    assert_eq!(mutating[1]["objectSelector"]["matchExpressions"][0]["key"], "kvpilot.dev/on-invalid");
    let args = strings(&of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"])
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert!(args.contains(&"--mutating-webhook-configuration=kv-kvpilot".to_string()), "{args:?}");

    // Each custom resource follows its value; a cluster-scoped one only reaches the enforce entry
    // (no namespace label selects it) and the rewrite entry for labelled objects.
    let switched = render(
        &defaults,
        &[
            "guard.resources.omeClusterServingRuntimes=true",
            "guard.resources.dynamoGraphDeployments=false",
            "guard.extraResources[0].apiGroup=example.com",
            "guard.extraResources[0].resources[0]=servers",
        ],
    )
    .unwrap();
    let mut switched_values = chart_values.clone();
    switched_values["guard"]["resources"]["omeClusterServingRuntimes"] = Value::Bool(true);
    switched_values["guard"]["resources"]["dynamoGraphDeployments"] = Value::Bool(false);
    let extra = ("example.com".to_string(), "servers".to_string());
    for (entry, enforce) in guard_entries(&switched, "ValidatingWebhookConfiguration").iter().zip([true, false]) {
        let mut expected = expected_rules(&switched_values, enforce);
        expected.push(extra.clone());
        assert_eq!(covered(entry), expected, "enforce: {enforce}");
    }
    let rewrites = guard_entries(&switched, "MutatingWebhookConfiguration");
    let cluster_rewrites: Vec<bool> =
        rewrites.iter().map(|e| covered(e).contains(&("ome.io".into(), "clusterservingruntimes".into()))).collect();
    assert_eq!(cluster_rewrites, [false, true], "only the entry for labelled objects rewrites cluster-scoped ones");
    assert!(rewrites.iter().all(|e| covered(e).contains(&extra)));

    let strict = render(&defaults, &["guard.failurePolicy=Fail", "guard.rewrite=false"]).unwrap();
    assert!(guard_entries(&strict, "ValidatingWebhookConfiguration").iter().all(|w| w["failurePolicy"] == "Fail"));
    assert!(of_kind(&strict, "MutatingWebhookConfiguration").is_empty());

    let off = render(&defaults, &["guard.enabled=false"]).unwrap();
    assert!(guard_entries(&off, "ValidatingWebhookConfiguration").is_empty());
    assert!(of_kind(&off, "MutatingWebhookConfiguration").is_empty());
    let webhook_off = render(&defaults, &["webhook.enabled=false"]).unwrap();
    assert!(of_kind(&webhook_off, "ValidatingWebhookConfiguration").is_empty());

    // The guard reads ConfigMaps and token Secrets the controller may read already: its RBAC is
    // the same with and without it (but for keeping the mutating configuration's caBundle).
    let rules = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
            .flat_map(|r| r["rules"].as_array().unwrap().clone())
            .filter(|rule| !strings(&rule["resources"]).contains(&"mutatingwebhookconfigurations"))
            .collect()
    };
    let without_mutating_ca = |objects: &[Value]| -> Vec<Value> {
        rules(objects)
            .into_iter()
            .chain(
                objects
                    .iter()
                    .filter(|o| o["kind"] == "ClusterRole")
                    .flat_map(|r| r["rules"].as_array().unwrap().clone())
                    .filter(|rule| strings(&rule["resources"]).contains(&"mutatingwebhookconfigurations"))
                    .map(|mut rule| {
                        rule["resources"] = serde_json::json!(["validatingwebhookconfigurations"]);
                        rule
                    }),
            )
            .collect()
    };
    let mut with_guard = without_mutating_ca(&objects);
    let mut without_guard = rules(&off);
    let sort_key = |v: &Value| v.to_string();
    with_guard.sort_by_key(sort_key);
    without_guard.sort_by_key(sort_key);
    assert_eq!(with_guard, without_guard);
    assert!(!with_guard.iter().any(|rule| strings(&rule["resources"]).contains(&"namespaces")));
}
