//! OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, for Codex CLI and the
//! clients that moved to it. A response runs as the chat route's job does (template, tool-call parsing, forced
//! calls and `text.format` through the grammar engine); a stored response (`store`, on unless turned off) keeps
//! the conversation that made it, per account in SQLite, so `previous_response_id` continues it. The continued
//! prompt renders the same tokens as before, so the engine's kept conversation serves its prefix from cache.

mod reply;
mod request;

use super::chat::{forced_calls, ToolChoice};
use super::conversations::Owner;
use super::request::parse_body;
use super::Submit;
use crate::error::ApiError;
use crate::store::Store;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kvad_engine::seam::Prompt;
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;

/// What the answer and its storage need to know of the request.
pub(super) struct Meta {
    id: String,
    created: u64,
    model: String,
    previous: Option<String>,
    store: bool,
    max_output_tokens: Option<usize>,
    /// The request's fields the response echoes.
    echo: Map<String, Value>,
    account: String,
    db: PathBuf,
    /// The messages that made the prompt, instructions aside (a later response brings its own).
    conversation: Vec<Value>,
}

impl Meta {
    /// A short suffix for the ids of this response's items.
    fn tag(&self) -> String {
        self.id.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect()
    }

    /// Stores the response and the conversation it ends (when `store` is on).
    async fn keep(&self, items: &[Value], response: &Value) -> Result<(), ApiError> {
        if !self.store {
            return Ok(());
        }
        let mut conversation = self.conversation.clone();
        conversation.extend(request::items_to_messages(items, "output", &mut HashMap::new())?);
        let (db, id, account, model) = (self.db.clone(), self.id.clone(), self.account.clone(), self.model.clone());
        let (conversation, response) = (Value::Array(conversation).to_string(), response.to_string());
        tokio::task::spawn_blocking(move || {
            Store::open(&db)?.conn.execute(
                "INSERT INTO responses (id, account, model, conversation, response) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, account, model, conversation, response],
            )
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("the responses table: {e}")))?;
        Ok(())
    }
}

fn not_found(field: &str, id: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "{field} = {id:?}: no such response (stored responses are per account; store: false keeps none)"
        ),
        kind: "invalid_request_error",
        param: Some(field.to_string()),
        code: Some("response_not_found"),
        retry_after: None,
    }
}

/// A stored response's row: (its conversation, its response object).
async fn load(state: &AppState, account: &str, id: &str) -> Result<Option<(Value, Value)>, ApiError> {
    let (db, account, id) = (state.db.clone(), account.to_string(), id.to_string());
    let row: Option<(String, String)> = tokio::task::spawn_blocking(move || {
        Store::open(&db)?
            .conn
            .query_row(
                "SELECT conversation, response FROM responses WHERE id = ?1 AND account = ?2",
                params![id, account],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("the responses table: {e}")))?;
    Ok(row.map(|(c, r)| {
        (serde_json::from_str(&c).unwrap_or(Value::Array(vec![])), serde_json::from_str(&r).unwrap_or(Value::Null))
    }))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `POST /v1/responses`.
pub async fn create(State(state): State<AppState>, Owner(account): Owner, body: Bytes) -> Result<Response, ApiError> {
    let r = request::read(&parse_body(&body)?)?;
    let info = state.model_info(&r.model)?;
    if !info.chat {
        return Err(ApiError::bad_field("model", format!("model {} has no chat template", r.model)));
    }
    let offered = r.tools.clone().filter(|_| r.choice != ToolChoice::None);
    if offered.is_some() && !info.tools {
        return Err(ApiError::bad_field(
            "tools",
            format!("model {}'s chat template does not use tools: it would never be told they exist", r.model),
        ));
    }
    // The earlier conversation, and the names of the calls made in it (a template may write a tool's name
    // beside its output).
    let mut conversation = match &r.previous {
        Some(id) => match load(&state, &account, id).await? {
            Some((Value::Array(c), _)) => c,
            _ => return Err(not_found("previous_response_id", id)),
        },
        None => Vec::new(),
    };
    let mut names = HashMap::new();
    for m in &conversation {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            if let (Some(id), Some(name)) = (c["id"].as_str(), c["function"]["name"].as_str()) {
                names.insert(id.to_string(), name.to_string());
            }
        }
    }
    conversation.extend(request::items_to_messages(&r.input, "input", &mut names)?);
    let mut messages: Vec<Value> = r.instructions.iter().map(|i| json!({"role": "system", "content": i})).collect();
    messages.extend(conversation.iter().cloned());

    let mut params = r.params;
    if let Some(c) = forced_calls(&r.choice, offered.as_deref(), r.parallel)? {
        if params.options.constraint.is_some() {
            return Err(ApiError::bad_field(
                "text.format",
                "text.format and a tool_choice that forces a call cannot both hold the reply: send one",
            ));
        }
        params.options.constraint = Some(c);
    }
    let max_output_tokens = (params.max_tokens > 0).then_some(params.max_tokens);
    let submit = Submit {
        model: r.model.clone(),
        prompt: Prompt::Chat { messages, tools: offered.clone(), vars: r.vars },
        params,
        stop: Vec::new(),
        parse_tools: offered.is_some(),
        one_call: !r.parallel,
        clamp_max_tokens: false,
        parse_reasoning: info.reasoning,
        endpoint: "/v1/responses",
        account: account.clone(),
        fresh: false,
    };
    let begun = super::start(&state, submit).await?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let meta = Meta {
        id: format!("resp_{nanos:x}"),
        created: now(),
        model: r.model,
        previous: r.previous,
        store: r.store,
        max_output_tokens,
        echo: r.echo,
        account,
        db: state.db.clone(),
        conversation,
    };
    if r.stream {
        Ok(reply::stream(meta, begun))
    } else {
        reply::whole(meta, begun).await
    }
}

/// `GET /v1/responses/{id}`: a stored response, to the account that made it.
pub async fn get(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match load(&state, &account, &id).await? {
        Some((_, response)) => Ok(Json(response)),
        None => Err(not_found("id", &id)),
    }
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    Owner(account): Owner,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (db, owner, key) = (state.db.clone(), account, id.clone());
    let n = tokio::task::spawn_blocking(move || {
        Store::open(&db)?.conn.execute("DELETE FROM responses WHERE id = ?1 AND account = ?2", params![key, owner])
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("the responses table: {e}")))?;
    if n == 0 {
        return Err(not_found("id", &id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}
