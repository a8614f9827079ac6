//! `POST /api/bench` and `GET /api/bench`: `kvad bench`'s protocol run by the server, for the Benchmarks page.
//!
//! A round visits every variant (a model) once and a run is several rounds, so drift on the machine is spread over
//! all variants rather than blamed on one; every sample is kept, and the summary is the median and the range. Each
//! timed generation is a job on the ordinary queue asking for no cache (`fresh`: it runs alone, from an empty KV
//! cache), so a benchmark neither races the replies being written nor reports a cached time to first token. An
//! untimed warm-up per variant (it also loads the model) comes first.
//!
//! One benchmark runs at a time: a second is refused with a 409 naming the one in the way. A run whose client
//! leaves stops after the sample it is taking.

use super::request::{parse_body, Fields};
use crate::auth::{Admin, Caller};
use crate::error::ApiError;
use crate::sched::{Event, Job};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use kvad_engine::bench::{Sample, Summary};
use kvad_engine::seam::{GenParams, Prompt};
use kvad_engine::SamplingParams;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// The prompt every timed generation continues.
const PROMPT: &str = "The history of the printing press begins with movable type, which";

/// What the Benchmarks page shows: the run in progress (or the last one), every sample kept.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunView {
    /// Who started it.
    pub account: String,
    /// The variants, in the order each round visits them.
    pub models: Vec<String>,
    /// Rounds asked for.
    pub rounds: usize,
    /// Tokens generated per sample.
    pub max_tokens: usize,
    /// Seconds since it started (at the time of asking).
    pub elapsed_s: f64,
    /// Still running.
    pub running: bool,
    /// Samples so far, per variant (same order as `models`).
    pub samples: Vec<Vec<Sample>>,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
    #[serde(skip)]
    started: Option<Instant>,
}

/// The benchmark running now, or the last one.
#[derive(Clone, Default)]
pub struct Benches(Arc<Mutex<Option<RunView>>>);

impl Benches {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<RunView>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims the bench for a new run, or a 409 naming the run in the way.
    fn claim(&self, run: RunView) -> Result<(), ApiError> {
        let mut cur = self.lock();
        if let Some(r) = cur.as_ref().filter(|r| r.running) {
            let done: usize = r.samples.iter().map(Vec::len).sum();
            return Err(ApiError {
                status: StatusCode::CONFLICT,
                message: format!(
                    "a benchmark is already running: {} for account {:?}, {done} of {} samples taken, started {:.0} s \
                     ago; two at once would measure each other, so this one is refused: wait for it to end",
                    r.models.join(" vs "),
                    r.account,
                    r.rounds * r.models.len(),
                    r.started.map_or(0.0, |s| s.elapsed().as_secs_f64())
                ),
                kind: "invalid_request_error",
                param: None,
                code: Some("bench_in_progress"),
                retry_after: Some(5),
            });
        }
        *cur = Some(run);
        Ok(())
    }

    fn update(&self, f: impl FnOnce(&mut RunView)) {
        if let Some(r) = self.lock().as_mut() {
            f(r);
        }
    }

    /// The run now or the last, as JSON.
    pub fn view(&self) -> Option<RunView> {
        self.lock().clone().map(|mut r| {
            r.elapsed_s = r.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
            r
        })
    }
}

/// Medians and ranges of one variant's samples.
pub fn summarise(model: &str, samples: &[Sample]) -> Value {
    let of = |f: fn(&Sample) -> f64| Summary::of(&samples.iter().map(f).collect::<Vec<_>>());
    json!({
        "model": model,
        "samples": samples.len(),
        "ttft_ms": of(|s| s.ttft_ms),
        "decode_tps": of(|s| s.decode_tps),
        "prefill_tps": of(|s| s.prefill_tps),
    })
}

/// `GET /api/bench`: the benchmark running now, or the last one, with every sample and the summary.
pub async fn state(State(state): State<AppState>, _who: Caller) -> Result<Json<Value>, ApiError> {
    let Some(r) = state.bench.view() else { return Ok(Json(json!({"running": false, "run": null}))) };
    let summary: Vec<Value> = r.models.iter().zip(&r.samples).map(|(m, s)| summarise(m, s)).collect();
    Ok(Json(json!({"running": r.running, "run": r, "summary": summary})))
}

