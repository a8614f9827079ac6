//! From files to a model: find the format, read the config, check it, read and check every tensor.
//!
//! GGUF is a loader, not a pipeline: its tensor names are mapped to the HF names and llama's q/k rows are
//! un-permuted (llama.cpp's converter interleaves them for its RoPE), so both sources run the same architecture
//! code with the same rotate-half RoPE.

use crate::arch::{gpt2::Gpt2, llama::Llama};
use crate::config::{ArchKind, ModelConfig};
use crate::error::ModelError;
use crate::layers::Linear;
use crate::weights::{GgufFile, SafetensorsSource, WeightSource};
use crate::{CausalLm, SeqInput};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where a model's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    /// A directory in the HF layout: config.json, tokenizer files, *.safetensors.
    HfDir(PathBuf),
    /// One GGUF file holding config, tokenizer and weights.
    Gguf(PathBuf),
}

impl ModelFiles {
    /// Classifies a path: a `.gguf` file, or a directory with config.json.
    pub fn detect(path: &Path) -> Result<Self, ModelError> {
        let meta =
            std::fs::metadata(path).map_err(|e| ModelError::Io { path: path.display().to_string(), source: e })?;
        if meta.is_dir() {
            if !path.join("config.json").is_file() {
                return Err(ModelError::refused(
                    "config.json",
                    path.join("config.json").display(),
                    "a model directory needs a config.json",
                ));
            }
            Ok(ModelFiles::HfDir(path.to_path_buf()))
        } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            Ok(ModelFiles::Gguf(path.to_path_buf()))
        } else {
            Err(ModelError::refused(
                "model path",
                path.display(),
                "expected a directory in HF layout or a .gguf file (.bin and other formats are not read)",
            ))
        }
    }
}

/// A loaded model with what the loader wants the user to know.
pub struct LoadedModel {
    /// The model.
    pub model: Box<dyn CausalLm>,
    /// Lines to print at load (a scaled RoPE table, a shipped head beside a tied embedding, files not read).
    pub notes: Vec<String>,
    /// The GGUF file, kept open for its tokenizer metadata.
    pub gguf: Option<GgufFile>,
}

/// Loads and checks a model from its files.
pub fn load_model(files: &ModelFiles) -> Result<LoadedModel, ModelError> {
    match files {
        ModelFiles::HfDir(dir) => {
            let path = dir.join("config.json");
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ModelError::Io { path: path.display().to_string(), source: e })?;
            let json: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| ModelError::Json { path: path.display().to_string(), msg: e.to_string() })?;
            let cfg = ModelConfig::from_hf_json(&json)?;
            let src = SafetensorsSource::open_dir(dir)?;
            let mut notes = Vec::new();
            if !src.files_not_read().is_empty() {
                let names: Vec<String> = src.files_not_read().iter().map(|p| p.display().to_string()).collect();
                notes.push(format!("reads the weights as transformers loads them; not read: {}", names.join(", ")));
            }
            let model = build(cfg, &src, None, &mut notes)?;
            Ok(LoadedModel { model, notes, gguf: None })
        }
        ModelFiles::Gguf(path) => {
            let gguf = GgufFile::open(path)?;
            let cfg = crate::config::gguf::config_from_gguf(&gguf)?;
            let mut notes = Vec::new();
            let permute = (gguf.get("general.architecture").and_then(|v| v.as_str()) == Some("llama"))
                .then_some((cfg.n_heads, cfg.n_kv_heads));
            let model = build(cfg, &gguf, Some(GgufNames { permute }), &mut notes)?;
            Ok(LoadedModel { model, notes, gguf: Some(gguf) })
        }
    }
}

fn build(
    cfg: ModelConfig,
    src: &dyn WeightSource,
    gguf: Option<GgufNames>,
    notes: &mut Vec<String>,
) -> Result<Box<dyn CausalLm>, ModelError> {
    if cfg.rope_scaling.is_some() {
        notes.push("applies Llama 3's RoPE scaling to the frequency table".into());
    }
    let mut t = Tensors { src, gguf, used: BTreeSet::new(), notes: Vec::new() };
    if t.gguf.is_some() && t.has("rope_freqs.weight") {
        t.used.insert("rope_freqs.weight".into());
    }
    let model: Box<dyn CausalLm> = match cfg.arch {
        ArchKind::Llama => Box::new(Llama::load(cfg, &mut t)?),
        ArchKind::Gpt2 => Box::new(Gpt2::load(cfg, &mut t)?),
    };
    notes.append(&mut t.notes);
    t.finish()?;
    Ok(model)
}

