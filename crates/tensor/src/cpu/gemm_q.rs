//! Prefill's product for quantised weights: i16 activations against i16-widened weights in integer pair products
//! (`vpdpwssd` where the processor has AVX-VNNI or AVX-512 VNNI, `vpmaddwd` and an add elsewhere), scaled once per
//! block of 32.
//!
//! The f32 panel GEMM (`gemm.rs`) runs at the FMA units' peak, 16 multiply-adds a cycle a core; an integer pair
//! product does 16 an instruction, two instructions a cycle. Activations are quantised as decode quantises them
//! (per block of 32, scale max/32767: a relative error of 1.5e-5, a hundredth of the weights' own step) and the
//! weights are widened exactly, so this adds no error that decode does not already have.
//!
//! Layout: panels of 16 output columns. Per block of 32 inputs a panel's weights are packed as 16 input pairs × 16
//! columns of i16 pairs (a column a 32-bit lane, 1 KiB), with the columns' scales (and Q4_1's minimums) beside them.
//! A register tile of up to 6 rows × 16 columns holds 12 integer accumulators for one block, then adds them,
//! converted and scaled by `d_w · d_x`, into the output (Q4_1 adds `m_w · Σx` there too).

// Panels of 16 output columns (two AVX2 registers of i32 lanes), as the f32 GEMM's, whose output helpers it shares.
use super::gemm::{finish_panel, panel_dst, NR};
use super::gemv::{dot_scalar, quantize_act, ActQ};
use super::matrix::{QMatrix, SyncPtr};
use super::pool;
use super::quant::{QType, BLOCK};

/// Rows per register tile: 12 accumulators, two weight vectors and a broadcast fill the 16 registers.
const MR: usize = 6;
/// Blocks per slice of a panel: 8 × 1 KiB of packed weights stay in L1 while all rows pass over them.
const KB: usize = 8;

/// `out[n, w.rows] = x[n, w.cols] · wᵀ` for a quantised `w` (Q8_0, Q4_0, Q4_1) and more rows than decode's kernels
/// take.
///
/// # Panics
/// When `w` is not one of those formats or a slice is shorter than the shapes say (callers own the shapes).
pub fn gemm_q(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k) = (w.rows(), w.cols());
    let t = w.qtype();
    assert!(matches!(t, QType::Q8_0 | QType::Q4_0 | QType::Q4_1), "gemm_q takes Q8_0, Q4_0 or Q4_1, not {t:?}");
    assert!(x.len() >= n * k && out.len() >= n * m, "gemm_q: x is n × k and out n × m");
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        avx_gemm(w, x, n, out);
        return;
    }
    gemm_q_scalar(w, x, n, out);
}

/// The scalar twin: every output the one-row scalar dot product over the same quantised activations (the reference
/// in tests, and the path without AVX2).
pub fn gemm_q_scalar(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k) = (w.rows(), w.cols());
    for i in 0..n {
        let xr = &x[i * k..(i + 1) * k];
        let act = ActQ::new(xr, w.qtype());
        for j in 0..m {
            out[i * m + j] = dot_scalar(w, j, xr, Some(&act));
        }
    }
}

/// The rows of `x` quantised per block and laid out for the tile: per group of [`MR`] rows (the last zero-padded),
/// per block, per input pair, the group's rows side by side (`xp[g][b][kp][r]`, an i32 holding the i16 pair), so a
/// tile reaches every row from one pointer; scales and sums as `[g][b][r]`.
struct Acts {
    xp: Vec<i32>,
    dx: Vec<f32>,
    xsum: Vec<f32>,
}

