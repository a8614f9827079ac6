//! Block formats of quantised weights: the numbers are GGUF's (blocks of 32 weights with an f16 scale), the byte
//! layout is kvad's own, chosen for the decode kernel.
//!
//! - `Q8_0`: weight = `d·q`, q an i8.
//! - `Q4_0`: weight = `d·(q − 8)`, q a nibble.
//! - `Q4_1`: weight = `d·q + m`, q a nibble.
//!
//! A row of `nb = cols/32` blocks is stored as `[nb f16 scales][nb f16 minimums, Q4_1 only][quants]`: eight
//! scales come in with one load and one conversion, and the quants of a row are one contiguous stream (Q8: 32 bytes
//! a block; Q4: 16 bytes a block, weight `j` in the low nibble of byte `j`, weight `j + 16` in its high nibble, as
//! GGUF packs them). GGUF blocks convert to it and back without touching a value ([`from_ggml`], [`to_ggml`]).
//!
//! These functions are the reference the SIMD kernels are tested against.

use half::f16;

/// Weights per block.
pub const BLOCK: usize = 32;

/// How a matrix's weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QType {
    /// Plain f32.
    F32,
    /// 8-bit blocks.
    Q8_0,
    /// 4-bit symmetric blocks.
    Q4_0,
    /// 4-bit blocks with a minimum.
    Q4_1,
    /// bf16, for the GPU's bf16 backend (the CPU kernels read it only through [`dequantize_row`]).
    BF16,
}

impl QType {
    /// Bytes of a row of `cols` weights, or None when `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        match self {
            QType::F32 => return Some(cols * 4),
            QType::BF16 => return Some(cols * 2),
            _ => {}
        }
        cols.is_multiple_of(BLOCK).then(|| {
            let nb = cols / BLOCK;
            nb * (self.scale_arrays() * 2 + self.quant_bytes())
        })
    }

    /// f16 arrays per row (scales, and minimums for Q4_1).
    pub(crate) fn scale_arrays(self) -> usize {
        match self {
            QType::Q4_1 => 2,
            _ => 1,
        }
    }

    /// Quant bytes per block.
    pub(crate) fn quant_bytes(self) -> usize {
        match self {
            QType::Q8_0 => 32,
            _ => 16,
        }
    }

    /// The name GGUF gives the numbers.
    pub fn name(self) -> &'static str {
        match self {
            QType::F32 => "F32",
            QType::Q8_0 => "Q8_0",
            QType::Q4_0 => "Q4_0",
            QType::Q4_1 => "Q4_1",
            QType::BF16 => "BF16",
        }
    }

    /// The inverse of [`QType::name`].
    pub fn from_name(s: &str) -> Option<QType> {
        [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::BF16].into_iter().find(|t| t.name() == s)
    }

    /// Bytes of one GGUF block of this type (34, 18, 20).
    pub fn ggml_block_bytes(self) -> usize {
        match self {
            QType::F32 => 4,
            QType::BF16 => 2,
            QType::Q8_0 => 34,
            QType::Q4_0 => 18,
            QType::Q4_1 => 20,
        }
    }
}

/// The parts of one stored row.
pub(crate) struct RowParts<'a> {
    pub d: &'a [u8],
    pub m: &'a [u8],
    pub q: &'a [u8],
}

/// Splits a stored row into scales, minimums and quants.
pub(crate) fn parts(t: QType, row: &[u8], nb: usize) -> RowParts<'_> {
    let (d, rest) = row.split_at(nb * 2);
    let (m, q) = if t == QType::Q4_1 { rest.split_at(nb * 2) } else { rest.split_at(0) };
    RowParts { d, m, q }
}

/// Little-endian f16 values (`2·out.len()` bytes) to f32, eight at a time with F16C where the processor has it.
pub(crate) fn f16_to_f32(bytes: &[u8], out: &mut [f32]) {
    assert!(bytes.len() >= 2 * out.len());
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn eight(src: *const u8, dst: *mut f32) {
            use std::arch::x86_64::*;
            _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(src as *const __m128i)));
        }
        while i + 8 <= out.len() {
            // SAFETY: F16C present; 16 bytes from 2i and 8 floats from i are in bounds (asserted above).
            unsafe { eight(bytes.as_ptr().add(2 * i), out.as_mut_ptr().add(i)) };
            i += 8;
        }
    }
    for (j, o) in out.iter_mut().enumerate().skip(i) {
        *o = f16_at(bytes, j);
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32()
}

