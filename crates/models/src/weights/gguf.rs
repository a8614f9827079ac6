//! The GGUF reader: header, metadata, tensor infos, and tensor data over a memory map.
//!
//! Layout (little-endian, versions 2 and 3): magic "GGUF", u32 version, u64 tensor count, u64 metadata count, the
//! metadata key/value pairs, the tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset), then padding
//! to `general.alignment` (default 32), then the data section, into which each tensor's offset points.
//!
//! The file is untrusted input: every read goes through `Cursor`, which checks the bytes are there before slicing,
//! and every count is checked against the bytes left before anything is allocated for it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::gguf_dequant::{dequantize, GgmlType};
use super::gguf_value::{GgufValue, GgufValueType};
use super::{map_file, Backing, TensorInfo, WeightError, WeightSource};

/// The magic bytes every GGUF file starts with.
pub(crate) const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most 4 dimensions.
const MAX_DIMS: u32 = 4;
/// Arrays of arrays deeper than this are refused: real files nest at most once, and unbounded nesting would let a
/// small file exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 8;
/// Smallest possible tensor info: empty name (8), n_dims (4), type (4), offset (8).
const MIN_TENSOR_INFO: u64 = 24;
/// Smallest possible metadata pair: empty key (8), type (4), one byte of value.
const MIN_KV: u64 = 13;

/// One tensor as the GGUF header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// The tensor name, e.g. "blk.0.attn_q.weight".
    pub name: String,
    /// The ggml type id.
    pub ggml_type: GgmlType,
    /// ggml dimensions, innermost first (`ne[0]` is the contiguous one).
    pub ne: Vec<u64>,
    /// PyTorch-order shape: `ne` reversed.
    pub shape: Vec<usize>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes, or `None` for a type id we do not know (so cannot size or read).
    pub byte_len: Option<u64>,
}

/// An opened GGUF file: metadata, tensor directory, and the mapped bytes the tensors are read from.
pub struct GgufFile {
    /// The format version (2 or 3).
    pub version: u32,
    /// Every metadata key and value (keys are unique; a repeated key is an error).
    pub metadata: BTreeMap<String, GgufValue>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// File offset of the data section.
    pub data_offset: u64,
    tensors: Vec<GgufTensor>,
    by_name: HashMap<String, usize>,
    path: PathBuf,
    backing: Backing,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl GgufFile {
    /// Maps and parses a GGUF file. Tensor data is not touched until it is asked for.
    pub fn open(path: &Path) -> Result<Self, WeightError> {
        let map = map_file(path)?;
        Self::from_backing(path.to_path_buf(), Backing::Mapped(std::sync::Arc::new(map)))
    }

    /// Parses a GGUF image held in memory (tests, fuzzing, files fetched into a buffer). Errors name `<memory>`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WeightError> {
        Self::from_backing(PathBuf::from("<memory>"), Backing::Owned(std::sync::Arc::new(bytes.to_vec())))
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// Moves a metadata value out (a tokenizer takes its vocabulary instead of copying it).
    pub fn take(&mut self, key: &str) -> Option<GgufValue> {
        self.metadata.remove(key)
    }

    /// The tensors in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// One tensor's header entry.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.by_name.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// Everything after the header: the tensor data, padding included (kvad's cache checksums it).
    pub fn data_section(&self) -> &[u8] {
        let bytes = self.backing.bytes();
        usize::try_from(self.data_offset).ok().and_then(|o| bytes.get(o..)).unwrap_or(&[])
    }

    /// The file this was read from (`<memory>` for `parse`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn from_backing(path: PathBuf, backing: Backing) -> Result<Self, WeightError> {
        let header = parse_header(&path, backing.bytes())?;
        Ok(GgufFile {
            version: header.version,
            metadata: header.metadata,
            alignment: header.alignment,
            data_offset: header.data_offset,
            by_name: header.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect(),
            tensors: header.tensors,
            path,
            backing,
        })
    }

    fn find(&self, name: &str) -> Result<&GgufTensor, WeightError> {
        self.tensor(name).ok_or_else(|| WeightError::MissingTensor { path: self.path.clone(), name: name.into() })
    }

