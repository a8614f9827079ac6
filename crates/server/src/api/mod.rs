//! The HTTP API: the router, and the machinery both completion endpoints share (queue a job, wait for it to start
//! so errors keep their status codes, then answer whole or as server-sent events).

pub mod admin;
pub mod bench;
pub mod chat;
pub mod completions;
pub mod conversations;
pub mod datasets;
pub mod embeddings;
pub mod jobs;
pub mod messages;
pub mod misc;
pub mod pull;
pub mod request;
pub mod responses;
pub mod schema;
pub mod table;
pub mod web;

use crate::error::ApiError;
use crate::sched::{Delta, Done, Event, Job};
use crate::AppState;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::Router;
use futures_util::stream::{self, Stream};
use kvad_engine::seam::{GenParams, Prompt, TokenLogprob};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The router. Every `.route` here must be in [`table::ROUTES`] (a test reads this file).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::handler))
        .route("/v1/completions", post(completions::handler))
        .route("/v1/embeddings", post(embeddings::handler))
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::get))
        .route("/v1/responses/{id}", delete(responses::delete))
        .route("/v1/models", get(misc::models))
        .route("/api/health", get(misc::health))
        .route("/api/queue", get(admin::queue))
        .route("/api/ps", get(admin::ps))
        .route("/api/load", post(admin::load))
        .route("/api/unload", post(admin::unload))
        .route("/api/pull", post(pull::handler))
        .route("/api/metrics/usage", get(admin::usage))
        .route("/metrics", get(admin::prometheus))
        .route("/api/openapi.json", get(misc::openapi))
        .route("/api", get(misc::page))
        .merge(crate::auth::routes::routes())
        .route("/api/tokenize", post(web::tokenize))
        .route("/api/models", get(web::disk))
        .route("/api/requests", get(web::recent))
        .route("/api/settings", get(web::settings))
        .route("/api/settings", patch(web::change))
        .route("/api/bench", get(bench::state))
        .route("/api/bench", post(bench::run))
        .route("/api/datasets", get(datasets::list))
        .route("/api/datasets", post(datasets::create))
        .route("/api/datasets/{id}", get(datasets::get))
        .route("/api/datasets/{id}", delete(datasets::delete))
        .route("/api/jobs", get(jobs::list))
        .route("/api/jobs", post(jobs::create))
        .route("/api/jobs/{id}", get(jobs::get))
        .route("/api/jobs/{id}", delete(jobs::cancel))
        .route("/api/jobs/{id}/events", get(jobs::events))
        .route("/api/jobs/{id}/items", get(jobs::items))
        .route("/api/jobs/{id}/resume", post(jobs::resume))
        .route("/api/conversations", get(conversations::list))
        .route("/api/conversations", post(conversations::create))
        .route("/api/conversations/{id}", get(conversations::get))
        .route("/api/conversations/{id}", patch(conversations::update))
        .route("/api/conversations/{id}", delete(conversations::delete))
        .route("/api/conversations/{id}/messages", post(conversations::add_message))
        .fallback(misc::fallback)
        .method_not_allowed_fallback(misc::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::middleware::authenticate))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::origin::guard))
        .layer(axum::extract::DefaultBodyLimit::max(state.config.server.max_body))
        .layer(axum::middleware::map_response_with_state(state.clone(), too_large_as_json))
        // Outermost: every error on the Messages paths, whichever layer made it, in Anthropic's shape.
        .layer(axum::middleware::from_fn(messages::errors))
        .with_state(state)
}

/// The body limit's refusal (axum answers it in plain text) in OpenAI's error shape, naming the limit.
async fn too_large_as_json(axum::extract::State(state): axum::extract::State<AppState>, r: Response) -> Response {
    let json = r
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE && !json {
        return ApiError::too_large(state.config.server.max_body).into_response();
    }
    r
}

/// Which OpenAI object the answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `chat.completion`.
    Chat,
    /// `text_completion`.
    Text,
}

/// What an endpoint hands to [`respond`].
pub struct Submit {
    /// Model id.
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Sampling.
    pub params: GenParams,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Parse tool calls.
    pub parse_tools: bool,
    /// End the reply at its first tool call.
    pub one_call: bool,
    /// Cut `max_tokens` to the room the context leaves instead of refusing it.
    pub clamp_max_tokens: bool,
    /// Split reasoning.
    pub parse_reasoning: bool,
    /// For the requests table.
    pub endpoint: &'static str,
    /// Who asked.
    pub account: String,
    /// The request asked for no cache (`"cache": false`): it runs alone and is not kept.
    pub fresh: bool,
}

/// Sets the job's cancel flag when dropped: a client that goes away drops the response (stream or future), and
/// scheduler drops it from the line, or stops it within a step.
pub(crate) struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn request_id(shape: Shape) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    match shape {
        Shape::Chat => format!("chatcmpl-{nanos:x}"),
        Shape::Text => format!("cmpl-{nanos:x}"),
    }
}

