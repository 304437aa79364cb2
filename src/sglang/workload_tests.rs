use serde_json::json;

use super::*;

fn paths(object: &Value) -> Vec<String> {
    read_containers(object).sites.into_iter().map(|s| s.path).collect()
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": "lmsysorg/sglang:v0.5.23", "args": ["--tp", "2"]})
}

#[test]
fn templates_are_found_in_every_kind() {
    let with_template = json!({"template": {"spec": {"containers": [container("sglang")]}}});
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("batch/v1", "Job"),
    ] {
        let object = json!({"apiVersion": api_version, "kind": kind, "spec": with_template});
        assert_eq!(paths(&object), ["spec.template.spec.containers[0]"], "{kind}");
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [container("a"), container("b")]}});
    assert_eq!(paths(&pod), ["spec.containers[0]", "spec.containers[1]"]);
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": with_template}}});
    assert_eq!(paths(&cron), ["spec.jobTemplate.spec.template.spec.containers[0]"]);
    let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": with_template["template"]}}});
    let sites = read_containers(&lws).sites;
    assert_eq!(sites.len(), 1, "without a leaderTemplate the leader runs the worker's containers");
    assert_eq!(sites[0].label.as_deref(), Some("workerTemplate"));
    let rbg = json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup",
        "spec": {"roles": [{"name": "prefill", "template": with_template["template"]}, {"name": "decode", "template": with_template["template"]}]}});
    let sites = read_containers(&rbg).sites;
    assert_eq!(sites[1].path, "spec.roles[1].template.spec.containers[0]");
    assert_eq!((sites[1].role.as_deref(), sites[1].label.as_deref()), (Some("decode"), Some("role decode")));
}

#[test]
fn strategic_merge_merges_named_lists_and_replaces_the_others() {
    let base = json!({"spec": {"containers": [
        {"name": "sglang", "image": "i", "command": ["python3"], "args": ["--a"], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "ports": [{"containerPort": 80, "name": "http"}]},
        {"name": "sidecar", "image": "s"}],
        "volumes": [{"name": "v", "emptyDir": {}}]}});
    let patch = json!({"spec": {"containers": [
        {"name": "sglang", "args": ["--b"], "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
         "ports": [{"containerPort": 80, "name": "web"}]},
        {"name": "sidecar", "$patch": "delete"},
        {"name": "extra", "image": "e"}],
        "volumes": [{"name": "w", "emptyDir": {}}],
        "nodeSelector": null}});
    let merged = strategic_merge(&base, &patch);
    let containers = merged["spec"]["containers"].as_array().unwrap();
    let names: Vec<&str> = containers.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["sglang", "extra"]);
    assert_eq!(containers[0]["args"], json!(["--b"]), "args is replaced, not merged");
    assert_eq!(containers[0]["command"], json!(["python3"]), "what the patch leaves out stays");
    assert_eq!(
        containers[0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
    );
    assert_eq!(containers[0]["ports"], json!([{"containerPort": 80, "name": "web"}]));
    assert_eq!(merged["spec"]["volumes"].as_array().unwrap().len(), 2);
    assert!(merged["spec"].get("nodeSelector").is_none());
}

fn rbg_v1alpha2(roles: Value, role_templates: Value) -> Value {
    json!({"apiVersion": "workloads.x-k8s.io/v1alpha2", "kind": "RoleBasedGroup", "metadata": {"name": "pd"},
        "spec": {"roleTemplates": role_templates, "roles": roles}})
}

