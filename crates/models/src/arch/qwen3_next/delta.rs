//! The gated delta-net layer, as transformers' `Qwen3NextGatedDeltaNet` computes it: one input projection split
//! into q, k, v (through a causal depthwise convolution and SiLU), the output gate z, β and the decay's input a;
//! per value head a `[k_dim, v_dim]` state that decays by `exp(g)`, `g = -exp(A_log)·softplus(a + dt_bias)`, and is
//! corrected by the delta rule with L2-normalised keys; the output read with the L2-normalised, `1/sqrt(k_dim)`
//! scaled query, RMS-normed per head, gated by `silu(z)`, and projected out.
//!
//! The state (f32) and the convolution's last inputs live in the sequence's [`crate::state::Recurrence`]. A decode
//! token runs the recurrence, a prompt the chunked form (`rule.rs`), each value head a task of its own.

use super::attn::derived;
use super::rule;
use crate::config::{DeltaConfig, ModelConfig};
use crate::error::ModelError;
use crate::layers::{Linear, Spans};
use crate::state::SeqState;
use crate::tensors::{target, Recorded, Role, Tensors};
use kvad_tensor::cpu::{pool, QMatrix};

/// One delta-net layer's weights.
pub(crate) struct DeltaNet {
    /// q, k, v, z, b and a stacked in that order, every head's rows together: `[2·kw + 2·vw + 2·nv, hidden]`.
    pub(super) in_proj: Linear,
    /// Convolution taps, `[channel][tap]`, the oldest input's tap first.
    pub(super) conv: Vec<f32>,
    /// `-exp(A_log)` per value head.
    pub(super) neg_a: Vec<f32>,
    /// Added to `a` before the softplus, per value head.
    pub(super) dt_bias: Vec<f32>,
    /// The gated RMSNorm's weight, `[v_dim]`.
    pub(super) norm: Vec<f32>,
    pub(super) out: Linear,
}

impl DeltaNet {
    /// Reads layer `p` (`model.layers.<i>.linear_attn`).
    pub(crate) fn load(t: &mut Tensors<'_>, p: &str, c: &ModelConfig, d: &DeltaConfig) -> Result<Self, ModelError> {
        let h = c.hidden;
        let channels = d.conv_channels();
        // llama.cpp's converter squeezes the convolution to [channels, taps] and stores A as -exp(A_log).
        let gguf = t.gguf.is_some();
        let stored = if gguf { vec![channels, d.conv] } else { vec![channels, 1, d.conv] };
        let conv = derived(t, &format!("{p}.conv1d.weight"), &stored, &[channels, d.conv], |w| w)?;
        let neg_a = derived(t, &format!("{p}.A_log"), &[d.v_heads], &[d.v_heads], |a| {
            if gguf {
                a
            } else {
                a.iter().map(|v| -v.exp()).collect()
            }
        })?;
        Ok(DeltaNet {
            in_proj: Linear::new(in_proj(t, p, h, d)?, None),
            conv,
            neg_a,
            dt_bias: t.vector(&format!("{p}.dt_bias"), &[d.v_heads])?,
            norm: t.vector(&format!("{p}.norm.weight"), &[d.v_dim])?,
            out: t.linear(&format!("{p}.out_proj"), h, d.value_width(), false)?,
        })
    }

    /// Bytes of weights.
    pub(crate) fn bytes(&self) -> usize {
        self.in_proj.bytes()
            + self.out.bytes()
            + (self.conv.len() + self.neg_a.len() + self.dt_bias.len() + self.norm.len()) * 4
    }

    /// `rows × hidden` normed input of the batch's sequences in → `rows × hidden` out, each sequence's state of
    /// layer `li` carried through its tokens: one token by the recurrence, more (a prompt) by the chunked form.
    pub(crate) fn forward(
        &self,
        c: &ModelConfig,
        d: &DeltaConfig,
        x: &[f32],
        li: usize,
        caches: &mut [&mut SeqState],
        spans: &Spans,
    ) -> Vec<f32> {
        let rows = spans.counts.iter().sum();
        let proj = self.in_proj.forward(x, rows);
        let width = proj.len() / rows.max(1);
        let vw = d.value_width();
        let mut o = vec![0f32; rows * vw];
        let mut r = 0;
        for (cache, &n) in caches.iter_mut().zip(&spans.counts) {
            let (state, tail) = cache.recurrence_mut(li);
            self.sequence(c, d, &proj[r * width..(r + n) * width], n, state, tail, &mut o[r * vw..(r + n) * vw]);
            r += n;
        }
        self.out.forward(&o, rows)
    }

