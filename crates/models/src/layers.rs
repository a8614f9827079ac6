//! Shared layers every architecture is built from: linear, RoPE tables, causal attention over a [`SeqKv`].

use crate::config::{ModelConfig, RopeScaling};
use crate::kv::SeqKv;
use kvad_tensor::cpu::{matmul_t, ops};
use rayon::prelude::*;

/// A linear layer `y = x·Wᵀ + b`, weights `[out, in]` row-major in f32.
#[derive(Debug, Clone)]
pub struct Linear {
    w: Vec<f32>,
    b: Option<Vec<f32>>,
    out: usize,
    inp: usize,
}

impl Linear {
    /// Wraps weights already checked to be `out × inp`.
    pub fn new(w: Vec<f32>, b: Option<Vec<f32>>, out: usize, inp: usize) -> Self {
        debug_assert_eq!(w.len(), out * inp);
        Linear { w, b, out, inp }
    }

    /// Stacks several layers with the same input width into one (q/k/v, gate/up), so one pass reads all of them.
    pub fn stack(parts: Vec<Linear>) -> Self {
        let inp = parts[0].inp;
        let out = parts.iter().map(|p| p.out).sum();
        let any_bias = parts.iter().any(|p| p.b.is_some());
        let mut w = Vec::with_capacity(out * inp);
        let mut b = Vec::with_capacity(if any_bias { out } else { 0 });
        for p in parts {
            debug_assert_eq!(p.inp, inp);
            w.extend_from_slice(&p.w);
            if any_bias {
                match &p.b {
                    Some(pb) => b.extend_from_slice(pb),
                    None => b.extend(std::iter::repeat_n(0.0, p.out)),
                }
            }
        }
        Linear { w, b: any_bias.then_some(b), out, inp }
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.out
    }

    /// `rows` input rows to `rows × out`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let mut y = vec![0f32; rows * self.out];
        matmul_t(x, rows, self.inp, &self.w, self.out, &mut y);
        if let Some(b) = &self.b {
            ops::add_bias(&mut y, b);
        }
        y
    }

    /// The weights, for a tied embedding.
    pub fn weights(&self) -> &[f32] {
        &self.w
    }
}

/// Precomputed RoPE inverse frequencies (with Llama 3 scaling applied), computed as PyTorch does in f32.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    /// The frequencies for a config.
    pub fn new(cfg: &ModelConfig) -> Self {
        let d = cfg.head_dim;
        let mut inv_freq: Vec<f32> =
            (0..d / 2).map(|i| (1.0 / cfg.rope_theta.powf((2 * i) as f64 / d as f64)) as f32).collect();
        match &cfg.rope_scaling {
            None => {}
            Some(RopeScaling::Divisors(div)) => {
                for (f, &s) in inv_freq.iter_mut().zip(div) {
                    *f /= s;
                }
            }
            Some(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position }) => {
                let low_wavelen = original_max_position / low_freq_factor;
                let high_wavelen = original_max_position / high_freq_factor;
                for f in inv_freq.iter_mut() {
                    let freq = *f as f64;
                    let wavelen = 2.0 * std::f64::consts::PI / freq;
                    let scaled = if wavelen > low_wavelen { freq / factor } else { freq };
                    let out = if wavelen < high_wavelen || wavelen > low_wavelen {
                        scaled
                    } else {
                        let smooth =
                            (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    };
                    *f = out as f32;
                }
            }
        }
        Rope { inv_freq }
    }

    /// cos and sin for one position, `head_dim / 2` each.
    pub fn table(&self, pos: usize) -> (Vec<f32>, Vec<f32>) {
        self.inv_freq
            .iter()
            .map(|&f| {
                let a = pos as f32 * f;
                (a.cos(), a.sin())
            })
            .unzip()
    }
}

/// Where each sequence's new rows are: how many, and the cache length before this pass.
#[derive(Debug, Clone)]
pub struct Spans {
    /// New tokens per sequence.
    pub counts: Vec<usize>,
    /// Cache length per sequence before this pass (the position of its first new token).
    pub starts: Vec<usize>,
}

/// Geometry of one attention layer.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// A query at position p sees keys `p - window + 1 ..= p`.
    pub window: Option<usize>,
}

