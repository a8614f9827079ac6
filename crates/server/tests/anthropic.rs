//! Anthropic's Messages API against the real `kvad-serve` with the scripted engine (real chat templates, the real
//! reply parsers): blocks, stop reasons, a tool round trip, thinking, the streamed event sequence, token counts and
//! errors in Anthropic's shape. The official `anthropic` SDK drives the same routes in smollm2.rs.

mod common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

fn ask(s: &common::Server, body: Value) -> (u16, Value) {
    s.post("/v1/messages", &body.to_string())
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "The weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

/// A streamed reply's events: (the `event:` name, the `data:` JSON).
fn events(s: &common::Server, body: Value) -> Vec<(String, Value)> {
    let r = ureq::post(&format!("{}/v1/messages", s.url)).send_json(body).expect("stream request");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let mut out = Vec::new();
    let mut name = String::new();
    for line in BufReader::new(r.into_reader()).lines().map_while(Result::ok) {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap();
            assert_eq!(v["type"], json!(name), "an event's name is its data's type");
            out.push((name.clone(), v));
        }
    }
    out
}

#[test]
fn messages_blocks_stop_reasons_and_usage() {
    let s = common::scripted("anthropic", &[]);
    let (code, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 64, "system": "Be brief.",
                                     "messages": user("hi")}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["type"].as_str(), v["role"].as_str()), (Some("message"), Some("assistant")), "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Hello from the script. One two three. END of the reply."}])
    );
    assert_eq!((v["stop_reason"].as_str(), &v["stop_sequence"]), (Some("end_turn"), &Value::Null), "{v}");
    // The scripted tokenizer: a token is 3 characters; the count route renders the prompt as the reply's was.
    let (code, n) = s.post(
        "/v1/messages/count_tokens",
        &json!({"model": "qwen2.5-scripted", "system": "Be brief.", "messages": user("hi")}).to_string(),
    );
    assert_eq!(code, 200, "{n}");
    assert_eq!(n["input_tokens"], v["usage"]["input_tokens"], "{n} vs {v}");
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 5, "{v}");
    assert_eq!(v["usage"]["cache_read_input_tokens"], 0, "{v}");

    let (_, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 64, "stop_sequences": ["three", "END"],
                                "messages": user("hi")}),
    );
    assert_eq!(v["content"][0]["text"], "Hello from the script. One two ", "{v}");
    assert_eq!((v["stop_reason"].as_str(), v["stop_sequence"].as_str()), (Some("stop_sequence"), Some("three")));
    let (_, v) = ask(&s, json!({"model": "qwen2.5-scripted", "max_tokens": 2, "messages": user("hi")}));
    assert_eq!((v["stop_reason"].as_str(), v["usage"]["output_tokens"].as_u64()), (Some("max_tokens"), Some(2)));
    // What Claude Code sends (its 2.1 release, recorded): a system message among the turns, adaptive thinking,
    // output_config.effort, context_management, metadata.user_id, cache_control on blocks, and max_tokens 32,000
    // whatever the model's context (cut to the context here, as the reply would stop there anyway).
    let (code, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 32000, "stream": false,
               "system": [{"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
                                                         {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                            {"role": "system", "content": "Available agent types: none."}],
               "thinking": {"type": "adaptive"}, "output_config": {"effort": "high"},
               "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
               "metadata": {"user_id": "{\"device_id\":\"d\"}"}}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["stop_reason"], "end_turn", "{v}");
    let rows = s.rows();
    assert!(rows.iter().all(|r| r.0 == "/v1/messages"), "{rows:?}");
}

