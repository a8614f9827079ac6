//! Reading an OpenAI Responses request: input items (messages, function calls and their outputs, reasoning) into
//! the messages chat templates read, function tools into the chat route's definitions, `text.format` into a
//! constraint, `reasoning.effort` into the template's `enable_thinking`. Errors name the field as sent
//! (`input[3].call_id`).

use crate::api::chat::ToolChoice;
use crate::api::request::{base_sampling, kind_of, Fields};
use crate::error::ApiError;
use kvad_engine::grammar::{Constraint, Grammar};
use kvad_engine::seam::GenParams;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// A request, read.
pub(super) struct Request {
    pub model: String,
    /// `instructions`, as a system message (not carried to a later response, as OpenAI's are not).
    pub instructions: Option<String>,
    /// The input items as sent (a string input: one user message item).
    pub input: Vec<Value>,
    pub tools: Option<Vec<Value>>,
    pub choice: ToolChoice,
    pub parallel: bool,
    pub previous: Option<String>,
    pub store: bool,
    pub stream: bool,
    pub vars: Map<String, Value>,
    pub params: GenParams,
    /// The request's own fields the response object echoes (`temperature`, `tools`, `text`, …).
    pub echo: Map<String, Value>,
}

/// Reads a body.
pub(super) fn read(obj: &Map<String, Value>) -> Result<Request, ApiError> {
    let mut f = Fields::new(obj, "");
    let model = f.string("model")?.to_string();
    let instructions = f.opt_string("instructions")?.map(str::to_string);
    let input = input(&mut f)?;
    let tools = tools(&mut f)?;
    let choice = tool_choice(&mut f)?;
    let parallel = f.opt_bool("parallel_tool_calls")?.unwrap_or(true);
    let previous = f.opt_string("previous_response_id")?.map(str::to_string);
    let store = f.opt_bool("store")?.unwrap_or(true);
    let stream = f.opt_bool("stream")?.unwrap_or(false);
    let s = base_sampling(&mut f, 2.0)?;
    let max = f.opt_int("max_output_tokens", 1, i64::MAX)?.map_or(0, |n| n as usize);
    let mut params = GenParams { sampling: s, max_tokens: max, ..Default::default() };
    params.options.constraint = text_format(&mut f)?;
    let vars = reasoning(&mut f)?;
    if f.opt_bool("background")? == Some(true) {
        return Err(ApiError::unsupported("background", "background = true: responses run while the request waits"));
    }
    // Accepted and without effect on one local server: who asks (accounts come from authentication), tags, the
    // service tier, cache keys (kept conversations are matched by their tokens), what to include beyond the
    // default, and truncation (a prompt past the context is refused by name, never cut silently).
    for key in ["metadata", "user", "safety_identifier", "prompt_cache_key", "service_tier", "include", "truncation"] {
        f.get(key);
    }
    f.get("prompt_cache_retention");
    f.get("max_tool_calls");
    f.get("client_metadata");
    let mut echo = Map::new();
    for key in ["instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "text"] {
        if let Some(v) = obj.get(key) {
            echo.insert(key.to_string(), v.clone());
        }
    }
    f.finish()?;
    Ok(Request { model, instructions, input, tools, choice, parallel, previous, store, stream, vars, params, echo })
}

/// `input`: a string (one user message) or items.
fn input(f: &mut Fields<'_>) -> Result<Vec<Value>, ApiError> {
    match f.get("input") {
        Some(Value::String(s)) => Ok(vec![json!({"type": "message", "role": "user", "content": s})]),
        Some(Value::Array(a)) if !a.is_empty() => Ok(a.clone()),
        Some(Value::Array(_)) => Err(ApiError::bad_field("input", "input is empty: nothing to reply to")),
        Some(v) => Err(ApiError::bad_field("input", format!("input must be a string or an array, not {}", kind_of(v)))),
        None => Err(ApiError::bad_field("input", "input is required")),
    }
}

