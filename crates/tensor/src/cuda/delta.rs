//! Gated delta-net launches (`kernels/delta.cu`): the causal convolution with its kept inputs, the L2-normed q/k and
//! the gates, the delta rule over each sequence's rows with its state in a device slot, and the gated RMSNorm; and
//! gated attention's q/k/v post-processing and output gate. The model side (kvad-models' `gpu/delta.rs`) runs the
//! products around them. A prompt runs the rule in chunks of [`DELTA_CHUNK`] rows on the tensor cores
//! (`kernels/delta_chunk.cu`); a sequence of fewer than [`DeltaArgs::chunk_min_rows`] rows runs the recurrence.

use super::ops::{cfg, grid_for, i, Meta};
use super::{Gpu, GpuError};

/// Key head widths the delta rule's kernels take (`delta_rule_{dk/4}`: rows a thread holds are dk / 4).
pub const DELTA_KEY_DIMS: [usize; 5] = [16, 32, 64, 128, 256];

/// Widest value head the one-kernel decode step takes (`delta_step_*`: four column blocks of 32); wider ones decode
/// through the prompt's kernels.
pub const DELTA_STEP_MAX_V: usize = 128;

/// Rows of a chunk of the chunked rule: the width of its 64×64 systems (`delta_chunk.cu`'s `DC`).
pub const DELTA_CHUNK: usize = 64;

/// Widest value head the chunked rule takes (its shared memory holds a chunk's values beside its keys).
pub const DELTA_CHUNK_MAX_V: usize = 256;

/// The fewest rows of a sequence that run the chunked rule. `gpu_delta` on an H100 (docs/performance-gpu.md,
/// session 36) has the two forms cross between 256 rows (recurrence 5% ahead) and 1,024 (chunked 10% ahead): below
/// that the chunks' fixed cost (two kernels, the 64×64 inverses) outweighs the recurrence's per-row steps.
pub const DELTA_CHUNK_MIN_ROWS: usize = 512;

/// Where each sequence's recurrent state is: the layer's slots and the pass's tables.
#[derive(Debug, Clone, Copy)]
pub struct SlotTable {
    /// The pool's first slot.
    pub base: u64,
    /// f32 values a slot.
    pub slot_floats: usize,
    /// `[seqs][n_rec]` i32 slot ids (in the pass's metadata).
    pub slots: u64,
    /// Recurrent layers in the model (the table's width).
    pub n_rec: usize,
    /// This layer's index among them.
    pub rec: usize,
    /// `[seqs + 1]` i32: the row each sequence starts at (its rows are consecutive), then the pass's row count.
    pub seq_start: u64,
    /// Sequences in the pass.
    pub seqs: usize,
}

/// One delta-net layer's shape and addresses for a pass.
#[derive(Debug, Clone, Copy)]
pub struct DeltaArgs {
    /// `[rows][2·kw + 2·vw + 2·nv]` f32: the input product's q, k, v, z, b, a.
    pub proj: u64,
    /// `[rows][2·kw + vw]` f32 scratch: the convolution's output.
    pub mixed: u64,
    /// `[rows][2·kw]` f32 scratch: normed q and k.
    pub qk: u64,
    /// `[rows][2·nv]` f32 scratch: β and g.
    pub bg: u64,
    /// `[rows][vw]` f32 scratch: the rule's outputs.
    pub o: u64,
    /// `[rows][nv][dk]` f32 scratch: the chunked rule's W (each chunk's keys through its triangular system).
    pub w: u64,
    /// `[rows][nv][64]` f32 scratch: the chunked rule's decayed q·k within each chunk.
    pub p: u64,
    /// Sequences with at least this many rows run the chunked rule, the others the recurrence
    /// ([`DELTA_CHUNK_MIN_ROWS`] for a model; a test or benchmark may send every sequence one way).
    pub chunk_min_rows: usize,
    /// `[rows][vw]` out: the gated norm's (what the output product reads).
    pub out: u64,
    /// Out as bf16 (for cuBLAS) rather than f32.
    pub out_bf16: bool,
    /// `[ch][taps]` f32 convolution weights.
    pub conv_w: u64,
    /// `[nv]` f32: `-exp(A_log)`.
    pub neg_a: u64,
    /// `[nv]` f32.
    pub dt_bias: u64,
    /// `[dv]` f32: the gated norm's weight.
    pub norm_w: u64,
    /// Rows' sequences (`row_seq` of the pass's metadata).
    pub meta: Meta,
    /// Each sequence's slot of this layer.
    pub slots: SlotTable,
    /// Rows in the pass.
    pub rows: usize,
    /// Key heads.
    pub kh: usize,
    /// Value heads.
    pub nv: usize,
    /// Width of a key head.
    pub dk: usize,
    /// Width of a value head.
    pub dv: usize,
    /// Convolution taps.
    pub taps: usize,
    /// The gated norm's epsilon.
    pub eps: f32,
    /// Value head h reads key head `h mod kh` (llama.cpp's qwen35 order), not `h / (nv / kh)`.
    pub tiled: bool,
}

