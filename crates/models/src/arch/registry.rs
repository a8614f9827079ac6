//! Every architecture kvad runs, in one table: the names it is known by (HF classes, `model_type`s, GGUF
//! architectures), the backends that run it, and the functions that read its config and build it. The loader,
//! `kvad arch`, the default-backend choice, the Hub search's status and `kvad doctor` all read this table, so adding
//! an architecture is its folder under `arch/` and one line here.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::tensors::Tensors;
use crate::weights::GgufFile;
use crate::CausalLm;
use kvad_tensor::BackendKind;
use serde_json::Value;
use std::sync::Arc;

/// The architecture families: one folder each under `arch/`. (Stored in the quantised cache's config, so a name
/// once written stays.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArchKind {
    /// Llama 2/3, Mistral, Qwen2, Qwen3, SmolLM2: pre-norm decoder, RMSNorm, RoPE, SwiGLU, GQA.
    Llama,
    /// GPT-2: LayerNorm, learned positions, GELU, fused qkv.
    Gpt2,
}

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

/// Every architecture, one line each.
pub static ARCHS: &[&ArchEntry] = &[&crate::arch::gpt2::ENTRY, &crate::arch::llama::ENTRY];

/// Architectures published models use that this build does not implement yet: refused by class name, saying so.
pub const NOT_YET: &[&str] = &[
    "Qwen3MoeForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Idefics3ForConditionalGeneration",
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "Qwen3NextForCausalLM",
];

/// The entry of a family.
pub fn entry(kind: ArchKind) -> &'static ArchEntry {
    ARCHS.iter().find(|e| e.kind == kind).expect("every ArchKind has a registry line")
}

/// The entry reading this HF class.
pub fn by_hf_class(class: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.hf_classes.contains(&class))
}

/// The entry of this HF `model_type`.
pub fn by_model_type(model_type: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.model_types.contains(&model_type))
}

/// The entry reading this GGUF architecture.
pub fn by_gguf_arch(arch: &str) -> Option<&'static ArchEntry> {
    ARCHS.iter().copied().find(|e| e.gguf_archs.contains(&arch))
}

/// Every name of a kind across the registry, joined for a refusal's message.
pub(crate) fn all_names(names: impl Fn(&ArchEntry) -> &'static [&'static str]) -> String {
    let v: Vec<&str> = ARCHS.iter().flat_map(|e| names(e).iter().copied()).collect();
    v.join(", ")
}

/// The GGUF reader of a family that has no GGUF layout in llama.cpp kvad reads.
pub(crate) fn no_gguf(_: &GgufFile, arch: &str) -> Result<ModelConfig, ModelError> {
    Err(ModelError::refused("general.architecture", arch, "GGUF files of this architecture are not read"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_line_and_no_name_is_claimed_twice() {
        for kind in [ArchKind::Llama, ArchKind::Gpt2] {
            assert_eq!(ARCHS.iter().filter(|e| e.kind == kind).count(), 1, "{kind:?}");
        }
        for names in [
            ARCHS.iter().flat_map(|e| e.hf_classes.iter()).collect::<Vec<_>>(),
            ARCHS.iter().flat_map(|e| e.model_types.iter()).collect(),
            ARCHS.iter().flat_map(|e| e.gguf_archs.iter()).collect(),
        ] {
            let mut sorted = names.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "a name in two lines: {names:?}");
        }
        for class in NOT_YET {
            assert!(by_hf_class(class).is_none(), "{class} is both implemented and not yet");
        }
        assert_eq!(by_model_type("qwen3").map(|e| e.kind), Some(ArchKind::Llama));
        assert_eq!(by_gguf_arch("qwen2").map(|e| e.kind), Some(ArchKind::Llama));
        assert_eq!(by_hf_class("GPT2LMHeadModel").map(|e| e.kind), Some(ArchKind::Gpt2));
        assert!(by_model_type("mamba").is_none());
    }
}
