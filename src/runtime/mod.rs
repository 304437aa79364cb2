//! The kvpilot cache runtime: the KV page store SGLang itself uses, as its HiCache L3 storage
//! backend (`--hicache-storage-backend dynamic`, connector `python/kvpilot_sglang`). A sidecar
//! beside each SGLang server maps every rank's host KV pool (a memfd SGLang's shm allocator
//! creates, passed over a Unix socket), and copies pages between that pool and its own memory
//! on the ranks' `batch_set_v1` / `batch_get_v1` calls. See docs/cache-runtime.md.

pub mod connector;
pub mod mapping;
pub mod metrics;
pub mod protocol;
pub mod socket;
pub mod store;

/// The memory a sidecar of `capacity` bytes may use, which its container's request and limit
/// are set to: the pages, 5% for the index and for pages still being read while evicted, 64 MiB
/// for the process, and the frames in flight, which all connections together keep within one
/// [`protocol::frame_limit`] (see `server::FrameBudget`).
pub fn memory_limit(capacity: u64) -> u64 {
    capacity + capacity / 20 + (64 << 20) + protocol::frame_limit(capacity)
}

/// How kvpilot's long-running processes log; the operator gives its own to the cache runtime
/// sidecars it renders, so one log pipeline reads them all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

impl LogFormat {
    /// The value of `--log-format`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
        }
    }
}
