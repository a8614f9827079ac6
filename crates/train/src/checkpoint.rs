//! Saving a trained model in Hugging Face layout: what transformers' `from_pretrained` and kvad both load.
//!
//! Weights go to `model.safetensors` in f32 (the master weights as trained; a tied head is stored once, under the
//! embedding's name, as transformers writes it) with `{"format": "pt"}` metadata; config.json is the source's with
//! its dtype set to float32; the tokenizer, its config and the chat template are copied from the source directory.

use crate::net::Net;
use crate::params::Params;
use crate::TrainError;
use safetensors::tensor::{serialize_to_file, TensorView};
use safetensors::Dtype;
use std::collections::HashMap;
use std::path::Path;

/// Files copied from the source model next to the weights, when it has them.
const COPIED: [&str; 8] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
];

/// Writes `net`'s weights and the source's config and tokenizer files into `out` (created if missing). A network
/// with a LoRA adapter is refused: save the adapter (`save_adapter`) or merge it first (`Net::merge_lora`).
pub fn save(net: &Net, source: &Path, out: &Path) -> Result<(), TrainError> {
    if net.lora().is_some() {
        return Err(TrainError::refused("adapter", "on", "save the adapter, or merge it before saving the model"));
    }
    std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
    write_safetensors(&net.params, &out.join("model.safetensors"))?;
    let cfg_path = source.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| TrainError::io(&cfg_path, e))?;
    let mut cfg: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| TrainError::Format { path: cfg_path.display().to_string(), msg: e.to_string() })?;
    if let Some(obj) = cfg.as_object_mut() {
        // transformers 5 writes `dtype`, 4.x `torch_dtype`; keep whichever the source used, else the new name.
        let key = if obj.contains_key("torch_dtype") { "torch_dtype" } else { "dtype" };
        obj.insert(key.into(), "float32".into());
    }
    let pretty = serde_json::to_string_pretty(&cfg).unwrap_or_default();
    let dst = out.join("config.json");
    std::fs::write(&dst, pretty + "\n").map_err(|e| TrainError::io(&dst, e))?;
    for name in COPIED {
        let src = source.join(name);
        if src.is_file() && source != out {
            std::fs::copy(&src, out.join(name)).map_err(|e| TrainError::io(&src, e))?;
        }
    }
    Ok(())
}

/// Writes `params` as one f32 safetensors file with `{"format": "pt"}` metadata, through a temporary name and a
/// rename, so an interrupted save leaves the previous file whole.
pub fn write_safetensors(params: &Params, dst: &Path) -> Result<(), TrainError> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = params
        .iter()
        .map(|p| (p.name.clone(), p.shape.clone(), p.data.iter().flat_map(|v| v.to_le_bytes()).collect()))
        .collect();
    let mut views = Vec::with_capacity(bytes.len());
    for (name, shape, data) in &bytes {
        let view = TensorView::new(Dtype::F32, shape.clone(), data)
            .map_err(|e| TrainError::Format { path: name.clone(), msg: e.to_string() })?;
        views.push((name.clone(), view));
    }
    let mut tmp = dst.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    serialize_to_file(views, Some(meta), &tmp)
        .map_err(|e| TrainError::Format { path: tmp.display().to_string(), msg: e.to_string() })?;
    std::fs::rename(&tmp, dst).map_err(|e| TrainError::io(dst, e))
}
