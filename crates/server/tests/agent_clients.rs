//! Real agent clients, installed from npm, pointed at kvad-serve on loopback. Claude Code (`@anthropic-ai/claude-code`,
//! Anthropic's Messages API through `ANTHROPIC_BASE_URL`) answers a prompt non-interactively and completes a
//! one-tool task: it reads a file with its own Read tool and reports what the file says.
//!
//! The model is the scripted engine with the Qwen2.5 (Hermes) template: Claude Code's prompt (its system prompt and
//! 24 tool definitions, about 75 KB) is past the context of the real model CI has (SmolLM2, 8,192 tokens), and what
//! is under test is the protocol, not the model. The script answers the file's content only when the tool result
//! carrying it reaches the prompt, so the round trip cannot pass without Claude Code's Read having run.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// Pinned so a new release cannot change what the test checks without a commit saying so.
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.197";

/// Claude Code's `claude`, installed once into an ignored folder of the checkout.
fn claude() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.agents");
    let bin = dir.join("node_modules/.bin/claude");
    let want = CLAUDE_CODE.rsplit('@').next().unwrap();
    let installed = std::fs::read_to_string(dir.join("node_modules/@anthropic-ai/claude-code/package.json"))
        .is_ok_and(|p| p.contains(&format!("\"version\": \"{want}\"")));
    if !installed {
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(CLAUDE_CODE)
            .status()
            .expect("npm (Node.js) is needed: scripts/test.sh checks for it");
        assert!(st.success(), "npm install {CLAUDE_CODE} failed");
    }
    bin
}

#[test]
fn claude_code_answers_and_reads_a_file_through_the_messages_api() {
    let claude = claude();
    let work = std::env::temp_dir().join(format!("kvad-claude-code-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("home")).unwrap();
    let notes = work.join("notes.txt");
    std::fs::write(&notes, "The launch code is KVAD-PLUM-7341.\n").unwrap();
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let call = serde_json::json!({"name": "Read", "arguments": {"file_path": notes}});
    let script = serde_json::json!({"models": [{
        "id": "claude-scripted", "context": 400000, "template": template,
        "rules": [
            {"when": "KVAD-PLUM-7341", "reply": "The file says the launch code is KVAD-PLUM-7341."},
            {"when": "What does the file", "reply": format!("<tool_call>\n{call}\n</tool_call>")}
        ],
        "default": "Hello from kvad."
    }]});
    let script_path = work.join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let server = common::start("claude-code", &["--scripted", script_path.to_str().unwrap()]);
    let run = |prompt: &str| {
        let out = Command::new(&claude)
            .args(["-p", prompt, "--model", "claude-scripted", "--allowedTools", "Read"])
            .current_dir(&work)
            .env("HOME", work.join("home"))
            .env("ANTHROPIC_BASE_URL", &server.url)
            .env("ANTHROPIC_API_KEY", "unused-by-a-local-server")
            .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-scripted")
            .env("ANTHROPIC_SMALL_FAST_MODEL", "claude-scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .output()
            .expect("running claude");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "claude -p {prompt:?}: {stdout}\n{stderr}\n{}", server.log.lock().unwrap());
        stdout.to_string()
    };
    let hello = run("Say hello");
    assert!(hello.contains("Hello from kvad."), "{hello}");
    let read = run(&format!("What does the file {} say?", notes.display()));
    assert!(read.contains("KVAD-PLUM-7341"), "{read}");
    // Both turns of the round trip went through the Messages API, streamed.
    let rows = server.rows();
    let messages = rows.iter().filter(|r| r.0 == "/v1/messages").count();
    assert!(messages >= 3, "{rows:?}");
    let _ = std::fs::remove_dir_all(&work);
}
