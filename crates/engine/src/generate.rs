//! One generation from start to end, for the CLI: a one-sequence user of the engine's pass ([`crate::pass::run`]),
//! the same step the server's scheduler drives. Read the prompt into an empty cache, then sample token after token.
//!
//! The prompt's last token is always run by itself, after the rest of the prompt: that row's logits are then
//! computed by the same kernel shape whether the prompt arrived whole, in chunks, or after a cached prefix, so the
//! first sampled token does not depend on how the prompt was read.

use crate::pass::{self, Sequence, Stepping};
use crate::sampler::{Sampled, SamplingParams};
use crate::seam::{GenParams, Work};
use crate::EngineError;
use kvad_models::CausalLm;
use std::time::{Duration, Instant};

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// Prompt token ids (already templated).
    pub prompt: Vec<u32>,
    /// Sampling parameters.
    pub params: SamplingParams,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Token ids that end the reply (not included in it).
    pub stop_ids: Vec<u32>,
}

/// Why the reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token, or the caller said stop.
    Stop,
    /// `max_tokens` or the context's end.
    Length,
}

/// What a generation did, for the summary line and usage.
#[derive(Debug, Clone)]
pub struct GenStats {
    /// Prompt tokens read.
    pub prompt_tokens: usize,
    /// Tokens generated (the stop token included when one ended the reply).
    pub generated: usize,
    /// Time to read the prompt and produce the first token's logits.
    pub prefill: Duration,
    /// Time of the decode steps after the first token.
    pub decode: Duration,
    /// Why it ended.
    pub finish: FinishReason,
}

