//! Where the containers the guard reads sit in an object, as JSON pointers and JSON paths.
//!
//! Known kinds are read by their shape, with role names, leader/worker, and template patches
//! merged onto their base template as their controller merges them ([`strategic_merge`]):
//! the apps/batch kinds and Pods, LeaderWorkerSets, RoleBasedGroups (v1alpha1 `roles[].template`
//! with `leaderWorkerSet.patch*Template`; v1alpha2 `standalonePattern`, `leaderWorkerPattern`
//! with `leaderTemplatePatch`/`workerTemplatePatch`, `customComponentsPattern`, `roleTemplates`
//! and `templateRef.patch`), OME runtimes and InferenceServices, Dynamo graphs and AIBrix
//! StormServices. Any other kind is searched: every `containers`/`initContainers` item and
//! every `mainContainer`/`runner`/`container` object that looks like a container.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::cmdline;

/// A workload kind the guard reads by its shape, with kubectl's short name for reports.
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
    Kind { group: "ome.io", kind: "ClusterServingRuntime", short: "clusterservingruntime" },
    Kind { group: "ome.io", kind: "ServingRuntime", short: "servingruntime" },
    Kind { group: "ome.io", kind: "InferenceService", short: "inferenceservice" },
    Kind { group: "nvidia.com", kind: "DynamoGraphDeployment", short: "dgd" },
    Kind { group: "orchestration.aibrix.ai", kind: "StormService", short: "stormservice" },
];

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn find(api_version: &str, kind: &str) -> Option<&'static Kind> {
    let group = group_of(api_version);
    KINDS.iter().find(|k| k.kind == kind && k.group == group)
}

/// The API groups and resources (plural) of the core kinds the guard always admits, for
/// webhook rules.
pub const RESOURCES: &[(&str, &str)] = &[
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
];

/// A custom resource the guard reads by its shape, admitted when the chart value
/// `guard.resources.<value>` is on.
pub struct CustomResource {
    pub value: &'static str,
    pub group: &'static str,
    pub plural: &'static str,
    /// Cluster-scoped: no namespace label selects it, so only `enforce` and labelled rewrites see it.
    pub cluster_scoped: bool,
}

const fn custom(value: &'static str, group: &'static str, plural: &'static str) -> CustomResource {
    CustomResource { value, group, plural, cluster_scoped: false }
}

pub const CUSTOM_RESOURCES: &[CustomResource] = &[
    custom("leaderWorkerSets", "leaderworkerset.x-k8s.io", "leaderworkersets"),
    custom("roleBasedGroups", "workloads.x-k8s.io", "rolebasedgroups"),
    custom("omeServingRuntimes", "ome.io", "servingruntimes"),
    CustomResource {
        value: "omeClusterServingRuntimes",
        group: "ome.io",
        plural: "clusterservingruntimes",
        cluster_scoped: true,
    },
    custom("omeInferenceServices", "ome.io", "inferenceservices"),
    custom("dynamoGraphDeployments", "nvidia.com", "dynamographdeployments"),
    custom("stormServices", "orchestration.aibrix.ai", "stormservices"),
];

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

/// Which pod of a leader/worker group a container runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Member {
    Leader,
    Worker,
}

impl Member {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Worker => "worker",
        }
    }
}

/// One container the guard reads, and where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSite {
    /// The container as its pod runs it: the base template's with the patches merged on.
    pub container: Value,
    /// JSON pointer of the container whose `command` the pod runs (a patch's where the patch
    /// sets it, the base template's otherwise): rewrites of `command` items go there.
    pub command_at: String,
    /// The same for `args`.
    pub args_at: String,
    /// The JSON path reports name, of the container whose `args` (else `command`) the pod runs:
    /// `spec.roles[1].leaderWorkerPattern.workerTemplatePatch.spec.containers[0]`.
    pub path: String,
    /// The annotations of its pod template, patches merged (`kvpilot.dev/model-config`).
    pub annotations: BTreeMap<String, String>,
    /// JSON pointer of the object whose `annotations` record rewrites: the `metadata` of the
    /// template (or patch) holding `args_at`; `None` where the container is in no template.
    pub annotations_at: Option<String>,
    /// The role (RoleBasedGroup, StormService, OME component, Dynamo service) it belongs to.
    pub role: Option<String>,
    pub member: Option<Member>,
    /// What the template is within the object, for reports: `leaderTemplate`, `role decode`,
    /// `role decode leader`; `None` for kinds with one template.
    pub label: Option<String>,
    /// The pod spec it is a container of, patches merged: its other containers and volumes.
    pub pod: Option<Value>,
}

