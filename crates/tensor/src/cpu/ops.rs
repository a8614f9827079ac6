//! Elementwise and row-wise steps around the matrix products: norms, activations, softmax, RoPE.
//!
//! They follow PyTorch's f32 arithmetic closely (mean of squares then `1/sqrt`, the tanh form of GELU) so logits
//! stay within 1e-4 of the reference.

use super::kv_elem::{f32_view, KvElem};

/// RMSNorm of each `dim`-wide row of `x` into `out`: `x / sqrt(mean(x²) + eps) * weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (row, o) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let ss: f32 = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ss + eps).sqrt();
        for ((o, &v), &w) in o.iter_mut().zip(row).zip(weight) {
            *o = w * (v * inv);
        }
    }
}

/// RMSNorm in place (used for Qwen3's per-head q/k norms).
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    for row in x.chunks_exact_mut(dim) {
        let ss: f32 = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ss + eps).sqrt();
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = w * (*v * inv);
        }
    }
}

/// LayerNorm of each row (biased variance, as `torch.nn.LayerNorm`).
pub fn layer_norm(x: &[f32], weight: &[f32], bias: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (row, o) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mean = row.iter().sum::<f32>() / dim as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / dim as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..dim {
            o[i] = (row[i] - mean) * inv * weight[i] + bias[i];
        }
    }
}

/// `a += b`, the residual connection.
pub fn add_inplace(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Adds a bias to every `bias.len()`-wide row.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_inplace(row, bias);
    }
}

/// SwiGLU's gate: `gate = silu(gate) * up`, in place over `gate`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert!(up.len() >= gate.len());
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2/FMA present; `up` is at least as long as `gate`.
        i = unsafe { silu_mul_avx(gate, up) };
    }
    for (g, &u) in gate[i..].iter_mut().zip(&up[i..]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// Scores of one query against the keys in view, four keys a pass (one load of `q` serves four keys, and their
/// four sums are reduced together).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_avx<T: KvElem>(
    q: &[f32],
    keys: &[T],
    stride: usize,
    offset: usize,
    positions: std::ops::Range<usize>,
    scale: f32,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let hd = q.len();
    let kp = keys.as_ptr().add(offset);
    let qp = q.as_ptr();
    let (j0, n) = (positions.start, positions.len());
    let mut i = 0;
    while i + 4 <= n {
        let k: [*const T; 4] = std::array::from_fn(|t| kp.add((j0 + i + t) * stride));
        let mut a = [_mm256_setzero_ps(); 4];
        for d in (0..hd).step_by(8) {
            let qv = _mm256_loadu_ps(qp.add(d));
            for t in 0..4 {
                a[t] = _mm256_fmadd_ps(qv, T::load8(k[t].add(d)), a[t]);
            }
        }
        // Four horizontal sums at once: pairwise adds, then the two 128-bit halves.
        let h01 = _mm256_hadd_ps(a[0], a[1]);
        let h23 = _mm256_hadd_ps(a[2], a[3]);
        let h = _mm256_hadd_ps(h01, h23);
        let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        _mm_storeu_ps(out.as_mut_ptr().add(i), _mm_mul_ps(s, _mm_set1_ps(scale)));
        i += 4;
    }
    while i < n {
        let k = kp.add((j0 + i) * stride);
        out[i] = match T::as_f32(keys) {
            // The f32 cache keeps the one-row dot product it always had (its bits are the reference's).
            Some(_) => super::gemm::dot_f32(qp, k as *const f32, hd),
            None => {
                let mut a = _mm256_setzero_ps();
                for d in (0..hd).step_by(8) {
                    a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(d)), T::load8(k.add(d)), a);
                }
                super::gemm::hsum(a)
            }
        } * scale;
        i += 1;
    }
}

/// `out = Σ_i p[i] · v[j0 + i]` for one query, the output held in registers across all keys (hd ≤ 128).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_avx<T: KvElem>(p: &[f32], values: &[T], stride: usize, offset: usize, j0: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let hd = out.len();
    let vp = values.as_ptr().add(offset + j0 * stride);
    let mut d0 = 0;
    while d0 < hd {
        let w = (hd - d0).min(64) / 8;
        let mut acc = [_mm256_setzero_ps(); 8];
        for (i, &pi) in p.iter().enumerate() {
            let pv = _mm256_set1_ps(pi);
            let v = vp.add(i * stride + d0);
            for (t, a) in acc.iter_mut().enumerate().take(w) {
                *a = _mm256_fmadd_ps(pv, T::load8(v.add(8 * t)), *a);
            }
        }
        for (t, a) in acc.iter().enumerate().take(w) {
            _mm256_storeu_ps(out.as_mut_ptr().add(d0 + 8 * t), *a);
        }
        d0 += 64;
    }
}

/// `gate[..n8] = silu(gate) * up` eight at a time; returns n8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx(gate: &mut [f32], up: &[f32]) -> usize {
    use std::arch::x86_64::*;
    assert!(up.len() >= gate.len());
    let n8 = gate.len() / 8 * 8;
    let (gp, up) = (gate.as_mut_ptr(), up.as_ptr());
    let mut i = 0;
    while i < n8 {
        let g = _mm256_loadu_ps(gp.add(i));
        let e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
        let s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e));
        _mm256_storeu_ps(gp.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up.add(i))));
        i += 8;
    }
    n8
}

