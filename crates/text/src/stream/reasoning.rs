//! Separating a reasoning trace (`<think>`…`</think>`) from the answer as the reply streams.
//!
//! Rules: the opening tag counts only before any other text (leading whitespace aside): a `<think>` after the model
//! has said something is a model writing about tags. Inside a trace the first `</think>` closes it (a nested
//! `<think>` is just text of the trace). A trace the budget cut off is still a trace. Whitespace right after
//! `</think>` is format, not answer.

use super::{partial_tag_len, Segment};

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the reply may still open a trace.
    Start,
    /// Inside the trace.
    Reasoning,
    /// Just after `</think>`: whitespace is held as markup.
    AfterClose,
    /// The answer: everything passes.
    Content,
}

/// The streaming reasoning splitter of one reply.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    state: State,
    held: String,
}

impl Default for ReasoningSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl ReasoningSplitter {
    /// A splitter for a reply that may open with `<think>`.
    pub fn new() -> Self {
        ReasoningSplitter { state: State::Start, held: String::new() }
    }

    /// A splitter for a reply whose prompt already opened the trace (templates that end with `<think>`).
    pub fn inside_trace() -> Self {
        ReasoningSplitter { state: State::Reasoning, held: String::new() }
    }

    /// Feeds the next delta.
    pub fn push(&mut self, text: &str) -> Vec<Segment> {
        let mut out = Vec::new();
        self.held.push_str(text);
        loop {
            let buf = std::mem::take(&mut self.held);
            match self.state {
                State::Content => {
                    out.push(Segment::Content(buf));
                    break;
                }
                State::Start => {
                    let body = buf.trim_start();
                    if let Some(rest) = body.strip_prefix(OPEN) {
                        let tag_end = buf.len() - rest.len();
                        out.push(Segment::Markup(buf[..tag_end].to_string()));
                        self.held = rest.to_string();
                        self.state = State::Reasoning;
                    } else if OPEN.starts_with(body) {
                        self.held = buf;
                        break;
                    } else {
                        out.push(Segment::Content(buf));
                        self.state = State::Content;
                        break;
                    }
                }
                State::Reasoning => {
                    if let Some(pos) = buf.find(CLOSE) {
                        out.push(Segment::Reasoning(buf[..pos].to_string()));
                        out.push(Segment::Markup(CLOSE.to_string()));
                        self.held = buf[pos + CLOSE.len()..].to_string();
                        self.state = State::AfterClose;
                    } else {
                        let keep = partial_tag_len(&buf, CLOSE);
                        out.push(Segment::Reasoning(buf[..buf.len() - keep].to_string()));
                        self.held = buf[buf.len() - keep..].to_string();
                        break;
                    }
                }
                State::AfterClose => {
                    let body = buf.trim_start();
                    if body.is_empty() {
                        self.held = buf;
                        break;
                    }
                    out.push(Segment::Markup(buf[..buf.len() - body.len()].to_string()));
                    self.held = body.to_string();
                    self.state = State::Content;
                }
            }
        }
        out.retain(|s| !s.raw().is_empty());
        out
    }

    /// The reply ended: what was held comes out as what it was heading to be.
    pub fn finish(&mut self) -> Vec<Segment> {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return Vec::new();
        }
        vec![match self.state {
            State::Start | State::Content => Segment::Content(held),
            State::Reasoning => Segment::Reasoning(held),
            State::AfterClose => Segment::Markup(held),
        }]
    }
}
