//! `/api/datasets`: upload a training set (JSONL of `{"text"}` or `{"messages"}`, or plain text), list, inspect,
//! count its tokens with a model's tokenizer, delete. Each account sees its own.
//!
//! An upload is checked whole before anything is kept: a bad file is a 400 listing every bad line (the first 20),
//! each with its line number and field. The validation split is drawn once at upload (seeded, `validation`
//! fraction, default 0.1) and kept, so every run on a dataset holds out the same records.

use super::conversations::Owner;
use crate::error::ApiError;
use crate::store::Store;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kvad_train::data;
use rusqlite::params;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Where uploaded files live: the data directory's `datasets/`.
pub fn dir(state: &AppState) -> std::path::PathBuf {
    state.db.parent().unwrap_or(std::path::Path::new(".")).join("datasets")
}

/// The stored file of a dataset (its extension says how to read it).
pub fn file(state: &AppState, id: &str, format: &str) -> std::path::PathBuf {
    dir(state).join(format!("{id}.{}", if format == "plain" { "txt" } else { "jsonl" }))
}

async fn with_store<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&Store) -> Result<T, rusqlite::Error> + Send + 'static,
) -> Result<T, ApiError> {
    let db = state.db.clone();
    tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| f(&s)))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("the datasets table: {e}")))
}

fn not_found(id: &str) -> ApiError {
    ApiError { param: Some("id".into()), ..ApiError::not_found(format!("no dataset {id}")) }
}

/// A dataset's row (None when it is not the account's).
pub fn row(s: &Store, id: &str, account: &str) -> rusqlite::Result<Option<Value>> {
    let mut st = s.conn.prepare(
        "SELECT id, name, format, records, validation, bytes, created_at FROM datasets WHERE id = ?1 AND account = ?2",
    )?;
    let mut rows = st.query_map(params![id, account], |r| {
        let held: Vec<usize> = serde_json::from_str(&r.get::<_, String>(4)?).unwrap_or_default();
        let records = r.get::<_, i64>(3)? as usize;
        Ok(json!({
            "id": r.get::<_, String>(0)?, "object": "dataset", "name": r.get::<_, String>(1)?,
            "format": r.get::<_, String>(2)?, "records": records, "train_records": records - held.len(),
            "validation_records": held.len(), "validation": held, "bytes": r.get::<_, i64>(5)?,
            "created_at": r.get::<_, String>(6)?,
        }))
    })?;
    rows.next().transpose()
}

