//! The golden fixtures on the GPU backends, run on the device by `bash scripts/gpu/test.sh`:
//! - gpu-q8 and gpu-q4 against cpu-q8 and cpu-q4 on the very same quantised weights (what is left is the GPU's
//!   arithmetic: f16 KV cache, bf16 activations in cuBLAS, summation order);
//! - gpu-bf16 against PyTorch's f32 logits, within a stated tolerance (bf16 weights);
//! - gpu-bf16 greedy tokens against PyTorch's bf16 greedy tokens until they part, which must be at a near-tie;
//! - several sequences in one pass, and a prompt read in chunks, against each alone.
//!
//! On a machine with no usable GPU every test says so and returns; the CPU suite is what runs there.

mod common;

use common::{golden_files, logits, root, spread};
use kvad_models::{load_model_with, CausalLm, LoadOptions, LogitsMode, ModelFiles, SeqInput};
use kvad_tensor::BackendKind;
use serde_json::Value;
use std::path::PathBuf;

const FIXTURES: [&str; 25] = [
    "llama",
    "llama-tied",
    "llama-gguf",
    "mistral",
    "qwen2",
    "qwen2-bf16",
    "qwen3",
    "gpt2",
    "qwen3-moe",
    "qwen3-moe-step",
    "qwen3-moe-gguf",
    "deepseek-v2",
    "deepseek-v2-lite",
    "deepseek-v2-lite-gguf",
    "deepseek-v3",
    "deepseek-v3-gguf",
    "deepseek-v3-half",
    "qwen3-next",
    "qwen3-next-legacy",
    "qwen3-next-moe",
    "qwen3-next-gguf",
    "qwen3-5",
    "qwen3-5-moe",
    "qwen3-5-gguf",
    "qwen3-5-moe-gguf",
];

fn no_gpu() -> bool {
    if let Err(e) = kvad_tensor::cuda::Gpu::shared(None) {
        eprintln!("no GPU found ({e}): the GPU model tests run on the device (scripts/gpu/test.sh)");
        return true;
    }
    false
}

