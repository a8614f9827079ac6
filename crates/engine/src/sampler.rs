//! Turning logits into the next token: penalties, temperature, top-k, top-p, min-p, a seeded draw, and the
//! log-probabilities of the plain softmax.
//!
//! The order follows transformers' logits processors (repetition penalty, temperature, top-k, top-p, min-p), so a
//! request behaves as users of HF `generate` expect; presence and frequency penalties are OpenAI's.

use std::collections::HashMap;

/// How to pick tokens. Temperature 0 is greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 picks the most likely token.
    pub temperature: f32,
    /// Keep the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0: none).
    pub min_p: f32,
    /// HF's repetition penalty over prompt and reply (1: none).
    pub repetition_penalty: f32,
    /// OpenAI's presence penalty over the reply (0: none).
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty over the reply (0: none).
    pub frequency_penalty: f32,
    /// Seed of the draw; None draws a fresh one.
    pub seed: Option<u64>,
    /// How many alternatives to report per token with their log-probabilities (None: no logprobs).
    pub top_logprobs: Option<usize>,
}

impl SamplingParams {
    /// Whether the next token is the plain argmax of the logits (temperature 0, no penalty, no logprobs), so the
    /// model can pick it where the logits are (`CausalLm::forward_greedy`: on a GPU only the id crosses back)
    /// instead of handing a whole vocabulary row to [`Sampler::sample`]. A request's logit bias is the caller's
    /// to check: it is not a sampling parameter.
    pub fn plain_greedy(&self) -> bool {
        self.temperature == 0.0
            && self.repetition_penalty == 1.0
            && self.presence_penalty == 0.0
            && self.frequency_penalty == 0.0
            && self.top_logprobs.is_none()
    }
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            top_logprobs: None,
        }
    }
}

/// A parameter out of its range.
#[derive(Debug, thiserror::Error)]
#[error("sampling parameter {field} = {value}: {reason}")]
pub struct SamplingError {
    /// The field's name as the CLI and API spell it.
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// The accepted range.
    pub reason: &'static str,
}

impl SamplingParams {
    /// Checks every field's range, naming the first that is out of it.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let bad = |field, value: f32, reason| Err(SamplingError { field, value: value.to_string(), reason });
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature", self.temperature, "must be a finite number >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "must be in [0, 1]");
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition_penalty", self.repetition_penalty, "must be a finite number > 0");
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return bad("presence_penalty", self.presence_penalty, "must be in [-2, 2]");
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return bad("frequency_penalty", self.frequency_penalty, "must be in [-2, 2]");
        }
        if let Some(n) = self.top_logprobs {
            if n > 20 {
                return Err(SamplingError {
                    field: "top_logprobs",
                    value: n.to_string(),
                    reason: "must be in [0, 20]",
                });
            }
        }
        Ok(())
    }
}

/// The picked token with its log-probability under the plain softmax of the model's logits.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The token.
    pub id: u32,
    /// Its log-probability (plain softmax, before any sampling transform); NaN unless `top_logprobs` was set.
    pub logprob: f32,
    /// The most likely alternatives, when asked for.
    pub top: Vec<(u32, f32)>,
    /// For each of `top`, whether the sampling transforms (penalties, temperature, top-k, top-p, min-p) left it a
    /// candidate for the draw: the playground marks the alternatives the sampler could never have picked. At
    /// temperature 0 only the greedy pick is in play.
    pub in_play: Vec<bool>,
}

impl Sampled {
    /// A token the model picked itself (`CausalLm::forward_greedy`): no logits row reached the sampler, so no
    /// log-probability or alternatives.
    pub fn picked(id: u32) -> Sampled {
        Sampled { id, logprob: f32::NAN, top: Vec::new(), in_play: Vec::new() }
    }
}

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same draws on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The sampler of one generation: parameters and the generator's state.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

