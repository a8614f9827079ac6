//! The GPU's settings from the environment, read once, here and nowhere else: [`Gpu::shared`] reads them when it
//! opens the device, and the [`Gpu`] holds them for whoever needs one ([`Gpu::tuning`]).
//!
//! [`Gpu`]: super::Gpu
//! [`Gpu::shared`]: super::Gpu::shared
//! [`Gpu::tuning`]: super::Gpu::tuning

/// What the environment sets for the GPU. Every field, its variable, its default and what it is for:
///
/// | field       | variable             | default           | for                                              |
/// |-------------|----------------------|-------------------|--------------------------------------------------|
/// | `kv_tokens` | `KVAD_GPU_KV_TOKENS` | None: from memory | the KV page pool's size in tokens ¹              |
/// | `trace`     | `KVAD_GPU_TRACE`     | None: no trace    | the kernel trace's file ²                        |
///
/// ¹ Unset, the models' GPU decoder sizes the pool at 40% of the device memory free at load (at least 65,536
/// tokens, at most 64 full contexts); either way at most half the free memory.
/// ² The kernels are then compiled with their trace records (`KVAD_TRACE`; otherwise they carry no trace code), and
/// `Gpu::trace_dump` writes them there, for `scripts/gpu/trace.py`.
///
/// Nothing else about the GPU path is read from the environment: the kernels each shape runs are fixed by the code
/// (the measuring switches that once chose others are listed in docs/performance-gpu.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Tokens the KV page pool should hold (`KVAD_GPU_KV_TOKENS`); None: the decoder's default.
    pub kv_tokens: Option<usize>,
    /// The kernel trace's file (`KVAD_GPU_TRACE`); None: no trace, and the kernels carry no trace code.
    pub trace: Option<String>,
}

impl Tuning {
    /// The settings as the environment gives them (a value that does not parse is as if unset).
    pub fn from_env() -> Tuning {
        Tuning {
            kv_tokens: std::env::var("KVAD_GPU_KV_TOKENS").ok().and_then(|v| v.parse().ok()),
            trace: std::env::var("KVAD_GPU_TRACE").ok(),
        }
    }
}
