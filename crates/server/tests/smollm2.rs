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
    // `ignore_eos` (vLLM's field, what load generators send): the same reply goes on past its end token.
    let (code, long) = real.post(
        "/v1/chat/completions",
        &json!({"model": "smollm2-instruct", "temperature": 0, "max_tokens": 20, "ignore_eos": true,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        .to_string(),
    );
    assert_eq!(code, 200, "{long}");
    assert_eq!(long["usage"]["completion_tokens"], 20, "{long}");
    assert_eq!(long["choices"][0]["finish_reason"], "length", "{long}");
    let text = long["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("The capital of France is Paris.") && text.len() > 31, "{text:?}");
    let (code, bad) = real.post(
        "/v1/chat/completions",
        &json!({"model": "smollm2-instruct", "ignore_eos": "yes", "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
    );
    assert_eq!(code, 400, "{bad}");
    assert!(bad.to_string().contains("ignore_eos"), "{bad}");
    let (_, models) = real.get("/v1/models");
    assert!(models.contains("\"loaded\":true"), "{models}");
    // No backend configured: the one `kvad run` picks for this model on this machine (gpu-q8 where the GPU runs
    // it, else cpu-q8), asked of the same function, and the model is on it.
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let want = kvad_engine::system::default_backend_for("smollm2-instruct").0.to_string();
    assert_eq!(models["data"][0]["default_backend"], json!(want), "{models}");
    assert_eq!(models["data"][0]["backend"], json!(want), "{models}");

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
    // A prompt of a megabyte is refused by its size, before it is tokenised (it held the engine thread, and every
    // stream on it, most of a second).
    let (code, big) = real.post(
        "/v1/chat/completions",
        &json!({"model": "smollm2-instruct", "max_tokens": 1,
                "messages": [{"role": "user", "content": "word ".repeat(200_000)}]})
        .to_string(),
    );
    assert_eq!((code, big["error"]["param"].as_str()), (400, Some("messages")), "{big}");
    assert!(big["error"]["message"].as_str().unwrap().contains("the prompt is 1000000 bytes"), "{big}");
}

fn chat(s: &common::Server, messages: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({"model": "smollm2-instruct", "temperature": 0, "max_tokens": 24, "messages": messages});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (code, v) = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(code, 200, "{v}");
    v
}

fn content(v: &serde_json::Value) -> String {
    v["choices"][0]["message"]["content"].as_str().unwrap().to_string()
}

/// Four questions asked alone ("cache": false runs with nobody beside, from an empty cache) and then all at once;
/// each reply written beside others must be the reply written alone.
fn batched_replies_equal_alone(s: &common::Server, backend: &str) -> Vec<String> {
    let questions =
        ["What is the capital of France?", "Name three colours.", "What is 2 + 2?", "Say hello in Spanish."];
    let user = |q: &str| json!([{"role": "user", "content": q}]);
    let alone: Vec<String> = questions.iter().map(|q| content(&chat(s, user(q), json!({"cache": false})))).collect();
    let url = s.url.clone();
    let handles: Vec<_> = questions
        .iter()
        .map(|q| {
            let body = json!({"model": "smollm2-instruct", "temperature": 0, "max_tokens": 24, "messages": user(q)});
            let url = url.clone();
            std::thread::spawn(move || -> serde_json::Value {
                ureq::post(&format!("{url}/v1/chat/completions")).send_json(body).unwrap().into_json().unwrap()
            })
        })
        .collect();
    let together: Vec<serde_json::Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (v, a) in together.iter().zip(&alone) {
        assert_eq!(&content(v), a, "the same reply beside others as alone at {backend}: {v}");
    }
    let beside: Vec<u64> = together.iter().map(|v| v["kvad"]["beside"].as_u64().unwrap()).collect();
    assert!(beside.iter().any(|&b| b >= 2), "they were written together: {beside:?}");
    alone
}

/// At cpu-q8 with i16 activations (`KVAD_NO_VNNI=1`, and every processor without VNNI) a step of several
/// replies runs the few-row GEMV whose every row is the one-row GEMV's bits, and a joining prompt is read in a pass
/// of its own: batching must not change a reply, bit for bit. (With VNNI, AVX-VNNI or AVX-512 VNNI, passes of
/// several replies take 8-bit activations and may differ from replies alone, as the seed allows for i8mm; that
/// kernel's error is bounded in
/// `kvad_tensor::cpu::gemv_rows8`'s tests.)
#[test]
fn smollm2_batched_replies_equal_alone_at_q8() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let s = common::start_env(
        "smollm2-sched-q8",
        &["--model", "smollm2-instruct", "--backend", "cpu-q8"],
        &[("KVAD_NO_VNNI", "1")],
    );
    batched_replies_equal_alone(&s, "cpu-q8");
}

/// The scheduler on the real model at f32: a reply written beside others is the reply written alone; a second turn
/// reads only its new message; two conversations taking turns keep both caches.
#[test]
fn smollm2_batched_replies_equal_alone_and_conversations_are_kept() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let s = common::start("smollm2-sched", &["--model", "smollm2-instruct", "--backend", "cpu-f32"]);
    let user = |q: &str| json!([{"role": "user", "content": q}]);
    let alone = batched_replies_equal_alone(&s, "cpu-f32");

    // Two conversations taking turns: each second turn finds its own first turn kept.
    let mut turns = Vec::new();
    for q in ["Tell me about cats.", "Tell me about rivers."] {
        let v = chat(&s, user(q), json!({}));
        turns.push((q, content(&v), v["usage"]["prompt_tokens"].as_u64().unwrap()));
    }
    for (q, reply, first_prompt) in &turns {
        let msgs = json!([{"role": "user", "content": q}, {"role": "assistant", "content": reply},
                          {"role": "user", "content": "And one more thing?"}]);
        let v = chat(&s, msgs, json!({}));
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(
            cached >= *first_prompt && cached < prompt,
            "{q}: cached {cached} of {prompt} (first turn {first_prompt})"
        );
        assert!(v["kvad"]["conversations"].as_u64().unwrap() >= 2, "{v}");
        assert!(v["kvad"]["held_tokens"].as_u64().unwrap() >= cached, "{v}");
    }
    // The same request twice at temperature 0 is the same reply, the second read from the cache.
    let again = chat(&s, user("What is the capital of France?"), json!({}));
    assert_eq!(content(&again), alone[0]);
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{again}");
    let ps: serde_json::Value = serde_json::from_str(&s.get("/api/ps").1).unwrap();
    assert_eq!(ps["models"][0]["name"], "smollm2-instruct@cpu-f32", "{ps}");
    assert!(ps["models"][0]["conversations"].as_u64().unwrap() >= 2, "{ps}");
}

/// A backend per model with the real model: the server's default is cpu-f32 and the load names cpu-q8, so the reply
/// comes from the q8 weights, `/api/ps` names `smollm2-instruct@cpu-q8` and charges what q8 holds (a quarter of
/// f32's weights); while it is loaded another backend is a 409 naming cpu-q8, an unknown one a 400 naming it; a GPU
/// backend on a machine without a GPU is refused with the engine's own reason. The backend a load named is the
/// model's from then on (a load naming none, a request), across a restart with another `[server] backend`.
#[test]
fn smollm2_loads_on_the_backend_its_load_names() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let s =
        common::start("smollm2-backend", &["--model", "smollm2-instruct", "--backend", "cpu-f32", "--context", "1024"]);
    let load = |b: Option<&str>| {
        let mut body = json!({"model": "smollm2-instruct"});
        if let Some(b) = b {
            body["backend"] = json!(b);
        }
        s.post("/api/load", &body.to_string())
    };
    let ps = || -> serde_json::Value { serde_json::from_str(&s.get("/api/ps").1).unwrap() };

    let (code, v) = load(Some("gpu-q8"));
    if code == 200 {
        assert_eq!(ps()["models"][0]["name"], "smollm2-instruct@gpu-q8", "a machine with a GPU");
        assert_eq!(s.post("/api/unload", &json!({"all": true}).to_string()).0, 200);
    } else {
        assert_eq!((code, v["error"]["param"].as_str()), (400, Some("backend")), "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("backend = \"gpu-q8\"") && msg.contains("GPU"), "{msg}");
        assert!(ps()["models"].as_array().unwrap().is_empty(), "{msg}");
    }

    let (code, v) = load(Some("cpu-q8"));
    assert_eq!((code, &v["backend"]), (200, &json!("cpu-q8")), "{v}");
    let reply = chat(&s, json!([{"role": "user", "content": "What is the capital of France?"}]), json!({}));
    assert!(content(&reply).contains("Paris"), "{reply}");
    let p = ps();
    assert_eq!(p["models"].as_array().unwrap().len(), 1, "{p}");
    assert_eq!(p["models"][0]["name"], "smollm2-instruct@cpu-q8", "{p}");
    let q8 = p["models"][0]["charged_bytes"].as_u64().unwrap();
    // SmolLM2-135M: 30 layers of keys and values, 3 KV heads of 64, f16 at cpu-q8.
    assert_eq!(p["models"][0]["cache_bytes_per_token"], 30 * 2 * 3 * 64 * 2, "{p}");
    let db = rusqlite::Connection::open(s.dir.join("kvad.db")).unwrap();
    let ran: String = db.query_row("SELECT backend FROM requests", [], |r| r.get(0)).unwrap();
    assert_eq!(ran, "cpu-q8");

    for (b, status, words) in [("cpu-f32", 409, "is loaded on cpu-q8"), ("cpu-q5", 400, "\"cpu-q5\"")] {
        let (code, e) = load(Some(b));
        assert_eq!((code, e["error"]["param"].as_str()), (status, Some("backend")), "{b}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(words), "{b}: {e}");
    }
    assert_eq!(load(Some("cpu-q8")).0, 200, "where it is: nothing to do");

    // Unloaded, a load naming no backend takes the one the last load named (the stored choice wins over
    // `[server] backend`, cpu-f32 here), and so does a request for the model.
    let unload = || assert_eq!(s.post("/api/unload", &json!({"model": "smollm2-instruct"}).to_string()).0, 200);
    unload();
    assert_eq!(load(None).1["backend"], "cpu-q8");
    unload();
    let reply = chat(&s, json!([{"role": "user", "content": "What is the capital of France?"}]), json!({}));
    assert!(content(&reply).contains("Paris"), "{reply}");
    assert_eq!(ps()["models"][0]["name"], "smollm2-instruct@cpu-q8");
    // f32, named, is charged for f32 weights, and becomes the choice.
    unload();
    assert_eq!(load(Some("cpu-f32")).1["backend"], "cpu-f32");
    let p = ps();
    assert_eq!(p["models"][0]["name"], "smollm2-instruct@cpu-f32", "{p}");
    let f32 = p["models"][0]["charged_bytes"].as_u64().unwrap();
    assert!(f32 > q8 + 300_000_000, "f32 weights (~540 MB) against q8's (~145 MB): {f32} vs {q8}");
    assert_eq!(p["models"][0]["cache_bytes_per_token"], 30 * 2 * 3 * 64 * 4, "cpu-f32 keeps f32 keys: {p}");
    // Remembered across a restart, over the `[server] backend` the new server is started with (and caldrix's
    // names for two flags: `--max-batch` is `--batch`; `--ctx` is `--context`, a model charged for no more than
    // its own context).
    let s = s.restart(&["--model", "smollm2-instruct", "--backend", "cpu-q4", "--ctx", "100000", "--max-batch", "2"]);
    let settings: serde_json::Value = serde_json::from_str(&s.get("/api/settings").1).unwrap();
    let sv = &settings["server"];
    assert_eq!((&sv["batch"], &sv["context"]), (&json!(2), &json!(100000)), "{settings}");
    let (_, models) = s.get("/v1/models");
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["default_backend"], "cpu-f32", "{models}");
    let reply = chat(&s, json!([{"role": "user", "content": "What is the capital of France?"}]), json!({}));
    assert!(content(&reply).contains("Paris"), "{reply}");
    let p: serde_json::Value = serde_json::from_str(&s.get("/api/ps").1).unwrap();
    assert_eq!(p["models"][0]["name"], "smollm2-instruct@cpu-f32", "{p}");
    // SmolLM2-135M's context_length: [server] context above it charges the model's own.
    assert_eq!(p["models"][0]["context"], 8192, "{p}");
}

