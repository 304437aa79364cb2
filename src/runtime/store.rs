//! The page store: whole pages in the sidecar's own memory, up to a byte capacity, evicted least
//! recently used first.
//!
//! A page is an immutable `Arc` buffer. Readers clone the `Arc` under the lock and copy after
//! releasing it, so an eviction or a `clear` during a copy drops only the store's reference: the
//! reader finishes from intact bytes, and no page is ever seen torn.
//!
//! Buffers of dropped pages that no reader holds are kept for reuse by pages of the same size,
//! within the capacity: a fresh allocation costs a page fault per 4 KiB on first touch, which
//! halved SET bandwidth in the benchmark, while a full store evicts one page per page it takes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxBuildHasher;

/// A stored page.
pub type Page = Arc<Vec<u8>>;

/// A namespace handle from [`PageStore::namespace`]: keys of different namespaces never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespace(u32);

struct Entry {
    page: Page,
    /// Position in the LRU order.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    namespaces: HashMap<Vec<u8>, u32, FxBuildHasher>,
    pages: HashMap<Vec<u8>, Entry, FxBuildHasher>,
    /// tick → key, oldest first.
    lru: BTreeMap<u64, Vec<u8>>,
    next_tick: u64,
    bytes: u64,
    /// Reusable buffers by capacity, and their total bytes.
    spare: HashMap<usize, Vec<Vec<u8>>, FxBuildHasher>,
    spare_bytes: u64,
}

impl Inner {
    /// Keeps a dropped page's buffer for reuse when no reader holds it and stored plus spare
    /// bytes stay within the capacity.
    fn recycle(&mut self, page: Page, capacity: u64) {
        let Ok(mut buffer) = Arc::try_unwrap(page) else { return };
        let size = buffer.capacity() as u64;
        if self.bytes + self.spare_bytes + size <= capacity {
            buffer.clear();
            self.spare_bytes += size;
            self.spare.entry(buffer.capacity()).or_default().push(buffer);
        }
    }
}

/// What an insert did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// Whether the page is stored now (false: larger than the whole capacity).
    pub stored: bool,
    /// Pages evicted to make room.
    pub evicted: u64,
}

/// Totals for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of stored pages.
    pub bytes: u64,
    /// Stored pages.
    pub pages: u64,
}

/// The store shared by every connection.
pub struct PageStore {
    capacity: u64,
    inner: Mutex<Inner>,
}

fn store_key(namespace: Namespace, key: &[u8]) -> Vec<u8> {
    let mut full = Vec::with_capacity(4 + key.len());
    full.extend_from_slice(&namespace.0.to_le_bytes());
    full.extend_from_slice(key);
    full
}

