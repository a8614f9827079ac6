//! Constrained decoding through the real server on the real model (SmolLM2-135M-Instruct given a Hermes tool
//! template by `--chat-template`, as llama.cpp and vLLM take one): `tool_choice` `required` and named force a
//! valid call, `response_format` `json_schema` a reply valid against its schema (at temperature 1 too), and what
//! kvad cannot honour is a 400 naming the field.

mod common;

use serde_json::{json, Value};

fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
                        "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a city now",
         "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                        "required": ["city"], "additionalProperties": false}}}
    ])
}

fn ask(s: &common::Server, extra: Value) -> (u16, Value) {
    let mut body = json!({"model": "smollm2-instruct", "max_tokens": 80,
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.post("/v1/chat/completions", &body.to_string())
}

/// `[server.chat_templates]` gives one model a template in place of its own, leaving the others theirs: the
/// catalog's flags follow each model's template in force, and a forced call renders through it.
#[test]
fn a_per_model_chat_template_replaces_that_models_own_only() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let embed = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/models/qwen3-embed");
    let first = common::start("per-model-template", &["--model", "smollm2-instruct"]);
    let (_, models) = first.get("/v1/models");
    assert!(models.contains(r#""tools":false"#), "SmolLM2's own template has no tools: {models}");
    let toml = format!("[server]\nchat_templates = {{ \"smollm2-instruct\" = {template:?} }}\n");
    std::fs::write(first.dir.join("kvad.toml"), toml).unwrap();
    let s = first.restart(&["--model", "smollm2-instruct", "--model", embed]);
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    let caps = |id: &str| {
        let m = models["data"].as_array().unwrap().iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("{models}"));
        m["capabilities"].clone()
    };
    assert_eq!(caps("smollm2-instruct")["tools"], json!(true), "{models}");
    assert_eq!(caps(embed)["chat"], json!(false), "the other model keeps its own (none): {models}");
    let (code, v) = ask(&s, json!({"temperature": 0, "tools": weather_tools(), "tool_choice": "required"}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather", "{v}");
}

#[test]
fn smollm2_forced_tool_calls_and_json_schema_replies_are_valid() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let s = common::start("constrained", &["--model", "smollm2-instruct", "--chat-template", template]);
    let (_, models) = s.get("/v1/models");
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["capabilities"]["tools"], json!(true), "the template in force has tools: {models}");

    // `required`, greedy: a call to get_weather for Oslo, parsed by the Hermes parser.
    let (code, v) = ask(&s, json!({"temperature": 0, "tools": weather_tools(), "tool_choice": "required"}));
    assert_eq!(code, 200, "{v}");
    let msg = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = &msg["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].as_str().is_some_and(|c| c.contains("Oslo")), "{args}");

    // Named, at temperature 1, ten seeds: always a valid call to that function, its arguments per its schema.
    for seed in 0..10 {
        let (code, v) = ask(
            &s,
            json!({"temperature": 1, "seed": seed, "tools": weather_tools(),
                   "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
        );
        assert_eq!(code, 200, "{v}");
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(calls.len(), 1, "a named function: one call: {v}");
        assert_eq!(calls[0]["function"]["name"], "get_time", "{v}");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        let city = args["city"].as_str().unwrap_or_else(|| panic!("{args}"));
        assert!(city.chars().count() <= 20 && args.as_object().unwrap().len() == 1, "{args}");
    }

    // json_schema, at temperature 1: every reply parses and validates.
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 16}, "temperature_c": {"type": "integer", "minimum": -60, "maximum": 60},
        "sky": {"enum": ["clear", "cloudy", "rain", "snow"]}}, "required": ["city", "temperature_c", "sky"],
        "additionalProperties": false});
    for seed in 0..10 {
        let (code, v) = ask(
            &s,
            json!({"temperature": 1, "seed": seed,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": schema, "strict": true}}}),
        );
        assert_eq!(code, 200, "{v}");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let r: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(r["city"].as_str().is_some_and(|c| c.chars().count() <= 16), "{r}");
        assert!(r["temperature_c"].as_f64().is_some_and(|t| t.fract() == 0.0 && (-60.0..=60.0).contains(&t)), "{r}");
        assert!(["clear", "cloudy", "rain", "snow"].contains(&r["sky"].as_str().unwrap_or("")), "{r}");
        assert_eq!(r.as_object().unwrap().len(), 3, "{r}");
    }
    // json_object on /v1/completions too.
    let (code, v) = s.post(
        "/v1/completions",
        &json!({"model": "smollm2-instruct", "prompt": "A JSON object about Oslo:", "max_tokens": 60,
                "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "c",
                "schema": {"type": "object", "properties": {"name": {"const": "Oslo"}}, "required": ["name"],
                "additionalProperties": false}}}})
        .to_string(),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], r#"{"name": "Oslo"}"#, "{v}");

    // What cannot be honoured: 400s naming the field.
    for (extra, field) in [
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": weather_tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "properties": {"a": {"$ref": "#/missing"}}}}}}),
            "response_format",
        ),
        (json!({"response_format": {"type": "xml"}}), "response_format.type"),
        (json!({"response_format": {"type": "regex", "regex": "(unclosed"}}), "response_format"),
    ] {
        let (code, e) = ask(&s, extra.clone());
        assert_eq!(code, 400, "{extra}: {e}");
        assert_eq!(e["error"]["param"], json!(field), "{extra}: {e}");
    }
}

/// The official anthropic SDK against the Messages API: the real SmolLM2 (with the Hermes template) for a message,
/// its stream and token count and a forced tool call; the scripted engine for a tool round trip and thinking.
#[test]
fn smollm2_and_the_anthropic_sdk() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let real = common::start("anthropic-sdk", &["--model", "smollm2-instruct", "--chat-template", template]);
    let scripted = common::scripted("anthropic-sdk-scripted", &[]);
    let out = std::process::Command::new(common::sdk_python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/anthropic_sdk.py"))
        .args([&real.url, &scripted.url])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let checks = [
        "non-streamed message",
        "streamed message",
        "forced tool call",
        "structured output",
        "tool round trip",
        "thinking streamed",
        "thinking omitted",
        "errors",
    ];
    for check in checks {
        assert!(stdout.contains(&format!("ok: {check}")), "{stdout}");
    }
}

/// The official openai SDK against the Responses API: the real SmolLM2 (with the Hermes template) for a response,
/// its stream, a forced call and structured output; the scripted engine for a tool round trip continued by
/// `previous_response_id` and a reasoning item.
#[test]
fn smollm2_and_the_openai_sdk_responses() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let real = common::start("responses-sdk", &["--model", "smollm2-instruct", "--chat-template", template]);
    let scripted = common::scripted("responses-sdk-scripted", &[]);
    let out = std::process::Command::new(common::sdk_python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/responses_sdk.py"))
        .args([&real.url, &scripted.url])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let checks = [
        "response created and retrieved",
        "streamed response",
        "forced function call",
        "structured output",
        "tool round trip by previous_response_id",
        "reasoning item",
        "errors",
    ];
    for check in checks {
        assert!(stdout.contains(&format!("ok: {check}")), "{stdout}");
    }
}
