//! The tokenizer the engine uses: HF `tokenizers` plus the special-token facts around it.
//!
//! Three ways in: a tokenizer.json (with tokenizer_config.json beside it when present), a whole
//! Hugging Face model directory, or the vocabulary of a GGUF file. All three end in the same
//! `tokenizers` pipeline ([`TextTokenizer`]), so encode and decode behave the same whatever the
//! source; only its model differs (kvad's [`crate::ByteLevelBpe`] for byte-level GGUFs).

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::files::{chat_template_field, read_optional_json, read_optional_text, token_content};
use crate::gguf::{bos_eos_processor, convert, GgufVocab};
use crate::model::TextTokenizer;
use crate::TextError;

/// A loaded tokenizer: encodes text to ids and decodes ids to text exactly as transformers does,
/// and knows the model's BOS/EOS ids and chat template.
#[derive(Clone)]
pub struct Tokenizer {
    inner: TextTokenizer,
    bos: Option<(String, u32)>,
    eos_token: Option<String>,
    eos_ids: Vec<u32>,
    chat_template: Option<String>,
    /// transformers' `clean_up_tokenization_spaces`; it never applies to BPE models.
    clean_up_spaces: bool,
    /// Ids of special added tokens (those `skip_special` drops).
    special_ids: HashSet<u32>,
    /// Whether the model decodes `<0xNN>` tokens as raw bytes (SentencePiece byte fallback).
    byte_fallback: bool,
    /// The longest text one token decodes to, in bytes ([`Tokenizer::fewest_tokens`]), found on first use.
    longest: std::sync::OnceLock<usize>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads a tokenizer.json. A tokenizer_config.json beside it, when present, supplies the BOS
    /// and EOS tokens, `add_bos_token`/`add_eos_token` and the chat template, as transformers
    /// reads them.
    pub fn from_file(path: &Path) -> Result<Self, TextError> {
        let mut inner =
            TextTokenizer::from_file(path).map_err(|e| TextError::tokenizers(path.display().to_string(), e))?;
        let config_path = path.with_file_name("tokenizer_config.json");
        let config = read_optional_json(&config_path)?.unwrap_or(Value::Null);

        let named = |key: &str| -> Option<(String, u32)> {
            let t = token_content(config.get(key))?;
            let id = inner.token_to_id(&t)?;
            Some((t, id))
        };
        let bos = named("bos_token");
        let eos = named("eos_token");
        let eos_token = token_content(config.get("eos_token"));
        let add_bos = config.get("add_bos_token").and_then(Value::as_bool);
        let add_eos = config.get("add_eos_token").and_then(Value::as_bool);
        if add_bos.is_some() || add_eos.is_some() {
            // transformers rebuilds the post-processor when the config states either flag.
            let p = bos_eos_processor(bos.as_ref(), eos.as_ref(), add_bos.unwrap_or(false), add_eos.unwrap_or(false))?;
            inner.with_post_processor(Some(p));
        }
        let clean_up_spaces = config.get("clean_up_tokenization_spaces").and_then(Value::as_bool).unwrap_or(false);
        Ok(Tokenizer {
            bos,
            eos_ids: eos.iter().map(|(_, id)| *id).collect(),
            eos_token,
            chat_template: chat_template_field(&config),
            clean_up_spaces,
            special_ids: special_ids(&inner),
            byte_fallback: byte_fallback(&inner),
            inner,
            longest: std::sync::OnceLock::new(),
        })
    }

