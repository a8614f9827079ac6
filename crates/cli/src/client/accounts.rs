//! `kvad users`, `kvad sessions` and `kvad keys`: an administrator sees and manages everyone's, a user its own
//! (the server decides; these print what it answers).

use super::auth::secret;
use super::{get_json, http_error, with_auth};
use anyhow::{bail, Result};
use serde_json::{json, Value};

fn send(method: &str, url: &str, path: &str, body: Option<Value>) -> Result<Value> {
    let req = with_auth(url, ureq::request(method, &format!("{url}{path}")));
    let r = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    }
    .map_err(http_error)?;
    if r.status() == 204 {
        return Ok(Value::Null);
    }
    Ok(r.into_json()?)
}

/// A path segment with everything but unreserved characters percent-encoded (names and ids come from the user).
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'@' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn rows(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// `kvad users list`.
pub fn users_list(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/users")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("{:<24} {:<6} CREATED", "NAME", "ROLE");
    for u in rows(&v) {
        println!("{:<24} {:<6} {}", s(&u["name"]), s(&u["role"]), s(&u["created"]));
    }
    Ok(())
}

/// `kvad users add NAME`: the password is asked (no echo) or read from stdin.
pub fn users_add(url: &str, name: &str, role: &str, password_stdin: bool, json_out: bool) -> Result<()> {
    let password = secret(&format!("password for {name}: "), "password", password_stdin)?;
    let v = send("POST", url, "/api/users", Some(json!({"name": name, "password": password, "role": role})))?;
    if json_out {
        println!("{v}");
    } else {
        println!("added {} ({})", s(&v["name"]), s(&v["role"]));
    }
    Ok(())
}

/// `kvad users set NAME [--role R] [--password | --password-stdin]`.
pub fn users_set(url: &str, name: &str, role: Option<&str>, password: bool, password_stdin: bool) -> Result<()> {
    let mut body = json!({});
    if let Some(r) = role {
        body["role"] = json!(r);
    }
    if password || password_stdin {
        body["password"] = json!(secret(&format!("new password for {name}: "), "password", password_stdin)?);
    }
    if body.as_object().is_some_and(serde_json::Map::is_empty) {
        bail!("nothing to change: give --role, --password or --password-stdin");
    }
    let name = seg(name);
    let v = send("PATCH", url, &format!("/api/users/{name}"), Some(body))?;
    println!(
        "{}: role {}{}",
        s(&v["name"]),
        s(&v["role"]),
        if password || password_stdin { ", password changed" } else { "" }
    );
    Ok(())
}

/// `kvad users rm NAME`.
pub fn users_rm(url: &str, name: &str) -> Result<()> {
    let name = seg(name);
    send("DELETE", url, &format!("/api/users/{name}"), None)?;
    println!("deleted {name}, its sessions and its API keys");
    Ok(())
}

/// `kvad sessions list`.
pub fn sessions_list(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/sessions")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("{:<18} {:<16} {:<26} {:<26} USER AGENT", "ID", "ACCOUNT", "SIGNED IN", "LAST SEEN");
    for x in rows(&v) {
        let ua: String = s(&x["user_agent"]).chars().take(40).collect();
        println!(
            "{:<18} {:<16} {:<26} {:<26} {ua}",
            s(&x["id"]),
            s(&x["account"]),
            s(&x["created"]),
            s(&x["last_seen"])
        );
    }
    Ok(())
}

/// `kvad sessions rm ID`.
pub fn sessions_rm(url: &str, id: &str) -> Result<()> {
    let id = seg(id);
    send("DELETE", url, &format!("/api/sessions/{id}"), None)?;
    println!("signed session {id} out");
    Ok(())
}

/// `kvad keys list`.
pub fn keys_list(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/keys")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!(
        "{:<18} {:<24} {:<14} {:<16} {:<26} {:<26} REVOKED",
        "ID", "NAME", "PREFIX", "ACCOUNT", "CREATED", "LAST USED"
    );
    for k in rows(&v) {
        println!(
            "{:<18} {:<24} {:<14} {:<16} {:<26} {:<26} {}",
            s(&k["id"]),
            s(&k["name"]),
            s(&k["prefix"]),
            s(&k["account"]),
            s(&k["created"]),
            s(&k["last_used"]),
            if k["revoked"] == true { "yes" } else { "no" }
        );
    }
    Ok(())
}

/// `kvad keys create NAME`: prints the key, which the server never shows again.
pub fn keys_create(url: &str, name: &str, json_out: bool) -> Result<()> {
    let v = send("POST", url, "/api/keys", Some(json!({ "name": name })))?;
    if json_out {
        println!("{v}");
    } else {
        eprintln!("kvad: API key {:?} (id {}); it is shown only now:", s(&v["name"]), s(&v["id"]));
        println!("{}", s(&v["key"]));
    }
    Ok(())
}

/// `kvad keys revoke ID`.
pub fn keys_revoke(url: &str, id: &str) -> Result<()> {
    let id = seg(id);
    send("DELETE", url, &format!("/api/keys/{id}"), None)?;
    println!("revoked API key {id}");
    Ok(())
}
