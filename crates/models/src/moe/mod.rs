//! Mixture-of-experts layers, shared by every architecture that routes (Qwen3-MoE in `arch/llama`, DeepSeek in
//! `arch/deepseek`): the router ([`route`]), the routed experts stacked in one matrix per projection, and the
//! shared experts.
//!
//! A step reads only the chosen experts' rows: each expert is a view of its rows of the stack. Rows are grouped by
//! expert, so an expert's weights are read once for all the tokens that chose it, by the same kernels as a dense
//! layer's (one row: the GEMV; a few: the few-row GEMV, each row its one-row bits; more: the panel GEMM).

mod load;
mod route;

pub use route::route;

use crate::config::{MoeConfig, Routing};
use crate::layers::{Linear, SwiGlu};
use kvad_tensor::cpu::{ops, QMatrix};

/// The routed experts of one layer: gate and up of every expert stacked (`[E·2·ff, hidden]`, expert `e`'s gate
/// rows then its up rows), and down (`[E·hidden, ff]`).
#[derive(Debug, Clone)]
pub struct Experts {
    pub(crate) gate_up: QMatrix,
    pub(crate) down: QMatrix,
    /// Per expert: its gate/up rows and its down rows, as views of the stacks.
    views: Vec<(QMatrix, QMatrix)>,
    ff: usize,
}

impl Experts {
    /// Wraps the stacks of `n` experts of width `ff`.
    pub(crate) fn new(gate_up: QMatrix, down: QMatrix, n: usize, ff: usize) -> Self {
        let hidden = down.rows() / n;
        let views = (0..n)
            .map(|e| (gate_up.rows_view(e * 2 * ff..(e + 1) * 2 * ff), down.rows_view(e * hidden..(e + 1) * hidden)))
            .collect();
        Experts { gate_up, down, views, ff }
    }

    /// Bytes of weights.
    pub fn bytes(&self) -> usize {
        self.gate_up.bytes().len() + self.down.bytes().len()
    }

    /// Each expert's gate/up rows and down rows (the GPU uploads each expert as a matrix of its own).
    pub(crate) fn views(&self) -> impl Iterator<Item = &(QMatrix, QMatrix)> {
        self.views.iter()
    }

    /// Each expert's intermediate width.
    pub(crate) fn ff(&self) -> usize {
        self.ff
    }
}

/// One routed layer: the router (f32, as DeepSeek keeps it even in bf16 checkpoints), its choice bias, the
/// experts, and the shared experts every token also runs.
#[derive(Debug, Clone)]
pub struct Moe {
    pub(crate) router: Linear,
    pub(crate) bias: Option<Vec<f32>>,
    pub(crate) experts: Experts,
    pub(crate) shared: Option<SwiGlu>,
    /// Scales the shared experts' output by `sigmoid(gate · x)` per token (Qwen3-Next).
    pub(crate) shared_gate: Option<Linear>,
    pub(crate) routing: Routing,
}

impl Moe {
    /// Bytes of weights.
    pub fn bytes(&self) -> usize {
        self.router.bytes()
            + self.bias.as_ref().map_or(0, |b| b.len() * 4)
            + self.experts.bytes()
            + self.shared.as_ref().map_or(0, SwiGlu::bytes)
            + self.shared_gate.as_ref().map_or(0, Linear::bytes)
    }

    /// `rows × hidden` in, `rows × hidden` out: each row's experts' outputs times their weights, added in increasing
    /// expert order (as transformers adds them), then the shared experts' output.
    pub fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let h = x.len() / rows.max(1);
        let logits = self.router.forward(x, rows);
        let e = self.routing.n_experts;
        let mut routes = Vec::with_capacity(rows);
        let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); e];
        let mut one = Vec::new();
        for r in 0..rows {
            route(&self.routing, &logits[r * e..(r + 1) * e], self.bias.as_deref(), &mut one);
            for &(ex, _) in &one {
                by_expert[ex].push(r);
            }
            routes.push(one.clone());
        }
        // Each (row, expert) output, computed once per expert over the rows that chose it.
        let ff = self.experts.ff;
        let mut outputs: Vec<Vec<f32>> = vec![Vec::new(); e];
        let mut xe = Vec::new();
        for (ex, who) in by_expert.iter().enumerate() {
            if who.is_empty() {
                continue;
            }
            xe.clear();
            for &r in who {
                xe.extend_from_slice(&x[r * h..(r + 1) * h]);
            }
            let (gu_w, down_w) = &self.experts.views[ex];
            let n = who.len();
            let mut gu = vec![0f32; n * 2 * ff];
            gu_w.matmul(&xe, n, &mut gu);
            let mut act = Vec::with_capacity(n * ff);
            for row in gu.chunks_exact(2 * ff) {
                let mut g = row[..ff].to_vec();
                ops::silu_mul(&mut g, &row[ff..]);
                act.extend_from_slice(&g);
            }
            let mut y = vec![0f32; n * h];
            down_w.matmul(&act, n, &mut y);
            outputs[ex] = y;
        }
        let mut out = vec![0f32; rows * h];
        let mut seen = vec![0usize; e];
        for (r, chosen) in routes.iter().enumerate() {
            let o = &mut out[r * h..(r + 1) * h];
            for &(ex, w) in chosen {
                let i = seen[ex];
                seen[ex] += 1;
                for (a, v) in o.iter_mut().zip(&outputs[ex][i * h..(i + 1) * h]) {
                    *a += v * w;
                }
            }
        }
        if let Some(s) = &self.shared {
            let mut y = s.forward(x, rows);
            if let Some(g) = &self.shared_gate {
                for (row, logit) in y.chunks_exact_mut(h).zip(g.forward(x, rows)) {
                    let gate = 1.0 / (1.0 + (-logit).exp());
                    row.iter_mut().for_each(|v| *v *= gate);
                }
            }
            ops::add_inplace(&mut out, &y);
        }
        out
    }
}

