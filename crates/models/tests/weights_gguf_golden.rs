//! The GGUF golden: fixtures/gguf/types.gguf, written by the reference tools, against
//! fixtures/goldens/gguf_types.json, dequantised by them. Every tensor type we read and every metadata type must
//! come out as the reference says. Missing fixtures fail the test: a skipped golden protects nothing.

use std::path::{Path, PathBuf};

use kvad_models::weights::{GgufFile, GgufValue, GgufValueType, WeightSource};
use serde_json::Value;

const MAKE: &str = "bash scripts/reference/make_all.sh";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn load() -> (GgufFile, Value) {
    let gguf = fixtures().join("gguf/types.gguf");
    let golden = fixtures().join("goldens/gguf_types.json");
    for p in [&gguf, &golden] {
        assert!(p.is_file(), "{} is missing; `{MAKE}` makes it", p.display());
    }
    let file = GgufFile::open(&gguf).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&golden).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
    (file, json)
}

/// The types `load_f32` must read; the golden's other types must be refused, not misread.
const READABLE: [&str; 8] = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"];

#[test]
fn header_matches_the_reference() {
    let (file, golden) = load();
    assert_eq!(Some(u64::from(file.version)), golden["gguf_version"].as_u64(), "version");
    assert_eq!(Some(file.alignment), golden["alignment"].as_u64(), "alignment");
    let tensors = golden["tensors"].as_object().expect("the golden has no \"tensors\" object");
    assert_eq!(file.tensors().len(), tensors.len(), "tensor count");
    for (name, want) in tensors {
        let t = file.tensor(name).unwrap_or_else(|| panic!("golden tensor {name:?} is not in types.gguf"));
        let ne: Vec<u64> = serde_json::from_value(want["ne"].clone()).unwrap();
        assert_eq!(t.ne, ne, "{name}: ne");
        assert_eq!(Some(file.data_offset + t.offset), want["data_offset"].as_u64(), "{name}: data offset");
        assert_eq!(file.raw_bytes(name).unwrap().len() as u64, want["n_bytes"].as_u64().unwrap(), "{name}: bytes");
    }
}

#[test]
fn every_tensor_matches_the_reference() {
    let (file, golden) = load();
    let tensors = golden["tensors"].as_object().expect("the golden has no \"tensors\" object");
    for (name, want) in tensors {
        let info = file.info(name).unwrap_or_else(|| panic!("golden tensor {name:?} is not in types.gguf"));
        let want_type = want["type"].as_str().unwrap_or_else(|| panic!("{name}: no \"type\""));
        assert_eq!(info.dtype.name(), want_type, "{name}: type");
        let want_shape: Vec<usize> = serde_json::from_value(want["shape_rowmajor"].clone()).unwrap();
        assert_eq!(info.shape, want_shape, "{name}: shape (PyTorch order)");
        if !READABLE.contains(&want_type) {
            let msg = file.load_f32(name).unwrap_err().to_string();
            assert!(msg.contains(name) && msg.contains(want_type) && msg.contains("quantised"), "{msg}");
            continue;
        }
        let want_values = flatten(&want["values"]);
        let got = file.load_f32(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.len(), want_values.len(), "{name}: element count");
        let mut worst = (0.0f64, 0usize);
        for (i, (&g, &w)) in got.iter().zip(&want_values).enumerate() {
            let g = f64::from(g);
            let err = if g == w || (g.is_nan() && w.is_nan()) {
                0.0
            } else if g.is_nan() || w.is_nan() {
                f64::INFINITY
            } else {
                (g - w).abs() / w.abs().max(1e-30)
            };
            if err > worst.0 {
                worst = (err, i);
            }
        }
        assert!(
            worst.0 <= 1e-6,
            "{name} ({want_type}): element {} is {} but the reference says {} (relative error {:e})",
            worst.1,
            got[worst.1],
            want_values[worst.1],
            worst.0
        );
    }
    for t in READABLE {
        assert!(
            tensors.values().any(|v| v.get("type").and_then(Value::as_str) == Some(t)),
            "the golden has no {t} tensor; `{MAKE}` should make one"
        );
    }
}