/// Greedy steps run ahead for a reply stepping alone (`KVAD_GREEDY_AHEAD=5`; a GPU runs 8 by default, the CPU 1,
/// so here the steps run one by one through the engine's same bookkeeping) against a server stepping a token at a
/// time: the same replies, usage and conversations held — a reply cut by max_tokens between runs ahead, ones stopped
/// by the end of text and by a stop string inside a run (the picks past it leave the cache: the held tokens say
/// so), the next turn read from that kept conversation, and replies written together (one may hold picks while the
/// other steps).
#[test]
fn smollm2_greedy_steps_ahead_equal_steps_one_at_a_time() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let args = ["--model", "smollm2-instruct", "--backend", "cpu-q8"];
    let one = common::start_env("ahead-1", &args, &[("KVAD_NO_VNNI", "1"), ("KVAD_GREEDY_AHEAD", "1")]);
    let five = common::start_env("ahead-5", &args, &[("KVAD_NO_VNNI", "1"), ("KVAD_GREEDY_AHEAD", "5")]);
    let user = |q: &str| json!([{"role": "user", "content": q}]);
    // The same request to both: the same reply, token counts, finish and conversations held.
    let both = |msgs: serde_json::Value, extra: serde_json::Value| {
        let (a, b) = (chat(&one, msgs.clone(), extra.clone()), chat(&five, msgs, extra));
        assert_eq!(content(&a), content(&b), "{a}\n{b}");
        assert_eq!(a["choices"][0]["finish_reason"], b["choices"][0]["finish_reason"], "{a}\n{b}");
        assert_eq!(a["usage"], b["usage"], "{a}\n{b}");
        assert_eq!(a["kvad"]["held_tokens"], b["kvad"]["held_tokens"], "{a}\n{b}");
        a
    };
    let q = "Tell me about cats.";
    let v = both(user(q), json!({"max_tokens": 23}));
    assert_eq!(v["usage"]["completion_tokens"], 23, "{v}");
    // The end of text inside a run ahead.
    let v = both(user("What is the capital of France?"), json!({"max_tokens": 23}));
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let full = content(&both(user(q), json!({"max_tokens": 40, "cache": false})));
    let words: Vec<&str> = full.split_whitespace().collect();
    let stop = words[words.len() / 2];
    let stopped = both(user(q), json!({"max_tokens": 40, "stop": [stop]}));
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop", "{stopped}");
    assert!(content(&stopped).len() < full.len(), "stopped at {stop:?}: {stopped}");
    let next = json!([{"role": "user", "content": q}, {"role": "assistant", "content": content(&stopped)},
                      {"role": "user", "content": "And dogs?"}]);
    let v = both(next, json!({}));
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{v}");
    batched_replies_equal_alone(&five, "cpu-q8, steps ahead");
}