/// Checks a batch against the config and returns the position of every new token, in batch order.
pub(crate) fn check_batch(cfg: &ModelConfig, batch: &[SeqInput<'_>]) -> Result<Vec<usize>, ModelError> {
    let mut positions = Vec::new();
    for s in batch {
        if s.kv.layers.len() != cfg.n_layers {
            return Err(ModelError::BadInput(format!(
                "cache has {} layers, model {}",
                s.kv.layers.len(),
                cfg.n_layers
            )));
        }
        for (i, &tok) in s.tokens.iter().enumerate() {
            if tok as usize >= cfg.vocab_size {
                return Err(ModelError::BadInput(format!(
                    "token id {tok} is past the vocabulary ({})",
                    cfg.vocab_size
                )));
            }
            let pos = s.kv.len() + i;
            if pos >= cfg.max_position {
                return Err(ModelError::BadInput(format!("position {pos} is past the context ({})", cfg.max_position)));
            }
            positions.push(pos);
        }
    }
    Ok(positions)
}

/// How GGUF names and layouts map to HF's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GgufNames {
    /// `(n_heads, n_kv_heads)` when q/k rows were permuted by llama.cpp's converter.
    permute: Option<(usize, usize)>,
}

/// HF tensor name to GGUF's.
fn gguf_name(hf: &str) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let Some(rest) = hf.strip_prefix("model.layers.") else { return hf.to_string() };
    let Some((idx, tail)) = rest.split_once('.') else { return hf.to_string() };
    let map = [
        ("input_layernorm", "attn_norm"),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("post_attention_layernorm", "ffn_norm"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
    ];
    for (h, g) in map {
        if let Some(suffix) = tail.strip_prefix(h) {
            return format!("blk.{idx}.{g}{suffix}");
        }
    }
    hf.to_string()
}

