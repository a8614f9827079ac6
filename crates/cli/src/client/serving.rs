//! `kvad bench --request-rate R`: a serving benchmark as `vllm bench serve` and guidellm run one. Requests arrive
//! as a Poisson process at R a second (or all at once with `inf`), each a streamed completion whose prompt and
//! output lengths are drawn uniformly within `--length-spread` of `--prompt-tokens` and `--gen-tokens`; at most
//! `--max-concurrency` are in flight. It reports throughput (requests, output and total tokens a second), the
//! percentiles of time to first token, time per output token, inter-token latency and end-to-end latency, and the
//! goodput: the requests a second that met the SLO (`--slo-ttft`, `--slo-tpot`).

use super::loadgen::{one, prompt, Stream};
use crate::args::BenchArgs;
use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A small seeded generator (SplitMix64): arrivals and lengths repeat for a seed, with no dependency for it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One request of the plan: when it is sent (seconds from the start) and its lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Planned {
    at: f64,
    prompt: usize,
    output: usize,
}

/// The requests to send: Poisson arrivals at `rate` a second (exponential gaps; all at 0 for an infinite rate),
/// lengths uniform in `mean · (1 ± spread)`, at least 1.
fn plan(n: usize, rate: f64, prompt: usize, output: usize, spread: f64, seed: u64) -> Vec<Planned> {
    let mut rng = Rng(seed);
    let mut at = 0.0;
    let draw = |mean: usize, rng: &mut Rng| {
        let lo = mean as f64 * (1.0 - spread);
        let hi = mean as f64 * (1.0 + spread);
        ((lo + (hi - lo) * rng.unit()).round() as usize).max(1)
    };
    (0..n)
        .map(|i| {
            if i > 0 && rate.is_finite() {
                at += -(1.0 - rng.unit()).ln() / rate;
            }
            let p = draw(prompt, &mut rng);
            Planned { at, prompt: p, output: draw(output, &mut rng) }
        })
        .collect()
}

/// What one request gave.
struct Outcome {
    stream: Result<Stream>,
    /// Seconds from sending to its last token.
    e2e: f64,
}

