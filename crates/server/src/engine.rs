//! The seam between the HTTP side and generation: the [`Engine`] trait.
//!
//! The worker thread owns one `Engine` and calls it for one job at a time. [`crate::local::LocalEngine`] runs real
//! models through `kvad_engine`; [`crate::scripted::ScriptedEngine`] answers from a script (tests: a reply a tiny
//! model cannot produce, such as a tool call, behind exactly the same code path). The scheduler of a later issue
//! replaces the one-at-a-time worker but keeps this contract: a prepared prompt in, token pieces out.

use crate::error::ApiError;
use kvad_engine::{GenerateOptions, SamplingParams};
use serde_json::Value;

/// What the server knows about one model it can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The id clients name it by.
    pub id: String,
    /// It has a chat template.
    pub chat: bool,
    /// Its template renders tools.
    pub tools: bool,
    /// Its template knows `<think>` traces.
    pub reasoning: bool,
    /// It is in memory now.
    pub loaded: bool,
    /// The backend it loads on.
    pub backend: String,
}

/// The prompt of a job, before the model's template.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// Messages (already checked and in template shape) and the tools offered (`None`: none).
    Chat { messages: Vec<Value>, tools: Option<Vec<Value>> },
    /// Plain text for a completion.
    Text(String),
}

/// A prompt ready to run on the loaded model.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Token ids (the scripted engine leaves this empty).
    pub tokens: Vec<u32>,
    /// The rendered prompt text.
    pub text: String,
    /// How many tokens the prompt is.
    pub prompt_tokens: usize,
    /// The model's context length.
    pub context: usize,
    /// The model's vocabulary size (`logit_bias` ids are checked against it).
    pub vocab: usize,
    /// The backend it runs on.
    pub backend: String,
}

/// Sampling and length of one generation.
#[derive(Debug, Clone, Default)]
pub struct GenParams {
    /// Sampling.
    pub sampling: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Logit bias and whatever else the engine takes per request.
    pub options: GenerateOptions,
}

/// A token's log-probability, as text.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely alternatives.
    pub top: Vec<(String, f32)>,
}

/// One generated token: the text it added (may be empty, mid-character) and its log-probability when asked.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Text this token completed.
    pub text: String,
    /// Its log-probability.
    pub logprob: Option<TokenLogprob>,
}

/// How a generation ended, as the engine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFinish {
    /// A stop token, or the caller stopped it.
    Stop,
    /// `max_tokens` or the context's end.
    Length,
}

/// What a generation did.
#[derive(Debug, Clone, Copy)]
pub struct Generated {
    /// Tokens generated (a stop token included).
    pub tokens: usize,
    /// How it ended.
    pub finish: EngineFinish,
}

/// A generation engine. Runs on the worker thread, one call at a time.
pub trait Engine: Send {
    /// The models it can serve, with their capabilities.
    fn catalog(&self) -> Vec<ModelInfo>;

    /// Loads `model` when it is not loaded, renders and tokenizes the prompt.
    fn prepare(&mut self, model: &str, prompt: &Prompt) -> Result<Prepared, ApiError>;

    /// Generates from a prepared prompt. `on_piece` returns false to stop (within one step).
    fn generate(
        &mut self,
        prepared: &Prepared,
        params: &GenParams,
        on_piece: &mut dyn FnMut(Piece) -> bool,
    ) -> Result<Generated, ApiError>;
}

/// Whether a template source knows reasoning traces.
pub fn template_reasons(source: &str) -> bool {
    source.contains("<think>")
}
