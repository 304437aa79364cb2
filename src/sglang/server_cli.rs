//! SGLang's whole server command line, per release, read as the release's argparse reads it.
//!
//! `server_cli.tsv` lists every option of `ServerArgs.add_cli_args` in each release (generated
//! from the wheels' own parsers by the parity harness, tests/parity/server_cli.py). [`ServerCli`]
//! reads an argv with the rules of Python 3.11's `argparse` (the Python the harness runs the
//! parsers on): exact options, `--name=value`, unique-prefix abbreviations (`allow_abbrev` is on in
//! every release), `nargs`, store-true switches, values starting with `-`, `--`. What the release
//! would refuse comes back in argparse's own words, as `sglang serve: error: …` would print it.

use std::sync::LazyLock;

use super::cmdline::Arg;
use crate::python::py_repr;
use crate::release::{KNOWN, Release};

const TABLE: &str = include_str!("server_cli.tsv");

/// How many values an option takes (argparse's `nargs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nargs {
    /// `None`: exactly one.
    One,
    /// `'?'`: zero or one.
    Optional,
    /// `'*'`.
    ZeroOrMore,
    /// `'+'`.
    OneOrMore,
    /// A number (0 for switches).
    Exactly(usize),
}

/// What argparse converts a value with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Int,
    Float,
    Str,
    /// Another callable (named): its values are not judged.
    NotJudged(&'static str),
}

/// One allowed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Int(i64),
    Str(String),
}

/// An option's allowed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choices {
    Any,
    /// In declaration order; a Python set (`~` in the table) sorted, as its order in argparse's
    /// message changes from one interpreter run to the next.
    OneOf(Vec<Choice>),
    /// Built from modules the harness stubs: not known, never judged.
    NotKnown,
}

/// One option (argparse action) as the table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliOption {
    /// Its option strings, as declared (`--tp-size`, `--tensor-parallel-size`).
    pub strings: Vec<&'static str>,
    /// argparse's action name (`store`, `store_true`, …) or a custom action's class.
    pub action: &'static str,
    pub nargs: Nargs,
    pub value_type: ValueType,
    pub choices: Choices,
    pub required: bool,
    /// What the option's own action refuses it with when given (SGLang's `DeprecatedAction`
    /// with an `error_message` calls `parser.error`).
    pub refuses: Option<&'static str>,
    first: Release,
    last: Option<Release>,
}

impl CliOption {
    /// The name argparse's messages give it: its strings joined by `/`.
    pub fn display_name(&self) -> String {
        self.strings.join("/")
    }

    fn in_release(&self, release: Release) -> bool {
        self.first <= release && self.last.is_none_or(|last| release <= last)
    }
}

fn parse_row(line: &'static str) -> Result<CliOption, String> {
    let fields: Vec<&'static str> = line.split('\t').collect();
    let [strings, action, nargs, value_type, choices, required, refuses, first, last] = fields[..] else {
        return Err(format!("expected 9 tab-separated fields, found {}", fields.len()));
    };
    let nargs = match nargs {
        "-" => Nargs::One,
        "?" => Nargs::Optional,
        "*" => Nargs::ZeroOrMore,
        "+" => Nargs::OneOrMore,
        n => Nargs::Exactly(n.parse().map_err(|_| format!("nargs {n:?} is not -, ?, *, + or a number"))?),
    };
    let value_type = match value_type {
        "int" => ValueType::Int,
        "float" => ValueType::Float,
        "str" => ValueType::Str,
        other => ValueType::NotJudged(
            other.strip_prefix('~').ok_or_else(|| format!("type {other:?} is not int, float, str or ~name"))?,
        ),
    };
    let choices = match choices {
        "-" => Choices::Any,
        "?" => Choices::NotKnown,
        written => {
            let list = written.strip_prefix('~').unwrap_or(written);
            let values: Vec<serde_json::Value> =
                serde_json::from_str(list).map_err(|e| format!("choices {list:?} are not a JSON list: {e}"))?;
            let values = values
                .into_iter()
                .map(|value| match value {
                    serde_json::Value::String(s) => Ok(Choice::Str(s)),
                    serde_json::Value::Number(n) => {
                        n.as_i64().map(Choice::Int).ok_or_else(|| format!("choice {n} is not an integer"))
                    }
                    other => Err(format!("choice {other} is neither a string nor an integer")),
                })
                .collect::<Result<_, _>>()?;
            Choices::OneOf(values)
        }
    };
    let release = |text: &str| text.parse::<Release>().map_err(|e| format!("release {text:?}: {e}"));
    Ok(CliOption {
        strings: strings.split(' ').collect(),
        action,
        nargs,
        value_type,
        choices,
        required: required == "required",
        refuses: (refuses != "-").then_some(refuses),
        first: release(first)?,
        last: if last == "-" { None } else { Some(release(last)?) },
    })
}

