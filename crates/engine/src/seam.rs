//! The seam between whoever schedules work (the server's scheduler, the CLI's one request) and generation: the
//! [`Engine`] trait and the plain data that crosses it.
//!
//! The caller owns one `Engine` and drives it a pass at a time ([`Engine::step`]): several sequences, each reading a
//! chunk of its prompt or writing a token ([`Part`]). [`crate::local::LocalEngine`] runs real models through
//! `kvad_models`' batched forward pass; the server's scripted engine answers from a script (tests: a reply a tiny
//! model cannot produce, such as a tool call, behind exactly the same code path).

use crate::EngineError;
use crate::{GenerateOptions, SamplingParams};
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
    /// The backend it is on while in memory, else the one it would load on (`default_backend`): what
    /// `/v1/models` shows, so a client sees where a model it is about to use runs.
    pub backend: String,
    /// The backend a load that names none uses (`[server] backend`; `scripted` for the scripted engine): the web
    /// UI's picker marks it, and `/api/settings` reports it whatever the models are on.
    pub default_backend: String,
}

/// The prompt of a job, before the model's template.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// Messages (already checked and in template shape) and the tools offered (`None`: none).
    Chat {
        /// The messages, each `{role, content, ...}` as the template reads them.
        messages: Vec<Value>,
        /// The tools offered, as the template renders them.
        tools: Option<Vec<Value>>,
        /// Further template variables, as `apply_chat_template`'s keyword arguments (`enable_thinking`: Anthropic's
        /// `thinking`, vLLM's `chat_template_kwargs`).
        vars: serde_json::Map<String, Value>,
    },
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
    /// The model's id.
    pub model: String,
    /// Whether this prepare brought the model into memory (a request naming a model on disk): the scheduler
    /// records it as active, as it does a `kvad load`, so `[server] autoload` puts it back.
    pub loaded: bool,
    /// The tool-call format the model's template teaches (what the reply parser reads).
    pub tool_format: kvad_text::stream::ToolFormat,
}

/// One input of an embeddings request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbedInput {
    /// Text, tokenized as a plain prompt is (the tokenizer's special tokens added: Qwen3-Embedding's appended
    /// `<|endoftext|>`, a BOS), which is what the model was trained to pool.
    Text(String),
    /// Token ids, taken as given.
    Tokens(Vec<u32>),
}

/// What an embeddings request gets back.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    /// One vector per input, in order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens read in all (the request's usage).
    pub tokens: usize,
    /// The backend it ran on.
    pub backend: String,
    /// Whether asking brought the model into memory (recorded as a load, as [`Prepared::loaded`] is).
    pub loaded: bool,
}

/// What scoring texts gets back: each text's negative log-likelihood, its windows' summed.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// One per input, in order.
    pub scores: Vec<crate::perplexity::Nll>,
    /// Tokens read in all.
    pub tokens: usize,
    /// The backend it ran on.
    pub backend: String,
    /// Whether asking brought the model into memory.
    pub loaded: bool,
}

/// Renders and tokenizes prompts for one model in memory, on whatever thread calls it: what it holds (the
/// tokenizer, the template, the context) is shared and read-only.
pub trait Reader: Send + Sync {
    /// The prompt as the model will read it (`loaded` false: [`ReaderFor::loaded`] says that).
    fn read(&self, prompt: &Prompt) -> Result<Prepared, EngineError>;
}

/// What [`Engine::reader`] hands back.
#[derive(Clone)]
pub struct ReaderFor {
    /// Reads the model's prompts.
    pub reader: std::sync::Arc<dyn Reader>,
    /// Whether asking for it brought the model into memory (recorded as a load, as [`Prepared::loaded`] is).
    pub loaded: bool,
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
    /// For each of `top`, whether the sampler's top-k/top-p/min-p left it in play (empty: not known). The
    /// logprobs themselves stay the plain softmax; this mark is what the sampler did with them.
    pub in_play: Vec<bool>,
}

/// One generated token: the text it added (may be empty, mid-character) and its log-probability when asked.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Text this token completed.
    pub text: String,
    /// Its log-probability.
    pub logprob: Option<TokenLogprob>,
}

/// One generation's sequence in the engine, named by the scheduler's job number.
pub type SeqId = u64;

/// What a sequence does in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// The next `n` prompt tokens, no logits.
    Chunk(usize),
    /// The prompt's last token, by itself: logits, the first token sampled.
    Last,
    /// The token sampled last: logits, the next token sampled.
    Decode,
}

