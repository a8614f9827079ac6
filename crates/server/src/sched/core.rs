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
//! - On the CPU ([`PassRules::pass_tokens`] None, the seed's rule) a joining prompt is read `chunk` tokens a pass
//!   while the others write a token each, one prompt at a time. On a GPU a pass carries up to `pass_tokens` rows:
//!   every reply's next token, then the chunks of as many joining prompts as fit, first joined first; newcomers
//!   join while others are still reading, so a crowd's prompts are read together rather than one after another.
//!   Either way a prompt's last token is read in a part of its own (so its logits do not depend on how it was
//!   chunked), and every running reply writes a token every step.
//! - Below `batch_from` sampling parts a step runs each in its own pass (the GPU's batched kernel wins only from
//!   some number of rows; on the CPU one pass wins from two).
//! - A reply joins only when what it may hold (prompt + max_tokens, in whole pages: [`Budget`]) fits beside what
//!   the running ones reserved, and while the model has a sequence to give it; so an admitted reply always
//!   finishes and nothing running is evicted.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// A job's number, unique for the scheduler's life.
pub type JobId = kvad_engine::seam::SeqId;

pub use kvad_engine::seam::{Budget, Part, Work};

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
    /// Whole inputs read by `model` (embeddings, scores), in passes of their own between the running replies' steps (same
    /// model), or once the batch has run down (another model, or `alone`: an input did not fit beside the replies).
    Inputs {
        /// The model's id.
        model: String,
        /// Run with nobody beside it.
        alone: bool,
        /// What is read: "embed" or "score" (the queue's view names it).
        what: &'static str,
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
    /// A request's work (a reply or embeddings): queued under the limits, and taking its account's turn.
    fn is_generation(&self) -> bool {
        matches!(self, Kind::Generate { .. } | Kind::Inputs { .. })
    }

    fn is_reply(&self) -> bool {
        matches!(self, Kind::Generate { .. })
    }
}

/// How the running model's backend plans passes ([`super::pass_rules`]): set as a reply joins, since replies
/// running together share one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassRules {
    /// From how many sampling parts one pass carries them all (below it, each takes its own pass).
    pub batch_from: usize,
    /// Prompt tokens a joining prompt reads a pass when prompts are read one at a time (`pass_tokens` None).
    pub chunk: usize,
    /// Rows one step may carry in all, every reply's next token and the chunks of several joining prompts (a
    /// GPU's rule); None: the CPU's, one prompt read at a time, `chunk` tokens a pass.
    pub pass_tokens: Option<usize>,
    /// Replies written together where `[server] batch` names no number: the seed's 4 on the CPU; on a GPU a
    /// ceiling only, since the page pool ([`Budget`]) decides how many fit.
    pub batch: usize,
}