impl DeltaArgs {
    /// Floats of a slot's state (its convolution inputs follow).
    pub fn state_floats(&self) -> usize {
        self.nv * self.dk * self.dv
    }

    /// Why the kernels cannot take this shape, if they cannot.
    pub fn unsupported(&self) -> Option<String> {
        if !DELTA_KEY_DIMS.contains(&self.dk) {
            return Some(format!("key heads of {}; the GPU's delta rule takes {DELTA_KEY_DIMS:?}", self.dk));
        }
        if self.dv == 0 || self.kh == 0 || !self.nv.is_multiple_of(self.kh) || self.taps == 0 {
            return Some(format!("{} value heads over {} key heads, {} taps", self.nv, self.kh, self.taps));
        }
        if !self.dv.is_multiple_of(8) || self.dv > DELTA_CHUNK_MAX_V {
            return Some(format!("value heads of {}; the GPU's chunked rule takes multiples of 8 up to 256", self.dv));
        }
        None
    }

    /// Shared memory of `delta_chunk_prep` (k, then q or β·v, then the 64×64 system and its inverse, c and β).
    fn chunk_prep_smem(&self) -> u32 {
        let c = DELTA_CHUNK;
        (4 * (c * (self.dk + 4) + c * (self.dk.max(self.dv) + 8) + 2 * c * (c + 4) + 2 * c)) as u32
    }

    /// Shared memory of `delta_chunk_scan` (S's 32 columns, a staged chunk of rows, Δ, P, c).
    fn chunk_scan_smem(&self) -> u32 {
        let c = DELTA_CHUNK;
        (4 * (self.dk * 40 + c * (self.dk + 4) + c * 40 + c * (c + 4) + c)) as u32
    }
}