/// A sequence's part of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Whose.
    pub id: SeqId,
    /// What.
    pub work: Work,
}

/// What one part of a pass produced: for [`Work::Last`] and [`Work::Decode`], the
/// token sampled; for a chunk of the prompt, nothing.
#[derive(Debug, Clone)]
pub struct Stepped {
    /// The token's text and log-probability.
    pub piece: Piece,
    /// It is an end token (not part of the reply's text).
    pub end: bool,
    /// The sequence has reached the model's context: no further token fits.
    pub full: bool,
}

/// Where a sequence starts: how much of its prompt a kept conversation already held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begun {
    /// Prompt tokens found in a kept conversation.
    pub cached: usize,
    /// Prompt tokens still to read (the last one included: at least 1).
    pub to_read: usize,
}

/// What a model keeps of conversations not speaking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Conversations kept.
    pub conversations: usize,
    /// Tokens they hold.
    pub tokens: usize,
}

/// The room a model's running replies share, against which the scheduler admits them: a reply joins only when what
/// it may hold (prompt + max_tokens, in whole pages) fits beside what the running ones reserved, so an admitted
/// reply always finishes and nothing running is evicted (kept conversations give way instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Tokens of per-sequence state the replies may hold in all: the context charged at load on the host, the page
    /// pool on a GPU.
    pub tokens: usize,
    /// Tokens a page holds (1 where state is not paged): each reply's reserve is rounded up to whole pages.
    pub page: usize,
    /// Sequences that can run at once (a GPU's recurrent slots; `usize::MAX` where tokens alone bound them).
    pub sequences: usize,
}

impl Budget {
    /// `tokens` of unpaged room and no bound on sequences: a host model's context, or a test's.
    pub fn tokens(tokens: usize) -> Budget {
        Budget { tokens, page: 1, sequences: usize::MAX }
    }

    /// What a reserve of `tokens` takes of the budget: whole pages.
    pub fn reserve(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page.max(1)) * self.page.max(1)
    }
}

/// What ending a sequence leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// Text the decoder still held (an incomplete character at the end).
    pub rest: String,
    /// What the model keeps after it.
    pub held: Held,
}

/// A model in memory and what it is charged for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resident {
    /// `model@backend`.
    pub name: String,
    /// Bytes charged: weights and a full context of KV cache.
    pub charged: u64,
    /// Tokens of context it is charged for (the KV budget its conversations share).
    pub context: usize,
    /// Bytes of per-layer state each token adds (every layer's keys and values, or its latent and rope key), as
    /// the model's state spec says: what a context costs, and how a latent cache compares with a K/V one.
    pub cache_bytes_per_token: usize,
    /// What its kept conversations hold.
    pub held: Held,
}

/// The memory line of `kvad ps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// Bytes the server may charge in all.
    pub total: u64,
    /// Models in memory.
    pub resident: Vec<Resident>,
}

impl Memory {
    /// Bytes not charged.
    pub fn left(&self) -> u64 {
        self.total.saturating_sub(self.resident.iter().map(|r| r.charged).sum())
    }
}

/// A generation engine, driven step by step by the scheduler's thread: the scheduler decides what runs (who joins,
/// which prompt chunk, which replies write); the engine holds the models, every sequence's cache and sampler, and
/// the conversations set aside.
pub trait Engine: Send {
    /// The models it can serve, with their capabilities.
    fn catalog(&self) -> Vec<ModelInfo>;

    /// What reads `model`'s prompts (template and tokenizer), loading the model first when it is not in memory
    /// (under the memory rule). Reading runs off the engine thread, so a long prompt's tokenising holds no stream.
    fn reader(&mut self, model: &str) -> Result<ReaderFor, EngineError>;

    /// Renders and tokenizes a prompt here and now (the reader, on this thread): for callers without a thread of
    /// their own to read on.
    fn prepare(&mut self, model: &str, prompt: &Prompt) -> Result<Prepared, EngineError> {
        let r = self.reader(model)?;
        let mut p = r.reader.read(prompt)?;
        p.loaded = r.loaded;
        Ok(p)
    }

    /// The room a model's replies and kept conversations share ([`Budget::tokens`] 0 when it is not loaded).
    fn budget(&self, model: &str) -> Budget;

