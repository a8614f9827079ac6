//! Real agent clients, installed from npm, pointed at kvad-serve on loopback, each answering a prompt
//! non-interactively and completing a one-tool task (reading a file with its own tool and reporting what it says):
//! Claude Code (`@anthropic-ai/claude-code`, Anthropic's Messages API through `ANTHROPIC_BASE_URL`), Codex CLI
//! (`@openai/codex`, OpenAI's Responses API through a `model_providers` entry in its config) and OpenCode
//! (`opencode-ai`, chat completions through an `@ai-sdk/openai-compatible` provider in `opencode.json`).
//!
//! The model is the scripted engine with the Qwen2.5 (Hermes) template: Claude Code's prompt (its system prompt and
//! 24 tool definitions, about 75 KB) is past the context of the real model CI has (SmolLM2, 8,192 tokens), and what
//! is under test is the protocol, not the model. The script answers the file's content only when the tool result
//! carrying it reaches the prompt, so the round trip cannot pass without Claude Code's Read having run.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// Pinned so a new release cannot change what the test checks without a commit saying so.
const CLAUDE_CODE: (&str, &str, &str) = ("@anthropic-ai/claude-code", "2.1.197", "claude");
const CODEX: (&str, &str, &str) = ("@openai/codex", "0.171.0", "codex");
const OPENCODE: (&str, &str, &str) = ("opencode-ai", "1.18.33", "opencode");

/// A client's command, installed once (per version) into an ignored folder of the checkout.
fn install((package, version, bin): (&str, &str, &str)) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.agents").join(bin);
    let installed = std::fs::read_to_string(dir.join("node_modules").join(package).join("package.json"))
        .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")));
    if !installed {
        std::fs::create_dir_all(&dir).unwrap();
        let st = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("{package}@{version}"))
            .status()
            .expect("npm (Node.js) is needed: scripts/test.sh checks for it");
        assert!(st.success(), "npm install {package}@{version} failed");
    }
    dir.join("node_modules/.bin").join(bin)
}

/// A scratch folder with the file to read, and a script whose model calls `tool` with `arguments` when asked
/// what the file says, and answers the file's content only once the tool's output reached its prompt.
fn setup(tag: &str, tool: &str, arguments: serde_json::Value) -> (PathBuf, PathBuf) {
    let work = std::env::temp_dir().join(format!("kvad-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("home")).unwrap();
    std::fs::write(work.join("notes.txt"), "The launch code is KVAD-PLUM-7341.\n").unwrap();
    let template = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/templates/qwen2.5.jinja");
    let call = serde_json::json!({"name": tool, "arguments": arguments});
    let script = serde_json::json!({"models": [{
        "id": "agent-scripted", "context": 400000, "template": template,
        "rules": [
            {"when": "KVAD-PLUM-7341", "reply": "The file says the launch code is KVAD-PLUM-7341."},
            {"when": "What does the file", "reply": format!("<tool_call>\n{call}\n</tool_call>")}
        ],
        "default": "Hello from kvad."
    }]});
    let script_path = work.join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    (work, script_path)
}

fn check(out: std::process::Output, what: &str, server: &common::Server) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}\n{stderr}\n{}", server.log.lock().unwrap());
    // What the client printed, its log lines too (OpenCode writes a tool's progress there).
    format!("{stdout}\n{stderr}")
}

