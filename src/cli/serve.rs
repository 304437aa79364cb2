//! Process plumbing shared by the long-running commands: logging and shutdown signals.

use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

pub(crate) use crate::runtime::LogFormat;

/// Installs the global tracing subscriber; `RUST_LOG` overrides the default `info` level.
/// Text lines carry colours only when stderr is a terminal.
pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second initialisation (tests running commands in-process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.fmt_fields(JsonFields::new()).event_format(JsonLines).try_init(),
    };
}

/// One JSON object per line in which every key appears once: `timestamp`, `level`, `target`,
/// `message`, the spans the event happened in, then the event's own fields (an error under
/// `error`); a field whose name is taken is kept as `fields.NAME`. (tracing-subscriber's own
/// JSON format writes an event field named `message` beside the message itself, which most
/// log pipelines then read as one of the two.)
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, context: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert("timestamp".into(), timestamp.into());
        line.insert("level".into(), metadata.level().as_str().into());
        line.insert("target".into(), metadata.target().into());
        let mut fields = EventFields::default();
        event.record(&mut fields);
        if let Some(message) = fields.message {
            line.insert("message".into(), message.into());
        }
        let spans: Vec<Value> = context
            .event_scope()
            .into_iter()
            .flat_map(|scope| scope.from_root())
            .map(|span| {
                let mut object = Map::new();
                object.insert("name".into(), span.name().into());
                if let Some(formatted) = span.extensions().get::<FormattedFields<N>>()
                    && let Ok(Value::Object(span_fields)) = serde_json::from_str::<Value>(&formatted.fields)
                {
                    object.extend(span_fields);
                }
                Value::Object(object)
            })
            .collect();
        if !spans.is_empty() {
            line.insert("spans".into(), spans.into());
        }
        for (name, value) in fields.others {
            let key = if line.contains_key(&name) { format!("fields.{name}") } else { name };
            line.insert(key, value);
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's message and fields as JSON values.
#[derive(Default)]
struct EventFields {
    message: Option<String>,
    others: Vec<(String, Value)>,
}

impl EventFields {
    fn add(&mut self, field: &Field, value: Value) {
        match (field.name(), &self.message, value) {
            ("message", None, Value::String(message)) => self.message = Some(message),
            (name, _, value) => self.others.push((name.to_string(), value)),
        }
    }
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.add(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.add(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.add(field, value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.add(field, format!("{value:?}").into());
    }
}

/// Completes on SIGTERM (what the kubelet sends) or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown signal received");
}

/// The stack of the runtime's threads: the main thread's 8 MiB instead of tokio's 2 MiB. The
/// controller polls kube-runtime's stream stack (watcher, reflector, scheduler, runner) with
/// the objects deserialized inline at its bottom; a debug build's frames for an
/// InferenceDeployment with a pod volume outgrew 2 MiB. Untouched stack costs no memory.
const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// A multi-threaded runtime for a server command.
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(THREAD_STACK_BYTES).build()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written into memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_name_each_key_once() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("reconciling object", object = "serving/llama");
            let _entered = span.enter();
            let message = "the webhook's own message field";
            let error = std::io::Error::other("connection reset");
            tracing::warn!(%message, error = &error as &dyn std::error::Error, level = 3, "refused an admission request");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        for key in ["\"message\":", "\"level\":", "\"error\":"] {
            assert_eq!(text.matches(key).count(), 1, "{key} in {text}");
        }
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["message"], "refused an admission request");
        assert_eq!(line["fields.message"], "the webhook's own message field");
        assert_eq!(line["error"], "connection reset");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["fields.level"], 3);
        assert_eq!(line["spans"][0], serde_json::json!({"name": "reconciling object", "object": "serving/llama"}));
        assert!(!text.contains('\u{1b}'), "no ANSI escapes in JSON: {text}");
    }
}