fn parse_table(text: &'static str) -> Result<Vec<CliOption>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.starts_with('#') && !line.trim().is_empty())
        .map(|(index, line)| parse_row(line).map_err(|e| format!("line {}: {e}", index + 1)))
        .collect()
}

static OPTIONS: LazyLock<Vec<CliOption>> =
    LazyLock::new(|| parse_table(TABLE).unwrap_or_else(|e| panic!("src/sglang/server_cli.tsv: {e}")));

static PARSERS: LazyLock<Vec<ServerCli>> = LazyLock::new(|| {
    KNOWN
        .iter()
        .map(|&release| {
            let options: Vec<&'static CliOption> = OPTIONS.iter().filter(|o| o.in_release(release)).collect();
            let strings =
                options.iter().enumerate().flat_map(|(i, o)| o.strings.iter().map(move |s| (*s, i))).collect();
            ServerCli { release, options, strings }
        })
        .collect()
});

/// One release's server parser.
#[derive(Debug)]
pub struct ServerCli {
    pub release: Release,
    options: Vec<&'static CliOption>,
    /// Every option string with its option's index, in declaration order (argparse's
    /// `_option_string_actions`, whose order its ambiguity message follows).
    strings: Vec<(&'static str, usize)>,
}

/// The parser of `release` (a known release; any other gets the nearest known one's).
pub fn for_release(release: Release) -> &'static ServerCli {
    let nearest = if release < KNOWN[0] { 0 } else { PARSERS.len() - 1 };
    PARSERS.iter().find(|p| p.release == release).unwrap_or(&PARSERS[nearest])
}

/// How argparse sees one argument before anything is consumed (`_parse_optional`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word<'a> {
    /// A value (argparse's pattern `A`).
    Value,
    /// An option of this release; `string` is the option string it stands for, `inline` the
    /// `=value` part, `abbreviated` whether it was a prefix.
    Option { option: &'static CliOption, string: &'static str, inline: Option<&'a str>, abbreviated: bool },
    /// Looks like an option, but none matches: argparse keeps it as an unrecognized argument.
    Unknown,
    /// A prefix of several option strings: argparse's message.
    Ambiguous(String),
}

impl ServerCli {
    fn exact(&self, text: &str) -> Option<(&'static CliOption, &'static str)> {
        self.strings.iter().find(|(s, _)| *s == text).map(|(s, i)| (self.options[*i], *s))
    }

