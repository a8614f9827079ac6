//! The typed config from GGUF metadata (`general.architecture` and its `<arch>.*` keys).

use super::{ArchKind, ModelConfig, RopeScaling};
use crate::error::ModelError;
use crate::weights::{GgufFile, WeightSource};

/// GGUF architectures that map onto the llama family, with whether q/k carry a bias (qwen2) or a norm (qwen3).
const LLAMA_LIKE: &[(&str, bool, bool)] = &[("llama", false, false), ("qwen2", true, false), ("qwen3", false, true)];

/// Reads and checks the model config of a GGUF file.
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig, ModelError> {
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            ModelError::refused("general.architecture", "missing", "a GGUF model must name its architecture")
        })?
        .to_string();
    let Some(&(_, qkv_bias, qk_norm)) = LLAMA_LIKE.iter().find(|(a, _, _)| *a == arch) else {
        return Err(ModelError::refused(
            "general.architecture",
            &arch,
            "GGUF files of llama, qwen2 and qwen3 are read",
        ));
    };
    let key = |k: &str| format!("{arch}.{k}");
    let uint = |k: &str| -> Result<Option<usize>, ModelError> {
        match g.get(&key(k)) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| ModelError::refused(key(k), format!("{v:?}"), "expected an unsigned integer")),
        }
    };
    let need = |k: &str| -> Result<usize, ModelError> {
        uint(k)?.ok_or_else(|| ModelError::refused(key(k), "missing", "the GGUF metadata must give it"))
    };
    let float = |k: &str| -> Option<f64> { g.get(&key(k)).and_then(|v| v.as_f64()) };
    let hidden = need("embedding_length")?;
    let n_heads = need("attention.head_count")?;
    if n_heads == 0 {
        return Err(ModelError::refused(key("attention.head_count"), 0, "must be positive"));
    }
    let n_kv_heads = uint("attention.head_count_kv")?.unwrap_or(n_heads);
    let head_dim = uint("attention.key_length")?.unwrap_or(hidden / n_heads);
    if let Some(rd) = uint("rope.dimension_count")? {
        if rd != head_dim {
            return Err(ModelError::refused(
                key("rope.dimension_count"),
                rd,
                format!("partial RoPE is not supported (head width {head_dim})"),
            ));
        }
    }
    if let Some(t) = g.get(&key("rope.scaling.type")).and_then(|v| v.as_str()) {
        if t != "none" {
            return Err(ModelError::refused(
                key("rope.scaling.type"),
                t,
                "only Llama 3's rope scaling (rope_freqs.weight) is supported",
            ));
        }
    }
    let rope_scaling = match g.info("rope_freqs.weight") {
        Some(_) => Some(RopeScaling::Divisors(g.load_f32("rope_freqs.weight")?)),
        None => None,
    };
    let embd =
        g.info("token_embd.weight").ok_or_else(|| ModelError::MissingTensor { name: "token_embd.weight".into() })?;
    let vocab_size = match uint("vocab_size")? {
        Some(v) => v,
        None => embd.shape.first().copied().unwrap_or(0),
    };
    let id = |k: &str| g.get(k).and_then(|v| v.as_u64()).map(|v| v as u32);
    let mut eos: Vec<u32> =
        ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"].iter().filter_map(|k| id(k)).collect();
    eos.dedup();
    let cfg = ModelConfig {
        arch: ArchKind::Llama,
        arch_name: format!("gguf:{arch}"),
        vocab_size,
        hidden,
        n_layers: need("block_count")?,
        n_heads,
        n_kv_heads,
        head_dim,
        intermediate: need("feed_forward_length")?,
        norm_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-5) as f32,
        rope_theta: float("rope.freq_base").unwrap_or(10000.0),
        rope_scaling,
        max_position: uint("context_length")?.unwrap_or(4096),
        sliding_window: uint("attention.sliding_window")?,
        qkv_bias,
        qk_norm,
        tie_embeddings: g.info("output.weight").is_none(),
        bos_token_id: id("tokenizer.ggml.bos_token_id"),
        eos_token_ids: eos,
    };
    if let Some(RopeScaling::Divisors(d)) = &cfg.rope_scaling {
        if d.len() != head_dim / 2 {
            return Err(ModelError::refused(
                "rope_freqs.weight",
                format!("{} values", d.len()),
                format!("expected head_dim/2 = {}", head_dim / 2),
            ));
        }
    }
    cfg.check_dims()?;
    Ok(cfg)
}
