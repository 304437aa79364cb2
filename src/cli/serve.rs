//! Process plumbing shared by the long-running commands: logging and shutdown signals.

use clap::ValueEnum;

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

/// Installs the global tracing subscriber; `RUST_LOG` overrides the default `info` level.
pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second initialisation (tests running commands in-process) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
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
