//! Shutdown that ends: after SIGTERM running replies get `[server] shutdown_timeout`; a longer one then ends cleanly
//! (a final chunk with its finish reason, then `[DONE]`) and the process exits 0. A bound on shutdown is behaviour,
//! so it is tested with a margin, not as a speed.

mod common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

fn sigterm(s: &common::Server) {
    let st = std::process::Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().unwrap();
    assert!(st.success());
}

/// Waits up to `limit` for the server to exit; its status and how long it took.
fn exit_within(s: &mut common::Server, limit: Duration) -> (std::process::ExitStatus, Duration) {
    let t = Instant::now();
    loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            return (st, t.elapsed());
        }
        assert!(t.elapsed() < limit, "kvad-serve still runs {limit:?} after SIGTERM:\n{}", s.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_long_stream_is_ended_cleanly_at_the_timeout_and_the_server_exits_0() {
    let mut s = common::scripted("shutdown", &["--shutdown-timeout", "1"]);
    // slow-scripted: about 70 tokens at 50 ms a pass, so some 3.5 s of reply.
    let body = json!({"model": "slow-scripted", "stream": true, "messages": [{"role": "user", "content": "count"}]});
    let r = ureq::post(&format!("{}/v1/chat/completions", s.url)).send_string(&body.to_string()).unwrap();
    let mut lines = BufReader::new(r.into_reader())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("data: ").map(str::to_string));
    let first = lines.next().expect("the first chunk");
    assert!(first.contains("chat.completion.chunk"), "{first}");
    sigterm(&s);
    let signalled = Instant::now();
    // While the reply finishes, the server still answers: health is a 503 saying it is shutting down.
    std::thread::sleep(Duration::from_millis(200));
    let (code, health) = s.get("/api/health");
    assert_eq!(code, 503, "{health}");
    assert!(health.contains("shutting down"), "{health}");
    let rest: Vec<String> = lines.collect();
    let took = signalled.elapsed();
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]: {rest:?}");
    let end: Value = serde_json::from_str(&rest[rest.len() - 2]).unwrap();
    assert_eq!(end["choices"][0]["finish_reason"], "length", "{end}");
    assert_eq!(end["kvad"]["shutdown"], true, "{end}");
    let text: String = std::iter::once(&first)
        .chain(&rest[..rest.len() - 2])
        .map(|c| {
            serde_json::from_str::<Value>(c).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(text.starts_with("one two") && !text.contains("twenty-four"), "cut short, not finished: {text:?}");
    assert!(took >= Duration::from_millis(900), "the reply had its timeout first ({took:?})");
    let (status, _) = exit_within(&mut s, Duration::from_secs(1 + 10));
    assert!(status.success(), "exit status {status:?}:\n{}", s.log.lock().unwrap());
    let log = s.log.lock().unwrap().clone();
    assert!(log.contains("the shutdown timeout passed") && log.contains("kvad-serve: stopped"), "{log}");
    let rows = s.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].4, "shutdown", "the requests row says why it ended: {rows:?}");
}

#[test]
fn an_idle_server_exits_at_once_without_waiting_for_the_timeout() {
    let mut s = common::scripted("shutdown-idle", &["--shutdown-timeout", "60"]);
    let (code, _) = s.get("/api/health");
    assert_eq!(code, 200);
    sigterm(&s);
    let (status, took) = exit_within(&mut s, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A kill mid-stream (no chance to write anything at the end) loses no request: the row opened at admission has
/// the tokens generated up to the last second, and the next start marks it interrupted (and says so).
#[test]
fn a_request_killed_mid_stream_is_recorded_as_interrupted_at_the_next_start() {
    let s = common::scripted("killed", &[]);
    // slow-scripted: about 70 tokens at 50 ms a pass.
    let body = json!({"model": "slow-scripted", "stream": true, "messages": [{"role": "user", "content": "count"}]});
    let r = ureq::post(&format!("{}/v1/chat/completions", s.url)).send_string(&body.to_string()).unwrap();
    let mut lines = BufReader::new(r.into_reader()).lines().map_while(Result::ok).filter(|l| l.starts_with("data: "));
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1600) {
        lines.next().expect("a chunk");
    }
    let running = s.rows();
    assert_eq!((running.len(), running[0].4.as_str()), (1, "running"), "{running:?}");
    assert!(running[0].3 > 0, "the row has the tokens of the first second: {running:?}");
    // kill -9, then a new server on the same data directory.
    let s = s.restart(&["--scripted", common::script().to_str().unwrap()]);
    let rows = s.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].4, "interrupted", "{rows:?}");
    assert!(rows[0].3 >= running[0].3, "what it had generated is kept: {rows:?}");
    assert!(s.log.lock().unwrap().contains("1 requests were running when the server last stopped"));
}
