//! The cache: the radix tree, one allocator and byte arena per pool, every request's page
//! table, and retraction with backup. The tree decides what to keep; this executes it against
//! the allocators and the bytes (`cache-runtime.md` §1.3, §1.5, §6).
//!
//! A request's pages are its KV in order: the first `tree_pages` are owned by the tree (shared
//! prefix, held by the request's lock receipt), the rest are the request's own. SWA pages are
//! kept only from `swa_from` on: earlier ones are out of the window and were freed or never held.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Component;
use super::alloc::PageAllocator;
use super::arena::{Arena, Completed, CopyEngine, CopyJob};
use super::metrics::CacheMetrics;
use super::sizing::PoolPlan;
use super::tree::{Freed, InsertData, NIL, NodeId, Receipt, Tree, TreeShape};

/// What an operation could not do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CacheError {
    /// No request of that id.
    #[error("no request `{0}`: match or allocate creates one")]
    UnknownRequest(String),
    /// A match names a request that exists already.
    #[error("request `{0}` exists already: match only starts a request; allocate extends it")]
    RequestExists(String),
    /// Not enough free memory even after evicting every unlocked cached prefix.
    #[error(
        "{component} pool: needs {needed} {unit}, {free} free after evicting every unlocked cached prefix; \
         retract or release running requests"
    )]
    OutOfMemory { component: &'static str, needed: usize, free: usize, unit: &'static str },
    /// The request is not in a state that allows the operation.
    #[error("request `{request}` is {state}; {hint}")]
    BadState { request: String, state: &'static str, hint: &'static str },
    /// Tokens that do not fit the request.
    #[error("{0}")]
    InvalidTokens(String),
    /// Pages that cannot be read or written.
    #[error("{0}")]
    InvalidPages(String),
    /// The layout has no such pool.
    #[error("the model's layout has no {0} pool")]
    NoSuchPool(&'static str),
    /// A broken internal invariant (reported, never silently ignored).
    #[error("internal error: {0}")]
    Internal(String),
}

impl CacheError {
    /// A stable code for API clients.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownRequest(_) => "unknownRequest",
            Self::RequestExists(_) => "requestExists",
            Self::OutOfMemory { .. } => "outOfMemory",
            Self::BadState { .. } => "badState",
            Self::InvalidTokens(_) => "invalidTokens",
            Self::InvalidPages(_) => "invalidPages",
            Self::NoSuchPool(_) => "noSuchPool",
            Self::Internal(_) => "internal",
        }
    }
}

/// How retracted requests keep their KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupMode {
    /// A reserved host pool beside the device pools.
    HostPool,
    /// A host buffer per request.
    CpuTensor,
}

/// One pool: allocator, bytes, and per-page pins of in-flight copies.
struct Pool {
    alloc: PageAllocator,
    data: Arc<Arena>,
    /// Bytes per page (or per slot).
    unit: usize,
    busy: Vec<u16>,
}

impl Pool {
    fn new(units: usize, unit: usize) -> Result<Self, String> {
        let bytes = units.checked_mul(unit).ok_or_else(|| format!("{units} × {unit} bytes overflows"))?;
        let data = Arena::zeroed(bytes).map_err(|e| e.to_string())?;
        Ok(Self { alloc: PageAllocator::new(units), data: Arc::new(data), unit, busy: vec![0; units] })
    }

    fn offsets(&self, pages: &[u32]) -> Vec<usize> {
        pages.iter().map(|p| *p as usize * self.unit).collect()
    }

    fn pin(&mut self, pages: &[u32]) {
        for page in pages {
            self.busy[*page as usize] += 1;
        }
    }

    fn unpin(&mut self, pages: &[u32]) {
        for page in pages {
            self.busy[*page as usize] = self.busy[*page as usize].saturating_sub(1);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    BackingUp(u64),
    Retracted,
    /// The backup was evicted from the host pool to make room for a newer one.
    Lost,
    Restoring(u64),
}

impl State {
    fn name(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::BackingUp(_) => "backing up",
            Self::Retracted => "retracted",
            Self::Lost => "lost (its backup was evicted)",
            Self::Restoring(_) => "restoring",
        }
    }
}

enum Storage {
    Host { full: Vec<u32>, swa: Vec<u32> },
    Cpu { buffer: Arc<Arena> },
}

struct Backup {
    /// Tokens and full pages backed up.
    len: usize,
    pages: usize,
    /// First page with SWA data in the backup.
    swa_from: usize,
    has_ssm: bool,
    storage: Storage,
    /// Order for host-pool LRU eviction.
    seq: u64,
    bytes: usize,
}

struct Request {
    namespace: String,
    len: usize,
    pages: usize,
    full: Vec<u32>,
    swa_from: usize,
    swa: Vec<u32>,
    ssm: Option<u32>,
    tree_pages: usize,
    receipt: Option<(u64, Receipt)>,
    state: State,
    backup: Option<Backup>,
}

impl Request {
    fn new(namespace: String) -> Self {
        Self {
            namespace,
            len: 0,
            pages: 0,
            full: Vec::new(),
            swa_from: 0,
            swa: Vec::new(),
            ssm: None,
            tree_pages: 0,
            receipt: None,
            state: State::Active,
            backup: None,
        }
    }

    fn bad_state(&self, id: &str, hint: &'static str) -> CacheError {
        CacheError::BadState { request: id.to_string(), state: self.state.name(), hint }
    }

