//! How a verdict names the spec fields its texts mention, for whoever reads it. A rule's hint
//! marks each field it names as `{spec.…}` (its `field` is one already); the reader's
//! [`FieldNames`] renders them: a resource's reader sees the spec fields, the guard's reader the
//! flags of the command line it read.

/// What the spec fields a verdict mentions are called for its reader.
pub trait FieldNames {
    /// The name of `field` (`spec.decode.pageSize`).
    fn name(&self, field: &str) -> String;
}

/// The spec fields as they are: what a resource's verdict says.
pub struct SpecFields;

impl FieldNames for SpecFields {
    fn name(&self, field: &str) -> String {
        field.to_string()
    }
}

/// `text` with each field it marks (`{spec.…}`) named by `names`.
pub fn render(text: &str, names: &dyn FieldNames) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{spec.") {
        let Some(length) = rest[start..].find('}') else { break };
        out += &rest[..start];
        out += &names.name(&rest[start + 1..start + length]);
        rest = &rest[start + length + 1..];
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;

    impl FieldNames for Upper {
        fn name(&self, field: &str) -> String {
            field.to_uppercase()
        }
    }

    #[test]
    fn marked_fields_are_named_for_the_reader() {
        let hint = "set {spec.decode.pageSize} (and {spec.prefill.pageSize}) to 1";
        assert_eq!(render(hint, &SpecFields), "set spec.decode.pageSize (and spec.prefill.pageSize) to 1");
        assert_eq!(render(hint, &Upper), "set SPEC.DECODE.PAGESIZE (and SPEC.PREFILL.PAGESIZE) to 1");
        assert_eq!(render("no field {here}", &Upper), "no field {here}");
    }
}
