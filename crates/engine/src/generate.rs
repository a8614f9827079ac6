//! One generation from start to end: read the prompt into an empty cache, then sample token after token.
//!
//! The prompt's last token is always run by itself, after the rest of the prompt: that row's logits are then
//! computed by the same kernel shape whether the prompt arrived whole, in chunks, or after a cached prefix, so the
//! first sampled token does not depend on how the prompt was read.

use crate::sampler::{Sampled, Sampler, SamplingParams};
use crate::EngineError;
use kvad_models::{CausalLm, LogitsMode, SeqInput};
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

/// What a request adds to a generation beyond [`GenerateRequest`] (the server's seam; the CLI needs none of it).
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    /// Added to the logits of these token ids before sampling (OpenAI's `logit_bias`); the reported logprobs are
    /// those of the biased logits, as OpenAI's are.
    pub logit_bias: Vec<(u32, f32)>,
    /// Keep writing past an end-of-sequence token until the length limit (vLLM's `ignore_eos`): what a load
    /// generator needs so every stream is as long as it asked, whatever the model would say.
    pub ignore_eos: bool,
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
    let ctx = model.config().max_position;
    if req.prompt.is_empty() {
        return Err(EngineError::BadRequest("the prompt is empty: nothing to continue".into()));
    }
    if req.prompt.len() >= ctx {
        return Err(EngineError::BadRequest(format!(
            "the prompt is {} tokens; the model's context is {ctx}",
            req.prompt.len()
        )));
    }
    let mut kv = model.new_cache();
    let mut sampler = Sampler::new(req.params.clone());
    let t0 = Instant::now();
    let (head, last) = req.prompt.split_at(req.prompt.len() - 1);
    for chunk in head.chunks(model.prefill_chunk().max(1)) {
        model.forward(&mut [SeqInput { tokens: chunk, kv: &mut kv }], LogitsMode::None)?;
    }
    let mut logits = model.forward(&mut [SeqInput { tokens: last, kv: &mut kv }], LogitsMode::Last)?;
    let prefill = t0.elapsed();
    let t1 = Instant::now();
    let mut reply: Vec<u32> = Vec::new();
    let mut finish = FinishReason::Length;
    while reply.len() < req.max_tokens {
        for &(id, b) in &opts.logit_bias {
            logits[0][id as usize] += b;
        }
        let s = sampler.sample(&logits[0], &req.prompt, &reply);
        reply.push(s.id);
        let go_on = on_token(&s);
        if req.stop_ids.contains(&s.id) || !go_on {
            finish = FinishReason::Stop;
            break;
        }
        if reply.len() == req.max_tokens || kv.len() + 1 >= ctx {
            break;
        }
        logits = model.forward(&mut [SeqInput { tokens: &[s.id], kv: &mut kv }], LogitsMode::Last)?;
    }
    Ok(GenStats { prompt_tokens: req.prompt.len(), generated: reply.len(), prefill, decode: t1.elapsed(), finish })
}
