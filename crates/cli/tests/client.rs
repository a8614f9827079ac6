//! `kvad` as a client of a real `kvad-serve` (scripted engine: replies from crates/server/tests/fixtures/script.json)
//! and the choice of where a command runs. kvad-serve must sit beside kvad (`cargo test --workspace` builds both).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

#[path = "../src/client/commands.rs"]
mod commands;

fn kvad_serve() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_kvad")).with_file_name("kvad-serve");
    assert!(
        p.is_file(),
        "{} is missing: build it with `cargo build -p kvad-server` (cargo test --workspace does)",
        p.display()
    );
    p
}

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvad-cli-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scripted(tag: &str) -> Server {
    scripted_env(tag, &[])
}

fn scripted_env(tag: &str, env: &[(&str, &str)]) -> Server {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/fixtures/script.json");
    let mut child = Command::new(kvad_serve())
        .envs(env.iter().copied())
        .args(["--bind", "127.0.0.1:0", "--scripted", script.to_str().unwrap(), "--data-dir"])
        .arg(temp(tag))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("kvad-serve exited").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    Server(child, url)
}

/// kvad with a data and config directory of its own (so no kvad.toml, credentials or service of this machine leak
/// in).
fn kvad(data: &Path, args: &[&str]) -> Output {
    kvad_stdin(data, args, "")
}

