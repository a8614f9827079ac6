//! A training run over token rows: batches, validation, checkpoints, cancelling and resuming.
//!
//! A checkpoint is a directory `checkpoint-{step}` beside the run's final output: the model (or, for LoRA, the
//! adapter) as [`crate::save`] / [`crate::save_adapter`] write it, plus `optimizer.safetensors` (AdamW's moments)
//! and `trainer_state.json` (step, settings, losses), so a resumed run continues exactly where it stopped. Each is
//! written under a temporary name and renamed, so a run stopped mid-save leaves the previous checkpoint whole.

use crate::batch::Batch;
use crate::init::Normal;
use crate::trainer::{StepReport, TrainConfig, Trainer};
use crate::TrainError;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// How rows become steps, and how often to look back.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSpec {
    /// Optimiser settings and the number of steps.
    pub train: TrainConfig,
    /// Rows a micro-batch.
    pub batch: usize,
    /// Micro-batches a step (gradient accumulation).
    pub accum: usize,
    /// Save a checkpoint every this many steps (0: only at the end).
    pub save_every: usize,
    /// Measure the validation loss every this many steps (0: only at the end).
    pub eval_every: usize,
    /// Seeds the order rows are visited in.
    pub seed: u64,
}

/// What a run reports as it goes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Progress {
    /// A step finished.
    Step {
        /// What it did.
        #[serde(flatten)]
        report: StepReport,
        /// Tokens it trained on a second.
        tokens_per_s: f64,
    },
    /// The validation loss after a step.
    Eval {
        /// After this step (1-based count of steps done).
        step: usize,
        /// Mean loss over the validation rows.
        loss: f64,
    },
    /// A checkpoint was written.
    Checkpoint {
        /// Steps done.
        step: usize,
        /// Its directory.
        path: PathBuf,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every step ran; the final model is in the output directory.
    Done,
    /// Cancelled after this many steps; the last checkpoint (if any) is intact.
    Cancelled(usize),
}

/// Where a run writes, and what the model came from (its config and tokenizer files are copied from there; for a
/// LoRA run, the base model's path or id the adapter names).
#[derive(Debug, Clone)]
pub struct Output {
    /// The run's directory.
    pub dir: PathBuf,
    /// The source model directory.
    pub source: PathBuf,
    /// What the adapter config names as its base (LoRA runs).
    pub base_name: String,
}

/// Runs `spec.train.steps - trainer.step_index()` steps over `train` rows (visited in a seeded order, epoch after
/// epoch; a micro-batch holds rows of one length), reporting each through `on`, until done or `cancel` is set.
pub fn run(
    tr: &mut Trainer,
    train: &[Vec<u32>],
    validation: &[Vec<u32>],
    spec: &RunSpec,
    out: &Output,
    cancel: &AtomicBool,
    mut on: impl FnMut(Progress),
) -> Result<Ending, TrainError> {
    if train.is_empty() {
        return Err(TrainError::refused("dataset", "empty", "no training rows"));
    }
    if spec.batch == 0 || spec.accum == 0 {
        return Err(TrainError::refused(
            "batch",
            spec.batch.min(spec.accum),
            "batch and accumulation must be positive",
        ));
    }
    let mut order = Order::new(train, spec.seed, tr.rows_seen);
    while tr.step_index() < spec.train.steps {
        if cancel.load(Ordering::Relaxed) {
            return Ok(Ending::Cancelled(tr.step_index()));
        }
        let micro: Vec<Batch> = (0..spec.accum).map(|_| order.next_batch(spec.batch)).collect::<Result<_, _>>()?;
        let tokens: usize = micro.iter().map(|b| b.ids.len()).sum();
        tr.rows_seen += micro.iter().map(|b| b.seqs).sum::<usize>();
        let t0 = Instant::now();
        let report = tr.step(&micro)?;
        on(Progress::Step { report, tokens_per_s: tokens as f64 / t0.elapsed().as_secs_f64().max(1e-9) });
        let done = tr.step_index();
        let last = done == spec.train.steps;
        if !validation.is_empty() && (last || (spec.eval_every > 0 && done.is_multiple_of(spec.eval_every))) {
            on(Progress::Eval { step: done, loss: validation_loss(tr, validation, spec.batch)? });
        }
        if spec.save_every > 0 && done.is_multiple_of(spec.save_every) && !last {
            let path = out.dir.join(format!("checkpoint-{done}"));
            save_checkpoint(tr, spec, out, &path)?;
            on(Progress::Checkpoint { step: done, path });
        }
    }
    save_checkpoint(tr, spec, out, &out.dir)?;
    on(Progress::Checkpoint { step: tr.step_index(), path: out.dir.clone() });
    Ok(Ending::Done)
}

