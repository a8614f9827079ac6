//! Turning the tokenizer that a GGUF file's metadata describes into a `tokenizers` pipeline.
//!
//! A GGUF carries no tokenizer.json, only llama.cpp's metadata keys. We rebuild from them the same
//! pipeline that transformers builds when it loads the file, so both encode and decode alike:
//! byte-level BPE for `gpt2` vocabularies ([`byte_level`]) and SentencePiece-style BPE with byte
//! fallback for `llama` vocabularies ([`spm`]).

mod byte_level;
mod merges;
mod spm;

use std::collections::HashSet;

use tokenizers::processors::template::TemplateProcessing;
use tokenizers::AddedToken;

use crate::model::TextTokenizer;
use crate::TextError;

pub(crate) use merges::derive_merges;

/// Everything a GGUF file's metadata says about its tokenizer, as plain data.
///
/// The GGUF reader (another crate) fills this; this crate never parses GGUF itself, so the
/// tokenizer code stays testable without model files. Field comments give the metadata key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre` (e.g. `"smollm"`, `"llama-bpe"`, `"qwen2"`, `"default"`): picks the
    /// pre-tokenizer split of byte-level vocabularies.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by token id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`: SentencePiece piece scores; merges are derived from them when the
    /// file has none.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user_defined, 5 unused,
    /// 6 byte).
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`, each `"left right"`.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`. Absent means true for `llama` vocabularies (llama.cpp and
    /// transformers both add BOS then) and false otherwise.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`; absent means false.
    pub add_eos: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    /// `tokenizer.ggml.add_space_prefix`: whether SentencePiece text gets a leading `▁` (and decode
    /// strips one leading space). Absent means true. Byte-level vocabularies ignore it.
    pub add_space_prefix: Option<bool>,
    /// `general.architecture` (e.g. `"llama"`, `"phi3"`): a few SentencePiece models need a
    /// different prefix-space rule, and only the architecture says so.
    pub architecture: Option<String>,
}

/// Token type values of `tokenizer.ggml.token_type` that change how a token is added.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// A converted tokenizer plus the special-token facts the wrapper keeps.
pub(crate) struct Converted {
    pub tokenizer: TextTokenizer,
    pub bos: Option<(String, u32)>,
    pub eos: Option<(String, u32)>,
}

/// Converts the vocabulary, mirroring what transformers does when it loads the same GGUF. Takes the vocabulary
/// by value: a byte-level list's ~50k token strings move into the BPE map and its merges are split in place,
/// rather than copied (allocation was most of a load mapped from the quantised cache).
pub(crate) fn convert(mut v: GgufVocab) -> Result<Converted, TextError> {
    validate(&v)?;
    let marked = Marked::of(&v);
    let (mut tokenizer, byte_level, default_add_bos) = match v.model.as_str() {
        "gpt2" => {
            let (tokens, merges) = (std::mem::take(&mut v.tokens), v.merges.take());
            (byte_level::build(tokens, merges, v.pre.as_deref())?, true, false)
        }
        "llama" => (spm::build(&v)?, false, true),
        other => {
            return Err(TextError::InvalidField {
                field: "tokenizer.ggml.model".into(),
                value: format!("{other:?} (supported: \"gpt2\", \"llama\")"),
            })
        }
    };
    add_marked_tokens(&mut tokenizer, &marked, byte_level)?;
    let (bos, eos) = (marked.named[0].clone(), marked.named[1].clone());
    let add_bos = v.add_bos.unwrap_or(default_add_bos) && bos.is_some();
    let add_eos = v.add_eos.unwrap_or(false) && eos.is_some();
    let processor = bos_eos_processor(bos.as_ref(), eos.as_ref(), add_bos, add_eos)?;
    tokenizer.with_post_processor(Some(processor));
    Ok(Converted { tokenizer, bos, eos })
}

/// The few tokens that are added by text (control, user-defined, and the named bos/eos/unk/pad), copied out
/// before the token list moves into the BPE model.
struct Marked {
    /// Control tokens, in id order.
    control: Vec<String>,
    /// User-defined tokens, in id order.
    user: Vec<String>,
    /// bos, eos, unk, pad with their ids.
    named: [Option<(String, u32)>; 4],
}

impl Marked {
    fn of(v: &GgufVocab) -> Self {
        let types = v.token_types.as_deref().unwrap_or(&[]);
        let of_type = |ty: i32| -> Vec<String> {
            v.tokens.iter().zip(types).filter(|(_, &t)| t == ty).map(|(t, _)| t.clone()).collect()
        };
        let named = [v.bos, v.eos, v.unk, v.pad].map(|id| id.map(|id| (v.tokens[id as usize].clone(), id)));
        Marked { control: of_type(TOKEN_TYPE_CONTROL), user: of_type(TOKEN_TYPE_USER_DEFINED), named }
    }
}

