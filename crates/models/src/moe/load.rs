//! Reading routed layers: the router, its choice bias, the experts in any of the three layouts checkpoints use
//! (one tensor per expert as published on the Hub; transformers 5's `gate_up_proj`/`down_proj` stacks; llama.cpp's
//! `ffn_*_exps` stacks), and the shared experts. Whatever the layout, the experts end in kvad's one layout
//! ([`Experts`]), recorded for the quantised cache under `<layer>.mlp.experts.{gate_up,down}.weight`.

use super::{Experts, Ffn, Moe};
use crate::config::{ModelConfig, MoeConfig};
use crate::error::ModelError;
use crate::layers::{Linear, SwiGlu};
use crate::tensors::{target, Recorded, Role, Tensors};
use kvad_tensor::cpu::QMatrix;

impl Tensors<'_> {
    /// A SwiGLU MLP under `prefix` (`gate_proj`, `up_proj`, `down_proj`).
    pub(crate) fn swiglu(&mut self, prefix: &str, ff: usize, hidden: usize) -> Result<SwiGlu, ModelError> {
        Ok(SwiGlu {
            gate_up: self.stacked(
                &format!("{prefix}.gate_up_proj"),
                &[(&format!("{prefix}.gate_proj"), ff), (&format!("{prefix}.up_proj"), ff)],
                hidden,
                false,
            )?,
            down: self.linear(&format!("{prefix}.down_proj"), hidden, ff, false)?,
        })
    }

    /// Layer `i`'s feed-forward part under `prefix` (`<layer>.mlp`): routed where the config says so, else the
    /// dense SwiGLU of `intermediate`.
    pub(crate) fn ffn(&mut self, prefix: &str, cfg: &ModelConfig, i: usize) -> Result<Ffn, ModelError> {
        Ok(match &cfg.moe {
            Some(moe) if moe.sparse[i] => Ffn::Moe(Box::new(self.moe(prefix, moe, cfg.hidden)?)),
            _ => Ffn::Dense(self.swiglu(prefix, cfg.intermediate, cfg.hidden)?),
        })
    }

    /// A routed layer under `prefix` (`<layer>.mlp`).
    pub(crate) fn moe(&mut self, prefix: &str, cfg: &MoeConfig, hidden: usize) -> Result<Moe, ModelError> {
        let r = &cfg.routing;
        let router =
            Linear::new(self.matrix(&format!("{prefix}.gate.weight"), r.n_experts, hidden, Role::Router)?, None);
        let bias = if r.choice_bias {
            Some(self.vector(&format!("{prefix}.gate.e_score_correction_bias"), &[r.n_experts])?)
        } else {
            None
        };
        let experts = self.experts(prefix, r.n_experts, cfg.expert_ff, hidden)?;
        // Qwen3-Next names its one shared expert in the singular, beside the gate that scales it.
        let shared_name = if cfg.shared_gate { "shared_expert" } else { "shared_experts" };
        let shared = if cfg.shared_ff > 0 {
            Some(self.swiglu(&format!("{prefix}.{shared_name}"), cfg.shared_ff, hidden)?)
        } else {
            None
        };
        let shared_gate = if cfg.shared_gate && cfg.shared_ff > 0 {
            let w = self.matrix(&format!("{prefix}.shared_expert_gate.weight"), 1, hidden, Role::Router)?;
            Some(Linear::new(w, None))
        } else {
            None
        };
        Ok(Moe { router, bias, experts, shared, shared_gate, routing: r.clone() })
    }

    fn experts(&mut self, p: &str, n: usize, ff: usize, h: usize) -> Result<Experts, ModelError> {
        let (gu_key, down_key) = (format!("{p}.experts.gate_up.weight"), format!("{p}.experts.down.weight"));
        if self.cached.is_some() {
            let gu = self.matrix(&gu_key, n * 2 * ff, h, Role::Layer)?;
            let down = self.matrix(&down_key, n * h, ff, Role::Layer)?;
            return Ok(Experts::new(gu, down, n, ff));
        }
        let (gu_parts, down_parts) = if self.has(&format!("{p}.experts.gate_up_proj")) {
            // transformers 5's layout is kvad's: expert by expert, gate rows then up rows.
            let gu =
                self.matrix_shaped(&format!("{p}.experts.gate_up_proj"), &[n, 2 * ff, h], n * 2 * ff, h, Role::Layer)?;
            let down = self.matrix_shaped(&format!("{p}.experts.down_proj"), &[n, h, ff], n * h, ff, Role::Layer)?;
            (vec![gu], vec![down])
        } else if self.has(&format!("{p}.experts.gate_proj.weight")) {
            // llama.cpp's stacks: all gates, all ups, all downs.
            let mut stack = |proj: &str, out: usize, inp: usize| {
                self.matrix_shaped(&format!("{p}.experts.{proj}.weight"), &[n, out, inp], n * out, inp, Role::Layer)
            };
            let (gate, up, down) = (stack("gate_proj", ff, h)?, stack("up_proj", ff, h)?, stack("down_proj", h, ff)?);
            let (gate, up) = same_format(self, gate, up)?;
            let parts = (0..n)
                .flat_map(|e| [gate.rows_view(e * ff..(e + 1) * ff), up.rows_view(e * ff..(e + 1) * ff)])
                .collect();
            (parts, vec![down])
        } else {
            // As published: one tensor per expert and projection.
            let mut gu = Vec::with_capacity(2 * n);
            let mut down = Vec::with_capacity(n);
            for e in 0..n {
                let x = format!("{p}.experts.{e}");
                gu.push(self.matrix_unrecorded(&format!("{x}.gate_proj.weight"), ff, h, Role::Layer)?);
                gu.push(self.matrix_unrecorded(&format!("{x}.up_proj.weight"), ff, h, Role::Layer)?);
                down.push(self.matrix_unrecorded(&format!("{x}.down_proj.weight"), h, ff, Role::Layer)?);
            }
            (gu, down)
        };
        let gu = self.stack_final(&gu_key, gu_parts)?;
        let down = self.stack_final(&down_key, down_parts)?;
        Ok(Experts::new(gu, down, n, ff))
    }

    /// One matrix from parts of one width, brought to one format when they differ (a mixed GGUF), in f32-reference
    /// mode dequantised, and recorded for the cache under `key`.
    fn stack_final(&mut self, key: &str, mut parts: Vec<QMatrix>) -> Result<QMatrix, ModelError> {
        if parts.iter().any(|m| m.qtype() != parts[0].qtype()) {
            let t = target(self.backend, Role::Layer);
            for m in parts.iter_mut() {
                *m = m.requantize(t).map_err(|e| ModelError::BadInput(format!("tensor {key}: {e}")))?;
            }
        }
        let m = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            QMatrix::stack(&parts).map_err(|e| ModelError::BadInput(format!("tensor {key}: {e}")))?
        };
        let m = self.reference(m)?;
        self.record.push((key.to_string(), Recorded::Matrix(m.clone())));
        Ok(m)
    }
}

/// Two stacks in one format (llama.cpp may quantise gate and up differently).
fn same_format(t: &Tensors<'_>, a: QMatrix, b: QMatrix) -> Result<(QMatrix, QMatrix), ModelError> {
    if a.qtype() == b.qtype() {
        return Ok((a, b));
    }
    let q = target(t.backend, Role::Layer);
    let re = |m: QMatrix| m.requantize(q).map_err(|e| ModelError::BadInput(format!("expert stack: {e}")));
    Ok((re(a)?, re(b)?))
}