    /// Starts a sequence: finds the kept conversation sharing the longest prefix with the prompt (unless `fresh`:
    /// a request that asked for no cache) and sets up its sampler.
    fn begin(&mut self, seq: SeqId, prepared: &Prepared, params: &GenParams, fresh: bool)
        -> Result<Begun, EngineError>;

    /// Runs one forward pass over these parts (all of one model); one entry per part, in order.
    fn step(&mut self, parts: &[Part]) -> Result<Vec<Option<Stepped>>, EngineError>;

    /// Pools each input into one vector with `model`, an embedding model loaded under the memory rule as
    /// [`Engine::reader`] loads one, in batched passes between the running replies' steps. `Ok(None)`: an input
    /// does not fit the state room the running replies leave; ask again once nothing runs on the model.
    fn embed(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        dimensions: Option<usize>,
    ) -> Result<Option<Embedded>, EngineError> {
        let _ = (inputs, dimensions);
        Err(EngineError::unsupported("model", format!("{model}: this engine computes no embeddings")))
    }

    /// Scores each text with `model` (tokenized as [`EmbedInput::Text`] is, with the tokenizer's special tokens),
    /// every token after the first of each window of `window` tokens (None: the model's context), in batched
    /// passes of their own between the running replies' steps, as [`Engine::embed`] reads. `Ok(None)`: a window
    /// does not fit the state room the running replies leave; ask again once nothing runs on the model.
    fn score(
        &mut self,
        model: &str,
        inputs: &[EmbedInput],
        window: Option<usize>,
    ) -> Result<Option<Scored>, EngineError> {
        let _ = (inputs, window);
        Err(EngineError::unsupported("model", format!("{model}: this engine scores no texts")))
    }

    /// Ends a sequence: `keep` sets its cache aside as a conversation (evicting the one that spoke longest ago when
    /// the context is short); otherwise it is freed. Returns the text the decoder held back and what is kept.
    fn end(&mut self, seq: SeqId, keep: bool) -> Ended;

    /// Loads a model on `backend` (a name of `kvad_tensor::BackendKind`, or the engine's own default name; `None`:
    /// its default backend) when it fits beside what is there; refused naming what holds the memory. A model
    /// already in memory on that backend (or on any, when none is named) is left as it is; on another backend the
    /// load is refused (409) naming the backend it is on, since nothing is unloaded implicitly. Returns the backend
    /// the model is on.
    fn load(&mut self, model: &str, backend: Option<&str>) -> Result<String, EngineError>;

    /// Unloads a model (None: all); returns the names unloaded.
    fn unload(&mut self, model: Option<&str>) -> Result<Vec<String>, EngineError>;

    /// What is in memory.
    fn memory(&self) -> Memory;

    /// Looks at the disk again: models that arrived since (a pull) join the catalog, not loaded.
    fn rescan(&mut self) {}

    /// The models' tokenizers, for the HTTP side (`POST /api/tokenize`): taken once at start, so tokenizing a text
    /// never waits behind the engine thread's queue.
    fn tokenizers(&self) -> std::sync::Arc<dyn Tokenize>;
}

/// One token of a tokenized text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenPiece {
    /// The token id.
    pub id: u32,
    /// The text it decodes to alone (may be part of a character).
    pub text: String,
}

/// Text to tokens with a model's own tokenizer, without loading the model's weights.
pub trait Tokenize: Send + Sync {
    /// The tokens of `text` as `model` reads a plain prompt (special tokens such as BOS included).
    fn tokenize(&self, model: &str, text: &str) -> Result<Vec<TokenPiece>, EngineError>;

    /// How many tokens `prompt` is for `model`, rendered by its chat template as a reply's prompt is (Anthropic's
    /// `count_tokens`): the count a generation would report, without queueing behind one.
    fn count(&self, model: &str, prompt: &Prompt) -> Result<usize, EngineError>;
}

/// The 409 of a load naming another backend than the one the model is in memory on: both engines answer it in
/// these words, so a client (the web UI shows it as it is) reads the same reason whatever serves it.
pub fn loaded_elsewhere(model: &str, on: &str, asked: &str) -> EngineError {
    EngineError::conflict(
        "backend",
        format!(
            "backend = \"{asked}\": model {model} is loaded on {on} ({model}@{on}); unload it first \
             (kvad unload {model}) to load it on {asked}: nothing is unloaded implicitly"
        ),
    )
}

/// Whether a template source knows reasoning traces.
pub fn template_reasons(source: &str) -> bool {
    source.contains("<think>")
}