impl Gpu {
    /// A delta-net layer's kernels between its two products: the convolution (and the kept inputs moved on), q/k
    /// and the gates, the rule (each sequence's state read and written in its slot), the gated norm into `a.out`.
    ///
    /// # Safety
    /// Every address must hold what [`DeltaArgs`] says; each sequence's slot holds `slot_floats` floats.
    pub unsafe fn delta_net(&self, a: &DeltaArgs) -> Result<(), GpuError> {
        if let Some(why) = a.unsupported() {
            return Err(GpuError::Shape(why));
        }
        let (kw, vw) = (a.kh * a.dk, a.nv * a.dv);
        let ch = 2 * kw + vw;
        let w = 2 * kw + 2 * vw + 2 * a.nv;
        let t = &a.slots;
        let (wi, chi, taps, sf, st) = (i(w), i(ch), i(a.taps), t.slot_floats as i64, i(a.state_floats()));
        let (n_rec, rec) = (i(t.n_rec), i(t.rec));
        let rows = a.rows as u32;
        let (kh, dk, nv, vwi, dv, ob, tiled) =
            (i(a.kh), i(a.dk), i(a.nv), i(vw), i(a.dv), i32::from(a.out_bf16), i32::from(a.tiled));
        // A decode pass (every sequence one row): one kernel for the layer, then the kept inputs move on.
        if a.rows == t.seqs && a.dv <= DELTA_STEP_MAX_V {
            let mut b = self.launch(&format!("delta_step_{}", a.dk / 4));
            b.arg(&a.proj).arg(&wi).arg(&a.conv_w).arg(&taps).arg(&a.neg_a).arg(&a.dt_bias).arg(&a.norm_w);
            b.arg(&a.out).arg(&ob).arg(&kh).arg(&nv).arg(&dv).arg(&a.eps).arg(&t.base).arg(&sf).arg(&st);
            b.arg(&t.slots).arg(&n_rec).arg(&rec).arg(&tiled);
            b.launch(cfg((t.seqs as u32, a.nv as u32, 1), 512, 0))?;
            return self.delta_conv_tail(a, (wi, chi, taps, sf, st, n_rec, rec));
        }
        let mut b = self.launch("delta_conv");
        b.arg(&a.proj).arg(&wi).arg(&a.mixed).arg(&chi).arg(&taps).arg(&a.conv_w).arg(&t.base).arg(&sf).arg(&st);
        b.arg(&t.slots).arg(&n_rec).arg(&rec).arg(&a.meta.row_seq).arg(&t.seq_start);
        b.launch(cfg((rows, ch.div_ceil(256) as u32, 1), 256, 0))?;
        self.delta_conv_tail(a, (wi, chi, taps, sf, st, n_rec, rec))?;
        let mut b = self.launch("delta_prep");
        b.arg(&a.proj).arg(&wi).arg(&a.mixed).arg(&chi).arg(&a.qk).arg(&a.bg).arg(&kh).arg(&dk).arg(&nv).arg(&vwi);
        b.arg(&a.neg_a).arg(&a.dt_bias);
        b.launch(cfg((rows, a.kh as u32 + 1, 1), 32, 0))?;
        // The rule: sequences of chunk_min_rows rows or more in chunks, the others by the recurrence.
        let min_rows = a.chunk_min_rows.clamp(1, i32::MAX as usize) as i32;
        if a.rows >= min_rows as usize {
            let smem = a.chunk_prep_smem();
            let mut b = self.launch_smem("delta_chunk_prep", smem)?;
            b.arg(&a.qk).arg(&a.bg).arg(&a.mixed).arg(&chi).arg(&a.w).arg(&a.p).arg(&kh).arg(&nv).arg(&dk).arg(&dv);
            b.arg(&t.seq_start).arg(&tiled).arg(&min_rows);
            b.launch(cfg((t.seqs as u32, a.nv as u32, a.rows.div_ceil(DELTA_CHUNK) as u32), 256, smem))?;
            let smem = a.chunk_scan_smem();
            let mut b = self.launch_smem("delta_chunk_scan", smem)?;
            b.arg(&a.qk).arg(&a.bg).arg(&a.mixed).arg(&chi).arg(&a.w).arg(&a.p).arg(&a.o).arg(&kh).arg(&nv).arg(&dk);
            b.arg(&dv).arg(&t.base).arg(&sf).arg(&t.slots).arg(&n_rec).arg(&rec).arg(&t.seq_start).arg(&tiled);
            b.arg(&min_rows);
            b.launch(cfg((t.seqs as u32, a.nv as u32, a.dv.div_ceil(32) as u32), 256, smem))?;
        }
        let mut b = self.launch(&format!("delta_rule_{}", a.dk / 4));
        b.arg(&a.qk).arg(&a.bg).arg(&a.mixed).arg(&chi).arg(&a.o).arg(&kh).arg(&nv).arg(&dv).arg(&t.base).arg(&sf);
        b.arg(&t.slots).arg(&n_rec).arg(&rec).arg(&t.seq_start).arg(&tiled).arg(&min_rows);
        b.launch(cfg((t.seqs as u32, a.nv as u32, a.dv.div_ceil(32) as u32), 128, 0))?;
        let mut b = self.launch("delta_gated_norm");
        b.arg(&a.o).arg(&a.proj).arg(&wi).arg(&chi).arg(&a.norm_w).arg(&a.out).arg(&dv).arg(&vwi).arg(&a.eps).arg(&ob);
        b.launch(cfg((rows, a.nv as u32, 1), 128, 0))?;
        Ok(())
    }