impl PageStore {
    /// An empty store holding at most `capacity` bytes of pages.
    pub fn new(capacity: u64) -> Self {
        Self { capacity, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent maps (every update is one insert or
        // remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An empty buffer with room for exactly `size` bytes: a recycled one when there is one.
    pub fn buffer(&self, size: usize) -> Vec<u8> {
        let mut inner = self.lock();
        match inner.spare.get_mut(&size).and_then(Vec::pop) {
            Some(buffer) => {
                inner.spare_bytes -= size as u64;
                buffer
            }
            None => Vec::with_capacity(size),
        }
    }

    /// The handle of a namespace, created on first use.
    pub fn namespace(&self, name: &[u8]) -> Namespace {
        let mut inner = self.lock();
        let next = inner.namespaces.len() as u32;
        Namespace(*inner.namespaces.entry(name.to_vec()).or_insert(next))
    }

    /// Whether each key is stored, without refreshing its age.
    pub fn contains(&self, namespace: Namespace, keys: impl Iterator<Item = impl AsRef<[u8]>>) -> Vec<bool> {
        let inner = self.lock();
        keys.map(|key| inner.pages.contains_key(&store_key(namespace, key.as_ref()))).collect()
    }

    /// The stored pages of `keys` (None: miss), each refreshed as most recently used.
    pub fn get(&self, namespace: Namespace, keys: impl Iterator<Item = impl AsRef<[u8]>>) -> Vec<Option<Page>> {
        let mut inner = self.lock();
        keys.map(|key| {
            let full = store_key(namespace, key.as_ref());
            let tick = inner.next_tick;
            let entry = inner.pages.get_mut(&full)?;
            let old = std::mem::replace(&mut entry.tick, tick);
            let page = Arc::clone(&entry.page);
            inner.next_tick += 1;
            inner.lru.remove(&old);
            inner.lru.insert(tick, full);
            Some(page)
        })
        .collect()
    }

    /// Stores `page` under `key`, evicting the oldest pages until it fits.
    pub fn insert(&self, namespace: Namespace, key: &[u8], page: Page) -> Inserted {
        let size = page.len() as u64;
        if size > self.capacity {
            return Inserted::default();
        }
        let full = store_key(namespace, key);
        let mut inner = self.lock();
        if let Some(old) = inner.pages.remove(&full) {
            inner.lru.remove(&old.tick);
            inner.bytes -= old.page.len() as u64;
            inner.recycle(old.page, self.capacity);
        }
        let mut evicted = 0;
        while inner.bytes + size > self.capacity {
            let Some((_, oldest)) = inner.lru.pop_first() else { break };
            if let Some(entry) = inner.pages.remove(&oldest) {
                inner.bytes -= entry.page.len() as u64;
                evicted += 1;
                inner.recycle(entry.page, self.capacity);
            }
        }
        // Spare buffers give way to stored pages.
        while inner.bytes + inner.spare_bytes + size > self.capacity && inner.spare_bytes > 0 {
            let Some(&largest) = inner.spare.keys().max() else { break };
            if let Some(list) = inner.spare.get_mut(&largest) {
                list.pop();
                if list.is_empty() {
                    inner.spare.remove(&largest);
                }
                inner.spare_bytes -= largest as u64;
            }
        }
        let tick = inner.next_tick;
        inner.next_tick += 1;
        inner.bytes += size;
        inner.lru.insert(tick, full.clone());
        inner.pages.insert(full, Entry { page, tick });
        Inserted { stored: true, evicted }
    }

    /// Drops every page of `namespace`; returns how many.
    pub fn clear(&self, namespace: Namespace) -> u64 {
        let prefix = namespace.0.to_le_bytes();
        let mut inner = self.lock();
        let doomed: Vec<(Vec<u8>, u64, u64)> = inner
            .pages
            .iter()
            .filter(|(key, _)| key.starts_with(&prefix))
            .map(|(key, entry)| (key.clone(), entry.tick, entry.page.len() as u64))
            .collect();
        for (key, tick, size) in &doomed {
            if let Some(entry) = inner.pages.remove(key) {
                inner.bytes -= size;
                inner.recycle(entry.page, self.capacity);
            }
            inner.lru.remove(tick);
        }
        doomed.len() as u64
    }

    /// Bytes and pages stored.
    pub fn usage(&self) -> Usage {
        let inner = self.lock();
        Usage { bytes: inner.bytes, pages: inner.pages.len() as u64 }
    }

    /// The configured capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(byte: u8, len: usize) -> Page {
        Arc::new(vec![byte; len])
    }

    #[test]
    fn namespaces_keep_equal_keys_apart() {
        let store = PageStore::new(1 << 20);
        let (a, b) = (store.namespace(b"model-a"), store.namespace(b"model-b"));
        store.insert(a, b"k", page(1, 4));
        assert_eq!(store.contains(a, [b"k"].iter()), [true]);
        assert_eq!(store.contains(b, [b"k"].iter()), [false]);
        assert_eq!(store.namespace(b"model-a"), a);
    }

    #[test]
    fn the_least_recently_used_page_goes_first() {
        let store = PageStore::new(300);
        let ns = store.namespace(b"ns");
        for key in [b"a", b"b", b"c"] {
            store.insert(ns, key, page(key[0], 100));
        }
        store.get(ns, [b"a"].iter());
        let inserted = store.insert(ns, b"d", page(b'd', 100));
        assert_eq!(inserted, Inserted { stored: true, evicted: 1 });
        assert_eq!(store.contains(ns, [b"a", b"b", b"c", b"d"].iter()), [true, false, true, true]);
        assert_eq!(store.usage(), Usage { bytes: 300, pages: 3 });
    }

    #[test]
    fn a_page_held_by_a_reader_survives_its_eviction_intact() {
        let store = PageStore::new(100);
        let ns = store.namespace(b"ns");
        store.insert(ns, b"a", page(7, 100));
        let held = store.get(ns, [b"a"].iter()).pop().flatten().unwrap();
        store.insert(ns, b"b", page(8, 100));
        assert_eq!(store.contains(ns, [b"a"].iter()), [false]);
        assert!(held.iter().all(|&byte| byte == 7));
    }

    #[test]
    fn dropped_pages_lend_their_buffers_to_new_pages_of_their_size() {
        let store = PageStore::new(200);
        let ns = store.namespace(b"ns");
        store.insert(ns, b"a", page(1, 100));
        let held = store.get(ns, [b"a"].iter()).pop().flatten().unwrap();
        store.clear(ns);
        let fresh = store.buffer(100);
        assert_ne!(fresh.as_ptr(), held.as_ptr(), "a held page is not recycled");
        drop(held);
        let first = Arc::new(vec![2u8; 100]);
        let address = first.as_ptr();
        store.insert(ns, b"b", first);
        store.clear(ns);
        let reused = store.buffer(100);
        assert_eq!((reused.as_ptr(), reused.len()), (address, 0));
        assert_eq!(store.buffer(100).capacity(), 100);
    }

    #[test]
    fn oversized_pages_are_refused_and_clear_is_per_namespace() {
        let store = PageStore::new(10);
        let (a, b) = (store.namespace(b"a"), store.namespace(b"b"));
        assert!(!store.insert(a, b"big", page(0, 11)).stored);
        store.insert(a, b"x", page(0, 5));
        store.insert(b, b"x", page(0, 5));
        assert_eq!(store.clear(a), 1);
        assert_eq!(store.contains(b, [b"x"].iter()), [true]);
        assert_eq!(store.usage(), Usage { bytes: 5, pages: 1 });
    }
}
