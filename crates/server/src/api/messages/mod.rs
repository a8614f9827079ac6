//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`, so clients written for
//! Anthropic (Claude Code, the `anthropic` SDKs, agent frameworks) work against a local model unchanged. The
//! request becomes the same job a chat completion is (template, tool-call parsing, forced calls through the
//! grammar engine); only the shapes differ. Errors on these paths, the authentication layer's included, are in
//! Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`).

mod reply;
mod request;

use super::chat::forced_calls;
use super::request::parse_body;
use super::Submit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kvad_engine::seam::Prompt;
use serde_json::{json, Value};

/// `POST /v1/messages`.
pub async fn create(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let r = request::read(&parse_body(&body)?, false)?;
    let info = state.model_info(&r.model)?;
    let offered = offered(&r, &info)?;
    let mut params = r.params;
    if let Some(c) = forced_calls(&r.choice, offered.as_deref(), !r.one_call)? {
        if params.options.constraint.is_some() {
            return Err(ApiError::bad_field(
                "output_config.format",
                "output_config.format and a tool_choice that forces a call cannot both hold the reply: send one",
            ));
        }
        params.options.constraint = Some(c);
    }
    let submit = Submit {
        model: r.model.clone(),
        prompt: Prompt::Chat { messages: r.messages, tools: offered.clone(), vars: r.vars },
        params,
        stop: r.stops,
        parse_tools: offered.is_some(),
        one_call: r.one_call,
        // Anthropic's clients ask for as many tokens as Claude could write (Claude Code: 32,000); a local model's
        // context ends sooner, and the reply stops there with stop_reason max_tokens.
        clamp_max_tokens: true,
        parse_reasoning: info.reasoning,
        endpoint: "/v1/messages",
        account: caller.account,
        fresh: false,
    };
    let begun = super::start(&state, submit).await?;
    let out = reply::Out { id: reply::message_id(), model: r.model, omit_thinking: r.omit_thinking };
    if r.stream {
        Ok(reply::stream(out, begun))
    } else {
        reply::whole(out, begun).await
    }
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the model's template renders it, tools included,
/// without generating (`{"input_tokens": n}`).
pub async fn count_tokens(State(state): State<AppState>, _caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let r = request::read(&parse_body(&body)?, true)?;
    let info = state.model_info(&r.model)?;
    let tools = offered(&r, &info)?;
    let prompt = Prompt::Chat { messages: r.messages, tools, vars: r.vars };
    let tok = state.tokenizers.clone();
    let model = r.model;
    let n = tokio::task::spawn_blocking(move || tok.count(&model, &prompt))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(axum::Json(json!({"input_tokens": n})).into_response())
}

/// The tools the model is shown: none with `tool_choice` none; refused when the model's template would never
/// show them (as the chat endpoint refuses).
fn offered(r: &request::Request, info: &kvad_engine::seam::ModelInfo) -> Result<Option<Vec<Value>>, ApiError> {
    if !info.chat {
        return Err(ApiError::bad_field(
            "model",
            format!("model {} has no chat template; the Messages API needs one (use /v1/completions)", r.model),
        ));
    }
    let offered = r.tools.clone().filter(|_| r.choice != super::chat::ToolChoice::None);
    if offered.is_some() && !info.tools {
        return Err(ApiError::bad_field(
            "tools",
            format!(
                "model {}'s chat template does not use tools: it would never be told they exist (kvad-serve \
                 --chat-template gives it one that does)",
                r.model
            ),
        ));
    }
    Ok(offered)
}

/// Anthropic's error type for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 409 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An error in Anthropic's shape.
pub(crate) fn error_body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": error_type(e.status), "message": e.message}})
}

/// The paths answered in Anthropic's shapes.
fn anthropic_path(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

/// Rewrites error answers on the Messages paths (the handlers' and every layer's: authentication, body limit,
/// method) into Anthropic's shape, keeping their status and headers.
pub async fn errors(req: Request, next: Next) -> Response {
    let ours = anthropic_path(req.uri().path());
    let r = next.run(req).await;
    let json = r.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !ours || !json || r.status().is_success() {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return (parts.status, "error body unreadable").into_response();
    };
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let message = v["error"]["message"].as_str().map_or_else(|| String::from_utf8_lossy(&bytes).into(), str::to_string);
    let out = json!({"type": "error", "error": {"type": error_type(parts.status), "message": message}});
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out.to_string()))
}
