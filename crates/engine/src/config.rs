//! The engine's settings from the environment, read here and nowhere else.

/// `KVAD_LOAD_TRACE=1`: which of a load's two threads (weights; tokenizer and template) it waited for, on stderr.
pub(crate) fn load_trace() -> bool {
    std::env::var_os("KVAD_LOAD_TRACE").is_some()
}
