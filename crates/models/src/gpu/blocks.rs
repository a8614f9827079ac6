//! The blocks a GPU layer is made of: a norm, an attention block, a norm, an MLP block, each with its weights and
//! its kernels. A new kind of attention (latent) or MLP (mixture of experts) is a new variant here with its own
//! kernels; the decoder's pass only asks a block for the product that reads its input, the product that writes the
//! residual stream, and its kernels in between.

use super::delta::{DeltaAttn, DeltaPass, DeltaScratch, DeltaShape, GatedAttn};
use super::mla::{MlaAttn, MlaPass, MlaScratch, MlaShape};
use super::moe::{MoeMlp, MoePass, MoeScratch, MoeShape};
use crate::config::ModelConfig;
use crate::error::ModelError;
use kvad_tensor::cuda::{Act, Attn, DevBuf, DevMatrix, Gpu, Meta, QkvPost, SlotTable};

/// A norm before attention, before the MLP, and at the end.
pub(crate) enum Norm {
    /// RMSNorm with its weight.
    Rms(DevBuf),
    /// LayerNorm with weight and bias.
    Layer(DevBuf, DevBuf),
}

impl Norm {
    /// The RMSNorm's weight (a product's norm tail takes only RMSNorm).
    pub(crate) fn rms_weight(&self) -> Option<u64> {
        match self {
            Norm::Rms(w) => Some(w.ptr()),
            Norm::Layer(..) => None,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Norm::Rms(w) => w.len(),
            Norm::Layer(w, b) => w.len() + b.len(),
        }
    }
}

/// Grouped-query attention over the paged keys and values, with its projections: q, k and v stacked (Qwen2's
/// bias; Qwen3's per-head q/k RMSNorm), RoPE, and the output product.
pub(crate) struct GqaAttn {
    pub(crate) qkv: DevMatrix,
    pub(crate) qkv_bias: Option<DevBuf>,
    pub(crate) q_norm: Option<DevBuf>,
    pub(crate) k_norm: Option<DevBuf>,
    pub(crate) o: DevMatrix,
    pub(crate) o_bias: Option<DevBuf>,
}

/// A layer's attention.
// One a layer, built once at load and matched per pass: its size costs nothing, a box would cost a pointer chase.
#[allow(clippy::large_enum_variant)]
pub(crate) enum AttnBlock {
    /// Grouped-query attention over paged K/V.
    Gqa(GqaAttn),
    /// Latent attention over one paged row a token (`gpu/mla.rs`).
    Mla(MlaAttn),
    /// A gated delta net, its state in the sequence's slot (`gpu/delta.rs`).
    Delta(DeltaAttn),
    /// Gated attention over paged K/V (`gpu/delta.rs`).
    Gated(GatedAttn),
}

/// The MLP's activation between its two products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `down(silu(gate) · up)`, gate and up stacked in one matrix.
    SwiGlu,
    /// `proj(gelu_tanh(fc))`.
    Gelu,
}

/// A dense MLP: one product up, the activation, one product down.
pub(crate) struct DenseMlp {
    pub(crate) act: Activation,
    pub(crate) up: DevMatrix,
    pub(crate) up_bias: Option<DevBuf>,
    pub(crate) down: DevMatrix,
    pub(crate) down_bias: Option<DevBuf>,
}

/// A layer's MLP.
// One a layer, built once at load (as `AttnBlock`).
#[allow(clippy::large_enum_variant)]
pub(crate) enum MlpBlock {
    /// A dense MLP.
    Dense(DenseMlp),
    /// Routed experts (`gpu/moe.rs`): it adds its output to the residual stream itself.
    Moe(MoeMlp),
}

/// One pre-norm layer: `x += attn(norm1(x)); x += mlp(norm2(x))`.
pub(crate) struct Layer {
    pub(crate) norm1: Norm,
    pub(crate) attn: AttnBlock,
    pub(crate) norm2: Norm,
    pub(crate) mlp: MlpBlock,
}

