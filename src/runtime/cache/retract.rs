//! Retraction and restore: backups into the host pool or per-request buffers, copied on the
//! copy thread under tickets; device pages are freed only once a backup's copy is done.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::runtime::arena::{Arena, Completed, CopyJob};

pub(super) enum Storage {
    Host { full: Vec<u32>, swa: Vec<u32> },
    Cpu { buffer: Arc<Arena> },
}

pub(super) struct Backup {
    /// Tokens and full pages backed up.
    pub(super) len: usize,
    pub(super) pages: usize,
    /// First page with SWA data in the backup.
    pub(super) swa_from: usize,
    pub(super) has_ssm: bool,
    pub(super) storage: Storage,
    /// Order for host-pool LRU eviction.
    pub(super) seq: u64,
    pub(super) bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TicketKind {
    Backup,
    Restore,
}

pub(super) struct Ticket {
    request: String,
    kind: TicketKind,
    submitted: Instant,
    bytes: usize,
    done: Option<Duration>,
}

impl Cache {
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
                self.pin_request(&request, true, false);
                self.free_request_device(&mut request);
                request.state = State::Retracted;
                if let Some(backup) = &request.backup
                    && matches!(backup.storage, Storage::Host { .. })
                {
                    self.host_lru.insert(backup.seq, request_id.clone());
                }
            }
            TicketKind::Restore => {
                self.pin_request(&request, false, false);
                if let Some(backup) = request.backup.take() {
                    self.free_backup(backup);
                }
                request.state = State::Active;
            }
        }
        self.requests.insert(request_id, request);
    }

    /// Device pages a backup reads (all full pages, the in-window SWA pages, the SSM slot) or a
    /// restore writes (everything the request holds), per component.
    pub(super) fn copy_pages(&self, request: &Request, backup: bool) -> [Vec<u32>; 3] {
        let swa_first =
            if backup { self.window_start_page(request.len).max(request.swa_from) } else { request.swa_from };
        let swa = request.swa[(swa_first - request.swa_from).min(request.swa.len())..].to_vec();
        let ssm = if backup && self.mode == BackupMode::HostPool { None } else { request.ssm };
        [request.full.clone(), swa, ssm.into_iter().collect()]
    }

    /// Pins (or unpins) the pages a copy of `request` touches against the read/write API.
    fn pin_request(&mut self, request: &Request, backup: bool, pinned: bool) {
        for (c, pages) in self.copy_pages(request, backup).iter().enumerate() {
            if let Some(pool) = self.pools[c].as_mut() {
                if pinned { pool.pin(pages) } else { pool.unpin(pages) }
            }
        }
    }

    /// Queues `job` (built for ticket `next_ticket`) and records its ticket; None if the copy
    /// thread has stopped.
    fn submit(&mut self, job: CopyJob, request: &str, kind: TicketKind) -> Option<u64> {
        let ticket = self.next_ticket;
        let bytes = job.bytes();
        if !self.engine.submit(job) {
            return None;
        }
        self.next_ticket += 1;
        self.tickets.insert(
            ticket,
            Ticket { request: request.to_string(), kind, submitted: Instant::now(), bytes, done: None },
        );
        Some(ticket)
    }

    pub(super) fn free_backup(&mut self, backup: Backup) {
        self.host_lru.remove(&backup.seq);
        match backup.storage {
            Storage::Host { full, swa } => {
                let errors: Vec<String> = [("full", &mut self.host_full, full), ("swa", &mut self.host_swa, swa)]
                    .into_iter()
                    .filter_map(|(name, pool, pages)| {
                        pool.as_mut()?.alloc.free(&pages).err().map(|e| format!("host {name} pool: {e}"))
                    })
                    .collect();
                for error in errors {
                    self.violation(&error);
                }
            }
            Storage::Cpu { .. } => self.cpu_backup_bytes -= backup.bytes as u64,
        }
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
                let bytes = job.bytes();
                self.pin_request(&request, true, true);
                let Some(ticket) = self.submit(job, id, TicketKind::Backup) else {
                    self.pin_request(&request, true, false);
                    self.free_backup(backup);
                    self.requests.insert(id.to_string(), request);
                    return Err(CacheError::Internal("the copy thread has stopped".into()));
                };
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
        let [full, swa, ssm] = self.copy_pages(request, true);
        let swa_from = request.pages - swa.len();
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut job = CopyJob::new(self.next_ticket);
        let backup = match self.mode {
            BackupMode::None => {
                return Err("retractionBackup is none: Retracted under decode memory pressure without a KV backup. \
                            Retry later."
                    .into());
            }
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
                let bytes = full.len() * unit(P_FULL) + swa.len() * unit(P_SWA) + ssm.len() * self.ssm_bytes();
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
                for (c, pages) in [(P_FULL, &full), (P_SWA, &swa), (P_SSM, &ssm)] {
                    let Some(pool) = self.pool(c) else { continue };
                    let dst: Vec<usize> = (0..pages.len()).map(|i| offset + i * pool.unit).collect();
                    added &= job.add(&pool.data, &pool.offsets(pages), &buffer, &dst, pool.unit);
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
                    has_ssm: !ssm.is_empty(),
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
        if !added {
            self.free_request_device(request);
            return Err(CacheError::Internal("a restore page lies outside its pool".into()));
        }
        self.pin_request(request, false, true);
        let Some(ticket) = self.submit(job, id, TicketKind::Restore) else {
            self.pin_request(request, false, false);
            self.free_request_device(request);
            return Err(CacheError::Internal("the copy thread has stopped".into()));
        };
        request.state = State::Restoring(ticket);
        Ok(Restoration { ticket, tokens: len, pages: self.pages_of(request) })
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
}
