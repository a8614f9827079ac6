//! One layer's part of a sequence's state, one kind per [`super::LayerSpec`]: what it holds on the CPU (rows,
//! a ring of recent rows, a recurrent state and its snapshots), and where it can be cut back to.

use super::spec::{KvDtype, LayerSpec};
use std::any::Any;

/// Rows of one per-token vector (keys, values, latents) in position order.
#[derive(Debug, Clone)]
pub(crate) enum KvRows {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

impl KvRows {
    pub(crate) fn new(dtype: KvDtype) -> Self {
        match dtype {
            KvDtype::F32 => KvRows::F32(Vec::new()),
            KvDtype::F16 => KvRows::F16(Vec::new()),
        }
    }

    /// Appends rows given in f32.
    pub(crate) fn extend(&mut self, src: &[f32]) {
        use kvad_tensor::cpu::KvElem;
        match self {
            KvRows::F32(v) => f32::extend_from_f32(v, src),
            KvRows::F16(v) => half::f16::extend_from_f32(v, src),
        }
    }

    fn len_values(&self) -> usize {
        match self {
            KvRows::F32(v) => v.len(),
            KvRows::F16(v) => v.len(),
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            KvRows::F32(v) => v.truncate(n),
            KvRows::F16(v) => v.truncate(n),
        }
    }

    fn drain_front(&mut self, n: usize) {
        match self {
            KvRows::F32(v) => drop(v.drain(..n)),
            KvRows::F16(v) => drop(v.drain(..n)),
        }
    }

    /// The values in `r`, as far as they are held: a GPU state's rows live in its pages and these stay empty.
    fn range(&self, r: std::ops::Range<usize>) -> Self {
        let held = |len: usize| r.start.min(len)..r.end.min(len);
        match self {
            KvRows::F32(v) => KvRows::F32(v[held(v.len())].to_vec()),
            KvRows::F16(v) => KvRows::F16(v[held(v.len())].to_vec()),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            KvRows::F32(v) => v.len() * 4,
            KvRows::F16(v) => v.len() * 2,
        }
    }

    /// Row values as f32 (tests and toy layers).
    #[cfg(test)]
    pub(crate) fn to_f32(&self) -> Vec<f32> {
        match self {
            KvRows::F32(v) => v.clone(),
            KvRows::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
        }
    }
}

/// Keys and values of every token: rows of `dim` on the CPU (on the GPU they live in the sequence's pages and
/// these stay empty).
#[derive(Debug, Clone)]
pub struct KvLayer {
    pub(crate) k: KvRows,
    pub(crate) v: KvRows,
    pub(crate) dim: usize,
}

/// Keys and values of the recent tokens only: rows of positions `first..len`, at least the last `window` of them.
#[derive(Debug, Clone)]
pub struct WindowLayer {
    pub(crate) k: KvRows,
    pub(crate) v: KvRows,
    pub(crate) dim: usize,
    pub(crate) window: usize,
    /// Position of the first row held.
    pub(crate) first: usize,
}

impl WindowLayer {
    /// Appends rows for the tokens after `len` (the sequence's length before them), first letting go of rows no
    /// query from `len` on can see, once twice the window is held (so the cost is paid every `window` tokens).
    pub fn append(&mut self, len: usize, k: &[f32], v: &[f32]) {
        let held = len - self.first;
        if held >= 2 * self.window {
            let oldest_seen = (len + 1).saturating_sub(self.window);
            let drop = oldest_seen - self.first;
            self.k.drain_front(drop * self.dim);
            self.v.drain_front(drop * self.dim);
            self.first = oldest_seen;
        }
        self.k.extend(k);
        self.v.extend(v);
    }
}

impl WindowLayer {
    /// Lets go of the rows before position `upto` (no query from here on sees them).
    pub(crate) fn release_before(&mut self, upto: usize) {
        if upto > self.first {
            let drop = (upto - self.first) * self.dim;
            let held = self.k.len_values();
            self.k.drain_front(drop.min(held));
            self.v.drain_front(drop.min(held));
            self.first = upto;
        }
    }
}

/// Latent attention's per-token compressed vector and RoPE key, one row a token (`latent_dim` values, then
/// `rope_dim`): decode reads the row as one key, its latent part as the value.
#[derive(Debug, Clone)]
pub struct LatentLayer {
    pub(crate) rows: KvRows,
    pub(crate) latent_dim: usize,
    pub(crate) rope_dim: usize,
}

impl LatentLayer {
    /// Values a row holds.
    pub(crate) fn width(&self) -> usize {
        self.latent_dim + self.rope_dim
    }
}

/// A recurrent state's storage on the device (a GPU slot), behind a trait the GPU backend implements, so the state
/// module names no backend.
pub trait DeviceSlot: std::fmt::Debug + Send + Sync {
    /// A copy of this slot's contents in a new slot, or None when the pool has none free.
    fn duplicate(&self) -> Option<Box<dyn DeviceSlot>>;
    /// Sets every value to zero (a sequence's start).
    fn zero(&mut self);
    /// Device bytes held.
    fn bytes(&self) -> usize;
    /// The backend's own type, for its kernels.
    fn as_any(&self) -> &dyn Any;
}

/// Where a recurrent state is.
#[derive(Debug)]
pub enum Recurrence {
    /// On the CPU: the state and the convolution's tail.
    Host {
        /// The recurrent state, f32.
        state: Vec<f32>,
        /// The convolution's last inputs, f32.
        conv: Vec<f32>,
    },
    /// In a device slot holding both.
    Device(Box<dyn DeviceSlot>),
}

impl Recurrence {
    fn duplicate(&self) -> Option<Recurrence> {
        match self {
            Recurrence::Host { state, conv } => Some(Recurrence::Host { state: state.clone(), conv: conv.clone() }),
            Recurrence::Device(s) => s.duplicate().map(Recurrence::Device),
        }
    }