/// Quantises every row of `x`, groups of rows spread over the pool.
fn quantize_rows(x: &[f32], n: usize, k: usize) -> Acts {
    let nb = k / BLOCK;
    let groups = n.div_ceil(MR);
    let mut a = Acts {
        xp: vec![0i32; groups * nb * 16 * MR],
        dx: vec![0f32; groups * nb * MR],
        xsum: vec![0f32; groups * nb * MR],
    };
    let (q, d, s) = (SyncPtr(a.xp.as_mut_ptr()), SyncPtr(a.dx.as_mut_ptr()), SyncPtr(a.xsum.as_mut_ptr()));
    pool::parallel_for(groups, |g| {
        // SAFETY: each task writes only its own group's part of the three buffers.
        let (xp, dx, xs) = unsafe {
            (
                std::slice::from_raw_parts_mut(q.get().add(g * nb * 16 * MR), nb * 16 * MR),
                std::slice::from_raw_parts_mut(d.get().add(g * nb * MR), nb * MR),
                std::slice::from_raw_parts_mut(s.get().add(g * nb * MR), nb * MR),
            )
        };
        let (mut rq, mut rd, mut rs) = (vec![0i16; k], vec![0f32; nb], vec![0f32; nb]);
        for r in 0..MR.min(n - g * MR) {
            let i = g * MR + r;
            quantize_act(&x[i * k..(i + 1) * k], &mut rq, &mut rd, &mut rs);
            for b in 0..nb {
                dx[b * MR + r] = rd[b];
                xs[b * MR + r] = rs[b];
                for kp in 0..16 {
                    let (lo, hi) = (rq[b * BLOCK + 2 * kp] as u16 as u32, rq[b * BLOCK + 2 * kp + 1] as u16 as u32);
                    xp[(b * 16 + kp) * MR + r] = (lo | hi << 16) as i32;
                }
            }
        }
    });
    a
}

