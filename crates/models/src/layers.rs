//! Shared layers every architecture is built from: linear, RoPE tables, causal attention over a [`SeqState`].

use crate::config::{ModelConfig, RopeScaling};
use crate::state::{KvDtype, KvRows, SeqState};
use kvad_tensor::cpu::attn::{attend_chunk, ChunkShape};
use kvad_tensor::cpu::{ops, QMatrix};

/// A linear layer `y = x·Wᵀ + b`, weights `[out, in]` in the backend's storage format.
#[derive(Debug, Clone)]
pub struct Linear {
    w: QMatrix,
    b: Option<Vec<f32>>,
}

impl Linear {
    /// Wraps a checked matrix and optional bias.
    pub fn new(w: QMatrix, b: Option<Vec<f32>>) -> Self {
        Linear { w, b }
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.w.rows()
    }

    /// The weights.
    pub fn matrix(&self) -> &QMatrix {
        &self.w
    }

    /// The bias.
    pub fn bias(&self) -> Option<&[f32]> {
        self.b.as_deref()
    }

    /// Bytes of weights and bias.
    pub fn bytes(&self) -> usize {
        self.w.bytes().len() + self.b.as_ref().map_or(0, |b| b.len() * 4)
    }

    /// `rows` input rows to `rows × out`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let mut y = vec![0f32; rows * self.w.rows()];
        self.w.matmul(x, rows, &mut y);
        if let Some(b) = &self.b {
            ops::add_bias(&mut y, b);
        }
        y
    }
}

/// A SwiGLU MLP, `down(silu(gate(x)) · up(x))`, with gate and up stacked (`[2·ff, hidden]`) so one pass reads both.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    pub(crate) gate_up: Linear,
    pub(crate) down: Linear,
}

impl SwiGlu {
    /// Bytes of weights.
    pub fn bytes(&self) -> usize {
        self.gate_up.bytes() + self.down.bytes()
    }

    /// `rows × hidden` to `rows × hidden`.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let gu = self.gate_up.forward(x, rows);
        let ff = self.down.matrix().cols();
        let mut act = Vec::with_capacity(rows * ff);
        for r in 0..rows {
            let row = &gu[r * 2 * ff..(r + 1) * 2 * ff];
            let mut g = row[..ff].to_vec();
            ops::silu_mul(&mut g, &row[ff..]);
            act.extend_from_slice(&g);
        }
        self.down.forward(&act, rows)
    }
}

