//! The Hugging Face cache, laid out exactly as Python's huggingface_hub lays it out, so either tool finds what the
//! other downloaded:
//!
//! ```text
//! <cache>/models--<owner>--<name>/
//!     refs/<revision>              the commit a branch or tag pointed to when it was last resolved (no newline)
//!     blobs/<etag>                 file contents, named by the LFS sha256 or the git blob id
//!     blobs/<etag>.incomplete      a download in progress; resumed with a Range request, never read as a file
//!     snapshots/<commit>/<file>    relative symlinks to ../../blobs/<etag>
//!     .no_exist/<commit>/<file>    empty markers for files known not to exist at that commit
//! ```

use crate::repo::{is_commit, RepoId};
use crate::HubError;
use std::path::{Path, PathBuf};

/// One Hugging Face cache directory.
#[derive(Debug, Clone)]
pub struct HfCache {
    root: PathBuf,
}

/// A repo found in the cache.
#[derive(Debug, Clone)]
pub struct CachedRepo {
    /// The repo.
    pub repo: RepoId,
    /// Bytes on disk (its blobs, partial downloads included).
    pub size: u64,
    /// Refs (branch or tag → commit).
    pub refs: Vec<(String, String)>,
    /// Commits with a snapshot, and whether each is complete enough to load.
    pub snapshots: Vec<(String, bool)>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.display().to_string(), source }
}

/// A file name the cache may hold: a relative path of plain components (no `..`, no absolute path, no
/// backslash), as the Hub names files. Anything else is refused before it touches the disk.
pub fn check_file_name(name: &str) -> Result<(), HubError> {
    let parts_ok = name.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
    let chars_ok = name.chars().all(|c| !c.is_control() && c != '\\' && c != ':');
    if name.is_empty() || name.starts_with('/') || !parts_ok || !chars_ok || name.len() > 1024 {
        return Err(HubError::Invalid {
            field: "file name".into(),
            value: name.into(),
            why: "a repo file must be a relative path without '..', '.', empty parts, ':' or '\\'".into(),
        });
    }
    Ok(())
}

/// A blob name (an LFS sha256 or a git blob id): hex digits only, since it becomes a file name.
pub fn check_blob_name(blob: &str) -> Result<(), HubError> {
    if blob.len() < 8 || blob.len() > 128 || !blob.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HubError::Invalid {
            field: "blob id".into(),
            value: blob.into(),
            why: "the Hub names file contents by a hex digest".into(),
        });
    }
    Ok(())
}