    /// SWA pages the request owns (positions past the tree's part).
    fn private_swa(&self) -> &[u32] {
        let first_private = self.tree_pages.max(self.swa_from);
        &self.swa[(first_private - self.swa_from).min(self.swa.len())..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TicketKind {
    Backup,
    Restore,
}

struct Ticket {
    request: String,
    kind: TicketKind,
    submitted: Instant,
    bytes: usize,
    done: Option<Duration>,
}

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

/// The cache.
pub struct Cache {
    plan: PoolPlan,
    shape: TreeShape,
    tree: Tree,
    pools: [Option<Pool>; 3],
    host_full: Option<Pool>,
    host_swa: Option<Pool>,
    mode: BackupMode,
    cpu_backup_bytes: u64,
    requests: HashMap<String, Request>,
    tickets: HashMap<u64, Ticket>,
    next_ticket: u64,
    next_receipt: u64,
    next_seq: u64,
    host_lru: BTreeMap<u64, String>,
    engine: CopyEngine,
    metrics: Option<Arc<CacheMetrics>>,
    totals: Totals,
    violations: std::cell::Cell<usize>,
    path: Vec<NodeId>,
}

/// Pages just taken from the full, swa and ssm pools.
type NewPages = (Vec<u32>, Vec<u32>, Vec<u32>);

const P_FULL: usize = Component::Full as usize;
const P_SWA: usize = Component::Swa as usize;
const P_SSM: usize = Component::Ssm as usize;

impl Cache {
    /// Allocates the pools of `plan` (with real bytes unless `metadata_only`, which the
    /// tree benchmark uses) and starts the copy engine.
    pub fn new(plan: PoolPlan, mode: BackupMode, metadata_only: bool) -> Result<Self, String> {
        let p = plan.page_size;
        let bytes = |b: usize| if metadata_only { 0 } else { b };
        let token_pool = |pool: Option<super::sizing::TokenPool>, what: &str| {
            pool.map(|t| Pool::new(t.pages, bytes(t.page_bytes(p))).map_err(|e| format!("{what} pool: {e}")))
                .transpose()
        };
        let full = token_pool(plan.full, "full-attention")?;
        let swa = token_pool(plan.swa, "sliding-window")?;
        let ssm = plan
            .ssm
            .map(|s| Pool::new(s.slots, bytes(s.bytes_per_slot as usize)).map_err(|e| format!("SSM state pool: {e}")))
            .transpose()?;
        let (host_full, host_swa) = match plan.host {
            Some(host) => (
                plan.full
                    .map(|t| Pool::new(host.full_pages, bytes(t.page_bytes(p))))
                    .transpose()
                    .map_err(|e| format!("host pool: {e}"))?,
                plan.swa
                    .map(|t| Pool::new(host.swa_pages, bytes(t.page_bytes(p))))
                    .transpose()
                    .map_err(|e| format!("host pool: {e}"))?,
            ),
            None => (None, None),
        };
        let shape = TreeShape {
            page_size: p,
            full: full.is_some(),
            swa: swa.is_some(),
            ssm: ssm.is_some(),
            window: plan.window.unwrap_or(0),
        };
        let engine = CopyEngine::start().map_err(|e| format!("cannot start the copy thread: {e}"))?;
        Ok(Self {
            plan,
            shape,
            tree: Tree::new(shape),
            pools: [full, swa, ssm],
            host_full,
            host_swa,
            mode,
            cpu_backup_bytes: 0,
            requests: HashMap::new(),
            tickets: HashMap::new(),
            next_ticket: 1,
            next_receipt: 1,
            next_seq: 1,
            host_lru: BTreeMap::new(),
            engine,
            metrics: None,
            totals: Totals::default(),
            violations: std::cell::Cell::new(0),
            path: Vec::new(),
        })
    }

    /// Records transfers, evictions and occupancy into `metrics`.
    pub fn set_metrics(&mut self, metrics: Arc<CacheMetrics>) {
        self.metrics = Some(metrics);
    }

    /// The pools as sized.
    pub fn plan(&self) -> &PoolPlan {
        &self.plan
    }

    /// Hits and queries since start.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Touches every pool's bytes so benchmarks measure copies, not page faults.
    pub fn prefault(&self) {
        for pool in self.pools.iter().flatten().chain(self.host_full.iter()).chain(self.host_swa.iter()) {
            pool.data.prefault();
        }
    }

    fn pool(&self, c: usize) -> Option<&Pool> {
        self.pools[c].as_ref()
    }

    fn unit_tokens(&self, c: usize) -> usize {
        if c == P_SSM { 1 } else { self.shape.page_size }
    }

    fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.shape.page_size)
    }

    fn window_start_page(&self, len: usize) -> usize {
        len.saturating_sub(self.shape.window) / self.shape.page_size
    }

    // ----- completions -----------------------------------------------------------------------

    /// Applies finished copies: frees what a finished backup held on the device, and the host
    /// copy a finished restore came from.
    pub fn drain(&mut self) {
        while let Some(done) = self.engine.try_completed() {
            self.complete(done);
        }
    }

    /// Blocks until `ticket` is done or `timeout` passes (tests and benchmarks).
    pub fn wait(&mut self, ticket: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            match self.tickets.get(&ticket) {
                None => return false,
                Some(t) if t.done.is_some() => return true,
                Some(_) => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Some(done) = self.engine.wait_completed(left) {
                self.complete(done);
            }
        }
    }

    fn complete(&mut self, done: Completed) {
        let Some(ticket) = self.tickets.get_mut(&done.ticket) else { return };
        let latency = ticket.submitted.elapsed();
        ticket.done = Some(latency);
        let (kind, request_id) = (ticket.kind, ticket.request.clone());
        if let Some(m) = &self.metrics {
            m.transfer(kind == TicketKind::Backup, done.bytes, latency, done.copy_time);
        }
        let Some(mut request) = self.requests.remove(&request_id) else { return };
        match kind {
            TicketKind::Backup => {
                self.unpin_request(&request, true);
                self.free_request_device(&mut request);
                request.state = State::Retracted;
                if let Some(backup) = &request.backup
                    && matches!(backup.storage, Storage::Host { .. })
                {
                    self.host_lru.insert(backup.seq, request_id.clone());
                }
            }
            TicketKind::Restore => {
                self.unpin_request(&request, false);
                if let Some(backup) = request.backup.take() {
                    self.free_backup(backup);
                }
                request.state = State::Active;
            }
        }
        self.requests.insert(request_id, request);
    }

    /// Device pages a backup reads (all full pages, the in-window SWA pages, the SSM slot) or a
    /// restore writes (everything the request holds).
    fn copy_pages(&self, request: &Request, backup: bool) -> (Vec<u32>, Vec<u32>, Option<u32>) {
        let swa_first =
            if backup { self.window_start_page(request.len).max(request.swa_from) } else { request.swa_from };
        let swa = request.swa[(swa_first - request.swa_from).min(request.swa.len())..].to_vec();
        let ssm = if backup && self.mode == BackupMode::HostPool { None } else { request.ssm };
        (request.full.clone(), swa, ssm)
    }

    fn pin_request(&mut self, request: &Request, backup: bool) {
        let (full, swa, ssm) = self.copy_pages(request, backup);
        for (c, pages) in [(P_FULL, full), (P_SWA, swa), (P_SSM, ssm.into_iter().collect())] {
            if let Some(pool) = self.pools[c].as_mut() {
                pool.pin(&pages);
            }
        }
    }

    fn unpin_request(&mut self, request: &Request, backup: bool) {
        let (full, swa, ssm) = self.copy_pages(request, backup);
        for (c, pages) in [(P_FULL, full), (P_SWA, swa), (P_SSM, ssm.into_iter().collect())] {
            if let Some(pool) = self.pools[c].as_mut() {
                pool.unpin(&pages);
            }
        }
    }

    // ----- freeing ---------------------------------------------------------------------------

    fn free_into(&mut self, c: usize, pages: &[u32]) {
        if pages.is_empty() {
            return;
        }
        let result = match self.pools[c].as_mut() {
            Some(pool) => pool.alloc.free(pages).map_err(|e| e.to_string()),
            None => Err(format!("{} pages freed into a missing pool", Component::ALL[c].as_str())),
        };
        if let Err(e) = result {
            self.violation(&format!("{} pool: {e}", Component::ALL[c].as_str()));
        }
    }

    fn violation(&self, what: &str) {
        self.violations.set(self.violations.get() + 1);
        tracing::error!(what, "cache invariant violated");
        if let Some(m) = &self.metrics {
            m.invariant_violation();
        }
    }

    fn apply_freed(&mut self, freed: Freed) {
        self.free_into(P_FULL, &freed.full);
        self.free_into(P_SWA, &freed.swa);
        self.free_into(P_SSM, &freed.ssm);
    }

    /// Frees the request's own device pages and releases its lock on the cached prefix.
    fn free_request_device(&mut self, request: &mut Request) {
        let private_full = request.full.split_off(request.tree_pages.min(request.full.len()));
        self.free_into(P_FULL, &private_full);
        let private_swa = request.private_swa().to_vec();
        self.free_into(P_SWA, &private_swa);
        if let Some(slot) = request.ssm.take() {
            self.free_into(P_SSM, &[slot]);
        }
        if let Some((id, receipt)) = request.receipt.take() {
            self.tree.unlock(receipt, id);
        }
        request.full.clear();
        request.swa.clear();
        request.tree_pages = 0;
        request.swa_from = 0;
        request.pages = 0;
    }

    fn free_backup(&mut self, backup: Backup) {
        self.host_lru.remove(&backup.seq);
        match backup.storage {
            Storage::Host { full, swa } => {
                for (pool, pages) in [(&mut self.host_full, full), (&mut self.host_swa, swa)] {
                    if let Some(pool) = pool.as_mut()
                        && let Err(e) = pool.alloc.free(&pages)
                    {
                        tracing::error!(error = %e, "host pool");
                    }
                }
            }
            Storage::Cpu { .. } => self.cpu_backup_bytes -= backup.bytes as u64,
        }
    }

    /// Frees cached data until `units` of component `c` are free; false if that is impossible.
    fn ensure_free(&mut self, c: usize, units: usize) -> bool {
        let Some(pool) = self.pool(c) else { return units == 0 };
        let free = pool.alloc.free_count();
        if free >= units {
            return true;
        }
        let mut freed = Freed::default();
        self.tree.evict(Component::ALL[c], (units - free) * self.unit_tokens(c), &mut freed);
        self.record_evicted(&freed);
        self.apply_freed(freed);
        self.pool(c).is_some_and(|p| p.alloc.free_count() >= units)
    }

    fn record_evicted(&self, freed: &Freed) {
        if let Some(m) = &self.metrics {
            let p = self.shape.page_size;
            m.evicted(Component::Full, freed.full.len() * p);
            m.evicted(Component::Swa, freed.swa.len() * p);
            m.evicted(Component::Ssm, freed.ssm.len());
        }
    }

    fn out_of_memory(&self, c: usize, needed: usize) -> CacheError {
        CacheError::OutOfMemory {
            component: Component::ALL[c].as_str(),
            needed,
            free: self.pool(c).map_or(0, |p| p.alloc.free_count()),
            unit: if c == P_SSM { "state slots" } else { "pages" },
        }
    }

    /// Evicts for all three needs, then allocates all of them or nothing.
    fn alloc_all(&mut self, full: usize, swa: usize, ssm: usize) -> Result<NewPages, CacheError> {
        let needs = [
            if self.shape.full { full } else { 0 },
            if self.shape.swa { swa } else { 0 },
            if self.shape.ssm { ssm } else { 0 },
        ];
        for (c, need) in needs.iter().enumerate() {
            self.ensure_free(c, *need);
        }
        for (c, need) in needs.iter().enumerate() {
            if self.pool(c).map_or(0, |p| p.alloc.free_count()) < *need {
                return Err(self.out_of_memory(c, *need));
            }
        }
        let mut take = |c: usize| -> Vec<u32> {
            match self.pools[c].as_mut() {
                Some(pool) if needs[c] > 0 => pool.alloc.alloc(needs[c]).unwrap_or_default(),
                _ => Vec::new(),
            }
        };
        Ok((take(P_FULL), take(P_SWA), take(P_SSM)))
    }

    fn ssm_bytes(&self) -> usize {
        self.pool(P_SSM).map_or(0, |p| p.unit)
    }

    /// Copies SSM state between slots (copy-on-write for matches and inserts).
    fn copy_state(&self, from: u32, to: u32) {
        if let Some(pool) = self.pool(P_SSM) {
            let unit = pool.unit;
            Arena::copy(&pool.data, from as usize * unit, &pool.data, to as usize * unit, unit);
        }
    }

    fn zero_state(&self, slot: u32) {
        if let Some(pool) = self.pool(P_SSM) {
            pool.data.zero(slot as usize * pool.unit, pool.unit);
        }
    }

    fn take_request(&mut self, id: &str) -> Result<Request, CacheError> {
        self.requests.remove(id).ok_or_else(|| CacheError::UnknownRequest(id.to_string()))
    }

    fn lock(&mut self, last: NodeId) -> (u64, Receipt) {
        let id = self.next_receipt;
        self.next_receipt += 1;
        (id, self.tree.lock(last, id))
    }

    // ----- operations ------------------------------------------------------------------------

    /// Starts request `id` with the longest cached prefix of `tokens` that every component
    /// accepts, locked for the request.
    pub fn match_prefix(&mut self, id: &str, namespace: &str, tokens: &[u32]) -> Result<MatchResult, CacheError> {
        self.drain();
        if self.requests.contains_key(id) {
            return Err(CacheError::RequestExists(id.to_string()));
        }
        let p = self.shape.page_size;
        if self.shape.ssm && !self.ensure_free(P_SSM, 1) {
            return Err(self.out_of_memory(P_SSM, 1));
        }
        let root = self.tree.root(namespace.to_string());
        let aligned = &tokens[..tokens.len() - tokens.len() % p];
        let matched = self.tree.match_prefix(root, aligned);
        let (receipt_id, receipt) = self.lock(matched.last);
        let mut request = Request::new(namespace.to_string());
        request.len = matched.len;
        request.pages = matched.len / p;
        request.tree_pages = request.pages;
        request.swa_from = self.window_start_page(matched.len);
        let mut path = std::mem::take(&mut self.path);
        self.tree.path(matched.last, &mut path);
        let mut start = 0;
        for node in &path {
            let len = self.tree.key_len(*node);
            request.full.extend_from_slice(self.tree.full_pages(*node));
            if self.shape.swa && start + len > request.swa_from * p {
                let Some(swa) = self.tree.swa_pages(*node) else {
                    self.path = path;
                    self.tree.unlock(receipt, receipt_id);
                    return Err(CacheError::Internal("a matched window holds a SWA tombstone".into()));
                };
                let skip = (request.swa_from * p).saturating_sub(start) / p;
                request.swa.extend_from_slice(&swa[skip..]);
            }
            start += len;
        }
        self.path = path;
        if self.shape.ssm {
            let slot = self.pools[P_SSM].as_mut().and_then(|pool| pool.alloc.alloc(1)).and_then(|s| s.first().copied());
            let Some(slot) = slot else {
                self.tree.unlock(receipt, receipt_id);
                return Err(self.out_of_memory(P_SSM, 1));
            };
            match self.tree.ssm_slot(matched.last).filter(|_| matched.last != root) {
                Some(cached) => self.copy_state(cached, slot),
                None => self.zero_state(slot),
            }
            request.ssm = Some(slot);
        }
        request.receipt = Some((receipt_id, receipt));
        self.totals.hit_tokens += matched.len as u64;
        self.totals.query_tokens += tokens.len() as u64;
        if let Some(m) = &self.metrics {
            m.prefix(matched.len, tokens.len());
        }
        let result = MatchResult {
            matched_tokens: matched.len,
            pages: Pages {
                full: request.full.clone(),
                swa: request.swa.clone(),
                swa_from_token: self.shape.swa.then_some(request.swa_from * p),
                ssm: request.ssm,
            },
        };
        self.requests.insert(id.to_string(), request);
        Ok(result)
    }

    /// Gives request `id` KV room for `tokens` more tokens (creating the request if needed),
    /// evicting cached prefixes when short. All or nothing.
    pub fn allocate(&mut self, id: &str, namespace: &str, tokens: usize) -> Result<Allocated, CacheError> {
        self.drain();
        let existed = self.requests.contains_key(id);
        let mut request = match self.requests.remove(id) {
            Some(r) if r.state != State::Active => {
                let error = r.bad_state(id, "only an active request can grow");
                self.requests.insert(id.to_string(), r);
                return Err(error);
            }
            Some(r) => r,
            None => Request::new(namespace.to_string()),
        };
        let new_len = request.len + tokens;
        let new_pages = self.pages_for(new_len) - request.pages;
        let needs_ssm = usize::from(self.shape.ssm && request.ssm.is_none());
        let (full, swa, ssm) = match self.alloc_all(new_pages, new_pages, needs_ssm) {
            Ok(pages) => pages,
            Err(e) => {
                if existed {
                    self.requests.insert(id.to_string(), request);
                }
                return Err(e);
            }
        };
        let first_page = request.pages;
        request.full.extend_from_slice(&full);
        request.swa.extend_from_slice(&swa);
        let ssm = ssm.first().copied();
        if let Some(slot) = ssm {
            self.zero_state(slot);
            request.ssm = Some(slot);
        }
        request.len = new_len;
        request.pages += new_pages;
        let result = Allocated {
            tokens: new_len,
            first_page,
            pages: Pages {
                full,
                swa,
                swa_from_token: self.shape.swa.then_some(first_page * self.shape.page_size),
                ssm,
            },
        };
        self.requests.insert(id.to_string(), request);
        Ok(result)
    }

    /// Publishes the page-aligned part of `tokens` (the request's first tokens) to the cache.
    /// Spans the cache already holds replace the request's duplicates, which are freed; the
    /// request's lock moves to the new end.
    pub fn insert(&mut self, id: &str, tokens: &[u32]) -> Result<InsertResult, CacheError> {
        self.drain();
        let mut request = self.take_request(id)?;
        let result = self.insert_inner(id, &mut request, tokens);
        self.requests.insert(id.to_string(), request);
        result
    }

    fn insert_inner(&mut self, id: &str, request: &mut Request, tokens: &[u32]) -> Result<InsertResult, CacheError> {
        let p = self.shape.page_size;
        if request.state != State::Active {
            return Err(request.bad_state(id, "only an active request can be inserted"));
        }
        if tokens.len() > request.len {
            return Err(CacheError::InvalidTokens(format!(
                "insert names {} tokens but request `{id}` holds KV for {}; allocate first",
                tokens.len(),
                request.len
            )));
        }
        let n = tokens.len() - tokens.len() % p;
        let cached = request.tree_pages * p;
        let root = self.tree.root(request.namespace.clone());
        let checked = cached.min(n);
        if self.tree.overlap(root, &tokens[..checked]) < checked {
            return Err(CacheError::InvalidTokens(format!(
                "the tokens differ from request `{id}`'s cached prefix of {cached} tokens; insert the request's \
                 own tokens"
            )));
        }
        if n <= cached {
            return Ok(InsertResult {
                inserted_tokens: n,
                reused_tokens: n,
                cached_tokens: cached,
                duplicates: Pages::default(),
            });
        }
        // The tree gets its own copy of the state, if the state matches the inserted end.
        let state_copy = match request.ssm {
            Some(own) if n == request.len && self.ensure_free(P_SSM, 1) => {
                let slot = self.pools[P_SSM].as_mut().and_then(|pool| pool.alloc.alloc(1)).map(|s| s[0]);
                if let Some(slot) = slot {
                    self.copy_state(own, slot);
                }
                slot
            }
            _ => None,
        };
        let swa_end = (n / p).saturating_sub(request.swa_from).min(request.swa.len());
        let data = InsertData {
            full: &request.full[..if self.shape.full { n / p } else { 0 }],
            swa_from: request.swa_from,
            swa: &request.swa[..swa_end],
            ssm: state_copy,
        };
        let inserted = self.tree.insert(root, &tokens[..n], data);
        if let Some(slot) = state_copy
            && !inserted.took_ssm
        {
            self.free_into(P_SSM, &[slot]);
        }
        // Reconcile the request's table with the tree's pages; differing private pages were
        // duplicates.
        let mut duplicates = Pages::default();
        let old_cached = request.tree_pages;
        let mut shared_changed = false;
        let mut path = std::mem::take(&mut self.path);
        self.tree.path(inserted.last, &mut path);
        let mut page = 0;
        for node in &path {
            let pages = self.tree.key_len(*node) / p;
            if self.shape.full {
                for (k, canonical) in self.tree.full_pages(*node).iter().enumerate() {
                    let own = &mut request.full[page + k];
                    if *own != *canonical {
                        shared_changed |= page + k < old_cached;
                        duplicates.full.push(*own);
                        *own = *canonical;
                    }
                }
            }
            if let Some(swa) = self.tree.swa_pages(*node) {
                for (k, canonical) in swa.iter().enumerate() {
                    if page + k < request.swa_from {
                        continue;
                    }
                    let own = &mut request.swa[page + k - request.swa_from];
                    if *own != *canonical {
                        shared_changed |= page + k < old_cached;
                        duplicates.swa.push(*own);
                        *own = *canonical;
                    }
                }
            }
            page += pages;
        }
        self.path = path;
        if shared_changed || old_cached > page {
            self.violation(&format!("insert into request `{id}` changed pages it already shared with the cache"));
        }
        self.free_into(P_FULL, &duplicates.full);
        self.free_into(P_SWA, &duplicates.swa);
        let (new_id, new_receipt) = self.lock(inserted.last);
        if let Some((old_id, old)) = request.receipt.replace((new_id, new_receipt)) {
            self.tree.unlock(old, old_id);
        }
        request.tree_pages = page;
        // Cached SWA pages before the new lock's segment are unlocked; stop referring to them.
        let segment_page = new_receipt.swa_start / p;
        if self.shape.swa && segment_page > request.swa_from {
            let drop = (segment_page - request.swa_from).min(request.swa.len());
            request.swa.drain(..drop);
            request.swa_from = segment_page;
        }
        Ok(InsertResult { inserted_tokens: n, reused_tokens: inserted.reused, cached_tokens: page * p, duplicates })
    }

    /// Ends request `id`: frees its own pages and unlocks its cached prefix (or drops its backup).
    pub fn release(&mut self, id: &str) -> Result<Amounts, CacheError> {
        self.drain();
        let mut request = self.take_request(id)?;
        if matches!(request.state, State::BackingUp(_) | State::Restoring(_)) {
            let error = request.bad_state(id, "poll its ticket until done first");
            self.requests.insert(id.to_string(), request);
            return Err(error);
        }
        let p = self.shape.page_size;
        let freed = Amounts {
            full: request.full.len().saturating_sub(request.tree_pages) * p,
            swa: request.private_swa().len() * p,
            ssm: usize::from(request.ssm.is_some()),
        };
        self.free_request_device(&mut request);
        if let Some(backup) = request.backup.take() {
            self.free_backup(backup);
        }
        self.tree.forget_namespace_if_empty(&request.namespace);
        Ok(freed)
    }

    /// Frees request `id`'s SWA pages that have fallen out of the window, and its lock on
    /// cached SWA data once the whole locked segment is behind the window.
    pub fn trim_swa(&mut self, id: &str) -> Result<usize, CacheError> {
        self.drain();
        let mut request = self.take_request(id)?;
        let mut freed = 0;
        if request.state == State::Active && self.shape.swa {
            let p = self.shape.page_size;
            let new_from = self.window_start_page(request.len).min(request.pages);
            if new_from > request.swa_from {
                let dropped: Vec<u32> = request.swa.drain(..new_from - request.swa_from).collect();
                let first_private = request.tree_pages.saturating_sub(request.swa_from).min(dropped.len());
                self.free_into(P_SWA, &dropped[first_private..]);
                freed = (dropped.len() - first_private) * p;
                request.swa_from = new_from;
            }
            if let Some((receipt_id, receipt)) = request.receipt.as_mut()
                && request.tree_pages <= new_from
            {
                self.tree.unlock_swa(receipt, *receipt_id);
            }
        }
        self.requests.insert(id.to_string(), request);
        Ok(freed)
    }

    /// Evicts unlocked cached data: `full` and `swa` tokens, `ssm` slots.
    pub fn evict(&mut self, targets: Amounts) -> Amounts {
        self.drain();
        let mut freed = Freed::default();
        for (c, target) in
            [(Component::Full, targets.full), (Component::Swa, targets.swa), (Component::Ssm, targets.ssm)]
        {
            if target > 0 {
                self.tree.evict(c, target, &mut freed);
            }
        }
        let p = self.shape.page_size;
        let amounts = Amounts { full: freed.full.len() * p, swa: freed.swa.len() * p, ssm: freed.ssm.len() };
        self.record_evicted(&freed);
        self.apply_freed(freed);
        amounts
    }

    /// Retracts request `id`: queues a copy of its KV into the backup (the full-attention KV,
    /// the in-window SWA KV, and for `cpu_tensor` the SSM state) and frees its device pages once
    /// the copy is done. Declines when the backup cannot fit; the request is then dropped.
    pub fn retract(&mut self, id: &str) -> Result<Retraction, CacheError> {
        self.drain();
        let mut request = self.take_request(id)?;
        if request.state != State::Active {
            let error = request.bad_state(id, "only an active request can be retracted");
            self.requests.insert(id.to_string(), request);
            return Err(error);
        }
        match self.start_backup(&request) {
            Ok((backup, job)) => {
                let ticket = self.next_ticket;
                let bytes = job.bytes();
                self.pin_request(&request, true);
                if !self.engine.submit(job) {
                    self.unpin_request(&request, true);
                    self.free_backup(backup);
                    self.requests.insert(id.to_string(), request);
                    return Err(CacheError::Internal("the copy thread has stopped".into()));
                }
                self.next_ticket += 1;
                self.tickets.insert(
                    ticket,
                    Ticket {
                        request: id.to_string(),
                        kind: TicketKind::Backup,
                        submitted: Instant::now(),
                        bytes,
                        done: None,
                    },
                );
                request.state = State::BackingUp(ticket);
                request.backup = Some(backup);
                self.requests.insert(id.to_string(), request);
                if let Some(m) = &self.metrics {
                    m.retraction("backed_up");
                }
                Ok(Retraction::BackingUp { ticket, bytes })
            }
            Err(reason) => {
                self.free_request_device(&mut request);
                self.tree.forget_namespace_if_empty(&request.namespace);
                if let Some(m) = &self.metrics {
                    m.retraction("declined");
                }
                Ok(Retraction::Declined { reason })
            }
        }
    }

    /// Reserves backup storage and builds the copy job, or says why it cannot.
    fn start_backup(&mut self, request: &Request) -> Result<(Backup, CopyJob), String> {
        let (full, swa, ssm) = self.copy_pages(request, true);
        let swa_from = request.pages - swa.len();
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut job = CopyJob::new(self.next_ticket);
        let backup = match self.mode {
            BackupMode::HostPool => {
                let (host_full, host_swa) = self.reserve_host(full.len(), swa.len())?;
                let added = [
                    (P_FULL, &full, self.host_full.as_ref(), &host_full),
                    (P_SWA, &swa, self.host_swa.as_ref(), &host_swa),
                ]
                .into_iter()
                .all(|(c, device, host, host_pages)| match (self.pool(c), host) {
                    (Some(pool), Some(host)) => {
                        job.add(&pool.data, &pool.offsets(device), &host.data, &host.offsets(host_pages), pool.unit)
                    }
                    _ => device.is_empty(),
                });
                let storage = Storage::Host { full: host_full, swa: host_swa };
                let backup = Backup {
                    len: request.len,
                    pages: request.pages,
                    swa_from,
                    has_ssm: false,
                    storage,
                    seq,
                    bytes: job.bytes(),
                };
                if !added {
                    self.free_backup(backup);
                    return Err("internal error: a page lies outside its pool".into());
                }
                backup
            }
            BackupMode::CpuTensor => {
                let unit = |c: usize| self.pool(c).map_or(0, |pool| pool.unit);
                let bytes = full.len() * unit(P_FULL) + swa.len() * unit(P_SWA) + ssm.map_or(0, |_| self.ssm_bytes());
                if let Some(limit) = self.plan.cpu_backup_limit
                    && self.cpu_backup_bytes + bytes as u64 > limit
                {
                    return Err(format!(
                        "the backup needs {bytes} bytes but only {} of --host-memory {limit} are left",
                        limit.saturating_sub(self.cpu_backup_bytes)
                    ));
                }
                let buffer = Arc::new(Arena::zeroed(bytes).map_err(|e| format!("no host memory for the backup: {e}"))?);
                let mut offset = 0;
                let mut added = true;
                for (c, pages) in [(P_FULL, full.clone()), (P_SWA, swa.clone()), (P_SSM, ssm.into_iter().collect())] {
                    let Some(pool) = self.pool(c) else { continue };
                    let dst: Vec<usize> = (0..pages.len()).map(|i| offset + i * pool.unit).collect();
                    added &= job.add(&pool.data, &pool.offsets(&pages), &buffer, &dst, pool.unit);
                    offset += pages.len() * pool.unit;
                }
                if !added {
                    return Err("internal error: a page lies outside its pool".into());
                }
                self.cpu_backup_bytes += bytes as u64;
                Backup {
                    len: request.len,
                    pages: request.pages,
                    swa_from,
                    has_ssm: ssm.is_some(),
                    storage: Storage::Cpu { buffer },
                    seq,
                    bytes,
                }
            }
        };
        Ok((backup, job))
    }

    /// Host pages for a backup, evicting the oldest finished backups when short.
    fn reserve_host(&mut self, full: usize, swa: usize) -> Result<(Vec<u32>, Vec<u32>), String> {
        let p = self.shape.page_size;
        let capacity = |pool: &Option<Pool>| pool.as_ref().map_or(0, |p| p.alloc.total());
        let free = |pool: &Option<Pool>| pool.as_ref().map_or(0, |p| p.alloc.free_count());
        if full > capacity(&self.host_full) || swa > capacity(&self.host_swa) {
            return Err(format!(
                "the backup needs {} full and {} sliding-window tokens but the host pool holds {} and {}; raise \
                 hostPoolRatio or --host-memory",
                full * p,
                swa * p,
                capacity(&self.host_full) * p,
                capacity(&self.host_swa) * p
            ));
        }
        while free(&self.host_full) < full || free(&self.host_swa) < swa {
            let Some((&seq, _)) = self.host_lru.iter().next() else {
                return Err("the host pool is full of backups still being copied; retry after polling".into());
            };
            let victim = self.host_lru.remove(&seq).unwrap_or_default();
            if let Some(request) = self.requests.get_mut(&victim)
                && let Some(backup) = request.backup.take()
            {
                request.state = State::Lost;
                self.free_backup(backup);
                if let Some(m) = &self.metrics {
                    m.backup_evicted();
                }
            }
        }
        let take = |pool: &mut Option<Pool>, n: usize| -> Vec<u32> {
            match pool.as_mut() {
                Some(pool) if n > 0 => pool.alloc.alloc(n).unwrap_or_default(),
                _ => Vec::new(),
            }
        };
        Ok((take(&mut self.host_full, full), take(&mut self.host_swa, swa)))
    }

    /// Restores retracted request `id` into fresh device pages; the pages are usable once the
    /// returned ticket is done.
    pub fn restore(&mut self, id: &str) -> Result<Restoration, CacheError> {
        self.drain();
        let mut request = self.take_request(id)?;
        let result = self.restore_inner(id, &mut request);
        self.requests.insert(id.to_string(), request);
        result
    }

    fn restore_inner(&mut self, id: &str, request: &mut Request) -> Result<Restoration, CacheError> {
        if request.state != State::Retracted {
            let hint = match request.state {
                State::Lost => "release it and recompute the request",
                State::BackingUp(_) => "poll its backup ticket until done first",
                _ => "only a retracted request can be restored",
            };
            return Err(request.bad_state(id, hint));
        }
        let Some(backup) = request.backup.as_ref() else {
            return Err(CacheError::Internal(format!("retracted request `{id}` has no backup")));
        };
        let (len, pages, swa_from, has_ssm) = (backup.len, backup.pages, backup.swa_from, backup.has_ssm);
        let (full, swa, ssm) = self.alloc_all(pages, pages - swa_from, usize::from(self.shape.ssm))?;
        let mut job = CopyJob::new(self.next_ticket);
        let mut added = true;
        match &backup.storage {
            Storage::Host { full: host_full, swa: host_swa } => {
                for (c, host, host_pages, device) in
                    [(P_FULL, &self.host_full, host_full, &full), (P_SWA, &self.host_swa, host_swa, &swa)]
                {
                    if let (Some(pool), Some(host)) = (self.pool(c), host.as_ref()) {
                        added &= job.add(
                            &host.data,
                            &host.offsets(host_pages),
                            &pool.data,
                            &pool.offsets(device),
                            pool.unit,
                        );
                    }
                }
            }
            Storage::Cpu { buffer } => {
                let mut offset = 0;
                let ssm_pages: Vec<u32> = if has_ssm { ssm.clone() } else { Vec::new() };
                for (c, device) in [(P_FULL, &full), (P_SWA, &swa), (P_SSM, &ssm_pages)] {
                    let Some(pool) = self.pool(c) else { continue };
                    let src: Vec<usize> = (0..device.len()).map(|i| offset + i * pool.unit).collect();
                    added &= job.add(buffer, &src, &pool.data, &pool.offsets(device), pool.unit);
                    offset += device.len() * pool.unit;
                }
            }
        }
        if let Some(slot) = ssm.first().filter(|_| !has_ssm) {
            self.zero_state(*slot);
        }
        request.full = full;
        request.swa = swa;
        request.swa_from = swa_from;
        request.ssm = ssm.first().copied();
        request.len = len;
        request.pages = pages;
        request.tree_pages = 0;
        let undo = |cache: &mut Self, request: &mut Request| {
            cache.free_request_device(request);
        };
        if !added {
            undo(self, request);
            return Err(CacheError::Internal("a restore page lies outside its pool".into()));
        }
        let ticket = self.next_ticket;
        let bytes = job.bytes();
        self.pin_request(request, false);
        if !self.engine.submit(job) {
            self.unpin_request(request, false);
            undo(self, request);
            return Err(CacheError::Internal("the copy thread has stopped".into()));
        }
        self.next_ticket += 1;
        self.tickets.insert(
            ticket,
            Ticket { request: id.to_string(), kind: TicketKind::Restore, submitted: Instant::now(), bytes, done: None },
        );
        request.state = State::Restoring(ticket);
        Ok(Restoration {
            ticket,
            tokens: len,
            pages: Pages {
                full: request.full.clone(),
                swa: request.swa.clone(),
                swa_from_token: self.shape.swa.then_some(swa_from * self.shape.page_size),
                ssm: request.ssm,
            },
        })
    }

    /// The state of each ticket; finished tickets are reported once and then forgotten.
    pub fn poll(&mut self, tickets: &[u64]) -> Vec<TicketStatus> {
        self.drain();
        tickets
            .iter()
            .map(|&ticket| match self.tickets.get(&ticket) {
                None => TicketStatus::Unknown { ticket },
                Some(t) => match t.done {
                    None => TicketStatus::Pending { ticket },
                    Some(latency) => {
                        let t = self.tickets.remove(&ticket).expect("present");
                        TicketStatus::Done {
                            ticket,
                            kind: match t.kind {
                                TicketKind::Backup => "backup",
                                TicketKind::Restore => "restore",
                            },
                            request: t.request,
                            bytes: t.bytes,
                            seconds: latency.as_secs_f64(),
                        }
                    }
                },
            })
            .collect()
    }

    fn checked_pages(&self, component: Component, pages: &[u32], writing: bool) -> Result<&Pool, CacheError> {
        let pool = self.pool(component as usize).ok_or(CacheError::NoSuchPool(component.as_str()))?;
        for &page in pages {
            if !pool.alloc.is_allocated(page) {
                return Err(CacheError::InvalidPages(format!(
                    "{} page {page} is not allocated (the pool has {} pages)",
                    component.as_str(),
                    pool.alloc.total()
                )));
            }
            if pool.busy[page as usize] > 0 {
                return Err(CacheError::InvalidPages(format!(
                    "{} page {page} has a copy in flight; poll its ticket first",
                    component.as_str()
                )));
            }
        }
        if writing && pages.iter().any(|p| pages.iter().filter(|q| *q == p).count() > 1) {
            return Err(CacheError::InvalidPages("a write names a page twice".into()));
        }
        Ok(pool)
    }

    /// The bytes of `pages` of a pool, concatenated (for integrity checks).
    pub fn read(&mut self, component: Component, pages: &[u32]) -> Result<Vec<u8>, CacheError> {
        self.drain();
        let pool = self.checked_pages(component, pages, false)?;
        let mut out = vec![0; pages.len() * pool.unit];
        for (i, page) in pages.iter().enumerate() {
            pool.data.read(*page as usize * pool.unit, &mut out[i * pool.unit..(i + 1) * pool.unit]);
        }
        Ok(out)
    }

    /// Writes `data` (exactly one page's bytes per page) into `pages` of a pool.
    pub fn write(&mut self, component: Component, pages: &[u32], data: &[u8]) -> Result<(), CacheError> {
        self.drain();
        let pool = self.checked_pages(component, pages, true)?;
        if data.len() != pages.len() * pool.unit {
            return Err(CacheError::InvalidPages(format!(
                "{} bytes for {} pages of {} bytes each",
                data.len(),
                pages.len(),
                pool.unit
            )));
        }
        for (i, page) in pages.iter().enumerate() {
            pool.data.write(*page as usize * pool.unit, &data[i * pool.unit..(i + 1) * pool.unit]);
        }
        Ok(())
    }

    /// Request `id` as the runtime sees it.
    pub fn describe(&mut self, id: &str) -> Result<RequestInfo, CacheError> {
        self.drain();
        let request = self.requests.get(id).ok_or_else(|| CacheError::UnknownRequest(id.to_string()))?;
        let p = self.shape.page_size;
        Ok(RequestInfo {
            state: request.state.name(),
            tokens: request.len,
            cached_tokens: request.tree_pages * p,
            pages: Pages {
                full: request.full.clone(),
                swa: request.swa.clone(),
                swa_from_token: self.shape.swa.then_some(request.swa_from * p),
                ssm: request.ssm,
            },
        })
    }

    /// Occupancy of every pool.
    pub fn stats(&mut self) -> Stats {
        self.drain();
        let sizes = self.tree.sizes();
        let mut pools = BTreeMap::new();
        for c in Component::ALL {
            let i = c as usize;
            let Some(pool) = self.pool(i) else { continue };
            let unit = self.unit_tokens(i);
            let total = pool.alloc.total() * unit;
            let free = pool.alloc.free_count() * unit;
            let evictable = sizes.evictable[i];
            pools.insert(
                c.as_str(),
                PoolStats {
                    total_tokens: total,
                    free_tokens: free,
                    evictable_tokens: evictable,
                    protected_tokens: total - free - evictable,
                },
            );
        }
        let p = self.shape.page_size;
        let host_pools = [&self.host_full, &self.host_swa];
        let host = HostStats {
            total_slots: host_pools.iter().filter_map(|h| h.as_ref()).map(|h| h.alloc.total() * p).sum(),
            free_slots: host_pools.iter().filter_map(|h| h.as_ref()).map(|h| h.alloc.free_count() * p).sum(),
        };
        let mut requests = BTreeMap::new();
        for request in self.requests.values() {
            let state = match request.state {
                State::Active => "active",
                State::BackingUp(_) => "backingUp",
                State::Retracted => "retracted",
                State::Lost => "lost",
                State::Restoring(_) => "restoring",
            };
            *requests.entry(state).or_insert(0) += 1;
        }
        let stats = Stats {
            pools,
            host,
            requests,
            tree_nodes: self.tree.node_count(),
            cpu_backup_bytes: self.cpu_backup_bytes,
        };
        if let Some(m) = &self.metrics {
            m.occupancy(&stats);
        }
        stats
    }

    /// Recounts everything from scratch and compares: every page owned exactly once (free list,
    /// cache, a request, or a backup), free + evictable + protected = total per pool, lock
    /// counts equal to what the live receipts hold, pins equal to the copies in flight.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.violations.get() > 0 {
            return Err(format!("{} invariant violations were reported while running", self.violations.get()));
        }
        let (tree_owned, sizes) = self.tree.audit()?;
        let p = self.shape.page_size;
        let pool_sizes: [usize; 3] = std::array::from_fn(|c| self.pool(c).map_or(0, |pool| pool.alloc.total()));
        let mut owners: [Vec<u8>; 3] = std::array::from_fn(|c| vec![0u8; pool_sizes[c]]);
        let mut claim = |c: usize, pages: &[u32], who: &str| -> Result<(), String> {
            for &page in pages {
                let slot = owners[c]
                    .get_mut(page as usize)
                    .ok_or_else(|| format!("{who} holds {} page {page} beyond the pool", Component::ALL[c].as_str()))?;
                *slot += 1;
                if *slot > 1 {
                    return Err(format!(
                        "{} page {page} is owned twice (second owner: {who})",
                        Component::ALL[c].as_str()
                    ));
                }
            }
            Ok(())
        };
        for c in 0..3 {
            if let Some(pool) = self.pool(c) {
                claim(c, pool.alloc.free_pages(), "the free list")?;
            }
        }
        claim(P_FULL, &tree_owned.full, "the cache")?;
        claim(P_SWA, &tree_owned.swa, "the cache")?;
        claim(P_SSM, &tree_owned.ssm, "the cache")?;
        let mut private = [0usize; 3];
        let mut expected_locks: HashMap<NodeId, [u32; 3]> = HashMap::new();
        let mut expected_busy: [Vec<u16>; 3] = std::array::from_fn(|c| vec![0; pool_sizes[c]]);
        for (id, request) in &self.requests {
            let who = format!("request `{id}`");
            if self.shape.full && request.full.len() != request.pages {
                return Err(format!(
                    "{who} has {} full pages for {} page positions",
                    request.full.len(),
                    request.pages
                ));
            }
            if self.shape.swa && request.swa.len() + request.swa_from != request.pages && request.pages > 0 {
                return Err(format!(
                    "{who}: swa pages {} from {} for {} positions",
                    request.swa.len(),
                    request.swa_from,
                    request.pages
                ));
            }
            let private_full = &request.full[request.tree_pages.min(request.full.len())..];
            claim(P_FULL, private_full, &who)?;
            claim(P_SWA, request.private_swa(), &who)?;
            claim(P_SSM, &request.ssm.into_iter().collect::<Vec<_>>(), &who)?;
            private[P_FULL] += private_full.len() * p;
            private[P_SWA] += request.private_swa().len() * p;
            private[P_SSM] += usize::from(request.ssm.is_some());
            if request.tree_pages > 0 {
                let Some((receipt_id, receipt)) = request.receipt else {
                    return Err(format!("{who} shares cached pages without a lock"));
                };
                let mut path = Vec::new();
                self.tree.path(receipt.last, &mut path);
                let cached: Vec<u32> = path.iter().flat_map(|n| self.tree.full_pages(*n).iter().copied()).collect();
                if self.shape.full && cached[..] != request.full[..request.tree_pages] {
                    return Err(format!("{who}'s cached pages differ from its locked path"));
                }
                for node in &path {
                    expected_locks.entry(*node).or_default()[P_FULL] += 1;
                }
                if let Some(top) = self.tree.swa_top(receipt_id) {
                    let mut node = receipt.last;
                    loop {
                        expected_locks.entry(node).or_default()[P_SWA] += 1;
                        if node == top || node == NIL {
                            break;
                        }
                        node = self.tree.parent(node);
                    }
                }
                if receipt.ssm {
                    expected_locks.entry(receipt.last).or_default()[P_SSM] += 1;
                }
                // Cached SWA pages the request refers to must lie inside its locked segment.
                if self.shape.swa && request.swa_from < request.tree_pages && request.swa_from * p < receipt.swa_start {
                    return Err(format!("{who} refers to cached SWA pages outside its locked window"));
                }
            }
            let in_flight = match request.state {
                State::BackingUp(_) => Some(true),
                State::Restoring(_) => Some(false),
                _ => None,
            };
            if let Some(backup) = in_flight {
                let (full, swa, ssm) = self.copy_pages(request, backup);
                for (c, pages) in [(P_FULL, full), (P_SWA, swa), (P_SSM, ssm.into_iter().collect())] {
                    for page in pages {
                        if let Some(count) = expected_busy[c].get_mut(page as usize) {
                            *count += 1;
                        }
                    }
                }
            }
        }
        for c in 0..3 {
            if let Some((page, _)) = owners[c].iter().enumerate().find(|(_, n)| **n == 0) {
                return Err(format!("{} page {page} is owned by nobody (leaked)", Component::ALL[c].as_str()));
            }
            if let Some(pool) = self.pool(c) {
                if pool.busy != expected_busy[c] {
                    return Err(format!("{} pins differ from the copies in flight", Component::ALL[c].as_str()));
                }
                let unit = self.unit_tokens(c);
                let total = pool.alloc.total() * unit;
                let free = pool.alloc.free_count() * unit;
                let protected = (sizes.held[c] - sizes.evictable[c]) + private[c];
                if free + sizes.evictable[c] + protected != total {
                    return Err(format!(
                        "{}: free {free} + evictable {} + protected {protected} != total {total}",
                        Component::ALL[c].as_str(),
                        sizes.evictable[c]
                    ));
                }
            }
        }
        for (node, counts) in self.tree.lock_counts() {
            let expected = expected_locks.get(&node).copied().unwrap_or_default();
            if counts != expected {
                return Err(format!("node {node} has locks {counts:?} but live receipts hold {expected:?}"));
            }
        }
        let (mut held_full, mut held_swa) = (0, 0);
        for backup in self.requests.values().filter_map(|r| r.backup.as_ref()) {
            if let Storage::Host { full, swa } = &backup.storage {
                held_full += full.len();
                held_swa += swa.len();
            }
        }
        for (name, host, held) in [("full", &self.host_full, held_full), ("swa", &self.host_swa, held_swa)] {
            let Some(host) = host else { continue };
            if held + host.alloc.free_count() != host.alloc.total() {
                return Err(format!(
                    "host {name} pool: {held} pages in backups + {} free != {}",
                    host.alloc.free_count(),
                    host.alloc.total()
                ));
            }
        }
        Ok(())
    }
}