/// Per-thread buffers: one panel's packed weights, scales and minimums, and a narrow last panel's output.
#[derive(Default)]
struct Scratch {
    packed: Vec<i16>,
    scales: Vec<f32>,
    mins: Vec<f32>,
    acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The panel's f16 scales (and Q4_1 minimums) as f32, `[nb][16]`, zero past the last column.
fn panel_scales(w: &QMatrix, j0: usize, cols: usize, scales: &mut [f32], mins: &mut [f32]) {
    let (t, nb) = (w.qtype(), w.cols() / BLOCK);
    scales.fill(0.0);
    mins.fill(0.0);
    let data = w.bytes();
    let rb = data.len() / w.rows().max(1);
    let mut row = vec![0f32; nb];
    for c in 0..cols {
        let r = &data[(j0 + c) * rb..(j0 + c + 1) * rb];
        // The row starts with its nb f16 scales, then (Q4_1) its nb f16 minimums.
        super::quant::f16_to_f32(&r[..2 * nb], &mut row);
        for (b, &d) in row.iter().enumerate() {
            scales[b * NR + c] = d;
        }
        if t == QType::Q4_1 {
            super::quant::f16_to_f32(&r[2 * nb..4 * nb], &mut row);
            for (b, &m) in row.iter().enumerate() {
                mins[b * NR + c] = m;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx_gemm(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k, t) = (w.rows(), w.cols(), w.qtype());
    let nb = k / BLOCK;
    let acts = quantize_rows(x, n, k);
    let vnni = super::features::vnni();
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(m.div_ceil(NR), |p| {
        SCRATCH.with_borrow_mut(|sc| {
            let j0 = p * NR;
            let cols = NR.min(m - j0);
            sc.packed.resize(nb * NR * BLOCK, 0);
            sc.scales.resize(nb * NR, 0.0);
            sc.mins.resize(nb * NR, 0.0);
            // SAFETY: AVX2 is present (checked by the caller); rows j0..j0+cols exist and `packed` holds nb KiB.
            unsafe { avx::pack_panel(w, j0, cols, &mut sc.packed) };
            panel_scales(w, j0, cols, &mut sc.scales, &mut sc.mins);
            let (dst, ldc) = panel_dst(o, j0, cols, m, n, &mut sc.acc);
            let mut b0 = 0;
            while b0 < nb {
                let nblk = KB.min(nb - b0);
                let mut i0 = 0;
                while i0 < n {
                    let rows = MR.min(n - i0);
                    let g = i0 / MR;
                    let a = avx::TileArgs {
                        xp: acts.xp[(g * nb + b0) * 16 * MR..].as_ptr(),
                        dx: acts.dx[(g * nb + b0) * MR..].as_ptr(),
                        xsum: acts.xsum[(g * nb + b0) * MR..].as_ptr(),
                        pk: sc.packed[b0 * NR * BLOCK..].as_ptr(),
                        ds: sc.scales[b0 * NR..].as_ptr(),
                        ms: (t == QType::Q4_1).then(|| sc.mins[b0 * NR..].as_ptr()),
                        nblk,
                        c: dst.wrapping_add(i0 * ldc),
                        ldc,
                        first: b0 == 0,
                    };
                    // SAFETY: AVX2/FMA present (and the VNNI form `vnni` names); the pointers cover `rows` rows of
                    // `nblk` blocks (slices above), and `c` rows i0.. of this panel's 16 columns, which only this
                    // task writes.
                    unsafe { avx::tile(&a, rows, vnni) };
                    i0 += rows;
                }
                b0 += nblk;
            }
            finish_panel(o, j0, cols, m, n, &sc.acc);
        })
    });
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::*;
    use std::arch::x86_64::*;

    /// One register tile's operands (raw pointers: the tile is the innermost loop).
    pub(super) struct TileArgs {
        pub xp: *const i32,
        pub dx: *const f32,
        pub xsum: *const f32,
        pub pk: *const i16,
        pub ds: *const f32,
        pub ms: Option<*const f32>,
        pub nblk: usize,
        pub c: *mut f32,
        pub ldc: usize,
        pub first: bool,
    }

    /// The 8×8 transpose of 32-bit lanes (the f32 GEMM's, on integer registers).
    #[inline(always)]
    unsafe fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
        super::super::gemm::avx::transpose8_regs(r.map(|v| _mm256_castsi256_ps(v))).map(|v| _mm256_castps_si256(v))
    }

    /// Packs columns `j0..j0+cols` (zeros past them) block by block: `packed[b][kp][c]` is the i16 pair
    /// (`w[c][32b+2kp]`, `w[c][32b+2kp+1]`), Q4_0's offset of 8 already subtracted.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_panel(w: &QMatrix, j0: usize, cols: usize, packed: &mut [i16]) {
        let (t, nb) = (w.qtype(), w.cols() / BLOCK);
        assert!(packed.len() >= nb * NR * BLOCK && j0 + cols <= w.rows());
        let q_off = nb * 2 * t.scale_arrays();
        let data = w.bytes();
        let rb = data.len() / w.rows().max(1);
        let mask = _mm_set1_epi8(0x0f);
        let eight = _mm256_set1_epi16(if t == QType::Q4_0 { 8 } else { 0 });
        let dst = packed.as_mut_ptr();
        for b in 0..nb {
            for h in 0..2 {
                let mut lo = [_mm256_setzero_si256(); 8];
                let mut hi = [_mm256_setzero_si256(); 8];
                for c in 0..8 {
                    if h * 8 + c >= cols {
                        break;
                    }
                    let q = data.as_ptr().add((j0 + h * 8 + c) * rb + q_off);
                    if t == QType::Q8_0 {
                        lo[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(q.add(b * 32) as *const __m128i));
                        hi[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128(q.add(b * 32 + 16) as *const __m128i));
                    } else {
                        let raw = _mm_loadu_si128(q.add(b * 16) as *const __m128i);
                        lo[c] = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(raw, mask)), eight);
                        hi[c] =
                            _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), mask)), eight);
                    }
                }
                let (tl, th) = (transpose8(lo), transpose8(hi));
                for kp in 0..8 {
                    _mm256_storeu_si256(dst.add((b * 16 + kp) * 32 + h * 16) as *mut __m256i, tl[kp]);
                    _mm256_storeu_si256(dst.add((b * 16 + 8 + kp) * 32 + h * 16) as *mut __m256i, th[kp]);
                }
            }
        }
    }

    /// The integer product a tile is compiled with: `vpmaddwd` and an add, or one `vpdpwssd` in either encoding.
    const MADD: u8 = 0;
    const DP_AVX: u8 = 1;
    const DP_AVX512: u8 = 2;

    /// Dispatches the tile on its row count and on the VNNI form.
    ///
    /// # Safety
    /// AVX2 and FMA present (and the VNNI form `vnni` names); `a`'s pointers valid for `rows` rows of `a.nblk`
    /// blocks.
    pub(super) unsafe fn tile(a: &TileArgs, rows: usize, vnni: Option<super::super::features::Vnni>) {
        use super::super::features::Vnni;
        match (a.ms.is_some(), vnni) {
            (false, Some(Vnni::Avx)) => rows_of::<DP_AVX, false>(a, rows),
            (true, Some(Vnni::Avx)) => rows_of::<DP_AVX, true>(a, rows),
            (false, Some(Vnni::Avx512)) => rows_of::<DP_AVX512, false>(a, rows),
            (true, Some(Vnni::Avx512)) => rows_of::<DP_AVX512, true>(a, rows),
            (false, None) => rows_of::<MADD, false>(a, rows),
            (true, None) => rows_of::<MADD, true>(a, rows),
        }
    }

    /// The row count made a constant (the accumulators live in registers only when their number is known).
    #[inline(always)]
    unsafe fn rows_of<const DP: u8, const MINS: bool>(a: &TileArgs, rows: usize) {
        match rows {
            6 => tile_at::<6, DP, MINS>(a),
            5 => tile_at::<5, DP, MINS>(a),
            4 => tile_at::<4, DP, MINS>(a),
            3 => tile_at::<3, DP, MINS>(a),
            2 => tile_at::<2, DP, MINS>(a),
            _ => tile_at::<1, DP, MINS>(a),
        }
    }

    /// The tile compiled with the instructions it uses.
    #[inline(always)]
    unsafe fn tile_at<const R: usize, const DP: u8, const MINS: bool>(a: &TileArgs) {
        match DP {
            DP_AVX => tile_vnni::<R, MINS>(a),
            DP_AVX512 => tile_vnni512::<R, MINS>(a),
            _ => tile_madd::<R, MINS>(a),
        }
    }

    #[target_feature(enable = "avx2,fma,avxvnni")]
    unsafe fn tile_vnni<const R: usize, const MINS: bool>(a: &TileArgs) {
        tile_body::<R, DP_AVX, MINS>(a)
    }

    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    unsafe fn tile_vnni512<const R: usize, const MINS: bool>(a: &TileArgs) {
        tile_body::<R, DP_AVX512, MINS>(a)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_madd<const R: usize, const MINS: bool>(a: &TileArgs) {
        tile_body::<R, MADD, MINS>(a)
    }

    /// R rows × 16 columns over `a.nblk` blocks: per block, integer pair products into 2R accumulators, then
    /// `c += f32(acc) · (d_w · d_x)` (and `+ m_w · Σx` for Q4_1).
    #[inline(always)]
    unsafe fn tile_body<const R: usize, const DP: u8, const MINS: bool>(a: &TileArgs) {
        let ms = a.ms.unwrap_or(std::ptr::null());
        for j in 0..a.nblk {
            let mut acc = [[_mm256_setzero_si256(); 2]; R];
            let pk = a.pk.add(j * NR * BLOCK);
            let xj = a.xp.add(j * 16 * MR);
            for kp in 0..16 {
                let w0 = _mm256_loadu_si256(pk.add(kp * 32) as *const __m256i);
                let w1 = _mm256_loadu_si256(pk.add(kp * 32 + 16) as *const __m256i);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xb = _mm256_set1_epi32(*xj.add(kp * MR + r));
                    if DP == DP_AVX {
                        acc[0] = _mm256_dpwssd_avx_epi32(acc[0], w0, xb);
                        acc[1] = _mm256_dpwssd_avx_epi32(acc[1], w1, xb);
                    } else if DP == DP_AVX512 {
                        acc[0] = _mm256_dpwssd_epi32(acc[0], w0, xb);
                        acc[1] = _mm256_dpwssd_epi32(acc[1], w1, xb);
                    } else {
                        acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(w0, xb));
                        acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(w1, xb));
                    }
                }
            }
            let d0 = _mm256_loadu_ps(a.ds.add(j * NR));
            let d1 = _mm256_loadu_ps(a.ds.add(j * NR + 8));
            for (r, acc) in acc.iter().enumerate() {
                let s = _mm256_set1_ps(*a.dx.add(j * MR + r));
                let p = a.c.add(r * a.ldc);
                let (mut c0, mut c1) = if a.first && j == 0 {
                    (_mm256_setzero_ps(), _mm256_setzero_ps())
                } else {
                    (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                };
                c0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[0]), _mm256_mul_ps(d0, s), c0);
                c1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[1]), _mm256_mul_ps(d1, s), c1);
                if MINS {
                    let xs = _mm256_set1_ps(*a.xsum.add(j * MR + r));
                    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(ms.add(j * NR)), xs, c0);
                    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(ms.add(j * NR + 8)), xs, c1);
                }
                _mm256_storeu_ps(p, c0);
                _mm256_storeu_ps(p.add(8), c1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testdata::data;
    use super::*;

    /// Ragged shapes: rows not a multiple of the tile, columns not of the panel, blocks not of the slice.
    const SHAPES: [(usize, usize, usize); 6] =
        [(9, 32, 5), (13, 64, 17), (7, 288, 33), (12, 576, 16), (37, 320, 40), (20, 1536, 24)];

    #[test]
    fn simd_matches_the_scalar_twin_for_every_format_and_ragged_shapes() {
        for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            for &(n, k, m) in &SHAPES {
                let w = QMatrix::quantize(t, m, k, &data(m * k, (n * m) as u64)).unwrap();
                let x = data(n * k, 5);
                let mut got = vec![0f32; n * m];
                gemm_q(&w, &x, n, &mut got);
                let mut want = vec![0f32; n * m];
                gemm_q_scalar(&w, &x, n, &mut want);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "{t:?} n{n} k{k} m{m} [{i}]: {g} vs {e}");
                }
            }
        }
    }

    #[test]
    fn vnni_and_madd_paths_agree_bit_for_bit() {
        #[cfg(target_arch = "x86_64")]
        if super::super::features::has_avx2() {
            for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
                let (n, k, m) = (11, 576, 40);
                let w = QMatrix::quantize(t, m, k, &data(m * k, 3)).unwrap();
                let x = data(n * k, 4);
                let acts = quantize_rows(&x, n, k);
                let nb = k / BLOCK;
                let mut packed = vec![0i16; nb * NR * BLOCK];
                let (mut scales, mut mins) = (vec![0f32; nb * NR], vec![0f32; nb * NR]);
                let forms = super::super::features::vnni_forms();
                let mut outs = vec![vec![0f32; n * NR]; 1 + forms.len()];
                // SAFETY: the test runs where AVX2 was detected, and `packed` holds the panel of 16 rows.
                unsafe { avx::pack_panel(&w, 16, 16, &mut packed) };
                panel_scales(&w, 16, 16, &mut scales, &mut mins);
                let kinds = std::iter::once(None).chain(forms.iter().copied().map(Some));
                for (vnni, out) in kinds.zip(outs.iter_mut()) {
                    for i0 in (0..n).step_by(MR) {
                        let g = i0 / MR;
                        let a = avx::TileArgs {
                            xp: acts.xp[g * nb * 16 * MR..].as_ptr(),
                            dx: acts.dx[g * nb * MR..].as_ptr(),
                            xsum: acts.xsum[g * nb * MR..].as_ptr(),
                            pk: packed.as_ptr(),
                            ds: scales.as_ptr(),
                            ms: (t == QType::Q4_1).then_some(mins.as_ptr()),
                            nblk: nb,
                            c: out[i0 * NR..].as_mut_ptr(),
                            ldc: NR,
                            first: true,
                        };
                        // SAFETY: every pointer spans this tile's rows and blocks, sized above.
                        unsafe { avx::tile(&a, MR.min(n - i0), vnni) };
                    }
                }
                for (f, o) in forms.iter().zip(&outs[1..]) {
                    assert_eq!(&outs[0], o, "{t:?} {f:?}");
                }
            }
        }
    }

    #[test]
    fn stays_within_the_activation_rounding_bound_of_the_exact_product() {
        for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let (n, k, m) = (10, 576, 20);
            let w = QMatrix::quantize(t, m, k, &data(m * k, 8)).unwrap();
            let x = data(n * k, 9);
            let mut got = vec![0f32; n * m];
            gemm_q(&w, &x, n, &mut got);
            let mut wr = vec![0f32; k];
            for j in 0..m {
                w.dequantize_row(j, &mut wr);
                for i in 0..n {
                    let xr = &x[i * k..(i + 1) * k];
                    let exact: f64 = wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let bound: f64 = wr
                        .chunks(32)
                        .zip(xr.chunks(32))
                        .map(|(wb, xb)| {
                            let amax = xb.iter().fold(0f32, |v, x| v.max(x.abs())) as f64;
                            wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 32767.0 * 0.5
                        })
                        .sum::<f64>()
                        + 1e-5 * (1.0 + exact.abs());
                    let g = got[i * m + j] as f64;
                    assert!((g - exact).abs() <= bound, "{t:?} [{i},{j}]: {g} vs {exact} (bound {bound})");
                }
            }
        }
    }
}