/// A job queued and started: its events from here on, the guard that cancels it when the answer is dropped, and
/// the prompt's counts.
pub(crate) struct Begun {
    /// The job's events after `Started`.
    pub rx: crate::sched::events::EventsRx,
    /// Cancels the job when dropped.
    pub guard: CancelOnDrop,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of them, found in a kept conversation.
    pub cached_tokens: usize,
}

/// Queues the job and waits for it to start, so a refusal keeps its status code.
pub(crate) async fn start(state: &AppState, s: Submit) -> Result<Begun, ApiError> {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down", None));
    }
    let (tx, mut rx) = crate::sched::events::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancel.clone());
    state.queue.submit(Job {
        model: s.model.clone(),
        prompt: s.prompt,
        params: s.params,
        stop: s.stop,
        parse_tools: s.parse_tools,
        one_call: s.one_call,
        clamp_max_tokens: s.clamp_max_tokens,
        parse_reasoning: s.parse_reasoning,
        endpoint: s.endpoint,
        account: s.account,
        fresh: s.fresh,
        cancel,
        events: tx,
        queued_at: std::time::Instant::now(),
    })?;
    match rx.recv().await {
        Some(Event::Started { prompt_tokens, cached_tokens }) => Ok(Begun { rx, guard, prompt_tokens, cached_tokens }),
        Some(Event::Failed(e)) => Err(e),
        _ => Err(ApiError::internal("the engine ended the job before it started")),
    }
}

/// Queues the job, waits for it to start, and answers in OpenAI's shapes.
pub async fn respond(
    state: AppState,
    s: Submit,
    shape: Shape,
    is_stream: bool,
    include_usage: bool,
) -> Result<Response, ApiError> {
    let model = s.model.clone();
    let b = start(&state, s).await?;
    let meta = Meta { id: request_id(shape), created: now(), model, shape };
    if is_stream {
        Ok(sse(meta, b.rx, b.guard, include_usage).into_response())
    } else {
        whole(meta, b.rx, b.guard).await
    }
}

struct Meta {
    id: String,
    created: u64,
    model: String,
    shape: Shape,
}

fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.completion_tokens,
        "total_tokens": d.prompt_tokens + d.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": d.cached_tokens},
    })
}

/// kvad's own figures on a reply: how many others it was written beside, and what the model keeps after it; and,
/// when the server's shutdown cut it short, `"shutdown": true`.
fn kvad(d: &Done) -> Value {
    let mut v = json!({"beside": d.beside, "conversations": d.conversations, "held_tokens": d.held_tokens});
    if d.shutdown {
        v["shutdown"] = json!(true);
    }
    v
}

fn item(t: &str, lp: f32) -> Value {
    json!({"token": t, "logprob": lp, "bytes": t.as_bytes()})
}

/// A token's alternatives in OpenAI's shape, each with kvad's `in_play` mark (whether the sampler's top-k/top-p/
/// min-p left it a candidate) when the engine knows it; clients that do not know the field ignore it.
fn top_items(l: &TokenLogprob) -> Vec<Value> {
    l.top
        .iter()
        .enumerate()
        .map(|(i, (t, lp))| {
            let mut v = item(t, *lp);
            if let Some(p) = l.in_play.get(i) {
                v["in_play"] = json!(p);
            }
            v
        })
        .collect()
}

fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut v = item(&l.token, l.logprob);
            v["top_logprobs"] = json!(top_items(l));
            v
        })
        .collect();
    json!({"content": content})
}

