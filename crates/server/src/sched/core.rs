//! The scheduler's decisions, as plain data in and plain data out: who waits, whose turn it is, who joins the
//! running batch, and what the next forward passes hold. Nothing here touches a model, a channel or a clock of its
//! own (time comes in as an argument), so every rule is unit-tested with no model.
//!
//! Rules (the seed's "One model at a time, said out loud"):
//! - At most `queue` generations wait; the next is refused ([`Refusal::Full`], a 503 with Retry-After). An account
//!   may have `per_account` waiting ([`Refusal::AccountFull`], a 429), and at most `per_minute` taken in any 60 s
//!   ([`Refusal::RateLimited`], a 429 saying when the next will be taken).
//! - Whose turn: the earliest waiting request of the account served longest ago (never served counts as longest).
//!   Turns are counted in generations. Loads and unloads are jobs in the same line and nothing that arrived after
//!   one passes it.
//! - Up to `batch` replies on one model run together. Whose turn it is to join is whose turn it is to run: when
//!   that is a load, a request for another model, a request that runs alone, one that does not fit the context
//!   budget, or the batch is full, nobody joins and the batch runs down first.
//! - A joining prompt is read `chunk` tokens a pass while the others write a token each; one prompt is read at a
//!   time; its last token is read in a pass of its own part (so its logits do not depend on how it was chunked).
//! - Below `batch_from` parts a step runs each part in its own pass (the GPU's batched kernel wins only from
//!   some number of rows; on the CPU one pass wins from two).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A job's number, unique for the scheduler's life.
pub type JobId = kvad_engine::seam::SeqId;

pub use kvad_engine::seam::{Part, Work};

/// What a job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A reply from `model`; `alone` (a request that asked for no cache: benchmarks, evals) runs with nobody beside.
    Generate {
        /// The model's id.
        model: String,
        /// Run with nobody beside it.
        alone: bool,
    },
    /// Load a model into memory.
    Load {
        /// The model's id.
        model: String,
        /// The backend to load it on (`None`: the engine's default, `[server] backend`).
        backend: Option<String>,
    },
    /// Unload a model (`None`: every model).
    Unload {
        /// The model's id.
        model: Option<String>,
    },
}

impl Kind {
    fn is_generation(&self) -> bool {
        matches!(self, Kind::Generate { .. })
    }
}

/// The scheduler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Generations that may wait (`[server] queue`).
    pub queue: usize,
    /// Generations one account may have waiting (`[server] queue_per_account`).
    pub per_account: usize,
    /// Generations one account may start per minute (`[server] generations_per_minute`; None: no limit).
    pub per_minute: Option<usize>,
    /// Replies written together (`[server] batch`).
    pub batch: usize,
    /// Prompt tokens read per pass while others write (64 on the CPU, 512 on the GPU).
    pub chunk: usize,
    /// From how many parts one pass is used for a step (below it, each part takes its own pass).
    pub batch_from: usize,
    /// Each step's engine time and the gap between steps on stderr (`[server] step_trace`).
    pub trace_steps: bool,
    /// How long a streaming client may leave its reply unread before the reply is stopped (`[server]
    /// stall_timeout`; None: never).
    pub stall: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            queue: 16,
            per_account: 4,
            per_minute: None,
            batch: 4,
            chunk: 64,
            batch_from: 2,
            trace_steps: false,
            stall: Some(Duration::from_secs(60)),
        }
    }
}

/// Why a job was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The queue is full (503).
    Full {
        /// Generations waiting.
        waiting: usize,
    },
    /// The account has its limit waiting (429).
    AccountFull {
        /// The account.
        account: String,
        /// The limit.
        limit: usize,
    },
    /// The account reached its generations per minute (429).
    RateLimited {
        /// The account.
        account: String,
        /// The limit.
        limit: usize,
        /// Whole seconds until the next one is taken.
        retry_after: u64,
    },
}

/// A job in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Its number.
    pub id: JobId,
    /// Who asked.
    pub account: String,
    /// What it is.
    pub kind: Kind,
    /// When it arrived.
    pub arrived: Instant,
    /// Tokens it may hold at most (prompt + max_tokens), once the engine has read its prompt; None before.
    pub reserve: Option<usize>,
    /// Its prompt is being read, off the engine thread: the batch steps on meanwhile.
    pub reading: bool,
}

/// Where a running reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading its prompt: `left` tokens before the last one.
    Reading {
        /// Tokens left to read before the prompt's last.
        left: usize,
    },
    /// Its prompt's last token is next, by itself.
    Last,
    /// Writing its reply.
    Writing,
}

