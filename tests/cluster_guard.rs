//! The SGLang guard through a real kube-apiserver: the chart's guard webhook entries (their
//! namespace and object selectors, the enforce/warn/rewrite paths) with `kvpilot operator`
//! serving them as a host process, authenticated as the chart's ServiceAccount, which reads the
//! model's config.json from the ConfigMap the workload's annotation names.
//!
//! Every webhook of the chart's configurations is pointed at the host process with a
//! `url: https://localhost:PORT/<its path>` client config, as in `cluster_admission.rs`; the
//! selectors and rules stay the chart's own.
//!
//! One test: webhook configurations are cluster-wide, so nothing else in this binary may write
//! workloads while they point at a process this test stops.

mod common;

use std::time::Duration;

use common::cluster::{
    ChartWebhooks, Cluster, TestNamespace, repo, succeeded, text, wait_for_blocking, yaml_documents,
};
use serde_json::{Value, json};

const SGLANG_MESSAGE: &str = "Host-pool retraction does not support pure-SWA models.";
const BAD_FLAG: &str = "--disaggregation-decode-retraction-backup=host_pool";

/// The rejected example (a Deployment and the ConfigMap holding its model's config.json),
/// moved into `namespace`: (deployment, configmap).
fn guard_example(namespace: &str) -> (Value, Value) {
    let mut documents = yaml_documents(&repo("examples/guard/deployment-rejected.yaml"));
    for document in &mut documents {
        document["metadata"]["namespace"] = json!(namespace);
    }
    let find = |kind: &str| documents.iter().find(|d| d["kind"] == kind).unwrap().clone();
    (find("Deployment"), find("ConfigMap"))
}

/// A namespace with `labels`, holding the example's ConfigMap.
fn guarded_namespace(cluster: &Cluster, prefix: &str, labels: &[&str]) -> TestNamespace {
    let namespace = TestNamespace::create(cluster, prefix);
    if !labels.is_empty() {
        let mut args = vec!["label", "namespace", namespace.name.as_str()];
        args.extend_from_slice(labels);
        cluster.kubectl_ok(&args);
    }
    let (_, config_map) = guard_example(&namespace.name);
    let out = cluster.kubectl_with_input(&["apply", "-f", "-"], &config_map.to_string());
    succeeded("kubectl apply of the model's ConfigMap", out);
    namespace
}

/// `kubectl apply` of `object`: (admitted, stdout, stderr — where kubectl prints warnings).
fn apply(cluster: &Cluster, object: &Value) -> (bool, String, String) {
    let out = cluster.kubectl_with_input(&["apply", "-f", "-"], &object.to_string());
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The LeaderWorkerSet and RoleBasedGroup CRD stand-ins, deleted (with their objects) on drop.
struct WorkloadCrds {
    cluster: Cluster,
}

impl WorkloadCrds {
    const FILE: &str = "tests/fixtures/cluster/workload-crds.yaml";

    fn install(cluster: &Cluster) -> WorkloadCrds {
        cluster.kubectl_ok(&["apply", "--server-side", "--field-manager=kvpilot-tests", "-f", Self::FILE]);
        let crds = WorkloadCrds { cluster: cluster.clone() };
        cluster.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=60s", "-f", Self::FILE]);
        crds
    }
}

impl Drop for WorkloadCrds {
    fn drop(&mut self) {
        let _ = self.cluster.kubectl(&["delete", "-f", Self::FILE, "--wait=false", "--ignore-not-found"]);
    }
}

/// The rewritten LeaderWorkerSet example (labelled `kvpilot.dev/on-invalid=rewrite` itself),
/// moved into `namespace`.
fn leader_worker_set(namespace: &str) -> Value {
    let mut documents = yaml_documents(&repo("examples/guard/leaderworkerset-rewritten.yaml"));
    let mut lws = documents.iter_mut().find(|d| d["kind"] == "LeaderWorkerSet").unwrap().take();
    lws["metadata"]["namespace"] = json!(namespace);
    lws
}

/// The rejected example's pod template in each built-in kind the chart's rules name besides
/// Deployment: (kind, object).
fn built_in_kinds(deployment: &Value) -> Vec<(&'static str, Value)> {
    let metadata = &deployment["metadata"];
    let selector = &deployment["spec"]["selector"];
    let template = &deployment["spec"]["template"];
    let mut run_once = template.clone();
    run_once["spec"]["restartPolicy"] = json!("Never");
    let with_template = |api_version: &str, kind: &str| {
        json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
               "spec": {"selector": selector, "template": template}})
    };
    vec![
        (
            "Pod",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": metadata["name"], "namespace": metadata["namespace"], "annotations": metadata["annotations"],
            }, "spec": template["spec"]}),
        ),
        ("ReplicaSet", with_template("apps/v1", "ReplicaSet")),
        ("StatefulSet", with_template("apps/v1", "StatefulSet")),
        ("DaemonSet", with_template("apps/v1", "DaemonSet")),
        ("Job", json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": run_once}})),
        (
            "CronJob",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata, "spec": {
                "schedule": "0 * * * *", "jobTemplate": {"spec": {"template": run_once}},
            }}),
        ),
    ]
}

