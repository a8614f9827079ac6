//! kvad-hub: where models come from. Resolves a model name — a path, an alias, a Hugging Face repo id
//! (`owner/name[@revision]`) or an Ollama tag (`ollama:name[:tag]`) — to files on this machine, downloading into
//! the shared Hugging Face cache (or kvad's cache for Ollama blobs) when they are not here yet.
//!
//! **API Boundary:** this is the only crate that does network IO, and it knows nothing of tensors: the checks
//! that need to understand a model (config.json's refusals, the tokenizer) are passed in by the caller
//! ([`Checks`]). Loads are from the cache first; a model on disk is never asked about again except by `pull`.
//! The endpoints followed are listed in [`api`] (Hub) and [`ollama`] (Ollama registry).

pub mod alias;
pub mod api;
pub mod cache;
pub mod config;
pub mod datasets;
pub mod events;
pub mod fetch;
pub mod http;
pub mod index;
pub mod ollama;
pub mod plan;
pub mod pull;
mod pypi;
pub mod repo;
mod resolve;
pub mod trained;

pub use cache::HfCache;
pub use config::{hf_cache_dir, kvad_cache_dir, kvad_config_dir, offline};
pub use fetch::{PlannedFile, Progress, Silent};
pub use pull::{Checks, Hub, Pulled};
pub use pypi::{ensure_smollm2, smollm2_path, SMOLLM2_FILE, SMOLLM2_PACKAGE};
pub use repo::{RepoId, RepoKind, RepoRef};
pub use resolve::{
    default_model, on_disk, remote_model_type, resolve, resolve_on_disk, resolve_with, set_default_model, OnDisk,
    Resolved,
};

/// The alias of the default model.
pub const DEFAULT_ALIAS: &str = "smollm2-instruct";

/// Why a model could not be found or fetched. Every variant names the thing and the value at fault.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // every field is named in its variant's message
pub enum HubError {
    /// Neither a path on this machine, an alias, a repo id nor an Ollama tag.
    #[error("model {0:?} is not a path on this machine, a known alias ({aliases}), a Hugging Face repo id (owner/name[@revision]) nor an Ollama tag (ollama:name[:tag])", aliases = alias::names().join(", "))]
    Unknown(String),
    /// A name, a file name or a server's answer is not acceptable.
    #[error("{field} = {value:?}: {why}")]
    Invalid { field: String, value: String, why: String },
    /// A model named for a load on request is not on this machine (only a pull downloads).
    #[error("{what} is not on this machine: {detail}; pull it first (kvad pull, or POST /api/pull)")]
    NotOnDisk { what: String, detail: String },
    /// Offline mode forbids the download a model needs.
    #[error("{what}: {detail}, and offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE) forbids downloading it")]
    Offline { what: String, detail: String },
    /// The network could not be reached.
    #[error("cannot reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// 401/403: a gated or private repo.
    #[error("{repo} answered HTTP {status}: {}{}", if *had_token { "the token kvad sent (HF_TOKEN, or the token file under HF_HOME) does not give access; accept the repo's terms on the Hub with that account, or use a token that has access" } else { "it is gated or private; accept its terms on the Hub with your account, then set HF_TOKEN (or log in with `huggingface-cli login`, which writes the token file under HF_HOME)" }, if detail.is_empty() { String::new() } else { format!(" (the Hub says: {detail})") })]
    Gated { repo: String, status: u16, had_token: bool, detail: String },
    /// 404.
    #[error("{what} was not found ({url}){}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    NotFound { what: String, url: String, detail: String },
    /// Another HTTP status.
    #[error("{url} answered HTTP {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Http { url: String, status: u16, detail: String },
    /// The model is refused, and how much was downloaded before the refusal.
    #[error("{repo} is refused {after}: {reason}")]
    Refused { repo: String, reason: String, after: String },
    /// A download kept failing part-way; the partial file is kept for the next attempt.
    #[error("downloading {file} stopped at byte {have}{}: {detail}; the partial file {partial} is kept and the next pull resumes from it", expected.map(|e| format!(" of {e}")).unwrap_or_default())]
    Interrupted { file: String, have: u64, expected: Option<u64>, detail: String, partial: String },
    /// Not in the cache (rm, ls).
    #[error("{what} is not in the cache at {cache}")]
    NotCached { what: String, cache: String },
    /// pip failed.
    #[error("fetching {package} with pip failed: {detail}")]
    Pip { package: String, detail: String },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}
