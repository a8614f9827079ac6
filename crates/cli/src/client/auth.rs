//! `kvad auth login`, `logout` and `status`.
//!
//! Login signs in with a username and password (`POST /api/auth/login`), makes an API key named after this host
//! with that session (`POST /api/keys`, with the session's CSRF token), signs the session out again, and keeps the
//! key in `credentials.json` (see [`super::credentials`]). A server in OIDC mode has no password login: make a key
//! in its web UI and hand it over with `--api-key-stdin`.

use super::credentials::{self, Credentials, Entry};
use super::{http_error, with_auth};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, IsTerminal, Write};

/// How `kvad auth login` gets what it needs.
#[derive(Debug, Clone, Default)]
pub struct LoginArgs {
    /// The username (else asked).
    pub username: Option<String>,
    /// Read the password from stdin's first line (no prompt).
    pub password_stdin: bool,
    /// Read an existing API key from stdin instead of signing in.
    pub api_key_stdin: bool,
}

fn read_line(what: &str) -> Result<String> {
    let mut s = String::new();
    std::io::stdin().lock().read_line(&mut s).with_context(|| format!("reading the {what} from stdin"))?;
    Ok(s.trim_end_matches(['\r', '\n']).to_string())
}

/// Asks for a line on stderr and reads it from stdin.
pub fn ask(prompt: &str, what: &str) -> Result<String> {
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    read_line(what)
}

/// Reads a secret: stdin's first line when `from_stdin` or stdin is not a terminal, else asked on the terminal
/// with echo off (`stty -echo`, restored after).
pub fn secret(prompt: &str, what: &str, from_stdin: bool) -> Result<String> {
    if from_stdin || !std::io::stdin().is_terminal() {
        return read_line(what);
    }
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let stty = |arg: &str| std::process::Command::new("stty").arg(arg).status().is_ok_and(|s| s.success());
    let hidden = stty("-echo");
    let line = read_line(what);
    if hidden {
        stty("echo");
    }
    eprintln!();
    let line = line?;
    if line.is_empty() {
        bail!("no {what} given");
    }
    Ok(line)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this machine".into())
}

/// `GET /api/auth/me` with no credentials: Some(mode) when the server answers it (mode none), None when it wants
/// a sign-in (401).
fn open_mode(url: &str) -> Result<Option<String>> {
    match ureq::get(&format!("{url}/api/auth/me")).call() {
        Ok(r) => Ok(r.into_json::<Value>()?["mode"].as_str().map(str::to_string)),
        Err(ureq::Error::Status(401, _)) => Ok(None),
        Err(e) => Err(http_error(e)),
    }
}

/// `kvad auth login`.
pub fn login(url: &str, a: &LoginArgs) -> Result<()> {
    if let Some(mode) = open_mode(url)? {
        println!("{url} runs with [auth] mode = {mode:?}: there is nothing to sign in to");
        return Ok(());
    }
    let entry = if a.api_key_stdin { given_key(url)? } else { password_login(url, a)? };
    let mut creds = Credentials::load()?;
    let old = creds.servers.insert(credentials::normalise(url), entry.clone());
    // The key this replaces would otherwise stay valid and forgotten.
    if let Some(Entry { key_id: Some(id), key, .. }) = old.filter(|o| o.key != entry.key) {
        let _ = ureq::delete(&format!("{url}/api/keys/{id}")).set("authorization", &format!("Bearer {key}")).call();
    }
    let path = creds.save()?;
    println!("signed in to {url} as {}; its API key is kept in {}", entry.account, path.display());
    Ok(())
}

fn given_key(url: &str) -> Result<Entry> {
    let key = read_line("API key")?.trim().to_string();
    if !key.starts_with("kvad_") {
        bail!("that is not a kvad API key (they start with kvad_)");
    }
    let me: Value = ureq::get(&format!("{url}/api/auth/me"))
        .set("authorization", &format!("Bearer {key}"))
        .call()
        .map_err(http_error)?
        .into_json()?;
    let account = me["account"].as_str().ok_or_else(|| anyhow!("/api/auth/me answered {me}"))?.to_string();
    Ok(Entry { key, key_id: None, account })
}

