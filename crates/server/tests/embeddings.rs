//! `POST /v1/embeddings` on the real engine behind the real kvad-serve, with the tiny embedding fixtures
//! (fixtures/models/qwen3-embed, llama-embed-mean) against sentence-transformers' vectors: raw HTTP for every
//! refusal and the requests row, and the official `openai` SDK (tests/embeddings_sdk.py) for both encodings,
//! `dimensions` and token ids. A generation asked of an embedding model is refused naming the model.

mod common;

use base64::Engine as _;
use serde_json::{json, Value};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").canonicalize().unwrap()
}

fn golden(name: &str) -> Value {
    let p = fixtures().join(format!("goldens/embed/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn worst(a: &Value, b: &Value) -> f64 {
    let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs()).fold(0.0, f64::max)
}

#[test]
fn embeddings_equal_sentence_transformers_through_the_server_and_the_openai_sdk() {
    let qwen = fixtures().join("models/qwen3-embed").display().to_string();
    let mean = fixtures().join("models/llama-embed-mean").display().to_string();
    let s = common::start("embed", &["--model", &qwen, "--model", &mean, "--backend", "cpu-f32"]);
    for (model, name) in [(&qwen, "qwen3-embed"), (&mean, "llama-embed-mean")] {
        let g = golden(name);
        let (code, v) = s.post("/v1/embeddings", &json!({"model": model, "input": g["texts"]}).to_string());
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["object"], "list");
        assert_eq!(v["model"], model.as_str());
        for (i, d) in v["data"].as_array().unwrap().iter().enumerate() {
            assert_eq!((d["object"].as_str(), d["index"].as_u64()), (Some("embedding"), Some(i as u64)));
            let w = worst(&d["embedding"], &g["embeddings"][i]);
            assert!(w < 1e-4, "{name} input {i}: worst difference {w}");
        }
        let tokens: usize = g["tokens"].as_array().unwrap().iter().map(|t| t.as_array().unwrap().len()).sum();
        assert_eq!(v["usage"], json!({"prompt_tokens": tokens, "total_tokens": tokens}));
    }
    // base64: the float answer's f32 values, little-endian.
    let body = |extra: Value| {
        let mut b = json!({"model": qwen, "input": "What is the capital of Norway?"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b.to_string()
    };
    let (_, float) = s.post("/v1/embeddings", &body(json!({})));
    let (code, b64) = s.post("/v1/embeddings", &body(json!({"encoding_format": "base64"})));
    assert_eq!(code, 200, "{b64}");
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(b64["data"][0]["embedding"].as_str().unwrap()).unwrap();
    let decoded: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let floats: Vec<f32> =
        float["data"][0]["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert_eq!(decoded, floats);
    // Refusals name the field and the value; nothing is queued for them.
    let plain_gen = json!({"model": qwen, "prompt": "hi", "max_tokens": 2}).to_string();
    for (b, field, says) in [
        (json!({"model": qwen}).to_string(), "input", "input is required"),
        (body(json!({"input": []})), "input", "empty array"),
        (body(json!({"input": ["a", ""]})), "input", "input[1] is empty"),
        (body(json!({"input": [[1, -1]]})), "input", "input[0] holds -1"),
        (body(json!({"input": [vec![3u32; 600]]})), "input", "input[0] is 600 tokens"),
        (body(json!({"encoding_format": "int8"})), "encoding_format", "\"int8\""),
        (body(json!({"dimensions": 65})), "dimensions", "dimensions = 65"),
        (body(json!({"dimensions": 0})), "dimensions", "dimensions"),
        (json!({"model": mean, "input": "x", "dimensions": 16}).to_string(), "dimensions", "Matryoshka"),
        (body(json!({"truncate": true})), "truncate", "truncate"),
        (plain_gen, "model", "embedding model"),
    ] {
        let path = if b.contains("prompt") { "/v1/completions" } else { "/v1/embeddings" };
        let (code, v) = s.post(path, &b);
        assert_eq!(code, 400, "{b}: {v}");
        assert_eq!(v["error"]["param"], field, "{b}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(says), "{b}: {v}");
    }
    let (code, v) = s.post("/v1/embeddings", &json!({"model": "nope", "input": "x"}).to_string());
    assert_eq!(code, 404, "{v}");
    // Each embeddings request is a requests row: its endpoint, model and tokens.
    let rows = s.rows();
    let ok: Vec<_> = rows.iter().filter(|r| r.0 == "/v1/embeddings" && r.4 == "stop").collect();
    assert_eq!(ok.len(), 4, "{rows:?}");
    assert!(ok.iter().all(|r| r.2 > 0 && r.3 == 0), "{rows:?}");
    // The official SDK: base64 (its default) and float, dimensions, token ids, a refusal.
    let out = std::process::Command::new(common::sdk_python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/embeddings_sdk.py"))
        .args([&s.url, &qwen, &fixtures().join("goldens/embed/qwen3-embed.json").display().to_string()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for check in [
        "as the default equal",
        "as base64 equal",
        "as float equal",
        "dimensions truncated",
        "token ids embedded",
        "bad dimensions",
    ] {
        assert!(stdout.contains(check), "{check}: {stdout}");
    }
}

/// A model that both generates and pools (qwen3-embed's weights with its head tied to the embedding): embeddings
/// asked while a reply runs are read in passes between its steps, and neither changes the other: the reply's
/// tokens are those it writes alone, the vectors sentence-transformers'.
#[test]
fn embeddings_between_a_running_replys_steps_change_neither() {
    let src = fixtures().join("models/qwen3-embed");
    let dir = std::env::temp_dir().join(format!("kvad-embed-tied-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json", "1_Pooling/config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["tie_word_embeddings"] = json!(true);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let model = dir.display().to_string();
    let s = std::sync::Arc::new(common::start("embed-tied", &["--model", &model, "--backend", "cpu-f32"]));
    let reply = json!({"model": model, "prompt": "Oslo is the capital of", "max_tokens": 200, "temperature": 0,
                       "ignore_eos": true})
    .to_string();
    let (code, alone) = s.post("/v1/completions", &reply);
    assert_eq!(code, 200, "{alone}");
    let g = golden("qwen3-embed");
    let writer = {
        let (s, reply) = (s.clone(), reply.clone());
        std::thread::spawn(move || s.post("/v1/completions", &reply))
    };
    let mut answered = 0;
    while !writer.is_finished() || answered == 0 {
        let (code, v) = s.post("/v1/embeddings", &json!({"model": model, "input": g["texts"]}).to_string());
        assert_eq!(code, 200, "{v}");
        for (i, d) in v["data"].as_array().unwrap().iter().enumerate() {
            let w = worst(&d["embedding"], &g["embeddings"][i]);
            assert!(w < 1e-4, "input {i} beside a reply: worst difference {w}");
        }
        answered += 1;
    }
    let (code, beside) = writer.join().unwrap();
    assert_eq!(code, 200, "{beside}");
    assert_eq!(beside["choices"][0]["text"], alone["choices"][0]["text"], "after {answered} embeddings beside it");
    assert_eq!(beside["usage"]["completion_tokens"], 200);
}
