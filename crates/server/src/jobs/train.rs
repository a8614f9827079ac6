//! The training job: a model (or a config from scratch) and a dataset in, `trained:NAME` out.
//!
//! Everything a request can get wrong is checked before the job is created (a 400 naming the field); what can only
//! fail later (a model that does not load, a dataset that packs to nothing) fails the job with its reason.

use kvad_train::data;
use kvad_train::run::{run, Ending, Output, Progress, RunSpec};
use kvad_train::{init, AdamWConfig, LoraSpec, TrainConfig, Trainer};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// A LoRA request.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoraRequest {
    /// Rank (default 16).
    #[serde(default = "default_rank")]
    pub rank: usize,
    /// α (default twice the rank).
    pub alpha: Option<f32>,
    /// Module names (default: every projection of the llama family, or GPT-2's c_attn, c_proj and c_fc).
    pub targets: Option<Vec<String>>,
}

fn default_rank() -> usize {
    16
}

/// `POST /api/jobs` with `kind: "train"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrainRequest {
    /// Always "train".
    pub kind: String,
    /// The trained model's name: it becomes `trained:NAME`.
    pub output: String,
    /// The model to fine-tune (a name /v1/models or `kvad ls` knows, in safetensors).
    pub model: Option<String>,
    /// Or: an HF config.json's contents for a model from scratch.
    pub config: Option<Value>,
    /// With `config`: "bytes" (a byte-level tokenizer) or a model whose tokenizer to copy.
    pub tokenizer: Option<String>,
    /// With a byte-level tokenizer: its end token ("<|endoftext|>" unless given, e.g. "|").
    pub eos: Option<String>,
    /// With `config`: the chat template the new model carries.
    pub chat_template: Option<String>,
    /// The dataset's id.
    pub dataset: String,
    /// Optimiser steps.
    #[serde(default = "d_steps")]
    pub steps: usize,
    /// Peak learning rate.
    #[serde(default = "d_lr")]
    pub lr: f32,
    /// Warmup steps.
    #[serde(default)]
    pub warmup: usize,
    /// Rows a micro-batch.
    #[serde(default = "d_batch")]
    pub batch: usize,
    /// Micro-batches a step.
    #[serde(default = "d_accum")]
    pub accum: usize,
    /// Tokens a row.
    #[serde(default = "d_seq")]
    pub seq_len: usize,
    /// Gradient clipping (0: off).
    #[serde(default = "d_clip")]
    pub clip: f32,
    /// AdamW's weight decay on matrices.
    #[serde(default)]
    pub weight_decay: f32,
    /// Seeds initialisation, adapters and the data order.
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Checkpoint every N steps (0: only at the end).
    #[serde(default)]
    pub save_every: usize,
    /// Validation loss every N steps (0: only at the end).
    #[serde(default)]
    pub eval_every: usize,
    /// LoRA instead of full fine-tuning.
    pub lora: Option<LoraRequest>,
}

fn d_steps() -> usize {
    100
}
fn d_lr() -> f32 {
    3e-4
}
fn d_batch() -> usize {
    4
}
fn d_accum() -> usize {
    1
}
fn d_seq() -> usize {
    256
}
fn d_clip() -> f32 {
    1.0
}
fn d_seed() -> u64 {
    1
}

/// Where a checked request trains from.
#[derive(Debug, Clone)]
pub enum From {
    /// A model directory on disk.
    Model(PathBuf),
    /// A config from scratch, and the tokenizer's source: None for bytes, else a model directory.
    Scratch(Value, Option<PathBuf>),
}