fn put_f16(b: &mut [u8], i: usize, v: f32) {
    b[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Quantises a row (a multiple of 32 long, or any length for F32) into `out` (`row_bytes` long).
pub fn quantize_row(t: QType, x: &[f32], out: &mut [u8]) {
    if t == QType::BF16 {
        for (o, v) in out.chunks_exact_mut(2).zip(x) {
            o.copy_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
        }
        return;
    }
    if t == QType::F32 {
        for (o, v) in out.chunks_exact_mut(4).zip(x) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    let nb = x.len() / BLOCK;
    let (d, rest) = out.split_at_mut(nb * 2);
    let (m, q) = if t == QType::Q4_1 { rest.split_at_mut(nb * 2) } else { rest.split_at_mut(0) };
    for (b, blk) in x.chunks_exact(BLOCK).enumerate() {
        match t {
            QType::Q8_0 => {
                let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                let s = amax / 127.0;
                let id = if s != 0.0 { 1.0 / s } else { 0.0 };
                put_f16(d, b, s);
                for (o, v) in q[b * 32..(b + 1) * 32].iter_mut().zip(blk) {
                    *o = (v * id).round() as i8 as u8;
                }
            }
            QType::Q4_0 => {
                // The value of largest magnitude maps to -8, so its sign is kept exactly.
                let max = blk.iter().fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let s = max / -8.0;
                let id = if s != 0.0 { 1.0 / s } else { 0.0 };
                put_f16(d, b, s);
                for j in 0..16 {
                    let q0 = ((blk[j] * id + 8.5) as i32).clamp(0, 15) as u8;
                    let q1 = ((blk[j + 16] * id + 8.5) as i32).clamp(0, 15) as u8;
                    q[b * 16 + j] = q0 | (q1 << 4);
                }
            }
            QType::Q4_1 => {
                let lo = blk.iter().copied().fold(f32::INFINITY, f32::min);
                let hi = blk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let s = (hi - lo) / 15.0;
                let id = if s != 0.0 { 1.0 / s } else { 0.0 };
                put_f16(d, b, s);
                put_f16(m, b, lo);
                for j in 0..16 {
                    let q0 = (((blk[j] - lo) * id + 0.5) as i32).clamp(0, 15) as u8;
                    let q1 = (((blk[j + 16] - lo) * id + 0.5) as i32).clamp(0, 15) as u8;
                    q[b * 16 + j] = q0 | (q1 << 4);
                }
            }
            QType::F32 | QType::BF16 => unreachable!(),
        }
    }
}

/// Quants the 6-bit form holds (the GPU's Q6: 6-bit two's complement): −32..=31; [`quantize_row_6bit`] writes
/// −31..=31.
pub const SIX_BIT: std::ops::RangeInclusive<i8> = -32..=31;

/// Quantises a row into Q8_0's layout with quants in [`SIX_BIT`] only: the 6-bit output head of the q4 backends
/// (llama.cpp's own Q4_0 files hold theirs as Q6_K), which the GPU stores in 6 bits (26 bytes a block where Q8_0
/// takes 34) and the CPU runs as the Q8_0 it is — one set of values on both. Q8_0's rounding at 6 bits: scale
/// amax/31, quants −31..=31, every weight within half a step (Q4_0's −32 for the largest magnitude would put a
/// value of the other sign a whole step off).
pub fn quantize_row_6bit(x: &[f32], out: &mut [u8]) {
    let nb = x.len() / BLOCK;
    let (d, q) = out.split_at_mut(nb * 2);
    for (b, blk) in x.chunks_exact(BLOCK).enumerate() {
        let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let s = amax / 31.0;
        let id = if s != 0.0 { 1.0 / s } else { 0.0 };
        put_f16(d, b, s);
        for (o, v) in q[b * 32..(b + 1) * 32].iter_mut().zip(blk) {
            *o = (v * id).round() as i8 as u8;
        }
    }
}

/// Whether every quant of a stored Q8_0 row lies in [`SIX_BIT`] (a row [`quantize_row_6bit`] wrote).
pub fn q8_row_is_6bit(row: &[u8], nb: usize) -> bool {
    row[nb * 2..].iter().all(|&q| SIX_BIT.contains(&(q as i8)))
}

/// Dequantises a row of `out.len()` weights.
pub fn dequantize_row(t: QType, row: &[u8], out: &mut [f32]) {
    if t == QType::BF16 {
        for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
            *o = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
        }
        return;
    }
    if t == QType::F32 {
        for (o, b) in out.iter_mut().zip(row.chunks_exact(4)) {
            *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        return;
    }
    let nb = out.len() / BLOCK;
    let p = parts(t, row, nb);
    #[cfg(target_arch = "x86_64")]
    if super::features::has_avx2() {
        // SAFETY: AVX2/F16C present; `parts` split the row into nb scales (and minimums) and nb blocks of quants.
        unsafe { avx::dequantize(t, &p, nb, out) };
        return;
    }
    dequantize_blocks(t, &p, out);
}

/// The scalar dequantisation (the reference; the SIMD path does the same multiply then add, so the bits agree).
fn dequantize_blocks(t: QType, p: &RowParts, out: &mut [f32]) {
    for (b, o) in out.chunks_exact_mut(BLOCK).enumerate() {
        let d = f16_at(p.d, b);
        match t {
            QType::Q8_0 => {
                for (v, &q) in o.iter_mut().zip(&p.q[b * 32..(b + 1) * 32]) {
                    *v = d * (q as i8) as f32;
                }
            }
            QType::Q4_0 | QType::Q4_1 => {
                let (off, m) = if t == QType::Q4_0 { (8, 0.0) } else { (0, f16_at(p.m, b)) };
                for j in 0..16 {
                    let byte = p.q[b * 16 + j];
                    o[j] = d * ((byte & 15) as i32 - off) as f32 + m;
                    o[j + 16] = d * ((byte >> 4) as i32 - off) as f32 + m;
                }
            }
            QType::F32 | QType::BF16 => unreachable!(),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use super::{QType, RowParts, BLOCK};
    use std::arch::x86_64::*;

    /// `out[b·32 + j] = d_b·(q − off) + m_b`, eight blocks' scales converted per load.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn dequantize(t: QType, p: &RowParts, nb: usize, out: &mut [f32]) {
        assert!(out.len() >= nb * BLOCK && p.d.len() >= nb * 2 && p.q.len() >= nb * t.quant_bytes());
        let o = out.as_mut_ptr();
        let (mut d8, mut m8) = ([0f32; 8], [0f32; 8]);
        for b in 0..nb {
            if b % 8 == 0 {
                let n = (nb - b).min(8);
                let (mut dh, mut mh) = ([0u8; 16], [0u8; 16]);
                dh[..2 * n].copy_from_slice(&p.d[2 * b..2 * (b + n)]);
                _mm256_storeu_ps(d8.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(dh.as_ptr() as *const __m128i)));
                if t == QType::Q4_1 {
                    mh[..2 * n].copy_from_slice(&p.m[2 * b..2 * (b + n)]);
                    _mm256_storeu_ps(m8.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(mh.as_ptr() as *const __m128i)));
                }
            }
            let d = _mm256_set1_ps(d8[b % 8]);
            let m = _mm256_set1_ps(if t == QType::Q4_1 { m8[b % 8] } else { 0.0 });
            let dst = o.add(b * BLOCK);
            let put = |i: usize, q: __m256i| {
                _mm256_storeu_ps(dst.add(8 * i), _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), m));
            };
            match t {
                QType::Q8_0 => {
                    let q = p.q.as_ptr().add(b * 32);
                    for i in 0..4 {
                        put(i, _mm256_cvtepi8_epi32(_mm_loadl_epi64(q.add(8 * i) as *const __m128i)));
                    }
                }
                _ => {
                    let raw = _mm_loadu_si128(p.q.as_ptr().add(b * 16) as *const __m128i);
                    let mask = _mm_set1_epi8(0x0f);
                    let lo = _mm_and_si128(raw, mask);
                    let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
                    let off = _mm256_set1_epi32(if t == QType::Q4_0 { 8 } else { 0 });
                    put(0, _mm256_sub_epi32(_mm256_cvtepu8_epi32(lo), off));
                    put(1, _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), off));
                    put(2, _mm256_sub_epi32(_mm256_cvtepu8_epi32(hi), off));
                    put(3, _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), off));
                }
            }
        }
    }
}

