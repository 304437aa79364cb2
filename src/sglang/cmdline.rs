//! Finding SGLang server invocations in a container's `command` + `args`: POSIX shell-word
//! splitting (quotes, escapes, `&&`/`;` chains, `exec`, environment prefixes) for `sh -c`
//! strings, and recognition of `python -m sglang.launch_server` and `sglang serve`.
//!
//! Every argument keeps its [`ArgSite`], so a rewrite can be written back exactly where the
//! argument came from: an element of the `command`/`args` array, or a byte range of a `-c` string.

use std::ops::Range;

/// Which array of the container an argument is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArgList {
    /// `container.command`.
    Command,
    /// `container.args`.
    Args,
}

impl ArgList {
    /// The container field's JSON name.
    pub fn key(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Args => "args",
        }
    }
}

/// Where one argument of an invocation was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgSite {
    /// The whole element `index` of `list`.
    Item { list: ArgList, index: usize },
    /// Bytes `span` of the shell script held in element `index` of `list`.
    ShellWord { list: ArgList, index: usize, span: Range<usize> },
}

/// One argument after shell processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The argument as the program receives it (quotes removed).
    pub text: String,
    /// Where it was written.
    pub site: ArgSite,
    /// It holds a shell expansion (`$VAR`, `$(…)`, backquotes) whose value is not known here.
    pub expands: bool,
}

impl Arg {
    /// `texts` as the items of a container's `args`, as the kubelet hands them over: `$(VAR)`
    /// references are expanded from an environment not seen here.
    pub fn items(texts: &[String]) -> Vec<Arg> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| Arg {
                text: text.clone(),
                site: ArgSite::Item { list: ArgList::Args, index },
                expands: text.contains("$("),
            })
            .collect()
    }
}

/// The program an invocation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `python -m sglang.launch_server`.
    LaunchServer,
    /// `sglang serve`.
    Serve,
    /// `python -m dynamo.sglang`: NVIDIA Dynamo's SGLang worker, which takes SGLang's server
    /// flags (plus its own, passed through like any unknown flag).
    Dynamo,
}

/// An SGLang server invocation: its server arguments, the environment assignments written in
/// front of it (`VAR=value cmd`, `env VAR=value cmd`), and where arguments can be appended.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub entry: Entry,
    /// The arguments after `sglang.launch_server` / `serve`.
    pub args: Vec<Arg>,
    /// `NAME=value` prefixes of the command.
    pub env: Vec<(String, String)>,
    /// Where a new argument goes: after the last one.
    pub append_at: AppendSite,
    /// The element of `command` or `args` that holds this whole command line as one word
    /// (`["python3 -m sglang.launch_server --tp 16"]`): the kubelet runs that word as one
    /// program name, which no file has, so the container never starts. Its words are read as
    /// they would be once split, with the items after it.
    pub one_word: Option<(ArgList, usize)>,
}

/// Where a new argument is inserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendSite {
    /// Before element `index` of `list` (`index` = its length appends).
    Item { list: ArgList, index: usize },
    /// At byte `offset` of the script in element `index` of `list`.
    Shell { list: ArgList, index: usize, offset: usize },
}

/// Why a shell script cannot be split into words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    #[error("unterminated {quote} quote starting at byte {at}")]
    UnterminatedQuote { quote: &'static str, at: usize },
    #[error("unterminated $( substitution starting at byte {at}")]
    UnterminatedSubstitution { at: usize },
}

/// A token of a shell script: a word, or an operator between commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A word with its text after quote removal and its byte span in the script.
    Word { text: String, span: Range<usize>, expands: bool },
    /// `;`, `&&`, `||`, `|`, `&` or a newline: the end of a simple command.
    Separator,
}