/// The mean loss over `rows`, a batch of equal-length rows at a time, weighted by counted targets.
pub fn validation_loss(tr: &Trainer, rows: &[Vec<u32>], batch: usize) -> Result<f64, TrainError> {
    let (mut total, mut count) = (0.0, 0usize);
    for group in by_length(rows).chunks(batch.max(1)) {
        let b = Batch::shifted(group, None)?;
        tr.net.check_batch(&b)?;
        let n = b.counted();
        if n > 0 {
            total += tr.net.loss(&b) * n as f64;
            count += n;
        }
    }
    Ok(if count == 0 { 0.0 } else { total / count as f64 })
}

fn by_length(rows: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.len()));
    sorted
}

/// Rows visited in a seeded order, reshuffled each epoch; a batch stops early at a row of another length.
struct Order<'a> {
    rows: &'a [Vec<u32>],
    perm: Vec<usize>,
    at: usize,
    rng: Normal,
}

impl<'a> Order<'a> {
    /// The order, fast-forwarded past `skip` rows (a resumed run sees the rows it would have seen).
    fn new(rows: &'a [Vec<u32>], seed: u64, skip: usize) -> Self {
        let mut o = Order { rows, perm: Vec::new(), at: 0, rng: Normal::new(seed) };
        o.shuffle();
        for _ in 0..skip {
            o.next_index();
        }
        o
    }

    fn shuffle(&mut self) {
        self.perm = (0..self.rows.len()).collect();
        for i in (1..self.perm.len()).rev() {
            let j = (self.rng.uniform() * (i + 1) as f64) as usize;
            self.perm.swap(i, j.min(i));
        }
        self.at = 0;
    }

    fn next_index(&mut self) -> usize {
        if self.at == self.perm.len() {
            self.shuffle();
        }
        self.at += 1;
        self.perm[self.at - 1]
    }

    fn next_batch(&mut self, n: usize) -> Result<Batch, TrainError> {
        let first = self.next_index();
        let len = self.rows[first].len();
        let mut picked = vec![self.rows[first].clone()];
        while picked.len() < n && self.at < self.perm.len() && self.rows[self.perm[self.at]].len() == len {
            picked.push(self.rows[self.next_index()].clone());
        }
        Batch::shifted(&picked, None)
    }
}

/// Writes the model (or adapter), the optimiser's moments and the trainer's state into `path`, through a temporary
/// directory renamed into place.
pub fn save_checkpoint(tr: &Trainer, spec: &RunSpec, out: &Output, path: &Path) -> Result<(), TrainError> {
    let tmp =
        path.with_file_name(format!(".{}.partial", path.file_name().and_then(|n| n.to_str()).unwrap_or("checkpoint")));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    if tr.net.lora().is_some() {
        std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
        crate::save_adapter(&tr.net, &out.base_name, &tmp)?;
    } else {
        crate::save(&tr.net, &out.source, &tmp)?;
    }
    tr.save_state(&tmp, spec)?;
    if path == out.dir {
        // The run's own directory holds its checkpoints: move the files, not the directory.
        std::fs::create_dir_all(path).map_err(|e| TrainError::io(path, e))?;
        for entry in std::fs::read_dir(&tmp).map_err(|e| TrainError::io(&tmp, e))? {
            let entry = entry.map_err(|e| TrainError::io(&tmp, e))?;
            let dst = path.join(entry.file_name());
            std::fs::rename(entry.path(), &dst).map_err(|e| TrainError::io(&dst, e))?;
        }
        std::fs::remove_dir(&tmp).map_err(|e| TrainError::io(&tmp, e))
    } else {
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| TrainError::io(path, e))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
    }
}
