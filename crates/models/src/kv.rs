//! The KV cache of one sequence, owned by the caller (the engine), never by the model.

/// Keys and values of every layer for one sequence: on the CPU rows of `kv_dim` floats in position order; on the
/// GPU the pages this sequence holds in its model's page pool (returned to the pool when the cache is dropped).
#[derive(Debug, Default)]
pub struct SeqKv {
    pub(crate) layers: Vec<LayerKv>,
    pub(crate) len: usize,
    pub(crate) pages: Option<crate::gpu::Pages>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct LayerKv {
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
}

impl SeqKv {
    /// An empty cache for `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        SeqKv { layers: vec![LayerKv::default(); n_layers], len: 0, pages: None }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops everything after the first `n` tokens (a conversation that diverges from its cached prefix).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        for l in &mut self.layers {
            let dim = l.k.len().checked_div(self.len).unwrap_or(0);
            l.k.truncate(n * dim);
            l.v.truncate(n * dim);
        }
        self.len = n;
        if let Some(p) = &mut self.pages {
            p.keep(n);
        }
    }

    /// A copy of the first `n` tokens (a conversation that parts from a kept one), or None when the GPU's page
    /// pool has no room for it. On the GPU the pages are copied on the device.
    pub fn copy_prefix(&self, n: usize) -> Option<SeqKv> {
        let n = n.min(self.len);
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let dim = l.k.len().checked_div(self.len).unwrap_or(0);
                LayerKv { k: l.k[..n * dim].to_vec(), v: l.v[..n * dim].to_vec() }
            })
            .collect();
        let pages = match &self.pages {
            None => None,
            Some(p) => Some(p.copy_prefix(n)?),
        };
        Some(SeqKv { layers, len: n, pages })
    }

    /// Bytes held, for memory accounting.
    pub fn bytes(&self) -> usize {
        let device = self.pages.as_ref().map_or(0, crate::gpu::Pages::bytes);
        self.layers.iter().map(|l| (l.k.len() + l.v.len()) * 4).sum::<usize>() + device
    }
}
