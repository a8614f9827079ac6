//! Every token's bytes ([`Tokenizer::token_bytes`], what the grammar engine walks): a text's tokens, their bytes
//! concatenated, give the text back byte for byte — for a byte-level BPE from tokenizer.json and from GGUF, and a
//! SentencePiece vocabulary with byte fallback — and the special tokens are marked.

mod common;

use common::gguf_meta::vocab_from_gguf;
use common::{fixture, smollm2_gguf};
use kvad_text::Tokenizer;

const TEXTS: &[&str] = &[
    "Hello, world!",
    "{\"city\": \"Oslo\", \"temp\": -3.5}\n",
    "naïve café — 東京 😀 ✓",
    "  two  spaces\tand a tab\r\n",
    "ünïcødé at the start, Ωmega at the end Ω",
];

fn check(tok: &Tokenizer, what: &str, leading_space: bool) {
    let bytes = tok.token_bytes();
    assert_eq!(bytes.len(), tok.vocab_size(), "{what}: one entry a token");
    for text in TEXTS {
        let ids = tok.encode(text, false).unwrap();
        let mut got: Vec<u8> = ids.iter().flat_map(|&i| bytes[i as usize].bytes.clone()).collect();
        // SentencePiece writes a space before the first word; its decoder drops it.
        if leading_space && got.first() == Some(&b' ') && !text.starts_with(' ') {
            got.remove(0);
        }
        assert_eq!(String::from_utf8_lossy(&got), *text, "{what}: {ids:?}");
        assert!(ids.iter().all(|&i| !bytes[i as usize].special), "{what}: text is never special tokens");
    }
    for id in tok.eos_ids() {
        assert!(bytes[*id as usize].special, "{what}: the end token {id} is special");
    }
}

#[test]
fn a_texts_token_bytes_give_the_text_back() {
    let json = Tokenizer::from_file(&fixture("fixtures/tokenizers/smollm2/tokenizer.json")).unwrap();
    check(&json, "smollm2 tokenizer.json", false);
    let gguf = Tokenizer::from_gguf_vocab(vocab_from_gguf(&smollm2_gguf()).unwrap()).unwrap();
    check(&gguf, "smollm2 GGUF", false);
    let spm = Tokenizer::from_gguf_vocab(vocab_from_gguf(&fixture("fixtures/tokenizers/spm/tokenizer.gguf")).unwrap())
        .unwrap();
    check(&spm, "SentencePiece GGUF", true);
}
