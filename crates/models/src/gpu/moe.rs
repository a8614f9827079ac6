//! A routed MLP on the GPU: the router in f32 (as the CPU computes it, so both choose alike), the choice on the
//! device, and the chosen experts' products.
//!
//! Passes of up to [`MMA_FEW_MAX_ROWS`] rows (decode, recorded as graphs) never leave the device: the experts'
//! products read their matrices from a table by the ids the router wrote, one GEMV per (row, expert) — a step reads
//! only the chosen experts' weights — started expert by expert, so an expert chosen by several rows is read once. Longer passes (prefill) read the choice back, group the rows by expert, and
//! run each expert's products once over all its rows (the tensor-core kernel or cuBLAS, as a dense product of that
//! height), then add every row's experts in increasing expert order, as the CPU does.

use crate::error::ModelError;
use crate::moe::Moe;
use kvad_tensor::cuda::{
    Act, DevBuf, DevMatrix, ExpertTable, Gpu, RouteArgs, GEMV_MAX_ROWS, MMA_FEW_MAX_ROWS, MOE_MAX_K_WIDTH,
};
use std::sync::Arc;

/// What a routed layer's kernels work with in one pass (the decoder's pass context, as far as this block reads it).
pub(crate) struct MoePass<'a> {
    pub(crate) gpu: &'a Gpu,
    /// Rows in the pass.
    pub(crate) rows: usize,
    pub(crate) hidden: usize,
    /// bf16 copy of a block-format matrix for cuBLAS (prefill).
    pub(crate) wtmp: Option<&'a DevBuf>,
    /// The routed layers' buffers.
    pub(crate) scratch: Option<&'a MoeScratch>,
}

/// One routed MLP's weights on the device.
pub(crate) struct MoeMlp {
    /// `[experts][hidden]` f32.
    router: DevBuf,
    /// `[experts]` f32, added to the scores for choosing only.
    bias: Option<DevBuf>,
    /// Each expert's gate rows then up rows, `[2·ff][hidden]`.
    gate_up: ExpertTable,
    /// Each expert's `[hidden][ff]`.
    down: ExpertTable,
    route: RouteArgs,
    ff: usize,
    /// The shared experts every token also runs (DeepSeek), as one SwiGLU.
    shared: Option<SharedMlp>,
}

/// Shared experts: gate and up stacked (`[2·ff][hidden]`), then down, in the layer's device format.
pub(crate) struct SharedMlp {
    gate_up: DevMatrix,
    down: DevMatrix,
    /// `[hidden]` f32: Qwen3-Next scales the shared expert's output by `sigmoid(gate · x)` per token.
    gate: Option<DevBuf>,
}

/// The widths a routed layer's working buffers take (the largest over the model's layers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MoeShape {
    pub(crate) experts: usize,
    pub(crate) top_k: usize,
    pub(crate) ff: usize,
    /// The shared experts' width (0: none).
    pub(crate) shared_ff: usize,
}

impl MoeShape {
    fn max(self, o: MoeShape) -> MoeShape {
        MoeShape {
            experts: self.experts.max(o.experts),
            top_k: self.top_k.max(o.top_k),
            ff: self.ff.max(o.ff),
            shared_ff: self.shared_ff.max(o.shared_ff),
        }
    }
}

/// The largest routed shape among `shapes` (None: no layer routes).
pub(crate) fn largest(shapes: impl Iterator<Item = MoeShape>) -> Option<MoeShape> {
    shapes.reduce(MoeShape::max)
}

/// Working buffers of the routed layers for passes of up to `rows` rows.
pub(crate) struct MoeScratch {
    /// `[rows][experts]` router logits.
    logits: DevBuf,
    /// `[rows][k]` chosen experts.
    ids: DevBuf,
    /// `[rows][k]` their weights.
    w: DevBuf,
    /// Prefill: the rows in expert order (`[rows·k]`), then where each (row, slot) output is (`[rows·k]`).
    idx: DevBuf,
    /// Prefill: the rows gathered in expert order, bf16 `[rows·k][hidden]`.
    xg: DevBuf,
    /// `[rows·k][2·ff]` f32 gate and up outputs.
    up: DevBuf,
    /// `[rows·k][ff]` the activation (f32 for the GEMVs, bf16 for prefill's products).
    act: DevBuf,
    /// `[rows·k][hidden]` f32 each expert's output.
    y: DevBuf,
    /// Prefill: the rows as bf16, for the shared experts' products.
    sx: DevBuf,
    /// `[rows][2·shared ff]` f32 the shared experts' gate and up outputs.
    sup: DevBuf,
    /// `[rows][shared ff]` their activation.
    sact: DevBuf,
}

