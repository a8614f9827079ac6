//! The scheduler behind the real kvad-serve with the scripted engine (a forward pass costs `delay_ms` however many
//! replies it holds, as the weights are read once a step): many clients from several accounts, fair turns, the
//! queue's and each account's limits, cancellation in the line and mid-prefill, loads refused by memory, and what
//! `/api/queue`, `/api/ps`, `/api/metrics/usage` and `/metrics` say.

mod common;

use common::{scripted, Server};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const SLOW: &str = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
                    seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four";

/// POSTs as `account`; (status, Retry-After, body).
fn post_as(url: &str, account: &str, path: &str, body: &Value) -> (u16, Option<String>, Value) {
    let r = ureq::post(&format!("{url}{path}"))
        .set("x-kvad-account", account)
        .timeout(Duration::from_secs(120))
        .send_string(&body.to_string());
    match r {
        Ok(r) => (r.status(), r.header("retry-after").map(str::to_string), r.into_json().unwrap()),
        Err(ureq::Error::Status(c, r)) => {
            (c, r.header("retry-after").map(str::to_string), r.into_json().unwrap_or(Value::Null))
        }
        Err(e) => panic!("POST {path}: {e}"),
    }
}

fn slow(max_tokens: usize) -> Value {
    json!({"model": "slow-scripted", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "count"}]})
}

fn get_json(s: &Server, path: &str) -> Value {
    let (code, body) = s.get(path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until `f` holds (a state the server reaches), or fails saying what it waited for.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (account, finish_reason, generated, cached) in the order the requests ended (rows open at admission).
fn rows(s: &Server) -> Vec<(String, String, i64, i64)> {
    let db = rusqlite::Connection::open(s.dir.join("kvad.db")).unwrap();
    let mut st = db
        .prepare("SELECT account, finish_reason, generated_tokens, cached_tokens FROM requests ORDER BY ended_seq")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect()
}

#[test]
fn twenty_clients_from_five_accounts_all_complete_and_nobody_starves() {
    let s = scripted("twenty", &["--queue", "20"]);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(20));
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let (url, b) = (s.url.clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                post_as(&url, &format!("acct{}", i % 5), "/v1/chat/completions", &slow(8))
            })
        })
        .collect();
    let replies: Vec<(u16, Option<String>, Value)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Eight 3-character tokens of the script's reply, each.
    let want: String = SLOW.chars().take(24).collect();
    for (code, _, v) in &replies {
        assert_eq!(*code, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], want.as_str(), "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
    }
    let beside: Vec<u64> = replies.iter().map(|r| r.2["kvad"]["beside"].as_u64().unwrap()).collect();
    assert!(beside.iter().all(|&b| b <= 3), "a batch of 4 has at most 3 beside each: {beside:?}");
    assert!(beside.iter().filter(|&&b| b == 3).count() >= 8, "replies were written together: {beside:?}");
    let rows = rows(&s);
    assert_eq!(rows.len(), 20);
    // Turns: by the time any account has a second reply done, every account has had one started, so every account
    // is among the first two batches (eight replies) to finish.
    let first: std::collections::BTreeSet<&str> = rows[..8].iter().map(|r| r.0.as_str()).collect();
    assert_eq!(first.len(), 5, "{rows:?}");
    let usage = get_json(&s, "/api/metrics/usage?days=1");
    let per: Vec<(String, i64)> = usage["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["account"].as_str().unwrap().to_string(), a["requests"].as_i64().unwrap()))
        .collect();
    assert_eq!(per, (0..5).map(|i| (format!("acct{i}"), 4)).collect::<Vec<_>>());
    let (code, metrics) = s.get("/metrics");
    assert_eq!(code, 200);
    assert!(metrics.lines().any(|l| l == "kvad_requests_total{finish=\"length\"} 20"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "kvad_generated_tokens_total 160"), "{metrics}");
    assert!(metrics.contains("kvad_step_seconds_count"), "{metrics}");
}

