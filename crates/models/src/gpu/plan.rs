//! What one pass runs, decided before any kernel is queued: where its pieces sit in the metadata buffer, and how
//! each of its norms is computed ([`NormStep`]) — by the norm kernel, or in the tail of the product before it, in
//! the form the product after it reads. The decoder's pass then queues each block's kernels as this says.

use super::blocks::{Layer, Norm};
use kvad_tensor::cuda::{DevBuf, DevMatrix, Gpu, Meta, NormTo, GEMV_MAX_ROWS};

/// How one norm of a pass is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NormStep {
    /// The norm kernel, into the scratch, before its consumer (f32 rows for the GEMV path, bf16 for the others).
    Kernel,
    /// The first norm's kernel, f32 rows (a decode pass whose products norm their own outputs from here on).
    First,
    /// The first norm's kernel writing its consumer's two-term 8-bit activations too.
    FirstAct8,
    /// The residual product before it norms its own output, in this form for the product after it.
    Tail(NormTo),
}

/// Where the pass's pieces sit in the metadata buffer, what the pass runs, and how its norms are computed.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) rows: usize,
    /// Logit rows.
    pub(crate) sel: usize,
    /// Width of a page table (padded for graphs, so one graph serves a sequence as it grows).
    pub(crate) width: usize,
    /// Tensor-core attention tiles (0: the key-stream kernels).
    pub(crate) n_tiles: usize,
    /// The logit rows are all rows in order (decode): no gather needed.
    pub(crate) all_rows: bool,
    /// Every norm of the pass, in order: each layer's two, then the final one (`2 · layers + 1`).
    pub(crate) norms: Vec<NormStep>,
    /// Where the recurrent slot table starts in the metadata (ints): each sequence's first row and the row count
    /// (`seqs + 1`), then each sequence's slot ids (`seqs × recurrent layers`).
    pub(crate) slots_at: usize,
}

impl Plan {
    /// Where the kernels find positions, sequences and page tables.
    pub(crate) fn meta(&self, base: &DevBuf) -> Meta {
        let r = self.rows;
        Meta {
            row_pos: base.at(r * 4),
            row_seq: base.at(r * 8),
            tables: base.at((3 * r + self.sel) * 4),
            max_pages: self.width,
        }
    }

    /// The logit rows' indices.
    pub(crate) fn sel_ptr(&self, base: &DevBuf) -> u64 {
        base.at(self.rows * 12)
    }

    /// The attention tiles.
    pub(crate) fn tiles_ptr(&self, base: &DevBuf, seqs: usize) -> u64 {
        base.at((3 * self.rows + self.sel + seqs * self.width) * 4)
    }
}

/// How every norm of a pass of `rows` rows is computed. Decode passes of RMSNorm models take each norm from the
/// product before it (the o and down products norm the residual stream they update, for the next product), so no
/// norm kernel runs but the first; the norm also writes the two-term 8-bit activations when the product after it
/// reads them (q8/q4 decode), or leaves the division by the RMS to that product where the GPU defers it
/// ([`Gpu::defers_norm`]). Other passes, and every pass of a model with routed layers (no one product writes their
/// output) or latent ones (two products read their input), run the norm kernel before each consumer.
pub(crate) fn norm_steps(
    gpu: &Gpu,
    layers: &[Layer],
    final_norm: &Norm,
    head: &DevMatrix,
    rows: usize,
    all_rows: bool,
) -> Vec<NormStep> {
    let n = 2 * layers.len() + 1;
    let rms = |n: &Norm| n.rms_weight().is_some();
    let fused = rows <= GEMV_MAX_ROWS
        && rms(final_norm)
        && layers
            .iter()
            .all(|l| rms(&l.norm1) && rms(&l.norm2) && l.mlp.output().is_some() && l.attn.takes_tail_norm())
        && !layers.is_empty();
    if !fused {
        return vec![NormStep::Kernel; n];
    }
    let tail = |producer: &DevMatrix, next: Option<&DevMatrix>| {
        NormStep::Tail(match next {
            Some(m) if gpu.defers_norm(producer, m, rows) => NormTo::Deferred,
            Some(m) if gpu.takes_act8(m, rows) => NormTo::Act8,
            _ => NormTo::F32,
        })
    };
    let mut steps = Vec::with_capacity(n);
    steps.push(if gpu.takes_act8(layers[0].attn.input(), rows) { NormStep::FirstAct8 } else { NormStep::First });
    for (li, l) in layers.iter().enumerate() {
        steps.push(tail(l.attn.output().0, Some(l.mlp.input())));
        // The next consumer: the next layer's attention, or the head when every row is kept.
        let next = match layers.get(li + 1) {
            Some(n) => Some(n.attn.input()),
            None => all_rows.then_some(head),
        };
        let Some((down, _)) = l.mlp.output() else { return vec![NormStep::Kernel; n] };
        steps.push(tail(down, next));
    }
    steps
}
