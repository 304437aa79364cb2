//! The one reader of a server's arguments as the rules see them: a fleet's `extraArgs` or a
//! command line, each option named in full (`sglang::server::effective_spec` and the guard name
//! them as the release's parser resolves them), the option words being those before the first
//! `--`, after which argparse takes every word as a value.

/// The words of `args` that argparse may read as options: those before the first `--`.
pub fn options(args: &[String]) -> &[String] {
    &args[..args.iter().position(|arg| arg == "--").unwrap_or(args.len())]
}

/// Whether the switch `option` is among a server's arguments.
pub fn given(args: &[String], option: &str) -> bool {
    options(args).iter().any(|arg| arg == option)
}

/// Whether `option` is among a server's arguments, alone or as `option=value`.
pub fn named(args: &[String], option: &str) -> bool {
    options(args)
        .iter()
        .any(|arg| arg.strip_prefix(option).is_some_and(|rest| rest.is_empty() || rest.starts_with('=')))
}

/// The value of `option` among a server's arguments (`--name value` or `--name=value`); the last
/// occurrence is the one argparse keeps.
pub fn option_value<'a>(args: &'a [String], option: &str) -> Option<&'a str> {
    let options = options(args);
    options.iter().enumerate().rev().find_map(|(i, arg)| match arg.strip_prefix(option) {
        Some("") => options.get(i + 1).map(String::as_str),
        Some(rest) => rest.strip_prefix('='),
        None => None,
    })
}

/// The whole number a server's arguments give the first of `spellings` they use; None when unset
/// or not a number.
pub fn number_option(args: &[String], spellings: &[&str]) -> Option<i64> {
    spellings.iter().find_map(|option| option_value(args, option)).and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn options_end_at_the_first_double_dash() {
        let args = words("--tp 2 --disable-overlap-schedule --dp=3 -- --page-size 16 --enable-eplb");
        assert_eq!(options(&args).len(), 4);
        assert!(given(&args, "--disable-overlap-schedule") && !given(&args, "--enable-eplb"));
        assert!(named(&args, "--dp") && named(&args, "--tp") && !named(&args, "--page-size"));
        assert_eq!((option_value(&args, "--tp"), option_value(&args, "--dp")), (Some("2"), Some("3")));
        assert_eq!(option_value(&args, "--page-size"), None);
        assert_eq!(number_option(&args, &["--tensor-parallel-size", "--tp"]), Some(2));
        assert_eq!(option_value(&words("--tp 2 --tp=4"), "--tp"), Some("4"), "the last occurrence");
        assert_eq!(option_value(&words("--tp"), "--tp"), None, "no value");
        assert!(!named(&words("--tp-size 2"), "--tp"), "another option");
    }
}