#[test]
fn claude_code_answers_and_reads_a_file_through_the_messages_api() {
    let claude = install(CLAUDE_CODE);
    let notes = std::env::temp_dir().join(format!("kvad-claude-code-{}", std::process::id())).join("notes.txt");
    let (work, script) = setup("claude-code", "Read", serde_json::json!({"file_path": notes}));
    let server = common::start("claude-code", &["--scripted", script.to_str().unwrap()]);
    let run = |prompt: &str| {
        let out = Command::new(&claude)
            .args(["-p", prompt, "--model", "agent-scripted", "--allowedTools", "Read"])
            .current_dir(&work)
            .env("HOME", work.join("home"))
            .env("ANTHROPIC_BASE_URL", &server.url)
            .env("ANTHROPIC_API_KEY", "unused-by-a-local-server")
            .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", "agent-scripted")
            .env("ANTHROPIC_SMALL_FAST_MODEL", "agent-scripted")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .output()
            .expect("running claude");
        check(out, &format!("claude -p {prompt:?}"), &server)
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

#[test]
fn codex_cli_answers_and_reads_a_file_through_the_responses_api() {
    let codex = install(CODEX);
    let (work, script) = setup("codex", "exec_command", serde_json::json!({"cmd": "cat notes.txt"}));
    let server = common::start("codex", &["--scripted", script.to_str().unwrap()]);
    let config = format!(
        "model = \"agent-scripted\"\nmodel_provider = \"kvad\"\n\n[model_providers.kvad]\nname = \"kvad\"\n\
         base_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"KVAD_API_KEY\"\n",
        server.url
    );
    std::fs::create_dir_all(work.join("home/.codex")).unwrap();
    std::fs::write(work.join("home/.codex/config.toml"), config).unwrap();
    let run = |prompt: &str| {
        // The file is read by Codex's own shell tool; its sandbox (bubblewrap) needs user namespaces, which test
        // containers lack, so it runs unsandboxed in this scratch folder.
        let out = Command::new(&codex)
            .args(["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", prompt])
            .current_dir(&work)
            .env("HOME", work.join("home"))
            .env("KVAD_API_KEY", "unused-by-a-local-server")
            .output()
            .expect("running codex");
        check(out, &format!("codex exec {prompt:?}"), &server)
    };
    let hello = run("Say hello");
    assert!(hello.contains("Hello from kvad."), "{hello}");
    let read = run("What does the file notes.txt say?");
    assert!(read.contains("KVAD-PLUM-7341"), "{read}");
    let rows = server.rows();
    assert!(rows.iter().filter(|r| r.0 == "/v1/responses").count() >= 3, "{rows:?}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn opencode_answers_and_reads_a_file_through_chat_completions() {
    let opencode = install(OPENCODE);
    let notes = std::env::temp_dir().join(format!("kvad-opencode-{}", std::process::id())).join("notes.txt");
    let (work, script) = setup("opencode", "read", serde_json::json!({"filePath": notes}));
    let server = common::start("opencode", &["--scripted", script.to_str().unwrap()]);
    let config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"kvad": {"npm": "@ai-sdk/openai-compatible", "name": "kvad",
                              "options": {"baseURL": format!("{}/v1", server.url)},
                              "models": {"agent-scripted": {"name": "agent-scripted"}}}},
        "model": "kvad/agent-scripted",
        // A scratch folder in the temp dir is no project OpenCode knows: reading in it is allowed here.
        "permission": {"external_directory": "allow"}
    });
    std::fs::write(work.join("opencode.json"), config.to_string()).unwrap();
    let run = |prompt: &str| {
        // OpenCode fetches its provider package (@ai-sdk/openai-compatible) from npm on first use, into HOME.
        let out = Command::new(&opencode)
            .args(["run", prompt])
            .current_dir(&work)
            .env("HOME", work.join("home"))
            .env("OPENCODE_CONFIG", work.join("opencode.json"))
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .output()
            .expect("running opencode");
        check(out, &format!("opencode run {prompt:?}"), &server)
    };
    let hello = run("Say hello");
    assert!(hello.contains("Hello from kvad."), "{hello}");
    let read = run("What does the file notes.txt say?");
    let rows = server.rows();
    assert!(read.contains("KVAD-PLUM-7341"), "{read}\n{rows:?}\n{}", server.log.lock().unwrap());
    assert!(rows.iter().filter(|r| r.0 == "/v1/chat/completions").count() >= 3, "{rows:?}");
    let _ = std::fs::remove_dir_all(&work);
}
