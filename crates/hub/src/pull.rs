//! `kvad pull`: a repo at a revision into the Hugging Face cache, by the rules of caldrix-models.md ("What is
//! downloaded"): the revision resolved to its commit first; config.json alone, checked; the tokenizer, checked;
//! the adapter question; then the weights, after printing how many files and how many bytes.

use crate::api::{self, RepoInfo, Sibling};
use crate::cache::{check_file_name, HfCache};
use crate::fetch::{self, PlannedFile, Progress, Target};
use crate::http::{Client, Subject};
use crate::plan::{self, WeightRule};
use crate::repo::{RepoId, RepoRef};
use crate::HubError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest config.json accepted (real ones are a few kB).
pub const CONFIG_LIMIT: u64 = 4 << 20;
/// Largest tokenizer file accepted.
pub const TOKENIZER_LIMIT: u64 = 256 << 20;
/// Largest other JSON file (index, generation config, chat template).
pub const SMALL_LIMIT: u64 = 64 << 20;
/// Largest weight file when the Hub does not list sizes.
pub const WEIGHT_LIMIT: u64 = 1 << 40;

/// The checks the caller (which knows models and tokenizers) runs on downloaded files before more is fetched.
pub struct Checks<'a> {
    /// config.json, parsed: `Err(reason)` refuses the model, naming the field and value.
    pub config: &'a dyn Fn(&Value) -> Result<(), String>,
    /// The snapshot directory once the tokenizer files are in it.
    pub tokenizer: &'a dyn Fn(&Path) -> Result<(), String>,
}

fn accept_config(_: &Value) -> Result<(), String> {
    Ok(())
}
fn accept_tokenizer(_: &Path) -> Result<(), String> {
    Ok(())
}

impl Checks<'static> {
    /// Checks nothing (the caller checks at load).
    pub fn none() -> Self {
        Checks { config: &accept_config, tokenizer: &accept_tokenizer }
    }
}

/// Where the Hub is and where its files go.
pub struct Hub {
    /// The HTTP client (with the token).
    pub client: Client,
    /// Base URL (`HF_ENDPOINT`).
    pub endpoint: String,
    /// The cache.
    pub cache: HfCache,
}

/// A pulled snapshot.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The commit.
    pub commit: String,
    /// `snapshots/<commit>`.
    pub dir: PathBuf,
    /// Bytes transferred by this pull (0 when everything was here).
    pub transferred: u64,
    /// Lines for the user (files not read, the adapter's verdict).
    pub notes: Vec<String>,
}

impl Hub {
    /// The Hub, token and cache of the environment.
    pub fn from_env() -> Self {
        Hub { client: Client::for_hub(), endpoint: crate::config::hf_endpoint(), cache: HfCache::from_env() }
    }

    /// Asks the Hub which commit a revision is and what the repo holds there.
    pub fn info(&self, repo: &RepoId, revision: &str) -> Result<RepoInfo, HubError> {
        api::repo_info(&self.client, &self.endpoint, repo, revision)
    }

