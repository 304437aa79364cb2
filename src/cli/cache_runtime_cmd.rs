//! `kvpilot cache-runtime`: the sidecar beside each SGLang server, serving its ranks' HiCache
//! L3 calls over a Unix socket, with metrics and probes over HTTP.
//!
//! `kvpilot install-connector DIR`: writes the SGLang connector package into DIR.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::serve::{LogFormat, init_logging, runtime, shutdown_signal};
use crate::runtime::metrics::{self, Metrics};
use crate::runtime::store::PageStore;
use crate::runtime::{connector, socket};

#[derive(Args, Debug)]
pub(crate) struct CacheRuntimeArgs {
    /// Unix socket the SGLang connector connects to (extra-config key "socket").
    #[arg(long, value_name = "PATH", default_value = "/run/kvpilot/cache.sock")]
    socket: PathBuf,
    /// Bytes of pages the sidecar keeps in its own memory; the least recently used go first.
    #[arg(long, value_name = "BYTES", value_parser = crate::api::parse_capacity)]
    capacity: u64,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9400")]
    metrics_addr: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Args, Debug)]
pub(crate) struct InstallConnectorArgs {
    /// Directory to write kvpilot_sglang/ into (put it on SGLang's PYTHONPATH).
    dest: PathBuf,
}

/// Binds the socket, replacing a stale one a previous run left (a restarted sidecar must come
/// back on the same path), and opens it to every user of the pod: SGLang may run as another uid.
fn bind(path: &Path) -> Result<UnixListener, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?;
        }
        Ok(_) => return Err(format!("--socket {} exists and is not a socket; pick another path", path.display())),
        Err(_) => {}
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("cannot listen on --socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot open --socket {} to the pod's users: {e}", path.display()))?;
    Ok(listener)
}

async fn serve(args: &CacheRuntimeArgs) -> Result<(), String> {
    let store = Arc::new(PageStore::new(args.capacity));
    let metrics = Metrics::new(args.capacity);
    let http = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| format!("cannot listen on --metrics-addr {}: {e}", args.metrics_addr))?;
    let metrics_addr = http.local_addr().map_err(|e| e.to_string())?;
    let listener = bind(&args.socket)?;
    let socket = args.socket.clone();
    let accept = {
        let (store, metrics) = (Arc::clone(&store), Arc::clone(&metrics));
        tokio::task::spawn_blocking(move || socket::serve(listener, store, metrics))
    };
    tracing::info!(socket = %socket.display(), %metrics_addr, capacity = args.capacity, "serving");
    let app = metrics::router(metrics, store);
    let result = tokio::select! {
        served = axum::serve(http, app).with_graceful_shutdown(shutdown_signal()) => served.map_err(|e| e.to_string()),
        accepted = accept => match accepted {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("the socket stopped accepting: {e}")),
            Err(e) => Err(format!("the accept loop failed: {e}")),
        },
    };
    // The accept thread blocks in accept(2) and ends with the process; the path goes now so a
    // client sees "no sidecar" rather than a socket nobody answers.
    let _ = std::fs::remove_file(&socket);
    tracing::info!("stopped");
    result
}

pub(crate) fn run(args: &CacheRuntimeArgs) -> ExitCode {
    init_logging(args.log_format);
    if args.capacity == 0 {
        eprintln!("kvpilot cache-runtime: --capacity must be above 0 (for example 16GiB)");
        return ExitCode::from(2);
    }
    let result = match runtime() {
        Ok(runtime) => {
            let result = runtime.block_on(serve(args));
            // Connection threads may be mid-copy; they end with the process.
            runtime.shutdown_background();
            result
        }
        Err(e) => Err(format!("cannot start: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvpilot cache-runtime: {e}");
            ExitCode::from(1)
        }
    }
}

pub(crate) fn install_connector(args: &InstallConnectorArgs) -> ExitCode {
    match connector::install(&args.dest) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kvpilot install-connector: cannot write into {}: {e}", args.dest.display());
            ExitCode::from(1)
        }
    }
}
