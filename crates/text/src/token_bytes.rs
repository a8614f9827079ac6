//! Every token's bytes as the model writes them: what a constraint engine (kvad-engine's grammars) walks to mask
//! the tokens a grammar does not allow next. A vocabulary stores tokens in its own alphabet (GPT-2's byte-to-char
//! table for byte-level BPE, `▁` and `<0xNN>` for SentencePiece), so decoding one token as text would lose the
//! bytes of a character split across tokens.

use crate::model::TextModel;
use crate::Tokenizer;
use tokenizers::decoders::DecoderWrapper;

/// One token's bytes, and whether it is a special token (`<|im_end|>`, `</s>`: never text a grammar matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBytes {
    /// What the token adds to the text (a special token: its spelling).
    pub bytes: Vec<u8>,
    /// A special token.
    pub special: bool,
}

/// GPT-2's byte-level alphabet, inverted: the byte each of its 256 characters stands for.
fn byte_of_char() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            let c = if printable(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\u{FFFD}');
                next += 1;
                c
            };
            (c, b)
        })
        .collect()
}

/// How a vocabulary spells bytes.
enum Alphabet {
    /// GPT-2's byte-to-char table.
    ByteLevel(std::collections::HashMap<char, u8>),
    /// SentencePiece: `▁` for a space, `<0xNN>` byte tokens where the model falls back to bytes.
    Pieces { byte_fallback: bool },
}

impl Tokenizer {
    /// Every token's bytes, indexed by id (ids the vocabulary lacks are empty).
    pub fn token_bytes(&self) -> Vec<TokenBytes> {
        let inner = self.inner();
        // A byte-level vocabulary is named by its pre-tokenizer or its decoder, alone or inside a sequence (newer
        // transformers write SmolLM2's GGUF vocabulary with a decoder sequence that ends in ByteLevel).
        let byte_level = matches!(inner.get_model(), TextModel::ByteLevel(_))
            || matches!(inner.get_decoder(), Some(DecoderWrapper::ByteLevel(_)))
            || inner.get_decoder().is_some_and(|d| names_byte_level(&serde_json::to_value(d).unwrap_or_default()))
            || inner
                .get_pre_tokenizer()
                .is_some_and(|p| names_byte_level(&serde_json::to_value(p).unwrap_or_default()));
        let alphabet = if byte_level {
            Alphabet::ByteLevel(byte_of_char())
        } else {
            Alphabet::Pieces { byte_fallback: inner.get_model().byte_fallback() }
        };
        let added = inner.get_added_tokens_decoder();
        (0..self.vocab_size() as u32)
            .map(|id| {
                let Some(s) = self.id_to_token(id) else { return TokenBytes { bytes: Vec::new(), special: false } };
                if self.is_special(id) {
                    return TokenBytes { bytes: s.into_bytes(), special: true };
                }
                // An added token that is not special is written as it is spelled.
                if added.contains_key(&id) {
                    return TokenBytes { bytes: s.into_bytes(), special: false };
                }
                let bytes = match &alphabet {
                    Alphabet::ByteLevel(table) => s
                        .chars()
                        .map(|c| table.get(&c).copied())
                        .collect::<Option<Vec<u8>>>()
                        .unwrap_or_else(|| s.into_bytes()),
                    Alphabet::Pieces { byte_fallback } => match fallback_byte(&s).filter(|_| *byte_fallback) {
                        Some(b) => vec![b],
                        None => s.replace('▁', " ").into_bytes(),
                    },
                };
                TokenBytes { bytes, special: false }
            })
            .collect()
    }
}

/// Whether a serialised decoder or pre-tokenizer is ByteLevel or a sequence holding one.
fn names_byte_level(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(o) => {
            o.get("type").and_then(|t| t.as_str()) == Some("ByteLevel") || o.values().any(names_byte_level)
        }
        serde_json::Value::Array(a) => a.iter().any(names_byte_level),
        _ => false,
    }
}

/// The byte a `<0xNN>` token stands for.
fn fallback_byte(s: &str) -> Option<u8> {
    let hex = s.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoder newer transformers write for SmolLM2's GGUF vocabulary: ByteFallback, Fuse, Replace and
    /// ByteLevel in a sequence. Its tokens are still GPT-2's alphabet (a grammar masked wrongly when they were read
    /// as SentencePiece pieces).
    #[test]
    fn a_byte_level_decoder_inside_a_sequence_is_byte_level() {
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": {"type": "Sequence", "normalizers": []},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                "vocab": {"a": 0, "Ġ": 1, "Ġa": 2, "\":": 3, "Ċ": 4}, "merges": [["Ġ", "a"]]}
        });
        let dir = std::env::temp_dir().join(format!("kvad-token-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
        let t = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
        let bytes: Vec<Vec<u8>> = t.token_bytes().into_iter().map(|b| b.bytes).collect();
        assert_eq!(bytes, vec![b"a".to_vec(), b" ".to_vec(), b" a".to_vec(), b"\":".to_vec(), b"\n".to_vec()]);
    }

    #[test]
    fn the_byte_level_alphabet_covers_every_byte_once() {
        let t = byte_of_char();
        assert_eq!(t.len(), 256);
        assert_eq!((t[&'Ġ'], t[&'Ċ'], t[&'a']), (b' ', b'\n', b'a'));
        assert_eq!(fallback_byte("<0x0A>"), Some(10));
        assert_eq!((fallback_byte("<0x0A"), fallback_byte("<0xZZ>")), (None, None));
    }
}
