//! A reply in Anthropic's shapes: the engine's deltas (reasoning, text, complete tool calls) become content blocks —
//! `thinking`, `text`, `tool_use` — in the order the model wrote them, whole (a `message`) or streamed as
//! Anthropic's event sequence: `message_start`, `ping`, per block `content_block_start` / `content_block_delta`… /
//! `content_block_stop`, then `message_delta` (stop reason and usage) and `message_stop`; a failure mid-stream is
//! an `error` event.

use crate::api::{Begun, CancelOnDrop};
use crate::error::ApiError;
use crate::sched::events::EventsRx;
use crate::sched::{Delta, Done, Event};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use std::convert::Infallible;

/// The block being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
    Tool,
}

/// Who the reply is for: its id, the model, and whether thinking is left out (`thinking.display` = `omitted`).
pub(super) struct Out {
    /// `msg_…`.
    pub id: String,
    /// The model's id.
    pub model: String,
    /// Leave thinking blocks out.
    pub omit_thinking: bool,
}

/// Turns deltas into block events (`content_block_start`, `_delta`, `_stop` objects), numbering blocks.
#[derive(Default)]
struct Blocks {
    omit_thinking: bool,
    next: usize,
    open: Option<Open>,
    /// Whitespace with no text block open: a text block starts only when something shows (a model's newline before
    /// a tool call is not an answer).
    held: String,
}

impl Blocks {
    fn close(&mut self, out: &mut Vec<Value>) {
        if self.open.take().is_some() {
            out.push(json!({"type": "content_block_stop", "index": self.next - 1}));
        }
    }

    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<Value>) {
        self.close(out);
        out.push(json!({"type": "content_block_start", "index": self.next, "content_block": block}));
        self.open = Some(kind);
        self.next += 1;
    }

    fn push(&mut self, d: Delta, out: &mut Vec<Value>) {
        if !d.reasoning.is_empty() && !self.omit_thinking {
            if self.open != Some(Open::Thinking) {
                self.open(Open::Thinking, json!({"type": "thinking", "thinking": "", "signature": ""}), out);
            }
            let at = self.next - 1;
            out.push(json!({"type": "content_block_delta", "index": at, "delta": {"type": "thinking_delta", "thinking": d.reasoning}}));
        }
        if !d.content.is_empty() {
            let mut text = d.content;
            if self.open != Some(Open::Text) {
                self.held.push_str(&text);
                if self.held.trim().is_empty() {
                    text = String::new();
                } else {
                    text = std::mem::take(&mut self.held);
                    self.open(Open::Text, json!({"type": "text", "text": ""}), out);
                }
            }
            if !text.is_empty() {
                let at = self.next - 1;
                out.push(
                    json!({"type": "content_block_delta", "index": at, "delta": {"type": "text_delta", "text": text}}),
                );
            }
        }
        for (id, call) in d.tool_calls {
            self.held.clear();
            let id = id.strip_prefix("call_").map_or(id.clone(), |rest| format!("toolu_{rest}"));
            self.open(Open::Tool, json!({"type": "tool_use", "id": id, "name": call.name, "input": {}}), out);
            let at = self.next - 1;
            out.push(json!({"type": "content_block_delta", "index": at, "delta": {"type": "input_json_delta", "partial_json": call.arguments}}));
            self.close(out);
        }
    }
}

/// What a message says of its end: Anthropic's stop reason and the stop sequence met.
fn stop_reason(d: &Done) -> (&'static str, Value) {
    match (d.finish_reason, &d.stop_sequence) {
        ("tool_calls", _) => ("tool_use", Value::Null),
        ("length", _) => ("max_tokens", Value::Null),
        (_, Some(s)) => ("stop_sequence", json!(s)),
        _ => ("end_turn", Value::Null),
    }
}

/// Anthropic's usage: `input_tokens` excludes what was read from a kept conversation (`cache_read_input_tokens`).
fn usage(prompt: usize, cached: usize, output: usize) -> Value {
    json!({"input_tokens": prompt - cached.min(prompt), "output_tokens": output,
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}

/// The message object, before any content.
fn message(id: &str, model: &str, b: &Begun) -> Value {
    json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": [],
           "stop_reason": null, "stop_sequence": null, "usage": usage(b.prompt_tokens, b.cached_tokens, 0)})
}