impl MoeScratch {
    /// Buffers for passes of up to `rows` rows.
    pub(crate) fn new(gpu: &Arc<Gpu>, s: MoeShape, hidden: usize, rows: usize) -> Result<MoeScratch, ModelError> {
        let items = rows * s.top_k;
        Ok(MoeScratch {
            logits: DevBuf::zeros(gpu, rows * s.experts * 4)?,
            ids: DevBuf::zeros(gpu, items * 4)?,
            w: DevBuf::zeros(gpu, items * 4)?,
            idx: DevBuf::zeros(gpu, 2 * items * 4)?,
            xg: DevBuf::zeros(gpu, if rows > MMA_FEW_MAX_ROWS { items * hidden * 2 } else { 0 })?,
            up: DevBuf::zeros(gpu, items * 2 * s.ff * 4)?,
            act: DevBuf::zeros(gpu, items * s.ff * 4)?,
            y: DevBuf::zeros(gpu, items * hidden * 4)?,
            sx: DevBuf::zeros(gpu, if s.shared_ff > 0 && rows > GEMV_MAX_ROWS { rows * hidden * 2 } else { 0 })?,
            sup: DevBuf::zeros(gpu, rows * 2 * s.shared_ff * 4)?,
            sact: DevBuf::zeros(gpu, rows * s.shared_ff * 4)?,
        })
    }
}

impl MoeMlp {
    /// Uploads a routed layer: the router as f32, each expert's matrices in the backend's device format
    /// (`matrix` uploads one).
    pub(crate) fn upload(
        gpu: &Arc<Gpu>,
        m: &Moe,
        matrix: impl Fn(&kvad_tensor::cpu::QMatrix) -> Result<DevMatrix, ModelError>,
    ) -> Result<MoeMlp, ModelError> {
        let r = &m.routing;
        let route = RouteArgs {
            experts: r.n_experts,
            top_k: r.top_k,
            sigmoid: r.scoring == crate::config::Scoring::Sigmoid,
            groups: r.groups,
            normalise: r.normalise,
            scale: r.scale,
        };
        if let Some(why) = route.unsupported() {
            return Err(ModelError::refused("num_experts_per_tok", r.top_k, why));
        }
        let router = m.router.matrix();
        if router.qtype() != kvad_tensor::cpu::QType::F32 {
            return Err(ModelError::Gpu(format!("the router is held as {:?}, the GPU reads f32", router.qtype())));
        }
        let hidden = router.cols();
        if hidden > MOE_MAX_K_WIDTH || m.experts.ff() > MOE_MAX_K_WIDTH || !hidden.is_multiple_of(8) {
            return Err(ModelError::refused(
                "hidden_size",
                hidden,
                format!("routed layers on the GPU take widths that are multiples of 8 up to {MOE_MAX_K_WIDTH}"),
            ));
        }
        let shared = match &m.shared {
            Some(sh) => Some(SharedMlp {
                gate_up: matrix(sh.gate_up.matrix())?,
                down: matrix(sh.down.matrix())?,
                gate: m.shared_gate.as_ref().map(|g| shared_gate_row(gpu, g.matrix())).transpose()?,
            }),
            None => None,
        };
        let (mut gu, mut dn) = (Vec::new(), Vec::new());
        for (g, d) in m.experts.views() {
            gu.push(matrix(g)?);
            dn.push(matrix(d)?);
        }
        Ok(MoeMlp {
            router: DevBuf::from_host(gpu, router.bytes())?,
            bias: m.bias.as_deref().map(|b| DevBuf::from_slice(gpu, b)).transpose()?,
            gate_up: ExpertTable::new(gpu, gu)?,
            down: ExpertTable::new(gpu, dn)?,
            route,
            ff: m.experts.ff(),
            shared,
        })
    }

    /// The widths its working buffers take.
    pub(crate) fn shape(&self) -> MoeShape {
        let shared_ff = self.shared.as_ref().map_or(0, |s| s.down.cols());
        MoeShape { experts: self.route.experts, top_k: self.route.top_k, ff: self.ff, shared_ff }
    }

