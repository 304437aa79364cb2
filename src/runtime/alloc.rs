//! Page (or slot) allocator of one pool: a free stack handing out the lowest pages first, so a
//! fresh request gets contiguous pages and its copies coalesce into few large ones.

/// A page that was freed twice or never handed out: a bug in the caller, reported, not fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("page {page} is not allocated (freed twice, or never handed out)")]
pub(crate) struct NotAllocated {
    pub page: u32,
}

#[derive(Debug)]
pub(crate) struct PageAllocator {
    free: Vec<u32>,
    allocated: Vec<u64>,
    total: usize,
}

impl PageAllocator {
    pub(crate) fn new(total: usize) -> Self {
        let total = total.min(u32::MAX as usize);
        Self { free: (0..total as u32).rev().collect(), allocated: vec![0; total.div_ceil(64)], total }
    }

    pub(crate) fn total(&self) -> usize {
        self.total
    }

    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn is_allocated(&self, page: u32) -> bool {
        (page as usize) < self.total && self.allocated[page as usize / 64] & (1 << (page % 64)) != 0
    }

    /// `n` pages, or none at all when fewer are free.
    pub(crate) fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.free.len() {
            return None;
        }
        let pages = self.free.split_off(self.free.len() - n);
        let mut pages: Vec<u32> = pages.into_iter().rev().collect();
        for page in &pages {
            self.allocated[*page as usize / 64] |= 1 << (page % 64);
        }
        pages.shrink_to_fit();
        Some(pages)
    }

    /// Returns pages to the pool. A page that is not allocated, or named twice, refuses the
    /// whole list and frees nothing.
    pub(crate) fn free(&mut self, pages: &[u32]) -> Result<(), NotAllocated> {
        for (i, &page) in pages.iter().enumerate() {
            if !self.is_allocated(page) {
                for &undo in &pages[..i] {
                    self.allocated[undo as usize / 64] |= 1 << (undo % 64);
                }
                return Err(NotAllocated { page });
            }
            self.allocated[page as usize / 64] &= !(1 << (page % 64));
        }
        self.free.extend(pages.iter().rev());
        Ok(())
    }

    /// Free pages, for invariant checks.
    pub(crate) fn free_pages(&self) -> &[u32] {
        &self.free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_low_pages_first_and_all_or_nothing() {
        let mut pool = PageAllocator::new(8);
        assert_eq!(pool.alloc(3), Some(vec![0, 1, 2]));
        assert_eq!(pool.alloc(6), None, "only 5 are free");
        assert_eq!(pool.free_count(), 5);
        pool.free(&[1]).unwrap();
        assert_eq!(pool.alloc(1), Some(vec![1]), "freed pages come back first");
    }

    #[test]
    fn double_free_is_refused_without_changing_anything() {
        let mut pool = PageAllocator::new(4);
        let pages = pool.alloc(2).unwrap();
        pool.free(&pages[..1]).unwrap();
        assert_eq!(pool.free(&pages), Err(NotAllocated { page: pages[0] }));
        assert!(pool.is_allocated(pages[1]), "the valid page of a refused list stays allocated");
        assert_eq!(pool.free(&[99]), Err(NotAllocated { page: 99 }));
        assert_eq!(pool.free(&[pages[1], pages[1]]), Err(NotAllocated { page: pages[1] }));
        assert!(pool.is_allocated(pages[1]), "a list naming a page twice frees nothing");
    }
}