/// A benchmark asked for: the variants, rounds and tokens a sample.
pub struct Ask {
    models: Vec<String>,
    rounds: usize,
    max_tokens: usize,
}

/// Reads and checks a benchmark's fields (`models`, `rounds`, `max_tokens`), each refusal naming its field.
pub fn ask(state: &AppState, body: &[u8]) -> Result<Ask, ApiError> {
    let obj = parse_body(body)?;
    let mut f = Fields::new(&obj, "");
    let models: Vec<String> = match f.get("models") {
        Some(Value::Array(a)) if (1..=4).contains(&a.len()) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad_field(&format!("models[{i}]"), format!("models[{i}] = {v}: must be a model id"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(Value::Array(a)) => {
            return Err(ApiError::bad_field("models", format!("models has {} entries: 1 to 4 variants", a.len())))
        }
        Some(v) => return Err(ApiError::bad_field("models", format!("models must be an array of model ids, not {v}"))),
        None => return Err(ApiError::bad_field("models", "models is required: the variants to compare")),
    };
    let rounds = f.opt_int("rounds", 1, 20)?.unwrap_or(3) as usize;
    let max_tokens = f.opt_int("max_tokens", 2, 512)?.unwrap_or(32) as usize;
    f.finish()?;
    for (i, m) in models.iter().enumerate() {
        if models[..i].contains(m) {
            return Err(ApiError::bad_field("models", format!("models names {m:?} twice")));
        }
        state.model_info(m)?;
    }
    Ok(Ask { models, rounds, max_tokens })
}

/// `POST /api/bench {models, rounds?, max_tokens?}`: runs the rounds and streams each sample as it lands
/// (server-sent events `start`, `sample {model, index, sample}`, then `done {summary}` or `error`).
pub async fn run(State(state): State<AppState>, Admin(who): Admin, body: Bytes) -> Result<Response, ApiError> {
    let a = ask(&state, &body)?;
    let rx = launch(&state, who.account, a)?;
    let events = stream::unfold(rx, |mut rx| async move {
        let (name, data) = rx.recv().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().event(name).data(data.to_string())), rx))
    });
    Ok(Sse::new(events).into_response())
}

/// Starts a benchmark unless something would be measured beside it (a job running, another benchmark: a 409
/// naming it): the rounds run on a task of their own, and their events (`start`, `sample`, then `done` or
/// `error`) come through the receiver; dropping it stops the run after the sample it is taking. Must be called
/// within the runtime.
pub fn launch(state: &AppState, account: String, a: Ask) -> Result<UnboundedReceiver<(String, Value)>, ApiError> {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down", None));
    }
    if let Some(j) = state.jobs.running().into_iter().next() {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            message: format!(
                "a {} job is running ({}: {}, account {:?}); a benchmark beside it would measure both, so it is \
                 refused: wait for the job to end, or cancel it (DELETE /api/jobs/{})",
                j.kind, j.id, j.what, j.account, j.id
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("job_in_progress"),
            retry_after: Some(5),
        });
    }
    state.bench.claim(RunView {
        account: account.clone(),
        models: a.models.clone(),
        rounds: a.rounds,
        max_tokens: a.max_tokens,
        elapsed_s: 0.0,
        running: true,
        samples: vec![Vec::new(); a.models.len()],
        error: None,
        started: Some(Instant::now()),
    })?;
    let (tx, rx) = unbounded_channel::<(String, Value)>();
    let _ = tx.send(("start".into(), json!({"models": a.models, "rounds": a.rounds, "max_tokens": a.max_tokens})));
    let st = state.clone();
    tokio::spawn(async move {
        let result = rounds(&st, &account, &a, &tx).await;
        let error = result.err().map(|e| e.message);
        st.bench.update(|r| {
            r.running = false;
            r.error.clone_from(&error);
        });
        let last = match (error, st.bench.view()) {
            (Some(e), _) => ("error".to_string(), ApiError::bad_request(e).body()),
            (None, Some(r)) => (
                "done".to_string(),
                json!({"summary": r.models.iter().zip(&r.samples).map(|(m, s)| summarise(m, s)).collect::<Vec<_>>()}),
            ),
            (None, None) => ("error".to_string(), ApiError::internal("the run was lost").body()),
        };
        let _ = tx.send(last);
    });
    Ok(rx)
}

