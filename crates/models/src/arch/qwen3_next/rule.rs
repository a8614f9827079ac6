//! The gated delta rule over one value head's tokens, in its two forms: the recurrence (one token at a time: decode)
//! and the chunked form (a prompt, 64 tokens at a time), which gives the same outputs and final state up to
//! rounding.
//!
//! Per token t, with `q` L2-normed and scaled by `1/sqrt(k_dim)`, `k` L2-normed, `β` and the log-decay `g ≤ 0`:
//! `S ← exp(g)·S;  S ← S + k ⊗ β(v − kᵀS);  o = qᵀS`, S being `[k_dim][v_dim]`.
//!
//! The chunked form (the "WY"/UT transform of DeltaNet, as transformers' `torch_chunk_gated_delta_rule` computes
//! it): within a chunk, with `c` the cumulative log-decay and `A[i][j] = β_i (k_i·k_j) exp(c_i − c_j)` for `j < i`,
//! the lower-unitriangular system `(I + A) u = βv` and `(I + A) w = β exp(c) k` gives each token's new value
//! `u_i − w_iᵀS` (S the state at the chunk's start); outputs and the next state follow from products over the chunk,
//! so the state is read and written once a chunk instead of three times a token, and those products are GEMM-shaped
//! (64 × 128 × 128 at Qwen3-Next's widths): they run on the GEMM's register tile (`kvad_tensor::cpu::matmul`).

use kvad_tensor::cpu::matmul::{matmul_f32, BLayout, Dims};

/// Tokens per chunk.
pub(crate) const CHUNK: usize = 64;

/// One value head's tokens: `q`, `k` `[n][dk]`, `v` `[n][dv]`, `beta`, `g` `[n]`.
pub(crate) struct HeadTokens<'a> {
    pub(crate) q: &'a [f32],
    pub(crate) k: &'a [f32],
    pub(crate) v: &'a [f32],
    pub(crate) beta: &'a [f32],
    pub(crate) g: &'a [f32],
    pub(crate) dk: usize,
    pub(crate) dv: usize,
}

impl HeadTokens<'_> {
    fn len(&self) -> usize {
        self.beta.len()
    }
}

/// The recurrence over every token: `out` `[n][dv]`, `state` `[dk][dv]` carried through.
pub(crate) fn recurrent(x: &HeadTokens<'_>, state: &mut [f32], out: &mut [f32]) {
    let (dk, dv) = (x.dk, x.dv);
    let mut delta = vec![0f32; dv];
    for t in 0..x.len() {
        let (q, k) = (&x.q[t * dk..(t + 1) * dk], &x.k[t * dk..(t + 1) * dk]);
        let decay = x.g[t].exp();
        state.iter_mut().for_each(|s| *s *= decay);
        delta.fill(0.0);
        for (row, &ki) in state.chunks_exact(dv).zip(k) {
            axpy(&mut delta, ki, row);
        }
        for (m, &vv) in delta.iter_mut().zip(&x.v[t * dv..(t + 1) * dv]) {
            *m = (vv - *m) * x.beta[t];
        }
        let o = &mut out[t * dv..(t + 1) * dv];
        o.fill(0.0);
        for ((row, &ki), &qi) in state.chunks_exact_mut(dv).zip(k).zip(q) {
            axpy(row, ki, &delta);
            axpy(o, qi, row);
        }
    }
}

/// The chunked form over every token (any count; the last chunk may be shorter): the same `out` and `state` as
/// [`recurrent`] up to rounding.
pub(crate) fn chunked(x: &HeadTokens<'_>, state: &mut [f32], out: &mut [f32]) {
    let (dk, dv, n) = (x.dk, x.dv, x.len());
    let mut sc = Scratch::new(dk, dv);
    let mut start = 0;
    while start < n {
        let l = CHUNK.min(n - start);
        let part = HeadTokens {
            q: &x.q[start * dk..(start + l) * dk],
            k: &x.k[start * dk..(start + l) * dk],
            v: &x.v[start * dv..(start + l) * dv],
            beta: &x.beta[start..start + l],
            g: &x.g[start..start + l],
            dk,
            dv,
        };
        chunk(&part, state, &mut out[start * dv..(start + l) * dv], &mut sc);
        start += l;
    }
}

