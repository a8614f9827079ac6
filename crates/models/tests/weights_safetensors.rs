//! Safetensors source tests: tiny files serialised with the safetensors crate, a sharded index, refusals, and the
//! transformers-made fixtures under fixtures/models when they exist.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kvad_models::weights::{SafetensorsSource, StoredType, WeightError, WeightSource};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// A fresh scratch directory per test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kvad-weights-st-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Serialises (name, dtype, shape, bytes) tensors into a safetensors image.
fn image(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize(views, None).unwrap()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect()
}

fn bf16s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect()
}

fn float_image() -> Vec<u8> {
    image(&[
        ("w32", Dtype::F32, vec![2, 2], f32s(&[1.0, 2.0, 3.0, -4.0])),
        ("w16", Dtype::F16, vec![3], f16s(&[0.5, -1.5, 1024.0])),
        ("wbf", Dtype::BF16, vec![1, 2], bf16s(&[-0.125, 3.0])),
    ])
}

#[test]
fn reads_f32_f16_bf16() {
    let s = SafetensorsSource::parse(&float_image()).unwrap();
    assert_eq!(s.tensor_names(), vec!["w16", "w32", "wbf"]);
    let info = s.info("w32").unwrap();
    assert_eq!((info.dtype, info.shape), (StoredType::F32, vec![2, 2]));
    assert_eq!(s.info("wbf").unwrap().dtype, StoredType::BF16);
    assert_eq!(s.load_f32("w32").unwrap(), vec![1.0, 2.0, 3.0, -4.0]);
    assert_eq!(s.load_f32("w16").unwrap(), vec![0.5, -1.5, 1024.0]);
    assert_eq!(s.load_f32("wbf").unwrap(), vec![-0.125, 3.0]);
    assert_eq!(s.raw_bytes("w16").unwrap(), f16s(&[0.5, -1.5, 1024.0]).as_slice());
    assert!(matches!(s.load_f32("nope"), Err(WeightError::MissingTensor { .. })));
}

#[test]
fn integer_tensors_are_refused_as_quantised() {
    let img = image(&[
        ("model.layers.0.mlp.qweight", Dtype::I32, vec![2], vec![0; 8]),
        ("scales", Dtype::F8_E4M3, vec![4], vec![0; 4]),
    ]);
    let s = SafetensorsSource::parse(&img).unwrap();
    assert_eq!(s.info("model.layers.0.mlp.qweight").unwrap().dtype, StoredType::Other("I32".into()));
    for (name, dtype) in [("model.layers.0.mlp.qweight", "I32"), ("scales", "F8_E4M3")] {
        let e = s.load_f32(name).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, WeightError::UnsupportedType { .. }), "{msg}");
        assert!(msg.contains(name) && msg.contains(dtype) && msg.contains("quantised"), "{msg}");
    }
    // The raw bytes are still there for whoever can use them.
    assert_eq!(s.raw_bytes("scales").unwrap().len(), 4);
}

#[test]
fn corrupt_headers_are_errors() {
    let good = float_image();
    let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut cases: Vec<Vec<u8>> = vec![good[..good.len() - 1].to_vec(), good[..8 + header_len].to_vec()];
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    cases.push(huge);
    let mut not_json = good.clone();
    not_json[8] = b'[';
    cases.push(not_json);
    let mut not_utf8 = good.clone();
    not_utf8[9] = 0xff;
    cases.push(not_utf8);
    for (i, bytes) in cases.iter().enumerate() {
        let e = SafetensorsSource::parse(bytes).unwrap_err();
        assert!(e.to_string().contains("<memory>"), "case {i}: {e}");
    }
}

#[test]
fn single_file_directory_notes_other_files() {
    let dir = Scratch::new("single");
    std::fs::write(dir.0.join("model.safetensors"), float_image()).unwrap();
    std::fs::write(dir.0.join("adapter.safetensors"), image(&[("x", Dtype::F32, vec![1], f32s(&[1.0]))])).unwrap();
    let s = SafetensorsSource::open_dir(&dir.0).unwrap();
    assert_eq!(s.tensor_names().len(), 3);
    assert_eq!(s.files_not_read(), &[dir.0.join("adapter.safetensors")]);
}

fn write_index(dir: &Path, map: &[(&str, &str)]) {
    let weight_map: HashMap<&str, &str> = map.iter().copied().collect();
    let json = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), json.to_string()).unwrap();
}

#[test]
fn sharded_index() {
    let dir = Scratch::new("sharded");
    std::fs::write(dir.0.join("model-00001-of-00002.safetensors"), image(&[("a", Dtype::F32, vec![1], f32s(&[1.0]))]))
        .unwrap();
    std::fs::write(dir.0.join("model-00002-of-00002.safetensors"), image(&[("b", Dtype::F16, vec![1], f16s(&[2.0]))]))
        .unwrap();
    std::fs::write(dir.0.join("old.safetensors"), image(&[("c", Dtype::F32, vec![1], f32s(&[3.0]))])).unwrap();
    write_index(&dir.0, &[("a", "model-00001-of-00002.safetensors"), ("b", "model-00002-of-00002.safetensors")]);
    let s = SafetensorsSource::open_dir(&dir.0).unwrap();
    assert_eq!(s.tensor_names(), vec!["a", "b"]);
    assert_eq!(s.load_f32("b").unwrap(), vec![2.0]);
    assert_eq!(s.files_not_read(), &[dir.0.join("old.safetensors")]);

    // The index places "a" in the second shard, which does not hold it.
    write_index(&dir.0, &[("a", "model-00002-of-00002.safetensors"), ("b", "model-00002-of-00002.safetensors")]);
    let e = SafetensorsSource::open_dir(&dir.0).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, WeightError::MissingInShard { .. }), "{msg}");
    assert!(msg.contains("\"a\"") && msg.contains("model-00002-of-00002") && msg.contains("index.json"), "{msg}");

    // A name listed in the index whose shard file is missing.
    write_index(&dir.0, &[("a", "model-00001-of-00002.safetensors"), ("z", "gone.safetensors")]);
    let e = SafetensorsSource::open_dir(&dir.0).unwrap_err();
    assert!(e.to_string().contains("gone.safetensors"), "{e}");

    // Paths leaving the directory are refused.
    write_index(&dir.0, &[("a", "../model-00001-of-00002.safetensors")]);
    assert!(matches!(SafetensorsSource::open_dir(&dir.0), Err(WeightError::BadHeader { .. })));
    std::fs::write(dir.0.join("model.safetensors.index.json"), "{ not json").unwrap();
    assert!(matches!(SafetensorsSource::open_dir(&dir.0), Err(WeightError::BadHeader { .. })));
}

