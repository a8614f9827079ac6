//! Reading an Anthropic Messages request into what the engine runs: content blocks into the messages chat templates
//! read (the same shape `/v1/chat/completions` produces), tools into function definitions, `tool_choice` into the
//! forced-call grammar, `thinking` into the template's `enable_thinking`. Errors name the field as Anthropic's
//! clients send it (`messages[2].content[0].tool_use_id`).

use crate::api::chat::ToolChoice;
use crate::api::request::{base_sampling, kind_of, Fields};
use crate::error::ApiError;
use kvad_engine::grammar::{Constraint, Grammar};
use kvad_engine::seam::GenParams;
use kvad_engine::SamplingParams;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// A request, read.
pub(super) struct Request {
    /// Model id.
    pub model: String,
    /// Messages in template shape, the system prompt first.
    pub messages: Vec<Value>,
    /// Function definitions in template shape (`None`: none offered).
    pub tools: Option<Vec<Value>>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `tool_choice.disable_parallel_tool_use`.
    pub one_call: bool,
    /// Template variables (`enable_thinking` from `thinking`).
    pub vars: Map<String, Value>,
    /// Sampling and `max_tokens` (count_tokens: none).
    pub params: GenParams,
    /// `stop_sequences`.
    pub stops: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `thinking.display` = `omitted`: the reply carries no thinking blocks.
    pub omit_thinking: bool,
}

/// Reads a body. `count`: a `count_tokens` body, which carries no generation fields.
pub(super) fn read(obj: &Map<String, Value>, count: bool) -> Result<Request, ApiError> {
    let mut f = Fields::new(obj, "");
    let model = f.string("model")?.to_string();
    let mut messages = system(&mut f)?;
    messages.extend(conversation(&mut f)?);
    let tools = tools(&mut f)?;
    let (choice, one_call) = tool_choice(&mut f)?;
    let mut params = GenParams::default();
    let (mut stops, mut stream) = (Vec::new(), false);
    if !count {
        let max = f.opt_int("max_tokens", 1, i64::MAX)?;
        let max = max.ok_or_else(|| ApiError::bad_field("max_tokens", "max_tokens is required"))?;
        params.max_tokens = max as usize;
        params.sampling = sampling(&mut f)?;
        stops = stop_sequences(&mut f)?;
        stream = f.opt_bool("stream")?.unwrap_or(false);
        params.options.constraint = output_config(&mut f)?;
        // Accepted and without effect on one local server: who the user and workspace are (accounts come from
        // authentication), the service tier, speed and region, prompt-caching hints (conversations are kept
        // anyway) and diagnostics.
        for key in ["metadata", "service_tier", "speed", "inference_geo", "cache_control", "diagnostics"] {
            f.get(key);
        }
        // Context editing (clearing old tool results or thinking) acts on a prompt Anthropic keeps between
        // requests; here every request carries its whole prompt, and templates drop earlier turns' thinking.
        f.get("context_management");
        f.get("user_profile_id");
        f.get("workspace_id");
    }
    let (vars, omit_thinking) = thinking(&mut f, if count { usize::MAX } else { params.max_tokens })?;
    f.finish()?;
    Ok(Request { model, messages, tools, choice, one_call, vars, params, stops, stream, omit_thinking })
}

/// `output_config`: `format` (`{"type": "json_schema", "schema": …}`, structured output: the reply is held to the
/// schema by the grammar engine, as OpenAI's `response_format` is) and `effort` (accepted; a local model's effort
/// is its template's thinking switch, which `thinking` sets).
fn output_config(f: &mut Fields<'_>) -> Result<Option<Constraint>, ApiError> {
    let obj = match f.get("output_config") {
        None => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(ApiError::bad_field(
                "output_config",
                format!("output_config must be an object, not {}", kind_of(v)),
            ))
        }
    };
    let mut of = Fields::new(obj, "output_config.");
    of.opt_string("effort")?;
    let format = match of.get("format") {
        None => None,
        Some(Value::Object(fmt)) => {
            let mut ff = Fields::new(fmt, "output_config.format.");
            let ty = ff.string("type")?;
            if ty != "json_schema" {
                return Err(ApiError::bad_field(
                    "output_config.format.type",
                    format!("output_config.format.type = {ty:?}: must be \"json_schema\""),
                ));
            }
            let schema = match ff.get("schema") {
                Some(s @ Value::Object(_)) => s.clone(),
                _ => {
                    return Err(ApiError::bad_field(
                        "output_config.format.schema",
                        "output_config.format.schema must be a JSON Schema object",
                    ))
                }
            };
            ff.finish()?;
            Some(Constraint { grammar: Grammar::JsonSchema(schema), field: "output_config.format", after: None })
        }
        Some(v) => {
            return Err(ApiError::bad_field(
                "output_config.format",
                format!("output_config.format must be an object, not {}", kind_of(v)),
            ))
        }
    };
    of.finish()?;
    Ok(format)
}