fn json(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn files(name: &str) -> ModelFiles {
    golden_files(&common::golden_json(name))
}

fn load(name: &str, backend: BackendKind) -> Box<dyn CausalLm> {
    let opts = LoadOptions { backend, cache_dir: None, f32_reference: false };
    load_model_with(&files(name), &opts).unwrap_or_else(|e| panic!("{name} {backend}: {e}")).model
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// The GPU's own error on the CPU backend's weights (or between two of its paths), as a fraction of the logits'
/// spread: mostly prompts of more than 8 rows, whose products run in cuBLAS on bf16 activations (the CPU keeps
/// f32), through these chaotic tiny models. Measured on the H200 up to 3.1e-2 with the dp4a GEMVs (two 8-bit
/// activation terms, the CPU's i16 precision) and with f32 activations alike (when a switch still chose them); the
/// bound is that with a margin.
const TOL_SAME_WEIGHTS: f32 = 4e-2;

/// The same for the routed fixtures (Qwen3-MoE: 8 experts, 2 a token, random routers with near-ties): where the
/// GPU's arithmetic moves a router's input across a near-tie, the token takes another expert, a jump rather than a
/// drift. Measured on the H200 (2026-12-05): 6.6e-2 (qwen3-moe-step, gpu-q8 against cpu-q8), 0.16 (a 12-row decode
/// pass against the sequence alone, gpu-q4, one sequence of six); the router itself chooses as the CPU's on the same
/// logits (`the_device_router_chooses_as_the_cpu_router`), and passes of one size stay bit-identical whatever their
/// neighbours.
const TOL_SAME_WEIGHTS_ROUTED: f32 = 0.3;

/// The same for the dense delta-net fixtures (Qwen3.5): these tiny models carry a rounding error through every
/// token's decay and state, about five times as far as the llama family's (measured by quantised.rs: cpu-q8 lands
/// 0.17–0.19 of the spread from f32 on qwen3-5, 0.03–0.07 on llama and qwen3). On the H100 (2026-12-06) their
/// prompt passes (bf16 activations) came 0.128 of the spread from the decode path, gpu-q8/q4 0.052/0.065 from
/// cpu-q8/q4, while the delta-net kernels themselves equal the layer in f64 to 1e-6 (cuda_delta.rs).
const TOL_SAME_WEIGHTS_DELTA: f32 = 0.2;

/// The bound for a fixture: routed (Qwen3-MoE, every DeepSeek, every Qwen3-Next: experts beside the delta nets),
/// a dense delta net (Qwen3.5), or neither.
fn tol_same(name: &str) -> f32 {
    if name.contains("moe") || name.starts_with("deepseek") || name.starts_with("qwen3-next") {
        TOL_SAME_WEIGHTS_ROUTED
    } else if name.starts_with("qwen3-5") {
        TOL_SAME_WEIGHTS_DELTA
    } else {
        TOL_SAME_WEIGHTS
    }
}

#[test]
fn gpu_q8_and_q4_equal_the_cpu_backends_on_the_same_weights() {
    if no_gpu() {
        return;
    }
    let mut worst_all = Vec::new();
    for name in FIXTURES {
        let g = common::golden_json(name);
        for (gpu, cpu) in [(BackendKind::GpuQ8, BackendKind::CpuQ8), (BackendKind::GpuQ4, BackendKind::CpuQ4)] {
            let (a, b) = (load(name, gpu), load(name, cpu));
            let mut worst = 0f32;
            for c in g["cases"].as_array().unwrap() {
                let prompt = ids(&c["prompt"]);
                let (x, y) = (logits(a.as_ref(), &prompt), logits(b.as_ref(), &prompt));
                worst = worst.max(max_diff(&x, &y) / spread(&y));
            }
            eprintln!("{name} {gpu} vs {cpu}: worst logit difference {worst:.2e} of the spread");
            worst_all.push((name, gpu, worst));
        }
    }
    for (name, gpu, worst) in worst_all {
        assert!(worst <= tol_same(name), "{name} {gpu}: {worst} of the spread from the CPU");
    }
}

/// bf16 weights against PyTorch's f32: the error of rounding every weight to bf16, as a fraction of the spread.
/// Routed fixtures move further: the CPU in f32 on the very same rounded weights is 0.26 of the spread from
/// PyTorch on deepseek-v3 (a router near a tie takes another expert; quantised.rs measures it), so they are held
/// to the bound that CPU test holds them to, and to the CPU on the same weights below.
const TOL_BF16: f32 = 5e-2;
const TOL_BF16_ROUTED: f32 = 0.45;

/// Positions of a prompt pass, each `max_diff / spread` against the same position of a reference.
fn per_position(got: &[f32], want: &[f32], vocab: usize) -> Vec<f32> {
    got.chunks(vocab).zip(want.chunks(vocab)).map(|(a, b)| max_diff(a, b) / spread(b)).collect()
}

/// The prompt read token by token: the decode path (one-row GEMVs on f32 activations), every position's logits.
fn stepwise(m: &dyn CausalLm, prompt: &[u32]) -> Vec<f32> {
    let mut kv = m.new_state();
    let mut out = Vec::new();
    for &t in prompt {
        out.extend(m.forward(&mut [SeqInput { tokens: &[t], state: &mut kv }], LogitsMode::Last).unwrap().remove(0));
    }
    out
}

/// gpu-bf16 held two ways. The decode path (the prompt read token by token) is held tightly: within the
/// same-weights bound of the CPU's f32 on the same bf16-rounded weights at every position, routed fixtures too
/// (measured on the H100: at most 0.001 of the spread, DeepSeek-V3 included), and within the rounding bound of
/// PyTorch. The whole-prompt pass (cuBLAS on bf16 activations) must agree with it at every position, except that
/// a routed fixture may show one router's jump a case: a token whose router input sits near a tie takes another
/// expert (measured: deepseek-v3-half case 1 position 9, 0.744 of the spread, while its decode path stays within
/// 0.001), a jump rather than a drift, which no bound on the drift can allow for without hiding real faults.
#[test]
fn gpu_bf16_logits_are_within_tolerance_of_pytorch_f32_and_of_the_cpu_on_the_same_weights() {
    if no_gpu() {
        return;
    }
    let mut failed = Vec::new();
    for name in FIXTURES {
        let g = common::golden_json(name);
        let m = load(name, BackendKind::GpuBf16);
        // The CPU's f32 arithmetic on the same bf16 weights (a GGUF form: on its safetensors twin's).
        let source = g["same_weights_as"].as_str().unwrap_or(name).to_string();
        let (dir, rounded) = common::bf16_rounded_copy(&common::golden_json(&source), &format!("gpu-{name}"));
        let cpu = load_model_with(
            &rounded,
            &LoadOptions { backend: BackendKind::CpuF32, cache_dir: None, f32_reference: false },
        )
        .unwrap_or_else(|e| panic!("{name} rounded to bf16: {e}"))
        .model;
        let vocab = m.config().vocab_size;
        // Routed fixtures may show a router's jump; they and the delta nets carry rounding further (the bounds above).
        let routed = tol_same(name) == TOL_SAME_WEIGHTS_ROUTED;
        let tol = if tol_same(name) > TOL_SAME_WEIGHTS { TOL_BF16_ROUTED } else { TOL_BF16 };
        let (mut step_torch, mut step_cpu, mut whole_step, mut whole_torch) = (0f32, 0f32, 0f32, 0f32);
        let mut step_cpu_at = String::new();
        let mut jumps = Vec::new();
        for (ci, c) in g["cases"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(&c["prompt"]);
            let want: Vec<f32> = c["logits"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
                .collect();
            let mut kv = m.new_state();
            let whole =
                m.forward(&mut [SeqInput { tokens: &prompt, state: &mut kv }], LogitsMode::All).unwrap().remove(0);
            let step = stepwise(m.as_ref(), &prompt);
            let mut kv = cpu.new_state();
            let on_cpu =
                cpu.forward(&mut [SeqInput { tokens: &prompt, state: &mut kv }], LogitsMode::All).unwrap().remove(0);
            let fold = |v: Vec<f32>| v.into_iter().fold(0f32, f32::max);
            step_torch = step_torch.max(fold(per_position(&step, &want, vocab)));
            for (p, d) in per_position(&step, &on_cpu, vocab).into_iter().enumerate() {
                if d > step_cpu {
                    (step_cpu, step_cpu_at) = (d, format!("case {ci} position {p}"));
                }
            }
            let torch = per_position(&whole, &want, vocab);
            let mut case_jumps = 0;
            for (p, d) in per_position(&whole, &step, vocab).into_iter().enumerate() {
                if d > tol_same(name) && routed && case_jumps == 0 {
                    // The one jump a case a routed fixture may show: the decode path at this position is held above.
                    case_jumps += 1;
                    jumps.push(format!("case {ci} position {p}: {d:.3}"));
                    continue;
                }
                whole_step = whole_step.max(d);
                whole_torch = whole_torch.max(torch[p]);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "{name} gpu-bf16 decode path: {step_cpu:.2e} of the spread from the CPU on the same weights, \
             {step_torch:.2e} from PyTorch f32; whole prompt: {whole_step:.2e} from the decode path, \
             {whole_torch:.2e} from PyTorch; router jumps: {jumps:?}"
        );
        if step_cpu > TOL_SAME_WEIGHTS || step_torch > tol || whole_step > tol_same(name) || whole_torch > tol {
            failed.push(format!(
                "{name}: decode path {step_cpu} from the CPU (bound {TOL_SAME_WEIGHTS}; at {step_cpu_at}), \
                 {step_torch} from PyTorch \
                 (bound {tol}); whole prompt {whole_step} from the decode path (bound {}), {whole_torch} from PyTorch",
                tol_same(name)
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

fn argmax(v: &[f32]) -> usize {
    kvad_models::first_argmax(v) as usize
}

/// The token `m` picks after `history`, read token by token (as the routed fixtures' GPU run reads its prompt).
fn next_token(m: &dyn CausalLm, history: &[u32]) -> u32 {
    let mut kv = m.new_state();
    let mut last = Vec::new();
    for &t in history {
        last = m.forward(&mut [SeqInput { tokens: &[t], state: &mut kv }], LogitsMode::Last).unwrap().remove(0);
    }
    argmax(&last) as u32
}

/// Where two bf16 implementations may choose differently: PyTorch's bf16 top two within this many logits
/// (a few bf16 steps at the magnitudes these models reach, 8–16).
const NEAR_TIE: f32 = 0.25;

#[test]
fn gpu_bf16_greedy_follows_pytorch_bf16_until_a_near_tie() {
    if no_gpu() {
        return;
    }
    for name in FIXTURES {
        // A GGUF form holds the weights of the fixture it names, whose bf16 golden it shares.
        let same = common::golden_json(name)["same_weights_as"].as_str().map(str::to_string);
        let source = same.as_deref().unwrap_or(name);
        // deepseek-v2 layers experts by moe_layer_freq, which transformers ignores: its f32 golden is built by hand
        // (scripts/reference/moe_models.py), and it has no bf16 run to follow; the tests above check it.
        if source == "deepseek-v2" {
            continue;
        }
        let g = json(root().join(format!("fixtures/goldens/models-bf16/{source}.json")));
        let m = load(name, BackendKind::GpuBf16);
        let routed = tol_same(name) > TOL_SAME_WEIGHTS;
        // A router near a tie flips between two bf16 implementations with no near-tie in the logits to show it
        // (deepseek-v3: rounding the weights alone moves its logits 0.26 of the spread). Where a routed fixture parts
        // from PyTorch's bf16 elsewhere, the CPU's f32 arithmetic on the same bf16 weights, after the same tokens,
        // must pick the GPU's token: the GPU then follows exact arithmetic and the parting is PyTorch's rounding.
        let cpu = routed.then(|| {
            let (dir, rounded) = common::bf16_rounded_copy(&common::golden_json(source), &format!("greedy-{name}"));
            let model = load_model_with(
                &rounded,
                &LoadOptions { backend: BackendKind::CpuF32, cache_dir: None, f32_reference: false },
            )
            .unwrap_or_else(|e| panic!("{name} rounded to bf16: {e}"))
            .model;
            (dir, model)
        });
        for (ci, c) in g["cases"].as_array().unwrap().iter().enumerate() {
            let prompt = ids(&c["prompt"]);
            let want = ids(&c["greedy"]);
            let gaps: Vec<f64> = c["gaps"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            let mut kv = m.new_state();
            // A routed fixture reads its prompt token by token: a whole-prompt pass may tip one router near a tie
            // (the test above allows it one such jump a case), after which greedy tokens part with no near-tie in
            // PyTorch's logits to show why (deepseek-v3-half, 1.56 apart); the decode path follows PyTorch.
            let mut next = if routed {
                let (last, head) = prompt.split_last().unwrap();
                for &t in head {
                    m.forward(&mut [SeqInput { tokens: &[t], state: &mut kv }], LogitsMode::Last).unwrap();
                }
                vec![*last]
            } else {
                prompt.clone()
            };
            let mut got = Vec::new();
            for _ in 0..want.len() {
                let l = m.forward(&mut [SeqInput { tokens: &next, state: &mut kv }], LogitsMode::Last).unwrap();
                let t = argmax(&l[0]) as u32;
                got.push(t);
                next = vec![t];
            }
            match got.iter().zip(&want).position(|(a, b)| a != b) {
                None => eprintln!("{name} case {ci}: all {} greedy tokens equal PyTorch bf16", want.len()),
                Some(i) => {
                    eprintln!(
                        "{name} case {ci}: equal for {i} tokens, then {} vs PyTorch's {} where its top two are {:.3} apart",
                        got[i], want[i], gaps[i]
                    );
                    if gaps[i] as f32 <= NEAR_TIE {
                        continue;
                    }
                    let Some((_, cpu)) = &cpu else {
                        panic!("{name} case {ci}: parted at step {i}, not a near-tie");
                    };
                    let history: Vec<u32> = prompt.iter().chain(&got[..i]).copied().collect();
                    let exact = next_token(cpu.as_ref(), &history);
                    eprintln!("{name} case {ci}: after the same {} tokens the CPU's f32 on the same bf16 weights picks {exact}", history.len());
                    assert_eq!(exact, got[i], "{name} case {ci}: parted from PyTorch at step {i}, not a near-tie, and not as exact arithmetic does");
                }
            }
        }
        if let Some((dir, _)) = cpu {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

// `step` indexes every sequence's alone-run at once, which an iterator over one of them would not.
#[allow(clippy::needless_range_loop)]
#[test]
fn batched_decode_is_bit_identical_to_alone_and_prompt_passes_agree() {
    if no_gpu() {
        return;
    }
    for backend in [BackendKind::GpuBf16, BackendKind::GpuQ8, BackendKind::GpuQ4] {
        for name in [
            "llama",
            "qwen3",
            "gpt2",
            "mistral",
            "qwen3-moe",
            "deepseek-v2",
            "deepseek-v3",
            "qwen3-next",
            "qwen3-5-moe",
        ] {
            let m = load(name, backend);
            let g = common::golden_json(name);
            let prompts: Vec<Vec<u32>> = g["cases"].as_array().unwrap().iter().map(|c| ids(&c["prompt"])).collect();
            // Prompts read alone (the same passes on both sides), then 6 greedy steps alone and all together.
            let prefill = |kv: &mut kvad_models::SeqState, p: &[u32]| {
                m.forward(&mut [SeqInput { tokens: p, state: kv }], LogitsMode::Last).unwrap().remove(0)
            };
            let mut alone = Vec::new();
            for p in &prompts {
                let mut kv = m.new_state();
                let mut l = prefill(&mut kv, p);
                let mut steps = Vec::new();
                for _ in 0..6 {
                    let t = argmax(&l) as u32;
                    l = m
                        .forward(&mut [SeqInput { tokens: &[t], state: &mut kv }], LogitsMode::Last)
                        .unwrap()
                        .remove(0);
                    steps.push((t, l.clone()));
                }
                alone.push(steps);
            }
            let mut kvs: Vec<_> = prompts.iter().map(|_| m.new_state()).collect();
            let mut ls: Vec<Vec<f32>> = prompts.iter().zip(kvs.iter_mut()).map(|(p, kv)| prefill(kv, p)).collect();
            for step in 0..6 {
                let next: Vec<[u32; 1]> = ls.iter().map(|l| [argmax(l) as u32]).collect();
                let mut batch: Vec<SeqInput<'_>> =
                    next.iter().zip(kvs.iter_mut()).map(|(t, kv)| SeqInput { tokens: t, state: kv }).collect();
                ls = m.forward(&mut batch, LogitsMode::Last).unwrap();
                for (i, (n, l)) in next.iter().zip(&ls).enumerate() {
                    // Each decode row runs the same GEMV and attention arithmetic alone or beside others.
                    assert_eq!(n[0], alone[i][step].0, "{name} {backend} sequence {i} step {step}: token");
                    assert!(l == &alone[i][step].1, "{name} {backend} sequence {i} step {step}: logits differ");
                }
            }
            // The three prompts in one pass (one cuBLAS product over all rows) against each alone.
            let mut kvs: Vec<_> = prompts.iter().map(|_| m.new_state()).collect();
            let mut batch: Vec<SeqInput<'_>> =
                prompts.iter().zip(kvs.iter_mut()).map(|(p, kv)| SeqInput { tokens: p, state: kv }).collect();
            let together = m.forward(&mut batch, LogitsMode::Last).unwrap();
            for (i, p) in prompts.iter().enumerate() {
                let want = prefill(&mut m.new_state(), p);
                let d = max_diff(&together[i], &want) / spread(&want);
                assert!(d <= tol_same(name), "{name} {backend} prompt {i}: {d} of the spread");
            }
            // The longest prompt read in chunks of 3 against it read at once.
            let p = &prompts[2];
            let whole = prefill(&mut m.new_state(), p);
            let mut kv = m.new_state();
            let mut last = Vec::new();
            for chunk in p.chunks(3) {
                last = prefill(&mut kv, chunk);
            }
            let d = max_diff(&last, &whole) / spread(&whole);
            assert!(d <= tol_same(name), "{name} {backend}: chunked prompt {d} of the spread from whole");
        }
    }
}

#[test]
fn a_copied_prefix_continues_like_the_prefix_read_alone() {
    if no_gpu() {
        return;
    }
    // qwen3's keys and values, DeepSeek's latents (one row a token in its pages).
    for (name, backend) in [
        ("qwen3", BackendKind::GpuBf16),
        ("qwen3", BackendKind::GpuQ4),
        ("deepseek-v2-lite", BackendKind::GpuBf16),
        ("deepseek-v3", BackendKind::GpuQ8),
    ] {
        let m = load(name, backend);
        let p: Vec<u32> = (3..40).collect();
        let mut kv = m.new_state();
        m.forward(&mut [SeqInput { tokens: &p, state: &mut kv }], LogitsMode::None).unwrap();
        // A copy of the first 20 positions (a conversation parting from a kept one), then one more token.
        let mut copy = kv.copy_prefix(20).expect("room for a copy");
        assert_eq!(copy.len(), 20);
        let a = m.forward(&mut [SeqInput { tokens: &[7], state: &mut copy }], LogitsMode::Last).unwrap().remove(0);
        let mut fresh = m.new_state();
        m.forward(&mut [SeqInput { tokens: &p[..20], state: &mut fresh }], LogitsMode::None).unwrap();
        let b = m.forward(&mut [SeqInput { tokens: &[7], state: &mut fresh }], LogitsMode::Last).unwrap().remove(0);
        let d = max_diff(&a, &b) / spread(&b);
        assert!(d <= tol_same(name), "{name} {backend}: {d} of the spread");
        // The original is untouched by the copy's new token.
        assert_eq!(kv.len(), p.len());
        // A copy of two whole pages shares them; cut back into the second and written there, it copies that page
        // first: the copy reads like the prefix alone, and the original still holds its own rows.
        let mut cut = kv.copy_prefix(32).expect("two whole pages, shared");
        assert!(cut.truncate(20));
        let c = m.forward(&mut [SeqInput { tokens: &[7], state: &mut cut }], LogitsMode::Last).unwrap().remove(0);
        let d = max_diff(&c, &b) / spread(&b);
        assert!(d <= tol_same(name), "{name} {backend}: a written shared page: {d} of the spread");
        let mut whole = m.new_state();
        m.forward(&mut [SeqInput { tokens: &p, state: &mut whole }], LogitsMode::None).unwrap();
        let next = |s: &mut kvad_models::SeqState| {
            m.forward(&mut [SeqInput { tokens: &[9], state: s }], LogitsMode::Last).unwrap().remove(0)
        };
        let (o, w) = (next(&mut kv), next(&mut whole));
        let d = max_diff(&o, &w) / spread(&w);
        assert!(d <= tol_same(name), "{name} {backend}: the original after its copies wrote: {d} of the spread");
    }
}

/// A recurrent model's state on the device: cut back to a snapshot or copied at one (a conversation parting from a
/// kept one), it goes on as the prefix read alone does; with every slot held, a new sequence is refused by name.
#[test]
fn a_recurrent_state_restored_or_copied_at_a_snapshot_continues_like_the_prefix_read_alone() {
    if no_gpu() {
        return;
    }
    for (name, backend) in [("qwen3-next", BackendKind::GpuBf16), ("qwen3-5-moe", BackendKind::GpuQ8)] {
        let m = load(name, backend);
        let p: Vec<u32> = (3..40).collect();
        let mut kv = m.new_state();
        m.forward(&mut [SeqInput { tokens: &p[..20], state: &mut kv }], LogitsMode::None).unwrap();
        assert!(kv.snapshot(), "{name}: a free slot for the snapshot");
        m.forward(&mut [SeqInput { tokens: &p[20..], state: &mut kv }], LogitsMode::None).unwrap();
        assert!(kv.copy_prefix(25).is_none(), "{name}: no snapshot at 25");
        let mut copy = kv.copy_prefix(20).expect("a copy at the snapshot");
        let a = m.forward(&mut [SeqInput { tokens: &[7, 9], state: &mut copy }], LogitsMode::All).unwrap().remove(0);
        let mut fresh = m.new_state();
        m.forward(&mut [SeqInput { tokens: &p[..20], state: &mut fresh }], LogitsMode::None).unwrap();
        let b = m.forward(&mut [SeqInput { tokens: &[7, 9], state: &mut fresh }], LogitsMode::All).unwrap().remove(0);
        let d = max_diff(&a, &b) / spread(&b);
        assert!(d <= tol_same(name), "{name} {backend}: copy {d} of the spread");
        assert!(kv.truncate(20), "{name}: cut back to the snapshot");
        let c = m.forward(&mut [SeqInput { tokens: &[7, 9], state: &mut kv }], LogitsMode::All).unwrap().remove(0);
        assert!(c == a, "{name} {backend}: the restored state and the copy compute the same bits");
        eprintln!("{name} {backend}: copied and restored at a snapshot, {d:.2e} of the spread from read alone");
    }
    // Every slot held: the pass names it.
    let m = load("qwen3-5", BackendKind::GpuBf16);
    let mut held = Vec::new();
    loop {
        let mut s = m.new_state();
        match m.forward(&mut [SeqInput { tokens: &[3], state: &mut s }], LogitsMode::Last) {
            Ok(_) => held.push(s),
            Err(e) => {
                assert!(e.to_string().contains("slots are held"), "{e}");
                break;
            }
        }
        assert!(held.len() <= 100_000, "the slots never ran out");
    }
    eprintln!("qwen3-5: {} sequences held every slot", held.len());
}

#[test]
fn a_cache_of_another_model_is_refused_by_name() {
    if no_gpu() {
        return;
    }
    let a = load("llama", BackendKind::GpuBf16);
    let b = load("llama", BackendKind::GpuBf16);
    let mut kv = b.new_state();
    let err = a.forward(&mut [SeqInput { tokens: &[3, 4], state: &mut kv }], LogitsMode::Last).unwrap_err();
    assert!(err.to_string().contains("another model"), "{err}");
    let mut cpu_kv = load("llama", BackendKind::CpuF32).new_state();
    let err = a.forward(&mut [SeqInput { tokens: &[3], state: &mut cpu_kv }], LogitsMode::Last).unwrap_err();
    assert!(err.to_string().contains("not made by this GPU model"), "{err}");
}

/// Decode passes of more than 8 rows (cuBLAS or the tensor-core product, the chunk attention; qwen3's head width
/// of 32 takes it, contexts of 10 to 112 keys across its 64-key chunks): a sequence's logits are the same bits
/// whichever sequences share its pass of the same size, and within the prompt passes' tolerance of the sequence
/// decoded alone (GEMV and key-stream attention). Qwen3-MoE's routed layers run their grouped GEMVs there.
#[test]
fn decode_passes_over_8_rows_do_not_depend_on_the_other_rows() {
    if no_gpu() {
        return;
    }
    for (name, backend) in [
        ("qwen3", BackendKind::GpuBf16),
        ("qwen3", BackendKind::GpuQ8),
        ("qwen3-moe", BackendKind::GpuBf16),
        ("qwen3-moe", BackendKind::GpuQ4),
        ("deepseek-v3", BackendKind::GpuBf16),
        ("deepseek-v2-lite", BackendKind::GpuQ8),
        ("qwen3-next", BackendKind::GpuBf16),
        ("qwen3-5-moe", BackendKind::GpuQ4),
    ] {
        let m = load(name, backend);
        let prompts: Vec<Vec<u32>> =
            (0..18).map(|i| (0..10 + 6 * i).map(|k| ((3 + 7 * i + 5 * k) % 250) as u32).collect()).collect();
        let mut kvs: Vec<_> = prompts.iter().map(|_| m.new_state()).collect();
        let next: Vec<[u32; 1]> = prompts
            .iter()
            .zip(kvs.iter_mut())
            .map(|(p, kv)| {
                let l = m.forward(&mut [SeqInput { tokens: p, state: kv }], LogitsMode::Last).unwrap().remove(0);
                [argmax(&l) as u32]
            })
            .collect();
        let copy = |kv: &kvad_models::SeqState| kv.copy_prefix(kv.len()).expect("room for a copy");
        let mut again: Vec<_> = kvs[..6].iter().map(copy).collect();
        let mut alone: Vec<_> = kvs[..6].iter().map(copy).collect();
        // Pass A: sequences 0..12; pass B: the copies of 0..6 beside sequences 12..18 (also 12 rows).
        let mut a: Vec<SeqInput<'_>> =
            next[..12].iter().zip(kvs[..12].iter_mut()).map(|(t, kv)| SeqInput { tokens: t, state: kv }).collect();
        let la = m.forward(&mut a, LogitsMode::Last).unwrap();
        let tail = &mut kvs[12..];
        let mut b: Vec<SeqInput<'_>> = next[..6]
            .iter()
            .zip(again.iter_mut())
            .chain(next[12..].iter().zip(tail.iter_mut()))
            .map(|(t, kv)| SeqInput { tokens: t, state: kv })
            .collect();
        let lb = m.forward(&mut b, LogitsMode::Last).unwrap();
        // A routed fixture may show one router's jump among the six (a 12-row pass runs cuBLAS on bf16
        // activations, which can tip a router input near a tie: deepseek-v3 at gpu-bf16, 0.425 of the spread on
        // the H100, while its one-row decode path stays within 0.001 of the CPU); a dense one none.
        let mut jumps = Vec::new();
        for i in 0..6 {
            assert!(
                la[i] == lb[i],
                "{name} {backend} sequence {i}: logits differ with other neighbours in a 12-row pass"
            );
            let l = m.forward(&mut [SeqInput { tokens: &next[i], state: &mut alone[i] }], LogitsMode::Last).unwrap();
            let d = max_diff(&la[i], &l[0]) / spread(&l[0]);
            if d > tol_same(name) {
                jumps.push((i, d));
            }
        }
        let allowed = usize::from(tol_same(name) > TOL_SAME_WEIGHTS);
        eprintln!("{name} {backend}: 12-row pass beyond {} of the spread from alone at {jumps:?}", tol_same(name));
        assert!(jumps.len() <= allowed, "{name} {backend}: 12-row pass from alone at {jumps:?} (allowed {allowed})");
    }
}

/// Greedy steps run ahead on the device (`forward_greedy_steps`: the recorded pass replayed, each pick made the
/// next pass's token and position on the device) give the picks steps one at a time give, and leave the cache
/// where those leave it (the step after agrees too): 20 steps, so the run crosses pages of 16 keys, at every GPU
/// backend, for a llama, a qwen3 (q/k norms) and a GPT-2 (learned positions, no RoPE).
#[test]
fn greedy_steps_ahead_equal_steps_one_at_a_time() {
    if no_gpu() {
        return;
    }
    for backend in [BackendKind::GpuBf16, BackendKind::GpuQ8, BackendKind::GpuQ4] {
        for name in ["llama", "qwen3", "gpt2", "qwen3-moe", "deepseek-v2-lite"] {
            let m = load(name, backend);
            let prompt = ids(&common::golden_json(name)["cases"][0]["prompt"]);
            let run = |ahead: bool| {
                let mut kv = m.new_state();
                let first = m.forward_greedy(&mut [SeqInput { tokens: &prompt, state: &mut kv }]).unwrap()[0];
                let seq = SeqInput { tokens: &[first], state: &mut kv };
                let picks = if ahead {
                    m.forward_greedy_steps(seq, 20).unwrap()
                } else {
                    kvad_models::greedy_one_by_one(m.as_ref(), seq, 20).unwrap()
                };
                let last = [*picks.last().unwrap()];
                let after = m.forward_greedy(&mut [SeqInput { tokens: &last, state: &mut kv }]).unwrap()[0];
                (first, picks, after, kv.len())
            };
            let (one_by_one, ahead) = (run(false), run(true));
            assert_eq!(one_by_one.1.len(), 20, "{name} {backend}");
            assert_eq!(ahead, one_by_one, "{name} {backend}: (first pick, 20 picks, the pick after, cache length)");
        }
    }
}

/// The device's router (`moe_route`) chooses what the CPU's `route` chooses, with the same weights, for every
/// routing option of `fixtures/goldens/routing.json` (softmax with and without normalising, DeepSeek-V2's greedy and
/// group-limited choice with scaling, V3's sigmoid with a choice bias, with and without groups), on its logits,
/// half of them rounded so ties are common: equal values go to the lower index on both.
#[test]
fn the_device_router_chooses_as_the_cpu_router() {
    use kvad_models::config::{Routing, Scoring};
    use kvad_tensor::cuda::{DevBuf, Gpu, RouteArgs};
    if no_gpu() {
        return;
    }
    let gpu = Gpu::shared(None).unwrap();
    let g = json(root().join("fixtures/goldens/routing.json"));
    let floats = |v: &Value| -> Vec<f32> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect() };
    for case in g["cases"].as_array().unwrap() {
        let c = &case["config"];
        let router = case["router"].as_str().unwrap();
        let sigmoid = router.starts_with("DeepseekV3");
        let groups =
            c["n_group"].as_u64().filter(|_| sigmoid || c["topk_method"].as_str() == Some("group_limited_greedy"));
        let r = Routing {
            n_experts: c["experts"].as_u64().unwrap() as usize,
            top_k: c["top_k"].as_u64().unwrap() as usize,
            scoring: if sigmoid { Scoring::Sigmoid } else { Scoring::Softmax },
            groups: groups.map(|n| (n as usize, c["topk_group"].as_u64().unwrap() as usize)),
            normalise: c["norm_topk_prob"].as_bool().unwrap_or(false) && !router.starts_with("DeepseekV2"),
            scale: c["routed_scaling_factor"].as_f64().unwrap() as f32,
            choice_bias: !c["bias"].is_null(),
        };
        let bias = (!c["bias"].is_null()).then(|| floats(&c["bias"]));
        let rows: Vec<Vec<f32>> = case["rows"].as_array().unwrap().iter().map(|row| floats(&row["logits"])).collect();
        let (n, e, k) = (rows.len(), r.n_experts, r.top_k);
        let logits = DevBuf::from_slice(&gpu, &rows.concat()).unwrap();
        let bias_buf = bias.as_ref().map(|b| DevBuf::from_slice(&gpu, b).unwrap());
        let (ids, w) = (DevBuf::zeros(&gpu, n * k * 4).unwrap(), DevBuf::zeros(&gpu, n * k * 4).unwrap());
        let args =
            RouteArgs { experts: e, top_k: k, sigmoid, groups: r.groups, normalise: r.normalise, scale: r.scale };
        // SAFETY: logits hold n × e floats, ids and w n × k each, the bias e floats.
        let (got_ids, got_w): (Vec<i32>, Vec<f32>) = unsafe {
            gpu.moe_route(logits.ptr(), bias_buf.as_ref().map_or(0, DevBuf::ptr), ids.ptr(), w.ptr(), n, &args)
                .unwrap();
            (ids.read(&gpu, n * k).unwrap(), w.read(&gpu, n * k).unwrap())
        };
        let option = case["option"].as_str().unwrap();
        let mut want = Vec::new();
        for (t, row) in rows.iter().enumerate() {
            kvad_models::moe::route(&r, row, bias.as_deref(), &mut want);
            let (gi, gw) = (&got_ids[t * k..(t + 1) * k], &got_w[t * k..(t + 1) * k]);
            let want_ids: Vec<i32> = want.iter().map(|p| p.0 as i32).collect();
            assert_eq!(gi, &want_ids[..], "{option} row {t}: experts");
            for (a, b) in gw.iter().zip(&want) {
                assert!((a - b.1).abs() <= 1e-6 * (1.0 + b.1.abs()), "{option} row {t}: weight {a} vs {}", b.1);
            }
        }
        eprintln!("{option}: {n} rows chosen as the CPU chooses");
    }
}
