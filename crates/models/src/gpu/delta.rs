//! Qwen3-Next's two token mixers on the GPU. A gated delta-net layer: its input product (q, k, v, z, b, a stacked),
//! kvad-tensor's delta kernels (the convolution, q/k and the gates, the rule with each sequence's state in a device
//! slot, the gated norm), and its output product. A gated attention layer: its q/gate/k/v product, the gated
//! post-processing into the pages (partial RoPE), the paged attention every GQA layer runs, and the output gate
//! before `o_proj`.
//!
//! Prompts run the delta rule in chunks of 64 rows on the tensor cores, as the CPU's `rule.rs` does; decode passes
//! one step a token, fused with the convolution.

use crate::error::ModelError;
use kvad_tensor::cuda::{
    Act, Attn, DeltaArgs, DevBuf, DevMatrix, Gpu, GpuError, Meta, SlotTable, DELTA_CHUNK, DELTA_CHUNK_MIN_ROWS,
};
use std::sync::Arc;

/// What these layers' kernels need of the pass: the decoder's pass context cut to them (as `MlaPass`).
pub(crate) struct DeltaPass<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) rows: usize,
    /// Products run the GEMV kernels on f32 activations (decode); otherwise bf16.
    pub(crate) gemv: bool,
    pub(crate) meta: Meta,
    /// Tensor-core attention tiles (address, count).
    pub(crate) tiles: (u64, usize),
    /// RoPE inverse frequencies (`rope / 2` of them).
    pub(crate) inv_freq: u64,
    pub(crate) wtmp: Option<&'a DevBuf>,
    /// The recurrent slots of the pass's sequences (this layer's index filled in by the layer).
    pub(crate) slots: SlotTable,
    /// Attention: query heads, KV heads, head width, the q/k norms' epsilon (the model's `rms_norm_eps`).
    pub(crate) heads: (usize, usize, usize, f32),
    /// The q vectors and the attention's output (`rows × q_dim` f32 each), the decoder's.
    pub(crate) q: u64,
    pub(crate) att: u64,
    pub(crate) scratch: Option<&'a DeltaScratch>,
}

/// A delta-net layer's widths (every such layer of a model has the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DeltaShape {
    pub(crate) kh: usize,
    pub(crate) nv: usize,
    pub(crate) dk: usize,
    pub(crate) dv: usize,
    pub(crate) taps: usize,
    pub(crate) eps: f32,
    /// Value heads tiled over the key heads (`DeltaConfig::tiled`).
    pub(crate) tiled: bool,
}

impl DeltaShape {
    fn key_width(&self) -> usize {
        self.kh * self.dk
    }

    fn value_width(&self) -> usize {
        self.nv * self.dv
    }

    fn channels(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }

    /// Width of the input product's rows.
    fn proj_width(&self) -> usize {
        self.channels() + self.value_width() + 2 * self.nv
    }

    /// f32 values of one sequence's state: the rule's, then the convolution's last inputs.
    pub(crate) fn slot_floats(&self) -> usize {
        self.nv * self.dk * self.dv + (self.taps - 1) * self.channels()
    }
}

/// One gated delta-net layer's weights on the device.
pub(crate) struct DeltaAttn {
    /// q, k, v, z, b, a stacked (as the CPU's).
    pub(crate) in_proj: DevMatrix,
    /// `[channels][taps]` f32.
    pub(crate) conv_w: DevBuf,
    /// `-exp(A_log)`, `[nv]`.
    pub(crate) neg_a: DevBuf,
    pub(crate) dt_bias: DevBuf,
    /// The gated norm's weight, `[dv]`.
    pub(crate) norm_w: DevBuf,
    pub(crate) out: DevMatrix,
    pub(crate) shape: DeltaShape,
    /// This layer's index among the model's recurrent layers (its column of the slot table).
    pub(crate) rec: usize,
}

impl DeltaAttn {
    fn args(&self, p: &DeltaPass<'_>, s: &DeltaScratch) -> DeltaArgs {
        DeltaArgs {
            proj: s.proj.ptr(),
            mixed: s.mixed.ptr(),
            qk: s.qk.ptr(),
            bg: s.bg.ptr(),
            o: s.o.ptr(),
            w: s.w.ptr(),
            p: s.p.ptr(),
            out: s.out.ptr(),
            out_bf16: !p.gemv,
            conv_w: self.conv_w.ptr(),
            neg_a: self.neg_a.ptr(),
            dt_bias: self.dt_bias.ptr(),
            norm_w: self.norm_w.ptr(),
            meta: p.meta,
            slots: SlotTable { rec: self.rec, ..p.slots },
            rows: p.rows,
            ..DeltaArgs::from(self.shape)
        }
    }

    /// Why the kernels cannot take this layer, if they cannot.
    pub(crate) fn unsupported(&self) -> Option<String> {
        DeltaArgs::from(self.shape).unsupported()
    }

    /// Queues the kernels up to the output product; returns what it reads.
    ///
    /// # Safety
    /// The pass's buffers hold its rows, the slot table every sequence's slot of this layer.
    pub(crate) unsafe fn issue(&self, p: &DeltaPass<'_>, input: Act) -> Result<Act, ModelError> {
        let s = p.scratch.ok_or_else(|| ModelError::Gpu("a delta-net layer's pass has no delta scratch".into()))?;
        // SAFETY: the caller's contract; the scratch holds the pass's rows at every width of this shape.
        unsafe {
            p.gpu.matmul(&self.in_proj, input, p.rows, s.proj.ptr(), 0, false, p.wtmp)?;
            p.gpu.delta_net(&self.args(p, s))?;
        }
        Ok(Act::rows(s.out.ptr(), p.gemv))
    }