    /// One expert's products (every expert has this shape and format), then the shared experts'.
    pub(crate) fn products(&self) -> Vec<&DevMatrix> {
        let mut v = vec![&self.gate_up.experts[0], &self.down.experts[0]];
        if let Some(s) = &self.shared {
            v.extend([&s.gate_up, &s.down]);
        }
        v
    }

    /// Device bytes of its weights.
    pub(crate) fn bytes(&self) -> usize {
        let shared = self
            .shared
            .as_ref()
            .map_or(0, |s| s.gate_up.bytes() + s.down.bytes() + s.gate.as_ref().map_or(0, DevBuf::len));
        self.router.len()
            + self.bias.as_ref().map_or(0, DevBuf::len)
            + self.gate_up.bytes()
            + self.down.bytes()
            + shared
    }

    /// Adds the layer's output for the pass's normed f32 rows `input` to the residual stream `x`.
    ///
    /// # Safety
    /// `input` and `x` hold the pass's rows at the hidden width; the context's scratch was made for this pass.
    pub(crate) unsafe fn issue(&self, p: &MoePass<'_>, input: Act, x: u64) -> Result<(), ModelError> {
        let Act::F32(input) = input else {
            return Err(ModelError::Gpu("a routed layer reads f32 rows".into()));
        };
        let s = p.scratch.ok_or_else(|| ModelError::Gpu("a routed layer's pass has no routed scratch".into()))?;
        let (gpu, rows, h, k, ff) = (p.gpu, p.rows, p.hidden, self.route.top_k, self.ff);
        let items = rows * k;
        let bias = self.bias.as_ref().map_or(0, DevBuf::ptr);
        // SAFETY: the scratch holds `rows` rows of every width (made for this pass), the tables the experts'.
        unsafe {
            gpu.moe_router(input, self.router.ptr(), s.logits.ptr(), rows, self.route.experts, h)?;
            gpu.moe_route(s.logits.ptr(), bias, s.ids.ptr(), s.w.ptr(), rows, &self.route)?;
            if rows <= MMA_FEW_MAX_ROWS {
                // Several rows: each expert's items run together, its weights read once (the rest from L2).
                let order = if rows > 1 {
                    gpu.moe_order(s.ids.ptr(), s.idx.ptr(), items, self.route.experts)?;
                    s.idx.ptr()
                } else {
                    0
                };
                gpu.moe_gemv(&self.gate_up, s.ids.ptr(), order, input, s.up.ptr(), items, k, false)?;
                gpu.silu_mul(s.up.ptr(), s.act.ptr(), items, ff, false)?;
                gpu.moe_gemv(&self.down, s.ids.ptr(), order, s.act.ptr(), s.y.ptr(), items, k, true)?;
                gpu.moe_combine(x, s.y.ptr(), s.w.ptr(), 0, rows, k, h)?;
                return self.issue_shared(p, s, input, x);
            }
            // The choice read back (this pass is not recorded): each expert's rows together, in row order.
            let ids: Vec<i32> = s.ids.read(gpu, items)?;
            let Grouped { order, pos, counts } = group_by_expert(&ids, k, self.route.experts)?;
            let mut both = order;
            both.extend_from_slice(&pos);
            gpu.write_ints(s.idx.ptr(), &both)?;
            gpu.moe_gather_bf16(input, s.idx.ptr(), s.xg.ptr(), items, h)?;
            let mut at = 0;
            for (e, &n) in counts.iter().enumerate() {
                if n > 0 {
                    let m = &self.gate_up.experts[e];
                    gpu.matmul(m, Act::Bf16(s.xg.at(at * h * 2)), n, s.up.at(at * 2 * ff * 4), 0, false, p.wtmp)?;
                }
                at += n;
            }
            gpu.silu_mul(s.up.ptr(), s.act.ptr(), items, ff, true)?;
            at = 0;
            for (e, &n) in counts.iter().enumerate() {
                if n > 0 {
                    let m = &self.down.experts[e];
                    gpu.matmul(m, Act::Bf16(s.act.at(at * ff * 2)), n, s.y.at(at * h * 4), 0, false, p.wtmp)?;
                }
                at += n;
            }
            gpu.moe_combine(x, s.y.ptr(), s.w.ptr(), s.idx.at(items * 4), rows, k, h)?;
            self.issue_shared(p, s, input, x)
        }
    }

