//! Parsing, ordering, display and the choice of a release.

use proptest::prelude::*;

use super::*;

#[test]
fn parses_the_forms_pypi_and_image_tags_use() {
    assert_eq!("0.5.23".parse::<Release>().unwrap(), v0_5(23));
    assert_eq!("v0.5.23".parse::<Release>().unwrap(), v0_5(23));
    assert_eq!("0.5.22.post1".parse::<Release>().unwrap(), Release { post: Some(1), ..v0_5(22) });
}

#[test]
fn refuses_malformed_versions_with_the_form_to_use() {
    for text in ["", "0.5", "0.5.x", "0.5.23.rc1", "0.5.23.post", "0.5.23.post1.1", "1..2", "-0.5.1", "0.5.99999999"] {
        let error = text.parse::<Release>().unwrap_err().to_string();
        assert!(error.contains("write it like 0.5.23"), "{text}: {error}");
    }
}

#[test]
fn orders_post_releases_after_their_patch() {
    let post = Release { post: Some(1), ..v0_5(22) };
    assert!(v0_5(22) < post && post < v0_5(23));
    assert!(v0_5(9) < v0_5(17));
}

#[test]
fn known_releases_are_sorted_and_span_0_5_17_to_0_5_23() {
    assert!(KNOWN.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(Release::oldest_known(), v0_5(17));
    assert_eq!(Release::newest_known(), v0_5(23));
}

#[test]
fn a_newer_release_gets_the_newest_profile_and_a_warning() {
    let choice = choose_text("0.5.24", ReleaseSource::Spec).unwrap();
    assert_eq!(choice.release, v0_5(23));
    assert_eq!(
        choice.warning().unwrap(),
        "SGLang 0.5.24 (Spec) is newer than any release kvpilot knows; its rules are checked as SGLang 0.5.23, the \
         newest known"
    );
    let known = choose_text("v0.5.21", ReleaseSource::Flag).unwrap();
    assert_eq!((known.release, known.warning()), (v0_5(21), None));
}

#[test]
fn an_older_or_unpublished_release_is_an_error_listing_the_known_ones() {
    for text in ["0.5.16", "0.5.22.post1", "0.4.9"] {
        let error = choose_text(text, ReleaseSource::Flag).unwrap_err().to_string();
        assert!(error.contains("known releases: 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23"), "{error}");
    }
}

#[test]
fn spans_include_both_ends() {
    let span = Span::between(v0_5(19), v0_5(20));
    assert!(!span.contains(v0_5(18)) && span.contains(v0_5(19)) && span.contains(v0_5(20)) && !span.contains(v0_5(21)));
    assert!(Span::since(v0_5(21)).contains(v0_5(99)));
    assert_eq!(span.to_string(), "0.5.19–0.5.20");
    assert_eq!(Span::since(v0_5(21)).to_string(), "0.5.21+");
    assert_eq!(Span::between(v0_5(18), v0_5(18)).to_string(), "0.5.18");
}

#[test]
fn reads_the_release_from_image_tags() {
    assert_eq!(from_image("lmsysorg/sglang:v0.5.23-cu129"), Some(v0_5(23)));
    assert_eq!(from_image("registry:5000/lmsysorg/sglang:0.5.22.post1"), Some(Release { post: Some(1), ..v0_5(22) }));
    assert_eq!(from_image("lmsysorg/sglang:v0.5.21-rocm700-mi30x"), Some(v0_5(21)));
    assert_eq!(from_image("registry:5000/sglang"), None);
    assert_eq!(from_image("lmsysorg/sglang:latest"), None);
    assert_eq!(from_image("lmsysorg/sglang@sha256:abc"), None);
    assert_eq!(from_image("kvpilot/kvpilot:0.5.30"), None, "not an SGLang image");
}

proptest! {
    #[test]
    fn display_round_trips(major in 0u16..100, minor in 0u16..100, patch in 0u16..100, post in proptest::option::of(0u16..20)) {
        let release = Release { major, minor, patch, post };
        prop_assert_eq!(release.to_string().parse::<Release>().unwrap(), release);
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,24}") {
        let _ = text.parse::<Release>();
        let _ = from_image(&text);
    }
}

#[test]
fn each_release_names_the_transformers_it_pins() {
    let pins: Vec<&str> = KNOWN.iter().map(|r| r.transformers().as_str()).collect();
    assert_eq!(pins, ["5.12.1", "5.12.1", "5.12.1", "5.12.1", "5.12.1", "5.19.0", "5.19.0"]);
}

