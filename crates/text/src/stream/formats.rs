//! Tool-call formats beside Hermes, each the one its model family's chat template teaches: Mistral's
//! `[TOOL_CALLS]` (a JSON array, or `name[ARGS]{…}` from v11 on), DeepSeek's `<｜tool▁calls▁begin｜>` markers (the
//! V3 form with a fenced JSON block and the V3.1 form with bare JSON), and Llama 3.x's answer that is one JSON
//! object (`{"name": …, "parameters": {…}}`, after `<|python_tag|>` or alone).
//!
//! These blocks have no close of their own worth streaming on (Mistral's and Llama's run to the end of the reply),
//! so a block is held whole and parsed when it closes or the reply ends. The first call carries the block's whole
//! text as its `raw`, later calls of the same block carry none, so the segments still reassemble to the reply. A
//! block that does not parse comes back as content.

use super::{partial_tag_len, Segment, ToolCall};
use serde_json::Value;

/// Which format a model writes its calls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolFormat {
    /// `<tool_call>{…}</tool_call>` (Qwen, Hermes, most open models; Qwen3-Coder's XML inside the same tags).
    #[default]
    Hermes,
    /// `[TOOL_CALLS]` then the calls (Mistral, Mixtral, Devstral).
    Mistral,
    /// `<｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>` (DeepSeek V3, R1, V3.1).
    DeepSeek,
    /// The answer is one JSON call (Llama 3.1–3.3).
    Llama3Json,
}

const MISTRAL: &str = "[TOOL_CALLS]";
const DS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";
const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolFormat {
    /// The format a chat template teaches, read from its source.
    pub fn of_template(source: &str) -> ToolFormat {
        if source.contains(MISTRAL) {
            ToolFormat::Mistral
        } else if source.contains("tool▁calls▁begin") {
            ToolFormat::DeepSeek
        } else if source.contains(PYTHON_TAG) || (source.contains("ipython") && source.contains("<|eot_id|>")) {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before anything (Llama: a call must open the answer).
    Start,
    Text,
    Block,
    /// Llama: the answer did not open with a call; the rest is content.
    Plain,
}

/// The held-block parser of one reply, for the formats other than Hermes.
#[derive(Debug, Clone)]
pub(super) struct Held {
    format: ToolFormat,
    state: State,
    held: String,
}

impl Held {
    pub(super) fn new(format: ToolFormat) -> Self {
        Held { format, state: State::Start, held: String::new() }
    }

    fn open(&self) -> &'static str {
        match self.format {
            ToolFormat::DeepSeek => DS_BEGIN,
            _ => MISTRAL,
        }
    }

    pub(super) fn push(&mut self, text: &str) -> Vec<Segment> {
        let mut out = Vec::new();
        self.held.push_str(text);
        loop {
            match self.state {
                State::Start if self.format == ToolFormat::Llama3Json => {
                    let t = self.held.trim_start();
                    if t.starts_with('{') || t.starts_with(PYTHON_TAG) {
                        self.state = State::Block;
                    } else if t.is_empty() || PYTHON_TAG.starts_with(t) {
                        break;
                    } else {
                        self.state = State::Plain;
                    }
                }
                State::Start => self.state = State::Text,
                State::Plain => {
                    out.push(Segment::Content(std::mem::take(&mut self.held)));
                    break;
                }
                State::Text => {
                    let open = self.open();
                    if let Some(pos) = self.held.find(open) {
                        out.push(Segment::Content(self.held[..pos].to_string()));
                        self.held.drain(..pos);
                        self.state = State::Block;
                    } else {
                        let keep = partial_tag_len(&self.held, open);
                        let cut = self.held.len() - keep;
                        out.push(Segment::Content(self.held[..cut].to_string()));
                        self.held.drain(..cut);
                        break;
                    }
                }
                State::Block => {
                    // DeepSeek's block closes; the others run to the end of the reply.
                    let Some(pos) = (self.format == ToolFormat::DeepSeek).then(|| self.held.find(DS_END)).flatten()
                    else {
                        break;
                    };
                    let end = pos + DS_END.len();
                    let block: String = self.held.drain(..end).collect();
                    out.extend(self.calls(block));
                    self.state = State::Text;
                }
            }
        }
        out.retain(|s| matches!(s, Segment::ToolCall(_)) || !s.raw().is_empty());
        out
    }

    pub(super) fn finish(&mut self) -> Vec<Segment> {
        let held = std::mem::take(&mut self.held);
        let out = match self.state {
            State::Block => self.calls(held),
            _ => vec![Segment::Content(held)],
        };
        self.state = State::Start;
        out.into_iter().filter(|s| matches!(s, Segment::ToolCall(_)) || !s.raw().is_empty()).collect()
    }

    /// A whole block as its calls (the first carrying the block's text), or as content when it does not parse.
    fn calls(&self, block: String) -> Vec<Segment> {
        let parsed = match self.format {
            ToolFormat::Mistral => mistral(&block),
            ToolFormat::DeepSeek => deepseek(&block),
            ToolFormat::Llama3Json => llama(&block),
            ToolFormat::Hermes => None,
        };
        match parsed {
            Some(calls) if !calls.is_empty() => calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    let raw = if i == 0 { block.clone() } else { String::new() };
                    Segment::ToolCall(ToolCall { name, arguments, raw })
                })
                .collect(),
            _ => vec![Segment::Content(block)],
        }
    }
}

