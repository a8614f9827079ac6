//! Every golden case of fixtures/goldens/tokenizer/*.json, through every way we load the same
//! tokenizer: ids without and with special tokens, and the decoded text, must equal what
//! transformers produced.

mod common;

use kvad_text::{IncrementalDecoder, Tokenizer};
use serde_json::Value;

use common::gguf_meta::vocab_from_gguf;
use common::{fixture, load_json, smollm2_gguf};

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an id list: {v}"))
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Checks every case; on failure names the first differing case and how many differ.
fn check_goldens(tok: &Tokenizer, golden: &str, what: &str) {
    let g = load_json(golden);
    let cases = g["cases"].as_array().expect("cases");
    assert!(!cases.is_empty(), "{golden} has no cases");
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let text = c["text"].as_str().expect("text");
        let want = ids(&c["ids"]);
        let want_special = ids(&c["ids_with_special"]);
        let want_decoded = c["decoded"].as_str().expect("decoded");
        let got = tok.encode(text, false).expect("encode");
        let got_special = tok.encode(text, true).expect("encode");
        let got_decoded = tok.decode(&want, false).expect("decode");
        let mut problems = Vec::new();
        if got != want {
            problems.push(format!("ids: got {got:?}, want {want:?}"));
        }
        if got_special != want_special {
            problems.push(format!("ids_with_special: got {got_special:?}, want {want_special:?}"));
        }
        if got_decoded != want_decoded {
            problems.push(format!("decoded: got {got_decoded:?}, want {want_decoded:?}"));
        }
        // Streaming the ids must give the same text as decoding them at once.
        let mut d = IncrementalDecoder::new(tok, false);
        let mut streamed = String::new();
        for &id in &want {
            streamed.push_str(&d.push(id).expect("push").unwrap_or_default());
        }
        streamed.push_str(&d.finish().expect("finish"));
        if streamed != want_decoded {
            problems.push(format!("streamed: got {streamed:?}, want {want_decoded:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!("case {i} {text:?}: {}", problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{what}: {} of {} cases differ; first: {}", failures.len(), cases.len(), failures[0]);
}

#[test]
fn smollm2_tokenizer_json_matches_goldens() {
    let path = fixture("fixtures/tokenizers/smollm2/tokenizer.json");
    let tok = Tokenizer::from_file(&path).expect("load tokenizer.json");
    check_goldens(&tok, "fixtures/goldens/tokenizer/smollm2.json", "smollm2 tokenizer.json");
    assert_eq!(tok.bos_token(), Some("<|im_start|>"));
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), &[2]);
}

#[test]
fn smollm2_tokenizer_dir_loads() {
    let dir = fixture("fixtures/tokenizers/smollm2");
    let tok = Tokenizer::from_dir(&dir).expect("load dir");
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert_eq!(tok.eos_ids(), &[2]);
}

#[test]
fn smollm2_gguf_vocab_matches_goldens() {
    let vocab = vocab_from_gguf(&smollm2_gguf()).expect("read GGUF metadata");
    let tok = Tokenizer::from_gguf_vocab(vocab).expect("convert");
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), &[2]);
    assert!(tok.chat_template().is_some());
    check_goldens(&tok, "fixtures/goldens/tokenizer/smollm2.json", "smollm2 GGUF vocab");
}

#[test]
fn spm_gguf_vocab_matches_goldens() {
    let path = fixture("fixtures/tokenizers/spm/tokenizer.gguf");
    let vocab = vocab_from_gguf(&path).expect("read GGUF metadata");
    let tok = Tokenizer::from_gguf_vocab(vocab).expect("convert");
    let g = load_json("fixtures/goldens/tokenizer/spm.json");
    assert_eq!(tok.vocab_size() as u64, g["vocab_size"].as_u64().unwrap_or(0));
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), &[2]);
    check_goldens(&tok, "fixtures/goldens/tokenizer/spm.json", "spm GGUF vocab");
}

/// `fewest_tokens` is a lower bound: on every golden string and on long runs of the text that packs most bytes into
/// a token (repeated characters, spaces, words, CJK), byte-level BPE and SentencePiece alike, the encoding is never
/// shorter than it says.
#[test]
fn fewest_tokens_never_exceeds_the_real_count() {
    let smol = Tokenizer::from_file(&fixture("fixtures/tokenizers/smollm2/tokenizer.json")).unwrap();
    let path = fixture("fixtures/tokenizers/spm/tokenizer.gguf");
    let spm = Tokenizer::from_gguf_vocab(vocab_from_gguf(&path).unwrap()).unwrap();
    let mut texts: Vec<String> = load_json("fixtures/goldens/tokenizer/smollm2.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect();
    for unit in ["a", " ", "the ", "    ", "=", "日本語", "\n", "ﬁ", "<|im_start|>"] {
        texts.push(unit.repeat(5000));
    }
    for (name, tok) in [("smollm2", &smol), ("spm", &spm)] {
        let mut tight = 0f64;
        for t in &texts {
            let n = tok.encode(t, false).unwrap().len();
            let bound = tok.fewest_tokens(t.len());
            assert!(bound <= n, "{name}: {bound} > {n} tokens for {:?}…", &t[..t.len().min(40)]);
            tight = tight.max(bound as f64 / n.max(1) as f64);
        }
        assert!(tight > 0.0, "{name}: the bound says something for long texts");
    }
}
