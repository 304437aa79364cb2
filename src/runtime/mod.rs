//! The kvpilot cache runtime: the decode side's KV cache manager, modelled on SGLang's unified
//! radix cache (`cache-runtime.md`). It sizes per-component pools from the resolved layout,
//! refuses the layouts SGLang refuses (through the same [`crate::policy`]), keeps a radix prefix
//! tree over token ids, and retracts requests with an asynchronous host-pool or per-request
//! backup.

mod alloc;
mod arena;
pub mod cache;
pub mod config;
pub mod metrics;
pub mod ops;
pub mod server;
pub mod sizing;
#[cfg(test)]
mod tests;
pub mod trace;
mod tree;

use serde::{Deserialize, Serialize};

/// A pool of the cache: full-attention KV, sliding-window KV, or SSM state slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Component {
    /// Full-attention KV pages.
    Full = 0,
    /// Sliding-window KV pages.
    Swa = 1,
    /// SSM state slots (one per request or cached prefix end).
    Ssm = 2,
}

impl Component {
    /// All components, in priority order for eviction cascades.
    pub const ALL: [Component; 3] = [Component::Full, Component::Swa, Component::Ssm];

    /// The name used in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Swa => "swa",
            Self::Ssm => "ssm",
        }
    }
}
