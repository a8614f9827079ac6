//! The KV cache of one sequence, owned by the caller (the engine), never by the model.

/// Keys and values of every layer for one sequence: on the CPU rows of `kv_dim` values in position order (f32, or
/// f16 for the quantised backends: [`KvDtype`]); on the GPU the pages this sequence holds in its model's page pool
/// (returned to the pool when the cache is dropped).
#[derive(Debug, Default)]
pub struct SeqKv {
    pub(crate) layers: Vec<LayerKv>,
    pub(crate) len: usize,
    pub(crate) pages: Option<crate::gpu::Pages>,
}

/// What a CPU cache stores keys and values as. cpu-f32 keeps f32 (the reference's arithmetic); cpu-q8/q4 keep f16,
/// which halves what decode attention reads a token and what a context is charged, at a rounding far below their
/// weights' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    /// 4 bytes a value.
    #[default]
    F32,
    /// 2 bytes a value (IEEE half, rounded to nearest even).
    F16,
}

impl KvDtype {
    /// Bytes one key or value element takes.
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }
}

/// One layer's rows of keys or values.
#[derive(Debug, Clone)]
pub(crate) enum KvRows {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
}

impl KvRows {
    fn new(dtype: KvDtype) -> Self {
        match dtype {
            KvDtype::F32 => KvRows::F32(Vec::new()),
            KvDtype::F16 => KvRows::F16(Vec::new()),
        }
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        match self {
            KvRows::F32(v) => v.len(),
            KvRows::F16(v) => v.len(),
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

    fn truncate(&mut self, n: usize) {
        match self {
            KvRows::F32(v) => v.truncate(n),
            KvRows::F16(v) => v.truncate(n),
        }
    }

    fn prefix(&self, n: usize) -> Self {
        match self {
            KvRows::F32(v) => KvRows::F32(v[..n].to_vec()),
            KvRows::F16(v) => KvRows::F16(v[..n].to_vec()),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            KvRows::F32(v) => v.len() * 4,
            KvRows::F16(v) => v.len() * 2,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LayerKv {
    pub(crate) k: KvRows,
    pub(crate) v: KvRows,
}

impl SeqKv {
    /// An empty f32 cache for `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self::with_dtype(n_layers, KvDtype::F32)
    }

    /// An empty cache for `n_layers` layers holding `dtype` values.
    pub fn with_dtype(n_layers: usize, dtype: KvDtype) -> Self {
        let layer = LayerKv { k: KvRows::new(dtype), v: KvRows::new(dtype) };
        SeqKv { layers: vec![layer; n_layers], len: 0, pages: None }
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
                LayerKv { k: l.k.prefix(n * dim), v: l.v.prefix(n * dim) }
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
        self.layers.iter().map(|l| l.k.bytes() + l.v.bytes()).sum::<usize>() + device
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f16_cache_holds_half_the_bytes_and_keeps_prefixes() {
        for dtype in [KvDtype::F32, KvDtype::F16] {
            let mut kv = SeqKv::with_dtype(2, dtype);
            let rows: Vec<f32> = (0..5 * 8).map(|i| i as f32 * 0.25).collect();
            for l in &mut kv.layers {
                l.k.extend(&rows);
                l.v.extend(&rows);
            }
            kv.len = 5;
            assert_eq!(kv.bytes(), 2 * 2 * 40 * dtype.bytes());
            let p = kv.copy_prefix(3).unwrap();
            assert_eq!((p.len(), p.layers[1].k.len()), (3, 24));
            kv.truncate(2);
            assert_eq!((kv.len(), kv.layers[0].v.len(), kv.bytes()), (2, 16, 2 * 2 * 16 * dtype.bytes()));
            if let KvRows::F16(v) = &kv.layers[0].v {
                assert_eq!(v[3].to_f32(), 0.75);
            }
        }
    }
}
