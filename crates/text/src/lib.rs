//! kvad-text: everything between text and token ids.
//!
//! - [`Tokenizer`]: HF `tokenizers`, loaded from tokenizer.json, a model directory, or a GGUF
//!   file's vocabulary ([`GgufVocab`]), encoding and decoding as transformers does; byte-level GGUF
//!   vocabularies run on kvad's own [`ByteLevelBpe`] model, which builds faster.
//! - [`IncrementalDecoder`]: streaming text for generated ids without splitting characters.
//! - [`ChatTemplate`]: Jinja chat templates rendered as Python's jinja2 renders them.
//! - [`stream`]: streaming parsers over reply text: stop strings, reasoning traces, tool calls.
//!
//! This crate knows nothing of tensors or of the GGUF file format; the model crates hand it
//! plain data.

mod bpe;
mod error;
mod files;
mod gguf;
mod incremental;
mod model;
pub mod stream;
mod template;
mod token_bytes;
mod tokenizer;

pub use bpe::ByteLevelBpe;
pub use chrono;
pub use error::TextError;
pub use gguf::GgufVocab;
pub use incremental::{DecoderState, IncrementalDecoder};
pub use model::{TextModel, TextTokenizer};
pub use template::{system_clock, ChatContext, ChatTemplate, Clock};
pub use token_bytes::TokenBytes;
pub use tokenizer::Tokenizer;
