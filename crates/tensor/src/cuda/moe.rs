//! Mixture-of-experts launches (`kernels/moe.cu`): the router, the choice of experts on the device, the experts'
//! products picked from a table of matrices by the choice, the gather of a prompt's rows by expert, and the weighted
//! sum into the residual stream. The model side (kvad-models' `gpu/moe.rs`) puts them together.

use super::buffer::DevBuf;
use super::ops::{cfg, i};
use super::{DevFormat, DevMatrix, Gpu, GpuError};
use std::sync::Arc;

/// Most experts a token may use on the device (`MOE_MAX_K` in moe.cu).
pub const MOE_MAX_K: usize = 16;

/// Most expert groups the device's router ranks (a bit mask of 128 in moe.cu).
pub const MOE_MAX_GROUPS: usize = 128;

/// Most items (rows × experts a row) [`Gpu::moe_order`] sorts: a thread each in one block.
const MOE_ORDER_MAX_ITEMS: usize = 1024;

/// Widest input an expert product takes: its input row, as f32 for bf16 experts (moe.cu,
/// `moe_gemv_smem`), is held in the 48 KiB of shared memory a block gets without asking (DeepSeek-V3's 7,168 is the
/// widest published).
pub const MOE_MAX_K_WIDTH: usize = 10_240;

/// How a router chooses, as kvad-models' `Routing` says (the kernel's arguments).
#[derive(Debug, Clone, Copy)]
pub struct RouteArgs {
    /// Routed experts.
    pub experts: usize,
    /// Experts a token uses.
    pub top_k: usize,
    /// Sigmoid scores (else softmax).
    pub sigmoid: bool,
    /// `(n_group, topk_group)`.
    pub groups: Option<(usize, usize)>,
    /// The chosen weights divided by their sum.
    pub normalise: bool,
    /// Every weight times this.
    pub scale: f32,
}

impl RouteArgs {
    /// Why the device cannot route like this, if it cannot (the caller names the field).
    pub fn unsupported(&self) -> Option<String> {
        if self.top_k > MOE_MAX_K {
            return Some(format!("{} experts a token; the GPU's router takes up to {MOE_MAX_K}", self.top_k));
        }
        if let Some((g, _)) = self.groups.filter(|&(g, _)| g > MOE_MAX_GROUPS) {
            return Some(format!("{g} expert groups; the GPU's router ranks up to {MOE_MAX_GROUPS}"));
        }
        None
    }
}

/// The experts of one layer on the device: each expert's matrix, and the table of their addresses the products
/// read (quants or bf16 values, then scales), so the choice made on the device picks the matrix.
#[derive(Debug)]
pub struct ExpertTable {
    /// One matrix per expert, all of one format and shape.
    pub experts: Vec<DevMatrix>,
    /// `[experts]` u64 addresses of the values, then `[experts]` of the scales (0 for bf16).
    table: DevBuf,
}

impl ExpertTable {
    /// Takes the experts' matrices (one format and shape, at least one) and writes their table.
    pub fn new(gpu: &Arc<Gpu>, experts: Vec<DevMatrix>) -> Result<ExpertTable, GpuError> {
        let first = experts.first().ok_or_else(|| GpuError::Shape("an expert table of no experts".into()))?;
        let (f, r, c) = (first.format, first.rows, first.cols);
        if experts.iter().any(|m| (m.format, m.rows, m.cols) != (f, r, c)) {
            return Err(GpuError::Shape("experts of different formats or shapes in one table".into()));
        }
        if f == DevFormat::Q6 {
            return Err(GpuError::Shape("6-bit experts (only a q4 backend's head is 6-bit)".into()));
        }
        let mut t: Vec<u64> = experts.iter().map(|m| m.q.ptr()).collect();
        t.extend(experts.iter().map(|m| m.s.as_ref().map_or(0, DevBuf::ptr)));
        let table = DevBuf::from_slice(gpu, &t)?;
        Ok(ExpertTable { experts, table })
    }

    /// The format of every expert.
    pub fn format(&self) -> DevFormat {
        self.experts[0].format
    }

    /// Outputs of each expert's product.
    pub fn rows(&self) -> usize {
        self.experts[0].rows
    }

    /// Inputs of each expert's product.
    pub fn cols(&self) -> usize {
        self.experts[0].cols
    }