    /// argparse's `_parse_optional` on one argument.
    pub fn classify<'a>(&self, text: &'a str) -> Word<'a> {
        let Some(rest) = text.strip_prefix('-') else { return Word::Value };
        if let Some((option, string)) = self.exact(text) {
            return Word::Option { option, string, inline: None, abbreviated: false };
        }
        if rest.is_empty() {
            return Word::Value;
        }
        if let Some((name, value)) = text.split_once('=')
            && let Some((option, string)) = self.exact(name)
        {
            return Word::Option { option, string, inline: Some(value), abbreviated: false };
        }
        // (option string, its option, the inline value, whether the string was abbreviated)
        let matches: Vec<(&'static str, usize, Option<&'a str>, bool)> = if rest.starts_with('-') {
            let (prefix, inline) = match text.split_once('=') {
                Some((prefix, value)) => (prefix, Some(value)),
                None => (text, None),
            };
            self.strings.iter().filter(|(s, _)| s.starts_with(prefix)).map(|(s, i)| (*s, *i, inline, true)).collect()
        } else {
            // A single-dash option: `-x` with its value attached, or a prefix of a longer one.
            let short_end = text.char_indices().nth(2).map_or(text.len(), |(at, _)| at);
            let (short, attached) = text.split_at(short_end);
            self.strings
                .iter()
                .filter_map(|(s, i)| {
                    if *s == short {
                        Some((*s, *i, Some(attached), false))
                    } else {
                        s.starts_with(text).then_some((*s, *i, None, true))
                    }
                })
                .collect()
        };
        match matches.as_slice() {
            [(string, index, inline, abbreviated)] => {
                Word::Option { option: self.options[*index], string, inline: *inline, abbreviated: *abbreviated }
            }
            [] if is_negative_number(text) || text.contains(' ') => Word::Value,
            [] => Word::Unknown,
            several => Word::Ambiguous(format!(
                "ambiguous option: {text} could match {}",
                several.iter().map(|(s, ..)| *s).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// `args` with each option written as its full name, `--name` or `--name=value`, the way
    /// this release's parser reads it (`--disable-overlap` is `--disable-overlap-schedule`);
    /// values, unknown or ambiguous words and everything after `--` as they are.
    pub fn full_names(&self, args: &[String]) -> Vec<String> {
        let mut after_separator = false;
        args.iter()
            .map(|arg| {
                after_separator |= arg == "--";
                match self.classify(arg) {
                    Word::Option { string, inline, .. } if !after_separator => match inline {
                        Some(value) => format!("{string}={value}"),
                        None => string.to_string(),
                    },
                    _ => arg.clone(),
                }
            })
            .collect()
    }

    /// Reads `args` as the release's `parse_args` does.
    pub fn read(&self, args: &[Arg]) -> Reading {
        let mut reading = Reading::default();
        if let Some(config) = args.iter().find(|a| a.text == "--config") {
            reading.not_judged.push(format!(
                "{}: SGLang merges more arguments from that file into the command line; the command line is not \
                 checked against SGLang's parser",
                config.text
            ));
            return reading;
        }
        match self.parse(args, &mut reading) {
            Ok(()) => {}
            Err(Stop::Refused(message)) => reading.refusal = Some(message),
            Err(Stop::Unsure) => {}
        }
        reading
    }

    fn parse<'a>(&self, args: &'a [Arg], reading: &mut Reading) -> Result<(), Stop> {
        // The first pass: what each argument is (argparse raises an ambiguity here, before any
        // value is read).
        let mut words: Vec<Word<'a>> = Vec::with_capacity(args.len());
        let mut after_separator = false;
        for arg in args {
            let word = if after_separator {
                Word::Value
            } else if arg.text == "--" {
                after_separator = true;
                Word::Value
            } else {
                match self.classify(&arg.text) {
                    Word::Ambiguous(_) | Word::Unknown if arg.expands => {
                        reading.not_judged.push(format!(
                            "{}: a shell or $(VAR) expansion whose value kvpilot cannot see stands where SGLang \
                             expects an option; the command line is not checked against SGLang's parser",
                            arg.text
                        ));
                        return Err(Stop::Unsure);
                    }
                    Word::Ambiguous(message) => return Err(Stop::Refused(message)),
                    word => word,
                }
            };
            words.push(word);
        }
        let separator = args.iter().position(|a| a.text == "--");
        // argparse's pattern letter for argument i: an option ('O'), a value ('A') or `--`.
        let is_value = |i: usize| separator != Some(i) && matches!(words[i], Word::Value);
        let mut extras: Vec<&Arg> = Vec::new();
        let mut seen: Vec<*const CliOption> = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let Word::Option { option, string, inline, abbreviated } = words[i] else {
                // An unknown option, or a value no option took.
                extras.push(&args[i]);
                i += 1;
                continue;
            };
            let at = i;
            i += 1;
            let argument = |message: String| Stop::Refused(format!("argument {}: {message}", option.display_name()));
            let mut values: Vec<&Arg> = Vec::new();
            let mut inline_value: Option<&str> = None;
            match inline {
                Some(value) => match option.nargs {
                    Nargs::Exactly(0) if !string.starts_with("--") => {
                        return Err(self.attached_switches(option, value));
                    }
                    Nargs::Exactly(0) => return Err(argument(format!("ignored explicit argument {}", py_repr(value)))),
                    Nargs::Exactly(n) if n > 1 => return Err(argument(expected(option.nargs))),
                    _ => inline_value = Some(value),
                },
                None => {
                    let available = (i..args.len()).take_while(|&j| is_value(j)).count();
                    let count = match option.nargs {
                        Nargs::One if available == 0 => return Err(argument(expected(option.nargs))),
                        Nargs::One => 1,
                        Nargs::Optional => available.min(1),
                        Nargs::ZeroOrMore => available,
                        Nargs::OneOrMore if available == 0 => return Err(argument(expected(option.nargs))),
                        Nargs::OneOrMore => available,
                        Nargs::Exactly(n) if available < n => return Err(argument(expected(option.nargs))),
                        Nargs::Exactly(n) => n,
                    };
                    values.extend(&args[i..i + count]);
                    i += count;
                }
            }
            if abbreviated {
                let written = inline.map_or(args[at].text.as_str(), |_| args[at].text.split('=').next().unwrap_or(""));
                reading.abbreviations.push(Abbreviation { written: written.to_string(), full: string });
            }
            if option.action == "help" {
                return Err(Stop::Refused(HELP_EXIT.to_string()));
            }
            if let Some(message) = option.refuses {
                return Err(Stop::Refused(message.to_string()));
            }
            if option.action.starts_with("Deprecated") && !reading.deprecated.contains(&string) {
                reading.deprecated.push(string);
            }
            seen.push(std::ptr::from_ref(option));
            // `_get_values`: the first `--` among the values is dropped.
            // Each value with the index of the argument holding it.
            let mut texts: Vec<(&str, usize)> = match inline_value {
                Some(value) => vec![(value, at)],
                None => values.iter().enumerate().map(|(k, a)| (a.text.as_str(), at + 1 + k)).collect(),
            };
            if let Some(dash) = texts.iter().position(|(t, _)| *t == "--") {
                texts.remove(dash);
            }
            reading.given.push(Given { option, values: texts.iter().map(|(text, _)| text.to_string()).collect() });
            // A `--name=--` or a lone `--` leaves an empty list, which argparse stores unchecked.
            let single = matches!(option.nargs, Nargs::One | Nargs::Optional);
            if texts.is_empty() || (single && texts.len() > 1) {
                continue;
            }
            if !BUILTIN_ACTIONS.contains(&option.action) && !option.action.starts_with("Deprecated") {
                // argparse converts and checks the values, then the action's own code runs.
                reading.not_judged.push(format!(
                    "{}: SGLang's {} reads its values further; only argparse's checks are applied",
                    option.display_name(),
                    option.action
                ));
            }
            for (text, index) in texts {
                if args[index].expands {
                    // Any string passes a `str` option without choices: only the others are unjudged.
                    if option.value_type != ValueType::Str || option.choices != Choices::Any {
                        reading.unseen_values.push(UnseenValue { at: index, option, value: text.to_string() });
                    }
                    continue;
                }
                if let Some(problem) = self.judge(option, text, reading) {
                    return Err(argument(problem));
                }
            }
        }
        if let Some(unseen) = extras.iter().find(|a| a.expands) {
            reading.not_judged.push(format!(
                "{}: a shell or $(VAR) expansion kvpilot cannot see is left over after the options; whether SGLang \
                 accepts it is not checked",
                unseen.text
            ));
            return Err(Stop::Unsure);
        }
        let missing: Vec<String> = self
            .options
            .iter()
            .filter(|o| o.required && !seen.contains(&std::ptr::from_ref(**o)))
            .map(|o| o.display_name())
            .collect();
        if !missing.is_empty() {
            return Err(Stop::Refused(format!("the following arguments are required: {}", missing.join(", "))));
        }
        if !extras.is_empty() {
            let texts: Vec<&str> = extras.iter().map(|a| a.text.as_str()).collect();
            return Err(Stop::Refused(format!("unrecognized arguments: {}", texts.join(" "))));
        }
        Ok(())
    }

    /// `-h` with characters attached (`-hx`): argparse reads them as more single-dash
    /// switches, and only `-h` is one.
    fn attached_switches(&self, option: &CliOption, attached: &str) -> Stop {
        let ignored = |rest: &str| {
            Stop::Refused(format!("argument {}: ignored explicit argument {}", option.display_name(), py_repr(rest)))
        };
        if attached.is_empty() {
            return ignored(attached);
        }
        let mut rest = attached;
        while let Some(first) = rest.chars().next() {
            if self.exact(&format!("-{first}")).is_none_or(|(o, _)| o.action != "help") {
                return ignored(rest);
            }
            rest = &rest[first.len_utf8()..];
        }
        Stop::Refused(HELP_EXIT.to_string())
    }

    /// argparse's `_get_value` and `_check_value` on one value: the problem, in its words.
    fn judge(&self, option: &CliOption, text: &str, reading: &mut Reading) -> Option<String> {
        let value = match option.value_type {
            ValueType::Str => Choice::Str(text.to_string()),
            ValueType::Int => match py_int(text) {
                Some(n) => match i64::try_from(n) {
                    Ok(n) => Choice::Int(n),
                    // Larger than any choice: valid where there are none.
                    Err(_) => {
                        return matches!(option.choices, Choices::OneOf(_)).then(|| not_a_choice(option, text));
                    }
                },
                None => return Some(format!("invalid int value: {}", py_repr(text))),
            },
            ValueType::Float => match py_float(text) {
                Some(_) if option.choices == Choices::Any => return None,
                Some(_) => {
                    reading
                        .not_judged
                        .push(format!("{} {text}: a float among choices is not judged", option.display_name()));
                    return None;
                }
                None => return Some(format!("invalid float value: {}", py_repr(text))),
            },
            ValueType::NotJudged(_) => return None,
        };
        match &option.choices {
            Choices::OneOf(values) if !values.contains(&value) => Some(not_a_choice(option, text)),
            Choices::NotKnown => {
                reading.not_judged.push(format!(
                    "{} {text}: this release's choices for it are not known to kvpilot; not checked",
                    option.display_name()
                ));
                None
            }
            _ => None,
        }
    }
}

