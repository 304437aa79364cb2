//! Kubernetes label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn set_values(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected (v1,v2) in \"{text}\""))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text).into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let requirement = if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, values)) = part.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), set_values(values)?)
            } else if let Some((key, values)) = part.split_once(" in ") {
                Requirement::In(key.trim().into(), set_values(values)?)
            } else if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().into())
            } else if part.contains(|c: char| c.is_whitespace() || c == '(') {
                return Err(format!("cannot parse label selector requirement \"{part}\""));
            } else {
                Requirement::Exists(part.into())
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    /// The `key=value` requirements, which a label index can answer.
    pub fn equalities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().filter_map(|r| match r {
            Requirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
            _ => None,
        })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|value| vs.iter().any(|v| v == value)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|value| !vs.iter().any(|v| v == value)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn every_operator_matches_as_kubernetes_does() {
        let object = pod(json!({"app": "decode", "tier": "gpu", "rev": "abc"}));
        for (selector, expected) in [
            ("", true),
            ("app=decode", true),
            ("app==decode,tier=gpu", true),
            ("app=prefill", false),
            ("app!=prefill", true),
            ("missing!=x", true),
            ("tier in (gpu, cpu)", true),
            ("tier in (cpu)", false),
            ("tier notin (cpu)", true),
            ("missing notin (cpu)", true),
            ("rev", true),
            ("!rev", false),
            ("!missing,app=decode", true),
            ("tier in (gpu,cpu),rev notin (abc)", false),
        ] {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(&object), expected, "{selector}");
        }
        assert!(LabelSelector::parse("tier in gpu").is_err());
    }
}
