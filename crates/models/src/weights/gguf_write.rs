//! A small GGUF writer, so tests (here and in other crates) can build GGUF images byte for byte without a Python
//! toolchain. It writes what it is given, including values a reader should refuse (e.g. `general.alignment` = 0 is
//! only refused if the writer is also asked to lay data out with it, see `to_bytes`).

use super::gguf::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::gguf_value::{GgufValue, GgufValueType};
use super::WeightError;

/// One tensor to write: name, ggml `ne` (innermost first), ggml type id, and its stored bytes.
#[derive(Clone, Debug)]
struct TensorEntry {
    name: String,
    ne: Vec<u64>,
    ggml_type: u32,
    data: Vec<u8>,
}

/// Builds a GGUF image in memory: metadata in insertion order, tensors packed at the alignment in insertion order.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<TensorEntry>,
}

impl GgufWriter {
    /// An empty file of the given version (2 and 3 are the readable ones; others are for testing refusals).
    pub fn new(version: u32) -> Self {
        GgufWriter { version, metadata: Vec::new(), tensors: Vec::new() }
    }

    /// Adds a metadata pair. The alignment used for layout is taken from `general.alignment` when set.
    pub fn kv(&mut self, key: &str, value: GgufValue) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor; `data` must already be in the stored form of `ggml_type` (the writer does not check).
    pub fn tensor(&mut self, name: &str, ne: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push(TensorEntry { name: name.to_string(), ne: ne.to_vec(), ggml_type, data });
        self
    }

    /// The whole file. Fails (naming the key) when an array mixes element types, since GGUF cannot encode that,
    /// or when `general.alignment` is not a positive integer.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WeightError> {
        let alignment = match self.metadata.iter().rev().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, v)) => v
                .as_u64()
                .filter(|&a| a > 0)
                .ok_or_else(|| writer_error(format!("general.alignment {v:?} is not a positive integer")))?,
        };
        let mut out = Vec::new();
        out.extend_from_slice(GGUF_MAGIC);
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend(value.value_type().id().to_le_bytes());
            write_value(&mut out, key, value)?;
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offset = offset.next_multiple_of(alignment);
            offsets.push(offset);
            offset += t.data.len() as u64;
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            write_string(&mut out, &t.name);
            out.extend((t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ggml_type.to_le_bytes());
            out.extend(off.to_le_bytes());
        }
        let data_start = (out.len() as u64).next_multiple_of(alignment);
        for (t, off) in self.tensors.iter().zip(&offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        if self.tensors.is_empty() {
            out.resize(data_start as usize, 0);
        }
        Ok(out)
    }
}

fn writer_error(reason: String) -> WeightError {
    WeightError::BadHeader { path: "<gguf writer>".into(), reason }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Writes the payload of `value` (without its type id).
fn write_value(out: &mut Vec<u8>, key: &str, value: &GgufValue) -> Result<(), WeightError> {
    match value {
        GgufValue::U8(v) => out.push(*v),
        GgufValue::I8(v) => out.extend(v.to_le_bytes()),
        GgufValue::U16(v) => out.extend(v.to_le_bytes()),
        GgufValue::I16(v) => out.extend(v.to_le_bytes()),
        GgufValue::U32(v) => out.extend(v.to_le_bytes()),
        GgufValue::I32(v) => out.extend(v.to_le_bytes()),
        GgufValue::U64(v) => out.extend(v.to_le_bytes()),
        GgufValue::I64(v) => out.extend(v.to_le_bytes()),
        GgufValue::F32(v) => out.extend(v.to_le_bytes()),
        GgufValue::F64(v) => out.extend(v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::String(s) => write_string(out, s),
        GgufValue::Array(items) => {
            let elem = items.first().map_or(GgufValueType::U8, GgufValue::value_type);
            if items.iter().any(|v| v.value_type() != elem) {
                return Err(writer_error(format!("array of key {key:?} mixes element types")));
            }
            out.extend(elem.id().to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for v in items {
                write_value(out, key, v)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::{GgufFile, WeightSource};

    #[test]
    fn round_trip_every_value_type() {
        let values = vec![
            ("u8", GgufValue::U8(200)),
            ("i8", GgufValue::I8(-100)),
            ("u16", GgufValue::U16(60000)),
            ("i16", GgufValue::I16(-30000)),
            ("u32", GgufValue::U32(4_000_000_000)),
            ("i32", GgufValue::I32(-2_000_000_000)),
            ("u64", GgufValue::U64(u64::MAX)),
            ("i64", GgufValue::I64(i64::MIN)),
            ("f32", GgufValue::F32(1.5e-5)),
            ("f64", GgufValue::F64(-2.25e300)),
            ("bool", GgufValue::Bool(true)),
            ("str", GgufValue::String("héllo ▁".into())),
            ("arr", GgufValue::Array(vec![GgufValue::String("a".into()), GgufValue::String(String::new())])),
            (
                "nested",
                GgufValue::Array(vec![
                    GgufValue::Array(vec![GgufValue::I32(1), GgufValue::I32(2)]),
                    GgufValue::Array(vec![GgufValue::I32(3)]),
                ]),
            ),
            ("empty", GgufValue::Array(vec![])),
        ];
        for version in [2, 3] {
            let mut w = GgufWriter::new(version);
            for (k, v) in &values {
                w.kv(k, v.clone());
            }
            w.tensor("t", &[2], 0, [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect());
            let f = GgufFile::parse(&w.to_bytes().unwrap()).unwrap();
            assert_eq!(f.version, version);
            for (k, v) in &values {
                assert_eq!(f.get(k), Some(v), "key {k}");
            }
            assert_eq!(f.load_f32("t").unwrap(), vec![1.0, 2.0]);
        }
    }

    #[test]
    fn mixed_arrays_are_refused() {
        let mut w = GgufWriter::new(3);
        w.kv("bad", GgufValue::Array(vec![GgufValue::U8(1), GgufValue::I8(1)]));
        assert!(w.to_bytes().is_err());
    }
}