/// What a refusal is about (as the report's flag) and how to fix it, for `release`'s parser.
pub fn refusal_subject_and_fix(message: &str, release: Release) -> (String, String) {
    let listed = format!("`python -m sglang.launch_server --help` of SGLang {release} lists its options");
    if let Some(arguments) = message.strip_prefix("unrecognized arguments: ") {
        return (arguments.to_string(), format!("remove them: SGLang {release} has no such option ({listed})"));
    }
    if let Some(rest) = message.strip_prefix("ambiguous option: ") {
        let (written, matches) = rest.split_once(" could match ").unwrap_or((rest, ""));
        let written = written.split('=').next().unwrap_or(written);
        return (written.to_string(), format!("write the full option name, one of {matches}"));
    }
    if let Some(missing) = message.strip_prefix("the following arguments are required: ") {
        return (format!("{missing} (not set)"), format!("add {missing}"));
    }
    if message == HELP_EXIT {
        return ("-h/--help".into(), "remove -h/--help".into());
    }
    if let Some((name, problem)) = message.strip_prefix("argument ").and_then(|rest| rest.split_once(": ")) {
        let option = name.split('/').next().unwrap_or(name);
        let fix = if problem.starts_with("invalid choice") {
            format!("give {option} one of the listed values")
        } else if problem.starts_with("invalid int") {
            format!("give {option} a whole number")
        } else if problem.starts_with("invalid float") {
            format!("give {option} a number")
        } else if problem.starts_with("ignored explicit argument") {
            format!("{option} is a switch: write it without a value")
        } else {
            format!("give {option} its value ({problem})")
        };
        return (name.to_string(), fix);
    }
    ("command line".into(), format!("change the command line so that SGLang {release}'s parser accepts it ({listed})"))
}

