//! Training for kvad: forward and backward of GPT-2 and the llama family in f32 on the CPU, AdamW with warmup and
//! cosine decay, gradient clipping and accumulation, and checkpoints in Hugging Face layout.
//!
//! Every gradient is checked against PyTorch autograd on the repository's fixture models, and a 50-step run against
//! PyTorch's loss curve (`tests/reference.rs`, goldens from `scripts/reference/train_ref.py`).

mod attn;
mod batch;
mod checkpoint;
mod columnar;
pub mod data;
mod error;
pub mod eval;
pub mod init;
mod layer;
mod lora;
mod net;
mod ops;
mod optim;
mod params;
pub mod run;
mod trainer;

pub use batch::Batch;
pub use checkpoint::{save, write_safetensors};
pub use error::TrainError;
pub use lora::{read_adapter_config, save_adapter, LoraSpec};
pub use net::Net;
pub use optim::{clip, cosine_lr, AdamW, AdamWConfig};
pub use params::{Grads, Param, Params, Source, Stored};
pub use trainer::{StepReport, TrainConfig, Trainer};

use kvad_models::{read_config, ModelFiles};
use std::path::Path;

/// Checks an HF config.json's contents for training from scratch: a config kvad reads, of an architecture
/// training covers.
pub fn check_config(config: &serde_json::Value) -> Result<(), TrainError> {
    net::check(&kvad_models::config_from_hf(config)?)
}

/// Loads a model directory in Hugging Face layout (config.json and safetensors) as a trainable network; a PEFT
/// adapter directory (adapter_config.json) loads its base model — `base_model_name_or_path`, relative to the
/// adapter — with the adapter on, trainable.
pub fn open(dir: &Path) -> Result<Net, TrainError> {
    if dir.join("adapter_config.json").is_file() {
        let path = dir.join("adapter_config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
        let cfg: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TrainError::Format { path: path.display().to_string(), msg: e.to_string() })?;
        let base = cfg["base_model_name_or_path"].as_str().unwrap_or("");
        let base_dir = dir.join(base);
        if base.is_empty() || !base_dir.join("config.json").is_file() {
            return Err(TrainError::refused(
                "base_model_name_or_path",
                base,
                "not a model directory beside the adapter",
            ));
        }
        let mut net = open(&base_dir)?;
        net.load_adapter(dir)?;
        return Ok(net);
    }
    if !dir.join("config.json").is_file() {
        return Err(TrainError::refused(
            "model",
            dir.display(),
            "training reads a directory with config.json and safetensors",
        ));
    }
    let cfg = read_config(&ModelFiles::HfDir(dir.to_path_buf()))?;
    let src = kvad_models::weights::open(dir)?;
    Net::load(&cfg, &params::Stored(src.as_ref()))
}
