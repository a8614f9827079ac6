//! Kernel launches. Every op takes device addresses: the model owns the buffers and their shapes, the op only
//! checks what the kernels cannot take. All work goes to the GPU's one stream, in order.

use super::buffer::DevBuf;
use super::matrix::{DevFormat, DevMatrix};
use super::{Gpu, GpuError};
use cudarc::driver::LaunchConfig;
use std::sync::Arc;

pub use super::limits::GEMV_MAX_ROWS;
pub(crate) use super::limits::{whole_groups, NORM_TAIL_MAX_N};

/// Rows up to which bf16 activations run the tensor-core kernel of mma_few.cu (weights read once, block formats
/// turned into bf16 in registers); more go to cuBLAS, block formats first dequantised into a buffer.
pub const MMA_FEW_MAX_ROWS: usize = 32;

/// Output rows per block the split GEMV kernels come in (`GS_HEIGHTS` in gemv_split.cu).
pub const SPLIT_HEIGHTS: [usize; 3] = [2, 4, 8];

/// Which split GEMV kernels (gemv_split.cu) a product runs: the default, or one block height forced, for the
/// kernel benchmark (examples/gpu_gemv.rs) and the tests, which compare the heights (a row's sum must not depend on
/// one). Widths that are not whole blocks of 32 run gemv.cu's per-warp bf16 kernel whatever is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemvKernel {
    /// The default: a block of 4 warps per few output rows, K split over the warps, q8/q4/q6 weights meeting
    /// activations in two 8-bit terms per block (`quant_act8`: the CPU's i16 precision) through `dp4a`, bf16
    /// weights (and products wider than [`ACT8_MAX_K`]) f32 activations; the block height per format and input
    /// count from `split_rows_int8` and `split_rows_f32`.
    SplitDp4a,
    /// The split kernels with f32 activations at this block height.
    SplitRows(usize),
    /// The split kernels with activations in two 8-bit terms and `dp4a` (q8 and q4 weights) at this block height.
    Dp4aRows(usize),
}

/// Widest K the 8-bit activation scratch holds (the Llama-3-8B down product's 14,336 with room to spare); wider
/// products keep f32 activations.
pub const ACT8_MAX_K: usize = 1 << 16;

/// Bytes of the 8-bit activation scratch: the two terms, each [`GEMV_MAX_ROWS`] rows of [`ACT8_MAX_K`] values, then
/// per block of 32 a (scale, sum) pair of f32.
pub(crate) const ACT8_BYTES: usize = 2 * GEMV_MAX_ROWS * ACT8_MAX_K + GEMV_MAX_ROWS * (ACT8_MAX_K / 32) * 8;

/// The dp4a kernels' block height per format and input count, from the kernel benchmark of their one-term version
/// (geometric mean over the 8B shapes; not re-measured for two terms). One q4 input: 8 rows where the product norms
/// its output, 4 where it does not — the norm-free kernels at 8 rows hold 128 registers, at 4 rows 72, so more
/// blocks an SM; the products deferring their norm decode faster at 8 although 4 holds 72 registers too, and so
/// did 8 against 4 rows in blocks holding a group whole (figures: docs/performance-gpu.md).
fn split_rows_int8(format: DevFormat, inputs: usize, norm: bool) -> usize {
    match (format, inputs) {
        // The 6-bit head: 4 (7 blocks an SM at 72 registers); 2 (8 an SM at 64) measured no faster.
        (DevFormat::Q6, 1) => 4,
        (DevFormat::Q4, 1) if !norm => 4,
        (DevFormat::Q4, 1) => 8,
        (DevFormat::Q4, 8) => 8,
        (DevFormat::Q8, 2) => 8,
        _ => 4,
    }
}

/// Whether a format's split products with a norm tail hold the row in shared memory (then they take N floats of
/// it) rather than registers: `split_norm_tail`'s SMEM in gemv_split.cu, chosen there per format by decode — for
/// q8 and bf16 the tail's registers had cut their o/down products' blocks an SM to a third; q4's products hold 8
/// rows, as many registers either way, and lose to the shared memory's traffic.
fn tail_in_smem(format: DevFormat) -> bool {
    format != DevFormat::Q4
}

