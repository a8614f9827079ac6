//! On the device (staged by scripts/gpu/stage.sh, run by scripts/gpu/test.sh): the GPU serving rules' steps, as
//! the server's scheduler plans them (issue 36), give each reply at temperature 0 the tokens it gets alone — a
//! step's replies write in a pass of their own, then the chunks of several joining prompts in one pass — up to a
//! near tie; and a prompt that starts from a running reply's prompt (its whole pages shared, copy on write) goes on
//! as one read from scratch.

use kvad_engine::pass::{run, Sequence, Stepping};
use kvad_engine::seam::{GenParams, Work};
use kvad_engine::SamplingParams;
use kvad_models::{load_model_with, CausalLm, LoadOptions, ModelFiles};
use kvad_tensor::BackendKind;
use std::path::Path;

/// Where two GPU paths may choose differently: the alone run's top two within this many logits (a few bf16 steps
/// at the magnitudes these models reach), as the models' GPU tests allow.
const NEAR_TIE: f32 = 0.25;

const STEPS: usize = 8;

fn no_gpu() -> bool {
    if let Err(e) = kvad_tensor::cuda::Gpu::shared(None) {
        eprintln!("no GPU found ({e}): the GPU pass tests run on the device (scripts/gpu/test.sh)");
        return true;
    }
    false
}

fn load(name: &str, backend: BackendKind) -> Box<dyn CausalLm> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models").join(name);
    let files = ModelFiles::detect(&dir).unwrap();
    let opts = LoadOptions { backend, cache_dir: None, f32_reference: false };
    load_model_with(&files, &opts).unwrap_or_else(|e| panic!("{name} {backend}: {e}")).model
}

/// Greedy, with the top two log-probabilities kept (their gap is the logits' gap): a reply's every token and how
/// close its runner-up was.
fn params() -> GenParams {
    let sampling = SamplingParams { top_logprobs: Some(2), ..SamplingParams::default() };
    GenParams { sampling, max_tokens: STEPS, options: Default::default() }
}

fn prompt(i: usize, len: usize) -> Vec<u32> {
    (0..len).map(|k| ((3 + 11 * i + 7 * k) % 250) as u32).collect()
}

/// A reply's tokens and, for each, the gap between its top two.
type Reply = Vec<(u32, f32)>;

fn gap(s: &kvad_engine::Sampled) -> f32 {
    match s.top.as_slice() {
        [(_, a), (_, b), ..] => a - b,
        _ => f32::INFINITY,
    }
}

fn alone(m: &dyn CausalLm, p: &[u32]) -> Reply {
    let mut s = Sequence::new(p.to_vec(), m.new_state(), 0, params());
    let one = Stepping { greedy_ahead: Some(1) };
    if p.len() > 1 {
        run(m, one, &[Work::Chunk(p.len() - 1)], &mut [&mut s]).unwrap();
    }
    let mut out = Vec::new();
    let mut work = Work::Last;
    while out.len() < STEPS {
        let got = run(m, one, &[work], &mut [&mut s]).unwrap().remove(0).unwrap();
        out.push((got.id, gap(&got)));
        work = Work::Decode;
    }
    out
}

/// Compares a reply with its alone-run: equal tokens until a near tie of the alone-run (after which the two may
/// part), and never parting where the alone-run's choice was clear.
fn same_until_near_tie(what: &str, got: &[u32], want: &Reply) {
    for (i, (&g, &(w, gap))) in got.iter().zip(want).enumerate() {
        if g != w {
            assert!(gap <= NEAR_TIE, "{what}: step {i} wrote {g} where alone it writes {w}, its top two {gap} apart");
            eprintln!("{what}: parted at step {i} on a near tie ({gap:.3})");
            return;
        }
    }
}

