//! Perplexity of a text: how surprised the model is by each next token, every row's logits read in batched passes.
//!
//! It is the accuracy measure of a quantised backend (the same text, the same tokens, and the exponent of the mean
//! negative log-likelihood, compared with cpu-f32's), and the perplexity job's measure of a trained model. A text
//! longer than a window is read as consecutive windows, each from an empty cache (the first token of each is not
//! scored): transformers' fixed-length evaluation with the stride equal to the window.

use crate::passes::{check_inputs, read_in_passes, Room, Rows};
use crate::EngineError;
use kvad_models::{CausalLm, LogitsMode};

/// Perplexity and how many tokens were scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// `exp(mean NLL)`.
    pub ppl: f64,
    /// Mean negative log-likelihood (nats per token).
    pub nll: f64,
    /// Tokens scored (all but the first of each window).
    pub tokens: usize,
}

impl Perplexity {
    /// The perplexity of several inputs' scores together (their tokens pooled, not their perplexities averaged).
    pub fn of(scores: &[Nll]) -> Perplexity {
        let tokens: usize = scores.iter().map(|s| s.tokens).sum();
        let sum: f64 = scores.iter().map(|s| s.sum).sum();
        let nll = if tokens == 0 { 0.0 } else { sum / tokens as f64 };
        Perplexity { ppl: nll.exp(), nll, tokens }
    }
}

/// One input's summed negative log-likelihood of each token given those before it (all but its first).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Nll {
    /// The sum, in nats.
    pub sum: f64,
    /// Tokens scored.
    pub tokens: usize,
}

/// Cuts a text's tokens into consecutive windows of at most `window` tokens; a last piece of one token (which
/// would score nothing) is dropped.
pub fn windows(ids: &[u32], window: usize) -> Vec<Vec<u32>> {
    ids.chunks(window.max(2)).filter(|w| w.len() > 1).map(<[u32]>::to_vec).collect()
}

/// Scores every input (each within the model's context and the room; checked first, refused naming `input[i]`)
/// in batched passes of up to `room.rows` rows: one [`Nll`] per input.
pub fn score_inputs(model: &dyn CausalLm, inputs: &[Vec<u32>], room: Room) -> Result<Vec<Nll>, EngineError> {
    check_inputs(model, inputs, room, "score")?;
    let vocab = model.config().vocab_size;
    let mut out = vec![Nll::default(); inputs.len()];
    read_in_passes(model, inputs, room, (Rows::Logits, LogitsMode::All), |i, start, rows, _| {
        for (j, row) in rows.chunks_exact(vocab).enumerate() {
            if let Some(&next) = inputs[i].get(start + j + 1) {
                out[i].sum += nll(row, next);
                out[i].tokens += 1;
            }
        }
    })?;
    Ok(out)
}

/// `-log softmax(row)[target]`, in f64 (a long text's sum must not lose the small terms).
fn nll(row: &[f32], target: u32) -> f64 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - row[target as usize] as f64
}

/// Scores every token of `ids` after the first, reading `chunk` tokens a pass (`kvad ppl`).
pub fn perplexity(model: &dyn CausalLm, ids: &[u32], chunk: usize) -> Result<Perplexity, EngineError> {
    if ids.len() < 2 {
        return Err(EngineError::BadRequest("perplexity needs at least two tokens".into()));
    }
    let ctx = model.config().max_position;
    if ids.len() > ctx {
        return Err(EngineError::BadRequest(format!("the text is {} tokens; the model's context is {ctx}", ids.len())));
    }
    let room = Room { rows: chunk.max(1), tokens: usize::MAX, page: 1, sequences: 1 };
    Ok(Perplexity::of(&score_inputs(model, &[ids.to_vec()], room)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_is_the_log_softmax_of_the_target() {
        let row = [1.0f32, 2.0, 3.0];
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        assert!((nll(&row, 0) - (z.ln() - 1.0)).abs() < 1e-12);
        // Large logits do not overflow.
        assert!((nll(&[1000.0, 1000.0], 1) - 2f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn windows_cover_the_text_and_drop_a_lone_last_token() {
        let ids: Vec<u32> = (0..9).collect();
        assert_eq!(windows(&ids, 4), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(windows(&ids, 3).len(), 3);
        assert_eq!(windows(&ids[..1], 4), Vec::<Vec<u32>>::new());
    }

    #[test]
    fn perplexity_pools_tokens_not_ratios() {
        let p = Perplexity::of(&[Nll { sum: 3.0, tokens: 1 }, Nll { sum: 3.0, tokens: 3 }]);
        assert_eq!(p.tokens, 4);
        assert!((p.nll - 1.5).abs() < 1e-12 && (p.ppl - 1.5f64.exp()).abs() < 1e-12);
    }
}