/// The f32-activation split kernels' block height per format and input count, from the kernel benchmark
/// (examples/gpu_gemv.rs): small heights keep more blocks in flight, large ones share each activation load among
/// more rows; past a few inputs the block formats' unrolled loops spill at large heights. (bf16 at height 2 won the
/// kernel benchmark but lost in decode: not taken.)
fn split_rows_f32(format: DevFormat, inputs: usize) -> usize {
    match (format, inputs) {
        (DevFormat::Bf16 | DevFormat::Q8, 1) => 4,
        (DevFormat::Bf16 | DevFormat::Q8, _) => 8,
        (DevFormat::Q4, 1 | 2) => 8,
        (DevFormat::Q4, 3 | 4) => 4,
        (DevFormat::Q4, _) => 2,
        // (Not reached: Q6 runs the dp4a kernels only.)
        (DevFormat::Q6, _) => 4,
    }
}

/// Tiles of 16 output rows a warp of the tensor-core kernel comes in (`MF_TILES` in mma_few.cu).
pub const MMA_FEW_TILES: [usize; 3] = [1, 2, 4];

/// Warps of a block of the tensor-core kernel (`MF_WARPS` in mma_few.cu).
const MMA_FEW_WARPS: u32 = 8;

/// Whether the tensor-core kernel takes this product: 1 to [`MMA_FEW_MAX_ROWS`] rows, and K a whole number of
/// its steps (4 lanes × one 16-byte load each: 32 bf16, 64 q8 or 128 q4 weights).
pub fn mma_few_takes(m: &DevMatrix, rows: usize) -> bool {
    let step = match m.format {
        DevFormat::Bf16 => 32,
        DevFormat::Q8 => 64,
        DevFormat::Q4 | DevFormat::Q6 => 128,
    };
    (1..=MMA_FEW_MAX_ROWS).contains(&rows) && m.cols.is_multiple_of(step) && m.rows > 0
}

/// Tokens per KV-cache page.
pub const KV_PAGE: usize = 16;

/// Activations given to a product: f32 for the GEMV kernels, bf16 for cuBLAS.
#[derive(Debug, Clone, Copy)]
pub enum Act {
    /// f32 rows at this address.
    F32(u64),
    /// bf16 rows at this address.
    Bf16(u64),
    /// f32 rows at this address whose two-term 8-bit form the kernel before also wrote into the GPU's activation
    /// scratch ([`NormTo::Act8`], [`Gpu::silu_mul_act8`]): a dp4a product reads that and skips its `quant_act8`.
    F32Act8(u64),
    /// Rows whose norm the product before deferred to this one ([`NormTo::Deferred`]): their 8-bit form, not yet
    /// divided by each row's RMS, and their sums of squares by group of 32 columns, in the GPU's deferred-norm
    /// scratch; only a dp4a product takes them, making each row's 1/rms with this epsilon (the norm's).
    Act8Deferred {
        /// Norm epsilon.
        eps: f32,
    },
}

impl Act {
    /// Rows at `ptr` in the width a pass's products read: f32 for the GEMV kernels (decode), bf16 for tensor cores
    /// and cuBLAS (prompts). One place decides it, so every block hands its output on the same way.
    pub fn rows(ptr: u64, gemv: bool) -> Act {
        if gemv {
            Act::F32(ptr)
        } else {
            Act::Bf16(ptr)
        }
    }
}

/// An RMSNorm of a GEMV's whole output rows, written by the product itself once all its blocks are done (the
/// residual stream's norm before the next product, without a norm kernel and its launch).
#[derive(Debug, Clone, Copy)]
pub struct NormOut {
    /// Norm weights, one per output column.
    pub g: u64,
    /// `[rows][N]` f32 out.
    pub out: u64,
    /// Norm epsilon.
    pub eps: f32,
    /// A u32: the count of blocks done, which finds the last (zero before a launch and left zero).
    pub counter: u64,
    /// What the next product reads.
    pub to: NormTo,
}