/// Converts a row of GGUF blocks (`cols/32` blocks of `ggml_block_bytes`) into kvad's layout, value for value.
pub fn from_ggml(t: QType, ggml: &[u8], out: &mut [u8]) {
    if t == QType::F32 || t == QType::BF16 {
        out.copy_from_slice(ggml);
        return;
    }
    let bb = t.ggml_block_bytes();
    let nb = ggml.len() / bb;
    let qb = t.quant_bytes();
    let head = if t == QType::Q4_1 { 4 } else { 2 };
    let (d, rest) = out.split_at_mut(nb * 2);
    let (m, q) = if t == QType::Q4_1 { rest.split_at_mut(nb * 2) } else { rest.split_at_mut(0) };
    for (b, blk) in ggml.chunks_exact(bb).enumerate() {
        d[2 * b..2 * b + 2].copy_from_slice(&blk[..2]);
        if t == QType::Q4_1 {
            m[2 * b..2 * b + 2].copy_from_slice(&blk[2..4]);
        }
        q[b * qb..(b + 1) * qb].copy_from_slice(&blk[head..head + qb]);
    }
}

/// Converts a row of kvad's layout back into GGUF blocks (for tests and export).
pub fn to_ggml(t: QType, row: &[u8], cols: usize, out: &mut [u8]) {
    if t == QType::F32 || t == QType::BF16 {
        out.copy_from_slice(row);
        return;
    }
    let nb = cols / BLOCK;
    let (bb, qb) = (t.ggml_block_bytes(), t.quant_bytes());
    let head = if t == QType::Q4_1 { 4 } else { 2 };
    let p = parts(t, row, nb);
    for (b, blk) in out.chunks_exact_mut(bb).enumerate() {
        blk[..2].copy_from_slice(&p.d[2 * b..2 * b + 2]);
        if t == QType::Q4_1 {
            blk[2..4].copy_from_slice(&p.m[2 * b..2 * b + 2]);
        }
        blk[head..head + qb].copy_from_slice(&p.q[b * qb..(b + 1) * qb]);
    }
}

