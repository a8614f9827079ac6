//! Decode's matrix–vector product over stored rows.
//!
//! Decode reads every weight once per token and is bound by memory bandwidth, so the kernel's job is to keep the
//! memory stream busy and spend few instructions per weight. Activations are brought to i16 per block of 32 (scale
//! = block max / 32767: a relative error of 1.5e-5, a hundred times below the weights' own 8-bit step, where 8-bit
//! activations would round away the difference between close logits), weights are widened to i16, and
//! `vpmaddwd` multiplies 16 pairs an instruction; each block's integer sum is converted once and scaled by
//! `d_w·d_x`. Each thread streams its own contiguous rows, two rows at a time sharing every load of `x`.

use super::matrix::{QMatrix, SyncPtr};
use super::pool;
use super::quant::{parts, QType, BLOCK};

/// Rows per task: small enough to balance two threads, large enough that a task is a long sequential stream.
const ROWS_PER_TASK: usize = 32;

/// Activations of one row prepared for the integer kernels.
pub struct ActQ {
    /// `x` in i16, per block scaled by `dx`.
    pub xq: Vec<i16>,
    /// Per-block scales (padded with zeros to a multiple of 8, plus 8).
    pub dx: Vec<f32>,
    /// Per-block sums of the f32 `x` (for Q4_1's minimums), padded like `dx`.
    pub xsum: Vec<f32>,
}

impl ActQ {
    /// Quantises `x` (a whole number of blocks) to i16 per block.
    pub fn new(x: &[f32]) -> Self {
        let nb = x.len() / BLOCK;
        let padded = nb.div_ceil(8) * 8 + 8;
        let mut xq = vec![0i16; x.len()];
        let mut dx = vec![0f32; padded];
        let mut xsum = vec![0f32; padded];
        for (b, blk) in x.chunks_exact(BLOCK).enumerate() {
            let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 32767.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, v) in xq[b * BLOCK..(b + 1) * BLOCK].iter_mut().zip(blk) {
                *q = (v * id).round() as i16;
            }
            dx[b] = d;
            xsum[b] = blk.iter().sum();
        }
        ActQ { xq, dx, xsum }
    }
}

/// `out[r] = w.row(r) · x` for every row.
pub fn gemv(w: &QMatrix, x: &[f32], out: &mut [f32]) {
    let rows = w.rows();
    let tasks = rows.div_ceil(ROWS_PER_TASK);
    let act = (w.qtype() != QType::F32).then(|| ActQ::new(x));
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(tasks, |t| {
        let r0 = t * ROWS_PER_TASK;
        let r1 = (r0 + ROWS_PER_TASK).min(rows);
        // SAFETY: each task writes only rows r0..r1 of `out`.
        let out = unsafe { std::slice::from_raw_parts_mut(o.get().add(r0), r1 - r0) };
        rows_dot(w, r0..r1, x, act.as_ref(), out);
    });
}

/// Dot products of a range of rows with `x`, by the best kernel this processor has.
fn rows_dot(w: &QMatrix, rows: std::ops::Range<usize>, x: &[f32], act: Option<&ActQ>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::gemm::has_avx2() {
        // SAFETY: AVX2, FMA and F16C are present; rows are `row_bytes` long (checked by QMatrix) and `act` was
        // made from `x`, which holds `cols` values.
        unsafe {
            match act {
                None => avx::rows_f32(w, rows, x, out),
                Some(a) => avx::rows_q(w, rows, a, out),
            }
        }
        return;
    }
    rows_dot_scalar(w, rows, x, act, out);
}

