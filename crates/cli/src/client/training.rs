//! `kvad datasets`, `kvad jobs`, `kvad train` and `kvad evals`: training and evals on the server, as the Training,
//! Datasets and Evals pages do.

use super::{get_json, http_error, with_auth};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

fn send(url: &str, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
    let req = with_auth(url, ureq::request(method, &format!("{url}{path}")));
    let r = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    Ok(r.map_err(http_error)?.into_json()?)
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

/// `kvad datasets list`.
pub fn datasets_list(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/datasets")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("{:<24} {:<28} {:<9} {:>8} {:>6} {:>10}", "ID", "NAME", "FORMAT", "RECORDS", "HELD", "BYTES");
    for d in v["data"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:<28} {:<9} {:>8} {:>6} {:>10}",
            s(&d["id"]),
            s(&d["name"]),
            s(&d["format"]),
            s(&d["records"]),
            s(&d["validation_records"]),
            s(&d["bytes"])
        );
    }
    Ok(())
}

/// Uploads a file (`POST /api/datasets`); returns the dataset.
pub fn upload(url: &str, file: &std::path::Path, name: Option<&str>, validation: Option<f64>) -> Result<Value> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name = name.map(str::to_string).unwrap_or_else(|| {
        file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "dataset".into())
    });
    let mut req = with_auth(url, ureq::post(&format!("{url}/api/datasets"))).query("name", &name);
    if let Some(v) = validation {
        req = req.query("validation", &v.to_string());
    }
    Ok(req.send_bytes(&bytes).map_err(http_error)?.into_json()?)
}

/// Where a dataset comes from.
pub enum Source<'a> {
    /// A file here, uploaded.
    File(&'a std::path::Path),
    /// A Hub dataset repo (`owner/name[@revision]`) and split, fetched by the server.
    Hub(&'a str, Option<&'a str>),
}

/// `kvad datasets add FILE` or `kvad datasets add --hub REPO [--split S]`.
pub fn datasets_add(
    url: &str,
    source: Source<'_>,
    name: Option<&str>,
    validation: Option<f64>,
    json_out: bool,
) -> Result<()> {
    let d = match source {
        Source::File(file) => upload(url, file, name, validation)?,
        Source::Hub(repo, split) => {
            let mut req = with_auth(url, ureq::post(&format!("{url}/api/datasets"))).query("hub", repo);
            for (k, v) in [
                ("split", split.map(str::to_string)),
                ("name", name.map(str::to_string)),
                ("validation", validation.map(|v| v.to_string())),
            ] {
                if let Some(v) = v {
                    req = req.query(k, &v);
                }
            }
            req.send_bytes(&[]).map_err(http_error)?.into_json()?
        }
    };
    if json_out {
        println!("{d}");
    } else {
        println!(
            "{} ({}): {} {} records ({} held out for validation)",
            s(&d["id"]),
            s(&d["name"]),
            s(&d["records"]),
            s(&d["format"]),
            s(&d["validation_records"])
        );
    }
    Ok(())
}

/// `kvad datasets show ID`.
pub fn datasets_show(url: &str, id: &str, rows: Option<usize>, model: Option<&str>) -> Result<()> {
    let mut path = format!("/api/datasets/{id}?rows={}", rows.unwrap_or(5));
    if let Some(m) = model {
        path.push_str(&format!("&model={m}"));
    }
    println!("{}", serde_json::to_string_pretty(&get_json(url, &path)?)?);
    Ok(())
}

/// `kvad datasets rm ID`.
pub fn datasets_rm(url: &str, id: &str) -> Result<()> {
    send(url, "DELETE", &format!("/api/datasets/{id}"), None)?;
    println!("deleted {id}");
    Ok(())
}

/// `kvad jobs list`.
pub fn jobs_list(url: &str, json_out: bool) -> Result<()> {
    let v = get_json(url, "/api/jobs")?;
    if json_out {
        println!("{v}");
        return Ok(());
    }
    println!("{:<24} {:<6} {:<10} {:<24} {:>8} {:>9}", "ID", "KIND", "STATE", "OUTPUT", "STEP", "LOSS");
    for j in v["data"].as_array().into_iter().flatten() {
        let step = &j["last_step"];
        let loss = step["loss"].as_f64().map_or("-".into(), |l| format!("{l:.4}"));
        println!(
            "{:<24} {:<6} {:<10} {:<24} {:>8} {:>9}",
            s(&j["id"]),
            s(&j["kind"]),
            s(&j["state"]),
            s(&j["spec"]["output"]),
            step["step"].as_u64().map_or("-".into(), |n| (n + 1).to_string()),
            loss
        );
    }
    Ok(())
}

/// `kvad jobs show ID`.
pub fn jobs_show(url: &str, id: &str) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(&get_json(url, &format!("/api/jobs/{id}"))?)?);
    Ok(())
}

