//! The web UI's conversations, kept in SQLite: `GET/POST /api/conversations`, `GET/PATCH/DELETE
//! /api/conversations/{id}`, `POST /api/conversations/{id}/messages`.
//!
//! A conversation belongs to the account that made it ([`Owner`]), and every query is scoped to it: another
//! account's conversation is answered exactly as one that does not exist (404), so its existence does not leak.
//! Messages keep the answer, never the reasoning trace: a reply's working is not its answer (the seed), and a
//! `reasoning_content` field is refused by name. The chat itself goes through `/v1/chat/completions`; these routes
//! only store what the page shows.

use super::request::{kind_of, parse_body, Fields};
use crate::error::ApiError;
use crate::store::Store;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

/// Longest title, in characters.
const TITLE_MAX: usize = 200;
/// Longest message, in bytes.
const CONTENT_MAX: usize = 1 << 20;
/// Largest settings object, in bytes of JSON.
const SETTINGS_MAX: usize = 16 << 10;
/// Roles a stored message may have.
const ROLES: &[&str] = &["system", "user", "assistant", "tool"];

/// Whose conversations a request may see, as an extractor: the account the auth layer's `Caller` names (an
/// administrator's conversations are its own too: nobody reads another's).
pub struct Owner(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &S) -> Result<Self, ApiError> {
        crate::auth::middleware::Caller::from_request_parts(parts, s).await.map(|c| Owner(c.account))
    }
}

/// Runs `f` on a fresh connection off the async threads, turning SQLite's errors into a 500 naming the table.
async fn with_store<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(&Store) -> Result<T, rusqlite::Error> + Send + 'static,
) -> Result<T, ApiError> {
    let db = state.db.clone();
    tokio::task::spawn_blocking(move || Store::open(&db).and_then(|s| f(&s)))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("the conversations table: {e}")))
}

fn not_found(id: i64) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("id = {id}: no such conversation"),
        kind: "not_found_error",
        param: Some("id".into()),
        code: Some("conversation_not_found"),
        retry_after: None,
    }
}

/// The `{id}` path segment: a whole number, else a 400 naming it.
fn parse_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ApiError::bad_field("id", format!("id = {raw:?}: a conversation id is a positive whole number")))
}

/// The fields a conversation may be created or changed with.
#[derive(Default)]
struct Changes {
    title: Option<String>,
    model: Option<Option<String>>,
    settings: Option<String>,
}

fn changes(body: &[u8]) -> Result<Changes, ApiError> {
    let obj = if body.is_empty() { serde_json::Map::new() } else { parse_body(body)? };
    let mut f = Fields::new(&obj, "");
    let mut c = Changes::default();
    if let Some(t) = f.opt_string("title")? {
        let t = t.trim();
        if t.is_empty() || t.chars().count() > TITLE_MAX {
            return Err(ApiError::bad_field("title", format!("title = {t:?}: 1 to {TITLE_MAX} characters")));
        }
        c.title = Some(t.to_string());
    }
    if obj.contains_key("model") {
        c.model = Some(f.opt_string("model")?.map(str::to_string));
    }
    if let Some(v) = f.get("settings") {
        if !v.is_object() {
            return Err(ApiError::bad_field("settings", format!("settings must be an object, not {}", kind_of(v))));
        }
        let text = v.to_string();
        if text.len() > SETTINGS_MAX {
            return Err(ApiError::bad_field(
                "settings",
                format!("settings is {} bytes of JSON; at most {SETTINGS_MAX}", text.len()),
            ));
        }
        c.settings = Some(text);
    }
    f.finish()?;
    Ok(c)
}

fn summary_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Value> {
    let settings: String = r.get(3)?;
    Ok(json!({
        "id": r.get::<_, i64>(0)?,
        "title": r.get::<_, String>(1)?,
        "model": r.get::<_, Option<String>>(2)?,
        "settings": serde_json::from_str::<Value>(&settings).unwrap_or_else(|_| json!({})),
        "created_at": r.get::<_, String>(4)?,
        "updated_at": r.get::<_, String>(5)?,
        "messages": r.get::<_, i64>(6)?,
    }))
}

