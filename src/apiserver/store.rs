//! The object store behind the in-process API server: resource versions, the event log that
//! watches replay, write semantics (no-op detection, generation, status subresource) and
//! owner-reference garbage collection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::selector::LabelSelector;

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

/// The types served: what kvpilot (including its webhook certificate upkeep), kube-runtime's
/// Recorder and the lease manager use.
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
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "policy",
        version: "v1",
        kind: "PodDisruptionBudget",
        plural: "poddisruptionbudgets",
        namespaced: true,
        status_subresource: true,
    },
    ResourceType {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        status_subresource: true,
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "Role",
        plural: "roles",
        namespaced: true,
        status_subresource: false,
    },
    ResourceType {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        namespaced: true,
        status_subresource: false,
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
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "ValidatingWebhookConfiguration",
        plural: "validatingwebhookconfigurations",
        namespaced: false,
        status_subresource: false,
    },
    ResourceType {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        namespaced: false,
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

/// One change, as watches deliver it. The object is shared: every watch receives the same one.
#[derive(Debug, Clone)]
pub struct Change {
    pub resource_version: u64,
    pub resource: ResourceType,
    pub event: EventType,
    pub object: Arc<Value>,
}

type Key = (ResourceType, String, String);

/// A position in a type's listing: (namespace, name).
pub type ListPosition = (String, String);

/// Which objects a list asks for, and which page of them.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListQuery<'a> {
    /// One namespace, or all.
    pub namespace: Option<&'a str>,
    /// Label selector (equality requirements use the label index).
    pub selector: Option<&'a LabelSelector>,
    /// At most this many objects (0: no limit).
    pub limit: usize,
    /// Start after this position (a continue token's).
    pub after: Option<(&'a str, &'a str)>,
}

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
    objects: BTreeMap<Key, Arc<Value>>,
    /// (type, "key=value") → the objects of that type carrying the label.
    labels: HashMap<(ResourceType, String), BTreeSet<ListPosition>>,
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

/// Whether two objects are equal apart from the top-level fields in `skip` and the metadata
/// fields in `skip_meta`; compared in place, without copying either object.
fn equal_except(a: &Value, b: &Value, skip: &[&str], skip_meta: &[&str]) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return a == b };
    let same_field = |key: &str| {
        if key == "metadata" && !skip_meta.is_empty() {
            let (ma, mb) = (a.get(key).and_then(Value::as_object), b.get(key).and_then(Value::as_object));
            let (Some(ma), Some(mb)) = (ma, mb) else { return a.get(key) == b.get(key) };
            return ma
                .keys()
                .chain(mb.keys())
                .filter(|k| !skip_meta.contains(&k.as_str()))
                .all(|k| ma.get(k) == mb.get(k));
        }
        a.get(key) == b.get(key)
    };
    a.keys().chain(b.keys()).filter(|k| !skip.contains(&k.as_str())).all(|k| same_field(k))
}

/// Whether a write changed anything but the fields the server owns.
fn unchanged(new: &Value, current: &Value) -> bool {
    equal_except(new, current, &[], &["resourceVersion", "managedFields"])
}

/// Whether anything but metadata and status changed (what bumps `metadata.generation`).
fn same_generation(new: &Value, current: &Value) -> bool {
    equal_except(new, current, &["metadata", "status"], &[])
}

