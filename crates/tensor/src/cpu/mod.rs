//! CPU kernels: f32 matrix products and the elementwise steps around them.
//!
//! Every SIMD kernel has a scalar twin that is the reference in tests; the SIMD path is chosen at run time so one
//! binary runs on any x86-64 and uses AVX2+FMA where the processor has them.

pub mod gemm;
pub mod ops;
pub mod pool;

pub use gemm::matmul_t;
