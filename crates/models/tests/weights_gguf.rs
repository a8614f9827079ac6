//! GGUF reader tests over hand-built images: every metadata type, both versions, alignment, every block type, and
//! every refusal. Byte offsets below follow from the layout (magic 4, version 4, tensor count 8, kv count 8 = 24).

use kvad_models::weights::{GgufFile, GgufValue, GgufWriter, StoredType, TensorInfo, WeightError, WeightSource};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect()
}

/// A small valid file: a few metadata pairs and two tensors, the last one ending the file.
fn small_file(version: u32) -> Vec<u8> {
    let mut w = GgufWriter::new(version);
    w.kv("general.architecture", GgufValue::String("llama".into()))
        .kv("llama.block_count", GgufValue::U32(2))
        .kv(
            "tokenizer.ggml.tokens",
            GgufValue::Array(vec![GgufValue::String("a".into()), GgufValue::String("b".into())]),
        )
        .kv("tokenizer.ggml.scores", GgufValue::Array(vec![GgufValue::F32(0.5), GgufValue::F32(-1.0)]))
        .tensor("a", &[3, 2], 0, f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .tensor("b", &[2], 1, f16_bytes(&[0.5, -0.25]));
    w.to_bytes().unwrap()
}

fn parse_err(bytes: &[u8]) -> WeightError {
    match GgufFile::parse(bytes) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => e,
    }
}

fn patch(bytes: &mut [u8], at: usize, new: &[u8]) {
    bytes[at..at + new.len()].copy_from_slice(new);
}

