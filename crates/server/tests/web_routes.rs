//! The routes the web UI added, on the real kvad-serve with the scripted models: conversations kept per account
//! (another's is a 404, the trace is refused), the tokenizer, a benchmark's events and the refusal of a second,
//! the live settings, the in-play marks on logprobs, and the UI's paths beside the API's.

mod common;

use serde_json::{json, Value};

fn as_account(s: &common::Server, method: &str, path: &str, account: &str, body: &Value) -> (u16, Value) {
    let r = ureq::request(method, &format!("{}{path}", s.url))
        .set("content-type", "application/json")
        .set("x-kvad-account", account)
        .send_string(&body.to_string());
    match r {
        Ok(r) => {
            let code = r.status();
            (code, r.into_json().unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

#[test]
fn conversations_are_kept_per_account_with_the_answer_and_not_the_trace() {
    let s = common::scripted("conversations", &[]);
    let call = |m: &str, p: &str, who: &str, b: Value| as_account(&s, m, p, who, &b);
    let (code, c) = call(
        "POST",
        "/api/conversations",
        "ann",
        json!({"title": "Oslo", "model": "qwen3-scripted",
                                                                      "settings": {"temperature": 0.2}}),
    );
    assert_eq!(code, 201, "{c}");
    let id = c["id"].as_i64().unwrap();
    let path = format!("/api/conversations/{id}");
    let msgs = format!("{path}/messages");
    assert_eq!(call("POST", &msgs, "ann", json!({"role": "user", "content": "Hi"})).0, 201);
    let (code, e) =
        call("POST", &msgs, "ann", json!({"role": "assistant", "content": "Hello!", "reasoning_content": "I greet"}));
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("reasoning_content")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("the answer, not the reasoning trace"), "{e}");
    let calls = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
    assert_eq!(call("POST", &msgs, "ann", json!({"role": "assistant", "content": "", "tool_calls": calls})).0, 201);
    let (code, got) = call("GET", &path, "ann", json!({}));
    assert_eq!(code, 200);
    assert_eq!((got["title"].as_str(), got["model"].as_str()), (Some("Oslo"), Some("qwen3-scripted")));
    assert_eq!(got["settings"], json!({"temperature": 0.2}));
    let roles: Vec<&str> = got["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(got["messages"][1]["tool_calls"], calls);

    // Another account sees none of it: not in its list, and each route answers as for no such conversation.
    let (_, list) = call("GET", "/api/conversations", "bob", json!({}));
    assert_eq!(list["conversations"], json!([]));
    for (m, p, b) in [
        ("GET", path.as_str(), json!({})),
        ("PATCH", path.as_str(), json!({"title": "mine now"})),
        ("POST", msgs.as_str(), json!({"role": "user", "content": "x"})),
        ("DELETE", path.as_str(), json!({})),
    ] {
        let (code, e) = call(m, p, "bob", b);
        assert_eq!(code, 404, "{m} {p}: {e}");
        assert_eq!(e["error"]["message"], format!("id = {id}: no such conversation"), "nothing about whose it is");
    }

    let (code, renamed) = call("PATCH", &path, "ann", json!({"title": "Weather", "model": null}));
    assert_eq!((code, renamed["title"].as_str(), &renamed["model"]), (200, Some("Weather"), &Value::Null));
    let (_, list) = call("GET", "/api/conversations", "ann", json!({}));
    assert_eq!(
        (list["conversations"][0]["id"].as_i64(), list["conversations"][0]["messages"].as_i64()),
        (Some(id), Some(2))
    );

    // Bad input names the field and the value.
    let bad = [
        ("POST", "/api/conversations".to_string(), json!({"title": ""}), "title"),
        ("POST", "/api/conversations".to_string(), json!({"settings": [1]}), "settings"),
        ("POST", "/api/conversations".to_string(), json!({"colour": "red"}), "colour"),
        ("POST", msgs.clone(), json!({"role": "wizard", "content": "x"}), "role"),
        ("POST", msgs.clone(), json!({"role": "user"}), "content"),
        ("POST", msgs.clone(), json!({"role": "user", "content": "x", "tool_calls": []}), "tool_calls"),
        ("GET", "/api/conversations/-3".to_string(), json!({}), "id"),
    ];
    for (m, p, b, field) in bad {
        let (code, e) = call(m, &p, "ann", b.clone());
        assert_eq!((code, e["error"]["param"].as_str()), (400, Some(field)), "{m} {p} {b}: {e}");
    }
    assert_eq!(call("DELETE", &path, "ann", json!({})).0, 204);
    assert_eq!(call("GET", &path, "ann", json!({})).0, 404);
}

#[test]
fn tokenize_settings_and_logprob_marks() {
    let s = common::scripted("web-routes", &[]);
    let (code, t) = s.post("/api/tokenize", &json!({"model": "qwen2.5-scripted", "text": "abcdefg"}).to_string());
    assert_eq!(code, 200, "{t}");
    assert_eq!(
        t["tokens"],
        json!([{"id": 294 % 256, "text": "abc"}, {"id": 303 % 256, "text": "def"}, {"id": 103, "text": "g"}])
    );
    let (code, e) = s.post("/api/tokenize", &json!({"model": "nope", "text": "x"}).to_string());
    assert_eq!((code, e["error"]["param"].as_str()), (404, Some("model")), "{e}");

    // The live limits change the scheduler's; other keys are refused by name, saying why.
    let (code, v) =
        s.call("PATCH", "/api/settings", &json!({"queue_per_account": 2, "generations_per_minute": 5}).to_string());
    assert_eq!(code, 200, "{v}");
    let (_, q) = s.get("/api/queue");
    let q: Value = serde_json::from_str(&q).unwrap();
    assert_eq!(
        (q["limits"]["queue_per_account"].as_u64(), q["limits"]["generations_per_minute"].as_u64()),
        (Some(2), Some(5))
    );
    let (code, e) = s.call("PATCH", "/api/settings", &json!({"backend": "cpu-q4"}).to_string());
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("backend")));
    assert!(e["error"]["message"].as_str().unwrap().contains("restart"), "{e}");
    let (code, e) = s.call("PATCH", "/api/settings", &json!({"batch": 0}).to_string());
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("batch")), "{e}");

    // Chat logprobs carry in_play per alternative; completions carry the ordered kvad_top lists.
    let body = json!({"model": "qwen2.5-scripted", "messages": [{"role": "user", "content": "hi"}], "logprobs": true,
                      "top_logprobs": 3, "max_tokens": 2});
    let (code, r) = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(code, 200, "{r}");
    let top = &r["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
    let marks: Vec<bool> = top.as_array().unwrap().iter().map(|t| t["in_play"].as_bool().unwrap()).collect();
    assert_eq!(marks, [true, true, false]);
    let (code, r) = s.post(
        "/v1/completions",
        &json!({"model": "qwen2.5-scripted", "prompt": "x", "logprobs": 2, "max_tokens": 2}).to_string(),
    );
    assert_eq!(code, 200, "{r}");
    let kt = &r["choices"][0]["logprobs"]["kvad_top"][0];
    assert_eq!(
        (kt[1]["token"].as_str(), kt[1]["in_play"].as_bool(), kt.as_array().unwrap().len()),
        (Some(" maybe"), Some(true), 2)
    );

    // The picker's default is the server's backend by name (a scripted server's is "scripted"): the model the
    // requests above loaded is there, so loading it there again is a success (backends.rs has the rest).
    let (code, v) = s.post("/api/load", &json!({"model": "qwen2.5-scripted", "backend": "scripted"}).to_string());
    assert_eq!((code, &v["backend"]), (200, &json!("scripted")), "{v}");

    // The requests table's latest rows, newest first.
    let (code, r) = s.get("/api/requests?limit=1");
    let r: Value = serde_json::from_str(&r).unwrap();
    assert_eq!((code, r["requests"].as_array().unwrap().len()), (200, 1));
    assert_eq!(r["requests"][0]["endpoint"], "/v1/completions");
    assert_eq!(s.get("/api/requests?limit=0").0, 400);
}

#[test]
fn a_benchmark_streams_its_samples_and_a_second_is_refused_naming_the_first() {
    let s = common::scripted("bench", &[]);
    let (code, e) = s.post("/api/bench", &json!({"models": []}).to_string());
    assert_eq!((code, e["error"]["param"].as_str()), (400, Some("models")));
    let (code, e) = s.post("/api/bench", &json!({"models": ["nope"]}).to_string());
    assert_eq!(code, 404, "{e}");

    let url = s.url.clone();
    let slow = std::thread::spawn(move || {
        let r = ureq::post(&format!("{url}/api/bench"))
            .send_string(&json!({"models": ["slow-scripted"], "rounds": 2, "max_tokens": 30}).to_string())
            .unwrap();
        r.into_string().unwrap()
    });
    let start = std::time::Instant::now();
    loop {
        let (_, b) = s.get("/api/bench");
        if serde_json::from_str::<Value>(&b).unwrap()["running"] == true {
            break;
        }
        assert!(start.elapsed().as_secs() < 20, "the benchmark never started: {b}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, e) = s.post("/api/bench", &json!({"models": ["qwen2.5-scripted"]}).to_string());
    assert_eq!(code, 409, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("a benchmark is already running: slow-scripted for account \"local\""), "{msg}");

    let text = slow.join().unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let name = b.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
            let data = b.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["start", "sample", "sample", "done"], "{text}");
    let s1 = &events[1].1["sample"];
    assert_eq!(s1["round"], 1);
    assert!(s1["decode_tps"].as_f64().unwrap() > 0.0 && s1["ttft_ms"].as_f64().unwrap() > 0.0, "{s1}");
    let sum = &events[3].1["summary"][0];
    assert_eq!((sum["model"].as_str(), sum["samples"].as_u64()), (Some("slow-scripted"), Some(2)));
    let d = &sum["decode_tps"];
    assert!(d["min"].as_f64() <= d["median"].as_f64() && d["median"].as_f64() <= d["max"].as_f64(), "{d}");
    // The run is over: another may start, and GET shows the last one's samples.
    let (_, b) = s.get("/api/bench");
    let b: Value = serde_json::from_str(&b).unwrap();
    assert_eq!((b["running"].as_bool(), b["run"]["samples"][0].as_array().unwrap().len()), (Some(false), 2));
    // Benchmarks are requests like any other, asking for no cache: their rows carry the endpoint.
    assert!(s.rows().iter().any(|r| r.0 == "/api/bench"));
}

#[test]
fn ui_paths_are_the_uis_and_api_paths_stay_the_apis() {
    let s = common::scripted("ui-paths", &[]);
    // Whether or not this build holds web/dist, an app route answers HTML and an unknown API path a JSON 404.
    let r = ureq::get(&format!("{}/chat/3", s.url)).call();
    let (code, ct, body) = match r {
        Ok(r) => (r.status(), r.content_type().to_string(), r.into_string().unwrap()),
        Err(ureq::Error::Status(c, r)) => (c, r.content_type().to_string(), r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(ct, "text/html", "{code} {body}");
    if kvad_server::ui::built() {
        assert_eq!(code, 200);
        assert!(body.contains("<div id=\"app\">"), "{body}");
    } else {
        assert_eq!(code, 404);
        assert!(body.contains("this kvad was built without the web UI"), "{body}");
    }
    let (code, e) = s.get("/api/no-such-route");
    assert_eq!(code, 404);
    assert!(serde_json::from_str::<Value>(&e).unwrap()["error"]["message"].is_string(), "{e}");
    // /api from a client that is not a browser is still the plain table.
    let (code, page) = s.get("/api");
    assert_eq!(code, 200);
    assert!(page.contains("<code>/api/conversations/{id}</code>"), "{page}");
}

/// The server's default model (what `kvad use` sends): offered first in /v1/models and marked, shown in the
/// settings, kept across a restart; a model the server cannot load is a 404 naming the field.
#[test]
fn the_default_model_is_offered_first_and_kept_across_restarts() {
    let s = common::scripted("default-model", &[]);
    let first = |s: &common::Server| {
        let (_, v) = s.get("/v1/models");
        let v: Value = serde_json::from_str(&v).unwrap();
        let d = &v["data"];
        (d[0]["id"].as_str().unwrap().to_string(), d[0]["default"] == true, d[1]["default"] == true)
    };
    assert_eq!(first(&s), ("qwen2.5-scripted".to_string(), true, false), "[server] models' first, at start");
    let (code, v) = s.call("PATCH", "/api/settings", &json!({"default_model": "qwen3-scripted"}).to_string());
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["server"]["default_model"], "qwen3-scripted");
    assert_eq!(first(&s), ("qwen3-scripted".to_string(), true, false));
    let (code, e) = s.call("PATCH", "/api/settings", &json!({"default_model": "nope"}).to_string());
    assert_eq!((code, e["error"]["param"].as_str()), (404, Some("model")), "{e}");
    let script = common::script();
    let s = s.restart(&["--scripted", script.to_str().unwrap()]);
    assert_eq!(first(&s), ("qwen3-scripted".to_string(), true, false), "kept in kvad.db");
}
