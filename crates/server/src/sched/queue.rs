//! The HTTP side's handle on the scheduler: submit a generation (refused at once when it cannot wait), queue a load
//! or an unload, and look at what waits and runs.

use super::core::{JobId, Kind, Limits, Phase, Refusal, Scheduler};
use super::{runner, InputsJob, Job};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::store::Store;
use kvad_engine::seam::{Memory, ModelInfo, Prepared};
use kvad_engine::Engine;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;
use tokio::sync::oneshot;

/// What a load or unload answers: the names it loaded or unloaded.
pub type AdminResult = Result<Vec<String>, ApiError>;

/// A job's payload while it waits.
pub(crate) enum Payload {
    /// A generation.
    Generate(Box<Job>),
    /// Whole inputs: embeddings or scores.
    Inputs(Box<InputsJob>),
    /// A load or unload, and who waits for its answer (nobody for an autoload).
    Admin(Option<oneshot::Sender<AdminResult>>),
}

/// What the engine thread and the HTTP side share.
pub(crate) struct State {
    pub(crate) core: Scheduler,
    pub(crate) payloads: HashMap<JobId, Payload>,
    /// Set by [`Queue::stop_all`] at the end of the shutdown timeout: running replies end, waiting ones fail.
    pub(crate) stopping: bool,
    /// Prompts read off the engine thread, for it to take in ([`super::read`]).
    pub(crate) read: Vec<(JobId, Result<Prepared, ApiError>)>,
    /// Set by [`Queue::rescan`]: the engine looks at the disk again before its next decision.
    pub(crate) rescan: bool,
    /// How many times it has looked (so a caller can wait for the look it asked for).
    pub(crate) rescanned: u64,
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Condvar,
    pub(crate) catalog: RwLock<Vec<ModelInfo>>,
    pub(crate) memory: RwLock<Memory>,
    pub(crate) metrics: Arc<Metrics>,
}

/// The HTTP side's handle on the scheduler.
#[derive(Clone)]
pub struct Queue {
    shared: Arc<Shared>,
}

/// A waiting job, as `GET /api/queue` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WaitingView {
    /// Its number.
    pub id: JobId,
    /// generate, load or unload.
    pub kind: &'static str,
    /// The model it names (None: an unload of every model).
    pub model: Option<String>,
    /// Whose it is (shown to an administrator).
    pub account: String,
    /// Seconds it has waited.
    pub waited_s: f64,
}

/// A running job, as `GET /api/queue` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunningView {
    /// Its number.
    pub id: JobId,
    /// generate, load or unload.
    pub kind: &'static str,
    /// The model.
    pub model: Option<String>,
    /// Whose it is.
    pub account: String,
    /// reading, writing (or running, for a load or unload).
    pub phase: &'static str,
}

/// What waits and runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueueView {
    /// Waiting, in arrival order.
    pub waiting: Vec<WaitingView>,
    /// Running.
    pub running: Vec<RunningView>,
    /// Whose turn is next.
    pub next: Option<JobId>,
    /// The limits in force.
    pub limits: LimitsView,
}

/// [`Limits`] as JSON.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LimitsView {
    /// `[server] queue`.
    pub queue: usize,
    /// `[server] queue_per_account`.
    pub queue_per_account: usize,
    /// `[server] generations_per_minute`.
    pub generations_per_minute: Option<usize>,
    /// Replies written together now: `[server] batch`, else the running backend's rule.
    pub batch: usize,
}

fn describe(kind: &Kind) -> (&'static str, Option<String>) {
    match kind {
        Kind::Generate { model, .. } => ("generate", Some(model.clone())),
        Kind::Inputs { model, what, .. } => (what, Some(model.clone())),
        Kind::Load { model, .. } => ("load", Some(model.clone())),
        Kind::Unload { model } => ("unload", model.clone()),
    }
}

