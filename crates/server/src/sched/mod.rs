//! The scheduler: one engine thread (`runner`) owns the [`crate::Engine`] and everything queues behind it, so
//! queue depth is a number rather than a mutex nobody can see. Its decisions ([`core`]: whose turn, who joins the
//! batch, which prompt chunk is read between decode steps) are plain data, tested with no model; [`reply`] turns a
//! reply's tokens into OpenAI deltas (stop strings, reasoning, tool calls). [`Queue`] is the HTTP side's handle:
//! it refuses what cannot wait (503 with Retry-After, 429 per account) at once, and shows what waits.
//!
//! [`Job`] and [`Event`] are the contract with the HTTP side: a job sends `Started`, `Delta`s and `Done`, or
//! `Failed` instead. A job whose client went away (its `cancel` flag set) leaves the line, or stops within a
//! step, and its cache is freed.

pub mod core;
pub mod events;
mod queue;
mod read;
pub mod reply;
mod runner;

pub use self::core::{Budget, Decision, JobId, Kind, Limits, Part, PassRules, Phase, Refusal, Scheduler, Work};
pub use queue::{AdminResult, Queue, QueueView, RunningView, WaitingView};

use crate::error::ApiError;
use kvad_engine::seam::{GenParams, Prompt, TokenLogprob};
use kvad_text::stream::ToolCall;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// How passes are planned per backend ([`PassRules`]).
///
/// On the CPU one pass wins from two parts at every format: decode is memory-bound and the few-row GEMV
/// (`kvad_tensor::cpu::gemv_rows`, 2–8 rows) reads each weight once for all of them, at about the cost of one row
/// (docs/performance.md); it also gives each reply the bits it would get alone, so batching a pure decode step does
/// not change anyone's tokens. Prompts are read one at a time, 64 tokens a pass, and 4 replies run together (the
/// seed's rules, measured there).
///
/// On a GPU a step carries up to [`GPU_PASS_TOKENS`] rows: every reply's token, then as many joining prompts'
/// chunks as fit, so a crowd's first tokens do not queue behind each other's prompts. The sampling thresholds are
/// the seed's (two at bf16, three at q8, six at q4). How many replies run is the page pool's to say (a reply joins
/// when its pages are reserved); [`GPU_BATCH`] is only a ceiling.
pub fn pass_rules(backend: &str) -> PassRules {
    let gpu = |batch_from| PassRules { batch_from, chunk: 512, pass_tokens: Some(GPU_PASS_TOKENS), batch: GPU_BATCH };
    match backend {
        "gpu-bf16" => gpu(2),
        "gpu-q8" => gpu(3),
        "gpu-q4" => gpu(6),
        _ => PassRules::default(),
    }
}

/// Rows a GPU step carries in all. A pass of 2,048 prompt rows of an 8B model is about 35 TFLOP, some 60 ms on an
/// H200 at bf16: big enough to keep the tensor cores busy, short enough that no running stream goes quiet for long
/// while a crowd's prompts are read.
pub const GPU_PASS_TOKENS: usize = 2048;

/// The most replies a GPU runs together where `[server] batch` names no number; the page pool usually says fewer.
pub const GPU_BATCH: usize = 1024;

/// One generation to run.
pub struct Job {
    /// The model's id.
    pub model: String,
    /// Messages or text.
    pub prompt: Prompt,
    /// Sampling and length (`max_tokens` 0: up to the context's end).
    pub params: GenParams,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Parse `<tool_call>` blocks (only when the request offered tools).
    pub parse_tools: bool,
    /// The reply ends at its first complete tool call (`parallel_tool_calls: false`, Anthropic's
    /// `disable_parallel_tool_use`).
    pub one_call: bool,
    /// A `max_tokens` past the context's end is cut to it rather than refused (Anthropic's clients send 32,000
    /// whatever the model).
    pub clamp_max_tokens: bool,
    /// Separate `<think>` traces (chat requests to models whose template knows them).
    pub parse_reasoning: bool,
    /// The endpoint, for the requests table.
    pub endpoint: &'static str,
    /// Who asked.
    pub account: String,
    /// The request asked for no cache (benchmarks, evaluations): it runs alone, from an empty cache, and is not
    /// kept.
    pub fresh: bool,
    /// Set when the client went away.
    pub cancel: Arc<AtomicBool>,
    /// Where events go.
    pub events: events::Events,
    /// When it was queued.
    pub queued_at: Instant,
}

