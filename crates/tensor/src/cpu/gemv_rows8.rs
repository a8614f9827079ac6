//! The few-row decode product on processors with VNNI (AVX-VNNI or AVX-512 VNNI, [`super::features::Vnni`]): activations rounded to 8 bits per block of 32, so one
//! `vpdpbusd` multiplies 32 weights by 32 activations and adds them in fours, where the i16 kernel
//! ([`super::gemv_rows`]) needs two `vpmaddwd` and an add.
//!
//! **Why a second kernel.** One row of decode is bound by memory, so it keeps i16 activations (a relative error of
//! 1.5e-5) for free. Four rows are bound by the integer units instead: per pair of blocks and per row the i16 kernel
//! spends four `vpmaddwd`, a conversion and an FMA on ports 0 and 1 (a `vpdpwssd` would fuse only the adds, on
//! another port), so a step of four replies cost more than twice one. With 8-bit activations a pair of blocks takes
//! two `vpdpbusd`, and two pairs share one conversion and FMA after a `vphaddd`: measured faster at 4 rows
//! (`examples/gemv_rows.rs`; figures in docs/performance.md).
//!
//! **What it costs.** A reply written beside others is then not bit for bit the reply written alone: rounding
//! activations to 8 bits (max/127 per block, as llama.cpp's Q8 activations and the seed's i8mm path) moves a logit
//! by about the weights' own quantisation error, enough to tip a greedy choice between two near-equal tokens. One
//! reply alone keeps the i16 path, and `KVAD_NO_VNNI=1` keeps every pass on it.
//!
//! **Layout.** Weights stay as stored. Per pair of blocks (b, b+1) the activations are laid out as the weights load:
//! `[b 0..16 | b+1 0..16]` then `[b 16..32 | b+1 16..32]`, which is a Q4 pair's low and high nibbles and a Q8 pair's
//! two 16-byte halves side by side, so each `vpdpbusd` lane sums four products of one block (lanes 0–3 block b,
//! 4–7 block b+1). `vpdpbusd` multiplies unsigned by signed bytes: Q4 nibbles are unsigned already (Q4_0's −8 comes
//! off through `−8·Σq` per block), Q8 weights are flipped to `w + 128` (and `−128·Σq` comes off); those corrections
//! start the integer accumulator, so they cost no instruction.

use super::gemv::{block_sum, rows_per_task};
use super::matrix::{QMatrix, SyncPtr};
use super::pool;
use super::quant::{QType, BLOCK};

/// One activation row rounded to 8 bits per block, in the pair layout the kernel reads.
pub struct ActQ8 {
    /// Per pair of blocks, 64 bytes: `[b 0..16 | b+1 0..16 | b 16..32 | b+1 16..32]` (a missing last b+1 is zeros).
    pub x8: Vec<i8>,
    /// Per-block scales, padded with zeros to a multiple of 8, plus 8 (the kernel reads eight at a time).
    pub dx: Vec<f32>,
    /// Per-block sums of the f32 activations (Q4_1's minimums meet them), padded like `dx`.
    pub xsum: Vec<f32>,
    /// Per pair of blocks, eight i32 lanes: the weights' offset times the block's quantised sum in lanes 0 and 4
    /// (−128·Σq for Q8_0, −8·Σq for Q4_0, nothing for Q4_1), the integer accumulator's starting value.
    pub corr: Vec<i32>,
}

impl ActQ8 {
    /// Rounds `x` (a whole number of blocks) to 8 bits per block for weights of type `t`.
    pub fn new(x: &[f32], t: QType) -> Self {
        let nb = x.len() / BLOCK;
        let pairs = nb.div_ceil(2);
        let padded = nb.div_ceil(8) * 8 + 8;
        let mut a = ActQ8 {
            x8: vec![0i8; pairs * 64],
            dx: vec![0f32; padded],
            xsum: vec![0f32; padded],
            corr: vec![0i32; pairs * 8],
        };
        let mut qsum = vec![0i32; nb];
        quantize8(x, &mut a.x8, &mut a.dx[..nb], &mut a.xsum[..nb], &mut qsum);
        let off = match t {
            QType::Q8_0 => -128,
            QType::Q4_0 => -8,
            _ => 0,
        };
        for (b, s) in qsum.iter().enumerate() {
            a.corr[b / 2 * 8 + b % 2 * 4] = off * s;
        }
        a
    }
}

