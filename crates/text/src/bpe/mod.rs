//! kvad's own BPE model for byte-level vocabularies (GPT-2's byte alphabet, as GGUF `gpt2` files
//! carry them), a drop-in for `tokenizers`' `BPE` with no unknown token, no dropout and no
//! subword prefix or suffix.
//!
//! Why: building `tokenizers`' BPE from a GGUF's ~49k tokens and ~49k merges was half of a second
//! load (it clones every token string for its reverse map and looks merges up through owned
//! strings). This one keeps the token strings where they arrive, hashes with foldhash, and reads
//! merges as `&str` slices of the file's `"left right"` strings. It encodes exactly as `BPE` does:
//! same ids, same offsets, for every input (tests compare the two on the real SmolLM2 vocabulary).

mod vocab;
mod word;

use std::collections::HashMap as StdHashMap;
use std::path::{Path, PathBuf};

use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::{Model, Token};

use crate::TextError;
use vocab::Vocab;
use word::{merge_word, pair, Merge, MergeMap};

/// The field errors name: the merges come from `tokenizer.ggml.merges`.
const MERGES_FIELD: &str = "tokenizer.ggml.merges";

/// A byte-level BPE model: token strings by id and ranked merges; encodes a pre-tokenized word into
/// tokens exactly as `tokenizers::models::bpe::BPE` built from the same vocabulary and merges.
#[derive(Clone)]
pub struct ByteLevelBpe {
    vocab: Vocab,
    merges: MergeMap,
}

impl std::fmt::Debug for ByteLevelBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLevelBpe").field("vocab", &self.vocab.len()).field("merges", &self.merges.len()).finish()
    }
}

impl ByteLevelBpe {
    /// Builds the model from tokens (id = position; they move in) and merges in rank order, each
    /// `(left, right)`. Every part of a merge and what it makes must be in the vocabulary, as
    /// `BPE` requires; a pair listed twice keeps its later rank, as in `BPE`.
    pub fn new<'a>(
        tokens: Vec<String>,
        merges: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, TextError> {
        let vocab = Vocab::new(tokens);
        let merges = merges.into_iter();
        // Sized once (a filtered slice's upper bound is its length): growing a map of ~50k merges
        // rehashes it ~14 times.
        let (least, most) = merges.size_hint();
        let mut map = MergeMap::with_capacity(most.unwrap_or(least));
        let mut joined = String::new();
        // GPT-2-style vocabularies list merged tokens in merge order, so the token a merge makes is
        // usually the one after the previous merge's: one string compare instead of a lookup.
        let mut guess = 0u32;
        for (rank, (left, right)) in merges.enumerate() {
            let id = |t: &str| {
                vocab.get(t).ok_or_else(|| TextError::InvalidField {
                    field: MERGES_FIELD.into(),
                    value: format!("merge {rank} ({left:?} {right:?}): {t:?} is not in the vocabulary"),
                })
            };
            let (l, r) = (id(left)?, id(right)?);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let new_id = if vocab.spells(guess, &joined) { guess } else { id(&joined)? };
            guess = new_id.wrapping_add(1);
            map.insert(pair(l, r), Merge { rank: rank as u32, new_id });
        }
        Ok(ByteLevelBpe { vocab, merges: map })
    }

    /// Builds the model from a GGUF's tokens and its `"left right"` merge strings (split at the first
    /// space, read in place).
    pub fn from_gguf(tokens: Vec<String>, merges: &[String]) -> Result<Self, TextError> {
        if let Some(bad) = merges.iter().find(|m| !m.contains(' ')) {
            return Err(TextError::InvalidField {
                field: MERGES_FIELD.into(),
                value: format!("{bad:?} has no space between its two parts"),
            });
        }
        Self::new(tokens, merges.iter().filter_map(|m| m.split_once(' ')))
    }

    /// The merges in rank order, as strings (for `save`).
    fn merge_list(&self) -> Vec<(String, String)> {
        let mut ranked: Vec<(&u64, &Merge)> = self.merges.iter().collect();
        ranked.sort_unstable_by_key(|(_, m)| m.rank);
        let spell = |id: u64| self.vocab.token(id as u32).unwrap_or_default().to_string();
        ranked.into_iter().map(|(&k, _)| (spell(k >> 32), spell(k & u64::from(u32::MAX)))).collect()
    }
}

impl Model for ByteLevelBpe {
    type Trainer = BpeTrainer;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        let mut start = 0;
        Ok(merge_word(&self.vocab, &self.merges, sequence)
            .into_iter()
            .map(|s| {
                let end = start + s.len as usize;
                let value = self.vocab.token(s.id).unwrap_or_default().to_string();
                let t = Token::new(s.id, value, (start, end));
                start = end;
                t
            })
            .collect())
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.vocab.token(id).map(str::to_string)
    }

    fn get_vocab(&self) -> StdHashMap<String, u32> {
        self.vocab.entries().map(|(t, id)| (t.to_string(), id)).collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// Writes vocab.json and merges.txt through `BPE` (built once for the purpose).
    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        let vocab: tokenizers::models::bpe::Vocab = self.get_vocab().into_iter().collect();
        BPE::builder().vocab_and_merges(vocab, self.merge_list()).build()?.save(folder, prefix)
    }

    fn get_trainer(&self) -> BpeTrainer {
        BpeTrainer::default()
    }
}

#[cfg(test)]
mod tests;
