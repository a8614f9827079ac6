//! Starting the real `kvad-serve` binary on a free loopback port with a fresh data directory (and so a fresh
//! SQLite file), and small HTTP helpers.
#![allow(dead_code)]

pub mod config;
pub mod openapi;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    pub url: String,
    pub dir: PathBuf,
    pub child: Child,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/script.json")
}

fn fresh_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("kvad-serve-test-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts kvad-serve with `args` (plus a loopback port 0 and a fresh data directory) and waits until it listens.
pub fn start(tag: &str, args: &[&str]) -> Server {
    start_with(tag, args, |_| {})
}

/// As [`start`], with the environment set by `env` (offline mode is off unless `env` turns it on).
pub fn start_env(tag: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
    start_with(tag, args, |c| {
        c.env_remove("KVAD_OFFLINE").env_remove("HF_HUB_OFFLINE").env_remove("HF_TOKEN").envs(env.iter().copied());
    })
}

fn start_with(tag: &str, args: &[&str], configure: impl FnOnce(&mut Command)) -> Server {
    spawn_in(fresh_dir(tag), args, configure)
}

fn spawn_in(dir: PathBuf, args: &[&str], configure: impl FnOnce(&mut Command)) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvad-serve"));
    configure(&mut cmd);
    let mut child = cmd
        .args(["--bind", "127.0.0.1:0", "--data-dir", dir.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kvad-serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let url = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("kvad-serve exited before listening: {seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let log = std::sync::Arc::new(std::sync::Mutex::new(seen));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    Server { url, dir, child, log }
}

pub fn scripted(tag: &str, extra: &[&str]) -> Server {
    let s = script();
    let mut args = vec!["--scripted", s.to_str().unwrap()];
    args.extend_from_slice(extra);
    start(tag, &args)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A restarted server's directory went to its successor (an empty path here).
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Server {
    /// Stops this server and starts another on the same data directory (its database kept) with `args`.
    pub fn restart(mut self, args: &[&str]) -> Server {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::take(&mut self.dir);
        spawn_in(dir, args, |_| {})
    }

    /// POSTs JSON; returns (status, body as JSON).
    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let r = ureq::post(&format!("{}{path}", self.url))
            .set("content-type", "application/json")
            .timeout(Duration::from_secs(600))
            .send_string(body);
        match r {
            Ok(r) => (r.status(), r.into_json().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("POST {path}: {e}"),
        }
    }

    /// Sends `body` with any method; returns (status, body as JSON, Null when it is not).
    pub fn call(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let r = ureq::request(method, &format!("{}{path}", self.url))
            .set("content-type", "application/json")
            .timeout(Duration::from_secs(600))
            .send_string(body);
        match r {
            Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        match ureq::get(&format!("{}{path}", self.url)).call() {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// POSTs a streaming request; returns the `data:` payloads in order (`[DONE]` included).
    pub fn stream(&self, path: &str, body: &str) -> Vec<String> {
        let r = ureq::post(&format!("{}{path}", self.url)).send_string(body).expect("stream request");
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        BufReader::new(r.into_reader())
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.strip_prefix("data: ").map(str::to_string))
            .collect()
    }

    /// Rows of the requests table: (endpoint, model, prompt_tokens, generated_tokens, finish_reason, ttft_ms).
    pub fn rows(&self) -> Vec<(String, String, i64, i64, String, Option<f64>)> {
        let db = rusqlite::Connection::open(self.dir.join("kvad.db")).unwrap();
        let mut st = db
            .prepare("SELECT endpoint, model, prompt_tokens, generated_tokens, finish_reason, ttft_ms FROM requests ORDER BY id")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}

/// The repository's venv with the official openai and anthropic SDKs (scripts/test.sh makes it; made here when
/// missing).
pub fn sdk_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv-test");
    let py = venv.join("bin/python");
    let ok =
        |py: &PathBuf| Command::new(py).args(["-c", "import openai, anthropic"]).status().is_ok_and(|s| s.success());
    if !ok(&py) {
        if !py.exists() {
            let st = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().expect("python3 -m venv");
            assert!(st.success(), "python3 -m venv {} failed", venv.display());
        }
        let st = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "openai==3.57.0", "anthropic==2.17.0"])
            .status()
            .expect("pip install openai anthropic");
        assert!(st.success(), "pip install openai==3.57.0 anthropic==2.17.0 into {} failed", venv.display());
    }
    py
}
