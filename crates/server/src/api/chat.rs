//! `POST /v1/chat/completions`.

use super::request::{ignored, kind_of, parse_body, response_format, sampling, stop, stream, Fields};
use super::{respond, Shape, Submit};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kvad_engine::grammar::{Constraint, Grammar};
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
    let parallel = f.opt_bool("parallel_tool_calls")?.unwrap_or(true);
    params.options.constraint = response_format(&mut f)?;
    if let Some(c) = forced_calls(&choice, tools.as_deref(), parallel)? {
        if params.options.constraint.is_some() {
            return Err(ApiError::bad_field(
                "response_format",
                "response_format and a tool_choice that forces a call cannot both hold the reply: send one",
            ));
        }
        params.options.constraint = Some(c);
    }
    let vars = template_vars(&mut f)?;
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
    let offered = tools.filter(|_| choice != ToolChoice::None);
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
        // One call at most: the reply ends where its first call does (a forced call's grammar allows one anyway).
        one_call: !parallel,
        clamp_max_tokens: false,
        parse_tools: offered.is_some(),
        parse_reasoning: info.reasoning,
        prompt: Prompt::Chat { messages, tools: offered, vars },
        params,
        stop: stops,
        account,
        fresh,
        endpoint: "/v1/chat/completions",
    };
    respond(state, submit, Shape::Chat, is_stream, include_usage).await
}

/// `chat_template_kwargs` (vLLM's field): further variables for the model's chat template, such as
/// `enable_thinking`. Those the server sets itself cannot be overridden.
fn template_vars(f: &mut Fields<'_>) -> Result<Map<String, Value>, ApiError> {
    match f.get("chat_template_kwargs") {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => {
            const OWN: [&str; 5] = ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"];
            if let Some(k) = m.keys().find(|k| OWN.contains(&k.as_str())) {
                return Err(ApiError::bad_field(
                    &format!("chat_template_kwargs.{k}"),
                    format!("chat_template_kwargs.{k}: the server sets it; send only the template's own variables"),
                ));
            }
            Ok(m.clone())
        }
        Some(v) => Err(ApiError::bad_field(
            "chat_template_kwargs",
            format!("chat_template_kwargs must be an object, not {}", kind_of(v)),
        )),
    }
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

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tools: they are not shown to the model.
    None,
    /// A call to one of the tools is forced.
    Required,
    /// A call to this function is forced.
    Named(String),
}

/// `tool_choice`: `auto`, `none`, `required`, or `{"type": "function", "function": {"name": …}}`.
fn tool_choice(f: &mut Fields<'_>) -> Result<ToolChoice, ApiError> {
    let named = |v: &Value| v.get("function").and_then(|x| x.get("name")).and_then(Value::as_str).map(str::to_string);
    match f.get("tool_choice") {
        None => Ok(ToolChoice::Auto),
        Some(Value::String(s)) if s == "auto" => Ok(ToolChoice::Auto),
        Some(Value::String(s)) if s == "none" => Ok(ToolChoice::None),
        Some(Value::String(s)) if s == "required" => Ok(ToolChoice::Required),
        Some(v @ Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => match named(v) {
            Some(n) => Ok(ToolChoice::Named(n)),
            None => Err(ApiError::bad_field("tool_choice", "tool_choice.function.name must be a string")),
        },
        Some(v) => Err(ApiError::bad_field(
            "tool_choice",
            format!(
                "tool_choice {v}: one of \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": \
                 {{\"name\": …}}}}"
            ),
        )),
    }
}

/// The grammar a forced call holds the reply to (`required`: a call to one of the tools; a named function: a call
/// to it): the Hermes form the reply parser reads, `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, its
/// arguments valid against the function's parameters; one call, or several one after another where
/// `parallel_tool_calls` allows. None where nothing is forced.
pub(crate) fn forced_calls(
    choice: &ToolChoice,
    tools: Option<&[Value]>,
    parallel: bool,
) -> Result<Option<Constraint>, ApiError> {
    let name_of = |t: &Value| t["function"]["name"].as_str().unwrap_or_default().to_string();
    let chosen: Vec<&Value> = match (choice, tools) {
        (ToolChoice::Auto | ToolChoice::None, _) => return Ok(None),
        (_, None) => {
            return Err(ApiError::bad_field("tool_choice", "tool_choice forces a call, but no tools were given"));
        }
        (ToolChoice::Required, Some(t)) => t.iter().collect(),
        (ToolChoice::Named(n), Some(t)) => {
            let found: Vec<&Value> = t.iter().filter(|x| name_of(x) == *n).collect();
            if found.is_empty() {
                let names: Vec<String> = t.iter().map(name_of).collect();
                return Err(ApiError::bad_field(
                    "tool_choice",
                    format!("tool_choice names {n:?}, which is not among the tools: {}", names.join(", ")),
                ));
            }
            found
        }
    };
    let calls: Vec<Value> = chosen
        .iter()
        .map(|t| {
            let params = t["function"].get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
            json!({"type": "object", "properties": {"name": {"const": name_of(t)}, "arguments": params},
                   "required": ["name", "arguments"], "additionalProperties": false})
        })
        .collect();
    let schema = match calls.len() {
        1 => calls.into_iter().next().unwrap_or_default(),
        _ => json!({"anyOf": calls}),
    };
    let schema = kvad_engine::grammar::compact(schema);
    let more = if parallel && !matches!(choice, ToolChoice::Named(_)) { " (\"\\n\" call)*" } else { "" };
    let lark = format!("start: call{more}\ncall: \"<tool_call>\\n\" %json {schema} \"\\n</tool_call>\"\n");
    Ok(Some(Constraint { grammar: Grammar::Lark(lark), field: "tool_choice", after: None }))
}