    /// Fetches one file of a commit into the cache (kept when already there) and returns its snapshot path.
    pub fn fetch_file(
        &self,
        repo: &RepoId,
        commit: &str,
        sib: &Sibling,
        limit: u64,
        progress: &mut dyn Progress,
    ) -> Result<PathBuf, HubError> {
        let name = sib.rfilename.as_str();
        check_file_name(name)?;
        let link = self.cache.snapshot_dir(repo, commit).join(name);
        let size_ok =
            |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && sib.bytes().is_none_or(|s| s == m.len()));
        if size_ok(&link) {
            return Ok(link);
        }
        let blob = sib.blob().ok_or_else(|| HubError::Invalid {
            field: "blobId".into(),
            value: name.into(),
            why: "the Hub's listing gives no blob id for this file (a mirror without ?blobs=true?)".into(),
        })?;
        crate::cache::check_blob_name(blob)?;
        let blob_path = self.cache.blob_path(repo, blob);
        // One writer per blob across processes, at the lock file huggingface_hub takes for it too
        // (`.locks/models--owner--name/<blob>.lock`), so kvad and Python downloading together never interleave.
        let _lock = if size_ok(&blob_path) { None } else { Some(self.cache.lock_blob(repo, blob)?) };
        if !size_ok(&blob_path) {
            let url = api::file_url(&self.endpoint, repo, commit, name);
            let who = repo.to_string();
            let t = Target {
                url: &url,
                subject: Subject::Repo(&who),
                name,
                path: &blob_path,
                expected: sib.bytes(),
                limit,
            };
            fetch::fetch(&self.client, &t, progress)?;
        }
        self.cache.link(repo, commit, name, blob)
    }

    /// Pulls `rr` into the cache.
    pub fn pull(&self, rr: &RepoRef, checks: &Checks<'_>, progress: &mut dyn Progress) -> Result<Pulled, HubError> {
        let repo = &rr.repo;
        let info = self.info(repo, &rr.revision)?;
        let commit = info.sha.clone();
        self.cache.write_ref(repo, &rr.revision, &commit)?;
        let files: Vec<String> = info.siblings.iter().map(|s| s.rfilename.clone()).collect();
        let plan = plan::plan(&repo.to_string(), &files)?;
        let sib = |name: &str| info.siblings.iter().find(|s| s.rfilename == name).cloned();
        let get = |name: &str, limit: u64, progress: &mut dyn Progress| -> Result<PathBuf, HubError> {
            let s = sib(name).ok_or_else(|| HubError::NotFound {
                what: format!("{name} of {repo}"),
                url: api::file_url(&self.endpoint, repo, &commit, name),
                detail: String::new(),
            })?;
            self.fetch_file(repo, &commit, &s, limit, progress)
        };
        let mut transferred_before = dir_bytes(&self.cache.repo_dir(repo).join("blobs"));

        // 1. config.json, alone, checked.
        if let Some(s) = sib("config.json").and_then(|s| s.bytes()).filter(|b| *b > CONFIG_LIMIT) {
            return Err(HubError::Invalid {
                field: "size of config.json".into(),
                value: s.to_string(),
                why: format!("more than the {CONFIG_LIMIT} bytes a config may be; nothing was downloaded"),
            });
        }
        let config_path = get("config.json", CONFIG_LIMIT, progress)?;
        let config = read_json(&config_path, "config.json")?;
        (checks.config)(&config).map_err(|reason| HubError::Refused {
            repo: repo.to_string(),
            reason,
            after: "after config.json alone; nothing else was downloaded".into(),
        })?;

        // 2. The tokenizer, checked before any weight.
        for f in &plan.tokenizer_files {
            get(f, TOKENIZER_LIMIT, progress)?;
        }
        let dir = self.cache.snapshot_dir(repo, &commit);
        // The small files next, so the tokenizer check sees tokenizer_config.json and the chat template.
        for f in &plan.extras {
            get(f, SMALL_LIMIT, progress)?;
        }
        (checks.tokenizer)(&dir).map_err(|reason| HubError::Refused {
            repo: repo.to_string(),
            reason,
            after: "after config.json and the tokenizer files; no weights were downloaded".into(),
        })?;

        // 3. The weights the transformers rule picks.
        let weights = match &plan.weights {
            WeightRule::Single => vec!["model.safetensors".to_string()],
            WeightRule::All(v) => v.clone(),
            WeightRule::Index => {
                let p = get("model.safetensors.index.json", SMALL_LIMIT, progress)?;
                plan::shards_from_index(&read_json(&p, "model.safetensors.index.json")?, &files)?
            }
        };
        let mut notes = Vec::new();
        if plan.adapter {
            notes.push(self.adapter_verdict(repo, &info, &weights, progress)?);
        }

        // 4. Print the plan, then fetch what is missing.
        let mut all: Vec<String> = vec!["config.json".into()];
        all.extend(plan.tokenizer_files.iter().cloned());
        all.extend(plan.extras.iter().cloned());
        if plan.weights == WeightRule::Index {
            all.push("model.safetensors.index.json".into());
        }
        all.extend(weights.iter().cloned());
        let planned: Vec<PlannedFile> = all
            .iter()
            .map(|f| {
                let size = sib(f).and_then(|s| s.bytes());
                let cached = std::fs::metadata(dir.join(f)).is_ok_and(|m| size.is_none_or(|s| s == m.len()));
                PlannedFile { name: f.clone(), size, cached }
            })
            .collect();
        progress.plan(&format!("{repo} at {commit}"), &planned);
        for w in &weights {
            get(w, WEIGHT_LIMIT, progress)?;
        }
        let after = dir_bytes(&self.cache.repo_dir(repo).join("blobs"));
        transferred_before = after.saturating_sub(transferred_before);
        Ok(Pulled { commit, dir, transferred: transferred_before, notes })
    }

    /// The adapter rules: a repo shipping `adapter_config.json` beside full weights. Same weight files as the
    /// adapter's base model: refused as an adapter over that base. Different: run, with the adapter files named as
    /// not read. Cannot compare: run, with a note saying why.
    fn adapter_verdict(
        &self,
        repo: &RepoId,
        info: &RepoInfo,
        weights: &[String],
        progress: &mut dyn Progress,
    ) -> Result<String, HubError> {
        let not_read: Vec<&str> =
            info.siblings.iter().map(|s| s.rfilename.as_str()).filter(|f| f.starts_with("adapter_")).collect();
        let listed =
            format!("reads {} (as transformers loads it); not read: {}", weights.join(", "), not_read.join(", "));
        let s = info.siblings.iter().find(|s| s.rfilename == "adapter_config.json").cloned();
        let Some(s) = s else { return Ok(listed) };
        let p = self.fetch_file(repo, &info.sha, &s, SMALL_LIMIT, progress)?;
        let cfg = read_json(&p, "adapter_config.json")?;
        let base = cfg.get("base_model_name_or_path").and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let cannot = |why: String| Ok(format!("{listed}; the shipped model is run: {why}"));
        let Ok(base_id) = RepoId::parse(&base) else {
            return cannot(format!(
                "the adapter's base_model_name_or_path ({base:?}) is not a repo id to compare with"
            ));
        };
        let ours: Vec<&str> = weights
            .iter()
            .filter_map(|w| info.siblings.iter().find(|s| &s.rfilename == w))
            .filter_map(|s| s.lfs.as_ref().map(|l| l.sha256.as_str()))
            .collect();
        if ours.len() != weights.len() {
            return cannot("the Hub lists no checksum for some of its weight files".into());
        }
        let base_info = match self.info(&base_id, "main") {
            Ok(i) => i,
            Err(e) => return cannot(format!("the base model {base_id} could not be asked: {e}")),
        };
        let theirs: Vec<&str> =
            base_info.siblings.iter().filter_map(|s| s.lfs.as_ref().map(|l| l.sha256.as_str())).collect();
        if ours.iter().all(|h| theirs.contains(h)) {
            return Err(HubError::Refused {
                repo: repo.to_string(),
                reason: format!(
                    "it is an adapter over {base_id}: its weight files are {base_id}'s own (same sha256), so running them would ignore the adapter; kvad does not apply adapters: run {base_id}"
                ),
                after: "before any weight was downloaded".into(),
            });
        }
        Ok(format!("{listed} (its weights differ from the adapter's base, {base_id}: the shipped model is run)"))
    }
}

fn dir_bytes(p: &Path) -> u64 {
    std::fs::read_dir(p).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

fn read_json(path: &Path, what: &str) -> Result<Value, HubError> {
    let bytes = std::fs::read(path).map_err(|source| HubError::Io { path: path.display().to_string(), source })?;
    serde_json::from_slice(&bytes).map_err(|e| HubError::Invalid {
        field: what.into(),
        value: path.display().to_string(),
        why: format!("not valid JSON: {e}"),
    })
}
