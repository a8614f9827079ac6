//! Perplexity of a text: how surprised the model is by each next token, read in chunks through the KV cache.
//!
//! It is the accuracy measure of a quantised backend: the same text, the same tokens, and the exponent of the mean
//! negative log-likelihood, compared with cpu-f32's.

use crate::sampler::log_softmax;
use crate::EngineError;
use kvad_models::{CausalLm, LogitsMode, SeqInput};

/// Perplexity and how many tokens were scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// `exp(mean NLL)`.
    pub ppl: f64,
    /// Mean negative log-likelihood (nats per token).
    pub nll: f64,
    /// Tokens scored (all but the first).
    pub tokens: usize,
}

/// Scores every token of `ids` after the first, reading `chunk` tokens a pass.
pub fn perplexity(model: &dyn CausalLm, ids: &[u32], chunk: usize) -> Result<Perplexity, EngineError> {
    if ids.len() < 2 {
        return Err(EngineError::BadRequest("perplexity needs at least two tokens".into()));
    }
    let ctx = model.config().max_position;
    if ids.len() > ctx {
        return Err(EngineError::BadRequest(format!("the text is {} tokens; the model's context is {ctx}", ids.len())));
    }
    let vocab = model.config().vocab_size;
    let mut kv = model.new_state();
    let mut nll = 0f64;
    let mut pos = 0;
    for piece in ids.chunks(chunk.max(1)) {
        let logits = model.forward(&mut [SeqInput { tokens: piece, state: &mut kv }], LogitsMode::All)?.remove(0);
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            if let Some(&next) = ids.get(pos + i + 1) {
                nll -= log_softmax(row)[next as usize] as f64;
            }
        }
        pos += piece.len();
    }
    let n = ids.len() - 1;
    let mean = nll / n as f64;
    Ok(Perplexity { ppl: mean.exp(), nll: mean, tokens: n })
}
