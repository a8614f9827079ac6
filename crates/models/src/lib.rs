//! kvad-models: from files on disk to a stateless model that turns token ids into logits.
//!
//! Weight sources (safetensors, GGUF) are loaders, not pipelines: both end in the same typed [`ModelConfig`] and
//! the same architecture code, so a GGUF and a safetensors checkpoint of one model run the same arithmetic. A
//! sequence's per-layer state lives outside the model ([`SeqState`]); one forward pass takes several sequences of
//! different lengths.

pub mod arch;
mod batch;
pub mod config;
pub mod error;
mod files;
pub mod gpu;
pub mod layers;
pub mod load;
pub mod moe;
pub mod qcache;
pub mod state;
mod tensors;
pub mod weights;

pub use arch::registry::{arch_of_model_type, config_from_gguf, config_from_hf, param_count};
pub use config::{ArchKind, ModelConfig, RopeScaling};
pub use error::ModelError;
pub use load::{load_model, load_model_with, read_config, CacheUse, LoadOptions, LoadedModel, ModelFiles};
pub use state::{KvDtype, LayerSpec, SeqState, StateSpec, SNAPSHOT_SPACING};

/// Which rows of a forward pass need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsMode {
    /// None: a prompt chunk being read into the cache.
    None,
    /// The last new token of each sequence: generation.
    Last,
    /// Every new token: scoring, perplexity, tests against the reference.
    All,
}

/// What a model's sequences can hold at once where that is fixed when it loads (a GPU's page pool and recurrent
/// slots, allocated once): the server admits replies against it, so an admitted reply always finds room to finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateRoom {
    /// Tokens of per-token state (keys and values, latents) the pool holds in all.
    pub tokens: usize,
    /// Tokens one page holds: a sequence holds whole pages.
    pub page: usize,
    /// Sequences that can hold state at once (a recurrent layer's slots; `usize::MAX` where nothing but tokens
    /// bounds them).
    pub sequences: usize,
}

/// One sequence's part of a batched forward pass: its new tokens and its state, which the pass extends.
/// The new tokens' positions follow on from what the state already holds.
pub struct SeqInput<'a> {
    /// Token ids to run.
    pub tokens: &'a [u32],
    /// This sequence's per-layer state.
    pub state: &'a mut SeqState,
}

/// A causal language model: stateless, so one loaded model serves any number of conversations.
pub trait CausalLm: Send + Sync {
    /// The typed config the model was built from.
    fn config(&self) -> &ModelConfig;
    /// What a sequence's state is made of, layer by layer: what memory admission charges a context for.
    fn state_spec(&self) -> &StateSpec;
    /// An empty state for a new sequence (on a GPU, its layers' pages in the model's pool).
    fn new_state(&self) -> SeqState {
        SeqState::new(self.state_spec())
    }
    /// Runs the new tokens of every sequence and returns, per sequence, the logits the mode asks for
    /// (`rows × vocab`, flattened).
    fn forward(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError>;
    /// Runs the new tokens of every sequence like [`CausalLm::forward`] and returns, per sequence, the rows `rows`
    /// picks as they reach the head: final-normed hidden states (`rows × hidden`, flattened). What an embedding
    /// model pools; a checkpoint with no head of its own (an embedding model's) answers only this.
    fn forward_hidden(&self, batch: &mut [SeqInput<'_>], rows: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError>;
    /// Whether the model writes logits: false for a checkpoint with no head ([`layers::headless`], an embedding
    /// model's), which only [`CausalLm::forward_hidden`] runs; the engine refuses its generations up front.
    fn generates(&self) -> bool {
        true
    }
    /// Bytes of weights held (mapped or owned), for memory accounting.
    fn weight_bytes(&self) -> usize;
    /// The state room fixed at load (a GPU's pages and slots); None where a sequence's state grows in host memory,
    /// bounded only by the context the model was charged for.
    fn state_room(&self) -> Option<StateRoom> {
        None
    }
    /// Prompt tokens worth reading in one pass: the CPU keeps a pass's activations in cache (256); a GPU fills
    /// its tensor cores and reads (or dequantises) every weight once per pass, so it takes far more.
    fn prefill_chunk(&self) -> usize {
        256
    }
    /// The greedy next token of each sequence (argmax of its last row's logits, the first on ties). A GPU model
    /// picks it on the device and copies back only the ids.
    fn forward_greedy(&self, batch: &mut [SeqInput<'_>]) -> Result<Vec<u32>, ModelError> {
        let logits = self.forward(batch, LogitsMode::Last)?;
        Ok(logits.iter().map(|l| first_argmax(l)).collect())
    }
    /// Greedy steps worth running ahead of the caller's stop checks ([`CausalLm::forward_greedy_steps`]): 1 for a
    /// model whose steps gain nothing from it (each step past a stop is wasted work); a GPU model saves the host's
    /// wait between steps.
    fn greedy_ahead(&self) -> usize {
        1
    }
    /// `steps` greedy steps of one sequence from its new `tokens`: each pick fed back as the next step's token,
    /// the picks returned in order and the state `steps` tokens further (its picks but the last). A GPU model
    /// runs them back to back on the device; the answer is the same as `steps` calls of
    /// [`CausalLm::forward_greedy`].
    fn forward_greedy_steps(&self, seq: SeqInput<'_>, steps: usize) -> Result<Vec<u32>, ModelError> {
        greedy_one_by_one(self, seq, steps)
    }
}

/// [`CausalLm::forward_greedy_steps`] a step at a time through [`CausalLm::forward_greedy`].
pub fn greedy_one_by_one<M: CausalLm + ?Sized>(m: &M, seq: SeqInput<'_>, steps: usize) -> Result<Vec<u32>, ModelError> {
    let SeqInput { tokens, state } = seq;
    let mut picks: Vec<u32> = Vec::with_capacity(steps);
    for i in 0..steps {
        let fed = if i == 0 { tokens } else { &picks[i - 1..i] };
        let id = m.forward_greedy(&mut [SeqInput { tokens: fed, state: &mut *state }])?;
        let id = *id.first().ok_or_else(|| ModelError::BadInput("no greedy pick for the sequence".into()))?;
        picks.push(id);
    }
    Ok(picks)
}

/// Index of the first maximum.
pub fn first_argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}
