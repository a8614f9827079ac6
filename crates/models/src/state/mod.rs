//! A sequence's state, owned by the caller (the engine), never by the model: one entry per layer, each of the kind
//! its layer needs ([`LayerState`]: keys and values, a sliding window of them, a latent, or a recurrent state with
//! snapshots), plus, on a GPU, the pages its paged layers share.
//!
//! Each kind answers what the engine needs without knowing the architecture: bytes (per token and fixed, through
//! the model's [`StateSpec`]), how to append, copy a prefix, and where the sequence can be cut back to — anywhere
//! for keys and values, only at a snapshot for a recurrent layer ([`SeqState::cut_point`]).

mod layer;
mod spec;
#[cfg(test)]
mod tests;

pub(crate) use layer::KvRows;
pub use layer::{DeviceSlot, KvLayer, LatentLayer, LayerState, Recurrence, RecurrentLayer, WindowLayer};
pub use spec::{KvDtype, LayerSpec, StateSpec, SNAPSHOT_SPACING};

use std::any::Any;

/// The pages a sequence holds in a GPU model's page pool, behind a trait the GPU backend implements (so this module
/// names no backend): kept, copied and counted with the sequence.
pub trait DevicePages: std::fmt::Debug + Send + Sync {
    /// Keeps the pages of the first `tokens` positions, returning the rest to the pool.
    fn keep(&mut self, tokens: usize);
    /// A copy of the first `tokens` positions' pages (copied on the device), or None when the pool is short.
    fn copy_prefix(&self, tokens: usize) -> Option<Box<dyn DevicePages>>;
    /// Device bytes held.
    fn bytes(&self) -> usize;
    /// Returns the pages wholly before position `tokens` to the pool (what a sliding window no longer reads);
    /// returns the position up to which rows are gone (a page boundary at or below `tokens`).
    fn release_before(&mut self, tokens: usize) -> usize;
    /// The backend's own type, for its kernels.
    fn as_any(&self) -> &dyn Any;
    /// The backend's own type, mutably (to take pages for new positions).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Every layer's state for one sequence, and how many tokens it holds.
#[derive(Debug, Default)]
pub struct SeqState {
    pub(crate) layers: Vec<LayerState>,
    pub(crate) len: usize,
    pub(crate) pages: Option<Box<dyn DevicePages>>,
}

impl SeqState {
    /// An empty state of this shape, on the CPU.
    pub fn new(spec: &StateSpec) -> Self {
        SeqState { layers: spec.layers.iter().map(LayerState::new).collect(), len: 0, pages: None }
    }

    /// An empty state whose paged layers live in `pages` (a GPU model's).
    pub fn with_pages(spec: &StateSpec, pages: Box<dyn DevicePages>) -> Self {
        SeqState { pages: Some(pages), ..SeqState::new(spec) }
    }

