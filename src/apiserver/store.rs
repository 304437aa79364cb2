//! The object store behind the in-process API server: resource versions, the event log that
//! watches replay, write semantics (no-op detection, generation, status subresource) and
//! owner-reference garbage collection.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// A resource type the server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceType {
    /// API group (`""` for core).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource name.
    pub plural: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `/status` is a subresource (main-resource writes then keep status as it is).
    pub status_subresource: bool,
}

impl ResourceType {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// The types served: what kvpilot, kube-runtime's Recorder and the lease manager use.
pub const RESOURCES: &[ResourceType] = &[
    ResourceType { group: "", version: "v1", kind: "Pod", plural: "pods", namespaced: true, status_subresource: true },
    ResourceType {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
        status_subresource: true,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        status_subresource: true,
    },
    ResourceType {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "kvpilot.dev",
        version: "v1alpha1",
        kind: "InferenceDeployment",
        plural: "inferencedeployments",
        namespaced: true,
        status_subresource: true,
    },
];

/// Finds a served type by group, version and plural.
pub fn resource_type(group: &str, version: &str, plural: &str) -> Option<ResourceType> {
    RESOURCES.iter().copied().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// An API error, rendered as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into() }
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{}.{} \"{name}\" not found", rt.plural, rt.group))
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code
        })
    }
}

/// `ADDED`, `MODIFIED` or `DELETED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as watches deliver it.
#[derive(Debug, Clone)]
pub struct Change {
    pub resource_version: u64,
    pub resource: ResourceType,
    pub event: EventType,
    pub object: Value,
}

type Key = (ResourceType, String, String);

/// How an update is made.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The resourceVersion the writer read; a stale one gets 409.
    pub expected_version: Option<&'a str>,
    /// A `/status` write: only status changes.
    pub status_only: bool,
    /// The field manager making the write.
    pub manager: &'a str,
}

/// Leaf paths of an object's content (`spec.a.b`, `metadata.labels.x`), arrays counted as
/// leaves: the unit of field ownership in this model.
pub fn leaves(value: &Value) -> BTreeMap<String, Value> {
    fn walk(value: &Value, path: String, out: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    walk(child, if path.is_empty() { key.clone() } else { format!("{path}.{key}") }, out);
                }
            }
            other => {
                out.insert(path, other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    if let Some(map) = value.as_object() {
        for (key, child) in map {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
                        if let Some(v) = child.get(field) {
                            walk(v, format!("metadata.{field}"), &mut out);
                        }
                    }
                }
                _ => walk(child, key.clone(), &mut out),
            }
        }
    }
    out
}

/// Objects and history.
#[derive(Default)]
pub struct Store {
    resource_version: u64,
    uid_counter: u64,
    objects: BTreeMap<Key, Value>,
    log: Vec<Change>,
    /// Which field manager last set each leaf of each object.
    owners: BTreeMap<Key, BTreeMap<String, String>>,
    /// Changes at or below this version are forgotten (a watch from before gets 410 Gone).
    compacted_through: u64,
}

