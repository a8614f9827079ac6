//! Prefill's matrix–matrix product: `out[n, m] = x[n, k] · Wᵀ` for any stored format, with f32 activations.
//!
//! Work is split over panels of 16 output columns. For each panel and each slice of 256 inputs, the weights are
//! dequantised once into an f32 buffer laid out `[k][16]` (16 KiB, it stays in L1), then a 6×16 register tile
//! walks all rows of `x` over it: 12 accumulators, two weight loads and six broadcasts per step of k, twelve FMAs.
//! Dequantising costs once per panel, not once per row, so f32 activations keep their precision at GEMM speed.

use super::features::has_avx2;
use super::matrix::{QMatrix, SyncPtr};
use super::pool;
use super::quant::dequantize_row;
#[cfg(test)]
use super::quant::QType;

/// Output columns per panel (two AVX2 registers).
pub(super) const NR: usize = 16;
/// Rows of `x` per register tile.
pub(super) const MR: usize = 6;
/// Inputs per panel slice: 256 × 16 f32 = 16 KiB.
const KC: usize = 256;

/// `out[n, w.rows] = x[n, w.cols] · wᵀ`.
pub fn gemm(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k) = (w.rows(), w.cols());
    assert!(x.len() >= n * k && out.len() >= n * m, "gemm: x is n × k and out n × m");
    let panels = m.div_ceil(NR);
    let o = SyncPtr(out.as_mut_ptr());
    // One task per panel, claimed dynamically: even work to the end of the product.
    pool::parallel_for(panels, |p| {
        SCRATCH.with_borrow_mut(|sc| {
            let j0 = p * NR;
            let cols = NR.min(m - j0);
            sc.rows.resize(NR * k, 0.0);
            sc.packed.resize(NR * k, 0.0);
            for c in 0..cols {
                dequantize_row(w.qtype(), w.row(j0 + c), &mut sc.rows[c * k..(c + 1) * k]);
            }
            sc.rows[cols * k..].iter_mut().for_each(|v| *v = 0.0);
            transpose_panel(&sc.rows, k, &mut sc.packed);
            let (dst, ldc) = panel_dst(o, j0, cols, m, n, &mut sc.acc);
            let mut k0 = 0;
            while k0 < k {
                let kc = KC.min(k - k0);
                let buf = &sc.packed[k0 * NR..(k0 + kc) * NR];
                let mut i0 = 0;
                while i0 < n {
                    let rows = MR.min(n - i0);
                    // SAFETY: `dst` row i0..i0+rows, columns 0..16, lies inside `out` (this task's panel) or `acc`.
                    unsafe { tile(&x[i0 * k + k0..], k, buf, kc, dst.wrapping_add(i0 * ldc), ldc, rows, k0 == 0) };
                    i0 += rows;
                }
                k0 += kc;
            }
            finish_panel(o, j0, cols, m, n, &sc.acc);
        })
    });
}

/// Where a panel's tiles write (pointer, row stride): a full panel straight into `out` (stride `m`), the last,
/// narrower one into `acc` (stride 16), which [`finish_panel`] then copies; both GEMMs share this.
pub(super) fn panel_dst(
    o: SyncPtr<f32>,
    j0: usize,
    cols: usize,
    m: usize,
    n: usize,
    acc: &mut Vec<f32>,
) -> (*mut f32, usize) {
    if cols == NR {
        (o.get().wrapping_add(j0), m)
    } else {
        acc.resize(n * NR, 0.0);
        (acc.as_mut_ptr(), NR)
    }
}

/// Copies a narrow last panel's `cols` columns from `acc` into `out` (nothing for a full panel, written in place).
pub(super) fn finish_panel(o: SyncPtr<f32>, j0: usize, cols: usize, m: usize, n: usize, acc: &[f32]) {
    if cols == NR {
        return;
    }
    for i in 0..n {
        // SAFETY: each task writes only its own panel's columns of every row.
        let d = unsafe { std::slice::from_raw_parts_mut(o.get().add(i * m + j0), cols) };
        d.copy_from_slice(&acc[i * NR..i * NR + cols]);
    }
}

/// Per-thread buffers of the GEMM (allocated once per worker, grown as needed).
#[derive(Default)]
struct Scratch {
    rows: Vec<f32>,
    packed: Vec<f32>,
    acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `packed[kk][c] = rows[c][kk]` for the 16 rows of a panel (`rows` is `[16][k]`).
fn transpose_panel(rows: &[f32], k: usize, packed: &mut [f32]) {
    assert!(rows.len() >= NR * k && packed.len() >= NR * k);
    let mut k8 = 0;
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        k8 = k / 8 * 8;
        for kk in (0..k8).step_by(8) {
            for half in 0..2 {
                // SAFETY: AVX2 present; rows `half*8..half*8+8` hold k floats each and kk + 8 <= k.
                unsafe {
                    avx::transpose8(
                        rows.as_ptr().add(half * 8 * k + kk),
                        k,
                        packed.as_mut_ptr().add(kk * NR + half * 8),
                        NR,
                    )
                };
            }
        }
    }
    for kk in k8..k {
        for c in 0..NR {
            packed[kk * NR + c] = rows[c * k + kk];
        }
    }
}