const SUMMARY: &str = "SELECT c.id, c.title, c.model, c.settings, c.created_at, c.updated_at,
        (SELECT count(*) FROM conversation_messages m WHERE m.conversation = c.id)
     FROM conversations c";

fn one(s: &Store, account: &str, id: i64) -> rusqlite::Result<Option<Value>> {
    let Some(mut conv) = s
        .conn
        .query_row(&format!("{SUMMARY} WHERE c.id = ?1 AND c.account = ?2"), params![id, account], summary_row)
        .optional()?
    else {
        return Ok(None);
    };
    let mut st = s.conn.prepare(
        "SELECT id, role, content, tool_calls, tool_call_id, created_at FROM conversation_messages
         WHERE conversation = ?1 ORDER BY id",
    )?;
    let messages = st
        .query_map(params![id], |r| {
            let calls: Option<String> = r.get(3)?;
            Ok(json!({
                "id": r.get::<_, i64>(0)?,
                "role": r.get::<_, String>(1)?,
                "content": r.get::<_, String>(2)?,
                "tool_calls": calls.and_then(|c| serde_json::from_str::<Value>(&c).ok()),
                "tool_call_id": r.get::<_, Option<String>>(4)?,
                "created_at": r.get::<_, String>(5)?,
            }))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    conv["messages"] = json!(messages);
    Ok(Some(conv))
}

/// `GET /api/conversations`: the caller's conversations, the most recently changed first.
pub async fn list(State(state): State<AppState>, Owner(account): Owner) -> Result<Json<Value>, ApiError> {
    let rows = with_store(&state, move |s| {
        let mut st =
            s.conn.prepare(&format!("{SUMMARY} WHERE c.account = ?1 ORDER BY c.updated_at DESC, c.id DESC"))?;
        let rows = st.query_map(params![account], summary_row)?.collect::<Result<Vec<_>, _>>();
        rows
    })
    .await?;
    Ok(Json(json!({"conversations": rows})))
}

/// `POST /api/conversations {title?, model?, settings?}`: a new, empty conversation (201).
pub async fn create(State(state): State<AppState>, Owner(account): Owner, body: Bytes) -> Result<Response, ApiError> {
    let c = changes(&body)?;
    let conv = with_store(&state, move |s| {
        s.conn.execute(
            "INSERT INTO conversations (account, title, model, settings) VALUES (?1, ?2, ?3, ?4)",
            params![
                account,
                c.title.unwrap_or_else(|| "New chat".into()),
                c.model.flatten(),
                c.settings.unwrap_or_else(|| "{}".into())
            ],
        )?;
        let id = s.conn.last_insert_rowid();
        one(s, &account, id)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(conv.unwrap_or(Value::Null))).into_response())
}

/// `GET /api/conversations/{id}`: one conversation with its messages.
pub async fn get(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&raw)?;
    with_store(&state, move |s| one(s, &account, id)).await?.map(Json).ok_or_else(|| not_found(id))
}

/// `PATCH /api/conversations/{id} {title?, model?, settings?}`: renames it, or changes its model or settings.
pub async fn update(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&raw)?;
    let c = changes(&body)?;
    let conv = with_store(&state, move |s| {
        let tx = s.conn.unchecked_transaction()?;
        let found = tx.execute(
            "UPDATE conversations SET
                title = coalesce(?3, title),
                model = CASE WHEN ?4 THEN ?5 ELSE model END,
                settings = coalesce(?6, settings),
                updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
             WHERE id = ?1 AND account = ?2",
            params![id, account, c.title, c.model.is_some(), c.model.clone().flatten(), c.settings],
        )?;
        tx.commit()?;
        if found == 0 {
            return Ok(None);
        }
        one(s, &account, id)
    })
    .await?;
    conv.map(Json).ok_or_else(|| not_found(id))
}