impl Queue {
    /// Starts the engine thread.
    pub fn start(engine: Box<dyn Engine>, store: Store, limits: Limits) -> (Queue, std::thread::JoinHandle<()>) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                core: Scheduler::new(limits),
                payloads: HashMap::new(),
                stopping: false,
                read: Vec::new(),
                rescan: false,
                rescanned: 0,
            }),
            wake: Condvar::new(),
            catalog: RwLock::new(engine.catalog()),
            memory: RwLock::new(engine.memory()),
            metrics: Arc::new(Metrics::default()),
        });
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("kvad-engine".into())
            .spawn(move || runner::run(engine, store, s))
            .expect("spawning the engine thread");
        (Queue { shared }, handle)
    }

    /// Asks the engine to look at the disk again (a model named that is on disk and not listed): models that
    /// arrived join the catalog. Returns at once; `/v1/models` shows them once the engine thread has looked.
    pub fn rescan(&self) {
        self.lock().rescan = true;
        self.shared.wake.notify_all();
    }

    /// [`Self::rescan`], waiting (on a blocking thread: a pull's) until the engine thread has looked, or `limit`
    /// has passed (it looks between passes), so a pull's last event comes after `/v1/models` lists its model.
    pub fn rescan_and_wait(&self, limit: std::time::Duration) {
        let mut st = self.lock();
        let seen = st.rescanned;
        st.rescan = true;
        self.shared.wake.notify_all();
        let deadline = Instant::now() + limit;
        while st.rescanned == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self.shared.wake.wait_timeout(st, left).map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }

    /// Shutdown's last word: every running reply ends within a step, cleanly (its final chunk, finish reason
    /// `length` and `kvad.shutdown`, then `[DONE]`), and every waiting job is answered 503. Nothing is taken after.
    pub fn stop_all(&self) {
        self.lock().stopping = true;
        self.shared.wake.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a generation, or refuses it: 503 with Retry-After when the queue is full, 429 when the account has
    /// its share waiting or reached its generations per minute.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        let mut st = self.lock();
        let kind = Kind::Generate { model: job.model.clone(), alone: job.fresh };
        let id = st.core.submit(&job.account, kind, Instant::now()).map_err(refusal)?;
        st.payloads.insert(id, Payload::Generate(Box::new(job)));
        drop(st);
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Queues whole inputs (embeddings, scores) under the same limits as a generation (503 full, 429 per account).
    pub fn inputs(&self, job: InputsJob) -> Result<(), ApiError> {
        let mut st = self.lock();
        let kind = Kind::Inputs { model: job.model.clone(), alone: false, what: job.work.name() };
        let id = st.core.submit(&job.account, kind, Instant::now()).map_err(refusal)?;
        st.payloads.insert(id, Payload::Inputs(Box::new(job)));
        drop(st);
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Queues a load or an unload; the receiver gets its answer when it has run. `listen` false: nobody waits
    /// (autoload).
    pub fn admin(&self, account: &str, kind: Kind, listen: bool) -> Option<oneshot::Receiver<AdminResult>> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        let id = st.core.submit(account, kind, Instant::now()).ok()?;
        st.payloads.insert(id, Payload::Admin(listen.then_some(tx)));
        drop(st);
        self.shared.wake.notify_all();
        listen.then_some(rx)
    }

    /// Changes the limits in force (the HTTP side's live settings); wakes the engine thread, since a larger batch
    /// may let a waiting reply join now.
    pub fn set_limits(&self, f: impl FnOnce(&mut Limits)) -> Limits {
        let mut st = self.lock();
        let mut l = st.core.limits();
        f(&mut l);
        st.core.set_limits(l);
        drop(st);
        self.shared.wake.notify_all();
        l
    }

    /// Generations waiting.
    pub fn depth(&self) -> usize {
        self.lock().core.depth()
    }

    /// Replies running.
    pub fn running(&self) -> usize {
        self.lock().core.running().len()
    }

    /// What waits and runs.
    pub fn view(&self) -> QueueView {
        let st = self.lock();
        let now = Instant::now();
        let l = st.core.limits();
        QueueView {
            waiting: st
                .core
                .waiting()
                .iter()
                .map(|w| {
                    let (kind, model) = describe(&w.kind);
                    WaitingView {
                        id: w.id,
                        kind,
                        model,
                        account: w.account.clone(),
                        waited_s: now.saturating_duration_since(w.arrived).as_secs_f64(),
                    }
                })
                .collect(),
            running: st
                .core
                .running()
                .iter()
                .map(|r| {
                    let (kind, model) = describe(&r.kind);
                    let phase = match (kind, r.phase) {
                        ("generate", Phase::Writing) => "writing",
                        ("generate", _) => "reading",
                        _ => "running",
                    };
                    RunningView { id: r.id, kind, model, account: r.account.clone(), phase }
                })
                .collect(),
            next: st.core.next_in_turn().map(|w| w.id),
            limits: LimitsView {
                queue: l.queue,
                queue_per_account: l.per_account,
                generations_per_minute: l.per_minute,
                batch: l.batch(),
            },
        }
    }

    /// The models and their capabilities.
    pub fn catalog(&self) -> Vec<ModelInfo> {
        self.shared.catalog.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// What is in memory (as of the last job that changed it).
    pub fn memory(&self) -> Memory {
        self.shared.memory.read().map(|m| m.clone()).unwrap_or(Memory { total: 0, resident: Vec::new() })
    }

    /// The counters behind `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }
}

fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::Full { waiting } => {
            ApiError::unavailable(format!("the queue is full ({waiting} generations waiting); retry shortly"), Some(1))
        }
        Refusal::AccountFull { account, limit } => ApiError::too_many(
            format!(
                "account {account:?} has {limit} generations waiting ([server] queue_per_account = {limit}); \
                 wait for one to finish"
            ),
            Some(1),
        ),
        Refusal::RateLimited { account, limit, retry_after } => ApiError::too_many(
            format!(
                "account {account:?} reached {limit} generations per minute ([server] generations_per_minute); \
                 the next is taken in {retry_after} s"
            ),
            Some(retry_after),
        ),
    }
}