/// A decoder layer's feed-forward part, dense or routed (`MoeConfig::sparse` says which).
pub(crate) enum Ffn {
    /// One SwiGLU MLP.
    Dense(SwiGlu),
    /// Routed experts.
    Moe(Box<Moe>),
}

impl Ffn {
    /// Bytes of weights.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Ffn::Dense(m) => m.bytes(),
            Ffn::Moe(m) => m.bytes(),
        }
    }

    /// `rows × hidden` in and out.
    pub(crate) fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        match self {
            Ffn::Dense(m) => m.forward(x, rows),
            Ffn::Moe(m) => m.forward(x, rows),
        }
    }
}

/// Which layers of `n` route, by Qwen3-MoE's rule: not in `mlp_only_layers`, and every `decoder_sparse_step`-th.
pub(crate) fn qwen_sparse_layers(n: usize, step: usize, mlp_only: &[usize]) -> Vec<bool> {
    (0..n).map(|i| !mlp_only.contains(&i) && step > 0 && (i + 1).is_multiple_of(step)).collect()
}

/// Which layers of `n` route, by DeepSeek's rule: from `first_k_dense_replace` on, every `moe_layer_freq`-th.
pub(crate) fn deepseek_sparse_layers(n: usize, first_dense: usize, freq: usize) -> Vec<bool> {
    (0..n).map(|i| i >= first_dense && freq > 0 && i.is_multiple_of(freq)).collect()
}

/// The config of a routed layout, checked: the router's widths and the layer rule's result.
pub(crate) fn check(m: &MoeConfig) -> Result<(), crate::error::ModelError> {
    use crate::error::ModelError;
    let r = &m.routing;
    if r.n_experts == 0 || r.n_experts > 4096 {
        return Err(ModelError::refused("num_experts", r.n_experts, "out of bounds (1..=4096)"));
    }
    if r.top_k == 0 || r.top_k > r.n_experts {
        return Err(ModelError::refused(
            "num_experts_per_tok",
            r.top_k,
            format!("must be between 1 and the expert count ({})", r.n_experts),
        ));
    }
    if let Some((g, k)) = r.groups {
        if g == 0 || !r.n_experts.is_multiple_of(g) {
            return Err(ModelError::refused("n_group", g, format!("must divide the expert count ({})", r.n_experts)));
        }
        if k == 0 || k > g {
            return Err(ModelError::refused("topk_group", k, format!("must be between 1 and n_group ({g})")));
        }
        if k * (r.n_experts / g) < r.top_k {
            return Err(ModelError::refused(
                "topk_group",
                k,
                format!("its groups hold fewer experts than num_experts_per_tok ({})", r.top_k),
            ));
        }
    }
    if !(r.scale.is_finite() && r.scale > 0.0) {
        return Err(ModelError::refused("routed_scaling_factor", r.scale, "must be a positive number"));
    }
    if m.expert_ff == 0 || m.expert_ff > 1 << 20 {
        return Err(ModelError::refused("moe_intermediate_size", m.expert_ff, "out of bounds (1..=1048576)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_rules_follow_each_family() {
        // Qwen3-MoE: every 2nd layer (1, 3), layer 3 kept dense by mlp_only_layers.
        assert_eq!(qwen_sparse_layers(4, 2, &[3]), [false, true, false, false]);
        assert_eq!(qwen_sparse_layers(3, 1, &[1]), [true, false, true]);
        // DeepSeek: from the first dense ones on, every moe_layer_freq-th.
        assert_eq!(deepseek_sparse_layers(4, 1, 2), [false, false, true, false]);
        assert_eq!(deepseek_sparse_layers(3, 1, 1), [false, true, true]);
    }
}
