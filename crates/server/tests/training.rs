//! Training through the real server: a dataset uploaded and checked line by line, the seed's chat model
//! (`u:the cat?|a:on the mat.|`, `|` as its end token) trained from scratch as a job whose progress streams as
//! events, then asked through `/v1/chat/completions` as `trained:NAME`, scored by a prompt suite run as an eval job
//! through the scheduler, and benchmarked; a benchmark refused while a job runs, naming it; a cancelled job.

mod common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

const TEMPLATE: &str =
    "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}|{% endfor %}{% if add_generation_prompt %}a:{% endif %}";

fn upload(s: &common::Server, name: &str, body: &str) -> (u16, Value) {
    let r = ureq::post(&format!("{}/api/datasets?name={name}&validation=0", s.url)).send_string(body);
    match r {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
        Err(e) => panic!("{e}"),
    }
}

/// Every event of a job, read from its SSE stream until the last.
fn follow(s: &common::Server, id: &str) -> Vec<Value> {
    let r = ureq::get(&format!("{}/api/jobs/{id}/events", s.url)).call().unwrap();
    BufReader::new(r.into_reader())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("data: ").map(|d| serde_json::from_str(d).unwrap()))
        .collect()
}

/// Reads a running job's events until one of type `kind`.
fn wait_for(s: &common::Server, id: &str, kind: &str) {
    let r = ureq::get(&format!("{}/api/jobs/{id}/events", s.url)).call().unwrap();
    let want = format!("\"type\":\"{kind}\"");
    if !BufReader::new(r.into_reader())
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("data: ") && l.contains(&want))
    {
        panic!("job {id} ended before a {kind} event");
    }
}

/// Reads a running job's events until its first checkpoint, then cancels it.
fn cancel_after_checkpoint(s: &common::Server, id: &str) {
    wait_for(s, id, "checkpoint");
    let (code, c) = s.call("DELETE", &format!("/api/jobs/{id}"), "");
    assert_eq!((code, c["cancelling"].as_bool()), (200, Some(true)), "{c}");
}

fn gpt_config() -> Value {
    json!({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 2,
           "n_head": 2, "n_positions": 128, "eos_token_id": 124})
}