    /// Adds the shared experts' output (if any) to the residual stream, after the routed experts' (the CPU adds
    /// them to the routed sum first: the same terms, rounded in another order).
    ///
    /// # Safety
    /// As [`MoeMlp::issue`]'s; `input` the pass's f32 rows.
    unsafe fn issue_shared(&self, p: &MoePass<'_>, s: &MoeScratch, input: u64, x: u64) -> Result<(), ModelError> {
        let Some(sh) = &self.shared else { return Ok(()) };
        let (gpu, rows, ff) = (p.gpu, p.rows, sh.down.cols());
        // Past the GEMVs' rows the products read bf16 (the tensor-core kernel or cuBLAS).
        let gemv = rows <= GEMV_MAX_ROWS;
        // SAFETY: the scratch holds `rows` rows of the shared widths (made for this pass).
        unsafe {
            let a = if gemv {
                Act::F32(input)
            } else {
                gpu.to_bf16(input, s.sx.ptr(), rows * p.hidden)?;
                Act::Bf16(s.sx.ptr())
            };
            gpu.matmul(&sh.gate_up, a, rows, s.sup.ptr(), 0, false, p.wtmp)?;
            gpu.silu_mul(s.sup.ptr(), s.sact.ptr(), rows, ff, !gemv)?;
            let a = if gemv { Act::F32(s.sact.ptr()) } else { Act::Bf16(s.sact.ptr()) };
            match &sh.gate {
                // The routed experts' outputs in y are summed into x already: y takes the shared one, gated.
                Some(g) => {
                    gpu.matmul(&sh.down, a, rows, s.y.ptr(), 0, false, p.wtmp)?;
                    gpu.moe_shared_gate_add(x, s.y.ptr(), input, g.ptr(), rows, p.hidden)?;
                }
                None => gpu.matmul(&sh.down, a, rows, x, 0, true, p.wtmp)?,
            }
        }
        Ok(())
    }
}

/// The shared expert's gate (`[1][hidden]`, any host format) as f32 on the device.
fn shared_gate_row(gpu: &Arc<Gpu>, m: &kvad_tensor::cpu::QMatrix) -> Result<DevBuf, ModelError> {
    if m.rows() != 1 {
        return Err(ModelError::Gpu(format!("a shared expert gate of {} rows", m.rows())));
    }
    let mut row = vec![0f32; m.cols()];
    m.dequantize_row(0, &mut row);
    Ok(DevBuf::from_slice(gpu, &row)?)
}

/// A pass's choices (`ids[row·k + slot]`, `k` slots a row) grouped by expert: the rows in expert order (each
/// expert's in row order), where each (row, slot)'s output lands in that order, and each expert's row count.
fn group_by_expert(ids: &[i32], k: usize, experts: usize) -> Result<Grouped, ModelError> {
    let mut counts = vec![0usize; experts];
    for &e in ids {
        let c = counts
            .get_mut(e as usize)
            .ok_or_else(|| ModelError::Gpu(format!("the router chose expert {e} of {experts}")))?;
        *c += 1;
    }
    let mut next: Vec<usize> = counts
        .iter()
        .scan(0, |acc, &c| {
            let start = *acc;
            *acc += c;
            Some(start)
        })
        .collect();
    let mut order = vec![0i32; ids.len()];
    let mut pos = vec![0i32; ids.len()];
    for (i, &e) in ids.iter().enumerate() {
        let p = next[e as usize];
        next[e as usize] += 1;
        order[p] = (i / k) as i32;
        pos[i] = p as i32;
    }
    Ok(Grouped { order, pos, counts })
}

/// A prefill pass's rows grouped by expert ([`group_by_expert`]).
struct Grouped {
    /// The row each expert input is, experts in order.
    order: Vec<i32>,
    /// Where each (row, slot)'s output lands among them.
    pos: Vec<i32>,
    /// Rows per expert.
    counts: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_group_by_expert_in_row_order() {
        // Two rows, two slots each: row 0 chose experts 1 and 2, row 1 experts 0 and 2.
        let Grouped { order, pos, counts } = group_by_expert(&[1, 2, 0, 2], 2, 3).unwrap();
        assert_eq!(counts, [1, 1, 2]);
        // Expert 0 reads row 1, expert 1 row 0, expert 2 rows 0 and 1.
        assert_eq!(order, [1, 0, 0, 1]);
        // Row 0's outputs land at 1 (expert 1) and 2 (expert 2's first), row 1's at 0 and 3.
        assert_eq!(pos, [1, 2, 0, 3]);
        assert!(group_by_expert(&[3], 1, 3).is_err());
    }
}