/// Where block `b`'s value `j` (0..32) lives in the pair layout.
fn slot(b: usize, j: usize) -> usize {
    (b / 2) * 64 + (j / 16) * 32 + (b % 2) * 16 + j % 16
}

/// Per block: scale = max |x| / 127, `q = round(x / scale)` (ties to even, as the SIMD conversion rounds), the
/// quantised values into their pair slots, the block's f32 sum and integer sum.
fn quantize8(x: &[f32], x8: &mut [i8], dx: &mut [f32], xsum: &mut [f32], qsum: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2 is present; the slices hold `dx.len()` blocks (`x8` their pairs), as `ActQ8::new` sizes them.
        unsafe { avx::quantize8(x, x8, dx, xsum, qsum) };
        return;
    }
    quantize8_scalar(x, x8, dx, xsum, qsum);
}

/// The scalar twin of [`quantize8`] (the reference in tests).
fn quantize8_scalar(x: &[f32], x8: &mut [i8], dx: &mut [f32], xsum: &mut [f32], qsum: &mut [i32]) {
    for (b, blk) in x.chunks_exact(BLOCK).enumerate().take(dx.len()) {
        let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut s = 0;
        for (j, v) in blk.iter().enumerate() {
            let q = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
            x8[slot(b, j)] = q;
            s += q as i32;
        }
        dx[b] = d;
        xsum[b] = block_sum(blk);
        qsum[b] = s;
    }
}

