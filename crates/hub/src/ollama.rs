//! Ollama tags: `ollama:<name>[:<tag>]` (the `library` namespace) and `ollama:<namespace>/<name>[:<tag>]`, pulled
//! from the Ollama registry (`KVAD_OLLAMA_REGISTRY`, else `https://registry.ollama.ai`), which speaks the OCI
//! distribution API:
//!
//! - `GET /v2/{namespace}/{name}/manifests/{tag}` with `Accept: application/vnd.docker.distribution.manifest.v2+json`
//!   — a manifest whose `config` blob is a small JSON (`model_format`, `file_type`) and whose layer of media type
//!   `application/vnd.ollama.image.model` is the GGUF, with its `size` and `digest` (`sha256:<hex>`).
//! - `GET /v2/{namespace}/{name}/blobs/{digest}` — a blob, usually by a redirect to a CDN; `Range` resumes.
//!
//! The tag is read and sized before any download: the config blob says the quantisation, and only Q4_K_M and
//! Q8_0 are accepted (others are refused by name). The GGUF is checked against its sha256 digest and kept in
//! kvad's cache as `ollama/blobs/sha256-<hex>.gguf`, beside the manifest under `ollama/manifests/`.

use crate::fetch::{self, PlannedFile, Progress, Target};
use crate::http::{Client, Subject};
use crate::resolve::Resolved;
use crate::{config, HubError};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Quantisations kvad runs from Ollama tags.
pub const SUPPORTED_FILE_TYPES: &[&str] = &["Q4_K_M", "Q8_0"];
const MODEL_MEDIA: &str = "application/vnd.ollama.image.model";
const MANIFEST_ACCEPT: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// A parsed `ollama:` name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaTag {
    /// `library` unless given.
    pub namespace: String,
    /// The model.
    pub name: String,
    /// `latest` unless given.
    pub tag: String,
}

fn bad(field: &str, value: &str, why: &str) -> HubError {
    HubError::Invalid { field: field.into(), value: value.into(), why: why.into() }
}

fn check_part(field: &str, s: &str, allow_upper: bool) -> Result<(), HubError> {
    let ok = s.bytes().all(|b| {
        b.is_ascii_lowercase()
            || b.is_ascii_digit()
            || matches!(b, b'.' | b'_' | b'-')
            || (allow_upper && b.is_ascii_uppercase())
    });
    if s.is_empty() || s.len() > 128 || !ok || s.starts_with(['.', '-']) || s.contains("..") {
        return Err(bad(field, s, "expected lowercase letters, digits, '.', '_' or '-' (not leading, no '..')"));
    }
    Ok(())
}

impl OllamaTag {
    /// Parses what follows `ollama:`.
    pub fn parse(s: &str) -> Result<Self, HubError> {
        let (path, tag) = match s.rsplit_once(':') {
            Some((p, t)) => (p, t),
            None => (s, "latest"),
        };
        let (namespace, name) = match path.split_once('/') {
            Some((ns, n)) => (ns, n),
            None => ("library", path),
        };
        check_part("ollama namespace", namespace, false)?;
        check_part("ollama model name", name, false)?;
        check_part("ollama tag", tag, true)?;
        Ok(OllamaTag { namespace: namespace.into(), name: name.into(), tag: tag.into() })
    }

    fn display(&self) -> String {
        if self.namespace == "library" {
            format!("ollama:{}:{}", self.name, self.tag)
        } else {
            format!("ollama:{}/{}:{}", self.namespace, self.name, self.tag)
        }
    }
}

#[derive(Debug, Deserialize)]
struct Layer {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: u64,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Layer,
    layers: Vec<Layer>,
}

/// Where Ollama tags are kept.
pub fn store_dir() -> PathBuf {
    config::kvad_cache_dir().join("ollama")
}

fn host_dir(registry: &str) -> String {
    let host = registry.split("://").nth(1).unwrap_or(registry);
    host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

fn manifest_path(registry: &str, t: &OllamaTag) -> PathBuf {
    store_dir().join("manifests").join(host_dir(registry)).join(&t.namespace).join(&t.name).join(&t.tag)
}

fn digest_hex(d: &str) -> Result<&str, HubError> {
    match d.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(h),
        _ => Err(bad("ollama layer digest", d, "expected sha256:<64 hex digits>")),
    }
}