fn name_of(object: &Value) -> String {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn metadata(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"].as_object_mut().expect("metadata is an object")
}

/// The object without the fields the server owns, to decide whether a write changed anything.
fn comparable(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    copy
}

/// Everything but metadata and status: a change here bumps `metadata.generation`.
fn generation_relevant(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

impl Store {
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    pub fn compacted_through(&self) -> u64 {
        self.compacted_through
    }

    /// Forgets history up to now: watches from an older version then get 410 Gone.
    pub fn compact(&mut self) {
        self.compacted_through = self.resource_version;
        self.log.clear();
    }

    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(*rt, namespace.to_string(), name.to_string()))
    }

    /// Objects of a type, in one namespace or (None) all.
    pub fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((t, ns, _), _)| t == rt && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Copies of the objects of a type that satisfy `predicate`.
    pub fn list_matching(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        predicate: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((t, ns, _), v)| t == rt && namespace.is_none_or(|n| n == ns) && predicate(v))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// How many objects of a type satisfy `predicate`.
    pub fn count(&self, rt: &ResourceType, namespace: Option<&str>, predicate: impl Fn(&Value) -> bool) -> usize {
        self.objects
            .iter()
            .filter(|((t, ns, _), v)| t == rt && namespace.is_none_or(|n| n == ns) && predicate(v))
            .count()
    }

    /// Changes after `since`, of one type.
    pub fn changes_after(&self, rt: &ResourceType, since: u64) -> Vec<Change> {
        let start = self.log.partition_point(|c| c.resource_version <= since);
        self.log[start..].iter().filter(|c| c.resource == *rt).cloned().collect()
    }

    fn record(&mut self, rt: ResourceType, event: EventType, object: Value) -> Change {
        let change = Change { resource_version: self.resource_version, resource: rt, event, object };
        self.log.push(change.clone());
        change
    }

    fn next_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// POST: fills in server fields. 409 if the name is taken.
    pub fn create(
        &mut self,
        rt: ResourceType,
        namespace: &str,
        mut object: Value,
        manager: &str,
    ) -> Result<(Value, Vec<Change>), ApiError> {
        if !object.is_object() {
            return Err(ApiError::new(400, "BadRequest", "the request body must be a JSON object"));
        }
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
        let mut name = name_of(&object);
        if name.is_empty() {
            let prefix =
                object.pointer("/metadata/generateName").and_then(Value::as_str).unwrap_or_default().to_string();
            if prefix.is_empty() {
                return Err(ApiError::new(422, "Invalid", "metadata.name or metadata.generateName is required"));
            }
            name = format!("{prefix}{:05x}", self.uid_counter + 1);
        }
        if self.get(&rt, namespace, &name).is_some() {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{}.{} \"{name}\" already exists", rt.plural, rt.group),
            ));
        }
        if rt.status_subresource && rt.kind != "Pod" {
            // Status comes only through /status on types with that subresource.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        self.uid_counter += 1;
        let version = self.next_version();
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uid_counter);
        let meta = metadata(&mut object);
        meta.insert("name".into(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        }
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(version.to_string()));
        meta.insert("generation".into(), json!(1));
        meta.insert("creationTimestamp".into(), json!(k8s_openapi::jiff::Timestamp::now().to_string()));
        meta.remove("deletionTimestamp");
        let key = (rt, namespace.to_string(), name);
        self.objects.insert(key.clone(), object.clone());
        self.take_ownership(&key, &Value::Null, &object, manager);
        let change = self.record(rt, EventType::Added, object.clone());
        Ok((object, vec![change]))
    }

    /// Stores `new` in place of the current object, if it differs in anything but server fields.
    pub fn update(
        &mut self,
        rt: ResourceType,
        namespace: &str,
        name: &str,
        mut new: Value,
        write: &Write<'_>,
    ) -> Result<(Value, Vec<Change>), ApiError> {
        let Write { expected_version, status_only, manager } = *write;
        let key = (rt, namespace.to_string(), name.to_string());
        let current = self.objects.get(&key).cloned().ok_or_else(|| ApiError::not_found(&rt, name))?;
        let current_version = current.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
        if let Some(expected) = expected_version.filter(|v| !v.is_empty())
            && expected != current_version
        {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your \
                     changes to the latest version and try again",
                    rt.plural, rt.group
                ),
            ));
        }
        if !new.is_object() {
            return Err(ApiError::new(400, "BadRequest", "the request body must be a JSON object"));
        }
        if status_only {
            // /status changes status alone.
            let status = new.get("status").cloned();
            new = current.clone();
            match status {
                Some(status) => new["status"] = status,
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        } else if rt.status_subresource {
            match current.get("status") {
                Some(status) => new["status"] = status.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        }
        // Identity and server-owned metadata are the server's.
        new["apiVersion"] = json!(rt.api_version());
        new["kind"] = json!(rt.kind);
        {
            let current_meta = current["metadata"].as_object().cloned().unwrap_or_default();
            let meta = metadata(&mut new);
            for field in ["name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion"] {
                match current_meta.get(field) {
                    Some(value) => meta.insert(field.into(), value.clone()),
                    None => meta.remove(field),
                };
            }
        }
        if generation_relevant(&new) != generation_relevant(&current) {
            let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1) + 1;
            metadata(&mut new).insert("generation".into(), json!(generation));
        }
        if comparable(&new) == comparable(&current) {
            return Ok((current, Vec::new()));
        }
        let version = self.next_version();
        metadata(&mut new).insert("resourceVersion".into(), json!(version.to_string()));
        self.take_ownership(&key, &current, &new, manager);
        self.objects.insert(key, new.clone());
        let change = self.record(rt, EventType::Modified, new.clone());
        Ok((new, vec![change]))
    }

    /// DELETE, then the garbage collector: objects owned (by uid) by a deleted object go too.
    pub fn delete(&mut self, rt: ResourceType, namespace: &str, name: &str) -> Result<(Value, Vec<Change>), ApiError> {
        let key = (rt, namespace.to_string(), name.to_string());
        let removed = self.objects.remove(&key).ok_or_else(|| ApiError::not_found(&rt, name))?;
        let mut changes = vec![self.deleted(rt, removed.clone())];
        let mut pending: Vec<String> =
            removed.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string).into_iter().collect();
        while let Some(owner_uid) = pending.pop() {
            let owned: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, object)| {
                    object
                        .pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid.as_str()))
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in owned {
                if let Some(object) = self.objects.remove(&key) {
                    if let Some(uid) = object.pointer("/metadata/uid").and_then(Value::as_str) {
                        pending.push(uid.to_string());
                    }
                    changes.push(self.deleted(key.0, object));
                }
            }
        }
        Ok((removed, changes))
    }

    /// The leaves `manager` changed become its own.
    fn take_ownership(&mut self, key: &Key, before: &Value, after: &Value, manager: &str) {
        let before = leaves(before);
        let owners = self.owners.entry(key.clone()).or_default();
        for (path, value) in leaves(after) {
            if before.get(&path) != Some(&value) {
                owners.insert(path, manager.to_string());
            }
        }
    }

    /// For an apply without `force`: the leaves of `body` that would change a value another
    /// manager set (server-side apply's conflict rule).
    pub fn apply_conflicts(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        body: &Value,
        manager: &str,
    ) -> Vec<String> {
        let key = (*rt, namespace.to_string(), name.to_string());
        let (Some(current), Some(owners)) = (self.objects.get(&key), self.owners.get(&key)) else { return Vec::new() };
        let current = leaves(current);
        leaves(body)
            .into_iter()
            .filter(|(path, value)| {
                current.get(path).is_some_and(|v| v != value) && owners.get(path).is_some_and(|owner| owner != manager)
            })
            .map(|(path, _)| format!("{path} (owned by {})", owners[&path]))
            .collect()
    }

    fn deleted(&mut self, rt: ResourceType, mut object: Value) -> Change {
        self.owners.remove(&(
            rt,
            object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string(),
            name_of(&object),
        ));
        let version = self.next_version();
        metadata(&mut object).insert("resourceVersion".into(), json!(version.to_string()));
        self.record(rt, EventType::Deleted, object)
    }
}