/// A RoleBasedGroup whose decode role runs the rejected example's pod template.
fn role_based_group(deployment: &Value) -> Value {
    json!({
        "apiVersion": "workloads.x-k8s.io/v1alpha1",
        "kind": "RoleBasedGroup",
        "metadata": {
            "name": "pd",
            "namespace": deployment["metadata"]["namespace"],
            "annotations": deployment["metadata"]["annotations"],
        },
        "spec": {"roles": [{"name": "decode", "replicas": 1, "template": deployment["spec"]["template"]}]},
    })
}

/// A RoleBasedGroup v1alpha2 whose decode role runs the rejected example's pod template in a
/// leaderWorkerPattern, the workers' args set by a `workerTemplatePatch` (shaped like
/// sgl-project/rbg examples/inference/pd-disagg-leader-worker.yaml).
fn role_based_group_v1alpha2(deployment: &Value) -> Value {
    let template = &deployment["spec"]["template"];
    let mut worker_args = template["spec"]["containers"][0]["args"].clone();
    worker_args.as_array_mut().unwrap().extend([json!("--node-rank"), json!("1")]);
    json!({
        "apiVersion": "workloads.x-k8s.io/v1alpha2",
        "kind": "RoleBasedGroup",
        "metadata": {
            "name": "pd-v2",
            "namespace": deployment["metadata"]["namespace"],
            "annotations": deployment["metadata"]["annotations"],
        },
        "spec": {"roles": [{"name": "decode", "replicas": 1, "leaderWorkerPattern": {
            "size": 2,
            "template": template,
            "workerTemplatePatch": {"spec": {"containers": [{"name": "sglang", "args": worker_args}]}},
        }}]},
    })
}

/// A DynamoGraphDeployment (v1alpha1) whose decode worker runs the rejected example's flags
/// through `python3 -m dynamo.sglang` (shaped like ai-dynamo/dynamo
/// examples/backends/sglang/deploy/disagg.yaml).
fn dynamo_graph(deployment: &Value) -> Value {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    json!({
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {
            "name": "sglang-disagg",
            "namespace": deployment["metadata"]["namespace"],
            "annotations": deployment["metadata"]["annotations"],
        },
        "spec": {"services": {"decode": {"componentType": "worker", "subComponentType": "decode", "replicas": 1,
            "extraPodSpec": {"mainContainer": {
                "image": "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.1",
                "command": ["python3", "-m", "dynamo.sglang"],
                "args": container["args"],
            }}}}},
    })
}

