//! What the registry holds for each architecture ([`ArchEntry`]): the names it is known by, the backends that run it,
//! and the functions that read its config and build it. Kept apart from the registry's table so an architecture's
//! folder names its line's type without naming the table that lists it.

use crate::config::{ArchKind, ModelConfig};
use crate::error::ModelError;
use crate::tensors::Tensors;
use crate::weights::GgufFile;
use crate::CausalLm;
use kvad_tensor::BackendKind;
use serde_json::Value;
use std::sync::Arc;

/// Builds a model from its checked config and tensors, on the CPU or (given a GPU) uploaded to it.
pub(crate) type BuildFn =
    fn(ModelConfig, &mut Tensors<'_>, Option<Arc<kvad_tensor::cuda::Gpu>>) -> Result<Box<dyn CausalLm>, ModelError>;

/// One architecture's line in the registry.
pub struct ArchEntry {
    /// The family.
    pub kind: ArchKind,
    /// Its short name (`kvad arch`).
    pub name: &'static str,
    /// The models it covers, for people.
    pub covers: &'static str,
    /// HF `architectures` class names it reads.
    pub hf_classes: &'static [&'static str],
    /// HF `model_type`s (what the Hub reports before anything is downloaded).
    pub model_types: &'static [&'static str],
    /// GGUF `general.architecture` values it reads.
    pub gguf_archs: &'static [&'static str],
    /// The backends that run it.
    pub backends: &'static [BackendKind],
    /// Weight matrices of one MLP (for the parameter count).
    pub mlp_matrices: usize,
    /// Reads and checks an HF config.json given the class name.
    pub(crate) from_hf: fn(&Value, &str) -> Result<ModelConfig, ModelError>,
    /// Reads and checks a GGUF's metadata given its architecture.
    pub(crate) from_gguf: fn(&GgufFile, &str) -> Result<ModelConfig, ModelError>,
    /// An HF tensor name as a GGUF of this family spells it.
    pub(crate) gguf_name: fn(&str) -> String,
    /// `(n_heads, n_kv_heads)` when a GGUF of this architecture holds q/k rows permuted by llama.cpp's converter.
    pub(crate) gguf_permute: fn(&ModelConfig, &str) -> Option<(usize, usize)>,
    /// Builds the model.
    pub(crate) build: BuildFn,
}

/// The GGUF reader of a family that has no GGUF layout in llama.cpp kvad reads.
pub(crate) fn no_gguf(_: &GgufFile, arch: &str) -> Result<ModelConfig, ModelError> {
    Err(ModelError::refused("general.architecture", arch, "GGUF files of this architecture are not read"))
}