fn model_layer(m: &Manifest) -> Result<&Layer, HubError> {
    m.layers.iter().find(|l| l.media_type == MODEL_MEDIA).ok_or_else(|| {
        bad("ollama manifest layers", "no model layer", "the manifest has no application/vnd.ollama.image.model layer")
    })
}

fn blob_path(hex: &str) -> PathBuf {
    store_dir().join("blobs").join(format!("sha256-{hex}.gguf"))
}

fn parse_manifest(bytes: &[u8], url: &str) -> Result<Manifest, HubError> {
    serde_json::from_slice(bytes).map_err(|e| bad("ollama manifest", url, &format!("not a registry manifest: {e}")))
}

/// The tag's GGUF when it is complete in kvad's store (the registry is not asked).
pub fn stored(t: &OllamaTag) -> Option<Resolved> {
    let registry = config::ollama_registry();
    let m = parse_manifest(&std::fs::read(manifest_path(&registry, t)).ok()?, "cached manifest").ok()?;
    let layer = model_layer(&m).ok()?;
    let p = blob_path(digest_hex(&layer.digest).ok()?);
    std::fs::metadata(&p).is_ok_and(|md| md.len() == layer.size).then(|| Resolved {
        source_note: Some(format!(
            "{}: from kvad's Ollama store ({}); the registry was not asked",
            t.display(),
            p.display()
        )),
        path: p,
        notes: Vec::new(),
    })
}

/// Every tag in kvad's store, as `ollama:[namespace/]name:tag` with the bytes of its layers.
pub fn tags() -> Vec<(String, u64)> {
    let root = store_dir().join("manifests");
    let mut out = Vec::new();
    for host in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for ns in std::fs::read_dir(host.path()).into_iter().flatten().flatten() {
            for name in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                for tag in std::fs::read_dir(name.path()).into_iter().flatten().flatten() {
                    let size = std::fs::read(tag.path())
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        .and_then(|m| m["layers"].as_array().map(|l| l.iter().filter_map(|x| x["size"].as_u64()).sum()))
                        .unwrap_or(0);
                    let (ns, name, tag) = (ns.file_name(), name.file_name(), tag.file_name());
                    let ns = ns.to_string_lossy();
                    let prefix = if ns == "library" { String::new() } else { format!("{ns}/") };
                    out.push((format!("ollama:{prefix}{}:{}", name.to_string_lossy(), tag.to_string_lossy()), size));
                }
            }
        }
    }
    out.sort();
    out
}

/// The tag's GGUF from kvad's store, pulling it when it is not there.
pub fn resolve(t: &OllamaTag, progress: &mut dyn Progress) -> Result<Resolved, HubError> {
    let registry = config::ollama_registry();
    if let Some(r) = stored(t) {
        return Ok(r);
    }
    if config::offline() {
        return Err(HubError::Offline {
            what: t.display(),
            detail: format!("it is not in kvad's Ollama store ({})", store_dir().display()),
        });
    }
    let path = pull(&Client::new(None, None), &registry, t, progress)?;
    Ok(Resolved {
        source_note: Some(format!("{}: downloaded from {registry} into {}", t.display(), path.display())),
        path,
        notes: Vec::new(),
    })
}

