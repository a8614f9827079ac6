//! The real kvad-serve binary with the scripted engine (replies from tests/fixtures/script.json, prompts rendered
//! by the real Qwen2.5, Qwen3 and SmolLM2 templates in fixtures/templates): request checking, streaming shapes,
//! reasoning, tool calls, stop strings, cancellation, the queue's limit, shutdown and the requests table.

mod common;

use common::{scripted, Server};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

fn chat(s: &Server, model: &str, user: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": user}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    s.post("/v1/chat/completions", &body.to_string())
}

const WEATHER: &str = r#"[{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;

fn tools() -> Value {
    serde_json::from_str(WEATHER).unwrap()
}

#[test]
fn bad_requests_get_clear_4xx_and_the_server_keeps_serving() {
    let s = scripted("bad", &[]);
    let m = r#""model": "qwen2.5-scripted""#;
    let u = r#""messages": [{"role": "user", "content": "hi"}]"#;
    let cases: Vec<(String, u16, &str, &str)> = vec![
        ("{not json".into(), 400, "", "not valid JSON"),
        ("[1, 2]".into(), 400, "", "must be a JSON object"),
        (format!("{{{u}}}"), 400, "model", "model is required"),
        (format!(r#"{{"model": 5, {u}}}"#), 400, "model", "model must be a string, not a number (5)"),
        (format!(r#"{{"model": "nope", {u}}}"#), 404, "model", "\"nope\" does not exist"),
        (format!(r#"{{{m}, "messages": []}}"#), 400, "messages", "messages is empty"),
        (format!(r#"{{{m}, "messages": "hi"}}"#), 400, "messages", "must be an array, not a string"),
        (
            format!(r#"{{{m}, "messages": [{{"role": "robot", "content": "x"}}]}}"#),
            400,
            "messages[0].role",
            "\"robot\"",
        ),
        (format!(r#"{{{m}, "messages": [{{"role": "user"}}]}}"#), 400, "messages[0].content", "is required"),
        (
            format!(r#"{{{m}, "messages": [{{"role": "user", "content": [{{"type": "image_url"}}]}}]}}"#),
            400,
            "messages[0].content[0].type",
            "only text parts",
        ),
        (format!(r#"{{{m}, {u}, "max_tokens": 100000000}}"#), 400, "max_tokens", "at most"),
        (format!(r#"{{{m}, {u}, "max_tokens": 0}}"#), 400, "max_tokens", "between 1 and"),
        (
            format!(r#"{{{m}, {u}, "temperature": "hot"}}"#),
            400,
            "temperature",
            "must be a number, not a string (\"hot\")",
        ),
        (format!(r#"{{{m}, {u}, "temperature": 3}}"#), 400, "temperature", "temperature = 3: must be between 0 and 2"),
        (format!(r#"{{{m}, {u}, "top_p": 0}}"#), 400, "top_p", "top_p = 0"),
        (format!(r#"{{{m}, {u}, "n": 2}}"#), 400, "n", "n = 2"),
        (format!(r#"{{{m}, {u}, "frobnicate": true}}"#), 400, "frobnicate", "not a field this server supports"),
        (format!(r#"{{{m}, {u}, "top_logprobs": 3}}"#), 400, "top_logprobs", "needs logprobs: true"),
        (format!(r#"{{{m}, {u}, "logit_bias": {{"abc": 1}}}}"#), 400, "logit_bias", "\"abc\" is not a token id"),
        (format!(r#"{{{m}, {u}, "logit_bias": {{"999999": 1}}}}"#), 400, "logit_bias", "999999"),
        (
            format!(r#"{{{m}, {u}, "stream_options": {{"include_usage": true}}}}"#),
            400,
            "stream_options",
            "only allowed with stream",
        ),
        (format!(r#"{{{m}, {u}, "tool_choice": "required"}}"#), 400, "tool_choice", "no tools were given"),
        (
            format!(
                r#"{{{m}, {u}, "tools": {WEATHER}, "tool_choice": {{"type": "function", "function": {{"name": "get_time"}}}}}}"#
            ),
            400,
            "tool_choice",
            "not among the tools: get_weather",
        ),
        (format!(r#"{{{m}, {u}, "tools": {WEATHER}, "tool_choice": "any"}}"#), 400, "tool_choice", "one of"),
        (
            format!(r#"{{{m}, {u}, "tools": [{{"type": "function", "function": {{}}}}]}}"#),
            400,
            "tools[0].function.name",
            "non-empty string",
        ),
        (
            format!(r#"{{{m}, {u}, "chat_template_kwargs": {{"add_generation_prompt": false}}}}"#),
            400,
            "chat_template_kwargs.add_generation_prompt",
            "the server sets it",
        ),
        (
            format!(r#"{{{m}, {u}, "response_format": {{"type": "xml"}}}}"#),
            400,
            "response_format.type",
            "\"xml\": one of",
        ),
        (
            format!(r#"{{{m}, {u}, "response_format": {{"type": "json_schema"}}}}"#),
            400,
            "response_format.json_schema",
            "must be an object",
        ),
        (
            format!(
                r#"{{{m}, "messages": [{{"role": "assistant", "content": null, "tool_calls": [{{"id": "c", "type": "function", "function": {{"name": "f", "arguments": "{{oops"}}}}]}}]}}"#
            ),
            400,
            "messages[0].tool_calls[0].function.arguments",
            "is not JSON",
        ),
    ];
    for (body, status, param, needle) in &cases {
        let (code, v) = s.post("/v1/chat/completions", body);
        assert_eq!(code, *status, "{body}: {v}");
        let e = &v["error"];
        assert!(e["message"].as_str().unwrap().contains(needle), "{body}: {v}");
        assert!(e["type"].is_string(), "OpenAI's error shape: {v}");
        if !param.is_empty() {
            assert_eq!(e["param"], *param, "{body}: {v}");
        }
    }
    let (code, v) = s.post("/v1/completions", r#"{"model": "qwen2.5-scripted", "prompt": ["a", "b"]}"#);
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("prompt")), "{v}");
    let (code, v) = s.post("/v1/completions", r#"{"model": "qwen2.5-scripted", "prompt": "x", "echo": true}"#);
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("echo")), "{v}");
    let (code, body) = s.get("/v1/nothing");
    assert!(code == 404 && body.contains("no route GET /v1/nothing"), "{body}");
    let (code, body) = s.get("/v1/chat/completions");
    assert!(code == 405 && body.contains("POST is"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&v["error"]["type"], &v["error"]["code"]),
        (&json!("invalid_request_error"), &json!("method_not_allowed"))
    );
    // Still serving, and every refused request that reached the engine left an error row, not a completion.
    let (code, v) = chat(&s, "qwen2.5-scripted", "hello", json!({}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from the script. One two three. END of the reply.");
    let rows = s.rows();
    assert_eq!(rows.last().unwrap().4, "stop");
    assert!(rows[..rows.len() - 1].iter().all(|r| r.4 == "error"), "{rows:?}");
    // What Python clients send: a whole-number float for an integer field is that integer; a fraction is not. A
    // positive top_p too small for f32 is the smallest nucleus, not the refused 0.
    let (code, v) = chat(&s, "qwen2.5-scripted", "hello", json!({"max_tokens": 4.0}));
    assert_eq!((code, &v["usage"]["completion_tokens"]), (200, &json!(4)), "{v}");
    let (code, v) = chat(&s, "qwen2.5-scripted", "hello", json!({"max_tokens": 4.5}));
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("max_tokens")), "{v}");
    let (code, v) = chat(&s, "qwen2.5-scripted", "hello", json!({"top_p": 5e-324, "max_tokens": 2}));
    assert_eq!(code, 200, "{v}");
}

#[test]
fn a_model_whose_template_ignores_tools_is_refused_by_name() {
    let s = scripted("notools", &[]);
    let (code, v) = chat(&s, "smollm2-scripted", "weather?", json!({"tools": tools()}));
    assert_eq!(code, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("smollm2-scripted") && msg.contains("qwen2.5-scripted"), "{msg}");
    // tool_choice none means no tools are offered: then the model is fine.
    let (code, v) = chat(&s, "smollm2-scripted", "weather?", json!({"tools": tools(), "tool_choice": "none"}));
    assert_eq!((code, v["choices"][0]["message"]["content"].as_str()), (200, Some("Hi.")), "{v}");
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    let caps: Vec<(String, bool, bool)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["capabilities"]["tools"] == true,
                m["capabilities"]["reasoning"] == true,
            )
        })
        .collect();
    assert_eq!(
        caps,
        vec![
            ("qwen2.5-scripted".into(), true, false),
            ("qwen3-scripted".into(), true, true),
            ("smollm2-scripted".into(), false, false),
            ("slow-scripted".into(), true, false)
        ]
    );
}

#[test]
fn tool_call_round_trip_through_the_qwen_template() {
    let s = scripted("tools", &[]);
    let (code, v) = chat(&s, "qwen2.5-scripted", "What is the weather in Oslo?", json!({"tools": tools()}));
    assert_eq!(code, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    assert_eq!(c["message"]["content"], Value::Null);
    let call = &c["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Oslo"})
    );
    // The result goes back through the template: the script answers only when the rendered prompt holds the
    // <tool_response> block Qwen's template writes around it.
    let body = json!({"model": "qwen2.5-scripted", "tools": tools(), "messages": [
        {"role": "user", "content": "What is the weather in Oslo?"},
        c["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"temperature_c\": 7, \"sky\": \"rain\"}"},
    ]});
    let (code, v) = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "It is 7 degrees and raining in Oslo.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

fn deltas(events: &[String]) -> (String, String, Vec<Value>, Option<String>, Option<Value>) {
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let (mut content, mut reasoning, mut calls, mut finish, mut usage) =
        (String::new(), String::new(), vec![], None, None);
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        if !v["usage"].is_null() {
            usage = Some(v["usage"].clone());
        }
        let Some(c) = v["choices"].get(0) else { continue };
        content += c["delta"]["content"].as_str().or(c["text"].as_str()).unwrap_or("");
        reasoning += c["delta"]["reasoning_content"].as_str().unwrap_or("");
        calls.extend(c["delta"]["tool_calls"].as_array().cloned().unwrap_or_default());
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    (content, reasoning, calls, finish, usage)
}

#[test]
fn parallel_calls_stream_as_whole_deltas_and_text_before_them_is_content() {
    let s = scripted("parallel", &[]);
    let body = json!({"model": "qwen2.5-scripted", "stream": true, "tools": tools(),
        "messages": [{"role": "user", "content": "two calls please"}]});
    let (content, _, calls, finish, _) = deltas(&s.stream("/v1/chat/completions", &body.to_string()));
    assert_eq!(content, "Checking both.\n");
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    let got: Vec<(u64, String)> = calls
        .iter()
        .map(|c| (c["index"].as_u64().unwrap(), c["function"]["arguments"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(got, vec![(0, r#"{"city":"Oslo"}"#.to_string()), (1, r#"{"city":"Bergen"}"#.to_string())]);
    assert!(calls.iter().all(|c| c["id"].as_str().unwrap().starts_with("call_") && c["type"] == "function"));
    assert_ne!(calls[0]["id"], calls[1]["id"]);
}

#[test]
fn broken_calls_and_calls_without_tools_offered_are_content() {
    let s = scripted("broken", &[]);
    let (_, v) = chat(&s, "qwen2.5-scripted", "a broken call", json!({"tools": tools()}));
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": </tool_call>");
    assert!(m["tool_calls"].is_null() && v["choices"][0]["finish_reason"] == "stop", "{v}");
    // The same model writing about the format, with no tools offered: untouched.
    let (_, v) = chat(&s, "qwen2.5-scripted", "tell me about the format", json!({}));
    assert_eq!(v["choices"][0]["message"]["content"], "Write <tool_call>{\"name\": \"f\"}</tool_call> to call.");
}

#[test]
fn reasoning_streams_apart_from_the_answer() {
    let s = scripted("reasoning", &[]);
    let body = json!({"model": "qwen3-scripted", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hello"}]});
    let events = s.stream("/v1/chat/completions", &body.to_string());
    let (content, reasoning, _, finish, usage) = deltas(&events);
    assert_eq!((content.as_str(), reasoning.as_str()), ("Hello!", "\nThe user greets me. I greet back.\n"));
    assert_eq!(finish.as_deref(), Some("stop"));
    let usage = usage.expect("include_usage sends a usage chunk");
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    // 58 characters: 20 three-character tokens, and the end.
    assert_eq!(usage["completion_tokens"], 21);
    // More than one reasoning delta: the trace streams rather than arriving at the end.
    let reasoning_chunks = events.iter().filter(|e| e.contains("reasoning_content")).count();
    assert!(reasoning_chunks > 3, "{events:?}");
    // A trace the budget cut off is still a trace.
    let (_, v) = chat(&s, "qwen3-scripted", "cut off", json!({"max_tokens": 5}));
    let c = &v["choices"][0];
    assert_eq!((c["finish_reason"].as_str(), c["message"]["content"].as_str()), (Some("length"), Some("")), "{v}");
    // 5 tokens: "<th", "ink", ">\nS", "til", "l t", less the tag.
    assert_eq!(c["message"]["reasoning_content"], "\nStill t");
}

#[test]
fn reasoning_sent_back_is_not_fed_to_a_template_that_does_not_ask_for_it() {
    let s = scripted("reasoning-in", &[]);
    for field in ["reasoning_content", "reasoning"] {
        let body = json!({"model": "qwen2.5-scripted", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello.", field: "SECRET-TRACE"},
            {"role": "user", "content": "again"},
        ]});
        let (code, v) = s.post("/v1/chat/completions", &body.to_string());
        assert_eq!(code, 200, "{v}");
        // The script answers "The trace reached the prompt." only if the rendered prompt holds it.
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from the script. One two three. END of the reply.");
    }
}

#[test]
fn stop_strings_cut_the_reply_and_the_completion_endpoint_streams() {
    let s = scripted("stop", &[]);
    let (_, v) = chat(&s, "qwen2.5-scripted", "hi", json!({"stop": ["END", "three."]}));
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from the script. One two ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let body = json!({"model": "qwen2.5-scripted", "prompt": "Once", "max_tokens": 4, "stream": true});
    let (text, _, _, finish, usage) = deltas(&s.stream("/v1/completions", &body.to_string()));
    assert_eq!((text.as_str(), finish.as_deref(), usage), ("Hello from t", Some("length"), None));
    let rows = s.rows();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[1].0.as_str(), rows[1].1.as_str(), rows[1].2, rows[1].3),
        ("/v1/completions", "qwen2.5-scripted", 2, 4)
    );
    assert!(rows.iter().all(|r| r.5.is_some()), "time to first token recorded: {rows:?}");
}

/// Opens a stream by hand, reads `n` events, then hangs up.
fn read_then_hang_up(s: &Server, n: usize) {
    let addr = s.url.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    let body = json!({"model": "slow-scripted", "stream": true, "messages": [{"role": "user", "content": "count"}]})
        .to_string();
    write!(sock, "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut r = BufReader::new(sock.try_clone().unwrap());
    let mut seen = 0;
    let mut line = String::new();
    while seen < n {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended early");
        seen += usize::from(line.starts_with("data: "));
    }
    sock.shutdown(std::net::Shutdown::Both).unwrap();
}

#[test]
fn a_client_that_hangs_up_stops_its_generation() {
    let s = scripted("cancel", &[]);
    read_then_hang_up(&s, 3);
    // The reply is 56 tokens at 50 ms each; cancelled, the row lands long before the 2.8 s it would take.
    let t = Instant::now();
    // (The row is open, "running", from admission; it closes when the generation ends.)
    let rows = loop {
        let rows = s.rows();
        if rows.first().is_some_and(|r| r.4 != "running") || t.elapsed() > Duration::from_secs(10) {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].4, "cancelled");
    assert!(rows[0].3 < 20, "stopped within a step or so of the hang-up, not after {} tokens", rows[0].3);
    // The engine is free for the next request.
    let (code, v) = chat(&s, "qwen2.5-scripted", "hi", json!({}));
    assert_eq!(code, 200, "{v}");
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let s = scripted("queue", &["--queue", "1", "--batch", "1"]);
    let url = s.url.clone();
    let body = json!({"model": "slow-scripted", "messages": [{"role": "user", "content": "count"}], "max_tokens": 20})
        .to_string();
    // One runs (a batch of one), one waits, the third finds the queue full.
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let (url, body) = (url.clone(), body.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150 * i));
                ureq::post(&format!("{url}/v1/chat/completions")).send_string(&body).map(|r| r.status()).unwrap_or(0)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let third = ureq::post(&format!("{url}/v1/chat/completions")).send_string(&body);
    match third {
        Err(ureq::Error::Status(503, r)) => {
            assert_eq!(r.header("retry-after"), Some("1"));
            let v: Value = r.into_json().unwrap();
            assert!(v["error"]["message"].as_str().unwrap().contains("queue is full"), "{v}");
        }
        other => panic!("expected a 503, got {:?}", other.map(|r| r.status())),
    }
    let codes: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(codes, vec![200, 200]);
}

#[test]
fn shutdown_lets_a_running_stream_finish() {
    let mut s = scripted("shutdown", &[]);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut sock = std::net::TcpStream::connect(&addr).unwrap();
    let body = json!({"model": "slow-scripted", "stream": true, "max_tokens": 20, "messages": [{"role": "user", "content": "count"}]}).to_string();
    write!(
        sock,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    let _ = sock.read(&mut first).unwrap();
    let st = std::process::Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let mut rest = String::new();
    sock.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("\"finish_reason\":\"length\"") && rest.contains("data: [DONE]"), "{rest}");
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(s.log.lock().unwrap().contains("shutting down"));
}

#[test]
fn a_non_loopback_bind_needs_insecure() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvad-serve"))
        .args(["--bind", "0.0.0.0:0", "--scripted", common::script().to_str().unwrap()])
        .args(["--data-dir", std::env::temp_dir().join("kvad-serve-test-bind").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("0.0.0.0:0") && err.contains("--insecure"), "{err}");
}

/// A prompt longer than the model's context is refused naming the field it came in: a chat's `messages`, a
/// completion's `prompt`.
#[test]
fn a_prompt_longer_than_the_context_names_its_field() {
    let s = scripted("long-prompt", &[]);
    // The scripted models' context is 4,096 tokens of 3 characters.
    let long = "x".repeat(13_000);
    let chat = json!({"model": "qwen2.5-scripted", "messages": [{"role": "user", "content": long}]});
    let (code, v) = s.post("/v1/chat/completions", &chat.to_string());
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("messages")), "{v}");
    let completion = json!({"model": "qwen2.5-scripted", "prompt": long});
    let (code, v) = s.post("/v1/completions", &completion.to_string());
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("prompt")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("the model's context is 4096"), "{v}");
}

/// A body over `[server] max_body` is refused whole with a 413 in OpenAI's error shape naming the limit (axum's own
/// refusal is plain text); one under it is read as usual. The default limit is 2 MiB, shown by /api/settings.
#[test]
fn an_oversized_body_is_a_json_413_naming_the_limit() {
    let s = scripted("max-body-default", &[]);
    let (code, v) = s.call("GET", "/api/settings", "");
    assert_eq!((code, &v["server"]["max_body"]), (200, &json!(2 * 1024 * 1024)), "{v}");
    drop(s);
    let script = common::script();
    let s = common::start_env("max-body", &["--scripted", script.to_str().unwrap()], &[("KVAD_MAX_BODY", "4096")]);
    let padded = |n: usize| {
        let pad = "x".repeat(n);
        json!({"model": "qwen2.5-scripted", "messages": [{"role": "user", "content": pad}], "max_tokens": 2})
            .to_string()
    };
    let (code, v) = s.post("/v1/chat/completions", &padded(5000));
    assert_eq!(code, 413, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["code"], "request_too_large", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("4096 bytes"), "{v}");
    let (code, v) = s.post("/v1/chat/completions", &padded(3000));
    assert_eq!(code, 200, "under the limit: {v}");
}
