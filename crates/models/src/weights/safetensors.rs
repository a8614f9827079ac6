//! Safetensors checkpoints, one file or several shards, memory-mapped.
//!
//! The `safetensors` crate parses and validates each header (offsets contiguous, sizes matching shapes, file fully
//! covered); we keep its owned metadata next to the map and slice tensors out of the map on demand. Integer and
//! 8-bit float tensors are what AWQ/GPTQ/FP8 checkpoints hold, so they are refused with a message saying so.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use super::gguf_dequant::dequantize;
use super::{map_file, Backing, StoredType, TensorInfo, WeightError, WeightSource};

/// The single-file checkpoint name transformers writes.
const SINGLE_FILE: &str = "model.safetensors";
/// The shard index transformers writes next to `model-0000i-of-0000n.safetensors`.
const INDEX_FILE: &str = "model.safetensors.index.json";

/// One mapped file and where its data section starts.
struct Shard {
    path: PathBuf,
    backing: Backing,
    data_start: usize,
}

/// Where one tensor lives: shard, absolute byte range in that file, and what the header says about it.
struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A set of safetensors files read as one weight source.
pub struct SafetensorsSource {
    /// The directory or first file, for messages about tensors no file holds.
    root: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
    not_read: Vec<PathBuf>,
}

impl std::fmt::Debug for SafetensorsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsSource")
            .field("root", &self.root)
            .field("shards", &self.shards.iter().map(|s| &s.path).collect::<Vec<_>>())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl SafetensorsSource {
    /// A model directory: model.safetensors alone when present; else the files named by model.safetensors.index.json
    /// (weight_map); else every *.safetensors file (sorted). Records which .safetensors files were NOT read (for a
    /// note the CLI prints), since a stray adapter or duplicate checkpoint in the directory is worth mentioning.
    pub fn open_dir(dir: &Path) -> Result<Self, WeightError> {
        if !dir.is_dir() {
            return Err(WeightError::NotFound { path: dir.into(), what: "model directory".into() });
        }
        let all = list_safetensors(dir)?;
        let single = dir.join(SINGLE_FILE);
        let index = dir.join(INDEX_FILE);
        let mut source = if single.is_file() {
            Self::open_files(std::slice::from_ref(&single))?
        } else if index.is_file() {
            Self::open_index(dir, &index)?
        } else if !all.is_empty() {
            Self::open_files(&all)?
        } else {
            return Err(WeightError::NotFound {
                path: dir.into(),
                what: format!("no {SINGLE_FILE}, {INDEX_FILE} or other *.safetensors file"),
            });
        };
        source.root = dir.into();
        source.not_read = all.into_iter().filter(|p| !source.shards.iter().any(|s| &s.path == p)).collect();
        Ok(source)
    }

    /// Exactly these files, merged; a tensor name found in two files is an error naming both.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self, WeightError> {
        let shards = paths
            .iter()
            .map(|p| Ok((p.clone(), Backing::Mapped(std::sync::Arc::new(map_file(p)?)))))
            .collect::<Result<Vec<_>, WeightError>>()?;
        Self::from_shards(shards)
    }

    /// One safetensors image held in memory (tests, fuzzing). Errors name `<memory>`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WeightError> {
        Self::from_shards(vec![(PathBuf::from("<memory>"), Backing::Owned(std::sync::Arc::new(bytes.to_vec())))])
    }

    /// The `.safetensors` files in the directory that `open_dir` did not read.
    pub fn files_not_read(&self) -> &[PathBuf] {
        &self.not_read
    }

    /// The files that were read, in the order they were opened.
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    fn open_index(dir: &Path, index: &Path) -> Result<Self, WeightError> {
        let bad = |reason: String| WeightError::BadHeader { path: index.into(), reason };
        let text = std::fs::read_to_string(index).map_err(|source| WeightError::Io { path: index.into(), source })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
        let mut wanted: Vec<(String, PathBuf)> = Vec::with_capacity(map.len());
        for (name, file) in map {
            let file = file.as_str().ok_or_else(|| bad(format!("weight_map[{name:?}] is {file}, not a file name")))?;
            let rel = Path::new(file);
            if !rel.components().all(|c| matches!(c, Component::Normal(_))) || file.is_empty() {
                return Err(bad(format!("weight_map[{name:?}] = {file:?} is not a file inside the model directory")));
            }
            wanted.push((name.clone(), dir.join(rel)));
        }
        let mut files: Vec<PathBuf> = wanted.iter().map(|(_, f)| f.clone()).collect();
        files.sort();
        files.dedup();
        let source = Self::open_files(&files)?;
        for (name, file) in &wanted {
            let held =
                source.tensors.get(name).is_some_and(|e| source.shards.get(e.shard).is_some_and(|s| &s.path == file));
            if !held {
                return Err(WeightError::MissingInShard {
                    index: index.into(),
                    shard: file.clone(),
                    name: name.clone(),
                });
            }
        }
        Ok(source)
    }

    fn from_shards(files: Vec<(PathBuf, Backing)>) -> Result<Self, WeightError> {
        let root = files.first().map(|(p, _)| p.clone()).unwrap_or_default();
        let mut shards = Vec::with_capacity(files.len());
        let mut tensors: BTreeMap<String, Entry> = BTreeMap::new();
        for (index, (path, backing)) in files.into_iter().enumerate() {
            let (header_len, metadata) = SafeTensors::read_metadata(backing.bytes())
                .map_err(|e| WeightError::BadHeader { path: path.clone(), reason: format!("safetensors: {e}") })?;
            // read_metadata checked 8 + header_len + data length == file length, so these cannot overflow.
            let data_start = header_len.checked_add(8).ok_or_else(|| WeightError::BadHeader {
                path: path.clone(),
                reason: "header length overflows".into(),
            })?;
            for (name, info) in metadata.tensors() {
                let (s, e) = info.data_offsets;
                let range = data_start.checked_add(s).zip(data_start.checked_add(e));
                let Some((start, end)) = range.filter(|&(a, b)| a <= b && b <= backing.bytes().len()) else {
                    return Err(WeightError::Truncated {
                        path: path.clone(),
                        what: format!("data of tensor {name:?}"),
                        offset: s as u64,
                        needed: e.saturating_sub(s) as u64,
                        len: backing.bytes().len() as u64,
                    });
                };
                if let Some(first) = tensors.get(&name) {
                    let other = shards.get(first.shard).map_or_else(PathBuf::new, |s: &Shard| s.path.clone());
                    return Err(WeightError::DuplicateTensor { path: path.clone(), name, other });
                }
                let entry = Entry { shard: index, dtype: info.dtype, shape: info.shape.clone(), start, end };
                tensors.insert(name, entry);
            }
            shards.push(Shard { path, backing, data_start });
        }
        Ok(SafetensorsSource { root, shards, tensors, not_read: Vec::new() })
    }

    fn entry(&self, name: &str) -> Result<(&Entry, &Shard), WeightError> {
        let missing = || WeightError::MissingTensor { path: self.root.clone(), name: name.into() };
        let e = self.tensors.get(name).ok_or_else(missing)?;
        let shard = self.shards.get(e.shard).ok_or_else(missing)?;
        Ok((e, shard))
    }
}

