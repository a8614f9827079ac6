//! The model tests' settings from the environment, read here and nowhere else.

use std::path::PathBuf;

/// `KVAD_ROOT`: the checkout, when a test binary runs elsewhere than it was built (the GPU machine).
pub fn root() -> Option<PathBuf> {
    std::env::var_os("KVAD_ROOT").map(PathBuf::from)
}

/// `KVAD_BIG_MODELS` and `KVAD_BIG_REF`: the full-size models' directory and the PyTorch reference the big-model
/// check reads (made on the GPU machine by scripts/gpu/bench.sh).
pub fn big_models() -> Option<(String, String)> {
    Some((std::env::var("KVAD_BIG_MODELS").ok()?, std::env::var("KVAD_BIG_REF").ok()?))
}