/// Rejects ids and array lengths that do not fit the token list.
fn validate(v: &GgufVocab) -> Result<(), TextError> {
    if v.tokens.is_empty() {
        return Err(TextError::MissingField { field: "tokenizer.ggml.tokens".into() });
    }
    let n = v.tokens.len();
    for (field, id) in [
        ("tokenizer.ggml.bos_token_id", v.bos),
        ("tokenizer.ggml.eos_token_id", v.eos),
        ("tokenizer.ggml.unknown_token_id", v.unk),
        ("tokenizer.ggml.padding_token_id", v.pad),
    ] {
        if let Some(id) = id {
            if id as usize >= n {
                return Err(TextError::InvalidField {
                    field: field.into(),
                    value: format!("{id} (the vocabulary has {n} tokens)"),
                });
            }
        }
    }
    if let Some(types) = &v.token_types {
        if types.len() != n {
            return Err(TextError::InvalidField {
                field: "tokenizer.ggml.token_type".into(),
                value: format!("{} entries for {n} tokens", types.len()),
            });
        }
    }
    if let Some(scores) = &v.scores {
        if scores.len() != n {
            return Err(TextError::InvalidField {
                field: "tokenizer.ggml.scores".into(),
                value: format!("{} entries for {n} tokens", scores.len()),
            });
        }
    }
    Ok(())
}

/// Splits the file's merges (`"left right"`), the form tokenizers' BPE wants; the left part keeps the
/// string's own allocation.
fn file_merges(merges: Vec<String>) -> Result<Vec<(String, String)>, TextError> {
    merges
        .into_iter()
        .map(|mut m| match m.find(' ') {
            Some(i) => {
                let right = m[i + 1..].to_string();
                m.truncate(i);
                Ok((m, right))
            }
            None => Err(TextError::InvalidField {
                field: "tokenizer.ggml.merges".into(),
                value: format!("{m:?} has no space between its two parts"),
            }),
        })
        .collect()
}

/// Adds control tokens as special tokens and user-defined ones as plain added tokens, so that
/// text such as `<|im_start|>` maps to its one id instead of being cut into pieces; then the
/// named special tokens (bos, eos, unk, pad) that are not added yet.
///
/// In a byte-level vocabulary a control token spelled outside the byte alphabet is a llama.cpp
/// mislabel and is skipped, as transformers does.
fn add_marked_tokens(tokenizer: &mut TextTokenizer, m: &Marked, byte_level: bool) -> Result<(), TextError> {
    let in_alphabet = |t: &str| !byte_level || t.chars().all(byte_level::in_alphabet);
    let mut added: HashSet<&str> = HashSet::new();

    let control: Vec<AddedToken> = m
        .control
        .iter()
        .filter(|t| in_alphabet(t))
        .map(|t| {
            added.insert(t);
            AddedToken::from(t.clone(), true).normalized(false)
        })
        .collect();
    tokenizer
        .add_special_tokens(control)
        .map_err(|e| TextError::tokenizers("control tokens of tokenizer.ggml.token_type", e))?;

    // Looked up one by one, not through `get_vocab`, which copies the whole vocabulary.
    let user: Vec<AddedToken> = m
        .user
        .iter()
        .filter(|t| tokenizer.token_to_id(t).is_some())
        .map(|t| {
            added.insert(t);
            AddedToken::from(t.clone(), false).normalized(false)
        })
        .collect();
    tokenizer
        .add_tokens(user)
        .map_err(|e| TextError::tokenizers("user-defined tokens of tokenizer.ggml.token_type", e))?;

    let mut named = Vec::new();
    for (t, _) in m.named.iter().flatten() {
        if added.insert(t) {
            named.push(AddedToken::from(t.clone(), true));
        }
    }
    tokenizer.add_tokens(named).map_err(|e| TextError::tokenizers("bos/eos/unk/pad tokens", e))?;
    Ok(())
}

/// The post-processor transformers installs for `add_bos_token` / `add_eos_token`.
pub(crate) fn bos_eos_processor(
    bos: Option<&(String, u32)>,
    eos: Option<&(String, u32)>,
    add_bos: bool,
    add_eos: bool,
) -> Result<TemplateProcessing, TextError> {
    let bos = bos.filter(|_| add_bos);
    let eos = eos.filter(|_| add_eos);
    let mut single = String::new();
    let mut pair = String::new();
    if let Some((b, _)) = bos {
        single.push_str(&format!("{b}:0 "));
    }
    single.push_str("$A:0");
    if let Some((e, _)) = eos {
        single.push_str(&format!(" {e}:0"));
    }
    pair.push_str(&single);
    if let Some((b, _)) = bos {
        pair.push_str(&format!(" {b}:1"));
    }
    pair.push_str(" $B:1");
    if let Some((e, _)) = eos {
        pair.push_str(&format!(" {e}:1"));
    }
    let specials: Vec<(String, u32)> = bos.into_iter().chain(eos).cloned().collect();
    TemplateProcessing::builder()
        .try_single(single)
        .and_then(|b| b.try_pair(pair))
        .map_err(|e| TextError::tokenizers("bos/eos template", e))?
        .special_tokens(specials)
        .build()
        .map_err(|e| TextError::tokenizers("bos/eos template", e))
}

#[cfg(test)]
pub(crate) mod tests;