    /// A launch of `name` with `smem` bytes of dynamic shared memory (past the default 48 KiB where asked).
    fn launch_smem(&self, name: &str, smem: u32) -> Result<super::launch::Launch<'_>, GpuError> {
        let f = self.func(name);
        if smem > 48 * 1024 {
            use cudarc::driver::sys::CUfunction_attribute as A;
            f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
        }
        Ok(super::launch::Launch::new(self, f))
    }

    /// Each sequence's slot keeps its last `taps − 1` inputs (after the layer's kernels have read the old ones).
    ///
    /// # Safety
    /// As [`Gpu::delta_net`]'s.
    unsafe fn delta_conv_tail(
        &self,
        a: &DeltaArgs,
        (wi, chi, taps, sf, st, n_rec, rec): (i32, i32, i32, i64, i32, i32, i32),
    ) -> Result<(), GpuError> {
        if a.taps <= 1 {
            return Ok(());
        }
        let t = &a.slots;
        let mut b = self.launch("delta_conv_tail");
        b.arg(&a.proj).arg(&wi).arg(&chi).arg(&taps).arg(&t.base).arg(&sf).arg(&st).arg(&t.slots);
        b.arg(&n_rec).arg(&rec).arg(&t.seq_start);
        b.launch(cfg((t.seqs as u32, (chi as usize).div_ceil(256) as u32, 1), 256, 0))
    }

    /// Gated attention's post-processing of its q/gate/k/v product rows (`[nh][2·hd]`, then k and v): q/k norms,
    /// RoPE on the first `rope` values of each head, q into `q_out`, the gates into `gate`, k and v into the
    /// pages. `q_norm`/`k_norm` must be given.
    ///
    /// # Safety
    /// `qkv` holds `rows × (2·nh + 2·nkv)·hd` f32, `q_out` and `gate` `rows × nh·hd`, the page tables cover every
    /// row's position, `inv_freq` holds `rope / 2` values.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gated_qkv_post(
        &self,
        qkv: u64,
        q_out: u64,
        gate: u64,
        pages: (u64, u64),
        norms: (u64, u64),
        inv_freq: u64,
        meta: Meta,
        rows: usize,
        (nh, nkv, hd, rope): (usize, usize, usize, usize),
        eps: f32,
    ) -> Result<(), GpuError> {
        if rope > hd || !rope.is_multiple_of(2) || norms.0 == 0 || norms.1 == 0 {
            return Err(GpuError::Shape(format!("gated attention with rope {rope} of head {hd}, norms {norms:?}")));
        }
        let (mp, nhi, nkvi, hdi, ropei) = (i(meta.max_pages), i(nh), i(nkv), i(hd), i(rope));
        let mut b = self.launch("gated_qkv_post");
        b.arg(&qkv).arg(&q_out).arg(&gate).arg(&pages.0).arg(&pages.1).arg(&norms.0).arg(&norms.1).arg(&inv_freq);
        b.arg(&meta.row_pos).arg(&meta.row_seq).arg(&meta.tables).arg(&mp).arg(&nhi).arg(&nkvi).arg(&hdi);
        b.arg(&ropei).arg(&eps);
        b.launch(cfg((rows as u32, (nh + nkv) as u32, 1), 32, 0))
    }

    /// `out = att · sigmoid(gate)` over `n` values, f32 or bf16.
    ///
    /// # Safety
    /// `att` and `gate` hold `n` f32, `out` `n` of its type.
    pub unsafe fn gate_mul(&self, att: u64, gate: u64, out: u64, n: usize, out_bf16: bool) -> Result<(), GpuError> {
        let (nn, ob) = (n as i64, i32::from(out_bf16));
        let mut b = self.launch("gate_mul");
        b.arg(&att).arg(&gate).arg(&out).arg(&nn).arg(&ob);
        b.launch(cfg((grid_for(n, 256), 1, 1), 256, 0))
    }
}