#[test]
fn an_image_older_than_every_known_release_gets_the_oldest_profile_and_a_warning() {
    let choice = older_image(Release::new(0, 5, 9)).unwrap();
    assert_eq!(
        (choice.release, choice.requested, choice.source),
        (v0_5(17), Release::new(0, 5, 9), ReleaseSource::Image)
    );
    assert_eq!(
        choice.warning().unwrap(),
        "SGLang 0.5.9 (Image) is older than any release kvpilot knows; its rules are checked as SGLang 0.5.17, the \
         oldest known"
    );
    assert_eq!(older_image(v0_5(17)), None);
    assert_eq!(older_image(v0_5(20)), None);
}

#[test]
fn a_resource_image_naming_an_unmodelled_release_is_an_error_naming_the_field_to_set() {
    let fallback = ReleaseChoice::default_newest();
    for image in ["lmsysorg/sglang:v0.5.9-cu129", "lmsysorg/sglang:v0.5.22.post1", "lmsysorg/sglang:v0.4.10"] {
        let error = choose_for_resource(None, Some(image), &fallback).unwrap_err().to_string();
        assert!(
            error.contains(&format!("spec.decode.image {image}"))
                && error.contains("set spec.sglang.version")
                && error.contains("known releases: 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23"),
            "{error}"
        );
    }
    // The spec's pin wins over the tag: a user running 0.5.9 states what to check it as.
    let pinned = choose_text("0.5.17", ReleaseSource::Spec).unwrap();
    let chosen = choose_for_resource(Some(pinned.clone()), Some("lmsysorg/sglang:v0.5.9-cu129"), &fallback);
    assert_eq!(chosen, Ok(pinned));
    let newer = choose_for_resource(None, Some("lmsysorg/sglang:v0.5.30-cu129"), &fallback).unwrap();
    assert_eq!((newer.release, newer.source), (v0_5(23), ReleaseSource::Image));
    assert!(newer.warning().unwrap().contains("newer than any release kvpilot knows"));
}

#[test]
fn a_resource_image_naming_no_release_gets_the_fallback_and_a_warning_saying_how_to_pin() {
    let newest = ReleaseChoice::default_newest();
    let flag = choose_text("0.5.20", ReleaseSource::Flag).unwrap();
    for image in [
        "lmsysorg/sglang:latest",
        "lmsysorg/sglang",
        "lmsysorg/sglang@sha256:0123",
        "registry:5000/sglang:dev",
        "myco/server",
    ] {
        let chosen = choose_for_resource(None, Some(image), &newest).unwrap();
        assert_eq!((chosen.release, chosen.source), (v0_5(23), ReleaseSource::Default), "{image}");
        let warning = chosen.warning().unwrap_or_else(|| panic!("{image}: no warning"));
        assert!(
            warning.contains(&format!("spec.decode.image {image} names no SGLang release"))
                && warning.contains("checked as SGLang 0.5.23, the newest release kvpilot knows")
                && warning.contains("spec.sglang.version"),
            "{warning}"
        );
        let chosen = choose_for_resource(None, Some(image), &flag).unwrap();
        assert_eq!((chosen.release, chosen.source), (v0_5(20), ReleaseSource::Flag), "{image}");
        assert!(chosen.warning().unwrap().contains("SGLang 0.5.20, the --sglang-version kvpilot runs with"));
    }
    // A versioned tag of an image that is not SGLang's says nothing either way: no warning.
    for image in ["myco/inference:2.1", "myco/inference:2.1@sha256:0123"] {
        let chosen = choose_for_resource(None, Some(image), &newest).unwrap();
        assert_eq!((chosen.clone(), chosen.warning()), (newest.clone(), None), "{image}");
    }
    assert_eq!(choose_for_resource(None, None, &newest), Ok(newest));
}

#[test]
fn a_workload_image_keeps_its_warnings_and_never_fails() {
    let fallback = ReleaseChoice::default_newest();
    let (older, warning) = choose_for_workload(Some(Release::new(0, 5, 9)), &fallback);
    assert_eq!((older.release, warning), (v0_5(17), None));
    assert!(older.warning().unwrap().contains("older than any release kvpilot knows"));
    let (unpublished, warning) = choose_for_workload(Some(Release { post: Some(1), ..v0_5(22) }), &fallback);
    assert_eq!(unpublished.release, v0_5(23));
    assert!(warning.unwrap().contains("which kvpilot does not model"));
    assert_eq!(choose_for_workload(None, &fallback), (fallback, None));
}
