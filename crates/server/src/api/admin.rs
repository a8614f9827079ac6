//! What waits, what is in memory, who used the machine: `/api/queue`, `/api/ps`, `/api/load`, `/api/unload`,
//! `/api/metrics/usage` and Prometheus' `/metrics`.
//!
//! An administrator (everyone, in mode none) sees whose jobs wait and everybody's usage; a user sees the queue with
//! other accounts' names blanked (null) and only its own usage. Load and unload are for administrators.

use super::request::{parse_body, Fields};
use crate::auth::{Admin, Caller};
use crate::error::ApiError;
use crate::sched::Kind;
use crate::store::Store;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kvad_engine::BackendKind;
use serde_json::{json, Value};
use std::collections::HashMap;

/// `GET /api/queue`: what waits (for how long, whose), what runs, and the jobs running beside it with what each
/// costs chat (the replies since it started against those before); to a user, other accounts' names are null.
pub async fn queue(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let view = state.queue.view();
    let mut v = serde_json::to_value(view).map_err(|e| ApiError::internal(e.to_string()))?;
    let db = state.db.clone();
    v["jobs"] = tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| crate::jobs::impact::running(&s)))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map(Value::from)
        .map_err(|e| ApiError::internal(format!("the jobs table: {e}")))?;
    if let Some(own) = caller.scope() {
        for job in v["jobs"].as_array_mut().into_iter().flatten() {
            if job["account"].as_str() != Some(own) {
                // Another account's job: that one runs and what it costs chat, not whose or which.
                job["account"] = Value::Null;
                job["id"] = Value::Null;
            }
        }
        for list in ["waiting", "running"] {
            for job in v[list].as_array_mut().into_iter().flatten() {
                if job["account"].as_str() != Some(own) {
                    job["account"] = Value::Null;
                }
            }
        }
    }
    Ok(Json(v))
}

/// `GET /api/ps`: the models in memory, what each is charged, the cache bytes a token adds, and the memory left.
pub async fn ps(State(state): State<AppState>) -> Json<Value> {
    let m = state.queue.memory();
    let models: Vec<Value> = m
        .resident
        .iter()
        .map(|r| {
            json!({"name": r.name, "charged_bytes": r.charged, "context": r.context,
                   "cache_bytes_per_token": r.cache_bytes_per_token,
                   "conversations": r.held.conversations, "cached_tokens": r.held.tokens})
        })
        .collect();
    Json(json!({"models": models, "memory": {"total_bytes": m.total, "left_bytes": m.left()}}))
}

async fn admin(state: &AppState, who: &Caller, kind: Kind) -> Result<Vec<String>, ApiError> {
    let rx = state
        .queue
        .admin(&who.account, kind, true)
        .ok_or_else(|| ApiError::unavailable("the scheduler refused", None))?;
    rx.await.map_err(|_| ApiError::internal("the engine stopped before answering"))?
}

/// `POST /api/load {"model", "backend"?}`: a job on the queue (nothing passes it) that loads the model on
/// `backend` (one of the six `kvad_engine::BackendKind` names; absent: the model's default — the backend its last
/// load named, else `[server] backend`, else gpu-q8 where the GPU runs it and cpu-q8 otherwise). A backend named
/// here becomes the model's default, remembered in the database across restarts. Refused with a 400 naming an unknown backend, a 409 naming the holders when the model does
/// not fit beside what is loaded, and a 409 naming the backend it is on when it is in memory on another (unload it
/// first: nothing is unloaded implicitly); loading it again where it is succeeds and changes nothing. Answers
/// `{"loaded": [model], "backend": what it is on}`.
pub async fn load(State(state): State<AppState>, Admin(who): Admin, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let named = f.string("model")?.to_string();
    let backend = f.opt_string("backend")?.map(str::to_string);
    f.finish()?;
    // `NAME@backend` names the backend too; with a `backend` field as well, the two must agree.
    let (info, at) = state.model_at(&named)?;
    let backend = match (at, backend) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_field("backend", format!("backend = {b:?}, but the model is named {named:?}")))
        }
        (a, b) => b.or(a),
    };
    let model = info.id.clone();
    if let Some(b) = backend.as_deref().filter(|b| *b != info.default_backend) {
        b.parse::<BackendKind>().map_err(|e| ApiError::bad_field("backend", e.to_string()))?;
    }
    let named = backend.is_some();
    let names = admin(&state, &who, Kind::Load { model: model.clone(), backend }).await?;
    let on = state.model_info(&model)?.backend;
    if named {
        let (db, m, b) = (state.db.clone(), model.clone(), on.clone());
        tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| s.set_choice(&m, &b)))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("remembering {model}'s backend: {e}")))?;
    }
    Ok(Json(json!({"loaded": names, "backend": on})))
}

/// `POST /api/unload {"model"}` or `{"all": true}`: a job on the queue; it runs when the replies before it are done.
pub async fn unload(State(state): State<AppState>, Admin(who): Admin, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.opt_string("model")?.map(str::to_string);
    let all = f.opt_bool("all")?.unwrap_or(false);
    f.finish()?;
    let model = match (model, all) {
        (Some(_), true) => return Err(ApiError::bad_field("all", "give model or all: true, not both")),
        (None, false) => {
            return Err(ApiError::bad_field("model", "model is required (or all: true to unload every model)"))
        }
        (m, _) => m,
    };
    // `NAME@backend` (as `kvad ps` names it) unloads the model only from that backend.
    let model = match model {
        Some(m) => {
            let (info, at) = state.model_at(&m)?;
            if let Some(b) = at.filter(|b| info.loaded && *b != info.backend) {
                return Err(ApiError::conflict(
                    "model",
                    format!("{} is loaded on {}, not on {b}", info.id, info.backend),
                ));
            }
            Some(info.id)
        }
        None => None,
    };
    let names = admin(&state, &who, Kind::Unload { model }).await?;
    Ok(Json(json!({"unloaded": names})))
}

/// `GET /api/metrics/usage?days=N`: the requests table added up by account over the last N days (7 unless given):
/// everyone's to an administrator, the caller's own to a user.
pub async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    if let Some(k) = q.keys().find(|k| k.as_str() != "days") {
        return Err(ApiError::bad_field(k, format!("{k} is not a parameter of /api/metrics/usage (days is)")));
    }
    let days = match q.get("days") {
        None => 7,
        Some(d) => match d.parse::<u32>() {
            Ok(n @ 1..=3650) => n,
            _ => return Err(ApiError::bad_field("days", format!("days = {d:?}: a whole number from 1 to 3650"))),
        },
    };
    let db = state.db.clone();
    let only = caller.scope().map(str::to_string);
    let rows = tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| s.usage(days, only.as_deref())))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("reading the requests table: {e}")))?;
    Ok(Json(json!({"days": days, "accounts": rows})))
}

/// `GET /metrics`: Prometheus' text format.
pub async fn prometheus(State(state): State<AppState>) -> Response {
    let loaded = state.queue.memory().resident.len();
    let text = state.queue.metrics().render(state.queue.depth(), state.queue.running(), loaded);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