    fn zero(&mut self) {
        match self {
            Recurrence::Host { state, conv } => {
                state.fill(0.0);
                conv.fill(0.0);
            }
            Recurrence::Device(s) => s.zero(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Recurrence::Host { state, conv } => (state.len() + conv.len()) * 4,
            Recurrence::Device(s) => s.bytes(),
        }
    }
}

/// A recurrent layer: its state now, and the states it had at earlier lengths (snapshots), the only places it can
/// be cut back to.
#[derive(Debug)]
pub struct RecurrentLayer {
    pub(crate) now: Recurrence,
    /// (length, state at that length), in increasing length.
    pub(crate) snapshots: Vec<(usize, Recurrence)>,
}

/// One layer's state.
#[derive(Debug)]
pub enum LayerState {
    /// Every token's keys and values.
    Kv(KvLayer),
    /// The recent tokens' keys and values.
    Window(WindowLayer),
    /// Every token's latent and RoPE key.
    Latent(LatentLayer),
    /// A fixed-size recurrent state with snapshots.
    Recurrent(RecurrentLayer),
}

impl LayerState {
    /// An empty layer of this shape, on the CPU.
    pub(crate) fn new(spec: &LayerSpec) -> Self {
        match *spec {
            LayerSpec::Kv { kv_dim, dtype } => {
                LayerState::Kv(KvLayer { k: KvRows::new(dtype), v: KvRows::new(dtype), dim: kv_dim })
            }
            LayerSpec::Window { kv_dim, window, dtype } => LayerState::Window(WindowLayer {
                k: KvRows::new(dtype),
                v: KvRows::new(dtype),
                dim: kv_dim,
                window: window.max(1),
                first: 0,
            }),
            LayerSpec::Latent { latent_dim, rope_dim, dtype } => {
                LayerState::Latent(LatentLayer { rows: KvRows::new(dtype), latent_dim, rope_dim })
            }
            LayerSpec::Recurrent { state, conv } => LayerState::Recurrent(RecurrentLayer {
                now: Recurrence::Host { state: vec![0.0; state], conv: vec![0.0; conv] },
                snapshots: Vec::new(),
            }),
        }
    }

    /// This layer as latent rows, when it is one.
    pub(crate) fn latent(&self) -> Option<&LatentLayer> {
        match self {
            LayerState::Latent(l) => Some(l),
            _ => None,
        }
    }

    /// Whether this layer is of `spec`'s kind (a cache made for another model is refused before a pass).
    pub(crate) fn is(&self, spec: &LayerSpec) -> bool {
        matches!(
            (self, spec),
            (LayerState::Kv(_), LayerSpec::Kv { .. })
                | (LayerState::Window(_), LayerSpec::Window { .. })
                | (LayerState::Latent(_), LayerSpec::Latent { .. })
                | (LayerState::Recurrent(_), LayerSpec::Recurrent { .. })
        )
    }