thread_local! {
    /// Set by [`decode_step`] while a model runs a pass whose rows are one token of each of several replies.
    static DECODE_STEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a model's forward pass) with its products of 2–8 rows allowed onto this kernel when `step` says the
/// rows are a decode step: one token of each of several replies. A prompt's rows (any count) keep i16 activations,
/// so what a prompt leaves in the KV cache does not depend on its length; only tokens written beside other replies
/// take the 8-bit rounding. Restores the previous setting when `f` returns or panics.
pub fn decode_step<R>(step: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DECODE_STEP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(DECODE_STEP.with(|c| c.replace(step)));
    f()
}

/// Whether this thread is inside a [`decode_step`] that allows the 8-bit kernel.
pub fn in_decode_step() -> bool {
    DECODE_STEP.with(|c| c.get())
}

/// Whether passes of 2–8 rows can take this kernel: a VNNI form present and not turned off by `KVAD_NO_VNNI`.
pub fn active() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::features::has_vnni()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[i·m + r] = w.row(r) · x[i·k..]` for `n` rows of `x` (1..=8) with 8-bit activations; `w` quantised (Q8_0,
/// Q4_0, Q4_1).
///
/// # Panics
/// When [`active`] is false, `w` is F32 or BF16, or a slice is shorter than the shapes say.
pub fn gemv_rows8(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k, t) = (w.rows(), w.cols(), w.qtype());
    assert!(matches!(t, QType::Q8_0 | QType::Q4_0 | QType::Q4_1), "gemv_rows8 takes Q8_0, Q4_0 or Q4_1, not {t:?}");
    assert!((1..=super::rows::MAX_ROWS).contains(&n) && x.len() >= n * k && out.len() >= n * m, "shapes");
    assert!(active(), "gemv_rows8 needs VNNI");
    if m == 0 {
        return;
    }
    let acts: Vec<ActQ8> = (0..n).map(|i| ActQ8::new(&x[i * k..(i + 1) * k], t)).collect();
    let per = rows_per_task(m);
    let o = SyncPtr(out.as_mut_ptr());
    pool::parallel_for(m.div_ceil(per), |task| {
        let r0 = task * per;
        let r1 = (r0 + per).min(m);
        // SAFETY: each task writes only columns r0..r1 of each of the n output rows; the slices are disjoint.
        let mut outs: [&mut [f32]; 8] = std::array::from_fn(|i| {
            if i < n {
                // SAFETY: as above: row i's columns r0..r1, which no other task writes.
                unsafe { std::slice::from_raw_parts_mut(o.get().add(i * m + r0), r1 - r0) }
            } else {
                &mut []
            }
        });
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2, FMA, F16C and the VNNI form `vnni` names are present (`active`); rows are `row_bytes` long
        // (QMatrix checks), each `acts[i]` was made from `cols` values, each `outs[i]` holds `r1 - r0` values.
        unsafe {
            let form = super::features::vnni().expect("active");
            avx::rows8_with(form, n, w, r0..r1, &acts, &mut outs)
        }
    });
}

/// The scalar reference: exact integer block sums against the stored weights, scaled by `d_w · d_x` in block
/// order (plus `m_w · Σx` for Q4_1).
pub fn dot8_scalar(w: &QMatrix, r: usize, a: &ActQ8) -> f32 {
    let t = w.qtype();
    let nb = w.cols() / BLOCK;
    let p = super::quant::parts(t, w.row(r), nb);
    let f16 = |b: &[u8], i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    let mut acc = 0f32;
    for b in 0..nb {
        let xq = |j: usize| a.x8[slot(b, j)] as i32;
        let isum: i32 = match t {
            QType::Q8_0 => (0..32).map(|j| (p.q[b * 32 + j] as i8) as i32 * xq(j)).sum(),
            _ => {
                let off = if t == QType::Q4_0 { 8 } else { 0 };
                (0..16)
                    .map(|j| {
                        let byte = p.q[b * 16 + j];
                        ((byte & 15) as i32 - off) * xq(j) + ((byte >> 4) as i32 - off) * xq(j + 16)
                    })
                    .sum()
            }
        };
        acc += isum as f32 * (f16(p.d, b) * a.dx[b]);
        if t == QType::Q4_1 {
            acc += f16(p.m, b) * a.xsum[b];
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::super::features::Vnni;
    use super::super::gemm::hsum;
    use super::super::rows::avx::{group_scales, prefetch, q4_1_mins};
    use super::*;
    use std::arch::x86_64::*;
    use std::ops::Range;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize8(x: &[f32], x8: &mut [i8], dx: &mut [f32], xsum: &mut [f32], qsum: &mut [i32]) {
        let nb = dx.len();
        assert!(x.len() >= nb * BLOCK && x8.len() >= nb.div_ceil(2) * 64 && xsum.len() >= nb && qsum.len() >= nb);
        let sign = _mm256_set1_ps(-0.0);
        // packs leave the four 32-bit groups of each lane as [0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31].
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
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
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            // Round to nearest even (the default rounding mode), as the scalar twin's `round_ties_even`.
            let qi = v.map(|vi| _mm256_cvtps_epi32(_mm256_mul_ps(vi, id)));
            let s = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
            let s = _mm_add_epi32(_mm256_extracti128_si256(s, 1), _mm256_castsi256_si128(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            let dst = x8.as_mut_ptr().add((b / 2) * 64 + (b % 2) * 16);
            _mm_storeu_si128(dst as *mut __m128i, _mm256_castsi256_si128(bytes));
            _mm_storeu_si128(dst.add(32) as *mut __m128i, _mm256_extracti128_si256(bytes, 1));
            dx[b] = d;
            xsum[b] = hsum(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
            qsum[b] = _mm_cvtsi128_si32(s);
        }
    }

    /// Blocks `b, b+1` of a row's quants as the two unsigned byte vectors `vpdpbusd` takes (`[b 0..16 | b+1 0..16]`,
    /// `[b 16..32 | b+1 16..32]`); without `whole`, block `b` alone with zeros beside it.
    #[inline(always)]
    unsafe fn pair_weights(
        t: QType,
        q0: *const u8,
        b: usize,
        whole: bool,
        nib: __m256i,
        flip: __m256i,
    ) -> (__m256i, __m256i) {
        if t == QType::Q8_0 {
            let p = q0.add(b * 32);
            let (lo, hi) = if whole {
                (
                    _mm256_loadu2_m128i(p.add(32) as *const __m128i, p as *const __m128i),
                    _mm256_loadu2_m128i(p.add(48) as *const __m128i, p.add(16) as *const __m128i),
                )
            } else {
                (
                    _mm256_zextsi128_si256(_mm_loadu_si128(p as *const __m128i)),
                    _mm256_zextsi128_si256(_mm_loadu_si128(p.add(16) as *const __m128i)),
                )
            };
            (_mm256_xor_si256(lo, flip), _mm256_xor_si256(hi, flip))
        } else {
            let p = q0.add(b * 16);
            let v = if whole {
                _mm256_loadu_si256(p as *const __m256i)
            } else {
                _mm256_zextsi128_si256(_mm_loadu_si128(p as *const __m128i))
            };
            (_mm256_and_si256(v, nib), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib))
        }
    }

    /// `vpdpbusd` in the encoding the kernel is compiled for (`AVX512`: EVEX, else VEX).
    #[inline(always)]
    unsafe fn dpbusd<const AVX512: bool>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        if AVX512 {
            _mm256_dpbusd_epi32(acc, u, s)
        } else {
            _mm256_dpbusd_avx_epi32(acc, u, s)
        }
    }

    /// One activation row's integer sums over pair `pair` (lanes 0–3 its first block, 4–7 its second), started
    /// from the row's correction.
    #[inline(always)]
    unsafe fn pair_sum<const AVX512: bool>(
        t: QType,
        corr: *const i32,
        x8: *const i8,
        pair: usize,
        lo: __m256i,
        hi: __m256i,
    ) -> __m256i {
        let start = if t == QType::Q4_1 {
            _mm256_setzero_si256()
        } else {
            _mm256_loadu_si256(corr.add(pair * 8) as *const __m256i)
        };
        let xp = x8.add(pair * 64);
        let isum = dpbusd::<AVX512>(start, lo, _mm256_loadu_si256(xp as *const __m256i));
        dpbusd::<AVX512>(isum, hi, _mm256_loadu_si256(xp.add(32) as *const __m256i))
    }

    /// One weight row at a time, all N activation rows per pair of blocks: the pair's weights are loaded (and, for
    /// Q4, split into nibbles; for Q8, flipped to unsigned) once, then each row's two `vpdpbusd` start from its
    /// correction, and the pair's sums are scaled by `d_w · d_x` into an 8-lane float accumulator.
    #[inline(always)]
    unsafe fn rows8<const N: usize, const AVX512: bool>(
        w: &QMatrix,
        rows: std::ops::Range<usize>,
        acts: &[ActQ8],
        outs: &mut [&mut [f32]],
    ) {
        let t = w.qtype();
        let nb = w.cols() / BLOCK;
        let q_off = nb * 2 * t.scale_arrays();
        let qb = t.quant_bytes();
        let mut two = [_mm256_setzero_si256(); 4];
        let mut one = [_mm256_setzero_si256(); 8];
        for (h, v) in two.iter_mut().enumerate() {
            let (j, k) = (2 * h as i32, 2 * h as i32 + 1);
            *v = _mm256_setr_epi32(j, j, j, j, k, k, k, k);
        }
        for (j, v) in one.iter_mut().enumerate() {
            *v = _mm256_set1_epi32(j as i32);
        }
        // After `vphaddd` of pairs (b, b+1) and (b+2, b+3): lanes [b, b, b+2, b+2 | b+1, b+1, b+3, b+3].
        let quad = [_mm256_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3), _mm256_setr_epi32(4, 4, 6, 6, 5, 5, 7, 7)];
        let a: [&ActQ8; N] = std::array::from_fn(|i| &acts[i]);
        let (x8, corr) = (a.map(|a| a.x8.as_ptr()), a.map(|a| a.corr.as_ptr()));
        let (dx, xsum) = (a.map(|a| a.dx.as_ptr()), a.map(|a| a.xsum.as_ptr()));
        let (nib, flip) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(-128));
        let data = w.bytes();
        let (base, rb) = (data.as_ptr(), data.len() / w.rows().max(1));
        assert!(rows.end <= w.rows());
        for (j, r) in rows.clone().enumerate() {
            let p0 = base.add(r * rb);
            let q0 = p0.add(q_off);
            let ahead = (r + 2 < rows.end).then(|| base.add((r + 2) * rb + q_off));
            let mut acc = [_mm256_setzero_ps(); N];
            let mut accm = [_mm256_setzero_ps(); N];
            let mut g = 0;
            while g < nb {
                let nbg = (nb - g).min(8);
                let s = group_scales(p0, g, &dx);
                prefetch(ahead, g * qb, (g + nbg) * qb);
                let mut jb = 0;
                // Two whole pairs at a time: `vphaddd` folds their sums to two lanes a block, so one conversion and
                // one FMA serve four blocks (the conversion and the FMA compete with `vpdpbusd` for ports 0 and 1).
                while jb + 3 < nbg {
                    let (pa, pb) = ((g + jb) / 2, (g + jb) / 2 + 1);
                    let (alo, ahi) = pair_weights(t, q0, g + jb, true, nib, flip);
                    let (blo, bhi) = pair_weights(t, q0, g + jb + 2, true, nib, flip);
                    let lanes = quad[jb / 4];
                    for i in 0..N {
                        let a = pair_sum::<AVX512>(t, corr[i], x8[i], pa, alo, ahi);
                        let b = pair_sum::<AVX512>(t, corr[i], x8[i], pb, blo, bhi);
                        let sc = _mm256_permutevar8x32_ps(s[i], lanes);
                        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(a, b)), sc, acc[i]);
                    }
                    jb += 4;
                }
                while jb < nbg {
                    let b = g + jb;
                    let whole = jb + 1 < nbg;
                    let (lo, hi) = pair_weights(t, q0, b, whole, nib, flip);
                    // A lone last block: its sums are in lanes 0–3 and 4–7 hold zeros, so both halves take its scale
                    // (the next block's scale lane may hold anything).
                    let lanes = if whole { two[jb / 2] } else { one[jb] };
                    for i in 0..N {
                        let isum = pair_sum::<AVX512>(t, corr[i], x8[i], b / 2, lo, hi);
                        let sc = _mm256_permutevar8x32_ps(s[i], lanes);
                        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc[i]);
                    }
                    jb += 2;
                }
                if t == QType::Q4_1 {
                    q4_1_mins(p0, nb, g, nbg, &xsum, &mut accm);
                }
                g += 8;
            }
            if t == QType::Q4_1 {
                for i in 0..N {
                    acc[i] = _mm256_add_ps(acc[i], accm[i]);
                }
            }
            // Four rows' horizontal sums in one `vhaddps` tree (a row's lanes always add in the same order, so its
            // sum does not depend on N or on which rows share the tree): a weight row of 576 columns has only 18
            // blocks, and eight separate sums were a sixth of its instructions.
            let mut i = 0;
            while i < N {
                let mut q = [_mm256_setzero_ps(); 4];
                for (d, v) in q.iter_mut().enumerate().take((N - i).min(4)) {
                    *v = acc[i + d];
                }
                let h = _mm256_hadd_ps(_mm256_hadd_ps(q[0], q[1]), _mm256_hadd_ps(q[2], q[3]));
                let mut four = [0f32; 4];
                _mm_storeu_ps(four.as_mut_ptr(), _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
                for (d, v) in four.iter().enumerate().take((N - i).min(4)) {
                    outs[i + d][j] = *v;
                }
                i += 4;
            }
        }
    }

    /// The kernel compiled for AVX-VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    unsafe fn rows8_vex<const N: usize>(w: &QMatrix, rows: Range<usize>, acts: &[ActQ8], outs: &mut [&mut [f32]]) {
        rows8::<N, false>(w, rows, acts, outs)
    }

    /// The kernel compiled for AVX-512 VNNI on 256-bit registers.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    unsafe fn rows8_evex<const N: usize>(w: &QMatrix, rows: Range<usize>, acts: &[ActQ8], outs: &mut [&mut [f32]]) {
        rows8::<N, true>(w, rows, acts, outs)
    }

    /// `n` activation rows (1..=8) made a constant, on the kernel compiled for `form`.
    ///
    /// # Safety
    /// AVX2, FMA, F16C and `form` present; as [`rows8`] for the rest.
    pub(super) unsafe fn rows8_with(
        form: Vnni,
        n: usize,
        w: &QMatrix,
        rows: Range<usize>,
        acts: &[ActQ8],
        outs: &mut [&mut [f32]],
    ) {
        macro_rules! go {
            ($($k:literal)*) => {
                match (n, form) {
                    $(($k, Vnni::Avx) => rows8_vex::<$k>(w, rows, acts, outs),
                      ($k, Vnni::Avx512) => rows8_evex::<$k>(w, rows, acts, outs),)*
                    (_, Vnni::Avx) => rows8_vex::<8>(w, rows, acts, outs),
                    (_, Vnni::Avx512) => rows8_evex::<8>(w, rows, acts, outs),
                }
            };
        }
        go!(1 2 3 4 5 6 7)
    }
}

#[cfg(test)]
mod tests;
