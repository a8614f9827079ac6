//! `kvad queue`, `ps`, `load`, `unload` and `metrics usage`: what the server holds and who used it; `kvad embed`.

use super::{get_json, http_error};
use anyhow::Result;
use serde_json::{json, Value};

fn gb(v: &Value) -> String {
    let b = v.as_f64().unwrap_or(0.0);
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else {
        format!("{:.0} MB", b / 1e6)
    }
}

pub(crate) fn post(url: &str, path: &str, body: Value) -> Result<Value> {
    Ok(super::with_auth(url, ureq::post(&format!("{url}{path}"))).send_json(body).map_err(http_error)?.into_json()?)
}

/// `kvad queue`.
pub fn queue(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/queue")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let l = &v["limits"];
    println!(
        "limits: queue {} · per account {} · per minute {} · batch {}",
        l["queue"],
        l["queue_per_account"],
        if l["generations_per_minute"].is_null() { "off".to_string() } else { l["generations_per_minute"].to_string() },
        l["batch"]
    );
    println!("{:<6} {:<8} {:<9} {:<28} {:<16} WAITED", "ID", "STATE", "KIND", "MODEL", "ACCOUNT");
    let s = |x: &Value| x.as_str().unwrap_or("-").to_string();
    for r in v["running"].as_array().into_iter().flatten() {
        println!(
            "{:<6} {:<8} {:<9} {:<28} {:<16} -",
            r["id"],
            s(&r["phase"]),
            s(&r["kind"]),
            s(&r["model"]),
            s(&r["account"])
        );
    }
    for w in v["waiting"].as_array().into_iter().flatten() {
        let next = if w["id"] == v["next"] { "next" } else { "waiting" };
        let waited = format!("{:.1} s", w["waited_s"].as_f64().unwrap_or(0.0));
        println!(
            "{:<6} {:<8} {:<9} {:<28} {:<16} {waited}",
            w["id"],
            next,
            s(&w["kind"]),
            s(&w["model"]),
            s(&w["account"])
        );
    }
    Ok(())
}

/// `kvad ps`: the seed's table (model@backend, charged, context, the cache bytes a token adds, cached) and the
/// memory line.
pub fn ps(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/ps")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("{:<50} {:<8} {:<8} {:<10} {:<8} CONVERSATIONS", "MODEL", "CHARGED", "CONTEXT", "KV/TOKEN", "CACHED");
    let models = v["models"].as_array().cloned().unwrap_or_default();
    for m in &models {
        println!(
            "{:<50} {:<8} {:<8} {:<10} {:<8} {}",
            m["name"].as_str().unwrap_or("?"),
            gb(&m["charged_bytes"]),
            m["context"],
            format!("{} B", m["cache_bytes_per_token"]),
            m["cached_tokens"],
            m["conversations"]
        );
    }
    let contexts: Vec<String> = models.iter().map(|m| m["context"].to_string()).collect();
    println!(
        "\nmemory: {} of {} left{}",
        gb(&v["memory"]["left_bytes"]),
        gb(&v["memory"]["total_bytes"]),
        if contexts.is_empty() {
            String::new()
        } else {
            format!(" · each charged for {} tokens of KV cache", contexts.join("/"))
        }
    );
    Ok(())
}

/// `kvad load MODEL [--backend B]`: without a backend the server picks its own (`[server] backend`), and the
/// answer says which it is on.
pub fn load(url: &str, model: &str, backend: Option<&str>, json_out: bool) -> Result<()> {
    let mut body = json!({"model": model});
    if let Some(b) = backend {
        body["backend"] = json!(b);
    }
    let v = post(url, "/api/load", body)?;
    if json_out {
        println!("{v}");
    } else {
        match v["backend"].as_str() {
            Some(on) => println!("loaded {model} on {on}"),
            None => println!("loaded {model}"),
        }
    }
    Ok(())
}

/// `kvad use MODEL` with a server answering: its default model too.
pub fn use_model(url: &str, model: &str) -> Result<()> {
    let r = super::with_auth(url, ureq::request("PATCH", &format!("{url}/api/settings")))
        .send_json(json!({"default_model": model}))
        .map_err(http_error)?;
    let v: Value = r.into_json()?;
    eprintln!("kvad: {url}'s default model is now {}", v["server"]["default_model"].as_str().unwrap_or(model));
    Ok(())
}

/// `kvad unload [MODEL]`.
pub fn unload(url: &str, model: Option<&str>, json_out: bool) -> Result<()> {
    let body = model.map_or_else(|| json!({"all": true}), |m| json!({"model": m}));
    let v = post(url, "/api/unload", body)?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    let names: Vec<&str> = v["unloaded"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    println!(
        "{}",
        if names.is_empty() { "nothing was loaded".to_string() } else { format!("unloaded {}", names.join(", ")) }
    );
    Ok(())
}

/// `kvad metrics usage`.
pub fn usage(url: &str, days: u32, json_out: bool) -> Result<()> {
    let v = get_json(url, &format!("/api/metrics/usage?days={days}"))?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("last {days} days");
    println!(
        "{:<20} {:>8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}",
        "ACCOUNT", "REQUESTS", "PROMPT", "CACHED", "GENERATED", "WAIT MEAN", "WAIT MAX", "TTFT MEAN"
    );
    let msf = |x: &Value| x.as_f64().map_or("-".to_string(), |m| format!("{m:.0} ms"));
    for a in v["accounts"].as_array().into_iter().flatten() {
        println!(
            "{:<20} {:>8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}",
            a["account"].as_str().unwrap_or("?"),
            a["requests"],
            a["prompt_tokens"],
            a["cached_tokens"],
            a["generated_tokens"],
            msf(&a["queue_ms_mean"]),
            msf(&a["queue_ms_max"]),
            msf(&a["ttft_ms_mean"])
        );
    }
    Ok(())
}

/// `kvad embed MODEL TEXT...`: a line `{"index": i, "embedding": [...]}` per text, as the server computed them.
pub fn embed(url: &str, model: &str, texts: &[String], dimensions: Option<usize>, json_out: bool) -> Result<()> {
    let mut body = json!({"model": model, "input": texts});
    if let Some(d) = dimensions {
        body["dimensions"] = json!(d);
    }
    let v = post(url, "/v1/embeddings", body)?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    for d in v["data"].as_array().cloned().unwrap_or_default() {
        println!("{}", json!({"index": d["index"], "embedding": d["embedding"]}));
    }
    Ok(())
}
