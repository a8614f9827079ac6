//! Hugging Face repo ids (`owner/name`) and revisions (`@branch`, `@tag`, `@commit`).

use crate::HubError;
use std::fmt;

/// A repo on the Hub: `owner/name`, a model's or a dataset's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId {
    /// The user or organisation.
    pub owner: String,
    /// The repo's name.
    pub name: String,
    /// Which of the Hub's repo types: they live under different API paths, URLs and cache folders.
    pub kind: RepoKind,
}

/// The Hub's repo types kvad reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RepoKind {
    /// A model (`/api/models`, `models--owner--name`).
    #[default]
    Model,
    /// A dataset (`/api/datasets`, `/datasets/owner/name/resolve/...`, `datasets--owner--name`).
    Dataset,
}

impl RepoKind {
    /// The plural the Hub's API paths and cache folders use.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }
}

/// A repo at a revision: a branch, a tag or a commit. Without `@revision` the revision is `main`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    /// The repo.
    pub repo: RepoId,
    /// What the user asked for (`main` when nothing).
    pub revision: String,
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

impl fmt::Display for RepoRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repo, self.revision)
    }
}

/// Whether a revision is a full commit hash (40 lowercase hex digits), as the Hub writes them.
pub fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn bad(field: &str, value: &str, why: &str) -> HubError {
    HubError::Invalid { field: field.into(), value: value.into(), why: why.into() }
}

/// The Hub's rule for an owner or a name: letters, digits, `-`, `_`, `.`; no `--` or `..`; not starting or ending
/// with `-` or `.`; at most 96 characters. Anything else could not be a directory name in the cache either.
fn check_part(field: &str, s: &str) -> Result<(), HubError> {
    let ok_chars = s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if s.is_empty() || s.len() > 96 || !ok_chars {
        return Err(bad(field, s, "expected 1 to 96 letters, digits, '-', '_' or '.'"));
    }
    if s.contains("--") || s.contains("..") || s.starts_with(['-', '.']) || s.ends_with(['-', '.']) {
        return Err(bad(field, s, "'--' and '..' are not allowed, nor a leading or trailing '-' or '.'"));
    }
    Ok(())
}

/// A revision is a branch, tag or commit name: no empty path component, no `..`, no control characters.
fn check_revision(rev: &str) -> Result<(), HubError> {
    let parts_ok = rev.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
    let chars_ok = rev.chars().all(|c| !c.is_control() && c != '\\' && c != ' ');
    if rev.is_empty() || rev.len() > 255 || !parts_ok || !chars_ok {
        return Err(bad("revision", rev, "expected a branch, a tag or a commit (no empty, '.' or '..' parts)"));
    }
    Ok(())
}

impl RepoId {
    /// Parses `owner/name`.
    pub fn parse(s: &str) -> Result<Self, HubError> {
        let Some((owner, name)) = s.split_once('/') else {
            return Err(bad("repo id", s, "expected owner/name"));
        };
        check_part("repo owner", owner)?;
        check_part("repo name", name)?;
        Ok(RepoId { owner: owner.into(), name: name.into(), kind: RepoKind::Model })
    }

    /// This id as a dataset's.
    pub fn dataset(self) -> Self {
        RepoId { kind: RepoKind::Dataset, ..self }
    }

    /// The cache folder's name: `models--owner--name` (`datasets--owner--name` for a dataset), as huggingface_hub
    /// names it.
    pub fn folder_name(&self) -> String {
        format!("{}--{}--{}", self.kind.plural(), self.owner, self.name)
    }
}

impl RepoRef {
    /// Parses `owner/name` or `owner/name@revision`.
    pub fn parse(s: &str) -> Result<Self, HubError> {
        let (repo, revision) = match s.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (s, "main"),
        };
        check_revision(revision)?;
        Ok(RepoRef { repo: RepoId::parse(repo)?, revision: revision.into() })
    }

    /// Whether a name looks like a repo id (rather than an alias or a path): `owner/name[@rev]`, one slash before
    /// any `@`.
    pub fn looks_like(s: &str) -> bool {
        let repo = s.split_once('@').map_or(s, |(r, _)| r);
        repo.matches('/').count() == 1 && !s.starts_with(['/', '.', '~'])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repo_and_revision() {
        let r = RepoRef::parse("Qwen/Qwen3-0.6B@main").unwrap();
        assert_eq!((r.repo.owner.as_str(), r.repo.name.as_str(), r.revision.as_str()), ("Qwen", "Qwen3-0.6B", "main"));
        assert_eq!(RepoRef::parse("a/b").unwrap().revision, "main");
        assert_eq!(RepoRef::parse("a/b@refs/pr/1").unwrap().revision, "refs/pr/1");
        assert_eq!(RepoRef::parse("a/b").unwrap().repo.folder_name(), "models--a--b");
        assert_eq!(RepoRef::parse("a/b").unwrap().repo.dataset().folder_name(), "datasets--a--b");
    }

    #[test]
    fn refuses_names_that_could_escape_the_cache() {
        for (s, field) in [
            ("../b", "repo owner"),
            ("a/..", "repo name"),
            ("a/b/c", "repo name"),
            ("a--x/b", "repo owner"),
            ("a/b@../../x", "revision"),
            ("a/b@", "revision"),
            ("noslash", "repo id"),
        ] {
            let e = RepoRef::parse(s).unwrap_err().to_string();
            assert!(e.contains(field), "{s}: {e}");
        }
    }

    #[test]
    fn commits_are_forty_lowercase_hex() {
        assert!(is_commit("12fd25f77366fa6b3b4b768ec3050bf629380bac"));
        assert!(!is_commit("12FD25F77366FA6B3B4B768EC3050BF629380BAC"));
        assert!(!is_commit("main"));
    }
}
