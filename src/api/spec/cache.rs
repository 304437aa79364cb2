//! `spec.cache`: the kvpilot cache runtime as the decode servers' HiCache L3 store.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::quantity_bytes;

/// The kvpilot cache runtime beside every decode server, as SGLang's HiCache storage backend.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.offload || self.reuse").message(
    "spec.cache: set offload (decode writes KV to the store), reuse (decode reads prefixes from it) or both"
))]
pub struct CacheSpec {
    /// Decode servers write the KV of finished requests to the store
    /// (`--disaggregation-decode-enable-offload-kvcache`).
    #[serde(default)]
    pub offload: bool,
    /// Decode servers keep a radix cache over a hierarchical cache and read prefixes from the
    /// store (`--disaggregation-decode-enable-radix-cache --enable-hierarchical-cache`).
    #[serde(default)]
    pub reuse: bool,
    /// Bytes of pages the sidecar keeps (`kvpilot cache-runtime --capacity`, for example
    /// `64Gi`); its memory request and limit are sized from it.
    pub capacity: Quantity,
    /// Host memory of each HiCache host pool of each GPU rank (SGLang's `--hicache-size`, which
    /// takes whole gigabytes of 10^9 bytes: rounded down, at least `1G`). Offload and reuse build
    /// a pool each. Counted in the SGLang container's memory request and limit. Unset: SGLang
    /// sizes the pools from the device pool (`--hicache-ratio`), which depends on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pool_size: Option<Quantity>,
}

/// One gigabyte as SGLang's `--hicache-size` counts it.
pub const HICACHE_GIGABYTE: u64 = 1_000_000_000;

impl CacheSpec {
    /// `capacity` in bytes, or why it cannot be read.
    pub fn capacity_bytes(&self) -> Result<u64, String> {
        quantity_bytes(&self.capacity.0)
    }

    /// `hostPoolSize` as SGLang's `--hicache-size` (whole gigabytes), if set, or why it cannot
    /// be: below one gigabyte SGLang would read 0, which means "size from the ratio".
    pub fn host_pool_gigabytes(&self) -> Option<Result<u64, String>> {
        let size = self.host_pool_size.as_ref()?;
        Some(quantity_bytes(&size.0).and_then(|bytes| match bytes / HICACHE_GIGABYTE {
            0 => Err(format!("{:?} is less than the 1G SGLang's --hicache-size counts in", size.0)),
            gigabytes => Ok(gigabytes),
        }))
    }

    /// Host pools each GPU rank builds: one for decode offload, one for HiCache under reuse.
    pub fn host_pools_per_rank(&self) -> u64 {
        u64::from(self.offload) + u64::from(self.reuse)
    }
}