/// Anthropic's sampling fields as its older clients send them: `temperature` in [0, 1] (default 1), `top_p`,
/// `top_k`; and kvad's `seed` (a reproducible draw), as on the OpenAI routes.
fn sampling(f: &mut Fields<'_>) -> Result<SamplingParams, ApiError> {
    let mut s = base_sampling(f, 1.0)?;
    s.top_k = f.opt_int("top_k", 0, 1 << 20)?.map_or(0, |k| k as usize);
    Ok(s)
}

fn stop_sequences(f: &mut Fields<'_>) -> Result<Vec<String>, ApiError> {
    match f.get("stop_sequences") {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) if a.len() <= 16 => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => Err(ApiError::bad_field(
                    &format!("stop_sequences[{i}]"),
                    format!("stop_sequences[{i}] must be a non-empty string, not {v}"),
                )),
            })
            .collect(),
        Some(Value::Array(a)) => {
            Err(ApiError::bad_field("stop_sequences", format!("stop_sequences has {} strings; at most 16", a.len())))
        }
        Some(v) => Err(ApiError::bad_field(
            "stop_sequences",
            format!("stop_sequences must be an array of strings, not {}", kind_of(v)),
        )),
    }
}

/// `system`: a string or text blocks, as the conversation's first message.
fn system(f: &mut Fields<'_>) -> Result<Vec<Value>, ApiError> {
    match f.get("system") {
        None => Ok(Vec::new()),
        Some(v) => Ok(vec![json!({"role": "system", "content": text_only("system", v)?})]),
    }
}

/// A string, or text blocks joined by newlines (a system prompt's).
fn text_only(at: &str, v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut text = Vec::new();
            for (j, b) in blocks.iter().enumerate() {
                match block_type(b) {
                    Some("text") => text.push(block_text(b, &format!("{at}[{j}]"))?),
                    _ => {
                        return Err(ApiError::bad_field(
                            &format!("{at}[{j}].type"),
                            format!("{at}[{j}] must be a text block ({{\"type\": \"text\", \"text\": …}})"),
                        ))
                    }
                }
            }
            Ok(text.join("\n"))
        }
        v => Err(ApiError::bad_field(
            at,
            format!("{at} must be a string or an array of text blocks, not {}", kind_of(v)),
        )),
    }
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

fn block_text(b: &Value, at: &str) -> Result<String, ApiError> {
    b.get("text")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ApiError::bad_field(&format!("{at}.text"), format!("{at}.text must be a string")))
}

/// `messages`: user and assistant turns, alternating as the client sent them, each a string or content blocks.
fn conversation(f: &mut Fields<'_>) -> Result<Vec<Value>, ApiError> {
    let list = match f.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::bad_field("messages", "messages is empty: nothing to reply to")),
        Some(v) => {
            return Err(ApiError::bad_field("messages", format!("messages must be an array, not {}", kind_of(v))))
        }
        None => return Err(ApiError::bad_field("messages", "messages is required")),
    };
    // Tool results name the call they answer by id; templates that write the tool's name read it from here.
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Value::Object(obj) = m else {
            return Err(ApiError::bad_field(&at, format!("{at} must be an object, not {}", kind_of(m))));
        };
        let mut mf = Fields::new(obj, &format!("{at}."));
        let role = mf.string("role")?;
        let content = mf.get("content");
        mf.finish()?;
        let content = content
            .ok_or_else(|| ApiError::bad_field(&format!("{at}.content"), format!("{at}.content is required")))?;
        match role {
            "user" => out.extend(user(&at, content, &names)?),
            "assistant" if i + 1 == list.len() => {
                return Err(ApiError::unsupported(
                    &at,
                    format!(
                        "{at} is an assistant message at the end (a prefill for the reply to continue): not \
                         supported; end with a user message"
                    ),
                ))
            }
            "assistant" => out.push(assistant(&at, content, &mut names)?),
            // A system message among the turns (Claude Code sends its reminders so): the template places it.
            "system" => out.push(json!({"role": "system", "content": text_only(&format!("{at}.content"), content)?})),
            other => {
                return Err(ApiError::bad_field(
                    &format!("{at}.role"),
                    format!("{at}.role = {other:?}: must be \"user\", \"assistant\" or \"system\""),
                ))
            }
        }
    }
    Ok(out)
}