    /// An empty state whose recurrent layers hold their state in device slots, one from `slot` per layer.
    pub fn with_slots(
        spec: &StateSpec,
        mut slot: impl FnMut(&LayerSpec) -> Option<Box<dyn DeviceSlot>>,
    ) -> Option<Self> {
        let mut s = SeqState::new(spec);
        for (l, sp) in s.layers.iter_mut().zip(&spec.layers) {
            if let LayerState::Recurrent(r) = l {
                r.now = Recurrence::Device(slot(sp)?);
            }
        }
        Some(s)
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[LayerState] {
        &self.layers
    }

    /// Whether this state has the shape `spec` says (a cache made by another model does not).
    pub fn matches(&self, spec: &StateSpec) -> bool {
        self.layers.len() == spec.layers.len() && self.layers.iter().zip(&spec.layers).all(|(l, s)| l.is(s))
    }

    /// Whether every layer can be cut back to the first `n` tokens.
    pub fn can_cut(&self, n: usize) -> bool {
        self.layers.iter().all(|l| l.can_cut(n, self.len))
    }

    /// The longest prefix of at most `n` tokens the state can be cut back to: `n` itself where every layer keeps
    /// its tokens (keys and values), else the latest snapshot of the recurrent layers at or below `n` that every
    /// other layer allows too, else 0 (start over).
    pub fn cut_point(&self, n: usize) -> usize {
        let n = n.min(self.len);
        if self.can_cut(n) {
            return n;
        }
        let mut points: Vec<usize> = self.layers.iter().filter_map(LayerState::snapshot_points).flatten().collect();
        points.sort_unstable_by(|a, b| b.cmp(a));
        points.into_iter().find(|&m| m <= n && self.can_cut(m)).unwrap_or(0)
    }

    /// Cuts back to the first `n` tokens; false (and nothing changed) where `n` is not a cut point
    /// ([`SeqState::cut_point`]). A recurrent layer goes back to its snapshot at `n`, or to its start at 0.
    pub fn truncate(&mut self, n: usize) -> bool {
        if n >= self.len {
            return n == self.len;
        }
        if !self.can_cut(n) {
            return false;
        }
        for l in &mut self.layers {
            l.truncate(n, self.len);
        }
        if let Some(p) = &mut self.pages {
            p.keep(n);
        }
        self.len = n;
        true
    }

    /// A copy of the first `n` tokens (a conversation that parts from a kept one), or None where `n` is not a cut
    /// point or the GPU has no room for the copy (pages and slots are copied on the device).
    pub fn copy_prefix(&self, n: usize) -> Option<SeqState> {
        let n = n.min(self.len);
        if !self.can_cut(n) {
            return None;
        }
        let layers = self.layers.iter().map(|l| l.prefix(n, self.len)).collect::<Option<Vec<_>>>()?;
        let pages = match &self.pages {
            None => None,
            Some(p) => Some(p.copy_prefix(n)?),
        };
        Some(SeqState { layers, len: n, pages })
    }

    /// Records every recurrent layer's state at the current length, so the sequence can be cut back here later
    /// (before steps that may be dropped, or where a conversation may part); false when the device had no free
    /// slot (nothing recorded then). Free for states with no recurrent layer.
    pub fn snapshot(&mut self) -> bool {
        let len = self.len;
        let mut all = true;
        for l in &mut self.layers {
            all &= l.snapshot(len);
        }
        all
    }

    /// [`SeqState::snapshot`], then lets go of the earlier snapshots closer than [`SNAPSHOT_SPACING`] tokens to this
    /// one: what the engine records at the end of each prompt and every `SNAPSHOT_SPACING` prompt tokens, so a
    /// conversation holds at most one snapshot a spacing however many turns it has (what admission charges:
    /// [`LayerSpec::bytes_for`]).
    pub fn snapshot_spaced(&mut self) -> bool {
        let len = self.len;
        let ok = self.snapshot();
        for l in &mut self.layers {
            l.thin_snapshots(len, SNAPSHOT_SPACING);
        }
        ok
    }

    /// Lets go of what no query can see any more, in a state whose per-token layers are all sliding windows (a
    /// sliding-window model): every window's rows before `tokens`, at most up to where its next query's window
    /// starts (on a GPU, the pages wholly before that). Nothing for a state with a layer that keeps every token.
    /// Returns the position up to which rows are gone.
    pub fn release_before(&mut self, tokens: usize) -> usize {
        let mut upto = tokens.min(self.len);
        for l in &self.layers {
            match l {
                LayerState::Window(w) => upto = upto.min((self.len + 1).saturating_sub(w.window)),
                LayerState::Recurrent(_) => {}
                LayerState::Kv(_) | LayerState::Latent(_) => return 0,
            }
        }
        if let Some(p) = &mut self.pages {
            upto = p.release_before(upto);
        }
        for l in &mut self.layers {
            if let LayerState::Window(w) = l {
                w.release_before(upto);
            }
        }
        upto
    }

    /// Bytes held, on the CPU and the device, for memory accounting.
    pub fn bytes(&self) -> usize {
        let device = self.pages.as_ref().map_or(0, |p| p.bytes());
        self.layers.iter().map(LayerState::bytes).sum::<usize>() + device
    }

    /// The pages of this state as the backend's own type.
    pub(crate) fn pages_as<T: 'static>(&self) -> Option<&T> {
        self.pages.as_ref()?.as_any().downcast_ref()
    }

    /// The pages of this state as the backend's own type, mutably.
    pub(crate) fn pages_as_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.pages.as_mut()?.as_any_mut().downcast_mut()
    }

    /// Layer `i` as keys and values ([`crate::batch::check_batch`] has checked the shape against the model's).
    pub(crate) fn kv_layer_mut(&mut self, i: usize) -> &mut KvLayer {
        match &mut self.layers[i] {
            LayerState::Kv(l) => l,
            other => unreachable!("layer {i} is {other:?}, checked against the model's spec before the pass"),
        }
    }

    /// Layer `i` as latent rows ([`crate::batch::check_batch`] has checked the shape against the model's).
    pub(crate) fn latent_layer_mut(&mut self, i: usize) -> &mut LatentLayer {
        match &mut self.layers[i] {
            LayerState::Latent(l) => l,
            other => unreachable!("layer {i} is {other:?}, checked against the model's spec before the pass"),
        }
    }

    /// Layer `i`'s recurrent state and convolution tail, on the CPU ([`crate::batch::check_batch`] has checked the
    /// shape against the model's).
    pub(crate) fn recurrence_mut(&mut self, i: usize) -> (&mut [f32], &mut [f32]) {
        match &mut self.layers[i] {
            LayerState::Recurrent(RecurrentLayer { now: Recurrence::Host { state, conv }, .. }) => (state, conv),
            other => unreachable!("layer {i} is {other:?}, checked against the model's spec before the pass"),
        }
    }

    /// Layer `i` as keys and values, read only.
    pub(crate) fn kv_layer(&self, i: usize) -> &KvLayer {
        match &self.layers[i] {
            LayerState::Kv(l) => l,
            other => unreachable!("layer {i} is {other:?}, checked against the model's spec before the pass"),
        }
    }
}
