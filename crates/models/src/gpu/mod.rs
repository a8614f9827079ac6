//! The GPU backends (gpu-bf16, gpu-q8, gpu-q4): every architecture runs one shared decoder (`decoder`) over
//! weights uploaded from the CPU loader's matrices, with its KV cache in pages of a pool the model owns and each
//! sequence's [`SeqState`](crate::SeqState) holds page ids of.
//!
//! Each architecture's `arch/<name>/gpu.rs` only says how its tensors map onto the decoder's parts; the loader, the
//! config checks and the refusals are the CPU path's, so a model refused on the CPU is refused here the same way.

mod blocks;
mod decoder;
mod delta;
mod mla;
mod moe;
mod pages;
mod plan;
mod scratch;
mod slots;
mod upload;

pub(crate) use blocks::{Activation, AttnBlock, DenseMlp, GqaAttn, Layer, MlpBlock, Norm};
pub(crate) use decoder::{GpuDecoder, Parts};
pub(crate) use delta::{DeltaAttn, DeltaShape, GatedAttn};
pub(crate) use mla::{MlaAttn, MlaQ, MlaShape};
pub(crate) use moe::MoeMlp;
pub use pages::Pages;
pub use slots::{Slot, SlotPool};
pub(crate) use upload::Uploader;

use crate::error::ModelError;
use crate::tensors::{six_bit, target, Role};
use kvad_tensor::cpu::QType;
use kvad_tensor::cuda::{DevFormat, GpuError};
use kvad_tensor::BackendKind;

impl From<GpuError> for ModelError {
    fn from(e: GpuError) -> Self {
        ModelError::Gpu(e.to_string())
    }
}

/// The device format a matrix of this role is quantised to on upload, when it arrives as bf16/f32; Q6 also takes
/// a Q8_0 matrix of 6-bit quants (the loader's, `tensors::six_bit`) into 6 bits.
pub(crate) fn device_format(backend: BackendKind, role: Role) -> Option<DevFormat> {
    match target(backend, role) {
        QType::Q8_0 if six_bit(backend, role) => Some(DevFormat::Q6),
        QType::Q8_0 => Some(DevFormat::Q8),
        QType::Q4_0 => Some(DevFormat::Q4),
        _ => None,
    }
}

/// The directory NVRTC's output is cached in: beside the quantised cache when there is one.
pub(crate) fn kernel_cache_dir(cache_dir: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
    cache_dir.map(|d| d.join("kernels"))
}
