//! Qwen3-Next's full-attention layer, as transformers' `Qwen3NextAttention` computes it: `q_proj` gives each head
//! its query and an output gate side by side; q and k are RMS-normed per head with zero-centred weights (1 + w);
//! RoPE turns only the first `rope_dim` values of a head; the attention's output is multiplied by `sigmoid(gate)`
//! before `o_proj`. Keys and values are cached like the llama family's.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{attention, AttnShape, Linear, Spans};
use crate::state::SeqState;
use crate::tensors::{Recorded, Tensors};
use kvad_tensor::cpu::ops;

/// One gated attention layer's weights.
pub(crate) struct GatedAttn {
    /// q (with its gate, per head `[q | gate]`), k and v stacked: `[2·q_dim + 2·kv_dim, hidden]`.
    pub(super) qkv: Linear,
    /// `1 + q_norm.weight`.
    pub(super) q_norm: Vec<f32>,
    /// `1 + k_norm.weight`.
    pub(super) k_norm: Vec<f32>,
    pub(super) o: Linear,
}

impl GatedAttn {
    /// Reads layer `p` (`model.layers.<i>.self_attn`).
    pub(crate) fn load(t: &mut Tensors<'_>, p: &str, c: &ModelConfig) -> Result<Self, ModelError> {
        let (h, q, kv, hd) = (c.hidden, c.q_dim(), c.kv_dim(), c.head_dim);
        let qkv = t.stacked(
            &format!("{p}.qkv_proj"),
            &[(&format!("{p}.q_proj"), 2 * q), (&format!("{p}.k_proj"), kv), (&format!("{p}.v_proj"), kv)],
            h,
            false,
        )?;
        Ok(GatedAttn {
            qkv,
            q_norm: norm_weights(t, &format!("{p}.q_norm.weight"), hd)?,
            k_norm: norm_weights(t, &format!("{p}.k_norm.weight"), hd)?,
            o: t.linear(&format!("{p}.o_proj"), h, q, false)?,
        })
    }

    /// Bytes of weights.
    pub(crate) fn bytes(&self) -> usize {
        self.qkv.bytes() + self.o.bytes() + (self.q_norm.len() + self.k_norm.len()) * 4
    }

    /// `rows × hidden` normed input → `rows × hidden`; `tables` the RoPE cos/sin of each row's position.
    pub(crate) fn forward(
        &self,
        c: &ModelConfig,
        x: &[f32],
        tables: &[(Vec<f32>, Vec<f32>)],
        li: usize,
        caches: &mut [&mut SeqState],
        spans: &Spans,
    ) -> Vec<f32> {
        let rows = tables.len();
        let (qd, kvd, hd) = (c.q_dim(), c.kv_dim(), c.head_dim);
        let qkv = self.qkv.forward(x, rows);
        let w = 2 * qd + 2 * kvd;
        let mut q = Vec::with_capacity(rows * qd);
        let mut gate = Vec::with_capacity(rows * qd);
        let mut k = Vec::with_capacity(rows * kvd);
        let mut v = Vec::with_capacity(rows * kvd);
        for row in qkv.chunks_exact(w) {
            for head in row[..2 * qd].chunks_exact(2 * hd) {
                q.extend_from_slice(&head[..hd]);
                gate.extend_from_slice(&head[hd..]);
            }
            k.extend_from_slice(&row[2 * qd..2 * qd + kvd]);
            v.extend_from_slice(&row[2 * qd + kvd..]);
        }
        ops::rms_norm_inplace(&mut q, &self.q_norm, c.norm_eps);
        ops::rms_norm_inplace(&mut k, &self.k_norm, c.norm_eps);
        let rope = tables.first().map_or(0, |t| 2 * t.0.len());
        for (r, (cos, sin)) in tables.iter().enumerate() {
            for head in q[r * qd..(r + 1) * qd].chunks_exact_mut(hd) {
                ops::rope_half(&mut head[..rope], cos, sin);
            }
            for head in k[r * kvd..(r + 1) * kvd].chunks_exact_mut(hd) {
                ops::rope_half(&mut head[..rope], cos, sin);
            }
        }
        let shape = AttnShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: hd, window: None };
        let mut att = attention(shape, li, (&q, &k, &v), caches, spans);
        for (a, g) in att.iter_mut().zip(&gate) {
            *a *= 1.0 / (1.0 + (-g).exp());
        }
        self.o.forward(&att, rows)
    }
}

/// A decoder RMSNorm's multipliers: the checkpoint stores offsets from one (the norm multiplies by `1 + w`), which
/// llama.cpp's converter adds in, so a GGUF holds the multipliers themselves.
pub(crate) fn norm_weights(t: &mut Tensors<'_>, name: &str, dim: usize) -> Result<Vec<f32>, ModelError> {
    let gguf = t.gguf.is_some();
    derived(t, name, &[dim], &[dim], |w| if gguf { w } else { w.into_iter().map(|v| 1.0 + v).collect() })
}

/// A vector kvad changes at load (`f`: the norms' offsets, the decay's `-exp`), read as stored (`stored`, its shape
/// in this checkpoint) and recorded for the quantised cache as changed (`shape`), so a load from the cache takes it
/// as it is, whichever file the cache was made from.
pub(crate) fn derived(
    t: &mut Tensors<'_>,
    name: &str,
    stored: &[usize],
    shape: &[usize],
    f: impl FnOnce(Vec<f32>) -> Vec<f32>,
) -> Result<Vec<f32>, ModelError> {
    if t.cached.is_some() {
        return t.vector(name, shape);
    }
    let v = f(t.get(name, stored)?);
    t.record.push((name.to_string(), Recorded::Vector(v.clone(), shape.to_vec())));
    Ok(v)
}