/// Items (a request's input, or a stored conversation's) into template messages: consecutive function calls join
/// one assistant message, reasoning rides on the assistant message after it, outputs become `tool` messages named
/// by the call they answer.
pub(super) fn items_to_messages(
    items: &[Value],
    field: &str,
    names: &mut HashMap<String, String>,
) -> Result<Vec<Value>, ApiError> {
    let mut out: Vec<Value> = Vec::new();
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Value::Object(o) = item else {
            return Err(ApiError::bad_field(&at, format!("{at} must be an object, not {}", kind_of(item))));
        };
        let ty = o.get("type").and_then(Value::as_str).unwrap_or("message");
        let text = |k: &str| {
            o.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| ApiError::bad_field(&format!("{at}.{k}"), format!("{at}.{k} must be a string")))
        };
        match ty {
            "message" => {
                let role = text("role")?;
                let role = match role.as_str() {
                    "developer" | "system" => "system",
                    "user" | "assistant" => role.as_str(),
                    other => {
                        return Err(ApiError::bad_field(
                            &format!("{at}.role"),
                            format!("{at}.role = {other:?}: one of \"user\", \"assistant\", \"system\", \"developer\""),
                        ))
                    }
                };
                let content = content(&at, o.get("content"))?;
                let mut m = json!({"role": role, "content": content});
                // A function call item after an assistant message joins it.
                if role == "assistant" {
                    if let Some(r) = reasoning.take() {
                        m["reasoning_content"] = json!(r);
                    }
                }
                out.push(m);
            }
            "function_call" => {
                let (call_id, name) = (text("call_id")?, text("name")?);
                let args = text("arguments")?;
                let args: Value = serde_json::from_str(&args).map_err(|e| {
                    ApiError::bad_field(&format!("{at}.arguments"), format!("{at}.arguments is not JSON ({e})"))
                })?;
                names.insert(call_id.clone(), name.clone());
                let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}});
                match out.last_mut() {
                    Some(m) if m["role"] == "assistant" && m.get("tool_calls").is_some() => {
                        if let Some(c) = m["tool_calls"].as_array_mut() {
                            c.push(call);
                        }
                    }
                    Some(m) if m["role"] == "assistant" => m["tool_calls"] = json!([call]),
                    _ => {
                        let mut m = json!({"role": "assistant", "content": null, "tool_calls": [call]});
                        if let Some(r) = reasoning.take() {
                            m["reasoning_content"] = json!(r);
                        }
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                let call_id = text("call_id")?;
                let output = match o.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    v @ Some(Value::Array(_)) => content(&format!("{at}.output"), v)?,
                    _ => {
                        return Err(ApiError::bad_field(&format!("{at}.output"), format!("{at}.output must be a string")))
                    }
                };
                let mut m = json!({"role": "tool", "tool_call_id": call_id, "content": output});
                if let Some(n) = names.get(&call_id) {
                    m["name"] = json!(n);
                }
                out.push(m);
            }
            "reasoning" => {
                let texts = |k: &str| -> Vec<String> {
                    o.get(k)
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(|p| p.get("text").and_then(Value::as_str).map(str::to_string)).collect())
                        .unwrap_or_default()
                };
                let mut t = texts("content");
                if t.is_empty() {
                    t = texts("summary");
                }
                if !t.is_empty() {
                    reasoning = Some(t.join("\n"));
                }
            }
            other => {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    format!("{at}.type = {other:?}: this server reads message, function_call, function_call_output and reasoning items"),
                ))
            }
        }
    }
    Ok(out)
}

