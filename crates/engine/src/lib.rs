//! kvad-engine: sequences, sampling and the generation loop over a stateless model.
//!
//! It owns everything stateful about a generation (the KV cache, the sampler's generator, the ids so far) so the
//! model stays a pure function of its inputs. The scheduler (queue, fairness, batching) lives in `kvad-server`'s
//! `sched`, which drives batched forward passes itself.

pub mod bench;
pub mod checks;
pub mod generate;
pub mod open;
pub mod perplexity;
pub mod sampler;
pub mod system;

pub use generate::{generate, generate_with, FinishReason, GenStats, GenerateOptions, GenerateRequest};
pub use open::{open_model, ModelKind, OpenedModel};
pub use sampler::{Sampled, Sampler, SamplingError, SamplingParams};

/// Plain greedy tokens are picked by the model (`forward_greedy`) unless `KVAD_DEVICE_GREEDY=0`, which hands
/// every step's logits row to the CPU sampler instead (for measuring what device-side picks bring).
fn device_greedy_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KVAD_DEVICE_GREEDY").map_or(true, |v| v != "0"))
}

/// Whether a reply's tokens are the model's own greedy picks (`forward_greedy`: on a GPU only the ids cross back):
/// plain greedy sampling, no logit bias, and not switched off by `KVAD_DEVICE_GREEDY=0`. One-stream generation
/// and the server's scheduler both ask this.
pub fn device_picks(params: &SamplingParams, opts: &GenerateOptions) -> bool {
    device_greedy_enabled() && params.plain_greedy() && opts.logit_bias.is_empty()
}

/// The model's greedy pick for each sequence of the pass, checked against its vocabulary (a GPU's ids come back
/// from device memory: a bad one is an error here, not an index out of range later).
pub fn greedy_picks(
    model: &dyn kvad_models::CausalLm,
    batch: &mut [kvad_models::SeqInput<'_>],
) -> Result<Vec<u32>, EngineError> {
    let vocab = model.config().vocab_size;
    let n = batch.len();
    let ids = model.forward_greedy(batch)?;
    checked_picks(vocab, ids, n)
}

/// Greedy steps a lone greedy reply runs ahead of its stop checks, in one-stream generation and in the server's
/// scheduler: the model's own count ([`kvad_models::CausalLm::greedy_ahead`]: 8 on a GPU, where it saves the
/// host's wait a step; 1 on the CPU), unless `KVAD_GREEDY_AHEAD=n` says otherwise — on the CPU that runs the steps
/// one by one through the same bookkeeping, so the tests reach it without a GPU.
pub fn greedy_ahead(model: &dyn kvad_models::CausalLm) -> usize {
    static SET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let set = *SET.get_or_init(|| std::env::var("KVAD_GREEDY_AHEAD").ok().and_then(|v| v.parse().ok()));
    set.unwrap_or_else(|| model.greedy_ahead()).max(1)
}

/// `k` greedy steps of one sequence from its new `tokens` ([`kvad_models::CausalLm::forward_greedy_steps`]): the
/// picks in order, each checked against the vocabulary; the cache `k` tokens further.
pub fn greedy_steps(
    model: &dyn kvad_models::CausalLm,
    seq: kvad_models::SeqInput<'_>,
    k: usize,
) -> Result<Vec<u32>, EngineError> {
    let picks = model.forward_greedy_steps(seq, k)?;
    checked_picks(model.config().vocab_size, picks, k)
}

/// `n` greedy picks of a model, each checked against its vocabulary (a GPU's ids come back from device memory).
pub(crate) fn checked_picks(vocab: usize, ids: Vec<u32>, n: usize) -> Result<Vec<u32>, EngineError> {
    match ids.iter().find(|&&i| i as usize >= vocab) {
        None if ids.len() == n => Ok(ids),
        bad => Err(EngineError::Model(kvad_models::ModelError::BadInput(format!(
            "the model's greedy pick was {bad:?} (of {} for {n} sequences or steps) for a vocabulary of {vocab}",
            ids.len()
        )))),
    }
}

/// Why a generation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model refused or failed.
    #[error(transparent)]
    Model(#[from] kvad_models::ModelError),
    /// The tokenizer or template failed.
    #[error(transparent)]
    Text(#[from] kvad_text::TextError),
    /// A sampling parameter is out of range.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// The request itself cannot run (an empty prompt, a prompt longer than the context).
    #[error("{0}")]
    BadRequest(String),
}
