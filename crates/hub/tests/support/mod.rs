//! A fake Hugging Face Hub and a fake Ollama registry on loopback, speaking the real APIs' shapes (see
//! `kvad_hub::api` and `kvad_hub::ollama` for the endpoints), over a hand-written HTTP/1.1 server so tests can
//! make it misbehave: drop a connection mid-file, lie in Content-Length, redirect in a loop.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// A repo: its files at each commit, and branch/tag names.
#[derive(Clone, Default)]
pub struct Repo {
    pub commits: HashMap<String, Vec<(String, Vec<u8>)>>,
    pub refs: HashMap<String, String>,
    pub gated: bool,
}

/// How the fake misbehaves for one file name.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Send only this many bytes (with the full Content-Length) and close, `times` times.
    DropAfter { bytes: usize, times: usize },
    /// Announce this Content-Length, send the whole file.
    LieLength(u64),
    /// Send this many extra bytes beyond the file (no Content-Length).
    Overflow(usize),
    /// Redirect to itself.
    RedirectLoop,
}

#[derive(Default)]
pub struct State {
    pub repos: HashMap<String, Repo>,
    pub faults: HashMap<String, Fault>,
    /// Every request: (path with query, Range header, Authorization header).
    pub log: Vec<(String, Option<String>, Option<String>)>,
    pub token: Option<String>,
    /// Ollama: (ns/name:tag) → (config json, gguf bytes).
    pub ollama: HashMap<String, (Vec<u8>, Vec<u8>)>,
    /// Lie in the sibling listing: (repo, file name) extra entries.
    pub extra_siblings: Vec<(String, String)>,
    pub blobs: HashMap<String, Vec<u8>>,
    /// The CDN's base URL (absolute redirects, as the real Hub sends).
    pub base: String,
}

pub struct Fake {
    pub url: String,
    pub state: Arc<Mutex<State>>,
}

pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    send: Option<usize>,
    length: Option<u64>,
}

fn reply(status: u16, body: impl Into<Vec<u8>>) -> Reply {
    Reply { status, headers: Vec::new(), body: body.into(), send: None, length: None }
}

fn json(v: serde_json::Value) -> Reply {
    let mut r = reply(200, v.to_string());
    r.headers.push(("Content-Type".into(), "application/json".into()));
    r
}

impl Fake {
    pub fn start() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // The CDN answers on another host name for the same loopback server, as the real Hub's LFS CDN is another
        // host: the token is not sent there, and clients do not expect Hub headers from it.
        let cdn = url.replace("127.0.0.1", "localhost");
        let state = Arc::new(Mutex::new(State { base: cdn, ..State::default() }));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let st = st.clone();
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        Fake { url, state }
    }

    /// Adds a repo with one commit holding `files`, with `main` (and any `refs`) pointing at it.
    pub fn add_repo(&self, id: &str, commit: &str, files: Vec<(String, Vec<u8>)>, refs: &[&str]) {
        let mut s = self.state.lock().unwrap();
        let r = s.repos.entry(id.to_string()).or_default();
        r.commits.insert(commit.to_string(), files);
        for name in refs {
            r.refs.insert(name.to_string(), commit.to_string());
        }
    }

    /// Adds a dataset repo, as [`Fake::add_repo`] adds a model's.
    pub fn add_dataset(&self, id: &str, commit: &str, files: Vec<(String, Vec<u8>)>, refs: &[&str]) {
        self.add_repo(&format!("datasets/{id}"), commit, files, refs);
    }

    pub fn fault(&self, file: &str, f: Fault) {
        self.state.lock().unwrap().faults.insert(file.to_string(), f);
    }

    pub fn requests(&self) -> Vec<(String, Option<String>, Option<String>)> {
        self.state.lock().unwrap().log.clone()
    }

    /// Paths requested for files (resolve or CDN), by file name or blob.
    pub fn file_requests(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.0).filter(|p| p.contains("/resolve/")).collect()
    }

    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }
}