/// A user turn: tool results first (each a `tool` message, as the chat templates read them), then its text.
fn user(at: &str, content: &Value, names: &HashMap<String, String>) -> Result<Vec<Value>, ApiError> {
    let blocks = match content {
        Value::String(s) => return Ok(vec![json!({"role": "user", "content": s})]),
        Value::Array(b) => b,
        v => return Err(not_content(at, v)),
    };
    let (mut out, mut text) = (Vec::new(), Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        let here = format!("{at}.content[{j}]");
        match block_type(b) {
            Some("text") => text.push(block_text(b, &here)?),
            Some("tool_result") => {
                let id = b.get("tool_use_id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_field(&format!("{here}.tool_use_id"), format!("{here}.tool_use_id must be a string"))
                })?;
                let mut result = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => {
                        let mut t = Vec::new();
                        for (k, p) in parts.iter().enumerate() {
                            let there = format!("{here}.content[{k}]");
                            match block_type(p) {
                                Some("text") => t.push(block_text(p, &there)?),
                                other => return Err(unsupported_block(&there, other)),
                            }
                        }
                        t.join("\n")
                    }
                    Some(v) => return Err(not_content(&format!("{here}.content"), v)),
                };
                if b.get("is_error").and_then(Value::as_bool) == Some(true) {
                    result = format!("Error: {result}");
                }
                let mut m = json!({"role": "tool", "tool_call_id": id, "content": result});
                if let Some(name) = names.get(id) {
                    m["name"] = json!(name);
                }
                out.push(m);
            }
            other => return Err(unsupported_block(&here, other)),
        }
    }
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text.join("\n")}));
    }
    if out.is_empty() {
        return Err(ApiError::bad_field(&format!("{at}.content"), format!("{at}.content has no blocks")));
    }
    Ok(out)
}

/// An assistant turn: its text, its thinking (as `reasoning_content`) and its tool calls.
fn assistant(at: &str, content: &Value, names: &mut HashMap<String, String>) -> Result<Value, ApiError> {
    let blocks = match content {
        Value::String(s) => return Ok(json!({"role": "assistant", "content": s})),
        Value::Array(b) => b,
        v => return Err(not_content(at, v)),
    };
    let (mut text, mut reasoning, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        let here = format!("{at}.content[{j}]");
        match block_type(b) {
            Some("text") => text.push(block_text(b, &here)?),
            Some("thinking") => reasoning.push(b.get("thinking").and_then(Value::as_str).unwrap_or_default()),
            // Another server's thinking, encrypted: nothing a local model can read.
            Some("redacted_thinking") => {}
            Some("tool_use") => {
                let field = |k: &str| {
                    b.get(k).and_then(Value::as_str).ok_or_else(|| {
                        ApiError::bad_field(&format!("{here}.{k}"), format!("{here}.{k} must be a string"))
                    })
                };
                let (id, name) = (field("id")?, field("name")?);
                let input = match b.get("input") {
                    Some(v @ Value::Object(_)) => v.clone(),
                    None | Some(Value::Null) => json!({}),
                    Some(v) => {
                        return Err(ApiError::bad_field(
                            &format!("{here}.input"),
                            format!("{here}.input must be an object, not {}", kind_of(v)),
                        ))
                    }
                };
                names.insert(id.to_string(), name.to_string());
                calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}));
            }
            other => return Err(unsupported_block(&here, other)),
        }
    }
    let text = text.join("\n");
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = json!(calls);
    }
    if !reasoning.is_empty() {
        m["reasoning_content"] = json!(reasoning.join("\n"));
    }
    Ok(m)
}

fn not_content(at: &str, v: &Value) -> ApiError {
    ApiError::bad_field(at, format!("{at} must be a string or an array of content blocks, not {}", kind_of(v)))
}

fn unsupported_block(at: &str, ty: Option<&str>) -> ApiError {
    match ty {
        Some(t) => ApiError::unsupported(
            &format!("{at}.type"),
            format!("{at}.type = {t:?}: this server reads text, tool_use, tool_result and thinking blocks"),
        ),
        None => ApiError::bad_field(&format!("{at}.type"), format!("{at} must be a content block with a type")),
    }
}

