//! Decode's matrix–vector product over stored rows.
//!
//! Decode reads every weight once per token and is bound by memory bandwidth, so the kernel's job is to keep the
//! memory stream busy and spend few instructions per weight. Activations are brought to i16 per block of 32 (scale
//! = block max / 32767: a relative error of 1.5e-5, a hundred times below the weights' own 8-bit step, where 8-bit
//! activations would round away the difference between close logits), weights are widened to i16, and
//! `vpmaddwd` multiplies 16 pairs an instruction; each block's integer sum is converted once and scaled by
//! `d_w·d_x`. Each thread streams its own contiguous rows, one weight row at a time: the few-row kernel at one
//! activation row, so the one-row entry, [`super::gemv_rows::gemv`], lives beside it; this file holds what both
//! share (the activations, the widening, the scalar definition). (Two weight rows at a time, sharing each load of `x`, was this
//! file's own kernel until measured 1.5× slower at Q8_0 and 1.1× at Q4 on an AMD EPYC Zen 4 host, with the same
//! bits: docs/performance.md, "Issue 43, item 11".)

use super::matrix::QMatrix;
use super::pool;
use super::quant::{parts, QType, BLOCK};

/// Fewest rows per task: a task is one long sequential stream of weights.
const ROWS_PER_TASK: usize = 32;
/// Tasks per thread: vCPUs often run at different speeds (other tenants), and with two tasks each the faster one
/// waited for the slower at every product; four balance them (measured faster, docs/performance.md).
const TASKS_PER_THREAD: usize = 4;

/// Activations of one row prepared for the integer kernels.
pub struct ActQ {
    /// `x` in i16, per block scaled by `dx`.
    pub xq: Vec<i16>,
    /// Per-block scales (padded with zeros to a multiple of 8, plus 8).
    pub dx: Vec<f32>,
    /// Per-block sums of the f32 `x` (for Q4_1's minimums), padded like `dx`; summed in the order of
    /// `block_sum`, which the SIMD path keeps.
    pub xsum: Vec<f32>,
    /// `xq` in the order the kernels widen weights, per pair of blocks (b, b+1): four vectors of 16, each the 8
    /// values of block b then the 8 of block b+1 at indices {2i}, {2i+16}, {2i+1}, {2i+17}. Q4 unpacks nibbles in
    /// that order; Q8 loads the two blocks' first and second halves side by side and splits even and odd bytes.
    pub x4: Vec<i16>,
    /// Per pair of blocks, `-8·Σxq` of each block in lanes 0 and 4 (Q4_0's offset, folded into the integer sum).
    pub corr: Vec<i32>,
}

impl ActQ {
    /// Quantises `x` (a whole number of blocks) to i16 per block, with the pair layout the integer kernels read.
    pub fn new(x: &[f32], t: QType) -> Self {
        let nb = x.len() / BLOCK;
        let padded = nb.div_ceil(8) * 8 + 8;
        let mut xq = vec![0i16; x.len()];
        let mut dx = vec![0f32; padded];
        let mut xsum = vec![0f32; padded];
        quantize_act(x, &mut xq, &mut dx[..nb], &mut xsum[..nb]);
        let pairs = if t == QType::F32 { 0 } else { nb / 2 };
        let mut x4 = vec![0i16; pairs * 64];
        pair_layout(&xq, &mut x4);
        let mut corr = vec![0i32; if t == QType::Q4_0 { pairs * 8 } else { 0 }];
        for (b, blk) in xq.chunks_exact(BLOCK).enumerate().take(if t == QType::Q4_0 { pairs * 2 } else { 0 }) {
            corr[b / 2 * 8 + b % 2 * 4] = -8 * blk.iter().map(|&v| v as i32).sum::<i32>();
        }
        ActQ { xq, dx, xsum, x4, corr }
    }
}

/// `xq` (whole pairs of blocks) into [`ActQ::x4`]'s order; with AVX2 a deinterleave per half block (this runs for
/// every row of every product: scalar, it was a visible part of a several-row decode step).
fn pair_layout(xq: &[i16], x4: &mut [i16]) {
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2 present; `x4.len() / 64` pairs of blocks are read from `xq` and written to `x4`.
        unsafe { avx::pair_layout(xq, x4) };
        return;
    }
    pair_layout_scalar(xq, x4);
}

