//! The eval job: a prompt suite asked of one to four models through the scheduler, each answer scored and kept.
//!
//! A model may be named with its backend (`NAME@cpu-q8`), so one model on several backends is compared side by
//! side: before its items, such a variant is placed through the queue as the Playground places one (unloaded from
//! the backend it is on, then loaded on the one named), and the job says what it did. Placing changes what is in
//! memory for everyone, so naming a backend is an administrator's to do.
//!
//! Models take their turns in sequence (the Benchmarks page's rule: comparisons are sequences, not races), each
//! item as a greedy chat reply from an empty cache (`fresh`: an evaluation asks for no cache, so it runs alone and
//! a kept conversation cannot colour it). A model without a chat template is refused before anything runs: its
//! answers would come back empty and the suite would score them as a model's failure (the seed's lesson).

use crate::sched::{Event, Job, Kind};
use crate::AppState;
use kvad_engine::seam::{GenParams, Prompt};
use kvad_engine::SamplingParams;
use kvad_train::eval::{Item, Scorer};
use rusqlite::params;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// `POST /api/jobs` with `kind: "eval"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EvalRequest {
    /// Always "eval".
    pub kind: String,
    /// The prompt suite (a dataset of `{"prompt", "expected"}` lines).
    pub dataset: String,
    /// One to four models, asked in turn, each as its id or `NAME@backend`.
    pub models: Vec<String>,
    /// The scorer for items that name none (default exact).
    pub scorer: Option<String>,
    /// Tokens an answer may take (default 64).
    pub max_tokens: Option<usize>,
    /// A system message before every prompt.
    pub system: Option<String>,
}

/// A field the request got wrong: (field, message).
pub type Bad = (String, String);

/// One of the models asked: as named, its id, the backend named (if one was), and whether it parses reasoning.
#[derive(Debug, Clone)]
pub struct Variant {
    /// As the request named it (the results are kept under this name).
    pub name: String,
    /// The model's id.
    pub id: String,
    /// The backend it must be on.
    pub backend: Option<String>,
    /// Its template writes `<think>` traces.
    pub reasoning: bool,
}

impl EvalRequest {
    /// Checks the models (each known, each with a chat template, a backend named only by an administrator) and
    /// the scorer; returns the scorer and the variants.
    pub fn check(&self, state: &AppState, admin: bool) -> Result<(Scorer, Vec<Variant>), Bad> {
        if self.models.is_empty() || self.models.len() > 4 {
            return Err(("models".into(), format!("{} models: name 1 to 4", self.models.len())));
        }
        let mut variants = Vec::new();
        for (i, m) in self.models.iter().enumerate() {
            if self.models[..i].contains(m) {
                return Err((format!("models[{i}]"), format!("{m} is named twice")));
            }
            let (info, backend) = state.model_at(m).map_err(|e| (format!("models[{i}]"), e.message))?;
            if backend.is_some() && !admin {
                return Err((
                    format!("models[{i}]"),
                    format!(
                        "{m}: naming a backend places the model there for everyone; that is an administrator's to do"
                    ),
                ));
            }
            if !info.chat {
                return Err((
                    format!("models[{i}]"),
                    format!("{m} has no chat template: its answers to a suite would be scored, empty; pick an instruct model"),
                ));
            }
            variants.push(Variant { name: m.clone(), id: info.id.clone(), backend, reasoning: info.reasoning });
        }
        if let Some(n) = self.max_tokens.filter(|&n| n == 0 || n > 4096) {
            return Err(("max_tokens".into(), format!("{n}: 1 to 4096")));
        }
        let scorer = Scorer::parse(self.scorer.as_deref().unwrap_or("exact")).map_err(|e| ("scorer".to_string(), e))?;
        Ok((scorer, variants))
    }
}

/// One greedy chat answer from an empty cache, through the queue.
async fn ask(
    state: &AppState,
    account: &str,
    model: &str,
    messages: Vec<Value>,
    reasoning: bool,
    max: usize,
    cancel: &AtomicBool,
) -> Result<String, String> {
    let params = GenParams {
        sampling: SamplingParams { temperature: 0.0, ..Default::default() },
        max_tokens: max,
        ..Default::default()
    };
    let mut rx = super::ppl::patiently(cancel, || {
        let (events, rx) = crate::sched::events::channel();
        state.queue.submit(Job {
            model: model.to_string(),
            prompt: Prompt::Chat { messages: messages.clone(), tools: None, vars: Default::default() },
            params: params.clone(),
            stop: Vec::new(),
            parse_tools: false,
            one_call: false,
            clamp_max_tokens: true,
            parse_reasoning: reasoning,
            endpoint: "/api/jobs",
            account: account.to_string(),
            fresh: true,
            cancel: Arc::new(AtomicBool::new(false)),
            events,
            queued_at: Instant::now(),
        })?;
        Ok(rx)
    })
    .await?;
    let mut answer = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Started { .. }) => {}
            Some(Event::Delta(d)) => answer.push_str(&d.content),
            Some(Event::Done(_)) => return Ok(answer),
            Some(Event::Failed(e)) => return Err(e.message),
            None => return Err("the reply was lost".into()),
        }
    }
}

