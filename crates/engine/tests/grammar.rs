//! Constrained decoding on a tiny model (the random-weight llama fixture, 512 logits) given a byte-level tokenizer:
//! 500 replies drawn at temperature 1, ten to a pass, each held to a JSON Schema, all parse and validate — the
//! constraint, not the model, guarantees it — as do replies held to a regular expression and to a Lark grammar.
//! A schema kvad cannot honour is refused naming the request's field.

use kvad_engine::grammar::{Constraint, Grammar, Grammars};
use kvad_engine::pass::{run, Sequence, Stepping};
use kvad_engine::seam::{GenParams, Work};
use kvad_engine::{open_model, GenerateOptions, OpenedModel, SamplingParams};
use kvad_tensor::BackendKind;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The llama fixture's weights beside a byte-level tokenizer of its own: `<unk>`, `<s>`, `</s>` (ids 0–2, the
/// fixture's end token 2), then one token a byte. Written once per test process: the tests run in parallel, and
/// one writing the files while another reads them was a flake.
fn model_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(write_model_dir).clone()
}

fn write_model_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvad-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    // GPT-2's byte alphabet: printable bytes stand for themselves, the rest for 256 + their rank.
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut next = 256u32;
    let mut vocab = serde_json::Map::new();
    for (i, s) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        vocab.insert(s.to_string(), json!(i));
    }
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap()
        };
        vocab.insert(c.to_string(), json!(3 + b as usize));
    }
    let added: Vec<Value> = ["<unk>", "<s>", "</s>"]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": i, "content": s, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

fn model() -> OpenedModel {
    open_model(&model_dir(), BackendKind::CpuF32).unwrap()
}

/// `n` replies of at most `max` tokens held to `grammar`, drawn at temperature 1 from seeds 1..=n, ten to a
/// pass; each reply's text (its end token left out). Every reply must end within `max` tokens.
fn replies(m: &OpenedModel, grammar: Grammar, n: usize, max: usize) -> Vec<String> {
    let (texts, unfinished) = drawn(m, grammar, n, max);
    assert!(unfinished.is_empty(), "replies did not end within {max} tokens: {unfinished:?}");
    texts
}

/// As [`replies`], the replies that ended and the text of those that did not.
fn drawn(m: &OpenedModel, grammar: Grammar, n: usize, max: usize) -> (Vec<String>, Vec<String>) {
    let end = 2;
    let g = Grammars::new(&m.tokenizer, m.model.config().vocab_size, end).unwrap();
    let constraint = Constraint { grammar, field: "response_format", after: None };
    let (mut out, mut unfinished) = (Vec::new(), Vec::new());
    let how = Stepping { greedy_ahead: Some(1) };
    for batch in (0..n).collect::<Vec<_>>().chunks(10) {
        let mut seqs: Vec<Sequence> = batch
            .iter()
            .map(|&i| {
                let sampling =
                    SamplingParams { temperature: 1.0, seed: Some(1 + i as u64), ..SamplingParams::default() };
                let options = GenerateOptions { constraint: Some(constraint.clone()), ..GenerateOptions::default() };
                let prompt = m.tokenizer.encode(&format!("request {i}:"), false).unwrap();
                let mut s =
                    Sequence::new(prompt, m.model.new_state(), 0, GenParams { sampling, max_tokens: max, options });
                s.guide = Some(g.guide(&constraint).unwrap());
                s
            })
            .collect();
        for s in &mut seqs {
            run(m.model.as_ref(), how, &[Work::Chunk(s.prompt.len() - 1)], &mut [s]).unwrap();
        }
        let mut live: Vec<usize> = (0..seqs.len()).collect();
        let mut work = Work::Last;
        for _ in 0..max {
            let works = vec![work; live.len()];
            let mut refs: Vec<&mut Sequence> =
                seqs.iter_mut().enumerate().filter(|(i, _)| live.contains(i)).map(|(_, s)| s).collect();
            let got = run(m.model.as_ref(), how, &works, &mut refs).unwrap();
            let ended: Vec<usize> = live
                .iter()
                .zip(&got)
                .filter(|(_, g)| g.as_ref().is_some_and(|s| s.id == end))
                .map(|(&i, _)| i)
                .collect();
            live.retain(|i| !ended.contains(i));
            work = Work::Decode;
            if live.is_empty() {
                break;
            }
        }
        for (i, s) in seqs.into_iter().enumerate() {
            if live.contains(&i) {
                unfinished.push(m.tokenizer.decode(&s.reply, false).unwrap());
                continue;
            }
            let ids: Vec<u32> = s.reply.iter().copied().filter(|&t| t != end).collect();
            out.push(m.tokenizer.decode(&ids, false).unwrap());
        }
    }
    (out, unfinished)
}

