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

/// A copy of a golden's safetensors model (in a fresh folder under the temp dir, which the caller removes) with its
/// f32 matrices rounded to bf16, to the nearest even, as the GPU's bf16 backend holds its weights: vectors (norms,
/// biases, a router's choice bias) and routers (`mlp.gate.weight` and a shared expert's gate, computed in f32 so that
/// the CPU and the GPU choose alike) stay f32. The CPU's f32 arithmetic on it is a bf16 backend with no arithmetic
/// error of its own: against PyTorch's f32 it measures what rounding the weights alone does (in the routed fixtures,
/// a router near a tie takes another expert), and against a bf16 backend it measures that backend's kernels alone.
pub fn bf16_rounded_copy(g: &Value, tag: &str) -> (PathBuf, ModelFiles) {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let ModelFiles::HfDir(src) = golden_files(g) else { panic!("{tag}: a safetensors golden") };
    let dir = std::env::temp_dir().join(format!("kvad-bf16-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let bytes = std::fs::read(&path).unwrap();
            let st = SafeTensors::deserialize(&bytes).unwrap();
            let mut out: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
            for (name, t) in st.tensors() {
                // A delta net's convolution taps are a vector to the GPU (kept f32, as the CPU keeps them).
                // A shared expert's gate (Qwen3-Next) is read as a router is, in f32 on every backend.
                let matrix = t.shape().len() >= 2
                    && !name.ends_with("mlp.gate.weight")
                    && !name.ends_with("shared_expert_gate.weight")
                    && !name.ends_with("conv1d.weight");
                let (dtype, data) = match t.dtype() {
                    Dtype::F32 if matrix => (
                        Dtype::BF16,
                        t.data()
                            .chunks_exact(4)
                            .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes())
                            .collect(),
                    ),
                    d => (d, t.data().to_vec()),
                };
                out.push((name, dtype, t.shape().to_vec(), data));
            }
            let views: Vec<(String, TensorView<'_>)> =
                out.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
            safetensors::serialize_to_file(views, None, &dir.join(path.file_name().unwrap())).unwrap();
        } else if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    (dir.clone(), ModelFiles::HfDir(dir))
}