/// Our name for a safetensors dtype; everything but the three float types is `Other` with the crate's name.
fn stored_type(dtype: Dtype) -> StoredType {
    match dtype {
        Dtype::F32 => StoredType::F32,
        Dtype::F16 => StoredType::F16,
        Dtype::BF16 => StoredType::BF16,
        other => StoredType::Other(other.to_string()),
    }
}

/// The `*.safetensors` files directly in `dir`, sorted.
fn list_safetensors(dir: &Path) -> Result<Vec<PathBuf>, WeightError> {
    let io = |source| WeightError::Io { path: dir.into(), source };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "safetensors") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

impl WeightSource for SafetensorsSource {
    fn tensor_names(&self) -> Vec<String> {
        self.tensors.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        let e = self.tensors.get(name)?;
        Some(TensorInfo { name: name.to_string(), dtype: stored_type(e.dtype), shape: e.shape.clone() })
    }

    fn load_f32(&self, name: &str) -> Result<Vec<f32>, WeightError> {
        let (e, shard) = self.entry(name)?;
        let dtype = stored_type(e.dtype);
        let unsupported = || WeightError::UnsupportedType {
            path: shard.path.clone(),
            tensor: name.into(),
            dtype: dtype.name().to_string(),
        };
        if !dtype.is_readable() {
            return Err(unsupported());
        }
        let bytes = self.raw_bytes(name)?;
        dequantize(&dtype, bytes).ok_or_else(unsupported)
    }

    fn raw_bytes(&self, name: &str) -> Result<&[u8], WeightError> {
        let (e, shard) = self.entry(name)?;
        let bytes = shard.backing.bytes();
        bytes.get(e.start..e.end).ok_or_else(|| WeightError::Truncated {
            path: shard.path.clone(),
            what: format!("data of tensor {name:?}"),
            offset: e.start.saturating_sub(shard.data_start) as u64,
            needed: e.end.saturating_sub(e.start) as u64,
            len: bytes.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names() {
        assert_eq!(stored_type(Dtype::BF16), StoredType::BF16);
        assert_eq!(stored_type(Dtype::I32), StoredType::Other("I32".into()));
        assert_eq!(stored_type(Dtype::F8_E4M3), StoredType::Other("F8_E4M3".into()));
    }

    #[test]
    fn garbage_is_a_bad_header() {
        for bytes in [&b""[..], b"\x05\0\0\0\0\0\0\0{}", b"\xff\xff\xff\xff\xff\xff\xff\xff", b"\x02\0\0\0\0\0\0\0{}x"]
        {
            let err = SafetensorsSource::parse(bytes).err();
            assert!(matches!(err, Some(WeightError::BadHeader { .. })), "{bytes:?}: {err:?}");
        }
    }
}
