//! OpenAI's Responses API against the real `kvad-serve` with the scripted engine: output items, stored responses
//! (get, delete), a tool round trip continued by `previous_response_id`, the typed event stream, the length
//! limit, and refusals naming their field. The official openai SDK drives the same routes in constrained.rs.

mod common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

fn create(s: &common::Server, body: Value) -> (u16, Value) {
    s.post("/v1/responses", &body.to_string())
}

fn weather() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
}

#[test]
fn a_response_is_stored_read_back_and_deleted() {
    let s = common::scripted("responses", &[]);
    let (code, r) = create(&s, json!({"model": "qwen2.5-scripted", "input": "hi", "instructions": "Be brief."}));
    assert_eq!(code, 200, "{r}");
    assert_eq!((r["object"].as_str(), r["status"].as_str()), (Some("response"), Some("completed")), "{r}");
    let id = r["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"), "{r}");
    let text = "Hello from the script. One two three. END of the reply.";
    assert_eq!(r["output"][0]["type"], "message", "{r}");
    assert_eq!(r["output"][0]["content"][0], json!({"type": "output_text", "text": text, "annotations": []}));
    assert_eq!(r["output_text"], text);
    assert_eq!(r["instructions"], "Be brief.");
    assert!(r["usage"]["input_tokens"].as_u64().unwrap() > 0 && r["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let (code, again) = s.get(&format!("/v1/responses/{id}"));
    assert_eq!(code, 200);
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), r);
    let (code, gone) = s.call("DELETE", &format!("/v1/responses/{id}"), "");
    assert_eq!((code, gone), (200, json!({"id": id, "object": "response", "deleted": true})));
    let (code, _) = s.get(&format!("/v1/responses/{id}"));
    assert_eq!(code, 404);
    let (code, v) = create(&s, json!({"model": "qwen2.5-scripted", "input": "more", "previous_response_id": id}));
    assert_eq!((code, v["error"]["param"].as_str()), (404, Some("previous_response_id")), "{v}");
    // store: false keeps nothing.
    let (_, r) = create(&s, json!({"model": "qwen2.5-scripted", "input": "hi", "store": false}));
    assert_eq!(s.get(&format!("/v1/responses/{}", r["id"].as_str().unwrap())).0, 404);
    // Past the context: refused in the Responses API's own words.
    let (code, v) = create(&s, json!({"model": "qwen2.5-scripted", "input": "hi", "max_output_tokens": 100_000_000}));
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("max_output_tokens")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("max_output_tokens = "), "{v}");
    // The length limit: incomplete, and why.
    let (_, r) = create(&s, json!({"model": "qwen2.5-scripted", "input": "hi", "max_output_tokens": 2}));
    assert_eq!(
        (r["status"].as_str(), r["incomplete_details"]["reason"].as_str()),
        (Some("incomplete"), Some("max_output_tokens"))
    );
    assert!(s.rows().iter().all(|row| row.0 == "/v1/responses"));
}

#[test]
fn a_tool_round_trip_continues_the_stored_conversation() {
    let s = common::scripted("responses-tools", &[]);
    let (code, r) = create(
        &s,
        json!({"model": "qwen2.5-scripted", "tools": weather(),
                                      "input": [{"role": "user", "content": "What is the weather in Oslo?"}]}),
    );
    assert_eq!(code, 200, "{r}");
    let call = &r["output"][0];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("get_weather")), "{r}");
    assert_eq!(serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(), json!({"city": "Oslo"}));
    assert_eq!(r["output"].as_array().unwrap().len(), 1, "no message for the newline before a call: {r}");
    // Only the output goes in the next request: the call before it comes from the stored response, and the script
    // answers only when the template rendered the result as a tool response after that call.
    let (code, r2) = create(
        &s,
        json!({"model": "qwen2.5-scripted", "tools": weather(), "previous_response_id": r["id"],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "{\"temperature_c\": 7, \"sky\": \"rain\"}"}]}),
    );
    assert_eq!(code, 200, "{r2}");
    assert_eq!(r2["output_text"], "It is 7 degrees and raining in Oslo.", "{r2}");
    assert_eq!(r2["previous_response_id"], r["id"]);
    // What Codex CLI sends beside its functions: a hosted tool (not shown to the model) and a namespace of functions.
    let tools = json!([{"type": "web_search", "external_web_access": false},
                       {"type": "namespace", "name": "ns", "description": "d", "tools": weather()}]);
    let (code, r5) =
        create(&s, json!({"model": "qwen2.5-scripted", "tools": tools, "input": "What is the weather in Oslo?"}));
    assert_eq!((code, r5["output"][0]["name"].as_str()), (200, Some("get_weather")), "{r5}");
    // parallel_tool_calls false: one call, the reply ends there.
    let (_, r3) = create(
        &s,
        json!({"model": "qwen2.5-scripted", "tools": weather(), "parallel_tool_calls": false,
                                   "input": "two calls please"}),
    );
    let kinds: Vec<&str> = r3["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "function_call"], "{r3}");
    // Items sent whole, as a client that keeps its own history sends them: the same answer.
    let (_, r4) = create(
        &s,
        json!({"model": "qwen2.5-scripted", "tools": weather(), "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is the weather in Oslo?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"temperature_c\": 7, \"sky\": \"rain\"}"}]}),
    );
    assert_eq!(r4["output_text"], "It is 7 degrees and raining in Oslo.", "{r4}");
}