    pub(crate) fn bytes(&self) -> usize {
        self.in_proj.bytes()
            + self.out.bytes()
            + self.conv_w.len()
            + self.neg_a.len()
            + self.dt_bias.len()
            + self.norm_w.len()
    }
}

impl From<DeltaShape> for DeltaArgs {
    fn from(sh: DeltaShape) -> DeltaArgs {
        let meta = Meta { row_pos: 0, row_seq: 0, tables: 0, max_pages: 0 };
        let slots =
            SlotTable { base: 0, slot_floats: sh.slot_floats(), slots: 0, n_rec: 0, rec: 0, seq_start: 0, seqs: 0 };
        DeltaArgs {
            proj: 0,
            mixed: 0,
            qk: 0,
            bg: 0,
            o: 0,
            w: 0,
            p: 0,
            chunk_min_rows: DELTA_CHUNK_MIN_ROWS,
            out: 0,
            out_bf16: false,
            conv_w: 0,
            neg_a: 0,
            dt_bias: 0,
            norm_w: 0,
            meta,
            slots,
            rows: 0,
            kh: sh.kh,
            nv: sh.nv,
            dk: sh.dk,
            dv: sh.dv,
            taps: sh.taps,
            eps: sh.eps,
            tiled: sh.tiled,
        }
    }
}

/// One gated attention layer's weights on the device.
pub(crate) struct GatedAttn {
    /// Each head's query and gate side by side, then k and v: `[2·q_dim + 2·kv_dim][hidden]`.
    pub(crate) qkv: DevMatrix,
    /// `1 + q_norm.weight`, `1 + k_norm.weight`.
    pub(crate) q_norm: DevBuf,
    pub(crate) k_norm: DevBuf,
    pub(crate) o: DevMatrix,
    /// Rotated values of a head.
    pub(crate) rope: usize,
}

impl GatedAttn {
    /// Queues the kernels up to `o_proj`: the product, q/k into place (k/v into the layer's pages), attention, the
    /// gate. Returns what `o_proj` reads.
    ///
    /// # Safety
    /// The pass's buffers hold its rows; the page tables cover every new position.
    pub(crate) unsafe fn issue(&self, p: &DeltaPass<'_>, input: Act, pages: (u64, u64)) -> Result<Act, ModelError> {
        let s = p.scratch.ok_or_else(|| ModelError::Gpu("a gated attention layer's pass has no scratch".into()))?;
        let (gpu, rows) = (p.gpu, p.rows);
        let (nh, nkv, hd, eps) = p.heads;
        let attn = Attn {
            q: p.q,
            k_pages: pages.0,
            v_pages: pages.1,
            out: p.att,
            out_bf16: false,
            meta: p.meta,
            rows,
            nh,
            nkv,
            hd,
            window: 0,
            scale: 1.0 / (hd as f32).sqrt(),
            tiles: p.tiles.0,
            n_tiles: p.tiles.1,
        };
        // SAFETY: the caller's contract; proj holds rows × (2·nh + 2·nkv)·hd, gate and out rows × nh·hd.
        unsafe {
            gpu.matmul(&self.qkv, input, rows, s.proj.ptr(), 0, false, p.wtmp)?;
            let norms = (self.q_norm.ptr(), self.k_norm.ptr());
            let heads = (nh, nkv, hd, self.rope);
            gpu.gated_qkv_post(s.proj.ptr(), p.q, s.gate.ptr(), pages, norms, p.inv_freq, p.meta, rows, heads, eps)?;
            gpu.attention(&attn)?;
            gpu.gate_mul(p.att, s.gate.ptr(), s.out.ptr(), rows * nh * hd, !p.gemv)?;
        }
        Ok(Act::rows(s.out.ptr(), p.gemv))
    }

    pub(crate) fn bytes(&self) -> usize {
        self.qkv.bytes() + self.o.bytes() + self.q_norm.len() + self.k_norm.len()
    }
}

/// The working buffers of a model's delta-net and gated attention layers for passes of up to `rows` rows.
pub(crate) struct DeltaScratch {
    /// The input products' outputs (either layer's).
    proj: DevBuf,
    mixed: DevBuf,
    qk: DevBuf,
    bg: DevBuf,
    o: DevBuf,
    /// The chunked rule's W and P.
    w: DevBuf,
    p: DevBuf,
    /// Attention's gates.
    gate: DevBuf,
    /// What the output products read (either layer's).
    out: DevBuf,
}

impl DeltaScratch {
    /// `q_dim` and `kv_dim` are the attention layers' widths.
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        s: DeltaShape,
        q_dim: usize,
        kv_dim: usize,
        rows: usize,
    ) -> Result<DeltaScratch, GpuError> {
        let f = 4 * rows;
        Ok(DeltaScratch {
            proj: DevBuf::zeros(gpu, f * s.proj_width().max(2 * q_dim + 2 * kv_dim))?,
            mixed: DevBuf::zeros(gpu, f * s.channels())?,
            qk: DevBuf::zeros(gpu, f * 2 * s.key_width())?,
            bg: DevBuf::zeros(gpu, f * 2 * s.nv)?,
            o: DevBuf::zeros(gpu, f * s.value_width())?,
            w: DevBuf::zeros(gpu, f * s.nv * s.dk)?,
            p: DevBuf::zeros(gpu, f * s.nv * DELTA_CHUNK)?,
            gate: DevBuf::zeros(gpu, f * q_dim)?,
            out: DevBuf::zeros(gpu, f * s.value_width().max(q_dim))?,
        })
    }
}