#[test]
fn an_account_over_its_share_gets_429_and_a_full_queue_503() {
    let s = scripted("limits", &["--batch", "1", "--queue", "3", "--queue-per-account", "2"]);
    let url = s.url.clone();
    let spawn = |acct: &'static str| {
        let url = url.clone();
        std::thread::spawn(move || post_as(&url, acct, "/v1/chat/completions", &slow(20)).0)
    };
    let running = spawn("a");
    until("a's reply running", || get_json(&s, "/api/queue")["running"].as_array().unwrap().len() == 1);
    let waiting: Vec<_> = vec![spawn("a"), spawn("a")];
    until("two waiting", || get_json(&s, "/api/queue")["waiting"].as_array().unwrap().len() == 2);
    let (code, retry, v) = post_as(&url, "a", "/v1/chat/completions", &slow(20));
    assert_eq!((code, retry.as_deref()), (429, Some("1")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("queue_per_account = 2"), "{v}");
    // Another account may still queue, until the queue itself is full.
    let b = spawn("b");
    until("three waiting", || get_json(&s, "/api/queue")["waiting"].as_array().unwrap().len() == 3);
    let q = get_json(&s, "/api/queue");
    let whose: Vec<&str> = q["waiting"].as_array().unwrap().iter().map(|w| w["account"].as_str().unwrap()).collect();
    assert_eq!(whose, ["a", "a", "b"]);
    assert_eq!(q["next"], q["waiting"][2]["id"], "b was never served: its turn comes first");
    let (code, retry, v) = post_as(&url, "c", "/v1/chat/completions", &slow(20));
    assert_eq!((code, retry.as_deref()), (503, Some("1")), "{v}");
    let codes: Vec<u16> = std::iter::once(running).chain(waiting).chain([b]).map(|h| h.join().unwrap()).collect();
    assert_eq!(codes, [200, 200, 200, 200]);
}

#[test]
fn generations_per_minute_says_when_the_next_is_taken() {
    let s = scripted("perminute", &["--generations-per-minute", "2"]);
    let body = json!({"model": "smollm2-scripted", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        assert_eq!(post_as(&s.url, "a", "/v1/chat/completions", &body).0, 200);
    }
    let (code, retry, v) = post_as(&s.url, "a", "/v1/chat/completions", &body);
    assert_eq!(code, 429, "{v}");
    let secs: u64 = retry.unwrap().parse().unwrap();
    assert!((55..=60).contains(&secs), "{secs}");
    assert!(v["error"]["message"].as_str().unwrap().contains(&format!("taken in {secs} s")), "{v}");
    assert_eq!(post_as(&s.url, "b", "/v1/chat/completions", &body).0, 200, "per account");
    let (code, _, v) = post_as(&s.url, "bad name!", "/v1/chat/completions", &body);
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("x-kvad-account")), "{v}");
}

