//! The invariant audit: everything recounted from scratch and compared.

use std::collections::HashMap;

use super::retract::Storage;
use super::*;
use crate::runtime::tree::NIL;

impl Cache {
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
                for (c, pages) in self.copy_pages(request, backup).iter().enumerate() {
                    for &page in pages {
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