/// What a block's kernels work with in one pass: the shapes, the metadata and the scratch buffers they read and
/// write.
pub(crate) struct PassCtx<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) cfg: &'a ModelConfig,
    /// Rows in the pass.
    pub(crate) rows: usize,
    /// Sequences in the pass.
    pub(crate) seqs: usize,
    /// Products run kvad's GEMV kernels on f32 activations (decode); otherwise bf16 for tensor cores and cuBLAS.
    pub(crate) gemv: bool,
    pub(crate) meta: Meta,
    /// Tensor-core attention tiles (address, count; 0 tiles: the key-stream kernels).
    pub(crate) tiles: (u64, usize),
    /// RoPE inverse frequencies (0: no RoPE).
    pub(crate) inv_freq: u64,
    /// bf16 copy of a block-format matrix for cuBLAS.
    pub(crate) wtmp: Option<&'a DevBuf>,
    pub(crate) qkv: u64,
    pub(crate) q: u64,
    pub(crate) att: &'a DevBuf,
    pub(crate) up: u64,
    pub(crate) act: &'a DevBuf,
    /// The residual stream (`rows × hidden` f32), which a routed layer adds its output to itself.
    pub(crate) x: u64,
    /// The routed layers' buffers (None: no layer routes).
    pub(crate) moe: Option<&'a MoeScratch>,
    /// The latent layers' buffers (None: no layer is latent).
    pub(crate) mla: Option<&'a MlaScratch>,
    /// The recurrent slots of the pass's sequences.
    pub(crate) slots: SlotTable,
    /// The delta-net and gated attention layers' buffers (None: no such layer).
    pub(crate) delta: Option<&'a DeltaScratch>,
}

fn ptr(b: &Option<DevBuf>) -> u64 {
    b.as_ref().map_or(0, DevBuf::ptr)
}

fn vec_bytes(b: &Option<DevBuf>) -> usize {
    b.as_ref().map_or(0, DevBuf::len)
}

impl AttnBlock {
    /// The product that reads the block's (normed) input.
    pub(crate) fn input(&self) -> &DevMatrix {
        match self {
            AttnBlock::Gqa(a) => &a.qkv,
            AttnBlock::Mla(a) => a.input(),
            AttnBlock::Delta(a) => &a.in_proj,
            AttnBlock::Gated(a) => &a.qkv,
        }
    }

    /// Device bytes of one page of this layer's cache, in K and in V (a latent layer's one row a token in K).
    pub(crate) fn page_bytes(&self, c: &ModelConfig) -> (usize, usize) {
        match self {
            AttnBlock::Gqa(_) | AttnBlock::Gated(_) => {
                let b = kvad_tensor::cuda::KV_PAGE * c.kv_dim() * 2;
                (b, b)
            }
            AttnBlock::Mla(a) => (kvad_tensor::cuda::KV_PAGE * a.shape().row_bytes(), 0),
            AttnBlock::Delta(_) => (0, 0),
        }
    }

    /// A latent layer's widths (None: not latent).
    pub(crate) fn mla_shape(&self) -> Option<MlaShape> {
        match self {
            AttnBlock::Mla(a) => Some(a.shape()),
            _ => None,
        }
    }

    /// A delta-net layer's widths (None: not one).
    pub(crate) fn delta_shape(&self) -> Option<DeltaShape> {
        match self {
            AttnBlock::Delta(a) => Some(a.shape),
            _ => None,
        }
    }

    /// Whether the product before it may norm its input in its own tail, in the form its input product reads:
    /// a latent block reads its input with two products, so its norm runs as a kernel.
    pub(crate) fn takes_tail_norm(&self) -> bool {
        !matches!(self, AttnBlock::Mla(_))
    }

    /// The product that adds the block's output to the residual stream, and its bias (0: none).
    pub(crate) fn output(&self) -> (&DevMatrix, u64) {
        match self {
            AttnBlock::Gqa(a) => (&a.o, ptr(&a.o_bias)),
            AttnBlock::Mla(a) => (a.output(), 0),
            AttnBlock::Delta(a) => (&a.out, 0),
            AttnBlock::Gated(a) => (&a.o, 0),
        }
    }

    /// Every weight matrix (for kernel choices and the scratch's sizes).
    pub(crate) fn products(&self) -> Vec<&DevMatrix> {
        match self {
            AttnBlock::Gqa(a) => vec![&a.qkv, &a.o],
            AttnBlock::Mla(a) => a.products(),
            AttnBlock::Delta(a) => vec![&a.in_proj, &a.out],
            AttnBlock::Gated(a) => vec![&a.qkv, &a.o],
        }
    }

