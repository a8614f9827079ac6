//! Decode's matrix product for a few rows at once: the scheduler's step of 2–8 replies, each one token.
//!
//! Decode is bound by memory bandwidth, so multiplying a weight matrix by n rows costs about what one row costs if
//! every weight block is read from memory once and used for all n rows while it is in registers. The panel GEMM
//! (built for hundreds of prompt rows) dequantises each panel to f32 first, which at 4 rows costs five times a
//! GEMV; this kernel instead widens each block to i16 once and runs `vpmaddwd` against every row's i16 activations
//! ([`ActQ`], the one-row GEMV's own quantisation).
//!
//! **Bit-identical to the one-row GEMV.** For every (weight row, activation row) pair the floating-point work is the
//! one-row kernel's, operation for operation: the same per-block scale product, the same 8-lane accumulator fed in
//! block order, the same horizontal sum (integer sums are exact whatever their order). So a reply's logits, and its
//! tokens, do not depend on who else is in the step. The scalar path shares `dot_scalar` with the one-row scalar
//! path for the same reason. Tests check both equalities bit for bit.

use super::gemv::{dot_scalar, rows_per_task, ActQ};
use super::matrix::{QMatrix, SyncPtr};
use super::pool;
use super::quant::QType;

pub use super::rows::MAX_ROWS;

/// `out[i·m + r] = w.row(r) · x[i·k..]` for `n` (1..=[`MAX_ROWS`]) rows of `x`, where `m = w.rows()` and
/// `k = w.cols()`. Quantised weights with two or more rows of a decode step ([`super::gemv_rows8::decode_step`]) on
/// a processor with AVX-VNNI take the 8-bit kernel ([`super::gemv_rows8`]: about twice the integer rate, at the
/// price of rows that differ from rows alone by the activations' rounding); everything else takes
/// [`gemv_rows16`], bit for bit the one-row GEMV.
///
/// # Panics
/// When `n` is outside 1..=8 or a slice is shorter than the shapes say (callers own the shapes).
pub fn gemv_rows(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    use super::gemv_rows8::{active, in_decode_step};
    if n >= 2 && matches!(w.qtype(), QType::Q8_0 | QType::Q4_0 | QType::Q4_1) && in_decode_step() && active() {
        super::gemv_rows8::gemv_rows8(w, x, n, out);
    } else {
        gemv_rows16(w, x, n, out);
    }
}

/// [`gemv_rows`] with i16 activations: every value equal, bit for bit, to [`gemv`] on that row of `x`
/// alone (the path of f32 weights, of processors without VNNI and of `KVAD_NO_VNNI=1`).
///
/// # Panics
/// As [`gemv_rows`].
pub fn gemv_rows16(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k) = (w.rows(), w.cols());
    assert!((1..=MAX_ROWS).contains(&n) && x.len() >= n * k && out.len() >= n * m, "gemv_rows shapes");
    if m == 0 {
        return;
    }
    let acts: Vec<ActQ> = if w.qtype() == QType::F32 {
        Vec::new()
    } else {
        (0..n).map(|i| ActQ::new(&x[i * k..(i + 1) * k], w.qtype())).collect()
    };
    let per = rows_per_task(m);
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(m.div_ceil(per), |t| {
        let r0 = t * per;
        let r1 = (r0 + per).min(m);
        // SAFETY: each task writes only columns r0..r1 of each of the n output rows; the slices are disjoint.
        let mut outs: [&mut [f32]; MAX_ROWS] = std::array::from_fn(|i| {
            if i < n {
                // SAFETY: as above: row i's columns r0..r1, which no other task writes.
                unsafe { std::slice::from_raw_parts_mut(o.get().add(i * m + r0), r1 - r0) }
            } else {
                &mut []
            }
        });
        let xs: [&[f32]; MAX_ROWS] = std::array::from_fn(|i| if i < n { &x[i * k..(i + 1) * k] } else { &[] });
        rows_dot(w, r0..r1, &xs[..n], &acts, &mut outs[..n]);
    });
}

/// `out[r] = w.row(r) · x` for every row: decode's one-row product, this file's kernel at one activation row (one
/// weight row at a time, measured faster than two at a time: [`super::gemv`]'s notes).
pub fn gemv(w: &QMatrix, x: &[f32], out: &mut [f32]) {
    let rows = w.rows();
    let per = rows_per_task(rows);
    let tasks = rows.div_ceil(per);
    let act = (w.qtype() != QType::F32).then(|| ActQ::new(x, w.qtype()));
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(tasks, |t| {
        let r0 = t * per;
        let r1 = (r0 + per).min(rows);
        // SAFETY: each task writes only rows r0..r1 of `out`.
        let out = unsafe { std::slice::from_raw_parts_mut(o.get().add(r0), r1 - r0) };
        #[cfg(target_arch = "x86_64")]
        if super::features::has_avx2() {
            // SAFETY: AVX2, FMA and F16C are present; rows are `row_bytes` long (checked by QMatrix) and `act` was
            // made from `x`, which holds `cols` values; `out` holds rows r0..r1.
            unsafe {
                match &act {
                    None => super::gemv::avx::rows_f32(w, r0..r1, x, out),
                    Some(a) => avx::rows_q::<1>(w, r0..r1, std::slice::from_ref(a), &mut [out]),
                }
            }
            return;
        }
        super::gemv::rows_dot_scalar(w, r0..r1, x, act.as_ref(), out);
    });
}

