//! Dataset repos from the Hub: the data files of one split (parquet, JSONL, JSON or plain text) fetched into the
//! same cache as models, laid out as huggingface_hub lays out `snapshot_download(repo_type="dataset")`
//! (`datasets--owner--name/snapshots/<commit>/...`), so a dataset fetched by either is found by the other.

use crate::fetch::Progress;
use crate::{Hub, HubError, RepoRef};
use std::path::PathBuf;

/// The extensions read as data.
pub const DATA: [&str; 4] = [".parquet", ".jsonl", ".json", ".txt"];

/// Largest data file fetched: the whole file is read into memory to be checked.
pub const FILE_LIMIT: u64 = 1 << 30;

/// A split pulled into the cache.
#[derive(Debug, Clone)]
pub struct PulledSplit {
    /// The commit.
    pub commit: String,
    /// Its files, in the repo's order: each name in the repo and its snapshot path.
    pub files: Vec<(String, PathBuf)>,
}

/// The data files of `split` among a repo's files, by the `datasets` library's conventions: a file named for the
/// split (`train.jsonl`, `train-00000-of-00002.parquet`, `train_part1.json`), or any data file in a folder named
/// for it (`train/0000.parquet`, `default/train/...`). Hidden folders are skipped.
pub fn split_files(files: &[String], split: &str) -> Vec<String> {
    files
        .iter()
        .filter(|f| DATA.iter().any(|e| f.ends_with(e)) && !f.split('/').any(|p| p.starts_with('.')))
        .filter(|f| {
            let parts: Vec<&str> = f.split('/').collect();
            let (dirs, base) = parts.split_at(parts.len() - 1);
            let stem = base[0].split('.').next().unwrap_or("");
            dirs.contains(&split)
                || stem == split
                || [format!("{split}-"), format!("{split}_")].iter().any(|p| stem.starts_with(p.as_str()))
        })
        .cloned()
        .collect()
}

/// The splits a repo's data files name (for the refusal that lists them).
fn splits_named(files: &[String]) -> Vec<String> {
    let mut out: Vec<String> = ["train", "validation", "test"]
        .iter()
        .filter(|s| !split_files(files, s).is_empty())
        .map(|s| s.to_string())
        .collect();
    out.dedup();
    out
}

impl Hub {
    /// Fetches the data files of `split` of dataset `rr` (its `repo.kind` must be a dataset's) into the cache.
    pub fn pull_split(&self, rr: &RepoRef, split: &str, progress: &mut dyn Progress) -> Result<PulledSplit, HubError> {
        let repo = &rr.repo;
        let info = self.info(repo, &rr.revision)?;
        self.cache.write_ref(repo, &rr.revision, &info.sha)?;
        let names: Vec<String> = info.siblings.iter().map(|s| s.rfilename.clone()).collect();
        let picked = split_files(&names, split);
        if picked.is_empty() {
            let found = splits_named(&names);
            return Err(HubError::Invalid {
                field: "split".into(),
                value: split.into(),
                why: match found.is_empty() {
                    true => format!("{repo} has no data files kvad reads ({})", DATA.join(", ")),
                    false => format!("{repo} has no data files for it; its splits: {}", found.join(", ")),
                },
            });
        }
        let mut files = Vec::new();
        for name in picked {
            let sib = info.siblings.iter().find(|s| s.rfilename == name).cloned().ok_or_else(|| HubError::Invalid {
                field: "file".into(),
                value: name.clone(),
                why: "not in the listing".into(),
            })?;
            let path = self.fetch_file(repo, &info.sha, &sib, FILE_LIMIT, progress)?;
            files.push((name, path));
        }
        Ok(PulledSplit { commit: info.sha, files })
    }
}

#[cfg(test)]
mod tests {
    use super::split_files;

    #[test]
    fn a_split_s_files_are_found_by_the_datasets_library_s_conventions() {
        let files: Vec<String> = [
            "README.md",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/validation-00000-of-00001.parquet",
            "train.jsonl",
            "default/test/0000.parquet",
            ".cache/train.parquet",
            "trainer.json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            split_files(&files, "train"),
            vec!["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet", "train.jsonl"]
        );
        assert_eq!(split_files(&files, "test"), vec!["default/test/0000.parquet"]);
        assert_eq!(split_files(&files, "validation").len(), 1);
        assert!(split_files(&files, "dev").is_empty());
    }
}
