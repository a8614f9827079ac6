//! What every forward pass checks first, whatever the architecture or backend: the batch's tokens, positions and
//! state shape against the model's; and what every CPU decoder pass starts and ends with ([`PassIn`]).

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::layers::{final_logits, Embedding, Head, Rope, Spans};
use crate::state::{SeqState, StateSpec};
use crate::{LogitsMode, SeqInput};
use kvad_tensor::cpu::ops;

/// What a decoder pass over a batch works on, made by [`PassIn::begin`] and closed by [`PassIn::finish`]: the
/// rows of every sequence in batch order, their embeddings, their RoPE tables and the sequences' states.
pub(crate) struct PassIn<'a> {
    /// New tokens per sequence.
    pub(crate) counts: Vec<usize>,
    /// Where each sequence's new rows are.
    pub(crate) spans: Spans,
    /// Rows in the pass.
    pub(crate) rows: usize,
    /// The residual stream, `rows × hidden`, starting as the tokens' embeddings.
    pub(crate) x: Vec<f32>,
    /// Each row's RoPE cos and sin.
    pub(crate) tables: Vec<(Vec<f32>, Vec<f32>)>,
    /// Each sequence's state.
    pub(crate) caches: Vec<&'a mut SeqState>,
}

impl<'a> PassIn<'a> {
    /// Checks the batch ([`check_batch`]) and looks up its embeddings and RoPE tables.
    pub(crate) fn begin(
        cfg: &ModelConfig,
        spec: &StateSpec,
        embed: &Embedding,
        rope: &Rope,
        batch: &'a mut [SeqInput<'_>],
    ) -> Result<Self, ModelError> {
        let counts: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let spans = Spans { counts: counts.clone(), starts: batch.iter().map(|s| s.state.len()).collect() };
        let rows = counts.iter().sum();
        let positions = check_batch(cfg, spec, batch)?;
        let mut x = Vec::with_capacity(rows * cfg.hidden);
        for s in batch.iter() {
            embed.lookup(s.tokens, &mut x);
        }
        let tables = positions.iter().map(|&p| rope.table(p)).collect();
        let caches = batch.iter_mut().map(|s| &mut *s.state).collect();
        Ok(PassIn { counts, spans, rows, x, tables, caches })
    }

    /// Counts the new tokens into every state, and returns the logits the mode asks for: the final RMSNorm (`norm`,
    /// the model's epsilon) then the head.
    pub(crate) fn finish(mut self, cfg: &ModelConfig, norm: &[f32], head: Head<'_>, mode: LogitsMode) -> Vec<Vec<f32>> {
        for (state, &n) in self.caches.iter_mut().zip(&self.counts) {
            state.len += n;
        }
        let h = cfg.hidden;
        final_logits(&self.x, h, &self.counts, mode, |rows, n| {
            let mut normed = vec![0f32; n * h];
            ops::rms_norm(rows, norm, cfg.norm_eps, &mut normed);
            head.forward(&normed, n)
        })
    }
}

/// Checks a batch against the config and the state's shape, and returns the position of every new token, in batch order.
pub(crate) fn check_batch(
    cfg: &ModelConfig,
    spec: &StateSpec,
    batch: &[SeqInput<'_>],
) -> Result<Vec<usize>, ModelError> {
    let mut positions = Vec::new();
    for s in batch {
        if !s.state.matches(spec) {
            return Err(ModelError::BadInput(format!(
                "this sequence's state ({} layers) was not made by this model ({} layers); use its new_state",
                s.state.layers.len(),
                spec.layers.len()
            )));
        }
        for (i, &tok) in s.tokens.iter().enumerate() {
            if tok as usize >= cfg.vocab_size {
                return Err(ModelError::BadInput(format!(
                    "token id {tok} is past the vocabulary ({})",
                    cfg.vocab_size
                )));
            }
            let pos = s.state.len() + i;
            if pos >= cfg.max_position {
                return Err(ModelError::BadInput(format!("position {pos} is past the context ({})", cfg.max_position)));
            }
            positions.push(pos);
        }
    }
    Ok(positions)
}
