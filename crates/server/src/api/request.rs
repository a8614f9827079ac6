//! Reading request bodies by hand, so every error names the field and the value (serde's derive reports types
//! without paths), and unsupported fields are refused by name instead of being silently ignored.

use crate::error::ApiError;
use kvad_engine::seam::GenParams;
use kvad_engine::SamplingParams;
use serde_json::{Map, Value};

/// A JSON object being read; remembers which keys were read so the rest can be refused.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
    seen: Vec<&'static str>,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}…", &s[..s.char_indices().nth(60).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

/// Parses a body as a JSON object.
pub fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!("the body must be a JSON object, not {}", kind(&other)))),
    }
}

impl<'a> Fields<'a> {
    /// Reads `obj`; errors name fields as `prefix` + key.
    pub fn new(obj: &'a Map<String, Value>, prefix: &str) -> Self {
        Fields { obj, prefix: prefix.to_string(), seen: Vec::new() }
    }

    /// The full name of a key.
    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// A present, non-null value.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.seen.push(key);
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str, v: &Value) -> ApiError {
        ApiError::bad_field(
            &self.name(key),
            format!("{} must be {want}, not {} ({})", self.name(key), kind(v), show(v)),
        )
    }

    /// A required string.
    pub fn string(&mut self, key: &'static str) -> Result<&'a str, ApiError> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(self.wrong(key, "a string", v)),
            None => Err(ApiError::bad_field(&self.name(key), format!("{} is required", self.name(key)))),
        }
    }

    /// An optional string.
    pub fn opt_string(&mut self, key: &'static str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
            None => Ok(None),
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, key: &'static str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "true or false", v)),
            None => Ok(None),
        }
    }

    /// An optional number in `[lo, hi]`.
    pub fn opt_f32(&mut self, key: &'static str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        match self.get(key) {
            Some(v @ Value::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if !(lo..=hi).contains(&x) {
                    return Err(ApiError::bad_field(
                        &self.name(key),
                        format!("{} = {}: must be between {lo} and {hi}", self.name(key), show(v)),
                    ));
                }
                Ok(Some(x as f32))
            }
            Some(v) => Err(self.wrong(key, "a number", v)),
            None => Ok(None),
        }
    }

    /// An optional whole number in `[lo, hi]`.
    pub fn opt_int(&mut self, key: &'static str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            Some(v @ Value::Number(n)) => match n.as_i64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(ApiError::bad_field(
                    &self.name(key),
                    format!("{} = {}: must be a whole number between {lo} and {hi}", self.name(key), show(v)),
                )),
            },
            Some(v) => Err(self.wrong(key, "a whole number", v)),
            None => Ok(None),
        }
    }

    /// Refuses every key that was not read.
    pub fn finish(&self) -> Result<(), ApiError> {
        let mut extra: Vec<&String> = self.obj.keys().filter(|k| !self.seen.contains(&k.as_str())).collect();
        extra.sort();
        match extra.first() {
            None => Ok(()),
            Some(k) => Err(ApiError::unsupported(
                &self.name(k),
                format!("{} is not a field this server supports", self.name(k)),
            )),
        }
    }
}

/// The sampling and length fields both completion endpoints share. `max_keys` are the accepted names of the
/// length limit.
pub fn sampling(f: &mut Fields<'_>, max_keys: &[&'static str]) -> Result<GenParams, ApiError> {
    let mut s = SamplingParams {
        temperature: f.opt_f32("temperature", 0.0, 2.0)?.unwrap_or(1.0),
        top_p: 1.0,
        ..Default::default()
    };
    if let Some(p) = f.opt_f32("top_p", 0.0, 1.0)? {
        if p == 0.0 {
            return Err(ApiError::bad_field("top_p", "top_p = 0: must be above 0 (use temperature 0 for greedy)"));
        }
        s.top_p = p;
    }
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
    s.seed = f.opt_int("seed", i64::MIN, i64::MAX)?.map(|x| x as u64);
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
                    ApiError::bad_field(&format!("stop[{i}]"), format!("stop[{i}] must be a string, not {}", kind(v)))
                })
            })
            .collect(),
        Some(Value::Array(a)) => Err(ApiError::bad_field("stop", format!("stop has {} strings; at most 16", a.len()))),
        Some(v) => {
            Err(ApiError::bad_field("stop", format!("stop must be a string or an array of strings, not {}", kind(v))))
        }
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

/// Describes a JSON value's kind, for messages.
pub fn kind_of(v: &Value) -> &'static str {
    kind(v)
}
