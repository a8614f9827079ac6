//! Property tests: no byte mutation or truncation of a valid GGUF or safetensors image makes a reader panic. Every
//! outcome must be `Ok` or `Err`; when parsing succeeds, reading every tensor must also return rather than panic.

use kvad_models::weights::{GgufFile, GgufValue, GgufWriter, SafetensorsSource, WeightSource};
use proptest::prelude::*;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

fn valid_gguf() -> Vec<u8> {
    let mut w = GgufWriter::new(3);
    w.kv("general.architecture", GgufValue::String("llama".into()))
        .kv("general.alignment", GgufValue::U32(16))
        .kv("llama.context_length", GgufValue::U64(2048))
        .kv("f", GgufValue::F64(1e-6))
        .kv("b", GgufValue::Bool(false))
        .kv("nested", GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::I16(-1)]), GgufValue::Array(vec![])]))
        .kv("toks", GgufValue::Array(vec![GgufValue::String("<s>".into()), GgufValue::String("▁a".into())]))
        .tensor("f32", &[2], 0, vec![0, 0, 128, 63, 0, 0, 0, 64])
        .tensor("q8", &[32], 8, (0..34).collect())
        .tensor("q4k", &[256], 12, (0..144).map(|i| (i * 37) as u8).collect())
        .tensor("q6k", &[256], 14, (0..210).map(|i| (i * 11) as u8).collect());
    w.to_bytes().unwrap()
}

fn valid_safetensors() -> Vec<u8> {
    let a: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b = vec![0x00, 0x3c, 0x00, 0xc0];
    let c = vec![1u8, 0, 0, 0];
    let views = vec![
        ("a".to_string(), TensorView::new(Dtype::F32, vec![2], &a).unwrap()),
        ("b".to_string(), TensorView::new(Dtype::F16, vec![1, 2], &b).unwrap()),
        ("c".to_string(), TensorView::new(Dtype::I32, vec![1], &c).unwrap()),
    ];
    safetensors::serialize(views, None).unwrap()
}

/// Reads everything a parsed source offers; only returning matters.
fn exercise(source: &dyn WeightSource) {
    for name in source.tensor_names() {
        let info = source.info(&name);
        let loaded = source.load_f32(&name);
        if let (Some(info), Ok(values)) = (info, &loaded) {
            assert_eq!(values.len(), info.numel(), "{name}");
        }
        let _ = source.raw_bytes(&name);
    }
}

/// A mutation: overwrite one byte, or overwrite 8 bytes with an interesting u64 (counts, lengths, offsets).
#[derive(Clone, Debug)]
enum Mutation {
    Byte(usize, u8),
    Word(usize, u64),
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(5),
        Just(32),
        Just(u64::MAX),
        Just(1 << 60),
        Just(u64::from(u32::MAX)),
        any::<u64>()
    ];
    let m = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        (any::<usize>(), word).prop_map(|(i, w)| Mutation::Word(i, w)),
    ];
    proptest::collection::vec(m, 1..4)
}

fn apply(mut bytes: Vec<u8>, ms: &[Mutation], cut: Option<usize>) -> Vec<u8> {
    let len = bytes.len();
    for m in ms {
        match *m {
            Mutation::Byte(i, b) => bytes[i % len] = b,
            Mutation::Word(i, w) => {
                let at = i % (len - 8);
                bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
    if let Some(c) = cut {
        bytes.truncate(c % (len + 1));
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn gguf_mutations_never_panic(ms in mutations(), cut in proptest::option::of(any::<usize>())) {
        let bytes = apply(valid_gguf(), &ms, cut);
        if let Ok(f) = GgufFile::parse(&bytes) {
            exercise(&f);
        }
    }

    #[test]
    fn safetensors_mutations_never_panic(ms in mutations(), cut in proptest::option::of(any::<usize>())) {
        let bytes = apply(valid_safetensors(), &ms, cut);
        if let Ok(s) = SafetensorsSource::parse(&bytes) {
            exercise(&s);
        }
    }

    /// Mutations confined to the header (where they matter most) of the GGUF image.
    #[test]
    fn gguf_header_mutations_never_panic(ms in mutations()) {
        let base = valid_gguf();
        let header_len = GgufFile::parse(&base).unwrap().data_offset as usize;
        let mut bytes = base.clone();
        for m in &ms {
            match *m {
                Mutation::Byte(i, b) => bytes[i % header_len] = b,
                Mutation::Word(i, w) => {
                    let at = i % (header_len - 8);
                    bytes[at..at + 8].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        if let Ok(f) = GgufFile::parse(&bytes) {
            exercise(&f);
        }
    }
}

#[test]
fn the_bases_are_valid() {
    let f = GgufFile::parse(&valid_gguf()).unwrap();
    assert_eq!(f.load_f32("f32").unwrap(), vec![1.0, 2.0]);
    assert_eq!(f.load_f32("q4k").unwrap().len(), 256);
    let s = SafetensorsSource::parse(&valid_safetensors()).unwrap();
    assert_eq!(s.load_f32("b").unwrap(), vec![1.0, -2.0]);
}
