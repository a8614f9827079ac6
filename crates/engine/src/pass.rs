//! One batched forward pass over running sequences, at the level of tokens: the one loop every caller drives.
//! The server's engine ([`crate::local`]) adds text, stop tokens and kept conversations around it; the CLI's
//! one-request generation ([`crate::generate()`]) drives it for a single sequence. Both therefore take the same
//! decisions: when the model's own greedy pick is used, when one reply runs greedy steps ahead, and when a prompt
//! chunk is read in a pass of its own so a reply's tokens do not depend on who joins beside it.

use crate::seam::{GenParams, Work};
use crate::{EngineError, GenerateOptions, Sampled, Sampler, SamplingParams};
use kvad_models::{CausalLm, LogitsMode, SeqInput, SeqState, SNAPSHOT_SPACING};
use std::collections::VecDeque;

/// Rows up to which a pass runs the decode kernels, whose every row computes exactly what it would alone.
const ALONE_ROWS: usize = 8;

/// One running sequence: its state, its prompt and how much of it is read, its reply, its sampler.
pub struct Sequence {
    /// The per-layer state the model extends.
    pub state: SeqState,
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Prompt tokens in the cache.
    pub read: usize,
    /// Tokens sampled so far.
    pub reply: Vec<u32>,
    /// Sampling, length and per-request options.
    pub params: GenParams,
    /// Tokens it may hold (prompt + max_tokens).
    pub reserve: usize,
    sampler: Sampler,
    /// Greedy picks made ahead of the caller's stop checks, not yet handed out: the cache holds all but the last,
    /// so it is `ahead.len()` tokens past where stepping one at a time would have it.
    ahead: VecDeque<u32>,
    /// The reply's place in its grammar, when its request constrains it ([`GenerateOptions::constraint`]).
    pub guide: Option<crate::grammar::Guide>,
}

impl Sequence {
    /// A sequence whose state already holds the first `cached` prompt tokens (0 for a fresh state).
    pub fn new(prompt: Vec<u32>, state: SeqState, cached: usize, params: GenParams) -> Sequence {
        let reserve = prompt.len() + params.max_tokens;
        let sampler = Sampler::new(params.sampling.clone());
        Sequence {
            state,
            prompt,
            read: cached,
            reply: Vec::new(),
            params,
            reserve,
            sampler,
            ahead: VecDeque::new(),
            guide: None,
        }
    }

    /// Tokens the state holds as stepping one token at a time would have it (picks made ahead not counted).
    pub fn held(&self) -> usize {
        self.state.len() - self.ahead.len()
    }

    /// The state as the reply left it: picks made ahead and never handed out are dropped, so a conversation kept
    /// resumes where its reply ended. A recurrent layer cuts back only to a snapshot: the state goes back to the
    /// latest one before that point, and the next turn that shares the conversation reads the tokens after it
    /// again (they are its prompt's, past `cached_tokens`). None where no such point is left (not worth keeping).
    pub fn into_state(mut self) -> Option<SeqState> {
        let at = self.state.cut_point(self.held());
        (at > 0 && self.state.truncate(at)).then_some(self.state)
    }

    /// The tokens a part of this kind feeds the model.
    fn tokens_for(&self, work: Work) -> Vec<u32> {
        match work {
            Work::Chunk(n) => self.prompt[self.read..(self.read + n).min(self.prompt.len().saturating_sub(1))].to_vec(),
            Work::Last => self.prompt[self.prompt.len() - 1..].to_vec(),
            Work::Decode => self.reply.last().map(|&t| vec![t]).unwrap_or_default(),
        }
    }
}

/// How a pass steps: the greedy steps a lone reply may run ahead (`None`: the model's own count,
/// [`CausalLm::greedy_ahead`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stepping {
    /// Greedy steps a lone greedy reply runs ahead of the stop checks (`[server] greedy_ahead`); None: the model's.
    pub greedy_ahead: Option<usize>,
}

/// Whether a reply's tokens are the model's own greedy picks (`forward_greedy`: on a GPU only the ids cross back):
/// plain greedy sampling, no logit bias and no grammar (whose mask is applied to the logits on the host).
pub fn device_picks(params: &SamplingParams, opts: &GenerateOptions) -> bool {
    params.plain_greedy() && opts.logit_bias.is_empty() && opts.constraint.is_none()
}