/// Whether a pass's rows are a decode step: one token of each of two or more replies. Only such passes let the CPU
/// kernels round activations to 8 bits (`kvad_tensor::cpu::gemv_rows8`); a prompt's rows never do.
pub fn is_decode_step(batch: &[crate::SeqInput<'_>]) -> bool {
    batch.len() >= 2 && batch.iter().all(|s| s.tokens.len() == 1)
}

/// Whether a model has no head to write logits with: an untied config whose checkpoint ships no `lm_head.weight`,
/// as an embedding model saved from the base model (Qwen3-Embedding's larger sizes) does. It only pools.
pub fn headless(cfg: &crate::ModelConfig, has_head: bool) -> bool {
    !cfg.tie_embeddings && !has_head
}

/// What generating with a headless model ([`headless`]) answers: the field and value, and what it can do instead.
pub fn no_head_error() -> crate::ModelError {
    crate::ModelError::refused(
        "lm_head.weight",
        "absent",
        "the config does not tie the head to the embedding and the checkpoint has no head: an embedding model's \
         checkpoint, which pools (/v1/embeddings) but cannot generate",
    )
}

/// The CPU KV cache type of a backend: f16 for cpu-q8/q4, f32 for cpu-f32 (the reference's arithmetic) and for
/// the GPU backends' CPU side (see [`KvDtype`]). By backend, not by the weights' format, so a quantised backend's
/// f32 reference (`LoadOptions::f32_reference`) keeps the same cache and isolates the kernels.
pub fn kv_dtype_for(backend: kvad_tensor::BackendKind) -> KvDtype {
    match backend {
        kvad_tensor::BackendKind::CpuQ8 | kvad_tensor::BackendKind::CpuQ4 => KvDtype::F16,
        _ => KvDtype::F32,
    }
}

/// Token embeddings in the backend's storage format; a lookup dequantises one row.
#[derive(Debug, Clone)]
pub struct Embedding(pub QMatrix);

impl Embedding {
    /// Appends the rows of `tokens` to `out`.
    pub fn lookup(&self, tokens: &[u32], out: &mut Vec<f32>) {
        let h = self.0.cols();
        for &t in tokens {
            let start = out.len();
            out.resize(start + h, 0.0);
            self.0.dequantize_row(t as usize, &mut out[start..]);
        }
    }
}

/// Precomputed RoPE inverse frequencies (with Llama 3 scaling applied), computed as PyTorch does in f32.
#[derive(Debug, Clone)]
pub struct Rope {
    pub(crate) inv_freq: Vec<f32>,
}

impl Rope {
    /// The frequencies for a config, over a whole head.
    pub fn new(cfg: &ModelConfig) -> Self {
        Self::for_dim(cfg, cfg.head_dim)
    }

    /// The frequencies for `d` rotated values (latent attention rotates only part of a head).
    pub fn for_dim(cfg: &ModelConfig, d: usize) -> Self {
        let mut inv_freq: Vec<f32> =
            (0..d / 2).map(|i| (1.0 / cfg.rope_theta.powf((2 * i) as f64 / d as f64)) as f32).collect();
        match &cfg.rope_scaling {
            None => {}
            Some(RopeScaling::Yarn { factor, original_max_position, beta_fast, beta_slow }) => {
                inv_freq = yarn_inv_freq(cfg.rope_theta, d, *factor, *original_max_position, *beta_fast, *beta_slow);
            }
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

/// YaRN's frequencies as transformers computes them (`_compute_yarn_parameters`, `truncate` on): f32 powers of the
/// base, and a linear ramp between the dimensions where `beta_fast` and `beta_slow` rotations fit in the original
/// context, from kept (extrapolated) to divided by `factor` (interpolated).
fn yarn_inv_freq(base: f64, d: usize, factor: f64, original: f64, beta_fast: f64, beta_slow: f64) -> Vec<f32> {
    let correction = |rot: f64| (d as f64 * (original / (rot * 2.0 * std::f64::consts::PI)).ln()) / (2.0 * base.ln());
    let low = correction(beta_fast).floor().max(0.0);
    let mut high = correction(beta_slow).ceil().min(d as f64 - 1.0);
    if low == high {
        high += 0.001;
    }
    (0..d / 2)
        .map(|i| {
            let pos_freq = (base as f32).powf((2 * i) as f32 / d as f32);
            let extrapolated = 1.0 / pos_freq;
            let interpolated = 1.0 / (factor as f32 * pos_freq);
            let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
            let keep = 1.0 - ramp;
            interpolated * (1.0 - keep) + extrapolated * keep
        })
        .collect()
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
    caches: &mut [&mut SeqState],
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
        let l = cache.kv_layer_mut(layer);
        l.k.extend(&k[row0 * kv_dim..(row0 + n) * kv_dim]);
        l.v.extend(&v[row0 * kv_dim..(row0 + n) * kv_dim]);
        row0 += n;
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let group = shape.n_heads / shape.n_kv_heads;
    // A sequence with enough query rows to fill a tile (a prompt chunk) is read by the tiled kernel; the rest (decode
    // rows, so a reply's arithmetic never depends on who shares its pass) one row at a time.
    let tiled = |n: usize| n > 1 && n * group >= 8;
    // One task per (row, KV head): its query heads share every key and value read; tasks write disjoint slices.
    let mut jobs = Vec::with_capacity(row0);
    for (s, &n) in counts.iter().enumerate() {
        for t in 0..n {
            jobs.push((s, starts[s] + t, tiled(n)));
        }
    }
    let mut out = vec![0f32; row0 * q_dim];
    let caches_ro: Vec<&SeqState> = caches.iter().map(|c| &**c).collect();
    let mut r0 = 0;
    for (s, &n) in counts.iter().enumerate() {
        if tiled(n) {
            let l = caches_ro[s].kv_layer(layer);
            let chunk = ChunkShape {
                rows: n,
                first_pos: starts[s],
                n_heads: shape.n_heads,
                n_kv_heads: shape.n_kv_heads,
                head_dim: hd,
                window: shape.window,
                scale,
            };
            let span = r0 * q_dim..(r0 + n) * q_dim;
            match (&l.k, &l.v) {
                (KvRows::F32(k), KvRows::F32(v)) => attend_chunk(&q[span.clone()], k, v, &chunk, &mut out[span]),
                (KvRows::F16(k), KvRows::F16(v)) => attend_chunk(&q[span.clone()], k, v, &chunk, &mut out[span]),
                _ => unreachable!("a layer's keys and values share one type"),
            }
        }
        r0 += n;
    }
    if jobs.iter().all(|j| j.2) {
        return out;
    }
    kvad_tensor::cpu::pool::for_each_piece_mut(&mut out, group * hd, |idx, o| {
        let (row, kvh) = (idx / shape.n_kv_heads, idx % shape.n_kv_heads);
        let (s, pos, done) = jobs[row];
        if done {
            return;
        }
        let l = caches_ro[s].kv_layer(layer);
        let qv = &q[row * q_dim + kvh * group * hd..row * q_dim + (kvh + 1) * group * hd];
        let lo = shape.window.map_or(0, |w| (pos + 1).saturating_sub(w));
        match (&l.k, &l.v) {
            (KvRows::F32(k), KvRows::F32(v)) => {
                ops::attend_group(qv, k, v, kv_dim, kvh * hd, lo..pos + 1, hd, scale, o)
            }
            (KvRows::F16(k), KvRows::F16(v)) => {
                ops::attend_group(qv, k, v, kv_dim, kvh * hd, lo..pos + 1, hd, scale, o)
            }
            _ => unreachable!("a layer's keys and values share one type"),
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

/// The output head: its own matrix, or the embedding read as one; or none, where a pass returns the normed rows
/// themselves (an embedding model's output, [`crate::CausalLm::forward_hidden`]).
pub enum Head<'a> {
    /// `lm_head.weight`.
    Linear(&'a Linear),
    /// The tied embedding, `[vocab, hidden]`.
    Tied(&'a Embedding),
    /// No product: the final-normed hidden states.
    Hidden,
}

impl Head<'_> {
    /// Logits for `n` normed rows.
    pub fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        match self {
            Head::Linear(l) => l.forward(x, n),
            Head::Tied(e) => {
                let mut y = vec![0f32; n * e.0.rows()];
                e.0.matmul(x, n, &mut y);
                y
            }
            Head::Hidden => x.to_vec(),
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
