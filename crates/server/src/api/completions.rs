//! `POST /v1/completions`: a plain prompt, no template.

use super::request::{ignored, kind_of, parse_body, response_format, sampling, stop, stream, Fields};
use super::{respond, Shape, Submit};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kvad_engine::seam::Prompt;
use serde_json::Value;

/// The handler.
pub async fn handler(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let account = caller.account;
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.string("model")?.to_string();
    let prompt = match f.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
        Some(Value::Array(a)) => {
            return Err(ApiError::unsupported(
                "prompt",
                format!("prompt is an array of {} items; one prompt (a string) per request is supported", a.len()),
            ))
        }
        Some(v) => return Err(ApiError::bad_field("prompt", format!("prompt must be a string, not {}", kind_of(v)))),
        None => return Err(ApiError::bad_field("prompt", "prompt is required")),
    };
    if prompt.is_empty() {
        return Err(ApiError::bad_field("prompt", "prompt is empty: nothing to continue"));
    }
    let (is_stream, include_usage) = stream(&mut f)?;
    let mut params = sampling(&mut f, &["max_tokens"])?;
    if params.max_tokens == 0 {
        params.max_tokens = 16; // OpenAI's default for completions
    }
    params.sampling.top_logprobs = f.opt_int("logprobs", 0, 20)?.map(|n| n as usize);
    let stops = stop(&mut f)?;
    params.options.constraint = response_format(&mut f)?;
    if let Some(true) = f.opt_bool("echo")? {
        return Err(ApiError::unsupported("echo", "echo = true is not supported"));
    }
    if f.opt_string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "suffix is not supported (no fill-in-the-middle)"));
    }
    f.opt_int("best_of", 1, 1)?;
    // kvad's own field: `"cache": false` (benchmarks, evaluations) runs alone from an empty cache.
    let fresh = f.opt_bool("cache")? == Some(false);
    ignored(&mut f)?;
    f.finish()?;
    state.model_info(&model)?;
    let submit = Submit {
        model,
        prompt: Prompt::Text(prompt),
        params,
        stop: stops,
        parse_tools: false,
        one_call: false,
        clamp_max_tokens: false,
        parse_reasoning: false,
        account,
        fresh,
        endpoint: "/v1/completions",
    };
    respond(state, submit, Shape::Text, is_stream, include_usage).await
}
