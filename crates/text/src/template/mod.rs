//! Chat templates: rendering a conversation into the prompt text the model was trained on.
//!
//! Templates are Jinja written for Python's jinja2, as transformers' `apply_chat_template` runs
//! them. We render with minijinja configured to match: `trim_blocks` and `lstrip_blocks`, loop
//! controls, lenient undefined values, Python string/dict methods through minijinja-contrib's
//! pycompat, Python's way of printing values, and transformers' globals (`raise_exception`,
//! `strftime_now`) and `tojson` filter.

mod clock;
mod python;
mod source;

use std::path::Path;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};
use serde_json::{Map, Value as Json};

pub use clock::{system_clock, Clock};

use crate::files::{chat_template_field, read_optional_json, read_optional_text};
use crate::TextError;
use python::{json_dumps, python_str, DumpOptions};

/// The name the template is stored under in its environment.
const NAME: &str = "chat";
/// Prefix that marks an error raised by the template's own `raise_exception(message)`.
const RAISED: &str = "raise_exception: ";

/// A compiled chat template.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("source_len", &self.source.len()).finish_non_exhaustive()
    }
}

/// What a template sees when it renders: the variables that `apply_chat_template` passes.
#[derive(Debug, Clone, Default)]
pub struct ChatContext {
    /// The conversation: objects with `role`, `content` and whatever else the caller has
    /// (`tool_calls`, `reasoning_content`, ...).
    pub messages: Vec<Json>,
    /// Tool JSON schemas; `None` renders as Python's `None` (defined but falsy), as transformers
    /// passes it.
    pub tools: Option<Vec<Json>>,
    /// Whether to open an assistant turn at the end.
    pub add_generation_prompt: bool,
    /// The tokenizer's BOS token text.
    pub bos_token: String,
    /// The tokenizer's EOS token text.
    pub eos_token: String,
    /// Further template variables (e.g. `enable_thinking`); they override `bos_token` and
    /// `eos_token` but not the four above.
    pub extra: Map<String, Json>,
}

impl ChatTemplate {
    /// Compiles a template, with `strftime_now` reading the system clock.
    pub fn new(source: &str) -> Result<Self, TextError> {
        Self::with_clock(source, system_clock())
    }

    /// Compiles a template whose `strftime_now` reads `clock` (tests fix the date with it).
    pub fn with_clock(source: &str, clock: Clock) -> Result<Self, TextError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", move |format: String| {
            clock::strftime(&clock(), &format).map(Value::from).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, format!("strftime_now: unsupported format {format:?}"))
            })
        });
        env.add_template_owned(NAME, source::rewrite_generation_tags(source))
            .map_err(|e| TextError::TemplateSyntax { message: describe(&e) })?;
        Ok(ChatTemplate { env, source: source.to_string() })
    }

    /// Finds the template of a Hugging Face model directory: chat_template.jinja, else
    /// chat_template.json (`chat_template` key), else tokenizer_config.json `chat_template` (a
    /// string, or a list of `{name, template}` from which `default` is taken). `None` when the
    /// directory has none.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, TextError> {
        let mut source = read_optional_text(&dir.join("chat_template.jinja"))?;
        if source.is_none() {
            source = read_optional_json(&dir.join("chat_template.json"))?.as_ref().and_then(chat_template_field);
        }
        if source.is_none() {
            source = read_optional_json(&dir.join("tokenizer_config.json"))?.as_ref().and_then(chat_template_field);
        }
        source.map(|s| Self::new(&s)).transpose()
    }

    /// Renders the conversation to prompt text.
    pub fn render(&self, ctx: &ChatContext) -> Result<String, TextError> {
        let mut vars = Map::new();
        vars.insert("bos_token".into(), Json::String(ctx.bos_token.clone()));
        vars.insert("eos_token".into(), Json::String(ctx.eos_token.clone()));
        for (k, v) in &ctx.extra {
            vars.insert(k.clone(), v.clone());
        }
        let messages: Vec<Json> = ctx.messages.iter().map(normalize_message).collect();
        vars.insert("messages".into(), Json::Array(messages));
        vars.insert("tools".into(), ctx.tools.clone().map(Json::Array).unwrap_or(Json::Null));
        vars.entry("documents").or_insert(Json::Null);
        vars.insert("add_generation_prompt".into(), Json::Bool(ctx.add_generation_prompt));
        let template = self.env.get_template(NAME).map_err(|e| TextError::TemplateRender { message: describe(&e) })?;
        template.render(Value::from_serialize(&vars)).map_err(|e| TextError::TemplateRender { message: describe(&e) })
    }

    /// Whether the template reads `tools`, i.e. can describe tools to the model.
    pub fn supports_tools(&self) -> bool {
        source::mentions_tools(&self.source)
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// What transformers does to each message before rendering: drops keys whose value is null,
/// and copies reasoning given under `reasoning_content`, `thinking` or `reasoning` to both
/// `thinking` (first) and `reasoning_content` (last), the names templates read.
fn normalize_message(message: &Json) -> Json {
    let Json::Object(fields) = message else {
        return message.clone();
    };
    let fields: Map<String, Json> =
        fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| fields.get(*k)).cloned();
    let Some(reasoning) = reasoning else {
        return Json::Object(fields);
    };
    let mut out = Map::new();
    out.insert("thinking".into(), reasoning.clone());
    for (k, v) in fields {
        out.insert(k, v);
    }
    out.insert("reasoning_content".into(), reasoning);
    Json::Object(out)
}

