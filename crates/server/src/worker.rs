//! The generation queue: one worker thread owns the [`Engine`] and runs one job at a time, in arrival order.
//!
//! Jobs wait in a bounded queue ([server] queue, 16 unless set); the job after that is refused with a 503 and a
//! Retry-After rather than held. The worker turns token pieces into OpenAI deltas (stop strings, reasoning,
//! tool calls), sends them back over the job's channel, and writes the job's row to the requests table. A job
//! whose client went away (its `cancel` flag set) stops within one token, or is dropped unread if still queued.
//! The scheduler of a later issue replaces this loop; [`Job`] and [`Event`] are its contract with the HTTP side.

use crate::engine::{EngineFinish, GenParams, ModelInfo, Prompt, TokenLogprob};
use crate::error::ApiError;
use crate::store::{RequestRow, Store};
use crate::Engine;
use kvad_text::stream::{ReasoningSplitter, ReplyParser, Segment, StopMatcher, ToolCall, ToolCallParser};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

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
    /// Separate `<think>` traces (chat requests to models whose template knows them).
    pub parse_reasoning: bool,
    /// The endpoint, for the requests table.
    pub endpoint: &'static str,
    /// Who asked.
    pub account: String,
    /// Set when the client went away.
    pub cancel: Arc<AtomicBool>,
    /// Where events go.
    pub events: UnboundedSender<Event>,
    /// When it was queued.
    pub queued_at: Instant,
}

/// What a job sends back, in order: `Started`, `Delta`s, then `Done`; or `Failed` instead of all of them.
#[derive(Debug)]
pub enum Event {
    /// The prompt is read and generation begins.
    Started {
        /// Prompt tokens.
        prompt_tokens: usize,
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
    fn is_empty(&self) -> bool {
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
    /// Prompt tokens from a cache (0: no prefix cache yet).
    pub cached_tokens: usize,
}

/// The HTTP side's handle on the worker.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<Job>,
    depth: Arc<AtomicUsize>,
    capacity: usize,
    catalog: Arc<RwLock<Vec<ModelInfo>>>,
}

impl Queue {
    /// Starts the worker thread.
    pub fn start(engine: Box<dyn Engine>, store: Store, capacity: usize) -> (Queue, std::thread::JoinHandle<()>) {
        let (tx, rx) = sync_channel::<Job>(capacity);
        let depth = Arc::new(AtomicUsize::new(0));
        let catalog = Arc::new(RwLock::new(engine.catalog()));
        let q = Queue { tx, depth: depth.clone(), capacity, catalog: catalog.clone() };
        let handle = std::thread::Builder::new()
            .name("kvad-engine".into())
            .spawn(move || {
                let mut engine = engine;
                while let Ok(job) = rx.recv() {
                    depth.fetch_sub(1, Ordering::SeqCst);
                    run_job(engine.as_mut(), &store, &catalog, job);
                }
            })
            .expect("spawning the engine thread");
        (q, handle)
    }

    /// Queues a job, or refuses it when the queue is full.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        self.depth.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.depth.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => ApiError::unavailable(
                        format!("the queue is full ({} generations waiting); retry shortly", self.capacity),
                        Some(1),
                    ),
                    TrySendError::Disconnected(_) => ApiError::unavailable("the engine has stopped", None),
                })
            }
        }
    }

    /// Jobs waiting.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::SeqCst)
    }

    /// The models and their capabilities.
    pub fn catalog(&self) -> Vec<ModelInfo> {
        self.catalog.read().map(|c| c.clone()).unwrap_or_default()
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn call_id(n: usize) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("call_{:x}{n:02x}", nanos & 0xffff_ffff_ffff)
}

/// Turns segments into a delta; counts the calls for their ids.
fn collect(segments: Vec<Segment>, delta: &mut Delta, calls: &mut usize) {
    for s in segments {
        match s {
            Segment::Content(t) => delta.content.push_str(&t),
            Segment::Reasoning(t) => delta.reasoning.push_str(&t),
            Segment::ToolCall(c) => {
                delta.tool_calls.push((call_id(*calls), c));
                *calls += 1;
            }
            Segment::Markup(_) => {}
        }
    }
}