#[test]
fn a_tool_round_trip_and_parallel_calls() {
    let s = common::scripted("anthropic-tools", &[]);
    let (code, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 64, "tools": weather_tool(),
                                     "messages": user("What is the weather in Oslo?")}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let call = &v["content"][0];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("tool_use"), Some("get_weather")), "{v}");
    assert_eq!(call["input"], json!({"city": "Oslo"}));
    assert!(call["id"].as_str().unwrap().starts_with("toolu_"), "{v}");
    assert_eq!(v["content"].as_array().unwrap().len(), 1, "no text block for the newline before a call: {v}");
    // The result goes back as a tool_result block; the template renders it as <tool_response>, and the script
    // answers only when it finds exactly that.
    let messages = json!([
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                      "content": [{"type": "text", "text": "{\"temperature_c\": 7, \"sky\": \"rain\"}"}]}]},
    ]);
    let (code, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 64, "tools": weather_tool(),
                                     "messages": messages}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["content"], json!([{"type": "text", "text": "It is 7 degrees and raining in Oslo."}]), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");

    // Two calls: text then both, in order; with parallel calls off the reply ends at the first.
    let (_, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 99, "tools": weather_tool(),
                                "messages": user("two calls please")}),
    );
    let kinds: Vec<&str> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "tool_use", "tool_use"], "{v}");
    assert_eq!(v["content"][2]["input"]["city"], "Bergen");
    let (_, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 99, "tools": weather_tool(),
                                "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
                                "messages": user("two calls please")}),
    );
    let kinds: Vec<&str> = v["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!((kinds, v["stop_reason"].as_str()), (vec!["text", "tool_use"], Some("tool_use")), "{v}");
    assert_eq!(v["content"][1]["input"]["city"], "Oslo");
    // OpenAI's parallel_tool_calls false takes the same path: one call, the reply ends there.
    let body = json!({"model": "qwen2.5-scripted", "parallel_tool_calls": false,
                      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
                      "messages": user("two calls please")});
    let (code, v) = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(code, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert_eq!(
        (m["tool_calls"].as_array().map(Vec::len), m["content"].as_str()),
        (Some(1), Some("Checking both.\n")),
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    // tool_choice none: the tools are not shown, so the script's tool rule does not fire.
    let (_, v) = ask(
        &s,
        json!({"model": "qwen2.5-scripted", "max_tokens": 99, "tools": weather_tool(),
                                "tool_choice": {"type": "none"}, "messages": user("What is the weather?")}),
    );
    assert_eq!(v["content"][0]["type"], "text", "{v}");
}

#[test]
fn thinking_blocks_and_the_streamed_event_sequence() {
    let s = common::scripted("anthropic-stream", &[]);
    let (_, v) = ask(&s, json!({"model": "qwen3-scripted", "max_tokens": 64, "messages": user("hello")}));
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["thinking"].as_str().unwrap().trim(), "The user greets me. I greet back.");
    assert_eq!(v["content"][1], json!({"type": "text", "text": "Hello!"}), "{v}");
    // thinking disabled: Qwen3's template writes an empty trace into the prompt, a few tokens longer.
    let count = |thinking: Value| {
        let body = json!({"model": "qwen3-scripted", "messages": user("hello"), "thinking": thinking});
        s.post("/v1/messages/count_tokens", &body.to_string()).1["input_tokens"].as_u64().unwrap()
    };
    let on = count(json!({"type": "enabled", "budget_tokens": 2048}));
    let off = count(json!({"type": "disabled"}));
    assert!(off > on, "disabled {off} vs enabled {on}");

    let ev =
        events(&s, json!({"model": "qwen3-scripted", "max_tokens": 64, "stream": true, "messages": user("hello")}));
    let names: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(&names[..3], ["message_start", "ping", "content_block_start"], "{names:?}");
    assert_eq!(&names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"], "{names:?}");
    assert_eq!(ev[0].1["message"]["content"], json!([]));
    let starts: Vec<&Value> = ev.iter().filter(|e| e.0 == "content_block_start").map(|e| &e.1).collect();
    assert_eq!(starts.len(), 2, "{ev:?}");
    assert_eq!((starts[0]["index"].as_u64(), starts[0]["content_block"]["type"].as_str()), (Some(0), Some("thinking")));
    assert_eq!((starts[1]["index"].as_u64(), starts[1]["content_block"]["type"].as_str()), (Some(1), Some("text")));
    let text: String = ev
        .iter()
        .filter(|e| e.1["delta"]["type"] == "text_delta")
        .map(|e| e.1["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello!");
    assert!(ev.iter().any(|e| e.1["delta"]["type"] == "thinking_delta"));
    let end = &ev[ev.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "end_turn", "{end}");
    assert!(end["usage"]["output_tokens"].as_u64().unwrap() > 0, "{end}");
    // Every block opened is closed, in order, before the next opens.
    let mut open = None;
    for (name, v) in &ev {
        match name.as_str() {
            "content_block_start" => assert_eq!(open.replace(v["index"].as_u64().unwrap()), None),
            "content_block_delta" => assert_eq!(open, v["index"].as_u64()),
            "content_block_stop" => assert_eq!(open.take(), v["index"].as_u64()),
            _ => assert_eq!(open, None, "{name} inside a block"),
        }
    }

    let s2 = common::scripted("anthropic-stream-tools", &[]);
    let ev = events(
        &s2,
        json!({"model": "qwen2.5-scripted", "max_tokens": 99, "stream": true,
                               "tools": weather_tool(), "messages": user("two calls please")}),
    );
    let blocks: Vec<&str> = ev
        .iter()
        .filter(|e| e.0 == "content_block_start")
        .map(|e| e.1["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(blocks, ["text", "tool_use", "tool_use"]);
    let args: Vec<Value> = ev
        .iter()
        .filter(|e| e.1["delta"]["type"] == "input_json_delta")
        .map(|e| serde_json::from_str(e.1["delta"]["partial_json"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(args, [json!({"city": "Oslo"}), json!({"city": "Bergen"})]);
    assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");
}

#[test]
fn refusals_name_the_field_in_anthropics_error_shape() {
    let s = common::scripted("anthropic-errors", &[]);
    let cases = [
        (json!({"model": "qwen2.5-scripted", "messages": user("hi")}), 400, "max_tokens"),
        (json!({"model": "nope", "max_tokens": 5, "messages": user("hi")}), 404, "nope"),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]}),
            400,
            "messages[0].content[0].type",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "temperature": 1.5, "messages": user("hi")}),
            400,
            "temperature",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "messages": user("hi"),
                   "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            400,
            "tools[0].type",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "messages": user("hi"),
                   "tool_choice": {"type": "tool", "name": "get_weather"}}),
            400,
            "no tools",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 2000, "messages": user("hi"),
                   "thinking": {"type": "enabled", "budget_tokens": 4096}}),
            400,
            "thinking.budget_tokens",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]}),
            400,
            "prefill",
        ),
        (
            json!({"model": "smollm2-scripted", "max_tokens": 5, "messages": user("hi"), "tools": weather_tool()}),
            400,
            "tools",
        ),
        (
            json!({"model": "qwen2.5-scripted", "max_tokens": 5, "messages": user("hi"), "frequency_penalty": 1}),
            400,
            "frequency_penalty",
        ),
    ];
    for (body, status, names) in cases {
        let (code, v) = ask(&s, body.clone());
        assert_eq!(code, status, "{body} -> {v}");
        assert_eq!(v["type"], "error", "{v}");
        let kind = if status == 404 { "not_found_error" } else { "invalid_request_error" };
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(names), "{body} -> {v}");
    }
    // The method's refusal comes from a layer, not the handler: the same shape.
    let (code, v) = s.call("GET", "/v1/messages", "");
    assert_eq!(
        (code, v["type"].as_str(), v["error"]["type"].as_str()),
        (405, Some("error"), Some("invalid_request_error"))
    );
    // OpenAI's routes keep OpenAI's shape.
    let (code, v) = s.post("/v1/chat/completions", &json!({"model": "nope", "messages": user("hi")}).to_string());
    assert_eq!((code, v["error"]["code"].as_str()), (404, Some("model_not_found")), "{v}");
}
