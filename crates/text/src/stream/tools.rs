//! Hermes-style tool calls (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`), the format of Qwen and most
//! open models, parsed out of the answer as it streams; inside the same tags, Qwen3-Coder's XML form
//! (`<function=NAME><parameter=KEY>VALUE</parameter>…</function>`) too.
//!
//! Run this only for a request that offered tools: otherwise `<tool_call>` in a reply is a model writing about the
//! format. A call is JSON that must be complete before it is known to be a call, so a block is buffered whole and
//! comes out as one [`Segment::ToolCall`]. A block whose JSON does not parse, or that was cut off before it closed,
//! comes back as content, tags and all. Whitespace between and after calls is format ([`Segment::Markup`]).

use super::{partial_tag_len, Segment};
use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// A parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments: a JSON object, serialised.
    pub arguments: String,
    /// The model text of the whole block, tags included.
    pub raw: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    InCall,
    AfterCall,
}

/// The streaming tool-call parser of one reply.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    state: State,
    held: String,
    /// Another format's parser, when the model's template teaches one.
    other: Option<super::formats::Held>,
}

impl Default for ToolCallParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolCallParser {
    /// A parser at the start of the answer.
    pub fn new() -> Self {
        ToolCallParser { state: State::Text, held: String::new(), other: None }
    }

    /// A parser for the calls of `format` (see [`super::ToolFormat::of_template`]).
    pub fn for_format(format: super::ToolFormat) -> Self {
        let other = (format != super::ToolFormat::Hermes).then(|| super::formats::Held::new(format));
        ToolCallParser { other, ..Self::new() }
    }

    /// Feeds the next delta of the answer.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        if let Some(o) = &mut self.other {
            return o.push(text);
        }
        let mut out = Vec::new();
        self.held.push_str(text);
        loop {
            let buf = std::mem::take(&mut self.held);
            match self.state {
                State::Text => {
                    if let Some(pos) = buf.find(OPEN) {
                        out.push(Segment::Content(buf[..pos].to_string()));
                        self.held = buf[pos + OPEN.len()..].to_string();
                        self.state = State::InCall;
                    } else {
                        let keep = partial_tag_len(&buf, OPEN);
                        out.push(Segment::Content(buf[..buf.len() - keep].to_string()));
                        self.held = buf[buf.len() - keep..].to_string();
                        break;
                    }
                }
                State::InCall => {
                    let Some(pos) = buf.find(CLOSE) else {
                        self.held = buf;
                        break;
                    };
                    let inner = &buf[..pos];
                    let raw = format!("{OPEN}{inner}{CLOSE}");
                    out.push(match parse_call(inner) {
                        Some((name, arguments)) => Segment::ToolCall(ToolCall { name, arguments, raw }),
                        None => Segment::Content(raw),
                    });
                    self.held = buf[pos + CLOSE.len()..].to_string();
                    self.state = State::AfterCall;
                }
                State::AfterCall => {
                    let body = buf.trim_start();
                    let ws = &buf[..buf.len() - body.len()];
                    if body.starts_with(OPEN) {
                        out.push(Segment::Markup(ws.to_string()));
                        self.held = body.to_string();
                        self.state = State::Text;
                    } else if OPEN.starts_with(body) {
                        self.held = buf;
                        break;
                    } else {
                        self.held = buf;
                        self.state = State::Text;
                    }
                }
            }
        }
        out.retain(|s| !s.raw().is_empty());
        out
    }

    /// The answer ended: a block still open was cut off and comes back as content.
    pub fn finish(&mut self) -> Vec<Segment> {
        if let Some(o) = &mut self.other {
            return o.finish();
        }
        let held = std::mem::take(&mut self.held);
        let out = match self.state {
            State::Text => vec![Segment::Content(held)],
            State::InCall => vec![Segment::Content(format!("{OPEN}{held}"))],
            State::AfterCall => {
                let body = held.trim_start();
                if body.is_empty() {
                    vec![Segment::Markup(held)]
                } else {
                    vec![Segment::Content(held)]
                }
            }
        };
        self.state = State::Text;
        out.into_iter().filter(|s| !s.raw().is_empty()).collect()
    }
}

/// `{"name": "f", "arguments": {...}}` (arguments may also be a JSON string holding an object, or absent), or
/// Qwen3-Coder's XML form.
fn parse_call(inner: &str) -> Option<(String, String)> {
    if inner.trim_start().starts_with("<function=") {
        return parse_xml_call(inner.trim());
    }
    let v: Value = serde_json::from_str(inner.trim()).ok()?;
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = match obj.get("arguments").or_else(|| obj.get("parameters")) {
        None => Value::Object(Default::default()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s).ok()? {
            a @ Value::Object(_) => a,
            _ => return None,
        },
        Some(_) => return None,
    };
    Some((name.to_string(), args.to_string()))
}

/// Qwen3-Coder's form: `<function=NAME>` then `<parameter=KEY>VALUE</parameter>` for each argument, then
/// `</function>`, whitespace between. A value is written bare, one newline on each side taken as format; it is
/// read as JSON where it is JSON other than a bare string (a number, `true`, an object), else as the text itself
/// (the parser has no schema to go by, as Qwen's own has).
fn parse_xml_call(inner: &str) -> Option<(String, String)> {
    let rest = inner.strip_prefix("<function=")?;
    let (name, mut rest) = rest.split_once('>')?;
    let name = name.trim();
    if name.is_empty() || name.contains('<') {
        return None;
    }
    let mut args = serde_json::Map::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("</function>") {
            return after.trim().is_empty().then(|| (name.to_string(), Value::Object(args).to_string()));
        }
        let body = rest.strip_prefix("<parameter=")?;
        let (key, body) = body.split_once('>')?;
        let (value, after) = body.split_once("</parameter>")?;
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        let parsed = match serde_json::from_str::<Value>(value) {
            Ok(v) if !v.is_string() => v,
            _ => Value::String(value.to_string()),
        };
        args.insert(key.trim().to_string(), parsed);
        rest = after;
    }
}
