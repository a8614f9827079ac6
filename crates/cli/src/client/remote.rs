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

/// The flags of `a` that mean nothing to a server, refused by name before anything is asked of it.
fn local_only(a: &ModelArgs) -> Result<()> {
    if a.threads.is_some() {
        bail!("--threads sets this process's worker threads; the server's are its own (KVAD_THREADS where it starts); add --local to run here");
    }
    if let Some(ctx) = a.ctx {
        bail!("--ctx {ctx} sets this process's context; a server's is its own ([server] context, kvad serve --ctx); add --local to run here");
    }
    a.named_backend().map(|_| ())
}

/// The backend `a` names, loaded there (the server's own answer when it cannot: a 409 naming where the model is, a
/// memory refusal naming the holders).
fn place(url: &str, a: &ModelArgs) -> Result<()> {
    if let Some(b) = a.named_backend()? {
        let v = super::admin::post(url, "/api/load", json!({"model": a.model, "backend": b}))?;
        eprintln!("kvad: {} is on {} for this request", a.model, v["backend"].as_str().unwrap_or(&b));
    }
    Ok(())
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
    local_only(&a.model)?;
    place(url, &a.model)?;
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
    local_only(a)?;
    if !model_entry(url, &a.model)?["capabilities"]["chat"].as_bool().unwrap_or(false) {
        bail!("{} has no chat template: it is a completion model; use `kvad run` instead", a.model);
    }
    place(url, a)?;
    let m = model_entry(url, &a.model)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// How a `run`/`chat` flag reaches a server: sent as a request field, turned into a load on a backend, or refused
    /// with a message naming it (what it changes has no meaning for a server's request).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Remote {
        /// Sent in the request as this field.
        Sent(&'static str),
        /// The model is loaded on the backend named before the request (or the server's refusal is the answer).
        Loads,
        /// Refused: it only means something in this process.
        Refused,
    }

    /// Every `run`/`chat` flag and how it reaches a server; `tests` walk the clap definitions against this table, so a
    /// flag added later is sent or refused, never dropped.
    const REMOTE_FLAGS: &[(&str, Remote)] = &[
        ("prompt", Remote::Sent("messages")),
        ("system", Remote::Sent("messages")),
        ("max-tokens", Remote::Sent("max_tokens")),
        ("temperature", Remote::Sent("temperature")),
        ("top-p", Remote::Sent("top_p")),
        ("top-k", Remote::Sent("top_k")),
        ("min-p", Remote::Sent("min_p")),
        ("repetition-penalty", Remote::Sent("repetition_penalty")),
        ("presence-penalty", Remote::Sent("presence_penalty")),
        ("frequency-penalty", Remote::Sent("frequency_penalty")),
        ("seed", Remote::Sent("seed")),
        ("backend", Remote::Loads),
        ("quant", Remote::Loads),
        ("dtype", Remote::Loads),
        ("threads", Remote::Refused),
        ("ctx", Remote::Refused),
        ("logprobs", Remote::Refused),
    ];

    fn parse(args: &[&str]) -> crate::args::Cli {
        crate::args::Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Every flag of `run` and `chat`, walked from the clap definitions: each is in the table, and does what the
    /// table says against a server — a value differing from its default shows in the request, a backend becomes a
    /// load (tests/client.rs runs that against a server), a flag of this process only is refused by name.
    #[test]
    fn every_run_and_chat_flag_is_sent_or_refused() {
        let cli = crate::args::Cli::command();
        for sub in ["run", "chat"] {
            let cmd = cli.find_subcommand(sub).unwrap();
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if long == "help" {
                    continue;
                }
                let how = REMOTE_FLAGS.iter().find(|f| f.0 == long).map(|f| f.1);
                let how = how
                    .unwrap_or_else(|| panic!("kvad {sub} --{long}: not in REMOTE_FLAGS, so a server would drop it"));
                let value = match long {
                    "seed" | "max-tokens" | "top-k" | "logprobs" | "threads" | "ctx" => "7",
                    "backend" => "cpu-q4",
                    "quant" => "q4",
                    "dtype" => "f32",
                    "system" | "prompt" => "marker-text",
                    _ => "0.25",
                };
                let flag = format!("--{long}");
                let mut argv = vec!["kvad", sub, "m", &flag, value];
                if sub == "run" && long != "prompt" {
                    argv.extend(["-p", "hi"]);
                }
                let cli = parse(&argv);
                let a = match &cli.command {
                    crate::args::Command::Run(r) => r.model.clone(),
                    crate::args::Command::Chat(m) => m.clone(),
                    _ => unreachable!(),
                };
                match how {
                    Remote::Sent("messages") => {
                        let (system, prompt) = match &cli.command {
                            crate::args::Command::Run(r) => (r.model.system.clone(), Some(r.prompt.clone())),
                            _ => (a.system.clone(), None),
                        };
                        let mut m = crate::generate::with_system(&system);
                        if let Some(p) = prompt {
                            m.push(json!({"role": "user", "content": p}));
                        }
                        assert!(json!(m).to_string().contains("marker-text"), "kvad {sub} --{long}: {m:?}");
                    }
                    Remote::Sent(field) => {
                        let body = sampling(&a);
                        let sent = body[field].to_string();
                        assert!(sent == value || sent == format!("{value}.0"), "kvad {sub} --{long}: {field} = {sent}");
                    }
                    Remote::Loads => {
                        let want = if long == "dtype" { "cpu-f32" } else { "cpu-q4" };
                        assert_eq!(a.named_backend().unwrap().as_deref(), Some(want), "{long}");
                    }
                    Remote::Refused => {
                        // Refused before anything is asked of the (unreachable) server.
                        let e = match &cli.command {
                            crate::args::Command::Run(r) => run("http://127.0.0.1:1", r, false).unwrap_err(),
                            _ => chat("http://127.0.0.1:1", &a, false).unwrap_err(),
                        };
                        assert!(e.to_string().contains(&flag), "kvad {sub} --{long}: {e}");
                    }
                }
            }
        }
    }
}
