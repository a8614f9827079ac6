//! What this processor can do, detected once at run time (and what the environment turns off): every kernel family
//! asks here before taking its SIMD path.

/// Whether this processor has AVX2, FMA and F16C (checked once).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            !super::config::no_simd()
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the processor has AVX-VNNI's `vpdpwssd` (checked once; `KVAD_NO_VNNI=1` takes the `vpmaddwd` path).
#[cfg(target_arch = "x86_64")]
pub fn has_vnni() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| !super::config::no_vnni() && is_x86_feature_detected!("avxvnni"))
}