/// `DELETE /api/conversations/{id}`: the conversation and its messages (204).
pub async fn delete(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(raw): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&raw)?;
    let found = with_store(&state, move |s| {
        // Messages first: they reference the conversation (SQLite's foreign keys are on in this build).
        let tx = s.conn.unchecked_transaction()?;
        tx.execute(
            "DELETE FROM conversation_messages WHERE conversation IN
                (SELECT id FROM conversations WHERE id = ?1 AND account = ?2)",
            params![id, account],
        )?;
        let n = tx.execute("DELETE FROM conversations WHERE id = ?1 AND account = ?2", params![id, account])?;
        tx.commit()?;
        Ok(n > 0)
    })
    .await?;
    if found {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(id))
    }
}

/// A message as it is stored: role, content, and an assistant's tool calls or a tool result's call id.
struct NewMessage {
    role: String,
    content: String,
    tool_calls: Option<String>,
    tool_call_id: Option<String>,
}

fn new_message(body: &[u8]) -> Result<NewMessage, ApiError> {
    let obj = parse_body(body)?;
    if obj.contains_key("reasoning_content") || obj.contains_key("reasoning") {
        return Err(ApiError::unsupported(
            "reasoning_content",
            "reasoning_content is not kept: a conversation stores the answer, not the reasoning trace",
        ));
    }
    let mut f = Fields::new(&obj, "");
    let role = f.string("role")?;
    if !ROLES.contains(&role) {
        return Err(ApiError::bad_field("role", format!("role = {role:?}: must be one of {ROLES:?}")));
    }
    let content = f.opt_string("content")?.unwrap_or_default().to_string();
    if content.len() > CONTENT_MAX {
        return Err(ApiError::bad_field(
            "content",
            format!("content is {} bytes; at most {CONTENT_MAX}", content.len()),
        ));
    }
    let tool_calls = match f.get("tool_calls") {
        None => None,
        Some(v @ Value::Array(_)) if role == "assistant" => Some(v.to_string()),
        Some(Value::Array(_)) => {
            return Err(ApiError::bad_field(
                "tool_calls",
                format!("tool_calls on a {role} message: only assistant messages carry them"),
            ))
        }
        Some(v) => {
            return Err(ApiError::bad_field("tool_calls", format!("tool_calls must be an array, not {}", kind_of(v))))
        }
    };
    let tool_call_id = f.opt_string("tool_call_id")?.map(str::to_string);
    if content.is_empty() && tool_calls.is_none() {
        return Err(ApiError::bad_field("content", "content is required (or tool_calls, for an assistant message)"));
    }
    f.finish()?;
    Ok(NewMessage { role: role.to_string(), content, tool_calls, tool_call_id })
}

/// `POST /api/conversations/{id}/messages {role, content, tool_calls?, tool_call_id?}`: appends a message (201).
pub async fn add_message(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(raw): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&raw)?;
    let m = new_message(&body)?;
    let stored = with_store(&state, move |s| {
        let tx = s.conn.unchecked_transaction()?;
        let n = tx.execute(
            "UPDATE conversations SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1 AND account = ?2",
            params![id, account],
        )?;
        if n == 0 {
            return Ok(None);
        }
        tx.execute(
            "INSERT INTO conversation_messages (conversation, role, content, tool_calls, tool_call_id)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, m.role, m.content, m.tool_calls, m.tool_call_id],
        )?;
        let mid = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Some(json!({"id": mid, "conversation": id, "role": m.role, "content": m.content,
                       "tool_calls": m.tool_calls.and_then(|c| serde_json::from_str::<Value>(&c).ok()),
                       "tool_call_id": m.tool_call_id})))
    })
    .await?;
    let v = stored.ok_or_else(|| not_found(id))?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}
