//! One reply's text on its way out: the checks a prepared prompt must pass, and the token pieces turned into OpenAI
//! deltas (stop strings, `<think>` traces, tool calls) sent over the job's channel.

use super::{Delta, Event, Job};
use crate::error::ApiError;
use kvad_engine::seam::{Piece, Prepared, Stepped};
use kvad_text::stream::{ReasoningSplitter, ReplyParser, Segment, StopMatcher, ToolCallParser};
use std::sync::atomic::Ordering;

/// Checks a prepared prompt against the model (context, `max_tokens`, `logit_bias` ids) and settles `max_tokens`
/// (0: up to the context's end).
pub fn check(job: &mut Job, p: &Prepared) -> Result<(), ApiError> {
    let room = p.context.saturating_sub(p.prompt_tokens);
    if room == 0 {
        // The field the prompt came in: a chat's messages, a completion's prompt.
        let field = match job.prompt {
            kvad_engine::seam::Prompt::Chat { .. } => "messages",
            kvad_engine::seam::Prompt::Text(_) => "prompt",
        };
        return Err(ApiError::bad_field(
            field,
            format!("the prompt is {} tokens; the model's context is {}", p.prompt_tokens, p.context),
        ));
    }
    if job.params.max_tokens > room && job.clamp_max_tokens {
        job.params.max_tokens = room;
    }
    if job.params.max_tokens > room {
        return Err(ApiError::bad_field(
            "max_tokens",
            format!(
                "max_tokens = {}: the prompt is {} tokens and the model's context is {}, so at most {room} can be generated",
                job.params.max_tokens, p.prompt_tokens, p.context
            ),
        ));
    }
    if let Some((id, _)) = job.params.options.logit_bias.iter().find(|(id, _)| *id as usize >= p.vocab) {
        return Err(ApiError::bad_field(
            "logit_bias",
            format!("logit_bias: token id {id} is not below the vocabulary size {}", p.vocab),
        ));
    }
    if job.params.max_tokens == 0 {
        job.params.max_tokens = room;
    }
    // A forced call's grammar writes Hermes blocks: a model whose template teaches another format would not be
    // understood.
    if let Some(c) = &job.params.options.constraint {
        if c.field == "tool_choice" && p.tool_format != kvad_text::stream::ToolFormat::Hermes {
            return Err(ApiError::unsupported(
                "tool_choice",
                format!(
                    "tool_choice forces a call, which kvad writes in the Hermes <tool_call> form; model {}'s template \
                     teaches the {:?} form (tool_choice auto works; or give it a Hermes template with --chat-template)",
                    p.model, p.tool_format
                ),
            ));
        }
    }
    // A reasoning model's trace stays free: the constraint holds the answer after `</think>`, unless the prompt
    // closed the trace already (thinking turned off: the template wrote an empty one).
    if let Some(c) = job.params.options.constraint.as_mut() {
        if job.parse_reasoning && !p.text.trim_end().ends_with("</think>") {
            c.after = Some("</think>".into());
        }
    }
    Ok(())
}

/// A refusal in the words of the request's own API: the Responses API calls the prompt `input` and the length
/// limit `max_output_tokens` where the checks above (and the prompt reader) say `messages` and `max_tokens`.
pub fn as_sent(job: &Job, mut e: ApiError) -> ApiError {
    if job.endpoint != "/v1/responses" {
        return e;
    }
    for (ours, theirs) in [("messages", "input"), ("max_tokens", "max_output_tokens")] {
        if e.param.as_deref() == Some(ours) {
            e.param = Some(theirs.to_string());
            e.message = e.message.replace(ours, theirs);
        }
    }
    e
}

fn call_id(n: usize) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("call_{:x}{n:02x}", nanos & 0xffff_ffff_ffff)
}