/// Every container [`read_containers`] found in an object, and what it could not follow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovery {
    pub sites: Vec<ContainerSite>,
    /// Problems of shape (a `templateRef` naming no template), each naming its JSON path.
    pub warnings: Vec<String>,
}

/// One part of what a pod runs: a pod spec, or a patch of one, in an object.
#[derive(Debug, Clone)]
struct PodSpecPart {
    /// JSON pointer of the pod spec (the object holding `containers`).
    spec: String,
    /// JSON pointer of the object whose `annotations` apply to the pod.
    annotations_at: Option<String>,
}

impl PodSpecPart {
    /// A pod template (`metadata` + `spec`) or a patch of one.
    fn template(pointer: &str) -> Self {
        Self { spec: format!("{pointer}/spec"), annotations_at: Some(format!("{pointer}/metadata")) }
    }
}

/// One pod shape: a base pod spec and the patches merged onto it, in order.
#[derive(Debug, Clone)]
struct Spot {
    parts: Vec<PodSpecPart>,
    role: Option<String>,
    member: Option<Member>,
    label: Option<String>,
}

impl Spot {
    fn new(parts: Vec<PodSpecPart>, role: Option<String>, member: Option<Member>) -> Self {
        let label = match (&role, member) {
            (Some(role), Some(member)) => Some(format!("role {role} {}", member.as_str())),
            (Some(role), None) => Some(format!("role {role}")),
            (None, Some(member)) => Some(format!("{}Template", member.as_str())),
            (None, None) => None,
        };
        Self { parts, role, member, label }
    }
}

/// Lists of containers in a pod spec, searched in every kind.
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers"];
/// Single containers: OME's `runner`, Dynamo's `mainContainer`, and `container` in other CRDs.
const SINGLE_CONTAINERS: &[&str] = &["mainContainer", "runner", "container"];

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn array_len(value: &Value, pointer: &str) -> usize {
    value.pointer(pointer).and_then(Value::as_array).map_or(0, Vec::len)
}

/// Every container the guard reads in `object`: by shape for the known kinds, by search
/// for others.
pub fn read_containers(object: &Value) -> Discovery {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mut discovery = Discovery::default();
    let spots = match find(api_version, kind).map(|k| k.kind) {
        None => {
            search_unknown(object, &mut discovery);
            return discovery;
        }
        Some("Pod") => vec![Spot::new(vec![PodSpecPart::template("")], None, None)],
        Some("CronJob") => vec![Spot::new(vec![PodSpecPart::template("/spec/jobTemplate/spec/template")], None, None)],
        Some("LeaderWorkerSet") => lws_spots(object),
        Some("RoleBasedGroup") => rbg_spots(object, &mut discovery.warnings),
        Some("ClusterServingRuntime" | "ServingRuntime") => {
            ome_spots(object, &["engineConfig", "decoderConfig", "routerConfig"])
        }
        Some("InferenceService") => ome_spots(object, &["engine", "decoder", "router"]),
        Some("DynamoGraphDeployment") => dynamo_spots(object),
        Some("StormService") => (0..array_len(object, "/spec/template/spec/roles"))
            .map(|i| {
                let role = format!("/spec/template/spec/roles/{i}");
                Spot::new(
                    vec![PodSpecPart::template(&format!("{role}/template"))],
                    Some(role_name(object, &role, i)),
                    None,
                )
            })
            .collect(),
        Some(_) => vec![Spot::new(vec![PodSpecPart::template("/spec/template")], None, None)],
    };
    for spot in spots {
        discovery.sites.extend(spot_sites(object, &spot));
    }
    discovery
}

/// What the guard reads of an object (its containers and their annotations), for telling
/// whether an update changed any of it.
pub fn inspected_contents(object: &Value) -> Vec<(Value, BTreeMap<String, String>)> {
    read_containers(object).sites.into_iter().map(|site| (site.container, site.annotations)).collect()
}

/// A role's `name`, or its index when it has none.
fn role_name(object: &Value, role: &str, index: usize) -> String {
    str_at(object, &format!("{role}/name")).map_or_else(|| index.to_string(), str::to_string)
}

