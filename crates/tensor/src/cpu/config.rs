//! The CPU backend's settings from the environment, read here and nowhere else.

/// `KVAD_NO_SIMD=1`: the scalar kernels even where AVX2 is there (to check them against the SIMD ones).
pub(crate) fn no_simd() -> bool {
    std::env::var_os("KVAD_NO_SIMD").is_some()
}

/// `KVAD_NO_VNNI=1`: batched q8/q4 decode keeps i16 activations (`vpmaddwd`), so every reply beside others is bit
/// for bit the reply alone, at about a fifth less batched throughput.
pub(crate) fn no_vnni() -> bool {
    std::env::var_os("KVAD_NO_VNNI").is_some()
}

/// `KVAD_THREADS`: worker threads (default: the physical cores).
pub(crate) fn threads() -> Option<usize> {
    std::env::var("KVAD_THREADS").ok().and_then(|v| v.parse().ok())
}