#[test]
fn all_files_when_no_index_and_duplicates_refused() {
    let dir = Scratch::new("glob");
    std::fs::write(dir.0.join("b.safetensors"), image(&[("y", Dtype::F32, vec![1], f32s(&[2.0]))])).unwrap();
    std::fs::write(dir.0.join("a.safetensors"), image(&[("x", Dtype::F32, vec![1], f32s(&[1.0]))])).unwrap();
    let s = SafetensorsSource::open_dir(&dir.0).unwrap();
    assert_eq!(s.files(), vec![dir.0.join("a.safetensors"), dir.0.join("b.safetensors")]);
    assert!(s.files_not_read().is_empty());

    std::fs::write(dir.0.join("c.safetensors"), image(&[("x", Dtype::F32, vec![1], f32s(&[9.0]))])).unwrap();
    let msg = SafetensorsSource::open_dir(&dir.0).unwrap_err().to_string();
    assert!(msg.contains("\"x\"") && msg.contains("a.safetensors") && msg.contains("c.safetensors"), "{msg}");

    let empty = Scratch::new("empty");
    assert!(matches!(SafetensorsSource::open_dir(&empty.0), Err(WeightError::NotFound { .. })));
    assert!(matches!(SafetensorsSource::open_dir(&empty.0.join("nope")), Err(WeightError::NotFound { .. })));
}

/// The fixtures directory at the workspace root.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every transformers-made fixture model: tensor names and shapes agree with its config.json.
#[test]
fn fixture_models_match_their_configs() {
    let models = fixtures().join("models");
    let dirs: Vec<PathBuf> = match std::fs::read_dir(&models) {
        Ok(rd) => {
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("model.safetensors").is_file()).collect()
        }
        Err(_) => Vec::new(),
    };
    assert!(
        !dirs.is_empty(),
        "no fixtures/models/*/model.safetensors under {}; run `bash scripts/reference/make_all.sh` to make them",
        models.display()
    );
    for dir in dirs {
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        check_against_config(&dir, &cfg);
    }
}

fn check_against_config(dir: &Path, cfg: &serde_json::Value) {
    let num =
        |keys: &[&str]| keys.iter().find_map(|k| cfg.get(*k).and_then(serde_json::Value::as_u64)).map(|v| v as usize);
    let vocab = num(&["vocab_size"]).expect("vocab_size");
    let hidden = num(&["hidden_size", "n_embd"]).expect("hidden size");
    let layers = num(&["num_hidden_layers", "n_layer"]).expect("layer count");
    let s = SafetensorsSource::open_dir(dir).unwrap();
    let names = s.tensor_names();
    // The token embedding is the one [vocab, hidden] tensor whose name says "emb" or "wte".
    let embed = names
        .iter()
        .find(|n| n.contains("embed_tokens") || n.contains("wte"))
        .unwrap_or_else(|| panic!("{}: no token embedding among {names:?}", dir.display()));
    assert_eq!(s.info(embed).unwrap().shape, vec![vocab, hidden], "{}: {embed}", dir.display());
    // Layer indices present are exactly 0..layers.
    let mut idx: Vec<usize> = names
        .iter()
        .filter_map(|n| {
            let rest = n.split_once("layers.").or_else(|| n.split_once(".h."))?.1;
            rest.split('.').next()?.parse().ok()
        })
        .collect();
    idx.sort_unstable();
    idx.dedup();
    // DeepSeek-V3 may publish its multi-token-prediction layers after the last one (the config names them whether
    // or not the checkpoint holds them).
    let extra = num(&["num_nextn_predict_layers"]).unwrap_or(0);
    let (plain, with_extra): (Vec<usize>, Vec<usize>) = ((0..layers).collect(), (0..layers + extra).collect());
    assert!(idx == plain || idx == with_extra, "{}: layer indices {idx:?}", dir.display());
    for n in &names {
        let info = s.info(n).unwrap();
        assert!(info.dtype.is_readable(), "{}: {n} is {}", dir.display(), info.dtype);
        let values = s.load_f32(n).unwrap();
        assert_eq!(values.len(), info.numel(), "{}: {n}", dir.display());
        assert!(values.iter().all(|v| v.is_finite()), "{}: {n} has non-finite values", dir.display());
        // The residual-stream norms have the hidden size (q_norm/k_norm, where present, have the head size).
        let residual_norms =
            ["input_layernorm.weight", "post_attention_layernorm.weight", "ln_1.weight", "ln_2.weight"];
        if residual_norms.iter().any(|s| n.ends_with(s)) || n == "model.norm.weight" || n.ends_with("ln_f.weight") {
            assert_eq!(info.shape.last(), Some(&hidden), "{}: {n}", dir.display());
        }
    }
}
