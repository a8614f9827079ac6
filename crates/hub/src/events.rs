//! A pull's progress as data: the events `POST /api/pull` streams and `kvad pull --json` prints, one vocabulary for
//! both. [`Recorder`] turns [`Progress`] calls into events (advances coalesced, so a large file is not thousands of
//! lines); [`PullEvent::replay`] turns them back into `Progress` calls, so the CLI draws a server's pull with the
//! same bars it draws its own.

use crate::fetch::{PlannedFile, Progress};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A file in a plan event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Its name in the repo.
    pub name: String,
    /// Bytes, when the server said.
    pub size: Option<u64>,
    /// Already complete on the machine that pulls.
    pub cached: bool,
}

/// One event of a pull. Serialised with an `"event"` tag: `plan`, `start`, `advance`, `finish`, `note`, `done`,
/// `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PullEvent {
    /// What will be fetched, before any weight: every file with its size and whether it is already here.
    Plan {
        /// `owner/name at <commit>`, or the Ollama tag.
        title: String,
        /// The files.
        files: Vec<PlanFile>,
    },
    /// A file starts downloading (after `resumed_from` bytes a previous attempt left).
    Start {
        /// Its name.
        file: String,
        /// Its size, when known.
        size: Option<u64>,
        /// Bytes already on disk.
        resumed_from: u64,
    },
    /// Bytes arrived: `bytes` since the last advance, `done` in all for this file (resumed bytes included).
    Advance {
        /// The file.
        file: String,
        /// New bytes.
        bytes: u64,
        /// Bytes of the file on disk now.
        done: u64,
    },
    /// A file is complete.
    Finish {
        /// The file.
        file: String,
        /// Its bytes on disk.
        bytes: u64,
    },
    /// A line for the user (files not read, an adapter's verdict, where a model came from).
    Note {
        /// The line.
        line: String,
    },
    /// The pull is complete.
    Done {
        /// The name as asked.
        model: String,
        /// Where it is on the pulling machine: a snapshot directory, or an Ollama GGUF.
        path: String,
        /// The commit (None for an Ollama tag).
        commit: Option<String>,
        /// Bytes this pull transferred.
        transferred: u64,
    },
    /// The pull failed; `error` is OpenAI's error object (`message`, `type`, `param`, `code`).
    Error {
        /// The error.
        error: serde_json::Value,
    },
}

impl PullEvent {
    /// Plays a progress event onto a [`Progress`] (`done` and `error` are the caller's to handle).
    pub fn replay(&self, p: &mut dyn Progress) {
        match self {
            PullEvent::Plan { title, files } => {
                let files: Vec<PlannedFile> = files
                    .iter()
                    .map(|f| PlannedFile { name: f.name.clone(), size: f.size, cached: f.cached })
                    .collect();
                p.plan(title, &files);
            }
            PullEvent::Start { file, size, resumed_from } => p.start(file, *size, *resumed_from),
            PullEvent::Advance { bytes, .. } => p.advance(*bytes),
            PullEvent::Finish { file, .. } => p.finish(file),
            PullEvent::Note { line } => p.note(line),
            PullEvent::Done { .. } | PullEvent::Error { .. } => {}
        }
    }
}

/// How often a file's advances are sent at most.
pub const ADVANCE_EVERY: Duration = Duration::from_millis(200);

/// A [`Progress`] that hands each event to `send`, coalescing advances to one per [`ADVANCE_EVERY`].
pub struct Recorder<F: FnMut(PullEvent)> {
    send: F,
    file: String,
    done: u64,
    pending: u64,
    last: Instant,
    total: u64,
}

impl<F: FnMut(PullEvent)> Recorder<F> {
    /// Events go to `send`.
    pub fn new(send: F) -> Self {
        Recorder { send, file: String::new(), done: 0, pending: 0, last: Instant::now(), total: 0 }
    }

    /// Bytes that arrived through this recorder, over every file.
    pub fn transferred(&self) -> u64 {
        self.total
    }

    fn flush(&mut self) {
        if self.pending > 0 {
            let ev = PullEvent::Advance { file: self.file.clone(), bytes: self.pending, done: self.done };
            (self.send)(ev);
            self.pending = 0;
        }
        self.last = Instant::now();
    }
}

impl<F: FnMut(PullEvent)> Progress for Recorder<F> {
    fn plan(&mut self, title: &str, files: &[PlannedFile]) {
        let files = files.iter().map(|f| PlanFile { name: f.name.clone(), size: f.size, cached: f.cached }).collect();
        (self.send)(PullEvent::Plan { title: title.into(), files });
    }
    fn start(&mut self, file: &str, size: Option<u64>, resumed_from: u64) {
        self.file = file.into();
        self.done = resumed_from;
        self.pending = 0;
        self.last = Instant::now();
        (self.send)(PullEvent::Start { file: file.into(), size, resumed_from });
    }
    fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        self.pending += bytes;
        self.total += bytes;
        if self.last.elapsed() >= ADVANCE_EVERY {
            self.flush();
        }
    }
    fn finish(&mut self, file: &str) {
        self.flush();
        (self.send)(PullEvent::Finish { file: file.into(), bytes: self.done });
    }
    fn note(&mut self, line: &str) {
        (self.send)(PullEvent::Note { line: line.into() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_are_coalesced_and_flushed_before_the_finish_and_events_round_trip() {
        let mut got = Vec::new();
        let mut r = Recorder::new(|e| got.push(e));
        r.start("w.safetensors", Some(30), 10);
        for _ in 0..20 {
            r.advance(1);
        }
        r.finish("w.safetensors");
        assert_eq!(got.len(), 3, "start, one advance, finish: {got:?}");
        assert_eq!(got[1], PullEvent::Advance { file: "w.safetensors".into(), bytes: 20, done: 30 });
        assert_eq!(got[2], PullEvent::Finish { file: "w.safetensors".into(), bytes: 30 });
        let line = serde_json::to_string(&got[0]).unwrap();
        assert_eq!(line, r#"{"event":"start","file":"w.safetensors","size":30,"resumed_from":10}"#);
        assert_eq!(serde_json::from_str::<PullEvent>(&line).unwrap(), got[0]);
    }
}
