//! Weight sources: read tensors out of safetensors and GGUF files behind one trait.
//!
//! Both formats are memory-mapped; `WeightSource::load_f32` converts (f16, bf16) or dequantises (GGUF blocks) into a
//! fresh `Vec<f32>`, while `raw_bytes` hands out the stored bytes for backends that use the blocks as they are.
//! Headers come from untrusted files, so every size and offset is checked before it is used (see `gguf.rs`).

mod error;
mod gguf;
mod gguf_dequant;
mod gguf_value;
mod gguf_write;
mod safetensors;

pub use error::WeightError;
pub use gguf::{GgufFile, GgufTensor};
pub use gguf_dequant::{dequantize, GgmlType};
pub use gguf_value::{GgufValue, GgufValueType};
pub use gguf_write::GgufWriter;
pub use safetensors::SafetensorsSource;

use std::path::Path;

/// How a tensor is stored on disk; the model code uses it to decide whether a tensor can stay in its stored form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // the ggml names, as users see them in file listings
pub enum StoredType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// GGML blocks of 32: f16 scale + 32 i8.
    Q8_0,
    /// GGML blocks of 32: f16 scale + 32 nibbles, value (q-8)*d.
    Q4_0,
    /// GGML blocks of 32: f16 scale, f16 min + 32 nibbles, value q*d+m.
    Q4_1,
    /// GGML super-blocks of 256 with 6-bit sub-block scales and mins.
    Q4_K,
    /// GGML super-blocks of 256 of 6-bit values with i8 sub-block scales.
    Q6_K,
    /// A type we can name but not read, e.g. "I32", "Q5_K", "F8_E4M3".
    Other(String),
}

impl StoredType {
    /// The name as the formats spell it ("F32", "Q4_K", ...), for messages.
    pub fn name(&self) -> &str {
        match self {
            StoredType::F32 => "F32",
            StoredType::F16 => "F16",
            StoredType::BF16 => "BF16",
            StoredType::Q8_0 => "Q8_0",
            StoredType::Q4_0 => "Q4_0",
            StoredType::Q4_1 => "Q4_1",
            StoredType::Q4_K => "Q4_K",
            StoredType::Q6_K => "Q6_K",
            StoredType::Other(name) => name,
        }
    }

    /// Whether `load_f32` can convert this type.
    pub fn is_readable(&self) -> bool {
        !matches!(self, StoredType::Other(_))
    }
}

impl std::fmt::Display for StoredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a source knows about one tensor without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name in the file, e.g. "model.layers.0.self_attn.q_proj.weight" or "blk.0.attn_q.weight".
    pub name: String,
    /// How it is stored.
    pub dtype: StoredType,
    /// PyTorch order, outermost first. For GGUF this is `ne` reversed: a weight with ne=[in, out] has shape [out, in].
    pub shape: Vec<usize>,
}

impl TensorInfo {
    /// The number of elements (the product of the shape; an empty shape is a scalar). Shapes of opened files were
    /// checked not to overflow, so this saturates only for hand-made infos.
    pub fn numel(&self) -> usize {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX)
    }
}

/// A read-only set of named tensors: a GGUF file or one or more safetensors shards.
///
/// Model constructors take `&dyn WeightSource` so they do not care which format the weights came in.
pub trait WeightSource: Send + Sync {
    /// Every tensor name, in a stable order (file order for GGUF, sorted for safetensors).
    fn tensor_names(&self) -> Vec<String>;
    /// Name, stored type and shape of one tensor, or `None` when there is no such tensor.
    fn info(&self, name: &str) -> Option<TensorInfo>;
    /// Reads a tensor as f32, row-major in `shape` order, converting f16/bf16 and dequantising GGUF blocks.
    fn load_f32(&self, name: &str) -> Result<Vec<f32>, WeightError>;
    /// The raw stored bytes (for later quantised backends that use GGUF blocks as they are).
    fn raw_bytes(&self, name: &str) -> Result<&[u8], WeightError>;
    /// The raw stored bytes as a shared handle on the mapped file: a matrix built from it costs no copy.
    fn raw_shared(&self, name: &str) -> Result<kvad_tensor::cpu::Bytes, WeightError> {
        Ok(kvad_tensor::cpu::Bytes::Owned(std::sync::Arc::new(self.raw_bytes(name)?.to_vec())))
    }
}

