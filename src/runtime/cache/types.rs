//! What cache operations return, serialized as the runtime API answers.

use std::collections::BTreeMap;

use serde::Serialize;

/// Pages per component, as operations return them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pages {
    /// Full-attention pages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub full: Vec<u32>,
    /// Sliding-window pages, starting at `swaFromToken`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub swa: Vec<u32>,
    /// Token position of the first SWA page (earlier ones are outside the window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swa_from_token: Option<usize>,
    /// SSM state slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssm: Option<u32>,
}

/// A prefix match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchResult {
    /// Tokens of the prefix reused from the cache (page aligned).
    pub matched_tokens: usize,
    /// The prefix's pages, and the request's own SSM slot (a copy of the cached state).
    pub pages: Pages,
}

/// New pages of an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocated {
    /// Tokens the request now holds.
    pub tokens: usize,
    /// Index of the first new page in the request's page table.
    pub first_page: usize,
    /// The new pages (and the SSM slot, when the request got one now).
    pub pages: Pages,
}

/// What an insert did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InsertResult {
    /// Tokens inserted (page aligned).
    pub inserted_tokens: usize,
    /// Of those, tokens the cache already held.
    pub reused_tokens: usize,
    /// Tokens of the request now owned by the cache.
    pub cached_tokens: usize,
    /// The request's pages that duplicated cached ones; they are freed and the request now
    /// uses the cached pages at those positions.
    pub duplicates: Pages,
}

/// Freed amounts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Amounts {
    /// Full-attention tokens.
    pub full: usize,
    /// Sliding-window tokens.
    pub swa: usize,
    /// SSM slots.
    pub ssm: usize,
}

/// What a retraction did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Retraction {
    /// The backup copy is queued; the device pages are freed once the ticket is done.
    BackingUp {
        /// Poll this.
        ticket: u64,
        /// Bytes being copied.
        bytes: usize,
    },
    /// No backup could be made; the request's KV is dropped (abort or recompute it).
    Declined {
        /// Why.
        reason: String,
    },
}

/// A restore under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restoration {
    /// Poll this; the pages are usable once it is done.
    pub ticket: u64,
    /// Tokens restored.
    pub tokens: usize,
    /// The fresh pages.
    pub pages: Pages,
}

/// The state of a ticket.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum TicketStatus {
    /// The copy is queued or running.
    Pending {
        /// Ticket id.
        ticket: u64,
    },
    /// The copy finished.
    Done {
        /// Ticket id.
        ticket: u64,
        /// `backup` or `restore`.
        kind: &'static str,
        /// The request.
        request: String,
        /// Bytes copied.
        bytes: usize,
        /// From submission to completion.
        seconds: f64,
    },
    /// No such ticket (never issued, or already reported done).
    Unknown {
        /// Ticket id.
        ticket: u64,
    },
}

/// A request as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestInfo {
    /// active, backing up, retracted, lost, restoring.
    pub state: &'static str,
    /// Tokens with KV.
    pub tokens: usize,
    /// Leading tokens owned by the cache.
    pub cached_tokens: usize,
    /// Its page table.
    pub pages: Pages,
}

/// Occupancy of one pool (tokens, or slots for ssm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStats {
    /// Capacity.
    pub total_tokens: usize,
    /// Not held by anything.
    pub free_tokens: usize,
    /// Held by the prefix cache and unlocked: freed by eviction on demand.
    pub evictable_tokens: usize,
    /// Held by running requests or locked cache entries.
    pub protected_tokens: usize,
}

/// Host pool occupancy (token slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStats {
    /// Capacity (zero when there is no host pool).
    pub total_slots: usize,
    /// Free.
    pub free_slots: usize,
}

/// `GET /v1/stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// The pools the layout needs.
    pub pools: BTreeMap<&'static str, PoolStats>,
    /// The host pool.
    pub host: HostStats,
    /// Requests by state.
    pub requests: BTreeMap<&'static str, usize>,
    /// Nodes of the prefix tree.
    pub tree_nodes: usize,
    /// Host bytes held by `cpu_tensor` backups.
    pub cpu_backup_bytes: u64,
}

/// Totals since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Tokens matched from the cache.
    pub hit_tokens: u64,
    /// Tokens asked to match.
    pub query_tokens: u64,
}
