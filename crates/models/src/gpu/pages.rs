//! The paged per-token state: one pool of fixed-size pages per model, and per sequence the list of pages it holds.
//! Every paged layer of a sequence shares its page table; each layer has its own width (keys and values, or a
//! latent layer's one row a token), so a page of one position range holds every layer's rows for it.

use kvad_tensor::cuda::{DevBuf, Gpu, GpuError, KV_PAGE};
use std::sync::{Arc, Mutex};

/// Where one layer's pages are: bytes of one page in K and in V (0 for a layer with one row a token, such as a
/// latent), and the offset of the layer's first page in each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerPages {
    k_bytes: usize,
    v_bytes: usize,
    k_at: usize,
    v_at: usize,
}

/// The pages' device memory: per layer, `[pages][k_bytes]` in K and `[pages][v_bytes]` in V.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) gpu: Arc<Gpu>,
    k: DevBuf,
    v: DevBuf,
    layers: Vec<LayerPages>,
}

impl Store {
    /// Zeroed room for `pages` pages of layers whose one page takes `(K bytes, V bytes)` each.
    pub(crate) fn new(gpu: &Arc<Gpu>, pages: usize, widths: &[(usize, usize)]) -> Result<Store, GpuError> {
        let (mut k_at, mut v_at) = (0, 0);
        let mut layers = Vec::with_capacity(widths.len());
        for &(k_bytes, v_bytes) in widths {
            layers.push(LayerPages { k_bytes, v_bytes, k_at, v_at });
            k_at += pages * k_bytes;
            v_at += pages * v_bytes;
        }
        Ok(Store { gpu: gpu.clone(), k: DevBuf::zeros(gpu, k_at)?, v: DevBuf::zeros(gpu, v_at)?, layers })
    }
}

/// Which pages are free, and how many page tables hold each page: a prefix copied from another sequence shares
/// its whole pages (copy on write), so a page goes back to the free list when its last holder lets go.
#[derive(Debug)]
struct Owners {
    free: Vec<u32>,
    holders: Vec<u32>,
}

impl Owners {
    /// `n` free pages, each now held once; None (nothing taken) when fewer are free.
    fn take(&mut self, n: usize) -> Option<Vec<u32>> {
        let at = self.free.len().checked_sub(n)?;
        let ids: Vec<u32> = self.free.drain(at..).rev().collect();
        for &i in &ids {
            self.holders[i as usize] = 1;
        }
        Some(ids)
    }

    /// One holder lets go of page `id` (nothing for a released place).
    fn put(&mut self, id: u32) {
        if id == RELEASED {
            return;
        }
        let h = &mut self.holders[id as usize];
        *h = h.saturating_sub(1);
        if *h == 0 {
            self.free.push(id);
        }
    }
}

/// A model's page pool: which pages are free and who holds the others, what a page costs, and (on the GPU) where
/// the pages are.
#[derive(Debug)]
pub(crate) struct PagePool {
    owners: Mutex<Owners>,
    pub(crate) total: usize,
    /// Device bytes of one page across all layers, K and V.
    pub(crate) page_bytes: usize,
    pub(crate) store: Option<Store>,
}

impl PagePool {
    pub(crate) fn new(total: usize, page_bytes: usize, store: Option<Store>) -> Arc<PagePool> {
        // Pages handed out from the low ids first.
        let free = (0..total as u32).rev().collect();
        Arc::new(PagePool { owners: Mutex::new(Owners { free, holders: vec![0; total] }), total, page_bytes, store })
    }