#[test]
fn metadata_matches_the_reference() {
    let (file, golden) = load();
    let meta = golden["metadata"].as_object().expect("the golden has no \"metadata\" object");
    assert!(!meta.is_empty());
    for (key, want) in meta {
        let got = file.get(key).unwrap_or_else(|| panic!("metadata key {key:?} is not in types.gguf"));
        let want_type = want["type"].as_str().unwrap_or_default();
        assert_eq!(type_name(got.value_type()), want_type, "metadata {key:?}: type");
        if let (GgufValue::Array(items), Some(item_type)) = (got, want["item_type"].as_str()) {
            assert!(items.iter().all(|v| type_name(v.value_type()) == item_type), "metadata {key:?}: item type");
        }
        assert!(same(got, &want["value"]), "metadata {key:?}: read {got:?}, the reference says {}", want["value"]);
    }
}

/// The gguf-py name of a value type, as the golden spells it.
fn type_name(t: GgufValueType) -> &'static str {
    use GgufValueType as T;
    match t {
        T::U8 => "UINT8",
        T::I8 => "INT8",
        T::U16 => "UINT16",
        T::I16 => "INT16",
        T::U32 => "UINT32",
        T::I32 => "INT32",
        T::U64 => "UINT64",
        T::I64 => "INT64",
        T::F32 => "FLOAT32",
        T::F64 => "FLOAT64",
        T::Bool => "BOOL",
        T::String => "STRING",
        T::Array => "ARRAY",
    }
}

/// A nested JSON array of numbers, flattened row-major (null stands for NaN, as Python's json cannot say it).
fn flatten(v: &Value) -> Vec<f64> {
    match v {
        Value::Array(items) => items.iter().flat_map(flatten).collect(),
        Value::Number(n) => vec![n.as_f64().unwrap_or(f64::NAN)],
        Value::Null => vec![f64::NAN],
        other => panic!("not a number: {other}"),
    }
}

/// Whether a metadata value equals its JSON rendering; floats compare at the precision they were stored with.
fn same(got: &GgufValue, want: &Value) -> bool {
    match (got, want) {
        (GgufValue::String(s), Value::String(w)) => s == w,
        (GgufValue::Bool(b), Value::Bool(w)) => b == w,
        (GgufValue::Array(items), Value::Array(ws)) => {
            items.len() == ws.len() && items.iter().zip(ws).all(|(g, w)| same(g, w))
        }
        #[allow(clippy::cast_possible_truncation)]
        (GgufValue::F32(g), Value::Number(w)) => w.as_f64().is_some_and(|w| *g == w as f32),
        (GgufValue::F64(g), Value::Number(w)) => w.as_f64() == Some(*g),
        (g, Value::Number(w)) => match (g.as_i64(), w.as_i64(), g.as_u64(), w.as_u64()) {
            (Some(a), Some(b), _, _) => a == b,
            (_, _, Some(a), Some(b)) => a == b,
            _ => false,
        },
        _ => false,
    }
}

/// Every other GGUF under fixtures/ (models converted by the reference tools, tokenizer-only files) opens, and every
/// tensor in it loads to finite values of the declared size.
#[test]
fn every_fixture_gguf_loads() {
    let mut found = Vec::new();
    let mut stack = vec![fixtures()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "gguf") {
                found.push(p);
            }
        }
    }
    assert!(
        found.iter().any(|p| p.ends_with("models/llama-gguf/model.gguf")),
        "no model GGUF under fixtures; `{MAKE}`"
    );
    for path in found {
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        for name in file.tensor_names() {
            let info = file.info(&name).unwrap();
            if !info.dtype.is_readable() {
                continue;
            }
            let values = file.load_f32(&name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(values.len(), info.numel(), "{}: {name}", path.display());
            assert!(values.iter().all(|v| v.is_finite()), "{}: {name} has non-finite values", path.display());
        }
    }
}
