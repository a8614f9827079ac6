//! SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`): Llama 2, Mistral, TinyLlama...
//!
//! Rebuilt as BPE with byte fallback over the file's tokens: merges from the file, or derived from
//! the scores. Spaces become `▁` through a Metaspace pre-tokenizer that prepends `▁` to the first
//! piece only, and decoding turns `▁` back into spaces and drops the one leading space that the
//! prefix added. Phi-3 files instead prepend through a normalizer (it shows on text that starts
//! with spaces), as transformers does for that architecture.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::models::ModelWrapper;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};

use super::{derive_merges, file_merges, GgufVocab};
use crate::model::{TextModel, TextTokenizer};
use crate::TextError;

/// SentencePiece's visible space.
const SPACE: char = '▁';

/// Builds the SentencePiece-style tokenizer (model, pre-tokenizer or normalizer, decoder).
pub(crate) fn build(v: &GgufVocab) -> Result<TextTokenizer, TextError> {
    let vocab: Vocab = v.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let merges = match (&v.merges, &v.scores) {
        (Some(m), _) => file_merges(m.clone())?,
        (None, Some(scores)) => {
            let scores: Vec<f64> = scores.iter().map(|&s| f64::from(s)).collect();
            derive_merges(&v.tokens, &scores, &*vocab, true)
        }
        (None, None) => {
            return Err(TextError::MissingField {
                field: "tokenizer.ggml.scores (needed to derive merges; the file has no tokenizer.ggml.merges)".into(),
            })
        }
    };
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(|e| TextError::tokenizers("SentencePiece BPE from tokenizer.ggml.tokens", e))?;
    let mut tokenizer = TextTokenizer::new(TextModel::Hf(ModelWrapper::BPE(bpe)));

    let add_prefix_space = v.add_space_prefix.unwrap_or(true);
    if v.architecture.as_deref() == Some("phi3") {
        let space = SPACE.to_string();
        let normalizer = NormalizerSequence::new(vec![
            Prepend::new(space.clone()).into(),
            Replace::new(" ", space).map_err(|e| TextError::tokenizers("phi3 normalizer", e))?.into(),
        ]);
        tokenizer.with_normalizer(Some(normalizer)).map_err(|e| TextError::tokenizers("phi3 normalizer", e))?;
    } else {
        let scheme = if add_prefix_space { PrependScheme::First } else { PrependScheme::Never };
        tokenizer.with_pre_tokenizer(Some(Metaspace::new(SPACE, scheme, false)));
    }

    let mut steps: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE.to_string(), " ").map_err(|e| TextError::tokenizers("SentencePiece decoder", e))?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_prefix_space {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(steps)));
    Ok(tokenizer)
}
