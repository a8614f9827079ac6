//! CPU kernels: matrix products over f32 and quantised weights, and the elementwise steps around them.
//!
//! Every SIMD kernel has a scalar twin that is the reference in tests; the SIMD path is chosen at run time so one
//! binary runs on any x86-64 and uses AVX2+FMA+F16C where the processor has them (`KVAD_NO_SIMD=1` forces the
//! scalar path).

pub mod gemm;
pub mod gemv;
pub mod matrix;
pub mod ops;
pub mod pool;
pub mod quant;

pub use matrix::{Bytes, MatrixError, QMatrix};
pub use quant::QType;