#[test]
fn the_api_server_refuses_warns_rewrites_and_ignores_by_namespace_label() {
    let cluster = cluster_or_skip!();
    // The operator's controller watches InferenceDeployments.
    cluster.install_crd();
    let _workload_crds = WorkloadCrds::install(&cluster);
    let operator_namespace = format!("kvp-guard-{}", std::process::id());
    // The chart's defaults: guard enabled with rewrites, failurePolicy Ignore for workloads.
    let mut chart =
        ChartWebhooks::install(&cluster, "guard-kvpilot", &operator_namespace, &["--set", "replicaCount=1"]);
    let fullname = chart.fullname.clone();
    // The InferenceDeployment webhook and the guard's enforce and warn; the guard's two rewrites.
    let entries = |kind| cluster.webhook_ca_bundles(kind, &fullname).unwrap().len();
    assert_eq!(
        (entries("validatingwebhookconfiguration"), entries("mutatingwebhookconfiguration")),
        (3, 2),
        "the chart's webhook entries changed"
    );

    let enforce = guarded_namespace(&cluster, "kvp-guard-enforce", &["kvpilot.dev/guard=enforce"]);
    let warn = guarded_namespace(&cluster, "kvp-guard-warn", &["kvpilot.dev/guard=warn"]);
    let rewrite = guarded_namespace(
        &cluster,
        "kvp-guard-rewrite",
        &["kvpilot.dev/guard=enforce", "kvpilot.dev/on-invalid=rewrite"],
    );
    let unguarded = guarded_namespace(&cluster, "kvp-guard-none", &[]);

    // failurePolicy Ignore admits while the webhook is not yet reachable: wait for a refusal.
    let (deployment, _) = guard_example(&enforce.name);
    wait_for_blocking("the API server calls the guard", Duration::from_secs(60), || {
        chart.operator.assert_running();
        let out = cluster.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &deployment.to_string());
        (!out.status.success()).then_some(())
    });

    // enforce: refused at `kubectl apply` with the rule id, the flag and SGLang's message.
    let (admitted, _, refusal) = apply(&cluster, &deployment);
    assert!(!admitted, "the host_pool Deployment was admitted in an enforce namespace");
    assert!(refusal.contains("admission webhook \"enforce.sglang-guard.kvpilot.dev\" denied the request"), "{refusal}");
    assert!(
        refusal.contains(&format!(
            "R2 deploy/web-decode container sglang (spec.template.spec.containers[0]): {BAD_FLAG}: {SGLANG_MESSAGE}"
        )),
        "{refusal}"
    );
    assert!(cluster.get_json(&["deployment", "web-decode", "-n", &enforce.name]).is_none());
    // Every other built-in kind of the chart's rules reaches the guard too.
    for (kind, object) in built_in_kinds(&deployment) {
        let (admitted, _, refusal) = apply(&cluster, &object);
        assert!(!admitted, "a {kind} with host_pool was admitted in an enforce namespace");
        assert!(
            refusal.contains("enforce.sglang-guard.kvpilot.dev") && refusal.contains(SGLANG_MESSAGE),
            "{kind}: {refusal}"
        );
    }

    // A LeaderWorkerSet labelled kvpilot.dev/on-invalid=rewrite itself (the chart's objectSelector
    // entry) is rewritten in an enforce namespace: the leader's `sh -c` script and the workers'
    // args, each template recording it; without the label it is refused.
    let lws = leader_worker_set(&enforce.name);
    let (admitted, _, warnings) = apply(&cluster, &lws);
    assert!(admitted, "{warnings}");
    assert!(warnings.contains("Warning: kvpilot rewrote lws/decode"), "{warnings}");
    let stored = cluster.get_json(&["leaderworkerset", "decode", "-n", &enforce.name]).unwrap();
    let templates = &stored["spec"]["leaderWorkerTemplate"];
    for template in [&templates["leaderTemplate"], &templates["workerTemplate"]] {
        let container = template["spec"]["containers"][0].to_string();
        assert!(container.contains("cpu_tensor") && !container.contains("host_pool"), "{container}");
        assert!(template["metadata"]["annotations"]["kvpilot.dev/rewrites"].is_string(), "{:#}", template["metadata"]);
    }
    let mut unlabelled = lws.clone();
    unlabelled["metadata"]["name"] = json!("decode-unlabelled");
    unlabelled["metadata"]["labels"] = json!({});
    let (admitted, _, refusal) = apply(&cluster, &unlabelled);
    assert!(!admitted, "a LeaderWorkerSet with host_pool was admitted in an enforce namespace");
    assert!(refusal.contains(SGLANG_MESSAGE), "{refusal}");

    // warn: stored as written, the violation printed by kubectl as a warning.
    let (deployment, _) = guard_example(&warn.name);
    let (admitted, _, warnings) = apply(&cluster, &deployment);
    assert!(admitted, "{warnings}");
    assert!(
        warnings.contains(&format!("Warning: R2 deploy/web-decode container sglang (spec.template.spec.containers[0]): {BAD_FLAG}: {SGLANG_MESSAGE}")),
        "{warnings}"
    );
    let stored = cluster.get_json(&["deployment", "web-decode", "-n", &warn.name]).unwrap();
    assert_eq!(args_of(&stored), args_of(&deployment));
    // A Pod made from the template alone (as a ReplicaSet makes it) lacks the workload's
    // annotation: admitted unchecked, with a warning naming the annotation to add.
    let mut bare_pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": deployment["spec"]["template"]["metadata"],
        "spec": deployment["spec"]["template"]["spec"]});
    bare_pod["metadata"]["name"] = json!("bare");
    bare_pod["metadata"]["namespace"] = json!(warn.name);
    let out = cluster.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &bare_pod.to_string());
    let warnings = text(&out.stderr);
    assert!(out.status.success(), "{warnings}");
    assert!(warnings.contains("not checked") && warnings.contains("kvpilot.dev/model-config"), "{warnings}");
    // A RoleBasedGroup (a CRD kind of the chart's rules) is warned about the same way.
    let (admitted, _, warnings) = apply(&cluster, &role_based_group(&deployment));
    assert!(admitted, "{warnings}");
    assert!(
        warnings.contains(&format!(
            "Warning: R2 rbg/pd role decode container sglang (spec.roles[0].template.spec.containers[0]): {BAD_FLAG}"
        )),
        "{warnings}"
    );

    // The custom kinds read by their shape reach the guard through the chart's rules too:
    // refused in enforce, naming role, leader/worker and container.
    let (enforced, _) = guard_example(&enforce.name);
    for (object, subject) in [
        (
            role_based_group_v1alpha2(&enforced),
            "R2 rbg/pd-v2 role decode leader container sglang (spec.roles[0].leaderWorkerPattern.template.spec.containers[0])",
        ),
        (
            dynamo_graph(&enforced),
            "R2 dgd/sglang-disagg service decode container <unnamed> (spec.services.decode.extraPodSpec.mainContainer)",
        ),
    ] {
        let (admitted, _, refusal) = apply(&cluster, &object);
        assert!(!admitted, "{subject}: admitted in an enforce namespace");
        assert!(refusal.contains(subject) && refusal.contains(SGLANG_MESSAGE), "{refusal}");
    }

    // enforce + on-invalid=rewrite: the mutating guard rewrites the flag before the validating
    // guard sees it, so the rewritten Deployment is admitted and stored.
    let (deployment, _) = guard_example(&rewrite.name);
    let (admitted, _, warnings) = apply(&cluster, &deployment);
    assert!(admitted, "{warnings}");
    assert!(
        warnings.contains(
            "Warning: kvpilot rewrote deploy/web-decode container sglang (spec.template.spec.containers[0]):"
        ),
        "{warnings}"
    );
    let stored = cluster.get_json(&["deployment", "web-decode", "-n", &rewrite.name]).unwrap();
    let expected: Vec<String> =
        args_of(&deployment).into_iter().map(|a| if a == "host_pool" { "cpu_tensor".to_string() } else { a }).collect();
    assert_eq!(args_of(&stored), expected, "only the retraction backup changes, in place");
    let record = stored["spec"]["template"]["metadata"]["annotations"]["kvpilot.dev/rewrites"].as_str();
    assert!(record.is_some_and(|r| r.contains("cpu_tensor")), "{:#}", stored["spec"]["template"]["metadata"]);
    // A second apply of the same manifest (an UPDATE) is rewritten the same way, not refused.
    let (admitted, _, stderr) = apply(&cluster, &deployment);
    assert!(admitted, "{stderr}");
    let again = cluster.get_json(&["deployment", "web-decode", "-n", &rewrite.name]).unwrap();
    assert_eq!(args_of(&again), expected);

    // Custom kinds are rewritten where each pod's command line sits: the RoleBasedGroup leader's
    // in the base template, its workers' in the workerTemplatePatch; Dynamo's in the mainContainer.
    let (admitted, _, warnings) = apply(&cluster, &role_based_group_v1alpha2(&deployment));
    assert!(admitted, "{warnings}");
    let stored =
        cluster.get_json(&["rolebasedgroups.v1alpha2.workloads.x-k8s.io", "pd-v2", "-n", &rewrite.name]).unwrap();
    let pattern = &stored["spec"]["roles"][0]["leaderWorkerPattern"];
    for template in [&pattern["template"], &pattern["workerTemplatePatch"]] {
        let args = template["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains("cpu_tensor") && !args.contains("host_pool"), "{args}");
        assert!(template["metadata"]["annotations"]["kvpilot.dev/rewrites"].is_string(), "{template:#}");
    }
    assert_eq!(
        pattern["workerTemplatePatch"]["spec"]["containers"][0]["args"].as_array().unwrap().last().unwrap(),
        "1"
    );
    let (admitted, _, warnings) = apply(&cluster, &dynamo_graph(&deployment));
    assert!(admitted, "{warnings}");
    let stored = cluster.get_json(&["dynamographdeployment", "sglang-disagg", "-n", &rewrite.name]).unwrap();
    let main = &stored["spec"]["services"]["decode"]["extraPodSpec"]["mainContainer"];
    assert!(main["args"].to_string().contains("cpu_tensor"), "{main:#}");

    // Server-side apply (GitOps tools' way) is rewritten too, the first time and on every re-apply.
    let mut server_side = deployment.clone();
    server_side["metadata"]["name"] = json!("web-decode-ssa");
    server_side["spec"]["selector"]["matchLabels"]["app"] = json!("web-decode-ssa");
    server_side["spec"]["template"]["metadata"]["labels"]["app"] = json!("web-decode-ssa");
    for round in ["create", "re-apply"] {
        let out = cluster.kubectl_with_input(
            &["apply", "--server-side", "--field-manager=gitops", "-f", "-"],
            &server_side.to_string(),
        );
        assert!(out.status.success(), "server-side {round}: {}", text(&out.stderr));
        let stored = cluster.get_json(&["deployment", "web-decode-ssa", "-n", &rewrite.name]).unwrap();
        assert_eq!(args_of(&stored), expected, "server-side {round}");
    }

    // The controllers' own writes pass the guard too: the ReplicaSet and the Pod the
    // Deployment makes carry the rewritten flag and are admitted in the enforce namespace.
    for kind in ["replicaset", "pod"] {
        let stored = wait_for_blocking(&format!("the Deployment's {kind}"), Duration::from_secs(60), || {
            let list = cluster.get_json(&[kind, "-l", "app=web-decode", "-n", &rewrite.name])?;
            list["items"].as_array()?.first().cloned()
        });
        let spec = if kind == "pod" { &stored["spec"] } else { &stored["spec"]["template"]["spec"] };
        let args: Vec<&str> =
            spec["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(args.contains(&"cpu_tensor") && !args.contains(&"host_pool"), "{kind}: {args:?}");
    }
    // In the warn namespace they are admitted as written.
    wait_for_blocking("the warned Deployment's pod", Duration::from_secs(60), || {
        let list = cluster.get_json(&["pod", "-l", "app=web-decode", "-n", &warn.name])?;
        (!list["items"].as_array()?.is_empty()).then_some(())
    });

    // No label: never sent to kvpilot, stored unchanged and without warnings.
    let (deployment, _) = guard_example(&unguarded.name);
    let (admitted, _, stderr) = apply(&cluster, &deployment);
    assert!(admitted, "{stderr}");
    assert!(!stderr.contains("Warning"), "{stderr}");
    let stored = cluster.get_json(&["deployment", "web-decode", "-n", &unguarded.name]).unwrap();
    assert_eq!(args_of(&stored), args_of(&deployment));
    assert!(stored["spec"]["template"]["metadata"]["annotations"]["kvpilot.dev/rewrites"].is_null());

    // Labelling that namespace enforce later, like Pod Security Admission: writes that leave the
    // pod template alone (labels, replicas) still pass; a changed template is checked.
    cluster.kubectl_ok(&["label", "namespace", &unguarded.name, "kvpilot.dev/guard=enforce"]);
    let mut copy = deployment.clone();
    copy["metadata"]["name"] = json!("web-decode-copy");
    wait_for_blocking("the API server sends the relabelled namespace to the guard", Duration::from_secs(60), || {
        let out = cluster.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &copy.to_string());
        (!out.status.success()).then_some(())
    });
    cluster.kubectl_ok(&["label", "deployment", "web-decode", "team=a", "-n", &unguarded.name]);
    let mut scaled = deployment.clone();
    scaled["spec"]["replicas"] = json!(2);
    let (admitted, _, stderr) = apply(&cluster, &scaled);
    assert!(admitted, "a replica change was refused for flags admitted before: {stderr}");
    let mut changed = scaled.clone();
    let port = args_of(&changed).iter().position(|a| a == "--port").unwrap() + 1;
    changed["spec"]["template"]["spec"]["containers"][0]["args"][port] = json!("30001");
    let (admitted, _, refusal) = apply(&cluster, &changed);
    assert!(!admitted, "a changed pod template with host_pool was admitted");
    assert!(refusal.contains(SGLANG_MESSAGE), "{refusal}");

    // The chart's guard.failurePolicy Ignore: with kvpilot down, guarded namespaces still admit
    // workloads (unchecked) instead of blocking every Deployment.
    chart.operator.assert_running();
    chart.operator.stop();
    let (deployment, _) = guard_example(&enforce.name);
    let (admitted, _, stderr) = apply(&cluster, &deployment);
    assert!(admitted, "refused with kvpilot down and failurePolicy Ignore: {stderr}");
    drop(chart);
}