/// Splits a shell script into words and command separators as POSIX `sh` does (no expansion:
/// words holding `$…` or backquotes are marked `expands`). Comments are dropped.
pub fn split_shell(script: &str) -> Result<Vec<Token>, ShellError> {
    let bytes = script.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    let mut word: Option<(String, usize, bool)> = None;
    let finish = |word: &mut Option<(String, usize, bool)>, end: usize, tokens: &mut Vec<Token>| {
        if let Some((text, start, expands)) = word.take() {
            tokens.push(Token::Word { text, span: start..end, expands });
        }
    };
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\r' => {
                finish(&mut word, i, &mut tokens);
                i += 1;
            }
            b'\n' | b';' | b'&' | b'|' => {
                finish(&mut word, i, &mut tokens);
                if tokens.last() != Some(&Token::Separator) {
                    tokens.push(Token::Separator);
                }
                i += 1;
            }
            b'#' if word.is_none() => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' => {
                if bytes.get(i + 1) == Some(&b'\n') {
                    // A line continuation is removed; a word around it goes on.
                    i += 2;
                    continue;
                }
                let entry = word.get_or_insert_with(|| (String::new(), i, false));
                if let Some(next) = script[i + 1..].chars().next() {
                    entry.0.push(next);
                    i += 1 + next.len_utf8();
                } else {
                    i += 1;
                }
            }
            b'\'' => {
                let start = i;
                let close =
                    script[i + 1..].find('\'').ok_or(ShellError::UnterminatedQuote { quote: "single", at: start })?;
                let entry = word.get_or_insert_with(|| (String::new(), start, false));
                entry.0.push_str(&script[i + 1..i + 1 + close]);
                i += close + 2;
            }
            b'"' => {
                let start = i;
                let entry = word.get_or_insert_with(|| (String::new(), start, false));
                i += 1;
                loop {
                    let Some(&b) = bytes.get(i) else {
                        return Err(ShellError::UnterminatedQuote { quote: "double", at: start });
                    };
                    match b {
                        b'"' => {
                            i += 1;
                            break;
                        }
                        b'\\' if matches!(bytes.get(i + 1), Some(b'"' | b'\\' | b'$' | b'`' | b'\n')) => {
                            if bytes[i + 1] != b'\n' {
                                entry.0.push(bytes[i + 1] as char);
                            }
                            i += 2;
                        }
                        b'$' | b'`' => {
                            entry.2 = true;
                            entry.0.push(b as char);
                            i += 1;
                        }
                        _ => {
                            let ch = script[i..].chars().next().unwrap_or('\u{fffd}');
                            entry.0.push(ch);
                            i += ch.len_utf8().max(1);
                        }
                    }
                }
            }
            b'$' if bytes.get(i + 1) == Some(&b'(') => {
                let start = i;
                let mut depth = 0usize;
                let mut j = i + 1;
                loop {
                    match bytes.get(j) {
                        None => return Err(ShellError::UnterminatedSubstitution { at: start }),
                        Some(b'(') => depth += 1,
                        Some(b')') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        Some(_) => {}
                    }
                    j += 1;
                }
                let entry = word.get_or_insert_with(|| (String::new(), start, false));
                entry.0.push_str(&script[start..=j]);
                entry.2 = true;
                i = j + 1;
            }
            _ => {
                let ch = script[i..].chars().next().unwrap_or('\u{fffd}');
                let entry = word.get_or_insert_with(|| (String::new(), i, false));
                if matches!(ch, '$' | '`') {
                    entry.2 = true;
                }
                entry.0.push(ch);
                i += ch.len_utf8().max(1);
            }
        }
    }
    finish(&mut word, bytes.len(), &mut tokens);
    Ok(tokens)
}

/// Shells whose `-c` script is searched for invocations.
const SHELLS: &[&str] = &["sh", "bash", "dash", "ash", "zsh", "ksh"];

fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

fn is_python(program: &str) -> bool {
    let name = basename(program);
    name == "python" || name.strip_prefix("python3").is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// `NAME=value` as a shell assignment: a name of letters, digits and `_`, not starting with a digit.
fn assignment(text: &str) -> Option<(String, String)> {
    let (name, value) = text.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() || first == '_')
        .then_some(())
        .filter(|()| chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|()| (name.to_string(), value.to_string()))
}

