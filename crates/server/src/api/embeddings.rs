//! `POST /v1/embeddings`: one vector per input from an embedding model, as OpenAI's API answers it (`input` a
//! string, strings, token ids or lists of them; `encoding_format` float or base64; `dimensions`). The request waits in
//! the scheduler's line like a generation and its inputs are read in batched passes between the running replies'
//! steps.

use super::request::{kind_of, parse_body, Fields};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::sched::{InputsJob, Whole};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use kvad_engine::seam::EmbedInput;
use serde_json::{json, Value};

/// Most inputs one request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// The inputs of `input`, each checked: non-empty text, or token ids (whole numbers from 0).
fn inputs(v: Option<&Value>) -> Result<Vec<EmbedInput>, ApiError> {
    let bad = |msg: String| ApiError::bad_field("input", msg);
    let ids = |items: &[Value], at: &str| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|x| match x.as_u64() {
                Some(n) if n <= u64::from(u32::MAX) => Ok(n as u32),
                _ => Err(bad(format!("{at} holds {x}, not a token id (a whole number from 0)"))),
            })
            .collect()
    };
    let list = match v {
        None => return Err(bad("input is required".into())),
        Some(Value::String(s)) => vec![EmbedInput::Text(s.clone())],
        Some(Value::Array(a)) if a.is_empty() => return Err(bad("input is an empty array: nothing to embed".into())),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => vec![EmbedInput::Tokens(ids(a, "input")?)],
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, x) in a.iter().enumerate() {
                out.push(match x {
                    Value::String(s) => EmbedInput::Text(s.clone()),
                    Value::Array(t) => EmbedInput::Tokens(ids(t, &format!("input[{i}]"))?),
                    other => {
                        return Err(bad(format!(
                            "input[{i}] must be a string or an array of token ids, not {}",
                            kind_of(other)
                        )))
                    }
                });
            }
            out
        }
        Some(v) => {
            return Err(bad(format!(
                "input must be a string or an array (of strings or token ids), not {}",
                kind_of(v)
            )))
        }
    };
    if list.len() > MAX_INPUTS {
        return Err(bad(format!("input holds {} items; at most {MAX_INPUTS}", list.len())));
    }
    for (i, x) in list.iter().enumerate() {
        let empty = match x {
            EmbedInput::Text(s) => s.is_empty(),
            EmbedInput::Tokens(t) => t.is_empty(),
        };
        if empty {
            return Err(bad(format!("input[{i}] is empty: there is nothing to embed")));
        }
    }
    Ok(list)
}

/// A vector as OpenAI's `base64` format sends it: its f32 values' little-endian bytes.
fn base64_of(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The handler.
pub async fn handler(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let model = f.string("model")?.to_string();
    let inputs = inputs(f.get("input"))?;
    let base64 = match f.opt_string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_field(
                "encoding_format",
                format!("encoding_format = {other:?}: must be \"float\" or \"base64\""),
            ))
        }
    };
    let dimensions = f.opt_int("dimensions", 1, 1 << 20)?.map(|d| d as usize);
    f.opt_string("user")?;
    f.finish()?;
    state.model_info(&model)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = InputsJob {
        model: model.clone(),
        inputs,
        account: caller.account,
        endpoint: "/v1/embeddings",
        queued_at: std::time::Instant::now(),
        work: Whole::Embed { dimensions, reply: tx },
    };
    state.queue.inputs(job)?;
    let done = rx.await.map_err(|_| ApiError::internal("the engine dropped the embeddings job"))??;
    let data: Vec<Value> = done
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if base64 { json!(base64_of(v)) } else { json!(v) };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": done.tokens, "total_tokens": done.tokens},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_shape_of_openais_api_is_read_and_bad_ones_are_named() {
        let read = |v: Value| inputs(Some(&v));
        assert_eq!(read(json!("hi")).unwrap(), vec![EmbedInput::Text("hi".into())]);
        assert_eq!(read(json!([1, 2])).unwrap(), vec![EmbedInput::Tokens(vec![1, 2])]);
        assert_eq!(read(json!(["a", [3]])).unwrap(), vec![EmbedInput::Text("a".into()), EmbedInput::Tokens(vec![3])]);
        for (v, says) in [
            (json!([]), "input is an empty array"),
            (json!(["a", ""]), "input[1] is empty"),
            (json!([[1, -2]]), "input[0] holds -2"),
            (json!([1.5]), "input holds 1.5"),
            (json!({"a": 1}), "not an object"),
            (json!(["a", true]), "input[1] must be a string"),
        ] {
            let e = read(v).unwrap_err();
            assert!(e.message.contains(says) || e.message.contains("not an object"), "{}", e.message);
        }
        assert!(inputs(None).unwrap_err().message.contains("required"));
        let many = Value::Array(vec![json!("x"); MAX_INPUTS + 1]);
        assert!(read(many).unwrap_err().message.contains("at most 2048"));
    }

    #[test]
    fn base64_is_the_little_endian_f32_bytes() {
        assert_eq!(base64_of(&[1.0]), "AACAPw==");
    }
}