/// Undoes llama.cpp's q/k permutation: GGUF row `h·d + 2j + s` holds HF row `h·d + s·d/2 + j`.
fn unpermute(w: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = w.len() / cols;
    let d = rows / heads;
    let half = d / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for j in 0..half {
            for s in 0..2 {
                let src = h * d + 2 * j + s;
                let dst = h * d + s * half + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// Reads tensors by their HF names, checks shapes, and remembers which were used so that a tensor the
/// architecture does not use is refused instead of silently ignored.
pub(crate) struct Tensors<'a> {
    src: &'a dyn WeightSource,
    gguf: Option<GgufNames>,
    used: BTreeSet<String>,
    notes: Vec<String>,
}

impl Tensors<'_> {
    fn source_name(&self, hf: &str) -> String {
        if self.gguf.is_some() {
            gguf_name(hf)
        } else {
            hf.to_string()
        }
    }

    /// Whether the checkpoint has a tensor (by HF name).
    pub(crate) fn has(&self, hf: &str) -> bool {
        self.src.info(&self.source_name(hf)).is_some()
    }

    /// Reads a required tensor of the given shape.
    pub(crate) fn get(&mut self, hf: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        self.opt(hf, shape)?.ok_or_else(|| ModelError::MissingTensor { name: self.source_name(hf) })
    }

    /// Reads an optional tensor of the given shape.
    pub(crate) fn opt(&mut self, hf: &str, shape: &[usize]) -> Result<Option<Vec<f32>>, ModelError> {
        let name = self.source_name(hf);
        let Some(info) = self.src.info(&name) else { return Ok(None) };
        // A 1-D GGUF tensor and a 2-D one agree on element order; compare shapes as stored.
        if info.shape != shape {
            return Err(ModelError::ShapeMismatch { name, expected: shape.to_vec(), got: info.shape });
        }
        let mut data = self.src.load_f32(&name)?;
        if let Some(GgufNames { permute: Some((nh, nkv)) }) = self.gguf {
            if hf.ends_with("self_attn.q_proj.weight") || hf.ends_with("self_attn.q_proj.bias") {
                data = unpermute(&data, nh, *shape.get(1).unwrap_or(&1));
            } else if hf.ends_with("self_attn.k_proj.weight") || hf.ends_with("self_attn.k_proj.bias") {
                data = unpermute(&data, nkv, *shape.get(1).unwrap_or(&1));
            }
        }
        self.used.insert(name);
        Ok(Some(data))
    }

    /// A linear layer `prefix.weight` `[out, inp]` with an optional `prefix.bias`.
    pub(crate) fn linear(&mut self, prefix: &str, out: usize, inp: usize, bias: bool) -> Result<Linear, ModelError> {
        let w = self.get(&format!("{prefix}.weight"), &[out, inp])?;
        let b = if bias { Some(self.get(&format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear::new(w, b, out, inp))
    }

    /// The output head: its own matrix unless tied. A tied config that ships a head of the embedding's shape runs
    /// with the shipped head, as transformers does (with a note); one of another shape is refused.
    pub(crate) fn head(&mut self, cfg: &ModelConfig) -> Result<Option<Linear>, ModelError> {
        let name = "lm_head.weight";
        if !cfg.tie_embeddings {
            return Ok(Some(self.linear("lm_head", cfg.vocab_size, cfg.hidden, false)?));
        }
        let Some(info) = self.src.info(&self.source_name(name)) else { return Ok(None) };
        if info.shape != [cfg.vocab_size, cfg.hidden] {
            return Err(ModelError::refused(
                name,
                format!("{:?}", info.shape),
                format!("a tied head must have the embedding's shape [{}, {}]", cfg.vocab_size, cfg.hidden),
            ));
        }
        let w = self.get(name, &[cfg.vocab_size, cfg.hidden])?;
        let emb_name = match cfg.arch {
            ArchKind::Llama => "model.embed_tokens.weight",
            ArchKind::Gpt2 if self.has("transformer.wte.weight") => "transformer.wte.weight",
            ArchKind::Gpt2 => "wte.weight",
        };
        let emb = self.src.load_f32(&self.source_name(emb_name))?;
        if emb == w {
            return Ok(None);
        }
        self.notes.push("the config ties the head to the embedding but the checkpoint ships a different lm_head.weight: running with the shipped head, as transformers does".into());
        Ok(Some(Linear::new(w, None, cfg.vocab_size, cfg.hidden)))
    }

    /// Refuses tensors the architecture did not read (buffers transformers never loads are skipped by name).
    fn finish(self) -> Result<(), ModelError> {
        let ignorable = |n: &str| {
            n.ends_with("rotary_emb.inv_freq") || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")
        };
        for name in self.src.tensor_names() {
            if !self.used.contains(&name) && !ignorable(&name) {
                return Err(ModelError::refused("tensor", &name, "the architecture does not use this tensor"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        // llama.cpp: w.reshape(heads, 2, d/2, cols).swapaxes(1, 2)
        let (heads, d, cols) = (2, 4, 3);
        let hf: Vec<f32> = (0..heads * d * cols).map(|v| v as f32).collect();
        let mut permuted = vec![0f32; hf.len()];
        for h in 0..heads {
            for s in 0..2 {
                for j in 0..d / 2 {
                    let src = h * d + s * (d / 2) + j;
                    let dst = h * d + j * 2 + s;
                    permuted[dst * cols..(dst + 1) * cols].copy_from_slice(&hf[src * cols..(src + 1) * cols]);
                }
            }
        }
        assert_eq!(unpermute(&permuted, heads, cols), hf);
    }

    #[test]
    fn gguf_names_map_every_layer_tensor() {
        assert_eq!(gguf_name("model.layers.3.self_attn.q_proj.weight"), "blk.3.attn_q.weight");
        assert_eq!(gguf_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
        assert_eq!(gguf_name("model.layers.0.self_attn.k_norm.weight"), "blk.0.attn_k_norm.weight");
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
    }
}
