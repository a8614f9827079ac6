//! `kvad bench --concurrency N`: a load generator against a running server. Each round runs one stream alone and
//! then N streams at once (interleaved, so both see the same machine), each a streamed text completion with a
//! prompt of its own (so no kept conversation serves it); it reports the aggregate decode rate per round (median and
//! range), the ratio to one stream, and percentiles of time to first token and of the gaps between tokens. With
//! `--join-prompt T`, a round also sends a T-token prompt while one stream is under way and reports that stream's
//! longest silence.

use super::http_error;
use crate::args::BenchArgs;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

/// One stream's timings.
#[derive(Debug, Clone, Default)]
struct Stream {
    ttft: Option<f64>,
    /// Seconds between consecutive deltas.
    gaps: Vec<f64>,
    /// When each delta arrived.
    times: Vec<Instant>,
    tokens: u64,
    prompt_tokens: u64,
}

fn prompt(words: usize, tag: &str) -> String {
    const TEXT: &str = "the river runs past the old mill and the town where people walk slowly in the evening light ";
    let mut s = format!("Request {tag}. ");
    let mut n = 0;
    while n < words {
        for w in TEXT.split_whitespace() {
            s.push_str(w);
            s.push(' ');
            n += 1;
        }
    }
    s
}

fn one(url: &str, model: &str, text: &str, max_tokens: usize) -> Result<Stream> {
    // A plain completion that goes on to max_tokens (`ignore_eos`), so every trial writes the same number of tokens.
    let body = json!({"model": model, "stream": true, "stream_options": {"include_usage": true}, "temperature": 0,
        "max_tokens": max_tokens, "prompt": text, "ignore_eos": true});
    let t0 = Instant::now();
    let resp =
        super::with_auth(url, ureq::post(&format!("{url}/v1/completions"))).send_json(body).map_err(http_error)?;
    let mut s = Stream::default();
    let mut last = None::<Instant>;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.context("reading the stream")?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data)?;
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            s.tokens = u["completion_tokens"].as_u64().unwrap_or(0);
            s.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
        }
        let has_text = v["choices"][0]["text"].as_str().is_some_and(|c| !c.is_empty());
        if has_text {
            let now = Instant::now();
            match last {
                None => s.ttft = Some(now.duration_since(t0).as_secs_f64()),
                Some(l) => s.gaps.push(now.duration_since(l).as_secs_f64()),
            }
            s.times.push(now);
            last = Some(now);
        }
    }
    Ok(s)
}

/// `n` streams at once; returns them and the wall time.
fn trial(url: &str, model: &str, n: usize, a: &BenchArgs, tag: &str) -> Result<(Vec<Stream>, f64)> {
    let t0 = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (url, model, text) =
                (url.to_string(), model.to_string(), prompt(a.prompt_tokens, &format!("{tag}-{i}")));
            let max = a.gen_tokens;
            std::thread::spawn(move || one(&url, &model, &text, max))
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.join().map_err(|_| anyhow::anyhow!("a stream's thread panicked"))??);
    }
    Ok((out, t0.elapsed().as_secs_f64()))
}

/// The longest silence of a stream while a long prompt joins.
fn join_trial(url: &str, model: &str, a: &BenchArgs, words: usize, tag: &str) -> Result<(f64, f64)> {
    let (u, m) = (url.to_string(), model.to_string());
    let text = prompt(a.prompt_tokens, &format!("{tag}-s"));
    let gen = a.gen_tokens.max(256);
    let streaming = std::thread::spawn(move || one(&u, &m, &text, gen));
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    let long = one(url, model, &prompt(words, &format!("{tag}-long")), 2)?;
    let t1 = Instant::now();
    let s = streaming.join().map_err(|_| anyhow::anyhow!("the stream's thread panicked"))??;
    if s.times.last().is_none_or(|&l| l < t1) {
        bail!("the stream ended before the long prompt was read: raise --gen-tokens");
    }
    // Gaps that overlap the window the long prompt was being read in.
    let mut worst = 0f64;
    for w in s.times.windows(2) {
        if w[1] > t0 && w[0] < t1 {
            worst = worst.max(w[1].duration_since(w[0]).as_secs_f64());
        }
    }
    Ok((worst, long.ttft.unwrap_or(f64::NAN)))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
}

