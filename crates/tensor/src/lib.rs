//! kvad-tensor: the numeric floor every model stands on.
//!
//! It knows about numbers, shapes and hardware (CPU kernels, and CUDA kernels compiled at run time) and nothing about
//! models or requests,
//! so a kernel can be tested and benchmarked on its own, and a model can change without touching a kernel.

pub mod backend;
pub mod cpu;
pub mod cuda;

pub use backend::{BackendKind, BackendParseError, Device};
