//! What every forward pass checks first, whatever the architecture or backend: the batch's tokens, positions and
//! state shape against the model's.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::state::StateSpec;
use crate::SeqInput;

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