fn lws_spots(object: &Value) -> Vec<Spot> {
    let base = "/spec/leaderWorkerTemplate";
    let mut spots = Vec::new();
    // Without a leaderTemplate the leader runs the workerTemplate: reading it once is enough.
    if object.pointer(&format!("{base}/leaderTemplate")).is_some() {
        spots.push(Spot::new(
            vec![PodSpecPart::template(&format!("{base}/leaderTemplate"))],
            None,
            Some(Member::Leader),
        ));
    }
    spots.push(Spot::new(vec![PodSpecPart::template(&format!("{base}/workerTemplate"))], None, Some(Member::Worker)));
    spots
}

/// The template parts of a `template` or `templateRef` (+ `patch`) under `holder`.
fn template_source(object: &Value, holder: &str, warnings: &mut Vec<String>) -> Vec<PodSpecPart> {
    if object.pointer(&format!("{holder}/template")).is_some_and(Value::is_object) {
        return vec![PodSpecPart::template(&format!("{holder}/template"))];
    }
    let Some(name) = str_at(object, &format!("{holder}/templateRef/name")) else { return Vec::new() };
    let Some(index) = (0..array_len(object, "/spec/roleTemplates"))
        .find(|i| str_at(object, &format!("/spec/roleTemplates/{i}/name")) == Some(name))
    else {
        warnings.push(format!(
            "{}.templateRef.name: no spec.roleTemplates entry is named {name:?}; its containers are not checked",
            json_path(object, holder)
        ));
        return Vec::new();
    };
    let mut parts = vec![PodSpecPart::template(&format!("/spec/roleTemplates/{index}/template"))];
    if object.pointer(&format!("{holder}/templateRef/patch")).is_some_and(Value::is_object) {
        parts.push(PodSpecPart::template(&format!("{holder}/templateRef/patch")));
    }
    parts
}

/// Leader and worker spots of a base with optional patches; one spot when neither is patched
/// (leader and worker then run the same containers).
fn leader_worker(
    object: &Value,
    base: Vec<PodSpecPart>,
    leader_patch: &str,
    worker_patch: &str,
    role: Option<String>,
) -> Vec<Spot> {
    let patched = |pointer: &str| object.pointer(pointer).is_some_and(Value::is_object);
    if !patched(leader_patch) && !patched(worker_patch) {
        return vec![Spot::new(base, role, None)];
    }
    [(leader_patch, Member::Leader), (worker_patch, Member::Worker)]
        .into_iter()
        .map(|(patch, member)| {
            let mut parts = base.clone();
            if patched(patch) {
                parts.push(PodSpecPart::template(patch));
            }
            Spot::new(parts, role.clone(), Some(member))
        })
        .collect()
}

fn rbg_spots(object: &Value, warnings: &mut Vec<String>) -> Vec<Spot> {
    let mut spots = Vec::new();
    for i in 0..array_len(object, "/spec/roles") {
        let role = format!("/spec/roles/{i}");
        let name = Some(role_name(object, &role, i));
        let found_before = spots.len();
        let warned_before = warnings.len();
        // v1alpha1: the role's own template, patched per pod by `leaderWorkerSet`.
        let own = template_source(object, &role, warnings);
        if !own.is_empty() {
            let lws = format!("{role}/leaderWorkerSet");
            spots.extend(leader_worker(
                object,
                own,
                &format!("{lws}/patchLeaderTemplate"),
                &format!("{lws}/patchWorkerTemplate"),
                name.clone(),
            ));
        }
        // v1alpha2: one pattern per role.
        let standalone = format!("{role}/standalonePattern");
        if object.pointer(&standalone).is_some() {
            let parts = template_source(object, &standalone, warnings);
            if !parts.is_empty() {
                spots.push(Spot::new(parts, name.clone(), None));
            }
        }
        let pattern = format!("{role}/leaderWorkerPattern");
        if object.pointer(&pattern).is_some() {
            let base = template_source(object, &pattern, warnings);
            if !base.is_empty() {
                spots.extend(leader_worker(
                    object,
                    base,
                    &format!("{pattern}/leaderTemplatePatch"),
                    &format!("{pattern}/workerTemplatePatch"),
                    name.clone(),
                ));
            }
        }
        let components = format!("{role}/customComponentsPattern/components");
        for j in 0..array_len(object, &components) {
            let component = format!("{components}/{j}");
            let mut spot = Spot::new(vec![PodSpecPart::template(&format!("{component}/template"))], name.clone(), None);
            let component_name = str_at(object, &format!("{component}/name")).unwrap_or("<unnamed>");
            spot.label = Some(format!("role {} component {component_name}", name.as_deref().unwrap_or_default()));
            spots.push(spot);
        }
        if spots.len() == found_before && warnings.len() == warned_before {
            warnings.push(format!(
                "{}: no pod template found (template, templateRef, standalonePattern, leaderWorkerPattern or \
                 customComponentsPattern); its containers are not checked",
                json_path(object, &role)
            ));
        }
    }
    spots
}