/// A Hub dataset's split, fetched into the HF cache (`datasets--owner--name`) and read as one dataset: every shard
/// checked. Returns the name it is listed under and the records.
async fn from_hub(hub: &str, split: &str) -> Result<(String, data::Dataset), ApiError> {
    let mut rr = kvad_hub::RepoRef::parse(hub).map_err(|e| ApiError::bad_field("hub", e.to_string()))?;
    rr.repo = rr.repo.dataset();
    let split_name = split.to_string();
    let pulled = tokio::task::spawn_blocking(move || {
        let r = kvad_hub::Hub::from_env().pull_split(&rr, &split_name, &mut kvad_hub::Silent);
        r.and_then(|p| {
            let read = |f: &std::path::PathBuf| {
                std::fs::read(f).map_err(|e| kvad_hub::HubError::Io { path: f.display().to_string(), source: e })
            };
            p.files.iter().map(|(name, f)| Ok((name.clone(), read(f)?))).collect::<Result<Vec<_>, _>>()
        })
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(super::pull::hub_error)?;
    let ds = data::parse_files(&pulled).map_err(|errs| {
        let lines: Vec<String> = errs.iter().map(ToString::to_string).collect();
        ApiError::bad_field("hub", format!("{hub} ({split}): {} bad record(s): {}", lines.len(), lines.join("; ")))
    })?;
    Ok((format!("{hub}:{split}"), ds))
}

/// `POST /api/datasets?name=N&validation=F`: the body is the file. Or `?hub=owner/name[@revision]&split=S`
/// (default `train`) with no body: a dataset repo's split from the Hub (Parquet, JSONL, JSON or text shards).
pub async fn create(
    State(state): State<AppState>,
    Owner(account): Owner,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let hub = match q.get("hub") {
        Some(h) if !body.is_empty() => {
            return Err(ApiError::bad_field(
                "hub",
                format!("hub = {h:?} with a body: give the file or the repo, not both"),
            ))
        }
        Some(h) => Some(from_hub(h, q.get("split").map_or("train", String::as_str)).await?),
        None => None,
    };
    let name =
        q.get("name").cloned().or_else(|| hub.as_ref().map(|h| h.0.clone())).unwrap_or_else(|| "dataset.jsonl".into());
    if name.is_empty() || name.len() > 200 {
        return Err(ApiError::bad_field("name", format!("{name:?} must be 1-200 characters")));
    }
    let validation = match q.get("validation") {
        Some(v) => v.parse::<f64>().ok().filter(|f| (0.0..1.0).contains(f)).ok_or_else(|| {
            ApiError::bad_field("validation", format!("{v} must be a fraction from 0 up to (not including) 1"))
        })?,
        None => 0.1,
    };
    let (ds, body) = match hub {
        Some((_, ds)) => {
            let file = data::to_file(&ds);
            (ds, Bytes::from(file))
        }
        None => {
            let ds = data::parse(&name, &body).map_err(|errs| {
                let lines: Vec<String> = errs.iter().map(ToString::to_string).collect();
                ApiError::bad_field("body", format!("{name}: {} bad line(s): {}", lines.len(), lines.join("; ")))
            })?;
            // A Parquet upload is kept as the JSONL it reads as (the stored file is read by its format's extension).
            let body = if name.ends_with(".parquet") || name.ends_with(".json") {
                Bytes::from(data::to_file(&ds))
            } else {
                body
            };
            (ds, body)
        }
    };
    let id = format!(
        "ds_{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    let (_, held) = data::split(ds.records.len(), validation, 1);
    let format = serde_json::to_value(ds.format).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let path = file(&state, &id, &format);
    std::fs::create_dir_all(dir(&state)).map_err(|e| ApiError::internal(format!("the datasets directory: {e}")))?;
    std::fs::write(&path, &body).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
    let (records, bytes) = (ds.records.len() as i64, body.len() as i64);
    let held_json = serde_json::to_string(&held).unwrap_or_default();
    let (i, a) = (id.clone(), account.clone());
    let v = with_store(&state, move |s| {
        s.conn.execute(
            "INSERT INTO datasets (id, account, name, format, records, validation, bytes) VALUES (?1,?2,?3,?4,?5,?6,?7)",
            params![i, a, name, format, records, held_json, bytes],
        )?;
        row(s, &i, &a)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

/// `GET /api/datasets`: the account's datasets, newest first.
pub async fn list(State(state): State<AppState>, Owner(account): Owner) -> Result<Json<Value>, ApiError> {
    let data = with_store(&state, move |s| {
        let ids: Vec<String> = {
            let mut st =
                s.conn.prepare("SELECT id FROM datasets WHERE account = ?1 ORDER BY created_at DESC, id DESC")?;
            let rows = st.query_map(params![account], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        ids.iter().map(|id| row(s, id, &account).map(|r| r.unwrap_or(Value::Null))).collect::<Result<Vec<_>, _>>()
    })
    .await?;
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /api/datasets/{id}?rows=N&model=M`: the dataset, its first N records (default 5), and with a model the
/// token count of every record with that model's tokenizer and template, as a training run would read them.
pub async fn get(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let key = id.clone();
    let mut v = with_store(&state, move |s| row(s, &key, &account)).await?.ok_or_else(|| not_found(&id))?;
    let rows = match q.get("rows") {
        Some(n) => n.parse::<usize>().map_err(|_| ApiError::bad_field("rows", format!("{n} is not a count")))?,
        None => 5,
    };
    let path = file(&state, &id, v["format"].as_str().unwrap_or(""));
    let bytes = std::fs::read(&path).map_err(|e| ApiError::internal(format!("{}: {e}", path.display())))?;
    let ds = data::parse(&path.display().to_string(), &bytes)
        .map_err(|e| ApiError::internal(format!("the stored dataset no longer parses: {}", e[0])))?;
    let show = |r: &data::Record| match r {
        data::Record::Text(t) => json!({"text": t}),
        data::Record::Messages(m) => json!({"messages": m}),
        data::Record::Item(i) => json!(i),
    };
    v["rows"] = ds.records.iter().take(rows).map(show).collect();
    if let Some(model) = q.get("model") {
        let dir = kvad_hub::resolve_on_disk(model).map_err(|e| ApiError::bad_field("model", e.to_string()))?.path;
        let tok =
            kvad_text::Tokenizer::from_dir(&dir).map_err(|e| ApiError::bad_field("model", format!("{model}: {e}")))?;
        let template = tok
            .chat_template()
            .map(kvad_text::ChatTemplate::new)
            .transpose()
            .map_err(|e| ApiError::bad_field("model", e.to_string()))?;
        let ids = data::encode(&ds.records, &tok, template.as_ref())
            .map_err(|e| ApiError::bad_field("model", format!("{model}: {e}")))?;
        let held: Vec<usize> = serde_json::from_value(v["validation"].clone()).unwrap_or_default();
        let total: usize = ids.iter().map(Vec::len).sum();
        let val: usize = held.iter().filter_map(|&i| ids.get(i)).map(Vec::len).sum();
        v["tokens"] = json!({"model": model, "total": total, "train": total - val, "validation": val});
    }
    Ok(Json(v))
}

/// `DELETE /api/datasets/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let key = id.clone();
    let format = with_store(&state, move |s| {
        let f = row(s, &key, &account)?.and_then(|r| r["format"].as_str().map(String::from));
        if f.is_some() {
            s.conn.execute("DELETE FROM datasets WHERE id = ?1 AND account = ?2", params![key, account])?;
        }
        Ok(f)
    })
    .await?
    .ok_or_else(|| not_found(&id))?;
    let _ = std::fs::remove_file(file(&state, &id, &format));
    Ok(Json(json!({"id": id, "object": "dataset", "deleted": true})).into_response())
}