/// Opens a weight file or model directory by looking at what it is: a GGUF file (by its magic or extension), a
/// safetensors file, or a directory of safetensors. The CLI calls this so users can point at either kind.
pub fn open(path: &Path) -> Result<Box<dyn WeightSource>, WeightError> {
    if path.is_dir() {
        return Ok(Box::new(SafetensorsSource::open_dir(path)?));
    }
    if !path.exists() {
        return Err(WeightError::NotFound { path: path.to_path_buf(), what: "weight file".into() });
    }
    // Sniff rather than trust the extension: GGUF files are often renamed (".bin", no extension).
    let mut magic = [0u8; 4];
    let is_gguf = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok_and(|()| &magic == b"GGUF");
    if is_gguf || path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        Ok(Box::new(GgufFile::open(path)?))
    } else {
        Ok(Box::new(SafetensorsSource::open_files(&[path.to_path_buf()])?))
    }
}

/// Converts little-endian f16 bytes to f32 (shared by both formats). A 256 KiB table of all 65536 values keeps this
/// memory-bound, as fast as the bf16 path, whether or not the CPU converts f16 in hardware.
fn f16_bytes_to_f32(bytes: &[u8], out: &mut [f32]) {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()).collect());
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = table[usize::from(u16::from_le_bytes([c[0], c[1]]))];
    }
}

/// Converts little-endian bf16 bytes to f32 (shared by both formats).
fn bf16_bytes_to_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
    }
}

/// Converts little-endian f32 bytes to f32 (the mmap may not be 4-byte aligned, so no cast).
fn f32_bytes_to_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Where a parsed file's bytes live: a map of the file, or a buffer handed to a `parse` constructor (tests, fuzzing).
enum Backing {
    Mapped(std::sync::Arc<memmap2::Mmap>),
    Owned(std::sync::Arc<Vec<u8>>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// A shared handle on a range of the buffer, so a matrix can borrow it without a copy.
    fn share(&self, range: std::ops::Range<usize>) -> kvad_tensor::cpu::Bytes {
        let buf: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = match self {
            Backing::Mapped(m) => m.clone(),
            Backing::Owned(v) => v.clone(),
        };
        kvad_tensor::cpu::Bytes::Shared(buf, range)
    }
}

/// Memory-maps a file read-only, wrapping failures with the path.
fn map_file(path: &Path) -> Result<memmap2::Mmap, WeightError> {
    let file = std::fs::File::open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            WeightError::NotFound { path: path.to_path_buf(), what: String::new() }
        } else {
            WeightError::Io { path: path.to_path_buf(), source }
        }
    })?;
    // SAFETY: the map is read-only and we never hand out a `&mut`. The remaining hazard, another process truncating
    // or rewriting the file while it is mapped, is the accepted trade-off of every mmap-based model loader; weight
    // files are not modified while a model is being served.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&file) };
    map.map_err(|source| WeightError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions() {
        let mut out = [0f32; 3];
        let bytes: Vec<u8> =
            [1.0f32, -2.5, 65504.0].iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        f16_bytes_to_f32(&bytes, &mut out);
        assert_eq!(out, [1.0, -2.5, 65504.0]);
        let bytes: Vec<u8> =
            [1.0f32, -3.0, 0.15625].iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect();
        bf16_bytes_to_f32(&bytes, &mut out);
        assert_eq!(out, [1.0, -3.0, 0.15625]);
    }

    #[test]
    fn open_missing_path_is_not_found() {
        let err = open(Path::new("/nonexistent/kvad/model.gguf")).err();
        assert!(matches!(err, Some(WeightError::NotFound { .. })), "{err:?}");
    }
}