/// Pulls a tag: manifest, config (the quantisation, checked), then the GGUF blob, verified by its digest.
pub fn pull(client: &Client, registry: &str, t: &OllamaTag, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
    let who = t.display();
    let subject = Subject::Other(&who);
    let url = format!("{registry}/v2/{}/{}/manifests/{}", t.namespace, t.name, t.tag);
    let raw =
        client.get(&url, None, &[("Accept", MANIFEST_ACCEPT)], subject)?.read_limited(1 << 20, "ollama manifest")?;
    let m = parse_manifest(&raw, &url)?;
    let layer = model_layer(&m)?;
    let hex = digest_hex(&layer.digest)?.to_string();
    let cfg_url = format!("{registry}/v2/{}/{}/blobs/{}", t.namespace, t.name, m.config.digest);
    digest_hex(&m.config.digest)?;
    let cfg_raw = client.get(&cfg_url, None, &[], subject)?.read_limited(1 << 20, "ollama config blob")?;
    let cfg: serde_json::Value =
        serde_json::from_slice(&cfg_raw).map_err(|e| bad("ollama config blob", &cfg_url, &format!("not JSON: {e}")))?;
    let format = cfg.get("model_format").and_then(|v| v.as_str()).unwrap_or("gguf");
    if format != "gguf" {
        return Err(HubError::Refused {
            repo: who.clone(),
            reason: format!("model_format = {format:?}: only GGUF tags are read"),
            after: "after its manifest alone".into(),
        });
    }
    let file_type = cfg.get("file_type").and_then(|v| v.as_str()).unwrap_or("unknown");
    if !SUPPORTED_FILE_TYPES.contains(&file_type) {
        return Err(HubError::Refused {
            repo: who.clone(),
            reason: format!("file_type = {file_type:?}: kvad runs the Q4_K_M and Q8_0 tags only"),
            after: "after its manifest alone; nothing else was downloaded".into(),
        });
    }
    let path = blob_path(&hex);
    let cached = std::fs::metadata(&path).is_ok_and(|md| md.len() == layer.size);
    progress.plan(
        &format!("{who} ({file_type}, {})", layer.digest),
        &[PlannedFile { name: format!("sha256-{hex}.gguf"), size: Some(layer.size), cached }],
    );
    if !cached {
        let blob_url = format!("{registry}/v2/{}/{}/blobs/{}", t.namespace, t.name, layer.digest);
        let name = format!("sha256-{hex}.gguf");
        let target =
            Target { url: &blob_url, subject, name: &name, path: &path, expected: Some(layer.size), limit: 1 << 40 };
        fetch::fetch(client, &target, progress)?;
        let got = sha256_file(&path)?;
        if got != hex {
            let _ = std::fs::remove_file(&path);
            return Err(bad(
                "ollama blob digest",
                &format!("sha256:{got}"),
                &format!("the manifest says {}; the download was deleted", layer.digest),
            ));
        }
    }
    let mp = manifest_path(registry, t);
    if let Some(parent) = mp.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|source| HubError::Io { path: parent.display().to_string(), source })?;
    }
    std::fs::write(&mp, &raw).map_err(|source| HubError::Io { path: mp.display().to_string(), source })?;
    Ok(path)
}

/// Deletes a tag's manifest, and its GGUF when no other tag uses it. Returns the bytes freed.
pub fn remove(t: &OllamaTag) -> Result<u64, HubError> {
    let registry = config::ollama_registry();
    let mp = manifest_path(&registry, t);
    let raw = std::fs::read(&mp)
        .map_err(|_| HubError::NotCached { what: t.display(), cache: store_dir().display().to_string() })?;
    std::fs::remove_file(&mp).map_err(|source| HubError::Io { path: mp.display().to_string(), source })?;
    let Ok(layer) = parse_manifest(&raw, "cached manifest").and_then(|m| model_layer(&m).map(|l| l.digest.clone()))
    else {
        return Ok(0);
    };
    let still_used = walk(&store_dir().join("manifests"))
        .iter()
        .any(|p| std::fs::read_to_string(p).is_ok_and(|s| s.contains(&layer)));
    if still_used {
        return Ok(0);
    }
    let blob = blob_path(digest_hex(&layer)?);
    let size = std::fs::metadata(&blob).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&blob);
    Ok(size)
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

fn sha256_file(p: &Path) -> Result<String, HubError> {
    let mut f = std::fs::File::open(p).map_err(|source| HubError::Io { path: p.display().to_string(), source })?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|source| HubError::Io { path: p.display().to_string(), source })?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_library_and_latest_defaults() {
        let t = OllamaTag::parse("smollm2:135m-instruct-q8_0").unwrap();
        assert_eq!(
            (t.namespace.as_str(), t.name.as_str(), t.tag.as_str()),
            ("library", "smollm2", "135m-instruct-q8_0")
        );
        let t = OllamaTag::parse("someone/model").unwrap();
        assert_eq!((t.namespace.as_str(), t.tag.as_str()), ("someone", "latest"));
        for (s, field) in
            [("../x", "namespace"), ("a/../b", "name"), ("x:", "tag"), ("x:a/b", "tag"), ("A/b", "namespace")]
        {
            let e = OllamaTag::parse(s).unwrap_err().to_string();
            assert!(e.contains(field), "{s}: {e}");
        }
    }
}