#[test]
fn replies_beside_a_crowd_of_prompts_write_what_they_write_alone() {
    if no_gpu() {
        return;
    }
    for (name, backend) in [
        ("llama", BackendKind::GpuBf16),
        ("qwen3", BackendKind::GpuQ8),
        ("qwen3", BackendKind::GpuQ4),
        ("qwen3-next", BackendKind::GpuBf16),
    ] {
        let m = load(name, backend);
        let prompts: Vec<Vec<u32>> = (0..6).map(|i| prompt(i, 20 + 13 * i)).collect();
        let want: Vec<Reply> = prompts.iter().map(|p| alone(m.as_ref(), p)).collect();
        // Together: two prompts join each step; a step's rows are 48 (the replies' tokens, then the chunks of as
        // many prompts as fit, first joined first), as the scheduler's GPU rules plan it.
        let mut seqs: Vec<Sequence> = Vec::new();
        let mut got: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        let how = Stepping { greedy_ahead: Some(1) };
        for _step in 0..200 {
            if seqs.len() < prompts.len() {
                for p in &prompts[seqs.len()..(seqs.len() + 2).min(prompts.len())] {
                    seqs.push(Sequence::new(p.clone(), m.new_state(), 0, params()));
                }
            }
            let mut room = 48usize;
            let mut sampling = Vec::new();
            let mut chunks = Vec::new();
            for (i, s) in seqs.iter().enumerate() {
                if s.reply.len() >= STEPS {
                    continue;
                }
                match s.prompt.len() - 1 - s.read.min(s.prompt.len() - 1) {
                    0 if s.reply.is_empty() => sampling.push((i, Work::Last)),
                    0 => sampling.push((i, Work::Decode)),
                    _ => {}
                }
            }
            room = room.saturating_sub(sampling.len()).max(1);
            for (i, s) in seqs.iter().enumerate() {
                let left = s.prompt.len() - 1 - s.read.min(s.prompt.len() - 1);
                if left > 0 && room > 0 {
                    let n = left.min(room);
                    room -= n;
                    chunks.push((i, Work::Chunk(n)));
                }
            }
            if sampling.is_empty() && chunks.is_empty() {
                break;
            }
            for pass in [sampling, chunks] {
                if pass.is_empty() {
                    continue;
                }
                let works: Vec<Work> = pass.iter().map(|&(_, w)| w).collect();
                let mut refs: Vec<&mut Sequence> = Vec::new();
                let mut rest: &mut [Sequence] = &mut seqs;
                let mut at = 0;
                for &(i, _) in &pass {
                    let (_, tail) = std::mem::take(&mut rest).split_at_mut(i - at);
                    let (one, tail) = tail.split_first_mut().unwrap();
                    refs.push(one);
                    rest = tail;
                    at = i + 1;
                }
                let out = run(m.as_ref(), how, &works, &mut refs).unwrap();
                for (&(i, _), o) in pass.iter().zip(out) {
                    if let Some(s) = o {
                        got[i].push(s.id);
                    }
                }
            }
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.len(), STEPS, "{name} {backend} reply {i} did not finish");
            same_until_near_tie(&format!("{name} {backend} reply {i}"), g, w);
        }
    }
}

#[test]
fn a_prompt_that_starts_from_a_running_replys_pages_goes_on_as_one_read_alone() {
    if no_gpu() {
        return;
    }
    for (name, backend) in [("llama", BackendKind::GpuBf16), ("qwen3", BackendKind::GpuQ8)] {
        let m = load(name, backend);
        // A system prompt of 40 tokens (two whole pages of 16 and part of a third) shared by two requests.
        let system = prompt(9, 40);
        let (mut a, mut b) = (system.clone(), system.clone());
        a.extend(prompt(1, 9));
        b.extend(prompt(2, 12));
        let want = alone(m.as_ref(), &b);
        let one = Stepping { greedy_ahead: Some(1) };
        let mut first = Sequence::new(a.clone(), m.new_state(), 0, params());
        run(m.as_ref(), one, &[Work::Chunk(a.len() - 1)], &mut [&mut first]).unwrap();
        // The second starts from the first's 40 shared tokens: whole pages shared, the partial third copied.
        let state = first.state.copy_prefix(40).expect("room for the partial page");
        let mut second = Sequence::new(b.clone(), state, 40, params());
        run(m.as_ref(), one, &[Work::Chunk(b.len() - 41)], &mut [&mut second]).unwrap();
        let mut got = Vec::new();
        let mut works = [Work::Last, Work::Last];
        while got.len() < STEPS {
            let out = run(m.as_ref(), one, &works, &mut [&mut first, &mut second]).unwrap();
            got.push(out[1].as_ref().unwrap().id);
            works = [Work::Decode, Work::Decode];
        }
        same_until_near_tie(&format!("{name} {backend}: the shared-prefix reply"), &got, &want);
        // The first, whose pages the second shares, still writes what it writes alone.
        let first_alone = alone(m.as_ref(), &a);
        same_until_near_tie(&format!("{name} {backend}: the first"), &first.reply, &first_alone);
    }
}