/// OME components: each an inline pod spec with a `runner`, and `leader`/`worker` pod specs of
/// the same shape for multi-node; annotations sit on the component itself.
fn ome_spots(object: &Value, components: &[&str]) -> Vec<Spot> {
    let mut spots = Vec::new();
    for component in components {
        let at = format!("/spec/{component}");
        if !object.pointer(&at).is_some_and(Value::is_object) {
            continue;
        }
        let role = Some(component.trim_end_matches("Config").to_string());
        let part = |spec: String| PodSpecPart { spec, annotations_at: Some(at.clone()) };
        spots.push(Spot::new(vec![part(at.clone())], role.clone(), None));
        for member in [Member::Leader, Member::Worker] {
            let member_at = format!("{at}/{}", member.as_str());
            if object.pointer(&member_at).is_some_and(Value::is_object) {
                spots.push(Spot::new(vec![part(member_at)], role.clone(), Some(member)));
            }
        }
    }
    spots
}

/// Dynamo: v1alpha1 `spec.services.NAME.extraPodSpec` (with its `mainContainer`), role from
/// `subComponentType` (else `componentType`); v1beta1 `spec.components[].podTemplate`, role
/// from `type`.
fn dynamo_spots(object: &Value) -> Vec<Spot> {
    let mut spots = Vec::new();
    if let Some(services) = object.pointer("/spec/services").and_then(Value::as_object) {
        for name in services.keys() {
            let service = format!("/spec/services/{}", escape(name));
            let role = ["subComponentType", "componentType"]
                .iter()
                .find_map(|key| str_at(object, &format!("{service}/{key}")))
                .unwrap_or(name);
            let part = PodSpecPart { spec: format!("{service}/extraPodSpec"), annotations_at: Some(service.clone()) };
            let mut spot = Spot::new(vec![part], Some(role.to_string()), None);
            spot.label = Some(format!("service {name}"));
            spots.push(spot);
        }
    }
    for i in 0..array_len(object, "/spec/components") {
        let component = format!("/spec/components/{i}");
        let name = str_at(object, &format!("{component}/name")).unwrap_or("<unnamed>").to_string();
        let role = str_at(object, &format!("{component}/type")).map_or_else(|| name.clone(), str::to_string);
        let mut spot = Spot::new(vec![PodSpecPart::template(&format!("{component}/podTemplate"))], Some(role), None);
        spot.label = Some(format!("component {name}"));
        spots.push(spot);
    }
    spots
}

/// A JSON pointer token for `text`.
pub fn escape(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// `/spec/roles/1/template` → `spec.roles[1].template`, as kubectl's field paths read.
pub fn json_path(object: &Value, pointer: &str) -> String {
    let mut path = String::new();
    let mut at = Some(object);
    for token in pointer.split('/').skip(1).map(unescape) {
        let in_array = at.is_some_and(Value::is_array);
        if in_array {
            path += &format!("[{token}]");
        } else if !token.is_empty() && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            if !path.is_empty() {
                path.push('.');
            }
            path += &token;
        } else {
            path += &format!("[{}]", serde_json::to_string(&token).unwrap_or_default());
        }
        at = at.and_then(|v| match v {
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            Value::Object(map) => map.get(&token),
            _ => None,
        });
    }
    path
}

/// Merges `patch` onto `base` as Kubernetes' strategic merge patch does for the pod template
/// fields that carry SGLang's command line: maps merge key by key (`null` deletes), the lists
/// Kubernetes declares with a merge key (containers, env, volumes, … by `name`; ports by
/// `containerPort`; volumeMounts by `mountPath`) merge item by item (an item with
/// `$patch: delete` removes its match), every other list (`command`, `args`) is replaced.
/// Other `$patch` directives and `$setElementOrder` are not modelled.
pub fn strategic_merge(base: &Value, patch: &Value) -> Value {
    merge_value(base, patch, None)
}

fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => Some("name"),
        "ports" => Some("containerPort"),
        "volumeMounts" | "volumeDevices" => Some("mountPath"),
        _ => None,
    }
}

fn merge_value(base: &Value, patch: &Value, field: Option<&str>) -> Value {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            let mut merged: Map<String, Value> = base.clone();
            for (key, value) in patch {
                if value.is_null() {
                    merged.remove(key);
                } else {
                    let next = merged.get(key).map_or_else(|| value.clone(), |old| merge_value(old, value, Some(key)));
                    merged.insert(key.clone(), next);
                }
            }
            Value::Object(merged)
        }
        (Value::Array(base), Value::Array(patch)) => match field.and_then(merge_key) {
            Some(key) => merge_list(base, patch, key),
            None => Value::Array(patch.clone()),
        },
        _ => patch.clone(),
    }
}

fn merge_list(base: &[Value], patch: &[Value], key: &str) -> Value {
    let mut merged: Vec<Value> = base.to_vec();
    for item in patch {
        let id = item.get(key).filter(|id| !id.is_null());
        let found = id.and_then(|id| merged.iter().position(|old| old.get(key) == Some(id)));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (found, delete) {
            (Some(at), true) => {
                merged.remove(at);
            }
            (None, true) => {}
            (Some(at), false) => merged[at] = merge_value(&merged[at], item, None),
            (None, false) => merged.push(item.clone()),
        }
    }
    Value::Array(merged)
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|map| map.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// The containers of one spot, merged across its parts, each with the part it sits in.
fn spot_sites(object: &Value, spot: &Spot) -> Vec<ContainerSite> {
    let present: Vec<(&PodSpecPart, &Value)> =
        spot.parts.iter().filter_map(|part| Some((part, object.pointer(&part.spec)?))).collect();
    let Some(spec) =
        present.iter().map(|(_, spec)| (*spec).clone()).reduce(|base, patch| strategic_merge(&base, &patch))
    else {
        return Vec::new();
    };
    let mut annotations = BTreeMap::new();
    for part in &spot.parts {
        if let Some(at) = &part.annotations_at {
            annotations.extend(string_map(object.pointer(&format!("{at}/annotations"))));
        }
    }
    // Each container, with where it sits in each part: (part, pointer).
    let mut found: Vec<(Value, Vec<(&PodSpecPart, String)>)> = Vec::new();
    for list in CONTAINER_LISTS {
        for (index, container) in spec.get(*list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            if !container.is_object() {
                continue;
            }
            let name = container.get("name").filter(|n| !n.is_null());
            let holders = present
                .iter()
                .filter_map(|(part, part_spec)| {
                    let items = part_spec.get(*list)?.as_array()?;
                    let at = match name {
                        Some(name) => items.iter().position(|item| item.get("name") == Some(name))?,
                        None => (index < items.len()).then_some(index)?,
                    };
                    Some((*part, format!("{}/{list}/{at}", part.spec)))
                })
                .collect();
            found.push((container.clone(), holders));
        }
    }
    for key in SINGLE_CONTAINERS {
        let Some(container) = spec.get(*key).filter(|c| is_container_shaped(c)) else { continue };
        let holders = present
            .iter()
            .filter(|(_, part_spec)| part_spec.get(*key).is_some())
            .map(|(part, _)| (*part, format!("{}/{key}", part.spec)))
            .collect();
        found.push((container.clone(), holders));
    }
    found
        .into_iter()
        .filter_map(|(container, holders)| {
            let holding = |key: &str| {
                holders.iter().rev().find(|(_, at)| object.pointer(at).is_some_and(|c| c.get(key).is_some())).cloned()
            };
            let top = holders.last()?.clone();
            let command = holding("command").unwrap_or_else(|| top.clone());
            let args = holding("args").or_else(|| holding("command")).unwrap_or(top);
            let shown = if container.get("args").is_some() { &args.1 } else { &command.1 };
            Some(ContainerSite {
                path: json_path(object, shown),
                command_at: command.1,
                annotations_at: args.0.annotations_at.clone(),
                args_at: args.1,
                container,
                annotations: annotations.clone(),
                role: spot.role.clone(),
                member: spot.member,
                label: spot.label.clone(),
                pod: Some(spec.clone()),
            })
        })
        .collect()
}

/// An object a pod could run: it names an image or a command line.
fn is_container_shaped(value: &Value) -> bool {
    value.get("image").is_some_and(Value::is_string)
        || ["command", "args"].iter().any(|key| value.get(*key).is_some_and(Value::is_array))
}

/// The fallback for kinds read by no shape: every container-shaped item of a
/// `containers`/`initContainers` list and every container-shaped `mainContainer`/`runner`/
/// `container`, anywhere outside `metadata` and `status`.
fn search_unknown(object: &Value, discovery: &mut Discovery) {
    fn walk(object: &Value, value: &Value, pointer: String, discovery: &mut Discovery) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if pointer.is_empty() && matches!(key.as_str(), "metadata" | "status") {
                        continue;
                    }
                    let child_at = format!("{pointer}/{}", escape(key));
                    let containers: Vec<(String, &Value)> = if CONTAINER_LISTS.contains(&key.as_str()) {
                        child
                            .as_array()
                            .into_iter()
                            .flatten()
                            .enumerate()
                            .filter(|(_, item)| is_container_shaped(item))
                            .map(|(i, item)| (format!("{child_at}/{i}"), item))
                            .collect()
                    } else if SINGLE_CONTAINERS.contains(&key.as_str()) && is_container_shaped(child) {
                        vec![(child_at.clone(), child)]
                    } else {
                        walk(object, child, child_at, discovery);
                        continue;
                    };
                    // A pod spec's template holds the annotations: `…/template/spec` → `…/template/metadata`.
                    let annotations_at = pointer.strip_suffix("/spec").map(|template| format!("{template}/metadata"));
                    let annotations = annotations_at
                        .as_ref()
                        .map(|at| string_map(object.pointer(&format!("{at}/annotations"))))
                        .unwrap_or_default();
                    for (at, container) in containers {
                        discovery.sites.push(ContainerSite {
                            container: container.clone(),
                            command_at: at.clone(),
                            args_at: at.clone(),
                            path: json_path(object, &at),
                            annotations: annotations.clone(),
                            annotations_at: annotations_at.clone(),
                            role: None,
                            member: None,
                            // The JSON path in the subject says where it is.
                            label: None,
                            // The map holding the container list, where it is one.
                            pod: CONTAINER_LISTS.contains(&key.as_str()).then(|| value.clone()),
                        });
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(object, item, format!("{pointer}/{i}"), discovery);
                }
            }
            _ => {}
        }
    }
    walk(object, object, String::new(), discovery);
}

