//! CPU kernels: matrix products over f32 and quantised weights, and the elementwise steps around them.
//!
//! Every SIMD kernel has a scalar twin that is the reference in tests; the SIMD path is chosen at run time so one
//! binary runs on any x86-64 and uses AVX2+FMA+F16C where the processor has them (`KVAD_NO_SIMD=1` forces the
//! scalar path).

pub mod attn;
mod config;
pub mod features;
pub mod gemm;
pub mod gemm_q;
pub mod gemv;
pub mod gemv_rows;
pub mod gemv_rows8;
pub mod kv_elem;
pub mod matmul;
pub mod matrix;
pub mod ops;
pub mod pool;
pub mod quant;
mod rows;

pub use kv_elem::KvElem;
pub use matrix::{Bytes, MatrixError, QMatrix};
pub use quant::QType;

/// Deterministic test data shared by the kernel tests.
#[cfg(test)]
pub(crate) mod testdata {
    /// `n` values in [-0.5, 0.5) from a seeded LCG.
    pub(crate) fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as f32 / (1u64 << 31) as f32 - 0.5
            })
            .collect()
    }
}