    fn unsupported(&self, t: &GgufTensor) -> WeightError {
        WeightError::UnsupportedType {
            path: self.path.clone(),
            tensor: t.name.clone(),
            dtype: t.ggml_type.stored_type().name().to_string(),
        }
    }
}

impl WeightSource for GgufFile {
    fn tensor_names(&self) -> Vec<String> {
        self.tensors.iter().map(|t| t.name.clone()).collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        let t = self.tensor(name)?;
        Some(TensorInfo { name: t.name.clone(), dtype: t.ggml_type.stored_type(), shape: t.shape.clone() })
    }

    fn load_f32(&self, name: &str) -> Result<Vec<f32>, WeightError> {
        let t = self.find(name)?;
        let dtype = t.ggml_type.stored_type();
        if !dtype.is_readable() {
            return Err(self.unsupported(t));
        }
        let bytes = self.raw_bytes(name)?;
        dequantize(&dtype, bytes).ok_or_else(|| WeightError::ShapeMismatch {
            path: self.path.clone(),
            tensor: t.name.clone(),
            reason: format!("{} bytes is not a whole number of {dtype} blocks", bytes.len()),
        })
    }

    fn raw_shared(&self, name: &str) -> Result<kvad_tensor::cpu::Bytes, WeightError> {
        let bytes = self.raw_bytes(name)?;
        let start = bytes.as_ptr() as usize - self.backing.bytes().as_ptr() as usize;
        Ok(self.backing.share(start..start + bytes.len()))
    }

    fn raw_bytes(&self, name: &str) -> Result<&[u8], WeightError> {
        let t = self.find(name)?;
        let len = t.byte_len.ok_or_else(|| self.unsupported(t))?;
        let bytes = self.backing.bytes();
        // Checked at parse time; checked again here so a logic slip is an error, not a panic.
        let start = self.data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(len));
        let range = start.zip(end).and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
        range.and_then(|r| bytes.get(r)).ok_or_else(|| WeightError::Truncated {
            path: self.path.clone(),
            what: format!("tensor {:?}", t.name),
            offset: start.unwrap_or(u64::MAX),
            needed: len,
            len: bytes.len() as u64,
        })
    }
}

/// Everything the header says, before it is joined with the bytes.
struct Header {
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensor>,
    alignment: u64,
    data_offset: u64,
}