/// The model's greedy pick for each sequence of the pass, checked against its vocabulary (a GPU's ids come back
/// from device memory: a bad one is an error here, not an index out of range later).
pub fn greedy_picks(model: &dyn CausalLm, batch: &mut [SeqInput<'_>]) -> Result<Vec<u32>, EngineError> {
    let vocab = model.config().vocab_size;
    let n = batch.len();
    let ids = model.forward_greedy(batch)?;
    checked_picks(vocab, ids, n)
}

/// `k` greedy steps of one sequence from its new `tokens` ([`CausalLm::forward_greedy_steps`]): the picks in
/// order, each checked against the vocabulary; the cache `k` tokens further.
pub fn greedy_steps(model: &dyn CausalLm, seq: SeqInput<'_>, k: usize) -> Result<Vec<u32>, EngineError> {
    let picks = model.forward_greedy_steps(seq, k)?;
    checked_picks(model.config().vocab_size, picks, k)
}

/// `n` greedy picks of a model, each checked against its vocabulary.
fn checked_picks(vocab: usize, ids: Vec<u32>, n: usize) -> Result<Vec<u32>, EngineError> {
    match ids.iter().find(|&&i| i as usize >= vocab) {
        None if ids.len() == n => Ok(ids),
        bad => Err(EngineError::Model(kvad_models::ModelError::BadInput(format!(
            "the model's greedy pick was {bad:?} (of {} for {n} sequences or steps) for a vocabulary of {vocab}",
            ids.len()
        )))),
    }
}

/// What a pass gives a part: its logits row for the CPU sampler, the token the device picked, or nothing (a
/// prompt chunk).
enum Out {
    Logits(Vec<f32>),
    Id(u32),
    Nothing,
}

/// One pass over `batch`: every sampling part's token from the device when all are plain greedy, else logits.
fn one_pass(
    model: &dyn CausalLm,
    batch: &mut [SeqInput<'_>],
    sampling: bool,
    greedy: bool,
) -> Result<Vec<Out>, EngineError> {
    if sampling && greedy {
        return Ok(greedy_picks(model, batch)?.into_iter().map(Out::Id).collect());
    }
    let mode = if sampling { LogitsMode::Last } else { LogitsMode::None };
    Ok(model.forward(batch, mode)?.into_iter().map(Out::Logits).collect())
}

/// Greedy steps to run ahead for a pass that is one reply's next token alone, plain greedy and holding no picks
/// made ahead: the setting or the model's count (8 on a GPU: the host's wait a step saved; 1 on the CPU), no more
/// than its reply may still take or its context hold. None (a step as usual) below 2. Its stop checks stay the
/// caller's, a token at a time; a reply that stops early drops the rest ([`Sequence::into_state`]).
fn lone_ahead(model: &dyn CausalLm, how: Stepping, works: &[Work], seqs: &[&mut Sequence]) -> Option<usize> {
    let ([w], [s]) = (works, seqs) else { return None };
    if *w != Work::Decode || !s.ahead.is_empty() || !device_picks(&s.params.sampling, &s.params.options) {
        return None;
    }
    // A recurrent layer cannot step back over picks made ahead and never handed out (it would need a snapshot at
    // every step), so such a model steps one token at a time.
    if model.state_spec().has_recurrent() {
        return None;
    }
    let ctx = model.config().max_position;
    let left = s.reserve.saturating_sub(s.prompt.len() + s.reply.len());
    // The cache holds all but the last token sampled; the reply ends when prompt and reply fill the context.
    let room = ctx.saturating_sub(s.state.len() + 1);
    let k = how.greedy_ahead.unwrap_or_else(|| model.greedy_ahead()).max(1).min(left).min(room);
    (k > 1).then_some(k)
}

/// One step's forward work. Replies that sample (one token each) never share a pass with a prompt chunk when the
/// two together exceed [`ALONE_ROWS`]: the chunk is read in a pass of its own, then the sampling rows in one pass on
/// the decode kernels, so a reply's tokens are the same whoever joins beside it (the determinism rule).
fn forward_parts(
    model: &dyn CausalLm,
    works: &[Work],
    seqs: &mut [&mut Sequence],
    tokens: &[Vec<u32>],
) -> Result<Vec<Out>, EngineError> {
    let sampling = |w: &Work| !matches!(w, Work::Chunk(_));
    let rows: usize = tokens.iter().map(Vec::len).sum();
    let any_chunk = works.iter().any(|w| !sampling(w));
    let any_sampling = works.iter().any(sampling);
    // Only the ids cross back when every sampling part is plain greedy: copying and log-softmaxing a full
    // vocabulary row per reply on the caller's thread would cost more than a GPU's whole pass.
    let greedy =
        works.iter().zip(seqs.iter()).all(|(w, s)| !sampling(w) || device_picks(&s.params.sampling, &s.params.options));
    if !(any_chunk && any_sampling && rows > ALONE_ROWS) {
        let mut batch: Vec<SeqInput<'_>> =
            seqs.iter_mut().zip(tokens).map(|(s, t)| SeqInput { tokens: t, state: &mut s.state }).collect();
        let mut out = one_pass(model, &mut batch, any_sampling, greedy)?;
        for (o, w) in out.iter_mut().zip(works) {
            if !sampling(w) {
                *o = Out::Nothing;
            }
        }
        return Ok(out);
    }
    let mut out: Vec<Out> = works.iter().map(|_| Out::Nothing).collect();
    for want_sampling in [false, true] {
        let mut idx = Vec::new();
        let mut batch: Vec<SeqInput<'_>> = Vec::new();
        for (i, ((w, s), t)) in works.iter().zip(seqs.iter_mut()).zip(tokens).enumerate() {
            if sampling(w) == want_sampling {
                idx.push(i);
                batch.push(SeqInput { tokens: t, state: &mut s.state });
            }
        }
        let got = one_pass(model, &mut batch, want_sampling, greedy)?;
        for (i, o) in idx.into_iter().zip(got) {
            out[i] = if want_sampling { o } else { Out::Nothing };
        }
    }
    Ok(out)
}

/// The pass's outputs per part: a lone greedy reply's picks run ahead, picks made ahead handed out, the rest from
/// one forward ([`forward_parts`]).
fn forward_outs(
    model: &dyn CausalLm,
    how: Stepping,
    works: &[Work],
    seqs: &mut [&mut Sequence],
    tokens: &[Vec<u32>],
) -> Result<Vec<Out>, EngineError> {
    Ok(if let Some(k) = lone_ahead(model, how, works, seqs) {
        // One reply's next token alone: k greedy steps back to back, the first handed out now.
        let s = &mut seqs[0];
        let picks = greedy_steps(model, SeqInput { tokens: &tokens[0], state: &mut s.state }, k)?;
        s.ahead.extend(&picks[1..]);
        vec![Out::Id(picks[0])]
    } else {
        // Replies holding picks made ahead take their next from there; the others run the pass.
        let mut outs: Vec<Out> = Vec::with_capacity(works.len());
        let (mut run_works, mut run_seqs, mut run_tokens, mut run_at) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, ((w, s), t)) in works.iter().zip(seqs.iter_mut()).zip(tokens).enumerate() {
            let made = if *w == Work::Decode { s.ahead.pop_front() } else { None };
            match made {
                Some(id) => outs.push(Out::Id(id)),
                None => {
                    outs.push(Out::Nothing);
                    run_works.push(*w);
                    run_seqs.push(&mut **s);
                    run_tokens.push(t.clone());
                    run_at.push(i);
                }
            }
        }
        if !run_works.is_empty() {
            for (i, o) in run_at.into_iter().zip(forward_parts(model, &run_works, &mut run_seqs, &run_tokens)?) {
                outs[i] = o;
            }
        }
        outs
    })
}

/// Runs one pass of `model` over the sequences, `works[i]` saying what `seqs[i]` does: a prompt chunk is read into
/// the cache (None), the prompt's last token or the reply's latest gives the next token, sampled and pushed onto the
/// reply (Some). A lone greedy reply may run several steps ahead ([`Stepping`]); the picks are handed out a pass at a
/// time.
pub fn run(
    model: &dyn CausalLm,
    how: Stepping,
    works: &[Work],
    seqs: &mut [&mut Sequence],
) -> Result<Vec<Option<Sampled>>, EngineError> {
    if works.len() != seqs.len() {
        return Err(EngineError::internal(format!("a pass of {} parts for {} sequences", works.len(), seqs.len())));
    }
    let mut tokens: Vec<Vec<u32>> = Vec::with_capacity(works.len());
    for (w, s) in works.iter().zip(seqs.iter()) {
        let t = s.tokens_for(*w);
        if t.is_empty() {
            return Err(EngineError::internal(format!("step: part {w:?} has no tokens")));
        }
        tokens.push(t);
    }
    // Each grammar's mask for this step is computed on another thread while the forward pass runs (the token it
    // follows was accepted last step), so a constrained reply's step costs what the mask adds beyond the pass.
    let guided: Vec<usize> = (0..works.len())
        .filter(|&i| !matches!(works[i], Work::Chunk(_)) && seqs[i].guide.as_ref().is_some_and(|g| g.needs_mask()))
        .collect();
    let mut guides: Vec<crate::grammar::Guide> = guided.iter().filter_map(|&i| seqs[i].guide.take()).collect();
    let (outs, masks) = std::thread::scope(|scope| {
        let masking = (!guides.is_empty())
            .then(|| scope.spawn(|| guides.iter_mut().map(|g| g.next_mask()).collect::<Result<Vec<_>, _>>()));
        let outs = forward_outs(model, how, works, seqs, &tokens);
        let masks = match masking {
            Some(h) => h.join().unwrap_or_else(|_| Err(EngineError::internal("a grammar's mask thread panicked"))),
            None => Ok(Vec::new()),
        };
        (outs, masks)
    });
    for (&i, g) in guided.iter().zip(guides) {
        seqs[i].guide = Some(g);
    }
    let (outs, masks) = (outs?, masks?);
    let mut mask_of: Vec<Option<crate::grammar::Mask>> = (0..works.len()).map(|_| None).collect();
    for (&i, m) in guided.iter().zip(masks) {
        mask_of[i] = Some(m);
    }
    let recurrent = model.state_spec().has_recurrent();
    let mut out = Vec::with_capacity(works.len());
    for ((((w, s), got), t), mask) in works.iter().zip(seqs.iter_mut()).zip(outs).zip(&tokens).zip(mask_of) {
        match w {
            Work::Chunk(_) => {
                let before = s.read;
                s.read += t.len();
                // A recurrent state is cut back only to a snapshot: one where the prompt ends (a next turn whose
                // template rewrites this reply parts from the conversation there) and one every spacing of a long
                // prompt, so a kept conversation resumes from the longest one it shares. (A device without a free
                // slot records none: the conversation then resumes from an earlier one, or reads again.)
                if recurrent && (s.read + 1 == s.prompt.len() || s.read / SNAPSHOT_SPACING > before / SNAPSHOT_SPACING)
                {
                    s.state.snapshot_spaced();
                }
                out.push(None);
                continue;
            }
            Work::Last => s.read = s.prompt.len(),
            Work::Decode => {}
        }
        let sampled = match got {
            Out::Id(id) => Sampled::picked(id),
            Out::Logits(mut row) => {
                for &(id, b) in &s.params.options.logit_bias {
                    if let Some(v) = row.get_mut(id as usize) {
                        *v += b;
                    }
                }
                if let Some(m) = &mask {
                    m.apply(&mut row);
                }
                s.sampler.sample(&row, &s.prompt, &s.reply)
            }
            Out::Nothing => return Err(EngineError::internal(format!("step: no token for part {w:?}"))),
        };
        if let Some(g) = s.guide.as_mut() {
            g.accept(sampled.id)?;
        }
        s.reply.push(sampled.id);
        out.push(Some(sampled));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::SamplingParams;

    /// A delta-net model's prompt, read in chunks, leaves a snapshot where the prompt ends (all but its last token):
    /// a next turn that parts from this one after the prompt resumes there instead of reading everything again,
    /// and computes what reading from scratch computes.
    #[test]
    fn a_recurrent_prompt_leaves_a_snapshot_where_it_ends_and_a_turn_resumes_there() {
        let dir = format!("{}/../../fixtures/models/qwen3-next", env!("CARGO_MANIFEST_DIR"));
        let files = kvad_models::ModelFiles::detect(std::path::Path::new(&dir)).unwrap();
        let model = kvad_models::load_model(&files).unwrap().model;
        let prompt: Vec<u32> = (0..23).map(|i| 3 + (i * 37 % 250)).collect();
        let params = GenParams { sampling: SamplingParams::default(), max_tokens: 4, options: Default::default() };
        let mut seq = Sequence::new(prompt.clone(), model.new_state(), 0, params);
        while seq.read + 1 < prompt.len() {
            run(model.as_ref(), Stepping::default(), &[Work::Chunk(5)], &mut [&mut seq]).unwrap();
        }
        run(model.as_ref(), Stepping::default(), &[Work::Last], &mut [&mut seq]).unwrap();
        for _ in 0..3 {
            run(model.as_ref(), Stepping::default(), &[Work::Decode], &mut [&mut seq]).unwrap();
        }
        let end = prompt.len() - 1;
        // Chunks of 5 end at 5, 10, 15, 20 and 22: only the prompt's end is kept (the others are closer than a
        // spacing to it), and the state past it can be cut back there and nowhere after.
        assert_eq!(seq.state.cut_point(end + 2), end);
        let mut resumed = seq.state.copy_prefix(end).unwrap();
        let turn = [prompt[end], 9, 8, 7];
        let a = model.forward(&mut [SeqInput { tokens: &turn, state: &mut resumed }], LogitsMode::Last).unwrap();
        let mut all = prompt[..end].to_vec();
        all.extend_from_slice(&turn);
        let mut fresh = model.new_state();
        let b = model.forward(&mut [SeqInput { tokens: &all, state: &mut fresh }], LogitsMode::Last).unwrap();
        let worst = a[0].iter().zip(&b[0]).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst < 2e-4, "resumed and fresh logits differ by {worst}");
        // Picks run ahead past where the reply stopped: the kept state goes back to the prompt's snapshot (the
        // next turn reads the reply's tokens again), not thrown away, and not left holding the dropped picks.
        seq.ahead.extend([11, 12]);
        assert_eq!(seq.held(), end + 2);
        assert_eq!(seq.into_state().map(|s| s.len()), Some(end));
    }
}
