//! What `kvad ps` prints for a latent-attention model, on the real engine behind the real kvad-serve: DeepSeek's
//! cache holds the latent and the rope key of each token in each layer, never the expanded keys and values, and
//! `cache_bytes_per_token` (what admission charges a token, and what `kvad ps` shows) is exactly that formula at
//! the backend's cache precision (f16 at cpu-q8/q4, f32 at cpu-f32).

mod common;

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};

#[test]
fn kvad_ps_charges_a_deepseek_model_its_latent_cache_per_token() {
    // The fixture (vocab 256) with a byte-level tokenizer beside it, so a prompt of plain bytes runs.
    let src = support::fixtures().join("models/deepseek-v2-lite");
    let dir = std::env::temp_dir().join(format!("kvad-latent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    // The hub tests' byte-level tokenizer cut to its 256 bytes (the fixture's vocabulary): no merges.
    let mut tok: Value = serde_json::from_str(&support::tiny_tokenizer_json()).unwrap();
    tok["model"]["merges"] = json!([]);
    tok["model"]["vocab"].as_object_mut().unwrap().retain(|_, id| id.as_u64().unwrap() < 256);
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let (layers, rank, rope) = (
        cfg["num_hidden_layers"].as_u64().unwrap(),
        cfg["kv_lora_rank"].as_u64().unwrap(),
        cfg["qk_rope_head_dim"].as_u64().unwrap(),
    );
    let path = dir.canonicalize().unwrap();
    let dir = path.to_str().unwrap();
    let s = common::start("latent", &["--model", dir, "--backend", "cpu-q8"]);
    for (backend, elem) in [("cpu-q8", 2), ("cpu-f32", 4)] {
        let (code, v) = s.post("/api/load", &json!({"model": dir, "backend": backend}).to_string());
        assert_eq!(code, 200, "{backend}: {v}");
        let (code, v) = s.post(
            "/v1/completions",
            &json!({"model": dir, "prompt": "a b", "max_tokens": 2, "temperature": 0, "ignore_eos": true}).to_string(),
        );
        assert_eq!((code, &v["usage"]["completion_tokens"]), (200, &json!(2)), "{backend}: {v}");
        let (code, ps) = s.get("/api/ps");
        assert_eq!(code, 200, "{ps}");
        let ps: Value = serde_json::from_str(&ps).unwrap();
        let m = &ps["models"][0];
        assert_eq!(m["name"], format!("{dir}@{backend}"), "{ps}");
        // Expanded keys and values would be layers × heads × (nope + rope + v) values a token: far more.
        assert_eq!(m["cache_bytes_per_token"], layers * (rank + rope) * elem, "{backend}: {ps}");
        assert_eq!(s.post("/api/unload", &json!({"model": dir}).to_string()).0, 200);
    }
    let _ = std::fs::remove_dir_all(&path);
}
