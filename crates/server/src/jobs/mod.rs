//! Jobs: long-running work with an id, an owner, a state and progress events — training runs and evals.
//!
//! A job runs on a thread of its own, beside the scheduler's replies rather than queued behind them or they behind
//! it (the seed measured chat during training at about half speed, not zero). Every event is written to
//! `job_events` before it is broadcast, so a follower that arrives late replays what it missed from SQLite and then
//! reads the live ones; the row's state is the truth after a restart (a job running then is marked failed).

pub mod eval;
pub mod impact;
pub mod ppl;
pub mod train;

use crate::store::Store;
use rusqlite::params;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The states a job passes through.
pub const STATES: [&str; 5] = ["queued", "running", "done", "failed", "cancelled"];

/// A job while it runs: how to stop it and hear from it.
struct Live {
    kind: String,
    account: String,
    what: String,
    cancel: Arc<AtomicBool>,
    events: broadcast::Sender<Value>,
}

/// The jobs running now.
#[derive(Clone, Default)]
pub struct Jobs(Arc<Mutex<HashMap<String, Live>>>);

/// What a running job is, for refusals that name it.
#[derive(Debug, Clone)]
pub struct Running {
    /// Its id.
    pub id: String,
    /// train, eval, …
    pub kind: String,
    /// Who started it.
    pub account: String,
    /// One line on what it does (the model and output).
    pub what: String,
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every running job.
    pub fn running(&self) -> Vec<Running> {
        let mut v: Vec<Running> = self
            .lock()
            .iter()
            .map(|(id, l)| Running {
                id: id.clone(),
                kind: l.kind.clone(),
                account: l.account.clone(),
                what: l.what.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Asks job `id` to stop after its current step; false when it is not running.
    pub fn cancel(&self, id: &str) -> bool {
        self.lock().get(id).map(|l| l.cancel.store(true, Ordering::Relaxed)).is_some()
    }

    /// The live events of job `id`, when it runs.
    pub fn subscribe(&self, id: &str) -> Option<broadcast::Receiver<Value>> {
        self.lock().get(id).map(|l| l.events.subscribe())
    }

    /// Registers job `id` (already inserted in SQLite as queued) and runs `work` on a thread of its own; `work` gets
    /// the cancel flag and an emitter, and returns the job's result or its error. The row's state follows.
    pub fn spawn(
        &self,
        db: PathBuf,
        id: String,
        kind: &str,
        account: &str,
        what: String,
        work: impl FnOnce(&AtomicBool, &mut dyn FnMut(Value)) -> Result<(Value, bool), String> + Send + 'static,
    ) {
        let (tx, _) = broadcast::channel(1024);
        let cancel = Arc::new(AtomicBool::new(false));
        let live =
            Live { kind: kind.into(), account: account.into(), what, cancel: cancel.clone(), events: tx.clone() };
        self.lock().insert(id.clone(), live);
        let jobs = self.clone();
        std::thread::spawn(move || {
            let store = Store::open(&db).ok();
            let mut seq = 0i64;
            let mut stored = |mut ev: Value| {
                seq += 1;
                ev["seq"] = json!(seq);
                if let Some(s) = &store {
                    let _ = s.conn.execute(
                        "INSERT INTO job_events (job, seq, event) VALUES (?1, ?2, ?3)",
                        params![id, seq, ev.to_string()],
                    );
                }
                ev
            };
            let mut emit = |ev: Value| {
                let _ = tx.send(stored(ev));
            };
            set_state(store.as_ref(), &id, "running", None, None);
            emit(json!({"type": "state", "state": "running"}));
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&cancel, &mut emit)))
                .unwrap_or_else(|_| Err("the job panicked".into()));
            let (state, result, error) = match outcome {
                Ok((result, true)) => ("done", Some(result), None),
                Ok((result, false)) => ("cancelled", Some(result), None),
                Err(e) => ("failed", None, Some(e)),
            };
            set_state(store.as_ref(), &id, state, result.as_ref(), error.as_deref());
            // The last event is stored, then the job leaves the live list, then the event is sent: a follower that
            // finds it gone reads the end from SQLite, one that subscribed before gets it live, and whoever reads
            // the end finds the job no longer running (a benchmark asked for at once is not refused for it).
            let last = stored(json!({"type": "state", "state": state, "result": result, "error": error}));
            jobs.lock().remove(&id);
            let _ = tx.send(last);
        });
    }
}

