//! Reading request bodies by hand, so every error names the field and the value (serde's derive reports types
//! without paths), and unsupported fields are refused by name instead of being silently ignored.

use crate::error::ApiError;
pub use crate::fields::{kind_of, parse_body, Fields};
use kvad_engine::grammar::{Constraint, Grammar};
use kvad_engine::seam::GenParams;
use kvad_engine::SamplingParams;
use serde_json::Value;

/// `temperature` (in [0, `hottest`], default 1), `top_p` (above 0) and `seed`, which every generation route reads
/// (OpenAI's allow temperatures to 2, Anthropic's to 1).
pub fn base_sampling(f: &mut Fields<'_>, hottest: f64) -> Result<SamplingParams, ApiError> {
    let mut s = SamplingParams {
        temperature: f.opt_f32("temperature", 0.0, hottest)?.unwrap_or(1.0),
        top_p: 1.0,
        ..Default::default()
    };
    if let Some(p) = f.opt_f32("top_p", 0.0, 1.0)? {
        if p == 0.0 {
            return Err(ApiError::bad_field("top_p", "top_p = 0: must be above 0 (use temperature 0 for greedy)"));
        }
        s.top_p = p;
    }
    s.seed = f.opt_int("seed", i64::MIN, i64::MAX)?.map(|x| x as u64);
    Ok(s)
}

/// The sampling and length fields both completion endpoints share. `max_keys` are the accepted names of the
/// length limit.
pub fn sampling(f: &mut Fields<'_>, max_keys: &[&'static str]) -> Result<GenParams, ApiError> {
    let mut s = base_sampling(f, 2.0)?;
    s.top_k = f.opt_int("top_k", -1, 1 << 20)?.map_or(0, |k| k.max(0) as usize);
    s.min_p = f.opt_f32("min_p", 0.0, 1.0)?.unwrap_or(0.0);
    s.presence_penalty = f.opt_f32("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    s.frequency_penalty = f.opt_f32("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    if let Some(r) = f.opt_f32("repetition_penalty", 0.0, 10.0)? {
        if r == 0.0 {
            return Err(ApiError::bad_field("repetition_penalty", "repetition_penalty = 0: must be above 0"));
        }
        s.repetition_penalty = r;
    }
    let mut max_tokens = 0usize;
    for key in max_keys {
        if let Some(n) = f.opt_int(key, 1, i64::MAX)? {
            max_tokens = n as usize;
        }
    }
    if let Some(n) = f.opt_int("n", 1, 1)? {
        debug_assert_eq!(n, 1);
    }
    let mut options =
        kvad_engine::GenerateOptions { ignore_eos: f.opt_bool("ignore_eos")?.unwrap_or(false), ..Default::default() };
    if let Some(v) = f.get("logit_bias") {
        let Value::Object(m) = v else {
            return Err(ApiError::bad_field("logit_bias", "logit_bias must be an object of token id to bias"));
        };
        for (k, b) in m {
            let id: u32 = k.parse().map_err(|_| {
                ApiError::bad_field("logit_bias", format!("logit_bias key {k:?} is not a token id (a whole number)"))
            })?;
            let b = b.as_f64().filter(|b| (-100.0..=100.0).contains(b)).ok_or_else(|| {
                ApiError::bad_field(
                    "logit_bias",
                    format!("logit_bias[{k}] = {b}: must be a number between -100 and 100"),
                )
            })?;
            options.logit_bias.push((id, b as f32));
        }
    }
    Ok(GenParams { sampling: s, max_tokens, options })
}

/// `stop`: a string or an array of up to 16 strings.
pub fn stop(f: &mut Fields<'_>) -> Result<Vec<String>, ApiError> {
    match f.get("stop") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.len() <= 16 => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad_field(
                        &format!("stop[{i}]"),
                        format!("stop[{i}] must be a string, not {}", kind_of(v)),
                    )
                })
            })
            .collect(),
        Some(Value::Array(a)) => Err(ApiError::bad_field("stop", format!("stop has {} strings; at most 16", a.len()))),
        Some(v) => Err(ApiError::bad_field(
            "stop",
            format!("stop must be a string or an array of strings, not {}", kind_of(v)),
        )),
    }
}

/// `stream` and `stream_options.include_usage`.
pub fn stream(f: &mut Fields<'_>) -> Result<(bool, bool), ApiError> {
    let stream = f.opt_bool("stream")?.unwrap_or(false);
    let mut usage = false;
    if let Some(v) = f.get("stream_options") {
        let Value::Object(m) = v else {
            return Err(ApiError::bad_field("stream_options", "stream_options must be an object"));
        };
        let mut o = Fields::new(m, "stream_options.");
        usage = o.opt_bool("include_usage")?.unwrap_or(false);
        o.finish()?;
        if !stream {
            return Err(ApiError::bad_field("stream_options", "stream_options is only allowed with stream: true"));
        }
    }
    Ok((stream, usage))
}

/// Fields accepted and ignored, because they change nothing here (`user`: accounts come from authentication).
pub fn ignored(f: &mut Fields<'_>) -> Result<(), ApiError> {
    f.opt_string("user")?;
    f.get("metadata");
    f.get("store");
    Ok(())
}

/// `response_format`: `text` (no constraint), `json_object` (any JSON object), `json_schema` (JSON valid against
/// `json_schema.schema`; `strict` is how kvad always holds it); kvad's own `regex` (`{"type": "regex", "regex":
/// …}`) and `grammar` (a Lark grammar, `{"type": "grammar", "grammar": …}`). The reply is held to it token by
/// token (constrained decoding), so it parses whatever the model would have written.
pub fn response_format(f: &mut Fields<'_>) -> Result<Option<Constraint>, ApiError> {
    let Some(v) = f.get("response_format") else { return Ok(None) };
    let Value::Object(o) = v else {
        return Err(ApiError::bad_field(
            "response_format",
            format!("response_format must be an object, not {}", kind_of(v)),
        ));
    };
    let text = |key: &str| match o.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ApiError::bad_field(
            &format!("response_format.{key}"),
            format!("response_format.{key} must be a non-empty string"),
        )),
    };
    let grammar = match o.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => Grammar::JsonObject,
        Some("json_schema") => {
            let spec = o.get("json_schema").and_then(Value::as_object).ok_or_else(|| {
                ApiError::bad_field(
                    "response_format.json_schema",
                    "response_format.json_schema must be an object with a name and a schema",
                )
            })?;
            match spec.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(true))) => Grammar::JsonSchema(s.clone()),
                None => Grammar::JsonObject,
                Some(s) => {
                    return Err(ApiError::bad_field(
                        "response_format.json_schema.schema",
                        format!("response_format.json_schema.schema must be a JSON Schema object, not {}", kind_of(s)),
                    ))
                }
            }
        }
        Some("regex") => Grammar::Regex(text("regex")?),
        Some("grammar") => Grammar::Lark(text("grammar")?),
        other => {
            return Err(ApiError::bad_field(
                "response_format.type",
                format!(
                    "response_format.type = {}: one of \"text\", \"json_object\", \"json_schema\" (and kvad's \"regex\", \"grammar\")",
                    other.map_or("missing".to_string(), |t| format!("{t:?}"))
                ),
            ))
        }
    };
    Ok(Some(Constraint { grammar, field: "response_format", after: None }))
}
