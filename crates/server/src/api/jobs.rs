//! `/api/jobs`: create a training run or an eval, list and inspect jobs, follow one's progress (SSE), cancel one. Each
//! account sees its own (an administrator's are its own too, as conversations are): another account's job is a
//! 404, as one that does not exist.

use super::conversations::Owner;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::eval::EvalRequest;
use crate::jobs::ppl::PplRequest;
use crate::jobs::train::TrainRequest;
use crate::store::Store;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::path::PathBuf;

async fn with_store<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&Store) -> Result<T, rusqlite::Error> + Send + 'static,
) -> Result<T, ApiError> {
    let db = state.db.clone();
    tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| f(&s)))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("the jobs table: {e}")))
}

fn not_found(id: &str) -> ApiError {
    ApiError { param: Some("id".into()), ..ApiError::not_found(format!("no job {id}")) }
}

/// The kinds of job `POST /api/jobs` starts.
pub const KINDS: &str = "train, eval, perplexity, bench";

/// `POST /api/jobs`: `{"kind": "train" | "eval" | "perplexity" | "bench", ...}` (see [`TrainRequest`],
/// [`EvalRequest`], [`PplRequest`], [`super::bench::ask`]); 201 with the job, queued.
pub async fn create(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let account = caller.account.clone();
    match v.get("kind").and_then(Value::as_str) {
        Some("train") => {}
        Some("eval") => return create_eval(state, account, caller.is_admin(), v).await,
        Some("perplexity") => return create_ppl(state, account, v).await,
        Some("bench") if caller.is_admin() => return create_bench(state, account, v).await,
        Some("bench") => {
            return Err(crate::auth::AuthError::Forbidden("a benchmark needs an administrator".into()).into())
        }
        Some(k) => return Err(ApiError::bad_field("kind", format!("\"{k}\": the job kinds are: {KINDS}"))),
        None => return Err(ApiError::bad_field("kind", format!("missing: the job kinds are: {KINDS}"))),
    }
    start_train(state, account, v, None).await
}

/// Starts a training run from its request `v`; `resume`: the job it continues and that run's latest checkpoint
/// (its output then exists, and is the same).
async fn start_train(
    state: AppState,
    account: String,
    v: Value,
    resume: Option<(String, PathBuf)>,
) -> Result<Response, ApiError> {
    let req: TrainRequest = serde_json::from_value(v.clone()).map_err(serde_field)?;
    let from = req
        .check(|m| kvad_hub::resolve_on_disk(m).map(|r| r.path).map_err(|e| e.to_string()))
        .map_err(|(field, msg)| ApiError::bad_field(field, msg))?;
    let out = kvad_hub::trained::dir(&req.output).map_err(|e| ApiError::bad_field("output", e))?;
    let busy = state.jobs.running().iter().any(|r| r.what.ends_with(&format!("→ trained:{}", req.output)));
    if busy || (out.exists() && resume.is_none()) {
        return Err(ApiError::conflict(
            "output",
            format!("trained:{} exists already; name the run another way", req.output),
        ));
    }
    let dataset = dataset_row(&state, &req.dataset, &account).await?;
    if dataset["format"] == "suite" {
        return Err(ApiError::bad_field(
            "dataset",
            format!("{} is a prompt suite: it is for evals, not training", req.dataset),
        ));
    }
    let file = super::datasets::file(&state, &req.dataset, dataset["format"].as_str().unwrap_or(""));
    let held: Vec<usize> = serde_json::from_value(dataset["validation"].clone()).unwrap_or_default();
    let id = new_id();
    let mut spec = v;
    if let Some((job, ckpt)) = &resume {
        spec["resumed"] = json!({"job": job, "checkpoint": ckpt});
    }
    let (i, a) = (id.clone(), account.clone());
    with_store(&state, move |s| crate::jobs::insert(s, &i, &a, "train", &spec)).await?;
    let what = format!("{} → trained:{}", req.model.clone().unwrap_or_else(|| "a new model".into()), req.output);
    state.jobs.spawn(state.db.clone(), id.clone(), "train", &account, what, move |cancel, emit| {
        let ckpt = resume.as_ref().map(|(_, c)| c.as_path());
        crate::jobs::train::execute(&req, &from, (&file, &held), (&out, ckpt), cancel, emit)
    });
    created(&state, &id, &account).await
}

