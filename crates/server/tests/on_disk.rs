//! The seed's third memory rule on the real engine: a request naming a model on this machine loads it, whether or
//! not `[server] models` named it. A model pulled through the server's own `POST /api/pull` (from the fake Hub of
//! kvad-hub's tests) is offered by `/v1/models` and answers without a restart; a name on neither the disk nor the
//! list is a 404 saying so; a path is the administrator's to name (a load), never a request's.

mod common;

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use support::{tiny_llama_files, Fake, C1};

fn offered(s: &common::Server) -> Vec<(String, bool)> {
    let (code, body) = s.get("/v1/models");
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"].as_array().unwrap().iter().map(|m| (m["id"].as_str().unwrap().into(), m["loaded"] == true)).collect()
}

#[test]
fn a_model_on_disk_is_offered_and_a_pulled_one_answers_without_a_restart() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    let root = std::env::temp_dir().join(format!("kvad-on-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (cache, kvad) = (root.join("hub"), root.join("kvad"));
    let fixture = support::fixtures().join("models/llama-tied");
    let fixture = fixture.canonicalize().unwrap();
    let s = common::start_env(
        "on-disk",
        &["--model", fixture.to_str().unwrap(), "--backend", "cpu-f32"],
        &[
            ("HF_HUB_CACHE", cache.to_str().unwrap()),
            ("KVAD_CACHE", kvad.to_str().unwrap()),
            ("HF_ENDPOINT", &fake.url),
        ],
    );
    let before = offered(&s);
    assert!(!before.iter().any(|(id, _)| id == "tiny/llama"), "{before:?}");
    // Not on this machine: a 404 that says so, and nothing is downloaded by a request.
    let (code, v) =
        s.post("/v1/completions", &json!({"model": "tiny/llama", "prompt": "a b", "max_tokens": 2}).to_string());
    assert_eq!(code, 404, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("not on this machine"), "{v}");
    assert!(!cache.join("models--tiny--llama").exists(), "a request never pulls");
    // Pulled through the server: offered at once, and it answers.
    let done = s.stream("/api/pull", &json!({"model": "tiny/llama"}).to_string());
    assert!(done.last().unwrap().contains("\"done\""), "{done:?}");
    let after = offered(&s);
    assert!(after.contains(&("tiny/llama".into(), false)), "listed, not loaded: {after:?}");
    // Greedy and past the end token: at the default temperature of 1 a random model's reply may end after one
    // token, which is not what this test is about.
    let body = json!({"model": "tiny/llama", "prompt": "a b", "max_tokens": 2, "temperature": 0, "ignore_eos": true});
    let (code, v) = s.post("/v1/completions", &body.to_string());
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    assert!(offered(&s).contains(&("tiny/llama".into(), true)), "loaded by the request");
    let (code, ps) = s.get("/api/ps");
    assert!(code == 200 && ps.contains("tiny/llama@cpu-f32"), "{ps}");
    // A path: never from a request; an administrator's load may name one.
    let other = support::fixtures().join("models/llama-gguf/model.gguf").canonicalize().unwrap();
    let other = other.to_str().unwrap();
    let (code, v) = s.post("/v1/completions", &json!({"model": other, "prompt": "a", "max_tokens": 1}).to_string());
    assert_eq!(code, 404, "{v}");
    let (code, v) = s.post("/api/load", &json!({"model": other}).to_string());
    assert_eq!(code, 200, "{v}");
    let (code, v) = s.post("/v1/completions", &json!({"model": other, "prompt": "a", "max_tokens": 1}).to_string());
    assert_eq!(code, 200, "{v}");
    let _ = std::fs::remove_dir_all(&root);
}
