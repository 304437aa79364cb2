//! The SGLang release a container image names in its tag.

/// The release in an image reference's tag: `lmsysorg/sglang:v0.5.23-cu129` → `0.5.23`,
/// `…:0.5.22.post1` → `0.5.22.post1`. None for tags that name no release (`latest`, `dev`),
/// for digests, and for references without a tag.
pub fn release_from_image(image: &str) -> Option<String> {
    // A digest pins bytes, not a release; the tag next to it may lie.
    if image.contains('@') {
        return None;
    }
    let last_segment = image.rsplit('/').next()?;
    let (_, tag) = last_segment.split_once(':')?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let mut parts = tag.split(['-', '_']);
    let version = parts.next()?;
    let mut fields = version.split('.');
    let numeric: Vec<&str> = fields.by_ref().take(3).collect();
    if numeric.len() < 2 || !numeric.iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let suffix: Vec<&str> = fields.collect();
    match suffix.as_slice() {
        [] => Some(numeric.join(".")),
        [post] if post.strip_prefix("post").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) => {
            Some(format!("{}.{post}", numeric.join(".")))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::release_from_image;

    #[test]
    fn releases_come_from_tags() {
        let cases = [
            ("lmsysorg/sglang:v0.5.23-cu129", Some("0.5.23")),
            ("lmsysorg/sglang:0.5.22.post1", Some("0.5.22.post1")),
            ("docker.io/lmsysorg/sglang:v0.5.3rc0-cu126", None),
            ("lmsysorg/sglang:v0.4.10.post2-cu126-gb200", Some("0.4.10.post2")),
            ("registry.local:5000/lmsysorg/sglang:v0.5.1", Some("0.5.1")),
            ("lmsysorg/sglang:latest", None),
            ("lmsysorg/sglang:dev-cu13", None),
            ("lmsysorg/sglang", None),
            ("registry.local:5000/sglang", None),
            ("lmsysorg/sglang:v0.5.23@sha256:0123abcd", None),
            ("lmsysorg/sglang:v0.5.x", None),
            ("", None),
        ];
        for (image, expected) in cases {
            assert_eq!(release_from_image(image).as_deref(), expected, "{image}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(image in "\\PC{0,40}") {
            let _ = release_from_image(&image);
        }
    }
}
