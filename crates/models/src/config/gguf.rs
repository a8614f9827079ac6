//! The typed config from GGUF metadata (`general.architecture` and its `<arch>.*` keys).

use super::ModelConfig;
use crate::error::ModelError;
use crate::weights::GgufFile;

/// Reads and checks the model config of a GGUF file.
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig, ModelError> {
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            ModelError::refused("general.architecture", "missing", "a GGUF model must name its architecture")
        })?
        .to_string();
    match crate::arch::registry::by_gguf_arch(&arch) {
        Some(entry) => (entry.from_gguf)(g, &arch),
        None => Err(ModelError::refused(
            "general.architecture",
            &arch,
            format!("GGUF files of {} are read", crate::arch::registry::all_names(|e| e.gguf_archs)),
        )),
    }
}
