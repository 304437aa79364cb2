//! Where pod templates are in the workload kinds the guard reads, as JSON pointers.

use serde_json::Value;

/// A workload kind the guard reads, with kubectl's short name for reports.
struct Kind {
    group: &'static str,
    kind: &'static str,
    short: &'static str,
}

const KINDS: &[Kind] = &[
    Kind { group: "", kind: "Pod", short: "pod" },
    Kind { group: "apps", kind: "Deployment", short: "deploy" },
    Kind { group: "apps", kind: "ReplicaSet", short: "rs" },
    Kind { group: "apps", kind: "StatefulSet", short: "sts" },
    Kind { group: "apps", kind: "DaemonSet", short: "ds" },
    Kind { group: "batch", kind: "Job", short: "job" },
    Kind { group: "batch", kind: "CronJob", short: "cronjob" },
    Kind { group: "leaderworkerset.x-k8s.io", kind: "LeaderWorkerSet", short: "lws" },
    Kind { group: "workloads.x-k8s.io", kind: "RoleBasedGroup", short: "rbg" },
];

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn find(api_version: &str, kind: &str) -> Option<&'static Kind> {
    let group = group_of(api_version);
    KINDS.iter().find(|k| k.kind == kind && k.group == group)
}

/// What the guard reads of an object: its pod templates (a Pod's spec), for telling whether an
/// update changed any of it.
pub fn template_contents(object: &Value) -> Vec<Option<&Value>> {
    pod_templates(object)
        .iter()
        .map(|t| if t.pointer.is_empty() { object.get("spec") } else { object.pointer(&t.pointer) })
        .collect()
}

/// Whether the guard reads objects of this apiVersion and kind.
pub fn is_workload(api_version: &str, kind: &str) -> bool {
    find(api_version, kind).is_some()
}

/// The API groups and resources (plural) the guard reads, for webhook rules and RBAC.
pub const RESOURCES: &[(&str, &str)] = &[
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("workloads.x-k8s.io", "rolebasedgroups"),
];

/// A pod template inside an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTemplate {
    /// JSON pointer of the template (an object with `metadata` and `spec`); "" for a Pod.
    pub pointer: String,
    /// What the template is within the object, for reports: `leaderTemplate`, `role decode`.
    pub label: Option<String>,
}

/// `deploy/NAME`, as kubectl names objects.
pub fn object_name(object: &Value) -> String {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    // Pods of a ReplicaSet or Job are admitted with only a generateName.
    let name = match object.pointer("/metadata/name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .map_or_else(|| "<unnamed>".to_string(), |prefix| format!("{prefix}*")),
    };
    let short = find(api_version, kind).map_or_else(|| kind.to_ascii_lowercase(), |k| k.short.to_string());
    format!("{short}/{name}")
}

fn template(pointer: String, label: Option<String>) -> PodTemplate {
    PodTemplate { pointer, label }
}

/// The pod templates of an object the guard reads (empty for other kinds and for objects
/// without one, such as a LeaderWorkerSet missing its leaderWorkerTemplate).
pub fn pod_templates(object: &Value) -> Vec<PodTemplate> {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some(found) = find(api_version, kind) else { return Vec::new() };
    let present = |pointer: &str| object.pointer(pointer).is_some_and(Value::is_object);
    let candidates: Vec<PodTemplate> = match found.kind {
        "Pod" => vec![template(String::new(), None)],
        "CronJob" => vec![template("/spec/jobTemplate/spec/template".into(), None)],
        "LeaderWorkerSet" => vec![
            template("/spec/leaderWorkerTemplate/leaderTemplate".into(), Some("leaderTemplate".into())),
            template("/spec/leaderWorkerTemplate/workerTemplate".into(), Some("workerTemplate".into())),
        ],
        "RoleBasedGroup" => object
            .pointer("/spec/roles")
            .and_then(Value::as_array)
            .map(|roles| {
                roles
                    .iter()
                    .enumerate()
                    .map(|(i, role)| {
                        let name =
                            role.get("name").and_then(Value::as_str).map_or_else(|| i.to_string(), str::to_string);
                        template(format!("/spec/roles/{i}/template"), Some(format!("role {name}")))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![template("/spec/template".into(), None)],
    };
    candidates.into_iter().filter(|t| t.pointer.is_empty() || present(&t.pointer)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pointers(object: &Value) -> Vec<String> {
        pod_templates(object).into_iter().map(|t| t.pointer).collect()
    }

    #[test]
    fn templates_are_found_in_every_kind() {
        let with_template = json!({"template": {"spec": {}}});
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "ReplicaSet"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("batch/v1", "Job"),
        ] {
            let object = json!({"apiVersion": api_version, "kind": kind, "spec": with_template});
            assert_eq!(pointers(&object), ["/spec/template"], "{kind}");
        }
        assert_eq!(pointers(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {}})), [""]);
        let cron =
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": with_template}}});
        assert_eq!(pointers(&cron), ["/spec/jobTemplate/spec/template"]);
        let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {}}}}});
        assert_eq!(pointers(&lws), ["/spec/leaderWorkerTemplate/workerTemplate"]);
        let rbg = json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup",
            "spec": {"roles": [{"name": "prefill", "template": {"spec": {}}}, {"name": "decode", "template": {"spec": {}}}]}});
        let templates = pod_templates(&rbg);
        assert_eq!(templates[1], template("/spec/roles/1/template".into(), Some("role decode".into())));
    }

    #[test]
    fn other_kinds_and_groups_have_none() {
        assert!(pointers(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).is_empty());
        assert!(
            pointers(&json!({"apiVersion": "example.com/v1", "kind": "Deployment", "spec": {"template": {}}}))
                .is_empty()
        );
        assert!(pointers(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {}})).is_empty());
    }

    #[test]
    fn names_are_kubectl_style() {
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-decode"}});
        assert_eq!(object_name(&object), "deploy/web-decode");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-decode-7d9f-"}});
        assert_eq!(object_name(&pod), "pod/web-decode-7d9f-*");
    }
}