/// Whole inputs to read in passes of their own: an embeddings request (`POST /v1/embeddings`) or a perplexity
/// job's rows.
pub struct InputsJob {
    /// The model's id.
    pub model: String,
    /// The inputs, in order.
    pub inputs: Vec<kvad_engine::seam::EmbedInput>,
    /// Who asked.
    pub account: String,
    /// The endpoint, for the requests table.
    pub endpoint: &'static str,
    /// When it was queued.
    pub queued_at: Instant,
    /// What to compute, and where the answer goes.
    pub work: Whole,
}

/// What an [`InputsJob`] computes. A client that went away dropped its end of `reply`, and the job then leaves the
/// line.
pub enum Whole {
    /// One vector per input, of `dimensions` (None: the model's).
    Embed {
        /// The vectors' length asked for.
        dimensions: Option<usize>,
        /// Where the vectors go.
        reply: tokio::sync::oneshot::Sender<Result<kvad_engine::seam::Embedded, ApiError>>,
    },
    /// Each input's negative log-likelihood, read in windows of `window` tokens (None: the model's context).
    Score {
        /// Tokens a window.
        window: Option<usize>,
        /// Where the scores go.
        reply: tokio::sync::oneshot::Sender<Result<kvad_engine::seam::Scored, ApiError>>,
    },
}

impl Whole {
    /// The name the queue's view gives it.
    pub fn name(&self) -> &'static str {
        match self {
            Whole::Embed { .. } => "embed",
            Whole::Score { .. } => "score",
        }
    }

    /// Whether whoever asked has gone.
    pub fn is_closed(&self) -> bool {
        match self {
            Whole::Embed { reply, .. } => reply.is_closed(),
            Whole::Score { reply, .. } => reply.is_closed(),
        }
    }

    /// Answers with an error.
    pub fn fail(self, e: ApiError) {
        match self {
            Whole::Embed { reply, .. } => drop(reply.send(Err(e))),
            Whole::Score { reply, .. } => drop(reply.send(Err(e))),
        }
    }
}

/// What a job sends back, in order: `Started`, `Delta`s, then `Done`; or `Failed` instead of all of them.
#[derive(Debug)]
pub enum Event {
    /// The reply joined the batch: its prompt is being read.
    Started {
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Of them, found in a kept conversation.
        cached_tokens: usize,
    },
    /// Some of the reply.
    Delta(Delta),
    /// The end.
    Done(Done),
    /// The job failed before it started.
    Failed(ApiError),
}

/// A piece of the reply, already classified.
#[derive(Debug, Default)]
pub struct Delta {
    /// Answer text.
    pub content: String,
    /// Reasoning text.
    pub reasoning: String,
    /// Complete tool calls, with their ids.
    pub tool_calls: Vec<(String, ToolCall)>,
    /// Log-probabilities of the tokens behind this delta.
    pub logprobs: Vec<TokenLogprob>,
}

impl Delta {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty() && self.logprobs.is_empty()
    }
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct Done {
    /// stop, length or tool_calls.
    pub finish_reason: &'static str,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Prompt tokens found in a kept conversation.
    pub cached_tokens: usize,
    /// The most other replies it was written beside in one step.
    pub beside: usize,
    /// Conversations the model keeps after this reply.
    pub conversations: usize,
    /// Tokens they hold.
    pub held_tokens: usize,
    /// The server's shutdown cut the reply short (its finish reason is then `length`).
    pub shutdown: bool,
    /// The stop string the reply ended at, if one did (Anthropic's `stop_sequence`).
    pub stop_sequence: Option<String>,
}
