//! An in-process Kubernetes API server for tests, the demo and benchmarks. It speaks the real
//! HTTP API to a real `kube::Client` (as a tower service), so the real kube-runtime
//! `Controller`, reflectors and `Recorder` run against it unchanged.
//!
//! What it models: discovery for the types in [`store::RESOURCES`]; list and watch from a
//! resourceVersion (replayed from an event log; 410 Gone after [`ApiServer::compact`]); get,
//! create (with `generateName`), replace (409 on a stale resourceVersion), patch (merge, JSON
//! patch, strategic merge as a merge that merges `conditions` lists by `type`, server-side
//! apply); the status subresource; no-op
//! writes that bump nothing and emit no event; `metadata.generation` bumped on changes outside
//! metadata and status; label selectors and `metadata.name`/`metadata.namespace` field
//! selectors; owner-reference garbage collection (synchronous, cascading); Leases; injected
//! faults (error responses, dropped watches).
//!
//! Server-side apply is modelled coarsely: an apply replaces the top-level fields it names (a
//! status apply replaces status), every write records which field manager set each leaf field,
//! and an apply without `force` that would change a leaf another manager set gets 409 Conflict.
//!
//! What it does not model: authentication and RBAC, the admission chain (webhooks, CEL rules,
//! schema validation and defaulting), the rest of server-side apply (field removal by a
//! manager, list merge keys, `managedFields` in responses), strategic-merge list semantics
//! beyond conditions, finalizers and graceful deletion (deletes are immediate), dry runs, pagination
//! (lists return everything), watch bookmarks, the scheduler and kubelet (pods stay pending
//! until a test or the demo marks them ready), and the Deployment and ReplicaSet controllers (a
//! router Deployment gets no pods; the demo's stand-in reports it ready).

pub mod kubelet;
pub mod selector;
pub mod store;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use selector::LabelSelector;
use store::{ApiError, Change, ListQuery, RESOURCES, ResourceType, Store, Write};

/// The response body type of the server.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// An injected fault: the next `times` requests whose method matches and whose path contains
/// `path_contains` get `status` instead of being served.
#[derive(Debug, Clone)]
pub struct Fault {
    pub method: Option<Method>,
    pub path_contains: String,
    pub status: u16,
    pub times: usize,
}

struct Shared {
    store: Mutex<Store>,
    changes: broadcast::Sender<Change>,
    faults: Mutex<Vec<Fault>>,
    /// Bumped to end every open watch stream.
    watch_epoch: watch::Sender<u64>,
    requests: Mutex<HashMap<String, u64>>,
}

/// A handle to the server; cheap to clone.
#[derive(Clone)]
pub struct ApiServer {
    shared: Arc<Shared>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

fn json_response(status: u16, body: &Value) -> Response<ResponseBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .expect("static response parts are valid")
}

fn error_response(error: &ApiError) -> Response<ResponseBody> {
    json_response(error.code, &error.to_status())
}

