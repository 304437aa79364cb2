//! The cache: the radix tree, one allocator and byte arena per pool, every request's page
//! table, and retraction with backup. The tree decides what to keep; this executes it against
//! the allocators and the bytes (`cache-runtime.md` §1.3, §1.5, §6).
//!
//! A request's pages are its KV in order: the first `tree_pages` are owned by the tree (shared
//! prefix, held by the request's lock receipt), the rest are the request's own. SWA pages are
//! kept only from `swa_from` on: earlier ones are out of the window and were freed or never held.

mod audit;
mod retract;
mod types;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use types::*;

use super::Component;
use super::alloc::PageAllocator;
use super::arena::{Arena, CopyEngine};
use super::metrics::CacheMetrics;
use super::sizing::PoolPlan;
use super::tree::{Freed, InsertData, NodeId, Receipt, Tree, TreeShape};
use retract::{Backup, Ticket};

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
    /// No backup (`retractionBackup: none`): a retracted request is dropped, as SGLang aborts it
    /// with HTTP 503.
    None,
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

    /// Holds copies queued (false) or lets them run (true): lets tests observe a copy in flight.
    #[cfg(test)]
    pub(crate) fn set_copies_running(&self, running: bool) {
        self.engine.set_open(running);
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

    /// Counts what the tree evicted and returns it to the allocators.
    fn free_evicted(&mut self, freed: Freed) {
        if let Some(m) = &self.metrics {
            let p = self.shape.page_size;
            m.evicted(Component::Full, freed.full.len() * p);
            m.evicted(Component::Swa, freed.swa.len() * p);
            m.evicted(Component::Ssm, freed.ssm.len());
        }
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

    /// Frees cached data until `units` of component `c` are free; false if that is impossible.
    fn ensure_free(&mut self, c: usize, units: usize) -> bool {
        let Some(pool) = self.pool(c) else { return units == 0 };
        let free = pool.alloc.free_count();
        if free >= units {
            return true;
        }
        let mut freed = Freed::default();
        self.tree.evict(Component::ALL[c], (units - free) * self.unit_tokens(c), &mut freed);
        self.free_evicted(freed);
        self.pool(c).is_some_and(|p| p.alloc.free_count() >= units)
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

    /// One SSM state slot, evicting cached state when none is free.
    fn take_state_slot(&mut self) -> Option<u32> {
        if !self.ensure_free(P_SSM, 1) {
            return None;
        }
        self.pools[P_SSM].as_mut().and_then(|pool| pool.alloc.alloc(1)).and_then(|slots| slots.first().copied())
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

    /// A request's page table as the API answers it.
    fn pages_of(&self, request: &Request) -> Pages {
        Pages {
            full: request.full.clone(),
            swa: request.swa.clone(),
            swa_from_token: self.shape.swa.then_some(request.swa_from * self.shape.page_size),
            ssm: request.ssm,
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

    /// Starts request `id` with the longest cached prefix of `tokens` that every component
    /// accepts, locked for the request.
    pub fn match_prefix(&mut self, id: &str, namespace: &str, tokens: &[u32]) -> Result<MatchResult, CacheError> {
        self.drain();
        if self.requests.contains_key(id) {
            return Err(CacheError::RequestExists(id.to_string()));
        }
        let p = self.shape.page_size;
        // The request's own state slot, taken first: a match that cannot have one changes nothing.
        let slot = if self.shape.ssm {
            Some(self.take_state_slot().ok_or_else(|| self.out_of_memory(P_SSM, 1))?)
        } else {
            None
        };
        let root = self.tree.root(namespace);
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
        if self.shape.full {
            request.full.reserve_exact(request.pages);
        }
        if self.shape.swa {
            request.swa.reserve_exact(request.pages - request.swa_from);
        }
        let mut start = 0;
        for node in &path {
            let len = self.tree.key_len(*node);
            request.full.extend_from_slice(self.tree.full_pages(*node));
            if self.shape.swa && start + len > request.swa_from * p {
                let Some(swa) = self.tree.swa_pages(*node) else {
                    self.path = path;
                    self.tree.unlock(receipt, receipt_id);
                    if let Some(slot) = slot {
                        self.free_into(P_SSM, &[slot]);
                    }
                    return Err(CacheError::Internal("a matched window holds a SWA tombstone".into()));
                };
                let skip = (request.swa_from * p).saturating_sub(start) / p;
                request.swa.extend_from_slice(&swa[skip..]);
            }
            start += len;
        }
        self.path = path;
        if let Some(slot) = slot {
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
        let result = MatchResult { matched_tokens: matched.len, pages: self.pages_of(&request) };
        self.requests.insert(id.to_string(), request);
        Ok(result)
    }

    /// Gives request `id` KV room for `tokens` more tokens (creating the request if needed),
    /// evicting cached prefixes when short. All or nothing.
    pub fn allocate(&mut self, id: &str, namespace: &str, tokens: usize) -> Result<Allocated, CacheError> {
        self.drain();
        let existing = self.requests.remove(id);
        let existed = existing.is_some();
        let mut request = match existing {
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
        let root = self.tree.root(&request.namespace);
        let diverged = |at: usize| {
            CacheError::InvalidTokens(format!(
                "the tokens differ from request `{id}`'s cached prefix of {cached} tokens at token {at}; insert the \
                 request's own tokens"
            ))
        };
        if n <= cached {
            let overlap = self.tree.overlap(root, &tokens[..n]);
            if overlap < n {
                return Err(diverged(overlap));
            }
            return Ok(InsertResult {
                inserted_tokens: n,
                reused_tokens: n,
                cached_tokens: cached,
                duplicates: Pages::default(),
            });
        }
        // The tree gets its own copy of the state, if the state matches the inserted end.
        let state_copy = match request.ssm {
            Some(own) if n == request.len => self.take_state_slot().inspect(|slot| self.copy_state(own, *slot)),
            _ => None,
        };
        let swa_end = (n / p).saturating_sub(request.swa_from).min(request.swa.len());
        let data = InsertData {
            full: &request.full[..if self.shape.full { n / p } else { 0 }],
            swa_from: request.swa_from,
            swa: &request.swa[..swa_end],
            ssm: state_copy,
        };
        let inserted = match self.tree.insert(root, &tokens[..n], data, cached) {
            Ok(inserted) => inserted,
            Err(at) => {
                if let Some(slot) = state_copy {
                    self.free_into(P_SSM, &[slot]);
                }
                return Err(diverged(at));
            }
        };
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
            // Pages the request already shared are the tree's by construction.
            if page + pages <= old_cached {
                page += pages;
                continue;
            }
            if self.shape.full {
                let own = &mut request.full[page..page + pages];
                shared_changed |=
                    adopt(own, self.tree.full_pages(*node), old_cached.saturating_sub(page), &mut duplicates.full);
            }
            // The request holds SWA pages only from `swa_from` on.
            if let Some(swa) = self.tree.swa_pages(*node)
                && page + pages > request.swa_from
            {
                let skip = request.swa_from.saturating_sub(page);
                let own = &mut request.swa[page + skip - request.swa_from..page + pages - request.swa_from];
                let shared = old_cached.saturating_sub(page + skip);
                shared_changed |= adopt(own, &swa[skip..], shared, &mut duplicates.swa);
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
        self.free_evicted(freed);
        amounts
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
        if writing {
            let mut sorted = pages.to_vec();
            sorted.sort_unstable();
            if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
                return Err(CacheError::InvalidPages("a write names a page twice".into()));
            }
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
        Ok(RequestInfo {
            state: request.state.name(),
            tokens: request.len,
            cached_tokens: request.tree_pages * self.shape.page_size,
            pages: self.pages_of(request),
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
}

/// Makes the request's pages `own` the tree's `canonical` ones: a differing page was a
/// duplicate the request computed and is collected to be freed. Returns whether one of the
/// first `shared` positions (pages the request already shared with the tree) differed, which
/// cannot happen unless something is broken.
fn adopt(own: &mut [u32], canonical: &[u32], shared: usize, duplicates: &mut Vec<u32>) -> bool {
    let mut shared_changed = false;
    for (k, (own, canonical)) in own.iter_mut().zip(canonical).enumerate() {
        if own != canonical {
            shared_changed |= k < shared;
            duplicates.push(*own);
            *own = *canonical;
        }
    }
    shared_changed
}
