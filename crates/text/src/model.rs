//! The model inside every [`crate::Tokenizer`]: `tokenizers`' own models, or kvad's byte-level BPE.
//!
//! `tokenizers::TokenizerImpl` is generic over its model, so one enum lets the tokenizer keep a
//! single type whatever it was loaded from: tokenizer.json and SentencePiece GGUFs keep the model
//! `tokenizers` builds, byte-level GGUFs use [`ByteLevelBpe`], which builds in a fraction of the time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::BpeTrainer;
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{Model, Token, TokenizerImpl};

use crate::bpe::ByteLevelBpe;

/// The `tokenizers` pipeline kvad runs: HF's normalizers, pre-tokenizers, post-processors and
/// decoders around a [`TextModel`].
pub type TextTokenizer =
    TokenizerImpl<TextModel, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, DecoderWrapper>;

/// A tokenizer's model: one of `tokenizers`' (as a tokenizer.json names it), or kvad's byte-level BPE
/// for GGUF byte-level vocabularies.
#[derive(Clone, Debug)]
pub enum TextModel {
    /// A model `tokenizers` built (from tokenizer.json, or a SentencePiece GGUF's BPE).
    Hf(ModelWrapper),
    /// kvad's byte-level BPE (a GGUF `gpt2` vocabulary).
    ByteLevel(ByteLevelBpe),
}

impl TextModel {
    /// Whether this is a BPE model (either kind): transformers never cleans up spaces after one.
    pub fn is_bpe(&self) -> bool {
        matches!(self, TextModel::Hf(ModelWrapper::BPE(_)) | TextModel::ByteLevel(_))
    }

    /// Whether the model falls back to `<0xNN>` byte tokens (SentencePiece-style BPE).
    pub fn byte_fallback(&self) -> bool {
        matches!(self, TextModel::Hf(ModelWrapper::BPE(bpe)) if bpe.byte_fallback)
    }
}

/// A tokenizer.json's `"model"` is always one of `tokenizers`' models.
impl<'de> Deserialize<'de> for TextModel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ModelWrapper::deserialize(d).map(TextModel::Hf)
    }
}

impl From<ModelWrapper> for TextModel {
    fn from(m: ModelWrapper) -> Self {
        TextModel::Hf(m)
    }
}

impl From<ByteLevelBpe> for TextModel {
    fn from(m: ByteLevelBpe) -> Self {
        TextModel::ByteLevel(m)
    }
}

/// Every call goes to the model inside.
impl Model for TextModel {
    type Trainer = TrainerWrapper;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        match self {
            TextModel::Hf(m) => m.tokenize(sequence),
            TextModel::ByteLevel(m) => m.tokenize(sequence),
        }
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            TextModel::Hf(m) => m.token_to_id(token),
            TextModel::ByteLevel(m) => m.token_to_id(token),
        }
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        match self {
            TextModel::Hf(m) => m.id_to_token(id),
            TextModel::ByteLevel(m) => m.id_to_token(id),
        }
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        match self {
            TextModel::Hf(m) => m.get_vocab(),
            TextModel::ByteLevel(m) => m.get_vocab(),
        }
    }

    fn get_vocab_size(&self) -> usize {
        match self {
            TextModel::Hf(m) => m.get_vocab_size(),
            TextModel::ByteLevel(m) => m.get_vocab_size(),
        }
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        match self {
            TextModel::Hf(m) => m.save(folder, prefix),
            TextModel::ByteLevel(m) => m.save(folder, prefix),
        }
    }

    fn get_trainer(&self) -> TrainerWrapper {
        match self {
            TextModel::Hf(m) => m.get_trainer(),
            TextModel::ByteLevel(_) => BpeTrainer::default().into(),
        }
    }
}