/// The perplexity job on the real model equals transformers' figure (fixtures/goldens/smollm2_ppl.json, from
/// scripts/reference/ppl_ref.py) on the committed public-domain text, read as a plain-text dataset: the same
/// documents, the same tokens, the perplexity within 0.5%.
#[test]
fn smollm2_perplexity_job_equals_transformers() {
    kvad_hub::ensure_smollm2().expect("the default model");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("fixtures/goldens/smollm2_ppl.json")).unwrap())
            .unwrap();
    let text = std::fs::read_to_string(root.join("fixtures/text/public-domain.txt")).unwrap();
    let s = common::start("smollm2-ppl", &["--model", "smollm2-instruct", "--backend", "cpu-f32"]);
    let ds: serde_json::Value = ureq::post(&format!("{}/api/datasets?name=public-domain.txt&validation=0", s.url))
        .send_string(&text)
        .unwrap()
        .into_json()
        .unwrap();
    assert_eq!(ds["format"], "plain", "{ds}");
    let job = json!({"kind": "perplexity", "model": "smollm2-instruct", "dataset": ds["id"]});
    let (code, created) = s.post("/api/jobs", &job.to_string());
    assert_eq!(code, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let r = ureq::get(&format!("{}/api/jobs/{id}/events", s.url)).call().unwrap();
    let last: serde_json::Value = std::io::BufRead::lines(std::io::BufReader::new(r.into_reader()))
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("data: ").map(|d| serde_json::from_str(d).unwrap()))
        .last()
        .unwrap();
    assert_eq!(last["state"], "done", "{last}");
    let (got, want) = (&last["result"], &golden["documents"]);
    assert_eq!(got["backend"], "cpu-f32", "{got}");
    assert_eq!(
        (got["documents"].as_u64(), got["tokens"].as_u64()),
        (want["documents"].as_u64(), want["tokens"].as_u64())
    );
    let (p, q) = (got["perplexity"].as_f64().unwrap(), want["ppl"].as_f64().unwrap());
    eprintln!("perplexity: kvad {p:.5}, transformers {q:.5}");
    assert!((p / q - 1.0).abs() < 0.005, "kvad {p} vs transformers {q}");
}
