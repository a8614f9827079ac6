//! Every architecture against PyTorch: logits of every prompt position within 1e-4, and 16 greedy tokens
//! identical, for tiny random-weight models that transformers made (`bash scripts/reference/make_all.sh`).
//! Also: several sequences of different lengths in one pass, and a prompt read in chunks, give the same logits.

use kvad_models::{load_model, CausalLm, LogitsMode, ModelFiles, SeqInput};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Case {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn golden(name: &str) -> (Box<dyn CausalLm>, Vec<Case>) {
    let path = root().join(format!("fixtures/goldens/models/{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; make it with `bash scripts/reference/make_all.sh`", path.display()));
    let g: Value = serde_json::from_str(&text).unwrap();
    let src = root().join(g["source"].as_str().unwrap());
    let files = if src.extension().is_some_and(|e| e == "gguf") {
        ModelFiles::Gguf(src)
    } else {
        ModelFiles::HfDir(src.parent().unwrap().to_path_buf())
    };
    let model = load_model(&files).unwrap_or_else(|e| panic!("{name}: {e}")).model;
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let cases = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: ids(&c["prompt"]),
            greedy: ids(&c["greedy"]),
            logits: c["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
                .collect(),
        })
        .collect();
    (model, cases)
}

fn assert_close(name: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name} {what}: length");
    let mut worst = (0.0f32, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if d > worst.0 {
            worst = (d, i);
        }
    }
    assert!(
        worst.0 <= 1e-4,
        "{name} {what}: logit {} differs by {} ({} vs {})",
        worst.1,
        worst.0,
        got[worst.1],
        want[worst.1]
    );
}

fn check(name: &str) {
    let (model, cases) = golden(name);
    let vocab = model.config().vocab_size;
    for (ci, case) in cases.iter().enumerate() {
        // Logits of every prompt position in one pass.
        let mut kv = model.new_state();
        let out = model.forward(&mut [SeqInput { tokens: &case.prompt, state: &mut kv }], LogitsMode::All).unwrap();
        for (p, want) in case.logits.iter().enumerate() {
            assert_close(name, &format!("case {ci} position {p}"), &out[0][p * vocab..(p + 1) * vocab], want);
        }
        // Greedy continuation, one token at a time through the cache.
        let mut tokens = Vec::new();
        let mut last = out[0][(case.prompt.len() - 1) * vocab..].to_vec();
        for _ in 0..case.greedy.len() {
            let next = argmax(&last);
            tokens.push(next);
            last =
                model.forward(&mut [SeqInput { tokens: &[next], state: &mut kv }], LogitsMode::Last).unwrap().remove(0);
        }
        assert_eq!(tokens, case.greedy, "{name} case {ci}: greedy tokens");
    }
    // All prompts in one batched pass, and each prompt read in two chunks, give the same last logits.
    let mut caches: Vec<_> = cases.iter().map(|_| model.new_state()).collect();
    let mut batch: Vec<SeqInput> =
        cases.iter().zip(caches.iter_mut()).map(|(c, kv)| SeqInput { tokens: &c.prompt, state: kv }).collect();
    let out = model.forward(&mut batch, LogitsMode::Last).unwrap();
    for (ci, case) in cases.iter().enumerate() {
        assert_close(name, &format!("batched case {ci}"), &out[ci], case.logits.last().unwrap());
        let mut kv = model.new_state();
        let cut = case.prompt.len() / 2;
        let none =
            model.forward(&mut [SeqInput { tokens: &case.prompt[..cut], state: &mut kv }], LogitsMode::None).unwrap();
        assert!(none[0].is_empty());
        let out =
            model.forward(&mut [SeqInput { tokens: &case.prompt[cut..], state: &mut kv }], LogitsMode::Last).unwrap();
        assert_close(name, &format!("chunked case {ci}"), &out[0], case.logits.last().unwrap());
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn llama_with_llama3_rope_scaling() {
    check("llama");
}

#[test]
fn llama_tied_embeddings() {
    check("llama-tied");
}

#[test]
fn llama_from_gguf() {
    check("llama-gguf");
}

#[test]
fn mistral_sliding_window() {
    check("mistral");
}

#[test]
fn qwen2_attention_bias() {
    check("qwen2");
}

#[test]
fn qwen2_bf16_checkpoint() {
    check("qwen2-bf16");
}

#[test]
fn qwen3_qk_norm_and_wide_heads() {
    check("qwen3");
}

#[test]
fn gpt2() {
    check("gpt2");
}

#[test]
fn qwen3_moe_normalised_top_k_and_a_dense_layer() {
    check("qwen3-moe");
}

#[test]
fn qwen3_moe_every_second_layer_routed_tied_head() {
    check("qwen3-moe-step");
}

#[test]
fn qwen3_moe_from_llama_cpp_stacked_experts() {
    check("qwen3-moe-gguf");
}