    /// Device bytes of its weights.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            AttnBlock::Gqa(a) => {
                a.qkv.bytes()
                    + a.o.bytes()
                    + vec_bytes(&a.qkv_bias)
                    + vec_bytes(&a.o_bias)
                    + vec_bytes(&a.q_norm)
                    + vec_bytes(&a.k_norm)
            }
            AttnBlock::Mla(a) => a.bytes(),
            AttnBlock::Delta(a) => a.bytes(),
            AttnBlock::Gated(a) => a.bytes(),
        }
    }

    /// Queues the block's kernels up to its output product: q/k/v from `input`, the new keys and values into the
    /// layer's pages `(k, v)`, attention. Returns what the output product reads.
    ///
    /// # Safety
    /// The context's buffers hold the pass's rows at their widths, its metadata this batch, and the page tables
    /// cover every new position.
    pub(crate) unsafe fn issue(&self, p: &PassCtx<'_>, input: Act, pages: (u64, u64)) -> Result<Act, ModelError> {
        let l = match self {
            AttnBlock::Gqa(l) => l,
            AttnBlock::Mla(a) => {
                let mp = MlaPass {
                    gpu: p.gpu,
                    rows: p.rows,
                    gemv: p.gemv,
                    meta: p.meta,
                    inv_freq: p.inv_freq,
                    wtmp: p.wtmp,
                    scratch: p.mla,
                };
                // SAFETY: the caller's contract.
                return unsafe { a.issue(&mp, input, pages.0) };
            }
            AttnBlock::Delta(a) => {
                // SAFETY: the caller's contract (the slot table holds every sequence's slots).
                return unsafe { a.issue(&delta_pass(p), input) };
            }
            AttnBlock::Gated(a) => {
                // SAFETY: the caller's contract.
                return unsafe { a.issue(&delta_pass(p), input, pages) };
            }
        };
        let (c, gpu, rows) = (p.cfg, p.gpu, p.rows);
        let hd = c.head_dim;
        // SAFETY: the caller's contract; every address below is one of the context's buffers or this block's.
        unsafe {
            gpu.matmul(&l.qkv, input, rows, p.qkv, ptr(&l.qkv_bias), false, p.wtmp)?;
            let post = QkvPost {
                qkv: p.qkv,
                q_out: p.q,
                k_pages: pages.0,
                v_pages: pages.1,
                q_norm: ptr(&l.q_norm),
                k_norm: ptr(&l.k_norm),
                inv_freq: p.inv_freq,
                meta: p.meta,
                rows,
                nh: c.n_heads,
                nkv: c.n_kv_heads,
                hd,
                eps: c.norm_eps,
            };
            let attn = Attn {
                q: p.q,
                k_pages: pages.0,
                v_pages: pages.1,
                out: p.att.ptr(),
                out_bf16: !p.gemv,
                meta: p.meta,
                rows,
                nh: c.n_heads,
                nkv: c.n_kv_heads,
                hd,
                window: c.sliding_window.unwrap_or(0),
                scale: 1.0 / (hd as f32).sqrt(),
                tiles: p.tiles.0,
                n_tiles: p.tiles.1,
            };
            // A decode pass (each row a different sequence's next token) runs qkv_post inside its attention, which
            // also writes the o product's 8-bit activations when it reads them.
            if p.gemv && rows == p.seqs {
                let act8 = gpu.takes_act8(&l.o, rows);
                Ok(if gpu.attention_decode(&post, &attn, act8)? {
                    Act::F32Act8(p.att.ptr())
                } else {
                    Act::F32(p.att.ptr())
                })
            } else {
                gpu.qkv_post(&post)?;
                gpu.attention(&attn)?;
                Ok(Act::rows(p.att.ptr(), p.gemv))
            }
        }
    }
}

/// The pass context cut to the delta-net and gated attention layers.
fn delta_pass<'a>(p: &PassCtx<'a>) -> DeltaPass<'a> {
    let c = p.cfg;
    DeltaPass {
        gpu: p.gpu,
        rows: p.rows,
        gemv: p.gemv,
        meta: p.meta,
        tiles: p.tiles,
        inv_freq: p.inv_freq,
        wtmp: p.wtmp,
        slots: p.slots,
        heads: (c.n_heads, c.n_kv_heads, c.head_dim, c.norm_eps),
        q: p.q,
        att: p.att.ptr(),
        scratch: p.delta,
    }
}