/// `POST /api/jobs/{id}/resume`: a cancelled or failed training run continued from its latest checkpoint, as a new
/// job with the same request (its optimiser state, step and place in the data restored: the weights end as an
/// uninterrupted run's would). 409 when the run is not stopped, or stopped before its first checkpoint.
pub async fn resume(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (i, a) = (id.clone(), account.clone());
    let job = with_store(&state, move |s| crate::jobs::load(s, &i, Some(&a))).await?.ok_or_else(|| not_found(&id))?;
    if job["kind"] != "train" {
        return Err(ApiError::conflict("id", format!("{id} is a {} job: only training runs resume", job["kind"])));
    }
    if job["state"] != "cancelled" && job["state"] != "failed" {
        return Err(ApiError::conflict(
            "id",
            format!("{id} is {}: only a cancelled or failed run resumes", job["state"].as_str().unwrap_or("?")),
        ));
    }
    let mut spec = job["spec"].clone();
    if let Some(o) = spec.as_object_mut() {
        o.remove("resumed");
    }
    let output = spec["output"].as_str().unwrap_or_default().to_string();
    let out = kvad_hub::trained::dir(&output).map_err(|e| ApiError::internal(format!("output: {e}")))?;
    let ckpt = crate::jobs::train::latest_checkpoint(&out).ok_or_else(|| {
        ApiError::conflict(
            "id",
            format!("{id} stopped before its first checkpoint (save_every): there is nothing to resume from"),
        )
    })?;
    start_train(state, account, spec, Some((id, ckpt))).await
}

/// A body that does not deserialise, as a 400 naming the field serde names.
fn serde_field(e: serde_json::Error) -> ApiError {
    let msg = e.to_string();
    let field = msg.split('`').nth(1).unwrap_or("body").to_string();
    ApiError::bad_field(&field, msg)
}

