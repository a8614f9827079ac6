//! Trains fixture models as `tests/reference.rs` does (the goldens' micro-batches and settings) and writes what
//! kvad saved, with kvad's logits, for `scripts/reference/train_check.py` to load in transformers and peft:
//!
//!     cargo run --release -p kvad-train --example export_trained -- OUT_DIR
//!
//! OUT_DIR/<name>/ is the checkpoint (for `-lora`: `adapter/` in PEFT's format and `base/`, the base model as kvad
//! saves it) and `kvad_logits.safetensors` (the first golden batch's first row, every position).

use kvad_train::{AdamWConfig, Batch, Net, Params, TrainConfig, Trainer};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn rows(v: &Value) -> Vec<Vec<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect()
}

fn batch(ids: &Value, labels: &Value) -> Batch {
    let l: Vec<Vec<Option<u32>>> = labels
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_i64().filter(|&t| t >= 0).map(|t| t as u32)).collect())
        .collect();
    Batch::shifted(&rows(ids), Some(&l)).unwrap()
}

fn train(root: &Path, name: &str) -> (Net, Batch) {
    let g: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("fixtures/goldens/train/{name}.json"))).unwrap(),
    )
    .unwrap();
    let h = &g["hyper"];
    let f = |k: &str| h[k].as_f64().unwrap() as f32;
    let cfg = TrainConfig {
        lr: f("lr"),
        warmup: h["warmup"].as_u64().unwrap() as usize,
        steps: h["steps"].as_u64().unwrap() as usize,
        clip: Some(f("clip")),
        adamw: AdamWConfig {
            betas: (h["betas"][0].as_f64().unwrap() as f32, h["betas"][1].as_f64().unwrap() as f32),
            eps: f("eps"),
            weight_decay: f("weight_decay"),
        },
    };
    let mut tr = Trainer::new(kvad_train::open(&root.join("fixtures/models").join(name)).unwrap(), cfg);
    let micro: Vec<Batch> = g["micro"].as_array().unwrap().iter().map(|m| batch(&m["ids"], &m["labels"])).collect();
    let accum = h["accum"].as_u64().unwrap() as usize;
    for step in micro.chunks(accum).take(cfg.steps) {
        tr.step(step).unwrap();
    }
    (tr.net, batch(&g["ids"], &g["labels"]))
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("OUT_DIR"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for name in ["gpt2", "llama", "qwen2", "qwen3", "gpt2-lora", "llama-lora"] {
        let (net, first) = train(&root, name);
        let dir = out.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let logits = net.logits(&first)[..first.len * net.config().vocab_size].to_vec();
        match name.strip_suffix("-lora") {
            Some(base) => {
                let src = root.join("fixtures/models").join(base);
                kvad_train::save(&kvad_train::open(&src).unwrap(), &src, &dir.join("base")).unwrap();
                kvad_train::save_adapter(&net, "../base", &dir.join("adapter")).unwrap();
            }
            None => kvad_train::save(&net, &root.join("fixtures/models").join(name), &dir).unwrap(),
        }
        let mut p = Params::default();
        p.push("logits", vec![first.len, net.config().vocab_size], logits);
        kvad_train::write_safetensors(&p, &dir.join("kvad_logits.safetensors")).unwrap();
        eprintln!("{name}: written to {}", dir.display());
    }
}
