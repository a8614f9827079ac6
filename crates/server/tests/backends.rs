//! A backend per model, behind the real kvad-serve with the scripted engine (which keeps backends as names the way
//! the real engine keeps loaded models): `POST /api/load {"backend"}` checks the name, the model keeps the backend
//! it was loaded on (`/api/ps`, `/v1/models`, the requests table, unload's names), loading it on another while it
//! is in memory is a 409 that says to unload it first, and a request for a model not in memory loads it on the
//! server's default. `smollm2.rs` does the same with the real model.

mod common;

use serde_json::{json, Value};

fn load(s: &common::Server, model: &str, backend: Option<&str>) -> (u16, Value) {
    let mut body = json!({"model": model});
    if let Some(b) = backend {
        body["backend"] = json!(b);
    }
    s.post("/api/load", &body.to_string())
}

fn get(s: &common::Server, path: &str) -> Value {
    let (code, body) = s.get(path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn resident(s: &common::Server) -> Vec<String> {
    get(s, "/api/ps")["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_model_keeps_the_backend_it_was_loaded_on_and_another_is_refused_until_it_is_unloaded() {
    let s = common::scripted("backends", &[]);

    // An unknown backend: 400 naming the field and the value; nothing loads.
    let (code, e) = load(&s, "qwen2.5-scripted", Some("cpu-q5"));
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("backend")), "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("\"cpu-q5\"") && msg.contains("cpu-q8"), "the value and the names it may take: {msg}");
    assert!(resident(&s).is_empty());

    // Another CPU backend than the server's: the model is on it wherever the server says where models are.
    let (code, v) = load(&s, "qwen2.5-scripted", Some("cpu-q8"));
    assert_eq!((code, v), (200, json!({"loaded": ["qwen2.5-scripted"], "backend": "cpu-q8"})));
    assert_eq!(resident(&s), ["qwen2.5-scripted@cpu-q8"]);
    let models = get(&s, "/v1/models");
    let m = models["data"].as_array().unwrap().iter().find(|m| m["id"] == "qwen2.5-scripted").unwrap().clone();
    assert_eq!(
        (&m["loaded"], &m["backend"], &m["default_backend"]),
        (&json!(true), &json!("cpu-q8"), &json!("scripted"))
    );
    assert_eq!(get(&s, "/api/settings")["server"]["backend"], "scripted", "the server's default is not the model's");

    // Again on the same backend, or naming none: a success that changes nothing.
    assert_eq!(
        load(&s, "qwen2.5-scripted", Some("cpu-q8")),
        (200, json!({"loaded": ["qwen2.5-scripted"], "backend": "cpu-q8"}))
    );
    assert_eq!(load(&s, "qwen2.5-scripted", None).1["backend"], "cpu-q8");

    // On another backend while loaded (the server's default by name included): 409 naming where it is.
    for other in ["cpu-q4", "gpu-q8", "scripted"] {
        let (code, e) = load(&s, "qwen2.5-scripted", Some(other));
        assert_eq!((code, e["error"]["param"].as_str()), (409, Some("backend")), "{other}: {e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("backend = \"{other}\""))
                && msg.contains("is loaded on cpu-q8")
                && msg.contains("unload it first"),
            "{msg}"
        );
    }
    assert_eq!(resident(&s), ["qwen2.5-scripted@cpu-q8"], "nothing was unloaded by the refusals");

    // A reply runs on the backend the model is on; a request for a model not in memory loads it on the default.
    for model in ["qwen2.5-scripted", "qwen3-scripted"] {
        let body = json!({"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]});
        let (code, v) = s.post("/v1/chat/completions", &body.to_string());
        assert_eq!(code, 200, "{v}");
    }
    assert_eq!(resident(&s), ["qwen2.5-scripted@cpu-q8", "qwen3-scripted@scripted"]);
    let db = rusqlite::Connection::open(s.dir.join("kvad.db")).unwrap();
    let backends: Vec<String> = db
        .prepare("SELECT model || '@' || backend FROM requests ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(backends, ["qwen2.5-scripted@cpu-q8", "qwen3-scripted@scripted"]);

    // Unloaded, it names the backend it was on; then it loads anywhere.
    let (code, v) = s.post("/api/unload", &json!({"model": "qwen2.5-scripted"}).to_string());
    assert_eq!((code, v), (200, json!({"unloaded": ["qwen2.5-scripted@cpu-q8"]})));
    assert_eq!(load(&s, "qwen2.5-scripted", Some("cpu-q4")).1["backend"], "cpu-q4");
    assert_eq!(resident(&s), ["qwen2.5-scripted@cpu-q4", "qwen3-scripted@scripted"]);

    // Names as `kvad ps` gives them, NAME@backend (the seed's form): an unload from another backend than the one it
    // is on is a 409 saying where it is; from its own, it goes; a load NAME@backend loads there, and one that also
    // names another backend is a 400.
    let unload = |name: &str| s.post("/api/unload", &json!({"model": name}).to_string());
    let (code, e) = unload("qwen2.5-scripted@cpu-q8");
    assert_eq!((code, e["error"]["param"].as_str()), (409, Some("model")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("is loaded on cpu-q4, not on cpu-q8"), "{e}");
    assert_eq!(unload("qwen2.5-scripted@cpu-q4"), (200, json!({"unloaded": ["qwen2.5-scripted@cpu-q4"]})));
    let (code, v) = s.post("/api/load", &json!({"model": "qwen2.5-scripted@cpu-q8"}).to_string());
    assert_eq!((code, &v["backend"]), (200, &json!("cpu-q8")), "{v}");
    let (code, e) = load(&s, "qwen3-scripted@cpu-q4", Some("cpu-q8"));
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("backend")), "{e}");
    let (code, e) = unload("nothing@cpu-q8");
    assert_eq!(code, 404, "an unknown model stays a 404: {e}");
}
