//! The engine thread: asks [`Scheduler::decide`] what to do next and does it on the engine — read a prompt (loading
//! its model), start a reply in the batch, run a load or an unload, or one step of passes — then tells the scheduler
//! what happened. Replies whose client went away leave the line or the batch here, their cache freed.

use super::core::{Decision, JobId, Kind, Scheduler};
use super::queue::{AdminResult, Payload, Shared, State};
use super::read::ReadJob;
use super::reply::{self, Reply, Stop};
use super::{Done, Event, InputsJob, Job, Whole};
use crate::error::ApiError;
use crate::store::{RequestRow, Store};
use kvad_engine::seam::{Prepared, Stepped};
use kvad_engine::Engine;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::Instant;
use tokio::sync::oneshot;

/// A reply in the batch.
struct Active {
    job: Box<Job>,
    prepared: Prepared,
    reply: Reply,
    row: RequestRow,
    joined: Instant,
    cached: usize,
    beside: usize,
    /// When its row last took the generated count.
    saved: Instant,
}

/// What the engine thread keeps between decisions.
struct Runner<'a> {
    engine: Box<dyn Engine>,
    store: Store,
    shared: &'a Shared,
    /// Prompts read, waiting for their turn to join.
    prepared: HashMap<JobId, Prepared>,
    active: HashMap<JobId, Active>,
    /// When the last step ended, for `KVAD_STEP_TRACE=1` (the time between steps: deciding, joining, waiting).
    last_step: Option<Instant>,
    /// The open requests rows of generations admitted and not yet ended.
    rows: HashMap<JobId, i64>,
    /// The prompt reader thread's line.
    reads: std::sync::mpsc::Sender<ReadJob>,
}

/// How long the engine thread waits for a prompt it handed to the reader before it steps the running replies.
const READ_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// How often a running reply's row takes its generated count (what a kill would otherwise lose).
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn row_for(job: &Job) -> RequestRow {
    RequestRow {
        account: job.account.clone(),
        endpoint: job.endpoint.into(),
        model: job.model.clone(),
        queue_ms: ms(job.queued_at),
        ..Default::default()
    }
}

/// A whole-inputs job's answer, before it is sent.
enum Answer {
    Embedded(kvad_engine::seam::Embedded),
    Scored(kvad_engine::seam::Scored),
}

impl Answer {
    /// Tokens read, the backend, and whether asking loaded the model.
    fn usage(&self) -> (usize, String, bool) {
        match self {
            Answer::Embedded(e) => (e.tokens, e.backend.clone(), e.loaded),
            Answer::Scored(s) => (s.tokens, s.backend.clone(), s.loaded),
        }
    }

    fn send(self, work: Whole) {
        match (self, work) {
            (Answer::Embedded(e), Whole::Embed { reply, .. }) => drop(reply.send(Ok(e))),
            (Answer::Scored(s), Whole::Score { reply, .. }) => drop(reply.send(Ok(s))),
            (_, w) => w.fail(ApiError::internal("the engine answered another kind of work")),
        }
    }
}

/// What a decision needs, taken out while the lock is held.
enum Todo {
    Prepare(JobId, String, kvad_engine::seam::Prompt),
    Exclusive(JobId, Kind, Option<oneshot::Sender<AdminResult>>),
    Inputs(JobId, Box<InputsJob>),
    Step(Vec<Vec<super::Part>>),
}