fn new_id() -> String {
    format!("job_{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()))
}

/// `POST /api/jobs` with `kind: "eval"`: a prompt suite against one to four models.
async fn create_eval(state: AppState, account: String, admin: bool, v: Value) -> Result<Response, ApiError> {
    let req: EvalRequest = serde_json::from_value(v.clone()).map_err(serde_field)?;
    let checked = req.check(&state, admin).map_err(|(field, msg)| ApiError::bad_field(&field, msg))?;
    let dataset = dataset_row(&state, &req.dataset, &account).await?;
    if dataset["format"] != "suite" {
        return Err(ApiError::bad_field(
            "dataset",
            format!(
                "{} holds {} records, not a prompt suite ({{\"prompt\", \"expected\"}} lines)",
                req.dataset, dataset["format"]
            ),
        ));
    }
    let items: Vec<kvad_train::eval::Item> = stored_records(&state, &req.dataset, "suite")?
        .into_iter()
        .filter_map(|r| match r {
            kvad_train::data::Record::Item(i) => Some(i),
            _ => None,
        })
        .collect();
    let id = new_id();
    let (i, a, spec) = (id.clone(), account.clone(), v);
    with_store(&state, move |s| crate::jobs::insert(s, &i, &a, "eval", &spec)).await?;
    let what = format!("{} items of {} against {}", items.len(), req.dataset, req.models.join(", "));
    let (st, rt, job, who) = (state.clone(), tokio::runtime::Handle::current(), id.clone(), account.clone());
    state.jobs.spawn(state.db.clone(), id.clone(), "eval", &account, what, move |cancel, emit| {
        crate::jobs::eval::execute(&st, &rt, &job, &who, &req, &items, checked, cancel, emit)
    });
    created(&state, &id, &account).await
}

/// The caller's dataset `id` as the API shows it; a 400 naming `dataset` when the caller has none by that id.
async fn dataset_row(state: &AppState, id: &str, account: &str) -> Result<Value, ApiError> {
    let (ds, acc) = (id.to_string(), account.to_string());
    with_store(state, move |s| super::datasets::row(s, &ds, &acc))
        .await?
        .ok_or_else(|| ApiError::bad_field("dataset", format!("no dataset {id}")))
}

/// The records of a stored dataset (checked at upload, so a failure here is the server's).
fn stored_records(state: &AppState, id: &str, format: &str) -> Result<Vec<kvad_train::data::Record>, ApiError> {
    let file = super::datasets::file(state, id, format);
    let bytes = std::fs::read(&file).map_err(|e| ApiError::internal(format!("{}: {e}", file.display())))?;
    kvad_train::data::parse(&file.display().to_string(), &bytes)
        .map(|d| d.records)
        .map_err(|e| ApiError::internal(format!("the stored dataset {id} no longer parses: {}", e[0])))
}

/// Returns job `id`'s row as the API shows it, for a 201.
async fn created(state: &AppState, id: &str, account: &str) -> Result<Response, ApiError> {
    let (i, a) = (id.to_string(), account.to_string());
    let job = with_store(state, move |s| crate::jobs::load(s, &i, Some(&a))).await?.unwrap_or(Value::Null);
    Ok((StatusCode::CREATED, Json(job)).into_response())
}

/// `POST /api/jobs` with `kind: "perplexity"`: a model's perplexity over a dataset's documents.
async fn create_ppl(state: AppState, account: String, v: Value) -> Result<Response, ApiError> {
    let req: PplRequest = serde_json::from_value(v.clone()).map_err(serde_field)?;
    req.check(&state).map_err(|(field, msg)| ApiError::bad_field(&field, msg))?;
    let dataset = dataset_row(&state, &req.dataset, &account).await?;
    let format = dataset["format"].as_str().unwrap_or("").to_string();
    if format != "text" && format != "plain" {
        return Err(ApiError::bad_field(
            "dataset",
            format!(
                "{} holds {format} records: perplexity reads documents ({{\"text\"}} lines or plain text)",
                req.dataset
            ),
        ));
    }
    let docs: Vec<String> = stored_records(&state, &req.dataset, &format)?
        .into_iter()
        .filter_map(|r| match r {
            kvad_train::data::Record::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    let held: Vec<usize> = serde_json::from_value(dataset["validation"].clone()).unwrap_or_default();
    let docs = req.pick(docs, &held);
    if docs.is_empty() {
        return Err(ApiError::bad_field(
            "split",
            format!("split = \"{}\": {} holds no documents there", req.split.as_deref().unwrap_or("all"), req.dataset),
        ));
    }
    let id = new_id();
    let (i, a, spec) = (id.clone(), account.clone(), v);
    with_store(&state, move |s| crate::jobs::insert(s, &i, &a, "perplexity", &spec)).await?;
    let what = format!("perplexity of {} over {} documents of {}", req.model, docs.len(), req.dataset);
    let (st, rt, who) = (state.clone(), tokio::runtime::Handle::current(), account.clone());
    state.jobs.spawn(state.db.clone(), id.clone(), "perplexity", &account, what, move |cancel, emit| {
        crate::jobs::ppl::execute(&st, &rt, &who, &req, &docs, cancel, emit)
    });
    created(&state, &id, &account).await
}

/// `POST /api/jobs` with `kind: "bench"` (an administrator's): `POST /api/bench`'s run as a job, refused the same
/// way while another job or benchmark runs.
async fn create_bench(state: AppState, account: String, mut v: Value) -> Result<Response, ApiError> {
    let spec = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("kind");
    }
    let a = super::bench::ask(&state, v.to_string().as_bytes())?;
    let names: Vec<&str> =
        spec["models"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let what = format!("benchmark of {}", names.join(" vs "));
    let rx = super::bench::launch(&state, account.clone(), a)?;
    let id = new_id();
    let (i, acc) = (id.clone(), account.clone());
    with_store(&state, move |s| crate::jobs::insert(s, &i, &acc, "bench", &spec)).await?;
    let rt = tokio::runtime::Handle::current();
    state.jobs.spawn(state.db.clone(), id.clone(), "bench", &account, what, move |cancel, emit| {
        super::bench::follow(&rt, rx, cancel, emit)
    });
    created(&state, &id, &account).await
}

/// `GET /api/jobs/{id}/items`: an eval job's kept answers, each with its prompt, expected answer and score.
pub async fn items(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (key, scope) = (id.clone(), Some(account));
    let data = with_store(&state, move |s| {
        Ok(match crate::jobs::load(s, &key, scope.as_deref())? {
            Some(_) => Some(crate::jobs::eval::items(s, &key)?),
            None => None,
        })
    })
    .await?
    .ok_or_else(|| not_found(&id))?;
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /api/jobs`: the caller's jobs, newest first.
pub async fn list(State(state): State<AppState>, Owner(account): Owner) -> Result<Json<Value>, ApiError> {
    let scope = Some(account);
    let data = with_store(&state, move |s| crate::jobs::list(s, scope.as_deref())).await?;
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /api/jobs/{id}`: one job with its last step.
pub async fn get(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (key, scope) = (id.clone(), Some(account));
    let job = with_store(&state, move |s| crate::jobs::load(s, &key, scope.as_deref())).await?;
    job.map(Json).ok_or_else(|| not_found(&id))
}

/// `DELETE /api/jobs/{id}`: cancels a running job (it stops after the step it is on; its last checkpoint stays);
/// a finished one is answered as it is.
pub async fn cancel(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (key, scope) = (id.clone(), Some(account));
    let job = with_store(&state, move |s| crate::jobs::load(s, &key, scope.as_deref()))
        .await?
        .ok_or_else(|| not_found(&id))?;
    let asked = state.jobs.cancel(&id);
    let mut job = job;
    job["cancelling"] = json!(asked);
    Ok(Json(job))
}

/// `GET /api/jobs/{id}/events`: every event so far, then the live ones until the job ends (SSE, one JSON object a
/// `data:` line; the last is `{"type": "state", "state": "done"|"failed"|"cancelled"}`).
pub async fn events(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (key, scope) = (id.clone(), Some(account));
    with_store(&state, move |s| crate::jobs::load(s, &key, scope.as_deref())).await?.ok_or_else(|| not_found(&id))?;
    // Subscribe before reading the stored events, so none falls between the two.
    let live = state.jobs.subscribe(&id);
    let key = id.clone();
    let stored = with_store(&state, move |s| crate::jobs::events(s, &key, 0)).await?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let mut last = 0i64;
    let mut ended = false;
    for ev in stored {
        last = ev["seq"].as_i64().unwrap_or(last);
        ended |= is_end(&ev);
        let _ = tx.send(ev);
    }
    if let (Some(mut live), false) = (live, ended) {
        tokio::spawn(async move {
            loop {
                match live.recv().await {
                    Ok(ev) if ev["seq"].as_i64().unwrap_or(0) > last => {
                        let end = is_end(&ev);
                        if tx.send(ev).is_err() || end {
                            break;
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => break,
                }
            }
        });
    }
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (Ok::<_, Infallible>(SseEvent::default().data(ev.to_string())), rx))
    });
    Ok(Sse::new(stream).into_response())
}

fn is_end(ev: &Value) -> bool {
    ev["type"] == "state" && matches!(ev["state"].as_str(), Some("done" | "failed" | "cancelled"))
}
