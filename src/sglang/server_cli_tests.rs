use proptest::prelude::*;

use super::*;
use crate::release::v0_5;
use crate::sglang::cmdline::{ArgList, ArgSite};

fn args(texts: &[&str]) -> Vec<Arg> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| Arg {
            text: (*text).to_string(),
            site: ArgSite::Item { list: ArgList::Args, index },
            expands: text.contains('$'),
        })
        .collect()
}

/// What 0.5.23 makes of `--model-path m` followed by `rest`.
fn read_0_5_23(rest: &[&str]) -> Reading {
    let mut line = vec!["--model-path", "m"];
    line.extend_from_slice(rest);
    for_release(v0_5(23)).read(&args(&line))
}

fn refusal(rest: &[&str]) -> Option<String> {
    read_0_5_23(rest).refusal
}

#[test]
fn the_table_parses_and_every_release_has_a_parser() {
    assert!(OPTIONS.len() > 500, "{}", OPTIONS.len());
    for &release in KNOWN {
        let cli = for_release(release);
        assert_eq!(cli.release, release);
        assert!(cli.exact("--model-path").is_some_and(|(o, _)| o.required), "{release}");
        // argparse refuses a parser that declares an option string twice.
        let mut strings: Vec<&str> = cli.strings.iter().map(|(s, _)| *s).collect();
        strings.sort_unstable();
        let count = strings.len();
        strings.dedup();
        assert_eq!(strings.len(), count, "{release} declares an option string twice");
    }
    assert_eq!(for_release(crate::release::Release::new(0, 5, 9)).release, v0_5(17));
}

