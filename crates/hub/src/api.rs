//! The Hub's JSON API, as kvad uses it. Endpoints (those of huggingface.co, and of any mirror at `HF_ENDPOINT`):
//!
//! - `GET /api/models/{owner}/{name}/revision/{revision}?blobs=true` — the commit a revision points to (`sha`),
//!   and the repo's files (`siblings[].rfilename`) with `size`, `blobId` and, for LFS files, `lfs.sha256`;
//!   `config.model_type` too. 401/403 for a gated or private repo, 404 with `X-Error-Code` (`RepoNotFound`,
//!   `RevisionNotFound`) for what does not exist. The revision is percent-encoded (`refs%2Fpr%2F1`).
//! - `GET /{owner}/{name}/resolve/{commit}/{file}` — a file at a commit; LFS files redirect (302) to a CDN. The
//!   first response carries `X-Repo-Commit`, `X-Linked-Etag` and `X-Linked-Size`; `Range: bytes=N-` resumes
//!   (206).
//! - `GET /api/models?search={text}&limit={n}&expand[]=config&expand[]=safetensors&...` — search, each result with
//!   its config's `architectures` / `model_type` / `tokenizer_config`, and its parameter counts per dtype.

use crate::http::{Client, Subject};
use crate::repo::{is_commit, RepoId};
use crate::HubError;
use serde::Deserialize;
use serde_json::Value;

/// One file of a repo, as the revision API lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct Sibling {
    /// Path in the repo.
    pub rfilename: String,
    /// Bytes, when the Hub says (`?blobs=true`).
    #[serde(default)]
    pub size: Option<u64>,
    /// Git blob id.
    #[serde(default, rename = "blobId")]
    pub blob_id: Option<String>,
    /// LFS pointer, for large files.
    #[serde(default)]
    pub lfs: Option<Lfs>,
}

/// An LFS file's digest and size.
#[derive(Debug, Clone, Deserialize)]
pub struct Lfs {
    /// SHA-256 of the contents (the name huggingface_hub gives the blob).
    pub sha256: String,
    /// Bytes.
    #[serde(default)]
    pub size: Option<u64>,
}

impl Sibling {
    /// The blob name huggingface_hub uses: the LFS sha256, else the git blob id.
    pub fn blob(&self) -> Option<&str> {
        self.lfs.as_ref().map(|l| l.sha256.as_str()).or(self.blob_id.as_deref())
    }

    /// Size in bytes, when known.
    pub fn bytes(&self) -> Option<u64> {
        self.size.or_else(|| self.lfs.as_ref().and_then(|l| l.size))
    }
}

/// What the revision endpoint says about a repo at a revision.
#[derive(Debug, Clone, Deserialize)]
pub struct RepoInfo {
    /// The commit.
    pub sha: String,
    /// The files.
    #[serde(default)]
    pub siblings: Vec<Sibling>,
    /// The config summary (`model_type`, `architectures`).
    #[serde(default)]
    pub config: Option<Value>,
}

/// Percent-encodes a path segment (everything but unreserved characters), as huggingface_hub quotes revisions.
pub fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Largest JSON answer the API may give (a repo with many files lists them all).
const API_LIMIT: u64 = 64 << 20;

/// Asks the Hub which commit `revision` is and what files the repo has there.
pub fn repo_info(client: &Client, endpoint: &str, repo: &RepoId, revision: &str) -> Result<RepoInfo, HubError> {
    let url = format!("{endpoint}/api/{}/{repo}/revision/{}?blobs=true", repo.kind.plural(), encode_segment(revision));
    let who = repo.to_string();
    let body = client.get(&url, None, &[], Subject::Repo(&who))?.read_limited(API_LIMIT, "revision API answer")?;
    let info: RepoInfo = serde_json::from_slice(&body).map_err(|e| HubError::Invalid {
        field: "revision API answer".into(),
        value: url.clone(),
        why: format!("not the JSON the Hub sends: {e}"),
    })?;
    if !is_commit(&info.sha) {
        return Err(HubError::Invalid {
            field: "sha".into(),
            value: info.sha,
            why: "the Hub names commits by 40 lowercase hex digits".into(),
        });
    }
    Ok(info)
}