fn summary(v: &[f64]) -> Value {
    let s = kvad_engine::bench::Summary::of(v);
    s.map_or(Value::Null, |s| json!({"median": s.median, "min": s.min, "max": s.max}))
}

fn fmt(v: &Value, unit: &str, scale: f64) -> String {
    format!(
        "{:.2} {unit} ({:.2}–{:.2})",
        v["median"].as_f64().unwrap_or(f64::NAN) * scale,
        v["min"].as_f64().unwrap_or(f64::NAN) * scale,
        v["max"].as_f64().unwrap_or(f64::NAN) * scale
    )
}

/// Runs the load generator.
pub fn run(url: &str, a: &BenchArgs, json_out: bool) -> Result<()> {
    let n = a.concurrency.unwrap_or(1);
    if n == 0 || a.rounds == 0 {
        bail!("--concurrency {n} --rounds {}: both must be at least 1", a.rounds);
    }
    let model = a.models.first().cloned().unwrap_or_default();
    eprintln!(
        "kvad bench: {url}, {model}: {} rounds (+{} warm-up) of 1 stream then {n} at once, prompt ~{} words, {} tokens each",
        a.rounds, a.warmup, a.prompt_tokens, a.gen_tokens
    );
    let (mut single, mut many, mut ttft, mut itl, mut silence, mut newcomer) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for round in 0..a.warmup + a.rounds {
        let timed = round >= a.warmup;
        let (s1, w1) = trial(url, &model, 1, a, &format!("r{round}a"))?;
        let (sn, wn) = trial(url, &model, n, a, &format!("r{round}b"))?;
        let rate = |s: &[Stream], w: f64| s.iter().map(|x| x.tokens).sum::<u64>() as f64 / w;
        if timed {
            single.push(rate(&s1, w1));
            many.push(rate(&sn, wn));
            ttft.extend(sn.iter().filter_map(|s| s.ttft));
            itl.extend(sn.iter().flat_map(|s| s.gaps.iter().copied()));
        }
        if let Some(words) = a.join_prompt {
            let (worst, t) = join_trial(url, &model, a, words, &format!("r{round}c"))?;
            if timed {
                silence.push(worst);
                newcomer.push(t);
            }
        }
        eprintln!("kvad bench: round {round} done{}", if timed { "" } else { " (warm-up)" });
    }
    let ratio: Vec<f64> = many.iter().zip(&single).map(|(m, s)| m / s).collect();
    let out = json!({
        "concurrency": n,
        "one_stream_tok_s": summary(&single),
        "concurrent_tok_s": summary(&many),
        "ratio": summary(&ratio),
        "ttft_s": {"p50": pct(&mut ttft.clone(), 50.0), "p90": pct(&mut ttft.clone(), 90.0), "max": pct(&mut ttft, 100.0)},
        "itl_s": {"p50": pct(&mut itl.clone(), 50.0), "p90": pct(&mut itl.clone(), 90.0),
                  "p99": pct(&mut itl.clone(), 99.0), "max": pct(&mut itl, 100.0)},
        "join": a.join_prompt.map(|w| json!({"prompt_words": w, "longest_silence_s": summary(&silence),
                                             "newcomer_ttft_s": summary(&newcomer)})),
    });
    if json_out {
        println!("{out}");
        return Ok(());
    }
    println!("one stream:        {}", fmt(&out["one_stream_tok_s"], "tok/s", 1.0));
    println!("{n} streams at once: {}", fmt(&out["concurrent_tok_s"], "tok/s", 1.0));
    println!("ratio:             {}", fmt(&out["ratio"], "x", 1.0));
    let t = &out["ttft_s"];
    println!("TTFT ({n} at once): p50 {:.3} s · p90 {:.3} s · max {:.3} s", t["p50"], t["p90"], t["max"]);
    let i = &out["itl_s"];
    println!(
        "between tokens:    p50 {:.3} s · p90 {:.3} s · p99 {:.3} s · max {:.3} s",
        i["p50"], i["p90"], i["p99"], i["max"]
    );
    if let Some(j) = out["join"].as_object() {
        println!(
            "longest silence while a {}-word prompt joins: {}",
            j["prompt_words"],
            fmt(&j["longest_silence_s"], "s", 1.0)
        );
        println!("that prompt's first token: {}", fmt(&j["newcomer_ttft_s"], "s", 1.0));
    }
    Ok(())
}