/// A fresh message id.
pub(super) fn message_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("msg_{nanos:x}")
}

/// The whole reply as one `message`.
pub(super) async fn whole(out: Out, mut b: Begun) -> Result<Response, ApiError> {
    let mut msg = message(&out.id, &out.model, &b);
    let (mut blocks, mut events) = (Blocks { omit_thinking: out.omit_thinking, ..Default::default() }, Vec::new());
    let done = loop {
        match b.rx.recv().await {
            Some(Event::Delta(d)) => blocks.push(d, &mut events),
            Some(Event::Done(d)) => break d,
            Some(Event::Failed(e)) => return Err(e),
            Some(Event::Started { .. }) => {}
            None => return Err(ApiError::internal("the engine stopped mid-reply")),
        }
    };
    blocks.close(&mut events);
    let mut content: Vec<Value> = Vec::new();
    for e in events {
        match e["type"].as_str() {
            Some("content_block_start") => content.push(e["content_block"].clone()),
            Some("content_block_delta") => {
                let (block, delta) = (content.last_mut(), &e["delta"]);
                let Some(block) = block else { continue };
                match delta["type"].as_str() {
                    Some("text_delta") => append(block, "text", &delta["text"]),
                    Some("thinking_delta") => append(block, "thinking", &delta["thinking"]),
                    Some("input_json_delta") => {
                        let args = delta["partial_json"].as_str().unwrap_or("{}");
                        block["input"] = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let (reason, sequence) = stop_reason(&done);
    msg["content"] = json!(content);
    msg["stop_reason"] = json!(reason);
    msg["stop_sequence"] = sequence;
    msg["usage"] = usage(done.prompt_tokens, done.cached_tokens, done.completion_tokens);
    Ok(axum::Json(msg).into_response())
}

fn append(block: &mut Value, key: &str, more: &Value) {
    let text = format!("{}{}", block[key].as_str().unwrap_or_default(), more.as_str().unwrap_or_default());
    block[key] = json!(text);
}

struct Streaming {
    rx: EventsRx,
    _guard: CancelOnDrop,
    blocks: Blocks,
    pending: Vec<Value>,
    finished: bool,
}

/// The reply as Anthropic's server-sent events (each with its `event:` name, which the SDKs dispatch on).
pub(super) fn stream(out: Out, b: Begun) -> Response {
    let first =
        vec![json!({"type": "message_start", "message": message(&out.id, &out.model, &b)}), json!({"type": "ping"})];
    let blocks = Blocks { omit_thinking: out.omit_thinking, ..Default::default() };
    let st = Streaming { rx: b.rx, _guard: b.guard, blocks, pending: first, finished: false };
    Sse::new(events(st)).into_response()
}

fn events(st: Streaming) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold(st, |mut st| async move {
        loop {
            if !st.pending.is_empty() {
                let v = st.pending.remove(0);
                let name = v["type"].as_str().unwrap_or("message").to_string();
                return Some((Ok(SseEvent::default().event(name).data(v.to_string())), st));
            }
            if st.finished {
                return None;
            }
            let mut out = Vec::new();
            match st.rx.recv().await {
                Some(Event::Delta(d)) => st.blocks.push(d, &mut out),
                Some(Event::Done(d)) => {
                    st.blocks.close(&mut out);
                    let (reason, sequence) = stop_reason(&d);
                    out.push(json!({"type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": usage(d.prompt_tokens, d.cached_tokens, d.completion_tokens)}));
                    out.push(json!({"type": "message_stop"}));
                    st.finished = true;
                }
                Some(Event::Failed(e)) => {
                    out.push(super::error_body(&e));
                    st.finished = true;
                }
                Some(Event::Started { .. }) => {}
                None => {
                    out.push(super::error_body(&ApiError::internal("the engine stopped mid-reply")));
                    st.finished = true;
                }
            }
            st.pending = out;
        }
    })
}
