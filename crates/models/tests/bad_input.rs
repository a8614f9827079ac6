//! Bad input at the model level: each is a clear error naming what is wrong, never a panic.

use kvad_models::{load_model, ModelError, ModelFiles};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models").join(name)
}

/// A scratch copy of a fixture model directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn of(name: &str, tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kvad-bad-{name}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(fixture(name)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
        Scratch(dir)
    }
    fn edit_config(&self, f: impl FnOnce(&mut Value)) {
        let p = self.0.join("config.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(p, serde_json::to_string(&v).unwrap()).unwrap();
    }
    fn load(&self) -> Result<(), ModelError> {
        load_model(&ModelFiles::detect(&self.0)?).map(|_| ())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn missing_path_names_it() {
    let e = ModelFiles::detect(Path::new("/no/such/model.gguf")).unwrap_err().to_string();
    assert!(e.contains("/no/such/model.gguf"), "{e}");
}

#[test]
fn directory_without_config_is_refused() {
    let s = Scratch::of("llama", "noconfig");
    std::fs::remove_file(s.0.join("config.json")).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn unknown_architecture_is_refused_by_name() {
    let s = Scratch::of("llama", "arch");
    s.edit_config(|c| c["architectures"] = serde_json::json!(["FalconForCausalLM"]));
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("architectures") && e.contains("FalconForCausalLM"), "{e}");
}

#[test]
fn config_that_disagrees_with_tensor_shapes_names_the_tensor() {
    let s = Scratch::of("llama", "shape");
    s.edit_config(|c| c["intermediate_size"] = serde_json::json!(96));
    let e = s.load().unwrap_err();
    assert!(matches!(e, ModelError::ShapeMismatch { .. }), "{e}");
    assert!(e.to_string().contains("mlp.gate_proj.weight"), "{e}");
}

#[test]
fn truncated_safetensors_is_an_error() {
    let s = Scratch::of("llama", "trunc");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    for cut in [0, 4, 8, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("model.safetensors"), "cut at {cut}: {e}");
    }
}

#[test]
fn corrupted_safetensors_header_is_an_error() {
    let s = Scratch::of("llama", "corrupt");
    let p = s.0.join("model.safetensors");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[8..24].copy_from_slice(b"{{{{{{{{{{{{{{{{");
    std::fs::write(&p, &bytes).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn quantised_safetensors_checkpoint_is_refused() {
    let s = Scratch::of("llama", "quant");
    s.edit_config(|c| c["quantization_config"] = serde_json::json!({"quant_method": "awq", "bits": 4}));
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("quantization_config") && e.contains("awq"), "{e}");
}

#[test]
fn truncated_and_corrupted_gguf_are_errors() {
    let src = fixture("llama-gguf/model.gguf");
    let bytes = std::fs::read(&src).unwrap();
    let p = std::env::temp_dir().join(format!("kvad-bad-gguf-{}.gguf", std::process::id()));
    for cut in [0, 3, 4, 8, 20, 64, 1000, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = load_model(&ModelFiles::Gguf(p.clone())).err().unwrap_or_else(|| panic!("cut at {cut} loaded"));
        assert!(!e.to_string().is_empty());
    }
    let mut bad = bytes.clone();
    bad[0..4].copy_from_slice(b"GGUX");
    std::fs::write(&p, &bad).unwrap();
    assert!(load_model(&ModelFiles::Gguf(p.clone())).is_err());
    let _ = std::fs::remove_file(&p);
}

#[test]
fn unused_tensor_is_refused_by_name() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("llama", "extra");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let extra = vec![0u8; 16];
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.push((
        "model.layers.0.mlp.extra_proj.weight".into(),
        TensorView::new(safetensors::Dtype::F32, vec![4], &extra).unwrap(),
    ));
    let out = serialize(views, None).unwrap();
    std::fs::write(&p, out).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("model.layers.0.mlp.extra_proj.weight") && e.contains("does not use"), "{e}");
}

#[test]
fn tied_head_of_another_shape_is_refused() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("llama-tied", "head");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let head = vec![0u8; 4 * 64 * 8];
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.push(("lm_head.weight".into(), TensorView::new(safetensors::Dtype::F32, vec![8, 64], &head).unwrap()));
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("lm_head.weight") && e.contains("[8, 64]"), "{e}");
}

#[test]
fn tied_head_of_another_stored_type_is_refused() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("llama-tied", "head-type");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    // The embedding's shape, stored as bf16 beside an f32 embedding.
    let head = vec![0u8; 2 * 512 * 64];
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.push(("lm_head.weight".into(), TensorView::new(safetensors::Dtype::BF16, vec![512, 64], &head).unwrap()));
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("lm_head.weight") && e.contains("BF16") && e.contains("F32"), "{e}");
}

#[test]
fn tied_head_of_the_same_shape_and_type_runs_with_a_note() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("llama-tied", "head-same");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let head: Vec<u8> = (0..512 * 64).flat_map(|i| (((i % 7) as f32 - 3.0) * 0.01).to_le_bytes()).collect();
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.push(("lm_head.weight".into(), TensorView::new(safetensors::Dtype::F32, vec![512, 64], &head).unwrap()));
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    let m = load_model(&ModelFiles::detect(&s.0).unwrap()).unwrap();
    assert!(m.notes.iter().any(|n| n.contains("shipped head")), "{:?}", m.notes);
}

#[test]
fn qwen3_next_skips_its_prediction_module_by_name_and_refuses_other_extras() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("qwen3-next", "mtp");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let w = vec![0u8; 64 * 4];
    let mut views: Vec<(String, TensorView)> = st.tensors();
    for name in ["mtp.fc.weight", "mtp.norm.weight"] {
        views.push((name.into(), TensorView::new(safetensors::Dtype::F32, vec![64], &w).unwrap()));
    }
    std::fs::write(&p, serialize(views.clone(), None).unwrap()).unwrap();
    let m = load_model(&ModelFiles::detect(&s.0).unwrap()).unwrap();
    assert!(m.notes.iter().any(|n| n.contains("multi-token-prediction") && n.contains("2 tensors")), "{:?}", m.notes);
    // Anything else the architecture does not read is still refused by name.
    views.push((
        "model.layers.0.linear_attn.extra".into(),
        TensorView::new(safetensors::Dtype::F32, vec![64], &w).unwrap(),
    ));
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("model.layers.0.linear_attn.extra") && e.contains("does not use"), "{e}");
}

#[test]
fn qwen3_5_with_a_vision_tower_is_refused_by_its_name() {
    use safetensors::tensor::{serialize, TensorView};
    let s = Scratch::of("qwen3-5", "visual");
    let p = s.0.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let w = vec![0u8; 64 * 4];
    let mut views: Vec<(String, TensorView)> = st.tensors();
    views.push((
        "model.visual.patch_embed.proj.weight".into(),
        TensorView::new(safetensors::Dtype::F32, vec![64], &w).unwrap(),
    ));
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    let e = s.load().unwrap_err().to_string();
    assert!(e.contains("model.visual.patch_embed.proj.weight") && e.contains("vision tower"), "{e}");
}