fn password_login(url: &str, a: &LoginArgs) -> Result<Entry> {
    let username = match &a.username {
        Some(u) => u.clone(),
        None => ask("username: ", "username")?,
    };
    let password = secret("password: ", "password", a.password_stdin)?;
    let r = ureq::post(&format!("{url}/api/auth/login")).send_json(json!({"username": username, "password": password}));
    let r = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(400, r)) => {
            let v: Value = r.into_json().unwrap_or(Value::Null);
            bail!(
                "{}; if the server signs in through OIDC, make an API key in its web UI and run \
                 `kvad auth login --api-key-stdin`",
                v["error"]["message"].as_str().unwrap_or("the server refused the sign-in")
            );
        }
        Err(e) => return Err(http_error(e)),
    };
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .map(str::to_string)
        .ok_or_else(|| anyhow!("the server signed in but set no session cookie"))?;
    let v: Value = r.into_json()?;
    let csrf = v["csrf_token"].as_str().unwrap_or("").to_string();
    let account = v["account"].as_str().unwrap_or(&username).to_string();
    let with_session = |req: ureq::Request| req.set("cookie", &cookie).set("x-csrf-token", &csrf);
    let name = format!("kvad CLI on {}", host_name());
    let made: Value = with_session(ureq::post(&format!("{url}/api/keys")))
        .send_json(json!({ "name": name }))
        .map_err(http_error)?
        .into_json()?;
    let _ = with_session(ureq::post(&format!("{url}/api/auth/logout"))).call();
    let key = made["key"].as_str().ok_or_else(|| anyhow!("POST /api/keys answered {made}"))?.to_string();
    Ok(Entry { key, key_id: made["id"].as_str().map(str::to_string), account })
}

/// `kvad auth logout`: revokes the stored key on the server and forgets it.
pub fn logout(url: &str) -> Result<()> {
    let mut creds = Credentials::load()?;
    let Some(entry) = creds.servers.remove(&credentials::normalise(url)) else {
        println!("no API key is kept for {url}; nothing to do");
        return Ok(());
    };
    match &entry.key_id {
        Some(id) => {
            let r = ureq::delete(&format!("{url}/api/keys/{id}"))
                .set("authorization", &format!("Bearer {}", entry.key))
                .call();
            match r {
                Ok(_) | Err(ureq::Error::Status(401 | 404, _)) => {}
                Err(e) => return Err(http_error(e).context("revoking the API key (it is still kept)")),
            }
            println!("revoked the API key and signed out of {url}");
        }
        None => println!("forgot the API key for {url} (it was given by hand: revoke it with kvad keys revoke)"),
    }
    creds.save()?;
    Ok(())
}

/// `kvad auth status`: who the server says this client is. Fails when it is not signed in.
pub fn status(url: &str, json_out: bool) -> Result<()> {
    let r = with_auth(url, ureq::get(&format!("{url}/api/auth/me"))).call();
    let v: Value = match r {
        Ok(r) => r.into_json()?,
        Err(ureq::Error::Status(401, _)) => bail!("not signed in to {url} (kvad auth login)"),
        Err(e) => return Err(http_error(e)),
    };
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let via = if crate::config::api_key().is_some() {
        " (API key from KVAD_API_KEY)".to_string()
    } else if credentials::key_for(url).is_some() {
        format!(" (API key from {})", credentials::path().display())
    } else {
        String::new()
    };
    println!(
        "{url}: {} ({}), auth mode {}{via}",
        v["account"].as_str().unwrap_or("?"),
        v["role"].as_str().unwrap_or("?"),
        v["mode"].as_str().unwrap_or("?")
    );
    Ok(())
}
