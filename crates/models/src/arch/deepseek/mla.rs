//! Latent attention (DeepSeek's MLA) on the CPU, with the up-projections absorbed: the cache holds per token the
//! normed key/value latent and the rotated shared key (`kv_lora_rank + qk_rope_head_dim` values), never expanded
//! keys and values. A query head's no-position part goes through that head's key up-projection into latent space
//! (`k_b`, `[kv_lora_rank, nope]` per head), so its scores are one dot product with each cached row; the weighted sum
//! of latents goes through the head's value up-projection (`v_b`, `[v, kv_lora_rank]` per head) once per query, not
//! once per cached token.

use crate::config::{MlaConfig, ModelConfig};
use crate::error::ModelError;
use crate::layers::{Linear, Spans};
use crate::state::{KvRows, SeqState};
use crate::tensors::{target, Recorded, Role, Tensors};
use kvad_tensor::cpu::{ops, QMatrix, QType};

/// DeepSeek's inner RMSNorms (`q_a_layernorm`, `kv_a_layernorm`) are built with the class default epsilon, not the
/// config's.
pub(crate) const INNER_EPS: f32 = 1e-6;

/// How the query is projected.
pub(crate) enum QProj {
    /// `q_proj` (no `q_lora_rank`: DeepSeek-V2-Lite).
    Direct(Linear),
    /// `q_b_proj(rms_norm(q_a_proj(x)))`.
    Lora { a: Linear, norm: Vec<f32>, b: Linear },
}

/// One latent attention layer's weights.
pub(crate) struct Mla {
    pub(crate) q: QProj,
    /// `[kv_lora_rank + rope, hidden]`: the latent and the shared rope key.
    pub(crate) kv_a: Linear,
    pub(crate) kv_norm: Vec<f32>,
    /// Per head `[kv_lora_rank, nope]` rows (head `h` at `h·kv_lora_rank`): the key up-projection, transposed.
    pub(crate) k_b: QMatrix,
    /// Per head `[v, kv_lora_rank]` rows (head `h` at `h·v`): the value up-projection.
    pub(crate) v_b: QMatrix,
    pub(crate) o: Linear,
    k_heads: Vec<QMatrix>,
    v_heads: Vec<QMatrix>,
}

/// A matrix built here from f32 values: in the backend's layer format when its rows are whole blocks, else f32.
fn built(t: &mut Tensors<'_>, key: &str, rows: usize, cols: usize, w: &[f32]) -> Result<QMatrix, ModelError> {
    let q = if cols.is_multiple_of(32) { target(t.backend, Role::Layer) } else { QType::F32 };
    let m = QMatrix::quantize(q, rows, cols, w).map_err(|e| ModelError::BadInput(format!("tensor {key}: {e}")))?;
    let m = t.reference(m)?;
    t.record.push((key.to_string(), Recorded::Matrix(m.clone())));
    Ok(m)
}