/// Percentiles of `v` (p50, p90, p99), its mean and max; nulls when empty.
fn dist(v: &[f64]) -> Value {
    if v.is_empty() {
        return json!({"mean": null, "p50": null, "p90": null, "p99": null, "max": null});
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |p: f64| s[((p / 100.0) * (s.len() - 1) as f64).round() as usize];
    json!({"mean": s.iter().sum::<f64>() / s.len() as f64, "p50": at(50.0), "p90": at(90.0), "p99": at(99.0),
           "max": at(100.0)})
}

/// Time per output token of a stream: from its first token to its last, over the tokens after the first.
fn tpot(s: &Stream) -> Option<f64> {
    let (first, last) = (s.times.first()?, s.times.last()?);
    let after = s.tokens.checked_sub(1).filter(|&n| n > 0)?;
    Some(last.duration_since(*first).as_secs_f64() / after as f64)
}

/// Whether a finished request met the SLO (each bound that is set).
fn meets(s: &Stream, slo_ttft: Option<f64>, slo_tpot: Option<f64>) -> bool {
    let ttft_ok = slo_ttft.is_none_or(|b| s.ttft.is_some_and(|t| t <= b));
    let tpot_ok = slo_tpot.is_none_or(|b| tpot(s).is_none_or(|t| t <= b));
    ttft_ok && tpot_ok
}

/// The report of a run: what finished, over the wall time from the first request sent to the last token.
fn report(a: &BenchArgs, rate: f64, outcomes: &[Outcome], wall: f64) -> Value {
    let done: Vec<(&Stream, f64)> =
        outcomes.iter().filter_map(|o| o.stream.as_ref().ok().map(|s| (s, o.e2e))).collect();
    let failed: Vec<String> =
        outcomes.iter().filter_map(|o| o.stream.as_ref().err().map(|e| format!("{e:#}"))).collect();
    let output: u64 = done.iter().map(|(s, _)| s.tokens).sum();
    let input: u64 = done.iter().map(|(s, _)| s.prompt_tokens).sum();
    let ttft: Vec<f64> = done.iter().filter_map(|(s, _)| s.ttft).collect();
    let tpots: Vec<f64> = done.iter().filter_map(|(s, _)| tpot(s)).collect();
    let itl: Vec<f64> = done.iter().flat_map(|(s, _)| s.gaps.iter().copied()).collect();
    let e2e: Vec<f64> = done.iter().map(|&(_, e)| e).collect();
    let good = done.iter().filter(|(s, _)| meets(s, a.slo_ttft, a.slo_tpot)).count();
    json!({
        "request_rate": if rate.is_finite() { json!(rate) } else { json!("inf") },
        "max_concurrency": a.max_concurrency,
        "requests": outcomes.len(), "completed": done.len(), "failed": failed.len(),
        "errors": failed.iter().take(5).collect::<Vec<_>>(),
        "duration_s": wall,
        "input_tokens": input, "output_tokens": output,
        "request_throughput": done.len() as f64 / wall,
        "output_tok_s": output as f64 / wall,
        "total_tok_s": (input + output) as f64 / wall,
        "ttft_s": dist(&ttft), "tpot_s": dist(&tpots), "itl_s": dist(&itl), "e2e_s": dist(&e2e),
        "slo": {"ttft_s": a.slo_ttft, "tpot_s": a.slo_tpot},
        "goodput": {"requests_per_s": good as f64 / wall, "share": good as f64 / outcomes.len().max(1) as f64},
    })
}

/// A count of free places: at most `--max-concurrency` requests in flight.
struct Gate {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Gate {
    fn enter(&self) {
        let mut f = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while *f == 0 {
            f = self.cv.wait(f).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *f -= 1;
    }

    fn leave(&self) {
        *self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        self.cv.notify_one();
    }
}

/// Runs the serving benchmark.
pub fn run(url: &str, a: &BenchArgs, json_out: bool) -> Result<()> {
    let rate = a.request_rate.unwrap_or(f64::INFINITY);
    if rate.is_nan() || rate <= 0.0 {
        bail!("--request-rate {rate}: a positive number of requests a second, or inf");
    }
    if !(0.0..1.0).contains(&a.length_spread) {
        bail!("--length-spread {}: from 0 (every request the same) to below 1", a.length_spread);
    }
    if a.requests == 0 || a.prompt_tokens == 0 || a.gen_tokens == 0 {
        bail!("--requests, --prompt-tokens and --gen-tokens must each be at least 1");
    }
    if a.max_concurrency == Some(0) {
        bail!("--max-concurrency 0: at least 1 (leave it out for no limit)");
    }
    let model = a.models.first().cloned().unwrap_or_default();
    let seed = a.seed.unwrap_or(0);
    let planned = plan(a.requests, rate, a.prompt_tokens, a.gen_tokens, a.length_spread, seed);
    eprintln!(
        "kvad bench: {url}, {model}: {} requests at {} a second (Poisson), prompts ~{} and outputs {} tokens (±{:.0}%), \
         at most {} in flight",
        a.requests,
        if rate.is_finite() { format!("{rate}") } else { "inf".into() },
        a.prompt_tokens,
        a.gen_tokens,
        a.length_spread * 100.0,
        a.max_concurrency.map_or("any".into(), |c| c.to_string())
    );
    // A warm-up request first, so the model's load and first passes are not in the figures.
    for i in 0..a.warmup {
        one(url, &model, &prompt(a.prompt_tokens, &format!("warm-{seed}-{i}")), a.gen_tokens.min(16))?;
    }
    let gate = Arc::new(Gate { free: Mutex::new(a.max_concurrency.unwrap_or(usize::MAX)), cv: Condvar::new() });
    let t0 = Instant::now();
    let handles: Vec<_> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let wait = Duration::from_secs_f64(p.at).saturating_sub(t0.elapsed());
            std::thread::sleep(wait);
            gate.enter();
            let (url, model, gate, p) = (url.to_string(), model.clone(), gate.clone(), *p);
            let text = prompt(p.prompt, &format!("serve-{seed}-{i}"));
            std::thread::spawn(move || {
                let sent = Instant::now();
                let stream = one(&url, &model, &text, p.output);
                gate.leave();
                Outcome { stream, e2e: sent.elapsed().as_secs_f64() }
            })
        })
        .collect();
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Outcome { stream: Err(anyhow::anyhow!("panicked")), e2e: 0.0 }))
        .collect();
    let out = report(a, rate, &outcomes, t0.elapsed().as_secs_f64());
    if let Some(path) = &a.out {
        std::fs::write(path, format!("{out:#}\n"))?;
    }
    if json_out {
        println!("{out}");
    } else {
        print(&out);
    }
    if out["completed"].as_u64() == Some(0) {
        bail!("no request completed: {}", out["errors"]);
    }
    Ok(())
}

