//! A test-only GGUF metadata reader: enough of the format to get a tokenizer out of a file.
//!
//! It reads the header (versions 2 and 3), then every key/value pair, and stops before the
//! tensor infos. The real GGUF parser lives in another crate; this one exists so the tokenizer
//! tests do not depend on it.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use kvad_text::GgufVocab;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Meta>),
}

impl Meta {
    fn as_u32(&self) -> Option<u32> {
        match self {
            Meta::U64(v) => u32::try_from(*v).ok(),
            Meta::I64(v) => u32::try_from(*v).ok(),
            _ => None,
        }
    }
}

struct Reader<R: Read> {
    r: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        if n > 1 << 30 {
            return Err(format!("string of {n} bytes"));
        }
        let mut buf = vec![0u8; n as usize];
        self.r.read_exact(&mut buf).map_err(|e| e.to_string())?;
        String::from_utf8(buf).map_err(|e| e.to_string())
    }

    fn value(&mut self, ty: u32) -> Result<Meta, String> {
        Ok(match ty {
            0 => Meta::U64(u64::from(self.bytes::<1>()?[0])),
            1 => Meta::I64(i64::from(i8::from_le_bytes(self.bytes()?))),
            2 => Meta::U64(u64::from(u16::from_le_bytes(self.bytes()?))),
            3 => Meta::I64(i64::from(i16::from_le_bytes(self.bytes()?))),
            4 => Meta::U64(u64::from(self.u32()?)),
            5 => Meta::I64(i64::from(i32::from_le_bytes(self.bytes()?))),
            6 => Meta::F64(f64::from(f32::from_le_bytes(self.bytes()?))),
            7 => Meta::Bool(self.bytes::<1>()?[0] != 0),
            8 => Meta::Str(self.string()?),
            9 => {
                let item_ty = self.u32()?;
                let n = self.u64()?;
                if n > 1 << 28 {
                    return Err(format!("array of {n} items"));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(item_ty)?);
                }
                Meta::Array(items)
            }
            10 => Meta::U64(self.u64()?),
            11 => Meta::I64(i64::from_le_bytes(self.bytes()?)),
            12 => Meta::F64(f64::from_le_bytes(self.bytes()?)),
            other => return Err(format!("unknown value type {other}")),
        })
    }
}

/// Reads every metadata key/value pair of a GGUF file.
pub fn read_metadata(path: &Path) -> Result<HashMap<String, Meta>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = Reader { r: BufReader::new(file) };
    if &r.bytes::<4>()? != b"GGUF" {
        return Err(format!("{} is not a GGUF file", path.display()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported"));
    }
    let _tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    let mut out = HashMap::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let ty = r.u32()?;
        let value = r.value(ty)?;
        out.insert(key, value);
    }
    Ok(out)
}

/// The tokenizer part of a GGUF file's metadata, as the model crates will hand it over.
pub fn vocab_from_gguf(path: &Path) -> Result<GgufVocab, String> {
    let meta = read_metadata(path)?;
    let get = |k: &str| meta.get(&format!("tokenizer.{k}"));
    let string = |k: &str| match get(k) {
        Some(Meta::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let array = |k: &str| match get(k) {
        Some(Meta::Array(a)) => Some(a.clone()),
        _ => None,
    };
    let strings = |k: &str| {
        array(k).map(|a| {
            a.into_iter()
                .filter_map(|m| match m {
                    Meta::Str(s) => Some(s),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
    };
    let id = |k: &str| get(k).and_then(Meta::as_u32);
    let flag = |k: &str| match get(k) {
        Some(Meta::Bool(b)) => Some(*b),
        _ => None,
    };
    Ok(GgufVocab {
        model: string("ggml.model").ok_or("no tokenizer.ggml.model")?,
        pre: string("ggml.pre"),
        tokens: strings("ggml.tokens").ok_or("no tokenizer.ggml.tokens")?,
        scores: array("ggml.scores").map(|a| {
            a.into_iter()
                .map(|m| match m {
                    Meta::F64(f) => f as f32,
                    _ => 0.0,
                })
                .collect()
        }),
        token_types: array("ggml.token_type").map(|a| {
            a.into_iter()
                .map(|m| match m {
                    Meta::I64(v) => v as i32,
                    Meta::U64(v) => v as i32,
                    _ => 0,
                })
                .collect()
        }),
        merges: strings("ggml.merges"),
        bos: id("ggml.bos_token_id"),
        eos: id("ggml.eos_token_id"),
        unk: id("ggml.unknown_token_id"),
        pad: id("ggml.padding_token_id"),
        add_bos: flag("ggml.add_bos_token"),
        add_eos: flag("ggml.add_eos_token"),
        chat_template: string("chat_template"),
        add_space_prefix: flag("ggml.add_space_prefix"),
        architecture: match meta.get("general.architecture") {
            Some(Meta::Str(s)) => Some(s.clone()),
            _ => None,
        },
    })
}