/// `kvad jobs cancel ID`.
pub fn jobs_cancel(url: &str, id: &str) -> Result<()> {
    let v = send(url, "DELETE", &format!("/api/jobs/{id}"), None)?;
    if v["cancelling"] == true {
        println!("{id}: cancelling after the step it is on");
    } else {
        println!("{id}: not running ({})", s(&v["state"]));
    }
    Ok(())
}

/// `kvad jobs resume ID`: the run continued from its latest checkpoint as a new job, followed.
pub fn jobs_resume(url: &str, id: &str, json_out: bool) -> Result<()> {
    let job = send(url, "POST", &format!("/api/jobs/{id}/resume"), None)?;
    let new = s(&job["id"]);
    if !json_out {
        println!("job {new}: {id} resumed from {}", s(&job["spec"]["resumed"]["checkpoint"]));
    }
    jobs_follow(url, &new, json_out)
}

/// `kvad jobs follow ID`: its events until it ends (a line each; with --json the events as sent). Fails when the
/// job failed.
pub fn jobs_follow(url: &str, id: &str, json_out: bool) -> Result<()> {
    let r = with_auth(url, ureq::get(&format!("{url}/api/jobs/{id}/events"))).call().map_err(http_error)?;
    let mut end = Value::Null;
    for line in BufReader::new(r.into_reader()).lines() {
        let Some(data) = line?.strip_prefix("data: ").map(str::to_string) else { continue };
        let ev: Value = serde_json::from_str(&data)?;
        if json_out {
            println!("{ev}");
        } else {
            match ev["type"].as_str() {
                Some("start") if ev["documents"].is_number() => {
                    println!("perplexity of {} over {} documents", s(&ev["model"]), s(&ev["documents"]))
                }
                Some("start") if ev["items"].is_number() => {
                    println!("asking {} items of {}", s(&ev["items"]), s(&ev["models"]))
                }
                Some("start") if ev["rounds"].is_number() => {
                    println!("benchmark of {}, {} rounds", s(&ev["models"]), s(&ev["rounds"]))
                }
                Some("step") if ev["perplexity"].is_number() => println!(
                    "{:>6} of {} documents  {} tokens  perplexity {:.4}",
                    s(&ev["documents"]),
                    s(&ev["of"]),
                    s(&ev["tokens"]),
                    ev["perplexity"].as_f64().unwrap_or(f64::NAN)
                ),
                Some("sample") => println!(
                    "{} round {}: prefill {:.1} tok/s, decode {:.1} tok/s, first token {:.1} ms",
                    s(&ev["model"]),
                    s(&ev["sample"]["round"]),
                    ev["sample"]["prefill_tps"].as_f64().unwrap_or(0.0),
                    ev["sample"]["decode_tps"].as_f64().unwrap_or(0.0),
                    ev["sample"]["ttft_ms"].as_f64().unwrap_or(0.0)
                ),
                Some("start") => println!(
                    "training {} of {} parameters on {} rows ({} for validation)",
                    s(&ev["trained_parameters"]),
                    s(&ev["parameters"]),
                    s(&ev["train_rows"]),
                    s(&ev["validation_rows"])
                ),
                Some("step") => println!(
                    "step {:>6}  loss {:.4}  lr {:.2e}  grad {:.3}  {:.0} tok/s",
                    ev["step"].as_u64().unwrap_or(0) + 1,
                    ev["loss"].as_f64().unwrap_or(f64::NAN),
                    ev["lr"].as_f64().unwrap_or(0.0),
                    ev["grad_norm"].as_f64().unwrap_or(0.0),
                    ev["tokens_per_s"].as_f64().unwrap_or(0.0)
                ),
                Some("eval") => println!(
                    "validation loss {:.4} after step {}",
                    ev["loss"].as_f64().unwrap_or(f64::NAN),
                    s(&ev["step"])
                ),
                Some("checkpoint") => println!("checkpoint: {}", s(&ev["path"])),
                Some("item") => println!(
                    "{} #{}: {}",
                    s(&ev["model"]),
                    s(&ev["index"]),
                    if ev["correct"] == true { "right" } else { "wrong" }
                ),
                _ => {}
            }
        }
        if ev["type"] == "state" && ev["state"] != "running" {
            end = ev;
        }
    }
    match end["state"].as_str() {
        Some("done") => {
            if !json_out {
                let r = &end["result"];
                match (r["models"].as_array(), r["summary"].as_array()) {
                    (Some(scores), _) => scores
                        .iter()
                        .for_each(|m| println!("{}: {} of {} right", s(&m["model"]), s(&m["correct"]), s(&m["total"]))),
                    (_, Some(rows)) => rows.iter().for_each(|m| {
                        let med = |k: &str| m[k]["median"].as_f64().unwrap_or(0.0);
                        println!(
                            "{}: decode {:.1} tok/s, prefill {:.1} tok/s, first token {:.1} ms (medians of {})",
                            s(&m["model"]),
                            med("decode_tps"),
                            med("prefill_tps"),
                            med("ttft_ms"),
                            s(&m["samples"])
                        )
                    }),
                    _ if r["perplexity"].is_number() => println!(
                        "{} on {}: perplexity {:.4} over {} tokens of {} documents",
                        s(&r["model"]),
                        s(&r["backend"]),
                        r["perplexity"].as_f64().unwrap_or(f64::NAN),
                        s(&r["tokens"]),
                        s(&r["documents"])
                    ),
                    _ => println!("done: {}", s(&r["model"])),
                }
            }
            Ok(())
        }
        Some("cancelled") => {
            if !json_out {
                println!("cancelled after {} steps", s(&end["result"]["steps"]));
            }
            Ok(())
        }
        Some("failed") => bail!("job {id} failed: {}", s(&end["error"])),
        _ => bail!("the event stream of job {id} ended before the job did"),
    }
}