    /// Device bytes of the experts (and the table).
    pub fn bytes(&self) -> usize {
        self.experts.iter().map(DevMatrix::bytes).sum::<usize>() + self.table.len()
    }
}

impl Gpu {
    /// `logits[r][e] = x[r] · w[e]` in f32 (`w` `[experts][h]` f32, `x` `[rows][h]` f32, h a multiple of 4).
    ///
    /// # Safety
    /// Addresses must hold the shapes given.
    pub unsafe fn moe_router(
        &self,
        x: u64,
        w: u64,
        out: u64,
        rows: usize,
        experts: usize,
        h: usize,
    ) -> Result<(), GpuError> {
        if !h.is_multiple_of(4) {
            return Err(GpuError::Shape(format!("a router over {h} inputs (a multiple of 4)")));
        }
        let (r, e, k) = (i(rows), i(experts), i(h));
        let mut b = self.launch("moe_router");
        b.arg(&x).arg(&w).arg(&out).arg(&r).arg(&e).arg(&k);
        b.launch(cfg(((rows * experts).div_ceil(8) as u32, 1, 1), 256, 0))
    }

    /// Each row's experts (`ids[rows][k]` i32, increasing) and weights (`w[rows][k]` f32) from its router logits
    /// (`[rows][experts]`), as kvad-models' `route` chooses them; `bias` (0: none) the per-expert choice bias.
    ///
    /// # Safety
    /// Addresses must hold the shapes given.
    pub unsafe fn moe_route(
        &self,
        logits: u64,
        bias: u64,
        ids: u64,
        w: u64,
        rows: usize,
        a: &RouteArgs,
    ) -> Result<(), GpuError> {
        if let Some(why) = a.unsupported() {
            return Err(GpuError::Shape(why));
        }
        let (g, tg) = a.groups.unwrap_or((0, 0));
        let smem = 4 * (2 * a.experts + g.max(1)) + a.experts;
        let (e, k, sc, gg, tgg, norm) =
            (i(a.experts), i(a.top_k), i32::from(a.sigmoid), i(g), i(tg), i32::from(a.normalise));
        let mut b = self.launch("moe_route");
        b.arg(&logits)
            .arg(&bias)
            .arg(&ids)
            .arg(&w)
            .arg(&e)
            .arg(&k)
            .arg(&sc)
            .arg(&gg)
            .arg(&tgg)
            .arg(&norm)
            .arg(&a.scale);
        b.launch(cfg((rows as u32, 1, 1), 32, smem.next_multiple_of(16) as u32))
    }

    /// `order` = the `items` items of `ids` sorted by expert, each expert's in item order, so that
    /// [`Gpu::moe_gemv`] runs an expert's items one after another (its weights read from memory once).
    ///
    /// # Safety
    /// `ids` must hold `items` expert indices below `experts`, `order` room for `items` ints.
    pub unsafe fn moe_order(&self, ids: u64, order: u64, items: usize, experts: usize) -> Result<(), GpuError> {
        if items > MOE_ORDER_MAX_ITEMS || items == 0 {
            return Err(GpuError::Shape(format!("an expert order of {items} items")));
        }
        let (n, e) = (i(items), i(experts));
        let mut b = self.launch("moe_order");
        b.arg(&ids).arg(&order).arg(&n).arg(&e);
        b.launch(cfg((1, 1, 1), items.next_multiple_of(32) as u32, (experts * 4) as u32))
    }

