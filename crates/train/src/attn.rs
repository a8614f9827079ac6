//! Causal self-attention over whole sequences, forward and backward, with grouped key/value heads.
//!
//! The forward keeps only each row's log-sum-exp; the backward recomputes the probabilities from it (as flash
//! attention's backward does), so a step holds `rows × heads` floats for attention instead of `rows × rows × heads`.
//! One pool task per (sequence, key/value head): the query heads that share a key/value head add into the same dK
//! and dV, so they stay on one task.

use crate::ops::transpose;
use kvad_tensor::cpu::matmul::{matmul_f32, BLayout, Dims};
use kvad_tensor::cpu::pool;
use std::sync::Mutex;

/// The attention's shape: `seqs` sequences of `len` rows, `heads` query heads sharing `kv_heads` key/value heads of
/// `hd` values each.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Sequences in the batch.
    pub seqs: usize,
    /// Rows a sequence.
    pub len: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Values a head.
    pub hd: usize,
}

impl Shape {
    fn q_width(&self) -> usize {
        self.heads * self.hd
    }
    fn kv_width(&self) -> usize {
        self.kv_heads * self.hd
    }
    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// Scores `q·kᵀ·scale` of one head, causally masked, softmaxed in place; returns each row's log-sum-exp.
fn probs(q: &[f32], k: &[f32], sh: &Shape, scale: f32, p: &mut [f32]) -> Vec<f32> {
    let t = sh.len;
    matmul_f32(q, sh.q_width(), k, sh.kv_width(), BLayout::NByK, p, t, Dims { m: t, k: sh.hd, n: t }, false);
    let mut lse = Vec::with_capacity(t);
    for (i, row) in p.chunks_mut(t).enumerate() {
        let max = row[..=i].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v * scale));
        let mut sum = 0.0f32;
        for v in row[..=i].iter_mut() {
            *v = (*v * scale - max).exp();
            sum += *v;
        }
        row[..=i].iter_mut().for_each(|v| *v /= sum);
        row[i + 1..].fill(0.0);
        lse.push(max + sum.ln());
    }
    lse
}

/// The same probabilities again from a kept log-sum-exp.
fn probs_again(q: &[f32], k: &[f32], sh: &Shape, scale: f32, lse: &[f32], p: &mut [f32]) {
    let t = sh.len;
    matmul_f32(q, sh.q_width(), k, sh.kv_width(), BLayout::NByK, p, t, Dims { m: t, k: sh.hd, n: t }, false);
    for (i, row) in p.chunks_mut(t).enumerate() {
        row[..=i].iter_mut().for_each(|v| *v = (*v * scale - lse[i]).exp());
        row[i + 1..].fill(0.0);
    }
}

/// `softmax(q·kᵀ·scale, causal)·v` for every head: returns the output (`rows × heads·hd`) and the log-sum-exp of
/// every (sequence, head, row), which [`backward`] needs.
pub fn forward(q: &[f32], k: &[f32], v: &[f32], sh: Shape, scale: f32) -> (Vec<f32>, Vec<f32>) {
    let (t, qw, kw, hd, g) = (sh.len, sh.q_width(), sh.kv_width(), sh.hd, sh.group());
    let mut out = vec![0.0; sh.seqs * t * qw];
    let mut lse = vec![0.0; sh.seqs * sh.heads * t];
    let results = Mutex::new(Vec::new());
    pool::parallel_for(sh.seqs * sh.kv_heads, |task| {
        let (s, kvh) = (task / sh.kv_heads, task % sh.kv_heads);
        let kv0 = s * t * kw + kvh * hd;
        let mut p = vec![0.0; t * t];
        let mut o = vec![0.0; t * g * hd];
        let mut l = Vec::with_capacity(g * t);
        for j in 0..g {
            let h = kvh * g + j;
            let q0 = s * t * qw + h * hd;
            l.extend(probs(&q[q0..], &k[kv0..], &sh, scale, &mut p));
            let oj = &mut o[j * hd..];
            matmul_f32(&p, t, &v[kv0..], kw, BLayout::KByN, oj, g * hd, Dims { m: t, k: t, n: hd }, false);
        }
        results.lock().unwrap_or_else(|e| e.into_inner()).push((task, o, l));
    });
    for (task, o, l) in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let (s, kvh) = (task / sh.kv_heads, task % sh.kv_heads);
        for r in 0..t {
            let dst = (s * t + r) * qw + kvh * g * hd;
            out[dst..dst + g * hd].copy_from_slice(&o[r * g * hd..(r + 1) * g * hd]);
        }
        for j in 0..g {
            let dst = (s * sh.heads + kvh * g + j) * t;
            lse[dst..dst + t].copy_from_slice(&l[j * t..(j + 1) * t]);
        }
    }
    (out, lse)
}