impl Default for PassRules {
    fn default() -> Self {
        PassRules { batch_from: 2, chunk: 64, pass_tokens: None, batch: 4 }
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
    /// Replies written together (`[server] batch`); None: the backend's ([`PassRules::batch`]).
    pub batch: Option<usize>,
    /// How passes are planned on the running model's backend.
    pub rules: PassRules,
    /// Each step's engine time and the gap between steps on stderr (`[server] step_trace`).
    pub trace_steps: bool,
    /// How long a streaming client may leave its reply unread before the reply is stopped (`[server]
    /// stall_timeout`; None: never).
    pub stall: Option<Duration>,
}

impl Limits {
    /// Replies written together now: `[server] batch`, else the running backend's.
    pub fn batch(&self) -> usize {
        self.batch.unwrap_or(self.rules.batch)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            queue: 16,
            per_account: 4,
            per_minute: None,
            batch: None,
            rules: PassRules::default(),
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
    /// Read these whole inputs now (embeddings, scores), in passes of their own (the batch, if any, is on the same
    /// model).
    Inputs(JobId),
    /// One step: passes in order (the replies' tokens, in one pass or one per part below `batch_from`; prompt
    /// chunks).
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
    /// until the running replies are fewer. The pass rules stay the running backend's.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = Limits { rules: self.limits.rules, ..limits };
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

    /// The next thing to do. `budget` is the room the running model's replies share.
    pub fn decide(&self, budget: Budget) -> Decision {
        if let Some(next) = self.next_in_turn() {
            if self.may_start(next, budget) {
                match (&next.kind, next.reserve) {
                    // Its prompt is being read elsewhere: the running replies step meanwhile.
                    (Kind::Generate { .. }, None) if next.reading => {}
                    (Kind::Generate { .. }, None) => return Decision::Prepare(next.id),
                    (Kind::Generate { .. }, Some(_)) => return Decision::Join(next.id),
                    (Kind::Inputs { .. }, _) => return Decision::Inputs(next.id),
                    _ => return Decision::Exclusive(next.id),
                }
            }
        }
        let parts = self.step_parts();
        if parts.is_empty() {
            return Decision::Idle;
        }
        let batch_from = self.limits.rules.batch_from;
        if self.limits.rules.pass_tokens.is_none() {
            return match parts.len() >= batch_from {
                true => Decision::Step(vec![parts]),
                false => Decision::Step(parts.into_iter().map(|p| vec![p]).collect()),
            };
        }
        // The replies' tokens first, so a step's long prompt pass never holds them back; then every chunk in one.
        let (chunks, sampling): (Vec<Part>, Vec<Part>) =
            parts.into_iter().partition(|p| matches!(p.work, Work::Chunk(_)));
        let mut passes = match sampling.len() >= batch_from {
            true if !sampling.is_empty() => vec![sampling],
            true => vec![],
            false => sampling.into_iter().map(|p| vec![p]).collect(),
        };
        if !chunks.is_empty() {
            passes.push(chunks);
        }
        Decision::Step(passes)
    }

    fn may_start(&self, next: &Waiting, budget: Budget) -> bool {
        if self.running.is_empty() {
            return true;
        }
        let (model, alone) = match &next.kind {
            Kind::Generate { model, alone } | Kind::Inputs { model, alone, .. } => (model, *alone),
            _ => return false,
        };
        let same_model =
            self.running.iter().all(|r| matches!(&r.kind, Kind::Generate { model: m, alone: false } if m == model));
        if matches!(next.kind, Kind::Inputs { .. }) {
            // Whole inputs join no batch: their passes run between its steps, in the room its reserves leave.
            return !alone && same_model;
        }
        // One prompt read at a time on the CPU; a GPU step reads several.
        let reading =
            self.limits.rules.pass_tokens.is_none() && self.running.iter().any(|r| !matches!(r.phase, Phase::Writing));
        let reserved = self.running.iter().fold(0usize, |n, r| n.saturating_add(budget.reserve(r.reserve)));
        let fits = next.reserve.is_none_or(|n| reserved.saturating_add(budget.reserve(n)) <= budget.tokens);
        let room = self.running.len() < self.limits.batch().min(budget.sequences);
        !alone && same_model && !reading && room && fits
    }

    /// Every running reply's part this step: a token each for those writing (or reading their prompt's last);
    /// prompt chunks as the backend's rules allow.
    fn step_parts(&self) -> Vec<Part> {
        let gens = self.running.iter().filter(|r| r.kind.is_reply());
        let Some(rows) = self.limits.rules.pass_tokens else {
            let chunk = self.limits.rules.chunk;
            return gens.map(|r| Part { id: r.id, work: work_of(r.phase, chunk) }).collect();
        };
        // What the replies' tokens leave of the pass goes to the prompts in the order they joined; one token at
        // least, so a prompt is read even beside more replies than the pass holds rows.
        let sampling = gens.clone().filter(|r| !matches!(r.phase, Phase::Reading { .. })).count();
        let mut room = rows.saturating_sub(sampling).max(1);
        gens.filter_map(|r| {
            let work = match r.phase {
                Phase::Reading { .. } if room == 0 => return None,
                Phase::Reading { left } => {
                    let n = left.min(room);
                    room -= n;
                    Work::Chunk(n)
                }
                p => work_of(p, 0),
            };
            Some(Part { id: r.id, work })
        })
        .collect()
    }

    /// The running model's pass rules ([`super::pass_rules`] of the backend it is on), set as a reply joins.
    /// Replies running together share one model, so its backend decides; the server's `[server] backend` only gives
    /// the rules before anything has joined.
    pub fn set_rules(&mut self, rules: PassRules) {
        self.limits.rules = rules;
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

    /// Records that a whole-inputs job's input did not fit beside the running replies: it waits for the batch to
    /// run down, and nothing passes it meanwhile.
    pub fn inputs_alone(&mut self, id: JobId) {
        if let Some(w) = self.waiting.iter_mut().find(|w| w.id == id) {
            if let Kind::Inputs { alone, .. } = &mut w.kind {
                *alone = true;
            }
        }
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
        let n = self.running.iter().filter(|r| r.kind.is_reply()).count();
        if self.running.iter().any(|r| r.id == id) {
            n - 1
        } else {
            n
        }
    }
}

/// What a reply in `phase` does in a step that reads prompts `chunk` tokens at a time.
fn work_of(phase: Phase, chunk: usize) -> Work {
    match phase {
        Phase::Reading { left } => Work::Chunk(left.min(chunk)),
        Phase::Last => Work::Last,
        Phase::Writing => Work::Decode,
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