    /// One sequence's `n` tokens (`p` their projections): the convolution token by token, then every value head's
    /// rule over all of them, then the gated norm; `o` receives `n × value_width` outputs.
    #[allow(clippy::too_many_arguments)]
    fn sequence(
        &self,
        c: &ModelConfig,
        d: &DeltaConfig,
        p: &[f32],
        n: usize,
        state: &mut [f32],
        tail: &mut [f32],
        o: &mut [f32],
    ) {
        let (kw, vw, ch) = (d.key_width(), d.value_width(), d.conv_channels());
        let (dk, dv, nv) = (d.k_dim, d.v_dim, d.v_heads);
        let width = p.len() / n.max(1);
        let scale = 1.0 / (dk as f32).sqrt();
        // Per key head: its q (normed, scaled) and k (normed), `[n][dk]`; per value head: v, β and g.
        let mut q = vec![0f32; d.k_heads * n * dk];
        let mut k = vec![0f32; d.k_heads * n * dk];
        let mut v = vec![0f32; nv * n * dv];
        let (mut beta, mut g) = (vec![0f32; nv * n], vec![0f32; nv * n]);
        for t in 0..n {
            let row = &p[t * width..(t + 1) * width];
            let mixed = self.convolve(d, &row[..ch], tail);
            for kh in 0..d.k_heads {
                let at = (kh * n + t) * dk;
                l2norm_into(&mixed[kh * dk..(kh + 1) * dk], scale, &mut q[at..at + dk]);
                l2norm_into(&mixed[kw + kh * dk..kw + (kh + 1) * dk], 1.0, &mut k[at..at + dk]);
            }
            let (b, a) = (&row[ch + vw..ch + vw + nv], &row[ch + vw + nv..ch + vw + 2 * nv]);
            for h in 0..nv {
                let at = (h * n + t) * dv;
                v[at..at + dv].copy_from_slice(&mixed[2 * kw + h * dv..2 * kw + (h + 1) * dv]);
                beta[h * n + t] = sigmoid(b[h]);
                g[h * n + t] = self.neg_a[h] * softplus(a[h] + self.dt_bias[h]);
            }
        }
        assert_eq!(state.len(), nv * dk * dv, "a delta-net state of this layer's shape");
        let base = state.as_mut_ptr() as usize;
        let mut heads = vec![0f32; nv * n * dv];
        pool::for_each_piece_mut(&mut heads, n * dv, |h, out| {
            let kh = d.key_head(h);
            let x = rule::HeadTokens {
                q: &q[kh * n * dk..(kh + 1) * n * dk],
                k: &k[kh * n * dk..(kh + 1) * n * dk],
                v: &v[h * n * dv..(h + 1) * n * dv],
                beta: &beta[h * n..(h + 1) * n],
                g: &g[h * n..(h + 1) * n],
                dk,
                dv,
            };
            // SAFETY: value head h's block of the state (checked long enough above); each head is one task's.
            let s = unsafe { head_state(base, h, dk * dv) };
            if n == 1 {
                rule::recurrent(&x, s, out);
            } else {
                rule::chunked(&x, s, out);
            }
        });
        // The gated RMSNorm per token and head: rms over the head, its weight, times silu(z).
        for t in 0..n {
            let z = &p[t * width + ch..t * width + ch + vw];
            for h in 0..nv {
                let src = &heads[(h * n + t) * dv..(h * n + t + 1) * dv];
                let ss = src.iter().map(|v| v * v).sum::<f32>() / dv as f32;
                let inv = 1.0 / (ss + c.norm_eps).sqrt();
                let dst = &mut o[t * vw + h * dv..t * vw + (h + 1) * dv];
                for (((ov, &sv), &w), &zv) in dst.iter_mut().zip(src).zip(&self.norm).zip(&z[h * dv..(h + 1) * dv]) {
                    *ov = w * (sv * inv) * (zv * sigmoid(zv));
                }
            }
        }
    }

