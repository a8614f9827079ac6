//! kvad-engine: the step engine over stateless models, and everything stateful about a generation.
//!
//! It owns the sequences (their caches, samplers and ids so far), the models in memory and what they are charged
//! ([`local`]), the conversations set aside, and the one pass every caller drives ([`pass`]): the server's
//! scheduler decides which sequences run each pass and calls [`Engine::step`]; the CLI's one-request generation
//! ([`generate()`]) drives the same pass for a single sequence. The seam ([`seam`]) is plain data and typed errors
//! ([`EngineError`]), so the server maps them to HTTP in one place.

pub mod bench;
pub mod checks;
mod config;
pub mod embed;
mod error;
pub mod generate;
pub mod grammar;
pub mod local;
pub mod open;
pub mod pass;
pub mod passes;
pub mod perplexity;
pub mod sampler;
pub mod seam;
pub mod system;

pub use error::EngineError;
pub use generate::{generate, generate_with, FinishReason, GenStats, GenerateOptions, GenerateRequest};
pub use kvad_tensor::BackendKind;
pub use open::{open_model, ModelKind, OpenedModel};
pub use sampler::{Sampled, Sampler, SamplingError, SamplingParams};
pub use seam::Engine;
