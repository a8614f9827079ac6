//! Routes the web UI needs beside the OpenAI ones: `POST /api/tokenize` (the Playground's tokeniser inspector),
//! `GET /api/models` (what is in the server's Hugging Face cache on disk), and `GET/PATCH /api/settings` (the
//! kvad.toml values in force, and the scheduler limits that can change while the server runs).

use super::request::{parse_body, Fields};
use crate::auth::{Admin, Caller};
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use kvad_hub::cache::HfCache;
use serde_json::{json, Value};

/// Longest text `POST /api/tokenize` reads, in characters.
const TOKENIZE_MAX: usize = 100_000;

/// `POST /api/tokenize {model, text}`: the model's own tokenizer on a plain prompt, without loading its weights.
pub async fn tokenize(State(state): State<AppState>, _who: Caller, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.string("model")?.to_string();
    let text = f.string("text")?.to_string();
    f.finish()?;
    let n = text.chars().count();
    if n > TOKENIZE_MAX {
        return Err(ApiError::bad_field("text", format!("text is {n} characters; at most {TOKENIZE_MAX}")));
    }
    state.model_info(&model)?;
    let tok = state.tokenizers.clone();
    let m = model.clone();
    let tokens = tokio::task::spawn_blocking(move || tok.tokenize(&m, &text))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(json!({"model": model, "count": tokens.len(), "tokens": tokens})))
}

/// `GET /api/models`: the repos in the server's cache (size, complete or not) and which the server offers.
pub async fn disk(State(state): State<AppState>, _who: Caller) -> Result<Json<Value>, ApiError> {
    let served: Vec<String> = state.queue.catalog().into_iter().map(|m| m.id).collect();
    let cache = HfCache::from_env();
    let root = cache.root().display().to_string();
    let repos =
        tokio::task::spawn_blocking(move || cache.list()).await.map_err(|e| ApiError::internal(e.to_string()))?;
    let models: Vec<Value> = repos
        .iter()
        .map(|r| {
            let id = r.repo.to_string();
            json!({
                "model": id,
                "size": r.size,
                "complete": r.snapshots.iter().any(|(_, ok)| *ok),
                "revisions": r.refs.iter().map(|(k, c)| json!({"ref": k, "commit": c})).collect::<Vec<_>>(),
                "served": served.contains(&id),
            })
        })
        .collect();
    Ok(Json(json!({"cache": root, "models": models})))
}

/// The `[server]` keys `PATCH /api/settings` can change while the server runs (the scheduler's limits); the rest
/// are read at start and need a restart.
pub const LIVE: &[&str] = &["queue", "queue_per_account", "generations_per_minute", "batch", "default_model"];

fn settings_json(state: &AppState) -> Value {
    let s = &state.config.server;
    let l = state.queue.view().limits;
    // What is served, as the engine has it (a scripted server's models are not kvad.toml's).
    let catalog = state.queue.catalog();
    let models: Vec<&str> = catalog.iter().map(|m| m.id.as_str()).collect();
    let backend = catalog.first().map(|m| m.default_backend.as_str()).or(s.backend.as_deref());
    json!({
        "server": {
            "bind": s.bind, "queue": l.queue, "queue_per_account": l.queue_per_account,
            "generations_per_minute": l.generations_per_minute, "batch": l.batch, "context": s.context,
            "memory": s.memory, "autoload": s.autoload, "models": models, "backend": backend,
            "shutdown_timeout": s.shutdown_timeout, "max_body": s.max_body,
            "default_model": state.default_model.read().ok().and_then(|d| d.clone()),
        },
        "live": LIVE,
    })
}

/// `GET /api/settings`: the `[server]` values in force, and which of them can change live.
pub async fn settings(State(state): State<AppState>, _who: Caller) -> Result<Json<Value>, ApiError> {
    Ok(Json(settings_json(&state)))
}

/// `PATCH /api/settings {queue?, queue_per_account?, generations_per_minute?, batch?, default_model?}`: changes
/// the scheduler's limits now, for this run of the server (kvad.toml is not rewritten); the default model (`kvad
/// use` against the server) is kept in kvad.db. `generations_per_minute: null` lifts the
/// limit. Any other key is refused by name, saying it needs a restart.
pub async fn change(State(state): State<AppState>, Admin(_who): Admin, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    if let Some(k) = obj.keys().find(|k| !LIVE.contains(&k.as_str())) {
        let known = json!(settings_json(&state)["server"]).get(k).is_some();
        let why = if known { "is read at start: change it in kvad.toml and restart" } else { "is not a setting" };
        return Err(ApiError::bad_field(k, format!("{k} {why}; what can change live: {}", LIVE.join(", "))));
    }
    let mut f = Fields::new(&obj, "");
    let queue = f.opt_int("queue", 1, 100_000)?;
    let per_account = f.opt_int("queue_per_account", 1, 100_000)?;
    let per_minute = if obj.contains_key("generations_per_minute") {
        Some(f.opt_int("generations_per_minute", 1, 1_000_000)?)
    } else {
        None
    };
    let batch = f.opt_int("batch", 1, 4096)?;
    let default_model = f.opt_string("default_model")?.map(str::to_string);
    f.finish()?;
    if let Some(m) = default_model {
        // A model this server offers or has on disk (a 404 naming what there is otherwise), kept across restarts.
        let id = state.model_info_as(&m, true)?.id;
        let db = state.db.clone();
        let keep = id.clone();
        tokio::task::spawn_blocking(move || crate::store::Store::open(&db).and_then(|s| s.set_default_model(&keep)))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("keeping the default model: {e}")))?;
        if let Ok(mut d) = state.default_model.write() {
            *d = Some(id);
        }
    }
    state.queue.set_limits(|l| {
        if let Some(q) = queue {
            l.queue = q as usize;
        }
        if let Some(p) = per_account {
            l.per_account = p as usize;
        }
        if let Some(p) = per_minute {
            l.per_minute = p.map(|p| p as usize);
        }
        if let Some(b) = batch {
            l.batch = Some(b as usize);
        }
    });
    Ok(Json(settings_json(&state)))
}

/// `GET /api/requests?limit=N`: the latest rows of the requests table (20 unless given, at most 200), newest
/// first, for the Dashboard. With authentication `none` every caller is the local administrator and sees every
/// account's; the auth layer narrows a user to their own.
pub async fn recent(
    State(state): State<AppState>,
    who: Caller,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    if let Some(k) = q.keys().find(|k| k.as_str() != "limit") {
        return Err(ApiError::bad_field(k, format!("{k} is not a parameter of /api/requests (limit is)")));
    }
    let limit = match q.get("limit") {
        None => 20,
        Some(v) => match v.parse::<u32>() {
            Ok(n @ 1..=200) => n,
            _ => return Err(ApiError::bad_field("limit", format!("limit = {v:?}: a whole number from 1 to 200"))),
        },
    };
    let db = state.db.clone();
    let scope = who.scope().map(str::to_string);
    let rows = tokio::task::spawn_blocking(move || {
        crate::store::Store::open(&db).and_then(|s| s.recent(limit, scope.as_deref()))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("reading the requests table: {e}")))?;
    Ok(Json(json!({"requests": rows})))
}