/// The scalar reference dot product of a stored row with f32 activations.
pub fn dot_row_ref(t: QType, row: &[u8], x: &[f32]) -> f32 {
    let mut w = vec![0f32; x.len()];
    dequantize_row(t, row, &mut w);
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        super::super::testdata::data(n, seed).into_iter().map(|v| v * 4.0).collect()
    }

    #[test]
    fn simd_dequantisation_equals_the_scalar_reference_bit_for_bit() {
        for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            for cols in [32, 64, 288, 576, 32 * 13] {
                let x = data(cols, cols as u64);
                let mut q = vec![0u8; t.row_bytes(cols).unwrap()];
                quantize_row(t, &x, &mut q);
                let mut got = vec![0f32; cols];
                dequantize_row(t, &q, &mut got);
                let mut want = vec![0f32; cols];
                dequantize_blocks(t, &parts(t, &q, cols / BLOCK), &mut want);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{t:?} {cols}"
                );
            }
        }
    }

    #[test]
    fn round_trip_error_is_bounded_by_the_step() {
        // Q4_0 maps the largest magnitude to -8, so values of the other sign clamp at +7: up to a whole step.
        for (t, steps) in [(QType::Q8_0, 254.0), (QType::Q4_0, 7.5), (QType::Q4_1, 15.0)] {
            let x = data(32 * 40, 3);
            let mut q = vec![0u8; t.row_bytes(x.len()).unwrap()];
            quantize_row(t, &x, &mut q);
            let mut y = vec![0f32; x.len()];
            dequantize_row(t, &q, &mut y);
            for (bx, by) in x.chunks(32).zip(y.chunks(32)) {
                let range = bx.iter().fold(0f32, |m, v| m.max(v.abs())) * 2.0;
                // half a quantisation step, plus f16 rounding of the scale
                let bound = range / steps * 0.5 * 1.01 + 1e-3 * range;
                for (a, b) in bx.iter().zip(by) {
                    assert!((a - b).abs() <= bound, "{t:?}: {a} vs {b} (bound {bound})");
                }
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_back_exactly() {
        let x = [1.0f32, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, -2.5e-3, 3.0e38];
        let mut q = vec![0u8; QType::BF16.row_bytes(x.len()).unwrap()];
        quantize_row(QType::BF16, &x, &mut q);
        let mut y = vec![0f32; x.len()];
        dequantize_row(QType::BF16, &q, &mut y);
        // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1); 1 + 3·2^-8 ties up to 1 + 2^-6.
        assert_eq!(y[0], 1.0);
        assert_eq!(y[1], 1.0);
        assert_eq!(y[2], 1.0 + 1.0 / 64.0);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= a.abs() / 128.0, "{a} vs {b}");
        }
    }

    #[test]
    fn six_bit_rows_are_q8_rows_within_half_a_six_bit_step() {
        let x = data(32 * 9, 5);
        let mut q = vec![0u8; QType::Q8_0.row_bytes(x.len()).unwrap()];
        quantize_row_6bit(&x, &mut q);
        assert!(q8_row_is_6bit(&q, 9));
        let mut y = vec![0f32; x.len()];
        dequantize_row(QType::Q8_0, &q, &mut y);
        for (bx, by) in x.chunks(32).zip(y.chunks(32)) {
            let amax = bx.iter().fold(0f32, |a, v| a.max(v.abs()));
            // half a step of amax/31, plus the f16 rounding of the scale
            let bound = amax / 31.0 * 0.5 * 1.01 + 1e-6;
            for (a, b) in bx.iter().zip(by) {
                assert!((a - b).abs() <= bound, "{a} vs {b} (bound {bound})");
            }
        }
        // The 8-bit quantiser's rows use the whole i8 range, so they are not taken for 6-bit ones.
        quantize_row(QType::Q8_0, &x, &mut q);
        assert!(!q8_row_is_6bit(&q, 9));
    }

    #[test]
    fn zero_blocks_stay_zero_and_f32_is_exact() {
        for t in [QType::F32, QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let mut x = vec![0f32; 64];
            x[40] = 1.5;
            let mut q = vec![0u8; t.row_bytes(64).unwrap()];
            quantize_row(t, &x, &mut q);
            let mut y = vec![9f32; 64];
            dequantize_row(t, &q, &mut y);
            assert!(y[..32].iter().all(|&v| v == 0.0), "{t:?}");
            assert!((y[40] - 1.5).abs() < 0.11, "{t:?} {}", y[40]);
        }
    }

    #[test]
    fn ggml_blocks_convert_both_ways_without_changing_a_value() {
        for t in [QType::Q8_0, QType::Q4_0, QType::Q4_1] {
            let x = data(32 * 7, 11);
            let mut ours = vec![0u8; t.row_bytes(x.len()).unwrap()];
            quantize_row(t, &x, &mut ours);
            let mut ggml = vec![0u8; 7 * t.ggml_block_bytes()];
            to_ggml(t, &ours, x.len(), &mut ggml);
            let mut back = vec![0u8; ours.len()];
            from_ggml(t, &ggml, &mut back);
            assert_eq!(back, ours, "{t:?}");
            // and the GGUF block really is GGUF's: scale first, then the quants
            let mut y = vec![0f32; x.len()];
            dequantize_row(t, &ours, &mut y);
            let d = f16::from_le_bytes([ggml[0], ggml[1]]).to_f32();
            let q0 = if t == QType::Q8_0 { ggml[2] as i8 as f32 } else { 0.0 };
            if t == QType::Q8_0 {
                assert_eq!(y[0], d * q0);
            }
        }
    }
}
