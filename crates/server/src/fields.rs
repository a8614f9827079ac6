//! Reading request bodies by hand, so every error names the field and the value (serde's derive reports types
//! without paths), and unsupported fields are refused by name instead of being silently ignored. Every route reads
//! its body through this, the API's and the accounts' alike.

use crate::error::ApiError;
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

    /// An optional number in `[lo, hi]`, checked as sent; a value too small for f32 that is not zero becomes the
    /// smallest f32 of its sign rather than 0 (a `top_p` of 5e-324 is a valid, tiny nucleus, not the refused 0).
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
                let f = x as f32;
                Ok(Some(if f == 0.0 && x != 0.0 { f32::from_bits(1).copysign(f) } else { f }))
            }
            Some(v) => Err(self.wrong(key, "a number", v)),
            None => Ok(None),
        }
    }

    /// An optional whole number in `[lo, hi]`; a float with no fraction (`4.0`, which Python clients send) counts.
    pub fn opt_int(&mut self, key: &'static str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let whole = |n: &serde_json::Number| {
            n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64))
        };
        match self.get(key) {
            Some(v @ Value::Number(n)) => match whole(n) {
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

/// Describes a JSON value's kind, for messages.
pub fn kind_of(v: &Value) -> &'static str {
    kind(v)
}