/// The scalar twin of [`pair_layout`].
fn pair_layout_scalar(xq: &[i16], x4: &mut [i16]) {
    for p in 0..x4.len() / 64 {
        for h in 0..2 {
            let blk = &xq[(2 * p + h) * BLOCK..(2 * p + h + 1) * BLOCK];
            for i in 0..8 {
                x4[p * 64 + h * 8 + i] = blk[2 * i];
                x4[p * 64 + 16 + h * 8 + i] = blk[2 * i + 16];
                x4[p * 64 + 32 + h * 8 + i] = blk[2 * i + 1];
                x4[p * 64 + 48 + h * 8 + i] = blk[2 * i + 17];
            }
        }
    }
}

/// The sum of one block of 32 in the order the SIMD path adds: eight lanes `(x[l] + x[l+8]) + (x[l+16] + x[l+24])`,
/// then the lanes as `hsum` folds them, so both paths give the same bits.
pub(super) fn block_sum(b: &[f32]) -> f32 {
    let l: [f32; 8] = std::array::from_fn(|i| (b[i] + b[i + 8]) + (b[i + 16] + b[i + 24]));
    let a = [l[4] + l[0], l[5] + l[1], l[6] + l[2], l[7] + l[3]];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// Per block of 32: scale = max |x| / 32767, `xq = round(x / scale)` (halves away from zero), and the block's sum.
pub(super) fn quantize_act(x: &[f32], xq: &mut [i16], dx: &mut [f32], xsum: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2 is present; the slices hold `dx.len()` whole blocks (checked by the caller's shapes).
        unsafe { avx::quantize_act(x, xq, dx, xsum) };
        return;
    }
    quantize_act_scalar(x, xq, dx, xsum);
}

/// The scalar twin of the SIMD quantisation (the reference in tests).
fn quantize_act_scalar(x: &[f32], xq: &mut [i16], dx: &mut [f32], xsum: &mut [f32]) {
    for (b, blk) in x.chunks_exact(BLOCK).enumerate() {
        let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 32767.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, v) in xq[b * BLOCK..(b + 1) * BLOCK].iter_mut().zip(blk) {
            *q = (v * id).round() as i16;
        }
        dx[b] = d;
        xsum[b] = block_sum(blk);
    }
}

/// How many output rows one task streams: long contiguous runs keep each thread's memory stream sequential, and
/// [`TASKS_PER_THREAD`] of them per thread let a thread that runs fast take more.
pub(super) fn rows_per_task(rows: usize) -> usize {
    let tasks = rows.div_ceil(ROWS_PER_TASK.max(rows.div_ceil(pool::threads() * TASKS_PER_THREAD)));
    rows.div_ceil(tasks.max(1)).max(1)
}

/// The scalar path, with the same arithmetic as the SIMD one (the reference in tests, and the fallback).
pub fn rows_dot_scalar(w: &QMatrix, rows: std::ops::Range<usize>, x: &[f32], act: Option<&ActQ>, out: &mut [f32]) {
    for (o, r) in out.iter_mut().zip(rows) {
        *o = dot_scalar(w, r, x, act);
    }
}

