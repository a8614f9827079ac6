//! AdamW, the learning-rate schedule and gradient clipping, computed as PyTorch computes them so a run's loss curve
//! follows PyTorch's from the same weights and data.

use crate::params::{Grads, Params};

/// AdamW's settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    /// β₁ and β₂.
    pub betas: (f32, f32),
    /// Added to the second moment's root.
    pub eps: f32,
    /// Decoupled weight decay, applied to matrices only ([`crate::Param::decays`]).
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.1 }
    }
}

/// AdamW's moments for every parameter and the step count.
#[derive(Debug, Clone)]
pub struct AdamW {
    cfg: AdamWConfig,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    t: i32,
}

impl AdamW {
    /// Zeroed moments for `params`.
    pub fn new(cfg: AdamWConfig, params: &Params) -> Self {
        let zeros = || params.iter().map(|p| vec![0.0; if p.trainable { p.data.len() } else { 0 }]).collect();
        AdamW { cfg, m: zeros(), v: zeros(), t: 0 }
    }

    /// Steps taken.
    pub fn steps(&self) -> i32 {
        self.t
    }

    /// The first and second moments of tensor `i` (empty for a frozen one).
    pub fn moments(&self, i: usize) -> (&[f32], &[f32]) {
        (&self.m[i], &self.v[i])
    }

    /// Puts back saved moments and the step count (a resumed run); a moment of another size is refused naming
    /// the tensor.
    pub fn restore(&mut self, i: usize, name: &str, m: Vec<f32>, v: Vec<f32>, t: i32) -> Result<(), crate::TrainError> {
        if m.len() != self.m[i].len() || v.len() != self.v[i].len() {
            return Err(crate::TrainError::refused(name, m.len(), format!("moments must hold {}", self.m[i].len())));
        }
        (self.m[i], self.v[i], self.t) = (m, v, t);
        Ok(())
    }

    /// One update at learning rate `lr`, in torch.optim.AdamW's order: decay, moments, bias-corrected step.
    pub fn step(&mut self, params: &mut Params, grads: &Grads, lr: f32) {
        self.t += 1;
        let (b1, b2) = self.cfg.betas;
        let bc1 = 1.0 - b1.powi(self.t);
        let bc2_sqrt = (1.0 - b2.powi(self.t)).sqrt();
        let step_size = lr / bc1;
        for (i, p) in params.iter_mut().enumerate().filter(|(_, p)| p.trainable) {
            let decay = if p.decays() { 1.0 - lr * self.cfg.weight_decay } else { 1.0 };
            let (m, v, g) = (&mut self.m[i], &mut self.v[i], &grads.g[i]);
            for j in 0..p.data.len() {
                p.data[j] *= decay;
                m[j] += (g[j] - m[j]) * (1.0 - b1);
                v[j] = v[j] * b2 + (1.0 - b2) * g[j] * g[j];
                let denom = v[j].sqrt() / bc2_sqrt + self.cfg.eps;
                p.data[j] -= step_size * m[j] / denom;
            }
        }
    }
}

/// Linear warmup from 0 over `warmup` steps, then cosine decay to 0 at `total` (transformers'
/// `get_cosine_schedule_with_warmup`): the rate for step `step` (from 0).
pub fn cosine_lr(peak: f32, step: usize, warmup: usize, total: usize) -> f32 {
    if step < warmup {
        return peak * step as f32 / warmup as f32;
    }
    let progress = (step - warmup) as f64 / (total.saturating_sub(warmup)).max(1) as f64;
    (peak as f64 * 0.5 * (1.0 + (std::f64::consts::PI * progress.min(1.0)).cos())) as f32
}

/// Scales the gradients so their global norm is at most `max_norm`, as `torch.nn.utils.clip_grad_norm_`; returns
/// the norm before clipping.
pub fn clip(grads: &mut Grads, max_norm: f32) -> f32 {
    let norm = grads.norm();
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        grads.scale(coef);
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        assert_eq!(cosine_lr(1.0, 0, 5, 50), 0.0);
        assert!((cosine_lr(1.0, 4, 5, 50) - 0.8).abs() < 1e-6);
        assert_eq!(cosine_lr(1.0, 5, 5, 50), 1.0);
        assert!(cosine_lr(1.0, 49, 5, 50) < 0.01);
        assert!((cosine_lr(1.0, 27, 5, 50) - 0.5 * (1.0 + (std::f32::consts::PI * 22.0 / 45.0).cos())).abs() < 1e-6);
    }

    #[test]
    fn first_adam_step_moves_each_weight_by_the_rate() {
        let mut p = Params::default();
        p.push("w", vec![1, 2], vec![1.0, -1.0]);
        p.push("b", vec![2], vec![1.0, 1.0]);
        let mut g = p.zero_grads();
        g.g[0] = vec![0.5, -2.0];
        g.g[1] = vec![3.0, 0.0];
        let mut opt = AdamW::new(AdamWConfig { weight_decay: 0.5, ..Default::default() }, &p);
        opt.step(&mut p, &g, 0.1);
        // m̂/√v̂ = sign(g) on the first step; the matrix decays by lr·wd first, the vector does not.
        assert!((p.data(0)[0] - (0.95 - 0.1)).abs() < 1e-6);
        assert!((p.data(0)[1] - (-0.95 + 0.1)).abs() < 1e-6);
        assert!((p.data(1)[0] - 0.9).abs() < 1e-6);
        assert_eq!(p.data(1)[1], 1.0);
    }
}