fn serve(mut conn: TcpStream, st: &Arc<Mutex<State>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let head_only = line.starts_with("HEAD ");
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    let auth = headers.get("authorization").cloned();
    st.lock().unwrap().log.push((path.clone(), range.clone(), auth.clone()));
    let r = route(&path, range.as_deref(), auth.as_deref(), st);
    let reason = match r.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Other",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\nConnection: close\r\n", r.status);
    for (k, v) in &r.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    match r.length {
        Some(n) if n == u64::MAX => {}
        Some(n) => head.push_str(&format!("Content-Length: {n}\r\n")),
        None => head.push_str(&format!("Content-Length: {}\r\n", r.body.len())),
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let n = r.send.unwrap_or(r.body.len()).min(r.body.len());
    if !head_only {
        let _ = conn.write_all(&r.body[..n]);
    }
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn find_commit(repo: &Repo, rev: &str) -> Option<String> {
    if repo.commits.contains_key(rev) {
        return Some(rev.to_string());
    }
    repo.refs.get(rev).cloned()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

fn range_reply(bytes: &[u8], range: Option<&str>, fault: Option<&Fault>, st: &Arc<Mutex<State>>, key: &str) -> Reply {
    let start = range
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
        .unwrap_or(0);
    if start > bytes.len() || (start == bytes.len() && start > 0) {
        return reply(416, "");
    }
    let mut r = reply(if start > 0 { 206 } else { 200 }, bytes[start..].to_vec());
    if start > 0 {
        r.headers.push(("Content-Range".into(), format!("bytes {start}-{}/{}", bytes.len() - 1, bytes.len())));
    }
    match fault {
        Some(Fault::DropAfter { bytes: n, times }) if *times > 0 => {
            r.send = Some(*n);
            let mut s = st.lock().unwrap();
            s.faults.insert(key.to_string(), Fault::DropAfter { bytes: *n, times: times - 1 });
        }
        Some(Fault::LieLength(n)) => r.length = Some(*n),
        Some(Fault::Overflow(extra)) => {
            r.body.extend(std::iter::repeat_n(0u8, *extra));
            r.length = Some(u64::MAX);
        }
        _ => {}
    }
    r
}

fn route(path: &str, range: Option<&str>, auth: Option<&str>, st: &Arc<Mutex<State>>) -> Reply {
    let (p, _query) = path.split_once('?').unwrap_or((path, ""));
    // Dataset repos answer under /api/datasets and /datasets/ as models do under /api/models and /; they are kept
    // as repos named `datasets/owner/name`.
    let (p, ns) = match (p.strip_prefix("/api/datasets/"), p.strip_prefix("/datasets/")) {
        (Some(r), _) => (format!("/api/models/{r}"), "datasets/"),
        (_, Some(r)) => (format!("/{r}"), "datasets/"),
        _ => (p.to_string(), ""),
    };
    let p = p.as_str();
    let s = st.lock().unwrap();
    let authorized = |repo: &Repo| {
        !repo.gated || (auth.is_some() && auth == s.token.as_ref().map(|t| format!("Bearer {t}")).as_deref())
    };
    if let Some(rest) = p.strip_prefix("/api/models/") {
        // /api/models/{o}/{n}/revision/{rev}
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        if parts.len() == 4 && parts[2] == "tree" {
            // huggingface_hub's list_repo_tree (snapshot_download lists files with it).
            let Some(repo) = s.repos.get(&format!("{ns}{}/{}", parts[0], parts[1])) else { return reply(404, "") };
            let Some(commit) = find_commit(repo, &decode(parts[3])) else { return reply(404, "") };
            let entries: Vec<serde_json::Value> = repo.commits[&commit]
                .iter()
                .map(|(n, b)| serde_json::json!({"type": "file", "path": n, "size": b.len(), "oid": &sha256_hex(b)[..40]}))
                .collect();
            return json(serde_json::Value::Array(entries));
        }
        if parts.len() == 4 && parts[2] == "revision" {
            let id = format!("{ns}{}/{}", parts[0], parts[1]);
            let Some(repo) = s.repos.get(&id) else {
                let mut r = reply(401, "");
                r.headers.push(("X-Error-Code".into(), "RepoNotFound".into()));
                return r;
            };
            if !authorized(repo) {
                let mut r = reply(401, "");
                r.headers.push(("X-Error-Code".into(), "GatedRepo".into()));
                r.headers.push(("X-Error-Message".into(), format!("Access to model {id} is restricted.")));
                return r;
            }
            let rev = decode(parts[3]);
            let Some(commit) = find_commit(repo, &rev) else {
                let mut r = reply(404, "");
                r.headers.push(("X-Error-Code".into(), "RevisionNotFound".into()));
                return r;
            };
            let mut siblings: Vec<serde_json::Value> = repo.commits[&commit]
                .iter()
                .map(|(name, bytes)| {
                    let sha = sha256_hex(bytes);
                    let mut v = serde_json::json!({"rfilename": name, "size": bytes.len(), "blobId": &sha[..40]});
                    if name.ends_with(".safetensors") || name.ends_with(".gguf") || name.ends_with(".parquet") {
                        v["lfs"] = serde_json::json!({"sha256": sha, "size": bytes.len(), "pointerSize": 134});
                    }
                    v
                })
                .collect();
            for (r, f) in &s.extra_siblings {
                if *r == id {
                    siblings.push(serde_json::json!({"rfilename": f, "size": 10, "blobId": "0123456789abcdef0123456789abcdef01234567"}));
                }
            }
            let model_type = repo.commits[&commit]
                .iter()
                .find(|(n, _)| n == "config.json")
                .and_then(|(_, b)| serde_json::from_slice::<serde_json::Value>(b).ok())
                .and_then(|c| c.get("model_type").cloned());
            return json(
                serde_json::json!({"id": id, "sha": commit, "siblings": siblings, "config": {"model_type": model_type}}),
            );
        }
        return reply(404, "");
    }
    if p == "/api/models" {
        let param = |k: &str| _query.split('&').find_map(|kv| kv.strip_prefix(k)).map(decode);
        let q = param("search=").unwrap_or_default();
        // As the Hub: author=OWNER, and filter=base_model:RELATION:REPO read from each card's front matter
        // (base_model, base_model_relation).
        let author = param("author=");
        let filter = param("filter=");
        let mut hits = Vec::new();
        let mut ids: Vec<&String> = s.repos.keys().collect();
        ids.sort();
        for id in ids {
            if !id.to_lowercase().contains(&q.to_lowercase()) {
                continue;
            }
            if author.as_ref().is_some_and(|a| id.split('/').next() != Some(a.as_str())) {
                continue;
            }
            let repo = &s.repos[id];
            let Some(commit) = repo.refs.get("main") else { continue };
            let files = &repo.commits[commit];
            if let Some(f) = &filter {
                let card =
                    files.iter().find(|(n, _)| n == "README.md").map(|(_, b)| String::from_utf8_lossy(b).to_string());
                let field = |k: &str| {
                    card.as_deref().unwrap_or("").lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string())
                };
                let (base, relation) = (field("base_model:"), field("base_model_relation:"));
                let want = format!("base_model:{}:{}", relation.unwrap_or_default(), base.unwrap_or_default());
                if *f != want {
                    continue;
                }
            }
            let get = |n: &str| {
                files
                    .iter()
                    .find(|(f, _)| f == n)
                    .and_then(|(_, b)| serde_json::from_slice::<serde_json::Value>(b).ok())
            };
            let cfg = get("config.json").unwrap_or_default();
            let tc = get("tokenizer_config.json").unwrap_or_default();
            let params = get("params.json").unwrap_or(serde_json::json!({"F32": 100000}));
            hits.push(serde_json::json!({
                "id": id,
                "config": {"architectures": cfg.get("architectures"), "model_type": cfg.get("model_type"), "tokenizer_config": tc},
                "safetensors": {"parameters": params},
                "pipeline_tag": "text-generation",
                "downloads": 7,
            }));
        }
        return json(serde_json::Value::Array(hits));
    }
    if let Some(rest) = p.strip_prefix("/cdn/") {
        let Some(bytes) = s.blobs.get(rest).cloned() else { return reply(404, "") };
        let fault = s.faults.get(rest).cloned();
        drop(s);
        return range_reply(&bytes, range, fault.as_ref(), st, rest);
    }
    if let Some(rest) = p.strip_prefix("/v2/") {
        // /v2/{ns}/{name}/manifests/{tag} or /blobs/{digest}
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.len() == 4 && parts[2] == "manifests" {
            let key = format!("{}/{}:{}", parts[0], parts[1], parts[3]);
            let Some((cfg, gguf)) = s.ollama.get(&key) else { return reply(404, "") };
            let m = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": format!("sha256:{}", sha256_hex(cfg)), "size": cfg.len()},
                "layers": [
                    {"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{}", sha256_hex(gguf)), "size": gguf.len()},
                    {"mediaType": "application/vnd.ollama.image.license", "digest": format!("sha256:{}", sha256_hex(b"MIT")), "size": 3}
                ]
            });
            return json(m);
        }
        if parts.len() == 4 && parts[2] == "blobs" {
            let hex = parts[3].trim_start_matches("sha256:").to_string();
            let mut found = None;
            for (cfg, gguf) in s.ollama.values() {
                if sha256_hex(cfg) == hex {
                    return reply(200, cfg.clone());
                }
                if sha256_hex(gguf) == hex {
                    found = Some(gguf.clone());
                }
            }
            if let Some(gguf) = found {
                let base = s.base.clone();
                drop(s);
                st.lock().unwrap().blobs.insert(hex.clone(), gguf);
                let mut r = reply(302, "");
                r.headers.push(("Location".into(), format!("{base}/cdn/{hex}")));
                return r;
            }
        }
        return reply(404, "");
    }
    // /{o}/{n}/resolve/{commit}/{file}
    let parts: Vec<&str> = p.trim_start_matches('/').splitn(5, '/').collect();
    if parts.len() == 5 && parts[2] == "resolve" {
        let id = format!("{ns}{}/{}", parts[0], parts[1]);
        let Some(repo) = s.repos.get(&id) else { return reply(404, "") };
        if !authorized(repo) {
            return reply(401, "");
        }
        let file = decode(parts[4]);
        let Some(commit) = find_commit(repo, parts[3]) else { return reply(404, "") };
        let Some((_, bytes)) = repo.commits[&commit].iter().find(|(n, _)| *n == file) else {
            let mut r = reply(404, "");
            r.headers.push(("X-Error-Code".into(), "EntryNotFound".into()));
            return r;
        };
        let bytes = bytes.clone();
        let fault = s.faults.get(&file).cloned();
        if let Some(Fault::RedirectLoop) = fault {
            let mut r = reply(302, "");
            r.headers.push(("Location".into(), p.to_string()));
            return r;
        }
        if file.ends_with(".safetensors") || file.ends_with(".parquet") {
            // LFS files live on the CDN, as on the real Hub.
            let sha = sha256_hex(&bytes);
            let mut r = reply(302, "");
            r.headers.push(("Location".into(), format!("{}/cdn/{sha}", s.base)));
            r.headers.push(("X-Repo-Commit".into(), commit.clone()));
            r.headers.push(("X-Linked-Etag".into(), format!("\"{sha}\"")));
            r.headers.push(("X-Linked-Size".into(), bytes.len().to_string()));
            drop(s);
            let mut s = st.lock().unwrap();
            s.blobs.insert(sha.clone(), bytes);
            if let Some(f) = fault {
                s.faults.entry(sha).or_insert(f);
            }
            return r;
        }
        drop(s);
        let etag = format!("\"{}\"", &sha256_hex(&bytes)[..40]);
        let mut r = range_reply(&bytes, range, fault.as_ref(), st, &file);
        r.headers.push(("X-Repo-Commit".into(), commit));
        r.headers.push(("ETag".into(), etag));
        return r;
    }
    reply(404, "")
}

