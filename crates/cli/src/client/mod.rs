//! The CLI as a client of the server: where commands go (a named server, the local service, or this process),
//! and the HTTP helpers the remote commands share.
//!
//! Order: `--remote URL` or `--local`, then `KVAD_URL`, then `url` under `[client]` in kvad.toml, then this
//! machine's service (the `[server] bind` address in kvad.toml, else 127.0.0.1:5823). The first three are things
//! somebody said, so a server they name that does not answer is an error, never a quiet fallback; the last is a
//! guess, and when nothing answers there the command runs in this process.

pub mod accounts;
pub mod admin;
pub mod auth;
pub mod commands;
pub mod credentials;
pub mod loadgen;
pub mod pull;
pub mod remote;
pub mod service;
pub mod serving;
pub mod training;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The service's default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:5823";

/// Where a command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A server, and why that one.
    Remote { url: String, why: String },
    /// This process, and why.
    Local { why: String },
}

impl Target {
    /// The first line of output, saying which.
    pub fn announce(&self) {
        match self {
            Target::Remote { url, why } => eprintln!("kvad: {url} ({why})"),
            Target::Local { why } => eprintln!("kvad: in this process ({why})"),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FileConfig {
    server: ServerSection,
    client: ClientSection,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ServerSection {
    bind: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ClientSection {
    url: Option<String>,
}

/// The data directory, as kvad-serve finds it: `KVAD_DATA`, `$XDG_DATA_HOME/kvad`, `~/.local/share/kvad`.
pub fn data_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("KVAD_DATA")
        .or_else(|| env("XDG_DATA_HOME").map(|d| d.join("kvad")))
        .unwrap_or_else(|| env("HOME").unwrap_or_else(|| PathBuf::from(".")).join(".local/share/kvad"))
}

fn file_config() -> Result<FileConfig> {
    let path = data_dir().join("kvad.toml");
    match std::fs::read_to_string(&path) {
        Ok(t) => toml::from_str(&t).with_context(|| format!("reading {}", path.display())),
        Err(_) => Ok(FileConfig::default()),
    }
}

/// The address of this machine's service.
pub fn service_url() -> Result<String> {
    Ok(file_config()?.server.bind.map_or_else(|| DEFAULT_URL.to_string(), |b| format!("http://{b}")))
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::AgentBuilder::new().timeout_connect(timeout).build()
}

/// Whether a server answers `/api/health` at `url`.
pub fn answers(url: &str, timeout: Duration) -> Result<Value, String> {
    match agent(timeout).get(&format!("{url}/api/health")).call() {
        Ok(r) => r.into_json::<Value>().map_err(|e| format!("{url}/api/health did not answer JSON: {e}")),
        Err(ureq::Error::Status(code, _)) => Err(format!("{url}/api/health answered {code}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Decides where a command runs. `local_ok` is false for commands that only make sense against a server.
pub fn choose(remote: Option<&str>, local: bool) -> Result<Target> {
    if local {
        if remote.is_some() {
            bail!("--remote and --local contradict each other; give one");
        }
        return Ok(Target::Local { why: "--local".into() });
    }
    let named = |url: &str, how: &str| -> Result<Target> {
        let url = url.trim_end_matches('/').to_string();
        answers(&url, Duration::from_secs(5))
            .map_err(|e| anyhow!("{how} names {url}, which does not answer: {e} (--local runs in this process)"))?;
        Ok(Target::Remote { why: format!("from {how}"), url })
    };
    if let Some(url) = remote {
        return named(url, "--remote");
    }
    if let Some(url) = crate::config::url() {
        return named(&url, "KVAD_URL");
    }
    if let Some(url) = file_config()?.client.url {
        return named(&url, "[client] url in kvad.toml");
    }
    let url = service_url()?;
    match answers(&url, Duration::from_millis(300)) {
        Ok(_) => Ok(Target::Remote { url, why: "the kvad service; --local to run in this process instead".into() }),
        Err(_) => Ok(Target::Local { why: format!("no server answers at {url}") }),
    }
}

/// A server's error as a message: its OpenAI-shaped `error.message`, with the status.
pub fn http_error(e: ureq::Error) -> anyhow::Error {
    match e {
        ureq::Error::Status(code, r) => {
            let body: Value = r.into_json().unwrap_or(Value::Null);
            let msg = body["error"]["message"].as_str().map_or_else(|| body.to_string(), str::to_string);
            anyhow!("the server answered {code}: {msg}")
        }
        other => anyhow!("{other}"),
    }
}

/// The request with `Authorization: Bearer` for the server at `url` when a key is kept for it (`kvad auth
/// login`) or given in `KVAD_API_KEY`.
pub fn with_auth(url: &str, req: ureq::Request) -> ureq::Request {
    match credentials::key_for(url) {
        Some(key) => req.set("authorization", &format!("Bearer {key}")),
        None => req,
    }
}

/// `GET url+path` as JSON.
pub fn get_json(url: &str, path: &str) -> Result<Value> {
    with_auth(url, agent(Duration::from_secs(5)).get(&format!("{url}{path}")))
        .call()
        .map_err(http_error)?
        .into_json()
        .map_err(Into::into)
}

/// The server for a command about a server's state (its queue, its models in memory, its accounts); announces it,
/// or says why it cannot run.
pub fn remote_only(c: &crate::args::ClientArgs, what: &str) -> Result<String> {
    let t = choose(c.remote.as_deref(), c.local)?;
    match t {
        Target::Remote { ref url, .. } => {
            t.announce();
            Ok(url.clone())
        }
        Target::Local { why } => {
            bail!("kvad {what} needs a server ({why}); start one with `kvad serve` or name one with --remote/KVAD_URL")
        }
    }
}

/// `kvad ps`: a server's models in memory; with no server, says plainly that nothing stays in memory here.
pub fn ps(c: &crate::args::ClientArgs) -> Result<()> {
    let t = choose(c.remote.as_deref(), c.local)?;
    match t {
        Target::Remote { ref url, .. } => {
            t.announce();
            admin::ps(url, c.json)
        }
        Target::Local { why } => {
            if c.json {
                println!("{}", serde_json::json!({"models": [], "server": null, "why": why}));
            } else {
                println!(
                    "nothing is in memory: no server ({why}). Without one, each `kvad run` or `kvad chat` loads its \
                     model for itself and lets it go when it ends; `kvad serve` keeps models loaded, and `kvad ps` \
                     then lists them."
                );
            }
            Ok(())
        }
    }
}