/// A benchmark as a job (`POST /api/jobs` with `kind: "bench"`, launched by [`launch`]): its events become the job's
/// (`{"type": "sample", ...}`), its summary the job's result; a cancel stops it after the sample it is taking.
pub fn follow(
    rt: &tokio::runtime::Handle,
    mut rx: UnboundedReceiver<(String, Value)>,
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(Value),
) -> Result<(Value, bool), String> {
    loop {
        let next = rt.block_on(async { tokio::time::timeout(std::time::Duration::from_millis(200), rx.recv()).await });
        match next {
            Ok(Some((name, data))) => {
                let mut ev = json!({"type": name});
                if let (Some(e), Some(d)) = (ev.as_object_mut(), data.as_object()) {
                    e.extend(d.clone());
                }
                match name.as_str() {
                    "done" => return Ok((data, true)),
                    "error" => return Err(data["error"]["message"].as_str().unwrap_or("the benchmark failed").into()),
                    _ => emit(ev),
                }
            }
            Ok(None) => return Err("the benchmark ended without a summary".into()),
            Err(_) if cancel.load(Ordering::Relaxed) => return Ok((json!({"cancelled": true}), false)),
            Err(_) => {}
        }
    }
}

/// The warm-up and the interleaved rounds; stops early when the client has gone (`tx` closed).
async fn rounds(
    state: &AppState,
    account: &str,
    a: &Ask,
    tx: &UnboundedSender<(String, Value)>,
) -> Result<(), ApiError> {
    for m in &a.models {
        timed(state, account, m, a.max_tokens.min(4), 0).await?;
    }
    for round in 1..=a.rounds {
        for (i, m) in a.models.iter().enumerate() {
            if tx.is_closed() {
                return Err(ApiError::bad_request("the client went away; the run stopped"));
            }
            let s = timed(state, account, m, a.max_tokens, round).await?;
            state.bench.update(|r| r.samples[i].push(s.clone()));
            let _ = tx.send(("sample".into(), json!({"model": m, "index": i, "sample": s})));
        }
    }
    Ok(())
}

/// One generation from an empty cache, timed from the moment it starts reading its prompt.
async fn timed(
    state: &AppState,
    account: &str,
    model: &str,
    max_tokens: usize,
    round: usize,
) -> Result<Sample, ApiError> {
    let (events, mut rx) = crate::sched::events::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let params = GenParams {
        sampling: SamplingParams { temperature: 0.0, ..Default::default() },
        max_tokens,
        ..Default::default()
    };
    state.queue.submit(Job {
        model: model.to_string(),
        prompt: Prompt::Text(PROMPT.into()),
        params,
        stop: Vec::new(),
        parse_tools: false,
        one_call: false,
        clamp_max_tokens: false,
        parse_reasoning: false,
        endpoint: "/api/bench",
        account: account.to_string(),
        fresh: true,
        cancel: cancel.clone(),
        events,
        queued_at: Instant::now(),
    })?;
    let mut started = None;
    let mut prompt_tokens = 0;
    let mut first = None;
    loop {
        match rx.recv().await {
            Some(Event::Started { prompt_tokens: n, .. }) => {
                started = Some(Instant::now());
                prompt_tokens = n;
            }
            Some(Event::Delta(_)) => {
                first.get_or_insert_with(Instant::now);
            }
            Some(Event::Done(d)) => {
                let end = Instant::now();
                let t0 = started.unwrap_or(end);
                let t1 = first.unwrap_or(end);
                let ttft = t1.duration_since(t0).as_secs_f64().max(1e-6);
                let decode = end.duration_since(t1).as_secs_f64();
                let after_first = d.completion_tokens.saturating_sub(1) as f64;
                return Ok(Sample {
                    round,
                    prefill_tps: prompt_tokens as f64 / ttft,
                    decode_tps: if decode > 0.0 { after_first / decode } else { 0.0 },
                    ttft_ms: ttft * 1e3,
                });
            }
            Some(Event::Failed(e)) => return Err(e),
            None => return Err(ApiError::internal("the engine stopped mid-benchmark")),
        }
    }
}
