//! The quantised cache: a model's weights in a backend's formats, written once under `~/.cache/kvad/quant` and
//! memory-mapped on later loads, so the second load costs a map and a checksum instead of a quantisation.
//!
//! The file is a GGUF (version 3) of kvad's own: tensors under the names the loader records (HF names, with stacked
//! `…qkv_proj` / `…gate_up_proj` matrices and transposed GPT-2 weights), metadata `kvad.cache.version`,
//! `kvad.config` (the typed config as JSON), `kvad.notes` and `kvad.checksum` over the data section. The file name
//! carries a key over the source files' paths, sizes and modification times, the backend and the format version,
//! so a changed source is a different file; a file that fails to parse or whose checksum differs is rebuilt.

use crate::config::ModelConfig;
use crate::files::ModelFiles;
use crate::tensors::Recorded;
use crate::weights::GgufFile;
use kvad_tensor::cpu::QType;
use kvad_tensor::BackendKind;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bumped whenever the file's meaning changes; part of the key, so old files are simply not found.
pub const FORMAT_VERSION: u32 = 3;
const ALIGN: usize = 32;

/// The source files whose identity keys the cache.
fn source_files(files: &ModelFiles) -> Vec<PathBuf> {
    match files {
        ModelFiles::Gguf(p) => vec![p.clone()],
        ModelFiles::HfDir(d) => {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d)
                .map(|it| {
                    it.filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| {
                            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                                n == "config.json" || n.ends_with(".safetensors") || n == "model.safetensors.index.json"
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        }
    }
}

/// 64-bit FNV-1a, for the key (short strings).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Where the cache file of (model files, backend) lives.
pub fn cache_path(dir: &Path, files: &ModelFiles, backend: BackendKind) -> PathBuf {
    let mut key = format!("v{FORMAT_VERSION}|{backend}");
    for f in source_files(files) {
        let meta = std::fs::metadata(&f).ok();
        let size = meta.as_ref().map_or(0, |m| m.len());
        let mtime = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let canon = std::fs::canonicalize(&f).unwrap_or(f);
        key.push_str(&format!("|{}:{size}:{mtime}", canon.display()));
    }
    let stem = match files {
        ModelFiles::Gguf(p) => p.file_stem(),
        ModelFiles::HfDir(d) => d.file_name(),
    }
    .and_then(|s| s.to_str())
    .unwrap_or("model")
    .chars()
    .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' { c } else { '_' })
    .collect::<String>();
    dir.join(format!("{stem}.{backend}.{:016x}.kvq.gguf", fnv(&key)))
}

/// A fast checksum over the data section (4 lanes of multiply–rotate over 8-byte words), so that reading a
/// 140 MB cache costs milliseconds, not a full cryptographic hash.
pub fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [1u64, 2, 3, 4];
    let chunks = bytes.chunks_exact(32);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[l * 8..l * 8 + 8].try_into().unwrap_or([0; 8]));
            *lane = (*lane ^ w).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = lanes.iter().fold(bytes.len() as u64, |h, &l| (h ^ l).wrapping_mul(K).rotate_left(31));
    for &b in rest {
        h = (h ^ b as u64).wrapping_mul(K);
    }
    h
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Writes the cache file (to a temporary name, then renamed, so a crash never leaves a half file under the name).
pub(crate) fn write(
    path: &Path,
    cfg: &ModelConfig,
    notes: &[String],
    record: &[(String, Recorded)],
) -> std::io::Result<()> {
    // Tensor data, each aligned, as (name, ne, type, bytes).
    let mut entries: Vec<(&str, Vec<u64>, u32, &[u8])> = Vec::with_capacity(record.len());
    let mut vec_bytes: Vec<Vec<u8>> = Vec::new();
    for (name, r) in record {
        if let Recorded::Vector(v, _) = r {
            vec_bytes.push(v.iter().flat_map(|x| x.to_le_bytes()).collect());
            let _ = name;
        }
    }
    let mut vi = 0;
    for (name, r) in record {
        match r {
            // Matrices in kvad's row layout, as bytes (ggml I8), their format in `kvad.qtype.<name>`.
            Recorded::Matrix(m) => {
                entries.push((name, vec![(m.bytes().len() / m.rows().max(1)) as u64, m.rows() as u64], 24, m.bytes()))
            }
            Recorded::Vector(_, shape) => {
                let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
                entries.push((name, ne, 0, &vec_bytes[vi]));
                vi += 1;
            }
        }
    }
    let mut offsets = Vec::with_capacity(entries.len());
    let mut data: Vec<u8> = Vec::with_capacity(entries.iter().map(|e| e.3.len() + ALIGN).sum());
    for e in &entries {
        offsets.push(data.len());
        data.extend_from_slice(e.3);
        data.resize(data.len().div_ceil(ALIGN) * ALIGN, 0);
    }
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let config = serde_json::to_string(cfg).map_err(std::io::Error::other)?;
    let mut kvs: Vec<(String, String)> = vec![
        ("kvad.config".into(), config),
        ("kvad.notes".into(), notes.join("\n")),
        ("general.architecture".into(), "kvad-cache".into()),
    ];
    for (name, r) in record {
        if let Recorded::Matrix(m) = r {
            kvs.push((format!("kvad.qtype.{name}"), m.qtype().name().into()));
        }
    }
    head.extend_from_slice(&((kvs.len() + 2) as u64).to_le_bytes());
    put_str(&mut head, "kvad.cache.version");
    head.extend_from_slice(&4u32.to_le_bytes());
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    for (k, v) in &kvs {
        put_str(&mut head, k);
        head.extend_from_slice(&8u32.to_le_bytes());
        put_str(&mut head, v);
    }
    put_str(&mut head, "kvad.checksum");
    head.extend_from_slice(&8u32.to_le_bytes());
    put_str(&mut head, &format!("{:016x}", checksum(&data)));
    for (e, &o) in entries.iter().zip(&offsets) {
        put_str(&mut head, e.0);
        head.extend_from_slice(&(e.1.len() as u32).to_le_bytes());
        for &d in &e.1 {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&e.2.to_le_bytes());
        head.extend_from_slice(&(o as u64).to_le_bytes());
    }
    head.resize(head.len().div_ceil(ALIGN) * ALIGN, 0);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&head)?;
    f.write_all(&data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Opens and validates a cache file: the config it holds, or why it cannot be trusted.
/// An opened, checked cache file.
pub(crate) struct Opened {
    /// The file, mapped.
    pub file: GgufFile,
    /// The typed config it was written with.
    pub config: ModelConfig,
    /// The notes of the load that wrote it.
    pub notes: Vec<String>,
    /// Each matrix's format.
    pub types: HashMap<String, QType>,
}

pub(crate) fn open(path: &Path) -> Result<Opened, String> {
    let g = GgufFile::open(path).map_err(|e| e.to_string())?;
    let version = g.get("kvad.cache.version").and_then(|v| v.as_u64());
    if version != Some(FORMAT_VERSION as u64) {
        return Err(format!("format version {version:?}, expected {FORMAT_VERSION}"));
    }
    let want = g.get("kvad.checksum").and_then(|v| v.as_str()).ok_or("no checksum")?.to_string();
    let data = g.data_section();
    let got = format!("{:016x}", checksum(data));
    if got != want {
        return Err(format!("checksum {got} differs from the recorded {want}"));
    }
    let cfg: ModelConfig = serde_json::from_str(g.get("kvad.config").and_then(|v| v.as_str()).ok_or("no config")?)
        .map_err(|e| format!("config: {e}"))?;
    let notes = g
        .get("kvad.notes")
        .and_then(|v| v.as_str())
        .map(|s| s.lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    let mut types = HashMap::new();
    for (k, v) in &g.metadata {
        if let Some(name) = k.strip_prefix("kvad.qtype.") {
            let t = v.as_str().and_then(QType::from_name).ok_or_else(|| format!("{k} = {v:?} is not a format"))?;
            types.insert(name.to_string(), t);
        }
    }
    Ok(Opened { file: g, config: cfg, notes, types })
}

/// Every cache file under `dir` with its size.
pub fn list(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut v: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".kvq.gguf")))
                .map(|e| (e.path(), e.metadata().map_or(0, |m| m.len())))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Deletes every cache file under `dir` (and stray temporaries); returns how many files and bytes went.
pub fn clear(dir: &Path) -> std::io::Result<(usize, u64)> {
    let mut n = (0, 0);
    let Ok(it) = std::fs::read_dir(dir) else { return Ok(n) };
    for e in it.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.contains(".kvq.") {
            n.1 += e.metadata().map_or(0, |m| m.len());
            std::fs::remove_file(e.path())?;
            n.0 += 1;
        }
    }
    Ok(n)
}
