//! The seed's own models, trained from scratch inside the test: a two-layer GPT on "the cat sat on the mat", and a
//! chat model on `u:the cat?|a:on the mat.|` with `|` as its end token; each saved and then read back by kvad's
//! inference loader and tokenizer, which must say the sentence back. Also: a cancelled run keeps its checkpoint, and
//! resuming from it ends with the very weights an uninterrupted run reaches.

use kvad_models::{load_model, LogitsMode, ModelFiles, SeqInput};
use kvad_train::data;
use kvad_train::run::{run, Ending, Output, Progress, RunSpec};
use kvad_train::{init, AdamWConfig, TrainConfig, Trainer};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const CHAT_TEMPLATE: &str =
    "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}|{% endfor %}{% if add_generation_prompt %}a:{% endif %}";

fn gpt_config() -> serde_json::Value {
    json!({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 2,
           "n_head": 2, "n_positions": 64, "bos_token_id": 256, "eos_token_id": 256})
}

/// Writes config.json and a byte-level tokenizer into `dir` (what `kvad train --config` does first).
fn setup(dir: &Path, cfg: &serde_json::Value, eos: &str, template: Option<&str>) {
    init::write_byte_tokenizer(dir, &["<|endoftext|>"], Some(eos), template).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
}

fn spec(steps: usize, lr: f32) -> RunSpec {
    RunSpec {
        train: TrainConfig {
            lr,
            warmup: 5,
            steps,
            clip: Some(1.0),
            adamw: AdamWConfig { weight_decay: 0.0, ..Default::default() },
        },
        batch: 4,
        accum: 1,
        save_every: 0,
        eval_every: 0,
        seed: 1,
    }
}

/// Greedy continuation of `prompt` by kvad's inference engine on the saved model, until an end token or `max`.
fn generate(dir: &Path, prompt: &str, max: usize) -> String {
    let tok = kvad_text::Tokenizer::from_dir(dir).unwrap();
    let model = load_model(&ModelFiles::HfDir(dir.to_path_buf())).unwrap().model;
    let mut kv = model.new_state();
    let mut ids = tok.encode(prompt, false).unwrap();
    let mut out = Vec::new();
    let mut next = ids.clone();
    for _ in 0..max {
        let logits =
            model.forward(&mut [SeqInput { tokens: &next, state: &mut kv }], LogitsMode::Last).unwrap().remove(0);
        let t = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
        if tok.eos_ids().contains(&t) {
            break;
        }
        out.push(t);
        ids.push(t);
        next = vec![t];
    }
    tok.decode(&out, false).unwrap()
}

fn train(dir: &Path, records: &[data::Record], steps: usize, template: bool) -> f64 {
    let tok = kvad_text::Tokenizer::from_dir(dir).unwrap();
    let tpl = template.then(|| kvad_text::ChatTemplate::new(CHAT_TEMPLATE).unwrap());
    let docs = data::encode(records, &tok, tpl.as_ref()).unwrap();
    let rows = data::pack(&docs, 32);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let spec = spec(steps, 1e-2);
    let mut tr = Trainer::new(init::scratch(&cfg, 1).unwrap(), spec.train);
    let out = Output { dir: dir.to_path_buf(), source: dir.to_path_buf(), base_name: String::new() };
    let mut last = f64::NAN;
    let ending = run(&mut tr, &rows, &[], &spec, &out, &AtomicBool::new(false), |p| {
        if let Progress::Step { report, .. } = p {
            last = report.loss;
        }
    })
    .unwrap();
    assert_eq!(ending, Ending::Done);
    last
}

#[test]
fn a_two_layer_gpt_learns_the_cat_sat_on_the_mat_and_kvad_says_it_back() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), &gpt_config(), "<|endoftext|>", None);
    let t0 = Instant::now();
    let loss = train(dir.path(), &[data::Record::Text("the cat sat on the mat".into())], 120, false);
    eprintln!("trained in {:.2} s, final loss {loss:.4}", t0.elapsed().as_secs_f64());
    assert!(loss < 0.05, "final loss {loss}");
    assert_eq!(generate(dir.path(), "the cat", 40), " sat on the mat");
}

#[test]
fn a_chat_model_with_a_pipe_for_its_end_token_answers_through_its_template() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = gpt_config();
    cfg["eos_token_id"] = json!(b'|');
    setup(dir.path(), &cfg, "|", Some(CHAT_TEMPLATE));
    let turn = json!([{"role": "user", "content": "the cat?"}, {"role": "assistant", "content": "on the mat."}]);
    let loss = train(dir.path(), &[data::Record::Messages(turn.as_array().unwrap().clone())], 150, true);
    assert!(loss < 0.05, "final loss {loss}");
    // The template renders `u:the cat?|a:`; the model answers and stops at its end token.
    assert_eq!(generate(dir.path(), "u:the cat?|a:", 40), "on the mat.");
}

