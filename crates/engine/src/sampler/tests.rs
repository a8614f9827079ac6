use super::*;

fn params() -> SamplingParams {
    SamplingParams { temperature: 1.0, seed: Some(42), ..Default::default() }
}

#[test]
fn greedy_is_argmax_and_first_on_ties() {
    let mut s = Sampler::new(SamplingParams::default());
    assert_eq!(s.sample(&[0.1, 2.0, 2.0, -1.0], &[], &[]).id, 1);
}

#[test]
fn same_seed_same_draws() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let run = || {
        let mut s = Sampler::new(params());
        (0..20).map(|_| s.sample(&logits, &[], &[]).id).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
    assert!(run().iter().collect::<std::collections::HashSet<_>>().len() > 3, "draws should vary");
}

#[test]
fn top_k_one_is_greedy_and_top_p_tiny_is_greedy() {
    let logits = [0.5, 3.0, 1.0, 2.9];
    for p in [SamplingParams { top_k: 1, ..params() }, SamplingParams { top_p: 0.01, ..params() }] {
        let mut s = Sampler::new(p);
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[], &[]).id, 1);
        }
    }
}

#[test]
fn min_p_drops_unlikely_tokens() {
    // token 1 has p ~ 0.99; min_p 0.5 keeps only it
    let logits = [0.0, 8.0, 1.0, 1.5];
    let mut s = Sampler::new(SamplingParams { min_p: 0.5, ..params() });
    for _ in 0..50 {
        assert_eq!(s.sample(&logits, &[], &[]).id, 1);
    }
}

#[test]
fn repetition_penalty_follows_hf_sign_rule() {
    // HF: positive logits are divided, negative multiplied.
    let mut s = Sampler::new(SamplingParams { repetition_penalty: 4.0, ..Default::default() });
    assert_eq!(s.sample(&[2.0, 1.0], &[0], &[]).id, 1); // 2/4 = 0.5 < 1
    let mut s = Sampler::new(SamplingParams { repetition_penalty: 4.0, ..Default::default() });
    assert_eq!(s.sample(&[-0.5, -1.0], &[], &[0]).id, 1); // -0.5*4 = -2 < -1
}

#[test]
fn presence_and_frequency_penalties_count_reply_tokens() {
    let mut s = Sampler::new(SamplingParams { frequency_penalty: 0.6, ..Default::default() });
    assert_eq!(s.sample(&[1.0, 0.0], &[], &[0, 0]).id, 1); // 1 - 1.2 < 0
    let mut s = Sampler::new(SamplingParams { presence_penalty: 0.6, ..Default::default() });
    assert_eq!(s.sample(&[1.0, 0.5], &[0, 0, 0], &[0]).id, 1); // prompt tokens do not count
}

#[test]
fn logprobs_are_made_only_when_asked_for() {
    let logits = [0.1f32, 2.0, -1.0];
    let out = Sampler::new(SamplingParams { temperature: 0.0, ..Default::default() }).sample(&logits, &[], &[]);
    assert_eq!(out.id, 1);
    assert!(out.logprob.is_nan() && out.top.is_empty(), "{out:?}");
    let out = Sampler::new(SamplingParams { temperature: 0.0, top_logprobs: Some(0), ..Default::default() }).sample(
        &logits,
        &[],
        &[],
    );
    let lse = logits.iter().map(|v| (*v as f64).exp()).sum::<f64>().ln();
    assert!((out.logprob as f64 - (2.0 - lse)).abs() < 1e-6, "{out:?}");
}

#[test]
fn logprobs_are_the_plain_softmax_of_the_logits() {
    let mut s = Sampler::new(SamplingParams { temperature: 0.0, top_logprobs: Some(2), ..Default::default() });
    let out = s.sample(&[0.0, (3.0f32).ln(), 0.0], &[], &[]);
    assert_eq!(out.id, 1);
    assert!((out.logprob - 0.6f32.ln()).abs() < 1e-6);
    assert_eq!(out.top.len(), 2);
    assert_eq!(out.top[0].0, 1);
    assert!((out.top[1].1 - 0.2f32.ln()).abs() < 1e-6);
}