fn text_logprobs(lps: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut offsets = Vec::new();
    for l in lps {
        offsets.push(at);
        at += l.token.len();
    }
    json!({
        "tokens": lps.iter().map(|l| l.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| l.top.iter().map(|(t, lp)| (t.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
        "text_offset": offsets,
        // kvad's extension: the alternatives as ordered lists (OpenAI's map merges two tokens of the same text and
        // loses the order), each with its in_play mark.
        "kvad_top": lps.iter().map(top_items).collect::<Vec<_>>(),
    })
}

fn tool_call_json(index: usize, id: &str, c: &kvad_text::stream::ToolCall) -> Value {
    json!({"index": index, "id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// Collects the whole reply into one object.
async fn whole(meta: Meta, mut rx: crate::sched::events::EventsRx, _guard: CancelOnDrop) -> Result<Response, ApiError> {
    let mut all = Delta::default();
    let done = loop {
        match rx.recv().await {
            Some(Event::Delta(d)) => {
                all.content.push_str(&d.content);
                all.reasoning.push_str(&d.reasoning);
                all.tool_calls.extend(d.tool_calls);
                all.logprobs.extend(d.logprobs);
            }
            Some(Event::Done(d)) => break d,
            Some(Event::Failed(e)) => return Err(e),
            Some(Event::Started { .. }) => {}
            None => return Err(ApiError::internal("the engine stopped mid-reply")),
        }
    };
    let want_lp = !all.logprobs.is_empty();
    let choice = match meta.shape {
        Shape::Chat => {
            let mut message = json!({
                "role": "assistant",
                "content": if all.content.is_empty() && !all.tool_calls.is_empty() { Value::Null } else { json!(all.content) },
            });
            if !all.reasoning.is_empty() {
                message["reasoning_content"] = json!(all.reasoning);
            }
            if !all.tool_calls.is_empty() {
                let calls: Vec<Value> = all
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, (id, c))| {
                        let mut v = tool_call_json(i, id, c);
                        v.as_object_mut().map(|o| o.remove("index"));
                        v
                    })
                    .collect();
                message["tool_calls"] = json!(calls);
            }
            json!({"index": 0, "message": message, "logprobs": if want_lp { chat_logprobs(&all.logprobs) } else { Value::Null }, "finish_reason": done.finish_reason})
        }
        Shape::Text => json!({
            "index": 0, "text": all.content, "finish_reason": done.finish_reason,
            "logprobs": if want_lp { text_logprobs(&all.logprobs, 0) } else { Value::Null },
        }),
    };
    let object = if meta.shape == Shape::Chat { "chat.completion" } else { "text_completion" };
    Ok(axum::Json(json!({
        "id": meta.id, "object": object, "created": meta.created, "model": meta.model,
        "choices": [choice], "usage": usage(&done), "kvad": kvad(&done),
    }))
    .into_response())
}

struct StreamState {
    meta: Meta,
    rx: crate::sched::events::EventsRx,
    _guard: CancelOnDrop,
    include_usage: bool,
    sent_role: bool,
    calls: usize,
    text_at: usize,
    pending: Vec<Value>,
    finished: bool,
}

impl StreamState {
    fn chunk(&self, choices: Value) -> Value {
        let object = if self.meta.shape == Shape::Chat { "chat.completion.chunk" } else { "text_completion" };
        json!({"id": self.meta.id, "object": object, "created": self.meta.created, "model": self.meta.model, "choices": choices})
    }

    fn delta_chunks(&mut self, d: Delta) -> Vec<Value> {
        let lp = (!d.logprobs.is_empty()).then(|| d.logprobs.clone());
        match self.meta.shape {
            Shape::Text => {
                let logprobs = lp.map_or(Value::Null, |l| text_logprobs(&l, self.text_at));
                self.text_at += d.content.len();
                vec![self.chunk(json!([{"index": 0, "text": d.content, "logprobs": logprobs, "finish_reason": null}]))]
            }
            Shape::Chat => {
                let mut delta = json!({});
                if !self.sent_role {
                    delta["role"] = json!("assistant");
                    self.sent_role = true;
                }
                if !d.reasoning.is_empty() {
                    delta["reasoning_content"] = json!(d.reasoning);
                }
                if !d.content.is_empty() || (d.reasoning.is_empty() && d.tool_calls.is_empty()) {
                    delta["content"] = json!(d.content);
                }
                if !d.tool_calls.is_empty() {
                    let calls: Vec<Value> = d
                        .tool_calls
                        .iter()
                        .map(|(id, c)| {
                            self.calls += 1;
                            tool_call_json(self.calls - 1, id, c)
                        })
                        .collect();
                    delta["tool_calls"] = json!(calls);
                }
                let logprobs = lp.map_or(Value::Null, |l| chat_logprobs(&l));
                vec![self.chunk(json!([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": null}]))]
            }
        }
    }

    fn done_chunks(&mut self, d: Done) -> Vec<Value> {
        let last = match self.meta.shape {
            Shape::Chat => json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": d.finish_reason}]),
            Shape::Text => json!([{"index": 0, "text": "", "logprobs": null, "finish_reason": d.finish_reason}]),
        };
        let mut end = self.chunk(last);
        end["kvad"] = kvad(&d);
        let mut out = vec![end];
        if self.include_usage {
            let mut u = self.chunk(json!([]));
            u["usage"] = usage(&d);
            out.push(u);
        }
        out
    }
}

/// Server-sent events: one `data:` JSON chunk per delta, the finish reason, usage when asked, then `[DONE]`.
fn sse(
    meta: Meta,
    rx: crate::sched::events::EventsRx,
    guard: CancelOnDrop,
    include_usage: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let st = StreamState {
        meta,
        rx,
        _guard: guard,
        include_usage,
        sent_role: false,
        calls: 0,
        text_at: 0,
        pending: Vec::new(),
        finished: false,
    };
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if !st.pending.is_empty() {
                let v = st.pending.remove(0);
                // `[DONE]` goes out bare, not as a JSON string.
                let data = if v == json!("[DONE]") { "[DONE]".to_string() } else { v.to_string() };
                return Some((Ok(SseEvent::default().data(data)), st));
            }
            if st.finished {
                return None;
            }
            match st.rx.recv().await {
                Some(Event::Delta(d)) => st.pending = st.delta_chunks(d),
                Some(Event::Done(d)) => {
                    st.pending = st.done_chunks(d);
                    st.finished = true;
                    st.pending.push(json!("[DONE]"));
                }
                Some(Event::Failed(e)) => {
                    st.pending = vec![e.body()];
                    st.finished = true;
                }
                Some(Event::Started { .. }) => {}
                None => {
                    st.pending = vec![ApiError::internal("the engine stopped mid-reply").body()];
                    st.finished = true;
                }
            }
        }
    });
    Sse::new(events)
}