/// A chunk's working matrices, made once per call of [`chunked`].
struct Scratch {
    /// `[CHUNK][CHUNK]`: k·kᵀ, then the system's strictly lower part A.
    a: Vec<f32>,
    /// `[CHUNK][CHUNK]`: (I + A)⁻¹.
    t: Vec<f32>,
    /// `[CHUNK][CHUNK]`: q·kᵀ decayed, zero above the diagonal.
    p: Vec<f32>,
    /// `[CHUNK][dv]`: βv, then the new values u − wS.
    xv: Vec<f32>,
    u: Vec<f32>,
    /// `[CHUNK][dk]`: β·exp(c)·k, then exp(c)·q.
    xk: Vec<f32>,
    w: Vec<f32>,
    /// `[dk][CHUNK]`: exp(c_last − c)·k, transposed.
    kt: Vec<f32>,
}

impl Scratch {
    fn new(dk: usize, dv: usize) -> Scratch {
        let sq = vec![0f32; CHUNK * CHUNK];
        Scratch {
            a: sq.clone(),
            t: sq.clone(),
            p: sq,
            xv: vec![0f32; CHUNK * dv],
            u: vec![0f32; CHUNK * dv],
            xk: vec![0f32; CHUNK * dk],
            w: vec![0f32; CHUNK * dk],
            kt: vec![0f32; dk * CHUNK],
        }
    }
}

/// One chunk of at most [`CHUNK`] tokens, its products on the GEMM's register tile (`matmul_f32`).
fn chunk(x: &HeadTokens<'_>, state: &mut [f32], out: &mut [f32], sc: &mut Scratch) {
    let (dk, dv, l) = (x.dk, x.dv, x.len());
    let (q, k) = (x.q, x.k);
    // Cumulative log-decay within the chunk.
    let mut c = [0f32; CHUNK];
    let mut acc = 0f32;
    for (ci, &g) in c.iter_mut().zip(x.g) {
        acc += g;
        *ci = acc;
    }
    // k·kᵀ and q·kᵀ, then A = β_i (k_i·k_j) exp(c_i − c_j) below the diagonal and P = (q_i·k_j) exp(c_i − c_j) on
    // and below it.
    matmul_f32(k, dk, k, dk, BLayout::NByK, &mut sc.a, l, Dims { m: l, k: dk, n: l }, false);
    matmul_f32(q, dk, k, dk, BLayout::NByK, &mut sc.p, l, Dims { m: l, k: dk, n: l }, false);
    for i in 0..l {
        for j in 0..l {
            let dec = if j <= i { (c[i] - c[j]).exp() } else { 0.0 };
            sc.a[i * l + j] = if j < i { x.beta[i] * sc.a[i * l + j] * dec } else { 0.0 };
            sc.p[i * l + j] *= dec;
        }
    }
    // T = (I + A)⁻¹, row by row: t_i = e_i − Σ_{m<i} A[i][m] t_m (row m is zero past its diagonal).
    sc.t[..l * l].fill(0.0);
    for i in 0..l {
        let (done, rest) = sc.t.split_at_mut(i * l);
        let ti = &mut rest[..l];
        ti[i] = 1.0;
        for m in 0..i {
            axpy(&mut ti[..=m], -sc.a[i * l + m], &done[m * l..m * l + m + 1]);
        }
    }
    // u = T·βv, w = T·(β exp(c) k).
    for i in 0..l {
        let (b, e) = (x.beta[i], x.beta[i] * c[i].exp());
        sc.xv[i * dv..(i + 1) * dv].iter_mut().zip(&x.v[i * dv..(i + 1) * dv]).for_each(|(o, &v)| *o = b * v);
        sc.xk[i * dk..(i + 1) * dk].iter_mut().zip(&k[i * dk..(i + 1) * dk]).for_each(|(o, &v)| *o = e * v);
    }
    matmul_f32(&sc.t, l, &sc.xv, dv, BLayout::KByN, &mut sc.u, dv, Dims { m: l, k: l, n: dv }, false);
    matmul_f32(&sc.t, l, &sc.xk, dk, BLayout::KByN, &mut sc.w, dk, Dims { m: l, k: l, n: dk }, false);
    // New values: u − w·S (w negated, then added).
    sc.w[..l * dk].iter_mut().for_each(|v| *v = -*v);
    matmul_f32(&sc.w, dk, state, dv, BLayout::KByN, &mut sc.u, dv, Dims { m: l, k: dk, n: dv }, true);
    // Outputs: (exp(c) q)·S + P·new.
    for i in 0..l {
        let e = c[i].exp();
        sc.xk[i * dk..(i + 1) * dk].iter_mut().zip(&q[i * dk..(i + 1) * dk]).for_each(|(o, &v)| *o = e * v);
    }
    matmul_f32(&sc.xk, dk, state, dv, BLayout::KByN, out, dv, Dims { m: l, k: dk, n: dv }, false);
    matmul_f32(&sc.p, l, &sc.u, dv, BLayout::KByN, out, dv, Dims { m: l, k: l, n: dv }, true);
    // Next state: exp(c_last)·S + (exp(c_last − c) k)ᵀ·new.
    let last = c[l - 1];
    for j in 0..l {
        let f = (last - c[j]).exp();
        for (d, &kv) in k[j * dk..(j + 1) * dk].iter().enumerate() {
            sc.kt[d * l + j] = f * kv;
        }
    }
    let e = last.exp();
    state.iter_mut().for_each(|s| *s *= e);
    matmul_f32(&sc.kt, l, &sc.u, dv, BLayout::KByN, state, dv, Dims { m: dk, k: l, n: dv }, true);
}