/// A field the request got wrong: (field, message).
pub type Bad = (&'static str, String);

impl TrainRequest {
    /// Checks the numbers and the source; `resolve` finds a model's directory by name.
    pub fn check(&self, resolve: impl Fn(&str) -> Result<PathBuf, String>) -> Result<From, Bad> {
        kvad_hub::trained::check_name(&self.output).map_err(|e| ("output", e))?;
        for (field, v, min) in
            [("steps", self.steps, 1), ("batch", self.batch, 1), ("accum", self.accum, 1), ("seq_len", self.seq_len, 2)]
        {
            if v < min {
                return Err((field, format!("{v} must be at least {min}")));
            }
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(("lr", format!("{} must be a positive number", self.lr)));
        }
        if self.warmup > self.steps {
            return Err(("warmup", format!("{} is more than the {} steps", self.warmup, self.steps)));
        }
        if let Some(l) = &self.lora {
            if l.rank == 0 {
                return Err(("lora.rank", "0 must be positive".into()));
            }
        }
        match (&self.model, &self.config) {
            (Some(_), Some(_)) => {
                Err(("config", "give a model to fine-tune or a config to start from, not both".into()))
            }
            (None, None) => Err(("model", "missing: a model to fine-tune, or a config to start from".into())),
            (Some(m), None) => {
                let dir = resolve(m).map_err(|e| ("model", e))?;
                if !dir.join("config.json").is_file() {
                    return Err((
                        "model",
                        format!("{m} is not in safetensors (Hugging Face layout); training reads those"),
                    ));
                }
                Ok(From::Model(dir))
            }
            (None, Some(cfg)) => {
                if self.lora.is_some() {
                    return Err(("lora", "a model from scratch trains whole; LoRA adapts a trained one".into()));
                }
                kvad_train::check_config(cfg).map_err(|e| ("config", e.to_string()))?;
                let tok = match self.tokenizer.as_deref().unwrap_or("bytes") {
                    "bytes" => None,
                    m => Some(resolve(m).map_err(|e| ("tokenizer", e))?),
                };
                Ok(From::Scratch(cfg.clone(), tok))
            }
        }
    }
}

fn default_targets(gpt2: bool) -> Vec<String> {
    let t: &[&str] = if gpt2 {
        &["c_attn", "c_proj", "c_fc"]
    } else {
        &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    };
    t.iter().map(|s| s.to_string()).collect()
}

/// The checkpoint of a run's output with the most steps, where its trainer state was written whole.
pub fn latest_checkpoint(out: &Path) -> Option<PathBuf> {
    std::fs::read_dir(out)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|d| {
            let n: usize = d.file_name().to_str()?.strip_prefix("checkpoint-")?.parse().ok()?;
            d.path().join("trainer_state.json").is_file().then(|| (n, d.path()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
}

/// Runs a checked request: `dataset` is the uploaded file and its held-out record indices; the model is written to
/// `out` (`trained:NAME`'s directory), continuing from checkpoint `resume` when one is given (the run's optimiser
/// state, step and place in the data with it). Returns the result and whether the run finished (false: cancelled).
pub fn execute(
    req: &TrainRequest,
    from: &From,
    dataset: (&Path, &[usize]),
    (out, resume): (&Path, Option<&Path>),
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(Value),
) -> Result<(Value, bool), String> {
    let e = |e: kvad_train::TrainError| e.to_string();
    std::fs::create_dir_all(out).map_err(|x| format!("{}: {x}", out.display()))?;
    let (mut net, source) = match (from, resume) {
        // The checkpoint holds the weights (or, for LoRA, the adapter over the base model it names).
        (From::Model(dir), Some(ckpt)) => (kvad_train::open(ckpt).map_err(e)?, dir.clone()),
        (From::Scratch(..), Some(ckpt)) => (kvad_train::open(ckpt).map_err(e)?, out.to_path_buf()),
        (From::Model(dir), None) => (kvad_train::open(dir).map_err(e)?, dir.clone()),
        (From::Scratch(cfg, tok), None) => {
            std::fs::write(out.join("config.json"), serde_json::to_string_pretty(cfg).unwrap_or_default())
                .map_err(|x| x.to_string())?;
            match tok {
                None => {
                    let eos = req.eos.as_deref().unwrap_or("<|endoftext|>");
                    init::write_byte_tokenizer(out, &["<|endoftext|>"], Some(eos), req.chat_template.as_deref())
                        .map_err(e)?
                }
                Some(dir) => {
                    for f in
                        ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"]
                    {
                        if dir.join(f).is_file() {
                            std::fs::copy(dir.join(f), out.join(f)).map_err(|x| x.to_string())?;
                        }
                    }
                }
            }
            (init::scratch(cfg, req.seed).map_err(e)?, out.to_path_buf())
        }
    };
    let gpt2 = net.is_gpt2();
    if let Some(l) = req.lora.as_ref().filter(|_| resume.is_none()) {
        let spec = LoraSpec {
            rank: l.rank,
            alpha: l.alpha.unwrap_or(2.0 * l.rank as f32),
            targets: l.targets.clone().unwrap_or_else(|| default_targets(gpt2)),
            rslora: false,
        };
        net.add_lora(&spec, req.seed).map_err(e)?;
    }
    let tok = kvad_text::Tokenizer::from_dir(&source).map_err(|x| format!("the tokenizer: {x}"))?;
    let template = match tok.chat_template() {
        Some(t) => Some(kvad_text::ChatTemplate::new(t).map_err(|x| format!("the chat template: {x}"))?),
        None => None,
    };
    let (path, held) = dataset;
    let bytes = std::fs::read(path).map_err(|x| format!("the dataset: {x}"))?;
    let ds = data::parse(&path.display().to_string(), &bytes).map_err(|errs| format!("the dataset: {}", errs[0]))?;
    let (train_recs, val_recs): (Vec<_>, Vec<_>) =
        ds.records.into_iter().enumerate().partition(|(i, _)| !held.contains(i));
    let strip = |v: Vec<(usize, data::Record)>| v.into_iter().map(|(_, r)| r).collect::<Vec<_>>();
    let encode = |recs: &[data::Record]| data::encode(recs, &tok, template.as_ref()).map_err(|x| x.to_string());
    let train_rows = data::pack(&encode(&strip(train_recs))?, req.seq_len);
    let val_rows = data::pack(&encode(&strip(val_recs))?, req.seq_len);
    let spec = RunSpec {
        train: TrainConfig {
            lr: req.lr,
            warmup: req.warmup,
            steps: req.steps,
            clip: (req.clip > 0.0).then_some(req.clip),
            adamw: AdamWConfig { weight_decay: req.weight_decay, ..Default::default() },
        },
        batch: req.batch,
        accum: req.accum,
        save_every: req.save_every,
        eval_every: req.eval_every,
        seed: req.seed,
    };
    let (parameters, trained) = (net.params.numel(), net.params.trainable_numel());
    let mut tr = match resume {
        Some(ckpt) => Trainer::resume(net, spec.train, ckpt).map_err(e)?,
        None => Trainer::new(net, spec.train),
    };
    emit(json!({"type": "start", "parameters": parameters, "trained_parameters": trained,
                "train_rows": train_rows.len(), "validation_rows": val_rows.len(), "seq_len": req.seq_len,
                "from_step": tr.step_index()}));
    let output = Output { dir: out.to_path_buf(), source: source.clone(), base_name: source.display().to_string() };
    let mut last_loss = None;
    let ending = run(&mut tr, &train_rows, &val_rows, &spec, &output, cancel, |p| {
        if let Progress::Step { report, .. } = &p {
            last_loss = Some(report.loss);
        }
        emit(serde_json::to_value(&p).unwrap_or(Value::Null));
    })
    .map_err(e)?;
    match ending {
        Ending::Done => {
            if tr.net.lora().is_some() {
                // The adapter is saved (PEFT's format); a merged copy beside it is what kvad and transformers load.
                tr.net.merge_lora();
                kvad_train::save(&tr.net, &source, out).map_err(e)?;
            }
            let name = format!("{}{}", kvad_hub::trained::PREFIX, req.output);
            Ok((json!({"model": name, "path": out, "steps": tr.step_index(), "loss": last_loss}), true))
        }
        Ending::Cancelled(steps) => Ok((json!({"steps": steps, "loss": last_loss}), false)),
    }
}
