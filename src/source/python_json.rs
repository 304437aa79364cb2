//! Python's `json` module accepts the bare tokens `NaN`, `Infinity` and `-Infinity`, and
//! published config.json files use them (Nemotron-H: `"time_step_limit": [0.0, Infinity]`).
//! serde_json refuses them, so the text is rewritten first: `NaN` becomes `null` (no field the
//! layout reads can be NaN), the infinities the largest finite doubles (a window or count of
//! `Infinity` is then refused by the field's own range check, naming the field).

use std::borrow::Cow;

/// What each Python-only token becomes.
const REPLACEMENTS: &[(&str, &str)] =
    &[("-Infinity", "-1.7976931348623157e308"), ("Infinity", "1.7976931348623157e308"), ("NaN", "null")];

/// `text` with every `NaN`, `Infinity` and `-Infinity` outside a string replaced by strict
/// JSON; borrowed unchanged when there is none. Strings are copied byte for byte.
pub fn to_strict_json(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            match byte {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if byte == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        let found = REPLACEMENTS.iter().find(|(token, _)| bytes[i..].starts_with(token.as_bytes()));
        match found {
            Some((token, strict)) => {
                let out = out.get_or_insert_with(|| String::with_capacity(text.len() + 32));
                out.push_str(&text[copied..i]);
                out.push_str(strict);
                i += token.len();
                copied = i;
            }
            None => i += 1,
        }
    }
    match out {
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn replaces_the_python_tokens_outside_strings() {
        let text =
            r#"{"time_step_limit": [0.0, Infinity], "a": -Infinity, "b": NaN, "s": "NaN Infinity \" -Infinity"}"#;
        let value: Value = serde_json::from_str(&to_strict_json(text)).unwrap();
        assert_eq!(value["time_step_limit"][1], json!(f64::MAX));
        assert_eq!(value["a"], json!(f64::MIN));
        assert_eq!(value["b"], Value::Null);
        assert_eq!(value["s"], json!("NaN Infinity \" -Infinity"));
    }

    #[test]
    fn leaves_strict_json_borrowed() {
        assert!(matches!(to_strict_json(r#"{"a": "Infinity", "b": [1, 2.5e3]}"#), Cow::Borrowed(_)));
    }

    proptest! {
        /// Any string values, with tokens around them: the strings come back unchanged.
        #[test]
        fn never_changes_strings(strings in proptest::collection::vec("\\PC{0,12}", 0..6)) {
            let items: Vec<String> = strings
                .iter()
                .map(|s| format!("[{}, NaN, -Infinity, Infinity]", serde_json::to_string(s).unwrap()))
                .collect();
            let text = format!("[{}]", items.join(","));
            let value: Value = serde_json::from_str(&to_strict_json(&text)).unwrap();
            for (item, expected) in value.as_array().unwrap().iter().zip(&strings) {
                prop_assert_eq!(item[0].as_str().unwrap(), expected.as_str());
                prop_assert_eq!(&item[1], &Value::Null);
            }
        }

        #[test]
        fn never_panics_and_keeps_text_without_tokens(text in "\\PC{0,64}") {
            let strict = to_strict_json(&text);
            if !["NaN", "Infinity"].iter().any(|t| text.contains(t)) {
                prop_assert_eq!(strict.as_ref(), text.as_str());
            }
        }
    }
}
