//! What a CPU KV cache stores a key or value as: f32 (the reference backend, whose bits must not move) or f16.
//!
//! Decode attention reads every cached key and value of every layer once a token; at a few hundred positions that
//! is a fifth of what the quantised backends read for their weights, and four replies read four caches. f16 halves
//! it (and the memory a context is charged), at a rounding of 2⁻¹¹ relative, far below what 8- or 4-bit weights
//! already move. The kernels are generic over this trait so the f32 path stays the same code, operation for
//! operation.

/// A KV cache element: convertible from and to f32, and loadable eight at a time into an AVX register.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// The slice as f32 when it already is (the f32 cache reads in place; an f16 one is converted).
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// Appends `src` converted to this type (round to nearest even).
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]);
    /// Writes `src` into `dst` (the same length) as f32 (by F16C where the processor has it).
    fn convert_to_f32(src: &[Self], dst: &mut [f32]);
    /// Appends `src` to `dst` as f32.
    fn extend_to_f32(src: &[Self], dst: &mut Vec<f32>) {
        let start = dst.len();
        dst.resize(start + src.len(), 0.0);
        Self::convert_to_f32(src, &mut dst[start..]);
    }
    /// Eight elements from `p` as f32 lanes. Inlined into the caller, whose target features (AVX2, F16C) it uses.
    ///
    /// # Safety
    /// `p` must point at eight readable elements and the processor must have AVX (and F16C for f16).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl KvElem for f32 {
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]) {
        dst.extend_from_slice(src);
    }
    fn convert_to_f32(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }
}

impl KvElem for half::f16 {
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]) {
        use half::slice::HalfFloatSliceExt;
        let start = dst.len();
        dst.resize(start + src.len(), half::f16::ZERO);
        dst[start..].convert_from_f32_slice(src);
    }
    fn convert_to_f32(src: &[Self], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
}

/// `s` as f32: borrowed when it already is, else converted into `buf`.
pub(crate) fn f32_view<'a, T: KvElem>(s: &'a [T], buf: &'a mut Vec<f32>) -> &'a [f32] {
    match T::as_f32(s) {
        Some(f) => f,
        None => {
            buf.clear();
            T::extend_to_f32(s, buf);
            buf
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rounds_to_nearest_and_loads_back() {
        let src: Vec<f32> = (0..19).map(|i| (i as f32 - 9.0) * 0.3371 + 1e-4).collect();
        let mut h: Vec<half::f16> = Vec::new();
        half::f16::extend_from_f32(&mut h, &src[..7]);
        half::f16::extend_from_f32(&mut h, &src[7..]);
        for (x, y) in src.iter().zip(&h) {
            assert_eq!(y.to_bits(), half::f16::from_f32(*x).to_bits());
            assert!((y.to_f32() - x).abs() <= x.abs() * 2f32.powi(-11));
        }
        #[cfg(target_arch = "x86_64")]
        if super::super::features::has_avx2() {
            let mut out = [0f32; 8];
            // SAFETY: AVX2 and F16C present (has_avx2 checks F16C too); h holds at least 8 elements.
            unsafe { std::arch::x86_64::_mm256_storeu_ps(out.as_mut_ptr(), load(h.as_ptr().add(3))) };
            for i in 0..8 {
                assert_eq!(out[i], h[3 + i].to_f32());
            }
        }
        let mut back = Vec::new();
        half::f16::extend_to_f32(&h, &mut back);
        assert_eq!(back, h.iter().map(|v| v.to_f32()).collect::<Vec<_>>());
        assert!(half::f16::as_f32(&h).is_none());
        assert_eq!(f32::as_f32(&src).map(<[f32]>::len), Some(19));
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load(p: *const half::f16) -> std::arch::x86_64::__m256 {
        half::f16::load8(p)
    }
}
