//! The model index: which repos kvad knows, their architecture and size, their draft candidates and relatives.
//!
//! A built-in index (committed at `crates/hub/index/models.json`, the aliases' models and what is known about them)
//! is replaced by a downloaded copy (`<kvad cache>/index.json`) once `kvad models update` has fetched one. Each
//! release publishes that file as the PyPI package [`INDEX_PACKAGE`] (`scripts/index_wheel.py` builds it), beside
//! the `kvad` wheel: PyPI is where kvad itself is released, so that is where `update` looks by default, through pip
//! as the default model's offline copy is fetched (pip's mirror and proxy settings apply). `KVAD_INDEX_URL` names
//! another address (a version-1 index.json over HTTP). A failed update leaves the previous copy in place, and the
//! next `update` asks again.

use crate::http::{Client, Subject};
use crate::{config, pypi, HubError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

const BUILT_IN: &str = include_str!("../index/models.json");

/// The PyPI package that carries each release's model index, as [`INDEX_MEMBER`] of its wheel.
pub const INDEX_PACKAGE: &str = "kvad-index";

/// The index's file inside that wheel.
pub const INDEX_MEMBER: &str = "kvad_index/index.json";

/// Repos related to one model.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Related {
    /// Fine-tunes of it.
    #[serde(default)]
    pub finetunes: Vec<String>,
    /// Quantised publications (Ollama tags).
    #[serde(default)]
    pub quantizations: Vec<String>,
    /// The base/instruct twin.
    #[serde(default)]
    pub twins: Vec<String>,
}

/// One model of the index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// `owner/name`.
    pub repo: String,
    /// The revision it was checked at, when pinned.
    #[serde(default)]
    pub revision: Option<String>,
    /// config.json's architecture class.
    pub architecture: String,
    /// Parameter count, when known.
    #[serde(default)]
    pub params: Option<u64>,
    /// `chat` or `completion`.
    pub kind: String,
    /// Draft-model candidates, best first.
    #[serde(default)]
    pub drafts: Vec<String>,
    /// Relatives.
    #[serde(default)]
    pub related: Related,
}

/// The index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Index {
    /// Format version (1).
    pub version: u32,
    /// The models.
    pub models: Vec<Entry>,
    /// Where it came from (not serialised).
    #[serde(skip)]
    pub source: String,
}

/// Where a downloaded index is kept.
pub fn downloaded_path() -> PathBuf {
    config::kvad_cache_dir().join("index.json")
}

fn parse(text: &str, source: &str) -> Result<Index, HubError> {
    let mut idx: Index = serde_json::from_str(text).map_err(|e| HubError::Invalid {
        field: "model index".into(),
        value: source.into(),
        why: format!("not a kvad model index: {e}"),
    })?;
    if idx.version != 1 {
        return Err(HubError::Invalid {
            field: "model index version".into(),
            value: idx.version.to_string(),
            why: "this build reads version 1".into(),
        });
    }
    for m in &idx.models {
        crate::RepoId::parse(&m.repo)?;
    }
    idx.source = source.into();
    Ok(idx)
}

/// The downloaded index when there is a valid one, else the built-in one.
pub fn load() -> Index {
    let p = downloaded_path();
    if let Ok(text) = std::fs::read_to_string(&p) {
        if let Ok(idx) = parse(&text, &p.display().to_string()) {
            return idx;
        }
    }
    parse(BUILT_IN, "built-in").unwrap_or(Index { version: 1, models: Vec::new(), source: "built-in".into() })
}

/// Fetches the index (from `KVAD_INDEX_URL`, else the latest [`INDEX_PACKAGE`] through pip) and stores it; returns
/// it. Nothing is stored unless the whole index was fetched and reads as one.
pub fn update() -> Result<Index, HubError> {
    let url = config::index_url();
    let source = url.clone().unwrap_or_else(|| format!("the PyPI package {INDEX_PACKAGE}"));
    if config::offline() {
        return Err(HubError::Offline {
            what: "the model index".into(),
            detail: format!("it would be fetched from {source}"),
        });
    }
    let p = downloaded_path();
    let dir = p.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir).map_err(|source| HubError::Io { path: dir.display().to_string(), source })?;
    let text = match &url {
        Some(url) => {
            let body = Client::new(None, None)
                .get(url, None, &[], Subject::Other("the model index"))?
                .read_limited(64 << 20, "model index")?;
            String::from_utf8_lossy(&body).to_string()
        }
        None => {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let got = dir.join(format!(".index-{}-{n}.json", std::process::id()));
            pypi::fetch_member(INDEX_PACKAGE, INDEX_MEMBER, &dir, &got)?;
            let text = std::fs::read_to_string(&got);
            let _ = std::fs::remove_file(&got);
            text.map_err(|source| HubError::Io { path: got.display().to_string(), source })?
        }
    };
    let idx = parse(&text, &source)?;
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, &text).map_err(|source| HubError::Io { path: tmp.display().to_string(), source })?;
    std::fs::rename(&tmp, &p).map_err(|source| HubError::Io { path: p.display().to_string(), source })?;
    Ok(idx)
}

impl Index {
    /// The entry of a repo (case-insensitive, as the Hub's ids are).
    pub fn get(&self, repo: &str) -> Option<&Entry> {
        self.models.iter().find(|m| m.repo.eq_ignore_ascii_case(repo))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_built_in_index_parses_and_covers_every_alias() {
        let idx = super::parse(super::BUILT_IN, "built-in").unwrap();
        for a in crate::alias::ALIASES {
            let e = idx.get(a.repo).unwrap_or_else(|| panic!("{} is not in the index", a.repo));
            assert_eq!(e.revision.as_deref(), Some(a.revision), "{}", a.repo);
        }
        let e = super::parse(r#"{"version": 2, "models": []}"#, "x").unwrap_err().to_string();
        assert!(e.contains("version") && e.contains('2'), "{e}");
    }
}