/// Messages as SGLang 0.5.23's parser printed them on Python 3.11.7 (tests/parity checks them all).
#[test]
fn refusals_in_argparse_words() {
    let cases: &[(&[&str], &str)] = &[
        (&["--foo"], "unrecognized arguments: --foo"),
        (&["--foo", "bar", "--tp-size", "2"], "unrecognized arguments: --foo bar"),
        (
            &["--cuda-graph-bs", "8"],
            "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill",
        ),
        (
            &["--disaggregation-mode", "x"],
            "argument --disaggregation-mode: invalid choice: 'x' (choose from 'null', 'prefill', 'decode')",
        ),
        (&["--tp-size", "x"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'x'"),
        (&["--tp-size"], "argument --tp-size/--tensor-parallel-size: expected one argument"),
        (&["--tp-size", "2", "3"], "unrecognized arguments: 3"),
        (&["--enable-dp-attention=1"], "argument --enable-dp-attention: ignored explicit argument '1'"),
        (&["--nnodes", "-x"], "argument --nnodes: expected one argument"),
        (&["--dp", "x"], "argument --dp-size/--data-parallel-size: invalid int value: 'x'"),
        (
            &["--pp=2"],
            "ambiguous option: --pp=2 could match --pp-size, --pp-max-micro-batch-size, --pp-async-batch-depth",
        ),
        (&["--cuda-graph-bs-decode"], "argument --cuda-graph-bs-decode: expected at least one argument"),
        (&["--", "x"], "unrecognized arguments: -- x"),
        (
            &["--kv-cache-dtype", "it's"],
            "argument --kv-cache-dtype: invalid choice: \"it's\" (choose from 'auto', 'fp8_e5m2', 'fp8_e4m3', 'mxfp8', 'bf16', 'bfloat16', 'nvfp4', 'fp4_mx_block16')",
        ),
        (&["-x"], "unrecognized arguments: -x"),
        (&["-hx"], "argument -h/--help: ignored explicit argument 'x'"),
        (&["--help"], HELP_EXIT),
    ];
    for (rest, expected) in cases {
        assert_eq!(refusal(rest).as_deref(), Some(*expected), "{rest:?}");
    }
    assert_eq!(
        for_release(v0_5(23)).read(&[]).refusal.as_deref(),
        Some("the following arguments are required: --model-path/--model")
    );
}

#[test]
fn what_argparse_accepts() {
    let accepted: &[&[&str]] = &[
        &["--tp", "2"],
        &["--mem-frac", "0.5"],
        &["--nnodes", "-1"],
        &["--enable-hier"],
        &["--page-size", " 1_6 "],
        &["--mem-fraction-static", "1e-1"],
        &["--mem-fraction-static", "nan"],
        &["--tp-size=--"],
        &["--ep", "2"],
        &["--random-seed", "-5"],
        &["--model-checksum"],
        &["--tensor-parallel-size=4", "--enable-dp-attention"],
    ];
    for rest in accepted {
        let reading = read_0_5_23(rest);
        assert_eq!(reading.refusal, None, "{rest:?}");
    }
}

#[test]
fn abbreviations_name_the_full_option() {
    let reading = read_0_5_23(&["--tp", "2", "--mem-frac=0.8", "--ep", "2"]);
    let found: Vec<(&str, &str)> = reading.abbreviations.iter().map(|a| (a.written.as_str(), a.full)).collect();
    // `--ep` is an alias SGLang declares, not an abbreviation.
    assert_eq!(found, [("--tp", "--tp-size"), ("--mem-frac", "--mem-fraction-static")]);
}

#[test]
fn deprecated_options_are_named() {
    let reading = read_0_5_23(&["--enable-dp-attention", "--disable-cuda-graph", "--enable-dp-attention"]);
    assert_eq!((reading.refusal, reading.deprecated), (None, vec!["--enable-dp-attention", "--disable-cuda-graph"]));
    assert_eq!(
        for_release(v0_5(21)).read(&args(&["--model-path", "m", "--enable-dp-attention"])).deprecated,
        Vec::<&str>::new()
    );
}

#[test]
fn releases_differ() {
    // 0.5.17 has no `-decode`/`-prefill` variants, so `--cuda-graph-bs` is its own option there.
    let line = args(&["--model-path", "m", "--cuda-graph-bs", "8"]);
    assert_eq!(for_release(v0_5(17)).read(&line).refusal, None);
    assert!(for_release(v0_5(23)).read(&line).refusal.is_some_and(|r| r.starts_with("ambiguous option")));
}

#[test]
fn expansions_are_not_judged() {
    let reading = read_0_5_23(&["--tp-size", "$(TP)", "--disaggregation-mode=$MODE", "--host", "$(POD_IP)"]);
    assert_eq!(reading.refusal, None);
    // Any string passes --host: only the int and the choice are unjudged.
    let unseen: Vec<(usize, &str)> = reading.unseen_values.iter().map(|u| (u.at, u.option.strings[0])).collect();
    assert_eq!(unseen, [(3, "--tp-size"), (4, "--disaggregation-mode")]);
    // An expansion where an option goes could be any option: nothing after is judged.
    let reading = read_0_5_23(&["$EXTRA_ARGS", "--foo"]);
    assert_eq!(reading.refusal, None);
    assert!(reading.not_judged[0].contains("$EXTRA_ARGS"), "{:?}", reading.not_judged);
    let reading = for_release(v0_5(23)).read(&args(&["--config", "/etc/sglang.yaml", "--foo"]));
    assert_eq!(reading.refusal, None);
    assert!(reading.not_judged[0].contains("merges more arguments"), "{:?}", reading.not_judged);
}

#[test]
fn python_numbers_and_reprs() {
    for (text, expected) in [
        ("7", Some(7)),
        (" -1_000 ", Some(-1000)),
        ("+3", Some(3)),
        ("1__0", None),
        ("_1", None),
        ("", None),
        ("0x10", None),
        ("1.0", None),
    ] {
        assert_eq!(py_int(text), expected, "{text:?}");
    }
    for (text, ok) in [
        ("1", true),
        ("1.", true),
        (".5", true),
        ("1e-3", true),
        ("-inf", true),
        ("NaN", true),
        ("1_0.5", true),
        ("e3", false),
        (".", false),
        ("1e", false),
        ("x", false),
    ] {
        assert_eq!(py_float(text).is_some(), ok, "{text:?}");
    }
}

proptest! {
    #[test]
    fn reading_never_panics(line in prop::collection::vec("(--?[a-z-]{0,30}(=\\PC{0,6})?|\\PC{0,8}|--|-h\\PC{0,3})", 0..14)) {
        let texts: Vec<&str> = line.iter().map(String::as_str).collect();
        for &release in KNOWN {
            let _ = for_release(release).read(&args(&texts));
        }
    }
}

#[test]
fn each_refusal_names_its_subject_and_a_fix() {
    let cases = [
        ("unrecognized arguments: --foo bar", "--foo bar", "remove them: SGLang 0.5.23 has no such option"),
        (
            "ambiguous option: --pp=2 could match --pp-size, --pp-x",
            "--pp",
            "write the full option name, one of --pp-size, --pp-x",
        ),
        (
            "argument --tp-size/--tensor-parallel-size: invalid int value: 'x'",
            "--tp-size/--tensor-parallel-size",
            "give --tp-size a whole number",
        ),
        (
            "argument --enable-dp-attention: ignored explicit argument '1'",
            "--enable-dp-attention",
            "--enable-dp-attention is a switch",
        ),
        (
            "the following arguments are required: --model-path/--model",
            "--model-path/--model (not set)",
            "add --model-path/--model",
        ),
    ];
    for (message, subject, fix) in cases {
        let (found_subject, found_fix) = refusal_subject_and_fix(message, v0_5(23));
        assert_eq!(found_subject, subject);
        assert!(found_fix.starts_with(fix), "{found_fix}");
    }
}
