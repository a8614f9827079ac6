//! `POST /api/pull` on the real kvad-serve, pointed at the fake Hugging Face Hub of kvad-hub's tests: the events
//! (plan, per-file progress, done), the files in the server's cache, a refused config as an error event naming the
//! field, bad names, offline mode, and a second pull of a repo while the first runs.

mod common;

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use support::{tiny_llama_files, Fake, C1};

/// A server whose Hub is `endpoint`, with caches of its own.
fn server(tag: &str, endpoint: &str, extra: &[(&str, &str)]) -> (common::Server, PathBuf) {
    let hf = std::env::temp_dir().join(format!("kvad-pull-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&hf);
    let (cache, kvad) = (hf.join("hub"), hf.join("kvad"));
    let mut env = vec![
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("KVAD_CACHE", kvad.to_str().unwrap()),
        ("HF_ENDPOINT", endpoint),
        ("KVAD_OLLAMA_REGISTRY", endpoint),
    ];
    env.extend_from_slice(extra);
    let s = common::start_env(tag, &["--scripted", common::script().to_str().unwrap()], &env);
    (s, cache)
}

fn events(s: &common::Server, model: &str) -> Vec<Value> {
    s.stream("/api/pull", &json!({ "model": model }).to_string())
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}")))
        .collect()
}

#[test]
fn a_pull_streams_its_plan_progress_and_result_and_lands_in_the_servers_cache() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    let (s, cache) = server("pull", &fake.url, &[]);
    let ev = events(&s, "tiny/llama");
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let weights = tiny_llama_files().into_iter().find(|f| f.0 == "model.safetensors").unwrap().1;

    let plan = ev.iter().find(|e| e["event"] == "plan").expect("a plan event");
    assert_eq!(plan["title"], format!("tiny/llama at {C1}"));
    let names: Vec<&str> = plan["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"]);
    let w = &plan["files"][3];
    assert_eq!((w["size"].as_u64(), w["cached"].as_bool()), (Some(weights.len() as u64), Some(false)));
    // The weights start after the plan, advance, and finish with every byte.
    let at = |k: &str, file: &str| ev.iter().position(|e| e["event"] == k && e["file"] == file);
    let (plan_at, start, finish) = (
        kinds.iter().position(|k| *k == "plan").unwrap(),
        at("start", "model.safetensors"),
        at("finish", "model.safetensors"),
    );
    assert!(plan_at < start.unwrap() && start < finish, "{kinds:?}");
    assert_eq!(ev[finish.unwrap()]["bytes"], weights.len());
    let advanced: u64 = ev
        .iter()
        .filter(|e| e["event"] == "advance" && e["file"] == "model.safetensors")
        .map(|e| e["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(advanced, weights.len() as u64, "the advances add up to the file");
    // config.json is fetched (and checked) before the plan: a refused model costs only it.
    assert!(at("finish", "config.json").unwrap() < plan_at, "{kinds:?}");

    let done = ev.last().unwrap();
    assert_eq!(done["event"], "done", "{ev:?}");
    assert_eq!(done["commit"], C1);
    let snap = cache.join("models--tiny--llama/snapshots").join(C1);
    assert_eq!(PathBuf::from(done["path"].as_str().unwrap()), snap);
    assert_eq!(std::fs::read(snap.join("model.safetensors")).unwrap(), weights, "in the server's HF_HUB_CACHE");
    assert!(done["transferred"].as_u64().unwrap() >= weights.len() as u64);

    // Again: everything is here, nothing is transferred.
    let ev = events(&s, "tiny/llama");
    let plan = ev.iter().find(|e| e["event"] == "plan").unwrap();
    assert!(plan["files"].as_array().unwrap().iter().all(|f| f["cached"] == true), "{plan}");
    assert_eq!(ev.last().unwrap()["transferred"], 0);
    assert!(!ev.iter().any(|e| e["event"] == "start"), "{ev:?}");
}

#[test]
fn a_refused_model_is_an_error_event_naming_the_field_and_bad_names_are_400s() {
    let fake = Fake::start();
    let mut files = tiny_llama_files();
    files[0].1 = br#"{"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"}"#.to_vec();
    fake.add_repo("eleuther/neox", C1, files, &["main"]);
    let (s, cache) = server("refused", &fake.url, &[]);
    let ev = events(&s, "eleuther/neox");
    let last = ev.last().unwrap();
    assert_eq!(last["event"], "error", "{ev:?}");
    let e = &last["error"];
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("architectures") && msg.contains("GPTNeoXForCausalLM"), "{msg}");
    assert!(msg.contains("nothing else was downloaded"), "{msg}");
    assert_eq!(
        (e["code"].as_str(), e["param"].as_str(), e["type"].as_str()),
        (Some("model_refused"), Some("model"), Some("invalid_request_error"))
    );
    assert!(!ev.iter().any(|e| e["event"] == "plan"), "refused before the plan: {ev:?}");
    assert!(!cache.join("models--eleuther--neox/snapshots").join(C1).join("model.safetensors").exists());
    // A repo the Hub does not have.
    let last = events(&s, "nobody/nothing").pop().unwrap();
    assert_eq!((last["event"].as_str(), last["error"]["code"].as_str()), (Some("error"), Some("model_not_found")));

    for (body, param, words) in [
        (json!({}), "model", "model"),
        (json!({"model": "/etc/passwd"}), "model", "/etc/passwd"),
        (json!({"model": "ollama:Bad Tag"}), "model", "Bad Tag"),
        (json!({"model": "tiny/llama", "revision": "main"}), "revision", "revision"),
    ] {
        let (code, v) = s.post("/api/pull", &body.to_string());
        assert_eq!(code, 400, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(words), "{v}");
    }
}