#[test]
fn five_hundred_replies_at_temperature_1_all_validate_against_their_schema() {
    let m = model();
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"enum": ["Oslo", "Bergen", "Tromsø"]},
            "n": {"type": "integer", "minimum": -5, "maximum": 99},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"}, "maxItems": 2}
        },
        "required": ["city", "n", "ok"],
        "additionalProperties": false
    });
    let got = replies(&m, Grammar::JsonSchema(schema), 500, 120);
    let mut distinct = std::collections::HashSet::new();
    for (i, text) in got.iter().enumerate() {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("reply {i} {text:?}: {e}"));
        let o = v.as_object().unwrap_or_else(|| panic!("reply {i}: not an object: {text}"));
        assert!(o.keys().all(|k| ["city", "n", "ok", "tags"].contains(&k.as_str())), "reply {i}: {text}");
        assert!(["Oslo", "Bergen", "Tromsø"].contains(&o["city"].as_str().unwrap_or("")), "reply {i}: {text}");
        // An integer as JSON Schema counts one (`-0` included): a number with no fraction.
        assert!(o["n"].as_f64().is_some_and(|n| n.fract() == 0.0 && (-5.0..=99.0).contains(&n)), "reply {i}: {text}");
        assert!(o["ok"].is_boolean(), "reply {i}: {text}");
        if let Some(t) = o.get("tags") {
            let t = t.as_array().unwrap_or_else(|| panic!("reply {i}: {text}"));
            assert!(t.len() <= 2, "reply {i}: {text}");
            for s in t {
                let s = s.as_str().unwrap_or_else(|| panic!("reply {i}: {text}"));
                assert!((1..=4).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase()), "reply {i}: {text}");
            }
        }
        distinct.insert(text.clone());
    }
    // Temperature 1 really draws: the replies are not one reply repeated.
    assert!(distinct.len() > 100, "only {} distinct replies of 500", distinct.len());
}

#[test]
fn replies_match_a_regular_expression_and_a_lark_grammar() {
    let m = model();
    for text in replies(&m, Grammar::Regex("[0-9]{3}-[a-z]{2,3}".into()), 40, 20) {
        let b = text.as_bytes();
        assert!(
            (6..=7).contains(&b.len()) && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b'-',
            "{text:?} does not match [0-9]{{3}}-[a-z]{{2,3}}"
        );
        assert!(b[4..].iter().all(u8::is_ascii_lowercase), "{text:?}");
    }
    let lark = r#"start: "call(" NAME ("," NAME)? ")"
NAME: /[a-z]{1,5}/"#;
    for text in replies(&m, Grammar::Lark(lark.into()), 40, 30) {
        let inner = text.strip_prefix("call(").and_then(|t| t.strip_suffix(')')).unwrap_or_else(|| panic!("{text:?}"));
        let names: Vec<&str> = inner.split(',').collect();
        assert!(names.len() <= 2, "{text:?}");
        assert!(
            names.iter().all(|n| (1..=5).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_lowercase())),
            "{text:?}"
        );
    }
    // JSON mode: any object. Its strings and keys have no end at temperature 1 on random weights: the replies
    // that ended are objects, and one that ran out of tokens is still the start of one (never an invalid byte).
    let (ended, cut) = drawn(&m, Grammar::JsonObject, 20, 200);
    assert!(!ended.is_empty(), "no JSON object ended: {cut:?}");
    for text in &ended {
        // JSON's grammar bounds no exponent; serde_json refuses one past f64's range (30.9e2960929…), which is
        // its limit, not a grammar's.
        match serde_json::from_str::<Value>(text) {
            Ok(v) => assert!(v.is_object(), "{text:?}"),
            Err(e) => assert!(e.to_string().starts_with("number out of range"), "{text:?}: {e}"),
        }
    }
    for text in &cut {
        let e = serde_json::from_str::<Value>(text).expect_err(text);
        let range = e.to_string().starts_with("number out of range");
        assert!(e.is_eof() || range, "{text:?} is not the start of a JSON object: {e}");
    }
}

#[test]
fn a_grammar_kvad_cannot_honour_is_refused_naming_the_field() {
    let m = model();
    let g = Grammars::new(&m.tokenizer, m.model.config().vocab_size, 2).unwrap();
    for (grammar, field) in [
        (Grammar::Regex("(unclosed".into()), "response_format"),
        (Grammar::JsonSchema(json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})), "tool_choice"),
        (Grammar::Lark("start: undefined_rule".into()), "response_format"),
    ] {
        let e =
            g.guide(&Constraint { grammar: grammar.clone(), field, after: None }).expect_err(&format!("{grammar:?}"));
        let s = e.to_string();
        assert!(s.contains(field), "{grammar:?}: {s}");
    }
}

/// A reasoning model's trace stays free: with `after: "</think>"` nothing is masked until the reply has written
/// the marker (in whatever tokens), then only what the grammar allows.
#[test]
fn a_constraint_after_a_marker_leaves_the_text_before_it_free() {
    let m = model();
    let vocab = m.model.config().vocab_size;
    let g = Grammars::new(&m.tokenizer, vocab, 2).unwrap();
    let digits = Constraint {
        grammar: Grammar::Regex("[0-9]+".into()),
        field: "response_format",
        after: Some("</think>".into()),
    };
    let mut guide = g.guide(&digits).unwrap();
    let allowed = |guide: &mut kvad_engine::grammar::Guide| {
        let mut row = vec![0f32; vocab];
        guide.mask(&mut row).unwrap();
        row.iter().filter(|x| x.is_finite()).count()
    };
    assert_eq!(allowed(&mut guide), vocab, "nothing is masked inside the trace");
    for id in m.tokenizer.encode("<think>any text, even 12</thi", false).unwrap() {
        guide.accept(id).unwrap();
        assert_eq!(allowed(&mut guide), vocab);
    }
    for id in m.tokenizer.encode("nk>", false).unwrap() {
        guide.accept(id).unwrap();
    }
    // One token a byte: the ten digits are all the grammar allows now.
    assert_eq!(allowed(&mut guide), 10, "after the marker the grammar holds the reply");
    let one = m.tokenizer.encode("7", false).unwrap()[0];
    guide.accept(one).unwrap();
    assert_eq!(allowed(&mut guide), 11, "more digits, or the end");
}
