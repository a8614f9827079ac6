//! GPT-2's config from an HF config.json (GPT2LMHeadModel).

use crate::config::{bool_field, f64_field, get, ids, need, usize_field, ArchKind, ModelConfig};
use crate::error::ModelError;
use serde_json::Value;

/// Reads and checks an HF config.json (the class is GPT2LMHeadModel).
pub(crate) fn from_hf(cfg: &Value, _class: &str) -> Result<ModelConfig, ModelError> {
    let c = read(cfg)?;
    c.check_dims()?;
    if c.n_heads * c.head_dim != c.hidden {
        return Err(ModelError::refused("n_head", c.n_heads, format!("must divide n_embd ({})", c.hidden)));
    }
    Ok(c)
}

fn read(cfg: &Value) -> Result<ModelConfig, ModelError> {
    let act = get(cfg, "activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
    if !matches!(act, "gelu_new" | "gelu_pytorch_tanh") {
        return Err(ModelError::refused("activation_function", act, "GPT-2 runs with the tanh GELU only"));
    }
    let hidden = need(cfg, "n_embd")?;
    let n_heads = need(cfg, "n_head")?;
    if n_heads == 0 {
        return Err(ModelError::refused("n_head", 0, "must be positive"));
    }
    if bool_field(cfg, "scale_attn_by_inverse_layer_idx") == Some(true)
        || bool_field(cfg, "reorder_and_upcast_attn") == Some(true)
    {
        return Err(ModelError::refused("scale_attn_by_inverse_layer_idx", true, "not supported"));
    }
    Ok(ModelConfig {
        arch: ArchKind::Gpt2,
        arch_name: "GPT2LMHeadModel".into(),
        vocab_size: need(cfg, "vocab_size")?,
        hidden,
        n_layers: need(cfg, "n_layer")?,
        n_heads,
        n_kv_heads: n_heads,
        head_dim: hidden / n_heads,
        intermediate: usize_field(cfg, "n_inner")?.unwrap_or(4 * hidden),
        norm_eps: f64_field(cfg, "layer_norm_epsilon")?.unwrap_or(1e-5) as f32,
        rope_theta: 0.0,
        rope_scaling: None,
        max_position: need(cfg, "n_positions")?,
        sliding_window: None,
        window_cap: None,
        qkv_bias: true,
        qk_norm: false,
        tie_embeddings: true,
        bos_token_id: ids(get(cfg, "bos_token_id")).first().copied(),
        eos_token_ids: ids(get(cfg, "eos_token_id")),
        moe: None,
        mla: None,
        delta: None,
    })
}