/// A byte-level BPE tokenizer.json of exactly `512` tokens (256 bytes + 256 merges of 'a'..='p' pairs), so the
/// tiny fixture models (vocab 512) run end to end through the tokenizer.
pub fn tiny_tokenizer_json() -> String {
    // GPT-2's bytes_to_unicode.
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut pairs: Vec<(u32, char)> = bs.iter().zip(&cs).map(|(b, c)| (*b, char::from_u32(*c).unwrap())).collect();
    pairs.sort();
    let mut vocab = serde_json::Map::new();
    for (i, (_, c)) in pairs.iter().enumerate() {
        vocab.insert(c.to_string(), serde_json::json!(i));
    }
    let mut merges = Vec::new();
    for a in 'a'..='p' {
        for b in 'a'..='p' {
            let id = vocab.len();
            vocab.insert(format!("{a}{b}"), serde_json::json!(id));
            merges.push(format!("{a} {b}"));
        }
    }
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    })
    .to_string()
}

/// The files of a runnable tiny repo: the llama-tied fixture (vocab 512) with the tiny tokenizer.
pub fn tiny_llama_files() -> Vec<(String, Vec<u8>)> {
    let dir = fixtures().join("models/llama-tied");
    vec![
        ("config.json".into(), std::fs::read(dir.join("config.json")).unwrap()),
        ("model.safetensors".into(), std::fs::read(dir.join("model.safetensors")).unwrap()),
        ("tokenizer.json".into(), tiny_tokenizer_json().into_bytes()),
        ("tokenizer_config.json".into(), br#"{"model_max_length": 128}"#.to_vec()),
        (".gitattributes".into(), b"*.safetensors filter=lfs".to_vec()),
        ("README.md".into(), b"# tiny".to_vec()),
    ]
}

pub const C1: &str = "1111111111111111111111111111111111111111";
pub const C2: &str = "2222222222222222222222222222222222222222";