/// Leaf paths of `after` whose value differs from `before`'s, as [`leaves`] names them, found
/// by walking both at once and skipping equal subtrees (an update allocates only for changes).
fn changed_leaves(before: &Value, after: &Value) -> Vec<String> {
    fn walk(before: Option<&Value>, after: &Value, path: &mut String, out: &mut Vec<String>) {
        if before == Some(after) {
            return;
        }
        match after {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    walk(before.and_then(|b| b.get(key)), child, path, out);
                    path.truncate(len);
                }
            }
            _ => out.push(path.clone()),
        }
    }
    let mut out = Vec::new();
    let Some(map) = after.as_object() else { return out };
    for (key, child) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
                    if let Some(value) = child.get(field) {
                        let mut path = format!("metadata.{field}");
                        walk(before.pointer(&format!("/metadata/{field}")), value, &mut path, &mut out);
                    }
                }
            }
            _ => walk(before.get(key), child, &mut key.clone(), &mut out),
        }
    }
    out
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
        self.shared(rt, namespace, name).map(Arc::as_ref)
    }

    /// The stored object itself, shared (no copy).
    pub fn shared(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(&(*rt, namespace.to_string(), name.to_string()))
    }

    fn label_entries(object: &Value) -> Vec<String> {
        object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|labels| labels.iter().filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?))).collect())
            .unwrap_or_default()
    }

    /// Stores an object under its key, keeping the label index in step.
    fn put(&mut self, key: Key, object: Arc<Value>) {
        if let Some(old) = self.objects.get(&key) {
            for label in Self::label_entries(old) {
                if let Some(set) = self.labels.get_mut(&(key.0, label)) {
                    set.remove(&(key.1.clone(), key.2.clone()));
                }
            }
        }
        for label in Self::label_entries(&object) {
            self.labels.entry((key.0, label)).or_default().insert((key.1.clone(), key.2.clone()));
        }
        self.objects.insert(key, object);
    }

    /// Removes an object, keeping the label index in step.
    fn take(&mut self, key: &Key) -> Option<Arc<Value>> {
        let object = self.objects.remove(key)?;
        for label in Self::label_entries(&object) {
            let index_key = (key.0, label);
            if let Some(set) = self.labels.get_mut(&index_key) {
                set.remove(&(key.1.clone(), key.2.clone()));
                if set.is_empty() {
                    self.labels.remove(&index_key);
                }
            }
        }
        Some(object)
    }

    /// Objects of a type, in one namespace or (None) all.
    pub fn list(&self, rt: &ResourceType, namespace: Option<&str>) -> Vec<Value> {
        self.list_matching(rt, ListQuery { namespace, ..ListQuery::default() }, |_| true).0
    }

    /// Copies of the objects of a type that the query selects and `predicate` accepts, in
    /// (namespace, name) order, one page at a time; the position to continue after when more
    /// remain. Only matching objects are visited when the selector has an equality requirement
    /// (through the label index); otherwise only objects of the type (a key range).
    pub fn list_matching(
        &self,
        rt: &ResourceType,
        query: ListQuery<'_>,
        predicate: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, Option<ListPosition>) {
        let accept = |ns: &str, object: &Value| {
            query.namespace.is_none_or(|n| n == ns)
                && query.selector.is_none_or(|s| s.matches(object))
                && predicate(object)
        };
        let limit = if query.limit == 0 { usize::MAX } else { query.limit };
        let mut items = Vec::new();
        let (mut last, mut next) = (None, None);
        // A page ends once one more object would match: the token resumes after the last one
        // returned.
        let mut take = |ns: &str, name: &str, object: &Arc<Value>| -> bool {
            if !accept(ns, object) {
                return true;
            }
            if items.len() == limit {
                next = last.take();
                return false;
            }
            items.push(Value::clone(object));
            last = Some((ns.to_string(), name.to_string()));
            true
        };
        let equalities: Vec<(&str, &str)> = query.selector.map(|s| s.equalities().collect()).unwrap_or_default();
        if equalities.is_empty() {
            let (ns_from, name_from) = query.after.unwrap_or(("", ""));
            let start = (*rt, ns_from.to_string(), name_from.to_string());
            let lower = if query.after.is_some() { Bound::Excluded(start) } else { Bound::Included(start) };
            for ((t, ns, name), object) in self.objects.range((lower, Bound::Unbounded)) {
                if t != rt || !take(ns, name, object) {
                    break;
                }
            }
            return (items, next);
        }
        // The smallest set of objects carrying one of the required labels; a label nobody
        // carries means nothing matches.
        let mut smallest: Option<&BTreeSet<ListPosition>> = None;
        for (k, v) in &equalities {
            match self.labels.get(&(*rt, format!("{k}={v}"))) {
                None => return (Vec::new(), None),
                Some(set) if smallest.is_none_or(|s| set.len() < s.len()) => smallest = Some(set),
                Some(_) => {}
            }
        }
        let start = match query.after {
            Some((ns, name)) => Bound::Excluded((ns.to_string(), name.to_string())),
            None => Bound::Unbounded,
        };
        for (ns, name) in smallest.into_iter().flat_map(|set| set.range((start.clone(), Bound::Unbounded))) {
            let Some(object) = self.objects.get(&(*rt, ns.clone(), name.clone())) else { continue };
            if !take(ns, name, object) {
                break;
            }
        }
        (items, next)
    }

    /// How many objects of a type satisfy `predicate`.
    pub fn count(&self, rt: &ResourceType, namespace: Option<&str>, predicate: impl Fn(&Value) -> bool) -> usize {
        let start = (*rt, String::new(), String::new());
        self.objects
            .range(start..)
            .take_while(|((t, _, _), _)| t == rt)
            .filter(|((_, ns, _), v)| namespace.is_none_or(|n| n == ns) && predicate(v))
            .count()
    }

    /// Changes after `since`, of one type.
    pub fn changes_after(&self, rt: &ResourceType, since: u64) -> Vec<Change> {
        let start = self.log.partition_point(|c| c.resource_version <= since);
        self.log[start..].iter().filter(|c| c.resource == *rt).cloned().collect()
    }

    fn record(&mut self, rt: ResourceType, event: EventType, object: Arc<Value>) -> Change {
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
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
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
        let object = Arc::new(object);
        self.put(key.clone(), Arc::clone(&object));
        self.take_ownership(&key, &Value::Null, &object, manager);
        let change = self.record(rt, EventType::Added, Arc::clone(&object));
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
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let Write { expected_version, status_only, manager } = *write;
        let key = (rt, namespace.to_string(), name.to_string());
        let current = Arc::clone(self.objects.get(&key).ok_or_else(|| ApiError::not_found(&rt, name))?);
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
            new = Value::clone(&current);
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
            let current_meta = current.get("metadata").and_then(Value::as_object);
            let meta = metadata(&mut new);
            for field in ["name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion"] {
                match current_meta.and_then(|m| m.get(field)) {
                    Some(value) => meta.insert(field.into(), value.clone()),
                    None => meta.remove(field),
                };
            }
        }
        if !same_generation(&new, &current) {
            let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1) + 1;
            metadata(&mut new).insert("generation".into(), json!(generation));
        }
        if unchanged(&new, &current) {
            return Ok((current, Vec::new()));
        }
        let version = self.next_version();
        metadata(&mut new).insert("resourceVersion".into(), json!(version.to_string()));
        self.take_ownership(&key, &current, &new, manager);
        let new = Arc::new(new);
        self.put(key, Arc::clone(&new));
        let change = self.record(rt, EventType::Modified, Arc::clone(&new));
        Ok((new, vec![change]))
    }

    /// DELETE, then the garbage collector: objects owned (by uid) by a deleted object go too.
    pub fn delete(
        &mut self,
        rt: ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<(Arc<Value>, Vec<Change>), ApiError> {
        let key = (rt, namespace.to_string(), name.to_string());
        let removed = self.take(&key).ok_or_else(|| ApiError::not_found(&rt, name))?;
        let mut changes = vec![self.deleted(rt, Arc::clone(&removed))];
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
                if let Some(object) = self.take(&key) {
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
        let changed = changed_leaves(before, after);
        if changed.is_empty() {
            return;
        }
        let owners = self.owners.entry(key.clone()).or_default();
        for path in changed {
            owners.insert(path, manager.to_string());
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

    fn deleted(&mut self, rt: ResourceType, object: Arc<Value>) -> Change {
        let mut object = Arc::unwrap_or_clone(object);
        self.owners.remove(&(
            rt,
            object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string(),
            name_of(&object),
        ));
        let version = self.next_version();
        metadata(&mut object).insert("resourceVersion".into(), json!(version.to_string()));
        self.record(rt, EventType::Deleted, Arc::new(object))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Small JSON objects over a few shared keys, so that two of them overlap a lot.
    fn object() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), (0..4i64).prop_map(Value::from)];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                proptest::collection::btree_map(prop_oneof![Just("a"), Just("b"), Just("c")], inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            ]
        });
        let top = prop_oneof![Just("spec"), Just("status"), Just("kind"), Just("metadata")];
        let meta = prop_oneof![Just("labels"), Just("annotations"), Just("name"), Just("finalizers")];
        (proptest::collection::btree_map(top, value.clone(), 0..4), proptest::collection::btree_map(meta, value, 0..3))
            .prop_map(|(top, meta)| {
                let mut object: Map<String, Value> = top.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                object.insert(
                    "metadata".into(),
                    Value::Object(meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
                );
                Value::Object(object)
            })
    }

    proptest! {
        /// The walk that skips equal subtrees names exactly the leaves whose value changed.
        #[test]
        fn changed_leaves_are_the_leaves_that_differ(before in object(), after in object()) {
            let old = leaves(&before);
            let mut expected: Vec<String> =
                leaves(&after).into_iter().filter(|(path, value)| old.get(path) != Some(value)).map(|(p, _)| p).collect();
            let mut found = changed_leaves(&before, &after);
            expected.sort();
            found.sort();
            prop_assert_eq!(found, expected);
        }

        /// Comparing in place agrees with comparing copies stripped of the ignored fields.
        #[test]
        fn in_place_comparisons_agree_with_stripped_copies(a in object(), b in object()) {
            let strip = |v: &Value, top: &[&str], meta: &[&str]| {
                let mut v = v.clone();
                if let Some(map) = v.as_object_mut() {
                    for key in top {
                        map.remove(*key);
                    }
                    if let Some(m) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                        for key in meta {
                            m.remove(*key);
                        }
                    }
                }
                v
            };
            prop_assert_eq!(same_generation(&a, &b), strip(&a, &["metadata", "status"], &[]) == strip(&b, &["metadata", "status"], &[]));
            let meta = ["name", "labels"];
            prop_assert_eq!(equal_except(&a, &b, &[], &meta), strip(&a, &[], &meta) == strip(&b, &[], &meta));
        }
    }
}