/// The parts of an API path.
#[derive(Debug)]
struct Target {
    resource: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

enum Route {
    Discovery(Value),
    Resource(Target),
}

fn parse_path(path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let not_found =
        || ApiError::new(404, "NotFound", format!("the server could not find the requested resource ({path})"));
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => {
            return Ok(Route::Discovery(
                json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0+kvpilot-inmemory"}),
            ));
        }
        ["api"] => {
            return Ok(Route::Discovery(
                json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            ));
        }
        ["apis"] => return Ok(Route::Discovery(group_list())),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    if rest.is_empty() {
        return resource_list(group, version).map(Route::Discovery).ok_or_else(not_found);
    }
    // `/namespaces/NS/PLURAL...` is namespaced; `/namespaces[/NAME]` is the Namespace object itself.
    let (namespace, rest) = match rest {
        ["namespaces", namespace, more @ ..] if !more.is_empty() => (Some(namespace.to_string()), more),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(not_found()),
    };
    let resource = store::resource_type(group, version, plural).ok_or_else(not_found)?;
    Ok(Route::Resource(Target { resource, namespace, name, subresource }))
}

fn group_list() -> Value {
    let mut groups: Vec<(&str, &str)> =
        RESOURCES.iter().filter(|r| !r.group.is_empty()).map(|r| (r.group, r.version)).collect();
    groups.sort();
    groups.dedup();
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let served: Vec<&ResourceType> = RESOURCES.iter().filter(|r| r.group == group && r.version == version).collect();
    if served.is_empty() {
        return None;
    }
    let verbs = json!(["create", "delete", "get", "list", "patch", "update", "watch"]);
    let mut resources = Vec::new();
    for r in served {
        resources.push(json!({
            "name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs
        }));
        if r.status_subresource {
            resources
                .push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}

fn query_params(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding of query parameters (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `metadata.name=x` / `metadata.namespace=y` field selectors.
fn field_selector_matches(selector: Option<&String>, object: &Value) -> bool {
    selector.is_none_or(|selector| {
        selector.split(',').filter(|p| !p.is_empty()).all(|part| {
            let (field, value, negate) = match part.split_once("!=") {
                Some((f, v)) => (f, v, true),
                None => match part.split_once("==").or_else(|| part.split_once('=')) {
                    Some((f, v)) => (f, v, false),
                    None => return false,
                },
            };
            let actual = match field {
                "metadata.name" => object.pointer("/metadata/name"),
                "metadata.namespace" => object.pointer("/metadata/namespace"),
                _ => return false,
            }
            .and_then(Value::as_str)
            .unwrap_or_default();
            (actual == value) != negate
        })
    })
}

/// Whether a watch of `rt` (in `namespace`, with these selectors) delivers `change`.
fn delivers(
    change: &Change,
    rt: ResourceType,
    namespace: Option<&str>,
    selector: &LabelSelector,
    fields: Option<&String>,
) -> bool {
    change.resource == rt
        && namespace.is_none_or(|ns| change.object.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
        && selector.matches(&change.object)
        && field_selector_matches(fields, &change.object)
}

/// Where a paged list resumes: the list's resourceVersion and the last position it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContinueToken {
    resource_version: u64,
    namespace: String,
    name: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("{}\n{}\n{}", self.resource_version, self.namespace, self.name))
    }

    fn decode(text: &str) -> Result<Self, ApiError> {
        use base64::Engine;
        let invalid = || ApiError::new(400, "BadRequest", format!("invalid continue token {text:?}"));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let mut parts = text.splitn(3, '\n');
        let resource_version = parts.next().and_then(|v| v.parse().ok()).ok_or_else(invalid)?;
        let (Some(namespace), Some(name)) = (parts.next(), parts.next()) else { return Err(invalid()) };
        Ok(Self { resource_version, namespace: namespace.into(), name: name.into() })
    }
}

/// A strategic merge patch as far as kvpilot's writers need it: a JSON merge patch, except that
/// a `conditions` list merges by `type` (a pod's conditions are written by the kubelet and by
/// the controller of a readiness gate, each keeping the other's).
fn strategic_merge(target: &mut Value, patch: &Value) {
    let (Value::Object(target_fields), Value::Object(patch_fields)) = (&mut *target, patch) else {
        json_patch::merge(target, patch);
        return;
    };
    for (key, value) in patch_fields {
        match (key.as_str(), target_fields.get_mut(key), value) {
            (_, _, Value::Null) => {
                target_fields.remove(key);
            }
            ("conditions", Some(Value::Array(current)), Value::Array(changes)) => {
                for change in changes {
                    match current.iter_mut().find(|c| c.get("type").is_some_and(|t| Some(t) == change.get("type"))) {
                        Some(existing) => json_patch::merge(existing, change),
                        None => current.push(change.clone()),
                    }
                }
            }
            (_, Some(existing), Value::Object(_)) => strategic_merge(existing, value),
            _ => {
                target_fields.insert(key.clone(), value.clone());
            }
        }
    }
}

fn parse_body(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .or_else(|_| serde_norway::from_slice(bytes))
        .map_err(|e| ApiError::new(400, "BadRequest", format!("the request body is not JSON or YAML: {e}")))
}

/// Server-side apply as this server models it: the top-level fields the body names replace the
/// object's (status alone for `/status`), and labels, annotations, owner references and
/// finalizers replace the object's when given.
fn apply_onto(current: &Value, body: &Value, status_only: bool) -> Value {
    let mut new = current.clone();
    if status_only {
        if let Some(status) = body.get("status") {
            new["status"] = status.clone();
        }
        return new;
    }
    if let Some(map) = body.as_object() {
        for (key, value) in map {
            match key.as_str() {
                "metadata" | "apiVersion" | "kind" | "status" => {}
                _ => new[key] = value.clone(),
            }
        }
    }
    if let Some(meta) = body.get("metadata").and_then(Value::as_object) {
        for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
            if let Some(value) = meta.get(field) {
                new["metadata"][field] = value.clone();
            }
        }
    }
    new
}

impl ApiServer {
    /// An empty server.
    pub fn new() -> Self {
        let (changes, _) = broadcast::channel(65_536);
        let (watch_epoch, _) = watch::channel(0);
        Self {
            shared: Arc::new(Shared {
                store: Mutex::new(Store::default()),
                changes,
                faults: Mutex::new(Vec::new()),
                watch_epoch,
                requests: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A `kube::Client` talking to this server, with `default` as its default namespace.
    pub fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let server = server.clone();
            async move { Ok::<_, Infallible>(server.handle(request).await) }
        });
        kube::Client::new(service, "default")
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.shared.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the next matching requests fail.
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().unwrap_or_else(|p| p.into_inner()).push(fault);
    }

    /// Ends every open watch stream (clients must re-watch, as after an API server restart).
    pub fn drop_watches(&self) {
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Forgets the change history: watches from an older resourceVersion get 410 Gone.
    pub fn compact(&self) {
        self.store().compact();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store().resource_version()
    }

    /// How many requests of `METHOD path` were served (for tests asserting on traffic).
    pub fn request_count(&self, method: &str, path_contains: &str) -> u64 {
        let requests = self.shared.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.iter().filter(|(k, _)| k.starts_with(method) && k.contains(path_contains)).map(|(_, n)| n).sum()
    }

    /// Every `METHOD path` served so far with its count (for benches breaking traffic down).
    pub fn request_log(&self) -> Vec<(String, u64)> {
        let requests = self.shared.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.iter().map(|(k, n)| (k.clone(), *n)).collect()
    }

    /// An object, straight from the store.
    pub fn get(&self, group: &str, version: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let rt = store::resource_type(group, version, plural)?;
        self.store().get(&rt, namespace, name).cloned()
    }

    /// How many objects of a type in a namespace satisfy `predicate`, without copying them.
    pub fn count(
        &self,
        (group, version, plural): (&str, &str, &str),
        namespace: Option<&str>,
        predicate: impl Fn(&Value) -> bool,
    ) -> usize {
        match store::resource_type(group, version, plural) {
            Some(rt) => self.store().count(&rt, namespace, predicate),
            None => 0,
        }
    }

    /// Every object of a type in a namespace (None: all namespaces), straight from the store.
    pub fn list(&self, group: &str, version: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        match store::resource_type(group, version, plural) {
            Some(rt) => self.store().list(&rt, namespace),
            None => Vec::new(),
        }
    }

    fn take_fault(&self, method: &Method, path: &str) -> Option<u16> {
        let mut faults = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        let fault = faults.iter_mut().find(|f| {
            f.times > 0 && f.method.as_ref().is_none_or(|m| m == method) && path.contains(&f.path_contains)
        })?;
        fault.times -= 1;
        let status = fault.status;
        faults.retain(|f| f.times > 0);
        Some(status)
    }

    /// Sends changes to the watches. Callers hold the store lock, so changes go out in
    /// resourceVersion order: a watch skips versions at or below the last it sent, and an
    /// out-of-order send would be lost.
    fn publish(&self, changes: Vec<Change>) {
        for change in changes {
            // No receivers is fine: nobody is watching.
            let _ = self.shared.changes.send(change);
        }
    }

    /// Serves the API over plain HTTP on `listener` (loopback), so a separate process can use
    /// it through a kubeconfig. Runs until the task is aborted.
    pub async fn serve_http(&self, listener: tokio::net::TcpListener) {
        let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let server = self.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let server = server.clone();
                    async move { Ok::<_, Infallible>(server.handle(request).await) }
                });
                let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
            });
        }
    }

    /// A kubeconfig for a client of [`ApiServer::serve_http`] at `addr`.
    pub fn kubeconfig(addr: std::net::SocketAddr, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: inmemory\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: inmemory\n  user: {{}}\ncontexts:\n- name: inmemory\n  context:\n    cluster: inmemory\n\
             \x20   user: inmemory\n    namespace: {namespace}\ncurrent-context: inmemory\n"
        )
    }

    /// Serves one request.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().to_string();
        {
            let mut requests = self.shared.requests.lock().unwrap_or_else(|p| p.into_inner());
            *requests.entry(format!("{} {path}", parts.method)).or_default() += 1;
        }
        if let Some(status) = self.take_fault(&parts.method, &path) {
            let reason = match status {
                409 => "Conflict",
                429 => "TooManyRequests",
                500 => "InternalError",
                503 => "ServiceUnavailable",
                _ => "Unknown",
            };
            return error_response(&ApiError::new(
                status,
                reason,
                format!("injected fault on {} {path}", parts.method),
            ));
        }
        let params = query_params(parts.uri.query());
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return error_response(&ApiError::new(400, "BadRequest", format!("cannot read body: {e}"))),
        };
        let target = match parse_path(&path) {
            Ok(Route::Discovery(value)) if parts.method == Method::GET => return json_response(200, &value),
            Ok(Route::Discovery(_)) => {
                return error_response(&ApiError::new(405, "MethodNotAllowed", "discovery is read-only"));
            }
            Ok(Route::Resource(target)) => target,
            Err(e) => return error_response(&e),
        };
        let content_type =
            parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        match self.serve(&parts.method, target, &params, &bytes, &content_type).await {
            Ok(response) => response,
            Err(e) => error_response(&e),
        }
    }

    async fn serve(
        &self,
        method: &Method,
        target: Target,
        params: &HashMap<String, String>,
        body: &[u8],
        content_type: &str,
    ) -> Result<Response<ResponseBody>, ApiError> {
        let rt = target.resource;
        let namespace = target.namespace.clone().unwrap_or_default();
        if rt.namespaced && target.namespace.is_none() && (target.name.is_some() || *method != Method::GET) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                format!("{} are namespaced: use /namespaces/NS/{}", rt.plural, rt.plural),
            ));
        }
        let status_only = match target.subresource.as_deref() {
            None => false,
            Some("status") if rt.status_subresource => true,
            Some(other) => return Err(ApiError::new(404, "NotFound", format!("{}/{other} is not served", rt.plural))),
        };
        let manager = params.get("fieldManager").map(String::as_str).unwrap_or("unknown");
        let selector = LabelSelector::parse(params.get("labelSelector").map(String::as_str).unwrap_or_default())
            .map_err(|e| ApiError::new(400, "BadRequest", e))?;
        match (method.clone(), target.name.as_deref()) {
            (Method::GET, None) if params.get("watch").is_some_and(|w| w == "true" || w == "1") => {
                Ok(self.watch(rt, target.namespace, selector, params))
            }
            (Method::GET, None) => {
                let limit = params.get("limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(0);
                let resume =
                    params.get("continue").filter(|c| !c.is_empty()).map(|c| ContinueToken::decode(c)).transpose()?;
                let (items, version, next) = {
                    let store = self.store();
                    let version = resume.as_ref().map_or(store.resource_version(), |t| t.resource_version);
                    if version < store.compacted_through() {
                        return Err(ApiError::new(
                            410,
                            "Expired",
                            "the continue token is too old; list again from the start",
                        ));
                    }
                    let query = ListQuery {
                        namespace: target.namespace.as_deref(),
                        selector: Some(&selector),
                        limit,
                        after: resume.as_ref().map(|t| (t.namespace.as_str(), t.name.as_str())),
                    };
                    // Filter before copying: a label-selected list must not cost a copy of every object.
                    let (items, next) =
                        store.list_matching(&rt, query, |o| field_selector_matches(params.get("fieldSelector"), o));
                    (items, version, next)
                };
                let mut metadata = json!({"resourceVersion": version.to_string()});
                if let Some((namespace, name)) = next {
                    metadata["continue"] = json!(ContinueToken { resource_version: version, namespace, name }.encode());
                }
                Ok(json_response(
                    200,
                    &json!({
                        "kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
                        "metadata": metadata, "items": items
                    }),
                ))
            }
            (Method::GET, Some(name)) => {
                let store = self.store();
                let object = store.get(&rt, &namespace, name).cloned().ok_or_else(|| ApiError::not_found(&rt, name))?;
                Ok(json_response(200, &object))
            }
            (Method::POST, None) => {
                let object = parse_body(body)?;
                let mut store = self.store();
                let (created, changes) = store.create(rt, &namespace, object, manager)?;
                self.publish(changes);
                drop(store);
                Ok(json_response(201, &created))
            }
            (Method::PUT, Some(name)) => {
                let object = parse_body(body)?;
                let expected = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
                let mut store = self.store();
                let write = Write { expected_version: expected.as_deref(), status_only, manager };
                let (updated, changes) = store.update(rt, &namespace, name, object, &write)?;
                self.publish(changes);
                drop(store);
                Ok(json_response(200, &updated))
            }
            (Method::PATCH, Some(name)) => {
                let force = params.get("force").is_some_and(|f| f == "true");
                let write = Write { expected_version: None, status_only, manager };
                self.patch((rt, &namespace, name), body, content_type, write, force)
            }
            (Method::DELETE, Some(name)) => {
                let mut store = self.store();
                let (deleted, changes) = store.delete(rt, &namespace, name)?;
                self.publish(changes);
                drop(store);
                Ok(json_response(200, &deleted))
            }
            (method, _) => Err(ApiError::new(405, "MethodNotAllowed", format!("{method} is not supported here"))),
        }
    }

    fn patch(
        &self,
        (rt, namespace, name): (ResourceType, &str, &str),
        body: &[u8],
        content_type: &str,
        write: Write<'_>,
        force: bool,
    ) -> Result<Response<ResponseBody>, ApiError> {
        let Write { status_only, manager, .. } = write;
        let patch = parse_body(body)?;
        let mut store = self.store();
        let current = store.shared(&rt, namespace, name).cloned();
        let (result, changes) = match (content_type.split(';').next().unwrap_or_default().trim(), current) {
            ("application/apply-patch+yaml", None) if !status_only => store.create(rt, namespace, patch, manager)?,
            (_, None) => return Err(ApiError::not_found(&rt, name)),
            ("application/apply-patch+yaml", Some(current)) => {
                let conflicts =
                    if force { Vec::new() } else { store.apply_conflicts(&rt, namespace, name, &patch, manager) };
                if !conflicts.is_empty() {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        format!("Apply failed with {} conflicts: {}", conflicts.len(), conflicts.join(", ")),
                    ));
                }
                let new = apply_onto(&current, &patch, status_only);
                store.update(rt, namespace, name, new, &write)?
            }
            ("application/json-patch+json", Some(current)) => {
                let operations: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|e| ApiError::new(400, "BadRequest", format!("not a JSON patch: {e}")))?;
                let mut new = Value::clone(&current);
                json_patch::patch(&mut new, &operations)
                    .map_err(|e| ApiError::new(422, "Invalid", format!("the JSON patch does not apply: {e}")))?;
                store.update(rt, namespace, name, new, &write)?
            }
            ("application/merge-patch+json" | "application/strategic-merge-patch+json", Some(current)) => {
                let mut new = Value::clone(&current);
                if content_type.starts_with("application/strategic-merge-patch+json") {
                    strategic_merge(&mut new, &patch);
                } else {
                    json_patch::merge(&mut new, &patch);
                }
                let expected = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
                store.update(rt, namespace, name, new, &Write { expected_version: expected.as_deref(), ..write })?
            }
            (other, _) => {
                return Err(ApiError::new(415, "UnsupportedMediaType", format!("unsupported patch type \"{other}\"")));
            }
        };
        self.publish(changes);
        drop(store);
        Ok(json_response(200, &result))
    }

    fn watch(
        &self,
        rt: ResourceType,
        namespace: Option<String>,
        selector: LabelSelector,
        params: &HashMap<String, String>,
    ) -> Response<ResponseBody> {
        let since: Option<u64> = params.get("resourceVersion").and_then(|v| v.parse().ok()).filter(|v| *v > 0);
        let timeout = params.get("timeoutSeconds").and_then(|v| v.parse::<u64>().ok()).unwrap_or(1800);
        let field_selector = params.get("fieldSelector").cloned();
        let (tx, rx) = mpsc::channel::<Bytes>(1024);
        let mut live = self.shared.changes.subscribe();
        let mut epoch = self.shared.watch_epoch.subscribe();
        let line =
            |event: &str, object: &Value| Bytes::from(json!({"type": event, "object": object}).to_string() + "\n");

        // Under the store lock: the backlog, and the version the live stream continues from.
        let (backlog, mut last_sent): (Vec<Bytes>, u64) = {
            let store = self.store();
            match since {
                Some(since) if since < store.compacted_through() => {
                    let gone = ApiError::new(
                        410,
                        "Expired",
                        format!("too old resource version: {since} ({})", store.compacted_through()),
                    );
                    (vec![line("ERROR", &gone.to_status())], u64::MAX)
                }
                Some(since) => (
                    store
                        .changes_after(&rt, since)
                        .iter()
                        .filter(|c| delivers(c, rt, namespace.as_deref(), &selector, field_selector.as_ref()))
                        .map(|c| line(c.event.as_str(), &c.object))
                        .collect(),
                    store.resource_version(),
                ),
                None => {
                    let query = ListQuery {
                        namespace: namespace.as_deref(),
                        selector: Some(&selector),
                        ..ListQuery::default()
                    };
                    let fields = field_selector.as_ref();
                    (
                        store
                            .list_matching(&rt, query, |o| field_selector_matches(fields, o))
                            .0
                            .iter()
                            .map(|o| line("ADDED", o))
                            .collect(),
                        store.resource_version(),
                    )
                }
            }
        };
        let relevant =
            move |change: &Change| delivers(change, rt, namespace.as_deref(), &selector, field_selector.as_ref());
        tokio::spawn(async move {
            for bytes in backlog {
                if tx.send(bytes).await.is_err() {
                    return;
                }
            }
            if last_sent == u64::MAX {
                return;
            }
            let deadline = tokio::time::sleep(Duration::from_secs(timeout));
            tokio::pin!(deadline);
            let start_epoch = *epoch.borrow_and_update();
            loop {
                tokio::select! {
                    () = &mut deadline => return,
                    changed = epoch.changed() => if changed.is_err() || *epoch.borrow() != start_epoch { return },
                    received = live.recv() => match received {
                        Ok(change) if change.resource_version > last_sent && relevant(&change) => {
                            last_sent = change.resource_version;
                            if tx.send(line(change.event.as_str(), &change.object)).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        // A watcher that fell behind is cut off and must re-list, as on a real server.
                        Err(_) => return,
                    },
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|bytes| (Ok::<_, Infallible>(Frame::data(bytes)), rx))
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(StreamBody::new(stream).boxed_unsync())
            .expect("static response parts are valid")
    }
}
