//! `POST /v1/chat/completions`.

use super::request::{ignored, kind_of, parse_body, sampling, stop, stream, Fields};
use super::{respond, Shape, Submit};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kvad_engine::seam::Prompt;
use serde_json::{json, Map, Value};

/// Roles a message may have (`developer` is OpenAI's newer name for `system`).
const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// The handler.
pub async fn handler(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Response, ApiError> {
    let account = caller.account;
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.string("model")?.to_string();
    let messages = messages(&mut f)?;
    let (is_stream, include_usage) = stream(&mut f)?;
    let mut params = sampling(&mut f, &["max_tokens", "max_completion_tokens"])?;
    let logprobs = f.opt_bool("logprobs")?.unwrap_or(false);
    let top = f.opt_int("top_logprobs", 0, 20)?;
    if top.is_some() && !logprobs {
        return Err(ApiError::bad_field("top_logprobs", "top_logprobs needs logprobs: true"));
    }
    params.sampling.top_logprobs = logprobs.then_some(top.unwrap_or(0) as usize);
    let stops = stop(&mut f)?;
    let tools = tools(&mut f)?;
    let choice = tool_choice(&mut f)?;
    if let Some(false) = f.opt_bool("parallel_tool_calls")? {
        return Err(ApiError::unsupported(
            "parallel_tool_calls",
            "parallel_tool_calls = false is not supported: the parser returns every call the model makes",
        ));
    }
    if let Some(v) = f.get("response_format") {
        if v.get("type").and_then(Value::as_str) != Some("text") {
            return Err(ApiError::unsupported(
                "response_format",
                format!("response_format {v} is not supported (constrained decoding is not written yet); only {{\"type\": \"text\"}}"),
            ));
        }
    }
    // kvad's own field: `"cache": false` (benchmarks, evaluations) runs alone from an empty cache.
    let fresh = f.opt_bool("cache")? == Some(false);
    ignored(&mut f)?;
    f.finish()?;

    let info = state.model_info(&model)?;
    if !info.chat {
        return Err(ApiError::bad_field(
            "model",
            format!("model {model} has no chat template; use /v1/completions with a plain prompt"),
        ));
    }
    let offered = tools.filter(|_| choice != "none");
    if offered.is_some() && !info.tools {
        let can: Vec<String> = state.queue.catalog().into_iter().filter(|m| m.tools).map(|m| m.id).collect();
        return Err(ApiError::bad_field(
            "tools",
            format!(
                "model {model}'s chat template does not use tools: it would never be told they exist; models here that can: {}",
                if can.is_empty() { "none".to_string() } else { can.join(", ") }
            ),
        ));
    }
    let submit = Submit {
        model,
        parse_tools: offered.is_some(),
        parse_reasoning: info.reasoning,
        prompt: Prompt::Chat { messages, tools: offered },
        params,
        stop: stops,
        account,
        fresh,
        endpoint: "/v1/chat/completions",
    };
    respond(state, submit, Shape::Chat, is_stream, include_usage).await
}

/// `messages`: checked, and put in the shape templates read (content as a string; tool call arguments as
/// objects; `reasoning` as `reasoning_content`, which the template uses or ignores).
fn messages(f: &mut Fields<'_>) -> Result<Vec<Value>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::bad_field("messages", "messages is empty: nothing to reply to")),
        Some(v) => {
            return Err(ApiError::bad_field("messages", format!("messages must be an array, not {}", kind_of(v))))
        }
        None => return Err(ApiError::bad_field("messages", "messages is required")),
    };
    list.iter().enumerate().map(|(i, m)| message(i, m)).collect()
}

fn message(i: usize, m: &Value) -> Result<Value, ApiError> {
    let at = format!("messages[{i}]");
    let Value::Object(obj) = m else {
        return Err(ApiError::bad_field(&at, format!("{at} must be an object, not {}", kind_of(m))));
    };
    let mut f = Fields::new(obj, &format!("{at}."));
    let role = f.string("role")?;
    if !ROLES.contains(&role) {
        return Err(ApiError::bad_field(&f.name("role"), format!("{at}.role = {role:?}: must be one of {ROLES:?}")));
    }
    let mut out = Map::new();
    out.insert("role".into(), json!(if role == "developer" { "system" } else { role }));
    let content = content(&at, f.get("content"))?;
    let calls = match f.get("tool_calls") {
        Some(Value::Array(a)) if role == "assistant" => Some(tool_calls(&at, a)?),
        Some(_) if role != "assistant" => {
            return Err(ApiError::bad_field(
                &f.name("tool_calls"),
                format!("{at}.tool_calls: only assistant messages carry tool calls"),
            ))
        }
        Some(v) => {
            return Err(ApiError::bad_field(
                &f.name("tool_calls"),
                format!("{at}.tool_calls must be an array, not {}", kind_of(v)),
            ))
        }
        None => None,
    };
    if content.is_none() && calls.is_none() {
        return Err(ApiError::bad_field(&f.name("content"), format!("{at}.content is required")));
    }
    out.insert("content".into(), content.map_or(Value::Null, Value::String));
    if let Some(c) = calls {
        out.insert("tool_calls".into(), Value::Array(c));
    }
    if let Some(id) = f.opt_string("tool_call_id")? {
        out.insert("tool_call_id".into(), json!(id));
    }
    if let Some(name) = f.opt_string("name")? {
        out.insert("name".into(), json!(name));
    }
    let reasoning = match (f.opt_string("reasoning_content")?, f.opt_string("reasoning")?) {
        (Some(r), _) | (None, Some(r)) => Some(r),
        (None, None) => None,
    };
    if let Some(r) = reasoning {
        out.insert("reasoning_content".into(), json!(r));
    }
    f.get("refusal");
    f.finish()?;
    Ok(Value::Object(out))
}

