//! What the model tests share: where the fixtures are, how a golden names its model files, and the logits of a
//! prompt read at once then token by token (both kernel paths).
#![allow(dead_code)] // each test file uses its own part

pub mod config;

use kvad_models::{CausalLm, LogitsMode, ModelFiles, SeqInput};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The checkout: `KVAD_ROOT` when a test binary runs elsewhere than it was built (the GPU machine).
pub fn root() -> PathBuf {
    config::root().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// A golden file, parsed.
pub fn golden_json(name: &str) -> Value {
    let path = root().join(format!("fixtures/goldens/models/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// The model files a golden was made from.
pub fn golden_files(g: &Value) -> ModelFiles {
    let src = root().join(g["source"].as_str().unwrap());
    if src.extension().is_some_and(|e| e == "gguf") {
        ModelFiles::Gguf(src)
    } else {
        ModelFiles::HfDir(src.parent().unwrap().to_path_buf())
    }
}

/// Logits of every prompt position read at once (the many-row path), then of a continuation read a token at a time
/// (the decode path), concatenated.
pub fn logits(model: &dyn CausalLm, prompt: &[u32]) -> Vec<f32> {
    let mut kv = model.new_state();
    let mut out = model.forward(&mut [SeqInput { tokens: prompt, state: &mut kv }], LogitsMode::All).unwrap().remove(0);
    for &t in prompt.iter().take(6) {
        out.extend(
            model.forward(&mut [SeqInput { tokens: &[t], state: &mut kv }], LogitsMode::Last).unwrap().remove(0),
        );
    }
    out
}

/// Largest minus smallest.
pub fn spread(v: &[f32]) -> f32 {
    v.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) - v.iter().fold(f32::INFINITY, |a, &b| a.min(b))
}
