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