/// What a product's folded norm leaves for the product after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormTo {
    /// The normed rows in f32 at `out` ([`Act::F32`]).
    F32,
    /// Those and their two-term 8-bit form in the activation scratch, for a dp4a product next
    /// ([`Gpu::takes_act8`]), which takes [`Act::F32Act8`]: one `quant_act8` launch fewer.
    Act8,
    /// No normed rows (`out` is not written): the division by each row's RMS left to the dp4a product next, which
    /// takes [`Act::Act8Deferred`] — where [`Gpu::defers_norm`] says so.
    Deferred,
}

/// Addresses and sizes for [`Gpu::qkv_post`].
#[derive(Debug, Clone, Copy)]
pub struct QkvPost {
    /// `[rows][(nh + 2·nkv)·hd]` f32 from the q/k/v product.
    pub qkv: u64,
    /// `[rows][nh·hd]` f32 out.
    pub q_out: u64,
    /// This layer's K pages.
    pub k_pages: u64,
    /// This layer's V pages.
    pub v_pages: u64,
    /// Per-head RMSNorm weights of q and k (0 for none).
    pub q_norm: u64,
    /// See `q_norm`.
    pub k_norm: u64,
    /// RoPE inverse frequencies `[hd/2]` (0: no RoPE).
    pub inv_freq: u64,
    /// Rows' positions, sequences, and the page tables `[seqs][max_pages]`.
    pub meta: Meta,
    /// Rows.
    pub rows: usize,
    /// Heads.
    pub nh: usize,
    /// KV heads.
    pub nkv: usize,
    /// Head width.
    pub hd: usize,
    /// Norm epsilon.
    pub eps: f32,
}

/// Where each row of a pass is: its position, its sequence, and every sequence's page table.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    /// `[rows]` i32 positions.
    pub row_pos: u64,
    /// `[rows]` i32 sequence index.
    pub row_seq: u64,
    /// `[seqs][max_pages]` i32 page ids.
    pub tables: u64,
    /// Width of a page table.
    pub max_pages: usize,
}

pub(super) fn cfg(grid: (u32, u32, u32), block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: grid, block_dim: (block, 1, 1), shared_mem_bytes: smem }
}

pub(super) fn grid_for(n: usize, block: usize) -> u32 {
    n.div_ceil(block).clamp(1, 65_535 * 4) as u32
}

pub(super) fn i(v: usize) -> i32 {
    v as i32
}

impl Gpu {
    /// Quantises a bf16 matrix on the device into a block format.
    pub fn quantize(self: &Arc<Gpu>, m: &DevMatrix, to: DevFormat) -> Result<DevMatrix, GpuError> {
        if m.format != DevFormat::Bf16 || !m.cols.is_multiple_of(32) {
            return Err(GpuError::Shape(format!("quantize needs bf16 whole blocks, got {:?} × {}", m.format, m.cols)));
        }
        let blocks = m.rows * m.cols / 32;
        let (q, s, name) = match to {
            DevFormat::Q8 => (DevBuf::zeros(self, blocks * 32)?, DevBuf::zeros(self, blocks * 2)?, "quantize_q8"),
            DevFormat::Q4 => (DevBuf::zeros(self, blocks * 16)?, DevBuf::zeros(self, blocks * 2)?, "quantize_q4"),
            DevFormat::Q6 => (DevBuf::zeros(self, blocks * 24)?, DevBuf::zeros(self, blocks * 2)?, "quantize_q6"),
            DevFormat::Bf16 => return Err(GpuError::Shape("quantize to bf16".into())),
        };
        let (w, qp, sp, nb) = (m.q.ptr(), q.ptr(), s.ptr(), blocks as u64);
        let mut b = self.launch(name);
        b.arg(&w).arg(&qp).arg(&sp).arg(&nb);
        // SAFETY: buffers sized above for `blocks` blocks.
        unsafe { b.launch(cfg((grid_for(blocks, 256), 1, 1), 256, 0)) }?;
        Ok(DevMatrix { format: to, rows: m.rows, cols: m.cols, q, s: Some(s) })
    }