fn run_job(engine: &mut dyn Engine, store: &Store, catalog: &RwLock<Vec<ModelInfo>>, job: Job) {
    let start = Instant::now();
    let mut row = RequestRow {
        account: job.account.clone(),
        endpoint: job.endpoint.into(),
        model: job.model.clone(),
        queue_ms: ms(job.queued_at),
        ..Default::default()
    };
    let finish = |row: &mut RequestRow, reason: &str| {
        row.finish_reason = reason.into();
        row.duration_ms = ms(start);
        if let Err(e) = store.record(row) {
            eprintln!("kvad-serve: writing the requests row failed: {e}");
        }
    };
    if job.cancel.load(Ordering::SeqCst) {
        return finish(&mut row, "cancelled");
    }
    let prepared = engine.prepare(&job.model, &job.prompt);
    // A load (or an unload of another model) shows in /v1/models before the reply starts.
    if let Ok(mut c) = catalog.write() {
        *c = engine.catalog();
    }
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            row.error = Some(e.message.clone());
            finish(&mut row, "error");
            let _ = job.events.send(Event::Failed(e));
            return;
        }
    };
    row.backend = prepared.backend.clone();
    row.prompt_tokens = prepared.prompt_tokens;
    let mut params = job.params.clone();
    let room = prepared.context.saturating_sub(prepared.prompt_tokens);
    let limit_error = if room == 0 {
        Some(ApiError::bad_field(
            "messages",
            format!("the prompt is {} tokens; the model's context is {}", prepared.prompt_tokens, prepared.context),
        ))
    } else if params.max_tokens > room {
        Some(ApiError::bad_field(
            "max_tokens",
            format!(
                "max_tokens = {}: the prompt is {} tokens and the model's context is {}, so at most {room} can be generated",
                params.max_tokens, prepared.prompt_tokens, prepared.context
            ),
        ))
    } else {
        params.options.logit_bias.iter().find(|(id, _)| *id as usize >= prepared.vocab).map(|(id, _)| {
            ApiError::bad_field(
                "logit_bias",
                format!("logit_bias: token id {id} is not below the vocabulary size {}", prepared.vocab),
            )
        })
    };
    if let Some(e) = limit_error {
        row.error = Some(e.message.clone());
        finish(&mut row, "error");
        let _ = job.events.send(Event::Failed(e));
        return;
    }
    if params.max_tokens == 0 {
        params.max_tokens = room;
    }
    let _ = job.events.send(Event::Started { prompt_tokens: prepared.prompt_tokens });

    let reasoning = job.parse_reasoning.then(|| {
        if prepared.text.trim_end().ends_with("<think>") {
            ReasoningSplitter::inside_trace()
        } else {
            ReasoningSplitter::new()
        }
    });
    let mut parser = ReplyParser::new(reasoning, job.parse_tools.then(ToolCallParser::new));
    let mut stop = StopMatcher::new(job.stop.clone());
    let mut calls = 0usize;
    let mut first: Option<f64> = None;
    let result = engine.generate(&prepared, &params, &mut |piece| {
        if job.cancel.load(Ordering::SeqCst) {
            return false;
        }
        first.get_or_insert_with(|| ms(start));
        let mut delta = Delta::default();
        let text = stop.push(&piece.text);
        collect(parser.push(&text), &mut delta, &mut calls);
        delta.logprobs.extend(piece.logprob);
        if !delta.is_empty() && job.events.send(Event::Delta(delta)).is_err() {
            job.cancel.store(true, Ordering::SeqCst);
            return false;
        }
        !stop.stopped()
    });
    row.ttft_ms = first;
    let generated = match result {
        Ok(g) => g,
        Err(e) => {
            row.error = Some(e.message.clone());
            finish(&mut row, "error");
            let _ = job.events.send(Event::Failed(e));
            return;
        }
    };
    let mut delta = Delta::default();
    if !stop.stopped() {
        let tail = stop.finish();
        collect(parser.push(&tail), &mut delta, &mut calls);
    }
    collect(parser.finish(), &mut delta, &mut calls);
    if !delta.is_empty() {
        let _ = job.events.send(Event::Delta(delta));
    }
    row.generated_tokens = generated.tokens;
    let reason = if job.cancel.load(Ordering::SeqCst) {
        "cancelled"
    } else if calls > 0 {
        "tool_calls"
    } else if stop.stopped() || generated.finish == EngineFinish::Stop {
        "stop"
    } else {
        "length"
    };
    // The row lands before the client hears the end, so whoever reads the table after a reply finds it.
    finish(&mut row, reason);
    let _ = job.events.send(Event::Done(Done {
        finish_reason: reason,
        prompt_tokens: prepared.prompt_tokens,
        completion_tokens: generated.tokens,
        cached_tokens: 0,
    }));
}
