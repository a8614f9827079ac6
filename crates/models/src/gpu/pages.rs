//! The paged KV cache: one pool of fixed-size pages per model, and per sequence the list of pages it holds.

use kvad_tensor::cuda::{DevBuf, Gpu, KV_PAGE};
use std::sync::{Arc, Mutex};

/// The pages' device memory: K and V, `[layers][pages][page_layer_bytes]` each.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) k: DevBuf,
    pub(crate) v: DevBuf,
    pub(crate) layers: usize,
    /// Bytes of one page of one layer (K or V alone).
    pub(crate) page_layer_bytes: usize,
}

/// A model's page pool: which pages are free, what a page costs, and (on the GPU) where the pages are.
#[derive(Debug)]
pub(crate) struct PagePool {
    free: Mutex<Vec<u32>>,
    pub(crate) total: usize,
    /// Device bytes of one page across all layers, K and V.
    pub(crate) page_bytes: usize,
    pub(crate) store: Option<Store>,
}

impl PagePool {
    pub(crate) fn new(total: usize, page_bytes: usize, store: Option<Store>) -> Arc<PagePool> {
        // Pages handed out from the low ids first.
        let free = (0..total as u32).rev().collect();
        Arc::new(PagePool { free: Mutex::new(free), total, page_bytes, store })
    }

    /// Address of page `page` of layer `layer` in K and V.
    pub(crate) fn page_addr(&self, layer: usize, page: usize) -> Option<(u64, u64)> {
        let s = self.store.as_ref()?;
        let off = (layer * self.total + page) * s.page_layer_bytes;
        Some((s.k.at(off), s.v.at(off)))
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

    /// A copy of the pages of the first `tokens` positions (copied on the device), or None when the pool is short.
    pub(crate) fn copy_prefix(&self, tokens: usize) -> Option<Pages> {
        let mut out = Pages::new(self.pool.clone());
        if !out.ensure(tokens) {
            return None;
        }
        let store = self.pool.store.as_ref()?;
        for layer in 0..store.layers {
            for (&src, &dst) in self.ids.iter().zip(&out.ids) {
                let (sk, sv) = self.pool.page_addr(layer, src as usize)?;
                let (dk, dv) = self.pool.page_addr(layer, dst as usize)?;
                store.gpu.copy_device(sk, dk, store.page_layer_bytes).ok()?;
                store.gpu.copy_device(sv, dv, store.page_layer_bytes).ok()?;
            }
        }
        Some(out)
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        self.ids.len() * self.pool.page_bytes
    }
}

impl crate::state::DevicePages for Pages {
    fn keep(&mut self, tokens: usize) {
        Pages::keep(self, tokens);
    }

    fn copy_prefix(&self, tokens: usize) -> Option<Box<dyn crate::state::DevicePages>> {
        Some(Box::new(Pages::copy_prefix(self, tokens)?))
    }

    fn bytes(&self) -> usize {
        Pages::bytes(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
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
        let pool = PagePool::new(4, 100, None);
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