/// `c[r][0..16] (+)= Σ_k x[r][k] · buf[k][0..16]` for `rows` ≤ 6 rows of `x` (row stride `ldx`) into `c` (row
/// stride `ldc`); `first` overwrites `c` instead of adding to it.
///
/// # Safety
/// `c` must be valid for writes of `rows` rows of 16 floats at stride `ldc`, and not aliased by another task.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    x: &[f32],
    ldx: usize,
    buf: &[f32],
    kc: usize,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    first: bool,
) {
    assert!(buf.len() >= kc * NR && x.len() >= (rows - 1) * ldx + kc);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA present; `x` and `buf` checked above, `c` by the caller.
        unsafe {
            match rows {
                6 => avx::tile::<6>(x, ldx, buf, kc, c, ldc, first),
                5 => avx::tile::<5>(x, ldx, buf, kc, c, ldc, first),
                4 => avx::tile::<4>(x, ldx, buf, kc, c, ldc, first),
                3 => avx::tile::<3>(x, ldx, buf, kc, c, ldc, first),
                2 => avx::tile::<2>(x, ldx, buf, kc, c, ldc, first),
                _ => avx::tile::<1>(x, ldx, buf, kc, c, ldc, first),
            }
        }
        return;
    }
    for r in 0..rows {
        let mut acc = [0f32; NR];
        for kk in 0..kc {
            let a = x[r * ldx + kk];
            for (j, v) in acc.iter_mut().enumerate() {
                *v += a * buf[kk * NR + j];
            }
        }
        for (j, v) in acc.iter().enumerate() {
            // SAFETY: the caller's contract on `c`.
            let p = unsafe { c.add(r * ldc + j) };
            // SAFETY: `p` is inside `c`'s rows by the same contract.
            unsafe { *p = if first { *v } else { *p + *v } };
        }
    }
}

/// The scalar reference product over dequantised rows.
pub fn gemm_ref(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let (m, k) = (w.rows(), w.cols());
    let mut row = vec![0f32; k];
    for j in 0..m {
        dequantize_row(w.qtype(), w.row(j), &mut row);
        for i in 0..n {
            out[i * m + j] = row.iter().zip(&x[i * k..(i + 1) * k]).map(|(a, b)| a * b).sum();
        }
    }
}

/// Sum of the 8 lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn hsum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// `x · w` over `k` floats (w may be unaligned).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_f32(x: *const f32, w: *const f32, k: usize) -> f32 {
    use std::arch::x86_64::*;
    let k32 = k / 32 * 32;
    let (mut a, mut b, mut c, mut d) =
        (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < k32 {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), _mm256_loadu_ps(w.add(i)), a);
        b = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i + 8)), _mm256_loadu_ps(w.add(i + 8)), b);
        c = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i + 16)), _mm256_loadu_ps(w.add(i + 16)), c);
        d = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i + 24)), _mm256_loadu_ps(w.add(i + 24)), d);
        i += 32;
    }
    let mut s = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    while i < k {
        s += *x.add(i) * std::ptr::read_unaligned(w.add(i));
        i += 1;
    }
    s
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx {
    use super::NR;
    use std::arch::x86_64::*;

    /// The 8×8 transpose of eight registers (the panel packers of both GEMMs).
    #[inline(always)]
    pub(in super::super) unsafe fn transpose8_regs(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// An 8×8 block from `src` (row stride `ls`) into `dst` transposed (row stride `ld`).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose8(src: *const f32, ls: usize, dst: *mut f32, ld: usize) {
        let out = transpose8_regs(std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * ls))));
        for (i, v) in out.iter().enumerate() {
            _mm256_storeu_ps(dst.add(i * ld), *v);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile<const R: usize>(
        x: &[f32],
        ldx: usize,
        buf: &[f32],
        kc: usize,
        c: *mut f32,
        ldc: usize,
        first: bool,
    ) {
        let mut c0 = [_mm256_setzero_ps(); R];
        let mut c1 = [_mm256_setzero_ps(); R];
        let xp = x.as_ptr();
        let bp = buf.as_ptr();
        for kk in 0..kc {
            let b0 = _mm256_loadu_ps(bp.add(kk * NR));
            let b1 = _mm256_loadu_ps(bp.add(kk * NR + 8));
            for r in 0..R {
                let a = _mm256_broadcast_ss(&*xp.add(r * ldx + kk));
                c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
                c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
            }
        }
        for r in 0..R {
            let p = c.add(r * ldc);
            if first {
                _mm256_storeu_ps(p, c0[r]);
                _mm256_storeu_ps(p.add(8), c1[r]);
            } else {
                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c0[r]));
                _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), c1[r]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testdata::data;

    #[test]
    fn matches_reference_for_every_format_and_ragged_shapes() {
        for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let ragged_k: &[(usize, usize, usize)] = if t == QType::F32 { &[(3, 21, 19), (8, 13, 33)] } else { &[] };
            for &(n, k, m) in
                [(2, 32, 5), (7, 64, 17), (13, 288, 33), (6, 576, 16), (37, 320, 40)].iter().chain(ragged_k)
            {
                let w = QMatrix::quantize(t, m, k, &data(m * k, (n * m) as u64)).unwrap();
                let x = data(n * k, 5);
                let mut got = vec![0f32; n * m];
                gemm(&w, &x, n, &mut got);
                let mut want = vec![0f32; n * m];
                gemm_ref(&w, &x, n, &mut want);
                for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{t:?} n{n} k{k} m{m} [{i}]: {g} vs {e}");
                }
            }
        }
    }
}
