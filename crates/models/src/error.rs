//! Errors of loading and running a model. Every refusal names the field and the value that caused it.

use crate::weights::WeightError;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // every field is named in its variant's message
pub enum ModelError {
    /// The import rules refuse this model; `field` is where the value came from (a config.json key, a GGUF key or
    /// a tensor name).
    #[error("refused: {field} = {value}: {reason}")]
    Refused { field: String, value: String, reason: String },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A config file is not the JSON it should be.
    #[error("{path}: invalid JSON: {msg}")]
    Json { path: String, msg: String },
    /// The weights could not be read.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// A tensor the architecture needs is absent.
    #[error("tensor {name} is missing from the checkpoint")]
    MissingTensor { name: String },
    /// A tensor has another shape than the config implies.
    #[error("tensor {name} has shape {got:?}, but the config implies {expected:?}")]
    ShapeMismatch { name: String, expected: Vec<usize>, got: Vec<usize> },
    /// A forward pass was asked something impossible (a position past the context, an id past the vocabulary).
    #[error("{0}")]
    BadInput(String),
    /// A GPU backend cannot run here (no driver, no device, too old) or a GPU call failed.
    #[error("GPU: {0}")]
    Gpu(String),
}

impl ModelError {
    /// Shorthand for a refusal.
    pub fn refused(field: impl Into<String>, value: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        ModelError::Refused { field: field.into(), value: value.to_string(), reason: reason.into() }
    }
}
