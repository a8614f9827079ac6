//! The one error type of the weight readers.
//!
//! Every variant names the file it came from, and where it makes sense the tensor or key and the offending value, so
//! that a user holding a broken or unsupported checkpoint can tell what is wrong without a debugger.

use std::path::PathBuf;

/// Why a weight file could not be opened or a tensor could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// The operating system refused to open, stat or map the file.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file we tried to read.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },

    /// A file or directory we were told to read does not exist, or a directory holds no weights.
    #[error("{path}: not found{}", if what.is_empty() { String::new() } else { format!(" ({what})") }, path = path.display())]
    NotFound {
        /// The missing path.
        path: PathBuf,
        /// What we looked for there (may be empty).
        what: String,
    },

    /// The file ends before a structure it declares.
    #[error("{path}: truncated while reading {what}: needs {needed} bytes at offset {offset}, but the file has {len}", path = path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read (a key, a tensor name, "header").
        what: String,
        /// Where the read started.
        offset: u64,
        /// How many bytes were needed from there.
        needed: u64,
        /// The file length.
        len: u64,
    },

    /// The header is structurally wrong (bad type id, bad alignment, bad UTF-8, bad JSON, ...).
    #[error("{path}: bad header: {reason}", path = path.display())]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key or tensor and the value.
        reason: String,
    },

    /// The file does not start with the GGUF magic.
    #[error("{path}: not a GGUF file (first bytes {found:02x?}, expected \"GGUF\")", path = path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first four bytes found (fewer if the file is shorter).
        found: Vec<u8>,
    },

    /// A GGUF version we do not read (only 2 and 3 are read).
    #[error("{path}: unsupported GGUF version {version}{}", version_hint(*version), path = path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version field as read little-endian.
        version: u32,
    },

    /// A tensor stored in a type we can name but not convert to f32.
    #[error("{path}: tensor {tensor:?} has type {dtype}, which kvad cannot read{}", type_hint(dtype), path = path.display())]
    UnsupportedType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The stored type's name.
        dtype: String,
    },

    /// A tensor's declared shape and its stored size (or its type's block size) disagree.
    #[error("{path}: tensor {tensor:?}: {reason}", path = path.display())]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Which numbers disagree.
        reason: String,
    },

    /// The caller asked for a tensor that no file holds.
    #[error("{path}: no tensor named {name:?}", path = path.display())]
    MissingTensor {
        /// The file or model directory searched.
        path: PathBuf,
        /// The name asked for.
        name: String,
    },

    /// A shard index names a tensor that its shard does not hold.
    #[error("{index}: weight_map puts tensor {name:?} in {shard}, which does not hold it", index = index.display(), shard = shard.display())]
    MissingInShard {
        /// The `model.safetensors.index.json` file.
        index: PathBuf,
        /// The shard it points to.
        shard: PathBuf,
        /// The tensor.
        name: String,
    },

    /// Two tensors (in one file or across shards) have the same name.
    #[error("{path}: tensor {name:?} appears twice (also in {other})", path = path.display(), other = other.display())]
    DuplicateTensor {
        /// The file where the second copy was found.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The file holding the first copy.
        other: PathBuf,
    },
}

/// A GGUF written big-endian reads as a byte-swapped version, e.g. 3 becomes 50331648; say so rather than leave the
/// user to wonder why the version is absurd.
fn version_hint(version: u32) -> String {
    match version {
        1 => " (GGUF v1 is obsolete; convert the file with a current llama.cpp)".to_string(),
        v if (1..=16).contains(&v.swap_bytes()) => format!(
            " (this looks like a big-endian GGUF of version {}; only little-endian files are read)",
            v.swap_bytes()
        ),
        _ => " (kvad reads versions 2 and 3)".to_string(),
    }
}

/// Integer and block-quantised tensors are what quantised checkpoints (AWQ, GPTQ, FP8, unsupported GGUF quants)
/// contain; the message should say that the checkpoint as a whole is the problem, not one odd tensor.
fn type_hint(dtype: &str) -> &'static str {
    let d = dtype.to_ascii_uppercase();
    let integer = d.starts_with('I') || d.starts_with('U') || d == "BOOL";
    let quantised = d.starts_with('Q')
        || d.starts_with("TQ")
        || d.starts_with("F8_")
        || d.starts_with("F6_")
        || d == "F4"
        || d.starts_with("MXFP");
    if integer || quantised {
        "; the checkpoint looks quantised, and quantised checkpoints of this kind are not supported \
         (use an f32/f16/bf16 checkpoint, or a GGUF in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K or Q6_K)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_version_is_named() {
        let e = WeightError::UnsupportedVersion { path: "m.gguf".into(), version: 3u32.swap_bytes() };
        let msg = e.to_string();
        assert!(msg.contains("big-endian") && msg.contains("m.gguf"), "{msg}");
    }

    #[test]
    fn integer_types_say_quantised() {
        for dtype in ["I32", "Q5_K", "F8_E4M3", "U8"] {
            let e = WeightError::UnsupportedType { path: "x".into(), tensor: "w".into(), dtype: dtype.into() };
            assert!(e.to_string().contains("quantised"), "{dtype}: {e}");
        }
        let e = WeightError::UnsupportedType { path: "x".into(), tensor: "w".into(), dtype: "F64".into() };
        assert!(!e.to_string().contains("quantised"), "{e}");
    }
}