#[test]
fn leader_and_worker_patches_are_merged_and_located() {
    let template = json!({"metadata": {"annotations": {"kvpilot.dev/model-config": "configmap/base"}},
        "spec": {"containers": [{"name": "sglang", "image": "lmsysorg/sglang:v0.5.23", "command": ["python3", "-m", "sglang.launch_server"], "args": ["--tp", "2"]}]}});
    let object = rbg_v1alpha2(
        json!([{"name": "decode", "leaderWorkerPattern": {"size": 2, "template": template,
            "leaderTemplatePatch": {"metadata": {"annotations": {"kvpilot.dev/model-config": "configmap/leader"}}},
            "workerTemplatePatch": {"spec": {"containers": [{"name": "sglang", "args": ["--tp", "2", "--node-rank", "1"]}]}}}}]),
        json!([]),
    );
    let sites = read_containers(&object).sites;
    assert_eq!(sites.len(), 2);
    let (leader, worker) = (&sites[0], &sites[1]);
    assert_eq!(leader.member, Some(Member::Leader));
    assert_eq!(leader.path, "spec.roles[0].leaderWorkerPattern.template.spec.containers[0]");
    assert_eq!(leader.args_at, "/spec/roles/0/leaderWorkerPattern/template/spec/containers/0");
    assert_eq!(leader.annotations["kvpilot.dev/model-config"], "configmap/leader", "the patch's annotation wins");
    assert_eq!(leader.annotations_at.as_deref(), Some("/spec/roles/0/leaderWorkerPattern/template/metadata"));
    assert_eq!(worker.member, Some(Member::Worker));
    assert_eq!(worker.path, "spec.roles[0].leaderWorkerPattern.workerTemplatePatch.spec.containers[0]");
    assert_eq!(worker.command_at, "/spec/roles/0/leaderWorkerPattern/template/spec/containers/0");
    assert_eq!(worker.container["args"], json!(["--tp", "2", "--node-rank", "1"]));
    assert_eq!(worker.container["command"], json!(["python3", "-m", "sglang.launch_server"]));
    assert_eq!(worker.label.as_deref(), Some("role decode worker"));
}

#[test]
fn role_templates_are_followed_and_a_missing_one_is_named() {
    let object = rbg_v1alpha2(
        json!([
            {"name": "prefill", "standalonePattern": {"templateRef": {"name": "base",
                "patch": {"spec": {"containers": [{"name": "sglang", "args": ["--disaggregation-mode", "prefill"]}]}}}}},
            {"name": "decode", "standalonePattern": {"templateRef": {"name": "nope"}}},
            {"name": "router", "standalonePattern": {"template": "not a template"}},
        ]),
        json!([{"name": "base", "template": {"spec": {"containers": [container("sglang")]}}}]),
    );
    let discovery = read_containers(&object);
    assert_eq!(discovery.sites.len(), 1);
    assert_eq!(discovery.sites[0].path, "spec.roles[0].standalonePattern.templateRef.patch.spec.containers[0]");
    assert_eq!(discovery.sites[0].container["image"], "lmsysorg/sglang:v0.5.23");
    assert_eq!(
        discovery.warnings,
        [
            "spec.roles[1].standalonePattern.templateRef.name: no spec.roleTemplates entry is named \"nope\"; its containers are not checked",
            "spec.roles[2]: no pod template found (template, templateRef, standalonePattern, leaderWorkerPattern or \
             customComponentsPattern); its containers are not checked",
        ]
    );
}

#[test]
fn unknown_kinds_are_searched_for_containers() {
    let object = json!({"apiVersion": "example.com/v1", "kind": "Server", "metadata": {"name": "x",
            "annotations": {"containers": "not searched"}},
        "spec": {"stages": [{"podSpec": {"template": {"metadata": {"annotations": {"a": "b"}},
                "spec": {"initContainers": [{"name": "init", "image": "busybox"}], "containers": [{"name": "sglang", "image": "i", "args": []}]}}}}],
            "engine": {"mainContainer": {"image": "i", "command": ["x"]}, "runner": {"replicas": 2}},
            "containers": ["not", "containers"]},
        "status": {"containers": [{"image": "i"}]}});
    let sites = read_containers(&object).sites;
    let found: Vec<&str> = sites.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        found,
        [
            "spec.engine.mainContainer",
            "spec.stages[0].podSpec.template.spec.containers[0]",
            "spec.stages[0].podSpec.template.spec.initContainers[0]",
        ]
    );
    assert_eq!(sites[1].annotations["a"], "b");
    assert_eq!(sites[1].annotations_at.as_deref(), Some("/spec/stages/0/podSpec/template/metadata"));
    assert!(holds_containers(&object));
    assert!(!holds_containers(&json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": []}})));
}

#[test]
fn json_paths_quote_keys_that_are_not_names() {
    let object = json!({"spec": {"services": {"Decode.Worker": {"list": [1]}}}});
    assert_eq!(json_path(&object, "/spec/services/Decode.Worker/list/0"), "spec.services[\"Decode.Worker\"].list[0]");
    assert_eq!(json_path(&object, "/spec/a~1b"), "spec[\"a/b\"]");
}

#[test]
fn names_are_kubectl_style() {
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-decode"}});
    assert_eq!(object_name(&object), "deploy/web-decode");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-decode-7d9f-"}});
    assert_eq!(object_name(&pod), "pod/web-decode-7d9f-*");
    let dgd = json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"}});
    assert_eq!(object_name(&dgd), "dgd/g");
}
