//! One file per architecture family, built over the shared layers.

pub mod gpt2;
pub mod llama;