/// One search result.
#[derive(Debug, Clone, Deserialize)]
pub struct SearchHit {
    /// `owner/name`.
    #[serde(alias = "modelId")]
    pub id: String,
    /// The config summary: `architectures`, `model_type`, `tokenizer_config`.
    #[serde(default)]
    pub config: Option<Value>,
    /// `{"parameters": {"BF16": n, ...}, "total": n}`.
    #[serde(default)]
    pub safetensors: Option<Value>,
    /// `text-generation`, ...
    #[serde(default)]
    pub pipeline_tag: Option<String>,
    /// Downloads last month.
    #[serde(default)]
    pub downloads: Option<u64>,
    /// `false`, `"auto"` or `"manual"`.
    #[serde(default)]
    pub gated: Option<Value>,
}

/// Searches the Hub's models.
pub fn search(client: &Client, endpoint: &str, text: &str, limit: usize) -> Result<Vec<SearchHit>, HubError> {
    let url = format!(
        "{endpoint}/api/models?search={}&limit={limit}&expand[]=config&expand[]=safetensors&expand[]=pipeline_tag&expand[]=downloads&expand[]=gated",
        encode_segment(text)
    );
    list(client, url, "the Hub's model search")
}

fn list(client: &Client, url: String, what: &'static str) -> Result<Vec<SearchHit>, HubError> {
    let body = client.get(&url, None, &[], Subject::Other(what))?.read_limited(API_LIMIT, "model list answer")?;
    serde_json::from_slice(&body).map_err(|e| HubError::Invalid {
        field: "model list answer".into(),
        value: url,
        why: format!("not the JSON the Hub sends: {e}"),
    })
}

/// The models whose cards name `repo` as their base with `relation` (`finetune`, `quantized`, `adapter`,
/// `merge`): the Hub's `base_model:RELATION:REPO` filter, most downloaded first.
pub fn derived(
    client: &Client,
    endpoint: &str,
    repo: &str,
    relation: &str,
    limit: usize,
) -> Result<Vec<SearchHit>, HubError> {
    let filter = encode_segment(&format!("base_model:{relation}:{repo}"));
    let url = format!("{endpoint}/api/models?filter={filter}&sort=downloads&limit={limit}");
    list(client, url, "the Hub's model list")
}

/// An author's models whose names hold `text`, with their config and parameter counts.
pub fn by_author(
    client: &Client,
    endpoint: &str,
    author: &str,
    text: &str,
    limit: usize,
) -> Result<Vec<SearchHit>, HubError> {
    let url = format!(
        "{endpoint}/api/models?author={}&search={}&limit={limit}&expand[]=config&expand[]=safetensors",
        encode_segment(author),
        encode_segment(text)
    );
    list(client, url, "the Hub's model list")
}

/// A search hit's parameter count: the Hub's `safetensors.total`, else the sum over its dtypes.
pub fn params(hit: &SearchHit) -> Option<u64> {
    let st = hit.safetensors.as_ref()?;
    st["total"].as_u64().or_else(|| {
        let per = st["parameters"].as_object()?;
        Some(per.values().filter_map(Value::as_u64).sum())
    })
}

/// The `resolve` URL of a file at a commit (a dataset's under `/datasets/`).
pub fn file_url(endpoint: &str, repo: &RepoId, commit: &str, file: &str) -> String {
    let path: Vec<String> = file.split('/').map(encode_segment).collect();
    let kind = if repo.kind == crate::RepoKind::Dataset { "datasets/" } else { "" };
    format!("{endpoint}/{kind}{repo}/resolve/{commit}/{}", path.join("/"))
}