impl Mla {
    /// Reads layer `a` (`model.layers.<i>.self_attn`).
    pub(crate) fn load(t: &mut Tensors<'_>, a: &str, cfg: &ModelConfig) -> Result<Self, ModelError> {
        let m = cfg.mla.as_ref().expect("a DeepSeek config has latent attention");
        let (h, n) = (cfg.hidden, cfg.n_heads);
        let (r, nope, rope, v) = (m.kv_lora_rank, m.nope_dim, m.rope_dim, m.v_dim);
        let qd = n * (nope + rope);
        let q = match m.q_lora_rank {
            None => QProj::Direct(t.linear(&format!("{a}.q_proj"), qd, h, false)?),
            Some(qr) => QProj::Lora {
                a: t.linear(&format!("{a}.q_a_proj"), qr, h, false)?,
                norm: t.vector(&format!("{a}.q_a_layernorm.weight"), &[qr])?,
                b: t.linear(&format!("{a}.q_b_proj"), qd, qr, false)?,
            },
        };
        let (kb_key, vb_key) = (format!("{a}.k_b.weight"), format!("{a}.v_b.weight"));
        let (k_b, v_b) = if t.cached.is_some() {
            (t.matrix(&kb_key, n * r, nope, Role::Layer)?, t.matrix(&vb_key, n * v, r, Role::Layer)?)
        } else if t.has(&format!("{a}.k_b_proj.weight")) {
            // llama.cpp's converter splits kv_b_proj: k_b `[heads, r, nope]` (transposed), v_b `[heads, v, r]`.
            let kb = t.get(&format!("{a}.k_b_proj.weight"), &[n, r, nope])?;
            let vb = t.get(&format!("{a}.v_b_proj.weight"), &[n, v, r])?;
            (built(t, &kb_key, n * r, nope, &kb)?, built(t, &vb_key, n * v, r, &vb)?)
        } else {
            // As published: kv_b_proj `[heads·(nope + v), r]`, each head's key rows then its value rows.
            let kv_b = t.get(&format!("{a}.kv_b_proj.weight"), &[n * (nope + v), r])?;
            let mut kb = vec![0f32; n * r * nope];
            let mut vb = Vec::with_capacity(n * v * r);
            for head in 0..n {
                let base = head * (nope + v);
                for j in 0..nope {
                    for i in 0..r {
                        kb[(head * r + i) * nope + j] = kv_b[(base + j) * r + i];
                    }
                }
                vb.extend_from_slice(&kv_b[(base + nope) * r..(base + nope + v) * r]);
            }
            (built(t, &kb_key, n * r, nope, &kb)?, built(t, &vb_key, n * v, r, &vb)?)
        };
        let k_heads = (0..n).map(|i| k_b.rows_view(i * r..(i + 1) * r)).collect();
        let v_heads = (0..n).map(|i| v_b.rows_view(i * v..(i + 1) * v)).collect();
        Ok(Mla {
            q,
            kv_a: t.linear(&format!("{a}.kv_a_proj_with_mqa"), r + rope, h, false)?,
            kv_norm: t.vector(&format!("{a}.kv_a_layernorm.weight"), &[r])?,
            k_b,
            v_b,
            o: t.linear(&format!("{a}.o_proj"), h, n * v, false)?,
            k_heads,
            v_heads,
        })
    }

    /// Bytes of weights.
    pub(crate) fn bytes(&self) -> usize {
        let q = match &self.q {
            QProj::Direct(l) => l.bytes(),
            QProj::Lora { a, norm, b } => a.bytes() + norm.len() * 4 + b.bytes(),
        };
        q + self.kv_a.bytes()
            + self.kv_norm.len() * 4
            + self.k_b.bytes().len()
            + self.v_b.bytes().len()
            + self.o.bytes()
    }