/// `y += a·x`.
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv += a * xv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn normed(v: Vec<f32>, d: usize, scale: f32) -> Vec<f32> {
        v.chunks_exact(d)
            .flat_map(|r| {
                let inv = scale / (r.iter().map(|x| x * x).sum::<f32>() + 1e-6).sqrt();
                r.iter().map(move |x| x * inv).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_chunked_form_equals_the_recurrence_across_chunk_boundaries_and_from_a_state() {
        let (dk, dv) = (16, 24);
        for (n, seed) in [(1, 1), (5, 2), (64, 3), (65, 4), (150, 5)] {
            let q = normed(values(n * dk, seed), dk, 1.0 / (dk as f32).sqrt());
            let k = normed(values(n * dk, seed + 10), dk, 1.0);
            let v = values(n * dv, seed + 20);
            let beta: Vec<f32> = values(n, seed + 30).iter().map(|x| 0.5 + 0.5 * x).collect();
            let g: Vec<f32> = values(n, seed + 40).iter().map(|x| -0.3 * (1.0 + x)).collect();
            let x = HeadTokens { q: &q, k: &k, v: &v, beta: &beta, g: &g, dk, dv };
            // A state left by earlier tokens, as a resumed conversation has.
            let start = values(dk * dv, seed + 50);
            let (mut s1, mut s2) = (start.clone(), start);
            let (mut o1, mut o2) = (vec![0f32; n * dv], vec![0f32; n * dv]);
            recurrent(&x, &mut s1, &mut o1);
            chunked(&x, &mut s2, &mut o2);
            let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(worst(&o1, &o2) < 2e-5, "n {n}: outputs differ by {}", worst(&o1, &o2));
            assert!(worst(&s1, &s2) < 2e-5, "n {n}: states differ by {}", worst(&s1, &s2));
            assert!(o1.iter().any(|v| v.abs() > 0.1), "n {n}: outputs too small to compare");
        }
    }

    #[test]
    fn a_prompt_read_in_two_parts_leaves_the_state_of_one_read() {
        let (dk, dv, n, cut) = (8, 8, 100, 37);
        let q = normed(values(n * dk, 7), dk, 1.0 / (dk as f32).sqrt());
        let k = normed(values(n * dk, 8), dk, 1.0);
        let v = values(n * dv, 9);
        let beta = vec![0.7f32; n];
        let g: Vec<f32> = values(n, 10).iter().map(|x| -0.2 * (1.0 + x)).collect();
        let whole = HeadTokens { q: &q, k: &k, v: &v, beta: &beta, g: &g, dk, dv };
        let (mut s1, mut o1) = (vec![0f32; dk * dv], vec![0f32; n * dv]);
        chunked(&whole, &mut s1, &mut o1);
        let part = |a: usize, b: usize| HeadTokens {
            q: &q[a * dk..b * dk],
            k: &k[a * dk..b * dk],
            v: &v[a * dv..b * dv],
            beta: &beta[a..b],
            g: &g[a..b],
            dk,
            dv,
        };
        let (mut s2, mut o2) = (vec![0f32; dk * dv], vec![0f32; n * dv]);
        chunked(&part(0, cut), &mut s2, &mut o2[..cut * dv]);
        chunked(&part(cut, n), &mut s2, &mut o2[cut * dv..]);
        let worst = s1.iter().zip(&s2).chain(o1.iter().zip(&o2)).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst < 2e-5, "{worst}");
    }
}
