//! The element-wise and row-wise launches (`kernels/elementwise.cu` and its neighbours): norms, activations, bias,
//! conversions, gathers, the embedding, q/k post-processing and the greedy pick — apart from the products in
//! ops.rs, with which they share only the launch helpers.

use super::buffer::DevBuf;
use super::ops::{cfg, grid_for, i, QkvPost, ACT8_MAX_K, GEMV_MAX_ROWS};
use super::{DevMatrix, Gpu, GpuError};

impl Gpu {
    /// `out = rmsnorm(x) · w` per row of `h`.
    ///
    /// # Safety
    /// Addresses must hold `rows × h`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rms_norm(
        &self,
        x: u64,
        w: u64,
        out: u64,
        rows: usize,
        h: usize,
        eps: f32,
        out_bf16: bool,
    ) -> Result<(), GpuError> {
        let (hh, ob) = (i(h), i32::from(out_bf16));
        // RMSNorms into bf16 (the activations of passes over 8 rows) by float4s where the row allows (measured
        // against the scalar kernel, docs/performance-gpu.md); passes of up to 8 rows norm into f32.
        if out_bf16 && h.is_multiple_of(4) && h <= 8192 {
            let mut b = self.launch("rms_norm_bf16_v4");
            b.arg(&x).arg(&w).arg(&out).arg(&hh).arg(&eps);
            b.launch(cfg((rows as u32, 1, 1), 256, 0))?;
            return Ok(());
        }
        self.rms_norm_kernel(x, w, out, rows, hh, eps, ob, (0, 0, 0))
    }

    /// The `rms_norm` kernel, a block of 1,024 threads a row; `act8` the 8-bit planes it also writes (0s: none).
    #[allow(clippy::too_many_arguments)]
    unsafe fn rms_norm_kernel(
        &self,
        x: u64,
        w: u64,
        out: u64,
        rows: usize,
        h: i32,
        eps: f32,
        out_bf16: i32,
        act8: (u64, u64, u64),
    ) -> Result<(), GpuError> {
        let (xq, xq2, xds) = act8;
        let mut b = self.launch("rms_norm");
        b.arg(&x).arg(&w).arg(&out).arg(&h).arg(&eps).arg(&out_bf16).arg(&xq).arg(&xq2).arg(&xds);
        b.launch(cfg((rows as u32, 1, 1), 1024, 0))?;
        Ok(())
    }

    /// [`Gpu::rms_norm`] into f32 that also writes its output as the dp4a products' 8-bit activations (as
    /// `quant_act8` would, bit for bit), for a product that takes [`Act::F32Act8`](super::Act::F32Act8) next: the
    /// decode step's first norm, which otherwise cost the q/k/v product a quantising launch.
    ///
    /// # Safety
    /// As [`Gpu::rms_norm`]; `rows` up to [`GEMV_MAX_ROWS`] and `h` a multiple of 32 up to [`ACT8_MAX_K`]
    /// (checked).
    pub unsafe fn rms_norm_act8(
        &self,
        x: u64,
        w: u64,
        out: u64,
        rows: usize,
        h: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        if rows > GEMV_MAX_ROWS || !h.is_multiple_of(32) || h > ACT8_MAX_K {
            return Err(GpuError::Shape(format!("a norm into 8-bit activations of {rows} rows × {h}")));
        }
        self.rms_norm_kernel(x, w, out, rows, i(h), eps, 0, self.act8_planes())
    }

    /// GPT-2's LayerNorm per row of `h`.
    ///
    /// # Safety
    /// Addresses must hold `rows × h`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn layer_norm(
        &self,
        x: u64,
        w: u64,
        bias: u64,
        out: u64,
        rows: usize,
        h: usize,
        eps: f32,
        out_bf16: bool,
    ) -> Result<(), GpuError> {
        let (hh, ob) = (i(h), i32::from(out_bf16));
        let mut b = self.launch("layer_norm");
        b.arg(&x).arg(&w).arg(&bias).arg(&out).arg(&hh).arg(&eps).arg(&ob);
        b.launch(cfg((rows as u32, 1, 1), 256, 0))?;
        Ok(())
    }

    /// `out[r][i] = silu(gu[r][i]) · gu[r][f + i]`.
    ///
    /// # Safety
    /// `gu` must hold `rows × 2f`, `out` `rows × f`.
    pub unsafe fn silu_mul(&self, gu: u64, out: u64, rows: usize, f: usize, out_bf16: bool) -> Result<(), GpuError> {
        let (r, ff, ob) = (i(rows), i(f), i32::from(out_bf16));
        let mut b = self.launch("silu_mul");
        b.arg(&gu).arg(&out).arg(&r).arg(&ff).arg(&ob);
        b.launch(cfg((grid_for(rows * f, 256).min(132 * 8), 1, 1), 256, 0))?;
        Ok(())
    }

    /// [`Gpu::silu_mul`] into f32 `out` and, in two 8-bit terms, into the activation scratch, for a dp4a down
    /// product that then takes [`Act::F32Act8`](super::Act::F32Act8)`(out)` (one `quant_act8` launch fewer a layer).
    ///
    /// # Safety
    /// `gu` must hold `rows × 2f`, `out` `rows × f`; `f` a whole number of blocks of 32 up to [`ACT8_MAX_K`].
    pub unsafe fn silu_mul_act8(&self, gu: u64, out: u64, rows: usize, f: usize) -> Result<(), GpuError> {
        if rows > GEMV_MAX_ROWS || !f.is_multiple_of(32) || f > ACT8_MAX_K {
            return Err(GpuError::Shape(format!("silu_mul_act8 of {rows} rows × {f}")));
        }
        let (xq, xq2, xds) = self.act8_planes();
        let (r, ff, total) = (i(rows), i(f), (rows * f / 32) as u32);
        let mut b = self.launch("silu_mul_act8");
        b.arg(&gu).arg(&out).arg(&xq).arg(&xq2).arg(&xds).arg(&r).arg(&ff);
        b.launch(cfg((total.div_ceil(8), 1, 1), 256, 0))
    }

    /// tanh GELU of `n` values.
    ///
    /// # Safety
    /// Addresses must hold `n` values.
    pub unsafe fn gelu(&self, x: u64, out: u64, n: usize, out_bf16: bool) -> Result<(), GpuError> {
        let (nn, ob) = (n as u64, i32::from(out_bf16));
        let mut b = self.launch("gelu_tanh");
        b.arg(&x).arg(&out).arg(&nn).arg(&ob);
        b.launch(cfg((grid_for(n, 256).min(132 * 8), 1, 1), 256, 0))?;
        Ok(())
    }

    /// `y[r][j] += bias[j]`.
    ///
    /// # Safety
    /// Addresses must hold the shapes.
    pub unsafe fn add_bias(&self, y: u64, bias: u64, rows: usize, n: usize) -> Result<(), GpuError> {
        let (r, nn) = (i(rows), i(n));
        let mut b = self.launch("add_bias");
        b.arg(&y).arg(&bias).arg(&r).arg(&nn);
        b.launch(cfg((grid_for(rows * n, 256).min(132 * 8), 1, 1), 256, 0))?;
        Ok(())
    }

    /// f32 to bf16.
    ///
    /// # Safety
    /// Addresses must hold `n` values.
    pub unsafe fn to_bf16(&self, x: u64, out: u64, n: usize) -> Result<(), GpuError> {
        let nn = n as u64;
        let mut b = self.launch("f32_to_bf16");
        b.arg(&x).arg(&out).arg(&nn);
        b.launch(cfg((grid_for(n, 256).min(132 * 8), 1, 1), 256, 0))?;
        Ok(())
    }

    /// `out[j] = x[idx[j]]` for `n` rows of `h`.
    ///
    /// # Safety
    /// Addresses must hold the shapes; `idx` must index rows of `x`.
    pub unsafe fn gather_rows(&self, x: u64, idx: u64, out: u64, n: usize, h: usize) -> Result<(), GpuError> {
        let hh = i(h);
        let mut b = self.launch("gather_rows");
        b.arg(&x).arg(&idx).arg(&out).arg(&hh);
        b.launch(cfg((n as u32, 1, 1), 256, 0))?;
        Ok(())
    }

    /// Embedding rows of `n` token ids (i32 at `ids`) into f32 `out`, plus learned positions when given.
    ///
    /// # Safety
    /// `ids`/`pos` must hold `n` valid rows; `pos_emb` (0: none) must cover every position.
    pub unsafe fn embed(
        &self,
        m: &DevMatrix,
        ids: u64,
        pos: u64,
        pos_emb: u64,
        out: u64,
        n: usize,
    ) -> Result<(), GpuError> {
        let fmt = m.format.code().ok_or_else(|| GpuError::Shape(format!("an embedding in {:?}", m.format)))?;
        let (q, s, h) = (m.q.ptr(), m.s.as_ref().map_or(0, DevBuf::ptr), i(m.cols));
        let mut b = self.launch("embed");
        b.arg(&q).arg(&s).arg(&fmt).arg(&ids).arg(&pos).arg(&pos_emb).arg(&out).arg(&h);
        // A row over blocks of 256 columns (a decode step's one row in one block waited 16 loads deep).
        b.launch(cfg((n as u32, m.cols.div_ceil(256) as u32, 1), 256, 0))?;
        Ok(())
    }

    /// q/k norm, RoPE, q out, k and v into the pages.
    ///
    /// # Safety
    /// Every address must hold what [`QkvPost`] says; page tables must cover every row's position.
    pub unsafe fn qkv_post(&self, p: &QkvPost) -> Result<(), GpuError> {
        let (mp, nh, nkv, hd) = (i(p.meta.max_pages), i(p.nh), i(p.nkv), i(p.hd));
        let mut b = self.launch("qkv_post");
        b.arg(&p.qkv).arg(&p.q_out).arg(&p.k_pages).arg(&p.v_pages).arg(&p.q_norm).arg(&p.k_norm);
        b.arg(&p.inv_freq).arg(&p.meta.row_pos).arg(&p.meta.row_seq).arg(&p.meta.tables).arg(&mp);
        b.arg(&nh).arg(&nkv).arg(&hd).arg(&p.eps);
        b.launch(cfg((p.rows as u32, (p.nh + p.nkv) as u32, 1), 32, 0))?;
        Ok(())
    }

    /// Index of the first maximum of each of `rows` rows of `n` f32, into i32 `out`.
    ///
    /// # Safety
    /// Addresses must hold the shapes.
    pub unsafe fn argmax_rows(&self, x: u64, out: u64, rows: usize, n: usize) -> Result<(), GpuError> {
        let nn = i(n);
        let mut b = self.launch("argmax_rows");
        b.arg(&x).arg(&out).arg(&nn);
        b.launch(cfg((rows as u32, 1, 1), 1024, 0))?;
        Ok(())
    }

    /// One step of greedy decoding ahead on the device (quant.cu's `greedy_advance`): a one-row decode pass's
    /// metadata (`meta`: its token, then its position) takes the pick in `ids` and the next position, and
    /// `hist[step]` keeps the pick, so several passes run back to back with one wait at the end. A pick of `vocab`
    /// or more is kept in `hist` for the host to refuse, and token 0 fed in its place.
    ///
    /// # Safety
    /// `meta` must be a one-row pass's metadata, `ids` hold the pick, `hist` more than `step` ints.
    pub unsafe fn greedy_advance(
        &self,
        meta: u64,
        ids: u64,
        hist: u64,
        step: usize,
        vocab: usize,
    ) -> Result<(), GpuError> {
        let (st, nv) = (i(step), i(vocab));
        let mut b = self.launch("greedy_advance");
        b.arg(&meta).arg(&ids).arg(&hist).arg(&st).arg(&nv);
        b.launch(cfg((1, 1, 1), 32, 0))?;
        Ok(())
    }
}
