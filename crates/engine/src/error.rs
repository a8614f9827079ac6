//! The engine's own errors: every way a request can fail inside the engine, typed, so the server maps them to HTTP
//! once (`kvad_server::error`) and the CLI prints them as they are. Each names the field and value at fault where
//! there is one.

use crate::sampler::SamplingError;

/// Why a generation, a load or a step could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model refused or failed.
    #[error(transparent)]
    Model(#[from] kvad_models::ModelError),
    /// The tokenizer or template failed.
    #[error(transparent)]
    Text(#[from] kvad_text::TextError),
    /// A sampling parameter is out of range.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// The request itself cannot run (an empty prompt, a prompt longer than the context).
    #[error("{0}")]
    BadRequest(String),
    /// A request field holds a value the engine cannot take.
    #[error("{message}")]
    BadField {
        /// The field.
        field: String,
        /// What is wrong, naming the value.
        message: String,
    },
    /// A request field names something this machine cannot do (a GPU backend without a GPU).
    #[error("{message}")]
    Unsupported {
        /// The field.
        field: String,
        /// Why, naming the value.
        message: String,
    },
    /// No model by that name.
    #[error("model {model:?} does not exist here; this server has: {}", known.join(", "))]
    ModelNotFound {
        /// The name asked for.
        model: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// A model named for a load on request is not on this machine (the hub's words: where it looked).
    #[error("{0}")]
    NotOnDisk(String),
    /// A load does not fit beside what is in memory (the message names what holds it).
    #[error("{0}")]
    InsufficientMemory(String),
    /// The request conflicts with what is there (a model loaded on another backend).
    #[error("{message}")]
    Conflict {
        /// The field.
        field: String,
        /// Why.
        message: String,
    },
    /// The engine's own bookkeeping failed (a bug, or a model that failed mid-pass).
    #[error("{0}")]
    Internal(String),
}

impl EngineError {
    /// A field with a bad value.
    pub fn bad_field(field: &str, message: impl Into<String>) -> Self {
        EngineError::BadField { field: field.into(), message: message.into() }
    }

    /// A field naming what this machine cannot do.
    pub fn unsupported(field: &str, message: impl Into<String>) -> Self {
        EngineError::Unsupported { field: field.into(), message: message.into() }
    }

    /// A request that cannot run, no single field at fault.
    pub fn bad_request(message: impl Into<String>) -> Self {
        EngineError::BadRequest(message.into())
    }

    /// No such model.
    pub fn model_not_found(model: &str, known: &[String]) -> Self {
        EngineError::ModelNotFound { model: model.into(), known: known.to_vec() }
    }

    /// A load that does not fit.
    pub fn insufficient_memory(message: String) -> Self {
        EngineError::InsufficientMemory(message)
    }

    /// A conflict with what is there.
    pub fn conflict(field: &str, message: impl Into<String>) -> Self {
        EngineError::Conflict { field: field.into(), message: message.into() }
    }

    /// The engine's own failure.
    pub fn internal(message: impl Into<String>) -> Self {
        EngineError::Internal(message.into())
    }
}