/// A string, or an array of text parts joined.
fn content(at: &str, v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                let ty = p.get("type").and_then(Value::as_str);
                match (ty, p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (Some(other), _) if other != "text" => {
                        return Err(ApiError::unsupported(
                            &format!("{at}.content[{j}].type"),
                            format!("{at}.content[{j}].type = {other:?}: only text parts are supported"),
                        ))
                    }
                    _ => {
                        return Err(ApiError::bad_field(
                            &format!("{at}.content[{j}]"),
                            format!("{at}.content[{j}] must be {{\"type\": \"text\", \"text\": string}}"),
                        ))
                    }
                }
            }
            Ok(Some(text))
        }
        Some(v) => Err(ApiError::bad_field(
            &format!("{at}.content"),
            format!("{at}.content must be a string or an array of text parts, not {}", kind_of(v)),
        )),
    }
}

/// An assistant's earlier calls, with arguments parsed into objects (templates write them with `tojson`).
fn tool_calls(at: &str, calls: &[Value]) -> Result<Vec<Value>, ApiError> {
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let here = format!("{at}.tool_calls[{j}]");
            let func = c.get("function").and_then(Value::as_object).ok_or_else(|| {
                ApiError::bad_field(&here, format!("{here}.function must be an object with name and arguments"))
            })?;
            let name = func.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::bad_field(&format!("{here}.function.name"), format!("{here}.function.name must be a string"))
            })?;
            let args = match func.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_err(|e| {
                    ApiError::bad_field(
                        &format!("{here}.function.arguments"),
                        format!("{here}.function.arguments is not JSON ({e}): {s:?}"),
                    )
                })?,
                Some(v @ Value::Object(_)) => v.clone(),
                None | Some(Value::Null) => json!({}),
                Some(v) => {
                    return Err(ApiError::bad_field(
                        &format!("{here}.function.arguments"),
                        format!("{here}.function.arguments must be a JSON string, not {}", kind_of(v)),
                    ))
                }
            };
            let mut out = json!({"type": "function", "function": {"name": name, "arguments": args}});
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                out["id"] = json!(id);
            }
            Ok(out)
        })
        .collect()
}

/// `tools`: function definitions, as the template receives them.
fn tools(f: &mut Fields<'_>) -> Result<Option<Vec<Value>>, ApiError> {
    let list = match f.get("tools") {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(ApiError::bad_field("tools", format!("tools must be an array, not {}", kind_of(v)))),
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let at = format!("tools[{i}]");
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::unsupported(&format!("{at}.type"), format!("{at}.type must be \"function\"")));
            }
            let func = t.get("function").and_then(Value::as_object).ok_or_else(|| {
                ApiError::bad_field(&format!("{at}.function"), format!("{at}.function must be an object"))
            })?;
            match func.get("name").and_then(Value::as_str) {
                Some(n) if !n.trim().is_empty() => {}
                _ => {
                    return Err(ApiError::bad_field(
                        &format!("{at}.function.name"),
                        format!("{at}.function.name must be a non-empty string"),
                    ))
                }
            }
            if let Some(p) = func.get("parameters") {
                if !p.is_object() {
                    return Err(ApiError::bad_field(
                        &format!("{at}.function.parameters"),
                        format!("{at}.function.parameters must be a JSON schema object"),
                    ));
                }
            }
            Ok(t.clone())
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `tool_choice`: `auto` and `none` are honest; `required` and a named function would need constrained decoding.
fn tool_choice(f: &mut Fields<'_>) -> Result<&'static str, ApiError> {
    match f.get("tool_choice") {
        None => Ok("auto"),
        Some(Value::String(s)) if s == "auto" => Ok("auto"),
        Some(Value::String(s)) if s == "none" => Ok("none"),
        Some(v) => Err(ApiError::unsupported(
            "tool_choice",
            format!(
                "tool_choice {v} is not supported: only \"auto\" and \"none\"; forcing a call needs the sampler \
                 constrained to the tokens that open one, which is not written yet"
            ),
        )),
    }
}