/// Whether a snapshot directory holds a model kvad can load: config.json, a tokenizer, and the weights the
/// transformers rule picks (model.safetensors; else every shard model.safetensors.index.json names; else any
/// *.safetensors). Returns what is missing.
pub fn missing_for_load(dir: &Path) -> Option<String> {
    let has = |f: &str| dir.join(f).is_file();
    if !has("config.json") {
        return Some("config.json".into());
    }
    if !(has("tokenizer.json") || has("tokenizer.model") || (has("vocab.json") && has("merges.txt"))) {
        return Some("a tokenizer (tokenizer.json, tokenizer.model, or vocab.json and merges.txt)".into());
    }
    if has("model.safetensors") {
        return None;
    }
    if has("model.safetensors.index.json") {
        let shards = std::fs::read(dir.join("model.safetensors.index.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("weight_map").and_then(|m| m.as_object()).cloned());
        let Some(map) = shards else { return Some("a readable model.safetensors.index.json".into()) };
        let missing: Vec<&str> =
            map.values().filter_map(|v| v.as_str()).filter(|f| check_file_name(f).is_err() || !has(f)).collect();
        return missing.first().map(|f| f.to_string());
    }
    let any = std::fs::read_dir(dir).ok().into_iter().flatten().flatten().any(|e| {
        let n = e.file_name().to_string_lossy().to_string();
        n.ends_with(".safetensors") && !n.starts_with("adapter_model") && e.path().is_file()
    });
    (!any).then(|| "*.safetensors weights".into())
}

fn dir_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

fn walk_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk_files(base, &p, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

impl HfCache {
    /// The cache at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HfCache { root: root.into() }
    }

    /// The cache the environment names (`HF_HUB_CACHE`, `HF_HOME/hub`, the XDG default).
    pub fn from_env() -> Self {
        Self::new(crate::config::hf_cache_dir())
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the exclusive lock on one blob's download, waiting while another process (kvad or huggingface_hub,
    /// which locks the same file) holds it; released when the returned file is dropped.
    pub fn lock_blob(&self, repo: &RepoId, blob: &str) -> Result<std::fs::File, HubError> {
        let dir = self.root.join(".locks").join(repo.folder_name());
        let io = |source| HubError::Io { path: dir.display().to_string(), source };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let path = dir.join(format!("{blob}.lock"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| HubError::Io { path: path.display().to_string(), source })?;
        f.lock().map_err(|source| HubError::Io { path: path.display().to_string(), source })?;
        Ok(f)
    }

    /// `models--owner--name`.
    pub fn repo_dir(&self, repo: &RepoId) -> PathBuf {
        self.root.join(repo.folder_name())
    }

    /// A commit's snapshot directory.
    pub fn snapshot_dir(&self, repo: &RepoId, commit: &str) -> PathBuf {
        self.repo_dir(repo).join("snapshots").join(commit)
    }

    /// A blob's path.
    pub fn blob_path(&self, repo: &RepoId, blob: &str) -> PathBuf {
        self.repo_dir(repo).join("blobs").join(blob)
    }

    /// The commit a revision names, from the cache alone: a commit as given, a branch or tag through its ref.
    pub fn commit_for(&self, repo: &RepoId, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let text = std::fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
        let c = text.trim();
        is_commit(c).then(|| c.to_string())
    }

    /// Records the commit a branch or tag resolved to (written atomically).
    pub fn write_ref(&self, repo: &RepoId, revision: &str, commit: &str) -> Result<(), HubError> {
        if is_commit(revision) {
            return Ok(());
        }
        let path = self.repo_dir(repo).join("refs").join(revision);
        let parent = path.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let tmp = parent.join(format!(
            ".{}.tmp{}",
            std::process::id(),
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        std::fs::write(&tmp, commit).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<blob>` with a relative symlink (replacing any old link).
    pub fn link(&self, repo: &RepoId, commit: &str, file: &str, blob: &str) -> Result<PathBuf, HubError> {
        check_file_name(file)?;
        check_blob_name(blob)?;
        let link = self.snapshot_dir(repo, commit).join(file);
        let parent = link.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let depth = 2 + file.matches('/').count();
        let target = format!("{}blobs/{blob}", "../".repeat(depth));
        let tmp = parent.join(format!(".{}.{}.link", std::process::id(), blob));
        let _ = std::fs::remove_file(&tmp);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp))?;
        #[cfg(not(unix))]
        std::fs::copy(self.blob_path(repo, blob), &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(io(&link))?;
        Ok(link)
    }

    /// Records that a file does not exist at a commit (huggingface_hub's `.no_exist` marker).
    pub fn mark_missing(&self, repo: &RepoId, commit: &str, file: &str) -> Result<(), HubError> {
        check_file_name(file)?;
        let p = self.repo_dir(repo).join(".no_exist").join(commit).join(file);
        let parent = p.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        std::fs::write(&p, b"").map_err(io(&p))
    }

    /// A snapshot's files (relative paths).
    pub fn snapshot_files(&self, repo: &RepoId, commit: &str) -> Vec<String> {
        let dir = self.snapshot_dir(repo, commit);
        let mut out = Vec::new();
        walk_files(&dir, &dir, &mut out);
        out.sort();
        out
    }

    /// Every model repo in the cache, sorted by id.
    pub fn list(&self) -> Vec<CachedRepo> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.root).into_iter().flatten().flatten() {
            let folder = e.file_name().to_string_lossy().to_string();
            let Some(rest) = folder.strip_prefix("models--") else { continue };
            let Some((owner, name)) = rest.split_once("--") else { continue };
            let Ok(repo) = RepoId::parse(&format!("{owner}/{name}")) else { continue };
            let dir = e.path();
            let mut refs = Vec::new();
            let refs_dir = dir.join("refs");
            let mut names = Vec::new();
            walk_files(&refs_dir, &refs_dir, &mut names);
            for r in names {
                if let Some(c) = self.commit_for(&repo, &r) {
                    refs.push((r, c));
                }
            }
            refs.sort();
            let mut snapshots: Vec<(String, bool)> = std::fs::read_dir(dir.join("snapshots"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|s| {
                    let c = s.file_name().to_string_lossy().to_string();
                    let complete = missing_for_load(&s.path()).is_none();
                    (c, complete)
                })
                .collect();
            snapshots.sort();
            out.push(CachedRepo { size: dir_size(&dir.join("blobs")), repo, refs, snapshots });
        }
        out.sort_by(|a, b| a.repo.cmp(&b.repo));
        out
    }

    /// Deletes a repo's whole folder (every revision). Returns the bytes freed; an absent repo is an error.
    pub fn remove(&self, repo: &RepoId) -> Result<u64, HubError> {
        let dir = self.repo_dir(repo);
        if !dir.is_dir() {
            return Err(HubError::NotCached { what: repo.to_string(), cache: self.root.display().to_string() });
        }
        let size = dir_size(&dir.join("blobs"));
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_that_escape_are_refused() {
        for n in ["../x", "a/../../x", "/etc/passwd", "a\\..\\x", "", "a//b", "./x", "c:x"] {
            let e = check_file_name(n).unwrap_err().to_string();
            assert!(e.contains("file name"), "{n}: {e}");
        }
        check_file_name("model.safetensors").unwrap();
        check_file_name("onnx/model.onnx").unwrap();
    }

    #[test]
    fn a_blob_lock_is_exclusive_until_dropped_and_sits_where_huggingface_hub_puts_it() {
        let t = tempfile::tempdir().unwrap();
        let c = HfCache::new(t.path());
        let repo = RepoId::parse("o/n").unwrap();
        let held = c.lock_blob(&repo, "abc123").unwrap();
        let path = t.path().join(".locks/models--o--n/abc123.lock");
        assert!(path.is_file());
        // Another holder (another open file description, as another process would have) cannot take it now.
        let other = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(matches!(other.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        drop(held);
        other.try_lock().expect("free once the first holder is dropped");
    }

    #[test]
    fn refs_and_links_are_laid_out_like_huggingface_hub() {
        let t = tempfile::tempdir().unwrap();
        let c = HfCache::new(t.path());
        let repo = RepoId::parse("o/n").unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        c.write_ref(&repo, "main", commit).unwrap();
        assert_eq!(std::fs::read_to_string(t.path().join("models--o--n/refs/main")).unwrap(), commit);
        assert_eq!(c.commit_for(&repo, "main").as_deref(), Some(commit));
        std::fs::create_dir_all(t.path().join("models--o--n/blobs")).unwrap();
        std::fs::write(c.blob_path(&repo, "abcdef0123"), b"{}").unwrap();
        let link = c.link(&repo, commit, "sub/config.json", "abcdef0123").unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap().to_string_lossy(), "../../../blobs/abcdef0123");
        assert_eq!(std::fs::read(&link).unwrap(), b"{}");
        assert_eq!(c.snapshot_files(&repo, commit), vec!["sub/config.json".to_string()]);
    }
}
