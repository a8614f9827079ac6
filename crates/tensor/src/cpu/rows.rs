//! What the few-row decode kernels (`gemv_rows`, i16 activations; `gemv_rows8`, 8-bit activations on AVX-VNNI)
//! share: how many rows a step takes, and the per-group pieces of their inner loops.

/// Most activation rows one pass takes; more go to the panel GEMM.
pub const MAX_ROWS: usize = 8;

#[cfg(target_arch = "x86_64")]
pub(super) mod avx {
    use std::arch::x86_64::*;

    /// The weight row's eight block scales from block `g` times each activation row's: `d_w · d_x` per lane. Lanes
    /// past the row's last block read its own quants (scales come first in a row) and are never used.
    #[inline(always)]
    pub(in super::super) unsafe fn group_scales<const N: usize>(
        p0: *const u8,
        g: usize,
        dx: &[*const f32; N],
    ) -> [__m256; N] {
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(p0.add(2 * g) as *const __m128i));
        // (Loops, not closures, over N: a closure would not inherit the caller's target features.)
        let mut s = [_mm256_setzero_ps(); N];
        for i in 0..N {
            s[i] = _mm256_mul_ps(dw, _mm256_loadu_ps(dx[i].add(g)));
        }
        s
    }

    /// Bytes `from..to` of a row ahead, a cache line at a time (the quants of the group being computed, two rows on,
    /// fetched while this row computes, as the one-row kernel does).
    #[inline(always)]
    pub(in super::super) unsafe fn prefetch(ahead: Option<*const u8>, from: usize, to: usize) {
        if let Some(next) = ahead {
            let mut o = from;
            while o < to {
                _mm_prefetch::<_MM_HINT_T0>(next.add(o) as *const i8);
                o += 64;
            }
        }
    }

    /// Q4_1's minimums of blocks `g..g + nbg` times each activation row's block sums, into `accm`.
    #[inline(always)]
    pub(in super::super) unsafe fn q4_1_mins<const N: usize>(
        p0: *const u8,
        nb: usize,
        g: usize,
        nbg: usize,
        xsum: &[*const f32; N],
        accm: &mut [__m256; N],
    ) {
        let lane_idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nbg as i32), lane_idx));
        let mw = _mm256_and_ps(_mm256_cvtph_ps(_mm_loadu_si128(p0.add(2 * nb + 2 * g) as *const __m128i)), keep);
        for i in 0..N {
            accm[i] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xsum[i].add(g)), accm[i]);
        }
    }
}
