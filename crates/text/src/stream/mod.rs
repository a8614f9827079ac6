//! Streaming parsers over a model's reply text: stop strings, the `<think>` reasoning trace, and tool calls in the
//! format the model's template teaches (Hermes `<tool_call>` blocks, Mistral, DeepSeek, Llama 3.x JSON).
//!
//! A tag is several tokens (`<`, `think`, `>`), so none of these can wait for the whole reply, and none can pass
//! text through blindly either. Each holds back only the text that might still become its tag and lets everything
//! else out at once. Every byte of the input comes out in exactly one [`Segment`] (tags and the whitespace that
//! belongs to the format come out as [`Segment::Markup`]), so the pieces always reassemble to the model's text.

mod formats;
mod reasoning;
mod stop;
mod tools;

pub use formats::ToolFormat;
pub use reasoning::ReasoningSplitter;
pub use stop::StopMatcher;
pub use tools::{ToolCall, ToolCallParser};

/// One classified piece of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// The answer.
    Content(String),
    /// The model's working (inside `<think>`…`</think>`).
    Reasoning(String),
    /// A complete, well-formed tool call.
    ToolCall(ToolCall),
    /// Tags and format whitespace: part of the model's text, not of the answer.
    Markup(String),
}

impl Segment {
    /// The model text this segment came from.
    pub fn raw(&self) -> &str {
        match self {
            Segment::Content(s) | Segment::Reasoning(s) | Segment::Markup(s) => s,
            Segment::ToolCall(c) => &c.raw,
        }
    }
}

/// Joins neighbouring segments of the same text kind (tool calls stay apart), dropping empty ones. Two ways of
/// splitting the same reply into deltas give the same coalesced segments.
pub fn coalesce(segments: impl IntoIterator<Item = Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for s in segments {
        // A call with no text of its own (a later call of a Mistral or DeepSeek block) is still a call.
        if s.raw().is_empty() && !matches!(s, Segment::ToolCall(_)) {
            continue;
        }
        match (out.last_mut(), s) {
            (Some(Segment::Content(a)), Segment::Content(b))
            | (Some(Segment::Reasoning(a)), Segment::Reasoning(b))
            | (Some(Segment::Markup(a)), Segment::Markup(b)) => a.push_str(&b),
            (_, s) => out.push(s),
        }
    }
    out
}

/// The whole reply pipeline of one request: reasoning first (when the model reasons), then tool calls in what is
/// left of the answer (when the request offered tools).
#[derive(Debug, Clone)]
pub struct ReplyParser {
    reasoning: Option<ReasoningSplitter>,
    tools: Option<ToolCallParser>,
}

impl ReplyParser {
    /// A pipeline; `None` stages pass their text through as content.
    pub fn new(reasoning: Option<ReasoningSplitter>, tools: Option<ToolCallParser>) -> Self {
        ReplyParser { reasoning, tools }
    }

    /// Feeds the next delta of the reply.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        let first = match &mut self.reasoning {
            Some(r) => r.push(text),
            None => vec![Segment::Content(text.to_string())],
        };
        self.through_tools(first, false)
    }

    /// The reply has ended: everything held back comes out.
    pub fn finish(&mut self) -> Vec<Segment> {
        let first = match &mut self.reasoning {
            Some(r) => r.finish(),
            None => Vec::new(),
        };
        self.through_tools(first, true)
    }

    fn through_tools(&mut self, segments: Vec<Segment>, finish: bool) -> Vec<Segment> {
        let Some(tools) = &mut self.tools else {
            return segments;
        };
        let mut out = Vec::new();
        for s in segments {
            match s {
                Segment::Content(t) => out.extend(tools.push(&t)),
                other => out.push(other),
            }
        }
        if finish {
            out.extend(tools.finish());
        }
        out
    }
}

/// The length of the longest suffix of `buf` that is a proper prefix of `tag` (text that might still become it).
pub(crate) fn partial_tag_len(buf: &str, tag: &str) -> usize {
    let start = buf.len().saturating_sub(tag.len().saturating_sub(1));
    (start..buf.len()).find(|&i| buf.is_char_boundary(i) && tag.starts_with(&buf[i..])).map_or(0, |i| buf.len() - i)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod format_tests;