/// Python interpreter options that take a separate value.
const PYTHON_OPTIONS_WITH_VALUE: &[&str] = &["-X", "-W", "-Q"];

/// What the search found in a container, with what it could not read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Found {
    pub invocations: Vec<Invocation>,
    pub warnings: Vec<String>,
}

/// Finds the SGLang server invocations in a container's `command` and `args` (the kubelet runs
/// `command ++ args`; with no `command` the image's entrypoint runs `args`, searched the same).
pub fn find_invocations(command: &[String], args: &[String], env: &[(String, String)]) -> Found {
    let argv: Vec<Arg> = command
        .iter()
        .enumerate()
        .map(|(index, text)| (ArgList::Command, index, text))
        .chain(args.iter().enumerate().map(|(index, text)| (ArgList::Args, index, text)))
        .map(|(list, index, text)| {
            let (text, unresolved) = expand_references(text, env);
            Arg { text, site: ArgSite::Item { list, index }, expands: unresolved }
        })
        .collect();
    let end = if args.is_empty() && !command.is_empty() {
        AppendSite::Item { list: ArgList::Command, index: command.len() }
    } else {
        AppendSite::Item { list: ArgList::Args, index: args.len() }
    };
    let mut found = Found::default();
    search(&argv, end, &mut found, true);
    found
}

/// Expands `$(NAME)` in a container's command or args item as the kubelet does, from the
/// container's literal `env` values (`env`, in order): a defined name is replaced, `$$` is a
/// literal `$`, and an undefined reference stays as written. The flag says whether one stayed:
/// its value comes from somewhere kvpilot does not read (valueFrom, the downward API) and is
/// never guessed.
pub fn expand_references(text: &str, env: &[(String, String)]) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut unresolved = false;
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match env.iter().rev().find(|(defined, _)| defined == name) {
                Some((_, value)) => out.push_str(value),
                None => {
                    unresolved = true;
                    out.push_str(&rest[at..at + 3 + name.len()]);
                }
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    (out, unresolved)
}

/// Looks at one simple command; `outer` allows one level of `sh -c` (a script inside a script
/// has no site an array patch can reach).
fn search(argv: &[Arg], end: AppendSite, found: &mut Found, outer: bool) {
    let mut rest = argv;
    let mut env = Vec::new();
    let mut after_env = false;
    // `exec`, `env [-i] [--] NAME=value…` and `NAME=value` prefixes run the same program.
    loop {
        let Some(first) = rest.first() else { return };
        if first.text == "exec" || basename(&first.text) == "env" {
            after_env |= basename(&first.text) == "env";
            rest = &rest[1..];
        } else if after_env && (first.text == "-i" || first.text == "--") {
            rest = &rest[1..];
        } else if let Some(pair) = assignment(&first.text) {
            env.push(pair);
            rest = &rest[1..];
        } else {
            break;
        }
    }
    let Some(program) = rest.first() else { return };
    // Only in `command`: an `args` item runs under the image's entrypoint, which may be a shell.
    if outer
        && program.text.split_whitespace().nth(1).is_some()
        && let ArgSite::Item { list: list @ ArgList::Command, index } = program.site
    {
        let before = found.invocations.len();
        let mut inside = Found::default();
        search_script(&program.text, list, index, &mut inside);
        // Only a server found inside is reported: any other program is not kvpilot's to judge.
        for mut invocation in inside.invocations {
            invocation.one_word = Some((list, index));
            if rest.len() > 1 {
                invocation.args.extend(rest[1..].iter().cloned());
                invocation.append_at = end.clone();
            }
            found.invocations.push(invocation);
        }
        if found.invocations.len() > before {
            found.warnings.extend(inside.warnings);
        }
        return;
    }
    if SHELLS.contains(&basename(&program.text)) {
        let script_at =
            rest.iter().position(|a| a.text.starts_with('-') && !a.text.starts_with("--") && a.text.ends_with('c'));
        let Some(script) = script_at.and_then(|at| rest.get(at + 1)) else { return };
        if !outer {
            found.warnings.push(format!(
                "a `{} -c` script inside a shell script is not searched for SGLang servers",
                basename(&program.text)
            ));
            return;
        }
        let ArgSite::Item { list, index } = script.site.clone() else { return };
        search_script(&script.text, list, index, found);
        return;
    }
    let server_args = if is_python(&program.text) {
        let mut i = 1;
        while let Some(arg) = rest.get(i) {
            if arg.text == "-m" {
                break;
            }
            if !arg.text.starts_with('-') {
                // A script path: not `-m sglang.launch_server`.
                return;
            }
            i += if PYTHON_OPTIONS_WITH_VALUE.contains(&arg.text.as_str()) { 2 } else { 1 };
        }
        match rest.get(i + 1) {
            Some(module) if module.text == "sglang.launch_server" => Some((Entry::LaunchServer, i + 2)),
            Some(module) if module.text == "dynamo.sglang" => Some((Entry::Dynamo, i + 2)),
            _ => None,
        }
    } else if basename(&program.text) == "sglang" && rest.get(1).is_some_and(|a| a.text == "serve") {
        Some((Entry::Serve, 2))
    } else {
        None
    };
    if let Some((entry, start)) = server_args {
        found.invocations.push(Invocation { entry, args: rest[start..].to_vec(), env, append_at: end, one_word: None });
    }
}

