//! `kvad bench --concurrency N`: a load generator against a running server. Each round runs one stream alone and
//! then N streams at once (interleaved, so both see the same machine), each a streamed text completion with a
//! prompt of its own (so no kept conversation serves it); it reports the aggregate rate per round (median and
//! range: all tokens over the trial's wall time, prompt reading included), the decode rate (the stretch where all N
//! write, against one stream's tokens after its first), each ratio to one stream, and percentiles of time to first token and of the gaps between tokens. With
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
pub(super) struct Stream {
    /// Seconds from sending to the first token.
    pub(super) ttft: Option<f64>,
    /// Seconds between consecutive deltas.
    pub(super) gaps: Vec<f64>,
    /// When each delta arrived.
    pub(super) times: Vec<Instant>,
    /// Tokens generated (the server's usage).
    pub(super) tokens: u64,
    /// Prompt tokens (the server's usage).
    pub(super) prompt_tokens: u64,
}

/// A prompt of about `words` words (a token each, roughly), tagged so that no two share a kept conversation.
pub(super) fn prompt(words: usize, tag: &str) -> String {
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

/// One streamed completion of exactly `max_tokens` tokens, timed.
pub(super) fn one(url: &str, model: &str, text: &str, max_tokens: usize) -> Result<Stream> {
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

/// Total decode tok/s of streams that ran together, over the stretch where every one of them was writing: from the
/// last stream's first token to the first stream's last. Tokens are counted as deltas (scaled by each stream's
/// tokens per delta, 1 for these prompts); prompt reading before that stretch and stragglers after it are left
/// out, as a one-stream decode rate leaves out its prompt. `None` when the stretch is empty.
fn decode_rate(streams: &[Stream]) -> Option<f64> {
    let firsts: Option<Vec<Instant>> = streams.iter().map(|s| s.times.first().copied()).collect();
    let lasts: Option<Vec<Instant>> = streams.iter().map(|s| s.times.last().copied()).collect();
    let start = firsts?.into_iter().max()?;
    let end = lasts?.into_iter().min()?;
    let secs = end.checked_duration_since(start)?.as_secs_f64();
    if secs <= 0.0 {
        return None;
    }
    let tokens: f64 = streams
        .iter()
        .map(|s| {
            let per = s.tokens as f64 / s.times.len().max(1) as f64;
            s.times.iter().filter(|&&t| t > start && t <= end).count() as f64 * per
        })
        .sum();
    Some(tokens / secs)
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
    let (mut single_dec, mut many_dec) = (vec![], vec![]);
    for round in 0..a.warmup + a.rounds {
        let timed = round >= a.warmup;
        let (s1, w1) = trial(url, &model, 1, a, &format!("r{round}a"))?;
        let (sn, wn) = trial(url, &model, n, a, &format!("r{round}b"))?;
        let rate = |s: &[Stream], w: f64| s.iter().map(|x| x.tokens).sum::<u64>() as f64 / w;
        if timed {
            single.push(rate(&s1, w1));
            many.push(rate(&sn, wn));
            let (d1, dn) = (decode_rate(&s1), decode_rate(&sn));
            if let (Some(d1), Some(dn)) = (d1, dn) {
                single_dec.push(d1);
                many_dec.push(dn);
            }
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
    let dec_ratio: Vec<f64> = many_dec.iter().zip(&single_dec).map(|(m, s)| m / s).collect();
    let out = json!({
        "concurrency": n,
        "one_stream_tok_s": summary(&single),
        "concurrent_tok_s": summary(&many),
        "ratio": summary(&ratio),
        "decode": {"one_stream_tok_s": summary(&single_dec), "concurrent_tok_s": summary(&many_dec),
                   "ratio": summary(&dec_ratio)},
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
    let d = &out["decode"];
    println!("decode only (tokens after the first; {n} at once: while all {n} write):");
    println!("  one stream:      {}", fmt(&d["one_stream_tok_s"], "tok/s", 1.0));
    println!("  {n} at once:       {}", fmt(&d["concurrent_tok_s"], "tok/s", 1.0));
    println!("  ratio:           {}", fmt(&d["ratio"], "x", 1.0));
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let t = &out["ttft_s"];
    println!("TTFT ({n} at once): p50 {:.3} s · p90 {:.3} s · max {:.3} s", f(&t["p50"]), f(&t["p90"]), f(&t["max"]));
    let i = &out["itl_s"];
    println!(
        "between tokens:    p50 {:.3} s · p90 {:.3} s · p99 {:.3} s · max {:.3} s",
        f(&i["p50"]),
        f(&i["p90"]),
        f(&i["p99"]),
        f(&i["max"])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(t0: Instant, ms: &[u64]) -> Stream {
        let times: Vec<Instant> = ms.iter().map(|&m| t0 + Duration::from_millis(m)).collect();
        Stream { tokens: times.len() as u64, times, ..Stream::default() }
    }

    #[test]
    fn decode_rate_counts_only_the_stretch_where_every_stream_writes() {
        let t0 = Instant::now();
        // One stream: 11 tokens 10 ms apart → 10 tokens after its first in 100 ms.
        let one = [stream(t0, &(0..11).map(|i| i * 10).collect::<Vec<_>>())];
        assert!((decode_rate(&one).unwrap() - 100.0).abs() < 1e-6);
        // Two streams: the second starts at 500 ms (its prompt read while the first wrote), both write every 20 ms
        // until the first ends at 1000 ms; the second goes on alone. The stretch is 500..1000 ms: 25 tokens each
        // after 500 ms, 50 in 0.5 s.
        let a = stream(t0, &(0..=50).map(|i| i * 20).collect::<Vec<_>>());
        let b = stream(t0, &(25..=75).map(|i| i * 20).collect::<Vec<_>>());
        assert!((decode_rate(&[a.clone(), b]).unwrap() - 100.0).abs() < 1e-6);
        // A stream that ended before another began: no shared stretch.
        let c = stream(t0, &[2000, 2010]);
        assert_eq!(decode_rate(&[a, c]), None);
        assert_eq!(decode_rate(&[Stream::default()]), None);
    }
}