fn set_state(store: Option<&Store>, id: &str, state: &str, result: Option<&Value>, error: Option<&str>) {
    let Some(s) = store else { return };
    let time = if state == "running" { "started_at" } else { "finished_at" };
    let _ = s.conn.execute(
        &format!(
            "UPDATE jobs SET state = ?2, result = coalesce(?3, result), error = ?4, \
             {time} = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1"
        ),
        params![id, state, result.map(Value::to_string), error],
    );
}

/// A new job's row, queued.
pub fn insert(store: &Store, id: &str, account: &str, kind: &str, spec: &Value) -> rusqlite::Result<()> {
    store.conn.execute(
        "INSERT INTO jobs (id, account, kind, state, spec) VALUES (?1, ?2, ?3, 'queued', ?4)",
        params![id, account, kind, spec.to_string()],
    )?;
    Ok(())
}

/// A job's row as the API shows it (None: no such job, or another account's when `scope` is given).
pub fn load(store: &Store, id: &str, scope: Option<&str>) -> rusqlite::Result<Option<Value>> {
    let mut st = store.conn.prepare(
        "SELECT id, account, kind, state, spec, result, error, created_at, started_at, finished_at, \
         (SELECT event FROM job_events WHERE job = jobs.id AND event LIKE '{\"type\":\"step\"%' \
          ORDER BY seq DESC LIMIT 1) FROM jobs WHERE id = ?1 AND (?2 IS NULL OR account = ?2)",
    )?;
    let mut rows = st.query_map(params![id, scope], row)?;
    rows.next().transpose()
}

/// The jobs of an account (or everybody's with no scope), newest first.
pub fn list(store: &Store, scope: Option<&str>) -> rusqlite::Result<Vec<Value>> {
    let mut st = store.conn.prepare(
        "SELECT id, account, kind, state, spec, result, error, created_at, started_at, finished_at, \
         (SELECT event FROM job_events WHERE job = jobs.id AND event LIKE '{\"type\":\"step\"%' \
          ORDER BY seq DESC LIMIT 1) FROM jobs WHERE (?1 IS NULL OR account = ?1) ORDER BY created_at DESC, id DESC",
    )?;
    let rows = st.query_map(params![scope], row)?;
    rows.collect()
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Value> {
    let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str::<Value>(&s).ok()).unwrap_or(Value::Null);
    Ok(json!({
        "id": r.get::<_, String>(0)?,
        "object": "job",
        "account": r.get::<_, String>(1)?,
        "kind": r.get::<_, String>(2)?,
        "state": r.get::<_, String>(3)?,
        "spec": parse(r.get(4)?),
        "result": parse(r.get(5)?),
        "error": r.get::<_, Option<String>>(6)?,
        "created_at": r.get::<_, String>(7)?,
        "started_at": r.get::<_, Option<String>>(8)?,
        "finished_at": r.get::<_, Option<String>>(9)?,
        "last_step": parse(r.get(10)?),
    }))
}

/// Every stored event of job `id` after `after`, in order.
pub fn events(store: &Store, id: &str, after: i64) -> rusqlite::Result<Vec<Value>> {
    let mut st = store.conn.prepare("SELECT event FROM job_events WHERE job = ?1 AND seq > ?2 ORDER BY seq")?;
    let rows = st.query_map(params![id, after], |r| r.get::<_, String>(0))?;
    Ok(rows.filter_map(|s| s.ok().and_then(|s| serde_json::from_str(&s).ok())).collect())
}