#[test]
fn a_chat_model_trained_as_a_job_answers_through_chat_completions() {
    let kvad = std::env::temp_dir().join(format!("kvad-training-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&kvad);
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama-tied");
    let s = common::start_env(
        "training",
        &["--model", fixture.to_str().unwrap(), "--backend", "cpu-f32"],
        &[("KVAD_CACHE", kvad.to_str().unwrap())],
    );

    let (code, v) =
        upload(&s, "bad.jsonl", "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n{\"text\": 1}\n");
    assert_eq!(code, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("line 1: field messages[0].role") && msg.contains("line 2: field text"), "{msg}");
    let (_, list) = s.call("GET", "/api/datasets", "");
    assert_eq!(list["data"], json!([]), "a bad file keeps nothing");

    let line =
        json!({"messages": [{"role": "user", "content": "the cat?"}, {"role": "assistant", "content": "on the mat."}]});
    let (code, ds) = upload(&s, "chat.jsonl", &format!("{line}\n"));
    assert_eq!(code, 201, "{ds}");
    assert_eq!((ds["format"].as_str(), ds["records"].as_u64()), (Some("messages"), Some(1)));
    let id = ds["id"].as_str().unwrap().to_string();

    let job = json!({"kind": "train", "output": "cat-chat", "config": gpt_config(), "tokenizer": "bytes", "eos": "|",
                     "chat_template": TEMPLATE, "dataset": id, "steps": 150, "lr": 0.01, "warmup": 5, "batch": 4,
                     "seq_len": 32, "weight_decay": 0.0});
    let (code, bad) = s.post("/api/jobs", &json!({"kind": "train", "output": "x", "dataset": id}).to_string());
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("model")), "{bad}");
    let (code, bad) = s.post("/api/jobs", &json!({"kind": "dance"}).to_string());
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("kind")), "{bad}");
    let (code, created) = s.post("/api/jobs", &job.to_string());
    assert_eq!(code, 201, "{created}");
    let job_id = created["id"].as_str().unwrap().to_string();
    let events = follow(&s, &job_id);
    let steps: Vec<&Value> = events.iter().filter(|e| e["type"] == "step").collect();
    assert_eq!(steps.len(), 150, "{:?}", events.last());
    let last = events.last().unwrap();
    assert_eq!((last["type"].as_str(), last["state"].as_str()), (Some("state"), Some("done")), "{last}");
    assert!(steps[149]["loss"].as_f64().unwrap() < 0.05, "{}", steps[149]);
    let (_, shown) = s.call("GET", &format!("/api/jobs/{job_id}"), "");
    assert_eq!((shown["state"].as_str(), shown["result"]["model"].as_str()), (Some("done"), Some("trained:cat-chat")));
    let (code, again) = s.post("/api/jobs", &job.to_string());
    assert_eq!((code, again["error"]["param"].as_str()), (409, Some("output")), "{again}");

    let ask = json!({"model": "trained:cat-chat", "messages": [{"role": "user", "content": "the cat?"}],
                     "temperature": 0, "max_tokens": 20});
    let (code, reply) = s.post("/v1/chat/completions", &ask.to_string());
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["content"], "on the mat.", "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop", "{reply}");

    // A prompt suite through the scheduler: the trained model gets it right; a model with no chat template is
    // refused rather than scored empty.
    let suite = "{\"prompt\": \"the cat?\", \"expected\": \"on the mat.\"}\n\
                 {\"prompt\": \"the cat?\", \"expected\": \"mat\", \"scorer\": \"contains\"}\n\
                 {\"prompt\": \"the cat?\", \"expected\": \"dog\", \"scorer\": \"contains\"}\n";
    let (code, suite) = upload(&s, "suite.jsonl", suite);
    assert_eq!((code, suite["format"].as_str()), (201, Some("suite")), "{suite}");
    let suite_id = suite["id"].as_str().unwrap();
    let (code, bad) = s.post(
        "/api/jobs",
        &json!({"kind": "eval", "dataset": suite_id, "models": [fixture.to_str().unwrap()]}).to_string(),
    );
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("models[0]")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("no chat template"), "{bad}");
    let (code, bad) = s.post(
        "/api/jobs",
        &json!({"kind": "train", "output": "y", "dataset": suite_id, "config": gpt_config()}).to_string(),
    );
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("dataset")), "{bad}");
    let eval = json!({"kind": "eval", "dataset": suite_id, "models": ["trained:cat-chat"], "max_tokens": 20});
    let (code, created) = s.post("/api/jobs", &eval.to_string());
    assert_eq!(code, 201, "{created}");
    let eval_id = created["id"].as_str().unwrap().to_string();
    let events = follow(&s, &eval_id);
    let last = events.last().unwrap();
    assert_eq!(last["state"], "done", "{last}");
    assert_eq!(last["result"]["models"][0]["correct"], 2, "{last}");
    let (_, items) = s.call("GET", &format!("/api/jobs/{eval_id}/items"), "");
    let got: Vec<(String, bool)> = items["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["answer"].as_str().unwrap().to_string(), i["correct"].as_bool().unwrap()))
        .collect();
    assert_eq!(got, vec![("on the mat.".into(), true), ("on the mat.".into(), true), ("on the mat.".into(), false)]);
    // One model on two backends, side by side: each placed through the queue in turn, and said so.
    let models = ["trained:cat-chat@cpu-q8", "trained:cat-chat@cpu-f32"];
    let (code, created) = s.post(
        "/api/jobs",
        &json!({"kind": "eval", "dataset": suite_id, "models": models, "max_tokens": 20}).to_string(),
    );
    assert_eq!(code, 201, "{created}");
    let events = follow(&s, created["id"].as_str().unwrap());
    let placed: Vec<&str> =
        events.iter().filter(|e| e["type"] == "placed").map(|e| e["did"].as_str().unwrap()).collect();
    assert_eq!(
        placed,
        vec![
            "unloaded trained:cat-chat@cpu-f32, then loaded trained:cat-chat@cpu-q8",
            "unloaded trained:cat-chat@cpu-q8, then loaded trained:cat-chat@cpu-f32"
        ]
    );
    let result = &events.last().unwrap()["result"]["models"];
    assert_eq!(result[0]["model"], models[0], "{result}");
    assert_eq!((result[1]["model"].as_str(), result[1]["correct"].as_u64()), (Some(models[1]), Some(2)), "{result}");
    assert_eq!(result[0]["total"], 3, "{result}");
    let (_, ps) = s.call("GET", "/api/ps", "");
    assert_eq!(ps["models"][0]["name"], "trained:cat-chat@cpu-f32", "{ps}");
    let bench = ureq::post(&format!("{}/api/bench", s.url))
        .send_string(&json!({"models": ["trained:cat-chat"], "rounds": 1, "max_tokens": 4}).to_string())
        .unwrap()
        .into_string()
        .unwrap();
    assert!(bench.contains("event: done"), "{bench}");

    // A long run: a benchmark is refused while it goes, naming it; cancelled, it says so.
    let mut long = job.clone();
    long["output"] = json!("long");
    long["steps"] = json!(1_000_000);
    long["save_every"] = json!(40);
    let (code, created) = s.post("/api/jobs", &long.to_string());
    assert_eq!(code, 201, "{created}");
    let long_id = created["id"].as_str().unwrap().to_string();
    let (code, refused) = s.post("/api/bench", &json!({"models": ["trained:cat-chat"], "rounds": 1}).to_string());
    assert_eq!(code, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains(&long_id), "{refused}");
    // Chat beside it: the queue's view says what the run costs replies, measured on the replies since it started
    // against the same model's before it (the Chat page's "slower" banner).
    wait_for(&s, &long_id, "step");
    let mut ask_long = ask.clone();
    ask_long["max_tokens"] = json!(8);
    ask_long["ignore_eos"] = json!(true);
    let (code, reply) = s.post("/v1/chat/completions", &ask_long.to_string());
    assert_eq!(code, 200, "{reply}");
    let (_, queue) = s.call("GET", "/api/queue", "");
    let beside = &queue["jobs"][0];
    assert_eq!((beside["id"].as_str(), beside["kind"].as_str()), (Some(long_id.as_str()), Some("train")), "{queue}");
    let chat = &beside["chat"];
    assert_eq!((chat["model"].as_str(), chat["replies"].as_u64()), (Some("trained:cat-chat"), Some(1)), "{chat}");
    assert!(chat["replies_before"].as_u64().unwrap() >= 1, "{chat}");
    let (now, then) = (chat["decode_tps"].as_f64().unwrap(), chat["decode_tps_before"].as_f64().unwrap());
    assert!((chat["ratio"].as_f64().unwrap() - now / then).abs() < 1e-9 && now > 0.0, "{chat}");
    let (code, early) = s.post(&format!("/api/jobs/{long_id}/resume"), "");
    assert_eq!((code, early["error"]["param"].as_str()), (409, Some("id")), "a running job does not resume: {early}");
    // Cancelled once it has a checkpoint, it keeps it; resumed, a new job goes on from that step.
    cancel_after_checkpoint(&s, &long_id);
    let events = follow(&s, &long_id);
    assert_eq!(events.last().unwrap()["state"], "cancelled", "{:?}", events.last());
    let saved: Vec<u64> =
        events.iter().filter(|e| e["type"] == "checkpoint").map(|e| e["step"].as_u64().unwrap()).collect();
    let (code, resumed) = s.post(&format!("/api/jobs/{long_id}/resume"), "");
    assert_eq!(code, 201, "{resumed}");
    assert!(resumed["spec"]["resumed"]["checkpoint"]
        .as_str()
        .unwrap()
        .ends_with(&format!("checkpoint-{}", saved.last().unwrap())));
    let again = resumed["id"].as_str().unwrap().to_string();
    cancel_after_checkpoint(&s, &again);
    let events = follow(&s, &again);
    let start = events.iter().find(|e| e["type"] == "start").unwrap();
    assert_eq!(start["from_step"].as_u64(), saved.last().copied(), "{start}");
    let first = events.iter().find(|e| e["type"] == "step").unwrap();
    assert_eq!(first["step"].as_u64(), saved.last().copied(), "the first step after the checkpoint's: {first}");
    assert_eq!(events.last().unwrap()["state"], "cancelled");
    let (code, done) = s.post(&format!("/api/jobs/{job_id}/resume"), "");
    assert_eq!((code, done["error"]["param"].as_str()), (409, Some("id")), "a finished run does not resume: {done}");
    let (_, jobs) = s.call("GET", "/api/jobs", "");
    let states: Vec<&str> = jobs["data"].as_array().unwrap().iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert_eq!(states, vec!["cancelled", "cancelled", "done", "done", "done"]);
    let (code, _) = s.call("GET", "/api/jobs/job_nope", "");
    assert_eq!(code, 404);
    // Another account sees none of it: each route answers as for no such job or dataset.
    let as_bob = |method: &str, path: &str| match ureq::request(method, &format!("{}{path}", s.url))
        .set("x-kvad-account", "bob")
        .call()
    {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(as_bob("GET", "/api/jobs").1.replace(' ', ""), "{\"object\":\"list\",\"data\":[]}");
    assert_eq!(as_bob("GET", "/api/datasets").1.replace(' ', ""), "{\"object\":\"list\",\"data\":[]}");
    for (m, p) in [
        ("GET", format!("/api/jobs/{job_id}")),
        ("GET", format!("/api/jobs/{job_id}/events")),
        ("GET", format!("/api/jobs/{eval_id}/items")),
        ("DELETE", format!("/api/jobs/{job_id}")),
        ("POST", format!("/api/jobs/{long_id}/resume")),
        ("GET", format!("/api/datasets/{id}")),
        ("DELETE", format!("/api/datasets/{id}")),
    ] {
        assert_eq!(as_bob(m, &p).0, 404, "{m} {p}");
    }
    let (code, v) = s.call("DELETE", &format!("/api/datasets/{id}"), "");
    assert_eq!((code, v["deleted"].as_bool()), (200, Some(true)));
    drop(s);
    let _ = std::fs::remove_dir_all(&kvad);
}

/// The seed's test: the two-layer GPT trained on "the cat sat on the mat" inside the test, then a prompt suite
/// (refused: the model has no chat template, so its answers would be scored empty), a benchmark and a perplexity
/// job against it through the real scheduler.
#[test]
fn the_seed_s_cat_gpt_is_benchmarked_and_scored_through_the_scheduler() {
    let kvad = std::env::temp_dir().join(format!("kvad-training-cat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&kvad);
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama-tied");
    let s = common::start_env(
        "training-cat",
        &["--model", fixture.to_str().unwrap(), "--backend", "cpu-f32"],
        &[("KVAD_CACHE", kvad.to_str().unwrap())],
    );
    let (code, ds) = upload(&s, "cat.jsonl", "{\"text\": \"the cat sat on the mat\"}\n");
    assert_eq!((code, ds["format"].as_str()), (201, Some("text")), "{ds}");
    let cat = ds["id"].as_str().unwrap().to_string();
    let (_, other) = upload(&s, "dog.txt", "a dog ran through the park\n\nquick brown foxes jump\n");
    let other = other["id"].as_str().unwrap().to_string();
    let mut cfg = gpt_config();
    cfg["eos_token_id"] = json!(256);
    let job = json!({"kind": "train", "output": "cat", "config": cfg, "tokenizer": "bytes", "dataset": cat,
                     "steps": 120, "lr": 0.01, "warmup": 5, "batch": 4, "seq_len": 32, "weight_decay": 0.0});
    let (code, created) = s.post("/api/jobs", &job.to_string());
    assert_eq!(code, 201, "{created}");
    let events = follow(&s, created["id"].as_str().unwrap());
    assert_eq!(events.last().unwrap()["state"], "done", "{:?}", events.last());

    let suite = "{\"prompt\": \"the cat\", \"expected\": \"sat\", \"scorer\": \"contains\"}\n";
    let (_, suite) = upload(&s, "suite.jsonl", suite);
    let eval = json!({"kind": "eval", "dataset": suite["id"], "models": ["trained:cat"]});
    let (code, bad) = s.post("/api/jobs", &eval.to_string());
    assert_eq!((code, bad["error"]["param"].as_str()), (400, Some("models[0]")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("no chat template"), "{bad}");

    // A benchmark as a job: its samples are the job's events, its summary the job's result.
    let bench = json!({"kind": "bench", "models": ["trained:cat"], "rounds": 2, "max_tokens": 8});
    let (code, created) = s.post("/api/jobs", &bench.to_string());
    assert_eq!(code, 201, "{created}");
    let events = follow(&s, created["id"].as_str().unwrap());
    assert_eq!(events.iter().filter(|e| e["type"] == "sample").count(), 2, "{events:?}");
    let last = events.last().unwrap();
    assert_eq!(last["state"], "done", "{last}");
    let summary = &last["result"]["summary"][0];
    assert_eq!((summary["model"].as_str(), summary["samples"].as_u64()), (Some("trained:cat"), Some(2)), "{last}");
    assert!(summary["decode_tps"]["median"].as_f64().unwrap() > 0.0, "{last}");

    // Perplexity: the sentence it learned is no surprise to it; other text is.
    let ppl = |dataset: &str| {
        let (code, created) =
            s.post("/api/jobs", &json!({"kind": "perplexity", "model": "trained:cat", "dataset": dataset}).to_string());
        assert_eq!(code, 201, "{created}");
        let events = follow(&s, created["id"].as_str().unwrap());
        let last = events.last().unwrap().clone();
        assert_eq!(last["state"], "done", "{last}");
        assert!(events.iter().any(|e| e["type"] == "step"), "{events:?}");
        last["result"].clone()
    };
    let seen = ppl(&cat);
    let unseen = ppl(&other);
    assert_eq!(seen["backend"], "cpu-f32", "{seen}");
    assert_eq!((seen["documents"].as_u64(), unseen["documents"].as_u64()), (Some(1), Some(2)));
    // Byte-level with no start token added: every byte a token, each after the first scored.
    assert_eq!(seen["tokens"].as_u64(), Some("the cat sat on the mat".len() as u64 - 1), "{seen}");
    let (a, b) = (seen["perplexity"].as_f64().unwrap(), unseen["perplexity"].as_f64().unwrap());
    assert!(a < 1.3 && b > 4.0 * a, "perplexity {a} on its sentence, {b} on other text");
    for (body, field) in [
        (json!({"kind": "perplexity", "model": "trained:cat", "dataset": suite["id"]}), "dataset"),
        (json!({"kind": "perplexity", "model": "trained:cat", "dataset": cat, "split": "test"}), "split"),
        (json!({"kind": "perplexity", "model": "trained:cat", "dataset": cat, "window": 1}), "window"),
        (json!({"kind": "perplexity", "model": "nope", "dataset": cat}), "model"),
        (json!({"kind": "perplexity", "model": "trained:cat", "dataset": cat, "split": "validation"}), "split"),
    ] {
        let (code, bad) = s.post("/api/jobs", &body.to_string());
        assert_eq!((code, bad["error"]["param"].as_str()), (400, Some(field)), "{body}: {bad}");
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&kvad);
}
