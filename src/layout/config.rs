//! Typed, error-reporting access to the fields of a Hugging Face config.json.

use serde_json::{Map, Value};

use super::LayoutError;

/// One config object (the root, or a nested `text_config` / `llm_config`) and the path prefix
/// used to name its fields in errors.
#[derive(Clone, Copy)]
pub(crate) struct ConfigView<'a> {
    pub(crate) map: &'a Map<String, Value>,
    pub(crate) prefix: &'a str,
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> ConfigView<'a> {
    /// The full path of a field of this view, as errors and warnings name it.
    pub(crate) fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub(crate) fn error(&self, key: &str, message: impl Into<String>) -> LayoutError {
        LayoutError { field: self.path(key), message: message.into() }
    }

    /// The field's value; a JSON `null` counts as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Python's truth value of the field as a config class keeps it (`bool(getattr(...))`: a
    /// `null` is false, as are zero and empty values); None when the key is absent, where the
    /// class default applies.
    pub(crate) fn truthy(&self, key: &str) -> Option<bool> {
        self.map.get(key).map(|value| match value {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        })
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// A non-negative integer field. Floats with no fraction (`4096.0`) are accepted because
    /// some exporters write them.
    pub(crate) fn uint(&self, key: &str) -> Result<Option<u64>, LayoutError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        if let Some(n) = value.as_u64() {
            return Ok(Some(n));
        }
        if let Some(f) = value.as_f64()
            && f >= 0.0
            && f.fract() == 0.0
            && f <= u64::MAX as f64
        {
            return Ok(Some(f as u64));
        }
        Err(self.error(key, format!("expected a non-negative integer, got {}", show(value))))
    }

    pub(crate) fn uint_any(&self, keys: &[&str]) -> Result<Option<u64>, LayoutError> {
        for key in keys {
            if let Some(n) = self.uint(key)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>, LayoutError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(key, format!("expected true or false, got {}", show(other)))),
        }
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<&'a str>, LayoutError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.error(key, format!("expected a string, got {}", show(other)))),
        }
    }

    pub(crate) fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, LayoutError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.error(key, format!("expected an array, got {}", show(other)))),
        }
    }

    pub(crate) fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, LayoutError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.error(key, format!("expected an object, got {}", show(other)))),
        }
    }

    /// An array of strings, each checked.
    pub(crate) fn strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, LayoutError> {
        self.items(key, "a string", Value::as_str)
    }

    /// An array of non-negative integers, each checked.
    pub(crate) fn uints(&self, key: &str) -> Result<Option<Vec<u64>>, LayoutError> {
        self.items(key, "a non-negative integer", Value::as_u64)
    }

    /// An array whose every item `read` takes; an item it refuses is an error naming `what` it
    /// expected.
    fn items<T>(
        &self,
        key: &str,
        what: &str,
        read: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>, LayoutError> {
        let Some(items) = self.array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                read(item)
                    .ok_or_else(|| self.error(&format!("{key}[{i}]"), format!("expected {what}, got {}", show(item))))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// A short rendering of a JSON value for error messages (never the whole of a large value).
pub(crate) fn show(value: &Value) -> String {
    match value {
        Value::String(s) if s.len() <= 40 => format!("\"{s}\""),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind_of(other).to_string(),
    }
}