    /// The causal depthwise convolution of one token's q/k/v channels over the sequence's last inputs (kept in
    /// `tail`, `[conv − 1][channels]`, oldest first), then SiLU; `tail` moves on by this token.
    fn convolve(&self, d: &DeltaConfig, x: &[f32], tail: &mut [f32]) -> Vec<f32> {
        let (ch, taps) = (d.conv_channels(), d.conv);
        let held = taps - 1;
        let mut out = vec![0f32; ch];
        for (cc, o) in out.iter_mut().enumerate() {
            let w = &self.conv[cc * taps..(cc + 1) * taps];
            let mut acc = 0f32;
            for (j, &wj) in w[..held].iter().enumerate() {
                acc += wj * tail[j * ch + cc];
            }
            acc += w[held] * x[cc];
            *o = acc * sigmoid(acc);
        }
        if held > 0 {
            tail.copy_within(ch.., 0);
            tail[(held - 1) * ch..].copy_from_slice(x);
        }
        out
    }
}

/// Value head `h`'s block of a sequence's state, whose first element is at address `base`.
///
/// # Safety
/// The state holds at least `(h + 1) · len` elements, outlives the slice, and each `h` is handed to one task at a
/// time, so the blocks never overlap.
unsafe fn head_state<'s>(base: usize, h: usize, len: usize) -> &'s mut [f32] {
    // SAFETY: the contract above.
    unsafe { std::slice::from_raw_parts_mut((base as *mut f32).add(h * len), len) }
}

/// `x` L2-normed (as transformers' `l2norm`, ε 1e-6 inside the root) and times `scale`, into `out`.
fn l2norm_into(x: &[f32], scale: f32, out: &mut [f32]) {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
    for (o, v) in out.iter_mut().zip(x) {
        *o = v * inv * scale;
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// PyTorch's softplus (β 1, threshold 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The input projection in kvad's order (q, k, v, z, b, a). Qwen3-Next stores it as two matrices whose rows are
/// grouped by key head (`[q_g, k_g, v_g, z_g]` for each head g, and `[b_g, a_g]`), regrouped here once; Qwen3.5 as
/// four plain ones; llama.cpp's qwen3next GGUF as plain q/k/v and z beside the grouped b/a, its qwen35 GGUF as four
/// plain ones with the value heads tiled (`DeltaConfig::tiled`).
fn in_proj(t: &mut Tensors<'_>, p: &str, h: usize, d: &DeltaConfig) -> Result<QMatrix, ModelError> {
    let (kw, vw, nv) = (d.key_width(), d.value_width(), d.v_heads);
    let key = format!("{p}.in_proj.weight");
    if t.cached.is_some() {
        return t.matrix(&key, 2 * kw + 2 * vw + 2 * nv, h, Role::Layer);
    }
    let (g, dk, r) = (d.k_heads, d.k_dim, nv / d.k_heads);
    let vg = r * d.v_dim;
    let from_gguf = t.gguf.is_some();
    let mut read = |name: &str, rows: usize| t.matrix_unrecorded(&format!("{p}.{name}.weight"), rows, h, Role::Layer);
    let mut parts = Vec::new();
    if d.grouped && !from_gguf {
        let qkvz = read("in_proj_qkvz", 2 * kw + 2 * vw)?;
        let per = 2 * dk + 2 * vg;
        // Within key head i's group: q at 0, k at dk, v at 2·dk, z at 2·dk + vg.
        for (off, len) in [(0, dk), (dk, dk), (2 * dk, vg), (2 * dk + vg, vg)] {
            parts.extend((0..g).map(|i| qkvz.rows_view(i * per + off..i * per + off + len)));
        }
    } else {
        parts.push(read("in_proj_qkv", 2 * kw + vw)?);
        parts.push(read("in_proj_z", vw)?);
    }
    if d.grouped {
        let ba = read("in_proj_ba", 2 * nv)?;
        for off in [0, r] {
            parts.extend((0..g).map(|i| ba.rows_view(i * 2 * r + off..i * 2 * r + off + r)));
        }
    } else {
        parts.push(read("in_proj_b", nv)?);
        parts.push(read("in_proj_a", nv)?);
    }
    // Parts stored in different formats (a mixed GGUF) are brought to the backend's one first.
    if parts.iter().any(|m| m.qtype() != parts[0].qtype()) {
        let q = target(t.backend, Role::Layer);
        for m in parts.iter_mut() {
            *m = m.requantize(q).map_err(|e| ModelError::BadInput(format!("tensor {key}: {e}")))?;
        }
    }
    let m = QMatrix::stack(&parts).map_err(|e| ModelError::BadInput(format!("tensor {key}: {e}")))?;
    let m = t.reference(m)?;
    t.record.push((key, Recorded::Matrix(m.clone())));
    Ok(m)
}