/// A reply in the batch (or the one exclusive job: a load, an unload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Its number.
    pub id: JobId,
    /// Who asked.
    pub account: String,
    /// What it is.
    pub kind: Kind,
    /// Where it is.
    pub phase: Phase,
    /// Tokens it may hold at most.
    pub reserve: usize,
}

/// What the engine thread does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do: wait for a job.
    Idle,
    /// Read this generation's prompt (template, tokens; loads its model): its reserve is needed to decide.
    Prepare(JobId),
    /// Start this generation in the batch (it has been prepared).
    Join(JobId),
    /// Run this load or unload (nothing else runs meanwhile).
    Exclusive(JobId),
    /// One step: passes in order (one pass, or one per part below `batch_from`).
    Step(Vec<Vec<Part>>),
}

/// The scheduler's state.
#[derive(Debug, Clone)]
pub struct Scheduler {
    limits: Limits,
    waiting: Vec<Waiting>,
    running: Vec<Running>,
    /// The turn at which each account was last served.
    served: HashMap<String, u64>,
    turn: u64,
    /// When each account's recent generations were taken (for the per-minute limit).
    taken: HashMap<String, VecDeque<Instant>>,
    next_id: JobId,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(limits: Limits) -> Self {
        Scheduler {
            limits,
            waiting: Vec::new(),
            running: Vec::new(),
            served: HashMap::new(),
            turn: 0,
            taken: HashMap::new(),
            next_id: 1,
        }
    }

    /// The settings.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Changes the settings while running (`PATCH /api/settings`). Nothing waiting or running is refused after the
    /// fact: a lower queue or per-account limit refuses only later submissions, and a lower batch stops joins
    /// until the running replies are fewer.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Jobs waiting, in arrival order.
    pub fn waiting(&self) -> &[Waiting] {
        &self.waiting
    }

    /// Jobs running.
    pub fn running(&self) -> &[Running] {
        &self.running
    }

    /// Generations waiting.
    pub fn depth(&self) -> usize {
        self.waiting.iter().filter(|w| w.kind.is_generation()).count()
    }

