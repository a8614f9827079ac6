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

/// The SmolLM2 GGUF under .models/; fails with the setup command when absent.
pub fn smollm2_gguf() -> PathBuf {
    let rel = ".models/SmolLM2-135M-Instruct.Q4_1.gguf";
    let p = root().join(rel);
    assert!(p.exists(), "missing {rel}: download it with `bash scripts/setup-test-model.sh`");
    p
}

/// Reads and parses a JSON fixture.
pub fn load_json(rel: &str) -> serde_json::Value {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