    /// Whether a sequence of `len` tokens can be cut back to its first `n` in this layer.
    pub(crate) fn can_cut(&self, n: usize, len: usize) -> bool {
        if n > len {
            return false;
        }
        match self {
            LayerState::Kv(_) | LayerState::Latent(_) => true,
            // The next query (at position n) must still see its whole window (or start afresh).
            LayerState::Window(w) => n == 0 || w.first == 0 || n + 1 >= w.first + w.window,
            LayerState::Recurrent(r) => n == len || n == 0 || r.snapshots.iter().any(|(at, _)| *at == n),
        }
    }

    /// Cuts back to the first `n` tokens of `len` ([`LayerState::can_cut`] checked first by the caller).
    pub(crate) fn truncate(&mut self, n: usize, len: usize) {
        match self {
            LayerState::Kv(l) => {
                l.k.truncate(n * l.dim);
                l.v.truncate(n * l.dim);
            }
            LayerState::Window(w) => {
                w.k.truncate(n.saturating_sub(w.first) * w.dim);
                w.v.truncate(n.saturating_sub(w.first) * w.dim);
                w.first = w.first.min(n);
            }
            LayerState::Latent(l) => l.rows.truncate(n * l.width()),
            LayerState::Recurrent(r) => {
                if n < len {
                    match r.snapshots.iter().position(|(at, _)| *at == n) {
                        Some(i) => r.now = r.snapshots.remove(i).1,
                        None => r.now.zero(),
                    }
                }
                r.snapshots.retain(|(at, _)| *at <= n);
            }
        }
    }

    /// A copy of this layer as it was at `n` of `len` tokens, or None when a device slot is not free.
    pub(crate) fn prefix(&self, n: usize, len: usize) -> Option<LayerState> {
        Some(match self {
            LayerState::Kv(l) => {
                LayerState::Kv(KvLayer { k: l.k.range(0..n * l.dim), v: l.v.range(0..n * l.dim), dim: l.dim })
            }
            LayerState::Window(w) => {
                let held = n.saturating_sub(w.first) * w.dim;
                LayerState::Window(WindowLayer {
                    k: w.k.range(0..held),
                    v: w.v.range(0..held),
                    dim: w.dim,
                    window: w.window,
                    first: w.first.min(n),
                })
            }
            LayerState::Latent(l) => LayerState::Latent(LatentLayer {
                rows: l.rows.range(0..n * l.width()),
                latent_dim: l.latent_dim,
                rope_dim: l.rope_dim,
            }),
            LayerState::Recurrent(r) => {
                let now = match r.snapshots.iter().find(|(at, _)| *at == n) {
                    _ if n == len => r.now.duplicate()?,
                    Some((_, s)) => s.duplicate()?,
                    None => {
                        let mut z = r.now.duplicate()?;
                        z.zero();
                        z
                    }
                };
                let mut snapshots = Vec::new();
                for (at, s) in r.snapshots.iter().filter(|(at, _)| *at < n) {
                    snapshots.push((*at, s.duplicate()?));
                }
                LayerState::Recurrent(RecurrentLayer { now, snapshots })
            }
        })
    }

    /// Records a recurrent layer's state at `len` tokens (nothing for the other kinds); false when a device slot is
    /// not free.
    pub(crate) fn snapshot(&mut self, len: usize) -> bool {
        let LayerState::Recurrent(r) = self else { return true };
        let Some(copy) = r.now.duplicate() else { return false };
        r.snapshots.retain(|(at, _)| *at != len);
        r.snapshots.push((len, copy));
        r.snapshots.sort_by_key(|(at, _)| *at);
        true
    }

    /// Drops a recurrent layer's snapshots taken less than `spacing` tokens before the one at `len` (nothing for
    /// the other kinds).
    pub(crate) fn thin_snapshots(&mut self, len: usize, spacing: usize) {
        if let LayerState::Recurrent(r) = self {
            r.snapshots.retain(|(at, _)| *at == len || *at + spacing <= len);
        }
    }

    /// Bytes held on the CPU or the device by this layer (pages shared by the layers are counted by the sequence).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            LayerState::Kv(l) => l.k.bytes() + l.v.bytes(),
            LayerState::Window(w) => w.k.bytes() + w.v.bytes(),
            LayerState::Latent(l) => l.rows.bytes(),
            LayerState::Recurrent(r) => r.now.bytes() + r.snapshots.iter().map(|(_, s)| s.bytes()).sum::<usize>(),
        }
    }

    /// The lengths a recurrent layer can be cut back to below `len` (None for the kinds that can be cut anywhere).
    pub(crate) fn snapshot_points(&self) -> Option<Vec<usize>> {
        match self {
            LayerState::Recurrent(r) => Some(r.snapshots.iter().map(|(at, _)| *at).collect()),
            _ => None,
        }
    }
}