    /// Loads the tokenizer of a Hugging Face model directory: tokenizer.json and
    /// tokenizer_config.json, the chat template from chat_template.jinja / chat_template.json
    /// when present, and any extra EOS ids listed in generation_config.json.
    pub fn from_dir(dir: &Path) -> Result<Self, TextError> {
        let mut tok = Self::from_file(&dir.join("tokenizer.json"))?;
        if let Some(src) = read_optional_text(&dir.join("chat_template.jinja"))? {
            tok.chat_template = Some(src);
        } else if let Some(v) = read_optional_json(&dir.join("chat_template.json"))? {
            if let Some(src) = chat_template_field(&v) {
                tok.chat_template = Some(src);
            }
        }
        if let Some(gen) = read_optional_json(&dir.join("generation_config.json"))? {
            let ids: Vec<u32> = match gen.get("eos_token_id") {
                Some(Value::Number(n)) => n.as_u64().into_iter().collect(),
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).collect(),
                _ => Vec::new(),
            }
            .into_iter()
            .filter_map(|id| u32::try_from(id).ok())
            .collect();
            for id in ids {
                if !tok.eos_ids.contains(&id) {
                    tok.eos_ids.push(id);
                }
            }
        }
        Ok(tok)
    }

    /// Builds the tokenizer that a GGUF file's metadata describes (see [`GgufVocab`]).
    pub fn from_gguf_vocab(v: GgufVocab) -> Result<Self, TextError> {
        let chat_template = v.chat_template.clone();
        let c = convert(v)?;
        Ok(Tokenizer {
            special_ids: special_ids(&c.tokenizer),
            byte_fallback: byte_fallback(&c.tokenizer),
            inner: c.tokenizer,
            eos_ids: c.eos.iter().map(|(_, id)| *id).collect(),
            eos_token: c.eos.map(|(t, _)| t),
            bos: c.bos,
            chat_template,
            longest: std::sync::OnceLock::new(),
            clean_up_spaces: false,
        })
    }

    /// Text to ids. `add_special_tokens` adds what the post-processor adds (BOS for most
    /// SentencePiece models); special tokens written in the text always map to their ids.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TextError> {
        let enc = self.inner.encode_fast(text, add_special_tokens).map_err(|e| TextError::tokenizers("encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids to text; `skip_special` drops special tokens such as `<|im_end|>`. An id outside the
    /// vocabulary is an error rather than silently dropped.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TextError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TextError::UnknownTokenId { id, vocab_size });
        }
        let text = self.inner.decode(ids, skip_special).map_err(|e| TextError::tokenizers("decode", e))?;
        Ok(if self.clean_up_spaces && !self.inner.get_model().is_bpe() { clean_up_tokenization(&text) } else { text })
    }

    /// A lower bound on the tokens `bytes` bytes of text encode to, found without encoding them: no token stands
    /// for more text than its own decoding (the longest found once, over the whole vocabulary), and where a
    /// normaliser runs first it may fold up to 4 bytes of input into 1 (NFKC's ligatures and compatibility forms),
    /// so the bound divides by four times that. It lets a server refuse a prompt far past a model's context before
    /// tokenising megabytes.
    pub fn fewest_tokens(&self, bytes: usize) -> usize {
        let longest = *self.longest.get_or_init(|| {
            let n = self.vocab_size() as u32;
            // + 1: a token decoded alone may lose the space it stands for (SentencePiece strips a leading one).
            (0..n).filter_map(|id| self.inner.decode(&[id], false).ok()).map(|t| t.len() + 1).max().unwrap_or(1)
        });
        let fold = if self.inner.get_normalizer().is_some() { 4 } else { 1 };
        bytes / (fold * longest.max(1))
    }

    /// Number of ids, added tokens included: the size the embedding table must cover.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The BOS id, when the model names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos.as_ref().map(|(_, id)| *id)
    }

    /// The BOS token text (for chat templates' `bos_token`).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_ref().map(|(t, _)| t.as_str())
    }

    /// The EOS token text (for chat templates' `eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Every id that ends generation: the tokenizer's EOS and those of generation_config.json.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The chat template source that came with the tokenizer, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The id of a token (vocabulary or added token) spelled exactly `s`.
    pub fn token_to_id(&self, s: &str) -> Option<u32> {
        self.inner.token_to_id(s)
    }

    /// The spelling of token `id` as stored (byte-level tokens in the byte alphabet).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The underlying `tokenizers` pipeline, for what this wrapper does not expose.
    pub fn inner(&self) -> &TextTokenizer {
        &self.inner
    }

    /// Whether `id` is a special token, i.e. one that `decode(.., skip_special = true)` drops.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// Whether `id` is a `<0xNN>` byte token that the decoder turns into a raw byte. A run of
    /// them decodes as a whole (all bytes become U+FFFD if the run is not valid UTF-8), which
    /// the streaming decoder must wait for.
    pub(crate) fn is_fallback_byte(&self, id: u32) -> bool {
        self.byte_fallback
            && self.inner.id_to_token(id).is_some_and(|t| {
                t.len() == 6
                    && t.starts_with("<0x")
                    && t.ends_with('>')
                    && t[3..5].bytes().all(|b| b.is_ascii_hexdigit())
            })
    }
}

/// The ids of the special added tokens.
fn special_ids(inner: &TextTokenizer) -> HashSet<u32> {
    inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect()
}

/// Whether the model falls back to `<0xNN>` byte tokens.
fn byte_fallback(inner: &TextTokenizer) -> bool {
    inner.get_model().byte_fallback()
}

/// transformers' `clean_up_tokenization`: removes the space that WordPiece-era decoders left
/// before punctuation and contractions.
fn clean_up_tokenization(text: &str) -> String {
    [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ]
    .iter()
    .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_up_matches_transformers() {
        assert_eq!(clean_up_tokenization("Hello , world . I 'm here ! don 't"), "Hello, world. I'm here! don 't");
    }
}
