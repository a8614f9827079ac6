//! Conversion tests on tiny hand-made vocabularies.

use super::*;
use crate::Tokenizer;

/// A byte-level vocabulary: the 256 byte characters, a few merged tokens and two control tokens.
pub(crate) fn tiny_byte_level() -> GgufVocab {
    let mut tokens: Vec<String> = vec!["<|end|>".into(), "<|start|>".into()];
    let mut types = vec![3, 3];
    let alphabet: Vec<char> = {
        let mut a: Vec<char> = byte_level::alphabet().into_iter().collect();
        a.sort();
        a
    };
    for c in alphabet {
        tokens.push(c.to_string());
        types.push(1);
    }
    for t in ["hi", "Ġh", "Ġhi", "<think>"] {
        tokens.push(t.into());
        types.push(if t == "<think>" { 4 } else { 1 });
    }
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types: Some(types),
        merges: Some(vec!["Ġ h".into(), "Ġh i".into(), "h i".into()]),
        bos: Some(1),
        eos: Some(0),
        ..Default::default()
    }
}

/// A SentencePiece vocabulary with byte fallback and scores but no merges.
pub(crate) fn tiny_spm() -> GgufVocab {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (t, s) in [("▁", -1.0), ("h", -2.0), ("i", -3.0), ("▁h", -4.0), ("▁hi", -5.0), ("o", -6.0)] {
        tokens.push(t.into());
        types.push(1);
        scores.push(s);
    }
    GgufVocab {
        model: "llama".into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        bos: Some(1),
        eos: Some(2),
        unk: Some(0),
        ..Default::default()
    }
}

#[test]
fn unknown_model_names_the_field_and_value() {
    let v = GgufVocab { model: "rwkv".into(), tokens: vec!["a".into()], ..Default::default() };
    let err = Tokenizer::from_gguf_vocab(v.clone()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.model"), "{err}");
    assert!(err.contains("rwkv"), "{err}");
}

#[test]
fn out_of_range_special_id_is_an_error() {
    let mut v = tiny_byte_level();
    v.eos = Some(100_000);
    let err = Tokenizer::from_gguf_vocab(v.clone()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.eos_token_id"), "{err}");
}

#[test]
fn merge_without_space_is_an_error() {
    let mut v = tiny_byte_level();
    v.merges = Some(vec!["hi".into()]);
    let err = Tokenizer::from_gguf_vocab(v.clone()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.merges"), "{err}");
}

#[test]
fn byte_level_keeps_control_tokens_whole() {
    let v = tiny_byte_level();
    let t = Tokenizer::from_gguf_vocab(v.clone()).unwrap();
    let hi = t.token_to_id("hi").unwrap();
    let space_hi = t.token_to_id("Ġhi").unwrap();
    let ids = t.encode("<|start|>hi hi<|end|>", false).unwrap();
    assert_eq!(ids, vec![1, hi, space_hi, 0]);
    assert_eq!(t.decode(&ids, false).unwrap(), "<|start|>hi hi<|end|>");
    assert_eq!(t.decode(&ids, true).unwrap(), "hi hi");
    // user_defined tokens are matched whole but are not special.
    let think = t.token_to_id("<think>").unwrap();
    assert_eq!(t.encode("<think>", false).unwrap(), vec![think]);
    assert_eq!(t.decode(&[think], true).unwrap(), "<think>");
    // gpt2 vocabularies add no BOS unless the file says so.
    assert_eq!(t.encode("hi", true).unwrap(), vec![hi]);
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_ids(), &[0]);
}

#[test]
fn byte_level_add_bos_flag_is_honoured() {
    let mut v = tiny_byte_level();
    v.add_bos = Some(true);
    let t = Tokenizer::from_gguf_vocab(v.clone()).unwrap();
    let hi = t.token_to_id("hi").unwrap();
    assert_eq!(t.encode("hi", true).unwrap(), vec![1, hi]);
    assert_eq!(t.encode("hi", false).unwrap(), vec![hi]);
}

#[test]
fn byte_level_round_trips_any_text() {
    let t = Tokenizer::from_gguf_vocab(tiny_byte_level()).unwrap();
    for s in ["héllo 日本語 🎉\n\t", "  two  spaces ", ""] {
        let ids = t.encode(s, false).unwrap();
        assert_eq!(t.decode(&ids, false).unwrap(), s);
    }
}

#[test]
fn spm_derives_merges_and_prepends_space() {
    let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
    let hi = t.token_to_id("▁hi").unwrap();
    let o = t.token_to_id("o").unwrap();
    assert_eq!(t.encode("hi", true).unwrap(), vec![1, hi]);
    assert_eq!(t.encode("hio", false).unwrap(), vec![hi, o]);
    assert_eq!(t.decode(&[1, hi, o], true).unwrap(), "hio");
    // The leading space is stripped from the whole text only, as transformers does.
    assert_eq!(t.decode(&[1, hi, o], false).unwrap(), "<s> hio");
}

#[test]
fn spm_falls_back_to_bytes() {
    let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
    let ids = t.encode("é", false).unwrap();
    let space = t.token_to_id("▁").unwrap();
    assert_eq!(ids, vec![space, 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(t.decode(&ids, false).unwrap(), "é");
}

#[test]
fn spm_without_prefix_space() {
    let mut v = tiny_spm();
    v.add_space_prefix = Some(false);
    v.add_bos = Some(false);
    let t = Tokenizer::from_gguf_vocab(v.clone()).unwrap();
    let h = t.token_to_id("h").unwrap();
    let i = t.token_to_id("i").unwrap();
    assert_eq!(t.encode("hi", true).unwrap(), vec![h, i]);
    assert_eq!(t.decode(&[h, i], false).unwrap(), "hi");
}

#[test]
fn spm_without_scores_or_merges_is_an_error() {
    let mut v = tiny_spm();
    v.scores = None;
    let err = Tokenizer::from_gguf_vocab(v.clone()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.scores"), "{err}");
}

#[test]
fn decode_rejects_unknown_ids() {
    let t = Tokenizer::from_gguf_vocab(tiny_spm()).unwrap();
    let err = t.decode(&[1_000_000], false).unwrap_err();
    assert!(matches!(err, TextError::UnknownTokenId { id: 1_000_000, .. }));
}