/// Runs until the process ends, with the prompt reader's thread ([`super::read`]) beside it.
pub(crate) fn run(engine: Box<dyn Engine>, store: Store, shared: std::sync::Arc<Shared>) {
    let reads = super::read::start(shared.clone());
    let shared: &Shared = &shared;
    let mut r = Runner {
        engine,
        store,
        shared,
        prepared: HashMap::new(),
        active: HashMap::new(),
        last_step: None,
        rows: HashMap::new(),
        reads,
    };
    loop {
        let todo = r.next();
        match todo {
            Todo::Prepare(id, model, prompt) => r.prepare(id, &model, prompt),
            Todo::Exclusive(id, kind, tx) => r.exclusive(id, kind, tx),
            Todo::Inputs(id, job) => r.inputs(id, job),
            Todo::Step(passes) => {
                for pass in passes {
                    r.step(&pass);
                }
            }
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Runner<'_> {
    /// Waits for something to do; joins replies (quick) under the lock.
    fn next(&mut self) -> Todo {
        let shared = self.shared;
        let mut st = lock(shared);
        loop {
            if std::mem::take(&mut st.rescan) {
                self.engine.rescan();
                self.refresh();
                st.rescanned += 1;
                shared.wake.notify_all();
            }
            self.open_rows(&st);
            self.take_reads(&mut st);
            self.reap(&mut st);
            let budget = batch_model(&st.core).map_or(super::Budget::tokens(usize::MAX), |m| self.engine.budget(&m));
            match st.core.decide(budget) {
                Decision::Idle => st = shared.wake.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner),
                Decision::Prepare(id) => match st.payloads.get(&id) {
                    Some(Payload::Generate(job)) => return Todo::Prepare(id, job.model.clone(), job.prompt.clone()),
                    _ => {
                        st.core.remove(id);
                    }
                },
                Decision::Join(id) => self.join(&mut st, id),
                Decision::Inputs(id) => match st.payloads.remove(&id) {
                    Some(Payload::Inputs(job)) => return Todo::Inputs(id, job),
                    _ => {
                        st.core.remove(id);
                    }
                },
                Decision::Exclusive(id) => {
                    let kind = st.core.waiting().iter().find(|w| w.id == id).map(|w| w.kind.clone());
                    st.core.start(id, 0);
                    let tx = match st.payloads.remove(&id) {
                        Some(Payload::Admin(tx)) => tx,
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        return Todo::Exclusive(id, kind, tx);
                    }
                    st.core.remove(id);
                }
                Decision::Step(passes) => return Todo::Step(passes),
            }
        }
    }

    /// Drops waiting jobs whose client went away, and stops running ones; once the server is stopping, ends every
    /// running reply and answers every waiting job 503.
    fn reap(&mut self, st: &mut State) {
        if st.stopping {
            let running: Vec<JobId> = self.active.keys().copied().collect();
            for id in running {
                self.finish(st, id, Stop::Shutdown);
            }
            let waiting: Vec<JobId> = st.payloads.keys().copied().collect();
            for id in waiting {
                let e = ApiError::unavailable("the server is shutting down", None);
                match st.payloads.remove(&id) {
                    Some(Payload::Admin(Some(tx))) => {
                        st.core.remove(id);
                        let _ = tx.send(Err(e));
                    }
                    Some(p @ Payload::Generate(_)) => {
                        st.payloads.insert(id, p);
                        self.fail(st, id, e);
                    }
                    Some(Payload::Inputs(job)) => {
                        st.core.remove(id);
                        job.work.fail(e);
                    }
                    _ => {
                        st.core.remove(id);
                    }
                }
            }
        }
        let gone: Vec<JobId> = st
            .payloads
            .iter()
            .filter(|(_, p)| match p {
                Payload::Generate(j) => j.cancel.load(Ordering::SeqCst),
                Payload::Inputs(j) => j.work.is_closed(),
                Payload::Admin(_) => false,
            })
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            st.core.remove(id);
            self.prepared.remove(&id);
            if let Some(Payload::Generate(job)) = st.payloads.remove(&id) {
                let mut row = row_for(&job);
                row.finish_reason = "cancelled".into();
                self.record(id, &row);
            }
        }
        let stopped: Vec<JobId> =
            self.active.iter().filter(|(_, a)| a.job.cancel.load(Ordering::SeqCst)).map(|(id, _)| *id).collect();
        for id in stopped {
            self.finish(st, id, Stop::Cancelled);
        }
        if let Some(after) = st.core.limits().stall {
            let stalled: Vec<JobId> =
                self.active.iter().filter(|(_, a)| a.job.events.stalled(after)).map(|(id, _)| *id).collect();
            for id in stalled {
                self.finish(st, id, Stop::Stalled);
            }
        }
    }

    /// Opens a row for every generation admitted since the last look (a kill then loses none).
    fn open_rows(&mut self, st: &State) {
        for (id, p) in &st.payloads {
            if let Payload::Generate(job) = p {
                if !self.rows.contains_key(id) {
                    match self.store.open_row(&row_for(job)) {
                        Ok(row) => {
                            self.rows.insert(*id, row);
                        }
                        Err(e) => eprintln!("kvad-serve: opening the requests row failed: {e}"),
                    }
                }
            }
        }
    }

    /// Writes a generation's final row: closes the one opened at admission, or writes it whole.
    fn record(&mut self, id: JobId, row: &RequestRow) {
        let done = match self.rows.remove(&id) {
            Some(open) => self.store.close(open, row),
            None => self.store.record(row),
        };
        if let Err(e) = done {
            eprintln!("kvad-serve: writing the requests row failed: {e}");
        }
        self.shared.metrics.finished(&row.finish_reason);
    }

    fn refresh(&self) {
        if let Ok(mut c) = self.shared.catalog.write() {
            *c = self.engine.catalog();
        }
        if let Ok(mut m) = self.shared.memory.write() {
            *m = self.engine.memory();
        }
    }

    /// A job that failed before it started: out of the line, an error row, a `Failed` event.
    fn fail(&mut self, st: &mut State, id: JobId, e: ApiError) {
        st.core.remove(id);
        self.prepared.remove(&id);
        if let Some(Payload::Generate(job)) = st.payloads.remove(&id) {
            let mut row = row_for(&job);
            row.error = Some(e.message.clone());
            row.finish_reason = "error".into();
            self.record(id, &row);
            let _ = job.events.send(Event::Failed(e));
        }
    }

    /// Hands a prompt to the reader thread, loading its model here first when it is not in memory (a load is the
    /// engine thread's work); the batch steps on while it is read.
    fn prepare(&mut self, id: JobId, model: &str, prompt: kvad_engine::seam::Prompt) {
        let result = self.engine.reader(model).map_err(ApiError::from);
        self.refresh();
        let mut st = lock(self.shared);
        match result {
            Ok(r) => {
                st.core.reading(id);
                drop(st);
                let _ = self.reads.send(ReadJob { id, reader: r.reader, prompt, loaded: r.loaded });
                // A usual prompt reads in well under a millisecond: waiting that long lets it join the very next
                // pass, as it did when it was read here; a long one stalls the running replies READ_WAIT at most.
                let deadline = Instant::now() + READ_WAIT;
                let mut st = lock(self.shared);
                while st.read.is_empty() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    st = self.shared.wake.wait_timeout(st, left).map_or_else(|e| e.into_inner().0, |(g, _)| g);
                }
            }
            Err(e) => self.fail(&mut st, id, e),
        }
    }

    /// Takes in the prompts read since the last look: each records what it may hold, or fails its job (too long
    /// for the context, a template's refusal).
    fn take_reads(&mut self, st: &mut State) {
        for (id, result) in std::mem::take(&mut st.read) {
            if let Some(p) = result.as_ref().ok().filter(|p| p.loaded) {
                // Loaded by a request: active like a `kvad load`, so autoload puts it back on this backend.
                let _ = self.store.set_active(&p.model, Some(&p.backend));
            }
            let checked = match st.payloads.get_mut(&id) {
                Some(Payload::Generate(job)) => result
                    .and_then(|p| reply::check(job, &p).map(|()| (p, job.params.max_tokens)))
                    .map_err(|e| reply::as_sent(job, e)),
                _ => Err(ApiError::internal("the job left the line")),
            };
            match checked {
                Ok((p, max_tokens)) => {
                    st.core.prepared(id, p.prompt_tokens + max_tokens);
                    self.prepared.insert(id, p);
                }
                Err(e) => self.fail(st, id, e),
            }
        }
    }

    /// Starts a prepared reply in the batch.
    fn join(&mut self, st: &mut State, id: JobId) {
        let (Some(Payload::Generate(job)), Some(p)) = (st.payloads.remove(&id), self.prepared.remove(&id)) else {
            st.core.remove(id);
            return;
        };
        match self.engine.begin(id, &p, &job.params, job.fresh).map_err(ApiError::from) {
            Ok(b) => {
                st.core.set_rules(super::pass_rules(&p.backend));
                st.core.start(id, b.to_read);
                self.shared.metrics.joined(p.prompt_tokens, b.cached);
                let _ = job.events.send(Event::Started { prompt_tokens: p.prompt_tokens, cached_tokens: b.cached });
                let mut row = row_for(&job);
                row.backend = p.backend.clone();
                row.prompt_tokens = p.prompt_tokens;
                row.cached_tokens = b.cached;
                let reply = Reply::new(&job, &p);
                let now = Instant::now();
                let a = Active { job, prepared: p, reply, row, joined: now, cached: b.cached, beside: 0, saved: now };
                self.active.insert(id, a);
            }
            Err(e) => {
                st.payloads.insert(id, Payload::Generate(job));
                self.fail(st, id, e);
            }
        }
    }

    /// One forward pass, and what each part's token means for its reply.
    fn step(&mut self, pass: &[super::Part]) {
        let t = Instant::now();
        let result = self.engine.step(pass).map_err(ApiError::from);
        let engine_s = t.elapsed().as_secs_f64();
        self.shared.metrics.step(engine_s);
        let mut st = lock(self.shared);
        st.core.stepped(pass);
        match result {
            Ok(outs) => {
                for (part, out) in pass.iter().zip(outs) {
                    let beside = st.core.beside(part.id);
                    let Some(a) = self.active.get_mut(&part.id) else { continue };
                    a.beside = a.beside.max(beside);
                    let Some(s): Option<Stepped> = out else { continue };
                    if a.row.ttft_ms.is_none() {
                        a.row.ttft_ms = Some(ms(a.joined));
                        self.shared.metrics.first_token(ms(a.joined) / 1000.0 + a.row.queue_ms / 1000.0);
                    }
                    if let Some(why) = a.reply.token(&a.job, s) {
                        self.finish(&mut st, part.id, why);
                    } else if a.saved.elapsed() >= PROGRESS_EVERY {
                        a.saved = Instant::now();
                        if let Some(&row) = self.rows.get(&part.id) {
                            let _ = self.store.progress(row, a.reply.tokens);
                        }
                    }
                }
            }
            Err(e) => {
                for part in pass {
                    if let Some(a) = self.active.remove(&part.id) {
                        self.engine.end(part.id, false);
                        st.core.remove(part.id);
                        let mut row = a.row;
                        row.error = Some(e.message.clone());
                        row.finish_reason = "error".into();
                        row.duration_ms = ms(a.joined);
                        self.record(part.id, &row);
                        let _ = a.job.events.send(Event::Failed(e.clone()));
                    }
                }
            }
        }
        let trace = st.core.limits().trace_steps;
        drop(st);
        self.refresh();
        if trace {
            let gap = self.last_step.map_or(0.0, |l| (t - l).as_secs_f64() * 1e3);
            let after = (t.elapsed().as_secs_f64() - engine_s) * 1e3;
            eprintln!(
                "kvad-runner parts={} engine_ms={:.3} after_ms={after:.3} gap_ms={gap:.3}",
                pass.len(),
                engine_s * 1e3
            );
            self.last_step = Some(Instant::now());
        }
    }

    /// Ends a reply: its cache set aside (or freed), its row written, `Done` sent.
    fn finish(&mut self, st: &mut State, id: JobId, why: Stop) {
        let Some(mut a) = self.active.remove(&id) else { return };
        let ended =
            self.engine.end(id, !a.job.fresh && !matches!(why, Stop::Cancelled | Stop::Shutdown | Stop::Stalled));
        st.core.remove(id);
        let reason = a.reply.finish(&a.job, ended.rest, why);
        a.row.generated_tokens = a.reply.tokens;
        a.row.finish_reason = if why == Stop::Shutdown { "shutdown".into() } else { reason.into() };
        a.row.duration_ms = ms(a.joined);
        self.shared.metrics.generated(a.reply.tokens);
        // The row lands before the client hears the end, so whoever reads the table after a reply finds it.
        self.record(id, &a.row);
        if why == Stop::Stalled {
            let after = st.core.limits().stall.unwrap_or_default().as_secs();
            let e = ApiError::unavailable(
                format!(
                    "the reply was stopped after {} tokens: the client read none of it for {after} s ([server] \
                     stall_timeout)",
                    a.reply.tokens
                ),
                None,
            );
            let _ = a.job.events.send(Event::Failed(e));
            return;
        }
        let _ = a.job.events.send(Event::Done(Done {
            finish_reason: reason,
            prompt_tokens: a.prepared.prompt_tokens,
            completion_tokens: a.reply.tokens,
            cached_tokens: a.cached,
            beside: a.beside,
            conversations: ended.held.conversations,
            held_tokens: ended.held.tokens,
            shutdown: why == Stop::Shutdown,
            stop_sequence: a.reply.stop_sequence(),
        }));
    }

    /// Whole inputs (embeddings, scores), in passes of their own between the batch's steps. An input that does not
    /// fit beside the running replies puts the job back at the head of the line, to run once they have finished.
    fn inputs(&mut self, id: JobId, job: Box<InputsJob>) {
        let started = Instant::now();
        let mut row = RequestRow {
            account: job.account.clone(),
            endpoint: job.endpoint.into(),
            model: job.model.clone(),
            queue_ms: started.saturating_duration_since(job.queued_at).as_secs_f64() * 1000.0,
            ..Default::default()
        };
        // None: an input did not fit beside the running replies.
        let result: Result<Option<Answer>, Option<ApiError>> = if job.work.is_closed() {
            Err(None)
        } else {
            match &job.work {
                Whole::Embed { dimensions, .. } => {
                    self.engine.embed(&job.model, &job.inputs, *dimensions).map(|o| o.map(Answer::Embedded))
                }
                Whole::Score { window, .. } => {
                    self.engine.score(&job.model, &job.inputs, *window).map(|o| o.map(Answer::Scored))
                }
            }
            .map_err(|e| Some(ApiError::from(e)))
        };
        self.refresh();
        let mut st = lock(self.shared);
        match result {
            Ok(None) => {
                st.core.inputs_alone(id);
                st.payloads.insert(id, Payload::Inputs(job));
                return;
            }
            Ok(Some(answer)) => {
                let (tokens, backend, loaded) = answer.usage();
                if loaded {
                    let _ = self.store.set_active(&job.model, Some(&backend));
                }
                // Its account's turn is taken as a reply's is.
                st.core.start(id, 0);
                row.backend = backend;
                row.prompt_tokens = tokens;
                row.finish_reason = "stop".into();
                answer.send(job.work);
            }
            Err(e) => {
                row.finish_reason = if e.is_some() { "error" } else { "cancelled" }.into();
                row.error = e.as_ref().map(|e| e.message.clone());
                if let Some(e) = e {
                    job.work.fail(e);
                }
            }
        }
        st.core.remove(id);
        drop(st);
        row.duration_ms = ms(started);
        self.record(id, &row);
    }

    /// A load or an unload, with nothing else running.
    fn exclusive(&mut self, id: JobId, kind: Kind, tx: Option<oneshot::Sender<AdminResult>>) {
        let result = match &kind {
            Kind::Load { model, backend } => {
                self.engine.load(model, backend.as_deref()).map_err(ApiError::from).map(|on| {
                    // The backend it is on, so autoload puts it back there.
                    let _ = self.store.set_active(model, Some(&on));
                    vec![model.clone()]
                })
            }
            Kind::Unload { model } => self.engine.unload(model.as_deref()).map_err(ApiError::from).inspect(|names| {
                for n in names {
                    let id = n.rsplit_once('@').map_or(n.as_str(), |(m, _)| m);
                    let _ = self.store.set_active(id, None);
                }
            }),
            Kind::Generate { .. } | Kind::Inputs { .. } => Err(ApiError::internal("a generation is not a load")),
        };
        if let Err(e) = &result {
            eprintln!("kvad-serve: {kind:?}: {}", e.message);
        }
        self.refresh();
        lock(self.shared).core.remove(id);
        if let Some(tx) = tx {
            let _ = tx.send(result);
        }
    }
}

/// The model the running batch is on.
fn batch_model(core: &Scheduler) -> Option<String> {
    core.running().iter().find_map(|r| match &r.kind {
        Kind::Generate { model, .. } => Some(model.clone()),
        _ => None,
    })
}
