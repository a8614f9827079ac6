//! The paged KV cache: one pool of fixed-size pages per model, and per sequence the list of pages it holds.

use kvad_tensor::cuda::KV_PAGE;
use std::sync::{Arc, Mutex};

/// A model's page pool: which pages are free, and what a page costs.
#[derive(Debug)]
pub(crate) struct PagePool {
    free: Mutex<Vec<u32>>,
    pub(crate) total: usize,
    /// Device bytes of one page across all layers, K and V.
    pub(crate) page_bytes: usize,
}

impl PagePool {
    pub(crate) fn new(total: usize, page_bytes: usize) -> Arc<PagePool> {
        // Pages handed out from the low ids first.
        let free = (0..total as u32).rev().collect();
        Arc::new(PagePool { free: Mutex::new(free), total, page_bytes })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pages free now.
    pub(crate) fn available(&self) -> usize {
        self.lock().len()
    }
}

/// The pages one sequence holds, in position order; they go back to the pool when dropped.
#[derive(Debug)]
pub struct Pages {
    pub(crate) ids: Vec<u32>,
    pub(crate) pool: Arc<PagePool>,
}

impl Pages {
    pub(crate) fn new(pool: Arc<PagePool>) -> Pages {
        Pages { ids: Vec::new(), pool }
    }

    /// Makes room for `tokens` positions; false (and nothing taken) when the pool has too few pages free.
    pub(crate) fn ensure(&mut self, tokens: usize) -> bool {
        let need = tokens.div_ceil(KV_PAGE).saturating_sub(self.ids.len());
        if need == 0 {
            return true;
        }
        let mut free = self.pool.lock();
        if free.len() < need {
            return false;
        }
        let at = free.len() - need;
        self.ids.extend(free.drain(at..).rev());
        true
    }

    /// Keeps the pages of the first `tokens` positions, returning the rest.
    pub(crate) fn keep(&mut self, tokens: usize) {
        let keep = tokens.div_ceil(KV_PAGE);
        if keep < self.ids.len() {
            let gone: Vec<u32> = self.ids.drain(keep..).collect();
            self.pool.lock().extend(gone);
        }
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        self.ids.len() * self.pool.page_bytes
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        let ids = std::mem::take(&mut self.ids);
        self.pool.lock().extend(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_taken_kept_and_returned() {
        let pool = PagePool::new(4, 100);
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(KV_PAGE + 1));
        assert_eq!(a.ids, vec![0, 1]);
        assert_eq!(pool.available(), 2);
        let mut b = Pages::new(pool.clone());
        assert!(!b.ensure(3 * KV_PAGE), "three pages asked of two free");
        assert_eq!(pool.available(), 2, "a refused request takes nothing");
        a.keep(KV_PAGE);
        assert_eq!(a.ids, vec![0]);
        assert_eq!(pool.available(), 3);
        assert!(b.ensure(3 * KV_PAGE));
        assert_eq!(b.bytes(), 300);
        drop(b);
        drop(a);
        assert_eq!(pool.available(), 4);
    }
}
