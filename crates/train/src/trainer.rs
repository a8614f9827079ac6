//! A training run's loop state: the network, its optimiser and schedule, one step at a time.

use crate::batch::Batch;
use crate::net::Net;
use crate::optim::{clip, cosine_lr, AdamW, AdamWConfig};
use crate::params::{Grads, Params};
use crate::TrainError;
use kvad_models::weights::{SafetensorsSource, WeightSource};
use std::path::Path;

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
    /// Rows of the training data visited so far (a resumed run continues the same order from here).
    pub rows_seen: usize,
}

impl Trainer {
    /// A trainer at step 0.
    pub fn new(net: Net, cfg: TrainConfig) -> Self {
        let opt = AdamW::new(cfg.adamw, &net.params);
        let grads = net.params.zero_grads();
        Trainer { net, cfg, opt, grads, step: 0, rows_seen: 0 }
    }

    /// Steps taken.
    pub fn step_index(&self) -> usize {
        self.step
    }

    /// The run's settings.
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    /// Writes AdamW's moments (`optimizer.safetensors`, `{name}.exp_avg` and `{name}.exp_avg_sq` a trained
    /// tensor) and `trainer_state.json` (the step and `spec`) into `dir`.
    pub fn save_state(&self, dir: &Path, spec: &impl serde::Serialize) -> Result<(), TrainError> {
        let mut moments = Params::default();
        for (i, p) in self.net.params.iter().enumerate().filter(|(_, p)| p.trainable) {
            let (m, v) = self.opt.moments(i);
            moments.push(&format!("{}.exp_avg", p.name), p.shape.clone(), m.to_vec());
            moments.push(&format!("{}.exp_avg_sq", p.name), p.shape.clone(), v.to_vec());
        }
        crate::checkpoint::write_safetensors(&moments, &dir.join("optimizer.safetensors"))?;
        let state = serde_json::json!({"step": self.step, "adam_steps": self.opt.steps(), "rows_seen": self.rows_seen,
                                       "spec": spec});
        let path = dir.join("trainer_state.json");
        std::fs::write(&path, serde_json::to_string_pretty(&state).unwrap_or_default() + "\n")
            .map_err(|e| TrainError::io(&path, e))
    }

    /// A trainer for `net` (loaded from checkpoint `dir`) at the step and optimiser state saved there.
    pub fn resume(net: Net, cfg: TrainConfig, dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join("trainer_state.json");
        let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
        let state: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TrainError::Format { path: path.display().to_string(), msg: e.to_string() })?;
        let step = state["step"].as_u64().ok_or_else(|| TrainError::refused("step", &state["step"], "not a count"))?;
        let adam = state["adam_steps"].as_i64().unwrap_or(step as i64) as i32;
        let mut tr = Trainer::new(net, cfg);
        let file = SafetensorsSource::open_files(&[dir.join("optimizer.safetensors")])?;
        let names: Vec<(usize, String)> =
            tr.net.params.iter().enumerate().filter(|(_, p)| p.trainable).map(|(i, p)| (i, p.name.clone())).collect();
        for (i, name) in names {
            let m = file.load_f32(&format!("{name}.exp_avg"))?;
            let v = file.load_f32(&format!("{name}.exp_avg_sq"))?;
            tr.opt.restore(i, &name, m, v, adam)?;
        }
        tr.step = step as usize;
        tr.rows_seen = state["rows_seen"].as_u64().unwrap_or(0) as usize;
        Ok(tr)
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