/// Rows `rows` of `w` times every row of `xs` (F32) or of `acts` (their quantised twins), by the best kernel this
/// processor has.
fn rows_dot(w: &QMatrix, rows: std::ops::Range<usize>, xs: &[&[f32]], acts: &[ActQ], outs: &mut [&mut [f32]]) {
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2, FMA and F16C are present; rows are `row_bytes` long (checked by QMatrix), every `xs[i]`
        // holds `cols` values and `acts[i]` was made from it; every `outs[i]` holds `rows.len()` values.
        unsafe {
            if w.qtype() == QType::F32 {
                avx::rows_f32(w, rows, xs, outs);
                return;
            }
            match acts.len() {
                1 => avx::rows_q::<1>(w, rows, acts, outs),
                2 => avx::rows_q::<2>(w, rows, acts, outs),
                3 => avx::rows_q::<3>(w, rows, acts, outs),
                4 => avx::rows_q::<4>(w, rows, acts, outs),
                5 => avx::rows_q::<5>(w, rows, acts, outs),
                6 => avx::rows_q::<6>(w, rows, acts, outs),
                7 => avx::rows_q::<7>(w, rows, acts, outs),
                _ => avx::rows_q::<8>(w, rows, acts, outs),
            }
        }
        return;
    }
    rows_dot_scalar(w, rows, xs, acts, outs);
}