/// `x[..n8] = e^(x - max)` eight at a time; returns n8 and the sum of those values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sub_avx(x: &mut [f32], max: f32) -> (usize, f32) {
    use std::arch::x86_64::*;
    let n8 = x.len() / 8 * 8;
    let (p, m) = (x.as_mut_ptr(), _mm256_set1_ps(max));
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), m));
        _mm256_storeu_ps(p.add(i), e);
        acc = _mm256_add_ps(acc, e);
        i += 8;
    }
    (n8, super::gemm::hsum(acc))
}

/// `e^x` per lane to about 2 ulp (range reduction by ln 2, degree-6 polynomial); below -87 (and -inf) it is 0.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0), _CMP_LT_OQ);
    let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)))
}

/// GPT-2's `gelu_new`: the tanh approximation.
pub fn gelu_tanh(x: &mut [f32]) {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    for v in x.iter_mut() {
        let u = *v;
        *v = 0.5 * u * (1.0 + (C * (u + 0.044715 * u * u * u)).tanh());
    }
}

/// Softmax in place, max-subtracted.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2/FMA present.
        (i, sum) = unsafe { exp_sub_avx(x, max) };
    }
    for v in x[i..].iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Rotates one head vector by RoPE in the "rotate half" (NeoX) layout: pair `i` is `(x[i], x[i + d/2])`.
/// `cos`/`sin` hold `d/2` values for this position.
pub fn rope_half(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * cos[i] - b * sin[i];
        x[i + half] = b * cos[i] + a * sin[i];
    }
}

/// `a · b`, the attention score.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2/FMA present; both slices hold `a.len()` floats.
        return unsafe { super::gemm::dot_f32(a.as_ptr(), b.as_ptr(), a.len()) };
    }
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    acc.iter().sum::<f32>() + a[chunks * 8..].iter().zip(&b[chunks * 8..]).map(|(x, y)| x * y).sum::<f32>()
}