/// What `kvad train` asks for.
pub struct TrainArgs<'a> {
    /// The model to fine-tune.
    pub model: Option<&'a str>,
    /// Or a config.json for a model from scratch.
    pub config: Option<&'a std::path::Path>,
    /// A file to upload as the dataset.
    pub data: Option<&'a std::path::Path>,
    /// Or an uploaded dataset's id.
    pub dataset: Option<&'a str>,
    /// Everything else, as `POST /api/jobs` fields.
    pub fields: Value,
}

/// `kvad train`: uploads the data when a file is given, starts the job and follows it.
pub fn train(url: &str, a: TrainArgs<'_>, json_out: bool) -> Result<()> {
    let dataset = match (a.data, a.dataset) {
        (Some(f), None) => s(&upload(url, f, None, None)?["id"]),
        (None, Some(id)) => id.to_string(),
        _ => bail!("give the data as --data FILE or --dataset ID (one of them)"),
    };
    let mut body = a.fields;
    body["kind"] = json!("train");
    body["dataset"] = json!(dataset);
    match (a.model, a.config) {
        (Some(m), None) => body["model"] = json!(m),
        (None, Some(c)) => {
            let text = std::fs::read_to_string(c).with_context(|| format!("reading {}", c.display()))?;
            body["config"] = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", c.display()))?;
        }
        _ => bail!("give a MODEL to fine-tune or --config FILE to start from (one of them)"),
    }
    let job = send(url, "POST", "/api/jobs", Some(body))?;
    let id = s(&job["id"]);
    if !json_out {
        println!(
            "job {id}: training trained:{} (follow again with `kvad jobs follow {id}`)",
            s(&job["spec"]["output"])
        );
    }
    jobs_follow(url, &id, json_out)
}

/// `kvad evals run` (`kind` eval) and `kvad evals ppl` (`kind` perplexity): uploads the data when a file is given
/// (nothing held out), starts the job and follows it.
pub fn eval(
    url: &str,
    kind: &str,
    (data, dataset): (Option<&std::path::Path>, Option<&str>),
    fields: Value,
    json_out: bool,
) -> Result<()> {
    let dataset = match (data, dataset) {
        (Some(f), None) => s(&upload(url, f, None, Some(0.0))?["id"]),
        (None, Some(id)) => id.to_string(),
        _ => bail!("give the data as --data FILE or --dataset ID (one of them)"),
    };
    let mut body: serde_json::Map<String, Value> = fields
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    body.insert("kind".into(), json!(kind));
    body.insert("dataset".into(), json!(dataset));
    let job = send(url, "POST", "/api/jobs", Some(Value::Object(body)))?;
    jobs_follow(url, &s(&job["id"]), json_out)
}

/// `kvad evals items JOB [--against JOB2]`: a line an answer; against another run, only the items scored otherwise.
pub fn eval_items(url: &str, job: &str, against: Option<&str>, json_out: bool) -> Result<()> {
    let items = |id: &str| get_json(url, &format!("/api/jobs/{id}/items"));
    let mine = items(job)?;
    let key = |v: &Value| (s(&v["model"]), v["index"].as_u64().unwrap_or(0));
    let other: std::collections::HashMap<(String, u64), Value> = match against {
        Some(j) => items(j)?["data"].as_array().into_iter().flatten().map(|v| (key(v), v.clone())).collect(),
        None => Default::default(),
    };
    for it in mine["data"].as_array().into_iter().flatten() {
        let theirs = other.get(&key(it));
        if against.is_some() && theirs.is_none_or(|t| t["correct"] == it["correct"]) {
            continue;
        }
        if json_out {
            println!("{}", json!({"item": it, "against": theirs}));
            continue;
        }
        let mark = |v: &Value| if v["correct"] == true { "right" } else { "wrong" };
        print!(
            "{} #{} {}: {:?} (expected {:?})",
            s(&it["model"]),
            s(&it["index"]),
            mark(it),
            s(&it["answer"]),
            s(&it["expected"])
        );
        match theirs {
            Some(t) => {
                println!("; {against:?} was {}: {:?}", mark(t), s(&t["answer"]), against = against.unwrap_or_default())
            }
            None => println!(),
        }
    }
    Ok(())
}