    /// Queues a job, or says why not. Loads and unloads are never refused (they are not generations).
    pub fn submit(&mut self, account: &str, kind: Kind, now: Instant) -> Result<JobId, Refusal> {
        if kind.is_generation() {
            let waiting = self.depth();
            if waiting >= self.limits.queue {
                return Err(Refusal::Full { waiting });
            }
            let mine = self.waiting.iter().filter(|w| w.account == account && w.kind.is_generation()).count();
            if mine >= self.limits.per_account {
                return Err(Refusal::AccountFull { account: account.into(), limit: self.limits.per_account });
            }
            if let Some(limit) = self.limits.per_minute {
                let times = self.taken.entry(account.to_string()).or_default();
                while times.front().is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(60)) {
                    times.pop_front();
                }
                if times.len() >= limit {
                    let oldest = times.front().copied().unwrap_or(now);
                    let wait = Duration::from_secs(60).saturating_sub(now.saturating_duration_since(oldest));
                    let retry_after = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                    return Err(Refusal::RateLimited { account: account.into(), limit, retry_after });
                }
                times.push_back(now);
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push(Waiting { id, account: account.into(), kind, arrived: now, reserve: None, reading: false });
        Ok(id)
    }

    /// Whose turn it is: among the jobs that arrived before the first waiting load or unload (which nothing
    /// passes), the earliest of the account served longest ago; the load itself when it is first in line.
    pub fn next_in_turn(&self) -> Option<&Waiting> {
        let first = self.waiting.first()?;
        if !first.kind.is_generation() {
            return Some(first);
        }
        let end = self.waiting.iter().position(|w| !w.kind.is_generation()).unwrap_or(self.waiting.len());
        // Earliest within an account is first in arrival order, so the first minimum wins ties.
        self.waiting[..end].iter().min_by_key(|w| self.served.get(&w.account).copied().unwrap_or(0))
    }

    /// Records that a generation's prompt is being read (off the engine thread): until it is, the running
    /// replies step and nothing passes it in the line.
    pub fn reading(&mut self, id: JobId) {
        if let Some(w) = self.waiting.iter_mut().find(|w| w.id == id) {
            w.reading = true;
        }
    }

    /// Records the tokens a prepared generation may hold (prompt + max_tokens).
    pub fn prepared(&mut self, id: JobId, reserve: usize) {
        if let Some(w) = self.waiting.iter_mut().find(|w| w.id == id) {
            w.reserve = Some(reserve);
            w.reading = false;
        }
    }

    /// The next thing to do. `budget` is the context (in tokens) the running model's replies share.
    pub fn decide(&self, budget: usize) -> Decision {
        if let Some(next) = self.next_in_turn() {
            if self.may_start(next, budget) {
                match (&next.kind, next.reserve) {
                    // Its prompt is being read elsewhere: the running replies step meanwhile.
                    (Kind::Generate { .. }, None) if next.reading => {}
                    (Kind::Generate { .. }, None) => return Decision::Prepare(next.id),
                    (Kind::Generate { .. }, Some(_)) => return Decision::Join(next.id),
                    _ => return Decision::Exclusive(next.id),
                }
            }
        }
        match self.step_parts() {
            parts if parts.is_empty() => Decision::Idle,
            parts if parts.len() >= self.limits.batch_from => Decision::Step(vec![parts]),
            parts => Decision::Step(parts.into_iter().map(|p| vec![p]).collect()),
        }
    }

    fn may_start(&self, next: &Waiting, budget: usize) -> bool {
        if self.running.is_empty() {
            return true;
        }
        let Kind::Generate { model, alone } = &next.kind else { return false };
        let same_model =
            self.running.iter().all(|r| matches!(&r.kind, Kind::Generate { model: m, alone: false } if m == model));
        let reading = self.running.iter().any(|r| !matches!(r.phase, Phase::Writing));
        let fits = next.reserve.is_none_or(|n| self.running.iter().map(|r| r.reserve).sum::<usize>() + n <= budget);
        !alone && same_model && !reading && self.running.len() < self.limits.batch && fits
    }

    fn step_parts(&self) -> Vec<Part> {
        self.running
            .iter()
            .filter(|r| r.kind.is_generation())
            .map(|r| Part {
                id: r.id,
                work: match r.phase {
                    Phase::Reading { left } => Work::Chunk(left.min(self.limits.chunk)),
                    Phase::Last => Work::Last,
                    Phase::Writing => Work::Decode,
                },
            })
            .collect()
    }

    /// The running model's pass rules (`batch_from`, `chunk`: [`super::backend_limits`] of the backend it is on),
    /// set as a reply joins. Replies running together share one model, so its backend decides; the server's
    /// `[server] backend` only gives the rules before anything has joined.
    pub fn set_pass_limits(&mut self, (batch_from, chunk): (usize, usize)) {
        self.limits.batch_from = batch_from;
        self.limits.chunk = chunk;
    }

    /// Moves a job from the line to running: a generation with `to_read` prompt tokens still to read (its last
    /// included, so at least 1), or a load/unload (`to_read` ignored). Counts the account's turn.
    pub fn start(&mut self, id: JobId, to_read: usize) -> bool {
        let Some(i) = self.waiting.iter().position(|w| w.id == id) else { return false };
        let w = self.waiting.remove(i);
        if w.kind.is_generation() {
            self.turn += 1;
            self.served.insert(w.account.clone(), self.turn);
        }
        let phase = match to_read {
            0 | 1 => Phase::Last,
            n => Phase::Reading { left: n - 1 },
        };
        self.running.push(Running { id, account: w.account, kind: w.kind, phase, reserve: w.reserve.unwrap_or(0) });
        true
    }

    /// Advances the parts a step ran.
    pub fn stepped(&mut self, parts: &[Part]) {
        for p in parts {
            if let Some(r) = self.running.iter_mut().find(|r| r.id == p.id) {
                r.phase = match (r.phase, p.work) {
                    (Phase::Reading { left }, Work::Chunk(n)) if left > n => Phase::Reading { left: left - n },
                    (Phase::Reading { .. }, Work::Chunk(_)) => Phase::Last,
                    _ => Phase::Writing,
                };
            }
        }
    }

    /// Removes a job wherever it is (ended, failed or cancelled). Returns whether it was there.
    pub fn remove(&mut self, id: JobId) -> bool {
        let before = self.waiting.len() + self.running.len();
        self.waiting.retain(|w| w.id != id);
        self.running.retain(|r| r.id != id);
        before != self.waiting.len() + self.running.len()
    }

    /// How many other replies are in the batch beside this one.
    pub fn beside(&self, id: JobId) -> usize {
        let n = self.running.iter().filter(|r| r.kind.is_generation()).count();
        if self.running.iter().any(|r| r.id == id) {
            n - 1
        } else {
            n
        }
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