impl MlpBlock {
    /// The product that reads the block's (normed) input (a routed block's first expert's: every expert's shape).
    pub(crate) fn input(&self) -> &DevMatrix {
        match self {
            MlpBlock::Dense(m) => &m.up,
            MlpBlock::Moe(m) => m.products()[0],
        }
    }

    /// The product that adds the block's output to the residual stream, and its bias (0: none); None for a routed
    /// block, which adds its experts' outputs itself.
    pub(crate) fn output(&self) -> Option<(&DevMatrix, u64)> {
        match self {
            MlpBlock::Dense(m) => Some((&m.down, ptr(&m.down_bias))),
            MlpBlock::Moe(_) => None,
        }
    }

    /// Whether its input must be f32 rows whatever the pass (the router computes in f32, as the CPU's does).
    pub(crate) fn reads_f32(&self) -> bool {
        matches!(self, MlpBlock::Moe(_))
    }

    /// A routed block's widths (None: dense).
    pub(crate) fn moe_shape(&self) -> Option<MoeShape> {
        match self {
            MlpBlock::Dense(_) => None,
            MlpBlock::Moe(m) => Some(m.shape()),
        }
    }

    /// Every weight matrix (a routed block: one expert's, every expert's shape).
    pub(crate) fn products(&self) -> Vec<&DevMatrix> {
        match self {
            MlpBlock::Dense(m) => vec![&m.up, &m.down],
            MlpBlock::Moe(m) => m.products(),
        }
    }

    /// Width of its widest intermediate row in the shared scratch (the up product's output; a routed block has
    /// buffers of its own).
    pub(crate) fn up_width(&self) -> usize {
        match self {
            MlpBlock::Dense(m) => m.up.rows(),
            MlpBlock::Moe(_) => 0,
        }
    }

    /// Device bytes of its weights.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            MlpBlock::Dense(m) => m.up.bytes() + m.down.bytes() + vec_bytes(&m.up_bias) + vec_bytes(&m.down_bias),
            MlpBlock::Moe(m) => m.bytes(),
        }
    }

    /// Queues the up product and the activation; returns what the down product reads (SwiGLU writes its 8-bit
    /// activations itself when that product reads them). A routed block queues everything and adds its output to
    /// the residual stream: None.
    ///
    /// # Safety
    /// The context's buffers hold the pass's rows at their widths.
    pub(crate) unsafe fn issue(&self, p: &PassCtx<'_>, input: Act) -> Result<Option<Act>, ModelError> {
        let m = match self {
            MlpBlock::Dense(m) => m,
            MlpBlock::Moe(m) => {
                let mp = MoePass { gpu: p.gpu, rows: p.rows, hidden: p.cfg.hidden, wtmp: p.wtmp, scratch: p.moe };
                // SAFETY: the caller's contract (the context's buffers hold the pass's rows, x the residual stream).
                return unsafe { m.issue(&mp, input, p.x) }.map(|()| None);
            }
        };
        let (gpu, rows, f) = (p.gpu, p.rows, p.cfg.intermediate);
        // SAFETY: the caller's contract; up holds rows × up width, act rows × intermediate.
        unsafe {
            gpu.matmul(&m.up, input, rows, p.up, ptr(&m.up_bias), false, p.wtmp)?;
            match m.act {
                Activation::SwiGlu if gpu.takes_act8(&m.down, rows) => {
                    gpu.silu_mul_act8(p.up, p.act.ptr(), rows, f)?;
                    return Ok(Some(Act::F32Act8(p.act.ptr())));
                }
                Activation::SwiGlu => gpu.silu_mul(p.up, p.act.ptr(), rows, f, !p.gemv)?,
                Activation::Gelu => gpu.gelu(p.up, p.act.ptr(), rows * f, !p.gemv)?,
            }
        }
        Ok(Some(Act::rows(p.act.ptr(), p.gemv)))
    }
}

impl Layer {
    /// Device bytes of its weights.
    pub(crate) fn bytes(&self) -> usize {
        self.norm1.bytes() + self.attn.bytes() + self.norm2.bytes() + self.mlp.bytes()
    }
}

/// Device bytes of a norm's weights (the final norm's).
pub(crate) fn norm_bytes(n: &Norm) -> usize {
    n.bytes()
}