/// Gradients of [`forward`] given the output's gradient `dout` and the forward's `out` and `lse`: `(dq, dk, dv)`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    lse: &[f32],
    dout: &[f32],
    sh: Shape,
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (t, qw, kw, hd, g) = (sh.len, sh.q_width(), sh.kv_width(), sh.hd, sh.group());
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    let results = Mutex::new(Vec::new());
    pool::parallel_for(sh.seqs * sh.kv_heads, |task| {
        let (s, kvh) = (task / sh.kv_heads, task % sh.kv_heads);
        let kv0 = s * t * kw + kvh * hd;
        let mut p = vec![0.0; t * t];
        let mut dp = vec![0.0; t * t];
        let mut dqg = vec![0.0; t * g * hd];
        let mut dkh = vec![0.0; t * hd];
        let mut dvh = vec![0.0; t * hd];
        for j in 0..g {
            let h = kvh * g + j;
            let q0 = s * t * qw + h * hd;
            let l = &lse[(s * sh.heads + h) * t..][..t];
            probs_again(&q[q0..], &k[kv0..], &sh, scale, l, &mut p);
            // dP = dO·Vᵀ
            matmul_f32(&dout[q0..], qw, &v[kv0..], kw, BLayout::NByK, &mut dp, t, Dims { m: t, k: hd, n: t }, false);
            // dS = P ∘ (dP − Σ_j dO∘O) · scale
            for i in 0..t {
                let d: f32 = dout[q0 + i * qw..][..hd].iter().zip(&out[q0 + i * qw..][..hd]).map(|(a, b)| a * b).sum();
                let (pr, dpr) = (&p[i * t..(i + 1) * t], &mut dp[i * t..(i + 1) * t]);
                for c in 0..=i {
                    dpr[c] = pr[c] * (dpr[c] - d) * scale;
                }
                dpr[i + 1..].fill(0.0);
            }
            // dQ = dS·K, dK += dSᵀ·Q, dV += Pᵀ·dO
            let dqj = &mut dqg[j * hd..];
            matmul_f32(&dp, t, &k[kv0..], kw, BLayout::KByN, dqj, g * hd, Dims { m: t, k: t, n: hd }, false);
            let dst = transpose(&dp, t, t);
            matmul_f32(&dst, t, &q[q0..], qw, BLayout::KByN, &mut dkh, hd, Dims { m: t, k: t, n: hd }, true);
            let pt = transpose(&p, t, t);
            matmul_f32(&pt, t, &dout[q0..], qw, BLayout::KByN, &mut dvh, hd, Dims { m: t, k: t, n: hd }, true);
        }
        results.lock().unwrap_or_else(|e| e.into_inner()).push((task, dqg, dkh, dvh));
    });
    for (task, dqg, dkh, dvh) in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let (s, kvh) = (task / sh.kv_heads, task % sh.kv_heads);
        for r in 0..t {
            let qd = (s * t + r) * qw + kvh * g * hd;
            dq[qd..qd + g * hd].copy_from_slice(&dqg[r * g * hd..(r + 1) * g * hd]);
            let kd = (s * t + r) * kw + kvh * hd;
            dk[kd..kd + hd].copy_from_slice(&dkh[r * hd..(r + 1) * hd]);
            dv[kd..kd + hd].copy_from_slice(&dvh[r * hd..(r + 1) * hd]);
        }
    }
    (dq, dk, dv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// The plain definition in f64: one (sequence, head) at a time, every score, no kept statistics.
    fn naive(q: &[f32], k: &[f32], v: &[f32], sh: Shape, scale: f32) -> Vec<f64> {
        let (t, hd) = (sh.len, sh.hd);
        let mut out = vec![0.0; sh.seqs * t * sh.heads * hd];
        for s in 0..sh.seqs {
            for h in 0..sh.heads {
                let kvh = h / sh.group();
                for i in 0..t {
                    let qi = &q[(s * t + i) * sh.q_width() + h * hd..][..hd];
                    let sc: Vec<f64> = (0..=i)
                        .map(|j| {
                            let kj = &k[(s * t + j) * sh.kv_width() + kvh * hd..][..hd];
                            qi.iter().zip(kj).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>() * scale as f64
                        })
                        .collect();
                    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                    for (j, x) in sc.iter().enumerate() {
                        let pj = (x - m).exp() / z;
                        for d in 0..hd {
                            out[(s * t + i) * sh.q_width() + h * hd + d] +=
                                pj * v[(s * t + j) * sh.kv_width() + kvh * hd + d] as f64;
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn forward_matches_the_definition_and_backward_matches_finite_differences() {
        let sh = Shape { seqs: 2, len: 5, heads: 4, kv_heads: 2, hd: 3 };
        let (q, k, v) = (vals(2 * 5 * 12, 1), vals(2 * 5 * 6, 2), vals(2 * 5 * 6, 3));
        let scale = 0.7;
        let (out, lse) = forward(&q, &k, &v, sh, scale);
        for (a, b) in out.iter().zip(naive(&q, &k, &v, sh, scale)) {
            assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
        }
        let gy = vals(out.len(), 4);
        let (dq, dk, dv) = backward(&q, &k, &v, &out, &lse, &gy, sh, scale);
        let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
            naive(q, k, v, sh, scale).iter().zip(&gy).map(|(a, g)| a * *g as f64).sum()
        };
        let h = 1e-3f32;
        let fd = |which: usize, i: usize| {
            let mut args = [q.clone(), k.clone(), v.clone()];
            args[which][i] += h;
            let p = loss(&args[0], &args[1], &args[2]);
            args[which][i] -= 2.0 * h;
            let m = loss(&args[0], &args[1], &args[2]);
            (p - m) / (2.0 * h as f64)
        };
        for (which, grad) in [(0, &dq), (1, &dk), (2, &dv)] {
            for (i, &g) in grad.iter().enumerate() {
                let num = fd(which, i);
                assert!((num - g as f64).abs() < 2e-3 * (1.0 + num.abs()), "arg {which} i {i}: {num} vs {g}");
            }
        }
    }
}
