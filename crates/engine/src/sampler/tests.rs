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
