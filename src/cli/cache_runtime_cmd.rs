//! `kvpilot cache-runtime`: the process decode pods run. Reads `runtime.json`, refuses settings
//! the layout cannot run (exit 1, SGLang's message), sizes and allocates the pools, and serves
//! the cache API until SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::serve::{LogFormat, init_logging, runtime, shutdown_signal};
use crate::api::RetractionBackup;
use crate::runtime::cache::{BackupMode, Cache};
use crate::runtime::config::{Checked, RuntimeConfig, StartupError};
use crate::runtime::metrics::CacheMetrics;
use crate::runtime::server::{RuntimeState, router};
use crate::runtime::sizing::{self, Budget, PoolPlan};

/// Sizes like `4GiB`, `512Mi`, `1G` or plain bytes.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{e}; expected bytes such as 4GiB, 512Mi or 1073741824"))
}

#[derive(Args, Debug)]
pub(crate) struct CacheRuntimeArgs {
    /// The runtime.json the controller renders (model, layout, effective settings, decode sizes).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Address of the cache API, probes and metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Memory for the KV and state pools (host memory on machines without a GPU).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes, default_value = "1GiB")]
    device_memory: u64,
    /// Host memory for retraction backups (default: hostPoolRatio of the device pools for
    /// host_pool; no cap for cpu_tensor).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    host_memory: Option<u64>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The start-up checks and sizing, without serving: what `run` does before it listens.
pub(crate) fn prepare(args: &CacheRuntimeArgs) -> Result<(Checked, PoolPlan), StartupError> {
    let checked = RuntimeConfig::load(&args.config)?.check()?;
    let plan = sizing::plan(&checked, Budget { device: args.device_memory, host: args.host_memory })
        .map_err(StartupError::Sizing)?;
    Ok((checked, plan))
}

async fn serve(args: &CacheRuntimeArgs, checked: Checked, plan: PoolPlan) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let layout = &checked.config.layout;
    let description = json!({
        "model": checked.config.model,
        "layout": {"architecture": layout.architecture, "kvPool": layout.kv_pool, "layers": layout.layers,
                   "slidingWindow": layout.sliding_window, "attention": layout.attention},
        "effective": checked.effective,
        "pools": plan,
    });
    let state = RuntimeState::new(CacheMetrics::shared(), description);
    let server = tokio::spawn({
        let app = router(std::sync::Arc::clone(&state));
        async move { axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await }
    });
    let mode = match checked.effective.retraction_backup {
        RetractionBackup::HostPool => BackupMode::HostPool,
        RetractionBackup::CpuTensor => BackupMode::CpuTensor,
        RetractionBackup::None => BackupMode::None,
    };
    let cache = tokio::task::spawn_blocking(move || Cache::new(plan, mode, false))
        .await
        .map_err(|e| format!("pool allocation failed: {e}"))??;
    state.ready(cache);
    tracing::info!(%addr, "pools allocated; ready");
    server.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    tracing::info!("stopped");
    Ok(())
}

pub(crate) fn run(args: &CacheRuntimeArgs) -> ExitCode {
    init_logging(args.log_format);
    let (checked, plan) = match prepare(args) {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("{e}");
            eprintln!("kvpilot cache-runtime: not starting ({})", args.config.display());
            return ExitCode::from(e.exit_code());
        }
    };
    for warning in &checked.warnings {
        tracing::warn!(%warning, "runtime config");
    }
    tracing::info!(
        model = %checked.config.model.name,
        kv_pool = checked.config.layout.kv_pool.as_str(),
        backup = checked.effective.retraction_backup.as_str(),
        pools = %serde_json::to_string(&plan).unwrap_or_default(),
        "starting"
    );
    let result = match runtime() {
        Ok(runtime) => runtime.block_on(serve(args, checked, plan)),
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

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_sizes_accept_kubernetes_and_iec_suffixes() {
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert!(parse_bytes("lots").unwrap_err().contains("expected bytes"));
    }
}