/// The typed events of a streamed response: (name, data).
fn events(s: &common::Server, body: Value) -> Vec<(String, Value)> {
    let r = ureq::post(&format!("{}/v1/responses", s.url)).send_json(body).expect("stream request");
    let mut out = Vec::new();
    let mut name = String::new();
    for line in BufReader::new(r.into_reader()).lines().map_while(Result::ok) {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap();
            assert_eq!(v["type"], json!(name));
            out.push((name.clone(), v));
        }
    }
    out
}

#[test]
fn the_event_stream_tells_each_item_in_order() {
    let s = common::scripted("responses-stream", &[]);
    let ev = events(&s, json!({"model": "qwen3-scripted", "input": "hello", "stream": true}));
    let names: Vec<&str> = ev.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(&names[..3], ["response.created", "response.in_progress", "response.output_item.added"], "{names:?}");
    assert_eq!(names.last(), Some(&"response.completed"));
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e.1["sequence_number"], json!(i), "{:?}", e.1);
    }
    let added: Vec<&str> = ev
        .iter()
        .filter(|e| e.0 == "response.output_item.added")
        .map(|e| e.1["item"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["reasoning", "message"]);
    let text: String =
        ev.iter().filter(|e| e.0 == "response.output_text.delta").map(|e| e.1["delta"].as_str().unwrap()).collect();
    assert_eq!(text, "Hello!");
    let done = &ev.last().unwrap().1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"].as_str().unwrap().trim(), "The user greets me. I greet back.");
    assert_eq!(done["output_text"], "Hello!");
    // What the stream ended with is what is stored.
    let (_, stored) = s.get(&format!("/v1/responses/{}", done["id"].as_str().unwrap()));
    assert_eq!(&serde_json::from_str::<Value>(&stored).unwrap(), done);
    // Each item opened is done before the next opens.
    let mut open = None;
    for (name, v) in &ev {
        match name.as_str() {
            "response.output_item.added" => assert_eq!(open.replace(v["output_index"].as_u64().unwrap()), None),
            "response.output_item.done" => assert_eq!(open.take(), v["output_index"].as_u64()),
            n if n.starts_with("response.output_text") || n.starts_with("response.reasoning_text") => {
                assert_eq!(open, v["output_index"].as_u64(), "{name}")
            }
            _ => {}
        }
    }
    let ev = events(
        &s,
        json!({"model": "qwen2.5-scripted", "stream": true, "tools": weather(), "input": "two calls please"}),
    );
    let args: Vec<&str> = ev
        .iter()
        .filter(|e| e.0 == "response.function_call_arguments.done")
        .map(|e| e.1["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(args.len(), 2, "{ev:?}");
}

#[test]
fn refusals_name_their_field() {
    let s = common::scripted("responses-errors", &[]);
    let cases = [
        (json!({"model": "qwen2.5-scripted"}), 400, "input"),
        (json!({"model": "qwen2.5-scripted", "input": "hi", "tools": [{"type": "function"}]}), 400, "tools[0].name"),
        (json!({"model": "qwen2.5-scripted", "input": [{"type": "item_reference", "id": "x"}]}), 400, "input[0].type"),
        (
            json!({"model": "qwen2.5-scripted", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]}),
            400,
            "input[0].arguments",
        ),
        (json!({"model": "qwen2.5-scripted", "input": "hi", "reasoning": {"effort": "huge"}}), 400, "reasoning.effort"),
        (
            json!({"model": "qwen2.5-scripted", "input": "hi", "text": {"format": {"type": "xml"}}}),
            400,
            "text.format.type",
        ),
        (json!({"model": "qwen2.5-scripted", "input": "hi", "background": true}), 400, "background"),
        (json!({"model": "qwen2.5-scripted", "input": "hi", "frequency_penalty": 1}), 400, "frequency_penalty"),
        (json!({"model": "nope", "input": "hi"}), 404, "model"),
    ];
    for (body, status, param) in cases {
        let (code, v) = create(&s, body.clone());
        assert_eq!((code, v["error"]["param"].as_str()), (status, Some(param)), "{body} -> {v}");
    }
}