    /// Attention of `rows` normed rows over layer `layer` of each sequence's state (extended by the new rows first);
    /// `tables` are each row's cos and sin. Returns `rows × hidden` (after `o_proj`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        m: &MlaConfig,
        n_heads: usize,
        x: &[f32],
        rows: usize,
        tables: &[(Vec<f32>, Vec<f32>)],
        layer: usize,
        caches: &mut [&mut SeqState],
        spans: &Spans,
    ) -> Vec<f32> {
        let (r, nope, rope, vd) = (m.kv_lora_rank, m.nope_dim, m.rope_dim, m.v_dim);
        let qh = nope + rope;
        let mut q = match &self.q {
            QProj::Direct(l) => l.forward(x, rows),
            QProj::Lora { a, norm, b } => {
                let mut qa = a.forward(x, rows);
                ops::rms_norm_inplace(&mut qa, norm, INNER_EPS);
                b.forward(&qa, rows)
            }
        };
        let mut kv = self.kv_a.forward(x, rows);
        let w = r + rope;
        for (row, (cos, sin)) in kv.chunks_exact_mut(w).zip(tables) {
            let (cos, sin): (Vec<f32>, Vec<f32>) =
                cos.iter().zip(sin).map(|(c, s)| (c * m.rope_mscale, s * m.rope_mscale)).unzip();
            ops::rms_norm_inplace(&mut row[..r], &self.kv_norm, INNER_EPS);
            rotate(&mut row[r..], &cos, &sin, m.rope_interleaved);
        }
        for (ri, (cos, sin)) in tables.iter().enumerate() {
            let (cos, sin): (Vec<f32>, Vec<f32>) =
                cos.iter().zip(sin).map(|(c, s)| (c * m.rope_mscale, s * m.rope_mscale)).unzip();
            for head in q[ri * n_heads * qh..(ri + 1) * n_heads * qh].chunks_exact_mut(qh) {
                rotate(&mut head[nope..], &cos, &sin, m.rope_interleaved);
            }
        }
        // Each sequence's new rows into its cache.
        let mut r0 = 0;
        for (s, cache) in caches.iter_mut().enumerate() {
            let n = spans.counts[s];
            cache.latent_layer_mut(layer).rows.extend(&kv[r0 * w..(r0 + n) * w]);
            r0 += n;
        }
        // Queries in latent space: per head, [k_b_h · q_nope | q_pe].
        let mut qfull = vec![0f32; rows * n_heads * w];
        let mut gathered = vec![0f32; rows * nope];
        let mut lat = vec![0f32; rows * r];
        for (head, kb) in self.k_heads.iter().enumerate() {
            for ri in 0..rows {
                let src = &q[(ri * n_heads + head) * qh..];
                gathered[ri * nope..(ri + 1) * nope].copy_from_slice(&src[..nope]);
            }
            kb.matmul(&gathered, rows, &mut lat);
            for ri in 0..rows {
                let dst = &mut qfull[(ri * n_heads + head) * w..(ri * n_heads + head + 1) * w];
                dst[..r].copy_from_slice(&lat[ri * r..(ri + 1) * r]);
                dst[r..].copy_from_slice(&q[(ri * n_heads + head) * qh + nope..(ri * n_heads + head + 1) * qh]);
            }
        }
        // One task per row: every head of a row reads each cached row once (they share the one latent "head").
        let mut jobs = Vec::with_capacity(rows);
        for (s, &n) in spans.counts.iter().enumerate() {
            for t in 0..n {
                jobs.push((s, spans.starts[s] + t));
            }
        }
        let caches_ro: Vec<&SeqState> = caches.iter().map(|c| &**c).collect();
        let mut ctx = vec![0f32; rows * n_heads * w];
        kvad_tensor::cpu::pool::for_each_piece_mut(&mut ctx, n_heads * w, |row, o| {
            let (s, pos) = jobs[row];
            let l = caches_ro[s].layers()[layer].latent().expect("checked against the spec");
            let qv = &qfull[row * n_heads * w..(row + 1) * n_heads * w];
            match &l.rows {
                KvRows::F32(k) => ops::attend_group(qv, k, k, w, 0, 0..pos + 1, w, m.softmax_scale, o),
                KvRows::F16(k) => ops::attend_group(qv, k, k, w, 0, 0..pos + 1, w, m.softmax_scale, o),
            }
        });
        // Back out of latent space per head: v_b_h · (weighted latent).
        let mut att = vec![0f32; rows * n_heads * vd];
        let mut vout = vec![0f32; rows * vd];
        for (head, vb) in self.v_heads.iter().enumerate() {
            for ri in 0..rows {
                lat[ri * r..(ri + 1) * r].copy_from_slice(&ctx[(ri * n_heads + head) * w..][..r]);
            }
            vb.matmul(&lat, rows, &mut vout);
            for ri in 0..rows {
                att[(ri * n_heads + head) * vd..(ri * n_heads + head + 1) * vd]
                    .copy_from_slice(&vout[ri * vd..(ri + 1) * vd]);
            }
        }
        self.o.forward(&att, rows)
    }
}

/// Rotates `x` by position: adjacent pairs (DeepSeek's layout; transformers' complex form) or the two halves.
fn rotate(x: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool) {
    if interleaved {
        for (i, p) in x.chunks_exact_mut(2).enumerate() {
            let (a, b) = (p[0], p[1]);
            p[0] = a * cos[i] - b * sin[i];
            p[1] = b * cos[i] + a * sin[i];
        }
    } else {
        ops::rope_half(x, cos, sin);
    }
}
