//! What this controller last applied to each ConfigMap and Service it keeps, so that a
//! reconcile does not send the same body again to an object nobody changed since. Each pod
//! event re-reconciles its resource; without this every one re-applied the ConfigMap and the
//! Service, and those no-op server-side applies were most of kube-apiserver's work.
//!
//! The memory is the resourceVersion the API server returned for the last apply and a hash
//! of the body sent. An apply is skipped only when the body is the same and the watch cache
//! still shows that resourceVersion: any write by anyone else (a user's edit of a field the
//! controller owns, a deletion) changes it, and the next reconcile applies again.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// Which object of the kind: its namespace and name.
pub type ObjectKey = (String, String);

#[derive(Debug, Clone, PartialEq, Eq)]
struct LastApply {
    body_hash: u64,
    resource_version: String,
}

/// The last apply of each object of one kind, forgotten for objects the watch cache no longer
/// has.
#[derive(Debug, Default)]
pub struct AppliedBodies(Mutex<Records>);

#[derive(Debug, Default)]
struct Records {
    last: HashMap<ObjectKey, LastApply>,
    /// The count of records that starts a look for records of objects gone from the cache:
    /// twice the count after the last look, so each look costs O(1) per record added.
    forget_at: usize,
}

/// The hash an apply body is remembered by.
pub fn body_hash(body: &serde_json::Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    body.to_string().hash(&mut hasher);
    hasher.finish()
}

impl AppliedBodies {
    /// Whether applying a body with `body_hash` would change nothing: this process applied
    /// the same body last, and the object is still at the resourceVersion that apply left
    /// (`cached_version`: the watch cache's, None when the cache has no such object).
    pub fn unchanged(&self, key: &ObjectKey, body_hash: u64, cached_version: Option<&str>) -> bool {
        let records = self.0.lock().unwrap_or_else(|p| p.into_inner());
        records
            .last
            .get(key)
            .is_some_and(|last| last.body_hash == body_hash && cached_version == Some(last.resource_version.as_str()))
    }

    /// Records an apply the API server took. `still_cached` tells whether an object is in the
    /// watch cache; records of objects that are not are dropped once they outnumber the rest,
    /// so deleted resources leave nothing behind.
    pub fn record(
        &self,
        key: ObjectKey,
        body_hash: u64,
        resource_version: Option<String>,
        still_cached: impl Fn(&ObjectKey) -> bool,
    ) {
        let mut records = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match resource_version {
            Some(resource_version) => records.last.insert(key, LastApply { body_hash, resource_version }),
            None => records.last.remove(&key),
        };
        if records.last.len() > records.forget_at.max(FORGET_AFTER) {
            records.last.retain(|key, _| still_cached(key));
            records.forget_at = 2 * records.last.len();
        }
    }
}

/// The fewest records that start a look for records of objects gone from the cache.
const FORGET_AFTER: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn records(applied: &AppliedBodies) -> usize {
        applied.0.lock().unwrap().last.len()
    }

    fn key(name: &str) -> ObjectKey {
        ("ns".into(), name.into())
    }

    #[test]
    fn an_apply_is_skipped_only_for_the_same_body_on_an_object_nobody_changed() {
        let applied = AppliedBodies::default();
        let body = body_hash(&json!({"data": {"a": "1"}}));
        assert!(!applied.unchanged(&key("a"), body, Some("7")), "never applied by this process");
        applied.record(key("a"), body, Some("7".into()), |_| true);
        assert!(applied.unchanged(&key("a"), body, Some("7")));
        assert!(!applied.unchanged(&key("a"), body, Some("8")), "someone else wrote it since");
        assert!(!applied.unchanged(&key("a"), body, None), "deleted since");
        let other = body_hash(&json!({"data": {"a": "2"}}));
        assert!(!applied.unchanged(&key("a"), other, Some("7")), "the desired body changed");
        assert!(!applied.unchanged(&key("b"), body, Some("7")), "another object");
    }

    #[test]
    fn records_of_objects_gone_from_the_cache_are_forgotten() {
        let applied = AppliedBodies::default();
        for i in 0..=FORGET_AFTER {
            applied.record(key(&i.to_string()), 1, Some("1".into()), |key| key.1 == "0");
        }
        assert_eq!(records(&applied), 1);
        assert!(applied.unchanged(&key("0"), 1, Some("1")));
        applied.record(key("0"), 1, None, |_| true);
        assert_eq!(records(&applied), 0, "an apply that returned no resourceVersion leaves no record");
    }
}