fn not_a_choice(option: &CliOption, text: &str) -> String {
    let Choices::OneOf(choices) = &option.choices else { return String::new() };
    let shown = match option.value_type {
        ValueType::Int => py_int(text).map_or_else(|| text.to_string(), |n| n.to_string()),
        _ => py_repr(text),
    };
    let listed: Vec<String> = choices
        .iter()
        .map(|c| match c {
            Choice::Int(n) => n.to_string(),
            Choice::Str(s) => py_repr(s),
        })
        .collect();
    format!("invalid choice: {shown} (choose from {})", listed.join(", "))
}

/// argparse's own actions (the table's names for them).
const BUILTIN_ACTIONS: &[&str] = &[
    "store",
    "store_true",
    "store_false",
    "store_const",
    "append",
    "append_const",
    "count",
    "help",
    "version",
    "boolean_optional",
];

/// What `-h`/`--help` does: SGLang prints its usage and exits without serving.
pub const HELP_EXIT: &str = "argument -h/--help: SGLang prints its help and exits without starting the server";

fn expected(nargs: Nargs) -> String {
    match nargs {
        Nargs::One => "expected one argument".into(),
        Nargs::Optional => "expected at most one argument".into(),
        Nargs::OneOrMore => "expected at least one argument".into(),
        Nargs::Exactly(1) => "expected 1 argument".into(),
        Nargs::Exactly(n) => format!("expected {n} arguments"),
        Nargs::ZeroOrMore => String::new(),
    }
}