/// As [`kvad`], with `stdin` on its standard input.
fn kvad_stdin(data: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvad"))
        .env("KVAD_DATA", data)
        .env("KVAD_CONFIG_DIR", data.join("config"))
        .env_remove("KVAD_URL")
        .env_remove("KVAD_API_KEY")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn run_goes_to_the_named_server_and_the_first_line_says_so() {
    let s = scripted("remote");
    let data = temp("remote-data");
    let o = kvad(&data, &["--remote", &s.1, "run", "qwen2.5-scripted", "-p", "hi", "--max-tokens", "7"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim_end(), "Hello from the script", "7 three-character tokens");
    assert_eq!(err.lines().next().unwrap(), format!("kvad: {} (from --remote)", s.1));
    assert!(err.contains("reply 7 tokens") && err.contains("length"), "{err}");

    // KVAD_URL, then [client] url: each named, each said.
    let o = Command::new(env!("CARGO_BIN_EXE_kvad"))
        .env("KVAD_DATA", &data)
        .env("KVAD_URL", &s.1)
        .args(["run", "qwen2.5-scripted", "-p", "hi", "--max-tokens", "2"])
        .output()
        .unwrap();
    assert_eq!(text(&o).1.lines().next().unwrap(), format!("kvad: {} (from KVAD_URL)", s.1));
    std::fs::write(data.join("kvad.toml"), format!("[client]\nurl = \"{}\"\n", s.1)).unwrap();
    let o = kvad(&data, &["run", "qwen2.5-scripted", "-p", "hi", "--max-tokens", "2"]);
    assert_eq!(text(&o).1.lines().next().unwrap(), format!("kvad: {} (from [client] url in kvad.toml)", s.1));
    // --json: one event a line, as the server sent it.
    let o = kvad(&data, &["--json", "run", "qwen2.5-scripted", "-p", "hi", "--max-tokens", "3"]);
    let events: Vec<serde_json::Value> = text(&o).0.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 5, "3 deltas, the finish, the usage: {events:?}");
    assert_eq!(events[0]["object"], "chat.completion.chunk");
    assert_eq!(events[4]["usage"]["completion_tokens"], 3);
}

#[test]
fn a_named_server_that_does_not_answer_is_an_error_not_a_fallback() {
    let data = temp("dead");
    let o = kvad(&data, &["--remote", "http://127.0.0.1:1", "run", "-p", "hi"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("--remote names http://127.0.0.1:1, which does not answer"), "{err}");
    // With nothing named and no service on the (configured) loopback address, the command runs here and says so.
    std::fs::write(data.join("kvad.toml"), "[server]\nbind = \"127.0.0.1:1\"\n").unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama");
    let o = kvad(&data, &["run", model.to_str().unwrap(), "-p", "hi"]);
    let (_, err) = text(&o);
    assert_eq!(err.lines().next().unwrap(), "kvad: in this process (no server answers at http://127.0.0.1:1)");
    assert!(err.contains("tokenizer"), "then the in-process run fails on the tokenizer-less fixture: {err}");
    let o = kvad(&data, &["--local", "--remote", "http://x", "run", "-p", "hi"]);
    assert!(text(&o).1.contains("contradict"));
    // `kvad ps` with no server says plainly that nothing is in memory, and why; a command about a server's state
    // (its queue) says it needs one.
    let o = kvad(&data, &["ps"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("nothing is in memory: no server (no server answers at http://127.0.0.1:1)"), "{out}");
    let o = kvad(&data, &["queue"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("kvad queue needs a server"), "{o:?}");
}

#[test]
fn ls_api_and_service_status() {
    let s = scripted("ls");
    let data = temp("ls-data");
    let o = kvad(&data, &["--remote", &s.1, "ls"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let smol = out.lines().find(|l| l.starts_with("smollm2-scripted")).unwrap();
    assert_eq!(smol.split_whitespace().collect::<Vec<_>>(), ["smollm2-scripted", "yes", "-", "-", "-", "scripted"]);
    let o = kvad(&data, &["--remote", &s.1, "api"]);
    let out = text(&o).0;
    for (m, p, _) in commands::COMMANDS.iter().chain(commands::NOT_COMMANDS) {
        assert!(out.lines().any(|l| l.starts_with(m) && l.contains(p)), "kvad api lists {m} {p}: {out}");
    }
    let o = kvad(&data, &["--remote", &s.1, "api", "/v1/chat/completions", "-d", r#"{"model": "x"}"#]);
    let (out, err) = text(&o);
    assert!(!o.status.success() && err.contains("POST /v1/chat/completions answered 400"), "{err}");
    assert!(out.contains("messages is required"), "{out}");
    let o = kvad(&data, &["--remote", &s.1, "service", "status"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains(&format!("{}/api/health: \"ok\"", s.1)), "{out}");
    let o = kvad(&data, &["--remote", "http://127.0.0.1:1", "service", "status"]);
    assert!(!o.status.success() && text(&o).0.contains("no answer"));
}

#[test]
fn load_sends_the_backend_and_ps_shows_the_model_on_it() {
    let s = scripted("load-backend");
    let data = temp("load-backend-data");
    let o = kvad(&data, &["--remote", &s.1, "load", "qwen2.5-scripted", "--backend", "cpu-q8"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim_end(), "loaded qwen2.5-scripted on cpu-q8");
    let o = kvad(&data, &["--remote", &s.1, "ps"]);
    let out = text(&o).0;
    assert!(out.lines().any(|l| l.starts_with("qwen2.5-scripted@cpu-q8 ")), "{out}");
    // `kvad chat` says where the replies are computed as its second line (the seed's).
    let o = kvad_stdin(&data, &["--remote", &s.1, "chat", "qwen2.5-scripted"], "/exit\n");
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    assert_eq!(err.lines().nth(1), Some("model: qwen2.5-scripted@cpu-q8"), "{err}");
    // Another backend while it is loaded, and a name that is not a backend: the server's refusals, as worded.
    let o = kvad(&data, &["--remote", &s.1, "load", "qwen2.5-scripted", "--backend", "cpu-q4"]);
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("is loaded on cpu-q8") && err.contains("unload it first"), "{err}");
    let o = kvad(&data, &["--remote", &s.1, "load", "qwen3-scripted", "--backend", "cpu-q5"]);
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("\"cpu-q5\""), "{err}");
    // Without --backend, the server's own.
    let o = kvad(&data, &["--remote", &s.1, "load", "qwen3-scripted"]);
    assert_eq!(text(&o).0.trim_end(), "loaded qwen3-scripted on scripted");
    // run's --backend/--quant reach the server as a load there; one elsewhere is its 409; --threads is refused.
    let o = kvad(
        &data,
        &["--remote", &s.1, "run", "smollm2-scripted", "--backend", "cpu-q4", "-p", "hi", "--max-tokens", "2"],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).1.contains("smollm2-scripted is on cpu-q4 for this request"), "{}", text(&o).1);
    let o = kvad(&data, &["--remote", &s.1, "ps"]);
    assert!(text(&o).0.lines().any(|l| l.starts_with("smollm2-scripted@cpu-q4 ")), "{}", text(&o).0);
    let o = kvad(&data, &["--remote", &s.1, "run", "smollm2-scripted", "--quant", "q8", "-p", "hi"]);
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("is loaded on cpu-q4"), "{err}");
    let o = kvad(&data, &["--remote", &s.1, "chat", "smollm2-scripted", "--threads", "2"]);
    assert!(!o.status.success() && text(&o).1.contains("--threads"), "{}", text(&o).1);
    // The names `kvad ps` prints work as they are: NAME@backend.
    let o = kvad(&data, &["--remote", &s.1, "unload", "qwen2.5-scripted@cpu-q8"]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = kvad(&data, &["--remote", &s.1, "ps"]);
    assert!(!text(&o).0.contains("qwen2.5-scripted@"), "{}", text(&o).0);
}

#[test]
fn serve_hands_over_to_kvad_serve() {
    kvad_serve();
    let data = temp("serve");
    let o = kvad(&data, &["serve", "--version"]);
    let line = text(&o).0.trim().to_string();
    assert!(line.starts_with(&format!("kvad-serve {} (", env!("CARGO_PKG_VERSION"))), "{line}");
    let o = kvad(&data, &["serve", "--bind", "0.0.0.0:0", "--data-dir", data.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.starts_with("kvad-serve: bind = 0.0.0.0:0"),
        "kvad-serve's own error and status: {err}"
    );
}

/// Every path the client's source requests, against COMMANDS.
#[test]
fn the_client_requests_exactly_the_commands_table() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/client");
    let mut requested = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "commands.rs" {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        for line in src.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for prefix in ["\"/v1/", "\"/api/", "}/v1/", "}/api/"] {
                for (i, _) in line.match_indices(prefix) {
                    let p: String = line[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || "/._-{}".contains(*c))
                        .collect();
                    requested.insert(p);
                }
            }
        }
    }
    let table: BTreeSet<String> = commands::COMMANDS.iter().map(|(_, p, _)| p.to_string()).collect();
    assert_eq!(requested, table);
}

#[test]
fn auth_login_keeps_a_key_every_command_sends_it_and_logout_revokes_it() {
    let s = scripted_env("auth", &[("KVAD_AUTH_MODE", "local"), ("KVAD_ADMIN_PASSWORD", "admin-password-1")]);
    let (admin, bob) = (temp("auth-admin"), temp("auth-bob"));
    let run = |dir: &Path, args: &[&str], stdin: &str| {
        let mut all = vec!["--remote", s.1.as_str()];
        all.extend_from_slice(args);
        let o = kvad_stdin(dir, &all, stdin);
        let (out, err) = text(&o);
        (o.status.success(), out, err)
    };
    // Signed out: the server's 401 comes through.
    let (ok, _, err) = run(&admin, &["queue"], "");
    assert!(!ok && err.contains("401") && err.contains("authentication required"), "{err}");
    let (ok, _, err) = run(&admin, &["auth", "login", "--username", "admin", "--password-stdin"], "wrong-password\n");
    assert!(!ok && err.contains("wrong username or password"), "{err}");
    let (ok, out, err) =
        run(&admin, &["auth", "login", "--username", "admin", "--password-stdin"], "admin-password-1\n");
    assert!(ok, "{err}");
    assert!(out.contains(&format!("signed in to {} as admin", s.1)), "{out}");
    let creds = admin.join("config/credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let stored: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&creds).unwrap()).unwrap();
    let entry = &stored["servers"][s.1.as_str()];
    assert!(entry["key"].as_str().unwrap().starts_with("kvad_") && entry["account"] == "admin", "{stored}");
    let (ok, out, err) = run(&admin, &["auth", "status"], "");
    assert!(ok && out.contains("admin (admin), auth mode local"), "{out}{err}");
    let (ok, _, err) = run(&admin, &["queue"], "");
    assert!(ok, "the key goes with every command: {err}");
    // The login's session was only for making the key.
    let (ok, out, _) = run(&admin, &["--json", "sessions"], "");
    assert!(ok && out.trim() == "[]", "{out}");

    let (ok, _, err) = run(&admin, &["users", "add", "bob", "--password-stdin"], "bob-password-1\n");
    assert!(ok, "{err}");
    let (_, out, _) = run(&admin, &["users"], "");
    assert!(out.lines().any(|l| l.starts_with("bob") && l.contains("user")), "{out}");
    let (ok, _, err) = run(&bob, &["auth", "login", "--username", "bob", "--password-stdin"], "bob-password-1\n");
    assert!(ok, "{err}");
    let (ok, out, err) = run(&bob, &["keys", "create", "scripts"], "");
    assert!(ok && out.trim().starts_with("kvad_"), "{out}{err}");
    let (_, out, _) = run(&bob, &["--json", "keys", "list"], "");
    let keys: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(keys.as_array().unwrap().len(), 2, "bob's login key and his scripts key: {keys}");
    assert!(keys.as_array().unwrap().iter().all(|k| k["account"] == "bob"));
    let (ok, _, err) = run(&bob, &["users"], "");
    assert!(!ok && err.contains("403"), "{err}");
    let (_, out, _) = run(&admin, &["--json", "keys"], "");
    let all: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 3, "an administrator sees everyone's: {all}");
    let scripts = keys.as_array().unwrap().iter().find(|k| k["name"] == "scripts").unwrap()["id"].clone();
    let (ok, _, err) = run(&admin, &["keys", "revoke", scripts.as_str().unwrap()], "");
    assert!(ok, "{err}");
    let (ok, _, err) = run(&admin, &["users", "set", "bob", "--role", "admin"], "");
    assert!(ok, "{err}");

    let (ok, out, _) = run(&bob, &["auth", "logout"], "");
    assert!(ok && out.contains("revoked"), "{out}");
    let (ok, _, err) = run(&bob, &["auth", "status"], "");
    assert!(!ok && err.contains("not signed in"), "{err}");
    let (_, out, _) = run(&admin, &["--json", "keys"], "");
    let all: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(all.as_array().unwrap().iter().filter(|k| k["account"] == "bob").all(|k| k["revoked"] == true), "{all}");
    let (ok, _, err) = run(&admin, &["users", "rm", "bob"], "");
    assert!(ok, "{err}");
}

/// `kvad use` with a server answering sets its default model too (kept by the server), beside this machine's.
#[test]
fn use_sets_the_servers_default_model_too() {
    let s = scripted("use");
    let data = temp("use-data");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama").canonicalize().unwrap();
    let model = model.to_str().unwrap();
    let o = kvad(&data, &["--remote", &s.1, "use", model]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("{}'s default model is now {model}", s.1)), "{err}");
    assert_eq!(std::fs::read_to_string(data.join("config/default-model")).unwrap().trim(), model);
    let v: serde_json::Value = ureq::get(&format!("{}/api/settings", s.1)).call().unwrap().into_json().unwrap();
    assert_eq!(v["server"]["default_model"], model, "{v}");
}

/// `/api/health` reports the version and commit `kvad-serve --version` prints, the same as this `kvad`'s: one
/// build (the cluster's same-build rule compares them).
#[test]
fn health_reports_the_build_kvad_serve_names() {
    let s = scripted("health-version");
    let v: serde_json::Value = ureq::get(&format!("{}/api/health", s.1)).call().unwrap().into_json().unwrap();
    let line = |bin: &Path| {
        let o = Command::new(bin).arg("--version").output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let served = format!("kvad-serve {} ({})", v["version"].as_str().unwrap(), v["commit"].as_str().unwrap());
    assert_eq!(served, line(&kvad_serve()), "{v}");
    let ours = line(Path::new(env!("CARGO_BIN_EXE_kvad")));
    assert_eq!(ours.trim_start_matches("kvad "), served.trim_start_matches("kvad-serve "));
}

/// `kvad bench --request-rate`: every request of the plan sent and finished through a real server, the report's
/// counts are the server's usage, and goodput counts exactly the requests within the SLO (the scripted model
/// writes a token every 50 ms: a TPOT bound of 1 s holds for all, one of 10 ms for none). Bad input names its flag.
#[test]
fn a_serving_benchmark_reports_what_the_server_delivered_and_the_goodput_under_its_slo() {
    let s = scripted("serving");
    let d = temp("serving-cli");
    let run = |slo_tpot: &str| {
        let o = kvad(
            &d,
            &[
                "--json",
                "bench",
                "--remote",
                &s.1,
                "slow-scripted",
                "--request-rate",
                "40",
                "--requests",
                "5",
                "--prompt-tokens",
                "6",
                "--gen-tokens",
                "4",
                "--warmup",
                "0",
                "--slo-ttft",
                "5",
                "--slo-tpot",
                slo_tpot,
                "--seed",
                "2",
            ],
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let r = run("1");
    assert_eq!((r["requests"].as_u64(), r["completed"].as_u64(), r["failed"].as_u64()), (Some(5), Some(5), Some(0)));
    assert_eq!(r["output_tokens"].as_u64(), Some(20), "4 tokens each, as usage says: {r}");
    assert!(r["input_tokens"].as_u64().unwrap() >= 5 * 6, "{r}");
    let tpot = r["tpot_s"]["p50"].as_f64().unwrap();
    assert!((0.04..1.0).contains(&tpot), "a token every 50 ms: TPOT {tpot}");
    assert!(r["ttft_s"]["p99"].as_f64().unwrap() <= r["e2e_s"]["max"].as_f64().unwrap());
    assert_eq!(r["goodput"]["share"].as_f64(), Some(1.0), "{r}");
    let strict = run("0.01");
    assert_eq!((strict["completed"].as_u64(), strict["goodput"]["share"].as_f64()), (Some(5), Some(0.0)));
    for (flag, value, says) in [
        ("--request-rate", "0", "--request-rate 0"),
        ("--length-spread", "1.5", "--length-spread 1.5"),
        ("--max-concurrency", "0", "--max-concurrency 0"),
    ] {
        let mut args = vec!["bench", "--remote", &s.1, "slow-scripted", "--requests", "1"];
        if flag != "--request-rate" {
            args.extend(["--request-rate", "10"]);
        }
        args.extend([flag, value]);
        let o = kvad(&d, &args);
        let (_, err) = text(&o);
        assert!(!o.status.success() && err.contains(says), "{flag} {value}: {err}");
    }
}

#[test]
fn datasets_train_jobs_and_evals_from_the_command_line() {
    let cache = temp("train-cache");
    let s = scripted_env("train", &[("KVAD_CACHE", cache.to_str().unwrap())]);
    let data = temp("train-data");
    let file = data.join("bad.jsonl");
    std::fs::write(&file, "{\"text\": \"ok\"}\n{\"text\": 5}\n").unwrap();
    let o = kvad(&data, &["--remote", &s.1, "datasets", "add", file.to_str().unwrap()]);
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("line 2: field text: must be a string"), "{err}");

    let file = data.join("cat.txt");
    std::fs::write(&file, "the cat sat on the mat").unwrap();
    let cfg = data.join("config.json");
    let gpt = r#"{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257, "n_embd": 32,
                  "n_layer": 2, "n_head": 2, "n_positions": 64, "eos_token_id": 256}"#;
    std::fs::write(&cfg, gpt).unwrap();
    let args = ["--remote", &s.1, "train", "--config", cfg.to_str().unwrap(), "--data", file.to_str().unwrap()];
    let more = ["--output", "cli-cat", "--steps", "40", "--lr", "0.01", "--seq-len", "32", "--batch", "2"];
    let o = kvad(&data, &[&args[..], &more[..]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("step     40") && out.trim_end().ends_with("done: trained:cli-cat"), "{out}");
    assert!(cache.join("trained/cli-cat/model.safetensors").is_file());
    let o = kvad(&data, &["--remote", &s.1, "jobs"]);
    let out = text(&o).0;
    let row = out.lines().find(|l| l.contains("cli-cat")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("train") && row.contains("done") && row.contains(" 40 "), "{row}");
    let o = kvad(&data, &["--remote", &s.1, "datasets"]);
    assert!(text(&o).0.contains("cat.txt"), "{}", text(&o).0);
    let train_id = row.split_whitespace().next().unwrap().to_string();
    let o = kvad(&data, &["--remote", &s.1, "jobs", "resume", &train_id]);
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("only a cancelled or failed run resumes"), "{err}");

    let suite = data.join("suite.jsonl");
    std::fs::write(&suite, "{\"prompt\": \"Hi\", \"expected\": \"zzz-never\", \"scorer\": \"contains\"}\n").unwrap();
    let o = kvad(
        &data,
        &["--remote", &s.1, "evals", "run", "--data", suite.to_str().unwrap(), "--model", "smollm2-scripted"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("smollm2-scripted: 0 of 1 right"), "{out}");
    let o = kvad(&data, &["--remote", &s.1, "--json", "jobs"]);
    let jobs: serde_json::Value = serde_json::from_str(text(&o).0.trim()).unwrap();
    let eval = jobs["data"][0]["id"].as_str().unwrap().to_string();
    let o = kvad(&data, &["--remote", &s.1, "evals", "items", &eval]);
    let out = text(&o).0;
    assert!(out.starts_with("smollm2-scripted #0 wrong:") && out.contains("expected \"zzz-never\""), "{out}");
    // A perplexity job: uploaded, started and followed; the scripted engine computes no scores, and the job's
    // failure is the command's, with the engine's words.
    let o = kvad(
        &data,
        &["--remote", &s.1, "evals", "ppl", "--data", file.to_str().unwrap(), "--model", "smollm2-scripted"],
    );
    let (out, err) = text(&o);
    assert!(out.contains("perplexity of smollm2-scripted over 1 documents"), "{out}");
    assert!(!o.status.success() && err.contains("failed") && err.contains("scores no texts"), "{err}");
    let o = kvad(
        &data,
        &[
            "--remote",
            &s.1,
            "evals",
            "ppl",
            "--data",
            file.to_str().unwrap(),
            "--model",
            "smollm2-scripted",
            "--split",
            "test",
        ],
    );
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains("split"), "{err}");
    let _ = std::fs::remove_dir_all(&cache);
}