/// Puts `id` in memory on `backend` through the queue (unloading it from another backend first); says what it did.
async fn place(state: &AppState, account: &str, id: &str, backend: &str) -> Result<String, String> {
    let info = state.model_info(id).map_err(|e| e.message)?;
    if info.loaded && info.backend == backend {
        return Ok(format!("{id}@{backend} was in memory"));
    }
    let run = |kind: Kind| async move {
        let rx = state.queue.admin(account, kind, true).ok_or("the scheduler refused")?;
        rx.await.map_err(|_| "the engine stopped before answering".to_string())?.map_err(|e| e.message)
    };
    let mut did = Vec::new();
    if info.loaded {
        run(Kind::Unload { model: Some(id.to_string()) }).await?;
        did.push(format!("unloaded {id}@{}", info.backend));
    }
    run(Kind::Load { model: id.to_string(), backend: Some(backend.to_string()) }).await?;
    did.push(format!("loaded {id}@{backend}"));
    Ok(did.join(", then "))
}

/// Runs the suite: every model over every item, each result stored in `eval_items` and sent as an `item` event.
/// Returns the scores per model, and whether it ran to the end (false: cancelled).
#[allow(clippy::too_many_arguments)]
pub fn execute(
    state: &AppState,
    rt: &tokio::runtime::Handle,
    job: &str,
    account: &str,
    req: &EvalRequest,
    items: &[Item],
    (scorer, variants): (Scorer, Vec<Variant>),
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(Value),
) -> Result<(Value, bool), String> {
    let store = crate::store::Store::open(&state.db).map_err(|e| e.to_string())?;
    emit(json!({"type": "start", "items": items.len(), "models": req.models}));
    let mut scores = Vec::new();
    for v in &variants {
        let model = &v.name;
        if let Some(b) = &v.backend {
            let did = rt.block_on(place(state, account, &v.id, b))?;
            emit(json!({"type": "placed", "model": model, "did": did}));
        }
        let mut correct = 0usize;
        for (i, item) in items.iter().enumerate() {
            if cancel.load(Ordering::Relaxed) {
                scores.push(json!({"model": model, "correct": correct, "total": i}));
                return Ok((json!({"models": scores}), false));
            }
            let mut messages = Vec::new();
            if let Some(s) = &req.system {
                messages.push(json!({"role": "system", "content": s}));
            }
            messages.push(json!({"role": "user", "content": item.prompt}));
            let answer =
                rt.block_on(ask(state, account, &v.id, messages, v.reasoning, req.max_tokens.unwrap_or(64), cancel))?;
            let right = item.scorer.unwrap_or(scorer).score(&answer, &item.expected);
            correct += usize::from(right);
            store
                .conn
                .execute(
                    "INSERT INTO eval_items (job, model, idx, prompt, expected, answer, correct) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![job, model, i as i64, item.prompt, item.expected, answer, right],
                )
                .map_err(|e| format!("the eval_items table: {e}"))?;
            emit(json!({"type": "item", "model": model, "index": i, "correct": right}));
        }
        let accuracy = if items.is_empty() { 0.0 } else { correct as f64 / items.len() as f64 };
        scores.push(json!({"model": model, "correct": correct, "total": items.len(), "accuracy": accuracy}));
    }
    Ok((json!({"models": scores}), true))
}

/// The kept results of an eval job, in model then item order.
pub fn items(store: &crate::store::Store, job: &str) -> rusqlite::Result<Vec<Value>> {
    let mut st = store.conn.prepare(
        "SELECT model, idx, prompt, expected, answer, correct FROM eval_items WHERE job = ?1 ORDER BY rowid",
    )?;
    let rows = st.query_map(params![job], |r| {
        Ok(json!({"model": r.get::<_, String>(0)?, "index": r.get::<_, i64>(1)?, "prompt": r.get::<_, String>(2)?,
                  "expected": r.get::<_, String>(3)?, "answer": r.get::<_, String>(4)?,
                  "correct": r.get::<_, bool>(5)?}))
    })?;
    rows.collect()
}