#[test]
fn offline_mode_refuses_a_pull_with_a_403() {
    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    for var in ["KVAD_OFFLINE", "HF_HUB_OFFLINE"] {
        let (s, _) = server(&format!("offline-{var}"), &fake.url, &[(var, "1")]);
        let (code, v) = s.post("/api/pull", r#"{"model": "tiny/llama"}"#);
        assert_eq!(code, 403, "{v}");
        assert_eq!(v["error"]["code"], "offline");
        assert!(v["error"]["message"].as_str().unwrap().contains("offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE)"), "{v}");
    }
    assert!(fake.requests().is_empty(), "the Hub was not asked: {:?}", fake.requests());
}

/// A Hub that accepts connections and answers nothing until `release` is set (then it closes them).
fn silent_hub() -> (String, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let release = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Mutex::new(Vec::new()));
    let r = release.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            if r.load(Ordering::SeqCst) {
                drop(conn);
                continue;
            }
            held.lock().unwrap().push(conn);
            let (held, r) = (held.clone(), r.clone());
            std::thread::spawn(move || {
                while !r.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                held.lock().unwrap().clear();
            });
        }
    });
    (url, release)
}

#[test]
fn a_second_pull_of_a_running_repo_is_a_409_naming_the_first() {
    let (hub, release) = silent_hub();
    let (s, _) = server("twice", &hub, &[]);
    // The first pull waits on the silent Hub, its stream open.
    let first = ureq::post(&format!("{}/api/pull", s.url)).send_string(r#"{"model": "tiny/llama@main"}"#).unwrap();
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    let (code, v) = s.post("/api/pull", r#"{"model": "tiny/llama@v2"}"#);
    assert_eq!(code, 409, "{v}");
    assert_eq!((v["error"]["code"].as_str(), v["error"]["param"].as_str()), (Some("pull_in_progress"), Some("model")));
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("tiny/llama is already being pulled") && msg.contains("\"tiny/llama@main\""), "{msg}");
    // Another repo is not held up by it.
    let other = ureq::post(&format!("{}/api/pull", s.url)).send_string(r#"{"model": "tiny/other"}"#).unwrap();
    assert_eq!(other.status(), 200);
    // The Hub goes away: the first pull ends with an error event, and the repo may be pulled again.
    release.store(true, Ordering::SeqCst);
    let lines: Vec<String> = BufReader::new(first.into_reader()).lines().map_while(Result::ok).collect();
    let last: Value = serde_json::from_str(lines.iter().rev().find_map(|l| l.strip_prefix("data: ")).unwrap()).unwrap();
    assert_eq!(last["event"], "error", "{lines:?}");
    assert!(lines.iter().any(|l| l == "event: error"), "the SSE event name is the kind: {lines:?}");
    let last = events(&s, "tiny/llama").pop().unwrap();
    assert_eq!(last["event"], "error", "a fresh pull runs (and fails on the closed Hub), no 409: {last}");
    assert_ne!(last["error"]["code"], "pull_in_progress");
}

/// A dataset repo's split from the Hub (`POST /api/datasets?hub=...`): Parquet shards as pyarrow writes them
/// (fixtures/datasets, from scripts/reference/datasets_ref.py) fetched into the HF cache's `datasets--owner--name`
/// through the fake Hub, read as one dataset, listed and trained on; a split the repo lacks is refused naming the
/// ones it has.
#[test]
fn a_hub_dataset_s_split_is_fetched_into_the_cache_and_kept() {
    let fx = support::fixtures().join("datasets");
    let file = |p: &str| (p.to_string(), std::fs::read(fx.join("cat-text").join(p)).unwrap());
    let fake = Fake::start();
    fake.add_dataset(
        "tiny/cats",
        C1,
        vec![
            ("README.md".into(), b"---\nlicense: mit\n---\n".to_vec()),
            file("data/train-00000-of-00001.parquet"),
            file("data/validation-00000-of-00001.parquet"),
        ],
        &["main"],
    );
    let chat = std::fs::read(fx.join("cat-chat/data/train-00000-of-00001.parquet")).unwrap();
    fake.add_dataset("tiny/chat", C1, vec![("data/train-00000-of-00001.parquet".into(), chat)], &["main"]);
    let (s, cache) = server("hub-dataset", &fake.url, &[]);
    let rows: Value = serde_json::from_str(&std::fs::read_to_string(fx.join("rows.json")).unwrap()).unwrap();

    let (code, ds) = s.post("/api/datasets?hub=tiny/cats&split=validation&validation=0", "");
    assert_eq!(code, 201, "{ds}");
    assert_eq!((ds["name"].as_str(), ds["format"].as_str()), (Some("tiny/cats:validation"), Some("text")), "{ds}");
    assert_eq!(ds["records"], 1);
    let (code, ds) = s.post("/api/datasets?hub=tiny/cats&validation=0", "");
    assert_eq!((code, ds["records"].as_u64()), (201, Some(3)), "{ds}");
    let (_, shown) = s.call("GET", &format!("/api/datasets/{}?rows=3", ds["id"].as_str().unwrap()), "");
    let texts: Vec<&Value> = shown["rows"].as_array().unwrap().iter().map(|r| &r["text"]).collect();
    let want: Vec<&Value> = rows["cat-text"]["train"].as_array().unwrap().iter().collect();
    assert_eq!(texts, want, "{shown}");
    let snap = cache.join("datasets--tiny--cats/snapshots").join(C1).join("data/train-00000-of-00001.parquet");
    assert!(snap.is_file(), "{} is where huggingface_hub puts it", snap.display());
    assert!(!cache.join("datasets--tiny--cats/snapshots").join(C1).join("README.md").exists(), "only the split's data");

    let (code, chat) = s.post("/api/datasets?hub=tiny/chat&validation=0", "");
    assert_eq!((code, chat["format"].as_str()), (201, Some("messages")), "{chat}");

    let (code, bad) = s.post("/api/datasets?hub=tiny/cats&split=test", "");
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("split")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("its splits: train, validation"), "{bad}");
    let (code, bad) = s.post("/api/datasets?hub=tiny/none", "");
    assert_eq!(code, 404, "{bad}");
    let (code, bad) = s.post("/api/datasets?hub=tiny/cats", "{\"text\": \"x\"}");
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("hub")), "{bad}");
    assert!(fake.requests().iter().any(|r| r.0.starts_with("/api/datasets/tiny/cats/revision/main")));
}