/// The scalar path: each weight row is read once and multiplied into every activation row while it is in cache,
/// by the one-row scalar path's own arithmetic (the reference in tests, and the fallback).
pub fn rows_dot_scalar(
    w: &QMatrix,
    rows: std::ops::Range<usize>,
    xs: &[&[f32]],
    acts: &[ActQ],
    outs: &mut [&mut [f32]],
) {
    for (j, r) in rows.enumerate() {
        for (i, o) in outs.iter_mut().enumerate() {
            o[j] = dot_scalar(w, r, xs[i], acts.get(i));
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx {
    use super::super::gemm::{dot_f32, hsum};
    use super::super::gemv::avx::{block_dot, pair_dot, q4_block, q8_block, widen_pair_q4, widen_pair_q8};
    use super::super::quant::BLOCK;
    use super::super::rows::avx::{group_scales, prefetch, q4_1_mins};
    use super::*;
    use std::arch::x86_64::*;

    /// F32: each weight row (at most 6 KiB here) is streamed from memory by the first activation row's dot product
    /// and read from L1 by the others; `dot_f32` is the one-row kernel's, so the bits are the same.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_f32(w: &QMatrix, rows: std::ops::Range<usize>, xs: &[&[f32]], outs: &mut [&mut [f32]]) {
        let base = w.bytes().as_ptr();
        for (j, r) in rows.enumerate() {
            let wr = base.add(r * w.cols() * 4) as *const f32;
            for (x, o) in xs.iter().zip(outs.iter_mut()) {
                o[j] = dot_f32(x.as_ptr(), wr, w.cols());
            }
        }
    }

    /// One weight row at a time, all N activation rows per block: the block is loaded and widened once, then each
    /// row's i16 activations meet it in `vpmaddwd`; each (weight row, activation row) pair keeps its own 8-lane
    /// accumulator fed exactly as the one-row kernel feeds its own.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_q<const N: usize>(
        w: &QMatrix,
        rows: std::ops::Range<usize>,
        acts: &[ActQ],
        outs: &mut [&mut [f32]],
    ) {
        let t = w.qtype();
        let nb = w.cols() / BLOCK;
        let q_off = nb * 2 * t.scale_arrays();
        let qb = t.quant_bytes();
        let mut one = [_mm256_setzero_si256(); 8];
        for (j, v) in one.iter_mut().enumerate() {
            *v = _mm256_set1_epi32(j as i32);
        }
        let mut two = [_mm256_setzero_si256(); 4];
        for (h, v) in two.iter_mut().enumerate() {
            let (j, k) = (2 * h as i32, 2 * h as i32 + 1);
            *v = _mm256_setr_epi32(j, j, j, j, k, k, k, k);
        }
        let a: [&ActQ; N] = std::array::from_fn(|i| &acts[i]);
        let (xq, x4) = (a.map(|a| a.xq.as_ptr()), a.map(|a| a.x4.as_ptr()));
        let (dx, xsum, corr) = (a.map(|a| a.dx.as_ptr()), a.map(|a| a.xsum.as_ptr()), a.map(|a| a.corr.as_ptr()));
        // Row addresses from the base (not `w.row`, whose slice of a mapped file costs a call per use).
        let data = w.bytes();
        let (base, rb) = (data.as_ptr(), data.len() / w.rows().max(1));
        assert!(rows.end <= w.rows());
        for (j, r) in rows.clone().enumerate() {
            let p0 = base.add(r * rb);
            let q0 = p0.add(q_off);
            // Two rows ahead, fetched a group at a time while this row computes (as the one-row kernel does).
            let ahead = (r + 2 < rows.end).then(|| base.add((r + 2) * rb + q_off));
            let mut acc = [_mm256_setzero_ps(); N];
            let mut accm = [_mm256_setzero_ps(); N];
            let mut g = 0;
            while g < nb {
                let nbg = (nb - g).min(8);
                let s = group_scales(p0, g, &dx);
                prefetch(ahead, g * qb, (g + nbg) * qb);
                let mut jb = 0;
                while jb + 1 < nbg {
                    let p = (g + jb) / 2;
                    let wv = if t == QType::Q8_0 { widen_pair_q8(q0, p) } else { widen_pair_q4(q0, p) };
                    let lanes = two[jb / 2];
                    for i in 0..N {
                        let mut isum = pair_dot(&wv, x4[i].add(p * 64));
                        if t == QType::Q4_0 {
                            isum = _mm256_add_epi32(isum, _mm256_loadu_si256(corr[i].add(p * 8) as *const __m256i));
                        }
                        let sc = _mm256_permutevar8x32_ps(s[i], lanes);
                        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc[i]);
                    }
                    jb += 2;
                }
                if jb < nbg {
                    let b = g + jb;
                    let wb = if t == QType::Q8_0 { q8_block(q0, b) } else { q4_block(t, q0, b) };
                    for i in 0..N {
                        let isum = block_dot(wb, xq[i], b);
                        let sc = _mm256_permutevar8x32_ps(s[i], one[jb]);
                        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc[i]);
                    }
                }
                if t == QType::Q4_1 {
                    q4_1_mins(p0, nb, g, nbg, &xsum, &mut accm);
                }
                g += 8;
            }
            for i in 0..N {
                outs[i][j] = hsum(acc[i]) + hsum(accm[i]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testdata::data;
    use super::*;

    const FORMATS: [QType; 4] = [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1];
    /// Ragged shapes: one block, odd block counts (the Q4 tail), rows not a multiple of the task size, and the
    /// model's own widths.
    const SHAPES: [(usize, usize); 7] = [(1, 32), (3, 64), (33, 96), (70, 576), (5, 1536), (2, 288), (37, 224)];

    /// Activation rows with different scales per row and per block, so each row's quantisation differs.
    fn activations(n: usize, cols: usize) -> Vec<f32> {
        let mut x = data(n * cols, 7 + n as u64);
        for (i, v) in x.iter_mut().enumerate() {
            *v *= 1.0 + (i / 32 % 5) as f32 + (i / cols) as f32 * 3.0;
        }
        x
    }

    #[test]
    fn every_row_equals_the_one_row_gemv_bit_for_bit() {
        for t in FORMATS {
            for (rows, cols) in SHAPES {
                let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, rows as u64)).unwrap();
                for n in 1..=MAX_ROWS {
                    let x = activations(n, cols);
                    let mut got = vec![f32::NAN; n * rows];
                    gemv_rows16(&w, &x, n, &mut got);
                    for i in 0..n {
                        let mut want = vec![0f32; rows];
                        gemv(&w, &x[i * cols..(i + 1) * cols], &mut want);
                        for r in 0..rows {
                            let g = got[i * rows + r];
                            assert_eq!(
                                g.to_bits(),
                                want[r].to_bits(),
                                "{t:?} {rows}x{cols} n{n} [{i},{r}]: {g} vs {}",
                                want[r]
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_row_equals_the_scalar_reference() {
        for t in FORMATS {
            for (rows, cols) in SHAPES {
                let w = QMatrix::quantize(t, rows, cols, &data(rows * cols, 3 + rows as u64)).unwrap();
                for n in 1..=MAX_ROWS {
                    let x = activations(n, cols);
                    let mut got = vec![f32::NAN; n * rows];
                    gemv_rows16(&w, &x, n, &mut got);
                    let xs: Vec<&[f32]> = x.chunks_exact(cols).collect();
                    let acts: Vec<ActQ> =
                        if t == QType::F32 { vec![] } else { xs.iter().map(|x| ActQ::new(x, t)).collect() };
                    let mut want = vec![0f32; n * rows];
                    let mut outs: Vec<&mut [f32]> = want.chunks_exact_mut(rows).collect();
                    rows_dot_scalar(&w, 0..rows, &xs, &acts, &mut outs);
                    for (idx, (g, e)) in got.iter().zip(&want).enumerate() {
                        let (i, r) = (idx / rows, idx % rows);
                        assert!(
                            (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                            "{t:?} {rows}x{cols} n{n} [{i},{r}]: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }
}
