//! kvad-train against PyTorch autograd on the fixture models (goldens from scripts/reference/train_ref.py):
//! every parameter's gradient for one batch, a 50-step AdamW run's loss curve with clipping, accumulation, warmup and
//! cosine decay, and the trained weights saved in Hugging Face layout and read back by kvad's inference loader.

use kvad_models::weights;
use kvad_models::{load_model, LogitsMode, ModelFiles, SeqInput};
use kvad_train::{AdamWConfig, Batch, TrainConfig, Trainer};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Full fine-tuning goldens, then LoRA ones (the `-lora` fixtures are PEFT adapters on the base beside them).
const MODELS: [&str; 8] = ["gpt2", "llama", "llama-tied", "qwen2", "qwen3", "gpt2-lora", "llama-lora", "qwen3-lora"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden(name: &str) -> Value {
    let path = root().join(format!("fixtures/goldens/train/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect()
}

fn labels(v: &Value) -> Vec<Vec<Option<u32>>> {
    let l = |t: &Value| t.as_i64().filter(|&t| t >= 0).map(|t| t as u32);
    v.as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(l).collect()).collect()
}

fn batch(ids: &Value, lab: &Value) -> Batch {
    Batch::shifted(&rows(ids), Some(&labels(lab))).unwrap()
}

/// Largest |a − b| over the tensor, against the reference's largest |b|.
fn worst(a: &[f32], b: &[f32]) -> (f32, f32) {
    let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
    (diff, b.iter().map(|v| v.abs()).fold(0.0, f32::max))
}

#[test]
fn every_gradient_equals_pytorch_autograd() {
    for name in MODELS {
        let g = golden(name);
        let net = kvad_train::open(&root().join("fixtures/models").join(name)).unwrap();
        let b = batch(&g["ids"], &g["labels"]);
        let mut grads = net.params.zero_grads();
        let loss = net.loss_and_grads(&b, &mut grads, 1.0);
        let want = g["loss"].as_f64().unwrap();
        assert!((loss - want).abs() < 1e-5 * want, "{name}: loss {loss} vs PyTorch {want}");
        assert!((net.loss(&b) - loss).abs() < 1e-9, "{name}: loss without gradients differs");
        let reference =
            weights::open(&root().join(format!("fixtures/goldens/train/{name}.grads.safetensors"))).unwrap();
        let mut names = reference.tensor_names();
        names.sort();
        let mut ours: Vec<String> = net.params.iter().filter(|p| p.trainable).map(|p| p.name.clone()).collect();
        ours.sort();
        assert_eq!(ours, names, "{name}: the trainable parameters are PyTorch's");
        for (i, p) in net.params.iter().enumerate().filter(|(_, p)| p.trainable) {
            let want = reference.load_f32(&p.name).unwrap();
            let (diff, scale) = worst(&grads.g[i], &want);
            // f32 sums in another order: within 1e-4 of the tensor's largest gradient.
            assert!(diff <= 1e-4 * scale + 1e-7, "{name} {}: gradient off by {diff} (largest {scale})", p.name);
        }
    }
}

fn hyper(g: &Value) -> TrainConfig {
    let h = &g["hyper"];
    let f = |k: &str| h[k].as_f64().unwrap() as f32;
    TrainConfig {
        lr: f("lr"),
        warmup: h["warmup"].as_u64().unwrap() as usize,
        steps: h["steps"].as_u64().unwrap() as usize,
        clip: Some(f("clip")),
        adamw: AdamWConfig {
            betas: (h["betas"][0].as_f64().unwrap() as f32, h["betas"][1].as_f64().unwrap() as f32),
            eps: f("eps"),
            weight_decay: f("weight_decay"),
        },
    }
}

fn trained_logits(name: &str) -> Vec<f32> {
    let path = root().join(format!("fixtures/goldens/train/{name}.trained.safetensors"));
    weights::open(&path).unwrap().load_f32("logits").unwrap()
}

#[test]
fn fifty_adamw_steps_follow_pytorchs_loss_curve_and_the_checkpoint_loads() {
    for name in MODELS {
        let g = golden(name);
        let dir = root().join("fixtures/models").join(name);
        let cfg = hyper(&g);
        let mut tr = Trainer::new(kvad_train::open(&dir).unwrap(), cfg);
        let micro: Vec<Batch> = g["micro"].as_array().unwrap().iter().map(|m| batch(&m["ids"], &m["labels"])).collect();
        let accum = g["hyper"]["accum"].as_u64().unwrap() as usize;
        let mut worst_step = 0.0f64;
        for (step, want) in g["steps"].as_array().unwrap().iter().enumerate() {
            let r = tr.step(&micro[step * accum..(step + 1) * accum]).unwrap();
            let (loss, lr, norm) =
                (want["loss"].as_f64().unwrap(), want["lr"].as_f64().unwrap(), want["grad_norm"].as_f64().unwrap());
            assert!((r.loss - loss).abs() <= 0.01 * loss, "{name} step {step}: loss {} vs PyTorch {loss}", r.loss);
            worst_step = worst_step.max((r.loss - loss).abs() / loss);
            assert!((r.lr as f64 - lr).abs() <= 1e-6 * cfg.lr as f64, "{name} step {step}: lr {} vs {lr}", r.lr);
            assert!(
                (r.grad_norm as f64 - norm).abs() <= 0.01 * norm,
                "{name} step {step}: norm {} vs {norm}",
                r.grad_norm
            );
        }
        eprintln!("{name}: loss within {:.2e} of PyTorch's at every step", worst_step);
        // The trained weights give PyTorch's trained logits, in the trainer and through a saved checkpoint.
        let want = trained_logits(name);
        let first = batch(&g["ids"], &g["labels"]);
        let len = first.len;
        let ours = &tr.net.logits(&first)[..want.len()];
        let (diff, scale) = worst(ours, &want);
        assert!(diff <= 0.01 * scale, "{name}: trained logits off by {diff} (largest {scale})");

        let out = tempfile::tempdir().unwrap();
        let base = match name.strip_suffix("-lora") {
            Some(base) => {
                // The adapter saved in PEFT's format loads back with the same logits; then merged into the model.
                let adapter = out.path().join("adapter");
                kvad_train::save_adapter(&tr.net, &format!("../{base}"), &adapter).unwrap();
                let base_dir = root().join("fixtures/models").join(base);
                kvad_train::save(&kvad_train::open(&base_dir).unwrap(), &base_dir, &out.path().join(base)).unwrap();
                let again = kvad_train::open(&adapter).unwrap();
                assert_eq!(again.params.trainable_numel(), tr.net.params.trainable_numel());
                let (diff, scale) = worst(&again.logits(&first)[..want.len()], ours);
                assert!(diff <= 1e-5 * scale, "{name}: the saved adapter's logits off by {diff}");
                tr.net.merge_lora();
                let (diff, scale) = worst(&tr.net.logits(&first)[..want.len()], ours);
                assert!(diff <= 1e-4 * scale, "{name}: merged logits off by {diff}");
                root().join("fixtures/models").join(base)
            }
            None => dir.clone(),
        };
        kvad_train::save(&tr.net, &base, out.path()).unwrap();
        let model = load_model(&ModelFiles::HfDir(out.path().to_path_buf())).unwrap().model;
        let mut kv = model.new_state();
        let tokens = &first.ids[..len];
        let got = model.forward(&mut [SeqInput { tokens, state: &mut kv }], LogitsMode::All).unwrap().remove(0);
        let (diff, scale) = worst(&got, ours);
        assert!(diff <= 1e-4 * scale, "{name}: the saved checkpoint's logits off by {diff} (largest {scale})");
        let again = kvad_train::open(out.path()).unwrap();
        assert_eq!(again.params.numel(), tr.net.params.numel(), "{name}: the checkpoint reloads for training");
    }
}

#[test]
fn what_training_does_not_cover_is_refused_by_name() {
    let e = kvad_train::open(&root().join("fixtures/models/qwen3-moe")).err().unwrap().to_string();
    assert!(e.contains("architectures") && e.contains("Qwen3MoeForCausalLM"), "{e}");
    let e = kvad_train::open(&root().join("fixtures/models/llama-gguf")).err().unwrap().to_string();
    assert!(e.contains("config.json"), "{e}");
    let net = kvad_train::open(&root().join("fixtures/models/gpt2")).unwrap();
    let mut tr = Trainer::new(net, TrainConfig::default());
    let e = tr.step(&[Batch::shifted(&[vec![1, 2, 9999]], None).unwrap()]).unwrap_err().to_string();
    assert!(e.contains("token id = 9999"), "{e}");
    let long = Batch::shifted(&[vec![1; 200]], None).unwrap();
    let e = tr.step(&[long]).unwrap_err().to_string();
    assert!(e.contains("sequence length = 200") && e.contains("n_positions"), "{e}");
}