fn print(o: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let ms = |d: &Value| {
        format!(
            "mean {:.1} · p50 {:.1} · p90 {:.1} · p99 {:.1} · max {:.1} ms",
            f(&d["mean"]) * 1e3,
            f(&d["p50"]) * 1e3,
            f(&d["p90"]) * 1e3,
            f(&d["p99"]) * 1e3,
            f(&d["max"]) * 1e3
        )
    };
    println!("requests:    {} completed, {} failed, in {:.2} s", o["completed"], o["failed"], f(&o["duration_s"]));
    println!(
        "throughput:  {:.2} req/s · output {:.1} tok/s · total {:.1} tok/s",
        f(&o["request_throughput"]),
        f(&o["output_tok_s"]),
        f(&o["total_tok_s"])
    );
    println!("TTFT:        {}", ms(&o["ttft_s"]));
    println!("TPOT:        {}", ms(&o["tpot_s"]));
    println!("ITL:         {}", ms(&o["itl_s"]));
    println!("end to end:  {}", ms(&o["e2e_s"]));
    let slo = &o["slo"];
    if !slo["ttft_s"].is_null() || !slo["tpot_s"].is_null() {
        println!(
            "goodput:     {:.2} req/s ({:.0}% of requests met TTFT ≤ {} s and TPOT ≤ {} s)",
            f(&o["goodput"]["requests_per_s"]),
            f(&o["goodput"]["share"]) * 100.0,
            slo["ttft_s"],
            slo["tpot_s"]
        );
    }
    if let Some(e) = o["errors"].as_array().filter(|e| !e.is_empty()) {
        println!("first errors: {}", e.iter().map(|v| v.as_str().unwrap_or("")).collect::<Vec<_>>().join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_poisson_at_the_rate_and_lengths_stay_within_the_spread() {
        let p = plan(20_000, 4.0, 128, 64, 0.5, 7);
        // Mean gap 1/rate; exponential gaps have a standard deviation equal to their mean.
        let gaps: Vec<f64> = p.windows(2).map(|w| w[1].at - w[0].at).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean - 0.25).abs() < 0.01, "mean gap {mean}");
        assert!((sd / mean - 1.0).abs() < 0.05, "coefficient of variation {}", sd / mean);
        assert!(p.iter().all(|r| (64..=192).contains(&r.prompt) && (32..=96).contains(&r.output)));
        let mean_prompt = p.iter().map(|r| r.prompt as f64).sum::<f64>() / p.len() as f64;
        assert!((mean_prompt - 128.0).abs() < 2.0, "mean prompt {mean_prompt}");
        // The same seed, the same plan; no spread, every request the same; an infinite rate sends all at once.
        assert_eq!(plan(50, 4.0, 128, 64, 0.5, 7), p[..50]);
        assert!(plan(50, 4.0, 128, 64, 0.0, 1).iter().all(|r| r.prompt == 128 && r.output == 64));
        assert!(plan(50, f64::INFINITY, 128, 64, 0.0, 1).iter().all(|r| r.at == 0.0));
    }

    fn stream(ttft: f64, gaps: &[f64]) -> Stream {
        let t0 = Instant::now();
        let mut times = vec![t0 + Duration::from_secs_f64(ttft)];
        for g in gaps {
            times.push(*times.last().unwrap() + Duration::from_secs_f64(*g));
        }
        Stream { ttft: Some(ttft), gaps: gaps.to_vec(), tokens: times.len() as u64, times, prompt_tokens: 10 }
    }

    #[test]
    fn goodput_counts_the_requests_that_met_every_bound_set() {
        let fast = stream(0.1, &[0.02, 0.02, 0.02]);
        let slow_start = stream(0.9, &[0.02, 0.02]);
        let slow_steps = stream(0.1, &[0.2, 0.2]);
        assert!((tpot(&fast).unwrap() - 0.02).abs() < 1e-6);
        for (s, ttft, tpot_b, want) in [
            (&fast, Some(0.5), Some(0.05), true),
            (&slow_start, Some(0.5), Some(0.05), false),
            (&slow_start, None, Some(0.05), true),
            (&slow_steps, Some(0.5), Some(0.05), false),
            (&slow_steps, Some(0.5), None, true),
        ] {
            assert_eq!(meets(s, ttft, tpot_b), want, "{:?} {ttft:?} {tpot_b:?}", s.ttft);
        }
        let d = dist(&[3.0, 1.0, 2.0, 4.0]);
        assert_eq!((d["mean"].as_f64(), d["p50"].as_f64(), d["max"].as_f64()), (Some(2.5), Some(3.0), Some(4.0)));
        assert!(dist(&[])["p50"].is_null());
    }
}
