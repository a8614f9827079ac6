//! Why a training step, a load or a save failed, typed so the server can map each kind to its status.

/// What went wrong in kvad-train.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The model's config or files say something training does not do; `field` names where it came from.
    #[error("refused: {field} = {value}: {reason}")]
    Refused {
        /// The config key, tensor name or option the value came from.
        field: String,
        /// The value as given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// Reading the model (config or weights) failed.
    #[error(transparent)]
    Model(#[from] kvad_models::ModelError),
    /// Reading a weight file failed.
    #[error(transparent)]
    Weights(#[from] kvad_models::weights::WeightError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A checkpoint could not be serialised or parsed.
    #[error("{path}: {msg}")]
    Format {
        /// The file.
        path: String,
        /// What the serialiser said.
        msg: String,
    },
}

impl TrainError {
    /// A refusal naming the field and value, as every bad input in kvad is answered.
    pub fn refused(field: impl Into<String>, value: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        TrainError::Refused { field: field.into(), value: value.to_string(), reason: reason.into() }
    }

    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        TrainError::Io { path: path.display().to_string(), source }
    }
}
