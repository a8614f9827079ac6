//! The real model (SmolLM2-135M-Instruct, from PyPI through kvad-hub) behind the real server, driven by raw HTTP and
//! by the official `openai` Python SDK (tests/openai_sdk.py; the tool-call part of that script runs against the
//! scripted engine, since SmolLM2's template has no tools).

mod common;

use serde_json::json;

#[test]
fn smollm2_chat_completion_and_the_openai_sdk() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let real = common::start("smollm2", &["--model", "smollm2-instruct"]);
    let (code, v) = real.post(
        "/v1/chat/completions",
        &json!({"model": "smollm2-instruct", "temperature": 0, "max_tokens": 20,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        .to_string(),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "The capital of France is Paris.");
    assert_eq!(v["usage"]["prompt_tokens"], 37, "the same prompt as `kvad run`");
    assert_eq!(v["usage"]["completion_tokens"], 8, "7 tokens and the end token");
    let (_, models) = real.get("/v1/models");
    assert!(models.contains("\"loaded\":true"), "{models}");

    let scripted = common::scripted("sdk-tools", &[]);
    let py = common::sdk_python();
    let out = std::process::Command::new(py)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk.py"))
        .args([&real.url, &scripted.url])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for check in ["non-streamed chat", "streamed chat", "completion", "tool call round trip", "error"] {
        assert!(stdout.contains(&format!("ok: {check}")), "{stdout}");
    }
    let rows = real.rows();
    assert!(rows.len() >= 4, "{rows:?}");
    assert!(rows.iter().all(|r| r.2 > 0 && r.5.is_some()), "{rows:?}");
}
