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

/// Which encoding of the 256-bit integer dot products (`vpdpbusd`, `vpdpwssd`) the processor has: the same
/// operations come as AVX-VNNI (VEX; Intel client cores since Alder Lake, AMD Zen 5) and as AVX-512 VNNI with
/// AVX-512VL (EVEX; Intel server cores since Cascade Lake, AMD Zen 4), so each kernel that uses them is compiled
/// once for each and this picks one. A host with both takes the VEX form (no AVX-512 state to save).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vnni {
    /// AVX-VNNI.
    Avx,
    /// AVX-512 VNNI and AVX-512VL, used on 256-bit registers only.
    Avx512,
}

/// The VNNI form this processor has (checked once; `KVAD_NO_VNNI=1` says none, taking the `vpmaddwd` path).
#[cfg(target_arch = "x86_64")]
pub fn vnni() -> Option<Vnni> {
    use std::sync::OnceLock;
    static HAS: OnceLock<Option<Vnni>> = OnceLock::new();
    *HAS.get_or_init(|| if super::config::no_vnni() || !has_avx2() { None } else { vnni_forms().first().copied() })
}

/// Every VNNI form the processor has, preferred first (tests compare each against the others).
#[cfg(target_arch = "x86_64")]
pub fn vnni_forms() -> Vec<Vnni> {
    let mut v = Vec::new();
    if is_x86_feature_detected!("avxvnni") {
        v.push(Vnni::Avx);
    }
    if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
        v.push(Vnni::Avx512);
    }
    v
}

/// Whether the processor has a VNNI form ([`vnni`]).
#[cfg(target_arch = "x86_64")]
pub fn has_vnni() -> bool {
    vnni().is_some()
}
