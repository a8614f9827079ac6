//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): GPT-2, SmolLM, Llama 3, Qwen 2 and the like.
//!
//! Tokens are spelled in GPT-2's byte alphabet (every byte mapped to one printable character).
//! The split before BPE depends on `tokenizer.ggml.pre`: names whose merges were learned on the
//! Llama 3 or Qwen 2 split get that regex followed by a regex-free ByteLevel step; everything else
//! (`smollm`, `gpt2`, `default`, ...) gets ByteLevel's own GPT-2 regex.

#[cfg(test)]
use std::collections::HashSet;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::Vocab;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use super::derive_merges;
use crate::model::{TextModel, TextTokenizer};
use crate::{ByteLevelBpe, TextError};

/// Llama 3's split: contractions, letters with one leading non-letter, numbers in threes.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's split: as Llama 3's but numbers one digit at a time.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5's split: Qwen 2's with combining marks kept inside words.
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's tekken split: cased words, single digits.
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o / Llama 4's split: cased words with contractions attached, numbers in threes.
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The split regex for a `tokenizer.ggml.pre` name, or `None` for ByteLevel's GPT-2 regex.
pub(crate) fn split_regex(pre: &str) -> Option<&'static str> {
    Some(match pre {
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" | "dbrx" | "smaug-bpe" => LLAMA3_SPLIT,
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => QWEN2_SPLIT,
        "qwen35" => QWEN35_SPLIT,
        "tekken" => TEKKEN_SPLIT,
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => GPT4O_SPLIT,
        _ => return None,
    })
}

/// GPT-2's byte alphabet: byte `b` is spelled `BYTE_CHARS[b]`. Printable Latin-1 bytes stand for
/// themselves; the rest are shifted past 255 in order.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut shifted = 0u32;
    for (b, slot) in out.iter_mut().enumerate() {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
        let code = if printable {
            b as u32
        } else {
            shifted += 1;
            255 + shifted
        };
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    out
}

/// The set of characters of the byte alphabet (the reference for [`in_alphabet`] in tests).
#[cfg(test)]
pub(crate) fn alphabet() -> HashSet<char> {
    byte_chars().into_iter().collect()
}

/// Whether `c` is one of the byte alphabet's characters (the printable Latin-1 ones, or the 68 shifted past 255):
/// a range test, since a set lookup per character of ~50k tokens was a visible part of a load.
pub(crate) fn in_alphabet(c: char) -> bool {
    matches!(c as u32, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff | 0x100..=0x143)
}

/// Spells `token` in the byte alphabet unless it already is (then it is returned as it came): some converters
/// store tokens as raw text, and the BPE model only ever sees byte-alphabet strings.
fn respell(token: String, chars: &[char; 256]) -> String {
    if token.chars().all(in_alphabet) {
        token
    } else {
        token.bytes().map(|b| chars[b as usize]).collect()
    }
}

/// Builds the byte-level tokenizer (model, pre-tokenizer, decoder; no added tokens yet) from the token list,
/// which moves into the model, and the merges, read in place.
pub(crate) fn build(
    tokens: Vec<String>,
    merges: Option<Vec<String>>,
    pre: Option<&str>,
) -> Result<TextTokenizer, TextError> {
    let chars = byte_chars();
    let keys: Vec<String> = tokens.into_iter().map(|t| respell(t, &chars)).collect();
    let bpe = match merges {
        Some(m) => ByteLevelBpe::from_gguf(keys, &m)?,
        // No merges in the file: recover them from the vocabulary, ranked by token id.
        None => {
            let vocab: Vocab = keys.iter().enumerate().map(|(i, k)| (k.clone(), i as u32)).collect();
            let ranks: Vec<f64> = (0..keys.len()).map(|i| i as f64).collect();
            let merges = derive_merges(&keys, &ranks, &*vocab, false);
            drop(vocab);
            ByteLevelBpe::new(keys, merges.iter().map(|(l, r)| (l.as_str(), r.as_str())))?
        }
    };
    let mut tokenizer = TextTokenizer::new(TextModel::ByteLevel(bpe));
    let pre: PreTokenizerWrapper = match pre.and_then(split_regex) {
        Some(regex) => {
            let split = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| TextError::tokenizers("tokenizer.ggml.pre split regex", e))?;
            Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()]).into()
        }
        None => ByteLevel::new(false, true, true).into(),
    };
    tokenizer.with_pre_tokenizer(Some(pre));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_matches_gpt2() {
        let c = byte_chars();
        assert_eq!(c[b'a' as usize], 'a');
        assert_eq!(c[b' ' as usize], 'Ġ');
        assert_eq!(c[b'\n' as usize], 'Ċ');
        assert_eq!(c[0], 'Ā');
        assert_eq!(alphabet().len(), 256);
    }

    #[test]
    fn raw_tokens_are_respelled() {
        let c = byte_chars();
        assert_eq!(respell(" hi".into(), &c), "Ġhi");
        assert_eq!(respell("Ġhi".into(), &c), "Ġhi");
    }

    #[test]
    fn range_test_is_the_alphabet() {
        let a = alphabet();
        for c in (0..0x400).filter_map(char::from_u32) {
            assert_eq!(in_alphabet(c), a.contains(&c), "{c:?}");
        }
    }

    #[test]
    fn split_names() {
        assert_eq!(split_regex("llama-bpe"), Some(LLAMA3_SPLIT));
        assert_eq!(split_regex("qwen2"), Some(QWEN2_SPLIT));
        assert_eq!(split_regex("smollm"), None);
        assert_eq!(split_regex("default"), None);
    }
}