/// Why a reply stopped, as the engine loop sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// An end token or a stop string.
    Stop,
    /// `max_tokens` or the context's end.
    Length,
    /// The client went away.
    Cancelled,
    /// The server's shutdown timeout passed: the reply ends here, as cut short as by `max_tokens`.
    Shutdown,
    /// The client left its streamed reply unread for `[server] stall_timeout`.
    Stalled,
}

/// A reply's parsers and counts.
pub struct Reply {
    parser: ReplyParser,
    stop: StopMatcher,
    calls: usize,
    /// One call at most (`Job::one_call`): nothing after the first is sent, not even the rest of its token.
    one_call: bool,
    /// Tokens generated (an end token included).
    pub tokens: usize,
}

impl Reply {
    /// Parsers for this job and prompt.
    pub fn new(job: &Job, p: &Prepared) -> Self {
        let reasoning = job.parse_reasoning.then(|| {
            if p.text.trim_end().ends_with("<think>") {
                ReasoningSplitter::inside_trace()
            } else {
                ReasoningSplitter::new()
            }
        });
        Reply {
            parser: ReplyParser::new(reasoning, job.parse_tools.then(|| ToolCallParser::for_format(p.tool_format))),
            stop: StopMatcher::new(job.stop.clone()),
            calls: 0,
            one_call: job.one_call,
            tokens: 0,
        }
    }

    fn collect(&mut self, segments: Vec<Segment>, delta: &mut Delta) {
        for s in segments {
            if self.one_call && self.calls > 0 {
                return;
            }
            match s {
                Segment::Content(t) => delta.content.push_str(&t),
                Segment::Reasoning(t) => delta.reasoning.push_str(&t),
                Segment::ToolCall(c) => {
                    delta.tool_calls.push((call_id(self.calls), c));
                    self.calls += 1;
                }
                Segment::Markup(_) => {}
            }
        }
    }

    fn piece(&mut self, job: &Job, piece: Piece) -> bool {
        let mut delta = Delta::default();
        let text = self.stop.push(&piece.text);
        let segments = self.parser.push(&text);
        self.collect(segments, &mut delta);
        delta.logprobs.extend(piece.logprob);
        if !delta.is_empty() && job.events.send(Event::Delta(delta)).is_err() {
            job.cancel.store(true, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Takes one sampled token; returns why the reply ends here, if it does.
    pub fn token(&mut self, job: &Job, s: Stepped) -> Option<Stop> {
        self.tokens += 1;
        if job.cancel.load(Ordering::SeqCst) {
            return Some(Stop::Cancelled);
        }
        if s.end {
            return Some(Stop::Stop);
        }
        if !self.piece(job, s.piece) {
            return Some(Stop::Cancelled);
        }
        if self.stop.stopped() || (self.one_call && self.calls > 0) {
            Some(Stop::Stop)
        } else if self.tokens >= job.params.max_tokens || s.full {
            Some(Stop::Length)
        } else {
            None
        }
    }

    /// The stop string the reply ended at, if one did.
    pub fn stop_sequence(&self) -> Option<String> {
        self.stop.matched().map(str::to_string)
    }

    /// Sends what the parsers held back (`rest`: what the decoder held) and names the finish reason.
    pub fn finish(&mut self, job: &Job, rest: String, why: Stop) -> &'static str {
        match why {
            Stop::Cancelled => return "cancelled",
            Stop::Stalled => return "stalled",
            _ => {}
        }
        if !rest.is_empty() && !self.stop.stopped() {
            self.piece(job, Piece { text: rest, logprob: None });
        }
        let mut delta = Delta::default();
        if !self.stop.stopped() {
            let tail = self.stop.finish();
            let segments = self.parser.push(&tail);
            self.collect(segments, &mut delta);
        }
        let segments = self.parser.finish();
        self.collect(segments, &mut delta);
        if !delta.is_empty() {
            let _ = job.events.send(Event::Delta(delta));
        }
        if self.calls > 0 {
            "tool_calls"
        } else if why == Stop::Stop {
            "stop"
        } else {
            "length"
        }
    }
}