impl GenStats {
    /// Prompt tokens per second.
    pub fn prefill_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second after the first.
    pub fn decode_tps(&self) -> f64 {
        self.generated.saturating_sub(1) as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// What a request adds to a generation beyond [`GenerateRequest`] (the server's seam, and `kvad run --ctx`).
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    /// Added to the logits of these token ids before sampling (OpenAI's `logit_bias`); the reported logprobs are
    /// those of the biased logits, as OpenAI's are.
    pub logit_bias: Vec<(u32, f32)>,
    /// Keep writing past an end-of-sequence token until the length limit (vLLM's `ignore_eos`): what a load
    /// generator needs so every stream is as long as it asked, whatever the model would say.
    pub ignore_eos: bool,
    /// Tokens the prompt and reply may take together, when narrower than the model's context (`kvad run --ctx`):
    /// a longer prompt is refused naming it, and the reply ends there (`Length`).
    pub context: Option<usize>,
    /// What the reply's text must be (a JSON Schema, a regular expression, a grammar: [`crate::grammar`]); its
    /// tokens are then drawn on the host from the masked logits.
    pub constraint: Option<crate::grammar::Constraint>,
}

/// Generates a reply. `on_token` sees every sampled token (stop tokens included) and returns false to stop early.
pub fn generate(
    model: &dyn CausalLm,
    req: &GenerateRequest,
    on_token: impl FnMut(&Sampled) -> bool,
) -> Result<GenStats, EngineError> {
    generate_with(model, req, &GenerateOptions::default(), on_token)
}

/// [`generate`] with per-request options. `on_token` returning false stops the reply within one step: that is how
/// a caller cancels (a client that went away).
pub fn generate_with(
    model: &dyn CausalLm,
    req: &GenerateRequest,
    opts: &GenerateOptions,
    mut on_token: impl FnMut(&Sampled) -> bool,
) -> Result<GenStats, EngineError> {
    req.params.validate()?;
    let vocab = model.config().vocab_size;
    if let Some((id, _)) = opts.logit_bias.iter().find(|(id, _)| *id as usize >= vocab) {
        return Err(EngineError::BadRequest(format!(
            "logit_bias: token id {id} is not below the vocabulary size {vocab}"
        )));
    }
    let max = model.config().max_position;
    let ctx = opts.context.map_or(max, |c| c.min(max));
    if req.prompt.is_empty() {
        return Err(EngineError::BadRequest("the prompt is empty: nothing to continue".into()));
    }
    if req.prompt.len() >= ctx {
        let whose = if ctx < max { "the context asked for (--ctx)" } else { "the model's context" };
        return Err(EngineError::BadRequest(format!("the prompt is {} tokens; {whose} is {ctx}", req.prompt.len())));
    }
    let params = GenParams { sampling: req.params.clone(), max_tokens: req.max_tokens, options: opts.clone() };
    let mut seq = Sequence::new(req.prompt.clone(), model.new_state(), 0, params);
    let how = Stepping::default();
    let step = |work: Work, seq: &mut Sequence| -> Result<Option<Sampled>, EngineError> {
        Ok(pass::run(model, how, &[work], &mut [seq])?.swap_remove(0))
    };
    let t0 = Instant::now();
    let chunk = model.prefill_chunk().max(1);
    while seq.read + 1 < req.prompt.len() {
        step(Work::Chunk(chunk), &mut seq)?;
    }
    let mut next = step(Work::Last, &mut seq)?.filter(|_| req.max_tokens > 0);
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut finish = FinishReason::Length;
    while let Some(s) = next.take() {
        let go_on = on_token(&s);
        if req.stop_ids.contains(&s.id) || !go_on {
            finish = FinishReason::Stop;
            break;
        }
        if seq.reply.len() == req.max_tokens || req.prompt.len() + seq.reply.len() >= ctx {
            break;
        }
        next = step(Work::Decode, &mut seq)?;
    }
    let generated = seq.reply.len().min(req.max_tokens);
    Ok(GenStats { prompt_tokens: req.prompt.len(), generated, prefill, decode: t1.elapsed(), finish })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvad_models::{LogitsMode, ModelConfig, ModelError, SeqInput, SeqState};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fixture model that counts which entry each step took, and can be told to pick a token out of range (from
    /// its third pick).
    struct Counting {
        inner: Box<dyn CausalLm>,
        forwards: AtomicUsize,
        greedy: AtomicUsize,
        pick_out_of_range: bool,
        /// Greedy steps it offers to run ahead (`CausalLm::greedy_ahead`), through the one-by-one default.
        ahead: usize,
    }

    impl CausalLm for Counting {
        fn config(&self) -> &ModelConfig {
            self.inner.config()
        }
        fn state_spec(&self) -> &kvad_models::StateSpec {
            self.inner.state_spec()
        }
        fn new_state(&self) -> SeqState {
            self.inner.new_state()
        }
        fn forward(&self, batch: &mut [SeqInput<'_>], mode: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
            if mode == LogitsMode::Last {
                self.forwards.fetch_add(1, Ordering::Relaxed);
            }
            self.inner.forward(batch, mode)
        }
        fn forward_hidden(&self, batch: &mut [SeqInput<'_>], rows: LogitsMode) -> Result<Vec<Vec<f32>>, ModelError> {
            self.inner.forward_hidden(batch, rows)
        }
        fn weight_bytes(&self) -> usize {
            self.inner.weight_bytes()
        }
        fn forward_greedy(&self, batch: &mut [SeqInput<'_>]) -> Result<Vec<u32>, ModelError> {
            // From the third pick on, where told to (so a run of steps ahead meets it too).
            let n = self.greedy.fetch_add(1, Ordering::Relaxed) + 1;
            let ids = self.inner.forward_greedy(batch)?;
            Ok(if self.pick_out_of_range && n >= 3 { vec![self.config().vocab_size as u32] } else { ids })
        }
        fn greedy_ahead(&self) -> usize {
            self.ahead
        }
    }

    fn model(pick_out_of_range: bool) -> Counting {
        let dir = format!("{}/../../fixtures/models/llama", env!("CARGO_MANIFEST_DIR"));
        let files = kvad_models::ModelFiles::detect(std::path::Path::new(&dir)).unwrap();
        Counting {
            inner: kvad_models::load_model(&files).unwrap().model,
            forwards: AtomicUsize::new(0),
            greedy: AtomicUsize::new(0),
            pick_out_of_range,
            ahead: 1,
        }
    }

    /// [`model`] offering `ahead` greedy steps at a time.
    fn model_ahead(ahead: usize) -> Counting {
        Counting { ahead, ..model(false) }
    }

    fn run(m: &Counting, params: SamplingParams) -> Result<Vec<u32>, EngineError> {
        let req = GenerateRequest { prompt: vec![1, 5, 9, 14], params, max_tokens: 12, stop_ids: Vec::new() };
        let mut ids = Vec::new();
        generate(m, &req, |s| {
            ids.push(s.id);
            true
        })?;
        Ok(ids)
    }

    #[test]
    fn plain_greedy_takes_the_models_pick_and_the_same_tokens_as_the_sampler() {
        let picked = model(false);
        let ids = run(&picked, SamplingParams::default()).unwrap();
        assert_eq!(picked.greedy.load(Ordering::Relaxed), 12, "every step should be the model's pick");
        assert_eq!(picked.forwards.load(Ordering::Relaxed), 0, "no logits row should have crossed");
        // Logprobs asked for: the sampler sees every row, and must pick the same tokens.
        let sampled = model(false);
        let with_rows = run(&sampled, SamplingParams { top_logprobs: Some(1), ..Default::default() }).unwrap();
        assert_eq!(sampled.greedy.load(Ordering::Relaxed), 0);
        assert_eq!(sampled.forwards.load(Ordering::Relaxed), 12);
        assert_eq!(ids, with_rows);
    }

    /// Picks run ahead of the stop checks give the reply a step at a time gives: the same ids, cut at a stop id
    /// met inside a run of steps, at a limit that is no multiple of the steps, and at the context's end; the steps
    /// past the limit not run at all; a pick outside the vocabulary an error.
    #[test]
    fn greedy_steps_ahead_give_the_same_reply() {
        let gen = |m: &Counting, max_tokens: usize, stop_ids: Vec<u32>, prompt_len: usize| {
            let prompt: Vec<u32> = [1u32, 5, 9, 14].iter().copied().cycle().take(prompt_len).collect();
            let req = GenerateRequest { prompt, params: SamplingParams::default(), max_tokens, stop_ids };
            let mut ids = Vec::new();
            let stats = generate(m, &req, |s| {
                ids.push(s.id);
                true
            });
            stats.map(|st| (ids, st.finish, st.generated))
        };
        let one = model(false);
        let (full, _, _) = gen(&one, 11, Vec::new(), 4).unwrap();
        assert_eq!(full.len(), 11);
        let ctx = one.config().max_position;
        for ahead in [2, 3, 8] {
            let m = model_ahead(ahead);
            assert_eq!(gen(&m, 11, Vec::new(), 4).unwrap(), (full.clone(), FinishReason::Length, 11), "ahead {ahead}");
            // The prompt's pass and 10 steps, however they are grouped: none past the limit.
            assert_eq!(m.greedy.load(Ordering::Relaxed), 1 + 10, "ahead {ahead}: steps run");
            // A stop id at the sixth token: the reply ends there, as a step at a time.
            let m2 = model_ahead(ahead);
            let (cut, finish, n) = gen(&m2, 11, vec![full[5]], 4).unwrap();
            let first = full.iter().position(|&t| t == full[5]).unwrap();
            assert_eq!((cut, finish, n), (full[..=first].to_vec(), FinishReason::Stop, first + 1), "ahead {ahead}");
            // Near the context's end: no step past it.
            let m3 = model_ahead(ahead);
            let (near, _, n) = gen(&m3, 50, Vec::new(), ctx - 5).unwrap();
            let single = model(false);
            let one_by_one = gen(&single, 50, Vec::new(), ctx - 5).unwrap();
            assert_eq!((near, n), (one_by_one.0, one_by_one.2), "ahead {ahead}, at the context's end");
            let steps = |m: &Counting| m.greedy.load(Ordering::Relaxed);
            assert_eq!(steps(&m3), steps(&single), "ahead {ahead}: a step past the context");
        }
        let bad = Counting { ahead: 4, ..model(true) };
        let e = gen(&bad, 11, Vec::new(), 4).unwrap_err().to_string();
        assert!(e.contains("vocabulary"), "{e}");
    }

    #[test]
    fn a_pick_outside_the_vocabulary_is_an_error_naming_it() {
        let m = model(true);
        let vocab = m.config().vocab_size;
        let e = run(&m, SamplingParams::default()).unwrap_err().to_string();
        assert!(e.contains(&format!("Some({vocab})")) && e.contains("vocabulary"), "{e}");
    }
}