/// Sends a request by hand and reads the status line (or, without `wait_for_status`, waits 300 ms); dropping or
/// shutting down the returned socket hangs up.
fn send(s: &Server, body: &Value, wait_for_status: bool) -> std::net::TcpStream {
    let addr = s.url.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    write!(sock, "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
    if wait_for_status {
        let mut buf = [0u8; 12];
        sock.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
    } else {
        std::thread::sleep(Duration::from_millis(300));
    }
    sock
}

#[test]
fn cancelled_in_the_line_or_mid_prefill_frees_its_place() {
    let s = scripted("cancel-sched", &["--batch", "1"]);
    let url = s.url.clone();
    let first = std::thread::spawn(move || post_as(&url, "a", "/v1/chat/completions", &slow(24)).0);
    until("the first running", || get_json(&s, "/api/queue")["running"].as_array().unwrap().len() == 1);
    // Queued behind it, then gone: it leaves the line while the first still runs.
    send(&s, &slow(5), false).shutdown(std::net::Shutdown::Both).unwrap();
    until("the queued request gone", || get_json(&s, "/api/queue")["waiting"].as_array().unwrap().is_empty());
    assert_eq!(get_json(&s, "/api/queue")["running"].as_array().unwrap().len(), 1, "the first still runs");
    assert_eq!(first.join().unwrap(), 200);
    // A prompt of ~2,000 tokens is 32 passes of 64 at 50 ms: hang up while it is read.
    let long = json!({"model": "slow-scripted", "stream": true,
        "messages": [{"role": "user", "content": "word ".repeat(1200)}]});
    // Seen reading before the hang-up (after it, the server may already have dropped it).
    let sock = send(&s, &long, true);
    until("the long prompt being read", || get_json(&s, "/api/queue")["running"][0]["phase"] == "reading");
    sock.shutdown(std::net::Shutdown::Both).unwrap();
    until("the reading request gone", || get_json(&s, "/api/queue")["running"].as_array().unwrap().is_empty());
    let r = rows(&s);
    let reasons: Vec<(&str, i64)> = r.iter().map(|r| (r.1.as_str(), r.2)).collect();
    assert_eq!(reasons, [("cancelled", 0), ("length", 24), ("cancelled", 0)]);
    // The engine is free.
    assert_eq!(post_as(&s.url, "a", "/v1/chat/completions", &slow(2)).0, 200);
}

#[test]
fn a_load_that_does_not_fit_is_refused_naming_the_holder() {
    let s = scripted("memory", &["--memory", "1000"]);
    let load = |m: &str, b: &str| post_as(&s.url, "admin", "/api/load", &json!({"model": m, "backend": b}));
    // Each named by the backend it is (or would be) on.
    let (code, _, v) = load("qwen2.5-scripted", "cpu-q8");
    assert_eq!((code, &v), (200, &json!({"loaded": ["qwen2.5-scripted"], "backend": "cpu-q8"})));
    let (code, _, v) = load("qwen3-scripted", "cpu-q4");
    assert_eq!(code, 409, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("qwen3-scripted@cpu-q4 needs 500 B") && msg.contains("400 B of 1 kB is left"), "{msg}");
    assert!(msg.contains("held by qwen2.5-scripted@cpu-q8"), "{msg}");
    // A request naming it loads it under the same rule.
    let (code, _, v) = post_as(
        &s.url,
        "a",
        "/v1/chat/completions",
        &json!({"model": "qwen3-scripted", "messages": [{"role": "user", "content": "hello"}]}),
    );
    assert!(code == 409 && v["error"]["message"].as_str().unwrap().contains("held by qwen2.5"), "{v}");
    let ps = get_json(&s, "/api/ps");
    assert_eq!(ps["models"].as_array().unwrap().len(), 1, "{ps}");
    assert_eq!(ps["memory"], json!({"total_bytes": 1000, "left_bytes": 400}));
    let (code, _, v) = post_as(&s.url, "admin", "/api/unload", &json!({}));
    assert_eq!((code, v["error"]["param"].as_str()), (400, Some("model")), "{v}");
    let (code, _, v) = post_as(&s.url, "admin", "/api/unload", &json!({"model": "qwen2.5-scripted"}));
    assert_eq!((code, v), (200, json!({"unloaded": ["qwen2.5-scripted@cpu-q8"]})));
    assert_eq!(load("qwen3-scripted", "scripted").0, 200);
    let (code, _, v) = post_as(&s.url, "admin", "/api/unload", &json!({"all": true}));
    assert_eq!((code, v), (200, json!({"unloaded": ["qwen3-scripted@scripted"]})));
}

#[test]
fn autoload_puts_back_what_was_loaded_on_the_backend_it_was_on() {
    let s = scripted("autoload", &[]);
    let body = json!({"model": "qwen3-scripted", "backend": "cpu-q8"});
    assert_eq!(post_as(&s.url, "admin", "/api/load", &body).0, 200);
    // A request naming a model on disk loads it (on the default backend): that counts as loaded too.
    let chat = json!({"model": "qwen2.5-scripted", "messages": [{"role": "user", "content": "hello"}]});
    let (code, _, v) = post_as(&s.url, "a", "/v1/chat/completions", &chat);
    assert_eq!(code, 200, "{v}");
    // A second server on the same data directory, with autoload: the load is a job on its queue.
    let dir = s.dir.to_str().unwrap().to_string();
    let script = common::script();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kvad-serve"))
        .args(["--bind", "127.0.0.1:0", "--data-dir", &dir, "--autoload", "--scripted", script.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut stderr = child.stderr.take().unwrap();
    let mut buf = [0u8; 256];
    let url = loop {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "kvad-serve exited: {err}");
        err.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some(rest) = err.split("listening on ").nth(1) {
            if let Some(u) = rest.split_whitespace().next().filter(|_| rest.contains(' ')) {
                break u.to_string();
            }
        }
    };
    assert!(err.contains("autoload: qwen3-scripted on cpu-q8"), "{err}");
    until("the autoload", || {
        let ps: Value = ureq::get(&format!("{url}/api/ps")).call().unwrap().into_json().unwrap();
        let names: Vec<&str> = ps["models"].as_array().unwrap().iter().filter_map(|m| m["name"].as_str()).collect();
        names.contains(&"qwen3-scripted@cpu-q8") && names.contains(&"qwen2.5-scripted@scripted")
    });
    let _ = child.kill();
    let _ = child.wait();
}

/// Reading a prompt (its template and tokenising: most of a second for a megabyte on the real engine) runs off the
/// engine thread, so a reply streaming meanwhile does not go quiet. The script's model takes 1.5 s to read each
/// prompt and 20 ms a pass; on the engine thread, the read froze the running stream for all of it.
#[test]
fn a_prompt_being_read_holds_no_running_stream() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams.json");
    let s = common::start("read", &["--scripted", script.to_str().unwrap()]);
    let body = |stream: bool| {
        json!({"model": "slow-read-scripted", "max_tokens": 400, "stream": stream,
               "messages": [{"role": "user", "content": "count"}]})
    };
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let url = s.url.clone();
    let a = std::thread::spawn(move || {
        use std::io::BufRead;
        let r = ureq::post(&format!("{url}/v1/chat/completions")).send_string(&body(true).to_string()).unwrap();
        let mut times = Vec::new();
        for line in std::io::BufReader::new(r.into_reader()).lines().map_while(Result::ok) {
            if line.starts_with("data: {") {
                times.push(Instant::now());
                if times.len() == 1 {
                    first_tx.send(()).unwrap();
                }
            }
        }
        times
    });
    first_rx.recv_timeout(Duration::from_secs(30)).expect("the first reply streams");
    let sent = Instant::now();
    let (code, _, b) = post_as(&s.url, "b", "/v1/chat/completions", &body(false));
    assert_eq!(code, 200, "{b}");
    let answered = sent.elapsed();
    let times = a.join().unwrap();
    assert!(answered >= Duration::from_millis(1500), "the second prompt took its read: {answered:?}");
    // While the second prompt was read (its first 1.5 s), the first reply went on writing.
    let during: Vec<Instant> =
        times.iter().copied().filter(|t| *t >= sent && *t <= sent + Duration::from_millis(1500)).collect();
    let gaps = during.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(Duration::MAX);
    assert!(during.len() >= 10 && gaps < Duration::from_millis(750), "{} chunks, longest gap {gaps:?}", during.len());
}

/// A streaming client that stops reading (its socket full) has its reply stopped after `[server] stall_timeout`
/// rather than written to the end and held in memory for nobody: the row says "stalled", with what was written.
#[test]
fn a_reply_nobody_reads_is_stopped_after_the_stall_timeout() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams.json");
    let s = common::start_env("stall", &["--scripted", script.to_str().unwrap()], &[("KVAD_STALL_TIMEOUT", "1")]);
    let body =
        json!({"model": "endless-scripted", "max_tokens": 90000, "stream": true, "logprobs": true, "top_logprobs": 20,
                      "messages": [{"role": "user", "content": "go"}]})
        .to_string();
    let mut sock = std::net::TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
    write!(
        sock,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // Read nothing; the connection stays open.
    until("the reply to start", || get_json(&s, "/api/queue")["running"].as_array().is_some_and(|r| !r.is_empty()));
    until("the unread reply to stop", || get_json(&s, "/api/queue")["running"].as_array().is_some_and(Vec::is_empty));
    let r = rows(&s);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].1, "stalled", "{r:?}");
    assert!(r[0].2 > 0 && r[0].2 < 80000, "stopped part way: {r:?}");
    // The server goes on answering, and a reader's reply is unaffected.
    let (code, _, b) = post_as(
        &s.url,
        "b",
        "/v1/chat/completions",
        &json!({"model": "slow-read-scripted",
        "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(code, 200, "{b}");
    drop(sock);
}