impl Sampler {
    /// A sampler; without a seed one is drawn from the clock.
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
        });
        Sampler { params, rng: Rng::new(seed) }
    }

    /// Picks the next token. `prompt` and `reply` are the ids so far, for the penalties.
    pub fn sample(&mut self, logits: &[f32], prompt: &[u32], reply: &[u32]) -> Sampled {
        let p = &self.params;
        // Log-probabilities cost a pass of f64 `exp` over the whole vocabulary (~2% of a CPU decode step): made only
        // when the caller asked for them.
        let logprobs = p.top_logprobs.map(|_| log_softmax(logits));
        let logprob = |id: u32| logprobs.as_ref().map_or(f32::NAN, |lp| lp[id as usize]);
        let mut l = logits.to_vec();
        if p.repetition_penalty != 1.0 {
            let mut seen: Vec<u32> = prompt.iter().chain(reply).copied().collect();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            let mut counts: HashMap<u32, u32> = HashMap::new();
            for &t in reply {
                *counts.entry(t).or_default() += 1;
            }
            for (t, c) in counts {
                if let Some(v) = l.get_mut(t as usize) {
                    *v -= p.presence_penalty + p.frequency_penalty * c as f32;
                }
            }
        }
        let top = match (p.top_logprobs, &logprobs) {
            (Some(n), Some(lp)) if n > 0 => top_n(lp, n),
            _ => Vec::new(),
        };
        if self.params.temperature == 0.0 {
            let id = argmax(&l);
            let in_play = top.iter().map(|&(t, _)| t == id).collect();
            return Sampled { id, logprob: logprob(id), top, in_play };
        }
        let (idx, probs) = self.candidates(&mut l);
        let in_play = top.iter().map(|(t, _)| idx.contains(t)).collect();
        let id = self.draw(&idx, &probs);
        Sampled { id, logprob: logprob(id), top, in_play }
    }

    /// The tokens still in play after temperature, top-k, top-p and min-p, with their probabilities under those
    /// transforms (not normalised after the cuts). Ordered most likely first where a cut needs the order (ties by
    /// id, so it is deterministic), else by id: sorting a whole vocabulary every step was a fifth of a small
    /// model's decode step, so top-k selects before it sorts, top-p sorts a growing prefix until it has its mass,
    /// and min-p is a cut on the logit.
    fn candidates(&self, l: &mut [f32]) -> (Vec<u32>, Vec<f64>) {
        let p = &self.params;
        for v in l.iter_mut() {
            *v /= p.temperature;
        }
        let l: &[f32] = l;
        let by_logit = |a: &u32, b: &u32| l[*b as usize].total_cmp(&l[*a as usize]).then(a.cmp(b));
        let mut idx: Vec<u32> = (0..l.len() as u32).filter(|&i| l[i as usize].is_finite()).collect();
        let max = idx.iter().map(|&i| l[i as usize]).fold(f32::NEG_INFINITY, f32::max);
        if p.top_k > 0 && p.top_k < idx.len() {
            idx.select_nth_unstable_by(p.top_k - 1, by_logit);
            idx.truncate(p.top_k);
        }
        // Each candidate's odds against the best; their sum (before top-p and min-p) normalises.
        let weight = |i: u32| ((l[i as usize] - max) as f64).exp();
        let sum: f64 = idx.iter().map(|&i| weight(i)).sum();
        if p.min_p > 0.0 {
            // At least min_p of the best's probability (the best itself always stays): where it falls in the
            // order does not matter, and the cut commutes with top-p's, which keeps a most-likely prefix.
            idx.retain(|&i| weight(i) >= p.min_p as f64);
        }
        if p.top_p < 1.0 {
            // The shortest most-likely prefix holding top_p of the mass: sorted a prefix at a time.
            let mut n = idx.len().min(256);
            let keep = loop {
                if n < idx.len() {
                    idx.select_nth_unstable_by(n - 1, by_logit);
                }
                idx[..n].sort_unstable_by(by_logit);
                let mut acc = 0.0;
                let reached = idx[..n].iter().position(|&i| {
                    acc += weight(i) / sum;
                    acc >= p.top_p as f64
                });
                match reached {
                    Some(k) => break k + 1,
                    None if n == idx.len() => break n,
                    None => n = (n * 4).min(idx.len()),
                }
            };
            idx.truncate(keep);
        } else if p.top_k > 0 || p.min_p > 0.0 {
            idx.sort_unstable_by(by_logit);
        }
        let probs = idx.iter().map(|&i| weight(i) / sum).collect();
        (idx, probs)
    }

    /// Draws one of the candidates in proportion to its probability.
    fn draw(&mut self, idx: &[u32], probs: &[f64]) -> u32 {
        let total: f64 = probs.iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (i, &q) in probs.iter().enumerate() {
            if r < q {
                return idx[i];
            }
            r -= q;
        }
        *idx.last().unwrap_or(&0)
    }
}

/// The index of the largest value (the first, on ties: as `torch.argmax`): the models' own rule, so the host and
/// a GPU's greedy pick agree.
pub fn argmax(l: &[f32]) -> u32 {
    kvad_models::first_argmax(l)
}

/// `log(softmax(l))`, computed stably in f64.
pub fn log_softmax(l: &[f32]) -> Vec<f32> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = l.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
    l.iter().map(|&v| (v as f64 - lse) as f32).collect()
}

fn top_n(lp: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
    let n = n.min(idx.len());
    idx.select_nth_unstable_by(n.saturating_sub(1), |&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
    idx.truncate(n);
    idx.sort_unstable_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
    idx.into_iter().map(|i| (i, lp[i as usize])).collect()
}

#[cfg(test)]
mod tests;
