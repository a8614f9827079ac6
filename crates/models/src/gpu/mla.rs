//! Latent attention (DeepSeek's MLA) on the GPU: the query (directly, or through its low-rank product and norm)
//! and the latent products run as the decoder's other products do; the latent kernels (kvad-tensor's `mla.cu`)
//! norm and rotate the new latents into the pages, take the queries into latent space with each head's key
//! up-projection, attend over one cached row a token for every head, and take the result back out with each head's
//! value up-projection; `o_proj` then adds it to the residual stream. The cache holds `kv_lora_rank + rope` values
//! a token a layer, never expanded keys and values.

use crate::config::MlaConfig;
use crate::error::ModelError;
use kvad_tensor::cuda::{mla_splits, Act, DevBuf, DevMatrix, Gpu, GpuError, Meta, MlaArgs, MMA_FEW_MAX_ROWS};
use std::sync::Arc;

/// What a latent layer's kernels need of the pass: the decoder's pass context, cut to this block (as `MoePass`),
/// so this module does not name the blocks that hold it.
pub(crate) struct MlaPass<'a> {
    pub(crate) gpu: &'a Gpu,
    /// Rows in the pass.
    pub(crate) rows: usize,
    /// Products run the GEMV kernels on f32 activations (decode); otherwise bf16.
    pub(crate) gemv: bool,
    pub(crate) meta: Meta,
    /// RoPE inverse frequencies.
    pub(crate) inv_freq: u64,
    /// bf16 copy of a block-format matrix for cuBLAS (prefill).
    pub(crate) wtmp: Option<&'a DevBuf>,
    /// The latent layers' buffers.
    pub(crate) scratch: Option<&'a MlaScratch>,
}

/// How the query is projected on the device.
// One a layer, built once at load (as `AttnBlock`).
#[allow(clippy::large_enum_variant)]
pub(crate) enum MlaQ {
    /// `q_proj`.
    Direct(DevMatrix),
    /// `q_b_proj(rms_norm(q_a_proj(x)))`.
    Lora { a: DevMatrix, norm: DevBuf, b: DevMatrix },
}

/// One latent attention layer's weights on the device.
pub(crate) struct MlaAttn {
    pub(crate) q: MlaQ,
    /// `[r + rope][hidden]`: the latent and the shared rope key.
    pub(crate) kv_a: DevMatrix,
    pub(crate) kv_norm: DevBuf,
    /// `[heads][r][nope]` bf16: each head's key up-projection, transposed ([`super::Uploader::bf16`]).
    pub(crate) k_b: DevBuf,
    /// `[heads][v][r]` bf16: each head's value up-projection.
    pub(crate) v_b: DevBuf,
    pub(crate) o: DevMatrix,
    pub(crate) shape: MlaShape,
}

/// A latent layer's widths (every latent layer of a model has the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MlaShape {
    pub(crate) heads: usize,
    pub(crate) q_rank: Option<usize>,
    pub(crate) r: usize,
    pub(crate) nope: usize,
    pub(crate) rope: usize,
    pub(crate) v: usize,
    scale: f32,
    mscale: f32,
    interleaved: bool,
    /// The inner RMSNorms' epsilon.
    eps: f32,
}

impl MlaShape {
    /// The widths of a model's latent layers: `q_rank` the query's low rank (None: projected directly), `eps` its
    /// inner norms' epsilon.
    pub(crate) fn new(m: &MlaConfig, heads: usize, q_rank: Option<usize>, eps: f32) -> MlaShape {
        MlaShape {
            heads,
            q_rank,
            r: m.kv_lora_rank,
            nope: m.nope_dim,
            rope: m.rope_dim,
            v: m.v_dim,
            scale: m.softmax_scale,
            mscale: m.rope_mscale,
            interleaved: m.rope_interleaved,
            eps,
        }
    }

    /// Bytes of a page of one layer's cache: one f16 row a token.
    pub(crate) fn row_bytes(&self) -> usize {
        (self.r + self.rope) * 2
    }
}

impl MlaAttn {
    /// Why the latent kernels cannot take this layer, if they cannot (the caller names the field).
    pub(crate) fn unsupported(&self) -> Option<String> {
        self.args_for(0, 0, 0, 1).unsupported()
    }

    pub(crate) fn shape(&self) -> MlaShape {
        self.shape
    }

    /// The product that reads the block's input (the first of the query's).
    pub(crate) fn input(&self) -> &DevMatrix {
        match &self.q {
            MlaQ::Direct(m) => m,
            MlaQ::Lora { a, .. } => a,
        }
    }

    pub(crate) fn output(&self) -> &DevMatrix {
        &self.o
    }

    pub(crate) fn products(&self) -> Vec<&DevMatrix> {
        let mut v = match &self.q {
            MlaQ::Direct(m) => vec![m],
            MlaQ::Lora { a, b, .. } => vec![a, b],
        };
        v.extend([&self.kv_a, &self.o]);
        v
    }