/// Splits a `-c` script into simple commands and searches each.
fn search_script(script: &str, list: ArgList, index: usize, found: &mut Found) {
    let tokens = match split_shell(script) {
        Ok(tokens) => tokens,
        Err(e) => {
            found.warnings.push(format!(
                "{}[{index}] is a shell script kvpilot cannot split ({e}); it is not checked",
                list.key()
            ));
            return;
        }
    };
    for command in tokens.split(|t| *t == Token::Separator) {
        let argv: Vec<Arg> = command
            .iter()
            .filter_map(|token| match token {
                Token::Word { text, span, expands } => Some(Arg {
                    text: text.clone(),
                    site: ArgSite::ShellWord { list, index, span: span.clone() },
                    expands: *expands,
                }),
                Token::Separator => None,
            })
            .collect();
        let offset = match argv.last().map(|a| &a.site) {
            Some(ArgSite::ShellWord { span, .. }) => span.end,
            _ => continue,
        };
        search(&argv, AppendSite::Shell { list, index, offset }, found, false);
    }
}

/// A word quoted for `sh` so that it reads back as `text`: bare when it is safe, else in single quotes.
pub fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '=' | ':' | ',' | '+' | '@'));
    if safe { text.to_string() } else { format!("'{}'", text.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(script: &str) -> Vec<String> {
        split_shell(script)
            .unwrap()
            .into_iter()
            .map(|t| match t {
                Token::Word { text, .. } => text,
                Token::Separator => ";".into(),
            })
            .collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(ToString::to_string).collect()
    }

    fn texts(invocation: &Invocation) -> Vec<&str> {
        invocation.args.iter().map(|a| a.text.as_str()).collect()
    }

    #[test]
    fn shell_words_follow_posix_quoting() {
        let cases: &[(&str, &[&str])] = &[
            ("a b  c", &["a", "b", "c"]),
            ("'a b' \"c d\"", &["a b", "c d"]),
            (r#"a\ b "x\"y" 'it'\''s'"#, &["a b", "x\"y", "it's"]),
            ("a && b; c\nd | e", &["a", ";", "b", ";", "c", ";", "d", ";", "e"]),
            ("a \\\n  b", &["a", "b"]),
            ("--x=\"1 2\"", &["--x=1 2"]),
            ("a # comment\nb", &["a", ";", "b"]),
            ("a#b", &["a#b"]),
            ("", &[]),
        ];
        for (script, expected) in cases {
            assert_eq!(words(script), strings(expected), "{script:?}");
        }
    }

    #[test]
    fn word_spans_cover_the_quoted_text() {
        let script = "run --a 'x y' --b=\"q\"";
        let spans: Vec<&str> = split_shell(script)
            .unwrap()
            .into_iter()
            .filter_map(|t| match t {
                Token::Word { span, .. } => Some(&script[span]),
                Token::Separator => None,
            })
            .collect();
        assert_eq!(spans, ["run", "--a", "'x y'", "--b=\"q\""]);
    }

    #[test]
    fn expansions_are_marked() {
        let tokens = split_shell("a $HOME \"${X}\" $(hostname -i) `id` plain").unwrap();
        let marks: Vec<bool> = tokens
            .into_iter()
            .filter_map(|t| match t {
                Token::Word { expands, .. } => Some(expands),
                Token::Separator => None,
            })
            .collect();
        assert_eq!(marks, [false, true, true, true, true, false]);
    }

    #[test]
    fn malformed_scripts_are_errors() {
        assert_eq!(split_shell("a 'b"), Err(ShellError::UnterminatedQuote { quote: "single", at: 2 }));
        assert_eq!(split_shell("a \"b"), Err(ShellError::UnterminatedQuote { quote: "double", at: 2 }));
        assert_eq!(split_shell("a $(b"), Err(ShellError::UnterminatedSubstitution { at: 2 }));
        let found = find_invocations(&strings(&["sh", "-c", "python3 -m sglang.launch_server --tp 'x"]), &[], &[]);
        assert!(found.invocations.is_empty());
        assert!(found.warnings[0].contains("command[2]") && found.warnings[0].contains("unterminated single quote"));
    }

    #[test]
    fn invocations_are_found_in_every_form() {
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            (&["python3", "-m", "sglang.launch_server", "--tp", "2"], &[], &["--tp", "2"]),
            (&["python", "-m", "sglang.launch_server"], &["--tp-size=4"], &["--tp-size=4"]),
            (&["/usr/bin/python3.12", "-u", "-X", "dev", "-m", "sglang.launch_server", "--a"], &[], &["--a"]),
            (&["sglang", "serve", "--model-path", "m"], &[], &["--model-path", "m"]),
            (&[], &["python3", "-m", "sglang.launch_server", "--a"], &["--a"]),
            (
                &["bash", "-c"],
                &["set -e; exec python3 -m sglang.launch_server --x 'a b' && echo done"],
                &["--x", "a b"],
            ),
            (&["/bin/sh", "-ec", "A=1 env B=2 sglang serve --p \"v\""], &[], &["--p", "v"]),
            (&["env", "-i", "--", "python3", "-m", "sglang.launch_server", "--q"], &[], &["--q"]),
            (
                &["python3", "-m", "dynamo.sglang"],
                &["--disaggregation-mode", "decode"],
                &["--disaggregation-mode", "decode"],
            ),
        ];
        for (command, args, expected) in cases {
            let found = find_invocations(&strings(command), &strings(args), &[]);
            assert_eq!(found.invocations.len(), 1, "{command:?} {args:?}");
            assert_eq!(texts(&found.invocations[0]), *expected, "{command:?} {args:?}");
        }
    }

    #[test]
    fn other_programs_are_not_invocations() {
        for command in [
            &["python3", "-m", "sglang_router.launch_router"][..],
            &["python3", "-m", "dynamo.frontend", "--http-port", "8000"],
            &["smg", "--pd-disaggregation"],
            &["mooncake_master", "--port", "50051"],
            &["python3", "-m", "mooncake.mooncake_store_service"],
            &["python3", "serve.py", "-m", "sglang.launch_server"],
            &["sglang", "version"],
            &["nginx"],
            &["sh", "-c", "echo python3 -m sglang.launch_server"],
        ] {
            assert!(find_invocations(&strings(command), &[], &[]).invocations.is_empty(), "{command:?}");
        }
    }

    #[test]
    fn sites_and_environment_prefixes_are_kept() {
        let script = "SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 exec python3 -m sglang.launch_server --b host_pool";
        let found = find_invocations(&strings(&["sh", "-c", script]), &[], &[]);
        let invocation = &found.invocations[0];
        assert_eq!(invocation.env, [("SGLANG_ENABLE_UNIFIED_RADIX_TREE".to_string(), "1".to_string())]);
        let ArgSite::ShellWord { list, index, span } = &invocation.args[1].site else { panic!() };
        assert_eq!((*list, *index, &script[span.clone()]), (ArgList::Command, 2, "host_pool"));
        assert_eq!(invocation.append_at, AppendSite::Shell { list: ArgList::Command, index: 2, offset: script.len() });

        let found = find_invocations(&strings(&["python3"]), &strings(&["-m", "sglang.launch_server", "--a"]), &[]);
        assert_eq!(found.invocations[0].args[0].site, ArgSite::Item { list: ArgList::Args, index: 2 });
        assert_eq!(found.invocations[0].append_at, AppendSite::Item { list: ArgList::Args, index: 3 });
    }

    #[test]
    fn quoting_reads_back() {
        for text in ["cpu_tensor", "a b", "it's", "", "$HOME", "--x=1"] {
            assert_eq!(words(&shell_quote(text)), [text.to_string()], "{text:?}");
        }
    }

    #[test]
    fn references_expand_as_the_kubelet_expands_them() {
        let env = [("TP".to_string(), "4".to_string()), ("MODEL".to_string(), "/models/m".to_string())];
        let cases = [
            ("--tp=$(TP)", ("--tp=4", false)),
            ("$(MODEL)/x $(TP)$(TP)", ("/models/m/x 44", false)),
            ("$$(TP) costs $$5", ("$(TP) costs $5", false)),
            ("$(POD_IP):$(TP)", ("$(POD_IP):4", true)),
            ("$HOME and $ alone", ("$HOME and $ alone", false)),
            ("$(unterminated", ("$(unterminated", false)),
        ];
        for (text, (expanded, unresolved)) in cases {
            assert_eq!(expand_references(text, &env), (expanded.to_string(), unresolved), "{text}");
        }
        let found = find_invocations(
            &strings(&["python3", "-m", "sglang.launch_server"]),
            &strings(&["--tp", "$(TP)", "--dp", "$(POD_DP)"]),
            &env,
        );
        let args = &found.invocations[0].args;
        assert_eq!((args[1].text.as_str(), args[1].expands), ("4", false));
        assert_eq!((args[3].text.as_str(), args[3].expands), ("$(POD_DP)", true), "not guessed");
    }

    use proptest::prelude::*;

    /// Pieces of shell command lines, good and broken.
    fn shell_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(vec![
                "python3",
                "python",
                "/usr/bin/python3.12",
                " -m ",
                "sglang.launch_server",
                "dynamo.sglang",
                "sglang",
                " serve",
                "sglang_router.launch_router",
                "exec ",
                "env ",
                "-i ",
                "A=1 ",
                " ",
                "\t",
                "\n",
                "\\\n",
                "\\",
                "'",
                "\"",
                "$(",
                ")",
                "$(X)",
                "$(Y",
                "$$",
                "$VAR",
                "${V}",
                "`",
                "&&",
                "||",
                ";",
                "|",
                "&",
                "#",
                "sh -c ",
                "bash -lc ",
                "--tp",
                "--tp-size=2",
                "--disaggregation-mode",
                " decode",
                "--page-size",
                " 64",
                "--model-path /m",
                "=",
            ])
            .prop_map(str::to_string),
            "\\PC{0,6}",
        ]
    }

    /// Runs `work` on a thread and fails the test if it takes more than five seconds (a hang).
    fn within_seconds<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || sender.send(work()));
        receiver.recv_timeout(std::time::Duration::from_secs(5)).expect("the command-line reader hung or panicked")
    }

    proptest::proptest! {
        #[test]
        fn splitting_and_searching_never_panic(script in "\\PC{0,80}", args in proptest::collection::vec("\\PC{0,12}", 0..6)) {
            let _ = split_shell(&script);
            let _ = find_invocations(&["sh".into(), "-c".into(), script.clone()], &args, &[]);
            let _ = find_invocations(&[], &args, &[]);
            let _ = expand_references(&script, &[("A".into(), "$(A)".into())]);
        }

        /// Scripts made of the pieces real command lines are made of (shells, quotes, escapes,
        /// continuations, `$(…)`, chains, prefixes, launchers) are read without a panic or a hang,
        /// and every site found points inside the text it came from.
        #[test]
        fn shell_shaped_scripts_are_read_within_bounds(
            pieces in proptest::collection::vec(shell_piece(), 0..40),
            args in proptest::collection::vec(proptest::collection::vec(shell_piece(), 0..6).prop_map(|p| p.concat()), 0..4),
            shell in proptest::sample::select(vec!["sh", "/bin/bash", "bash", "ash", "dash"]),
            // A launcher up front most of the time, so that sites are found and checked.
            launcher in proptest::sample::select(vec!["", "python3 -m sglang.launch_server ", "exec python3 -m dynamo.sglang ", "A=1 sglang serve "]),
        ) {
            let script = format!("{launcher}{}", pieces.concat());
            let command = vec![shell.to_string(), "-c".to_string(), script.clone()];
            let env = vec![("X".to_string(), "$(Y)".to_string()), ("Y".to_string(), "2".to_string())];
            let reader_env = env.clone();
            let found = within_seconds(move || {
                let _ = split_shell(&script);
                let found = find_invocations(&command, &args, &reader_env);
                let cli = crate::sglang::server_cli::for_release(crate::release::Release::newest_known());
                for invocation in &found.invocations {
                    let _ = crate::sglang::flags::read(&invocation.args, cli);
                    let _ = cli.read(&invocation.args);
                }
                (found, command, args)
            });
            let (found, command, args) = found;
            for invocation in &found.invocations {
                for arg in &invocation.args {
                    let list = |list: ArgList| match list { ArgList::Command => &command, ArgList::Args => &args };
                    match &arg.site {
                        ArgSite::Item { list: which, index } => prop_assert!(*index < list(*which).len()),
                        ArgSite::ShellWord { list: which, index, span } => {
                            // Spans index the script as the kubelet expands it.
                            let (text, _) = expand_references(&list(*which)[*index], &env);
                            prop_assert!(span.end <= text.len() && text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
                        }
                    }
                }
            }
        }

        /// Any words, shell-quoted after a launcher behind a prefix and line continuations, are
        /// found as the launcher's arguments, exactly.
        #[test]
        fn quoted_launcher_arguments_are_read_back(words in proptest::collection::vec("[^$]{0,10}", 0..8), launcher in 0..3usize) {
            let launcher = ["python3 -m sglang.launch_server", "exec /usr/bin/python3 -u -m dynamo.sglang", "A=1 env sglang serve"][launcher];
            let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
            let script = format!("set -e; {launcher} \\\n  {}", quoted.join(" \\\n  "));
            let found = find_invocations(&["sh".into(), "-c".into(), script.clone()], &[], &[]);
            prop_assert_eq!(found.invocations.len(), 1, "{}", script);
            let read: Vec<&str> = found.invocations[0].args.iter().map(|a| a.text.as_str()).collect();
            prop_assert_eq!(read, words.iter().map(String::as_str).collect::<Vec<_>>());
        }

        #[test]
        fn quoted_words_split_back(items in proptest::collection::vec("\\PC{0,10}", 1..5)) {
            let script = items.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ");
            let back: Vec<String> = split_shell(&script).unwrap().into_iter().filter_map(|t| match t {
                Token::Word { text, .. } => Some(text),
                Token::Separator => None,
            }).collect();
            prop_assert_eq!(back, items);
        }
    }
}