fn parse_header(path: &Path, bytes: &[u8]) -> Result<Header, WeightError> {
    let mut cur = Cursor { bytes, pos: 0, path };
    check_magic(path, bytes)?;
    cur.pos = 4;
    let version = cur.u32("version")?;
    if version != 2 && version != 3 {
        return Err(WeightError::UnsupportedVersion { path: path.to_path_buf(), version });
    }
    let n_tensors = cur.u64("tensor count")?;
    let n_kv = cur.u64("metadata count")?;
    cur.check_count(n_kv, MIN_KV, "metadata count")?;
    cur.check_count(n_tensors, MIN_TENSOR_INFO, "tensor count")?;

    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = cur.string_strict("metadata key")?;
        let type_id = cur.u32(&format!("type of key {key:?}"))?;
        let value = cur.value(type_id, &key, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(bad(path, format!("metadata key {key:?} appears twice")));
        }
    }
    let alignment = alignment_of(path, &metadata)?;

    let mut tensors = Vec::with_capacity(usize::try_from(n_tensors).unwrap_or(0));
    let mut seen: HashSet<String> = HashSet::new();
    for _ in 0..n_tensors {
        let t = cur.tensor_info(alignment)?;
        if !seen.insert(t.name.clone()) {
            return Err(WeightError::DuplicateTensor { path: path.into(), name: t.name, other: path.into() });
        }
        tensors.push(t);
    }
    let data_offset = align_up(cur.pos as u64, alignment)
        .ok_or_else(|| bad(path, format!("data offset overflows aligning {} to {alignment}", cur.pos)))?;
    for t in &tensors {
        let Some(len) = t.byte_len else { continue };
        let start = data_offset.checked_add(t.offset);
        let fits = start.and_then(|s| s.checked_add(len)).is_some_and(|end| end <= bytes.len() as u64);
        if !fits {
            return Err(WeightError::Truncated {
                path: path.into(),
                what: format!("data of tensor {:?} (offset {} in the data section)", t.name, t.offset),
                offset: start.unwrap_or(u64::MAX),
                needed: len,
                len: bytes.len() as u64,
            });
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}

fn check_magic(path: &Path, bytes: &[u8]) -> Result<(), WeightError> {
    let head = &bytes[..bytes.len().min(4)];
    if head.len() < 4 && GGUF_MAGIC.starts_with(head) {
        return Err(WeightError::Truncated {
            path: path.into(),
            what: "magic".into(),
            offset: 0,
            needed: 4,
            len: bytes.len() as u64,
        });
    }
    if head != GGUF_MAGIC {
        return Err(WeightError::BadMagic { path: path.into(), found: head.to_vec() });
    }
    Ok(())
}

/// `general.alignment` must be a power of two (the spec asks for a multiple of 8; ggml itself only needs a power of
/// two, so we accept any).
fn alignment_of(path: &Path, metadata: &BTreeMap<String, GgufValue>) -> Result<u64, WeightError> {
    let Some(v) = metadata.get("general.alignment") else { return Ok(DEFAULT_ALIGNMENT) };
    match v.as_u64() {
        Some(a) if a.is_power_of_two() && a <= u64::from(u32::MAX) => Ok(a),
        _ => Err(bad(path, format!("general.alignment is {v:?}; it must be a power of two"))),
    }
}

fn align_up(x: u64, alignment: u64) -> Option<u64> {
    Some(x.checked_add(alignment - 1)? / alignment * alignment)
}

fn bad(path: &Path, reason: String) -> WeightError {
    WeightError::BadHeader { path: path.into(), reason }
}

/// A bounds-checked reader over the header bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn truncated(&self, what: &str, needed: u64) -> WeightError {
        WeightError::Truncated {
            path: self.path.into(),
            what: what.into(),
            offset: self.pos as u64,
            needed,
            len: self.bytes.len() as u64,
        }
    }

    /// `take` whose description is made only on error: metadata holds ~100k token strings, and formatting a
    /// description for each was a third of parsing a GGUF.
    fn take_lazy(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], WeightError> {
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n));
        let slice = end.and_then(|end| self.bytes.get(self.pos..end)).ok_or_else(|| self.truncated(&what(), n))?;
        self.pos += slice.len();
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WeightError> {
        self.array_lazy(|| what.to_string())
    }

    fn array_lazy<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N], WeightError> {
        let s = self.take_lazy(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, WeightError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, WeightError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Refuses a count whose smallest possible encoding would not fit in what is left of the file.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), WeightError> {
        match count.checked_mul(min_size) {
            Some(need) if need <= self.remaining() => Ok(()),
            need => Err(self.truncated(&format!("{what} {count}"), need.unwrap_or(u64::MAX))),
        }
    }

    fn string_bytes(&mut self, what: &str) -> Result<&'a [u8], WeightError> {
        self.string_bytes_lazy(|| what.to_string())
    }

    fn string_bytes_lazy(&mut self, what: impl Fn() -> String) -> Result<&'a [u8], WeightError> {
        let len = u64::from_le_bytes(self.array_lazy(|| format!("length of {}", what()))?);
        self.take_lazy(len, what)
    }

    /// Keys and tensor names must be valid UTF-8: they are matched against expected names.
    fn string_strict(&mut self, what: &str) -> Result<String, WeightError> {
        let start = self.pos;
        let b = self.string_bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|e| bad(self.path, format!("{what} at offset {start} is not UTF-8: {e}")))
    }

    fn value(&mut self, type_id: u32, key: &str, depth: usize) -> Result<GgufValue, WeightError> {
        let ty = GgufValueType::from_id(type_id)
            .ok_or_else(|| bad(self.path, format!("key {key:?} has unknown value type {type_id}")))?;
        let what = || format!("value of key {key:?}");
        Ok(match ty {
            GgufValueType::U8 => GgufValue::U8(self.array_lazy::<1>(what)?[0]),
            GgufValueType::I8 => GgufValue::I8(i8::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::U16 => GgufValue::U16(u16::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::I16 => GgufValue::I16(i16::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::U32 => GgufValue::U32(u32::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::I32 => GgufValue::I32(i32::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::U64 => GgufValue::U64(u64::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::I64 => GgufValue::I64(i64::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::F32 => GgufValue::F32(f32::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::F64 => GgufValue::F64(f64::from_le_bytes(self.array_lazy(what)?)),
            GgufValueType::Bool => match self.array_lazy::<1>(what)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(bad(self.path, format!("key {key:?} is a bool stored as {b}, not 0 or 1"))),
            },
            // Values such as token texts may hold stray bytes; keep the rest of the file readable.
            GgufValueType::String => GgufValue::String(String::from_utf8_lossy(self.string_bytes_lazy(what)?).into()),
            GgufValueType::Array => self.array_value(key, depth)?,
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<GgufValue, WeightError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(bad(self.path, format!("key {key:?} nests arrays deeper than {MAX_ARRAY_DEPTH}")));
        }
        let elem_id = self.u32(&format!("element type of key {key:?}"))?;
        let elem = GgufValueType::from_id(elem_id)
            .ok_or_else(|| bad(self.path, format!("key {key:?} is an array of unknown type {elem_id}")))?;
        let count = self.u64(&format!("element count of key {key:?}"))?;
        self.check_count(count, elem.min_size(), &format!("array of key {key:?} with element count"))?;
        // count * min_size <= remaining bytes, so this allocation is bounded by the file size.
        let mut items = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for _ in 0..count {
            items.push(self.value(elem_id, key, depth + 1)?);
        }
        Ok(GgufValue::Array(items))
    }

    fn tensor_info(&mut self, alignment: u64) -> Result<GgufTensor, WeightError> {
        let name = self.string_strict("tensor name")?;
        let n_dims = self.u32(&format!("n_dims of tensor {name:?}"))?;
        if n_dims > MAX_DIMS {
            return Err(bad(self.path, format!("tensor {name:?} has {n_dims} dimensions; ggml allows at most 4")));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(self.u64(&format!("dimensions of tensor {name:?}"))?);
        }
        let ggml_type = GgmlType(self.u32(&format!("type of tensor {name:?}"))?);
        let offset = self.u64(&format!("offset of tensor {name:?}"))?;
        if offset.checked_rem(alignment) != Some(0) {
            return Err(bad(self.path, format!("tensor {name:?} has offset {offset}, not a multiple of {alignment}")));
        }
        let shape_err =
            |reason: String| WeightError::ShapeMismatch { path: self.path.into(), tensor: name.clone(), reason };
        let shape = ne
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| shape_err(format!("dimensions {ne:?} do not fit in memory")))?;
        let numel = ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| shape_err(format!("dimensions {ne:?} overflow")))?;
        let byte_len = match ggml_type.block_layout() {
            None => None,
            Some((block_len, block_bytes)) => {
                let (block_len, block_bytes) = (block_len as u64, block_bytes as u64);
                let row = ne.first().copied().unwrap_or(1);
                if row.checked_rem(block_len) != Some(0) {
                    return Err(shape_err(format!(
                        "ne[0] = {row} is not a multiple of the {}-weight blocks of type {}",
                        block_len,
                        ggml_type.stored_type()
                    )));
                }
                let len = (numel / block_len).checked_mul(block_bytes);
                Some(len.ok_or_else(|| shape_err(format!("byte size of dimensions {ne:?} overflows")))?)
            }
        };
        Ok(GgufTensor { name, ggml_type, ne, shape, offset, byte_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
    }

    #[test]
    fn short_prefix_of_magic_is_truncated_not_bad_magic() {
        assert!(matches!(GgufFile::parse(b"GG"), Err(WeightError::Truncated { .. })));
        assert!(matches!(GgufFile::parse(b"GX"), Err(WeightError::BadMagic { .. })));
        assert!(matches!(GgufFile::parse(b""), Err(WeightError::Truncated { .. })));
    }
}