#[test]
fn a_cancelled_run_keeps_its_checkpoint_and_resuming_reaches_the_same_weights() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("src");
    setup(&src, &gpt_config(), "<|endoftext|>", None);
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(8);
    let tok = kvad_text::Tokenizer::from_dir(&src).unwrap();
    let rows = data::pack(&data::encode(&[data::Record::Text(text)], &tok, None).unwrap(), 16);
    let (train_rows, val_rows) = (&rows[2..], &rows[..2]);
    let mut sp = spec(10, 5e-3);
    sp.save_every = 4;
    sp.eval_every = 5;
    let fresh = || Trainer::new(init::scratch(&gpt_config(), 3).unwrap(), sp.train);

    let whole = root.path().join("whole");
    let mut a = fresh();
    let out = Output { dir: whole.clone(), source: src.clone(), base_name: String::new() };
    let mut evals = Vec::new();
    run(&mut a, train_rows, val_rows, &sp, &out, &AtomicBool::new(false), |p| {
        if let Progress::Eval { step, .. } = p {
            evals.push(step);
        }
    })
    .unwrap();
    assert_eq!(evals, vec![5, 10]);
    assert!(whole.join("checkpoint-4").join("model.safetensors").is_file());
    assert!(whole.join("checkpoint-8").join("optimizer.safetensors").is_file());

    let cut = root.path().join("cut");
    let mut b = fresh();
    let out = Output { dir: cut.clone(), source: src.clone(), base_name: String::new() };
    let cancel = AtomicBool::new(false);
    let ending = run(&mut b, train_rows, val_rows, &sp, &out, &cancel, |p| {
        if let Progress::Step { report, .. } = p {
            if report.step == 5 {
                cancel.store(true, Ordering::Relaxed);
            }
        }
    })
    .unwrap();
    assert_eq!(ending, Ending::Cancelled(6));
    let ckpt = cut.join("checkpoint-4");
    assert!(ckpt.join("model.safetensors").is_file(), "the last checkpoint is intact");
    assert!(!cut.join("model.safetensors").exists(), "no final model from a cancelled run");

    let mut c = Trainer::resume(kvad_train::open(&ckpt).unwrap(), sp.train, &ckpt).unwrap();
    assert_eq!(c.step_index(), 4);
    run(&mut c, train_rows, val_rows, &sp, &out, &AtomicBool::new(false), |_| {}).unwrap();
    for (x, y) in a.net.params.iter().zip(c.net.params.iter()) {
        assert_eq!(x.data, y.data, "{} differs after resuming", x.name);
    }
    // The final model loads for inference.
    load_model(&ModelFiles::HfDir(cut.clone())).unwrap();
}

#[test]
fn a_lora_run_saves_a_peft_adapter_that_resumes() {
    let root = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama");
    let mut net = kvad_train::open(&base).unwrap();
    let spec_l =
        kvad_train::LoraSpec { rank: 4, alpha: 8.0, targets: vec!["q_proj".into(), "v_proj".into()], rslora: false };
    assert_eq!(net.add_lora(&spec_l, 1).unwrap(), 4);
    let rows: Vec<Vec<u32>> = (0..8u32).map(|i| (0..12).map(|j| 3 + (i * 7 + j * 5) % 500).collect()).collect();
    let mut sp = spec(6, 1e-2);
    sp.save_every = 3;
    let mut tr = Trainer::new(net, sp.train);
    let out = Output { dir: root.path().join("run"), source: base.clone(), base_name: base.display().to_string() };
    run(&mut tr, &rows, &[], &sp, &out, &AtomicBool::new(false), |_| {}).unwrap();
    let adapter = out.dir.join("checkpoint-3");
    assert!(adapter.join("adapter_model.safetensors").is_file() && !adapter.join("model.safetensors").exists());
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.dir.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!((cfg["r"].as_u64(), cfg["target_modules"].as_array().map(Vec::len)), (Some(4), Some(2)));
    let resumed = Trainer::resume(kvad_train::open(&adapter).unwrap(), sp.train, &adapter).unwrap();
    assert_eq!(resumed.step_index(), 3);
    assert_eq!(resumed.net.params.trainable_numel(), tr.net.params.trainable_numel());
}
