//! A reply as an OpenAI Responses object: the engine's deltas become output items — `reasoning`, `message` (one
//! `output_text` part), `function_call` — in the order written, whole or streamed as the typed events
//! (`response.created`, `response.output_item.added`, `response.output_text.delta`, …, `response.completed`), each
//! with its `sequence_number`. The finished response is stored (when `store` is on) before the client hears the end.

use super::Meta;
use crate::api::{Begun, CancelOnDrop};
use crate::error::ApiError;
use crate::sched::events::EventsRx;
use crate::sched::{Delta, Done, Event};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use std::convert::Infallible;

/// Builds the output items and the events that tell them.
#[derive(Default)]
struct Output {
    /// Item ids are the response's suffix and a count.
    tag: String,
    items: Vec<Value>,
    /// The kind of the last item while it is still being written (`reasoning` or `message`).
    open: Option<&'static str>,
    /// Whitespace with no message open (a model's newline before a call is not an answer).
    held: String,
}

impl Output {
    fn id(&self, prefix: &str) -> String {
        format!("{prefix}_{}{:02x}", self.tag, self.items.len())
    }

    fn close(&mut self, ev: &mut Vec<Value>) {
        let Some(kind) = self.open.take() else { return };
        let at = self.items.len() - 1;
        let item = &mut self.items[at];
        item["status"] = json!("completed");
        let id = item["id"].clone();
        if kind == "message" {
            let text = item["content"][0]["text"].clone();
            ev.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": at, "content_index": 0, "text": text, "logprobs": []}));
            ev.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": at, "content_index": 0, "part": item["content"][0]}));
        } else {
            let text = item["content"][0]["text"].clone();
            ev.push(json!({"type": "response.reasoning_text.done", "item_id": id, "output_index": at, "content_index": 0, "text": text}));
        }
        ev.push(json!({"type": "response.output_item.done", "output_index": at, "item": item}));
    }

    fn append(&mut self, kind: &'static str, text: &str, ev: &mut Vec<Value>) {
        if self.open != Some(kind) {
            self.close(ev);
            let (id, at) = (self.id(if kind == "message" { "msg" } else { "rs" }), self.items.len());
            let item = if kind == "message" {
                json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []})
            } else {
                json!({"type": "reasoning", "id": id, "summary": [], "content": []})
            };
            ev.push(json!({"type": "response.output_item.added", "output_index": at, "item": item}));
            let part = if kind == "message" {
                json!({"type": "output_text", "text": "", "annotations": []})
            } else {
                json!({"type": "reasoning_text", "text": ""})
            };
            ev.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": at, "content_index": 0, "part": part}));
            let mut item = item;
            item["content"] = json!([part]);
            self.items.push(item);
            self.open = Some(kind);
        }
        let at = self.items.len() - 1;
        let item = &mut self.items[at];
        let all = format!("{}{text}", item["content"][0]["text"].as_str().unwrap_or_default());
        item["content"][0]["text"] = json!(all);
        let name = if kind == "message" { "response.output_text.delta" } else { "response.reasoning_text.delta" };
        let mut e = json!({"type": name, "item_id": item["id"], "output_index": at, "content_index": 0, "delta": text});
        if kind == "message" {
            e["logprobs"] = json!([]);
        }
        ev.push(e);
    }

    fn push(&mut self, d: Delta, ev: &mut Vec<Value>) {
        if !d.reasoning.is_empty() {
            self.append("reasoning", &d.reasoning, ev);
        }
        if !d.content.is_empty() {
            if self.open == Some("message") {
                self.append("message", &d.content, ev);
            } else {
                self.held.push_str(&d.content);
                if !self.held.trim().is_empty() {
                    let text = std::mem::take(&mut self.held);
                    self.append("message", &text, ev);
                }
            }
        }
        for (call_id, call) in d.tool_calls {
            self.close(ev);
            self.held.clear();
            let (id, at) = (self.id("fc"), self.items.len());
            let item = json!({"type": "function_call", "id": id, "call_id": call_id, "name": call.name, "arguments": "", "status": "in_progress"});
            ev.push(json!({"type": "response.output_item.added", "output_index": at, "item": item}));
            ev.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": at, "delta": call.arguments}));
            ev.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": at, "name": call.name, "arguments": call.arguments}));
            let mut item = item;
            item["arguments"] = json!(call.arguments);
            item["status"] = json!("completed");
            ev.push(json!({"type": "response.output_item.done", "output_index": at, "item": item}));
            self.items.push(item);
        }
    }
}