/// Row `r` of `w` times `x` (F32) or its quantised twin `act`, block by block in order: the one scalar definition
/// that the one-row and the few-row paths share, so both give the same bits.
pub(super) fn dot_scalar(w: &QMatrix, r: usize, x: &[f32], act: Option<&ActQ>) -> f32 {
    let t = w.qtype();
    let nb = w.cols() / BLOCK;
    let row = w.row(r);
    let Some(a) = act else {
        return row.chunks_exact(4).zip(x).map(|(b, x)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x).sum();
    };
    let p = parts(t, row, nb);
    let mut acc = 0f32;
    for b in 0..nb {
        let d = half::f16::from_le_bytes([p.d[2 * b], p.d[2 * b + 1]]).to_f32();
        let xq = &a.xq[b * BLOCK..(b + 1) * BLOCK];
        let isum: i32 = match t {
            QType::Q8_0 => p.q[b * 32..(b + 1) * 32].iter().zip(xq).map(|(&q, &x)| (q as i8) as i32 * x as i32).sum(),
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
    acc
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx {
    use super::super::gemm::{dot_f32, hsum};
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(in super::super) unsafe fn rows_f32(w: &QMatrix, rows: std::ops::Range<usize>, x: &[f32], out: &mut [f32]) {
        let (base, rb) = (w.bytes().as_ptr(), w.cols() * 4);
        for (o, r) in out.iter_mut().zip(rows) {
            *o = dot_f32(x.as_ptr(), base.add(r * rb) as *const f32, w.cols());
        }
    }

    /// The 32 weights of Q4 block `b` as two vectors of 16 i16, in order (a row's odd last block).
    #[inline(always)]
    pub(in super::super) unsafe fn q4_block(t: QType, q: *const u8, b: usize) -> (__m256i, __m256i) {
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

    /// The 32 weights of Q8 block `b` as two vectors of 16 i16, in order (a row's odd last block).
    #[inline(always)]
    pub(in super::super) unsafe fn q8_block(q: *const u8, b: usize) -> (__m256i, __m256i) {
        let p = q.add(b * 32);
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(p as *const __m128i)),
            _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(16) as *const __m128i)),
        )
    }

    /// Eight i32 sums of one block against `xq` in order (a row's odd last block).
    #[inline(always)]
    pub(in super::super) unsafe fn block_dot(w: (__m256i, __m256i), xq: *const i16, b: usize) -> __m256i {
        let xlo = _mm256_loadu_si256(xq.add(b * BLOCK) as *const __m256i);
        let xhi = _mm256_loadu_si256(xq.add(b * BLOCK + 16) as *const __m256i);
        _mm256_add_epi32(_mm256_madd_epi16(w.0, xlo), _mm256_madd_epi16(w.1, xhi))
    }

    /// Block pair `p`'s Q4 nibbles as the four i16 vectors of [`ActQ::x4`]'s order (Q4_0's offset of 8 is not
    /// subtracted here: it is folded into the sum through [`ActQ::corr`]).
    #[inline(always)]
    pub(in super::super) unsafe fn widen_pair_q4(q: *const u8, p: usize) -> [__m256i; 4] {
        let v = _mm256_loadu_si256(q.add(p * 32) as *const __m256i);
        let m = _mm256_set1_epi16(0x0f);
        [
            _mm256_and_si256(v, m),
            _mm256_and_si256(_mm256_srli_epi16(v, 4), m),
            _mm256_and_si256(_mm256_srli_epi16(v, 8), m),
            _mm256_srli_epi16(v, 12),
        ]
    }

    /// Block pair `p`'s Q8 weights as the four i16 vectors of [`ActQ::x4`]'s order: the two blocks' first halves
    /// side by side and their second halves, each split into even and odd bytes (sign-extended in place).
    #[inline(always)]
    pub(in super::super) unsafe fn widen_pair_q8(q: *const u8, p: usize) -> [__m256i; 4] {
        let b = q.add(p * 64);
        let lo = _mm256_loadu2_m128i(b.add(32) as *const __m128i, b as *const __m128i);
        let hi = _mm256_loadu2_m128i(b.add(48) as *const __m128i, b.add(16) as *const __m128i);
        [
            _mm256_srai_epi16(_mm256_slli_epi16(lo, 8), 8),
            _mm256_srai_epi16(_mm256_slli_epi16(hi, 8), 8),
            _mm256_srai_epi16(lo, 8),
            _mm256_srai_epi16(hi, 8),
        ]
    }

    /// Eight i32 sums of one row over blocks `b, b+1` (lanes 0–3 block b, 4–7 block b+1) from widened weights.
    #[inline(always)]
    pub(in super::super) unsafe fn pair_dot(w: &[__m256i; 4], xp: *const i16) -> __m256i {
        let a = _mm256_madd_epi16(w[0], _mm256_loadu_si256(xp as *const __m256i));
        let b = _mm256_madd_epi16(w[1], _mm256_loadu_si256(xp.add(16) as *const __m256i));
        let c = _mm256_madd_epi16(w[2], _mm256_loadu_si256(xp.add(32) as *const __m256i));
        let d = _mm256_madd_epi16(w[3], _mm256_loadu_si256(xp.add(48) as *const __m256i));
        _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d))
    }

    /// [`super::pair_layout`]: each half block's 16 values split into its 8 even-indexed and 8 odd-indexed ones
    /// (a byte shuffle within each 128-bit lane, then a qword permute), then the two blocks' halves paired.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pair_layout(xq: &[i16], x4: &mut [i16]) {
        let pairs = x4.len() / 64;
        assert!(xq.len() >= pairs * 64);
        let split = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
        );
        // [evens of the 16 | odds of the 16] (a function, not a closure, so it keeps this one's target features)
        #[inline(always)]
        unsafe fn eo(p: *const i16, split: __m256i) -> __m256i {
            _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(
                _mm256_loadu_si256(p as *const __m256i),
                split,
            ))
        }
        for p in 0..pairs {
            let src = xq.as_ptr().add(p * 64);
            let (a_lo, a_hi) = (eo(src, split), eo(src.add(16), split));
            let (b_lo, b_hi) = (eo(src.add(32), split), eo(src.add(48), split));
            let dst = x4.as_mut_ptr().add(p * 64) as *mut __m256i;
            _mm256_storeu_si256(dst, _mm256_permute2x128_si256::<0x20>(a_lo, b_lo));
            _mm256_storeu_si256(dst.add(1), _mm256_permute2x128_si256::<0x20>(a_hi, b_hi));
            _mm256_storeu_si256(dst.add(2), _mm256_permute2x128_si256::<0x31>(a_lo, b_lo));
            _mm256_storeu_si256(dst.add(3), _mm256_permute2x128_si256::<0x31>(a_hi, b_hi));
        }
    }

    /// The SIMD quantisation of [`quantize_act_scalar`], bit for bit.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_act(x: &[f32], xq: &mut [i16], dx: &mut [f32], xsum: &mut [f32]) {
        let nb = dx.len();
        assert!(x.len() >= nb * BLOCK && xq.len() >= nb * BLOCK && xsum.len() >= nb);
        let sign = _mm256_set1_ps(-0.0);
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        for b in 0..nb {
            let p = x.as_ptr().add(b * BLOCK);
            let v =
                [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
            let m = _mm256_max_ps(
                _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
            );
            let m = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
            let d = amax / 32767.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            let mut qi = [_mm256_setzero_si256(); 4];
            for (q, &vi) in qi.iter_mut().zip(&v) {
                // Round halves away from zero, as `f32::round`: truncate, then step out where |fraction| >= 0.5.
                let y = _mm256_mul_ps(vi, id);
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
                let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(y, t));
                let step =
                    _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), _mm256_or_ps(one, _mm256_and_ps(sign, y)));
                *q = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
            }
            let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(qi[0], qi[1]));
            let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(qi[2], qi[3]));
            _mm256_storeu_si256(xq.as_mut_ptr().add(b * BLOCK) as *mut __m256i, lo);
            _mm256_storeu_si256(xq.as_mut_ptr().add(b * BLOCK + 16) as *mut __m256i, hi);
            dx[b] = d;
            xsum[b] = hsum(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::gemv_rows::gemv;
    use super::super::testdata::data;

    #[test]
    fn simd_matches_scalar_reference_for_every_format_and_ragged_shapes() {
        for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            for &(rows, cols) in &[(1, 32), (3, 64), (33, 96), (70, 576), (5, 1536), (2, 288)] {
                let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, rows as u64)).unwrap();
                let x = data(cols, 99);
                let mut got = vec![0f32; rows];
                gemv(&w, &x, &mut got);
                let act = (t != QType::F32).then(|| ActQ::new(&x, t));
                let mut want = vec![0f32; rows];
                rows_dot_scalar(&w, 0..rows, &x, act.as_ref(), &mut want);
                for (r, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{t:?} {rows}x{cols} row {r}: {g} vs {e}");
                }
            }
        }
    }

    #[test]
    fn simd_activation_quantisation_is_the_scalar_one_bit_for_bit() {
        let mut x = data(32 * 37, 7);
        // A block scaled by exactly 1 whose values sit on halves (rounding ties, both signs), and a zero block.
        for (i, v) in x[..32].iter_mut().enumerate() {
            *v = i as f32 - 16.5;
        }
        x[31] = 32767.0;
        x[32..64].fill(0.0);
        let nb = x.len() / BLOCK;
        type Quantiser = dyn Fn(&[f32], &mut [i16], &mut [f32], &mut [f32]);
        let run = |f: &Quantiser| {
            let (mut q, mut d, mut s) = (vec![0i16; x.len()], vec![0f32; nb], vec![0f32; nb]);
            f(&x, &mut q, &mut d, &mut s);
            (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), s.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        };
        let simd = run(&quantize_act);
        let scalar = run(&quantize_act_scalar);
        assert_eq!(simd, scalar);
        assert_eq!(&scalar.0[..4], &[-17, -16, -15, -14], "halves round away from zero");
    }

    #[test]
    fn simd_pair_layout_is_the_scalar_one() {
        let xq: Vec<i16> = (0..32 * 36).map(|i| (i * 7919 % 65521) as i16).collect();
        let (mut a, mut b) = (vec![0i16; 18 * 64], vec![0i16; 18 * 64]);
        pair_layout(&xq, &mut a);
        pair_layout_scalar(&xq, &mut b);
        assert_eq!(a, b);
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
