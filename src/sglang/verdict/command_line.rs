//! The rules of a server's command line as a whole: what its release's own parser says of it
//! (CLI), and a command line the kubelet cannot run at all (EXEC).

use crate::policy::{self, Violation};
use crate::sglang::guard::Server;
use crate::sglang::server_cli;

/// Why `dynamo.sglang`'s command line is not judged by SGLang's parser: Dynamo's own parser
/// (which changes with Dynamo's version, and the image tag names Dynamo's) takes its flags and
/// unique prefixes of them first, rewrites some values (`--disaggregation-mode pd`, `--load-format
/// gms`) and hands the rest to SGLang's.
pub const DYNAMO_NOT_JUDGED: &str = "python -m dynamo.sglang parses its own flags (and abbreviations of them) before \
     SGLang's parser sees the rest, so unknown, ambiguous or abbreviated flags are not reported";

/// The CLI rule: what the release's parser says of a server's argv. A refusal is a violation
/// (SGLang exits before it starts), abbreviations and what was not judged are warnings.
pub(super) fn command_line_rule(server: &Server) -> (Option<Violation>, Vec<String>) {
    let Some(reading) = &server.argv else {
        return (None, vec![DYNAMO_NOT_JUDGED.to_string()]);
    };
    let release = server.checked_as.release;
    let mut warnings = reading.accepted_warnings(release);
    warnings.extend(reading.not_judged.iter().cloned());
    // The table's flags say so themselves (flags::read): the others are said here.
    let read_by_table = |at: usize| server.parsed.occurrences.iter().any(|o| o.name_at == at || o.value_at == Some(at));
    warnings.extend(reading.unseen_values.iter().filter(|u| !read_by_table(u.at)).map(|u| {
        format!(
            "{} {}: the value is a shell or $(VAR) expansion kvpilot cannot see; whether SGLang's parser accepts it is \
             not checked",
            u.option.display_name(),
            u.value
        )
    }));
    let refusal = reading.refusal.as_ref().map(|message| {
        let (_, fix) = server_cli::refusal_subject_and_fix(message, release);
        Violation { rule: policy::COMMAND_LINE.id, field: "command line", message: message.clone(), fix, phase: "args" }
    });
    (refusal, warnings)
}

/// The EXEC rule: a server whose whole command line is one `command` word. The kubelet runs that
/// word as a program name; no file has that name, so the container never starts (the pod shows
/// `StartError`/`RunContainerError`), whatever its flags say.
pub(super) fn one_word_command_rule(server: &Server) -> Option<Violation> {
    let (list, index) = server.invocation.one_word?;
    let field = list.key();
    Some(Violation {
        rule: policy::ONE_WORD_COMMAND.id,
        field,
        message: format!(
            "{field}[{index}] is a whole command line in one word: the kubelet runs it as a program of that name, \
             which no file has, so the container never starts"
        ),
        fix: format!(
            "split {field}[{index}] into one item per word (command: [\"python3\", \"-m\", \"sglang.launch_server\"], \
             the flags in args), or run it through a shell (command: [\"sh\", \"-c\", \"…\"])"
        ),
        phase: "container start",
    })
}