/// `{"name", "arguments" | "parameters"}` as (name, arguments serialised); arguments an object or a string
/// holding one.
fn call_of(v: &Value) -> Option<(String, String)> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = match o.get("arguments").or_else(|| o.get("parameters")) {
        None => Value::Object(Default::default()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().filter(Value::is_object)?,
        Some(_) => return None,
    };
    Some((name.to_string(), args.to_string()))
}

/// Arguments written as JSON text: an object.
fn args_of(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text.trim()).ok().filter(Value::is_object).map(|v| v.to_string())
}

/// `[TOOL_CALLS][{…}, …]`, or (v11 on) `[TOOL_CALLS]name[ARGS]{…}` repeated, an optional `[CALL_ID]id` after the
/// name.
fn mistral(block: &str) -> Option<Vec<(String, String)>> {
    let rest = block.strip_prefix(MISTRAL)?.trim();
    if rest.starts_with('[') {
        let v: Value = serde_json::from_str(rest).ok()?;
        return v.as_array()?.iter().map(call_of).collect();
    }
    rest.split(MISTRAL)
        .map(|one| {
            let (head, args) = one.split_once("[ARGS]")?;
            let name = head.split("[CALL_ID]").next()?.trim();
            if name.is_empty() || name.contains(['[', '{']) {
                return None;
            }
            Some((name.to_string(), args_of(args)?))
        })
        .collect()
}

/// DeepSeek's block: calls `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>` (V3)
/// or `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` (V3.1), whitespace between.
fn deepseek(block: &str) -> Option<Vec<(String, String)>> {
    let mut rest = block.strip_prefix(DS_BEGIN)?;
    let mut calls = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(DS_END) {
            return after.is_empty().then_some(calls);
        }
        let body = rest.strip_prefix(DS_CALL)?;
        let (one, after) = body.split_once(DS_CALL_END)?;
        let (left, right) = one.split_once(DS_SEP)?;
        let call = if let Some((name, fenced)) = right.split_once("```json") {
            let json = fenced.trim_end().strip_suffix("```")?;
            (name.trim().to_string(), args_of(json)?)
        } else {
            (left.trim().to_string(), args_of(right)?)
        };
        if call.0.is_empty() {
            return None;
        }
        calls.push(call);
        rest = after;
    }
}

/// Llama 3.x: the answer is a call (`{"name", "parameters"}`), after `<|python_tag|>` or alone; several are
/// separated by `;`.
fn llama(block: &str) -> Option<Vec<(String, String)>> {
    let body = block.trim_start();
    let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body).trim();
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return call_of(&v).map(|c| vec![c]);
    }
    body.split(';').map(|one| call_of(&serde_json::from_str(one.trim()).ok()?)).collect()
}