/// A message's content: a string, or text parts (`input_text`, `output_text`, `text`) joined.
fn content(at: &str, v: Option<&Value>) -> Result<String, ApiError> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                let ty = p.get("type").and_then(Value::as_str);
                match (ty, p.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                    (Some(other), _) if !matches!(other, "input_text" | "output_text" | "text") => {
                        return Err(ApiError::unsupported(
                            &format!("{at}.content[{j}].type"),
                            format!("{at}.content[{j}].type = {other:?}: only text parts are supported"),
                        ))
                    }
                    _ => {
                        return Err(ApiError::bad_field(
                            &format!("{at}.content[{j}]"),
                            format!("{at}.content[{j}] must be {{\"type\": \"input_text\", \"text\": string}}"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(v) => Err(ApiError::bad_field(
            &format!("{at}.content"),
            format!("{at}.content must be a string or an array of text parts, not {}", kind_of(v)),
        )),
        None => Err(ApiError::bad_field(&format!("{at}.content"), format!("{at}.content is required"))),
    }
}

/// `tools`: function tools (`{"type": "function", "name", "description", "parameters", "strict"}`) as the chat
/// route's definitions, and those inside a `namespace` (Codex CLI groups its agent tools so). OpenAI's hosted
/// tools (web search, file search, code interpreter, …) and freeform `custom` tools are not shown to the model: no
/// one here could run them, and clients such as Codex CLI send web_search with every request.
fn tools(f: &mut Fields<'_>) -> Result<Option<Vec<Value>>, ApiError> {
    let list = match f.get("tools") {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(ApiError::bad_field("tools", format!("tools must be an array, not {}", kind_of(v)))),
    };
    let mut flat: Vec<(String, &Value)> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => flat.push((format!("tools[{i}]"), t)),
            Some("namespace") => {
                for (j, inner) in t.get("tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    if inner.get("type").and_then(Value::as_str) == Some("function") {
                        flat.push((format!("tools[{i}].tools[{j}]"), inner));
                    }
                }
            }
            Some(_) => {}
            None => {
                return Err(ApiError::bad_field(&format!("tools[{i}].type"), format!("tools[{i}].type is required")))
            }
        }
    }
    let mut out = Vec::new();
    for (at, t) in flat {
        let name = t.get("name").and_then(Value::as_str).filter(|n| !n.trim().is_empty()).ok_or_else(|| {
            ApiError::bad_field(&format!("{at}.name"), format!("{at}.name must be a non-empty string"))
        })?;
        let mut function =
            json!({"name": name, "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
        if let Some(d) = t.get("description").and_then(Value::as_str) {
            function["description"] = json!(d);
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok((!out.is_empty()).then_some(out))
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function", "name": …}`.
fn tool_choice(f: &mut Fields<'_>) -> Result<ToolChoice, ApiError> {
    match f.get("tool_choice") {
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) if s == "auto" => Ok(ToolChoice::Auto),
        Some(Value::String(s)) if s == "none" => Ok(ToolChoice::None),
        Some(Value::String(s)) if s == "required" => Ok(ToolChoice::Required),
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(n) => Ok(ToolChoice::Named(n.to_string())),
                None => Err(ApiError::bad_field("tool_choice.name", "tool_choice.name must be a string")),
            }
        }
        Some(v) => Err(ApiError::bad_field(
            "tool_choice",
            format!(
                "tool_choice {v}: one of \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"name\": …}}"
            ),
        )),
    }
}

/// `text.format`: `text`, `json_object` or `json_schema` (`{"type": "json_schema", "name", "schema", "strict"}`),
/// held by the grammar engine.
fn text_format(f: &mut Fields<'_>) -> Result<Option<Constraint>, ApiError> {
    let Some(v) = f.get("text") else { return Ok(None) };
    let Some(format) = v.get("format") else { return Ok(None) };
    let grammar = match format.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => Grammar::JsonObject,
        Some("json_schema") => match format.get("schema") {
            Some(s @ Value::Object(_)) => Grammar::JsonSchema(s.clone()),
            _ => {
                return Err(ApiError::bad_field(
                    "text.format.schema",
                    "text.format.schema must be a JSON Schema object",
                ))
            }
        },
        other => {
            return Err(ApiError::bad_field(
                "text.format.type",
                format!("text.format.type = {other:?}: one of \"text\", \"json_object\", \"json_schema\""),
            ))
        }
    };
    Ok(Some(Constraint { grammar, field: "text.format", after: None }))
}

/// `reasoning.effort`: `none` or `minimal` turn the template's thinking off, the others on; absent, the template's
/// default. `summary` is accepted (the whole trace is returned as reasoning text).
fn reasoning(f: &mut Fields<'_>) -> Result<Map<String, Value>, ApiError> {
    let mut vars = Map::new();
    let Some(v) = f.get("reasoning") else { return Ok(vars) };
    match v.get("effort").and_then(Value::as_str) {
        None => {}
        Some("none" | "minimal") => {
            vars.insert("enable_thinking".into(), json!(false));
        }
        Some("low" | "medium" | "high" | "xhigh") => {
            vars.insert("enable_thinking".into(), json!(true));
        }
        Some(other) => {
            return Err(ApiError::bad_field(
                "reasoning.effort",
                format!("reasoning.effort = {other:?}: one of none, minimal, low, medium, high, xhigh"),
            ))
        }
    }
    Ok(vars)
}