/// Appends `k`/`v` rows for the new tokens of each sequence to layer `layer` of its cache, then computes causal
/// attention for every new query row. `q` is `rows × q_dim`, rows of all sequences in batch order; `starts[s]` is
/// the cache length of sequence `s` before this pass. Returns `rows × q_dim`.
pub fn attention(
    shape: AttnShape,
    layer: usize,
    qkv: (&[f32], &[f32], &[f32]),
    caches: &mut [&mut SeqKv],
    spans: &Spans,
) -> Vec<f32> {
    let (q, k, v) = qkv;
    let (counts, starts) = (&spans.counts, &spans.starts);
    let hd = shape.head_dim;
    let q_dim = shape.n_heads * hd;
    let kv_dim = shape.n_kv_heads * hd;
    let mut row0 = 0;
    for (s, cache) in caches.iter_mut().enumerate() {
        let n = counts[s];
        let l = &mut cache.layers[layer];
        l.k.extend_from_slice(&k[row0 * kv_dim..(row0 + n) * kv_dim]);
        l.v.extend_from_slice(&v[row0 * kv_dim..(row0 + n) * kv_dim]);
        row0 += n;
    }
    // One task per (row, head): tasks write disjoint slices of the output.
    let mut jobs = Vec::with_capacity(row0);
    for (s, &n) in counts.iter().enumerate() {
        for t in 0..n {
            jobs.push((s, starts[s] + t));
        }
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let group = shape.n_heads / shape.n_kv_heads;
    let mut out = vec![0f32; row0 * q_dim];
    let caches_ro: Vec<&SeqKv> = caches.iter().map(|c| &**c).collect();
    out.par_chunks_mut(hd).enumerate().for_each(|(idx, o)| {
        let (row, h) = (idx / shape.n_heads, idx % shape.n_heads);
        let (s, pos) = jobs[row];
        let l = &caches_ro[s].layers[layer];
        let kvh = h / group;
        let qv = &q[row * q_dim + h * hd..row * q_dim + (h + 1) * hd];
        let lo = shape.window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let mut scores: Vec<f32> = (lo..=pos)
            .map(|j| ops::dot(qv, &l.k[j * kv_dim + kvh * hd..j * kv_dim + (kvh + 1) * hd]) * scale)
            .collect();
        ops::softmax_inplace(&mut scores);
        for (j, &p) in (lo..=pos).zip(&scores) {
            let vv = &l.v[j * kv_dim + kvh * hd..j * kv_dim + (kvh + 1) * hd];
            for (a, &b) in o.iter_mut().zip(vv) {
                *a += p * b;
            }
        }
    });
    out
}

/// Picks the rows whose logits the mode asks for: per sequence, `(first row, row count)` in the flat batch.
pub fn logit_rows(counts: &[usize], mode: crate::LogitsMode) -> Vec<(usize, usize)> {
    let mut r0 = 0;
    counts
        .iter()
        .map(|&n| {
            let sel = match mode {
                crate::LogitsMode::None => (r0 + n, 0),
                crate::LogitsMode::Last => (r0 + n.saturating_sub(1), n.min(1)),
                crate::LogitsMode::All => (r0, n),
            };
            r0 += n;
            sel
        })
        .collect()
}

/// The output head: its own matrix, or the embedding read as one.
pub enum Head<'a> {
    /// `lm_head.weight`.
    Linear(&'a Linear),
    /// The tied embedding, `[vocab, hidden]`.
    Tied(&'a [f32]),
}

impl Head<'_> {
    /// Logits for `n` normed rows.
    pub fn forward(&self, x: &[f32], n: usize, hidden: usize, vocab: usize) -> Vec<f32> {
        match self {
            Head::Linear(l) => l.forward(x, n),
            Head::Tied(e) => {
                let mut y = vec![0f32; n * vocab];
                matmul_t(x, n, hidden, e, vocab, &mut y);
                y
            }
        }
    }
}

/// Gathers the rows the mode asks for, runs `head` (final norm + projection) once over all of them, and splits the
/// logits back per sequence.
pub fn final_logits(
    x: &[f32],
    hidden: usize,
    counts: &[usize],
    mode: crate::LogitsMode,
    head: impl Fn(&[f32], usize) -> Vec<f32>,
) -> Vec<Vec<f32>> {
    let sel = logit_rows(counts, mode);
    let total: usize = sel.iter().map(|s| s.1).sum();
    if total == 0 {
        return vec![Vec::new(); counts.len()];
    }
    let mut rows = Vec::with_capacity(total * hidden);
    for &(r0, n) in &sel {
        rows.extend_from_slice(&x[r0 * hidden..(r0 + n) * hidden]);
    }
    let logits = head(&rows, total);
    let vocab = logits.len() / total;
    let mut out = Vec::with_capacity(sel.len());
    let mut r = 0;
    for &(_, n) in &sel {
        out.push(logits[r * vocab..(r + n) * vocab].to_vec());
        r += n;
    }
    out
}