#[test]
fn reads_v2_and_v3() {
    for version in [2, 3] {
        let f = GgufFile::parse(&small_file(version)).unwrap();
        assert_eq!(f.version, version);
        assert_eq!(f.get("general.architecture").and_then(GgufValue::as_str), Some("llama"));
        assert_eq!(f.get("llama.block_count").and_then(GgufValue::as_u64), Some(2));
        assert_eq!(
            f.get("tokenizer.ggml.tokens").and_then(GgufValue::as_string_array),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(f.get("tokenizer.ggml.scores").and_then(GgufValue::as_f32_array), Some(vec![0.5, -1.0]));
        assert_eq!(f.tensor_names(), vec!["a", "b"]);
        // ne = [3, 2] is 2 rows of 3: PyTorch shape [2, 3].
        assert_eq!(f.info("a"), Some(TensorInfo { name: "a".into(), dtype: StoredType::F32, shape: vec![2, 3] }));
        assert_eq!(f.load_f32("a").unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(f.load_f32("b").unwrap(), vec![0.5, -0.25]);
        assert_eq!(f.raw_bytes("b").unwrap().len(), 4);
        assert_eq!(f.data_offset % 32, 0);
        assert!(matches!(f.load_f32("c"), Err(WeightError::MissingTensor { .. })));
    }
}

#[test]
fn custom_alignment_is_used_for_data_and_offsets() {
    for alignment in [1u32, 8, 64, 4096] {
        let mut w = GgufWriter::new(3);
        w.kv("general.alignment", GgufValue::U32(alignment)).tensor("x", &[1], 0, f32_bytes(&[7.0])).tensor(
            "y",
            &[3],
            0,
            f32_bytes(&[1.0, 2.0, 3.0]),
        );
        let f = GgufFile::parse(&w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.alignment, u64::from(alignment));
        assert_eq!(f.data_offset % u64::from(alignment), 0);
        assert_eq!(f.tensor("y").unwrap().offset % u64::from(alignment), 0);
        assert_eq!(f.load_f32("y").unwrap(), vec![1.0, 2.0, 3.0]);
    }
}

#[test]
fn bad_alignment_is_refused() {
    // Key "general.alignment" (17 bytes) at 32, type at 49, value at 53.
    for a in [0u32, 24, 3] {
        let mut bytes = GgufWriter::new(3).kv("general.alignment", GgufValue::U32(32)).to_bytes().unwrap();
        patch(&mut bytes, 53, &a.to_le_bytes());
        let msg = parse_err(&bytes).to_string();
        assert!(msg.contains("general.alignment"), "{a}: {msg}");
    }
    // A string where an integer belongs (written under another key, then renamed, since the writer lays out data
    // with the alignment and so refuses it).
    let mut bytes = GgufWriter::new(3).kv("general.alignmenX", GgufValue::String("32".into())).to_bytes().unwrap();
    patch(&mut bytes, 48, b"t");
    let msg = parse_err(&bytes).to_string();
    assert!(msg.contains("general.alignment"), "{msg}");
}

#[test]
fn every_truncation_is_an_error() {
    for version in [2, 3] {
        let bytes = small_file(version);
        for n in 0..bytes.len() {
            assert!(
                GgufFile::parse(&bytes[..n]).is_err(),
                "v{version} truncated to {n} of {} bytes parsed",
                bytes.len()
            );
        }
    }
}

#[test]
fn bad_magic() {
    let mut bytes = small_file(3);
    patch(&mut bytes, 0, b"GGML");
    let e = parse_err(&bytes);
    assert!(matches!(e, WeightError::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("<memory>"), "{e}");
}

#[test]
fn version_1_and_big_endian_are_refused_by_name() {
    let mut bytes = small_file(3);
    patch(&mut bytes, 4, &1u32.to_le_bytes());
    let e = parse_err(&bytes);
    assert!(matches!(e, WeightError::UnsupportedVersion { version: 1, .. }), "{e}");
    assert!(e.to_string().contains("version 1"), "{e}");

    patch(&mut bytes, 4, &3u32.to_be_bytes());
    let msg = parse_err(&bytes).to_string();
    assert!(msg.contains("big-endian"), "{msg}");

    patch(&mut bytes, 4, &4u32.to_le_bytes());
    assert!(matches!(parse_err(&bytes), WeightError::UnsupportedVersion { version: 4, .. }));
}

#[test]
fn absurd_counts_and_lengths_fail_without_allocating() {
    // One string pair "k" = "abc": key length at 24, key at 32, type at 33, string length at 37.
    let mut w = GgufWriter::new(3);
    w.kv("k", GgufValue::String("abc".into()));
    let mut bytes = w.to_bytes().unwrap();
    patch(&mut bytes, 37, &(1u64 << 60).to_le_bytes());
    assert!(matches!(parse_err(&bytes), WeightError::Truncated { .. }));
    let mut bytes2 = w.to_bytes().unwrap();
    patch(&mut bytes2, 24, &u64::MAX.to_le_bytes());
    assert!(matches!(parse_err(&bytes2), WeightError::Truncated { .. }));

    // An array "a" of u8: element type at 37, count at 41.
    let mut w = GgufWriter::new(3);
    w.kv("a", GgufValue::Array(vec![GgufValue::U8(1)]));
    let mut bytes = w.to_bytes().unwrap();
    for count in [1u64 << 60, u64::MAX, 1 << 20] {
        patch(&mut bytes, 41, &count.to_le_bytes());
        let msg = parse_err(&bytes).to_string();
        assert!(msg.contains("\"a\""), "{msg}");
    }
    // Tensor and metadata counts far beyond the file.
    let mut bytes = small_file(3);
    patch(&mut bytes, 8, &(1u64 << 62).to_le_bytes());
    assert!(matches!(parse_err(&bytes), WeightError::Truncated { .. }));
    let mut bytes = small_file(3);
    patch(&mut bytes, 16, &u64::MAX.to_le_bytes());
    assert!(matches!(parse_err(&bytes), WeightError::Truncated { .. }));
}

#[test]
fn deeply_nested_arrays_are_refused() {
    let mut v = GgufValue::Array(vec![GgufValue::U8(1)]);
    for _ in 0..20 {
        v = GgufValue::Array(vec![v]);
    }
    let mut w = GgufWriter::new(3);
    w.kv("deep", v);
    let msg = parse_err(&w.to_bytes().unwrap()).to_string();
    assert!(msg.contains("deep") && msg.contains("nests"), "{msg}");
}

#[test]
fn unknown_value_type_and_bad_bool() {
    let mut w = GgufWriter::new(3);
    w.kv("k", GgufValue::Bool(true));
    let mut bytes = w.to_bytes().unwrap();
    patch(&mut bytes, 37, &[2]);
    let msg = parse_err(&bytes).to_string();
    assert!(msg.contains("\"k\"") && msg.contains('2'), "{msg}");
    patch(&mut bytes, 33, &13u32.to_le_bytes());
    let msg = parse_err(&bytes).to_string();
    assert!(msg.contains("unknown value type 13"), "{msg}");
}

/// One tensor "t" with ne=[8] F32 and no metadata: name length 24, name 32, n_dims 33, ne 37, type 45, offset 49.
fn one_tensor() -> Vec<u8> {
    let mut w = GgufWriter::new(3);
    w.tensor("t", &[8], 0, f32_bytes(&[0.0; 8]));
    w.to_bytes().unwrap()
}

#[test]
fn tensor_header_refusals() {
    let mut b = one_tensor();
    patch(&mut b, 33, &5u32.to_le_bytes());
    let msg = parse_err(&b).to_string();
    assert!(msg.contains("\"t\"") && msg.contains("5 dimensions"), "{msg}");

    let mut b = one_tensor();
    patch(&mut b, 49, &1024u64.to_le_bytes());
    let e = parse_err(&b);
    assert!(matches!(e, WeightError::Truncated { .. }) && e.to_string().contains("\"t\""), "{e}");

    let mut b = one_tensor();
    patch(&mut b, 49, &3u64.to_le_bytes());
    let msg = parse_err(&b).to_string();
    assert!(msg.contains("offset 3"), "{msg}");

    let mut b = one_tensor();
    patch(&mut b, 49, &(u64::MAX - 31).to_le_bytes());
    assert!(matches!(parse_err(&b), WeightError::Truncated { .. }));

    let mut b = one_tensor();
    patch(&mut b, 37, &(1u64 << 62).to_le_bytes());
    assert!(GgufFile::parse(&b).is_err());

    // Q8_0 needs ne[0] to be a multiple of 32.
    let mut b = one_tensor();
    patch(&mut b, 45, &8u32.to_le_bytes());
    assert!(matches!(parse_err(&b), WeightError::ShapeMismatch { .. }));

    let mut w = GgufWriter::new(3);
    w.tensor("t", &[1], 0, f32_bytes(&[1.0])).tensor("t", &[1], 0, f32_bytes(&[1.0]));
    assert!(matches!(parse_err(&w.to_bytes().unwrap()), WeightError::DuplicateTensor { .. }));
}

#[test]
fn unreadable_types_parse_but_do_not_load() {
    // Q5_K (13) has a known size: parses, raw bytes available, load refused as quantised.
    let mut w = GgufWriter::new(3);
    w.tensor("q5", &[256], 13, vec![0; 176]).tensor("odd", &[4], 1000, vec![]);
    let f = GgufFile::parse(&w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.info("q5").unwrap().dtype, StoredType::Other("Q5_K".into()));
    assert_eq!(f.raw_bytes("q5").unwrap().len(), 176);
    let msg = f.load_f32("q5").unwrap_err().to_string();
    assert!(msg.contains("q5") && msg.contains("Q5_K") && msg.contains("quantised"), "{msg}");
    // An id ggml never assigned: named, but neither sized nor loaded.
    assert_eq!(f.info("odd").unwrap().dtype, StoredType::Other("ggml_type_1000".into()));
    assert!(matches!(f.raw_bytes("odd"), Err(WeightError::UnsupportedType { .. })));
    assert!(matches!(f.load_f32("odd"), Err(WeightError::UnsupportedType { .. })));
}

#[test]
fn block_types_load_through_the_file() {
    let mut q8 = f16_bytes(&[0.5]);
    q8.extend((0..32).map(|i| i as u8));
    let mut bf16 = Vec::new();
    for v in [1.0f32, -2.0] {
        bf16.extend(half::bf16::from_f32(v).to_le_bytes());
    }
    let mut w = GgufWriter::new(3);
    // Two rows of one Q8_0 block each: ne = [32, 2] so shape [2, 32].
    let mut two_rows = q8.clone();
    two_rows.extend(&q8);
    w.tensor("q8", &[32, 2], 8, two_rows).tensor("bf", &[2], 30, bf16);
    let f = GgufFile::parse(&w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.info("q8").unwrap().shape, vec![2, 32]);
    let y = f.load_f32("q8").unwrap();
    assert_eq!(y.len(), 64);
    assert_eq!((y[31], y[63]), (15.5, 15.5));
    assert_eq!(f.load_f32("bf").unwrap(), vec![1.0, -2.0]);
}

#[test]
fn open_from_disk_and_missing_file() {
    let path = std::env::temp_dir().join(format!("kvad-weights-gguf-{}.gguf", std::process::id()));
    std::fs::write(&path, small_file(3)).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.load_f32("a").unwrap().len(), 6);
    let boxed = kvad_models::weights::open(&path).unwrap();
    assert_eq!(boxed.tensor_names().len(), 2);
    std::fs::remove_file(&path).unwrap();
    let e = GgufFile::open(&path).unwrap_err();
    assert!(matches!(e, WeightError::NotFound { .. }) && e.to_string().contains("kvad-weights-gguf"), "{e}");
}
