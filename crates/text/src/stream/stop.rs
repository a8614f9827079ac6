//! Stop strings: the reply ends where one of them begins, and the stop string itself is not part of it.

use super::partial_tag_len;

/// The stop-string matcher of one reply.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    /// The stop string the reply ended at (the earliest in the text; of two starting there, the first given).
    matched: Option<String>,
}

impl StopMatcher {
    /// A matcher for these strings (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new(), matched: None }
    }

    /// Whether a stop string has been seen.
    pub fn stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The stop string seen, if one was (Anthropic's `stop_sequence` names it).
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Feeds the next delta; returns the text that is certainly reply. After a stop string, nothing more.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped() {
            return String::new();
        }
        self.held.push_str(text);
        let first = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s))).min_by_key(|m| m.0);
        if let Some((pos, s)) = first {
            self.matched = Some(s.clone());
            let out = self.held[..pos].to_string();
            self.held.clear();
            return out;
        }
        let keep = self.stops.iter().map(|s| partial_tag_len(&self.held, s)).max().unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The reply ended without a stop string: what was held back is reply after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}