    /// Address of page `page` of layer `layer` in K and V.
    pub(crate) fn page_addr(&self, layer: usize, page: usize) -> Option<(u64, u64)> {
        let s = self.store.as_ref()?;
        let l = s.layers.get(layer)?;
        Some((s.k.at(l.k_at + page * l.k_bytes), s.v.at(l.v_at + page * l.v_bytes)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pages free now.
    pub(crate) fn available(&self) -> usize {
        self.lock().free.len()
    }

    /// Copies page `src` to page `dst`, every layer's K and V, on the device (nothing to copy without a store).
    fn copy_page(&self, src: u32, dst: u32) -> Option<()> {
        let Some(store) = self.store.as_ref() else { return Some(()) };
        for (layer, l) in store.layers.iter().enumerate() {
            let (sk, sv) = self.page_addr(layer, src as usize)?;
            let (dk, dv) = self.page_addr(layer, dst as usize)?;
            store.gpu.copy_device(sk, dk, l.k_bytes).ok()?;
            if l.v_bytes > 0 {
                store.gpu.copy_device(sv, dv, l.v_bytes).ok()?;
            }
        }
        Some(())
    }
}

/// A page table's place whose page went back to the pool ([`Pages::release_before`]); no kernel reads it (a window
/// never looks that far back).
pub(crate) const RELEASED: u32 = u32::MAX;

/// The pages one sequence holds, in position order; they go back to the pool when dropped (each once its last
/// holder lets go: a copied prefix shares whole pages).
#[derive(Debug)]
pub struct Pages {
    pub(crate) ids: Vec<u32>,
    pub(crate) pool: Arc<PagePool>,
}

impl Pages {
    pub(crate) fn new(pool: Arc<PagePool>) -> Pages {
        Pages { ids: Vec::new(), pool }
    }

    /// Makes positions `from..to` writable: pages for all of them, and the page holding position `from` this
    /// table's own (a page shared with another sequence is copied first, so its other holders keep their rows).
    /// False, and nothing changed, when the pool has too few pages free.
    pub(crate) fn ensure(&mut self, from: usize, to: usize) -> bool {
        let need = to.div_ceil(KV_PAGE).saturating_sub(self.ids.len());
        let mut owners = self.pool.lock();
        let at = from / KV_PAGE;
        let shared = self.ids.get(at).filter(|&&i| i != RELEASED && owners.holders[i as usize] > 1).copied();
        let Some(mut fresh) = owners.take(need + usize::from(shared.is_some())) else { return false };
        if let Some(old) = shared {
            let mine = fresh.remove(0);
            if self.pool.copy_page(old, mine).is_none() {
                owners.put(mine);
                for i in fresh {
                    owners.put(i);
                }
                return false;
            }
            owners.put(old);
            self.ids[at] = mine;
        }
        self.ids.extend(fresh);
        true
    }

    /// Keeps the pages of the first `tokens` positions, letting go of the rest.
    pub(crate) fn keep(&mut self, tokens: usize) {
        let keep = tokens.div_ceil(KV_PAGE);
        if keep < self.ids.len() {
            let mut owners = self.pool.lock();
            for i in self.ids.drain(keep..) {
                owners.put(i);
            }
        }
    }

    /// Lets go of the pages wholly before position `tokens`, their places in the table marked [`RELEASED`]: what a
    /// sliding window no longer reads (every layer of the table a window of at most the positions kept). Returns
    /// how many this table let go of.
    pub(crate) fn release_before(&mut self, tokens: usize) -> usize {
        let whole = (tokens / KV_PAGE).min(self.ids.len());
        let mut owners = self.pool.lock();
        let mut n = 0;
        for i in &mut self.ids[..whole] {
            if *i != RELEASED {
                owners.put(*i);
                *i = RELEASED;
                n += 1;
            }
        }
        n
    }

    /// The first `tokens` positions as a table of their own: the whole pages shared (nothing copied; whoever
    /// writes into a shared page copies it first, [`Pages::ensure`]), a partly filled last page copied on the
    /// device; places released stay released. None when the pool has no page for that copy.
    pub(crate) fn copy_prefix(&self, tokens: usize) -> Option<Pages> {
        let n = tokens.div_ceil(KV_PAGE).min(self.ids.len());
        let whole = (tokens / KV_PAGE).min(n);
        let mut owners = self.pool.lock();
        let mut out = Pages::new(self.pool.clone());
        for &i in &self.ids[..whole] {
            if i != RELEASED {
                owners.holders[i as usize] += 1;
            }
            out.ids.push(i);
        }
        if let Some(&last) = self.ids[whole..n].first() {
            if last == RELEASED {
                out.ids.push(RELEASED);
            } else {
                let Some(mine) = owners.take(1) else {
                    drop(owners);
                    return None;
                };
                out.ids.push(mine[0]);
                if self.pool.copy_page(last, mine[0]).is_none() {
                    drop(owners);
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Device bytes held (a page shared with other sequences counted in each).
    pub fn bytes(&self) -> usize {
        self.ids.iter().filter(|&&i| i != RELEASED).count() * self.pool.page_bytes
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

    fn release_before(&mut self, tokens: usize) -> usize {
        Pages::release_before(self, tokens);
        tokens / KV_PAGE * KV_PAGE
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
        let mut owners = self.pool.lock();
        for i in ids {
            owners.put(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_taken_kept_and_returned() {
        let pool = PagePool::new(4, 100, None);
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(0, KV_PAGE + 1));
        assert_eq!(a.ids, vec![0, 1]);
        assert_eq!(pool.available(), 2);
        let mut b = Pages::new(pool.clone());
        assert!(!b.ensure(0, 3 * KV_PAGE), "three pages asked of two free");
        assert_eq!(pool.available(), 2, "a refused request takes nothing");
        a.keep(KV_PAGE);
        assert_eq!(a.ids, vec![0]);
        assert_eq!(pool.available(), 3);
        assert!(b.ensure(0, 3 * KV_PAGE));
        assert_eq!(b.bytes(), 300);
        drop(b);
        drop(a);
        assert_eq!(pool.available(), 4);
    }

    /// Pages of layers of different widths on the device (keys and values beside a latent layer's one row a
    /// token): a copied prefix holds every layer's bytes of the pages it covers, and nothing of the others.
    #[test]
    fn pages_of_layers_of_different_widths_are_copied_on_the_device() {
        let gpu = match Gpu::shared(None) {
            Ok(g) => g,
            Err(e) => return eprintln!("no GPU found ({e}): the device page tests run on the device"),
        };
        // A K/V layer (64 bytes a page each) and a latent layer (80 bytes a page, no V).
        let widths = [(64usize, 64usize), (80, 0)];
        let store = Store::new(&gpu, 4, &widths).unwrap();
        let pool = PagePool::new(4, 64 + 64 + 80, Some(store));
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(0, KV_PAGE + 1));
        // Each page of each layer filled with its own bytes.
        let fill = |layer: usize, page: usize, which: usize| (layer * 31 + page * 7 + which * 3 + 1) as u8;
        for (layer, &(kb, vb)) in widths.iter().enumerate() {
            for &p in &a.ids {
                let (k, v) = pool.page_addr(layer, p as usize).unwrap();
                for (addr, n, which) in [(k, kb, 0), (v, vb, 1)] {
                    if n > 0 {
                        let src = DevBuf::from_host(&gpu, &vec![fill(layer, p as usize, which); n]).unwrap();
                        gpu.copy_device(src.ptr(), addr, n).unwrap();
                    }
                }
            }
        }
        let b = a.copy_prefix(KV_PAGE + 1).expect("a page free for the copy of the partial one");
        // The whole first page is shared; the partly filled second is copied into a page of its own.
        assert_eq!((b.ids.len(), b.ids[0] == a.ids[0], b.ids[1] == a.ids[1], pool.available()), (2, true, false, 1));
        for (layer, &(kb, vb)) in widths.iter().enumerate() {
            for (&src, &dst) in a.ids.iter().zip(&b.ids) {
                let (k, v) = pool.page_addr(layer, dst as usize).unwrap();
                for (addr, n, which) in [(k, kb, 0), (v, vb, 1)] {
                    if n == 0 {
                        continue;
                    }
                    let out = DevBuf::zeros(&gpu, n).unwrap();
                    gpu.copy_device(addr, out.ptr(), n).unwrap();
                    let got: Vec<u8> = out.read(&gpu, n).unwrap();
                    assert_eq!(got, vec![fill(layer, src as usize, which); n], "layer {layer} page {dst}");
                }
            }
        }
        assert_eq!(b.bytes(), 2 * (64 + 64 + 80));
        drop((a, b));
        assert_eq!(pool.available(), 4);
    }

    /// A sliding window's pages: those wholly behind it go back to the pool, are not counted, are not copied with a
    /// prefix and are not returned twice.
    #[test]
    fn pages_behind_a_window_go_back_to_the_pool_once() {
        let pool = PagePool::new(8, 100, None);
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(0, 5 * KV_PAGE));
        assert_eq!((pool.available(), a.bytes()), (3, 500));
        assert_eq!(a.release_before(3 * KV_PAGE + 5), 3, "three whole pages behind position 53");
        assert_eq!((pool.available(), a.bytes()), (6, 200));
        assert_eq!(a.release_before(3 * KV_PAGE + 9), 0, "nothing released twice");
        assert!(a.ensure(5 * KV_PAGE, 6 * KV_PAGE), "a new page for the next positions");
        assert_eq!((pool.available(), a.bytes(), a.ids.len()), (5, 300, 6));
        a.keep(4 * KV_PAGE);
        assert_eq!((pool.available(), a.bytes()), (7, 100));
        drop(a);
        assert_eq!(pool.available(), 8, "every page back, each once");
    }

    /// On the device: a window's copied prefix holds only the pages still held, with their bytes.
    #[test]
    fn a_windows_prefix_is_copied_without_its_released_pages_on_the_device() {
        let gpu = match Gpu::shared(None) {
            Ok(g) => g,
            Err(e) => return eprintln!("no GPU found ({e}): the device page tests run on the device"),
        };
        let store = Store::new(&gpu, 8, &[(64, 64)]).unwrap();
        let pool = PagePool::new(8, 128, Some(store));
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(0, 5 * KV_PAGE));
        for &p in &a.ids {
            let (k, _) = pool.page_addr(0, p as usize).unwrap();
            let src = DevBuf::from_host(&gpu, &[p as u8 + 1; 64]).unwrap();
            gpu.copy_device(src.ptr(), k, 64).unwrap();
        }
        let kept: Vec<u32> = a.ids[3..].to_vec();
        assert_eq!(a.release_before(3 * KV_PAGE), 3);
        let b = a.copy_prefix(5 * KV_PAGE).expect("room for two pages");
        // Two whole pages, shared: nothing taken from the pool.
        assert_eq!((b.bytes(), b.ids[..3].to_vec(), pool.available()), (256, vec![RELEASED; 3], 6));
        for (&src, &dst) in kept.iter().zip(&b.ids[3..]) {
            let (k, _) = pool.page_addr(0, dst as usize).unwrap();
            let out = DevBuf::zeros(&gpu, 64).unwrap();
            gpu.copy_device(k, out.ptr(), 64).unwrap();
            assert_eq!(out.read::<u8>(&gpu, 64).unwrap(), vec![src as u8 + 1; 64]);
        }
        drop((a, b));
        assert_eq!(pool.available(), 8);
    }

    /// A copied prefix shares whole pages: they go back to the pool when their last holder lets go, and a table
    /// that writes into a shared page gets a copy of its own first, so the other holders keep their rows.
    #[test]
    fn whole_pages_of_a_prefix_are_shared_and_copied_only_when_written() {
        let pool = PagePool::new(8, 100, None);
        let mut a = Pages::new(pool.clone());
        assert!(a.ensure(0, 2 * KV_PAGE + 5));
        assert_eq!(a.ids, vec![0, 1, 2]);
        let mut b = a.copy_prefix(2 * KV_PAGE + 3).unwrap();
        assert_eq!((b.ids.clone(), pool.available()), (vec![0, 1, 3], 4), "two shared, the partial one copied");
        let mut c = a.copy_prefix(2 * KV_PAGE).unwrap();
        assert_eq!((c.ids.clone(), pool.available()), (vec![0, 1], 4), "whole pages only: nothing taken");
        drop(a);
        assert_eq!(pool.available(), 5, "a's own page went back; the shared ones are still held");
        // b writes past its own partial page: nothing copied, one new page (the one a let go of, last freed).
        assert!(b.ensure(2 * KV_PAGE + 3, 3 * KV_PAGE + 1));
        assert_eq!((b.ids.clone(), pool.available()), (vec![0, 1, 3, 2], 4));
        // c cut back into page 1, which b also holds: its next write copies that page first.
        c.keep(KV_PAGE + 4);
        assert!(c.ensure(KV_PAGE + 4, KV_PAGE + 6));
        assert_eq!((c.ids[0], c.ids[1] == b.ids[1], pool.available()), (0, false, 3));
        // A full pool refuses the copy a write would need, and changes nothing.
        let mut d = b.copy_prefix(2 * KV_PAGE).unwrap();
        d.keep(KV_PAGE + 2);
        let mut hog = Pages::new(pool.clone());
        assert!(hog.ensure(0, pool.available() * KV_PAGE));
        assert!(!d.ensure(KV_PAGE + 2, KV_PAGE + 3), "no page to copy the shared one into");
        assert_eq!(d.ids, vec![0, 1]);
        drop((b, c, d, hog));
        assert_eq!(pool.available(), 8, "every page back, each once");
    }
}