/// The text of a minijinja error: the template's own message for `raise_exception`, else
/// minijinja's description with its location.
fn describe(err: &Error) -> String {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(m) = e.downcast_ref::<Error>() {
            if let Some(msg) = m.detail().and_then(|d| d.strip_prefix(RAISED)) {
                return msg.to_string();
            }
        }
        cur = e.source();
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// `raise_exception(message)`: fails the render with the template's message.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, format!("{RAISED}{message}")))
}

/// Prints values as jinja2 does (Python's `str()`): `True`, `None`, `['a', 1]`, `1e-05`.
fn python_formatter(out: &mut minijinja::Output, state: &minijinja::State, value: &Value) -> Result<(), Error> {
    let pythonic =
        matches!(value.kind(), ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map);
    if pythonic {
        if let Ok(json) = serde_json::to_value(value) {
            return out.write_str(&python_str(&json)).map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()));
        }
    }
    minijinja::escape_formatter(out, state, value)
}

/// transformers' `tojson` filter: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`; the first two may be positional, the rest are keywords.
fn tojson(value: &Value, ensure_ascii: Option<Value>, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let pick = |positional: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        Ok(kwargs.get::<Option<Value>>(name)?.or(positional))
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?;
    let indent = pick(indent, "indent")?;
    let separators = pick(None, "separators")?;
    let sort_keys = pick(None, "sort_keys")?;
    kwargs.assert_all_used()?;

    let bad = |what: &str, v: &Value| Error::new(ErrorKind::InvalidOperation, format!("tojson: bad {what}: {v}"));
    let indent = match indent.filter(|v| !v.is_none() && !v.is_undefined()) {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => {
            let n = i64::try_from(v.clone()).map_err(|_| bad("indent", &v))?;
            Some(" ".repeat(n.max(0) as usize))
        }
    };
    let separators = match separators.filter(|v| !v.is_none() && !v.is_undefined()) {
        None => None,
        Some(v) => {
            let parts: Vec<String> = v
                .try_iter()
                .map_err(|_| bad("separators", &v))?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("separators", &v))?;
            match <[String; 2]>::try_from(parts) {
                Ok([a, b]) => Some((a, b)),
                Err(_) => return Err(bad("separators", &v)),
            }
        }
    };
    let opts = DumpOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        indent,
        separators,
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
    };
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: value is not JSON serializable: {e}")))?;
    Ok(Value::from_safe_string(json_dumps(&json, &opts)))
}

#[cfg(test)]
mod tests;