    /// `y[i] = W_ids[i] · x` for `items` items (a row's chosen experts: item i is slot `i % k` of row `i / k`),
    /// each output row of `t.rows()`; `x` holds one f32 row per row of the pass (`per_item` false: the experts' up
    /// product, every slot of a row reading it) or one per item (the down product). `order` (0: item order) is the
    /// order the items' blocks start in ([`Gpu::moe_order`]).
    ///
    /// # Safety
    /// `ids` must hold `items` expert indices below the table's length, `order` (unless 0) a permutation of
    /// `0..items`, `x` and `y` the shapes given.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn moe_gemv(
        &self,
        t: &ExpertTable,
        ids: u64,
        order: u64,
        x: u64,
        y: u64,
        items: usize,
        k: usize,
        per_item: bool,
    ) -> Result<(), GpuError> {
        let (n, kk) = (t.rows(), t.cols());
        let fmt = match t.format() {
            DevFormat::Bf16 if kk.is_multiple_of(8) => 0i32,
            DevFormat::Q8 if kk.is_multiple_of(32) => 1,
            DevFormat::Q4 if kk.is_multiple_of(32) => 2,
            f => return Err(GpuError::Shape(format!("expert products of {f:?} × {kk}"))),
        };
        if kk > MOE_MAX_K_WIDTH || items == 0 {
            return Err(GpuError::Shape(format!("expert products of {items} items × {kk} inputs")));
        }
        let (qt, st) = (t.table.ptr(), t.table.at(t.experts.len() * 8));
        let (nn, ki, kslots, pi) = (i(n), i(kk), i(k), i32::from(per_item));
        let mut b = self.launch(if fmt == 0 { "moe_gemv_bf16" } else { "moe_gemv_q" });
        b.arg(&qt).arg(&st).arg(&ids).arg(&order).arg(&x).arg(&y).arg(&fmt).arg(&nn).arg(&ki).arg(&kslots).arg(&pi);
        // 8 warps a block, each one output (bf16) or two (q8/q4: moe.cu, MOE_ROWS_Q).
        let per_block = if fmt == 0 { 8 } else { 16 };
        b.launch(cfg((n.div_ceil(per_block) as u32, items as u32, 1), 256, moe_gemv_smem(fmt, kk) as u32))
    }

    /// `out[i] = bf16(x[perm[i]])` for `n` rows of `h`: a prompt's rows in the order the experts read them.
    ///
    /// # Safety
    /// `perm` must hold `n` row indices of `x`, `out` `n × h` bf16.
    pub unsafe fn moe_gather_bf16(&self, x: u64, perm: u64, out: u64, n: usize, h: usize) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let hh = i(h);
        let mut b = self.launch("moe_gather_bf16");
        b.arg(&x).arg(&perm).arg(&out).arg(&hh);
        b.launch(cfg((n as u32, 1, 1), 256, 0))
    }

    /// `x[r] += Σ_j w[r][j] · y[pos[r][j]]` over each row's `k` experts (`pos` 0: `y[r·k + j]`).
    ///
    /// # Safety
    /// Addresses must hold the shapes given; `pos` indices of `y`'s rows.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn moe_combine(
        &self,
        x: u64,
        y: u64,
        w: u64,
        pos: u64,
        rows: usize,
        k: usize,
        h: usize,
    ) -> Result<(), GpuError> {
        let (kk, hh) = (i(k), i(h));
        let mut b = self.launch("moe_combine");
        b.arg(&x).arg(&y).arg(&w).arg(&pos).arg(&kk).arg(&hh);
        b.launch(cfg((rows as u32, 1, 1), 256, 0))
    }

    /// `x[r] += sigmoid(input[r] · gw) · y[r]` for `rows` rows of `h`: a shared expert's output under its gate.
    ///
    /// # Safety
    /// `x`, `y` and `input` hold `rows × h` f32, `gw` `h`.
    pub unsafe fn moe_shared_gate_add(
        &self,
        x: u64,
        y: u64,
        input: u64,
        gw: u64,
        rows: usize,
        h: usize,
    ) -> Result<(), GpuError> {
        let hh = i(h);
        let mut b = self.launch("moe_shared_gate_add");
        b.arg(&x).arg(&y).arg(&input).arg(&gw).arg(&hh);
        b.launch(cfg((rows as u32, 1, 1), 256, 0))
    }

    /// Copies host ints to device address `dst`, in stream order (the host copy may go once this returns).
    ///
    /// # Safety
    /// `dst` must hold `v.len()` ints.
    pub unsafe fn write_ints(&self, dst: u64, v: &[i32]) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        cudarc::driver::result::memcpy_htod_async(dst, v, self.stream.cu_stream())?;
        Ok(())
    }
}

/// Shared memory of a `moe_gemv` block over inputs of `k` (moe.cu): bf16 experts (`fmt` 0) hold the row as f32,
/// the block formats as two byte terms with 16 bytes of padding a 32 and a scale a 32.
fn moe_gemv_smem(fmt: i32, k: usize) -> usize {
    if fmt == 0 {
        k * 4
    } else {
        3 * k + k / 32 * 4
    }
}