enum Stop {
    /// argparse refuses, with this message.
    Refused(String),
    /// An expansion kvpilot cannot see decides the rest.
    Unsure,
}

/// An abbreviation argparse accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abbreviation {
    /// As written (`--mem-frac`).
    pub written: String,
    /// The option string it stands for (`--mem-fraction-static`).
    pub full: &'static str,
}

/// What a release's parser makes of an argv.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// argparse's message when it refuses the argv (SGLang exits before starting); None when
    /// it accepts or when what decides is not visible here (see `not_judged`).
    pub refusal: Option<String>,
    /// Prefixes argparse read as a full option.
    pub abbreviations: Vec<Abbreviation>,
    /// What was not judged, and why.
    pub not_judged: Vec<String>,
    /// Values argparse would convert or check that are expansions kvpilot cannot see.
    pub unseen_values: Vec<UnseenValue>,
    /// Options given whose action is one of SGLang's `Deprecated*`: accepted, with a warning
    /// that they go away.
    pub deprecated: Vec<&'static str>,
    /// Every option as argparse took it, in order, with its values as written (none for a
    /// switch). Complete only for an argv the parser accepts.
    pub given: Vec<Given>,
}

/// One option argparse took, and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    pub option: &'static CliOption,
    pub values: Vec<String>,
}

impl Reading {
    /// The last occurrence of the option `string` names (any of its spellings): the one argparse
    /// keeps.
    pub fn last(&self, string: &str) -> Option<&Given> {
        self.given.iter().rev().find(|given| given.option.strings.contains(&string))
    }
}

impl Reading {
    /// The warnings for what `release`'s parser accepted but a user should change: abbreviations
    /// (a later release may make them ambiguous) and deprecated options.
    pub fn accepted_warnings(&self, release: Release) -> Vec<String> {
        let abbreviations = self.abbreviations.iter().map(|a| {
            format!(
                "{}: SGLang {release}'s argparse reads this abbreviation as {}; write {} (a new option with the same \
                 prefix in a later release makes it ambiguous)",
                a.written, a.full, a.full
            )
        });
        let deprecated = self.deprecated.iter().map(|option| {
            format!("{option}: SGLang {release} accepts it but deprecates it (its help names the replacement)")
        });
        abbreviations.chain(deprecated).collect()
    }
}

/// A value not judged because it is a shell or `$(VAR)` expansion kvpilot cannot see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnseenValue {
    /// The index of the argument holding it.
    pub at: usize,
    pub option: &'static CliOption,
    /// The value as written.
    pub value: String,
}

/// `argparse`'s negative-number test: `-5`, `-.5`, `-1.5`.
fn is_negative_number(text: &str) -> bool {
    let Some(number) = text.strip_prefix('-') else { return false };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (number, None),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    match fraction {
        None => !whole.is_empty() && digits(whole),
        Some(fraction) => digits(whole) && !fraction.is_empty() && digits(fraction),
    }
}

/// Python's `str.strip()` whitespace.
fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Digits with single underscores between them, as Python's number literals allow.
fn py_digits(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('_')
        && !text.ends_with('_')
        && !text.contains("__")
        && text.chars().all(|c| c.is_ascii_digit() || c == '_')
}

/// Python's `int(text)` (ASCII digits), or None where it raises ValueError.
fn py_int(text: &str) -> Option<i128> {
    let text = py_strip(text);
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if !py_digits(digits) {
        return None;
    }
    let magnitude = digits.replace('_', "").parse::<i128>().unwrap_or(i128::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

/// Python's `float(text)` (ASCII digits), or None where it raises ValueError.
fn py_float(text: &str) -> Option<f64> {
    let text = py_strip(text);
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let lower = unsigned.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return Some(if lower == "nan" { f64::NAN } else { f64::INFINITY });
    }
    let (mantissa, exponent) = match lower.split_once('e') {
        Some((mantissa, exponent)) => (mantissa, Some(exponent)),
        None => (lower.as_str(), None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => py_digits(fraction),
        Some((whole, "")) => py_digits(whole),
        Some((whole, fraction)) => py_digits(whole) && py_digits(fraction),
        None => py_digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| py_digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    (mantissa_ok && exponent_ok).then(|| text.replace('_', "").parse().unwrap_or(f64::INFINITY))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(
            (reading.refusal, reading.deprecated),
            (None, vec!["--enable-dp-attention", "--disable-cuda-graph"])
        );
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
}
