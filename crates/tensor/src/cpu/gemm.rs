//! `out = x · wᵀ`: the product every linear layer is, with weights stored row-major as `[out, in]` (PyTorch's
//! layout), so one output is one contiguous dot product and a weight row is read once for all rows of `x`.
//!
//! Work is split over output columns in contiguous chunks, one per task, so each thread streams its own slice of
//! the weights and writes its own part of every output row.

use rayon::prelude::*;

/// Columns of the output handled per task: large enough to amortise dispatch, small enough to balance two cores.
const COLS_PER_TASK: usize = 64;

/// `out[n, m] = x[n, k] · w[m, k]ᵀ`.
///
/// # Panics
/// When a slice is shorter than its stated shape: callers own the shapes, and a mismatch is a bug, not input.
pub fn matmul_t(x: &[f32], n: usize, k: usize, w: &[f32], m: usize, out: &mut [f32]) {
    assert!(x.len() >= n * k && w.len() >= m * k && out.len() >= n * m, "matmul_t shapes");
    if n == 0 || m == 0 {
        return;
    }
    // Each task computes a block of columns for every row into its own buffer, then rows are scattered. For one
    // row (decode) the block is the output slice itself.
    if n == 1 {
        out[..m].par_chunks_mut(COLS_PER_TASK).enumerate().for_each(|(t, o)| {
            let c0 = t * COLS_PER_TASK;
            dot_rows(&x[..k], &w[c0 * k..(c0 + o.len()) * k], k, o);
        });
        return;
    }
    let tasks: Vec<(usize, Vec<f32>)> = (0..m.div_ceil(COLS_PER_TASK))
        .into_par_iter()
        .map(|t| {
            let c0 = t * COLS_PER_TASK;
            let cols = COLS_PER_TASK.min(m - c0);
            let mut block = vec![0f32; n * cols];
            tile(x, n, k, &w[c0 * k..(c0 + cols) * k], cols, &mut block);
            (c0, block)
        })
        .collect();
    for (c0, block) in tasks {
        let cols = block.len() / n;
        for r in 0..n {
            out[r * m + c0..r * m + c0 + cols].copy_from_slice(&block[r * cols..(r + 1) * cols]);
        }
    }
}

/// One input row against `out.len()` weight rows.
fn dot_rows(x: &[f32], w: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2 and FMA (checked above); slices are bounds-checked inside.
        unsafe { avx::dot_rows(x, w, k, out) };
        return;
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot_scalar(x, &w[j * k..(j + 1) * k]);
    }
}

/// Many input rows against a block of weight rows: `out[n, cols]`.
fn tile(x: &[f32], n: usize, k: usize, w: &[f32], cols: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: as in `dot_rows`.
        unsafe { avx::tile(x, n, k, w, cols, out) };
        return;
    }
    for r in 0..n {
        for j in 0..cols {
            out[r * cols + j] = dot_scalar(&x[r * k..(r + 1) * k], &w[j * k..(j + 1) * k]);
        }
    }
}

/// The scalar reference dot product (also the fallback without AVX2).
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(v, 1);
        let lo = _mm256_castps256_ps128(v);
        let s = _mm_add_ps(hi, lo);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// Four weight rows at a time share each load of `x`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_rows(x: &[f32], w: &[f32], k: usize, out: &mut [f32]) {
        let m = out.len();
        assert!(x.len() >= k && w.len() >= m * k);
        let k8 = k / 8 * 8;
        let xp = x.as_ptr();
        let mut j = 0;
        while j + 4 <= m {
            let w0 = w.as_ptr().add(j * k);
            let (w1, w2, w3) = (w0.add(k), w0.add(2 * k), w0.add(3 * k));
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i < k8 {
                let xv = _mm256_loadu_ps(xp.add(i));
                a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w0.add(i)), a0);
                a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w1.add(i)), a1);
                a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w2.add(i)), a2);
                a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w3.add(i)), a3);
                i += 8;
            }
            let mut s = [hsum(a0), hsum(a1), hsum(a2), hsum(a3)];
            for i in k8..k {
                let xv = *xp.add(i);
                s[0] += xv * *w0.add(i);
                s[1] += xv * *w1.add(i);
                s[2] += xv * *w2.add(i);
                s[3] += xv * *w3.add(i);
            }
            out[j..j + 4].copy_from_slice(&s);
            j += 4;
        }
        while j < m {
            out[j] = dot1(xp, w.as_ptr().add(j * k), k);
            j += 1;
        }
    }

    #[inline(always)]
    unsafe fn dot1(x: *const f32, w: *const f32, k: usize) -> f32 {
        let k8 = k / 8 * 8;
        let mut a = _mm256_setzero_ps();
        let mut i = 0;
        while i < k8 {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(w.add(i)), a);
            i += 8;
        }
        let mut s = hsum(a);
        for i in k8..k {
            s += *x.add(i) * *w.add(i);
        }
        s
    }

    /// Register tile of 4 input rows × 2 weight rows; each weight load serves four rows of `x`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile(x: &[f32], n: usize, k: usize, w: &[f32], cols: usize, out: &mut [f32]) {
        assert!(x.len() >= n * k && w.len() >= cols * k && out.len() >= n * cols);
        let k8 = k / 8 * 8;
        let mut r = 0;
        while r < n {
            let rows = (n - r).min(4);
            let xr: [*const f32; 4] = std::array::from_fn(|t| x.as_ptr().add((r + t.min(rows - 1)) * k));
            let mut j = 0;
            while j < cols {
                let pair = (cols - j).min(2);
                let wa = w.as_ptr().add(j * k);
                let wb = w.as_ptr().add((j + pair - 1) * k);
                let mut acc = [_mm256_setzero_ps(); 8];
                let mut i = 0;
                while i < k8 {
                    let va = _mm256_loadu_ps(wa.add(i));
                    let vb = _mm256_loadu_ps(wb.add(i));
                    for t in 0..4 {
                        let xv = _mm256_loadu_ps(xr[t].add(i));
                        acc[2 * t] = _mm256_fmadd_ps(xv, va, acc[2 * t]);
                        acc[2 * t + 1] = _mm256_fmadd_ps(xv, vb, acc[2 * t + 1]);
                    }
                    i += 8;
                }
                for t in 0..rows {
                    let mut sa = hsum(acc[2 * t]);
                    let mut sb = hsum(acc[2 * t + 1]);
                    for i in k8..k {
                        let xv = *xr[t].add(i);
                        sa += xv * *wa.add(i);
                        sb += xv * *wb.add(i);
                    }
                    out[(r + t) * cols + j] = sa;
                    if pair == 2 {
                        out[(r + t) * cols + j + 1] = sb;
                    }
                }
                j += pair;
            }
            r += rows;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    #[test]
    fn matches_scalar_reference_for_odd_shapes() {
        let mut s = 7u64;
        for &(n, k, m) in &[(1, 3, 5), (1, 64, 130), (3, 17, 9), (5, 72, 67), (9, 8, 2), (4, 576, 200)] {
            let x: Vec<f32> = (0..n * k).map(|_| lcg(&mut s)).collect();
            let w: Vec<f32> = (0..m * k).map(|_| lcg(&mut s)).collect();
            let mut out = vec![0f32; n * m];
            matmul_t(&x, n, k, &w, m, &mut out);
            for r in 0..n {
                for j in 0..m {
                    let want: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[j * k + i] as f64).sum();
                    let got = out[r * m + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                        "n{n} k{k} m{m} r{r} j{j}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