#[test]
fn validation_names_the_field() {
    let cases = [
        (SamplingParams { temperature: -1.0, ..Default::default() }, "temperature"),
        (SamplingParams { top_p: 0.0, ..Default::default() }, "top_p"),
        (SamplingParams { min_p: 1.5, ..Default::default() }, "min_p"),
        (SamplingParams { repetition_penalty: 0.0, ..Default::default() }, "repetition_penalty"),
        (SamplingParams { presence_penalty: 3.0, ..Default::default() }, "presence_penalty"),
        (SamplingParams { top_logprobs: Some(50), ..Default::default() }, "top_logprobs"),
    ];
    for (p, field) in cases {
        let e = p.validate().unwrap_err();
        assert_eq!(e.field, field);
        assert!(e.to_string().contains(field));
    }
    assert!(SamplingParams::default().validate().is_ok());
}

#[test]
fn in_play_marks_what_top_k_top_p_and_greedy_leave() {
    // Probabilities at temperature 1: ~0.64, 0.24, 0.09, 0.03 for ids 1, 3, 2, 0.
    let logits = [-1.0, 2.0, 0.0, 1.0];
    let marks = |p: SamplingParams| {
        let s = Sampler::new(SamplingParams { top_logprobs: Some(4), ..p }).sample(&logits, &[], &[]);
        (s.top.iter().map(|t| t.0).collect::<Vec<_>>(), s.in_play)
    };
    assert_eq!(marks(params()), (vec![1, 3, 2, 0], vec![true; 4]));
    assert_eq!(marks(SamplingParams { top_k: 2, ..params() }).1, [true, true, false, false]);
    assert_eq!(marks(SamplingParams { top_p: 0.8, ..params() }).1, [true, true, false, false]);
    assert_eq!(marks(SamplingParams::default()).1, [true, false, false, false], "greedy: only the pick");
    // No alternatives asked: no marks.
    assert!(Sampler::new(params()).sample(&logits, &[], &[]).in_play.is_empty());
}

/// The cuts as a full sort of the vocabulary makes them (what the sampler did before it selected and sorted only
/// what a cut needs): top-k, then top-p over the normalised probabilities, then min-p against the best.
fn by_full_sort(l: &[f32], p: &SamplingParams) -> Vec<(u32, f64)> {
    let l: Vec<f32> = l.iter().map(|v| v / p.temperature).collect();
    let mut idx: Vec<u32> = (0..l.len() as u32).filter(|&i| l[i as usize].is_finite()).collect();
    idx.sort_unstable_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
    if p.top_k > 0 && p.top_k < idx.len() {
        idx.truncate(p.top_k);
    }
    let max = l[idx[0] as usize];
    let mut probs: Vec<f64> = idx.iter().map(|&i| ((l[i as usize] - max) as f64).exp()).collect();
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|x| *x /= sum);
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let keep = probs.iter().position(|&q| {
            acc += q;
            acc >= p.top_p as f64
        });
        let keep = keep.map_or(probs.len(), |k| k + 1);
        probs.truncate(keep);
        idx.truncate(keep);
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p as f64;
        let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
        probs.truncate(keep);
        idx.truncate(keep);
    }
    idx.into_iter().zip(probs).collect()
}

proptest::proptest! {
    /// The candidates and their probabilities are the full sort's, whatever the cuts; in its order wherever a cut
    /// needs one. Flat logits over 3,000 tokens make top-p sort past its first prefix of 256.
    #[test]
    fn the_cuts_keep_what_a_full_sort_keeps(
        seed in 0u64..1000, spread in 0.1f32..20.0, top_k in 0usize..400, top_p in 0.05f32..1.0, min_p in 0.0f32..0.5,
        cut_p in proptest::bool::ANY, cut_min in proptest::bool::ANY, temperature in 0.3f32..2.0,
    ) {
        let mut rng = Rng::new(seed);
        let l: Vec<f32> = (0..3000).map(|i| if i % 97 == 5 { f32::NEG_INFINITY } else { (rng.next_f64() as f32) * spread }).collect();
        let p = SamplingParams {
            temperature,
            top_k,
            top_p: if cut_p { top_p } else { 1.0 },
            min_p: if cut_min { min_p } else { 0.0 },
            ..params()
        };
        let want = by_full_sort(&l, &p);
        let (idx, probs) = Sampler::new(p.clone()).candidates(&mut l.clone());
        let mut got: Vec<(u32, f64)> = idx.into_iter().zip(probs).collect();
        if p.top_k == 0 && p.top_p >= 1.0 && p.min_p == 0.0 {
            got.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        proptest::prop_assert_eq!(got.len(), want.len());
        for ((gi, gp), (wi, wp)) in got.iter().zip(&want) {
            proptest::prop_assert_eq!(gi, wi);
            proptest::prop_assert!((gp - wp).abs() <= 1e-12 * wp.max(1e-300), "{} {} {}", gi, gp, wp);
        }
    }
}