/// Whether `object` is one the guard reads: a known kind, or any object holding a container.
pub fn holds_containers(object: &Value) -> bool {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    find(api_version, kind).is_some() || !read_containers(object).sites.is_empty()
}

/// The container's `env` entries with a literal value, in order: what the kubelet expands
/// `$(NAME)` in command and args from.
pub fn literal_env(container: &Value) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = var.get("name").and_then(Value::as_str) else { continue };
        if var.get("valueFrom").is_some() {
            // Unknown here: an earlier literal of the same name no longer holds.
            env.retain(|(defined, _)| defined != name);
            continue;
        }
        // A value may refer to the variables before it, as the kubelet expands them.
        let (value, _) = cmdline::expand_references(var.get("value").and_then(Value::as_str).unwrap_or_default(), &env);
        env.push((name.to_string(), value));
    }
    env
}

#[cfg(test)]
mod tests {
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
        let cron =
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "spec": {"jobTemplate": {"spec": with_template}}});
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
        assert_eq!(
            json_path(&object, "/spec/services/Decode.Worker/list/0"),
            "spec.services[\"Decode.Worker\"].list[0]"
        );
        assert_eq!(json_path(&object, "/spec/a~1b"), "spec[\"a/b\"]");
    }

    #[test]
    fn names_are_kubectl_style() {
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web-decode"}});
        assert_eq!(object_name(&object), "deploy/web-decode");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-decode-7d9f-"}});
        assert_eq!(object_name(&pod), "pod/web-decode-7d9f-*");
        let dgd =
            json!({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "g"}});
        assert_eq!(object_name(&dgd), "dgd/g");
    }
}
