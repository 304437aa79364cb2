//! The batched operation protocol: one `POST /v1/batch` carries a scheduler step's operations
//! (`cache-runtime.md` §6: batching avoids paying the process boundary once per call). Each
//! operation gets its own result or error; one failing operation does not stop the others.

use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Component;
use super::cache::{Amounts, Cache, CacheError};
use super::metrics::CacheMetrics;

/// One operation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum Op {
    /// Start a request with the longest cached prefix of `tokens`, locked for it.
    Match {
        /// Request id.
        request: String,
        /// Token ids of the request.
        tokens: Vec<u32>,
        /// Cache namespace (LoRA adapter, cache salt); default: the shared one.
        #[serde(default)]
        namespace: String,
    },
    /// Give a request room for `tokens` more tokens (creates it when new).
    Allocate {
        /// Request id.
        request: String,
        /// Tokens to add.
        tokens: usize,
        /// Namespace of a new request.
        #[serde(default)]
        namespace: String,
    },
    /// Publish the request's first tokens to the prefix cache.
    Insert {
        /// Request id.
        request: String,
        /// The request's token ids (a prefix of them).
        tokens: Vec<u32>,
    },
    /// End a request: free its pages, unlock its prefix, drop its backup.
    Release {
        /// Request id.
        request: String,
    },
    /// Free a request's SWA pages that fell out of the window.
    TrimSwa {
        /// Request id.
        request: String,
    },
    /// Evict unlocked cached data.
    Evict {
        /// Full-attention tokens.
        #[serde(default)]
        full: usize,
        /// Sliding-window tokens.
        #[serde(default)]
        swa: usize,
        /// SSM state slots.
        #[serde(default)]
        ssm: usize,
    },
    /// Retract a request: back its KV up asynchronously and free its device pages.
    Retract {
        /// Request id.
        request: String,
    },
    /// Copy a retracted request's KV back into fresh device pages.
    Restore {
        /// Request id.
        request: String,
    },
    /// State of backup and restore tickets.
    Poll {
        /// Ticket ids.
        tickets: Vec<u64>,
    },
    /// Bytes of pages of a pool (base64).
    Read {
        /// The pool.
        component: Component,
        /// Page (or slot) ids.
        pages: Vec<u32>,
    },
    /// Write bytes (base64, one page's worth per page) into pages of a pool.
    Write {
        /// The pool.
        component: Component,
        /// Page (or slot) ids.
        pages: Vec<u32>,
        /// Base64 bytes.
        data: String,
    },
    /// A request's state and page table.
    Describe {
        /// Request id.
        request: String,
    },
}

impl Op {
    /// The operation's name (metrics label).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Match { .. } => "match",
            Self::Allocate { .. } => "allocate",
            Self::Insert { .. } => "insert",
            Self::Release { .. } => "release",
            Self::TrimSwa { .. } => "trimSwa",
            Self::Evict { .. } => "evict",
            Self::Retract { .. } => "retract",
            Self::Restore { .. } => "restore",
            Self::Poll { .. } => "poll",
            Self::Read { .. } => "read",
            Self::Write { .. } => "write",
            Self::Describe { .. } => "describe",
        }
    }
}

/// The body of `POST /v1/batch`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// The step's operations, carried out in order.
    pub ops: Vec<Op>,
}

/// Parses a batch; errors name the field (`ops[2].tokens[7]: invalid type ...`).
pub fn parse_batch(body: &[u8]) -> Result<Batch, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
    })
}

fn to_value<T: serde::Serialize>(value: T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn run(cache: &mut Cache, op: Op) -> Result<Value, CacheError> {
    Ok(match op {
        Op::Match { request, tokens, namespace } => to_value(cache.match_prefix(&request, &namespace, &tokens)?),
        Op::Allocate { request, tokens, namespace } => to_value(cache.allocate(&request, &namespace, tokens)?),
        Op::Insert { request, tokens } => to_value(cache.insert(&request, &tokens)?),
        Op::Release { request } => json!({"freed": cache.release(&request)?}),
        Op::TrimSwa { request } => json!({"freedTokens": cache.trim_swa(&request)?}),
        Op::Evict { full, swa, ssm } => json!({"evicted": cache.evict(Amounts { full, swa, ssm })}),
        Op::Retract { request } => to_value(cache.retract(&request)?),
        Op::Restore { request } => to_value(cache.restore(&request)?),
        Op::Poll { tickets } => json!({"tickets": cache.poll(&tickets)}),
        Op::Read { component, pages } => json!({"data": BASE64.encode(cache.read(component, &pages)?)}),
        Op::Write { component, pages, data } => {
            let bytes = BASE64
                .decode(data.as_bytes())
                .map_err(|e| CacheError::InvalidPages(format!("data is not base64: {e}")))?;
            cache.write(component, &pages, &bytes)?;
            json!({"written": bytes.len()})
        }
        Op::Describe { request } => to_value(cache.describe(&request)?),
    })
}

/// Carries out a batch in order: `{"results": [{"ok": ...} | {"error": {"code", "message"}}]}`.
pub fn execute(cache: &mut Cache, batch: Batch, metrics: Option<&CacheMetrics>) -> Value {
    let results: Vec<Value> = batch
        .ops
        .into_iter()
        .map(|op| {
            let name = op.name();
            let started = Instant::now();
            let result = run(cache, op);
            if let Some(metrics) = metrics {
                metrics.op(name, started.elapsed());
            }
            match result {
                Ok(value) => json!({"ok": value}),
                Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}),
            }
        })
        .collect();
    json!({ "results": results })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_parse_and_errors_name_the_field() {
        let batch = parse_batch(
            br#"{"ops": [{"op": "match", "request": "a", "tokens": [1, 2]}, {"op": "evict", "full": 64},
                         {"op": "read", "component": "swa", "pages": [3]}]}"#,
        )
        .unwrap();
        assert_eq!(batch.ops.len(), 3);
        assert_eq!(batch.ops[1], Op::Evict { full: 64, swa: 0, ssm: 0 });
        let error = parse_batch(br#"{"ops": [{"op": "insert", "request": "a", "tokens": [1, -2]}]}"#).unwrap_err();
        // serde buffers internally tagged enums, so the path stops at the operation.
        assert!(error.starts_with("ops[0]") && error.contains("-2") && error.contains("u32"), "{error}");
        let error = parse_batch(br#"{"ops": [{"op": "release", "request": "a", "typo": 1}]}"#).unwrap_err();
        assert!(error.contains("typo"), "{error}");
        let error = parse_batch(br#"{"ops": [{"op": "explode"}]}"#).unwrap_err();
        assert!(error.contains("explode"), "{error}");
    }
}
