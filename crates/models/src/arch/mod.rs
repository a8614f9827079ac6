//! One folder per architecture family (its config mapping, CPU forward over the shared layers, and GPU upload),
//! and the registry that lists them all ([`registry`]).

pub mod deepseek;
pub mod entry;
pub mod gpt2;
pub mod llama;
pub mod qwen3_next;
pub mod registry;