/// `out += p · v`, the attention value sum.
pub fn axpy(out: &mut [f32], p: f32, v: &[f32]) {
    assert!(v.len() >= out.len());
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2/FMA present; `v` is at least as long as `out`.
        unsafe { axpy_avx(out, p, v) };
        return;
    }
    for (o, &x) in out.iter_mut().zip(v) {
        *o += p * x;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx(out: &mut [f32], p: f32, v: &[f32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let n8 = n / 8 * 8;
    let pv = _mm256_set1_ps(p);
    let (o, x) = (out.as_mut_ptr(), v.as_ptr());
    let mut i = 0;
    while i < n8 {
        _mm256_storeu_ps(o.add(i), _mm256_fmadd_ps(pv, _mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(o.add(i))));
        i += 8;
    }
    while i < n {
        *o.add(i) += p * *x.add(i);
        i += 1;
    }
}

/// Causal attention of one query position for the `group` query heads that share one KV head (GQA): each key and
/// value row is read once for all of them. `q` and `out` hold `group × hd`; key/value row `j` starts at
/// `j·stride + offset` in `keys`/`values`; `positions` are the keys in view.
#[allow(clippy::too_many_arguments)]
pub fn attend_group<T: KvElem>(
    q: &[f32],
    keys: &[T],
    values: &[T],
    stride: usize,
    offset: usize,
    positions: std::ops::Range<usize>,
    hd: usize,
    scale: f32,
    out: &mut [f32],
) {
    let group = q.len() / hd;
    let n = positions.len();
    let mut scores = vec![0f32; group * n];
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() && hd.is_multiple_of(8) && hd <= 128 {
        assert!(keys.len() >= (positions.end - 1) * stride + offset + hd, "attend_group: keys end before the view");
        assert!(values.len() >= (positions.end - 1) * stride + offset + hd, "attend_group: values end before the view");
        for g in 0..group {
            let qg = &q[g * hd..(g + 1) * hd];
            // SAFETY: AVX2/FMA/F16C present; every key row in view holds hd elements (asserted above).
            unsafe { scores_avx(qg, keys, stride, offset, positions.clone(), scale, &mut scores[g * n..(g + 1) * n]) };
            softmax_inplace(&mut scores[g * n..(g + 1) * n]);
            // SAFETY: as above, for the value rows; `out` holds group × hd.
            unsafe {
                values_avx(
                    &scores[g * n..(g + 1) * n],
                    values,
                    stride,
                    offset,
                    positions.start,
                    &mut out[g * hd..(g + 1) * hd],
                )
            };
        }
        return;
    }
    let mut buf = Vec::new();
    for (i, j) in positions.clone().enumerate() {
        let k = f32_view(&keys[j * stride + offset..j * stride + offset + hd], &mut buf);
        for g in 0..group {
            scores[g * n + i] = dot(&q[g * hd..(g + 1) * hd], k) * scale;
        }
    }
    for g in 0..group {
        softmax_inplace(&mut scores[g * n..(g + 1) * n]);
    }
    out.iter_mut().for_each(|v| *v = 0.0);
    for (i, j) in positions.enumerate() {
        let v = f32_view(&values[j * stride + offset..j * stride + offset + hd], &mut buf);
        for g in 0..group {
            axpy(&mut out[g * hd..(g + 1) * hd], scores[g * n + i], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_mul_and_softmax_match_the_scalar_formulas_on_ragged_lengths() {
        for n in [1, 7, 8, 9, 31, 100] {
            let g0: Vec<f32> = super::super::testdata::data(n, n as u64).iter().map(|v| v * 40.0).collect();
            let up = super::super::testdata::data(n, 99);
            let mut g = g0.clone();
            silu_mul(&mut g, &up);
            for i in 0..n {
                let want = g0[i] / (1.0 + (-g0[i]).exp()) * up[i];
                assert!((g[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "silu n{n}[{i}]: {} vs {want}", g[i]);
            }
            let mut p = g0.clone();
            softmax_inplace(&mut p);
            let max = g0.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = g0.iter().map(|&v| ((v - max) as f64).exp()).sum();
            for i in 0..n {
                let want = (((g0[i] - max) as f64).exp() / sum) as f32;
                assert!((p[i] - want).abs() <= 1e-6 * (1e-6 + want), "softmax n{n}[{i}]: {} vs {want}", p[i]);
            }
        }
    }

    #[test]
    fn group_attention_simd_matches_the_scalar_formula() {
        use super::super::testdata::data;
        for &(hd, group, n, lo) in &[
            (64, 3, 1, 0),
            (64, 3, 7, 2),
            (32, 2, 130, 5),
            (128, 1, 9, 0),
            (72, 4, 33, 1),
            (64, 8, 11, 0),
            (8, 5, 6, 3),
        ] {
            let (kvh, stride) = (2, 2 * hd + 8);
            let (k0, v0) = (data((lo + n) * stride, hd as u64), data((lo + n) * stride, 7 + n as u64));
            let q: Vec<f32> = data(group * hd, 3).iter().map(|v| v * 6.0).collect();
            let offset = (kvh - 1) * hd;
            let scale = 1.0 / (hd as f32).sqrt();
            // The f32 cache, then an f16 one (the reference then reads the rounded values the cache holds).
            for f16 in [false, true] {
                let mut got = vec![0f32; group * hd];
                let (keys, values) = if f16 {
                    let (mut k, mut v) = (Vec::new(), Vec::new());
                    half::f16::extend_from_f32(&mut k, &k0);
                    half::f16::extend_from_f32(&mut v, &v0);
                    attend_group(&q, &k, &v, stride, offset, lo..lo + n, hd, scale, &mut got);
                    (k.iter().map(|x| x.to_f32()).collect(), v.iter().map(|x| x.to_f32()).collect())
                } else {
                    attend_group(&q, &k0, &v0, stride, offset, lo..lo + n, hd, scale, &mut got);
                    (k0.clone(), v0.clone())
                };
                check_group(&q, &keys, &values, (stride, offset), (lo, n, hd, group), scale, &got);
            }
        }
    }

    /// `got` against attention computed in f64 from `keys` and `values`.
    fn check_group(
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        (stride, offset): (usize, usize),
        (lo, n, hd, group): (usize, usize, usize, usize),
        scale: f32,
        got: &[f32],
    ) {
        {
            for g in 0..group {
                let s: Vec<f64> = (lo..lo + n)
                    .map(|j| {
                        (0..hd).map(|d| q[g * hd + d] as f64 * keys[j * stride + offset + d] as f64).sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for d in 0..hd {
                    let want: f64 = (lo..lo + n)
                        .zip(&s)
                        .map(|(j, x)| (x - m).exp() / z * values[j * stride + offset + d] as f64)
                        .sum();
                    let g_ = got[g * hd + d] as f64;
                    assert!((g_ - want).abs() <= 1e-5 * (1.0 + want.abs()), "hd{hd} g{g} n{n} d{d}: {g_} vs {want}");
                }
            }
        }
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut v = vec![1.0, 3.0, 2.0, -1e9];
        softmax_inplace(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(v[1] > v[2] && v[2] > v[0] && v[3] == 0.0);
    }

    #[test]
    fn rope_at_zero_angle_is_identity_and_rotation_keeps_norm() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        rope_half(&mut x, &[1.0, 1.0], &[0.0, 0.0]);
        assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
        let (c, s) = (0.3f32.cos(), 0.3f32.sin());
        rope_half(&mut x, &[c, c], &[s, s]);
        let n: f32 = x.iter().map(|v| v * v).sum();
        assert!((n - 30.0).abs() < 1e-4);
    }

    #[test]
    fn rms_norm_of_constant_row_is_weight() {
        let mut out = vec![0.0; 4];
        rms_norm(&[2.0; 4], &[1.0, 2.0, 3.0, 4.0], 0.0, &mut out);
        assert_eq!(out, vec![1.0, 2.0, 3.0, 4.0]);
    }
}
