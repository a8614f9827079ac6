//! Recurrent layers' states on the GPU: fixed-size slots in one device buffer, one slot per recurrent layer of
//! each sequence and one per snapshot, taken from and returned to a free list as the K/V pages are. A snapshot or
//! a copied prefix is a device-to-device copy of a slot; nothing crosses to the host.

use crate::state::DeviceSlot;
use kvad_tensor::cuda::{DevBuf, Gpu, GpuError};
use std::sync::{Arc, Mutex};

/// A model's slots for recurrent state: `total` slots of `slot_bytes` each.
#[derive(Debug)]
pub struct SlotPool {
    gpu: Arc<Gpu>,
    buf: DevBuf,
    /// `slot_bytes` of zeros: a slot's start state, copied in.
    zeros: DevBuf,
    slot_bytes: usize,
    free: Mutex<Vec<u32>>,
}

impl SlotPool {
    /// A pool of `total` slots of `slot_bytes` each, zeroed.
    pub fn new(gpu: &Arc<Gpu>, total: usize, slot_bytes: usize) -> Result<Arc<SlotPool>, GpuError> {
        Ok(Arc::new(SlotPool {
            gpu: gpu.clone(),
            buf: DevBuf::zeros(gpu, total * slot_bytes)?,
            zeros: DevBuf::zeros(gpu, slot_bytes)?,
            slot_bytes,
            free: Mutex::new((0..total as u32).rev().collect()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A zeroed slot, or None when every slot is held.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        let id = self.lock().pop()?;
        let mut s = Slot { id, pool: self.clone() };
        s.zero();
        Some(s)
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.lock().len()
    }

    /// Slots in all.
    pub fn total(&self) -> usize {
        self.buf.len() / self.slot_bytes.max(1)
    }

    /// The first slot's device address: a kernel finds slot `id` at `base + id · slot_bytes`, so a recorded pass
    /// reads the ids from its metadata rather than addresses.
    pub fn base(&self) -> u64 {
        self.buf.ptr()
    }
}

/// One slot of a pool; it goes back to the pool when dropped.
#[derive(Debug)]
pub struct Slot {
    id: u32,
    pool: Arc<SlotPool>,
}

impl Slot {
    /// Its index in its pool.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Whether it is one of `pool`'s slots.
    pub fn of(&self, pool: &Arc<SlotPool>) -> bool {
        Arc::ptr_eq(&self.pool, pool)
    }

    /// The slot's device address (what a kernel reads and writes).
    pub fn addr(&self) -> u64 {
        self.pool.buf.at(self.id as usize * self.pool.slot_bytes)
    }
}

impl DeviceSlot for Slot {
    fn duplicate(&self) -> Option<Box<dyn DeviceSlot>> {
        let id = self.pool.lock().pop()?;
        let copy = Slot { id, pool: self.pool.clone() };
        self.pool.gpu.copy_device(self.addr(), copy.addr(), self.pool.slot_bytes).ok()?;
        Some(Box::new(copy))
    }

    fn zero(&mut self) {
        // A failed copy leaves the stream in error, which the next pass reports.
        let _ = self.pool.gpu.copy_device(self.pool.zeros.ptr(), self.addr(), self.pool.slot_bytes);
    }

    fn bytes(&self) -> usize {
        self.pool.slot_bytes
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.lock().push(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{KvDtype, LayerSpec, LayerState, Recurrence, SeqState, StateSpec};

    const N: usize = 4;

    fn gpu() -> Option<Arc<Gpu>> {
        match Gpu::shared(None) {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("no GPU found ({e}): the device state tests run on the device (scripts/gpu/test.sh)");
                None
            }
        }
    }

    fn slot_of(s: &SeqState, layer: usize) -> &Slot {
        let LayerState::Recurrent(r) = &s.layers()[layer] else { panic!("layer {layer} is not recurrent") };
        let Recurrence::Device(d) = &r.now else { panic!("layer {layer} is on the host") };
        d.as_any().downcast_ref::<Slot>().expect("a GPU slot")
    }

    /// A toy recurrent layer on the device: `state = 0.5 · state + x(token)`, read and written through the host
    /// (the point is the slots: where they are copied, cut back and returned, not a kernel).
    fn step(gpu: &Arc<Gpu>, s: &mut SeqState, tokens: &[u32]) -> Vec<Vec<f32>> {
        let mut outs = Vec::new();
        let mut stage = DevBuf::zeros(gpu, N * 4).unwrap();
        for &t in tokens {
            let addr = slot_of(s, 1).addr();
            gpu.copy_device(addr, stage.ptr(), N * 4).unwrap();
            let mut v: Vec<f32> = stage.read(gpu, N).unwrap();
            for (i, x) in v.iter_mut().enumerate() {
                *x = 0.5 * *x + ((t as usize * 3 + i) % 7) as f32;
            }
            stage.write_slice(gpu, &v).unwrap();
            gpu.copy_device(stage.ptr(), addr, N * 4).unwrap();
            s.len += 1;
            outs.push(v);
        }
        outs
    }

    #[test]
    fn recurrent_slots_on_the_device_snapshot_restore_copy_and_return() {
        let Some(gpu) = gpu() else { return };
        let pool = SlotPool::new(&gpu, 8, N * 4).unwrap();
        let spec = StateSpec {
            layers: vec![LayerSpec::Kv { kv_dim: 2, dtype: KvDtype::F16 }, LayerSpec::Recurrent { state: N, conv: 0 }],
        };
        let take = |_: &LayerSpec| pool.take().map(|s| Box::new(s) as Box<dyn DeviceSlot>);
        let mut s = SeqState::with_slots(&spec, take).unwrap();
        assert_eq!((pool.available(), s.bytes()), (7, N * 4));
        let t: Vec<u32> = (0..12).map(|i| (i * 5 + 1) % 13).collect();
        let mut all = step(&gpu, &mut s, &t[..5]);
        assert!(s.snapshot());
        assert_eq!((pool.available(), s.bytes()), (6, 2 * N * 4), "a snapshot is a slot of its own");
        all.extend(step(&gpu, &mut s, &t[5..]));
        assert_eq!((s.cut_point(9), s.cut_point(4)), (5, 0));
        let mut copy = s.copy_prefix(5).expect("a copy at the snapshot");
        assert_eq!(step(&gpu, &mut copy, &t[5..]), all[5..].to_vec(), "the copy goes on as the original did");
        assert!(s.copy_prefix(7).is_none() && !s.truncate(7), "no snapshot at 7");
        assert!(s.truncate(5));
        assert_eq!(step(&gpu, &mut s, &t[5..]), all[5..].to_vec(), "cut back to the snapshot, it computes the same");
        assert!(s.truncate(0));
        let mut fresh = SeqState::with_slots(&spec, take).unwrap();
        assert_eq!(step(&gpu, &mut s, &t[..3]), step(&gpu, &mut fresh, &t[..3]), "cut to 0 is a fresh start");
        drop((s, copy, fresh));
        assert_eq!(pool.available(), 8, "every slot goes back to the pool");
    }

    #[test]
    fn a_pool_with_no_free_slot_says_so() {
        let Some(gpu) = gpu() else { return };
        let pool = SlotPool::new(&gpu, 1, 16).unwrap();
        let spec = StateSpec { layers: vec![LayerSpec::Recurrent { state: 4, conv: 0 }] };
        let take = |_: &LayerSpec| pool.take().map(|s| Box::new(s) as Box<dyn DeviceSlot>);
        let mut s = SeqState::with_slots(&spec, take).unwrap();
        assert!(SeqState::with_slots(&spec, take).is_none(), "the only slot is held");
        assert!(!s.snapshot(), "a snapshot needs a free slot");
        assert_eq!(s.bytes(), 16);
    }
}