/// The scalar path, with the same arithmetic as the SIMD one (the reference in tests, and the fallback).
pub fn rows_dot_scalar(w: &QMatrix, rows: std::ops::Range<usize>, x: &[f32], act: Option<&ActQ>, out: &mut [f32]) {
    let t = w.qtype();
    let nb = w.cols() / BLOCK;
    for (o, r) in out.iter_mut().zip(rows) {
        let row = w.row(r);
        let Some(a) = act else {
            *o = row.chunks_exact(4).zip(x).map(|(b, x)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x).sum();
            continue;
        };
        let p = parts(t, row, nb);
        let mut acc = 0f32;
        for b in 0..nb {
            let d = half::f16::from_le_bytes([p.d[2 * b], p.d[2 * b + 1]]).to_f32();
            let xq = &a.xq[b * BLOCK..(b + 1) * BLOCK];
            let isum: i32 = match t {
                QType::Q8_0 => {
                    p.q[b * 32..(b + 1) * 32].iter().zip(xq).map(|(&q, &x)| (q as i8) as i32 * x as i32).sum()
                }
                _ => {
                    let off = if t == QType::Q4_0 { 8 } else { 0 };
                    (0..16)
                        .map(|j| {
                            let byte = p.q[b * 16 + j];
                            ((byte & 15) as i32 - off) * xq[j] as i32 + ((byte >> 4) as i32 - off) * xq[j + 16] as i32
                        })
                        .sum()
                }
            };
            acc += isum as f32 * (d * a.dx[b]);
            if t == QType::Q4_1 {
                acc += half::f16::from_le_bytes([p.m[2 * b], p.m[2 * b + 1]]).to_f32() * a.xsum[b];
            }
        }
        *o = acc;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::super::gemm::{dot_f32, hsum};
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_f32(w: &QMatrix, rows: std::ops::Range<usize>, x: &[f32], out: &mut [f32]) {
        for (o, r) in out.iter_mut().zip(rows) {
            *o = dot_f32(x.as_ptr(), w.row(r).as_ptr() as *const f32, w.cols());
        }
    }

    /// The 32 weights of block `b` as two vectors of 16 i16.
    #[inline(always)]
    unsafe fn weights(t: QType, q: *const u8, b: usize) -> (__m256i, __m256i) {
        match t {
            QType::Q8_0 => {
                let p = q.add(b * 32);
                (
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i)),
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(16) as *const __m128i)),
                )
            }
            _ => {
                let raw = _mm_loadu_si128(q.add(b * 16) as *const __m128i);
                let mask = _mm_set1_epi8(0x0f);
                let lo = _mm256_cvtepu8_epi16(_mm_and_si128(raw, mask));
                let hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), mask));
                if t == QType::Q4_0 {
                    let eight = _mm256_set1_epi16(8);
                    (_mm256_sub_epi16(lo, eight), _mm256_sub_epi16(hi, eight))
                } else {
                    (lo, hi)
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_q(w: &QMatrix, rows: std::ops::Range<usize>, a: &ActQ, out: &mut [f32]) {
        let t = w.qtype();
        let nb = w.cols() / BLOCK;
        let q_off = nb * 2 * t.scale_arrays();
        let lanes: [__m256i; 8] = std::array::from_fn(|j| _mm256_set1_epi32(j as i32));
        let lane_idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let xq = a.xq.as_ptr();
        let mut i = 0;
        let mut r = rows.start;
        while r < rows.end {
            let two = r + 1 < rows.end;
            let p0 = w.row(r).as_ptr();
            let p1 = if two { w.row(r + 1).as_ptr() } else { p0 };
            let (q0, q1) = (p0.add(q_off), p1.add(q_off));
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let (mut accm0, mut accm1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut g = 0;
            while g < nb {
                let nbg = (nb - g).min(8);
                // Eight scales a load; lanes past the row's last block read its own quants and are never used.
                let dx = _mm256_loadu_ps(a.dx.as_ptr().add(g));
                let s0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p0.add(2 * g) as *const __m128i)), dx);
                let s1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p1.add(2 * g) as *const __m128i)), dx);
                for (j, lane) in lanes.iter().enumerate().take(nbg) {
                    let b = g + j;
                    let xlo = _mm256_loadu_si256(xq.add(b * BLOCK) as *const __m256i);
                    let xhi = _mm256_loadu_si256(xq.add(b * BLOCK + 16) as *const __m256i);
                    let (w0l, w0h) = weights(t, q0, b);
                    let (w1l, w1h) = weights(t, q1, b);
                    let v0 = _mm256_add_epi32(_mm256_madd_epi16(w0l, xlo), _mm256_madd_epi16(w0h, xhi));
                    let v1 = _mm256_add_epi32(_mm256_madd_epi16(w1l, xlo), _mm256_madd_epi16(w1h, xhi));
                    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v0), _mm256_permutevar8x32_ps(s0, *lane), acc0);
                    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v1), _mm256_permutevar8x32_ps(s1, *lane), acc1);
                }
                if t == QType::Q4_1 {
                    let keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nbg as i32), lane_idx));
                    let xs = _mm256_loadu_ps(a.xsum.as_ptr().add(g));
                    let m0 = _mm256_cvtph_ps(_mm_loadu_si128(p0.add(2 * nb + 2 * g) as *const __m128i));
                    let m1 = _mm256_cvtph_ps(_mm_loadu_si128(p1.add(2 * nb + 2 * g) as *const __m128i));
                    accm0 = _mm256_fmadd_ps(_mm256_and_ps(m0, keep), xs, accm0);
                    accm1 = _mm256_fmadd_ps(_mm256_and_ps(m1, keep), xs, accm1);
                }
                g += 8;
            }
            out[i] = hsum(acc0) + hsum(accm0);
            if two {
                out[i + 1] = hsum(acc1) + hsum(accm1);
            }
            i += 2;
            r += 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as f32 / (1u64 << 31) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn simd_matches_scalar_reference_for_every_format_and_ragged_shapes() {
        for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            for &(rows, cols) in &[(1, 32), (3, 64), (33, 96), (70, 576), (5, 1536), (2, 288)] {
                let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, rows as u64)).unwrap();
                let x = data(cols, 99);
                let mut got = vec![0f32; rows];
                gemv(&w, &x, &mut got);
                let act = (t != QType::F32).then(|| ActQ::new(&x));
                let mut want = vec![0f32; rows];
                rows_dot_scalar(&w, 0..rows, &x, act.as_ref(), &mut want);
                for (r, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{t:?} {rows}x{cols} row {r}: {g} vs {e}");
                }
            }
        }
    }

    #[test]
    fn i16_activations_stay_within_their_bound_of_the_exact_f32_dot() {
        for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let (rows, cols) = (17, 576);
            let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 5)).unwrap();
            let x = data(cols, 6);
            let mut got = vec![0f32; rows];
            gemv(&w, &x, &mut got);
            let mut wr = vec![0f32; cols];
            for (r, g) in got.iter().enumerate() {
                w.dequantize_row(r, &mut wr);
                let exact: f64 = wr.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                // each activation moves by at most half a step of (block max / 32767)
                let bound: f64 = wr
                    .chunks(32)
                    .zip(x.chunks(32))
                    .map(|(wb, xb)| {
                        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                        wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 32767.0 * 0.5
                    })
                    .sum::<f64>()
                    + 1e-5 * (1.0 + exact.abs());
                assert!((*g as f64 - exact).abs() <= bound, "{t:?} row {r}: {g} vs {exact} (bound {bound})");
            }
        }
    }
}