    pub(crate) fn bytes(&self) -> usize {
        let q = match &self.q {
            MlaQ::Direct(m) => m.bytes(),
            MlaQ::Lora { a, norm, b } => a.bytes() + norm.len() + b.bytes(),
        };
        q + self.kv_a.bytes() + self.kv_norm.len() + self.k_b.len() + self.v_b.len() + self.o.bytes()
    }

    fn args_for(&self, rows: usize, pages: u64, part: u64, splits: usize) -> MlaArgs {
        let s = self.shape;
        MlaArgs {
            q: 0,
            kv: 0,
            kv_norm: self.kv_norm.ptr(),
            k_b: self.k_b.ptr(),
            v_b: self.v_b.ptr(),
            inv_freq: 0,
            pages,
            qf: 0,
            part,
            out: 0,
            out_bf16: false,
            meta: Meta { row_pos: 0, row_seq: 0, tables: 0, max_pages: 0 },
            rows,
            heads: s.heads,
            r: s.r,
            nope: s.nope,
            rope: s.rope,
            v: s.v,
            splits,
            scale: s.scale,
            mscale: s.mscale,
            interleaved: s.interleaved,
            eps: s.eps,
        }
    }

    /// Queues the block's kernels up to its output product: the query and latent products from `input`, the new
    /// latents into the layer's pages, attention. Returns what `o_proj` reads.
    ///
    /// # Safety
    /// The context's buffers hold the pass's rows at their widths, its metadata this batch, and the page tables
    /// cover every new position.
    pub(crate) unsafe fn issue(&self, p: &MlaPass<'_>, input: Act, pages: u64) -> Result<Act, ModelError> {
        let s = p.scratch.ok_or_else(|| ModelError::Gpu("a latent layer's pass has no latent scratch".into()))?;
        let (gpu, rows) = (p.gpu, p.rows);
        let sh = self.shape;
        // SAFETY: the caller's contract; the latent scratch holds the pass's rows at every width of this shape.
        unsafe {
            match &self.q {
                MlaQ::Direct(m) => gpu.matmul(m, input, rows, s.q.ptr(), 0, false, p.wtmp)?,
                MlaQ::Lora { a, norm, b } => {
                    gpu.matmul(a, input, rows, s.qa.ptr(), 0, false, p.wtmp)?;
                    let qr = sh.q_rank.unwrap_or(0);
                    gpu.rms_norm(s.qa.ptr(), norm.ptr(), s.qa_n.ptr(), rows, qr, sh.eps, !p.gemv)?;
                    gpu.matmul(b, Act::rows(s.qa_n.ptr(), p.gemv), rows, s.q.ptr(), 0, false, p.wtmp)?;
                }
            }
            gpu.matmul(&self.kv_a, input, rows, s.kv.ptr(), 0, false, p.wtmp)?;
            let mut a = self.args_for(rows, pages, s.part.ptr(), mla_splits(sh.heads, rows <= MMA_FEW_MAX_ROWS));
            a.q = s.q.ptr();
            a.kv = s.kv.ptr();
            a.inv_freq = p.inv_freq;
            a.qf = s.qf.ptr();
            a.out = s.att.ptr();
            a.out_bf16 = !p.gemv;
            a.meta = p.meta;
            gpu.mla_attention(&a)?;
        }
        Ok(Act::rows(s.att.ptr(), p.gemv))
    }
}

/// The latent layers' working buffers for passes of up to `rows` rows.
pub(crate) struct MlaScratch {
    q: DevBuf,
    qa: DevBuf,
    qa_n: DevBuf,
    kv: DevBuf,
    qf: DevBuf,
    part: DevBuf,
    att: DevBuf,
}

impl MlaScratch {
    pub(crate) fn new(gpu: &Arc<Gpu>, s: MlaShape, rows: usize) -> Result<MlaScratch, GpuError> {
        let f = 4;
        let w = s.r + s.rope;
        // Decode passes split their keys; prompt passes do not (`mla_splits`).
        let parts = (rows * s.heads).max(MMA_FEW_MAX_ROWS.min(rows) * s.heads * mla_splits(s.heads, true));
        Ok(MlaScratch {
            q: DevBuf::zeros(gpu, rows * s.heads * (s.nope + s.rope) * f)?,
            qa: DevBuf::zeros(gpu, rows * s.q_rank.unwrap_or(0) * f)?,
            qa_n: DevBuf::zeros(gpu, rows * s.q_rank.unwrap_or(0) * f)?,
            kv: DevBuf::zeros(gpu, rows * w * f)?,
            qf: DevBuf::zeros(gpu, rows * s.heads * w * f)?,
            part: DevBuf::zeros(gpu, parts * (s.r + 2) * f)?,
            att: DevBuf::zeros(gpu, rows * s.heads * s.v * f)?,
        })
    }
}
