//! Where a model's files are, classified before anything is read: a directory in the HF layout or one GGUF file.

use crate::error::ModelError;
use std::path::{Path, PathBuf};

/// Where a model's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// A directory in the HF layout: config.json, tokenizer files, *.safetensors.
    HfDir(PathBuf),
    /// One GGUF file holding config, tokenizer and weights.
    Gguf(PathBuf),
}

impl ModelFiles {
    /// Classifies a path: a `.gguf` file, or a directory with config.json.
    pub fn detect(path: &Path) -> Result<Self, ModelError> {
        let meta =
            std::fs::metadata(path).map_err(|e| ModelError::Io { path: path.display().to_string(), source: e })?;
        if meta.is_dir() {
            if !path.join("config.json").is_file() {
                return Err(ModelError::refused(
                    "config.json",
                    path.join("config.json").display(),
                    "a model directory needs a config.json",
                ));
            }
            Ok(ModelFiles::HfDir(path.to_path_buf()))
        } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            Ok(ModelFiles::Gguf(path.to_path_buf()))
        } else {
            Err(ModelError::refused(
                "model path",
                path.display(),
                "expected a directory in HF layout or a .gguf file (.bin and other formats are not read)",
            ))
        }
    }
}
