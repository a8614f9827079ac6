//! A router's choice for one token: scores from its logits, the experts it picks and their weights, each option
//! computed as transformers does (Qwen3MoeTopKRouter, DeepseekV2TopkRouter, DeepseekV3TopkRouter).
//!
//! Ties: PyTorch's `topk` leaves the order of equal values unspecified; here the lower index wins, among groups and
//! among experts, so a reply's experts never depend on anything but its logits.

use crate::config::{Routing, Scoring};

/// The experts and weights of one token, `(expert, weight)` in increasing expert order (the order transformers
/// adds the experts' outputs in). `bias` is the per-expert choice bias when the router has one.
pub fn route(r: &Routing, logits: &[f32], bias: Option<&[f32]>, out: &mut Vec<(usize, f32)>) {
    let e = r.n_experts;
    let mut scores = logits[..e].to_vec();
    match r.scoring {
        Scoring::Softmax => kvad_tensor::cpu::ops::softmax_inplace(&mut scores),
        Scoring::Sigmoid => scores.iter_mut().for_each(|s| *s = 1.0 / (1.0 + (-*s).exp())),
    }
    let mut choice = scores.clone();
    if let Some(b) = bias {
        choice.iter_mut().zip(b).for_each(|(c, b)| *c += b);
    }
    if let Some((n_group, topk_group)) = r.groups {
        let per = e / n_group;
        let rank: Vec<f32> = choice
            .chunks_exact(per)
            .map(|g| match r.scoring {
                // DeepSeek-V2's group_limited_greedy: a group is as good as its best expert.
                Scoring::Softmax => g.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                // DeepSeek-V3: the sum of its best two (bias included).
                Scoring::Sigmoid => {
                    let best = top(g, 2.min(per));
                    best.iter().map(|&i| g[i]).sum()
                }
            })
            .collect();
        let kept = top(&rank, topk_group);
        // Masked experts: 0 for softmax scores (V2 masks the scores), -inf for sigmoid choices (V3).
        let masked = match r.scoring {
            Scoring::Softmax => 0.0,
            Scoring::Sigmoid => f32::NEG_INFINITY,
        };
        for (g, part) in choice.chunks_exact_mut(per).enumerate() {
            if !kept.contains(&g) {
                part.iter_mut().for_each(|c| *c = masked);
            }
        }
    }
    let mut chosen = top(&choice, r.top_k);
    chosen.sort_unstable();
    // The weights are the scores without the bias; V2's softmax path reads its masked scores, which for a chosen
    // expert are its score (a masked one is chosen only when fewer than k remain, and then weighs 0).
    let weight = |i: usize| match (r.scoring, r.groups) {
        (Scoring::Softmax, Some(_)) => choice[i],
        _ => scores[i],
    };
    out.clear();
    out.extend(chosen.iter().map(|&i| (i, weight(i))));
    if r.normalise {
        // Summed in top-k order, as `topk_weights.sum(-1)` is.
        let mut by_value: Vec<f32> = out.iter().map(|p| p.1).collect();
        by_value.sort_by(|a, b| b.total_cmp(a));
        let mut sum: f32 = by_value.iter().sum();
        if r.scoring == Scoring::Sigmoid {
            sum += 1e-20;
        }
        out.iter_mut().for_each(|p| p.1 /= sum);
    }
    if r.scale != 1.0 {
        out.iter_mut().for_each(|p| p.1 *= r.scale);
    }
}

/// Indices of the `k` largest values, largest first; among equal values the lower index first.
fn top(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn floats(v: &Value) -> Vec<f32> {
        v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
    }

    /// Every router option against transformers' own router modules on random logits, half of them rounded so that
    /// ties are common (`fixtures/goldens/routing.json`, made by `scripts/reference/moe_models.py`). Where PyTorch
    /// broke a tie at the k-th place another way, the choice must still be a tie: the same chosen scores and weights.
    #[test]
    fn routing_matches_pytorch_on_random_scores_with_ties() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/goldens/routing.json");
        let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut exact = 0;
        let mut ties = 0;
        for case in g["cases"].as_array().unwrap() {
            let c = &case["config"];
            let option = case["option"].as_str().unwrap();
            let sigmoid = case["router"].as_str().unwrap().starts_with("DeepseekV3");
            let groups =
                c["n_group"].as_u64().filter(|_| sigmoid || c["topk_method"].as_str() == Some("group_limited_greedy"));
            let r = Routing {
                n_experts: c["experts"].as_u64().unwrap() as usize,
                top_k: c["top_k"].as_u64().unwrap() as usize,
                scoring: if sigmoid { Scoring::Sigmoid } else { Scoring::Softmax },
                groups: groups.map(|n| (n as usize, c["topk_group"].as_u64().unwrap() as usize)),
                normalise: c["norm_topk_prob"].as_bool().unwrap_or(false)
                    && !case["router"].as_str().unwrap().starts_with("DeepseekV2"),
                scale: c["routed_scaling_factor"].as_f64().unwrap() as f32,
                choice_bias: !c["bias"].is_null(),
            };
            let bias = (!c["bias"].is_null()).then(|| floats(&c["bias"]));
            let mut got = Vec::new();
            for (t, row) in case["rows"].as_array().unwrap().iter().enumerate() {
                let logits = floats(&row["logits"]);
                route(&r, &logits, bias.as_deref(), &mut got);
                let want_e: Vec<usize> =
                    row["experts"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
                let want_w = floats(&row["weights"]);
                let got_e: Vec<usize> = got.iter().map(|p| p.0).collect();
                let close =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6 * (1.0 + y.abs()));
                if got_e == want_e {
                    let got_w: Vec<f32> = got.iter().map(|p| p.1).collect();
                    assert!(close(&got_w, &want_w), "{option} row {t}: weights {got_w:?} vs {want_w:?}");
                    exact += 1;
                } else {
                    // A tie broken differently: the multisets of weights agree.
                    let mut a: Vec<f32> = got.iter().map(|p| p.1).collect();
                    let mut b = want_w.clone();
                    a.sort_by(f32::total_cmp);
                    b.sort_by(f32::total_cmp);
                    assert!(close(&a, &b), "{option} row {t}: experts {got_e:?} vs {want_e:?}, weights {a:?} vs {b:?}");
                    ties += 1;
                }
            }
        }
        assert!(exact > 150, "most rows have no tie at the k-th place: {exact} exact, {ties} ties");
        assert!(ties > 0, "the golden has ties broken differently; the check for them must run");
    }

    #[test]
    fn lower_index_wins_a_tie() {
        assert_eq!(top(&[1.0, 3.0, 3.0, 2.0, 3.0], 2), vec![1, 2]);
    }
}
