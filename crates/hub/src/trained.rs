//! Models trained on this machine: `trained:NAME`, kept in `~/.cache/kvad/trained/NAME` in Hugging Face layout
//! (config.json, safetensors, tokenizer), or as a PEFT adapter naming its base.
//!
//! A prefix of their own, as Ollama tags have, so a trained model can never be mistaken for a Hub repository of
//! the same name, and `kvad ls` can say where each model came from.

use crate::config;
use std::path::PathBuf;

/// The prefix trained models are named by.
pub const PREFIX: &str = "trained:";

/// Where trained models are kept.
pub fn store_dir() -> PathBuf {
    config::kvad_cache_dir().join("trained")
}

/// Checks a trained model's name (what follows `trained:`): 1–64 of letters, digits, `.`, `_` and `-`, not
/// starting with `.`, so it is one directory and never a path.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!("\"{name}\" must be 1-64 letters, digits, '.', '_' or '-', not starting with '.'"))
    }
}

/// The directory of `trained:NAME` (whether or not it exists yet).
pub fn dir(name: &str) -> Result<PathBuf, String> {
    check_name(name)?;
    Ok(store_dir().join(name))
}

/// Whether a directory holds a finished model (a run writes its weights last).
pub fn is_complete(dir: &std::path::Path) -> bool {
    dir.join("config.json").is_file() && dir.join("model.safetensors").is_file()
        || dir.join("adapter_config.json").is_file() && dir.join("adapter_model.safetensors").is_file()
}

/// Every finished trained model: its name (with the prefix), directory and bytes on disk.
pub fn list() -> Vec<(String, PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(store_dir()) else { return Vec::new() };
    let mut out: Vec<(String, PathBuf, u64)> = entries
        .flatten()
        .filter(|e| e.path().is_dir() && is_complete(&e.path()))
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            check_name(&name).ok()?;
            let size =
                std::fs::read_dir(e.path()).ok()?.flatten().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
            Some((format!("{PREFIX}{name}"), e.path(), size))
        })
        .collect();
    out.sort();
    out
}
