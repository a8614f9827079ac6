//! The counters behind `GET /metrics` (Prometheus' text format, written by hand: a handful of series needs no
//! dependency): queue depth, replies running, tokens in and out, cache hits, requests by how they ended, and
//! histograms of time to first token and of step time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A cumulative histogram.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

const TTFT: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
const STEP: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cache_hits: AtomicU64,
    requests: Mutex<BTreeMap<String, u64>>,
    ttft: Mutex<Histogram>,
    step: Mutex<Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            requests: Mutex::new(BTreeMap::new()),
            ttft: Mutex::new(Histogram::new(TTFT)),
            step: Mutex::new(Histogram::new(STEP)),
        }
    }
}

impl Metrics {
    /// A reply joined: its prompt and how much of it a kept conversation held.
    pub fn joined(&self, prompt: usize, cached: usize) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cached_tokens.fetch_add(cached as u64, Ordering::Relaxed);
        if cached > 0 {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Tokens a reply generated.
    pub fn generated(&self, n: usize) {
        self.generated_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A request ended (stop, length, tool_calls, cancelled, error).
    pub fn finished(&self, reason: &str) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry(reason.to_string()).or_default() += 1;
        }
    }

    /// Seconds from arrival to the first token.
    pub fn first_token(&self, s: f64) {
        if let Ok(mut h) = self.ttft.lock() {
            h.observe(s);
        }
    }

    /// Seconds one forward pass (and its sampling) took.
    pub fn step(&self, s: f64) {
        if let Ok(mut h) = self.step.lock() {
            h.observe(s);
        }
    }

    /// The text `/metrics` answers.
    pub fn render(&self, waiting: usize, running: usize, loaded: usize) -> String {
        let mut out = String::new();
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(&mut out, "kvad_queue_depth", "Generations waiting.", waiting);
        gauge(&mut out, "kvad_running", "Jobs running (replies in the batch, or a load).", running);
        gauge(&mut out, "kvad_models_loaded", "Models in memory.", loaded);
        let counter = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        };
        counter(&mut out, "kvad_prompt_tokens_total", "Prompt tokens of replies that started.", &self.prompt_tokens);
        counter(
            &mut out,
            "kvad_cached_tokens_total",
            "Prompt tokens found in kept conversations.",
            &self.cached_tokens,
        );
        counter(&mut out, "kvad_generated_tokens_total", "Tokens generated.", &self.generated_tokens);
        counter(&mut out, "kvad_cache_hits_total", "Replies that found part of their prompt kept.", &self.cache_hits);
        let _ =
            writeln!(out, "# HELP kvad_requests_total Requests by how they ended.\n# TYPE kvad_requests_total counter");
        if let Ok(m) = self.requests.lock() {
            for (k, v) in m.iter() {
                let _ = writeln!(out, "kvad_requests_total{{finish=\"{k}\"}} {v}");
            }
        }
        if let Ok(h) = self.ttft.lock() {
            h.render("kvad_ttft_seconds", "Time from arrival to the first token.", &mut out);
        }
        if let Ok(h) = self.step.lock() {
            h.render("kvad_step_seconds", "Time of one forward pass and its sampling.", &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_add_up() {
        let m = Metrics::default();
        m.joined(100, 0);
        m.joined(50, 40);
        m.generated(7);
        m.finished("stop");
        m.finished("stop");
        m.first_token(0.07);
        m.first_token(3.0);
        let text = m.render(2, 1, 1);
        for line in [
            "kvad_queue_depth 2",
            "kvad_prompt_tokens_total 150",
            "kvad_cached_tokens_total 40",
            "kvad_cache_hits_total 1",
            "kvad_generated_tokens_total 7",
            "kvad_requests_total{finish=\"stop\"} 2",
            "kvad_ttft_seconds_bucket{le=\"0.05\"} 0",
            "kvad_ttft_seconds_bucket{le=\"0.1\"} 1",
            "kvad_ttft_seconds_bucket{le=\"5\"} 2",
            "kvad_ttft_seconds_count 2",
            "kvad_step_seconds_count 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