/// The response object: `status` `in_progress`, `completed`, or `incomplete` (the length limit).
fn object(meta: &Meta, items: &[Value], done: Option<&Done>, b: (usize, usize)) -> Value {
    let (status, incomplete) = match done {
        None => ("in_progress", Value::Null),
        Some(d) if d.finish_reason == "length" => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(_) => ("completed", Value::Null),
    };
    let (prompt, cached) = done.map_or(b, |d| (d.prompt_tokens, d.cached_tokens));
    let output = done.map_or(0, |d| d.completion_tokens);
    let mut o = json!({
        "id": meta.id, "object": "response", "created_at": meta.created, "status": status, "model": meta.model,
        "output": items, "error": null, "incomplete_details": incomplete,
        "previous_response_id": meta.previous, "store": meta.store, "max_output_tokens": meta.max_output_tokens,
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                  "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + output},
        "instructions": null, "tools": [], "tool_choice": "auto", "parallel_tool_calls": true,
        "temperature": 1.0, "top_p": 1.0, "text": {"format": {"type": "text"}}, "metadata": {},
    });
    for (k, v) in &meta.echo {
        o[k] = v.clone();
    }
    if done.is_some_and(|_| items.iter().any(|i| i["type"] == "message")) {
        let text: String =
            items.iter().filter(|i| i["type"] == "message").filter_map(|i| i["content"][0]["text"].as_str()).collect();
        o["output_text"] = json!(text);
    }
    o
}

/// The whole reply, stored when asked.
pub(super) async fn whole(meta: Meta, mut b: Begun) -> Result<Response, ApiError> {
    let mut out = Output { tag: meta.tag(), ..Default::default() };
    let mut ev = Vec::new();
    let done = loop {
        match b.rx.recv().await {
            Some(Event::Delta(d)) => out.push(d, &mut ev),
            Some(Event::Done(d)) => break d,
            Some(Event::Failed(e)) => return Err(e),
            Some(Event::Started { .. }) => {}
            None => return Err(ApiError::internal("the engine stopped mid-reply")),
        }
    };
    out.close(&mut ev);
    let response = object(&meta, &out.items, Some(&done), (0, 0));
    meta.keep(&out.items, &response).await?;
    Ok(axum::Json(response).into_response())
}

struct Streaming {
    meta: Meta,
    rx: EventsRx,
    _guard: CancelOnDrop,
    out: Output,
    pending: Vec<Value>,
    seq: u64,
    finished: bool,
}

/// The reply as typed server-sent events.
pub(super) fn stream(meta: Meta, b: Begun) -> Response {
    let start = object(&meta, &[], None, (b.prompt_tokens, b.cached_tokens));
    let pending = vec![
        json!({"type": "response.created", "response": start}),
        json!({"type": "response.in_progress", "response": start}),
    ];
    let out = Output { tag: meta.tag(), ..Default::default() };
    let st = Streaming { meta, rx: b.rx, _guard: b.guard, out, pending, seq: 0, finished: false };
    Sse::new(events(st)).into_response()
}

fn events(st: Streaming) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold(st, |mut st| async move {
        loop {
            if !st.pending.is_empty() {
                let mut v = st.pending.remove(0);
                v["sequence_number"] = json!(st.seq);
                st.seq += 1;
                let name = v["type"].as_str().unwrap_or("message").to_string();
                return Some((Ok(SseEvent::default().event(name).data(v.to_string())), st));
            }
            if st.finished {
                return None;
            }
            let mut ev = Vec::new();
            match st.rx.recv().await {
                Some(Event::Delta(d)) => st.out.push(d, &mut ev),
                Some(Event::Done(d)) => {
                    st.out.close(&mut ev);
                    let response = object(&st.meta, &st.out.items, Some(&d), (0, 0));
                    match st.meta.keep(&st.out.items, &response).await {
                        Ok(()) => {
                            let name = if response["status"] == "incomplete" {
                                "response.incomplete"
                            } else {
                                "response.completed"
                            };
                            ev.push(json!({"type": name, "response": response}));
                        }
                        Err(e) => ev.push(error_event(&e)),
                    }
                    st.finished = true;
                }
                Some(Event::Failed(e)) => {
                    ev.push(error_event(&e));
                    st.finished = true;
                }
                Some(Event::Started { .. }) => {}
                None => {
                    ev.push(error_event(&ApiError::internal("the engine stopped mid-reply")));
                    st.finished = true;
                }
            }
            st.pending = ev;
        }
    })
}

fn error_event(e: &ApiError) -> Value {
    json!({"type": "error", "code": e.code.unwrap_or(e.kind), "message": e.message, "param": e.param})
}