    /// `y[rows][N] (+)= x · Wᵀ (+ bias)`. f32 activations run the GEMV kernels (rows ≤ [`GEMV_MAX_ROWS`]);
    /// bf16 activations run cuBLAS, block formats first dequantised into `wtmp` (at least `N·K` bf16).
    ///
    /// # Safety
    /// `x`, `y`, `bias` must hold the shapes given.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul(
        &self,
        m: &DevMatrix,
        x: Act,
        rows: usize,
        y: u64,
        bias: u64,
        accumulate: bool,
        wtmp: Option<&DevBuf>,
    ) -> Result<(), GpuError> {
        if rows == 0 {
            return Ok(());
        }
        match x {
            Act::F32(_) | Act::F32Act8(_) | Act::Act8Deferred { .. } => {
                self.gemv(GemvKernel::SplitDp4a, m, x, rows, y, bias, accumulate, None)?
            }
            Act::Bf16(xp) => match self.few_rows_tiles(m, rows) {
                Some(mt) => self.mma_few_tiles(m, xp, rows, y, bias, accumulate, mt)?,
                None => self.matmul_blas(m, xp, rows, y, bias, accumulate, wtmp)?,
            },
        }
        Ok(())
    }

    /// `y[rows][N] (+)= x · Wᵀ (+ bias)` by cuBLAS on bf16 activations, block formats first dequantised into
    /// `wtmp` (at least `N·K` bf16): prefill's path, and the kernel benchmark's reference.
    ///
    /// # Safety
    /// `x` must hold `rows × K` bf16, `y` `rows × N` f32, `bias` (0: none) `N` f32.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul_blas(
        &self,
        m: &DevMatrix,
        xp: u64,
        rows: usize,
        y: u64,
        bias: u64,
        accumulate: bool,
        wtmp: Option<&DevBuf>,
    ) -> Result<(), GpuError> {
        let w = match m.format {
            DevFormat::Bf16 => m.q.ptr(),
            f => {
                let tmp = wtmp.ok_or_else(|| GpuError::Shape("GEMM of a block format needs wtmp".into()))?;
                let count = m.rows * m.cols;
                if tmp.len() < count * 2 {
                    return Err(GpuError::Shape(format!("wtmp of {} bytes for {count} weights", tmp.len())));
                }
                let name = format!("dequant_{}", f.name());
                let (q, s, o, c) = (m.q.ptr(), m.s.as_ref().map_or(0, DevBuf::ptr), tmp.ptr(), count as u64);
                let mut b = self.launch(&name);
                b.arg(&q).arg(&s).arg(&o).arg(&c);
                b.launch(cfg((grid_for(count, 256).min(132 * 16), 1, 1), 256, 0))?;
                tmp.ptr()
            }
        };
        let blas = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        blas.gemm_bf16(w, xp, y, rows, m.rows, m.cols, accumulate)?;
        if bias != 0 {
            self.add_bias(y, bias, rows, m.rows)?;
        }
        Ok(())
    }

    /// `y[rows][N] (+)= x · Wᵀ (+ bias)` for up to [`MMA_FEW_MAX_ROWS`] bf16 rows on the tensor cores
    /// (mma_few.cu): each weight read once for all rows, f32 sums. An error for shapes it does not take
    /// ([`mma_few_takes`]); `matmul` sends those to cuBLAS.
    ///
    /// # Safety
    /// `x` must hold `rows × K` bf16, `y` `rows × N` f32, `bias` (0: none) `N` f32.
    pub unsafe fn mma_few(
        &self,
        m: &DevMatrix,
        x: u64,
        rows: usize,
        y: u64,
        bias: u64,
        accumulate: bool,
    ) -> Result<(), GpuError> {
        let mt = self.few_rows_tiles(m, rows).unwrap_or(1);
        self.mma_few_tiles(m, x, rows, y, bias, accumulate, mt)
    }

    /// How a product of `rows` bf16 rows runs: `Some(mt)`, the tensor-core kernel with `mt` tiles of 16 output
    /// rows a warp; None, cuBLAS. From the kernel benchmark (examples/gpu_mma_few.rs): cuBLAS reads bf16 weights
    /// faster than the kernel, so bf16 stays on cuBLAS; for q8/q4 cuBLAS must first dequantise the whole matrix,
    /// which costs more than the kernel's reading it once. More tiles a warp share each activation load among more
    /// weight rows, fewer keep more blocks in flight on short matrices.
    pub fn few_rows_tiles(&self, m: &DevMatrix, rows: usize) -> Option<usize> {
        if !mma_few_takes(m, rows) || m.format == DevFormat::Bf16 {
            return None;
        }
        let n = m.rows;
        Some(match (m.format, rows) {
            (_, _) if n < 4096 => 1,
            // (Q6 at 4 tiles spills 312 bytes, ptxas: its unpacking's registers beside 4 tiles' accumulators.)
            (DevFormat::Q6, _) => 2,
            (DevFormat::Q8, 1..=16) => 2,
            (_, _) if n < 6144 => 2,
            _ => 4,
        })
    }

    /// [`Gpu::mma_few`] with `mt` (1, 2 or 4) tiles of 16 output rows a warp, for the tests and the kernel
    /// benchmark.
    ///
    /// # Safety
    /// As [`Gpu::mma_few`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn mma_few_tiles(
        &self,
        m: &DevMatrix,
        x: u64,
        rows: usize,
        y: u64,
        bias: u64,
        accumulate: bool,
        mt: usize,
    ) -> Result<(), GpuError> {
        if !mma_few_takes(m, rows) || !MMA_FEW_TILES.contains(&mt) {
            return Err(GpuError::Shape(format!("mma_few of {rows} rows × {} ({:?}), {mt} tiles", m.cols, m.format)));
        }
        let name = format!("mmf_{}_{}_m{mt}", m.format.name(), rows.div_ceil(8));
        let (n, k, r, acc) = (i(m.rows), i(m.cols), i(rows), i32::from(accumulate));
        let (q, s) = (m.q.ptr(), m.s.as_ref().map_or(0, DevBuf::ptr));
        let mut b = self.launch(&name);
        b.arg(&q).arg(&s).arg(&x).arg(&y).arg(&bias).arg(&n).arg(&k).arg(&r).arg(&acc);
        b.launch(cfg((m.rows.div_ceil(16 * mt) as u32, 1, 1), MMA_FEW_WARPS * 32, 0))?;
        Ok(())
    }

    /// `y[rows][N] (+)= x · Wᵀ (+ bias)` for up to [`GEMV_MAX_ROWS`] f32 rows by the split kernels `kernel` says
    /// (the default, [`GemvKernel::SplitDp4a`], is what `matmul` runs; the kernel benchmark and the tests force
    /// heights). Widths that are not whole blocks of 32 (bf16 only) run gemv.cu's per-warp kernel. `norm` also
    /// writes the RMSNorm of the output rows (in the split kernels' last block; after the per-warp kernel, by the
    /// norm kernel).
    ///
    /// # Safety
    /// `x`, `y`, `bias` must hold the shapes given.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemv(
        &self,
        kernel: GemvKernel,
        m: &DevMatrix,
        x: Act,
        rows: usize,
        y: u64,
        bias: u64,
        accumulate: bool,
        norm: Option<&NormOut>,
    ) -> Result<(), GpuError> {
        if rows == 0 || rows > GEMV_MAX_ROWS {
            return Err(GpuError::Shape(format!("GEMV of {rows} rows (1 to {GEMV_MAX_ROWS})")));
        }
        let xp = match x {
            Act::F32(x) | Act::F32Act8(x) => x,
            Act::Act8Deferred { .. } => 0u64,
            Act::Bf16(_) => return Err(GpuError::Shape("GEMV of bf16 activations".into())),
        };
        let deferred_in = matches!(x, Act::Act8Deferred { .. });
        let fname = m.format.name();
        // Q6 (a q4 backend's head) has the dp4a split kernels only, norm-free: the f32-activation heights run them
        // too.
        let kernel = match kernel {
            GemvKernel::SplitRows(_) if m.format == DevFormat::Q6 => GemvKernel::SplitDp4a,
            k => k,
        };
        if m.format == DevFormat::Q6 && (norm.is_some() || m.cols > ACT8_MAX_K) {
            return Err(GpuError::Shape(format!(
                "a 6-bit product of {} inputs with a norm ({}): its kernels take neither",
                m.cols,
                norm.is_some()
            )));
        }
        let (n, k, acc) = (i(m.rows), i(m.cols), i32::from(accumulate));
        let q = m.q.ptr();
        let s = m.s.as_ref().map_or(0, DevBuf::ptr);
        let quantised = m.format != DevFormat::Bf16;
        let (per, int8) = match kernel {
            GemvKernel::SplitDp4a if quantised => (split_rows_int8(m.format, rows, norm.is_some()), true),
            GemvKernel::SplitDp4a => (split_rows_f32(m.format, rows), false),
            GemvKernel::SplitRows(per) | GemvKernel::Dp4aRows(per) if !SPLIT_HEIGHTS.contains(&per) => {
                return Err(GpuError::Shape(format!("split GEMV {per} rows high")))
            }
            GemvKernel::SplitRows(per) => (per, false),
            GemvKernel::Dp4aRows(per) if quantised => (per, true),
            GemvKernel::Dp4aRows(_) => return Err(GpuError::Shape("dp4a GEMV of bf16 weights".into())),
        };
        let int8 = int8 && m.cols <= ACT8_MAX_K;
        let split = m.cols.is_multiple_of(32).then(|| {
            let d = if int8 { "d" } else { "" };
            // A product that folds no norm runs the kernel compiled without it (fewer registers, so more blocks
            // an SM).
            let nn = match norm {
                None => "_nn",
                Some(o) if o.to == NormTo::Deferred && super::norm_defer::groups_in_block(fname, rows, per) => "_gb",
                Some(o) if o.to == NormTo::Deferred => "_gn",
                Some(_) => "",
            };
            (format!("gemvs_{fname}{d}_{rows}_r{per}{nn}"), per)
        });
        if (deferred_in || norm.is_some_and(|o| o.to == NormTo::Deferred)) && !(int8 && split.is_some()) {
            return Err(GpuError::Shape(format!("deferred norm in a product of {rows} rows × {} not on dp4a", m.cols)));
        }
        if norm.is_some_and(|o| o.to == NormTo::Deferred && (o.g == 0 || !whole_groups(m.rows))) {
            return Err(GpuError::Shape(format!(
                "deferred norm of {} columns (weights {:#x})",
                m.rows,
                norm.map_or(0, |o| o.g)
            )));
        }
        // A deferred input's planes are the deferred norm's own: a product reading them writes no norm of its own
        // (it would write over them, or into planes the next product does not read).
        if deferred_in && norm.is_some() {
            return Err(GpuError::Shape("a product of deferred-norm rows that norms its own output".into()));
        }
        let dp = self.defer_planes();
        // A deferred input is read from the deferred norm's planes, with its rows' sums of squares.
        let ((xq, xq2, xds), xss, xeps) = match x {
            Act::Act8Deferred { eps } => ((dp.q1, dp.q2, dp.ds), dp.sums, eps),
            _ => (self.act8_planes(), 0u64, 0f32),
        };
        // Where the norm tail holds whole rows in registers (gemv_split.cu), the dp4a kernels' tail writes their 8-bit
        // form.
        let tail_act8 = |o: &NormOut| o.to == NormTo::Act8 && int8 && whole_groups(m.rows);
        if let Some((name, per)) = split {
            if int8 && !matches!(x, Act::F32Act8(_) | Act::Act8Deferred { .. }) {
                self.quant_act8(xp, rows, m.cols)?;
            }
            let mut b = self.launch(&name);
            b.arg(&q);
            if quantised {
                b.arg(&s);
            }
            if int8 {
                b.arg(&xq).arg(&xq2).arg(&xds).arg(&xss).arg(&xeps);
            } else {
                b.arg(&xp);
            }
            let (ng, nout, neps, mut counter) = norm.map_or((0, 0, 0.0f32, 0), |o| (o.g, o.out, o.eps, o.counter));
            let (mut nq, mut nq2, mut nds) = if norm.is_some_and(tail_act8) { (xq, xq2, xds) } else { (0, 0, 0) };
            let mut nss = 0u64;
            if norm.is_some_and(|o| o.to == NormTo::Deferred) {
                (counter, nss) = (dp.counters, dp.sums);
                (nq, nq2, nds) = (dp.q1, dp.q2, dp.ds);
            }
            b.arg(&y).arg(&bias).arg(&n).arg(&k).arg(&acc).arg(&ng).arg(&nout).arg(&neps).arg(&counter);
            b.arg(&nq).arg(&nq2).arg(&nds);
            if int8 {
                b.arg(&nss);
            }
            // The tail's row in shared memory where the format's kernels hold it there and it is whole (the
            // kernel's `whole`: N a multiple of 4 up to NORM_TAIL_MAX_N, 32 KB at most, within the 48 KB needing no
            // opt-in).
            let whole_f4 = m.rows.is_multiple_of(4) && m.rows <= NORM_TAIL_MAX_N;
            let tail = norm.is_some_and(|o| o.to != NormTo::Deferred);
            let smem = if tail && whole_f4 && tail_in_smem(m.format) { (m.rows * 4) as u32 } else { 0 };
            if name.ends_with("_gb") {
                // A block of 32 rows (whole groups: checked above), 32/per sub-blocks of 128 threads.
                b.launch(cfg(((m.rows / 32) as u32, 1, 1), (128 * 32 / per) as u32, 0))?;
            } else {
                b.launch(cfg((m.rows.div_ceil(per) as u32, 1, 1), 128, smem))?;
            }
            if let Some(o) = norm.filter(|o| o.to == NormTo::Act8 && !tail_act8(o)) {
                self.quant_act8(o.out, rows, m.rows)?;
            }
            return Ok(());
        }
        // Widths that are not whole blocks of 32: bf16 only (the block formats are whole blocks), gemv.cu's kernel of
        // 4 warps of 2 output rows a block.
        if m.format != DevFormat::Bf16 {
            return Err(GpuError::Shape(format!("GEMV of {:?} weights {} wide", m.format, m.cols)));
        }
        let mut b = self.launch(&format!("gemv_bf16_{rows}"));
        b.arg(&q).arg(&xp).arg(&y).arg(&bias).arg(&n).arg(&k).arg(&acc);
        b.launch(cfg((grid_for(m.rows, 8), 1, 1), 128, 0))?;
        if let Some(o) = norm {
            self.rms_norm(y, o.g, o.out, rows, m.rows, o.eps, false)?;
            if o.to == NormTo::Act8 {
                self.quant_act8(o.out, rows, m.rows)?;
            }
        }
        Ok(())
    }

    /// The activation scratch's planes: first terms, second terms, (scale, sum) pairs.
    pub(crate) fn act8_planes(&self) -> (u64, u64, u64) {
        let plane = GEMV_MAX_ROWS * ACT8_MAX_K;
        (self.act8.ptr(), self.act8.at(plane), self.act8.at(2 * plane))
    }

    /// `rows` f32 rows of `k` at `x` into the activation scratch in two 8-bit terms (quant.cu).
    ///
    /// # Safety
    /// `x` must hold `rows × k` f32; `k` a whole number of blocks of 32 up to [`ACT8_MAX_K`].
    unsafe fn quant_act8(&self, x: u64, rows: usize, k: usize) -> Result<(), GpuError> {
        if rows > GEMV_MAX_ROWS || !k.is_multiple_of(32) || k > ACT8_MAX_K {
            return Err(GpuError::Shape(format!("8-bit activations of {rows} rows × {k}")));
        }
        let (xq, xq2, xds) = self.act8_planes();
        let (kk, nrows, total) = (i(k), i(rows), (rows * k / 32) as u32);
        let mut b = self.launch("quant_act8");
        b.arg(&x).arg(&xq).arg(&xq2).arg(&xds).arg(&kk).arg(&nrows);
        b.launch(cfg((total.div_ceil(8), 1, 1), 256, 0))
    }

    /// Whether a decode product of `rows` rows by `m` reads its activations in two 8-bit terms (the default GEMV
    /// family on q8/q4 weights): then the kernel before it may write them ([`NormTo::Act8`],
    /// [`Gpu::silu_mul_act8`]) and hand over [`Act::F32Act8`].
    pub fn takes_act8(&self, m: &DevMatrix, rows: usize) -> bool {
        m.format != DevFormat::Bf16
            && (1..=GEMV_MAX_ROWS).contains(&rows)
            && m.cols.is_multiple_of(32)
            && m.cols <= ACT8_MAX_K
    }
}
