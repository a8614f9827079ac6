//! A training run's loop state: the network, its optimiser and schedule, one step at a time.

use crate::batch::Batch;
use crate::net::Net;
use crate::optim::{clip, cosine_lr, AdamW, AdamWConfig};
use crate::params::Grads;
use crate::TrainError;

/// A run's settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    /// Peak learning rate.
    pub lr: f32,
    /// Steps of linear warmup.
    pub warmup: usize,
    /// Optimiser steps in the run (the cosine reaches zero there).
    pub steps: usize,
    /// The global gradient norm is clipped to this (None: no clipping).
    pub clip: Option<f32>,
    /// AdamW's settings.
    pub adamw: AdamWConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig { lr: 3e-4, warmup: 10, steps: 100, clip: Some(1.0), adamw: AdamWConfig::default() }
    }
}

/// What one optimiser step did.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StepReport {
    /// The step's index (from 0).
    pub step: usize,
    /// The mean loss over its micro-batches.
    pub loss: f64,
    /// The learning rate it used.
    pub lr: f32,
    /// The gradient's global norm before clipping.
    pub grad_norm: f32,
}

/// A network with its optimiser state.
pub struct Trainer {
    /// The network being trained.
    pub net: Net,
    cfg: TrainConfig,
    opt: AdamW,
    grads: Grads,
    step: usize,
}

impl Trainer {
    /// A trainer at step 0.
    pub fn new(net: Net, cfg: TrainConfig) -> Self {
        let opt = AdamW::new(cfg.adamw, &net.params);
        let grads = net.params.zero_grads();
        Trainer { net, cfg, opt, grads, step: 0 }
    }

    /// Steps taken.
    pub fn step_index(&self) -> usize {
        self.step
    }

    /// One optimiser step over `micro` micro-batches (gradient accumulation: each contributes its mean loss's
    /// gradient divided by their count).
    pub fn step(&mut self, micro: &[Batch]) -> Result<StepReport, TrainError> {
        if micro.is_empty() {
            return Err(TrainError::refused("micro-batches", 0, "a step needs at least one"));
        }
        for b in micro {
            self.net.check_batch(b)?;
        }
        let weight = 1.0 / micro.len() as f32;
        let loss =
            micro.iter().map(|b| self.net.loss_and_grads(b, &mut self.grads, weight)).sum::<f64>() * weight as f64;
        let grad_norm = match self.cfg.clip {
            Some(max) => clip(&mut self.grads, max),
            None => self.grads.norm(),
        };
        let lr = cosine_lr(self.cfg.lr, self.step, self.cfg.warmup, self.cfg.steps);
        self.opt.step(&mut self.net.params, &self.grads, lr);
        self.grads.zero();
        let report = StepReport { step: self.step, loss, lr, grad_norm };
        self.step += 1;
        Ok(report)
    }
}
