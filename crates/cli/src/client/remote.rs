//! `run`, `chat`, `ls` and `api` against a server.

use super::commands::{COMMANDS, NOT_COMMANDS};
use super::{get_json, http_error};
use crate::args::{ModelArgs, RunArgs};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};

/// Whether `model` is a chat model on the server (chat endpoint) or a completion one.
/// The server's `/v1/models` entry for `model`, or an error naming what it has.
fn model_entry(url: &str, model: &str) -> Result<Value> {
    let models = get_json(url, "/v1/models")?;
    let list = models["data"].as_array().cloned().unwrap_or_default();
    list.iter().find(|m| m["id"] == model).cloned().ok_or_else(|| {
        let ids: Vec<&str> = list.iter().filter_map(|m| m["id"].as_str()).collect();
        anyhow!("the server has no model {model:?}; it has: {}", ids.join(", "))
    })
}

fn is_chat(url: &str, model: &str) -> Result<bool> {
    Ok(model_entry(url, model)?["capabilities"]["chat"].as_bool().unwrap_or(false))
}

fn sampling(a: &ModelArgs) -> Value {
    let mut v = json!({
        "model": a.model, "max_tokens": a.max_tokens, "temperature": a.temperature, "top_p": a.top_p,
        "top_k": a.top_k, "min_p": a.min_p, "repetition_penalty": a.repetition_penalty,
        "presence_penalty": a.presence_penalty, "frequency_penalty": a.frequency_penalty,
        "stream": true, "stream_options": {"include_usage": true},
    });
    if let Some(s) = a.seed {
        v["seed"] = json!(s);
    }
    v
}

/// Posts a streaming request and prints it: text to stdout (reasoning to stderr), or with `json` each event as one
/// line. Returns the answer's text.
fn stream(url: &str, path: &str, body: &Value, json_out: bool) -> Result<String> {
    let resp = super::with_auth(url, ureq::post(&format!("{url}{path}"))).send_json(body).map_err(http_error)?;
    let mut out = std::io::stdout().lock();
    let mut text = String::new();
    let mut usage = Value::Null;
    let mut finish = Value::Null;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.context("reading the stream")?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        if json_out {
            writeln!(out, "{data}")?;
            continue;
        }
        let ev: Value = serde_json::from_str(data).with_context(|| format!("the server sent {data:?}"))?;
        if let Some(e) = ev.get("error") {
            bail!("the server failed mid-reply: {}", e["message"]);
        }
        if !ev["usage"].is_null() {
            usage = ev["usage"].clone();
        }
        let Some(c) = ev["choices"].get(0) else { continue };
        if !c["finish_reason"].is_null() {
            finish = c["finish_reason"].clone();
        }
        if let Some(r) = c["delta"]["reasoning_content"].as_str() {
            eprint!("{r}");
        }
        let piece = c["delta"]["content"].as_str().or_else(|| c["text"].as_str()).unwrap_or_default();
        text.push_str(piece);
        write!(out, "{piece}")?;
        out.flush()?;
        for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            writeln!(out, "[tool call] {}({})", call["function"]["name"], call["function"]["arguments"])?;
        }
    }
    if !json_out {
        writeln!(out)?;
        eprintln!(
            "kvad: prompt {} tokens · reply {} tokens · {}",
            usage["prompt_tokens"],
            usage["completion_tokens"],
            finish.as_str().unwrap_or("?")
        );
    }
    Ok(text)
}

/// `kvad run` against a server.
pub fn run(url: &str, a: &RunArgs, json_out: bool) -> Result<()> {
    if a.logprobs.is_some() {
        bail!("--logprobs prints per-token alternatives in this process only; add --local");
    }
    let mut body = sampling(&a.model);
    if is_chat(url, &a.model.model)? {
        let mut m = crate::generate::with_system(&a.model.system);
        m.push(json!({"role": "user", "content": a.prompt}));
        body["messages"] = json!(m);
        stream(url, "/v1/chat/completions", &body, json_out)?;
    } else {
        body["prompt"] = json!(a.prompt);
        stream(url, "/v1/completions", &body, json_out)?;
    }
    Ok(())
}

/// `kvad chat` against a server: the conversation is kept here and sent whole each turn.
pub fn chat(url: &str, a: &ModelArgs, json_out: bool) -> Result<()> {
    let m = model_entry(url, &a.model)?;
    if !m["capabilities"]["chat"].as_bool().unwrap_or(false) {
        bail!("{} has no chat template: it is a completion model; use `kvad run` instead", a.model);
    }
    // The seed's second line: where the replies are computed (where the model is, else where it will load).
    eprintln!("model: {}@{}", a.model, m["backend"].as_str().unwrap_or("?"));
    crate::generate::conversation(&a.model, &a.system, |history, _| {
        let mut body = sampling(a);
        body["messages"] = json!(history);
        stream(url, "/v1/chat/completions", &body, json_out)
    })
}

/// `kvad ls` against a server.
pub fn ls(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/v1/models")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let yes = |b: &Value| if b.as_bool() == Some(true) { "yes" } else { "-" };
    println!("{:<32} {:<5} {:<6} {:<10} {:<7} BACKEND", "MODEL", "CHAT", "TOOLS", "REASONING", "LOADED");
    for m in v["data"].as_array().into_iter().flatten() {
        let c = &m["capabilities"];
        println!(
            "{:<32} {:<5} {:<6} {:<10} {:<7} {}",
            m["id"].as_str().unwrap_or("?"),
            yes(&c["chat"]),
            yes(&c["tools"]),
            yes(&c["reasoning"]),
            yes(&m["loaded"]),
            m["backend"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// `kvad api`: with no path, every route; with one, calls it (POST when a body is given).
pub fn api(url: &str, path: Option<&str>, method: Option<&str>, data: Option<&str>, json_out: bool) -> Result<()> {
    let Some(path) = path else {
        let doc = get_json(url, "/api/openapi.json")?;
        if json_out {
            println!("{doc}");
            return Ok(());
        }
        println!("{:<6} {:<22} {:<40} WHAT", "METHOD", "PATH", "COMMAND");
        for (p, ops) in doc["paths"].as_object().into_iter().flatten() {
            for (m, op) in ops.as_object().into_iter().flatten() {
                let m = m.to_uppercase();
                let cmd = COMMANDS.iter().find(|c| c.0 == m && c.1 == p).map(|c| c.2);
                let not = NOT_COMMANDS.iter().find(|c| c.0 == m && c.1 == p).map(|_| "(none: see NOT_COMMANDS)");
                let cmd = cmd.or(not).unwrap_or("(none yet)");
                println!("{m:<6} {p:<22} {cmd:<40} {}", op["summary"].as_str().unwrap_or(""));
            }
        }
        return Ok(());
    };
    if !path.starts_with('/') {
        bail!("path {path:?} must start with / (for example /v1/models)");
    }
    let method = method.map(str::to_uppercase).unwrap_or_else(|| if data.is_some() { "POST" } else { "GET" }.into());
    let req = super::with_auth(url, ureq::request(&method, &format!("{url}{path}")));
    let resp = match data {
        Some(d) => {
            let body: Value = serde_json::from_str(d).with_context(|| format!("--data is not JSON: {d}"))?;
            req.send_json(body)
        }
        None => req.call(),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            println!("{}", r.into_string().unwrap_or_default());
            bail!("{method} {path} answered {code}");
        }
        Err(e) => return Err(e.into()),
    };
    let text = resp.into_string()?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if !json_out => println!("{}", serde_json::to_string_pretty(&v)?),
        _ => println!("{text}"),
    }
    Ok(())
}