/// `tools`: custom tools (`name`, `description`, `input_schema`) as function definitions. Anthropic's server tools
/// (web search, code execution, …) run on Anthropic's side and are refused by their type.
fn tools(f: &mut Fields<'_>) -> Result<Option<Vec<Value>>, ApiError> {
    let list = match f.get("tools") {
        None => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(ApiError::bad_field("tools", format!("tools must be an array, not {}", kind_of(v)))),
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let Value::Object(obj) = t else {
            return Err(ApiError::bad_field(&at, format!("{at} must be an object, not {}", kind_of(t))));
        };
        let mut tf = Fields::new(obj, &format!("{at}."));
        if let Some(ty) = tf.opt_string("type")? {
            if ty != "custom" {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    format!(
                        "{at}.type = {ty:?}: only custom tools run here (Anthropic's server tools run on its side)"
                    ),
                ));
            }
        }
        let name = tf.string("name")?;
        if name.trim().is_empty() {
            return Err(ApiError::bad_field(&format!("{at}.name"), format!("{at}.name must not be empty")));
        }
        let description = tf.opt_string("description")?;
        let schema = match tf.get("input_schema") {
            Some(s @ Value::Object(_)) => s.clone(),
            Some(v) => {
                return Err(ApiError::bad_field(
                    &format!("{at}.input_schema"),
                    format!("{at}.input_schema must be a JSON Schema object, not {}", kind_of(v)),
                ))
            }
            None => {
                return Err(ApiError::bad_field(
                    &format!("{at}.input_schema"),
                    format!("{at}.input_schema is required"),
                ))
            }
        };
        // Prompt caching hints and Anthropic's own tool flags change nothing here.
        tf.get("cache_control");
        tf.get("strict");
        tf.finish()?;
        let mut function = json!({"name": name, "parameters": schema});
        if let Some(d) = description {
            function["description"] = json!(d);
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Some(out))
}

/// `tool_choice`: `{"type": "auto" | "any" | "tool" (with `name`) | "none"}`, and whether parallel calls are off.
fn tool_choice(f: &mut Fields<'_>) -> Result<(ToolChoice, bool), ApiError> {
    let obj = match f.get("tool_choice") {
        None => return Ok((ToolChoice::Auto, false)),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(ApiError::bad_field(
                "tool_choice",
                format!("tool_choice must be an object, not {}", kind_of(v)),
            ))
        }
    };
    let mut cf = Fields::new(obj, "tool_choice.");
    let ty = cf.string("type")?;
    let one = cf.opt_bool("disable_parallel_tool_use")?.unwrap_or(false);
    let choice = match ty {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Named(cf.string("name")?.to_string()),
        other => {
            return Err(ApiError::bad_field(
                "tool_choice.type",
                format!("tool_choice.type = {other:?}: one of \"auto\", \"any\", \"tool\", \"none\""),
            ))
        }
    };
    cf.finish()?;
    Ok((choice, one))
}

/// `thinking`, as the template's `enable_thinking`: `{"type": "enabled", "budget_tokens": n}` (at least 1,024 and
/// under `max_tokens`, as Anthropic requires) and `between_tools` turn it on, `disabled` off; `adaptive` (the model
/// decides) and an absent `thinking` leave the template's default. The budget is checked, not enforced:
/// `max_tokens` bounds thinking and answer together. `display`: `omitted` leaves thinking blocks out of the reply.
fn thinking(f: &mut Fields<'_>, max_tokens: usize) -> Result<(Map<String, Value>, bool), ApiError> {
    let mut vars = Map::new();
    let obj = match f.get("thinking") {
        None => return Ok((vars, false)),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(ApiError::bad_field("thinking", format!("thinking must be an object, not {}", kind_of(v))))
        }
    };
    let mut tf = Fields::new(obj, "thinking.");
    match tf.string("type")? {
        "enabled" => {
            let budget = tf.opt_int("budget_tokens", 1024, i64::MAX)?;
            let budget = budget.ok_or_else(|| {
                ApiError::bad_field("thinking.budget_tokens", "thinking.budget_tokens is required (at least 1024)")
            })?;
            if budget as usize >= max_tokens {
                return Err(ApiError::bad_field(
                    "thinking.budget_tokens",
                    format!("thinking.budget_tokens = {budget}: must be less than max_tokens ({max_tokens})"),
                ));
            }
            vars.insert("enable_thinking".into(), json!(true));
        }
        "disabled" => {
            vars.insert("enable_thinking".into(), json!(false));
        }
        "between_tools" => {
            vars.insert("enable_thinking".into(), json!(true));
        }
        "adaptive" => {}
        other => {
            return Err(ApiError::bad_field(
                "thinking.type",
                format!("thinking.type = {other:?}: \"enabled\", \"adaptive\", \"between_tools\" or \"disabled\""),
            ))
        }
    }
    let omit = match tf.opt_string("display")? {
        None | Some("summarized") => false,
        Some("omitted") => true,
        Some(d) => {
            return Err(ApiError::bad_field(
                "thinking.display",
                format!("thinking.display = {d:?}: \"summarized\" or \"omitted\""),
            ))
        }
    };
    tf.finish()?;
    Ok((vars, omit))
}
