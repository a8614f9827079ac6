//! The benchmark protocol (seed, "What it measures"): a round visits every variant once, a run is several rounds,
//! every sample is kept, and every timed generation starts from an empty KV cache. Reports give the median and the
//! range, so two variants whose ranges overlap are visibly not told apart.

use crate::generate::{generate, GenerateRequest};
use crate::open::OpenedModel;
use crate::sampler::SamplingParams;
use crate::EngineError;

/// One timed generation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Which round.
    pub round: usize,
    /// Prompt tokens per second (prompt length ÷ time to the first token's logits).
    pub prefill_tps: f64,
    /// Generated tokens per second after the first.
    pub decode_tps: f64,
    /// Time to the first token, milliseconds.
    pub ttft_ms: f64,
}

/// Median, lowest and highest of a series.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The middle value (mean of the two middle ones for an even count).
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
}

impl Summary {
    /// Summarises values (None when there are none).
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Summary { median, min: v[0], max: v[n - 1] })
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens generated per sample.
    pub gen_tokens: usize,
    /// Rounds (each visits every variant once).
    pub rounds: usize,
    /// Untimed rounds first, to fault in weights and warm caches.
    pub warmup: usize,
    /// Sequences generated together, each a token further every step (1: the single-stream path of `generate`).
    pub batch: usize,
}

/// A deterministic prompt of `n` ids: a fixed text's tokens, repeated.
pub fn bench_prompt(m: &OpenedModel, n: usize) -> Result<Vec<u32>, EngineError> {
    const TEXT: &str = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a \
        single step. It was the best of times, it was the worst of times, it was the age of wisdom. ";
    let ids = m.tokenizer.encode(TEXT, false)?;
    if ids.is_empty() {
        return Err(EngineError::BadRequest("the tokenizer gave no tokens for the benchmark text".into()));
    }
    Ok(ids.iter().copied().cycle().take(n).collect())
}

/// Times one generation from an empty cache.
pub fn sample(m: &OpenedModel, prompt: &[u32], gen_tokens: usize, round: usize) -> Result<Sample, EngineError> {
    let req = GenerateRequest {
        prompt: prompt.to_vec(),
        params: SamplingParams::default(),
        max_tokens: gen_tokens,
        stop_ids: Vec::new(),
    };
    let stats = generate(m.model.as_ref(), &req, |_| true)?;
    Ok(Sample {
        round,
        prefill_tps: stats.prefill_tps(),
        decode_tps: stats.decode_tps(),
        ttft_ms: stats.prefill.as_secs_f64() * 1e3,
    })
}

/// Times `batch` sequences generated together from empty caches: their prompts read in one pass, then one pass per
/// step for all of them, greedy on the model's side. Rates are totals over the sequences.
pub fn sample_batch(
    m: &OpenedModel,
    prompt: &[u32],
    gen_tokens: usize,
    batch: usize,
    round: usize,
) -> Result<Sample, EngineError> {
    use kvad_models::{LogitsMode, SeqInput};
    if prompt.is_empty() || gen_tokens == 0 {
        return Err(EngineError::BadRequest("a batched sample needs a prompt and at least one token".into()));
    }
    let model = m.model.as_ref();
    let mut kvs: Vec<_> = (0..batch).map(|_| model.new_state()).collect();
    let (head, last) = prompt.split_at(prompt.len() - 1);
    let t0 = std::time::Instant::now();
    if !head.is_empty() {
        let mut b: Vec<SeqInput<'_>> = kvs.iter_mut().map(|kv| SeqInput { tokens: head, state: kv }).collect();
        model.forward(&mut b, LogitsMode::None)?;
    }
    let mut b: Vec<SeqInput<'_>> = kvs.iter_mut().map(|kv| SeqInput { tokens: last, state: kv }).collect();
    let mut next = model.forward_greedy(&mut b)?;
    let ttft = t0.elapsed();
    let t1 = std::time::Instant::now();
    for _ in 1..gen_tokens {
        let toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let mut b: Vec<SeqInput<'_>> =
            toks.iter().zip(kvs.iter_mut()).map(|(t, kv)| SeqInput { tokens: t, state: kv }).collect();
        next = model.forward_greedy(&mut b)?;
    }
    let decode = t1.elapsed();
    Ok(Sample {
        round,
        prefill_tps: (batch * prompt.len()) as f64 / ttft.as_secs_f64().max(1e-9),
        decode_tps: (batch * (gen_tokens - 1)) as f64 / decode.as_secs_f64().max(1e-9),
        ttft_ms: ttft.as_secs_f64() * 1e3,
    })
}

fn one(
    m: &OpenedModel,
    prompt: &[u32],
    gen_tokens: usize,
    cfg: &BenchConfig,
    round: usize,
) -> Result<Sample, EngineError> {
    if cfg.batch > 1 {
        sample_batch(m, prompt, gen_tokens, cfg.batch, round)
    } else {
        sample(m, prompt, gen_tokens, round)
    }
}

/// Runs the interleaved rounds over loaded variants; `progress` sees each sample as it lands (index of the
/// variant, the sample). Returns every sample per variant.
pub fn run(
    variants: &[&OpenedModel],
    cfg: &BenchConfig,
    mut progress: impl FnMut(usize, &Sample),
) -> Result<Vec<Vec<Sample>>, EngineError> {
    let prompts: Vec<Vec<u32>> =
        variants.iter().map(|m| bench_prompt(m, cfg.prompt_tokens)).collect::<Result<_, _>>()?;
    for _ in 0..cfg.warmup {
        for (m, p) in variants.iter().zip(&prompts) {
            one(m, p, cfg.gen_tokens.min(8), cfg, 0)?;
        }
    }
    let mut all = vec![Vec::with_capacity(cfg.rounds); variants.len()];
    for round in 1..=cfg.rounds {
        for (i, (m, p)) in variants.iter().zip(&prompts).enumerate() {
            let s = one(m, p, cfg.gen_tokens, cfg, round)?;
            progress(i, &s);
            all[i].push(s);
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_gives_median_and_range() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Summary::of(&[1.0, 4.0]).unwrap().median, 2.5);
        assert!(Summary::of(&[]).is_none());
    }
}
