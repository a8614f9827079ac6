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
        let byte_level = matches!(inner.get_model(), TextModel::ByteLevel(_))
            || matches!(inner.get_decoder(), Some(DecoderWrapper::ByteLevel(_)));
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

/// The byte a `<0xNN>` token stands for.
fn fallback_byte(s: &str) -> Option<u8> {
    let hex = s.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_covers_every_byte_once() {
        let t = byte_of_char();
        assert_eq!(t.len(), 256);
        assert_eq!((t[&'Ġ'], t[&'Ċ'], t[&'a']), (b' ', b'\n', b'a'));
        assert_eq!(fallback_byte("<0x0A>"), Some(10));
        assert_eq!((fallback_byte("<0x0A"), fallback_byte("<0xZZ>")), (None, None));
    }
}
