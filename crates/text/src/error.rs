//! The one error type of this crate.
//!
//! Every variant names the field, file or value that was wrong, so a caller can tell a user what
//! to fix without reading our code.

use std::path::PathBuf;

/// Everything that can go wrong while loading a tokenizer, encoding, decoding or rendering a
/// chat template.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A file could not be read; `path` says which one.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file we tried to read.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A JSON file (tokenizer_config.json, chat_template.json, ...) is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file that failed to parse.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The `tokenizers` library refused a tokenizer.json or one of our conversions.
    #[error("tokenizer error in {context}: {message}")]
    Tokenizers {
        /// What we were doing (a path, or the step of a conversion).
        context: String,
        /// The library's message.
        message: String,
    },
    /// A metadata field has a value we cannot use.
    #[error("invalid value for {field}: {value}")]
    InvalidField {
        /// The field, spelled as in the source (e.g. `tokenizer.ggml.model`).
        field: String,
        /// The offending value, or why it is wrong.
        value: String,
    },
    /// A required metadata field is absent.
    #[error("missing field {field}")]
    MissingField {
        /// The field, spelled as in the source.
        field: String,
    },
    /// A token id is outside the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size}")]
    UnknownTokenId {
        /// The id that was asked for.
        id: u32,
        /// The size of the vocabulary, added tokens included.
        vocab_size: usize,
    },
    /// A chat template failed to parse.
    #[error("chat template does not compile: {message}")]
    TemplateSyntax {
        /// minijinja's description, with line information.
        message: String,
    },
    /// A chat template failed while rendering, or called `raise_exception(message)`.
    #[error("chat template failed: {message}")]
    TemplateRender {
        /// The template's own message for `raise_exception`, else minijinja's.
        message: String,
    },
}

impl TextError {
    /// Wraps a `tokenizers` error with what we were doing when it happened.
    pub(crate) fn tokenizers(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        TextError::Tokenizers { context: context.into(), message: err.to_string() }
    }

    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        TextError::Io { path: path.to_path_buf(), source }
    }
}
